/* linear_dequant_panel_avx512.c — y = x · Wᵀ for every pair on AVX-512: weights decoded to an f32
 * panel, activations quantized then dequantized to f32 once per call, f32 FMA micro-kernel.
 *
 *   packed  rows16 layout (layout/rows16.c) of the codes: e2m1 bytes [N/16, K/2, 16],
 *           e4m3 [N/16, K, 16], bf16/f16 u16 [N/16, K, 16], f32 [N/16, K, 16]; then for NVFP4 and
 *           MXFP8 the block scales in rows16 too: e4m3 [N/16, K/16, 16], e8m0 [N/16, K/32, 16].
 *           FP8 per-channel and 128x128 scales are read from the canonical weight.
 *   X       f32 [M, K]   workspace: activation after the pair's quantizer, dequantized
 *   P       f32 [KC, 16] per thread: one 16-row tile of W for KC columns, decoded once and
 *           reused by every token of the call (prefill), L1-resident (16 KiB)
 *   C       f32 [M, 16]  per thread: accumulators of the tile across KC chunks
 *
 * Decoding is exact: e4m3 -> f16 by a shift (c<<7 puts e4m3's exponent and mantissa in f16's,
 * off by 2^-8, subnormals included; the NaN codes 0x7F/0xFF, finite after the shift, are forced to
 * an f16 NaN, so a corrupt weight gives a NaN output as the `_ref` twin does), vcvtph2ps, then ×256; e2m1 by a 16-entry permute; block
 * scales multiply exactly (D2·D4 and D4·2^e are exact in f32) except FP8 128x128 (D4·s rounds
 * once). Accumulation is f32 in k order per lane; tests/kernels/test_linear.c compares with
 * linear_ref.c (double) at relative Frobenius error <= 1e-5.
 * Variant 1 (rows *_bf16dot, AVX512_BF16), decode only (M <= GEMV_M = 8): when every weight and
 * every dequantized activation value is exactly a bf16 (e4m3 and e4m3·2^e: 4 significant bits;
 * e2m1: 2 bits; bf16 weights with bf16 x), the weights are decoded straight from the packed codes
 * to bf16 pairs (k, k+1) in registers (no panel) and vdpbf16ps does two exact products per lane
 * with f32 accumulation; NVFP4 / MXFP8 block scales multiply a per-block f32 accumulator; BF16
 * column pairs come from one word permute of 64 bytes (issue 15; before, the bf16-pair panel).
 * For M > GEMV_M these rows use the f32 panel (vdpbf16ps, one port, lost to two FMA ports there:
 * docs/PERFORMANCE.md). Calls whose activation does not qualify (NVFP4 W4A16 or BF16 weights
 * with f32 x) take the f32 panel too: same exact products, so this is not a fallback in accuracy.
 * Threads: 16-row tiles (N) in chunks claimed one ahead (tile_prefetch.h; BF16 weights at M <= 2
 * prefetch the packed weight along them); the activation pass over M.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define KC 256 /* panel columns: a multiple of every group along K (16, 32, 128) */
#define MR 12  /* tokens per micro-kernel call: 12 accumulators + 1 weight vector */

static size_t unit_of(const moq_weight *w) { return w->w.elem == MOQ_ELEM_E2M1 ? 1 : (size_t)moq_elem_bytes(w->w.elem, 1); }
static int64_t cols_of(const moq_weight *w) { return w->w.elem == MOQ_ELEM_E2M1 ? w->K / 2 : w->K; }
static int64_t sf_cols(const moq_weight *w) {
    return (w->w.scale_elem == MOQ_ELEM_E4M3 || w->w.scale_elem == MOQ_ELEM_E8M0) ? w->K / w->w.group_cols : 0;
}
static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16_size(w->N, cols_of(w), unit_of(w)) + 63) & ~(size_t)63; }

size_t moq_linear_panel_packed_size(const moq_weight *w) {
    return codes_bytes(w) + (sf_cols(w) ? moq_layout_rows16_size(w->N, sf_cols(w), 1) : 0);
}

void moq_linear_panel_pack(const moq_weight *w, void *dst) {
    moq_layout_rows16_pack(w->q, w->N, cols_of(w), unit_of(w), dst);
    if (sf_cols(w)) moq_layout_rows16_pack(w->scale, w->N, sf_cols(w), 1, (uint8_t *)dst + codes_bytes(w));
}

/* Per thread: P f32 [KC, 16], PB u32 [KC/2, 16], C f32 [M, 16], quantizer scratch. */
static size_t thread_bytes(const moq_weight *w, int64_t M) {
    return (size_t)KC * 64 + (size_t)KC * 32 + (size_t)M * 64 + (((size_t)w->K * 2 + 64 + 63) & ~(size_t)63);
}
/* Shared: X f32 [M, K], sm f32 [M], Xb bf16 [M, K] (K rounded up to even). */
static size_t shared_bytes(const moq_weight *w, int64_t M) {
    return (((size_t)M * (size_t)w->K * 4 + (size_t)M * 4 + 63) & ~(size_t)63) +
           (((size_t)M * (size_t)(w->K + 1) / 2 * 4 + 63) & ~(size_t)63);
}

size_t moq_linear_panel_workspace(const moq_weight *w, int64_t M, int n_threads) {
    return shared_bytes(w, M) + (size_t)n_threads * thread_bytes(w, M);
}

/* e4m3 codes of 16 rows -> f32 values / 256 (exact, subnormals and NaN included: the shift maps
 * S.1111.111 to a finite f16, so those lanes become f16 0xFFFF, a NaN). */
static inline __m512 e4m3x16_div256(__m128i c) {
    const __m256i w = _mm256_cvtepu8_epi16(c);
    __m256i t = _mm256_slli_epi16(w, 7);
    t = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000))); /* bit 14 (sign) -> bit 15 */
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F));
    return _mm512_cvtph_ps(_mm256_or_si256(t, nan));
}

/* e8m0 codes of 16 rows -> 2^(c-127) (c = 0 -> 2^-127, subnormal; 0xFF rejected at create). */
static inline __m512 e8m0x16(__m128i c) {
    const __m512i v = _mm512_cvtepu8_epi32(c);
    const __mmask16 z = _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512());
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(v, 23), z, _mm512_set1_epi32(0x00400000)));
}

/* Decodes columns [k0, k0+kc) of tile t into P [kc, 16] (or returns the packed f32 directly).
 * pf (BF16 decode only, else NULL): prefetch the packed weight MOQ_PF_BYTES ahead (tile_prefetch.h). */
static const float *decode_panel(const moq_linear_launch *l, int64_t t, int64_t k0, int kc, float *P, const moq_pf_chunks *pf) {
    const moq_weight *w = l->w;
    const int64_t K = w->K;
    const uint8_t *pk = l->packed;
    const __m512 c256 = _mm512_set1_ps(256.0f);
    switch (l->pair) {
    case MOQ_PAIR_F32:
        return (const float *)l->packed + (t * K + k0) * 16;
    case MOQ_PAIR_BF16:
        for (int k = 0; k < kc; k++) {
            if (pf && !(k & 1)) moq_pf_line(pk, K * 32, pf, (t * K + k0 + k) * 32 + MOQ_PF_BYTES); /* a line per 2 k */
            const __m256i h = _mm256_load_si256((const __m256i *)(pk + ((t * K + k0 + k) * 16) * 2));
            _mm512_store_ps(P + 16 * k, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
        break;
    case MOQ_PAIR_F16:
        for (int k = 0; k < kc; k++)
            _mm512_store_ps(P + 16 * k, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pk + ((t * K + k0 + k) * 16) * 2))));
        break;
    case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW:
        for (int k = 0; k < kc; k++)
            _mm512_store_ps(P + 16 * k, _mm512_mul_ps(e4m3x16_div256(_mm_load_si128((const __m128i *)(pk + (t * K + k0 + k) * 16))), c256));
        break;
    case MOQ_PAIR_FP8_BLK128:
        for (int k = 0; k < kc; k++) {
            const float s = ((const float *)w->scale)[(t * 16 / 128) * (K / 128) + (k0 + k) / 128];
            const __m512 v = _mm512_mul_ps(e4m3x16_div256(_mm_load_si128((const __m128i *)(pk + (t * K + k0 + k) * 16))), c256);
            _mm512_store_ps(P + 16 * k, _mm512_mul_ps(v, _mm512_set1_ps(s)));
        }
        break;
    case MOQ_PAIR_MXFP8: {
        const uint8_t *sf = pk + codes_bytes(w);
        for (int k = 0; k < kc; k++) {
            const __m512 s = e8m0x16(_mm_load_si128((const __m128i *)(sf + (t * (K / 32) + (k0 + k) / 32) * 16)));
            const __m512 v = _mm512_mul_ps(e4m3x16_div256(_mm_load_si128((const __m128i *)(pk + (t * K + k0 + k) * 16))), c256);
            _mm512_store_ps(P + 16 * k, _mm512_mul_ps(v, s));
        }
        break;
    }
    case MOQ_PAIR_NVFP4: case MOQ_PAIR_NVFP4_W4A16: {
        const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
        const uint8_t *sf = pk + codes_bytes(w);
        const __m512i low4 = _mm512_set1_epi32(0xF);
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < kc; k += 2) {
            if ((k & 15) == 0)
                s = _mm512_mul_ps(e4m3x16_div256(_mm_load_si128((const __m128i *)(sf + (t * (K / 16) + (k0 + k) / 16) * 16))), c256);
            const __m512i b = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pk + (t * (K / 2) + (k0 + k) / 2) * 16)));
            const __m512 lo = _mm512_permutexvar_ps(_mm512_and_si512(b, low4), lut);
            const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
            _mm512_store_ps(P + 16 * k, _mm512_mul_ps(lo, s));
            _mm512_store_ps(P + 16 * k + 16, _mm512_mul_ps(hi, s));
        }
        break;
    }
    case MOQ_PAIR_COUNT: break;
    }
    return P;
}

/* C[i] += Σ_k X[i, k] · P[k] for mr tokens; mr is a constant after inlining. The i loops are
 * unrolled by pragma (here and in microb): without it GCC kept acc[] in memory, storing every
 * accumulator after each FMA (objdump), at about half the FMA rate. */
static inline __attribute__((always_inline)) void micro(const float *P, const float *X, int64_t ldx, int kc, float *C, const int mr) {
    __m512 acc[MR];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) acc[i] = _mm512_load_ps(C + 16 * i);
    for (int k = 0; k < kc; k++) {
        const __m512 w = _mm512_load_ps(P + 16 * k);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(X[i * ldx + k]), w, acc[i]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) _mm512_store_ps(C + 16 * i, acc[i]);
}

/* One token: four independent chains so the FMA latency does not bound decode (M = 1). */
static void micro1(const float *P, const float *X, int kc, float *C) {
    __m512 a0 = _mm512_load_ps(C), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int k = 0;
    for (; k + 4 <= kc; k += 4) {
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(X[k]), _mm512_load_ps(P + 16 * k), a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(X[k + 1]), _mm512_load_ps(P + 16 * k + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(X[k + 2]), _mm512_load_ps(P + 16 * k + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(X[k + 3]), _mm512_load_ps(P + 16 * k + 48), a3);
    }
    for (; k < kc; k++) a0 = _mm512_fmadd_ps(_mm512_set1_ps(X[k]), _mm512_load_ps(P + 16 * k), a0);
    _mm512_store_ps(C, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static void micro_any(const float *P, const float *X, int64_t ldx, int kc, float *C, int mr) {
    switch (mr) {
#define CASE(n) case n: micro(P, X, ldx, kc, C, n); break;
        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: micro1(P, X, kc, C); break;
    }
}

/* bf16 pairs: C[i] += Σ_kp (X[i,2kp]·P[2kp] + X[i,2kp+1]·P[2kp+1]) with vdpbf16ps. */
static inline __attribute__((always_inline)) void microb(const uint32_t *PB, const uint32_t *Xb, int64_t ldx, int kp, float *C, const int mr) {
    __m512 acc[MR];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) acc[i] = _mm512_load_ps(C + 16 * i);
    for (int k = 0; k < kp; k++) {
        const __m512bh w = (__m512bh)_mm512_load_si512(PB + 16 * k);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) acc[i] = _mm512_dpbf16_ps(acc[i], w, (__m512bh)_mm512_set1_epi32((int)Xb[i * ldx + k]));
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) _mm512_store_ps(C + 16 * i, acc[i]);
}

static void microb1(const uint32_t *PB, const uint32_t *Xb, int kp, float *C) {
    __m512 a0 = _mm512_load_ps(C), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int k = 0;
    for (; k + 4 <= kp; k += 4) {
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(PB + 16 * k), (__m512bh)_mm512_set1_epi32((int)Xb[k]));
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_load_si512(PB + 16 * k + 16), (__m512bh)_mm512_set1_epi32((int)Xb[k + 1]));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_load_si512(PB + 16 * k + 32), (__m512bh)_mm512_set1_epi32((int)Xb[k + 2]));
        a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_load_si512(PB + 16 * k + 48), (__m512bh)_mm512_set1_epi32((int)Xb[k + 3]));
    }
    for (; k < kp; k++) a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(PB + 16 * k), (__m512bh)_mm512_set1_epi32((int)Xb[k]));
    _mm512_store_ps(C, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static void microb_any(const uint32_t *PB, const uint32_t *Xb, int64_t ldx, int kp, float *C, int mr) {
    switch (mr) {
#define CASE(n) case n: microb(PB, Xb, ldx, kp, C, n); break;
        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: microb1(PB, Xb, kp, C); break;
    }
}

/* f32 panel [kc, 16] of bf16-exact values -> [kc/2, 16] dwords (bf16 of k low, of k+1 high). */
static void panel_to_bf16_pairs(const float *P, int kc, uint32_t *PB) {
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int k = 0; k < kc; k += 2) {
        const __m512i a = _mm512_srli_epi32(_mm512_castps_si512(_mm512_load_ps(P + 16 * k)), 16);
        const __m512i b = _mm512_and_si512(_mm512_castps_si512(_mm512_load_ps(P + 16 * k + 16)), hi);
        _mm512_store_si512(PB + 8 * k, _mm512_or_si512(a, b));
    }
}

bool moq_linear_panel_bf16_supports(const moq_weight *w, char *why, size_t why_len) {
    if (w->K & 1) { snprintf(why, why_len, "k=%lld is odd, bf16 pairs need k even", (long long)w->K); return false; }
    if (w->w.scale_elem == MOQ_ELEM_E8M0) { /* D4·2^(c-127) must stay a normal bf16: 10 <= c <= 246 */
        const uint8_t *sc = w->scale;
        for (int64_t i = 0; i < w->N * (w->K / 32); i++)
            if (sc[i] < 10 || sc[i] > 246) {
                snprintf(why, why_len, "e8m0 scale code %u at block %lld leaves bf16's normal range", sc[i], (long long)i);
                return false;
            }
    }
    return true;
}


/* ---- decode (M <= GEMV_M = 8; was 4 before issue 15: W4A16 M = 8 then fell to the f32 panel at
 * 5.8× the M = 1 time, now 3.0×) on the bf16 rows: bf16 pairs decoded straight from the packed codes
 * into registers, no panel. Per 32 weights of e4m3 this is ~9 vector ops + 1 vdpbf16ps instead
 * of ~20 through the f32 panel; NVFP4 and MXFP8 keep their block scale out of the bf16 values
 * (D2·D4 is not a bf16 bit pattern one can build with integer ops) and apply it per block to a
 * block accumulator in f32. */
#define GEMV_M 8

/* 32 e4m3 codes, one word each (any order) -> bf16 bits, exact (subnormals from a table, NaN codes
 * to 0xFFFF). */
static inline __m512i e4m3w_to_bf16(__m512i v) {
    static const uint16_t tab[32] = {0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60}; /* bf16 of m·2^-9 */
    const __m512i sub = _mm512_loadu_si512(tab);
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7F));
    __m512i r = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(0x3C00)); /* (e+120, m) */
    r = _mm512_mask_permutexvar_epi16(r, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), mag, sub);
    r = _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(v, 8), _mm512_set1_epi16((short)0x8000), 0xD8); /* C ? B : A */
    return _mm512_or_si512(r, _mm512_movm_epi16(_mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F)))); /* NaN -> 0xFFFF */
}

/* rows16 e4m3 codes of columns k, k+1 (32 bytes) -> dword lane r = (bf16 w[r,k], bf16 w[r,k+1]). */
static inline __m512i e4m3_pair_bf16(const uint8_t *p) {
    static const uint16_t tab[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i il = _mm512_loadu_si512(tab);
    return e4m3w_to_bf16(_mm512_permutexvar_epi16(il, _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)p))));
}

#define DPB(acc, w, xw) _mm512_dpbf16_ps((acc), (__m512bh)(w), (__m512bh)_mm512_set1_epi32((int)(xw)))

/* C[i] (16 rows of tile t) = Σ_k X[i, k] · W[row, k] for mr <= GEMV_M tokens. */
static inline __attribute__((always_inline)) void gemv_tile(const moq_linear_launch *l, int64_t t, const uint32_t *Xb, int64_t K2,
                                                           float *C, const int mr, const moq_pf_chunks *pf) {
    const moq_weight *w = l->w;
    const int64_t K = w->K;
    const uint8_t *pk = l->packed;
    __m512 acc[GEMV_M][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    if (l->pair == MOQ_PAIR_FP8_TENSOR || l->pair == MOQ_PAIR_FP8_ROW) {
        const uint8_t *q = pk + t * K * 16;
        for (int64_t kp = 0; kp < K / 2; kp++) {
            const __m512i wv = e4m3_pair_bf16(q + 32 * kp);
            for (int i = 0; i < mr; i++) acc[i][kp & 1] = DPB(acc[i][kp & 1], wv, Xb[i * K2 + kp]);
        }
    } else if (l->pair == MOQ_PAIR_BF16) {
        /* Columns k, k+1 of 16 rows (64 bytes) -> dword lane r = (w[r,k], w[r,k+1]) by one word
         * permute: each weight read once for all mr tokens (issue 15). k unrolled by 2 so the two
         * accumulator chains per token stay in registers. */
        static const uint16_t tab[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
        const __m512i il = _mm512_loadu_si512(tab);
        const uint8_t *q = pk + t * K * 32;
        int64_t kp = 0;
        for (; kp + 1 < K / 2; kp += 2) {
            if (pf) /* the two lines of this step, MOQ_PF_BYTES ahead */
                for (int j = 0; j < 128; j += 64) moq_pf_line(pk, K * 32, pf, t * K * 32 + 64 * kp + MOQ_PF_BYTES + j);
            const __m512i w0 = _mm512_permutexvar_epi16(il, _mm512_loadu_si512(q + 64 * kp));
            const __m512i w1 = _mm512_permutexvar_epi16(il, _mm512_loadu_si512(q + 64 * kp + 64));
            for (int i = 0; i < mr; i++) acc[i][0] = DPB(acc[i][0], w0, Xb[i * K2 + kp]), acc[i][1] = DPB(acc[i][1], w1, Xb[i * K2 + kp + 1]);
        }
        if (kp < K / 2) {
            const __m512i w0 = _mm512_permutexvar_epi16(il, _mm512_loadu_si512(q + 64 * kp));
            for (int i = 0; i < mr; i++) acc[i][0] = DPB(acc[i][0], w0, Xb[i * K2 + kp]);
        }
    } else if (l->pair == MOQ_PAIR_NVFP4_W4A16 || l->pair == MOQ_PAIR_NVFP4) {
        /* 32 bytes = byte columns j, j+1 of 16 rows = 64 weights. Widened to words, a 32-entry
         * word permute decodes the low nibble (it reads only bits 4:0: the table repeats) and,
         * after a shift, the high nibble; unpacklo/hi then pair (k, k+1) per dword, which puts
         * rows {0-3, 8-11} (A) and {4-7, 12-15} (B) in the lanes, column j in lanes 0-1 and j+1
         * in lanes 2-3. Scales are permuted the same way and the lanes folded back at the end. */
        static const uint16_t d2[32] = {0, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0,
                                        0xC000, 0xC040, 0xC080, 0xC0C0, 0, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
                                        0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
        static const int32_t ia[16] = {0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11};
        static const int32_t ib[16] = {4, 5, 6, 7, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15};
        static const int32_t fold[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
        const __m512i lut = _mm512_loadu_si512(d2), idxa = _mm512_loadu_si512(ia), idxb = _mm512_loadu_si512(ib);
        const uint8_t *q = pk + t * (K / 2) * 16, *sf = pk + codes_bytes(w) + t * (K / 16) * 16;
        __m512 aa[GEMV_M], ab[GEMV_M];
        for (int i = 0; i < mr; i++) aa[i] = ab[i] = _mm512_setzero_ps();
        for (int64_t b = 0; b < K / 16; b++) {
            const __m512 s = _mm512_mul_ps(e4m3x16_div256(_mm_load_si128((const __m128i *)(sf + 16 * b))), _mm512_set1_ps(256.0f));
            __m512 ba[GEMV_M], bb[GEMV_M];
            for (int i = 0; i < mr; i++) ba[i] = bb[i] = _mm512_setzero_ps();
            for (int h = 0; h < 4; h++) {
                const int64_t j = 8 * b + 2 * h; /* byte column = k pair */
                const __m512i wv = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(q + 16 * j)));
                const __m512i lo = _mm512_permutexvar_epi16(wv, lut), hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(wv, 4), lut);
                const __m512i A = _mm512_unpacklo_epi16(lo, hi), B = _mm512_unpackhi_epi16(lo, hi);
                for (int i = 0; i < mr; i++) {
                    const __m512i xv = _mm512_mask_blend_epi32((__mmask16)0xFF00, _mm512_set1_epi32((int)Xb[i * K2 + j]),
                                                               _mm512_set1_epi32((int)Xb[i * K2 + j + 1]));
                    ba[i] = _mm512_dpbf16_ps(ba[i], (__m512bh)A, (__m512bh)xv);
                    bb[i] = _mm512_dpbf16_ps(bb[i], (__m512bh)B, (__m512bh)xv);
                }
            }
            const __m512 sa = _mm512_permutexvar_ps(idxa, s), sb = _mm512_permutexvar_ps(idxb, s);
            for (int i = 0; i < mr; i++) aa[i] = _mm512_fmadd_ps(ba[i], sa, aa[i]), ab[i] = _mm512_fmadd_ps(bb[i], sb, ab[i]);
        }
        const __m512i fi = _mm512_loadu_si512(fold);
        for (int i = 0; i < mr; i++) {
            const __m512 sa = _mm512_add_ps(aa[i], _mm512_shuffle_f32x4(aa[i], aa[i], _MM_SHUFFLE(1, 0, 3, 2)));
            const __m512 sb = _mm512_add_ps(ab[i], _mm512_shuffle_f32x4(ab[i], ab[i], _MM_SHUFFLE(1, 0, 3, 2)));
            acc[i][0] = _mm512_permutex2var_ps(sa, fi, sb);
        }
    } else { /* MXFP8: 32 along K, e8m0 scale */
        const int bk = 32;
        const uint8_t *q = pk + t * K * 16, *sf = pk + codes_bytes(w) + t * (K / bk) * 16;
        for (int64_t b = 0; b < K / bk; b++) {
            const __m512 s = e8m0x16(_mm_load_si128((const __m128i *)(sf + 16 * b)));
            __m512 ab[GEMV_M][2];
            for (int i = 0; i < mr; i++) ab[i][0] = ab[i][1] = _mm512_setzero_ps();
            for (int j = 0; j < bk / 2; j++) {
                const int64_t kp = b * bk / 2 + j;
                const __m512i wv = e4m3_pair_bf16(q + 32 * kp);
                for (int i = 0; i < mr; i++) ab[i][j & 1] = DPB(ab[i][j & 1], wv, Xb[i * K2 + kp]);
            }
            for (int i = 0; i < mr; i++) acc[i][b & 1] = _mm512_fmadd_ps(_mm512_add_ps(ab[i][0], ab[i][1]), s, acc[i][b & 1]);
        }
    }
    for (int i = 0; i < mr; i++) _mm512_store_ps(C + 16 * i, _mm512_add_ps(acc[i][0], acc[i][1]));
}

/* BF16 weights, M = 2..GEMV_M (issue 15, the lm_head of a batched decode step): two 16-row tiles per
 * pass, so each broadcast x pair (a load) feeds two vdpbf16ps; the one-tile loop above does one load
 * per vdpbf16ps, and the loads bounded it (M = 8: 3.3× the M = 1 time at N = 8192, K = 2048).
 * Same products and sums per row as gemv_tile, in the same order. C0, C1: [mr][16]. */
static inline __attribute__((always_inline)) void gemv_bf16_tiles2(const moq_linear_launch *l, int64_t t, const uint32_t *Xb, int64_t K2,
                                                                  float *C0, float *C1, const int mr) {
    static const uint16_t tab[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const int64_t K = l->w->K;
    const __m512i il = _mm512_loadu_si512(tab);
    const uint8_t *q0 = (const uint8_t *)l->packed + t * K * 32, *q1 = q0 + K * 32;
    __m512 a0[GEMV_M], a1[GEMV_M];
    for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < K / 2; kp++) {
        const __m512i w0 = _mm512_permutexvar_epi16(il, _mm512_loadu_si512(q0 + 64 * kp));
        const __m512i w1 = _mm512_permutexvar_epi16(il, _mm512_loadu_si512(q1 + 64 * kp));
        for (int i = 0; i < mr; i++) {
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)Xb[i * K2 + kp]);
            a0[i] = _mm512_dpbf16_ps(a0[i], (__m512bh)w0, xb);
            a1[i] = _mm512_dpbf16_ps(a1[i], (__m512bh)w1, xb);
        }
    }
    for (int i = 0; i < mr; i++) _mm512_store_ps(C0 + 16 * i, a0[i]), _mm512_store_ps(C1 + 16 * i, a1[i]);
}

/* The same two-tile pass for f32 x (the model's lm_head: x is not bf16, so no vdpbf16ps): weights
 * widened to f32 in registers (a shift) instead of through the f32 panel, f32 FMA; per token and
 * tile one chain in k order, the panel path's products and order, so the results are its own bit
 * for bit. X f32 [mr, K] (prepare_row). */
static inline __attribute__((always_inline)) void bf16_f32x_tiles2(const moq_linear_launch *l, int64_t t, const float *X, float *C0, float *C1,
                                                                   const int mr) {
    const int64_t K = l->w->K;
    const uint8_t *q0 = (const uint8_t *)l->packed + t * K * 32, *q1 = q0 + K * 32;
    __m512 a0[GEMV_M], a1[GEMV_M];
    for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(q0 + 32 * k))), 16));
        const __m512 w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(q1 + 32 * k))), 16));
        for (int i = 0; i < mr; i++) {
            const __m512 xb = _mm512_set1_ps(X[i * K + k]);
            a0[i] = _mm512_fmadd_ps(xb, w0, a0[i]);
            a1[i] = _mm512_fmadd_ps(xb, w1, a1[i]);
        }
    }
    for (int i = 0; i < mr; i++) _mm512_store_ps(C0 + 16 * i, a0[i]), _mm512_store_ps(C1 + 16 * i, a1[i]);
}

static bool gemv_fits(const moq_linear_launch *l) {
    return l->M <= GEMV_M && (l->pair == MOQ_PAIR_FP8_TENSOR || l->pair == MOQ_PAIR_FP8_ROW || l->pair == MOQ_PAIR_NVFP4_W4A16 ||
                              l->pair == MOQ_PAIR_MXFP8 || l->pair == MOQ_PAIR_BF16);
}

/* True when this call's dequantized activations are exact bf16 values (see the file header). */
static bool bf16_exact(const moq_linear_launch *l) {
    if (l->k->variant != 1 || (l->w->K & 1)) return false;
    switch (l->pair) {
    case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW: case MOQ_PAIR_MXFP8: case MOQ_PAIR_NVFP4: return true;
    case MOQ_PAIR_NVFP4_W4A16: case MOQ_PAIR_BF16: return l->x_elem == MOQ_ELEM_BF16;
    default: return false;
    }
}

/* Activation row m: quantize + dequantize (X, per-token scale sm), and bf16 pairs (Xb) when bdot. */
static void prepare_row(const moq_linear_launch *l, int64_t m, float *X, float *sm, uint32_t *Xb, bool bdot, uint8_t *tmp) {
    const int64_t K = l->w->K, K2 = (K + 1) / 2;
    moq_act_dequant_row_avx512(l, m, X + m * K, &sm[m], tmp);
    if (bdot) /* exact: the values are bf16 numbers, truncation keeps them */
        for (int64_t k = 0; k < K; k += 2)
            Xb[m * K2 + k / 2] = moq_f32_bits(X[m * K + k]) >> 16 | (moq_f32_bits(X[m * K + k + 1]) & 0xFFFF0000u);
}

moq_status moq_linear_panel_run_avx512(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, N = w->N, K = w->K, tiles = (N + 15) / 16, K2 = (K + 1) / 2;
    /* vdpbf16ps (one port) does not beat two FMA ports once the panel is reused by many tokens:
     * measured 48-57 vs 74 GFLOP/s at M=512 (docs/PERFORMANCE.md). bf16 pairs for decode only. */
    const bool bdot = bf16_exact(l) && M <= GEMV_M;
    /* BF16 weights at M = 2..GEMV_M, bf16 or f32 x: two tiles per pass (issue 15, batched lm_head) */
    const bool pairs2 = l->k->variant == 1 && l->pair == MOQ_PAIR_BF16 && M >= 2 && M <= GEMV_M;
    float *X = l->ws, *sm = X + M * K;
    uint32_t *Xb = (uint32_t *)((uint8_t *)l->ws + (((size_t)M * (size_t)K * 4 + (size_t)M * 4 + 63) & ~(size_t)63));
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    const size_t tb = thread_bytes(w, M);
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    /* Decode: the 1-4 rows are prepared here, before the team starts, so the only sync point is
     * the join (a barrier costs more than the rows, and far more on a shared, oversubscribed VM). */
    if (M <= GEMV_M)
        for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, Xb, bdot, thr0 + (size_t)KC * 96 + (size_t)M * 64);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
        float *P = (float *)mine;
        uint32_t *PB = (uint32_t *)(P + KC * 16);
        float *C = (float *)(PB + KC / 2 * 16);
        uint8_t *tmp = (uint8_t *)(C + M * 16);
        if (M > GEMV_M) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, Xb, bdot, tmp);
        }
        if (pairs2) {
            _Alignas(64) float C1[GEMV_M * 16];
#pragma omp for schedule(dynamic, 2) nowait /* the loop below takes only the odd last tile: no barrier between */
            for (int64_t p = 0; p < tiles / 2; p++) {
                if (bdot) {
                    switch (M) {
#define CASE(n) case n: gemv_bf16_tiles2(l, 2 * p, Xb, K2, C, C1, n); break;
                        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
                    default: gemv_bf16_tiles2(l, 2 * p, Xb, K2, C, C1, GEMV_M); break;
                    }
                } else {
                    switch (M) {
#define CASE(n) case n: bf16_f32x_tiles2(l, 2 * p, X, C, C1, n); break;
                        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
                    default: bf16_f32x_tiles2(l, 2 * p, X, C, C1, GEMV_M); break;
                    }
                }
                moq_y_store_tile16(l, C, sm, 2 * p);
                moq_y_store_tile16(l, C1, sm, 2 * p + 1);
            }
        }
        /* Chunks of MOQ_PF_CHUNK tiles, each thread claiming its next one ahead (tile_prefetch.h); BF16
         * weights at M <= 2 (the lm_head: f32 x through the panel, bf16 x in gemv_tile) prefetch the
         * packed weight into the thread's own next chunk. */
        moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
        moq_pf_chunks pc;
        int64_t t0;
        while (moq_pf_walk_next(&wk, &t0, &pc)) {
            const moq_pf_chunks *pf = l->pair == MOQ_PAIR_BF16 && M <= 2 ? &pc : NULL;
            for (int64_t t = t0; t < pc.t1; t++) {
                if (pairs2 && t < tiles / 2 * 2) continue; /* done in pairs above */
                memset(C, 0, (size_t)M * 64);
                if (bdot && gemv_fits(l)) {
                    switch (M) {
#define CASE(n) case n: gemv_tile(l, t, Xb, K2, C, n, pf); break;
                        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
                    default: gemv_tile(l, t, Xb, K2, C, GEMV_M, pf); break;
                    }
                } else
                for (int64_t k0 = 0; k0 < K; k0 += KC) {
                    const int kc = (int)(K - k0 < KC ? K - k0 : KC);
                    const float *Pt = decode_panel(l, t, k0, kc, P, pf);
                    if (bdot) {
                        panel_to_bf16_pairs(Pt, kc, PB);
                        for (int64_t m0 = 0; m0 < M; m0 += MR)
                            microb_any(PB, Xb + m0 * K2 + k0 / 2, K2, kc / 2, C + m0 * 16, (int)(M - m0 < MR ? M - m0 : MR));
                    } else {
                        for (int64_t m0 = 0; m0 < M; m0 += MR)
                            micro_any(Pt, X + m0 * K + k0, K, kc, C + m0 * 16, (int)(M - m0 < MR ? M - m0 : MR));
                    }
                }
                moq_y_store_tile16(l, C, sm, t);
            }
        }
    }
    return MOQ_OK;
}
