/* cmd_bench_moe.c — `moq bench moe`: one mixture-of-experts layer (random experts of one format,
 * written to a temporary checkpoint and loaded through moq_moe_create), measured against the
 * machine in the same run.
 *
 *   1. DRAM read bandwidth (dram_read_gbs, cmd_bench.c).
 *   2. Decode (T = 1 by default): each call routes the token to k experts not touched by the
 *      previous calls (and rotates over copies of the layer until >= 1 GiB of experts), so every
 *      call streams its selected experts' weights from DRAM. Reported: selected-expert bytes/s
 *      (k experts' w13 + w2 as stored: codes and scales) and its share of the DRAM bandwidth.
 *   3. Prefill (T > 1): random router logits, weights hot; GFLOP/s = 2·T·k·(2I·H + H·I) / time
 *      (I unpadded, gated experts), against one expert's w13 linear alone at M = T·k/E (the
 *      average tokens per expert, what each grouped GEMM sees) and at M = T.
 * Speed does not depend on the values; they are random codes with plausible scales.
 */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kernels/kernels.h"
#include "moe/moe.h"
#include "moe/moe_gpu.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double cpu_s(void) { /* process CPU time: what the call cost when the VM deschedules us */
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp_d(const void *a, const void *b) { const double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_d); return v[n / 2]; }

void cmd_bench_moe_help(FILE *out) {
    char list[512];
    fprintf(out,
            "usage: moq bench moe --algo A [--experts E] [--topk K] [--hidden H] [--inter I] [--tokens T] [--threads N]\n"
            "                     [--device cpu|cuda [--graph]] [--hot] [--json]\n\n"
            "Measures one MoE layer (silu-gated experts, softmax top-k) with random experts of format A,\n"
            "default shape Qwen3-30B-A3B: E=128, K=8, H=2048, I=768, T=1. T=1: selected-expert bytes/s\n"
            "from DRAM vs measured DRAM bandwidth; T>1: GFLOP/s vs one expert's linear kernel.\n\n"
            "  --algo A      a kernel pair with an expert format, or its ModelOpt quant_algo, any case:\n"
            "                %s\n"
            "  --threads N   OpenMP threads (default: all)\n"
            "  --hot         decode: the same k experts every call (weights stay in cache)\n"
            "  --device cuda the layer on the GPU (src/moe/moe_gpu.c): decode = selected-expert bytes/s against\n"
            "                the GPU's device-to-device copy bandwidth; prefill = GFLOP/s (times: 400 / 40 calls / sync);\n"
            "                router logits given (the layer's router is not run)\n"
            "  --graph       --device cuda: also 64 calls captured into one CUDA graph (as a model's decode step), replayed\n",
            cli_bench_algo_list(list, sizeof list, 1));
}

static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static float frand(void);

/* GPU copy bandwidth, GB/s of bytes read + written (as `moq bench model --device cuda`). */
static int gpu_copy_gbs(double *gbs) {
    moq_error err;
    const size_t gib = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    int rc = 0;
    if (moq_device_alloc(MOQ_DEVICE_CUDA, gib, &a, &err) || moq_device_alloc(MOQ_DEVICE_CUDA, gib, &b, &err) ||
        moq_device_copy(MOQ_DEVICE_CUDA, b, a, gib, &err) || moq_device_sync(MOQ_DEVICE_CUDA, &err)) {
        rc = cli_report(&err);
    } else {
        const double t0 = now_s();
        for (int i = 0; i < 5 && !rc; i++)
            if (moq_device_copy(MOQ_DEVICE_CUDA, b, a, gib, &err)) rc = cli_report(&err);
        if (!rc && moq_device_sync(MOQ_DEVICE_CUDA, &err)) rc = cli_report(&err);
        *gbs = 5.0 * 2.0 * (double)gib / (now_s() - t0) / 1e9;
    }
    moq_device_free(MOQ_DEVICE_CUDA, a), moq_device_free(MOQ_DEVICE_CUDA, b);
    return rc;
}

/* The layer on the GPU: R distinct router-logit sets uploaded once (decode: set r routes to experts
 * [r·K, r·K + K) mod E, so consecutive calls never reuse an expert until a full cycle, > L2 for the
 * default shape), then `n` calls timed between two synchronisations. */
static int bench_gpu(const moq_moe *l, moq_moe_format fmt, const char *algo, long long E, long long K, long long H, long long I, long long T, int hot, int json,
                     int graph) {
    enum { R = 64 };
    moq_error err = {0};
    moq_moe_gpu *g = NULL;
    float *lg = malloc((size_t)(R * T * E) * 4), *x = malloc((size_t)(T * H) * 4);
    void *lg_d = NULL, *x_d = NULL, *y_d = NULL;
    double bw = 0;
    if (!lg || !x) {
        free(lg), free(x);
        return cli_usage_error("bench moe", "out of memory for %lld router logits", R * T * E);
    }
    int rc = gpu_copy_gbs(&bw);
    if (!rc && moq_moe_gpu_open(&g, l, T, &err)) rc = cli_report(&err);
    if (!rc) {
        const long long sets = E / K;
        for (long long r = 0; r < R; r++)
            for (long long t = 0; t < T; t++)
                for (long long e = 0; e < E; e++) {
                    const long long set = hot ? 0 : r % sets;
                    lg[(r * T + t) * E + e] = T == 1 ? ((e / K == set) ? 4.0f + 0.01f * (float)(e % K) : frand()) : 4 * frand();
                }
        for (long long i = 0; i < T * H; i++) x[i] = 4 * frand() - 2;
        if (moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(R * T * E) * 4, &lg_d, &err) || moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(T * H) * 4, &x_d, &err) ||
            moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(T * H) * 4, &y_d, &err) ||
            moq_device_upload(MOQ_DEVICE_CUDA, lg_d, lg, (size_t)(R * T * E) * 4, &err) || moq_device_upload(MOQ_DEVICE_CUDA, x_d, x, (size_t)(T * H) * 4, &err))
            rc = cli_report(&err);
    }
    const int n = T == 1 ? 400 : 40;
    double t = 0;
    for (int pass = 0; !rc && pass < 2; pass++) { /* pass 0 warms up */
        const double t0 = now_s();
        for (int i = 0; i < (pass ? n : 8) && !rc; i++)
            if (moq_moe_gpu_run(g, x_d, T, (const float *)lg_d + (size_t)((i % R) * T * E), y_d, NULL, &err)) rc = cli_report(&err);
        if (!rc && moq_device_sync(MOQ_DEVICE_CUDA, &err)) rc = cli_report(&err);
        t = (now_s() - t0) / n;
    }
    double tg = 0; /* --graph: the R calls captured into one CUDA graph (as a model's decode step), replayed */
    moq_moe_gpu_graph *gr = NULL;
    if (!rc && graph && moq_moe_gpu_graph_create(&gr, g, x_d, T, lg_d, R, y_d, &err)) rc = cli_report(&err);
    for (int pass = 0; !rc && graph && pass < 2; pass++) {
        const int reps = pass ? (T == 1 ? 8 : 1) : 1;
        const double t0 = now_s();
        for (int i = 0; i < reps && !rc; i++)
            if (moq_moe_gpu_graph_replay(gr, &err)) rc = cli_report(&err);
        tg = (now_s() - t0) / (reps * R);
    }
    moq_moe_gpu_graph_free(gr);
    if (!rc) {
        const uint64_t per = moq_moe_expert_bytes(fmt, H, I);
        const double sel = (double)per * (double)K, flop = 2.0 * (double)T * (double)K * 3.0 * (double)H * (double)I;
        if (json)
            printf("{\"algo\":\"%s\",\"device\":\"cuda\",\"experts\":%lld,\"topk\":%lld,\"hidden\":%lld,\"inter\":%lld,\"tokens\":%lld,"
                   "\"expert_bytes\":%llu,\"gpu_copy_gbs\":%.1f,\"time_us\":%.2f,\"selected_gbs\":%.1f,\"of_copy\":%.3f,\"gflops\":%.1f,\"graph_us\":%.2f}\n",
                   algo, E, K, H, I, T, (unsigned long long)per, bw, t * 1e6, sel / t / 1e9, sel / t / 1e9 / bw, flop / t / 1e9, tg * 1e6);
        else {
            printf("moq bench moe --device cuda: %s E=%lld top-%lld H=%lld I=%lld T=%lld; GPU copy (read + write) %.1f GB/s; %.1f MiB on the GPU\n",
                   algo, E, K, H, I, T, bw, (double)moq_moe_gpu_bytes(g) / 1048576.0);
            if (T == 1)
                printf("decode: %.2f us per layer call (mean of %d); %lld experts' stored bytes %.2f MB -> %.1f GB/s = %.0f %% of copy bandwidth "
                       "(bound %.2f us)\n", t * 1e6, n, K, sel / 1e6, sel / t / 1e9, 100.0 * sel / t / 1e9 / bw, sel / (bw * 1e9) * 1e6);
            else printf("prefill: %.1f us per call (mean of %d) = %.1f GFLOP/s\n", t * 1e6, n, flop / t / 1e9);
            if (graph && T == 1)
                printf("decode, CUDA graph of %d calls: %.2f us per layer call -> %.1f GB/s = %.0f %% of copy bandwidth\n", R, tg * 1e6, sel / tg / 1e9,
                       100.0 * sel / tg / 1e9 / bw);
            else if (graph) printf("prefill, CUDA graph of %d calls: %.1f us per call = %.1f GFLOP/s\n", R, tg * 1e6, flop / tg / 1e9);
        }
    }
    moq_moe_gpu_free(g);
    moq_device_free(MOQ_DEVICE_CUDA, lg_d), moq_device_free(MOQ_DEVICE_CUDA, x_d), moq_device_free(MOQ_DEVICE_CUDA, y_d);
    free(lg), free(x);
    return rc;
}

static float frand(void) { g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17; return (float)(g_s >> 40) / 16777216.0f; }

int cmd_bench_moe(int argc, char **argv) {
    const char *algo = NULL;
    long long E = 128, K = 8, H = 2048, I = 768, T = 1;
    int threads = omp_get_max_threads(), json = 0, hot = 0, gpu = 0, graph = 0;
    static const struct option lo[] = {{"algo", 1, 0, 'a'}, {"experts", 1, 0, 'e'}, {"topk", 1, 0, 'k'}, {"hidden", 1, 0, 'h'},
                                       {"inter", 1, 0, 'i'}, {"tokens", 1, 0, 't'}, {"threads", 1, 0, 'n'}, {"json", 0, 0, 'j'}, {"hot", 0, 0, 'H'}, {"device", 1, 0, 'D'}, {"graph", 0, 0, 'G'}, {0, 0, 0, 0}};
    optind = 2;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'a': algo = optarg; break;
        case 'e': E = atoll(optarg); break;
        case 'k': K = atoll(optarg); break;
        case 'h': H = atoll(optarg); break;
        case 'i': I = atoll(optarg); break;
        case 't': T = atoll(optarg); break;
        case 'n': threads = atoi(optarg); break;
        case 'j': json = 1; break;
        case 'H': hot = 1; break;
        case 'G': graph = 1; break;
        case 'D':
            if (strcmp(optarg, "cuda") != 0 && strcmp(optarg, "cpu") != 0) return cli_usage_error("bench moe", "--device %s, expected cpu or cuda", optarg);
            gpu = strcmp(optarg, "cuda") == 0;
            break;
        default: return cli_usage_error("bench moe", "unknown option");
        }
    }
    moq_pair_id pair;
    moq_moe_format fmt = MOQ_MOE_FMT_COUNT;
    if (cli_bench_algo(algo, &pair, &fmt) || fmt == MOQ_MOE_FMT_COUNT) {
        char list[512];
        return cli_usage_error("bench moe", "--algo %s is not one of the expert formats %s", algo ? algo : "(missing)",
                               cli_bench_algo_list(list, sizeof list, 1));
    }
    algo = moq_pairs[pair].name; /* reports name the pair */
    if (graph && !gpu) return cli_usage_error("bench moe", "--graph needs --device cuda");
    if (E < 1 || K < 1 || K > E || H < 1 || I < 1 || T < 1 || threads < 1 || E > 4096)
        return cli_usage_error("bench moe", "need 1 <= --topk <= --experts <= 4096 and --hidden, --inter, --tokens, --threads >= 1");

    /* 1. a temporary checkpoint with E random experts */
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/moq-bench-moe-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return cli_usage_error("bench moe", "cannot create a temporary directory under %s", tmp && *tmp ? tmp : "/tmp");
    moq_error err = {0};
    int rc = 0;
    moq_writer *w = NULL;
    void *keep = NULL;
    moq_checkpoint *ck = NULL;
    moq_moe **ls = NULL;
    int copies = 0;
    float *x = NULL, *y = NULL, *lg = NULL;
    void *ws = NULL;
    if (moq_writer_create(&w, dir, &err) || moq_moe_synth(w, "model.layers.0.mlp", fmt, E, H, I, 42, &keep, &err) ||
        moq_writer_finish(w, 1, &err)) { rc = cli_report(&err); goto done; }
    moq_writer_free(w), w = NULL;
    free(keep), keep = NULL;
    moq_checkpoint_opts co = moq_checkpoint_opts_default();
    co.require_config = false;
    if (moq_checkpoint_open(&ck, dir, &co, &err)) { rc = cli_report(&err); goto done; }

    const uint64_t per = moq_moe_expert_bytes(fmt, H, I), layer = per * (uint64_t)E;
    copies = T == 1 && !hot && !gpu ? (int)(((uint64_t)1 << 30) / layer + 1) : 1;
    if (copies > 16) copies = 16;
    ls = calloc((size_t)copies, sizeof(moq_moe *));
    moq_moe_opts o = moq_moe_opts_default();
    o.format = fmt, o.num_experts = E, o.routing.top_k = (int)K, o.n_threads = threads, o.router = NULL;
    o.keep_canonical = gpu != 0; /* moq_moe_gpu_open packs the experts from the canonical weights */
    for (int i = 0; i < copies; i++)
        if (moq_moe_create(&ls[i], ck, "model.layers.0.mlp", &o, &err)) { rc = cli_report(&err); goto done; }
    moq_checkpoint_free(ck), ck = NULL;
    char rmcmd[600];
    snprintf(rmcmd, sizeof rmcmd, "rm -rf '%s'", dir);
    if (system(rmcmd) != 0) fprintf(stderr, "moq bench moe: could not remove %s\n", dir);
    dir[0] = 0;

    if (gpu) {
        rc = bench_gpu(ls[0], fmt, algo, E, K, H, I, T, hot, json, graph);
        goto done;
    }
    const double bw = dram_read_gbs(threads);
    x = malloc((size_t)(T * H) * 4), y = malloc((size_t)(T * H) * 4), lg = malloc((size_t)(T * E) * 4);
    uint16_t *xb = (uint16_t *)(void *)x; /* bf16 activations, as the model runs (and linear bench's default) */
    for (long long i = 0; i < T * H; i++) { const float v = 4 * frand() - 2; uint32_t u; memcpy(&u, &v, 4); xb[i] = (uint16_t)(u >> 16); }
    const size_t wsz = moq_moe_workspace_size(ls[0], T);
    ws = malloc(wsz);
    enum { REPS = 64 };
    double tm[REPS], tc[REPS];
    int n = 0;
    const long long sets = E / K;
    const double flop = 2.0 * (double)T * (double)K * 3.0 * (double)H * (double)I;
    double moe_t, moe_c, lin32 = NAN, lin_t = NAN;
    long long mavg = T * K / E > 0 ? T * K / E : 1;
    if (T == 1) {
        /* call i: copy i % copies, expert set (i / copies) % sets: nothing reused before a full cycle */
        for (int i = 0; i < REPS; i++) {
            const long long set = hot ? 0 : (i / copies) % sets;
            for (long long e = 0; e < E; e++) lg[e] = (e / K == set) ? 4.0f + 0.01f * (float)(e % K) : frand();
            const double a = now_s(), ac = cpu_s();
            if (moq_moe_run(ls[i % copies], xb, MOQ_ELEM_BF16, 1, lg, y, MOQ_ELEM_F32, ws, wsz, &err)) { rc = cli_report(&err); goto done; }
            tm[n] = now_s() - a, tc[n++] = (cpu_s() - ac) / threads;
        }
        moe_t = median(tm + 2, n - 2), moe_c = median(tc + 2, n - 2);
    } else {
        for (long long i = 0; i < T * E; i++) lg[i] = 4 * frand();
        for (double t0 = now_s(); n < REPS && (n < 4 || now_s() - t0 < 3.0); n++) {
            const double a = now_s(), ac = cpu_s();
            if (moq_moe_run(ls[0], xb, MOQ_ELEM_BF16, T, lg, y, MOQ_ELEM_F32, ws, wsz, &err)) { rc = cli_report(&err); goto done; }
            tm[n] = now_s() - a, tc[n] = (cpu_s() - ac) / threads;
        }
        moe_t = median(tm + 1, n - 1), moe_c = median(tc + 1, n - 1);
        /* one expert's w13 alone, weights hot, at the average tokens per expert and at T */
        const moq_linear *l13 = moq_moe_expert_linear(ls[0], 0, 0);
        const long long Ms[2] = {mavg, T};
        double *outs[2] = {&lin32, &lin_t};
        for (int v = 0; v < 2; v++) {
            const size_t lws = moq_linear_workspace_size(l13, Ms[v]);
            void *lw = malloc(lws);
            float *ly = malloc((size_t)(Ms[v] * 2 * I + 64) * 4 * 2);
            double lt[REPS];
            int ln = 0;
            for (double t0 = now_s(); ln < REPS && (ln < 4 || now_s() - t0 < 1.0); ln++) {
                const double a = cpu_s();
                moq_linear_run(l13, xb, MOQ_ELEM_BF16, Ms[v], ly, MOQ_ELEM_F32, lw, lws, &err);
                lt[ln] = (cpu_s() - a) / threads; /* CPU time, like moe_c: comparable under load */
            }
            const double tt = median(lt + 1, ln - 1);
            *outs[v] = 2.0 * (double)Ms[v] * 2.0 * (double)moq_moe_inter_padded(ls[0]) * (double)H / tt / 1e9;
            free(lw), free(ly);
        }
    }
    const double sel = (double)per * (double)K;
    if (json) {
        printf("{\"algo\":\"%s\",\"experts\":%lld,\"topk\":%lld,\"hidden\":%lld,\"inter\":%lld,\"tokens\":%lld,\"threads\":%d,"
               "\"kernel_w13\":\"%s\",\"kernel_w2\":\"%s\",\"expert_bytes\":%llu,\"dram_read_gbs\":%.2f,\"time_us\":%.1f,\"cpu_us\":%.1f,",
               algo, E, K, H, I, T, threads, moq_moe_kernel_name(ls[0], 0), moq_moe_kernel_name(ls[0], 1), (unsigned long long)per, bw, moe_t * 1e6,
               moe_c * 1e6);
        if (T == 1) printf("\"selected_gbs\":%.2f,\"of_dram\":%.3f,\"selected_gbs_cpu\":%.2f,\"of_dram_cpu\":%.3f}\n", sel / moe_t / 1e9,
                           sel / moe_t / 1e9 / bw, sel / moe_c / 1e9, sel / moe_c / 1e9 / bw);
        else printf("\"gflops\":%.1f,\"gflops_cpu\":%.1f,\"linear_gflops_cpu_m%lld\":%.1f,\"linear_gflops_cpu_m%lld\":%.1f}\n", flop / moe_t / 1e9,
                    flop / moe_c / 1e9, mavg, lin32, T, lin_t);
    } else {
        char b1[32], b2[32];
        printf("moq bench moe: %s E=%lld top-%lld H=%lld I=%lld (padded %lld) T=%lld, %d threads, cpu: %s\n", algo, E, K, H, I,
               (long long)moq_moe_inter_padded(ls[0]), T, threads, moq_cpu_features_str());
        printf("kernels w13 %s, w2 %s; expert %s, layer %s x %d copies\n", moq_moe_kernel_name(ls[0], 0), moq_moe_kernel_name(ls[0], 1),
               cli_bytes(per, b1, sizeof b1), cli_bytes(layer, b2, sizeof b2), copies);
        printf("DRAM read %.2f GB/s (%d threads); times are medians; 'cpu' = process CPU time / threads (robust to a loaded VM)\n", bw, threads);
        if (T == 1)
            printf("decode: %.1f us wall, %.1f us cpu; %d experts' weights %.2f GB/s wall = %.0f %% of DRAM, %.2f GB/s cpu = %.0f %%\n", moe_t * 1e6,
                   moe_c * 1e6, (int)K, sel / moe_t / 1e9, 100.0 * sel / moe_t / 1e9 / bw, sel / moe_c / 1e9, 100.0 * sel / moe_c / 1e9 / bw);
        else
            printf("prefill: %.2f ms wall, %.2f ms cpu = %.1f / %.1f GFLOP/s; one expert's w13 linear alone (cpu): %.1f GFLOP/s at M=%lld, "
                   "%.1f GFLOP/s at M=%lld; moe = %.0f %% of the M=%lld rate\n",
                   moe_t * 1e3, moe_c * 1e3, flop / moe_t / 1e9, flop / moe_c / 1e9, lin32, mavg, lin_t, T, 100.0 * flop / moe_c / 1e9 / lin32, mavg);
    }
done:
    if (w) moq_writer_free(w);
    free(keep);
    moq_checkpoint_free(ck);
    for (int i = 0; ls && i < copies; i++) moq_moe_free(ls[i]);
    free(ls), free(x), free(y), free(lg), free(ws);
    if (dir[0]) {
        char rm[600];
        snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
        if (system(rm) != 0) fprintf(stderr, "moq bench moe: could not remove %s\n", dir);
    }
    return rc;
}
