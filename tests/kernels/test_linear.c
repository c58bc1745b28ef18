/* test_linear.c — every fast linear row of the registry against its pair's `_ref` row over the
 * shape sweep of issue #4: M = 1, 2, 3, 16, 17, 64, 128 (and 4..8); N not a multiple of 16; K of several
 * panel chunks and not a power of two (as far as the format allows); a partial last 128-row
 * FP8 block; fused shards with different scales; f32 and bf16 activations; bias. Fresh random
 * data each run, outputs poisoned with NaN first, relative Frobenius error <= 1e-5 (f32 out;
 * both sides quantize the activation bit-identically, so only accumulation order differs:
 * f32 sums of K <= 400 terms, ~sqrt(K)·2^-24 ≈ 1e-6), NaN never passes. bf16 outputs: within
 * 2^-8 (one bf16 rounding of nearly equal f32 values). The AVX2 and AVX-512 NVFP4 W4A4 integer rows
 * must also agree bit for bit (test_nvfp4_maddubs_equals_vnni). Rows whose CPU features are missing are
 * skipped with a message; the registry's choice under cpu masks is checked too. The packed GEMM
 * rows are also run on shapes that cross their cache blocks (test_gemm_cache_blocks).
 * The FP8 per-tensor / per-channel rows also run on SmolLM2-135M's shapes and activation ranges
 * against the fp64 oracle element by element (test_fp8_model_shapes).
 *
 * Test names read linear/<row>/x_<dtype>.y_<dtype>/m<M>_n<N>_k<K> (STYLE.md §10). */
#include "tu.h"

#include <time.h>

#include "klin.h"

static uint8_t *g_corr;

static tpair tpair_of(moq_pair_id p) {
    static const tpair map[MOQ_PAIR_COUNT] = {
        [MOQ_PAIR_F32] = TP_F32, [MOQ_PAIR_BF16] = TP_BF16, [MOQ_PAIR_F16] = TP_F16, [MOQ_PAIR_FP8_TENSOR] = TP_FP8_TENSOR,
        [MOQ_PAIR_FP8_ROW] = TP_FP8_ROW, [MOQ_PAIR_FP8_BLK128] = TP_FP8_BLK128, [MOQ_PAIR_NVFP4] = TP_NVFP4,
        [MOQ_PAIR_NVFP4_W4A16] = TP_NVFP4_W4A16, [MOQ_PAIR_MXFP8] = TP_MXFP8,
    };
    return map[p];
}

static const moq_kernel *ref_row(moq_pair_id p) {
    for (size_t i = 0; i < moq_kernel_table_len; i++)
        if (moq_kernel_table[i].pair == p && moq_kernel_table[i].target == MOQ_TARGET_CPU_REF) return &moq_kernel_table[i];
    return NULL;
}

/* Shapes per K-granularity: N not a multiple of 16, K spanning panel chunks of 256. */
/* Whether CPU row k (reference or fast) is of pair p, runs on this CPU (feat) and takes w. */
static bool cpu_row_runs(const moq_kernel *k, tpair p, uint32_t feat, const moq_weight *w) {
    char why[160];
    return tpair_of(k->pair) == p && k->target != MOQ_TARGET_CUDA_SM90 && (k->need & feat) == k->need && (!k->supports || k->supports(w, why, sizeof why));
}

static void shapes_for(tpair p, int64_t NK[2][2]) {
    switch (p) {
    case TP_FP8_BLK128: NK[0][0] = 200, NK[0][1] = 384, NK[1][0] = 130, NK[1][1] = 128; break; /* partial last N block */
    case TP_NVFP4: case TP_NVFP4_W4A16: NK[0][0] = 40, NK[0][1] = 272, NK[1][0] = 23, NK[1][1] = 48; break;
    case TP_MXFP8: NK[0][0] = 36, NK[0][1] = 288, NK[1][0] = 17, NK[1][1] = 96; break;
    case TP_BF16: NK[0][0] = 35, NK[0][1] = 300, NK[1][0] = 17, NK[1][1] = 78; break; /* bf16dot needs K even */
    default: NK[0][0] = 35, NK[0][1] = 300, NK[1][0] = 17, NK[1][1] = 77; break;
    }
}

static void check_row(const moq_kernel *k, int64_t M, int64_t N, int64_t K, moq_elem xe, moq_elem ye) {
    const tpair p = tpair_of(k->pair);
    tw t = tw_make(p, N, K, p == TP_FP8_TENSOR || p == TP_NVFP4 || p == TP_NVFP4_W4A16 ? 3 : 1, 1);
    char why[160];
    if (k->supports && !k->supports(&t.w, why, sizeof why)) { /* the registry would not pick it */
        if (M == 1) print_message("%s skips n=%lld k=%lld: %s\n", k->name, (long long)N, (long long)K, why);
        tw_free(&t);
        return;
    }
    float *x = malloc((size_t)(M * K) * 4);
    uint16_t *xb = malloc((size_t)(M * K) * 2);
    fill(x, (size_t)(M * K), urand(0.1f, 10.0f));
    for (int64_t i = 0; i < M * K; i++) { uint32_t u; memcpy(&u, &x[i], 4); xb[i] = (uint16_t)(u >> 16); }
    const void *xin = xe == MOQ_ELEM_BF16 ? (const void *)xb : (const void *)x;
    const size_t n = (size_t)(M * N);
    float *yr = malloc(n * 4), *yf = malloc(n * 4);
    uint16_t *yb = malloc(n * 2);
    double *want = malloc(n * sizeof(double));
    const uint8_t *corr = (M & 1) ? g_corr : NULL; /* both NVFP4 reciprocal forms */
    klin_run(&t, ref_row(k->pair)->name, xin, xe, M, yr, MOQ_ELEM_F32, ~0u, corr, NULL);
    for (size_t i = 0; i < n; i++) want[i] = yr[i];
    char what[160];
    snprintf(what, sizeof what, "linear/%s/x_%s.y_%s/m%lld_n%lld_k%lld", k->name, moq_elem_name(xe), moq_elem_name(ye), (long long)M,
             (long long)N, (long long)K);
    if (ye == MOQ_ELEM_F32) {
        klin_run(&t, k->name, xin, xe, M, yf, ye, ~0u, corr, NULL);
        klin_err(what, yf, want, n, 1e-5);
    } else {
        klin_run(&t, k->name, xin, xe, M, yb, ye, ~0u, corr, NULL);
        for (size_t i = 0; i < n; i++) { uint32_t u = (uint32_t)yb[i] << 16; memcpy(&yf[i], &u, 4); }
        klin_err(what, yf, want, n, 1.0 / 256);
    }
    free(x), free(xb), free(yr), free(yf), free(yb), free(want);
    tw_free(&t);
}

static void test_every_fast_row(void **state) {
    (void)state;
    static const int64_t Ms[] = {1, 2, 3, 16, 17, 64, 128};
    const uint32_t feat = moq_cpu_features();
    int rows = 0, skipped = 0;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->target == MOQ_TARGET_CPU_REF || k->target == MOQ_TARGET_CUDA_SM90) continue; /* CUDA: test_linear_cuda.c */
        if ((k->need & feat) != k->need) {
            print_message("skip %s: cpu (%s) lacks its features\n", k->name, moq_cpu_features_str());
            skipped++;
            continue;
        }
        rows++;
        int64_t NK[2][2];
        shapes_for(tpair_of(k->pair), NK);
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (int s = 0; s < 2; s++) {
                const int64_t M = Ms[mi] >= 64 && s == 0 ? Ms[mi] / 2 : Ms[mi]; /* keep the ASan run short */
                check_row(k, M, NK[s][0], NK[s][1], (mi + s) & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
            }
        check_row(k, 5, NK[1][0], NK[1][1], MOQ_ELEM_F32, MOQ_ELEM_BF16);
        check_row(k, 17, NK[0][0], NK[0][1], MOQ_ELEM_F32, MOQ_ELEM_BF16); /* bf16 y from the prefill epilogues */
        /* bf16 x at M = 6 and 8: the bf16dot decode path runs up to M = 8 (exact bf16 activations only) */
        check_row(k, 6, NK[1][0], NK[1][1], MOQ_ELEM_BF16, MOQ_ELEM_F32);
        check_row(k, 8, NK[0][0], NK[0][1], MOQ_ELEM_BF16, MOQ_ELEM_F32);
        /* M = 4, 7, 8 with f32 x: the small-M passes (two tiles per pass for 2..8 tokens on the
         * AVX-512 W4A4 row; 6 + 1 and 6 + 2 token chunks on the AVX2 one), an odd last tile at N = 40 */
        check_row(k, 4, NK[0][0], NK[0][1], MOQ_ELEM_F32, MOQ_ELEM_F32);
        check_row(k, 7, NK[0][0], NK[0][1], MOQ_ELEM_F32, MOQ_ELEM_F32);
        check_row(k, 8, NK[1][0], NK[1][1], MOQ_ELEM_F32, MOQ_ELEM_F32);
        /* M = 12: two token groups of 6 over 256-k chunks (the AVX-512 k4bf16dot and small-M passes) */
        check_row(k, 12, NK[0][0], NK[0][1], MOQ_ELEM_F32, MOQ_ELEM_F32);
        /* M = 70: k4bf16dot's token blocks of 64, a partial second one */
        check_row(k, 70, NK[1][0], NK[1][1], MOQ_ELEM_BF16, MOQ_ELEM_F32);
    }
    print_message("%d fast rows checked, %d skipped\n", rows, skipped);
}

/* The next CPU *_gemm row from table index *i on that this CPU runs (NULL after the last). */
static const moq_kernel *next_cpu_gemm_row(size_t *i) {
    const uint32_t feat = moq_cpu_features();
    for (; *i < moq_kernel_table_len; (*i)++) {
        const moq_kernel *k = &moq_kernel_table[*i];
        if (strstr(k->name, "_gemm") && k->target != MOQ_TARGET_CUDA_SM90 && (k->need & feat) == k->need) {
            (*i)++;
            return k;
        }
    }
    return NULL;
}

/* The packed GEMM of the *_gemm rows (AVX2: 128x128 and MXFP8 at M > 16, FP8 per-tensor / per-channel
 * at M >= 48; AVX-512: M > 64; the other M run the k4fma and small-M paths, covered by the sweep;
 * x and y alternate f32 / bf16 over the rows) blocks the work into items of 256 output rows ×
 * <= 512 tokens and panels of 128 columns: M = 520 (two token blocks of 264 + 256, a partial 12-token
 * group), N = 300 (two row blocks, the second of 3 tiles: an odd one for the AVX-512 32-row
 * micro-kernel, and a partial last 128-row FP8 block) and K over a panel boundary reach every edge. */
static void test_gemm_cache_blocks(void **state) {
    (void)state;
    int rows = 0;
    size_t i = 0;
    for (const moq_kernel *k; (k = next_cpu_gemm_row(&i));) {
        const tpair p = tpair_of(k->pair);
        check_row(k, 520, 300, p == TP_FP8_BLK128 ? 256 : 160, rows & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, rows & 2 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32);
        rows++;
    }
    print_message("%d gemm rows checked on cache-block edges\n", rows);
}

/* The AVX2 GEMM's tile-major items decode a 16-row tile for up to 4096 columns at once and keep C in
 * registers over that chunk; K = 4352 (K4 > 4096) makes a second chunk of 256 columns, whose sums
 * are added to the first through the [MC][16] tile buffer. M = 100 (16 full 6-token groups and a
 * 4-token one), N = 20 (a full and a partial tile). Every CPU *_gemm row (the AVX-512 ones use
 * other blocks; the shape costs them nothing). */
static void test_gemm_k_chunks(void **state) {
    (void)state;
    int rows = 0;
    size_t i = 0;
    for (const moq_kernel *k; (k = next_cpu_gemm_row(&i));) {
        check_row(k, 100, 20, 4352, rows & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
        rows++;
    }
    print_message("%d gemm rows checked over two K chunks\n", rows);
}

/* MXFP8 weight block scales far above 2^0 (codes 135..146: 2^8..2^19): every MXFP8 row, on the
 * decode, small-M and GEMM paths (a panel decoder that folded 2^120 into the e8m0 scale overflowed
 * there). */
static void test_mxfp8_large_weight_scales(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    g_mx_scale_lo = 135;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->target == MOQ_TARGET_CPU_REF || k->target == MOQ_TARGET_CUDA_SM90 || (k->need & feat) != k->need || k->pair != MOQ_PAIR_MXFP8) continue;
        static const int64_t Ms[] = {1, 11, 21, 70}; /* decode, small-M, AVX2 GEMM, AVX-512 GEMM */
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) check_row(k, Ms[mi], 36, 288, MOQ_ELEM_F32, MOQ_ELEM_F32);
    }
    g_mx_scale_lo = 118;
}

/* Block scales far from 2^0 on both sides (issue 14): MXFP8 e8m0 codes and FP8 128x128 f32 weight
 * scales near 2^-100 or 2^+100, activation blocks whose scales are near 2^-30..2^-50 or 2^+30, so that
 * weight scale × activation block scale leaves the f32 range (below 2^-126, even 2^-149, or above
 * 2^128) while every output stays a normal f32. Cases (per 32- or 128-k block, drawn per row / token):
 *   under  weights ≈ 2^-100 (e4m3 codes 128..448, positive), activations ≈ 448·2^f with f the block
 *          scale's exponent; the product of the two scales 2^-152..2^-147 (MXFP8) or 2^-144..2^-136
 *          (FP8 128x128: an f32 subnormal keeps 6..13 bits); y ≈ 2^-123 or 2^-113;
 *   brief  the example of the issue: weights ≈ 2^-100, activation scales ≈ 2^-30 (product ≈ 2^-130:
 *          exact for e8m0, a 19-bit subnormal for 128x128), signed codes;
 *   over   weights ≈ 2^+100, activation scales ≈ 2^+26..2^+28 (product up to 2^132, past FLT_MAX):
 *          each block's first element is a spike (the block maximum) against a zero weight code, the
 *          other activations ≈ 2^-6 of it and 1 in 8 weights a subnormal code, so y ≈ 2^120.
 * Every runnable row of the two pairs (`_ref` too) against the fp64 oracle of kref.h and against the
 * `_ref` row, element by element: |diff| <= (K + 3)·2^-24·Σ|products| + 2^-23·|y| (f32 sums, as
 * test_fp8_model_shapes) + (K + 3)·2^-150 (sums that pass through the subnormal range round to
 * 2^-149). M = 1, 2, 3, 5 (the k4fma passes), 21 (AVX2 GEMM) and 70 (AVX-512 GEMM). */
typedef enum { XS_UNDER, XS_BRIEF, XS_OVER } xs_case;

static void xs_fill(tw *t, xs_case c, float *x, int64_t M) {
    const int64_t N = t->w.N, K = t->w.K, bk = t->p == TP_MXFP8 ? 32 : 128;
    uint8_t *q = t->q;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            uint8_t v = (uint8_t)(0x70 + rnd() % 15); /* 128..448 */
            if (c == XS_BRIEF) v = (uint8_t)(t_rand_e4m3() & 0xFF);
            if (c == XS_OVER) v = k % bk == 0 || rnd() % 8 ? 0 : (uint8_t)(1 + rnd() % 3); /* spike column: 0 */
            q[n * K + k] = v;
        }
    const int wlo = c == XS_OVER ? 100 : -103; /* weight scale exponents wlo..wlo + 3 */
    if (t->p == TP_MXFP8) {
        uint8_t *s = t->scale;
        for (int64_t i = 0; i < N * K / 32; i++) s[i] = (uint8_t)(127 + wlo + (int)(rnd() % 4));
    } else {
        float *s = t->scale;
        for (int64_t i = 0; i < (N + 127) / 128 * (K / 128); i++) s[i] = ldexpf(urand(1.0f, 2.0f), wlo + (int)(rnd() % 4));
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < K / bk; b++) {
            int f; /* the activation block scale ≈ 2^f */
            if (c == XS_UNDER) f = t->p == TP_MXFP8 ? -49 + (int)(rnd() % 3) : -40 + (int)(rnd() % 5);
            else if (c == XS_BRIEF) f = -31 + (int)(rnd() % 3);
            else f = 26 + (int)(rnd() % 3);
            for (int64_t i = 0; i < bk; i++) {
                float v = ldexpf(urand(0.875f, 1.0f) * 448.0f, f);
                if (c == XS_BRIEF && rnd() % 2) v = -v * urand(0.01f, 1.0f);
                if (c == XS_OVER && i > 0) v = ldexpf(urand(1.0f, 2.0f), f - 6);
                x[m * K + b * bk + i] = v;
            }
        }
}

static void test_block_scale_extremes(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    static const tpair ps[] = {TP_MXFP8, TP_FP8_BLK128};
    static const char *const cname[] = {"under", "brief", "over"};
    static const int64_t Ms[] = {1, 2, 3, 5, 21, 70};
    const int64_t K = 1024, Mmax = 70;
    int runs = 0, bad_runs = 0;
    for (size_t pi = 0; pi < 2; pi++)
        for (int c = XS_UNDER; c <= XS_OVER; c++) {
            const tpair p = ps[pi];
            const int64_t N = p == TP_MXFP8 ? 36 : 136; /* a partial last tile; 128x128: a partial row block */
            tw t = tw_make(p, N, K, 1, 0);
            float *x = malloc((size_t)(Mmax * K) * 4), *xa = malloc((size_t)(Mmax * K) * 4), *y = malloc((size_t)(Mmax * N) * 4);
            float *yr = malloc((size_t)(Mmax * N) * 4);
            double *want = malloc((size_t)(Mmax * N) * sizeof(double)), *mass = malloc((size_t)(Mmax * N) * sizeof(double));
            xs_fill(&t, (xs_case)c, x, Mmax);
            tw ta = t; /* |w| and |x|: the oracle then gives Σ|products| */
            ta.q = malloc((size_t)(N * K));
            for (int64_t i = 0; i < N * K; i++) ((uint8_t *)ta.q)[i] = ((const uint8_t *)t.q)[i] & 0x7F;
            ta.w.q = ta.q;
            for (int64_t i = 0; i < Mmax * K; i++) xa[i] = fabsf(x[i]);
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                const int64_t M = Ms[mi];
                tw_oracle(&t, x, M, want);
                tw_oracle(&ta, xa, M, mass);
                for (int64_t j = 0; j < M * N && c != XS_BRIEF; j++) /* under, over: every output a normal f32 */
                    if (!(fabs(want[j]) >= 0x1p-126 && fabs(want[j]) <= 0x1p127))
                        fail_msg("%s/%s: oracle y[%lld] = %g is not a normal f32 (test data); seed %u", tpair_name[p], cname[c], (long long)j, want[j], g_seed);
                const moq_kernel *kr = ref_row(moq_pair_of(&t.w));
                klin_run(&t, kr->name, x, MOQ_ELEM_F32, M, yr, MOQ_ELEM_F32, ~0u, NULL, NULL);
                for (size_t i = 0; i < moq_kernel_table_len; i++) {
                    const moq_kernel *k = &moq_kernel_table[i];
                    if (!cpu_row_runs(k, p, feat, &t.w)) continue;
                    klin_run(&t, k->name, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ~0u, NULL, NULL);
                    runs++;
                    int64_t nbad = 0, first = -1;
                    for (int64_t j = 0; j < M * N; j++) {
                        const double tol = (double)(K + 3) * (0x1p-24 * mass[j] + 0x1p-150) + 0x1p-23 * fabs(want[j]);
                        if (!(fabs((double)y[j] - want[j]) <= tol && fabs((double)y[j] - (double)yr[j]) <= tol + 0x1p-24 * fabs(want[j]))) {
                            if (first < 0) first = j;
                            nbad++;
                        }
                    }
                    if (nbad) {
                        bad_runs++;
                        print_message("%s %s/%s m%lld_n%lld_k%lld: %lld of %lld outputs off; y[%lld] = %.9g, _ref %.9g, fp64 oracle %.9g\n", k->name,
                                      tpair_name[p], cname[c], (long long)M, (long long)N, (long long)K, (long long)nbad, (long long)(M * N),
                                      (long long)first, (double)y[first], (double)yr[first], want[first]);
                    }
                }
            }
            free(x), free(xa), free(y), free(yr), free(want), free(mass), free(ta.q);
            tw_free(&t);
        }
    print_message("%d row runs on extreme block scales, %d off\n", runs, bad_runs);
    if (bad_runs) fail_msg("%d row runs off the fp64 oracle / _ref on extreme block scales; seed %u", bad_runs, g_seed);
}

/* e4m3 weights that are mostly subnormal: the exact decoders' table for m·2^-9 must be right. */
static void test_e4m3_subnormal_weights(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    g_small_e4m3 = 1;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->target == MOQ_TARGET_CPU_REF || k->target == MOQ_TARGET_CUDA_SM90 || (k->need & feat) != k->need || moq_pairs[k->pair].w->elem != MOQ_ELEM_E4M3) continue;
        for (int64_t M = 1; M <= 5; M += 4) check_row(k, M, 33, 256, MOQ_ELEM_F32, MOQ_ELEM_F32);
    }
    g_small_e4m3 = 0;
}

/* e4m3 weight codes 0x7F / 0xFF are NaN (e4m3fn: S.1111.111): every row, fast or `_ref`, gives NaN in
 * exactly the output rows that hold one, for every token, on the decode (M <= 4), panel and GEMM
 * (M = 96: every AVX2 e4m3 pair's packed GEMM, its vector epilogue in a full tile, scalar in the last) paths.
 * A corrupt checkpoint must not turn into finite garbage (issue 10: the model runner names the
 * first module whose output is not finite). */
static void test_e4m3_nan_codes(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    int rows = 0;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->target == MOQ_TARGET_CUDA_SM90 || (k->need & feat) != k->need || moq_pairs[k->pair].w->elem != MOQ_ELEM_E4M3) continue;
        const tpair p = tpair_of(k->pair);
        int64_t NK[2][2];
        shapes_for(p, NK);
        const int64_t N = NK[0][0], K = NK[0][1], n0 = 3, n1 = N - 2;
        tw t = tw_make(p, N, K, 1, 0);
        char why[160];
        if (k->supports && !k->supports(&t.w, why, sizeof why)) {
            tw_free(&t);
            continue;
        }
        ((uint8_t *)t.q)[n0 * K + 5] = 0x7F;
        ((uint8_t *)t.q)[n1 * K + K - 1] = 0xFF;
        rows++;
        static const int64_t Ms[] = {1, 4, 17, 96};
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t M = Ms[mi];
            float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
            fill(x, (size_t)(M * K), urand(0.1f, 10.0f));
            klin_run(&t, k->name, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ~0u, g_corr, NULL);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++)
                    if ((isnan(y[m * N + n]) != 0) != (n == n0 || n == n1))
                        fail_msg("%s m=%lld: y[%lld, %lld] = %g; NaN expected only in rows %lld and %lld", k->name, (long long)M, (long long)m,
                                 (long long)n, (double)y[m * N + n], (long long)n0, (long long)n1);
            free(x), free(y);
        }
        tw_free(&t);
    }
    assert_true(rows >= 4); /* the four e4m3 pairs' _ref rows at least */
}

/* The named row (it must exist), or NULL with a skip message on a CPU that lacks its features. */
static const moq_kernel *runnable_row(const char *name) {
    const moq_kernel *k = moq_kernel_find(name);
    assert_non_null(k);
    if ((k->need & moq_cpu_features()) != k->need) {
        print_message("skip %s: cpu (%s) lacks its features\n", k->name, moq_cpu_features_str());
        return NULL;
    }
    return k;
}

/* The AVX2 W4A16 row, or NULL (with a skip message) on a CPU without AVX2. */
static const moq_kernel *w4a16_avx2_row(void) { return runnable_row("cpu_avx2_nvfp4_w4a16_shuffma"); }

/* The AVX2 NVFP4 W4A16 decode row at every M it serves (1..8: token groups of 4, k-parity chains at
 * M <= 2) and at 9 (handed to the panel), bf16 and f32 x, against the _ref row. */
static void test_nvfp4_w4a16_avx2_decode(void **state) {
    (void)state;
    const moq_kernel *k = w4a16_avx2_row();
    if (!k) return;
    for (int64_t M = 1; M <= 9; M++) check_row(k, M, 40 + M, 272, M & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
}

/* The AVX2 W4A16 M = 1 integer path's two block-scale decodes, bit for bit: the short one (f32 bits
 * code << 20, taken when every scale code of a tile pair is 0x00..0x7E, the pack's flag, and every x
 * block's e <= 8) and the general one (through f16; taken for x blocks of 2^28 and more, and for
 * tiles holding a -0 scale code 0x80). y(x · 2^32) must be y(x) · 2^32 exactly (the integer sums do
 * not change with a power of two, the f32 steps neither overflow nor underflow), and a -0 scale
 * code must give what +0 gives; subnormal and zero scale codes on the short path are against the
 * _ref row. */
static void test_nvfp4_w4a16_avx2_scale_paths(void **state) {
    (void)state;
    const moq_kernel *k = w4a16_avx2_row();
    if (!k) return;
    const int64_t N = 64, K = 272, nb = K / 16;
    tw t = tw_make(TP_NVFP4_W4A16, N, K, 1, 0);
    uint8_t *sf = t.scale;
    static const uint8_t small[] = {0x00, 0x01, 0x03, 0x07, 0x08, 0x09};
    for (int64_t n = 0; n < N; n += 3) sf[n * nb + (n % nb)] = small[n % 6];
    sf[5 * nb + 2] = 0x00; /* row 5: tile 0 */
    float *x = malloc((size_t)K * 4), *x2 = malloc((size_t)K * 4), *y = malloc((size_t)N * 4), *y2 = malloc((size_t)N * 4);
    double *want = malloc((size_t)N * sizeof(double));
    fill(x, (size_t)K, urand(0.1f, 10.0f));
    for (int64_t i = 0; i < K; i++) x2[i] = (i % 3 == 1 ? -x[i] : x[i]) * (i / 16 == 4 ? 0x1p-12f : 1.0f);
    for (int64_t i = 0; i < K; i++) x[i] = x2[i], x2[i] = x[i] * 0x1p32f;
    klin_run(&t, ref_row(MOQ_PAIR_NVFP4_W4A16)->name, x, MOQ_ELEM_F32, 1, y2, MOQ_ELEM_F32, ~0u, NULL, NULL);
    for (int64_t n = 0; n < N; n++) want[n] = y2[n];
    klin_run(&t, k->name, x, MOQ_ELEM_F32, 1, y, MOQ_ELEM_F32, ~0u, NULL, NULL); /* short decode */
    klin_err("linear/cpu_avx2_nvfp4_w4a16_shuffma/w_nvfp4.a_f32/m1_scale_codes_small", y, want, (size_t)N, 1e-5);
    klin_run(&t, k->name, x2, MOQ_ELEM_F32, 1, y2, MOQ_ELEM_F32, ~0u, NULL, NULL); /* x blocks of 2^32: general decode */
    for (int64_t n = 0; n < N; n++)
        if (y2[n] != y[n] * 0x1p32f) fail_msg("m1 x*2^32: y[%lld] = %a, expected %a (y(x) * 2^32)", (long long)n, (double)y2[n], (double)(y[n] * 0x1p32f));
    sf[5 * nb + 2] = 0x80; /* -0: tiles 0 and 1 take the general decode */
    klin_run(&t, k->name, x, MOQ_ELEM_F32, 1, y2, MOQ_ELEM_F32, ~0u, NULL, NULL);
    for (int64_t n = 0; n < N; n++)
        if (y2[n] != y[n]) fail_msg("m1 scale code 0x80: y[%lld] = %a, expected %a (as with 0x00)", (long long)n, (double)y2[n], (double)y[n]);
    free(x), free(x2), free(y), free(y2), free(want);
    tw_free(&t);
}

/* The AVX2 W4A16 M = 1 integer path (x as three 8-bit digits per 16-block on the block's power of
 * two) on activations it rounds (in-block ranges of 2^27, 2^-20 .. 2^20 from block to block), an all-zero
 * block, negatives, bf16 and f32 x; and on the x it hands to the f32 path (a block maximum of 2^110 or
 * 2^-110), against the _ref row. */
static void test_nvfp4_w4a16_avx2_x_ranges(void **state) {
    (void)state;
    const moq_kernel *k = w4a16_avx2_row();
    if (!k) return;
    const int64_t N = 37, K = 272;
    tw t = tw_make(TP_NVFP4_W4A16, N, K, 1, 1);
    float *x = malloc((size_t)K * 4), *y = malloc((size_t)N * 4), *yr = malloc((size_t)N * 4);
    uint16_t *xb = malloc((size_t)K * 2);
    double *want = malloc((size_t)N * sizeof(double));
    for (int c = 0; c < 4; c++) {
        fill(x, (size_t)K, urand(0.1f, 10.0f));
        for (int64_t i = 0; i < K; i++) {
            const int64_t b = i / 16;
            if (i % 3 == 1) x[i] = -x[i];
            if (b == 2) x[i] = 0.0f;                                         /* an all-zero block */
            if (b == 3 && i % 5 == 0) x[i] *= 0x1p-27f;                      /* 2^27 below the block's largest */
            if (b >= 4 && b < 14) x[i] *= ldexpf(1.0f, (int)(4 * (b - 9))); /* blocks from 2^-20 to 2^16 */
            if (b == 15 && c == 2) x[i] *= 0x1p110f;                        /* -> the f32 path */
            if (b == 16 && c == 3) x[i] *= 0x1p-110f;                       /* -> the f32 path */
        }
        for (int64_t i = 0; i < K; i++) { uint32_t u; memcpy(&u, &x[i], 4); xb[i] = (uint16_t)(u >> 16); }
        const moq_elem xe = c & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32;
        const void *xin = xe == MOQ_ELEM_BF16 ? (const void *)xb : (const void *)x;
        klin_run(&t, ref_row(MOQ_PAIR_NVFP4_W4A16)->name, xin, xe, 1, yr, MOQ_ELEM_F32, ~0u, NULL, NULL);
        for (int64_t n = 0; n < N; n++) want[n] = yr[n];
        klin_run(&t, k->name, xin, xe, 1, y, MOQ_ELEM_F32, ~0u, NULL, NULL);
        char what[96];
        snprintf(what, sizeof what, "linear/%s/x_ranges_case%d", k->name, c);
        klin_err(what, y, want, (size_t)N, 1e-5);
    }
    free(x), free(y), free(yr), free(xb), free(want);
    tw_free(&t);
}

/* The NVFP4 W4A4 block dot products are exact integers on both the AVX2 (vpmaddubsw) and the
 * AVX-512 (vpdpbusd) rows, and every f32 step after them is the same operation in the same order:
 * the two rows must agree bit for bit (f32 and bf16 x, bias, fused shards, M across the token
 * chunks of both). Runs where the CPU has both. */
static void test_nvfp4_maddubs_equals_vnni(void **state) {
    (void)state;
    const uint32_t f = moq_cpu_features();
    if (!(f & MOQ_CPU_AVX512VNNI) || !(f & MOQ_CPU_AVX512) || !(f & MOQ_CPU_AVX2)) {
        print_message("skip: cpu (%s) lacks avx512vnni\n", moq_cpu_features_str());
        return;
    }
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 33, 1, 2, 6};
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        /* the last three: several chunks of tiles (test_nvfp4_w4a4_chunks) */
        const int64_t M = Ms[mi], N = mi < 10 ? 40 + (int64_t)mi : 217 - (int64_t)mi, K = 272;
        tw t = tw_make(TP_NVFP4, N, K, 3, 1);
        float *x = malloc((size_t)(M * K) * 4), *ya = malloc((size_t)(M * N) * 4), *yb = malloc((size_t)(M * N) * 4);
        fill(x, (size_t)(M * K), urand(0.1f, 10.0f));
        klin_run(&t, "cpu_avx2_nvfp4_w4a4_maddubs", x, MOQ_ELEM_F32, M, ya, MOQ_ELEM_F32, ~0u, g_corr, NULL);
        klin_run(&t, "cpu_avx512_nvfp4_w4a4_vnni16", x, MOQ_ELEM_F32, M, yb, MOQ_ELEM_F32, ~0u, g_corr, NULL);
        for (int64_t i = 0; i < M * N; i++)
            if (memcmp(&ya[i], &yb[i], 4) != 0)
                fail_msg("m=%lld: y[%lld, %lld] avx2 %a, avx512 vnni %a", (long long)M, (long long)(i / N), (long long)(i % N), (double)ya[i],
                         (double)yb[i]);
        free(x), free(ya), free(yb);
        tw_free(&t);
    }
}

/* The NVFP4 W4A4 rows hand their 16-row tiles to the threads in chunks of 4, each thread claiming
 * its next chunk before it starts the current one (the weight prefetch runs on into it,
 * tile_prefetch.h); the AVX2 row runs M <= 2 in one pass over K, M >= 3 in two. N = 217 (14
 * tiles: 3 full chunks, a last chunk of 2 tiles, the last tile partial), 2 threads, each path
 * (VNNI: M = 6..8 take the tile pairs, N = 233 an odd last tile), bf16 and f32 x, against the
 * _ref row; y starts as NaN, so a tile nobody ran fails. */
static void test_nvfp4_w4a4_chunks(void **state) {
    (void)state;
    static const char *rows[] = {"cpu_avx2_nvfp4_w4a4_maddubs", "cpu_avx512_nvfp4_w4a4_vnni16"};
    static const int64_t Ms[] = {1, 2, 3, 6, 8, 13};
    for (size_t r = 0; r < 2; r++) {
        const moq_kernel *k = runnable_row(rows[r]);
        if (!k) continue;
        for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
            check_row(k, Ms[i], 217, 272, i & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
        for (int64_t M = 6; M <= 8; M++) /* 15 tiles: the VNNI tile pairs' odd last tile, alone in the last chunk */
            check_row(k, M, 233, 272, M & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
    }
}

/* The e4m3 k4fma rows (every FP8 pair and MXFP8, both tiers) take their tiles in chunks claimed one
 * ahead like the NVFP4 rows (test above) and prefetch only in the first pass over a tile when M
 * needs several (AVX2: 6 tokens per pass, 3 block-scaled, and for the unblocked pairs groups of 8
 * tokens, or a last 7, per 8-row half: M = 7, 8, 13 = 8 + 5, 15 = 8 + 7, 24, with a vector epilogue for
 * whole halves of f32 and bf16 y; AVX-512: 8, 6). N = 217 (14 tiles, the
 * last partial), K = 256 (two 128-blocks, eight MXFP8 blocks), 2 threads, f32 and bf16 x, against
 * the _ref row with y poisoned to NaN. */
static void test_fp8_k4fma_chunks(void **state) {
    (void)state;
    static const char *rows[] = {"cpu_avx2_fp8_tensor_k4fma",   "cpu_avx2_fp8_row_k4fma",   "cpu_avx2_fp8_blk128_k4fma",
                                 "cpu_avx2_mxfp8_k4fma",        "cpu_avx512_fp8_tensor_k4fma", "cpu_avx512_fp8_row_k4fma",
                                 "cpu_avx512_fp8_blk128_k4fma", "cpu_avx512_mxfp8_k4fma"};
    static const int64_t Ms[] = {1, 2, 4, 7, 13, 8, 15, 24};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const moq_kernel *k = runnable_row(rows[r]);
        if (!k) continue;
        for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
            check_row(k, Ms[i], 217, 256, i & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
        check_row(k, 8, 217, 256, MOQ_ELEM_F32, MOQ_ELEM_BF16); /* bf16 y: AVX2 half_tokens' vector epilogue (the last half: scalar) */
    }
}

/* The AVX-512 panel rows (every pair; BF16 weights at M <= 2 prefetch along the chunks) take tiles
 * the same way. N = 233 (15 tiles: an odd last tile for the BF16 two-tile pass at M = 2..8, the last
 * partial), the one-tile GEMV (bf16 x), the f32 panel (f32 x: the lm_head) and prefill M. */
static void test_panel512_chunks(void **state) {
    (void)state;
    static const char *rows[] = {"cpu_avx512_bf16_bf16dot", "cpu_avx512_bf16_dequant_fma", "cpu_avx512_fp8_tensor_dequant_fma"};
    static const int64_t Ms[] = {1, 1, 2, 3, 9, 17};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const moq_kernel *k = runnable_row(rows[r]);
        if (!k) continue;
        for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
            check_row(k, Ms[i], 233, 256, i & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
    }
}

/* The AVX2 GEMV of the 16-bit and f32 pairs (linear_dequant_panel_avx2.c gemv_tiles, M <= 32) at
 * every token-group shape: M = 1, 2 (k-parity chains), 3..6 (one group, the BF16 4-column step in
 * assembly), 7..32 (ceil(M / 6) groups over K-chunks of 256: 7 = 4 + 3, 13 = 5 + 4 + 4, 32 = 6 + 6 +
 * 5 + 5 + 5 + 5) and 33 (the panel); N = 35 (a partial last tile); K = 7 (no whole 4-column step),
 * 301 (two K-chunks, a 1-column tail) and 390 (a 2-column tail); f32 and bf16 x, against _ref. */
static void test_avx2_gemv_groups(void **state) {
    (void)state;
    static const char *rows[] = {"cpu_avx2_bf16_dequant_fma", "cpu_avx2_f16_dequant_fma", "cpu_avx2_f32_fma"};
    static const int64_t Ks[] = {7, 301, 390};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const moq_kernel *k = runnable_row(rows[r]);
        if (!k) continue;
        for (int64_t M = 1; M <= 33; M++)
            for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++)
                if (M <= 17 || M % 8 == 0 || M >= 31 || i == 1)
                    check_row(k, M, 35, Ks[i], (M + (int64_t)i) & 1 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, MOQ_ELEM_F32);
    }
}

/* FP8 per-tensor (static) and per-channel/per-token rows on activations shaped like SmolLM2-135M's
 * (where the CPU tiers' perplexities differ by a few %): fused q/k/v [960 x 576] in 3 shards of
 * different input scales, down_proj [576 x 1536]; M = 32 and 21 (moq eval's prefill chunks) and 1;
 * token 0 an attention-sink row (a few channels ~10^3 x the others, clamped at ±448 by the static
 * scale), the other tokens spread over the e4m3 range with a few outlier channels. Every row of
 * the two pairs (`_ref` included) against the fp64 oracle of kref.h, element by element: a sum of
 * K exact products in any order is within (K + 3)·2^-24·Σ|products| of the exact sum (plus the
 * epilogue roundings), which Frobenius errors would hide in the rows that cancel. */
static void fp8_model_like_x(float *x, int64_t M, int64_t K, float typ) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float v = urand(-typ, typ) * (rnd() % 8 == 0 ? 4.0f : 1.0f);
            if (k % 97 == 5) v *= 40.0f; /* outlier channels */
            if (m == 0) v = k % 191 == 7 ? (k & 1 ? -1.0f : 1.0f) * urand(500, 2000) * typ : v * 0.05f; /* sink token */
            x[m * K + k] = rnd() % 3 == 0 ? bf16_round(v) : v;
        }
}

static void test_fp8_model_shapes(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    static const tpair ps[] = {TP_FP8_TENSOR, TP_FP8_ROW};
    static const int64_t NK[2][2] = {{960, 576}, {576, 1536}}, Ms[] = {32, 21, 1};
    int runs = 0;
    for (size_t pi = 0; pi < 2; pi++)
        for (int sh = 0; sh < 2; sh++) {
            const tpair p = ps[pi];
            const int64_t N = NK[sh][0], K = NK[sh][1];
            tw t = tw_make(p, N, K, sh == 0 && p == TP_FP8_TENSOR ? 3 : 1, sh == 0);
            if (sh == 0 && p == TP_FP8_TENSOR) { /* q 576, k 192, v 192 rows; input scales 0.8..1.25 of each other */
                t.w.row0[1] = 576, t.w.row0[2] = 768;
                t.w.shard_in_scale[0] = 0.0108646564f, t.w.shard_in_scale[1] = 0.0087f, t.w.shard_in_scale[2] = 0.0135f;
            }
            tw ta = t; /* |w|, |bias|: the oracle of |x| then gives row_scale·Σ|x_k w_k| + |bias| */
            ta.q = malloc((size_t)(N * K));
            for (int64_t i = 0; i < N * K; i++) ((uint8_t *)ta.q)[i] = ((const uint8_t *)t.q)[i] & 0x7F;
            ta.w.q = ta.q;
            if (t.bias) {
                ta.bias = malloc((size_t)N * 4);
                for (int64_t n = 0; n < N; n++) ta.bias[n] = fabsf(t.bias[n]);
                ta.w.bias = ta.bias;
            }
            float *x = malloc((size_t)(32 * K) * 4), *xa = malloc((size_t)(32 * K) * 4), *y = malloc((size_t)(32 * N) * 4);
            double *want = malloc((size_t)(32 * N) * sizeof(double)), *mass = malloc((size_t)(32 * N) * sizeof(double));
            fp8_model_like_x(x, 32, K, 0.0108646564f * 448 / 8);
            for (int64_t i = 0; i < 32 * K; i++) xa[i] = fabsf(x[i]);
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                const int64_t M = Ms[mi];
                tw_oracle(&t, x, M, want);
                tw_oracle(&ta, xa, M, mass);
                for (size_t i = 0; i < moq_kernel_table_len; i++) {
                    const moq_kernel *k = &moq_kernel_table[i];
                    if (!cpu_row_runs(k, p, feat, &t.w)) continue;
                    klin_run(&t, k->name, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ~0u, NULL, NULL);
                    runs++;
                    for (int64_t j = 0; j < M * N; j++) {
                        const double tol = (double)(K + 3) * 0x1p-24 * mass[j] + 0x1p-23 * fabs(want[j]);
                        if (!(fabs((double)y[j] - want[j]) <= tol))
                            fail_msg("%s m%lld_n%lld_k%lld: y[%lld, %lld] = %.9g, fp64 oracle %.9g (|diff| %.3g > %.3g from K f32 sums); seed %u",
                                     k->name, (long long)M, (long long)N, (long long)K, (long long)(j / N), (long long)(j % N), (double)y[j], want[j],
                                     fabs((double)y[j] - want[j]), tol, g_seed);
                    }
                }
            }
            free(x), free(xa), free(y), free(want), free(mass);
            free(ta.q), free(ta.bias);
            tw_free(&t);
        }
    print_message("%d fp8 row runs on model-like activations\n", runs);
}

/* The registry's choice follows the allowed features; _ref is always there. */
static void test_choice_follows_cpu_mask(void **state) {
    (void)state;
    tw t = tw_make(TP_NVFP4, 32, 64, 1, 0);
    float x[2 * 64], y[2 * 32];
    fill(x, 2 * 64, 1.0f);
    const char *name = NULL;
    klin_run(&t, NULL, x, MOQ_ELEM_F32, 2, y, MOQ_ELEM_F32, 0u, NULL, &name); /* MOQ_CPU_MASK=0 equivalent */
    assert_string_equal(name, "cpu_ref_nvfp4_w4a4");
    const uint32_t f = moq_cpu_features();
    if (f & MOQ_CPU_AVX512) {
        klin_run(&t, NULL, x, MOQ_ELEM_F32, 2, y, MOQ_ELEM_F32, MOQ_CPU_AVX2 | MOQ_CPU_AVX512, NULL, &name);
        assert_string_equal(name, "cpu_avx512_nvfp4_w4a4_dequant_fma");
    }
    if (f & MOQ_CPU_AVX2) { /* MOQ_CPU_MASK=1 equivalent */
        klin_run(&t, NULL, x, MOQ_ELEM_F32, 2, y, MOQ_ELEM_F32, MOQ_CPU_AVX2, NULL, &name);
        assert_string_equal(name, "cpu_avx2_nvfp4_w4a4_maddubs");
    }
    if ((f & MOQ_CPU_AVX512VNNI) && (f & MOQ_CPU_AVX512)) {
        klin_run(&t, NULL, x, MOQ_ELEM_F32, 2, y, MOQ_ELEM_F32, ~0u, NULL, &name);
        assert_string_equal(name, "cpu_avx512_nvfp4_w4a4_vnni16");
    }
    /* A forced row the cpu lacks is an error that says so. */
    moq_linear_opts o = moq_linear_opts_default();
    o.name = "test.layer";
    o.kernel = "cpu_avx512_nvfp4_w4a4_vnni16";
    o.cpu_mask = 0;
    moq_linear *l = NULL;
    moq_error e = {0};
    const moq_status st = moq_linear_create_from_weight(&l, &t.w, &o, &e);
    TU_ERR(&e, st, MOQ_ERR_UNSUPPORTED, "test.layer", "no kernel fits");
    tw_free(&t);
}

/* moq_y_row16_avx2 and moq_y_row8_avx2 (y_store_avx2.h, the AVX2 rows' whole-tile and half-tile
 * epilogues; token 0 through the first, token 1 through the second) bit for bit against the
 * scalar moq_y_store, f32 and bf16 y: ties to even both ways, the rounding carry into the exponent,
 * f32 max (rounds to inf), inf, NaN of both signs and payloads (-> 0xFFFF), subnormals, -0. The
 * kernel tests compare bf16 y within a bf16 ulp, so this is where a rounding error would show. */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/cpu/y_store_avx2.h"
static void y_row16_avx2_run(const moq_linear_launch *l, int64_t m, const float *v) {
    if (m == 0) moq_y_row16_avx2(l, m, 16, _mm256_loadu_ps(v), _mm256_loadu_ps(v + 8));
    else moq_y_row8_avx2(l, m, 16, _mm256_loadu_ps(v)), moq_y_row8_avx2(l, m, 24, _mm256_loadu_ps(v + 8)); /* the 8-row form */
}
#pragma GCC pop_options

static void test_y_row16_avx2(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX2)) skip();
    static const uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3F7FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                                    0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x00000001u, 0x807FFFFFu, 0x80000000u,
                                    0x00008000u, 0x00018000u, 0x477FE000u, 0xC0490FDBu};
    enum { NB = sizeof bits / sizeof bits[0] };
    float v[2][16];
    for (int i = 0; i < 32; i++) {
        const uint32_t u = i < NB ? bits[i] : (uint32_t)rand() * 2654435761u;
        memcpy(&v[i / 16][i % 16], &u, 4);
    }
    moq_weight w;
    memset(&w, 0, sizeof w);
    w.N = 40;
    for (int e = 0; e < 2; e++) {
        const moq_elem ye = e ? MOQ_ELEM_BF16 : MOQ_ELEM_F32;
        uint8_t got[2 * 40 * 4], want[2 * 40 * 4];
        memset(got, 0xAB, sizeof got), memset(want, 0xAB, sizeof want);
        moq_linear_launch l;
        memset(&l, 0, sizeof l);
        l.w = &w, l.y = got, l.y_elem = ye;
        for (int m = 0; m < 2; m++) {
            y_row16_avx2_run(&l, m, v[m]);
            for (int r = 0; r < 16; r++) moq_y_store(want, ye, w.N, m, 16 + r, v[m][r]);
        }
        assert_memory_equal(got, want, sizeof got);
    }
}

/* The AVX2 W4A16 row's pack k4n (kernels/cpu/nvfp4_k4n_avx2.h) on random chunks: every nibble
 * where its header says, and both ways back to rows16 (k4n_cols; k4n_lut_col through the identity
 * table) equal to the rows16 bytes. */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "kernels/cpu/nvfp4_k4n_avx2.h"
static void k4n_check(void) {
    for (int it = 0; it < 64; it++) {
        uint8_t r16[32], p[32], back[32];
        for (int i = 0; i < 32; i++) r16[i] = (uint8_t)(rand() >> 7);
        memcpy(p, r16, 32);
        k4n_from_rows16(p);
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 4; k++) { /* rows16: byte 16·(k / 2) + r, nibble k % 2 */
                const int want = (r16[16 * (k / 2) + r] >> (4 * (k % 2))) & 15;
                const int L = r / 8, w = r % 8, q = k % 2, hn = k / 2; /* k4n: byte 16L + 2w + q, nibble k / 2 */
                const int got = (p[16 * L + 2 * w + q] >> (4 * hn)) & 15;
                if (got != want) fail_msg("k4n: row %d k %d: nibble %d, rows16 %d", r, k, got, want);
            }
        __m128i c0, c1;
        k4n_cols(p, &c0, &c1);
        _mm_storeu_si128((__m128i *)back, c0), _mm_storeu_si128((__m128i *)(back + 16), c1);
        if (memcmp(back, r16, 32) != 0) fail_msg("k4n_cols: not the rows16 columns back");
        const __m256i id = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m256i n = _mm256_loadu_si256((const __m256i *)p);
        for (int h = 0; h < 2; h++) { /* column h: rows 0-7 | 8-15, each lane k even x8 then k odd x8 */
            uint8_t v[32];
            _mm256_storeu_si256((__m256i *)v, k4n_lut_col(n, h, id));
            for (int r = 0; r < 16; r++)
                for (int q = 0; q < 2; q++)
                    if (v[16 * (r / 8) + 8 * q + r % 8] != ((r16[16 * h + r] >> (4 * q)) & 15))
                        fail_msg("k4n_lut_col: column %d row %d k parity %d", h, r, q);
        }
    }
}
#pragma GCC pop_options

static void test_nvfp4_k4n_layout(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX2)) skip();
    k4n_check();
}

/* Which row runs which M is the registry's m_lo..m_hi (kernels.h): every row with an M range has a
 * later row on the same packed weight with none (so every M is served), and an FP8 per-tensor layer
 * runs the rows the table names for M = 1, 3, 8, 64, 65, 128 under each cpu mask. */
static void test_m_ranges(void **state) {
    (void)state;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->m_lo <= 1 && k->m_hi == 0) continue;
        assert_true(k->pack != NULL);
        size_t j = i + 1;
        while (j < moq_kernel_table_len && !(moq_kernel_table[j].pair == k->pair && moq_kernel_table[j].pack == k->pack &&
                                              moq_kernel_table[j].target == k->target && moq_kernel_table[j].m_lo <= 1 && moq_kernel_table[j].m_hi == 0))
            j++;
        if (j == moq_kernel_table_len) fail_msg("%s serves M %d..%d but no later row on its packed weight serves every M", k->name, k->m_lo, k->m_hi);
    }
    const uint32_t f = moq_cpu_features();
    tw t = tw_make(TP_FP8_TENSOR, 40, 64, 1, 0);
    static const int64_t Ms[] = {1, 3, 8, 64, 65, 128};
    static const struct { uint32_t mask, need; const char *row[6]; } cases[] = {
        {~0u, MOQ_CPU_AVX512 | MOQ_CPU_AVX512BF16,
         {"cpu_avx512_fp8_tensor_k4fma", "cpu_avx512_fp8_tensor_gemm", "cpu_avx512_fp8_tensor_k4bf16dot", "cpu_avx512_fp8_tensor_k4bf16dot",
          "cpu_avx512_fp8_tensor_k4bf16dot", "cpu_avx512_fp8_tensor_k4bf16dot"}},
        {MOQ_CPU_AVX2 | MOQ_CPU_AVX512, MOQ_CPU_AVX512,
         {"cpu_avx512_fp8_tensor_k4fma", "cpu_avx512_fp8_tensor_gemm", "cpu_avx512_fp8_tensor_gemm", "cpu_avx512_fp8_tensor_gemm",
          "cpu_avx512_fp8_tensor_k4fma", "cpu_avx512_fp8_tensor_k4fma"}},
        {MOQ_CPU_AVX2, MOQ_CPU_AVX2,
         {"cpu_avx2_fp8_tensor_k4fma", "cpu_avx2_fp8_tensor_k4fma", "cpu_avx2_fp8_tensor_k4fma", "cpu_avx2_fp8_tensor_gemm",
          "cpu_avx2_fp8_tensor_gemm", "cpu_avx2_fp8_tensor_gemm"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if ((f & cases[c].need) != cases[c].need) continue;
        moq_linear_opts o = moq_linear_opts_default();
        o.name = "test.layer";
        o.cpu_mask = cases[c].mask;
        moq_linear *l = NULL;
        TU_OK(moq_linear_create_from_weight(&l, &t.w, &o, err_));
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            if (strcmp(moq_linear_kernel_name_for(l, Ms[mi]), cases[c].row[mi]) != 0)
                fail_msg("mask %#x M=%lld: %s runs, expected %s", cases[c].mask, (long long)Ms[mi], moq_linear_kernel_name_for(l, Ms[mi]), cases[c].row[mi]);
        moq_linear_free(l);
    }
    tw_free(&t);
}

int main(void) {
    g_seed = (unsigned)time(NULL);
    g_rng = g_seed;
    char *p = tu_data_path("golden/rcp/rcpa_ftz_corr_2bit.bin");
    FILE *f = fopen(p, "rb");
    g_corr = malloc((size_t)1 << 21);
    if (!f || fread(g_corr, 1, (size_t)1 << 21, f) != (size_t)1 << 21) {
        fprintf(stderr, "%s: missing or short (tests/data/golden.tar.xz is unpacked there by CMake)\n", p);
        return 1;
    }
    fclose(f);
    free(p);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_fast_row),
        cmocka_unit_test(test_gemm_cache_blocks),
        cmocka_unit_test(test_gemm_k_chunks),
        cmocka_unit_test(test_mxfp8_large_weight_scales),
        cmocka_unit_test(test_block_scale_extremes),
        cmocka_unit_test(test_e4m3_subnormal_weights),
        cmocka_unit_test(test_e4m3_nan_codes),
        cmocka_unit_test(test_choice_follows_cpu_mask),
        cmocka_unit_test(test_m_ranges), cmocka_unit_test(test_y_row16_avx2),
        cmocka_unit_test(test_nvfp4_maddubs_equals_vnni),
        cmocka_unit_test(test_nvfp4_w4a4_chunks),
        cmocka_unit_test(test_fp8_k4fma_chunks),
        cmocka_unit_test(test_panel512_chunks),
        cmocka_unit_test(test_avx2_gemv_groups),
        cmocka_unit_test(test_nvfp4_w4a16_avx2_decode),
        cmocka_unit_test(test_nvfp4_w4a16_avx2_x_ranges),
        cmocka_unit_test(test_nvfp4_w4a16_avx2_scale_paths),
        cmocka_unit_test(test_nvfp4_k4n_layout),
        cmocka_unit_test(test_fp8_model_shapes),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r) fprintf(stderr, "seed %u\n", g_seed);
    free(g_corr);
    return r;
}
