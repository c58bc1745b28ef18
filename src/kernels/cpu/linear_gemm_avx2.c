/* linear_gemm_avx2.c — e4m3 weights (FP8 per-tensor, per-channel, 128x128, MXFP8) on AVX2 + FMA for
 * every M, on the rows16k4 layout of linear_fp8_avx2.c (same pack; nothing new at load):
 *
 *   M <= 16 (M < 48 for FP8 per-tensor / per-channel): the k4fma rows (moq_linear_fp8_k4_run_avx2;
 *               the registry's M range of the gemm rows), measured faster there on Zen 3 and Zen 5
 *               (docs/PERFORMANCE.md, issue 14: a token-blocked one-decode
 *               pass over 8-row halves, written and measured, lost to its 2 halves × 6 tokens: each
 *               broadcast of x then feeds one FMA instead of two).
 *   M > 16 of 128x128 and MXFP8, M >= 48 of FP8 per-tensor / per-channel: packed GEMM, BLIS-style: per (NC = 256 rows, MC <= 512 tokens)
 *               item, tile by tile: a 16-row tile's weights for KCT = 4096 columns are decoded once into
 *               an f32 panel [KCT][16] (256 KiB, L2; exact D(code) = dec·2^120, times the weight block
 *               scale), then a 6 × 16 FMA micro-kernel (12 accumulators, two panel loads and six
 *               broadcasts per k; the 8-k step in inline assembly) runs every 6-token group of the
 *               item over the whole chunk with C in registers, over activations packed [M/6][K4][6]
 *               once per call (the pair's quantizer; codes decoded by a table, the block scales folded
 *               in). C is an f32 [MC][16] tile buffer per thread (added through only at K4 > KCT);
 *               items are split over threads in 2-D (N × M). The k4fma row's block sums need block +
 *               total accumulators and fit only 3 tokens per pass.
 *               Exactness: e4m3 × e4m3 products are exact in f32; D·2^(e-127) is exact for MXFP8 in
 *               the scale range the tests draw; 128x128 rounds D·s_w and D·s_x once each, as the
 *               dequant_fma panel row does. Sums in f32, another order than `_ref`.
 * NaN codes: rows flagged at pack time give NaN (as `_ref`).
 * Reference: linear_ref.c (cpu_ref_*). Test: tests/kernels/test_linear.c.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/y_store_avx2.h"
#include "kernels/layout/layout.h"

#define MR 6       /* GEMM tokens per micro-kernel        */
#define KC 128     /* the workspace formula only (shared with linear_gemm_avx512.c) */
#define NC 256     /* GEMM rows per item (16 tiles)       */
#define MCMAX 512  /* GEMM tokens per item (rounded to MR) */

static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }
static int64_t bk_of(const moq_weight *w) { return w->w.group_cols > 1 ? w->w.group_cols : 0; }
static bool row_scales(const moq_weight *w) { return w->w.scale_elem == MOQ_ELEM_E8M0; }
static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Workspace (both ISAs, moq_linear_gemm_workspace): the k4fma row's (M = 1), or
 *   shared  X f32 [ceil(M/12)·12, K4] (AVX-512 small M: [K4, M] k-major; GEMM: [M/MR][K4][MR]) + sm [M] + sx [M, K/32 + 1]
 *   thread  row f32 [K4] + quantizer scratch 2K + 64; at M > 16 (the GEMM) also B f32 [NC·KC]
 *           + C f32 [(MCMAX + 12)·NC] (the AVX-512 GEMM's blocks, NR up to 32; the AVX2 GEMM uses B
 *           [KCT·16] + C [(MCMAX + 12)·16] of it, _Static_assert below). */
static size_t shared_bytes(const moq_weight *w, int64_t M) {
    return al64((size_t)((M + 11) / 12 * 12) * (size_t)k4(w) * 4) + al64((size_t)M * 4) + al64((size_t)M * (size_t)(w->K / 32 + 1) * 4);
}
static size_t thread_bytes(const moq_weight *w, int64_t M) {
    return al64((size_t)k4(w) * 4) + al64((size_t)w->K * 2 + 64) + (M > 16 ? (size_t)NC * KC * 4 + (size_t)(MCMAX + 12) * NC * 4 : 0);
}

size_t moq_linear_gemm_workspace(const moq_weight *w, int64_t M, int n_threads) {
    const size_t a = moq_linear_fp8_k4_workspace(w, M, n_threads), b = shared_bytes(w, M) + (size_t)n_threads * thread_bytes(w, M);
    return a > b ? a : b;
}

/* Code (r, 4g+j) of 8 rows -> f32 D(code)·2^-120 (linear_fp8_avx2.c). */
static inline __m256 dec(__m256i v, __m256i idx) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(v, idx), 4), _mm256_set1_epi32((int)0x87F00000u)));
}
static inline __m256 e8m0x8(__m128i c8) {
    const __m256i v = _mm256_cvtepu8_epi32(c8);
    const __m256i z = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(v, 23), _mm256_set1_epi32(0x00400000), z));
}
#define IDX(j) _mm256_setr_epi8(-1, -1, -1, (j), -1, -1, -1, 4 + (j), -1, -1, -1, 8 + (j), -1, -1, -1, 12 + (j), -1, -1, -1, (j), -1, -1, -1, 4 + (j), -1, -1, -1, 8 + (j), -1, -1, -1, 12 + (j))

/* y[m, n] for one tile's rows from v[r] (already scaled to the true dot product). */
static void store_rows(const moq_linear_launch *l, const uint8_t *nan, int64_t m, int64_t n0, int nr, const float *v, float sm) {
    const moq_weight *w = l->w;
    for (int r = 0; r < nr && n0 + r < w->N; r++) {
        const int64_t n = n0 + r;
        float y = nan[n] ? NAN : v[r] * sm * l->row_scale[n];
        if (w->bias) y += w->bias[n];
        moq_y_store(l->y, l->y_elem, w->N, m, n, y);
    }
}

/* store_rows for a whole 16-row tile, 8 lanes at a time: the same (v · sm) · row_scale (+ bias) in
 * the same order, NaN rows by a blend, y by moq_y_row16_avx2 (f32, or bf16 RNE as moq_y_store). */
static void store_tile16(const moq_linear_launch *l, const uint8_t *nan, int64_t m, int64_t n0, const float *v, float sm) {
    const moq_weight *w = l->w;
    if (!moq_y_row16_fits_avx2(l, n0)) {
        store_rows(l, nan, m, n0, 16, v, sm);
        return;
    }
    const __m256 smv = _mm256_set1_ps(sm), qnan = _mm256_set1_ps(NAN);
    __m256 y[2];
    for (int h = 0; h < 2; h++) {
        y[h] = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(v + 8 * h), smv), _mm256_loadu_ps(l->row_scale + n0 + 8 * h));
        y[h] = _mm256_blendv_ps(y[h], qnan, moq_nan_rows8_avx2(nan + n0 + 8 * h));
        if (w->bias) y[h] = _mm256_add_ps(y[h], _mm256_loadu_ps(w->bias + n0 + 8 * h));
    }
    moq_y_row16_avx2(l, m, n0, y[0], y[1]);
}

/* ---- GEMM (M > 16) ---------------------------------------------------------------------------- */

/* Rows [16·t0, 16·t0 + 16·nt) × columns [k0, k0 + kc) -> B [nt][kc][16], exact values (× block scale). */
static void decode_block(const moq_linear_launch *l, int64_t t0, int nt, int64_t k0, int kc, float *B) {
    const moq_weight *w = l->w;
    const int64_t G = k4(w) / 4, bk = bk_of(w), nblk = bk ? w->K / bk : 1;
    const __m256i i0v = IDX(0), i1v = IDX(1), i2v = IDX(2), i3v = IDX(3);
    const __m256 two120 = _mm256_set1_ps(0x1p120f);
    for (int tt = 0; tt < nt; tt++) {
        const int64_t t = t0 + tt;
        const uint8_t *W = (const uint8_t *)l->packed + t * G * 64;
        /* codes prefetched ahead: the next tile's at nt > 1, else 8 groups ahead in this one */
        const uint8_t *Wn = tt + 1 < nt ? W + G * 64 : W + 64 * 8;
        const uint8_t *SFW = (const uint8_t *)l->packed + moq_linear_fp8_k4_scale_offset(w) + t * nblk * 16;
        float *P = B + (size_t)tt * (size_t)kc * 16;
        __m256 s0 = _mm256_set1_ps(1.0f), s1 = s0;
        for (int kk = 0; kk < kc; kk += 4) {
            const int64_t k = k0 + kk, g = k / 4;
            if (bk && (kk == 0 || k % bk == 0)) {
                const int64_t kb = k / bk;
                if (row_scales(w)) {
                    s0 = e8m0x8(_mm_loadl_epi64((const __m128i *)(SFW + 16 * kb)));
                    s1 = e8m0x8(_mm_loadl_epi64((const __m128i *)(SFW + 16 * kb + 8)));
                } else {
                    s0 = s1 = _mm256_set1_ps(((const float *)w->scale)[(16 * t / 128) * nblk + kb]);
                }
            }
            _mm_prefetch((const char *)(Wn + 64 * g), _MM_HINT_T0);
            const __m256i v0 = _mm256_load_si256((const __m256i *)(W + 64 * g)), v1 = _mm256_load_si256((const __m256i *)(W + 64 * g + 32));
            float *p = P + 16 * kk;
            /* D(code) = dec·2^120 exactly, then × the block scale (one rounding for 128x128; none for
             * e8m0 in range; FP8 per-tensor / per-channel have none: s0 = s1 = 1 and no multiply) */
#define D(v, i, sc) (bk ? _mm256_mul_ps(_mm256_mul_ps(dec(v, i), two120), sc) : _mm256_mul_ps(dec(v, i), two120))
            _mm256_store_ps(p, D(v0, i0v, s0)), _mm256_store_ps(p + 8, D(v1, i0v, s1));
            _mm256_store_ps(p + 16, D(v0, i1v, s0)), _mm256_store_ps(p + 24, D(v1, i1v, s1));
            _mm256_store_ps(p + 32, D(v0, i2v, s0)), _mm256_store_ps(p + 40, D(v1, i2v, s1));
            _mm256_store_ps(p + 48, D(v0, i3v, s0)), _mm256_store_ps(p + 56, D(v1, i3v, s1));
#undef D
        }
    }
}

/* C [mr][16] (ldc floats between tokens) (+)= A [kc][MR] · P [kc][16], mr <= MR tokens (a compile-time
 * constant in each copy: the last partial group of an item runs mr rows of FMAs, not MR into a scratch
 * C); 2·mr named accumulators (arrays of vectors were kept on the stack by GCC). A's rows past mr are
 * zero padding and not read. */
#define ACC_DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define ACC_STORE(i)                                                                                                                   \
    if ((i) < mr) {                                                                                                                    \
        float *c = C + (i) * ldc;                                                                                                      \
        if (!first) c##i##0 = _mm256_add_ps(c##i##0, _mm256_load_ps(c)), c##i##1 = _mm256_add_ps(c##i##1, _mm256_load_ps(c + 8));     \
        _mm256_store_ps(c, c##i##0), _mm256_store_ps(c + 8, c##i##1);                                                                  \
    }
/* An / Cn: activations to prefetch, advanced with A (3 lines per 8 k; gemm_item passes A + PFA, i.e.
 * ahead in A's own stream), and the next call's C rows (MR rows of 16 floats at ldc), prefetched
 * before the loop. The k loop runs 8 steps per iteration with no branch inside (a per-k prefetch test
 * cost 6-9 scalar instructions and a branch every other k in perf). */
#define STEP(j)                                                                                           \
    {                                                                                                     \
        const __m256 w0 = _mm256_load_ps(P + 16 * (j)), w1 = _mm256_load_ps(P + 16 * (j) + 8);           \
        const float *A_ = A + MR * (j);                                                                   \
        ACC_FMA(0) ACC_FMA(1) ACC_FMA(2) ACC_FMA(3) ACC_FMA(4) ACC_FMA(5)                                 \
    }
#define ACC_FMA(i)                                         \
    if ((i) < mr) {                                        \
        const __m256 x = _mm256_broadcast_ss(A_ + (i));    \
        c##i##0 = _mm256_fmadd_ps(x, w0, c##i##0);         \
        c##i##1 = _mm256_fmadd_ps(x, w1, c##i##1);         \
    }
/* The full 6-token group's 8-k step in assembly (MICRO_ASM, GCC / Clang): from intrinsics GCC kept
 * one or two of the twelve accumulators on the stack (12 + w0 + w1 + x = 15 of 16 ymm leaves it no
 * slack), a store and a reloaded FMA operand per 8 k. The same operations in the same order as STEP:
 * products and sums as the intrinsic loop (and `_ref` within the tests' tolerances). */
#ifndef MICRO_ASM
#define MICRO_ASM 1
#endif
#define ABC(j, i, a0, a1)                                                                \
    "vbroadcastss " #j "*24+" #i "*4(%[a]), %%ymm15\n\t"                                  \
    "vfmadd231ps %%ymm13, %%ymm15, %[" #a0 "]\n\t"                                       \
    "vfmadd231ps %%ymm14, %%ymm15, %[" #a1 "]\n\t"
#define ASTEP(j)                                                                          \
    "vmovaps " #j "*64(%[p]), %%ymm13\n\t"                                                \
    "vmovaps " #j "*64+32(%[p]), %%ymm14\n\t"                                             \
    ABC(j, 0, c00, c01) ABC(j, 1, c10, c11) ABC(j, 2, c20, c21) ABC(j, 3, c30, c31) ABC(j, 4, c40, c41) ABC(j, 5, c50, c51)
static inline __attribute__((always_inline)) void micro_t(const float *P, const float *A, int kc, float *C, int64_t ldc, int first,
                                                          const float *An, const float *Cn, const int mr) {
    ACC_DECL(0) ACC_DECL(1) ACC_DECL(2) ACC_DECL(3) ACC_DECL(4) ACC_DECL(5)
    for (int i = 0; i < MR; i++) _mm_prefetch((const char *)(Cn + i * ldc), _MM_HINT_T0), _mm_prefetch((const char *)(Cn + i * ldc + 15), _MM_HINT_T0);
    int k = 0;
#if MICRO_ASM
    if (mr == MR)
        for (; k + 8 <= kc; k += 8, P += 128, A += 8 * MR, An += 8 * MR) {
            _mm_prefetch((const char *)An, _MM_HINT_T0);
            _mm_prefetch((const char *)(An + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(An + 32), _MM_HINT_T0);
            __asm__(ASTEP(0) ASTEP(1) ASTEP(2) ASTEP(3) ASTEP(4) ASTEP(5) ASTEP(6) ASTEP(7)
                    : [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11), [c20] "+x"(c20), [c21] "+x"(c21),
                      [c30] "+x"(c30), [c31] "+x"(c31), [c40] "+x"(c40), [c41] "+x"(c41), [c50] "+x"(c50), [c51] "+x"(c51)
                    : [p] "r"(P), [a] "r"(A), "m"(*(const float(*)[128])P), "m"(*(const float(*)[8 * MR])A)
                    : "xmm13", "xmm14", "xmm15");
        }
#endif
    for (; k + 8 <= kc; k += 8, P += 128, A += 8 * MR, An += 8 * MR) {
        _mm_prefetch((const char *)An, _MM_HINT_T0);
        _mm_prefetch((const char *)(An + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(An + 32), _MM_HINT_T0);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
    }
    for (; k < kc; k++, P += 16, A += MR, An += MR) {
        _mm_prefetch((const char *)An, _MM_HINT_T0);
        STEP(0)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
}
#undef STEP
#define MICRO(n)                                                                                                                      \
    static void micro##n(const float *P, const float *A, int kc, float *C, int64_t ldc, int first, const float *An, const float *Cn) { \
        micro_t(P, A, kc, C, ldc, first, An, Cn, n);                                                                                   \
    }
MICRO(1) MICRO(2) MICRO(3) MICRO(4) MICRO(5) MICRO(6)
#undef MICRO

static void micro_any(const float *P, const float *A, int kc, float *C, int64_t ldc, int first, int mr, const float *An, const float *Cn) {
    switch (mr) {
    case 1: micro1(P, A, kc, C, ldc, first, An, Cn); break;
    case 2: micro2(P, A, kc, C, ldc, first, An, Cn); break;
    case 3: micro3(P, A, kc, C, ldc, first, An, Cn); break;
    case 4: micro4(P, A, kc, C, ldc, first, An, Cn); break;
    case 5: micro5(P, A, kc, C, ldc, first, An, Cn); break;
    default: micro6(P, A, kc, C, ldc, first, An, Cn); break;
    }
}

/* One item: each 16-row tile's weights decoded for KCT columns at once
 * (B [KCT][16], 256 KiB: L2), then every token group runs the whole chunk with its 6 × 16 of C in
 * registers (one micro-kernel call per group and chunk instead of K / KC; C is a [MC][16] tile
 * buffer only between chunks, i.e. never touched in between at K <= KCT), A prefetched PFA floats
 * ahead in its own stream (the next call's micro-panel is 24k cycles away). */
#define KCT 4096
#define PFA (96 * MR)
_Static_assert((size_t)KCT * 16 + (size_t)(MCMAX + 12) * 16 <= (size_t)NC * KC + (size_t)(MCMAX + 12) * NC, "tile-major B and C fit the thread workspace");
static void gemm_item(const moq_linear_launch *l, const float *Xp, const float *sm, int64_t jc, int64_t ic, int64_t mc, float *B, float *C) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, K4 = k4(w), tiles = (w->N + 15) / 16, t0 = jc * (NC / 16);
    const int nt = (int)(tiles - t0 < NC / 16 ? tiles - t0 : NC / 16);
    const int64_t m0 = ic * mc, m1 = m0 + mc < M ? m0 + mc : M;
    const uint8_t *nan = (const uint8_t *)l->packed + moq_linear_fp8_k4_nan_offset(w);
    for (int tt = 0; tt < nt; tt++) {
        for (int64_t k0 = 0; k0 < K4; k0 += KCT) {
            const int kc = (int)(K4 - k0 < KCT ? K4 - k0 : KCT);
            decode_block(l, t0 + tt, 1, k0, kc, B);
            for (int64_t m = m0; m < m1; m += MR) {
                const int64_t mn = m + MR < m1 ? m + MR : m;
                const float *A = Xp + (m / MR) * K4 * MR + k0 * MR;
                micro_any(B, A, kc, C + (m - m0) * 16, 16, k0 == 0, (int)(m1 - m < MR ? m1 - m : MR), A + PFA, C + (mn - m0) * 16);
            }
        }
        for (int64_t m = m0; m < m1; m++) store_tile16(l, nan, m, 16 * (t0 + tt), C + (m - m0) * 16, sm[m]);
    }
}

moq_status moq_linear_gemm_run_avx2(const moq_linear_launch *l, moq_error *err) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, K = w->K, K4 = k4(w), tiles = (w->N + 15) / 16;
    /* The workspace holds the GEMM's panels only above 16 tokens; the registry's M range (kernels.c:
     * 17.. or 48..) sends smaller M to the k4fma row, which measured faster there. */
    if (M <= 16 || M < l->k->m_lo)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, l->k->name, "M=%lld of pair %s, expected M >= %d (the row's M range in kernels.c)",
                        (long long)M, moq_pairs[l->pair].name, l->k->m_lo > 17 ? l->k->m_lo : 17);
    float *X = l->ws;
    float *sm = (float *)((uint8_t *)l->ws + al64((size_t)((M + 11) / 12 * 12) * (size_t)K4 * 4));
    float *SX = (float *)((uint8_t *)sm + al64((size_t)M * 4));
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    const size_t tb = thread_bytes(w, M);
    float tab[256]; /* e4m3 code -> D */
    for (int c = 0; c < 256; c++) tab[c] = moq_e4m3_decode((uint8_t)c);
    const int64_t nmb = (M + MCMAX - 1) / MCMAX, mc = ((M + nmb - 1) / nmb + MR - 1) / MR * MR, nnb = (tiles + NC / 16 - 1) / (NC / 16);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
        float *xr = (float *)mine, *B = (float *)(mine + al64((size_t)K4 * 4) + al64((size_t)K * 2 + 64));
        uint8_t *tmp = mine + al64((size_t)K4 * 4);
        float *C = B + (size_t)KCT * 16;
        /* A packed [M/MR][K4][MR]: codes -> D (tab) × block scale (exact for MXFP8; 128x128 rounds
         * once, as moq_act_dequant_row) */
        const int64_t bk = bk_of(w);
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            float *sx = SX + m * (K / 32 + 1);
            moq_act_e4m3_codes_avx2(l, m, xr, tmp, &sm[m], sx); /* codes in tmp, per-token scale, block scales */
            float *a = X + (m / MR) * K4 * MR + m % MR;
            if (bk)
                for (int64_t b0 = 0; b0 < K; b0 += bk) { /* no k / bk per element (a 64-bit division) */
                    const float s = sx[b0 / bk];
                    const int64_t b1 = b0 + bk < K ? b0 + bk : K;
                    for (int64_t k = b0; k < b1; k++) a[k * MR] = tab[tmp[k]] * s;
                }
            else
                for (int64_t k = 0; k < K; k++) a[k * MR] = tab[tmp[k]];
            for (int64_t k = K; k < K4; k++) a[k * MR] = 0.0f;
        }
        /* tokens of the last partial MR group: zero (the micro-kernel runs all MR) */
#pragma omp single
        for (int64_t m = M; m < (M + MR - 1) / MR * MR; m++)
            for (int64_t k = 0; k < K4; k++) X[(m / MR) * K4 * MR + k * MR + m % MR] = 0.0f;
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t jc = 0; jc < nnb; jc++)
            for (int64_t ic = 0; ic < nmb; ic++) {
                gemm_item(l, X, sm, jc, ic, mc, B, C);
            }
    }
    return MOQ_OK;
}
