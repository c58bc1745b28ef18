/* cmd_eval.c — `moq eval DIR --text FILE [--ref REF_DIR]`: moq's accuracy report. Perplexity of the
 * model over the text (windows of --ctx tokens, each scored from its second token on); with --ref
 * (for example the unquantized checkpoint) both models run the same windows and, per scored token,
 * KL(P_ref || P_model) = sum_i p_ref(i) (log p_ref(i) - log p_model(i)) in nats and whether their
 * top-1 ids agree. Log-softmax in double. Tested by tests/e2e/model_cli.sh; results in
 * docs/ACCURACY.md.
 */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cmd_eval_help(FILE *out) {
    fprintf(out,
            "usage: moq eval DIR --text FILE [--ctx N] [--ref REF_DIR] [--tokenizer PATH] [--threads N] [--json]\n"
            "                [--kv-scales-default S] [--compat moq|vllm|sglang] [--device cpu|cuda|auto]\n"
            "                [--nvfp4-as nvfp4|fp8|fp8-channel] [--tp G [--ep] [--tp-backend cpu|nccl]]\n\n"
            "Perplexity of DIR's model over FILE's text (tokenized with DIR's tokenizer.json, or PATH), in\n"
            "windows of N tokens (default 256). With --ref, the reference model runs the same windows and the\n"
            "report adds the mean and maximum per-token KL divergence KL(P_ref || P_model) in nats, and the\n"
            "top-1 agreement (share of positions where both models' most likely next token is the same).\n"
            "--device runs DIR's model there; the reference always runs on the CPU (--device cuda --ref DIR:\n"
            "the GPU forward against the CPU one).\n"
            "--nvfp4-as fp8|fp8-channel re-quantizes DIR's NVFP4 linears to FP8 at load (see `moq run --help`); REF_DIR\n"
            "is always opened as stored, so DIR against itself measures what the re-quantization costs.\n"
            "--tp G splits DIR's model over G ranks (`moq run --help`); REF_DIR is always opened whole, so DIR\n"
            "against itself measures what the split changes.\n");
}

/* log-softmax of x [n] into lp (double) */
static void log_softmax(const float *x, int64_t n, double *lp) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, (double)x[i]);
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    /* s >= 1 for n >= 1: the maximum element adds exp(0) */
    // cppcheck-suppress invalidFunctionArg
    const double ls = mx + log(s);
    for (int64_t i = 0; i < n; i++) lp[i] = (double)x[i] - ls;
}

static int64_t argmax_f(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int cmd_eval(int argc, char **argv) {
    static const struct option lo[] = {{"text", 1, 0, 'x'}, {"ref", 1, 0, 'r'}, {"tokenizer", 1, 0, 'z'}, {"json", 0, 0, 'j'},
                                       {"threads", 1, 0, 'T'}, {"ctx", 1, 0, 'C'}, {"kv-scales-default", 1, 0, 'K'},
                                       {"compat", 1, 0, 'P'}, {"kv-cache", 1, 0, 'V'}, {"device", 1, 0, 'G'}, {"nvfp4-as", 1, 0, CLI_OPT_NVFP4_AS}, CLI_TP_OPTIONS,
                                       {0, 0, 0, 0}};
    const char *file = NULL, *ref_dir = NULL, *tok_path = NULL;
    bool json = false;
    moq_model_opts mo = moq_model_opts_default();
    mo.ctx = 256;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'x': file = optarg; break;
        case 'r': ref_dir = optarg; break;
        case 'z': tok_path = optarg; break;
        case 'j': json = true; break;
        default: {
            int rc = cli_parse_model_opt(ch, optarg, &mo, "eval");
            if (rc) return rc;
        }
        }
    }
    if (optind != argc - 1 || !file) return cli_usage_error("eval", "expected DIR and --text FILE");
    const char *dir = argv[optind];
    moq_error err;
    moq_tokenizer *tok = NULL;
    moq_model *m = NULL, *r = NULL;
    float *lm = NULL, *lr = NULL;
    double *pm = NULL, *pr = NULL;
    int32_t *ids = NULL;
    int rc = 0;
    size_t len = 0, n = 0;
    char *text = cli_read_file(file, &len);
    if (!text) return cli_usage_error("eval", "cannot read %s", file);
    if (moq_tokenizer_open(&tok, tok_path ? tok_path : dir, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    ids = malloc((len + 8) * sizeof *ids);
    if (!ids) { rc = MOQ_ERR_NOMEM; goto done; }
    if (moq_tokenizer_encode(tok, text, len, MOQ_ENCODE_ADD_SPECIAL, ids, len + 8, &n, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    if (n < 2) { rc = cli_usage_error("eval", "%s encodes to %zu tokens, expected at least 2", file, n); goto done; }
    if ((rc = cli_model_open(&m, dir, &mo, json))) goto done;
    moq_model_opts ro = mo;
    ro.device = MOQ_DEVICE_CPU; /* the reference runs on the CPU: `--device cuda --ref DIR` is GPU vs CPU */
    ro.nvfp4_as = MOQ_NVFP4_AS_NVFP4; /* the reference as stored */
    ro.tp = 1, ro.tp_ep = 0;          /* and whole: `--tp G --ref DIR` is G ranks vs one */
    if (ref_dir && (rc = cli_model_open(&r, ref_dir, &ro, json))) goto done;
    const int64_t V = moq_model_vocab_size(m), T = moq_model_ctx(m);
    if (r && moq_model_vocab_size(r) != V) {
        rc = cli_usage_error("eval", "%s has vocab_size %lld, %s has %lld; expected the same", ref_dir, (long long)moq_model_vocab_size(r), dir, (long long)V);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= V) { rc = cli_usage_error("eval", "token id %d of the text is outside the model's vocab_size %lld", ids[i], (long long)V); goto done; }
    lm = malloc((size_t)(T * V) * sizeof *lm);
    lr = r ? malloc((size_t)(T * V) * sizeof *lr) : NULL;
    pm = malloc((size_t)V * sizeof *pm);
    pr = malloc((size_t)V * sizeof *pr);
    if (!lm || (r && !lr) || !pm || !pr) { rc = MOQ_ERR_NOMEM; goto done; }
    double nll = 0, nll_ref = 0, kl_sum = 0, kl_max = 0;
    long scored = 0, agree = 0;
    const double t0 = cli_now_s();
    for (size_t w0 = 0; w0 + 1 < n; w0 += (size_t)T) {
        const int64_t wn = (int64_t)(n - w0 < (size_t)T ? n - w0 : (size_t)T);
        if (wn < 2) break;
        moq_model_reset(m);
        if (moq_model_prefill(m, ids + w0, wn, lm, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
        if (r) {
            moq_model_reset(r);
            if (moq_model_prefill(r, ids + w0, wn, lr, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
        }
        for (int64_t i = 0; i + 1 < wn; i++) {
            const int32_t next = ids[w0 + (size_t)i + 1];
            log_softmax(lm + i * V, V, pm);
            nll -= pm[next];
            if (r) {
                log_softmax(lr + i * V, V, pr);
                nll_ref -= pr[next];
                double kl = 0;
                for (int64_t v = 0; v < V; v++) kl += exp(pr[v]) * (pr[v] - pm[v]);
                kl_sum += kl;
                kl_max = fmax(kl_max, kl);
                agree += argmax_f(lm + i * V, V) == argmax_f(lr + i * V, V);
            }
            scored++;
        }
    }
    const double secs = cli_now_s() - t0;
    const double ppl = exp(nll / (double)scored);
    if (json) {
        printf("{\"model\":\"%s\",\"tokens\":%zu,\"scored\":%ld,\"ctx\":%lld,\"ppl\":%.6g", dir, n, scored, (long long)T, ppl);
        if (r)
            printf(",\"ref\":\"%s\",\"ref_ppl\":%.6g,\"kl_mean\":%.6g,\"kl_max\":%.6g,\"top1_agree\":%.6f", ref_dir, exp(nll_ref / (double)scored),
                   kl_sum / (double)scored, kl_max, (double)agree / (double)scored);
        printf(",\"seconds\":%.3f}\n", secs);
    } else {
        printf("%s: %zu tokens, %ld scored in windows of %lld: perplexity %.4f\n", dir, n, scored, (long long)T, ppl);
        if (r)
            printf("vs %s (perplexity %.4f): KL mean %.6f nats, max %.6f; top-1 agreement %.2f %%\n", ref_dir, exp(nll_ref / (double)scored),
                   kl_sum / (double)scored, kl_max, 100.0 * (double)agree / (double)scored);
        fprintf(stderr, "moq: %.2f s, %.1f tokens/s per model\n", secs, (double)scored / secs);
    }
done:
    free(text), free(ids), free(lm), free(lr), free(pm), free(pr);
    moq_model_free(m);
    moq_model_free(r);
    moq_tokenizer_free(tok);
    return rc;
}
