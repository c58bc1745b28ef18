/* cmd_bench_model.c — `moq bench model DIR`: whole-model speed. Prefill tokens/s over a prompt of
 * deterministic pseudo-random ids, decode tokens/s over N greedy steps, and the decode roofline:
 * bytes of weights one decode step reads (moq_model_decode_bytes: every linear's codes and scales,
 * one embedding row) against the DRAM read bandwidth measured in the same run, before the model
 * is opened (cli_dram_read_gbs, 256 MiB). bound = bandwidth / bytes per token; the report gives decode as % of it.
 */
#include <getopt.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/model_priv.h"

static int32_t argmax_row(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t v = 1; v < n; v++)
        if (x[v] > x[b]) b = (int32_t)v;
    return b;
}

/* --batch B (GPU): B sequence slots, each prefilled with the prompt, then N steps that advance all B
 * by one greedy token in one forward (moq_gpu_decode_batch); *tok_s = B · N / time of the steps. */
static int bench_batch(moq_model *m, const int32_t *ids, long P, long N, long B, double *tok_s) {
    moq_error err;
    const int64_t V = moq_model_vocab_size(m);
    int32_t *slot = malloc((size_t)B * sizeof *slot), *tok = malloc((size_t)B * sizeof *tok), *pos = malloc((size_t)B * sizeof *pos);
    float *lg = malloc((size_t)B * (size_t)V * sizeof *lg);
    int rc = 0;
    if (!slot || !tok || !pos || !lg) {
        free(slot), free(tok), free(pos), free(lg);
        return cli_usage_error("bench model", "out of memory for --batch %ld", B);
    }
    if (moq_gpu_reserve_seqs(m, B, &err) != MOQ_OK) rc = cli_report(&err);
    for (long b = 0; !rc && b < B; b++) {
        if (moq_gpu_prefill_slot(m, (int32_t)b, ids, P, 0, lg, &err) != MOQ_OK) rc = cli_report(&err);
        slot[b] = (int32_t)b, tok[b] = argmax_row(lg, V), pos[b] = (int32_t)P;
    }
    const double t0 = cli_now_s();
    for (long i = 0; !rc && i < N; i++) {
        if (moq_gpu_decode_batch(m, B, slot, tok, pos, lg, &err) != MOQ_OK) rc = cli_report(&err);
        for (long b = 0; !rc && b < B; b++) tok[b] = argmax_row(lg + (size_t)b * (size_t)V, V), pos[b]++;
    }
    *tok_s = (double)B * (double)N / (cli_now_s() - t0);
    free(slot), free(tok), free(pos), free(lg);
    return rc;
}

/* GPU device-to-device copy bandwidth, GB/s of bytes read + written (1 GiB copied 5 times after a
 * warm-up): the roofline of a decode step on the GPU, as `moq bench linear --device cuda` uses. */
static int gpu_copy_gbs(double *gbs) {
    moq_error err;
    const size_t gib = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    int rc = 0;
    if (moq_device_alloc(MOQ_DEVICE_CUDA, gib, &a, &err) || moq_device_alloc(MOQ_DEVICE_CUDA, gib, &b, &err) ||
        moq_device_copy(MOQ_DEVICE_CUDA, b, a, gib, &err)) {
        rc = cli_report(&err);
    } else {
        const double t0 = cli_now_s();
        for (int i = 0; i < 5 && !rc; i++)
            if (moq_device_copy(MOQ_DEVICE_CUDA, b, a, gib, &err)) rc = cli_report(&err);
        *gbs = 5.0 * 2.0 * (double)gib / (cli_now_s() - t0) / 1e9;
    }
    moq_device_free(MOQ_DEVICE_CUDA, a), moq_device_free(MOQ_DEVICE_CUDA, b);
    return rc;
}

int cmd_bench_model(int argc, char **argv) {
    static const struct option lo[] = {{"prompt", 1, 0, 'p'}, {"decode", 1, 0, 'd'}, {"threads", 1, 0, 'T'}, {"ctx", 1, 0, 'C'},
                                       {"json", 0, 0, 'j'}, {"kv-scales-default", 1, 0, 'K'}, {"compat", 1, 0, 'P'}, {"kv-cache", 1, 0, 'V'}, {"device", 1, 0, 'G'}, {"batch", 1, 0, 'b'},
                                       {"nvfp4-as", 1, 0, CLI_OPT_NVFP4_AS}, {0, 0, 0, 0}};
    long P = 128, N = 32, B = 1;
    bool json = false;
    moq_model_opts mo = moq_model_opts_default();
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': P = atol(optarg); break;
        case 'd': N = atol(optarg); break;
        case 'j': json = true; break;
        case 'b': B = atol(optarg); break;
        default: {
            int rc = cli_parse_model_opt(ch, optarg, &mo, "bench model");
            if (rc) return rc;
        }
        }
    }
    if (optind != argc - 1) return cli_usage_error("bench model", "expected one DIR");
    if (P < 1 || N < 1 || P > (1L << 20) || N > (1L << 20)) return cli_usage_error("bench model", "--prompt and --decode must be in 1..1048576");
    if (B < 1 || B > 256) return cli_usage_error("bench model", "--batch %ld, expected 1..256", B);
    if (B > 1 && mo.device != MOQ_DEVICE_CUDA) return cli_usage_error("bench model", "--batch needs --device cuda (batched decode runs on the GPU)");
    if (mo.ctx <= 0) mo.ctx = P + N;
    const int threads = mo.n_threads > 0 ? mo.n_threads : omp_get_max_threads();
    /* DRAM bandwidth first, before the model exists: its buffer is freed before the weights load,
     * so the peak resident set is the model's (issue 14 measures it) */
    const bool gpu = mo.device == MOQ_DEVICE_CUDA;
    const double bw_cpu = gpu ? 0 : cli_dram_read_gbs(threads);
    moq_model *m = NULL;
    int rc = cli_model_open(&m, argv[optind], &mo, json);
    if (rc) return rc;
    moq_error err;
    const int64_t V = moq_model_vocab_size(m);
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    if (!ids) { moq_model_free(m); return MOQ_ERR_NOMEM; }
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (long i = 0; i < P; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        ids[i] = (int32_t)(st % (uint64_t)V);
    }
    if (P + N > moq_model_ctx(m)) { rc = cli_usage_error("bench model", "--prompt + --decode = %ld exceed --ctx %lld", P + N, (long long)moq_model_ctx(m)); goto done; }
    const double t0 = cli_now_s();
    if (moq_model_prefill(m, ids, P, NULL, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const double t1 = cli_now_s();
    for (long i = 0; i < N; i++) {
        const float *lg = moq_model_logits(m);
        int32_t b = 0;
        for (int64_t v = 1; v < V; v++)
            if (lg[v] > lg[b]) b = (int32_t)v;
        if (moq_model_decode(m, b, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    }
    const double t2 = cli_now_s();
    double batch_tok_s = 0;
    if (B > 1 && (rc = bench_batch(m, ids, P, N, B, &batch_tok_s))) goto done;
    double bw = bw_cpu;
    if (gpu && (rc = gpu_copy_gbs(&bw))) goto done;
    const double bytes = (double)moq_model_decode_bytes(m);
    const double pre = (double)P / (t1 - t0), dec = (double)N / (t2 - t1), bound = bw * 1e9 / bytes;
    if (json) {
        printf("{\"architecture\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"prompt\":%ld,\"decode\":%ld,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
               "\"decode_bytes_per_token\":%.0f,\"dram_read_gbs\":%.2f,\"decode_bound_tok_s\":%.3f,\"decode_of_bound\":%.4f}\n",
               moq_model_architecture(m), moq_device_name(mo.device), threads, P, N, pre, dec, bytes, bw, bound, dec / bound);
        if (B > 1) printf("{\"batch\":%ld,\"batch_decode_tok_s\":%.3f,\"per_sequence_tok_s\":%.3f,\"vs_batch1\":%.3f}\n", B, batch_tok_s,
                          batch_tok_s / (double)B, batch_tok_s / dec);
    } else {
        char b1[32];
        char info[160] = "";
        if (gpu) moq_device_check(MOQ_DEVICE_CUDA, info, sizeof info, NULL);
        if (gpu) printf("moq bench model: %s on %s\n", moq_model_architecture(m), info);
        else printf("moq bench model: %s, %d threads, cpu: %s\n", moq_model_architecture(m), threads, moq_cpu_features_str());
        printf("prefill  %6ld tokens  %10.2f tok/s\n", P, pre);
        printf("decode   %6ld tokens  %10.2f tok/s\n", N, dec);
        printf("decode reads %s per token; %s %.2f GB/s -> bound %.2f tok/s; decode at %.1f %% of it\n",
               cli_bytes((unsigned long long)bytes, b1, sizeof b1), gpu ? "GPU copy (read + write)" : "DRAM read", bw, bound, 100.0 * dec / bound);
        if (B > 1)
            printf("decode batch %ld: %.2f tok/s total, %.2f per sequence, %.1fx batch 1\n", B, batch_tok_s, batch_tok_s / (double)B,
                   batch_tok_s / dec);
    }
done:
    free(ids);
    moq_model_free(m);
    return rc;
}
