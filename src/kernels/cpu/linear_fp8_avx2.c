/* linear_fp8_avx2.c — e4m3 weights (FP8 per-tensor, per-channel, 128x128 and MXFP8 pairs) on AVX2 +
 * FMA, decoded in registers straight from the packed codes: no panel, three integer ops per 8
 * weights. Block-scaled pairs (128x128, MXFP8) sum each block of k (128, 32) in f32, then add it
 * times weight scale × the token's block scale × 2^8 (for MXFP8 the e8m0 weight scales are packed
 * rows16 after the NaN flags), split in two factors where that product leaves the f32 range
 * (linear_cpu.h); 3 tokens per pass there (block + total accumulators).
 *
 *   packed  rows16k4 codes (layout/rows16.c): u8 [N/16, K/4, 16, 4]; a ymm at (tile, group, half)
 *           holds k 4g..4g+3 of 8 rows, one dword per row. Then u8 [N] NaN-row flags.
 *   decode  vpshufb puts code (r, 4g+j) in the top byte of dword r; vpsrad 4 and an AND with
 *           0x87F00000 leave sign at bit 31 and e4m3's exponent+mantissa at bits 26..20: the f32
 *           whose value is D(code)·2^-120, exact for every finite code, subnormals included (the
 *           f32 is then subnormal with mantissa m·2^20: m·2^-129 = m·2^-9·2^-120).
 *   x       the pair's quantizer, the AVX2 twin of the reference (e4m3 codes; per-token scale
 *           apart), decoded by a table to the value times 2^112 (exact: |x| <= 448 stays below
 *           2^121), f32 [M, K rounded up to 4, zero-padded]
 *   y       Σ_k f32 products (each exact: 4 × 4 significant bits) = y·2^-8; ×256 (exact), then
 *           × per-token scale × row_scale (+ bias), as moq_y_store_tile16.
 * The decode maps NaN codes (0x7F, 0xFF) to finite values; a row that holds one is flagged at
 * pack time and its outputs are NaN for every token, which is what the `_ref` twin gives.
 * M = 1 keeps four accumulators per 8 rows (one per k of a group) so FMA latency does not bound
 * it; up to MT = 6 tokens share each decoded vector of a whole tile (tile_tokens), groups of 8 (or
 * a last 7) tokens of the unblocked pairs each decoded 8-row half (half_tokens). Threads: chunks of 16-row tiles claimed one ahead,
 * the packed codes prefetched 16 KiB ahead along them (tile_prefetch.h).
 * Reference: linear_ref.c. Test: tests/kernels/test_linear.c.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/y_store_avx2.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define MT 6
#define X_SCALE 0x1p112f

static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16k4_size(w->N, w->K) + 63) & ~(size_t)63; }
static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }

/* Block-scaled pairs: k per block (128: FP8 128x128, 32: MXFP8), 0 for the others. */
static int64_t bk_of(const moq_weight *w) { return w->w.group_cols > 1 ? w->w.group_cols : 0; }
static size_t nan_bytes(const moq_weight *w) { return ((size_t)w->N + 63) & ~(size_t)63; }
/* e8m0 block scales (MXFP8) in rows16 after the NaN flags: one 16-byte load per tile and block.
 * Then, block-scaled pairs, 64 bytes: the range of the weight block scales (moq_blk_exact). */
static bool row_scales(const moq_weight *w) { return w->w.scale_elem == MOQ_ELEM_E8M0; }
static size_t mx_bytes(const moq_weight *w) { return row_scales(w) && bk_of(w) > 0 ? moq_layout_rows16_size(w->N, w->K / bk_of(w), 1) : 0; }

size_t moq_linear_fp8_k4_packed_size(const moq_weight *w) { return codes_bytes(w) + nan_bytes(w) + mx_bytes(w) + (bk_of(w) ? 64 : 0); }

size_t moq_linear_fp8_k4_nan_offset(const moq_weight *w) { return codes_bytes(w); }
size_t moq_linear_fp8_k4_scale_offset(const moq_weight *w) { return codes_bytes(w) + nan_bytes(w); }
size_t moq_linear_fp8_k4_range_offset(const moq_weight *w) { return codes_bytes(w) + nan_bytes(w) + mx_bytes(w); }

void moq_linear_fp8_k4_pack(const moq_weight *w, void *dst) {
    const uint8_t *q = w->q;
    uint8_t *nan = (uint8_t *)dst + codes_bytes(w);
    moq_layout_rows16k4_pack(q, w->N, w->K, dst);
#pragma omp parallel for schedule(static) if (w->N * w->K > ((int64_t)1 << 20))
    for (int64_t n = 0; n < w->N; n++) {
        uint8_t f = 0;
        for (int64_t k = 0; k < w->K; k++) f |= (q[n * w->K + k] & 0x7F) == 0x7F;
        nan[n] = f;
    }
    const int64_t bk = bk_of(w);
    if (!bk) return;
    uint8_t *range = (uint8_t *)dst + moq_linear_fp8_k4_range_offset(w);
    memset(range, 0, 64);
    if (row_scales(w)) { /* MXFP8: u8 smallest and largest e8m0 code */
        moq_layout_rows16_pack(w->scale, w->N, w->K / bk, 1, nan + nan_bytes(w));
        const uint8_t *c = w->scale;
        uint8_t lo = 255, hi = 0;
        for (int64_t i = 0; i < w->N * (w->K / bk); i++) lo = c[i] < lo ? c[i] : lo, hi = c[i] > hi ? c[i] : hi;
        range[0] = lo, range[1] = hi;
    } else { /* FP8 128x128: f32 smallest nonzero and largest |scale| (0, 0 if none) */
        const float *sc = w->scale;
        float lo = INFINITY, hi = 0;
        for (int64_t i = 0; i < (w->N + 127) / 128 * (w->K / bk); i++) {
            const float a = fabsf(sc[i]);
            if (a != 0 && a < lo) lo = a;
            if (a > hi) hi = a;
        }
        if (hi == 0) lo = 0;
        memcpy(range, &lo, 4), memcpy(range + 4, &hi, 4);
    }
}

bool moq_blk_exact(const moq_weight *w, const void *packed, const float *SX, int64_t M) {
    const int64_t bk = bk_of(w), n = bk ? M * (w->K / bk) : 0;
    const uint8_t *range = (const uint8_t *)packed + moq_linear_fp8_k4_range_offset(w);
    if (row_scales(w)) {
        float lo, hi;
        moq_mx_exact_sx(range[0], range[1], &lo, &hi);
        for (int64_t i = 0; i < n; i++)
            if (SX[i] < lo || SX[i] > hi) return false;
        return true;
    }
    float wlo, whi, xlo = INFINITY, xhi = 0;
    memcpy(&wlo, range, 4), memcpy(&whi, range + 4, 4);
    for (int64_t i = 0; i < n; i++) { /* NaN: neither (the F of its blocks is NaN on either path) */
        const float a = fabsf(SX[i]);
        if (a != 0 && a < xlo) xlo = a;
        if (a > xhi) xhi = a;
    }
    if (whi == 0 || xhi == 0) return true; /* every F is 0 */
    return (double)wlo * xlo * 256.0 >= FLT_MIN && (double)whi * xhi * 256.0 <= FLT_MAX;
}

/* Tokens 0..nh-1 run in groups of MH (a last group of MH - 1 too): half_tokens. */
#define MH 8
static int64_t half_rows(const moq_weight *w, int64_t M) { return bk_of(w) ? 0 : M % MH == MH - 1 ? M : M / MH * MH; }

/* Shared: X f32 [M, K4], sm f32 [M], sx f32 [M, K/32] (activation block scales of the
 * block-scaled pairs), then (AVX2 only, unblocked pairs) XI f32 [groups of MH tokens][K4/4][MH][4]:
 * the half_tokens groups' rows interleaved, so one pointer and constant offsets reach all MH
 * tokens' x; per thread: quantizer scratch 2K + 64. X, sm, sx and the per-thread part must match
 * linear_fp8_avx512.c (which leaves XI unused). */
static size_t x_bytes(const moq_weight *w, int64_t M) { return ((size_t)M * (size_t)k4(w) * 4 + (size_t)M * 4 + 63) & ~(size_t)63; }
static size_t sx_bytes(const moq_weight *w, int64_t M) { return ((size_t)M * (size_t)(w->K / 32 + 1) * 4 + 63) & ~(size_t)63; }
static size_t xi_bytes(const moq_weight *w, int64_t M) { return (size_t)((half_rows(w, M) + MH - 1) / MH) * MH * (size_t)k4(w) * 4; }
static size_t shared_bytes(const moq_weight *w, int64_t M) { return x_bytes(w, M) + sx_bytes(w, M) + xi_bytes(w, M); }
static size_t thread_bytes(const moq_weight *w) { return ((size_t)w->K * 2 + 64 + 63) & ~(size_t)63; }

size_t moq_linear_fp8_k4_workspace(const moq_weight *w, int64_t M, int n_threads) {
    return shared_bytes(w, M) + (size_t)n_threads * thread_bytes(w);
}

/* The pair's quantizer (the AVX2 twin of the reference one: the same codes), then codes ->
 * D(code)·2^112 from a 256-entry table (tab); block-scaled pairs keep their activation block
 * scales apart in sx [K/bk]. */
static void prepare_row(const moq_linear_launch *l, int64_t m, float *X, float *sm, float *SX, const float *tab, uint8_t *tmp) {
    const int64_t K = l->w->K, K4 = k4(l->w), bk = bk_of(l->w);
    float *xr = X + m * K4, *sx = SX + m * (K / (bk > 0 ? bk : 32));
    moq_act_e4m3_codes_avx2(l, m, xr, tmp, &sm[m], sx);
    for (int64_t k = 0; k < K; k++) xr[k] = tab[tmp[k]];
    for (int64_t k = K; k < K4; k++) xr[k] = 0.0f;
}

/* e8m0 codes of 8 rows -> 2^(c-127) (c = 0 -> 2^-127, subnormal; 0xFF rejected at create). */
static inline __m256 e8m0x8(__m128i c8) {
    const __m256i v = _mm256_cvtepu8_epi32(c8);
    const __m256i z = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(v, 23), _mm256_set1_epi32(0x00400000), z));
}

/* acc + s · 2^(c-127) · sx · 2^8 per lane (c: e8m0 codes of 8 rows) where that factor F may leave the
 * f32 range (linear_cpu.h): with E = c + log2(sx) + 8 (F's biased exponent; sx a power of two, 2^-127
 * included), a = 2^(clamp(E, 1, 254) - 127) and b = 2^(min(E - clamp(E, 1, 254), 127)): fma(s·b, a, acc). */
static inline __m256 mx_fma_split(__m256 s, __m128i c8, float sx, __m256 acc) {
    if (sx != sx) return _mm256_fmadd_ps(s, _mm256_set1_ps(sx), acc); /* NaN propagates, as on the exact path */
    uint32_t u;
    memcpy(&u, &sx, 4);
    const int ex = (int)((u >> 23) & 255) - 127; /* 2^-127 (subnormal) has exponent field 0: -127 */
    const __m256i E = _mm256_add_epi32(_mm256_cvtepu8_epi32(c8), _mm256_set1_epi32(ex + 8));
    const __m256i ea = _mm256_min_epi32(_mm256_max_epi32(E, _mm256_set1_epi32(1)), _mm256_set1_epi32(254));
    const __m256i eb = _mm256_min_epi32(_mm256_add_epi32(_mm256_sub_epi32(E, ea), _mm256_set1_epi32(127)), _mm256_set1_epi32(254));
    const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(ea, 23)), b = _mm256_castsi256_ps(_mm256_slli_epi32(eb, 23));
    return _mm256_fmadd_ps(_mm256_mul_ps(s, b), a, acc);
}

/* Code (r, 4g+j) of 8 rows -> f32 D(code)·2^-120. */
static inline __m256 dec(__m256i v, __m256i idx) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(v, idx), 4), _mm256_set1_epi32((int)0x87F00000u)));
}

#define NA(mt) ((mt) == 1 ? 4 : (mt) == 2 ? 2 : 1) /* accumulators per (token, half) */

/* blocked, exact: compile-time 0/1 after inlining. Unblocked pairs run all of K as one block.
 * exact (moq_blk_exact): every block factor F is a normal f32, one FMA per block; else F split. */
static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, const float *X, const float *sm, const float *SX,
                                                             int64_t t, int64_t m0, const int mt, const int blocked, const int exact,
                                                             const moq_pf_chunks *pc) {
    const moq_weight *w = l->w;
    const int64_t K4 = k4(w), G = K4 / 4, N = w->N, bk = blocked && bk_of(w) > 0 ? bk_of(w) : K4, nblk = blocked ? w->K / bk : 1;
    const uint8_t *W = (const uint8_t *)l->packed + t * G * 64;
    const uint8_t *nan = (const uint8_t *)l->packed + codes_bytes(w), *SFW = nan + nan_bytes(w) + t * nblk * 16;
    const __m256i idx[4] = {
        _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 4, -1, -1, -1, 8, -1, -1, -1, 12, -1, -1, -1, 0, -1, -1, -1, 4, -1, -1, -1, 8, -1, -1, -1, 12),
        _mm256_setr_epi8(-1, -1, -1, 1, -1, -1, -1, 5, -1, -1, -1, 9, -1, -1, -1, 13, -1, -1, -1, 1, -1, -1, -1, 5, -1, -1, -1, 9, -1, -1, -1, 13),
        _mm256_setr_epi8(-1, -1, -1, 2, -1, -1, -1, 6, -1, -1, -1, 10, -1, -1, -1, 14, -1, -1, -1, 2, -1, -1, -1, 6, -1, -1, -1, 10, -1, -1, -1, 14),
        _mm256_setr_epi8(-1, -1, -1, 3, -1, -1, -1, 7, -1, -1, -1, 11, -1, -1, -1, 15, -1, -1, -1, 3, -1, -1, -1, 7, -1, -1, -1, 11, -1, -1, -1, 15)};
    const int na = NA(mt);
    __m256 acc[MT][2][4], tot[MT][2];
    for (int i = 0; i < mt; i++) tot[i][0] = tot[i][1] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < nblk; kb++) {
        for (int i = 0; i < mt; i++)
            for (int h = 0; h < 2; h++)
                for (int a = 0; a < na; a++) acc[i][h][a] = _mm256_setzero_ps();
        const int64_t g1 = blocked ? (kb + 1) * bk / 4 : G;
        for (int64_t g = kb * bk / 4; g < g1; g++) {
            if (m0 == 0) moq_pf_line(l->packed, G * 64, pc, (t * G + g) * 64 + MOQ_PF_BYTES); /* one line per g; first pass only */
            const __m256i v0 = _mm256_load_si256((const __m256i *)(W + 64 * g)), v1 = _mm256_load_si256((const __m256i *)(W + 64 * g + 32));
            for (int j = 0; j < 4; j++) {
                const __m256 w0 = dec(v0, idx[j]), w1 = dec(v1, idx[j]);
                for (int i = 0; i < mt; i++) {
                    const __m256 x = _mm256_broadcast_ss(X + (m0 + i) * K4 + 4 * g + j);
                    acc[i][0][j % na] = _mm256_fmadd_ps(w0, x, acc[i][0][j % na]);
                    acc[i][1][j % na] = _mm256_fmadd_ps(w1, x, acc[i][1][j % na]);
                }
            }
        }
        for (int i = 0; i < mt; i++)
            for (int h = 0; h < 2; h++) {
                __m256 s = acc[i][h][0];
                for (int a = 1; a < na; a++) s = _mm256_add_ps(s, acc[i][h][a]);
                if (!blocked) {
                    tot[i][h] = s;
                    continue;
                }
                /* tot += s · F, F = weight scale × token block scale × 2^8 (linear_cpu.h). MXFP8: e8m0 per
                 * row and 32 k; FP8 128x128: one f32 per 128 rows and 128 k (a 16-row tile lies in one row block) */
                const float sx = SX[(m0 + i) * nblk + kb];
                if (exact) {
                    const __m256 sc = row_scales(w) ? _mm256_mul_ps(e8m0x8(_mm_loadl_epi64((const __m128i *)(SFW + 16 * kb + 8 * h))), _mm256_set1_ps(sx * 256.0f))
                                                    : _mm256_set1_ps(((const float *)w->scale)[(16 * t / 128) * nblk + kb] * (sx * 256.0f));
                    tot[i][h] = _mm256_fmadd_ps(s, sc, tot[i][h]);
                } else if (row_scales(w)) {
                    tot[i][h] = mx_fma_split(s, _mm_loadl_epi64((const __m128i *)(SFW + 16 * kb + 8 * h)), sx, tot[i][h]);
                } else {
                    float fa, fb;
                    moq_blk128_factor(((const float *)w->scale)[(16 * t / 128) * nblk + kb], sx, &fa, &fb);
                    tot[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(fb)), _mm256_set1_ps(fa), tot[i][h]);
                }
            }
    }
    for (int i = 0; i < mt; i++) {
        float v[16]; /* unblocked: tot counts in 2^-8 (exact ×256); block-scaled: F holds the 2^8 */
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(v + 8 * h, blocked ? tot[i][h] : _mm256_mul_ps(tot[i][h], _mm256_set1_ps(256.0f)));
        const int64_t m = m0 + i;
        for (int r = 0; r < 16 && 16 * t + r < N; r++) {
            const int64_t n = 16 * t + r;
            float y = nan[n] ? NAN : v[r] * sm[m] * l->row_scale[n];
            if (w->bias) y += w->bias[n];
            moq_y_store(l->y, l->y_elem, N, m, n, y);
        }
    }
}

/* Code k = 4g + j of 8 rows (one dword of v per row, k 4g..4g+3 in its bytes) -> f32
 * D(code)·2^-120: the same bits as dec(), by shifts (byte j to the top, then dec's vpsrad and AND),
 * so no shuffle index is held in a register. */
static inline __m256 dec_shift(__m256i v, const int j) {
    const __m256i t = j == 3 ? v : _mm256_slli_epi32(v, 24 - 8 * j);
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(t, 4), _mm256_set1_epi32((int)0x87F00000u)));
}

/* Unblocked pairs, a group of mt = MH (or a last MH - 1) tokens: one 8-row half of the tile per
 * pass, each decoded vector feeding all the tokens' FMAs. Per 8 rows and 4 k: 11 decode ops for
 * 8 tokens, where tile_tokens spends 12 per 6 tokens and decodes the tile again for the rest (M = 8
 * ran 6 + 2: 24 decode ops beside 32 FMAs, on the pipes the FMAs use). x from XI (the group's rows
 * interleaved by k: one pointer, constant offsets). Registers: 8 accumulators, the codes, one
 * decoded vector, one broadcast, the mask. Each (token, row) sum is tile_tokens's single
 * accumulator (mt > 2) in the same k order, and the epilogue the same, so y is bit-equal to it.
 * The first half's pass walks every line of the tile (both halves share each 64-byte group), so it
 * alone prefetches. */
static inline __attribute__((always_inline)) void half_tokens(const moq_linear_launch *l, const float *XI, const float *sm, int64_t t,
                                                             int64_t m0, const int mt, const moq_pf_chunks *pc) {
    const moq_weight *w = l->w;
    const int64_t K4 = k4(w), G = K4 / 4, N = w->N;
    const uint8_t *W = (const uint8_t *)l->packed + t * G * 64, *nan = (const uint8_t *)l->packed + codes_bytes(w);
    const float *xg = XI + m0 / MH * (G * MH * 4);
    for (int h = 0; h < 2; h++) {
        /* named accumulators: gcc kept an __m256 acc[8] array partly on the stack */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int64_t g = 0; g < G; g++) {
            if (m0 == 0 && h == 0) moq_pf_line(l->packed, G * 64, pc, (t * G + g) * 64 + MOQ_PF_BYTES);
            const __m256i v = _mm256_load_si256((const __m256i *)(W + 64 * g + 32 * h));
            const float *xk = xg + g * (MH * 4);
#define HT_FMA(i, a) a = _mm256_fmadd_ps(wv, _mm256_broadcast_ss(xk + 4 * (i) + j), a)
            for (int j = 0; j < 4; j++) {
                const __m256 wv = dec_shift(v, j);
                HT_FMA(0, a0), HT_FMA(1, a1), HT_FMA(2, a2), HT_FMA(3, a3), HT_FMA(4, a4), HT_FMA(5, a5), HT_FMA(6, a6);
                if (mt == MH) HT_FMA(7, a7);
            }
#undef HT_FMA
        }
        const __m256 acc[MH] = {a0, a1, a2, a3, a4, a5, a6, a7};
        const int64_t n0 = 16 * t + 8 * h;
        if (moq_y_rows_fit_avx2(l, n0, 8)) { /* a whole half: the scalar epilogue's operations in vectors */
            const __m256 rs = _mm256_loadu_ps(l->row_scale + n0), b = w->bias ? _mm256_loadu_ps(w->bias + n0) : _mm256_setzero_ps();
            const __m256 isnan = moq_nan_rows8_avx2(nan + n0);
            for (int i = 0; i < mt; i++) {
                __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(acc[i], _mm256_set1_ps(256.0f)), _mm256_set1_ps(sm[m0 + i])), rs);
                y = _mm256_blendv_ps(y, _mm256_set1_ps(NAN), isnan);
                if (w->bias) y = _mm256_add_ps(y, b);
                moq_y_row8_avx2(l, m0 + i, n0, y);
            }
            continue;
        }
        for (int i = 0; i < mt; i++) {
            float v[8];
            _mm256_storeu_ps(v, _mm256_mul_ps(acc[i], _mm256_set1_ps(256.0f)));
            const int64_t m = m0 + i;
            for (int r = 0; r < 8 && 16 * t + 8 * h + r < N; r++) {
                const int64_t n = 16 * t + 8 * h + r;
                float y = nan[n] ? NAN : v[r] * sm[m] * l->row_scale[n];
                if (w->bias) y += w->bias[n];
                moq_y_store(l->y, l->y_elem, N, m, n, y);
            }
        }
    }
}

/* Row m of X (prepared) into its half_tokens group's slot of XI. */
static void interleave_row(const moq_weight *w, const float *X, float *XI, int64_t m) {
    const int64_t K4 = k4(w), G = K4 / 4;
    const float *xr = X + m * K4;
    float *xg = XI + m / MH * (G * MH * 4) + 4 * (m % MH);
    for (int64_t g = 0; g < G; g++) memcpy(xg + g * (MH * 4), xr + 4 * g, 4 * sizeof(float));
}

moq_status moq_linear_fp8_k4_run_avx2(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, tiles = (w->N + 15) / 16;
    const int blocked = bk_of(w) != 0, mtmax = blocked ? 3 : MT; /* block + total accumulators: 3 tokens fit */
    float *X = l->ws, *sm = X + M * k4(w), *SX = (float *)((uint8_t *)l->ws + x_bytes(w, M));
    float *XI = (float *)((uint8_t *)l->ws + x_bytes(w, M) + sx_bytes(w, M));
    const int64_t nh = half_rows(w, M);
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    float tab[256];
    for (int c = 0; c < 256; c++) tab[c] = moq_e4m3_decode((uint8_t)c) * X_SCALE;
    /* Decode (M <= 4): rows prepared before the team starts, so the join is the only sync point. */
    if (M <= 4)
        for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, SX, tab, thr0);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *tmp = thr0 + (size_t)omp_get_thread_num() * thread_bytes(w);
        if (M > 4) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) {
                prepare_row(l, m, X, sm, SX, tab, tmp);
                if (m < nh) interleave_row(w, X, XI, m);
            }
        }
        /* every row prepared (the omp for's barrier): each thread reads the same answer */
        const bool exact = !blocked || moq_blk_exact(w, l->packed, SX, M);
        /* Chunks of MOQ_PF_CHUNK tiles, each thread claiming its next one ahead (tile_prefetch.h). */
        moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
        moq_pf_chunks pc;
        int64_t t0;
        while (moq_pf_walk_next(&wk, &t0, &pc)) {
            for (int64_t t = t0; t < pc.t1; t++)
                for (int64_t m0 = 0, mt; m0 < M; m0 += mt) {
                    mt = M - m0 < mtmax ? M - m0 : mtmax;
                    if (m0 < nh) { /* 8 (or a last 7) tokens: half-tile passes */
                        mt = M - m0 >= MH ? MH : MH - 1;
                        if (mt == MH) half_tokens(l, XI, sm, t, m0, MH, &pc);
                        else half_tokens(l, XI, sm, t, m0, MH - 1, &pc);
                    } else if (blocked && exact) {
                        switch (mt) {
                        case 1: tile_tokens(l, X, sm, SX, t, m0, 1, 1, 1, &pc); break;
                        case 2: tile_tokens(l, X, sm, SX, t, m0, 2, 1, 1, &pc); break;
                        default: tile_tokens(l, X, sm, SX, t, m0, 3, 1, 1, &pc); break;
                        }
                    } else if (blocked) {
                        switch (mt) {
                        case 1: tile_tokens(l, X, sm, SX, t, m0, 1, 1, 0, &pc); break;
                        case 2: tile_tokens(l, X, sm, SX, t, m0, 2, 1, 0, &pc); break;
                        default: tile_tokens(l, X, sm, SX, t, m0, 3, 1, 0, &pc); break;
                        }
                    } else {
                        switch (mt) {
                        case 1: tile_tokens(l, X, sm, SX, t, m0, 1, 0, 1, &pc); break;
                        case 2: tile_tokens(l, X, sm, SX, t, m0, 2, 0, 1, &pc); break;
                        case 3: tile_tokens(l, X, sm, SX, t, m0, 3, 0, 1, &pc); break;
                        case 4: tile_tokens(l, X, sm, SX, t, m0, 4, 0, 1, &pc); break;
                        case 5: tile_tokens(l, X, sm, SX, t, m0, 5, 0, 1, &pc); break;
                        default: tile_tokens(l, X, sm, SX, t, m0, 6, 0, 1, &pc); break;
                        }
                    }
                }
        }
    }
    return MOQ_OK;
}
