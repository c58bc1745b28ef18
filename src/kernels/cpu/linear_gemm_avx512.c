/* linear_gemm_avx512.c — the AVX-512 form of linear_gemm_avx2.c (same rows16k4 pack, same workspace
 * hook, same numerics), on 16-row zmm vectors: one 64-byte line of the layout is k 4g..4g+3 of a
 * whole tile.
 *
 *   The M ranges are the registry rows' (kernels.c: 2..64 for FP8 per-tensor / per-channel, 2.. for
 *   128x128 and MXFP8); M outside them runs the next row (k4bf16dot / k4fma), not code here.
 *   M = 1       the k4fma decode row (moq_linear_fp8_k4_run_avx512).
 *   2..64       small-M (issue 15): two tiles (32 rows) per pass, their codes read and decoded in
 *               registers once for all M <= 8 tokens (16 accumulators, each broadcast of x feeding
 *               two FMAs); M = 9..64 runs token groups of <= 8 over each 256-k chunk (codes read
 *               from memory once, decoded once per group). Block-scaled pairs add each block's sum
 *               × (weight scale × token block scale × 2^8, split where it leaves the f32 range:
 *               linear_cpu.h; untested on hardware here) to a C in L1. Numerics of the k4fma row (exact
 *               D·2^-120 × D·2^112). Measured faster than k4fma up to M = 64 (fp8_tensor 35 vs 40
 *               ms at M = 64) and than the GEMM up to M = 32 for MXFP8 (a tie at 64).
 *   M > 64      FP8 per-tensor / per-channel: the k4fma row (8 tokens × 16 rows, decoded in
 *               registers), measured faster than the panel GEMM there. 128x128 and MXFP8: the
 *               packed GEMM of the AVX2 file with a 12 × 32 micro-kernel (two tiles' panels, 24 zmm
 *               accumulators, two loads and twelve broadcasts per k); activations by the AVX-512
 *               quantizers (bit-identical to the reference ones), packed [M/12][K4][12].
 * Reference: linear_ref.c (cpu_ref_*). Test: tests/kernels/test_linear.c.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/blk_scale_avx512.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/layout/layout.h"

#define MR 12      /* GEMM tokens per micro-kernel                               */
#define KC 128     /* GEMM columns per panel                                     */
#define NC 256     /* GEMM rows per item (16 tiles); must match linear_gemm_avx2.c */
#define MCMAX 512  /* GEMM tokens per item (rounded to MR)                       */
#define MTS 16     /* small-M tokens per pass (at most 8 are used)               */
#define SMALL_MAX 64 /* M <= SMALL_MAX: the small-M pass (measured, see the header)  */
#define X_SCALE 0x1p112f

static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }
static int64_t bk_of(const moq_weight *w) { return w->w.group_cols > 1 ? w->w.group_cols : 0; }
static bool row_scales(const moq_weight *w) { return w->w.scale_elem == MOQ_ELEM_E8M0; }
static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Must match moq_linear_gemm_workspace (linear_gemm_avx2.c). */
static size_t shared_bytes(const moq_weight *w, int64_t M) {
    return al64((size_t)((M + 11) / 12 * 12) * (size_t)k4(w) * 4) + al64((size_t)M * 4) + al64((size_t)M * (size_t)(w->K / 32 + 1) * 4);
}
static size_t thread_bytes(const moq_weight *w, int64_t M) {
    return al64((size_t)k4(w) * 4) + al64((size_t)w->K * 2 + 64) + (M > 16 && bk_of(w) ? (size_t)NC * KC * 4 + (size_t)(MCMAX + 12) * NC * 4 : 0);
}

/* Code (r, 4g+j) of 16 rows -> f32 D(code)·2^-120 (linear_fp8_avx512.c). */
static inline __m512 dec(__m512i v, __m512i idx) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(_mm512_shuffle_epi8(v, idx), 4), _mm512_set1_epi32((int)0x87F00000u)));
}
static inline __m512 e8m0x16(__m128i c) {
    const __m512i v = _mm512_cvtepu8_epi32(c);
    const __mmask16 z = _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512());
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(v, 23), z, _mm512_set1_epi32(0x00400000)));
}
#define IDX(j) _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, (j), -1, -1, -1, 4 + (j), -1, -1, -1, 8 + (j), -1, -1, -1, 12 + (j)))

static void store_rows(const moq_linear_launch *l, const uint8_t *nan, int64_t m, int64_t n0, int nr, const float *v, float sm) {
    const moq_weight *w = l->w;
    for (int r = 0; r < nr && n0 + r < w->N; r++) {
        const int64_t n = n0 + r;
        float y = nan[n] ? NAN : v[r] * sm * l->row_scale[n];
        if (w->bias) y += w->bias[n];
        moq_y_store(l->y, l->y_elem, w->N, m, n, y);
    }
}

/* ---- small M ---------------------------------------------------------------------------------- */

/* As linear_fp8_avx512.c's prepare_row, stored k-major: X[k·M + m] = D·2^112. */
static void small_prepare(const moq_linear_launch *l, int64_t m, float *X, float *sm, float *SX, const float *tab, float *xr, uint8_t *tmp) {
    const int64_t K = l->w->K, K4 = k4(l->w), M = l->M, bk = bk_of(l->w);
    if (!bk) {
        moq_act_dequant_row_avx512(l, m, xr, &sm[m], tmp);
        for (int64_t k = 0; k < K; k++) X[k * M + m] = xr[k] * X_SCALE;
    } else {
        float *sx = SX + m * (K / bk);
        moq_x_row_f32(l->x, l->x_elem, K, m, xr);
        sm[m] = 1.0f;
        if (l->pair == MOQ_PAIR_FP8_BLK128) {
            moq_act_fp8_g128_ref(xr, (size_t)K, tmp, sx);
        } else {
            uint8_t *sf = tmp + K;
            moq_act_mxfp8_ref(xr, (size_t)K, tmp, sf);
            for (int64_t b = 0; b < K / 32; b++) sx[b] = moq_e8m0_decode(sf[b]);
        }
        for (int64_t k = 0; k < K; k++) X[k * M + m] = tab[tmp[k]];
    }
    for (int64_t k = K; k < K4; k++) X[k * M + m] = 0.0f;
}

/* One block of k of a unit's tiles, block-scaled pairs: what C += sum · F needs (F = weight scale ×
 * token block scale × 2^8, split where it leaves the f32 range: linear_cpu.h). */
typedef struct blk_f {
    __m512       sc[2];           /* the tiles' weight scales f32 [16] (128x128: one, broadcast)   */
    __m128i      c[2];            /* MXFP8: the tiles' e8m0 codes                                  */
    const float *sx, *sx256;      /* token block scales f32 [M], and × 2^8                         */
    const float *fa[2], *fb[2];   /* 128x128, not exact: F = fa·fb per tile and token, f32 [M]     */
    bool         exact;           /* moq_blk_exact: C += sum · (sc · sx256), one FMA as always     */
    bool         mx;              /* not exact: MXFP8 splits F from c and sx, 128x128 takes fa, fb */
} blk_f;

/* Tokens i0..i0+mt over groups [g0, g1) of nt (1 or 2) tiles (W[u]: tile codes, C[u]: [16 tokens][16]).
 * Two tiles per pass (M <= 8) use each broadcast of x twice: a zmm broadcast is a load, and with
 * one FMA per load the loads, not the FMAs, bounded the one-tile pass. bf == NULL: C (+)= sum;
 * else C += sum · F (bf, token i0 + i). Accumulator chains per (token, tile): >= 8 chains in flight. */
static inline __attribute__((always_inline)) void small_pass(const uint8_t *const *W, const int nt, int64_t g0, int64_t g1, const float *X,
                                                            int64_t M, const int mt, float *const *C, int first, const blk_f *bf,
                                                            int64_t i0) {
    const int na = mt * nt >= 8 ? 1 : mt * nt >= 4 ? 2 : 4;
    __m512 acc[MTS][2][4];
#pragma GCC unroll 8
    for (int i = 0; i < mt; i++)
#pragma GCC unroll 8
        for (int u = 0; u < nt; u++)
#pragma GCC unroll 8
            for (int a = 0; a < na; a++) acc[i][u][a] = _mm512_setzero_ps();
    const __m512i idx[4] = {IDX(0), IDX(1), IDX(2), IDX(3)};
    for (int64_t g = g0; g < g1; g++) {
        const __m512i v0 = _mm512_load_si512(W[0] + 64 * g), v1 = nt == 2 ? _mm512_load_si512(W[1] + 64 * g) : v0;
        const float *x = X + 4 * g * M;
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++) {
            const __m512 w0 = dec(v0, idx[j]), w1 = nt == 2 ? dec(v1, idx[j]) : w0;
#pragma GCC unroll 8
            for (int i = 0; i < mt; i++) {
                const __m512 xb = _mm512_set1_ps(x[j * M + i]);
                acc[i][0][j % na] = _mm512_fmadd_ps(w0, xb, acc[i][0][j % na]);
                if (nt == 2) acc[i][1][j % na] = _mm512_fmadd_ps(w1, xb, acc[i][1][j % na]);
            }
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < nt; u++)
#pragma GCC unroll 8
        for (int i = 0; i < mt; i++) {
            __m512 s = acc[i][u][0];
#pragma GCC unroll 8
            for (int a = 1; a < na; a++) s = _mm512_add_ps(s, acc[i][u][a]);
            float *c = C[u] + 16 * i;
            if (bf && bf->exact)
                _mm512_store_ps(c, _mm512_fmadd_ps(s, _mm512_mul_ps(bf->sc[u], _mm512_set1_ps(bf->sx256[i0 + i])), _mm512_load_ps(c)));
            else if (bf && bf->mx)
                _mm512_store_ps(c, moq_mx_fma_split16(s, bf->c[u], bf->sx[i0 + i], _mm512_load_ps(c)));
            else if (bf)
                _mm512_store_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(bf->fb[u][i0 + i])), _mm512_set1_ps(bf->fa[u][i0 + i]), _mm512_load_ps(c)));
            else
                _mm512_store_ps(c, first ? s : _mm512_add_ps(s, _mm512_load_ps(c)));
        }
}

static void small_pass_any(const uint8_t *const *W, int nt, int64_t g0, int64_t g1, const float *X, int64_t M, int mt, float *const *C,
                           int first, const blk_f *bf, int64_t i0) {
    if (nt == 2) {
        switch (mt) {
#define CASE(n) case n: small_pass(W, 2, g0, g1, X, M, n, C, first, bf, i0); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
        default: small_pass(W, 2, g0, g1, X, M, 8, C, first, bf, i0); break;
        }
    } else {
        switch (mt) {
#define CASE(n) case n: small_pass(W, 1, g0, g1, X, M, n, C, first, bf, i0); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
        default: small_pass(W, 1, g0, g1, X, M, 8, C, first, bf, i0); break;
        }
    }
}

/* Unit p: tiles 2p, 2p + 1 (the last may be alone). M <= 8: all tokens in one pass over all of K;
 * M = 9..64: token groups of <= 8 over each 256-k chunk (codes read from memory once). */
static void small_unit(const moq_linear_launch *l, const float *X, const float *sm, const float *SX, bool exact, int64_t p) {
    const int tpu = 2;
    const moq_weight *w = l->w;
    const int64_t M = l->M, K4 = k4(w), G = K4 / 4, bk = bk_of(w), nblk = bk ? w->K / bk : 1, tiles = (w->N + 15) / 16, t0 = p * tpu;
    const int nt = t0 + tpu <= tiles ? tpu : 1;
    const uint8_t *nan = (const uint8_t *)l->packed + moq_linear_fp8_k4_nan_offset(w);
    const uint8_t *W[2], *SFW[2];
    _Alignas(64) float Cb[2][SMALL_MAX * 16];
    float *C[2] = {Cb[0], Cb[1]};
    for (int u = 0; u < nt; u++) {
        W[u] = (const uint8_t *)l->packed + (t0 + u) * G * 64;
        SFW[u] = (const uint8_t *)l->packed + moq_linear_fp8_k4_scale_offset(w) + (t0 + u) * nblk * 16;
    }
    const int64_t ng = (M + 7) / 8, mt = (M + ng - 1) / ng, cg = bk ? bk / 4 : ng == 1 ? G : 64;
    float sx[SMALL_MAX], sx256[SMALL_MAX], fa[2][SMALL_MAX], fb[2][SMALL_MAX], v[16];
    blk_f bf = {.exact = exact, .mx = row_scales(w), .sx = sx, .sx256 = sx256, .fa = {fa[0], fa[1]}, .fb = {fb[0], fb[1]}};
    if (bk) memset(Cb, 0, sizeof Cb);
    for (int64_t g0 = 0; g0 < G; g0 += cg) {
        const int64_t g1 = g0 + cg < G ? g0 + cg : G, kb = g0 * 4 / (bk ? bk : 1);
        if (bk) {
            for (int64_t i = 0; i < M; i++) sx[i] = SX[i * nblk + kb], sx256[i] = sx[i] * 256.0f;
            for (int u = 0; u < nt; u++)
                if (bf.mx) {
                    bf.c[u] = _mm_load_si128((const __m128i *)(SFW[u] + 16 * kb));
                    bf.sc[u] = e8m0x16(bf.c[u]);
                } else {
                    const float ws = ((const float *)w->scale)[(16 * (t0 + u) / 128) * nblk + kb];
                    bf.sc[u] = _mm512_set1_ps(ws);
                    if (!exact)
                        for (int64_t i = 0; i < M; i++) moq_blk128_factor(ws, sx[i], &fa[u][i], &fb[u][i]);
                }
        }
        for (int64_t i0 = 0; i0 < M; i0 += mt) {
            float *Ci[2] = {C[0] + 16 * i0, C[1] + 16 * i0};
            small_pass_any(W, nt, g0, g1, X + i0, M, (int)(M - i0 < mt ? M - i0 : mt), Ci, g0 == 0, bk ? &bf : NULL, i0);
        }
    }
    for (int u = 0; u < nt; u++)
        for (int64_t m = 0; m < M; m++) { /* unblocked: C counts in 2^-8 (exact ×256); block-scaled: F holds the 2^8 */
            _mm512_storeu_ps(v, bk ? _mm512_load_ps(C[u] + 16 * m) : _mm512_mul_ps(_mm512_load_ps(C[u] + 16 * m), _mm512_set1_ps(256.0f)));
            store_rows(l, nan, m, 16 * (t0 + u), 16, v, sm[m]);
        }
}

/* ---- GEMM (M > 64, 128x128 and MXFP8) ---------------------------------------------------------- */

static void decode_block(const moq_linear_launch *l, int64_t t0, int nt, int64_t k0, int kc, float *B) {
    const moq_weight *w = l->w;
    const int64_t G = k4(w) / 4, bk = bk_of(w), nblk = bk ? w->K / bk : 1;
    const __m512i i0v = IDX(0), i1v = IDX(1), i2v = IDX(2), i3v = IDX(3);
    const __m512 two120 = _mm512_set1_ps(0x1p120f);
    for (int tt = 0; tt < nt; tt++) {
        const int64_t t = t0 + tt;
        const uint8_t *W = (const uint8_t *)l->packed + t * G * 64;
        const uint8_t *SFW = (const uint8_t *)l->packed + moq_linear_fp8_k4_scale_offset(w) + t * nblk * 16;
        float *P = B + (size_t)tt * KC * 16;
        __m512 s = _mm512_set1_ps(1.0f);
        for (int kk = 0; kk < kc; kk += 4) {
            const int64_t k = k0 + kk, g = k / 4;
            if (bk && (kk == 0 || k % bk == 0)) {
                const int64_t kb = k / bk;
                s = row_scales(w) ? e8m0x16(_mm_load_si128((const __m128i *)(SFW + 16 * kb)))
                                  : _mm512_set1_ps(((const float *)w->scale)[(16 * t / 128) * nblk + kb]);
            }
            const __m512i v = _mm512_load_si512(W + 64 * g);
            float *p = P + 16 * kk; /* D(code) = dec·2^120 exactly, then × the block scale */
            _mm512_store_ps(p, _mm512_mul_ps(_mm512_mul_ps(dec(v, i0v), two120), s));
            _mm512_store_ps(p + 16, _mm512_mul_ps(_mm512_mul_ps(dec(v, i1v), two120), s));
            _mm512_store_ps(p + 32, _mm512_mul_ps(_mm512_mul_ps(dec(v, i2v), two120), s));
            _mm512_store_ps(p + 48, _mm512_mul_ps(_mm512_mul_ps(dec(v, i3v), two120), s));
        }
    }
}

/* C [MR][16·nr] (ldc floats between tokens) (+)= A [kc][MR] · (P0 | P1) [kc][16]; named accumulators
 * (arrays of vectors were kept on the stack by GCC). Partial token groups: A is zero-padded and the
 * caller passes a scratch C. */
#define ACC_DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define ACC_FMA(i)                                             \
    {                                                          \
        const __m512 x = _mm512_set1_ps(A[MR * k + (i)]);        \
        c##i##0 = _mm512_fmadd_ps(x, w0, c##i##0);             \
        if (nr == 2) c##i##1 = _mm512_fmadd_ps(x, w1, c##i##1); \
    }
#define ACC_STORE(i)                                                                   \
    {                                                                                  \
        float *c = C + (i) * ldc;                                                        \
        if (!first) c##i##0 = _mm512_add_ps(c##i##0, _mm512_load_ps(c));               \
        _mm512_store_ps(c, c##i##0);                                                   \
        if (nr == 2) {                                                                 \
            if (!first) c##i##1 = _mm512_add_ps(c##i##1, _mm512_load_ps(c + 16));      \
            _mm512_store_ps(c + 16, c##i##1);                                          \
        }                                                                              \
    }
static inline __attribute__((always_inline)) void micro(const float *P0, const float *P1, const float *A, int kc, float *C, int64_t ldc,
                                                       int first, const int nr) {
    ACC_DECL(0) ACC_DECL(1) ACC_DECL(2) ACC_DECL(3) ACC_DECL(4) ACC_DECL(5)
    ACC_DECL(6) ACC_DECL(7) ACC_DECL(8) ACC_DECL(9) ACC_DECL(10) ACC_DECL(11)
    for (int k = 0; k < kc; k++) {
        const __m512 w0 = _mm512_load_ps(P0 + 16 * k), w1 = nr == 2 ? _mm512_load_ps(P1 + 16 * k) : w0;
        ACC_FMA(0) ACC_FMA(1) ACC_FMA(2) ACC_FMA(3) ACC_FMA(4) ACC_FMA(5)
        ACC_FMA(6) ACC_FMA(7) ACC_FMA(8) ACC_FMA(9) ACC_FMA(10) ACC_FMA(11)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
    ACC_STORE(6) ACC_STORE(7) ACC_STORE(8) ACC_STORE(9) ACC_STORE(10) ACC_STORE(11)
}
static void micro2(const float *P0, const float *P1, const float *A, int kc, float *C, int64_t ldc, int first) {
    micro(P0, P1, A, kc, C, ldc, first, 2);
}
static void micro1(const float *P0, const float *A, int kc, float *C, int64_t ldc, int first) { micro(P0, P0, A, kc, C, ldc, first, 1); }

/* mr < MR tokens: through a scratch C, then the mr rows added (or stored) into C. */
static void micro_any(const float *P0, const float *P1, const float *A, int kc, float *C, int64_t ldc, int first, int mr, int nr) {
    if (mr == MR) {
        if (nr == 2) micro2(P0, P1, A, kc, C, ldc, first);
        else micro1(P0, A, kc, C, ldc, first);
        return;
    }
    _Alignas(64) float T[MR * 32];
    if (nr == 2) micro2(P0, P1, A, kc, T, 32, 1);
    else micro1(P0, A, kc, T, 32, 1);
    for (int i = 0; i < mr; i++)
        for (int r = 0; r < 16 * nr; r++) C[i * ldc + r] = first ? T[32 * i + r] : C[i * ldc + r] + T[32 * i + r];
}

static void gemm_item(const moq_linear_launch *l, const float *Xp, const float *sm, int64_t jc, int64_t ic, int64_t mc, float *B, float *C) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, K4 = k4(w), tiles = (w->N + 15) / 16, t0 = jc * (NC / 16);
    const int nt = (int)(tiles - t0 < NC / 16 ? tiles - t0 : NC / 16);
    const int64_t m0 = ic * mc, m1 = m0 + mc < M ? m0 + mc : M;
    const uint8_t *nan = (const uint8_t *)l->packed + moq_linear_fp8_k4_nan_offset(w);
    for (int64_t k0 = 0; k0 < K4; k0 += KC) {
        const int kc = (int)(K4 - k0 < KC ? K4 - k0 : KC);
        decode_block(l, t0, nt, k0, kc, B);
        for (int tt = 0; tt < nt; tt += 2) {
            const int nr = nt - tt >= 2 ? 2 : 1;
            const float *P0 = B + (size_t)tt * KC * 16, *P1 = P0 + (size_t)KC * 16;
            for (int64_t m = m0; m < m1; m += MR)
                micro_any(P0, P1, Xp + (m / MR) * K4 * MR + k0 * MR, kc, C + (m - m0) * NC + 16 * tt, NC, k0 == 0,
                          (int)(m1 - m < MR ? m1 - m : MR), nr);
        }
    }
    for (int64_t m = m0; m < m1; m++)
        for (int tt = 0; tt < nt; tt++) store_rows(l, nan, m, 16 * (t0 + tt), 16, C + (m - m0) * NC + 16 * tt, sm[m]);
}

moq_status moq_linear_gemm_run_avx512(const moq_linear_launch *l, moq_error *err) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, K = w->K, K4 = k4(w), tiles = (w->N + 15) / 16;
    /* M = 1, and M > SMALL_MAX of the unblocked pairs, run the k4fma row (measured faster,
     * docs/PERFORMANCE.md): the rows' M ranges in kernels.c send them there. */
    if (M == 1 || (M > SMALL_MAX && !bk_of(w)))
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, l->k->name, "M=%lld of pair %s, outside the row's M range", (long long)M, moq_pairs[l->pair].name);
    float *X = l->ws;
    float *sm = (float *)((uint8_t *)l->ws + al64((size_t)((M + 11) / 12 * 12) * (size_t)K4 * 4));
    float *SX = (float *)((uint8_t *)sm + al64((size_t)M * 4));
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    const size_t tb = thread_bytes(w, M);
    if (M <= SMALL_MAX) {
        float tab[256];
        for (int c = 0; c < 256; c++) tab[c] = moq_e4m3_decode((uint8_t)c) * X_SCALE;
        /* M <= 4: rows prepared before the team starts (the join is then the only sync point) */
        if (M <= 4)
            for (int64_t m = 0; m < M; m++) small_prepare(l, m, X, sm, SX, tab, (float *)thr0, thr0 + al64((size_t)K4 * 4));
#pragma omp parallel num_threads(l->n_threads)
        {
            uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
            if (M > 4) {
#pragma omp for schedule(static)
                for (int64_t m = 0; m < M; m++) small_prepare(l, m, X, sm, SX, tab, (float *)mine, mine + al64((size_t)K4 * 4));
            }
            /* every row prepared (the omp for's barrier): each thread reads the same answer */
            const bool exact = !bk_of(w) || moq_blk_exact(w, l->packed, SX, M);
#pragma omp for schedule(dynamic, 2)
            for (int64_t p = 0; p < (tiles + 1) / 2; p++) small_unit(l, X, sm, SX, exact, p);
        }
        return MOQ_OK;
    }
    const int64_t nmb = (M + MCMAX - 1) / MCMAX, mc = ((M + nmb - 1) / nmb + MR - 1) / MR * MR, nnb = (tiles + NC / 16 - 1) / (NC / 16);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
        float *xr = (float *)mine, *B = (float *)(mine + al64((size_t)K4 * 4) + al64((size_t)K * 2 + 64));
        uint8_t *tmp = mine + al64((size_t)K4 * 4);
        float *C = B + (size_t)NC * KC;
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            moq_act_dequant_row_avx512(l, m, xr, &sm[m], tmp);
            float *a = X + (m / MR) * K4 * MR + m % MR;
            for (int64_t k = 0; k < K; k++) a[k * MR] = xr[k];
            for (int64_t k = K; k < K4; k++) a[k * MR] = 0.0f;
        }
        /* tokens of the last partial MR group: zero (the micro-kernel runs all MR) */
#pragma omp single
        for (int64_t m = M; m < (M + MR - 1) / MR * MR; m++)
            for (int64_t k = 0; k < K4; k++) X[(m / MR) * K4 * MR + k * MR + m % MR] = 0.0f;
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t jc = 0; jc < nnb; jc++)
            for (int64_t ic = 0; ic < nmb; ic++) gemm_item(l, X, sm, jc, ic, mc, B, C);
    }
    return MOQ_OK;
}
