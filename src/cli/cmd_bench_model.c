/* cmd_bench_model.c — `moq bench model DIR`: whole-model speed. Prefill tokens/s over a prompt of
 * deterministic pseudo-random ids, decode tokens/s over N greedy steps, and the decode roofline:
 * bytes of weights one decode step reads (moq_model_decode_bytes: every linear's codes and scales,
 * one embedding row) against the DRAM read bandwidth measured in the same run, before the model
 * is opened (cli_dram_read_gbs, 256 MiB; on the GPU the device-to-device copy bandwidth), plus the
 * KV cache bytes a step reads at the mean position. bound = bandwidth / bytes per token; the report
 * gives decode as % of it. --batch B (GPU) adds B sequences of a moq_batch decoding together, and
 * the GPU memory peak.
 */
#include <getopt.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/rowscan.h"
#include "model/model_priv.h"

static int32_t argmax_row(const float *x, int64_t n) { return (int32_t)moq_f32_argmax_first(x, n); } /* the step checked x finite */

/* A measurement switch of the environment, on when it reads 1:
 *   MOQ_PROFILE_LAST_STEP: the last decode step (and the last batch step) alone inside a profiler
 *     range (cudaProfilerStart/Stop), for `ncu --profile-from-start off` (scripts/device_diag.sh);
 *   MOQ_BENCH_LOGITS: --batch steps take every logits row to the host and find the argmax there. */
static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] == '1';
}

/* --batch B: B sequences of a moq_batch (the API `moq serve` runs on), each prefilled with
 * the prompt, then N steps (moq_batch_step_greedy: a greedy server's step, the ids found where
 * the logits are; MOQ_BENCH_LOGITS=1: moq_batch_step, every logits row to the host and its argmax
 * there) that advance all B by one greedy token in one forward;
 * *tok_s = B · N / time of the steps (the first step, which captures the step's CUDA graph, is a
 * warm-up outside the timing). */
static int bench_batch(moq_model *m, const int32_t *ids, long P, long N, long B, double *tok_s, double *gpu_mib) {
    moq_error err;
    const int64_t V = moq_model_vocab_size(m);
    moq_seq **seq = calloc((size_t)B, sizeof(moq_seq *));
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    float *lg = malloc((size_t)B * (size_t)V * sizeof *lg);
    moq_batch *b = NULL;
    if (!seq || !tok || !lg) {
        free(seq), free(tok), free(lg);
        return cli_usage_error("bench model", "out of memory for --batch %ld", B);
    }
    int rc = 0;
    moq_batch_opts bo = moq_batch_opts_default();
    bo.max_rows = B;
    if (!rc && moq_batch_create(&b, m, &bo, &err) != MOQ_OK) rc = cli_report(&err); /* probe: the page size and bytes */
    if (!rc) {
        bo.kv_bytes = (uint64_t)B * (uint64_t)moq_batch_pages_for(b, P + N + 1) * moq_batch_page_bytes(b);
        moq_batch_free(b), b = NULL;
        if (moq_batch_create(&b, m, &bo, &err) != MOQ_OK) rc = cli_report(&err);
    }
    for (long i = 0; !rc && i < B; i++) {
        if (moq_seq_create(&seq[i], b, &err) != MOQ_OK || moq_seq_reserve(seq[i], P + N + 1, &err) != MOQ_OK ||
            moq_seq_prefill(b, seq[i], ids, P, lg, &err) != MOQ_OK)
            rc = cli_report(&err);
        else tok[i] = argmax_row(lg, V);
    }
    const bool prof = env_on("MOQ_PROFILE_LAST_STEP"), logits_rows = env_on("MOQ_BENCH_LOGITS");
    double t0 = cli_now_s();
    for (long i = 0; !rc && i <= N; i++) {
        if (i == 1) t0 = cli_now_s();
        if (i == N && prof) moq_gpu_profile_range(1);
        if (!logits_rows) { /* greedy ids from the library: on the GPU only the ids come down */
            if (moq_batch_step_greedy(b, seq, tok, B, tok, &err) != MOQ_OK) rc = cli_report(&err);
        } else if (moq_batch_step(b, seq, tok, B, lg, &err) != MOQ_OK) {
            rc = cli_report(&err);
        }
        if (i == N && prof) moq_gpu_profile_range(0);
        if (!rc && logits_rows) /* the rows over the threads, as a server samples its sequences */
#pragma omp parallel for schedule(static) if ((int64_t)B * V >= ((int64_t)1 << 20))
            for (long j = 0; j < B; j++) tok[j] = argmax_row(lg + (size_t)j * (size_t)V, V);
    }
    *tok_s = (double)B * (double)N / (cli_now_s() - t0);
    *gpu_mib = (double)moq_gpu_mem_used() / 1048576.0; /* the batch's pool is still held: the run's peak */
    for (long i = 0; i < B; i++) moq_seq_free(seq[i]);
    moq_batch_free(b);
    free(seq), free(tok), free(lg);
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
                                       {"json", 0, 0, 'j'}, {"kv-scales-default", 1, 0, 'K'}, {"compat", 1, 0, 'P'}, {"kv-cache", 1, 0, 'V'}, {"device", 1, 0, 'G'}, {"batch", 1, 0, 'b'}, {"batch-prompt", 1, 0, 'B'},
                                       {"nvfp4-as", 1, 0, CLI_OPT_NVFP4_AS}, CLI_TP_OPTIONS, {0, 0, 0, 0}};
    long P = 128, N = 32, B = 1, BP = 0;
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
        case 'B': BP = atol(optarg); break;
        default: {
            int rc = cli_parse_model_opt(ch, optarg, &mo, "bench model");
            if (rc) return rc;
        }
        }
    }
    if (optind != argc - 1) return cli_usage_error("bench model", "expected one DIR");
    if (P < 1 || N < 1 || P > (1L << 20) || N > (1L << 20)) return cli_usage_error("bench model", "--prompt and --decode must be in 1..1048576");
    if (B < 1 || B > 256) return cli_usage_error("bench model", "--batch %ld, expected 1..256", B);
    if (BP < 0 || BP > P) return cli_usage_error("bench model", "--batch-prompt %ld, expected 1..--prompt (%ld)", BP, P);
    if (BP == 0) BP = P;
    if (B > 1 && mo.tp > 1) return cli_usage_error("bench model", "--batch with --tp %d: a moq_batch runs on one rank (tensor parallelism decodes one sequence)", mo.tp);
    if (mo.ctx <= 0) mo.ctx = P + N + 1;
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
    if (P + N + 1 > moq_model_ctx(m)) { rc = cli_usage_error("bench model", "--prompt + --decode = %ld exceed --ctx %lld", P + N, (long long)moq_model_ctx(m)); goto done; }
    const bool prof1 = env_on("MOQ_PROFILE_LAST_STEP");
    const double t0 = cli_now_s();
    if (moq_model_prefill(m, ids, P, NULL, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const double t1p = cli_now_s();
    double t1 = t1p;
    for (long i = 0; i <= N; i++) { /* step 0 is a warm-up (on the GPU it captures the step's graph) */
        if (i == 1) t1 = cli_now_s();
        const float *lg = moq_model_logits(m);
        int32_t b = 0;
        for (int64_t v = 1; v < V; v++)
            if (lg[v] > lg[b]) b = (int32_t)v;
        if (i == N && prof1) moq_gpu_profile_range(1);
        if (moq_model_decode(m, b, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
        if (i == N && prof1) moq_gpu_profile_range(0);
    }
    const double t2 = cli_now_s();
    double batch_tok_s = 0, batch_mib = 0;
    if (B > 1 && (rc = bench_batch(m, ids, BP, N, B, &batch_tok_s, &batch_mib))) goto done;
    double bw = bw_cpu, gpu_mib = 0;
    if (gpu) gpu_mib = (double)moq_gpu_mem_used() / 1048576.0; /* device total - free: the model, its pool (and the batch's) */
    if (batch_mib > gpu_mib) gpu_mib = batch_mib;
    if (gpu && (rc = gpu_copy_gbs(&bw))) goto done;
    /* KV bytes a decode step reads per sequence, at the mean position of the timed steps */
    const double kv_eb = gpu ? (double)moq_gpu_kv_elem_bytes(m) : (double)m->kv.elem_bytes;
    const double kv_tok = ((double)P + 1.0 + (double)N / 2.0) * (double)m->kv.n_layers * 2.0 * (double)m->kv.row * kv_eb;
    const double wbytes = (double)moq_model_decode_bytes(m), bytes = wbytes + kv_tok;
    const double pre = (double)P / (t1p - t0), dec = (double)N / (t2 - t1), bound = bw * 1e9 / bytes;
    const double kv_tok_b = kv_tok * ((double)BP + 1.0 + (double)N / 2.0) / ((double)P + 1.0 + (double)N / 2.0); /* at the batch's positions */
    const double bound_b = bw * 1e9 * (double)B / (wbytes + (double)B * kv_tok_b); /* total tok/s bound at batch B */
    if (json) {
        printf("{\"architecture\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"prompt\":%ld,\"decode\":%ld,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
               "\"decode_bytes_per_token\":%.0f,\"kv_bytes_per_token\":%.0f,\"dram_read_gbs\":%.2f,\"decode_bound_tok_s\":%.3f,"
               "\"decode_of_bound\":%.4f,\"gpu_mem_mib\":%.1f}\n",
               moq_model_architecture(m), moq_device_name(mo.device), threads, P, N, pre, dec, bytes, kv_tok, bw, bound, dec / bound, gpu_mib);
        if (B > 1) printf("{\"batch\":%ld,\"batch_prompt\":%ld,\"batch_decode_tok_s\":%.3f,\"per_sequence_tok_s\":%.3f,\"vs_batch1\":%.3f,\"batch_bound_tok_s\":%.3f}\n", B,
                          BP, batch_tok_s, batch_tok_s / (double)B, batch_tok_s / dec, bound_b);
    } else {
        char b1[32];
        char info[160] = "";
        if (gpu) moq_device_check(MOQ_DEVICE_CUDA, info, sizeof info, NULL);
        if (gpu) printf("moq bench model: %s on %s\n", moq_model_architecture(m), info);
        else printf("moq bench model: %s, %d threads, cpu: %s\n", moq_model_architecture(m), threads, moq_cpu_features_str());
        printf("prefill  %6ld tokens  %10.2f tok/s\n", P, pre);
        printf("decode   %6ld tokens  %10.2f tok/s\n", N, dec);
        char b2[32];
        printf("decode reads %s per token (%s of it KV); %s %.2f GB/s -> bound %.2f tok/s; decode at %.1f %% of it\n",
               cli_bytes((unsigned long long)bytes, b1, sizeof b1), cli_bytes((unsigned long long)kv_tok, b2, sizeof b2),
               gpu ? "GPU copy (read + write)" : "DRAM read", bw, bound, 100.0 * dec / bound);
        if (B > 1)
            printf("decode batch %ld (prompts of %ld): %.2f tok/s total, %.2f per sequence, %.1fx batch 1 (bound at this batch %.2f tok/s, %.1f %% of it)\n", B, BP,
                   batch_tok_s, batch_tok_s / (double)B, batch_tok_s / dec, bound_b, 100.0 * batch_tok_s / bound_b);
        if (gpu) printf("GPU memory in use at the peak (device total - free): %.1f MiB\n", gpu_mib);
    }
done:
    free(ids);
    moq_model_free(m);
    return rc;
}
