/* linear_nvfp4_w4a16_avx2.c — NVFP4 W4A16 (e2m1 weights, 16-blocks with e4m3 scales; bf16 / f32
 * activations) decode on AVX2 + FMA + F16C, without an f32 panel (issue 14).
 *
 * Packed layout: the dequant-panel row's (rows16 codes, rows16 e4m3 block scales) with the codes
 * of each 16-row × 4-k chunk regrouped (k4n, nvfp4_k4n_avx2.h: moq_linear_nvfp4_w4a16_pack_avx2),
 * then one byte per 16-row tile: 1 when all its scale codes are 0x00..0x7E (the M = 1 short scale
 * decode); workspace: the panel row's plus the M = 1 activation digits. M > GEMV_M hands the call to
 * moq_linear_panel_run_avx2, whose NVFP4 decode turns k4n chunks back into rows16 columns.
 *
 * M = 1 (tiles_digits; issue 14, branch w4a16): integer block sums. x of each 16-block becomes
 * v = round(x·2^-e) (max |v| in [2^19, 2^20]) in three signed 8-bit digits, so bf16 x is exact unless
 * an element lies more than 2^12 below its block's largest, and every x within 2^-21 of that largest
 * (x_digits); the weights are u8 2·e2m1 + 12, one vpshufb per nibble of a k4n chunk giving each
 * row's (k, k+1) pair in neighbouring bytes, and vpmaddubsw sums weight pair × digit pair, 8 pairs
 * per block in s16; per block a·2^16 + b·2^8 + c in s32 (exact), to f32, × D4(SF)/256 × 2^(e+7) into
 * f32 totals (one rounding per block, as the f32 path); the block scale straight from its code to
 * f32 (code << 20 = D4(SF)·2^-120, × 2^(e+119)) where the tile flag and x allow, else through f16;
 * the codes prefetched PF_CODES ahead. Two tiles per pass share the x digits. x
 * blocks with a non-finite or out-of-range (2^±100) largest element send the call to the f32 path
 * (tile_one).
 *
 * M = 2..8 and that fallback (tile_tokens, tile_one), per 16 rows and one byte column (32 weights,
 * half a k4n chunk: k4n_lut_col):
 *   vpshufb on the 16-entry table 2·e2m1 as int8 {0,1,2,3,4,6,8,12,-0,..,-12} -> vpmovsxbd ->
 *   vcvtdq2ps -> × (D4(SF)/2) (the block scale, decoded once per 16-block, 8 rows per ymm) ->
 *   f32 FMA with the broadcast activation.
 * Exactness: 2·e2m1 has ≤ 2 significant bits and e4m3 ≤ 4, so w·SF is exact in f32 and equals the
 * panel row's decoded weight; × a bf16 activation (8 bits) the product is exact too (f32
 * activations: rounded once, as in the panel row). Sums in f32, two chains per 8 rows per token
 * (four at M = 2); global scale and bias in the epilogue (moq_y_store_tile16). So the result is the
 * panel row's up to summation order. tile_one instead sums the 16 products (2w)·x of a
 * block first (exact products, f32 sums) and multiplies that by D4(SF)/2 once per block: one more
 * rounding per block, within the test tolerance. Tokens: up to MT per pass over a 16-row tile.
 * Threads: OpenMP over 16-row tiles (M = 1: pairs of them). Reference: linear_ref.c.
 * Tests: tests/kernels/test_linear.c (test_nvfp4_w4a16_avx2_decode, _x_ranges, the sweep).
 */
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/nvfp4_k4n_avx2.h"
#include "kernels/layout/layout.h"

#define GEMV_M 8
#define MT 4
#define KC 256 /* only for the workspace layout: must match linear_dequant_panel_avx512.c */
/* M = 1: software prefetch distance of the codes (bytes ahead in each tile's stream; the scales
 * PF_CODES / 8 ahead). 2048 and 3072 measured alike cold, 1024 slower, none 3-5 % slower. */
#define PF_CODES 2048

static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16_size(w->N, w->K / 2, 1) + 63) & ~(size_t)63; }
/* Must match moq_linear_panel_workspace's layout (linear_dequant_panel_avx512.c). */
static size_t thread_bytes(const moq_weight *w, int64_t M) {
    return (size_t)KC * 64 + (size_t)KC * 32 + (size_t)M * 64 + (((size_t)w->K * 2 + 64 + 63) & ~(size_t)63);
}
static size_t shared_bytes(const moq_weight *w, int64_t M) {
    return (((size_t)M * (size_t)w->K * 4 + (size_t)M * 4 + 63) & ~(size_t)63) +
           (((size_t)M * (size_t)(w->K + 1) / 2 * 4 + 63) & ~(size_t)63);
}

/* 8 e4m3 codes -> f32 / 256 (exact: f16 shift; NaN codes -> f16 NaN). */
static inline __m256 e4m3x8_div256(__m128i c8) {
    const __m128i w = _mm_cvtepu8_epi16(c8);
    __m128i t = _mm_slli_epi16(w, 7);
    t = _mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000)));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7F));
    return _mm256_cvtph_ps(_mm_or_si128(t, nan));
}

/* 16 e4m3 codes -> f16 bits of the values / 256 (the rule of e4m3x8_div256). */
static inline __m256i e4m3x16_f16div256(__m128i c16) {
    const __m256i w = _mm256_cvtepu8_epi16(c16);
    __m256i t = _mm256_slli_epi16(w, 7);
    t = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000)));
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F));
    return _mm256_or_si256(t, nan);
}

static inline __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

/* C [mt, 16] = Σ_k W[16 t + r, k] · X[m0 + i, k] for tile t; mt is a constant after inlining. */
static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, int64_t t, const float *X, int64_t m0,
                                                             float *C, const int mt) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W = (const uint8_t *)l->packed + (size_t)(t * (K / 2)) * 16;
    const uint8_t *SF = (const uint8_t *)l->packed + codes_bytes(l->w) + (size_t)(t * nb) * 16;
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4,
                                         -6, -8, -12);
    const __m256 c128 = _mm256_set1_ps(128.0f); /* D4/256 · 128 = D4/2: the table holds 2·e2m1 */
    const int np = mt <= 2 ? 2 : 1; /* accumulator chains per 8 rows: k parity at mt <= 2, else one */
    __m256 acc[MT][2][2];
    for (int i = 0; i < mt; i++)
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < np; p++) acc[i][h][p] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m128i sc = _mm_load_si128((const __m128i *)(SF + 16 * b));
        const __m256 s0 = _mm256_mul_ps(e4m3x8_div256(sc), c128), s1 = _mm256_mul_ps(e4m3x8_div256(_mm_srli_si128(sc, 8)), c128);
        for (int j2 = 0; j2 < 8; j2 += 2) { /* a k4n chunk: byte columns j2, j2 + 1 */
            const __m256i n = _mm256_load_si256((const __m256i *)(W + (size_t)(8 * b + j2) * 16));
#pragma GCC unroll 1
            for (int h = 0; h < 2; h++) {
                const int64_t k = 16 * b + 2 * (j2 + h);
                const __m256i v = k4n_lut_col(n, h, lut); /* rows 0-7: k, k+1 | rows 8-15: k, k+1 */
                const __m128i r0 = _mm256_castsi256_si128(v), r1 = _mm256_extracti128_si256(v, 1);
                const __m256 wl0 = _mm256_mul_ps(i8x8_ps(r0), s0), wl1 = _mm256_mul_ps(i8x8_ps(r1), s1);
                const __m256 wh0 = _mm256_mul_ps(i8x8_ps(_mm_srli_si128(r0, 8)), s0), wh1 = _mm256_mul_ps(i8x8_ps(_mm_srli_si128(r1, 8)), s1);
                for (int i = 0; i < mt; i++) {
                    const float *x = X + (size_t)(m0 + i) * (size_t)K + k;
                    const __m256 x0 = _mm256_broadcast_ss(x), x1 = _mm256_broadcast_ss(x + 1);
                    const int q = np - 1; /* second chain for the odd k at mt <= 2 */
                    acc[i][0][0] = _mm256_fmadd_ps(wl0, x0, acc[i][0][0]);
                    acc[i][1][0] = _mm256_fmadd_ps(wl1, x0, acc[i][1][0]);
                    acc[i][0][q] = _mm256_fmadd_ps(wh0, x1, acc[i][0][q]);
                    acc[i][1][q] = _mm256_fmadd_ps(wh1, x1, acc[i][1][q]);
                }
            }
        }
    }
    for (int i = 0; i < mt; i++) {
        __m256 a = acc[i][0][0], c = acc[i][1][0];
        if (np == 2) a = _mm256_add_ps(a, acc[i][0][1]), c = _mm256_add_ps(c, acc[i][1][1]);
        _mm256_store_ps(C + 16 * (m0 + i), a);
        _mm256_store_ps(C + 16 * (m0 + i) + 8, c);
    }
}

/* M = 1: the block scale applied once per 16-block to 4 block accumulators (8 rows × k parity)
 * instead of once per decoded weight: 4 FMAs per block and 16 rows instead of 32 multiplies. */
static void tile_one(const moq_linear_launch *l, int64_t t, const float *X, int64_t m0, float *C) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W = (const uint8_t *)l->packed + (size_t)(t * (K / 2)) * 16;
    const uint8_t *SF = (const uint8_t *)l->packed + codes_bytes(l->w) + (size_t)(t * nb) * 16;
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4,
                                         -6, -8, -12);
    const float *x = X + (size_t)m0 * (size_t)K;
    /* Two totals (rows 0-7, 8-15): both k parities of a block land in the same one; the block
     * scale goes in as D4(SF)/256 and the 128 after the last block (powers of two: the same
     * roundings as multiplying by D4(SF)/2 per block, no under- or overflow for e4m3 scales).
     * The j loop two at a time: fully unrolled, GCC ran out of ymm registers and reloaded lut from
     * memory and spilled to the stack every iteration. */
    __m256 t0 = _mm256_setzero_ps(), t1 = t0;
    for (int64_t b = 0; b < nb; b++) {
        __m256 b00 = _mm256_setzero_ps(), b01 = b00, b10 = b00, b11 = b00;
        for (int j2 = 0; j2 < 8; j2 += 2) { /* a k4n chunk: byte columns j2, j2 + 1 */
            const __m256i n = _mm256_load_si256((const __m256i *)(W + (size_t)(8 * b + j2) * 16));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = j2 + h;
                const __m256i v = k4n_lut_col(n, h, lut); /* rows 0-7: k, k+1 | rows 8-15: k, k+1 */
                const __m128i r0 = _mm256_castsi256_si128(v), r1 = _mm256_extracti128_si256(v, 1);
                const __m256 x0 = _mm256_broadcast_ss(x + 16 * b + 2 * j), x1 = _mm256_broadcast_ss(x + 16 * b + 2 * j + 1);
                b00 = _mm256_fmadd_ps(i8x8_ps(r0), x0, b00);
                b10 = _mm256_fmadd_ps(i8x8_ps(r1), x0, b10);
                b01 = _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(r0, 8)), x1, b01);
                b11 = _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(r1, 8)), x1, b11);
            }
        }
        const __m128i sc = _mm_load_si128((const __m128i *)(SF + 16 * b));
        const __m256 s0 = e4m3x8_div256(sc), s1 = e4m3x8_div256(_mm_srli_si128(sc, 8));
        t0 = _mm256_fmadd_ps(b00, s0, t0), t0 = _mm256_fmadd_ps(b01, s0, t0);
        t1 = _mm256_fmadd_ps(b10, s1, t1), t1 = _mm256_fmadd_ps(b11, s1, t1);
    }
    const __m256 c128 = _mm256_set1_ps(128.0f);
    _mm256_store_ps(C + 16 * m0, _mm256_mul_ps(t0, c128));
    _mm256_store_ps(C + 16 * m0 + 8, _mm256_mul_ps(t1, c128));
}

/* M = 1, integer block sums (issue 14). x of each 16-block on a shared power of two: v = round(x·2^-e),
 * max |v| in [2^19, 2^20], written as three signed 8-bit digits v = a·2^16 + b·2^8 + c (|a| <= 16,
 * b, c in [-128, 127]); so x is exact unless an element is more than 2^12 below its block's largest
 * (then within 2^-21 of that largest). The weights as u8 2·e2m1 + 12 in [0, 24]: one vpshufb per
 * nibble of a k4n chunk gives a row's (k, k+1) byte pairs (tiles_digits); vpmaddubsw per digit
 * (pair sums <= 2·24·128), the block's 8 pairs summed in s16 from -12·Σ digit (the +12 of the
 * weights; the end value 2·Σ w·digit, |.| <= 16·12·128 = 24576, fits), then per block
 * a·2^16 + b·2^8 + c in s32 (exact), to f32 once, × D4(SF)/256 × 2^(e+7) into the f32 totals: one
 * rounding per block, like tile_one. Two tiles per pass share the x loads. */
typedef struct {
    const int32_t *d[3]; /* [K/2] digit pairs (k, k+1) of a, b, c, each pair twice: one vpbroadcastd */
    const int32_t *corr; /* [K/16][4] -12·Σ of each digit over the block, an s16 twice (the +12 of the weights) */
    const float   *xs;   /* [K/16] 2^(e+7) */
    const float   *xs120; /* [K/16] 2^(e+119), or NULL when a block's e > 8 (2^(e+119) would overflow) */
} xdigits;

/* X [K] -> xdigits; false when a block's largest |x| is not finite or outside [2^-100, 2^100)
 * (then the caller runs tile_one). *e_max: the largest e. */
static bool x_digits(const float *X, int64_t K, int32_t *d0, int32_t *d1, int32_t *d2, int32_t *corr, float *xs, int *e_max) {
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), c128 = _mm256_set1_epi32(128), c255 = _mm256_set1_epi32(255);
    int32_t *d[3] = {d0, d1, d2};
    *e_max = -1000;
    for (int64_t b = 0; b < K / 16; b++) {
        const __m256 v0 = _mm256_loadu_ps(X + 16 * b), v1 = _mm256_loadu_ps(X + 16 * b + 8);
        const __m256i m = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(v0), absm), _mm256_and_si256(_mm256_castps_si256(v1), absm));
        __m128i q = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
        q = _mm_max_epi32(q, _mm_shuffle_epi32(q, 0x4E));
        q = _mm_max_epi32(q, _mm_shuffle_epi32(q, 0xB1));
        const uint32_t mx = (uint32_t)_mm_cvtsi128_si32(q);
        int e = 0;
        if (mx != 0) {
            const int ex = (int)(mx >> 23) - 127; /* max |x| in [2^ex, 2^(ex+1)) */
            if (mx >= 0x7F800000u || ex < -100 || ex >= 100) return false;
            e = ex - 19;
        }
        *e_max = e > *e_max ? e : *e_max;
        const __m256 inv = _mm256_castsi256_ps(_mm256_set1_epi32((127 - e) << 23));
        __m256i r[2] = {_mm256_cvtps_epi32(_mm256_mul_ps(v0, inv)), _mm256_cvtps_epi32(_mm256_mul_ps(v1, inv))}; /* |v| <= 2^20 */
        uint32_t u = (uint32_t)(127 + e + 7) << 23;
        memcpy(&xs[b], &u, 4);
        for (int g = 2; g >= 0; g--) { /* c, then b, then a */
            __m256i dg[2];
            for (int h = 0; h < 2; h++) {
                dg[h] = g ? _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(r[h], c128), c255), c128) : r[h];
                r[h] = _mm256_srai_epi32(_mm256_sub_epi32(r[h], dg[h]), 8);
            }
            const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(dg[0], dg[1]), 0xD8); /* k 0..15 as s16 */
            const __m128i by = _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
            const __m256i pr = _mm256_cvtepu16_epi32(by); /* (k, k+1) byte pairs */
            _mm256_storeu_si256((__m256i *)(d[g] + 8 * b), _mm256_or_si256(pr, _mm256_slli_epi32(pr, 16)));
            const __m256i s = _mm256_add_epi32(dg[0], dg[1]);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            const uint32_t c16 = (uint16_t)(-12 * _mm_cvtsi128_si32(s4)); /* |12·Σ| <= 12·16·128 */
            corr[4 * b + g] = (int32_t)(c16 | c16 << 16);
        }
    }
    return true;
}

/* One digit over one chunk of both tiles: S[u] += p0[u]·x0 + p1[u]·x1 (u8 × s8 pairs, s16 sums). */
static inline __attribute__((always_inline)) void digit_step(__m256i S[2], const __m256i p0[2], const __m256i p1[2], __m256i x0, __m256i x1) {
    for (int u = 0; u < 2; u++) {
        S[u] = _mm256_add_epi16(S[u], _mm256_add_epi16(_mm256_maddubs_epi16(p0[u], x0), _mm256_maddubs_epi16(p1[u], x1)));
        __asm__("" : "+x"(S[u])); /* in order: GCC otherwise reassociates the sums to the block's end and spills */
    }
}

/* Where the per-tile scale flags start: after the panel's codes and rows16 scales. */
static size_t flags_offset(const moq_weight *w) { return (moq_linear_panel_packed_size(w) + 63) & ~(size_t)63; }

/* Tiles t and t2 (t2 = t for a last odd tile): C [2][16]. One 32-byte k4n chunk (16 rows × 4 k,
 * nvfp4_k4n_avx2.h) per tile and step: one vpshufb per nibble gives the rows' (k, k+1) and
 * (k+2, k+3) u8 pairs, rows 0-7 | 8-15 in the lanes; the x digits of a step feed both tiles.
 * Per block the digit sums are combined in the lane order of vpunpck*wd (rows 0-3 | 8-11 and
 * 4-7 | 12-15), the block scales decoded into the same order, the totals put back in row order
 * once at the end. plain: every scale code of both tiles in 0x00..0x7E (the pack's flag) and every
 * block's e <= 8: the f32 bits code << 20 are D4(SF)·2^-120 exactly (e4m3 subnormals become f32
 * subnormals of the same scale), times 2^(e+119) (xs120) the same D4(SF)/256 · 2^(e+7) as the
 * general path's, which decodes through f16 (sign to bit 15, NaN codes to f16 NaN). */
static inline __attribute__((always_inline)) void tiles_digits_impl(const moq_linear_launch *l, int64_t t, int64_t t2, const xdigits *xd, float *C,
                                                                    const bool plain) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W[2] = {(const uint8_t *)l->packed + (size_t)t * (size_t)(K / 2) * 16, (const uint8_t *)l->packed + (size_t)t2 * (size_t)(K / 2) * 16};
    const uint8_t *SF[2] = {(const uint8_t *)l->packed + codes_bytes(l->w) + (size_t)t * (size_t)nb * 16,
                            (const uint8_t *)l->packed + codes_bytes(l->w) + (size_t)t2 * (size_t)nb * 16};
    const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10,
                                         9, 8, 6, 4, 0); /* 2·e2m1 + 12 */
    const __m256i low4 = _mm256_set1_epi8(0x0F), z = _mm256_setzero_si256(), c256 = _mm256_set1_epi32(0x00010100);
    /* scale bytes (both lanes: rows 0..15) of rows 0-3 | 8-11 and 4-7 | 12-15 to byte 2 of a dword */
    const __m256i sf0 = _mm256_setr_epi8(-1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1,
                                         11, -1);
    const __m256i sf1 = _mm256_add_epi32(sf0, _mm256_set1_epi32(0x00040000));
    __m256 tot[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}}; /* [tile][rows 0-3|8-11, 4-7|12-15] */
    for (int64_t b = 0; b < nb; b++) {
        /* s16 digit sums, words = rows 0..15; from -12·Σ digit: the sums end at 2·Σ w·digit
         * (|.| <= 24576; vpaddw wraps, so only the end must fit) */
        __m256i A[2], B[2], Cd[2];
        A[0] = A[1] = _mm256_set1_epi32(xd->corr[4 * b]);
        B[0] = B[1] = _mm256_set1_epi32(xd->corr[4 * b + 1]);
        Cd[0] = Cd[1] = _mm256_set1_epi32(xd->corr[4 * b + 2]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int64_t g = 4 * b + j; /* chunk: k = 4g .. 4g + 3, digit pairs 2g, 2g + 1 */
            __m256i p0[2], p1[2];
            if ((j & 1) == 0) /* one per 64-byte line */
                for (int u = 0; u < 2; u++) _mm_prefetch((const char *)(W[u] + (size_t)g * 32 + PF_CODES), _MM_HINT_T0);
            if (j == 1 && (b & 3) == 0)
                for (int u = 0; u < 2; u++) _mm_prefetch((const char *)(SF[u] + 16 * b + PF_CODES / 8), _MM_HINT_T0);
            for (int u = 0; u < 2; u++) {
                const __m256i n = _mm256_load_si256((const __m256i *)(W[u] + (size_t)g * 32));
                p0[u] = _mm256_shuffle_epi8(lut, _mm256_and_si256(n, low4));                        /* (4g, 4g + 1) */
                p1[u] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(n, 4), low4)); /* (4g + 2, 4g + 3) */
            }
            digit_step(A, p0, p1, _mm256_set1_epi32(xd->d[0][2 * g]), _mm256_set1_epi32(xd->d[0][2 * g + 1]));
            digit_step(B, p0, p1, _mm256_set1_epi32(xd->d[1][2 * g]), _mm256_set1_epi32(xd->d[1][2 * g + 1]));
            digit_step(Cd, p0, p1, _mm256_set1_epi32(xd->d[2][2 * g]), _mm256_set1_epi32(xd->d[2][2 * g + 1]));
        }
        const __m256 xs = _mm256_broadcast_ss((plain ? xd->xs120 : xd->xs) + b);
        for (int u = 0; u < 2; u++) {
            /* a·2^16 (a in the high word) + (b, c)·(256, 1); lanes rows 0-3 | 8-11, 4-7 | 12-15 */
            const __m256 s0 = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_unpacklo_epi16(z, A[u]), _mm256_madd_epi16(_mm256_unpacklo_epi16(B[u], Cd[u]), c256)));
            const __m256 s1 = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_unpackhi_epi16(z, A[u]), _mm256_madd_epi16(_mm256_unpackhi_epi16(B[u], Cd[u]), c256)));
            __m256 f0, f1; /* the block scales of rows 0-3 | 8-11 and 4-7 | 12-15 */
            if (plain) {
                const __m256i sc = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(SF[u] + 16 * b)));
                f0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_shuffle_epi8(sc, sf0), 4)); /* D4·2^-120 */
                f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_shuffle_epi8(sc, sf1), 4));
            } else {
                const __m256i h = e4m3x16_f16div256(_mm_shuffle_epi32(_mm_load_si128((const __m128i *)(SF[u] + 16 * b)), 0xD8)); /* D4/256 */
                f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
            }
            tot[u][0] = _mm256_fmadd_ps(s0, _mm256_mul_ps(f0, xs), tot[u][0]);
            tot[u][1] = _mm256_fmadd_ps(s1, _mm256_mul_ps(f1, xs), tot[u][1]);
        }
    }
    for (int u = 0; u < 2; u++) {
        _mm256_store_ps(C + 16 * u, _mm256_permute2f128_ps(tot[u][0], tot[u][1], 0x20));
        _mm256_store_ps(C + 16 * u + 8, _mm256_permute2f128_ps(tot[u][0], tot[u][1], 0x31));
    }
}

static void tiles_digits(const moq_linear_launch *l, int64_t t, int64_t t2, const xdigits *xd, float *C) {
    const uint8_t *plain = (const uint8_t *)l->packed + flags_offset(l->w);
    if (xd->xs120 && plain[t] && plain[t2]) tiles_digits_impl(l, t, t2, xd, C, true);
    else tiles_digits_impl(l, t, t2, xd, C, false);
}

/* The row's pack: the panel row's (rows16 codes and scales), then each 16-row × 4-k chunk of the
 * codes regrouped to k4n (nvfp4_k4n_avx2.h), then one flag byte per 16-row tile: 1 when every
 * scale code of its rows is in 0x00..0x7E (not negative, not NaN; tiles_digits' short decode). */
size_t moq_linear_nvfp4_w4a16_packed_size_avx2(const moq_weight *w) { return flags_offset(w) + (size_t)((w->N + 15) / 16); }

void moq_linear_nvfp4_w4a16_pack_avx2(const moq_weight *w, void *dst) {
    moq_linear_panel_pack(w, dst);
    const size_t chunks = (size_t)((w->N + 15) / 16) * (size_t)(w->K / 4);
    uint8_t *p = dst;
    for (size_t i = 0; i < chunks; i++) k4n_from_rows16(p + 32 * i);
    const uint8_t *sf = w->scale;
    const int64_t nb = w->K / 16;
    for (int64_t t = 0; t < (w->N + 15) / 16; t++) {
        uint8_t ok = 1;
        for (int64_t n = 16 * t; n < w->N && n < 16 * t + 16; n++)
            for (int64_t b = 0; b < nb; b++) ok &= sf[n * nb + b] < 0x7F;
        p[flags_offset(w) + (size_t)t] = ok;
    }
}

size_t moq_linear_nvfp4_w4a16_workspace_avx2(const moq_weight *w, int64_t M, int n_threads) {
    const size_t xsplit = M == 1 ? (size_t)w->K / 2 * 4 * 3 + (size_t)(w->K / 16) * 24 : 0; /* xdigits of the one token */
    return moq_linear_panel_workspace_avx2(w, M, n_threads) + ((xsplit + 63) & ~(size_t)63);
}

moq_status moq_linear_nvfp4_w4a16_run_avx2(const moq_linear_launch *l, moq_error *err) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, tiles = (w->N + 15) / 16;
    if (M > GEMV_M) return moq_linear_panel_run_avx2(l, err);
    float *X = l->ws, *sm = X + M * w->K;
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    const size_t tb = thread_bytes(w, M);
    /* Decode: activations widened before the team starts, so the join is the only sync point. */
    for (int64_t m = 0; m < M; m++) moq_act_dequant_row(l, m, X + m * w->K, &sm[m], thr0 + (size_t)KC * 96 + (size_t)M * 64);
    if (M == 1) {
        uint8_t *e = (uint8_t *)l->ws + moq_linear_panel_workspace_avx2(w, M, l->n_threads);
        int32_t *d = (int32_t *)e, *corr = d + 3 * (w->K / 2);
        float *xs = (float *)(corr + 4 * (w->K / 16)), *xs120 = xs + w->K / 16;
        int e_max;
        if (x_digits(X, w->K, d, d + w->K / 2, d + w->K, corr, xs, &e_max)) {
            for (int64_t b = 0; e_max <= 8 && b < w->K / 16; b++) { /* 2^(e+7) -> 2^(e+119): exponent field + 112 */
                uint32_t u;
                memcpy(&u, &xs[b], 4);
                u += 112u << 23;
                memcpy(&xs120[b], &u, 4);
            }
            const xdigits xd = {{d, d + w->K / 2, d + w->K}, corr, xs, e_max <= 8 ? xs120 : NULL};
            const int64_t pairs = (tiles + 1) / 2;
#pragma omp parallel for num_threads(l->n_threads) schedule(dynamic, 2)
            for (int64_t p = 0; p < pairs; p++) {
                float C[32] __attribute__((aligned(32)));
                const int64_t t = 2 * p;
                tiles_digits(l, t, t + 1 < tiles ? t + 1 : t, &xd, C);
                moq_y_store_tile16(l, C, sm, t);
                if (t + 1 < tiles) moq_y_store_tile16(l, C + 16, sm, t + 1);
            }
            return MOQ_OK;
        }
    }
#pragma omp parallel num_threads(l->n_threads)
    {
        float *C = (float *)(thr0 + (size_t)omp_get_thread_num() * tb + (size_t)KC * 96);
#pragma omp for schedule(dynamic, 4) /* a descheduled thread (shared VM) holds 4 tiles, not half */
        for (int64_t t = 0; t < tiles; t++) {
            for (int64_t m0 = 0; m0 < M; m0 += MT) {
                switch (M - m0 < MT ? M - m0 : MT) {
                case 1: tile_one(l, t, X, m0, C); break;
                case 2: tile_tokens(l, t, X, m0, C, 2); break;
                case 3: tile_tokens(l, t, X, m0, C, 3); break;
                default: tile_tokens(l, t, X, m0, C, 4); break;
                }
            }
            moq_y_store_tile16(l, C, sm, t);
        }
    }
    return MOQ_OK;
}
