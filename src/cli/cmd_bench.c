/* cmd_bench.c — `moq bench linear`: one quantized linear layer, measured against the machine and
 * against OpenBLAS in the same run (numbers on a shared VM swing from minute to minute; only
 * same-run ratios are firm).
 *
 *   1. DRAM read bandwidth: OpenMP threads sum a 1 GiB buffer (far beyond any cache), best of 3.
 *   2. The layer hot: the same weights every call (they stay in L2/L3 when they fit).
 *   3. The layer cold: round-robin over enough copies of the layer to total >= 1 GiB, so every
 *      call streams its weights from DRAM (the L3 here is 300 MiB, so 1 GiB suffices).
 *   4. OpenBLAS sgemm (M > 1) / sgemv (M = 1) on the same weights dequantized to F32, hot and cold,
 *      with the same thread count. libopenblas.so.0 is dlopen'ed here, so libmoq never links it.
 * Weight GB/s counts the bytes the format stores (codes + scales), GFLOP/s = 2·M·N·K / time.
 * The weights are random codes with plausible scales (speed does not depend on the values).
 */
#include <dlfcn.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "kernels/kernels.h"
#include "scheme/scheme.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) { /* process CPU time: robust to being descheduled on a shared VM */
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float urand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f; }

/* Canonical weight of the pair with random codes; buffers owned by the caller (q, scale). */
static int make_weight(moq_pair_id p, int64_t N, int64_t K, moq_weight *w, void **q, void **scale) {
    memset(w, 0, sizeof *w);
    w->w = *moq_pairs[p].w;
    w->a = *moq_pairs[p].a;
    w->N = N, w->K = K;
    const size_t nk = (size_t)N * (size_t)K;
    const moq_elem e = w->w.elem;
    const size_t qbytes = moq_elem_bytes(e, nk);
    uint8_t *qb = malloc(qbytes ? qbytes : 1);
    if (!qb) return -1;
    for (size_t i = 0; i < qbytes; i++) qb[i] = (uint8_t)rnd();
    if (e == MOQ_ELEM_E4M3)
        for (size_t i = 0; i < nk; i++) if ((qb[i] & 0x7F) == 0x7F) qb[i] = 0x38;
    if (e == MOQ_ELEM_BF16 || e == MOQ_ELEM_F16)
        for (size_t i = 0; i < nk; i++) ((uint16_t *)qb)[i] = (uint16_t)((e == MOQ_ELEM_BF16 ? 0x3C00 : 0x2C00) + (rnd() & 0x7FF) + ((rnd() & 1) << 15));
    if (e == MOQ_ELEM_F32)
        for (size_t i = 0; i < nk; i++) ((float *)qb)[i] = urand(-1, 1);
    *q = qb;
    *scale = NULL;
    size_t sbytes = 0;
    if (w->w.scale_elem == MOQ_ELEM_F32 && w->w.group_rows == 1) sbytes = (size_t)N * 4;
    if (w->w.scale_elem == MOQ_ELEM_F32 && w->w.group_rows == 128) sbytes = (size_t)((N + 127) / 128 * (K / 128)) * 4;
    if (w->w.scale_elem == MOQ_ELEM_E4M3 || w->w.scale_elem == MOQ_ELEM_E8M0) sbytes = nk / (size_t)w->w.group_cols;
    if (sbytes) {
        uint8_t *sb = malloc(sbytes);
        if (!sb) {
            free(qb);
            *q = NULL;
            return -1;
        }
        for (size_t i = 0; i < sbytes; i++) sb[i] = w->w.scale_elem == MOQ_ELEM_E8M0 ? (uint8_t)(120 + rnd() % 8) : (uint8_t)(0x30 + rnd() % 0x40);
        if (w->w.scale_elem == MOQ_ELEM_F32)
            for (size_t i = 0; i < sbytes / 4; i++) ((float *)sb)[i] = urand(1e-3f, 1e-2f);
        *scale = sb;
    }
    w->q = *q, w->scale = *scale;
    w->n_shards = 1, w->row0[1] = N;
    w->shard_scale[0] = 2e-3f, w->shard_in_scale[0] = 3e-3f;
    return 0;
}

static size_t weight_bytes(const moq_weight *w) {
    const size_t nk = (size_t)w->N * (size_t)w->K;
    size_t b = moq_elem_bytes(w->w.elem, nk);
    if (w->w.scale_elem == MOQ_ELEM_F32 && w->w.group_rows == 1) b += (size_t)w->N * 4;
    if (w->w.scale_elem == MOQ_ELEM_F32 && w->w.group_rows == 128) b += (size_t)((w->N + 127) / 128 * (w->K / 128)) * 4;
    if (w->w.scale_elem == MOQ_ELEM_E4M3 || w->w.scale_elem == MOQ_ELEM_E8M0) b += nk / (size_t)w->w.group_cols;
    return b;
}

/* Best of 3 reads of a `bytes` buffer (far above the last-level cache), GB/s. */
static double dram_read_gbs_n(int threads, size_t bytes) {
    const size_t n = bytes / 8;
    uint64_t *buf = malloc(n * 8);
    if (!buf) return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t s = 0;
        const double t0 = now_s();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += buf[i];
        const double dt = now_s() - t0;
        sink += s;
        if ((double)(n * 8) / dt > best) best = (double)(n * 8) / dt;
    }
    (void)sink;
    free(buf);
    return best / 1e9;
}

double dram_read_gbs(int threads) { return dram_read_gbs_n(threads, (size_t)1 << 30); }

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*setthreads_fn)(int);

static int cmp_d(const void *a, const void *b) { const double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { if (n <= 0) return 0.0; qsort(v, (size_t)n, sizeof *v, cmp_d); return v[n / 2]; }
static double minimum(const double *v, int n) {
    double m = n > 0 ? v[0] : 0.0;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* --device cuda: the layer on the GPU. Weights streamed from HBM ("cold": round-robin over copies
 * totalling >= 512 MiB, far beyond the 60 MiB L2) and the same layer repeated ("hot"); each the
 * mean of back-to-back runs between two device syncs (launch gaps included). Device copy
 * bandwidth (a 1 GiB device-to-device copy, bytes read + written) is the roofline. */
static int bench_cuda(const char *algo, moq_pair_id p, long long M, long long N, long long K, const char *kernel, int json) {
    moq_error err = {0};
    char info[256];
    if (moq_device_check(MOQ_DEVICE_CUDA, info, sizeof info, &err) != MOQ_OK) return cli_report(&err);
    moq_weight w;
    void *q = NULL, *sc = NULL;
    if (make_weight(p, N, K, &w, &q, &sc)) {
        free(q), free(sc);
        return cli_usage_error("bench", "out of memory for the weights");
    }
    const size_t wb = weight_bytes(&w);
    const int copies = (int)(((size_t)256 << 20) / (wb ? wb : 1) + 2);
    moq_linear **ls = calloc((size_t)copies, sizeof(moq_linear *));
    moq_linear_opts o = moq_linear_opts_default();
    o.name = algo, o.kernel = kernel, o.device = MOQ_DEVICE_CUDA;
    int rc = 0;
    void *xd = NULL, *yd = NULL, *wsd = NULL, *c0 = NULL, *c1 = NULL;
    uint16_t *xb = malloc((size_t)(M * K) * 2);
    for (long long i = 0; i < M * K; i++) {
        const float v = urand(-2, 2);
        uint32_t u;
        memcpy(&u, &v, 4);
        xb[i] = (uint16_t)(u >> 16);
    }
    const size_t gib = (size_t)1 << 30;
    double copy_gbs = NAN, hot = NAN, cold = NAN;
    for (int i = 0; i < copies; i++)
        if (moq_linear_create_from_weight(&ls[i], &w, &o, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const size_t wsz = moq_linear_workspace_size(ls[0], M);
    if (moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(M * K) * 2, &xd, &err) || moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(M * N) * 2, &yd, &err) ||
        moq_device_alloc(MOQ_DEVICE_CUDA, wsz, &wsd, &err) || moq_device_upload(MOQ_DEVICE_CUDA, xd, xb, (size_t)(M * K) * 2, &err) ||
        moq_device_alloc(MOQ_DEVICE_CUDA, gib, &c0, &err) || moq_device_alloc(MOQ_DEVICE_CUDA, gib, &c1, &err)) {
        rc = cli_report(&err);
        goto done;
    }
    for (int r = 0; r < 4; r++) { /* copy roofline: best of 3 after one warm-up */
        const double a = now_s();
        if (moq_device_copy(MOQ_DEVICE_CUDA, c1, c0, gib, &err)) { rc = cli_report(&err); goto done; }
        const double g = 2.0 * (double)gib / (now_s() - a) / 1e9;
        if (r && !(g <= copy_gbs)) copy_gbs = g;
    }
    for (int pass = 0; pass < 2; pass++) {
        const int reps = 200;
        for (int i = 0; i < 5; i++) moq_linear_run(ls[0], xd, MOQ_ELEM_BF16, M, yd, MOQ_ELEM_BF16, wsd, wsz, &err);
        if (moq_device_sync(MOQ_DEVICE_CUDA, &err)) { rc = cli_report(&err); goto done; }
        const double a = now_s();
        for (int i = 0; i < reps; i++)
            if (moq_linear_run(ls[pass ? i % copies : 0], xd, MOQ_ELEM_BF16, M, yd, MOQ_ELEM_BF16, wsd, wsz, &err)) { rc = cli_report(&err); goto done; }
        if (moq_device_sync(MOQ_DEVICE_CUDA, &err)) { rc = cli_report(&err); goto done; }
        *(pass ? &cold : &hot) = (now_s() - a) / reps;
    }
    {
        const double flop = 2.0 * (double)M * (double)N * (double)K;
        const char *kname = moq_linear_kernel_name_for(ls[0], M);
        if (json)
            printf("{\"device\":\"cuda\",\"gpu\":\"%s\",\"algo\":\"%s\",\"kernel\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"weight_bytes\":%zu,"
                   "\"copy_gbs\":%.1f,\"hot_us\":%.2f,\"cold_us\":%.2f,\"cold_weight_gbs\":%.1f,\"cold_of_copy\":%.3f,\"hot_tflops\":%.2f,\"cold_tflops\":%.2f}\n",
                   info, algo, kname, M, N, K, wb, copy_gbs, hot * 1e6, cold * 1e6, (double)wb / cold / 1e9, (double)wb / cold / 1e9 / copy_gbs,
                   flop / hot / 1e12, flop / cold / 1e12);
        else {
            char b1[32];
            printf("moq bench linear: %s [m=%lld, n=%lld, k=%lld] on %s\n", algo, M, N, K, info);
            printf("kernel %s, weights %s (%d copies for the cold runs), x and y bf16\n", kname, cli_bytes(wb, b1, sizeof b1), copies);
            printf("%-10s %12s %12s %12s\n", "", "time (us)", "weight GB/s", "TFLOP/s");
            printf("%-10s %12.2f %12.1f %12.2f\n", "moq hot", hot * 1e6, (double)wb / hot / 1e9, flop / hot / 1e12);
            printf("%-10s %12.2f %12.1f %12.2f\n", "moq cold", cold * 1e6, (double)wb / cold / 1e9, flop / cold / 1e12);
            printf("device copy %.0f GB/s (read + write); moq cold streams weights at %.0f %% of it\n", copy_gbs, 100.0 * (double)wb / cold / 1e9 / copy_gbs);
        }
    }
done:
    for (int i = 0; i < copies; i++) moq_linear_free(ls[i]);
    moq_device_free(MOQ_DEVICE_CUDA, xd), moq_device_free(MOQ_DEVICE_CUDA, yd), moq_device_free(MOQ_DEVICE_CUDA, wsd);
    moq_device_free(MOQ_DEVICE_CUDA, c0), moq_device_free(MOQ_DEVICE_CUDA, c1);
    free(ls), free(xb), free(q), free(sc);
    return rc;
}

/* ---- --algo names, shared by `bench linear` and `bench moe` ----------------------------------
 * Derived from the two tables that hold the facts: the kernel pair table (moq_pairs: nvfp4_w4a4,
 * fp8_tensor, ..., bf16, f16, f32; matched without case, so BF16 works too) and the scheme table
 * (ModelOpt's quant_algo: NVFP4, FP8, FP8_PB_WO, ...; its weight and activation keys give the pair,
 * its expert method the MoE format). Nothing is listed twice. */
static const moq_scheme *scheme_of_pair(moq_pair_id p) {
    for (int i = 0; i < moq_scheme_count(); i++) {
        const moq_scheme *s = moq_scheme_at(i);
        if (moq_quant_key_eq(s->w, moq_pairs[p].w) && moq_quant_key_eq(s->a, moq_pairs[p].a)) return s;
    }
    return NULL;
}

static moq_moe_format moe_of_pair(moq_pair_id p) {
    if (p == MOQ_PAIR_BF16) return MOQ_MOE_FMT_UNQUANTIZED; /* the MoE bench writes unquantized experts in BF16 */
    const moq_scheme *s = scheme_of_pair(p);
    moq_moe_format f;
    /* only an expert method of this scheme's own format (a scheme whose experts resolve to another
     * scheme's method has no expert format of its own) */
    if (!s || moq_scheme_for_method(s->moe) != s) return MOQ_MOE_FMT_COUNT;
    return moq_moe_format_from_method(moq_method_name(s->moe), &f, NULL) == MOQ_OK ? f : MOQ_MOE_FMT_COUNT;
}

int cli_bench_algo(const char *name, moq_pair_id *pair, moq_moe_format *moe) {
    moq_pair_id p = MOQ_PAIR_COUNT;
    for (int i = 0; name && i < MOQ_PAIR_COUNT; i++)
        if (strcasecmp(name, moq_pairs[i].name) == 0) p = (moq_pair_id)i;
    const moq_scheme *s = name && p == MOQ_PAIR_COUNT ? moq_scheme_find(name, true) : NULL;
    for (int i = 0; s && i < MOQ_PAIR_COUNT; i++)
        if (moq_quant_key_eq(s->w, moq_pairs[i].w) && moq_quant_key_eq(s->a, moq_pairs[i].a)) p = (moq_pair_id)i;
    if (p == MOQ_PAIR_COUNT) return -1;
    *pair = p;
    if (moe) *moe = moe_of_pair(p);
    return 0;
}

const char *cli_bench_algo_list(char *buf, size_t n, int moe_only) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < MOQ_PAIR_COUNT && o < n; i++) {
        if (moe_only && moe_of_pair((moq_pair_id)i) == MOQ_MOE_FMT_COUNT) continue;
        const moq_scheme *s = scheme_of_pair((moq_pair_id)i);
        o += (size_t)snprintf(buf + o, n - o, "%s%s%s%s%s", o ? ", " : "", moq_pairs[i].name, s ? " (" : "", s ? s->algo : "", s ? ")" : "");
    }
    return buf;
}

static void bench_linear_help(FILE *out) {
    char list[512];
    fprintf(out,
            "usage: moq bench linear --algo A --m M --n N --k K [--threads T] [--x bf16|f32] [--kernel ROW] [--device cpu|cuda] [--reps R] [--hot-only] [--json]\n\n"
            "Measures one quantized linear layer y = x·Wᵀ (x bf16 or f32 [M, K], random weights of format A):\n"
            "DRAM read bandwidth, the layer with weights hot and cold (rotating over >= 1 GiB of\n"
            "copies), weight GB/s, GFLOP/s, and OpenBLAS sgemm/sgemv on the same weights in F32; process\n"
            "CPU time per thread of moq and of OpenBLAS (hot, robust on a busy machine), and the time of the\n"
            "first layer create (validation + packing into the row's layout), wall and CPU.\n\n"
            "  --algo A      a kernel pair or its ModelOpt quant_algo (in parentheses), any case:\n"
            "                %s\n"
            "  --threads T   OpenMP threads for moq and OpenBLAS (default: all)\n"
            "  --x DT        activation dtype given to moq (default bf16; OpenBLAS gets the same values in f32)\n"
            "  --reps R      at least R hot runs of moq and of OpenBLAS (default 5, at most 64; more while\n"
            "                under 1 s); the JSON gives the median and the minimum CPU time per thread (the\n"
            "                minimum is the robust one when other processes share the cores)\n"
            "  --hot-only    only the hot runs (no DRAM pass, no cold copies, no OpenBLAS): for profiling\n"
            "  --kernel ROW  force one registry row (default: the first that fits this cpu / device)\n"
            "  --device D    cpu (default) or cuda: the layer on the GPU (x, y bf16), weights hot and\n"
            "                streamed from HBM, against the device copy bandwidth\n"
            "  --json        one JSON object instead of the table\n",
            cli_bench_algo_list(list, sizeof list, 0));
}

static void bench_model_help(FILE *out) {
    fprintf(out,
            "usage: moq bench model DIR [--prompt P] [--decode N] [--threads T] [--ctx C] [--device cpu|cuda|auto]\n"
            "                       [--batch B] [--batch-prompt BP] [--nvfp4-as nvfp4|fp8|fp8-channel]\n"
            "                       [--tp G [--ep] [--tp-backend cpu|nccl]] [--json]\n\n"
            "Prefill tokens/s over P tokens (default 128) and decode tokens/s over N steps (default 32) of a\n"
            "whole model, and the decode bytes per token (weights read per step + the KV cache at the mean\n"
            "position) against DRAM read bandwidth (--device cuda: against the GPU's measured device-to-device\n"
            "copy bandwidth). --batch B: then B sequences of a moq_batch (the API `moq serve` runs),\n"
            "each prefilled with the first BP tokens of the prompt (default all P), advanced N steps together:\n"
            "total and per-sequence decode tok/s, the bound at that batch, and the peak GPU memory.\n"
            "--tp G: the model split over G ranks as `moq run --tp` does (decode bytes are rank 0's share).\n");
}

void cmd_bench_help(FILE *out) {
    bench_linear_help(out);
    fputc('\n', out);
    bench_model_help(out);
    fputc('\n', out);
    cmd_bench_moe_help(out);
}

void cmd_bench_help_sub(FILE *out, const char *sub) {
    if (strcmp(sub, "linear") == 0) bench_linear_help(out);
    else if (strcmp(sub, "model") == 0) bench_model_help(out);
    else if (strcmp(sub, "moe") == 0) cmd_bench_moe_help(out);
    else cmd_bench_help(out);
}

/* 256 MiB: `moq bench model` measures before the model is opened, and this buffer is what its
 * peak resident memory then holds apart from the model (the model's own is what it reports). */
double cli_dram_read_gbs(int threads) { return dram_read_gbs_n(threads, (size_t)256 << 20); }

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "model") == 0) return cmd_bench_model(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "moe") == 0) return cmd_bench_moe(argc, argv);
    if (argc < 2 || strcmp(argv[1], "linear") != 0) return cli_usage_error("bench", "expected `moq bench linear ...`, `moq bench moe ...` or `moq bench model ...`");
    const char *algo = NULL, *kernel = NULL;
    long long M = 1, N = 4096, K = 4096;
    int threads = omp_get_max_threads(), json = 0;
    moq_elem xe = MOQ_ELEM_BF16;
    int hot_only = 0, reps = 5;
    static const struct option lo[] = {{"algo", 1, 0, 'a'}, {"m", 1, 0, 'm'}, {"n", 1, 0, 'n'}, {"k", 1, 0, 'k'},
                                       {"threads", 1, 0, 't'}, {"kernel", 1, 0, 'r'}, {"json", 0, 0, 'j'}, {"x", 1, 0, 'x'}, {"hot-only", 0, 0, 'h'}, {"device", 1, 0, 'd'}, {"reps", 1, 0, 'R'}, {0, 0, 0, 0}};
    int cuda = 0;
    optind = 2;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'a': algo = optarg; break;
        case 'm': M = atoll(optarg); break;
        case 'n': N = atoll(optarg); break;
        case 'k': K = atoll(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'r': kernel = optarg; break;
        case 'j': json = 1; break;
        case 'h': hot_only = 1; break;
        case 'R':
            reps = atoi(optarg);
            if (reps < 1 || reps > 64) return cli_usage_error("bench", "--reps %s, expected 1..64", optarg);
            break;
        case 'd':
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) return cli_usage_error("bench", "--device %s, expected cpu or cuda", optarg);
            cuda = strcmp(optarg, "cuda") == 0;
            break;
        case 'x':
            if (strcmp(optarg, "f32") != 0 && strcmp(optarg, "bf16") != 0) return cli_usage_error("bench", "--x %s, expected f32 or bf16", optarg);
            xe = strcmp(optarg, "bf16") == 0 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32;
            break;
        default: return cli_usage_error("bench", "unknown option");
        }
    }
    moq_pair_id p = MOQ_PAIR_COUNT;
    if (cli_bench_algo(algo, &p, NULL)) {
        char list[512];
        return cli_usage_error("bench", "--algo %s is not one of %s", algo ? algo : "(missing)", cli_bench_algo_list(list, sizeof list, 0));
    }
    algo = moq_pairs[p].name; /* reports name the pair */
    if (M < 1 || N < 1 || K < 1 || threads < 1) return cli_usage_error("bench", "--m, --n, --k, --threads must be >= 1");
    if (cuda) return bench_cuda(algo, p, M, N, K, kernel, json);

    moq_weight w;
    void *q = NULL, *sc = NULL;
    if (make_weight(p, N, K, &w, &q, &sc)) return cli_usage_error("bench", "out of memory for the weights");
    moq_linear_opts o = moq_linear_opts_default();
    o.name = algo;
    o.n_threads = threads;
    o.kernel = kernel;
    const size_t wb = weight_bytes(&w);
    const int copies = hot_only ? 2 : (int)(((size_t)1 << 30) / (wb ? wb : 1) + 1);
    moq_linear **ls = calloc((size_t)copies, sizeof(moq_linear *));
    moq_error err = {0};
    int rc = 0;
    float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
    uint16_t *xb = malloc((size_t)(M * K) * 2);
    for (long long i = 0; i < M * K; i++) {
        x[i] = urand(-2, 2);
        uint32_t u;
        memcpy(&u, &x[i], 4);
        xb[i] = (uint16_t)(u >> 16);
        u &= 0xFFFF0000u;
        memcpy(&x[i], &u, 4); /* the same values for OpenBLAS */
    }
    const void *xin = xe == MOQ_ELEM_BF16 ? (const void *)xb : (const void *)x;

    const double bw = hot_only ? NAN : dram_read_gbs(threads);
    double tpack = 0, tpack_cpu = 0; /* the first create: validation, row scales, packing into the row's layout */
    for (int i = 0; i < copies; i++) {
        const double a = now_s(), ac = cpu_s();
        if (moq_linear_create_from_weight(&ls[i], &w, &o, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
        if (i == 0) tpack = now_s() - a, tpack_cpu = cpu_s() - ac;
    }
    const size_t wsz = moq_linear_workspace_size(ls[0], M);
    void *ws = malloc(wsz);
    enum { REPS = 64 };
    double th[REPS], tc[REPS];
    const double flop = 2.0 * (double)M * (double)N * (double)K;
    int nh = 0, nc = 0;
    for (int i = 0; i < 2; i++) moq_linear_run(ls[0], xin, xe, M, y, MOQ_ELEM_F32, ws, wsz, &err);
    double tcpu[REPS];
    for (double t0 = now_s(); nh < REPS && (nh < reps || now_s() - t0 < 1.0); nh++) {
        const double a = now_s(), ac = cpu_s();
        moq_linear_run(ls[0], xin, xe, M, y, MOQ_ELEM_F32, ws, wsz, &err);
        th[nh] = now_s() - a;
        tcpu[nh] = (cpu_s() - ac) / threads;
    }
    for (double t0 = now_s(); nc < REPS && nc < copies && (nc < 5 || now_s() - t0 < 2.0); nc++) {
        const double a = now_s();
        moq_linear_run(ls[1 + nc % (copies - 1)], xin, xe, M, y, MOQ_ELEM_F32, ws, wsz, &err);
        tc[nc] = now_s() - a;
    }
    const double hot_cpu_min = minimum(tcpu, nh);
    const double hot = median(th, nh), cold = median(tc, nc), hot_cpu = median(tcpu, nh);
    const char *kname = moq_linear_kernel_name_for(ls[0], M);
    free(ws);
    for (int i = 0; i < copies; i++) moq_linear_free(ls[i]), ls[i] = NULL;

    /* OpenBLAS on the dequantized weights. */
    double bh = NAN, bc = NAN, bh_cpu = NAN, bh_cpu_min = NAN;
    void *blas = hot_only ? NULL : dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    sgemm_fn sgemm = blas ? (sgemm_fn)dlsym(blas, "cblas_sgemm") : NULL;
    sgemv_fn sgemv = blas ? (sgemv_fn)dlsym(blas, "cblas_sgemv") : NULL;
    setthreads_fn setth = blas ? (setthreads_fn)dlsym(blas, "openblas_set_num_threads") : NULL;
    if (sgemm && sgemv) {
        if (setth) setth(threads);
        const size_t fb = (size_t)N * (size_t)K * 4;
        const int fcop = (int)(((size_t)1 << 30) / fb + 1);
        float **W = calloc((size_t)fcop, sizeof *W);
        double *row = malloc((size_t)K * sizeof(double));
        W[0] = malloc(fb);
        for (long long n = 0; n < N; n++) {
            moq_weight_dequant_row(&w, n, row);
            for (long long k = 0; k < K; k++) W[0][n * K + k] = (float)row[k];
        }
        for (int i = 1; i < fcop; i++) { W[i] = malloc(fb); memcpy(W[i], W[0], fb); }
#define BLAS(Wp) (M == 1 ? sgemv(101, 111, (int)N, (int)K, 1.0f, (Wp), (int)K, x, 1, 0.0f, y, 1) \
                         : sgemm(101, 111, 112, (int)M, (int)N, (int)K, 1.0f, x, (int)K, (Wp), (int)K, 0.0f, y, (int)N))
        for (int i = 0; i < 2; i++) BLAS(W[0]);
        int bn = 0, bcn = 0;
        for (double t0 = now_s(); bn < REPS && (bn < reps || now_s() - t0 < 1.0); bn++) {
            const double a = now_s(), ac = cpu_s();
            BLAS(W[0]);
            th[bn] = now_s() - a;
            tcpu[bn] = (cpu_s() - ac) / threads;
        }
        for (double t0 = now_s(); bcn < REPS && bcn < fcop && (bcn < 5 || now_s() - t0 < 2.0); bcn++) {
            const double a = now_s();
            BLAS(W[1 + bcn % (fcop - 1)]);
            tc[bcn] = now_s() - a;
        }
#undef BLAS
        bh_cpu_min = minimum(tcpu, bn);
        bh = median(th, bn), bc = median(tc, bcn), bh_cpu = median(tcpu, bn);
        for (int i = 0; i < fcop; i++) free(W[i]);
        free(W), free(row);
    }
    if (blas) dlclose(blas);

    if (json) {
        char jb[2048];
        snprintf(jb, sizeof jb, "{\"algo\":\"%s\",\"x\":\"%s\",\"kernel\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"threads\":%d,\"weight_bytes\":%zu,"
               "\"dram_read_gbs\":%.2f,\"hot_us\":%.1f,\"cold_us\":%.1f,\"cold_weight_gbs\":%.2f,\"cold_of_dram\":%.3f,"
               "\"hot_cpu_us\":%.1f,\"hot_gflops\":%.1f,\"cold_gflops\":%.1f,\"openblas_hot_us\":%.1f,\"openblas_cold_us\":%.1f,"
               "\"speedup_vs_openblas_hot\":%.2f,\"speedup_vs_openblas_cold\":%.2f,\"openblas_hot_cpu_us\":%.1f,"
               "\"speedup_vs_openblas_hot_cpu\":%.2f,\"hot_cpu_min_us\":%.1f,\"openblas_hot_cpu_min_us\":%.1f,"
               "\"speedup_vs_openblas_hot_cpu_min\":%.2f,\"hot_reps\":%d,\"create_us\":%.1f,\"create_cpu_us\":%.1f}\n",
               algo, moq_elem_name(xe), kname, M, N, K, threads, wb, bw, hot * 1e6, cold * 1e6, (double)wb / cold / 1e9, (double)wb / cold / 1e9 / bw,
               hot_cpu * 1e6, flop / hot / 1e9, flop / cold / 1e9, bh * 1e6, bc * 1e6, bh / hot, bc / cold, bh_cpu * 1e6,
               bh_cpu / hot_cpu, hot_cpu_min * 1e6, bh_cpu_min * 1e6, bh_cpu_min / hot_cpu_min, nh, tpack * 1e6, tpack_cpu * 1e6);
        /* JSON has no NaN: a measurement not made (--hot-only, no OpenBLAS) is null */
        for (char *t = jb; *t; t++) {
            const size_t n = strncmp(t, ":-nan", 5) == 0 ? 4 : strncmp(t, ":nan", 4) == 0 ? 3 : strncmp(t, ":inf", 4) == 0 ? 3 : 0;
            if (n) { memmove(t + 5, t + 1 + n, strlen(t + 1 + n) + 1); memcpy(t + 1, "null", 4); }
        }
        fputs(jb, stdout);
    } else {
        char b1[32];
        printf("moq bench linear: %s [m=%lld, n=%lld, k=%lld], x %s, %d threads, cpu: %s\n", algo, M, N, K, moq_elem_name(xe), threads, moq_cpu_features_str());
        printf("kernel %s, weights %s (%d copies for the cold runs)\n", kname, cli_bytes(wb, b1, sizeof b1), copies);
        printf("create + pack %.1f ms wall (%.2f s per GB), %.1f ms CPU (all threads)\n", tpack * 1e3, tpack / ((double)wb / 1e9), tpack_cpu * 1e3);
        printf("%-22s %12s %12s %12s %12s\n", "", "time (us)", "weight GB/s", "GFLOP/s", "vs OpenBLAS");
        printf("%-22s %12.1f %12.2f %12.1f %11.2fx\n", "moq hot", hot * 1e6, (double)wb / hot / 1e9, flop / hot / 1e9, bh / hot);
        printf("%-22s %12.1f %12.2f %12.1f %11.2fx\n", "moq cold", cold * 1e6, (double)wb / cold / 1e9, flop / cold / 1e9, bc / cold);
        printf("%-22s %12.1f %12.2f %12.1f\n", M == 1 ? "openblas sgemv hot" : "openblas sgemm hot", bh * 1e6, (double)N * (double)K * 4 / bh / 1e9, flop / bh / 1e9);
        printf("%-22s %12.1f %12.2f %12.1f\n", M == 1 ? "openblas sgemv cold" : "openblas sgemm cold", bc * 1e6, (double)N * (double)K * 4 / bc / 1e9, flop / bc / 1e9);
        printf("moq hot, CPU time per thread %.1f us (wall above includes time descheduled)\n", hot_cpu * 1e6);
        if (!isnan(bh_cpu)) printf("openblas hot, CPU time per thread %.1f us; moq %.2fx OpenBLAS by CPU time\n", bh_cpu * 1e6, bh_cpu / hot_cpu);
        printf("DRAM read %.2f GB/s; moq cold streams weights at %.0f %% of it\n", bw, 100.0 * (double)wb / cold / 1e9 / bw);
    }
done:
    for (int i = 0; i < copies; i++) moq_linear_free(ls[i]);
    free(ls), free(x), free(xb), free(y), free(q), free(sc);
    return rc;
}
