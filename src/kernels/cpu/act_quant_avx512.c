/* act_quant_avx512.c — AVX-512 twin of moq_act_nvfp4_ref (NUMERICS §2.4): one 16-element block
 * is one zmm. The per-block scalar steps (amax -> SFv -> e4m3 -> outScale via moq_rcpa) are the
 * reference's own code; the per-element steps are the same f32 multiply and the same e2m1
 * decision rule written as a count of crossed thresholds:
 *   m = [a > 0.25] + [a >= 0.75] + [a > 1.25] + [a >= 1.75] + [a > 2.5] + [a >= 3.5] + [a > 5]
 * (ties to even: 0.25 -> 0, 0.75 -> 1.0, ...), sign = sign bit of the product, NaN -> 8 as the
 * scalar encoder. Bit-exact with the reference for every finite input
 * (tests/kernels/test_act_quant.c); a NaN in a block makes its amax differ (max ignores NaN in
 * the reference, not here), which no finite activation reaches.
 * Also writes the VNNI operand of linear_nvfp4_avx512.c: 2·D2(code) as int8 and its block sum.
 *
 * The FP8 and MXFP8 quantizers (§5.1-§5.3, §4.3) vectorize E4s the way e4m3.c does it on one
 * value: below 2^-6 round v·512 to an integer (RNE), above it rebias the exponent and round the
 * 20 dropped mantissa bits to nearest even with integer adds; >= 448 and inf saturate to 0x7E,
 * NaN -> 0x7F|sign. Same operations per element as the reference (one multiply or one IEEE
 * division), so bit-exact; amax as above (finite inputs). */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels/cpu/act_quant.h"

void moq_act_nvfp4_avx512(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf, int8_t *a8,
                          int32_t *asum) {
    const float r6 = moq_rcpa(6.0f, corr), rS = moq_rcpa(S, corr);
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    const __m512i one = _mm512_set1_epi32(1);
    static const int32_t twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const __m512i lut = _mm512_loadu_si512(twice);
    for (size_t b = 0; b < K / 16; b++) {
        const __m512 xv = _mm512_loadu_ps(x + 16 * b);
        const float amax = _mm512_reduce_max_ps(_mm512_and_ps(xv, absm));
        const float sfv = S * (amax * r6);
        const uint8_t code = moq_e4m3_encode_rne_sat(sfv);
        const float sfd = moq_e4m3_decode(code);
        const float os = sfd != 0.0f ? moq_rcpa(sfd * rS, corr) : 0.0f;
        sf[b] = code;
        const __m512 v = _mm512_mul_ps(xv, _mm512_set1_ps(os));
        const __m512 a = _mm512_and_ps(v, absm);
        __m512i m = _mm512_setzero_si512();
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), m, one);
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.0f), _CMP_GT_OQ), m, one);
        __m512i c = _mm512_or_si512(m, _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 28), _mm512_set1_epi32(8)));
        c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(8));
        /* codes 2i (low dword of each qword) | 2i+1 << 4 -> 8 bytes */
        _mm_storel_epi64((__m128i *)(q + 8 * b), _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28))));
        if (a8) {
            const __m512i t = _mm512_permutexvar_epi32(c, lut);
            _mm_storeu_si128((__m128i *)(a8 + 16 * b), _mm512_cvtepi32_epi8(t));
            asum[b] = _mm512_reduce_add_epi32(t);
        }
    }
}

/* E4s on 16 values -> codes in the low byte of each dword (exact twin of moq_e4m3_encode_rne_sat). */
static inline __m512i e4m3_encode_sat16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i sgn = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* normal range: rebias 127 -> 7, RNE on the 20 dropped bits */
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i mag = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32((int)(0x7FFFFu - (120u << 23)))), odd), 20);
    /* subnormal grid 2^-9 */
    const __m512 sub = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000)), _mm512_cvttps_epi32(sub));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(0x43E00000)), _mm512_set1_epi32(0x7E));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(0x7F));
    return _mm512_or_si512(mag, sgn);
}

/* D4 of 16 codes (low byte of each dword; NaN codes not expected) -> f32, exact. */
static inline __m512 e4m3_decode16(__m512i c) {
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    __m512 n = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    n = _mm512_mask_mov_ps(n, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f)));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(n), _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24)));
}

static inline __m512 clamp448_16(__m512 v) { return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-448.0f)), _mm512_set1_ps(448.0f)); }

/* Tail-safe 16-wide load/store of n <= 16 values. */
static inline __mmask16 tail(size_t n) { return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u); }

static float amax16n(const float *x, size_t n) {
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    __m512 m = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_and_ps(_mm512_maskz_loadu_ps(tail(n - i), x + i), absm));
    return _mm512_reduce_max_ps(m);
}

/* Quantize n values with one multiplier (mul) or divisor (div), write codes and/or D4 values. */
static void e4m3_row(const float *x, size_t n, float f, bool div, uint8_t *q, float *deq) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 t = tail(n - i);
        const __m512 xv = _mm512_maskz_loadu_ps(t, x + i);
        const __m512 v = div ? _mm512_div_ps(xv, _mm512_set1_ps(f)) : _mm512_mul_ps(xv, _mm512_set1_ps(f));
        const __m512i c = e4m3_encode_sat16(clamp448_16(v));
        if (q) _mm_mask_storeu_epi8(q + i, t, _mm512_cvtepi32_epi8(c));
        if (deq) _mm512_mask_storeu_ps(deq + i, t, e4m3_decode16(c));
    }
}

void moq_act_fp8_static_avx512(const float *x, size_t K, float s_in, uint8_t *q, float *deq) {
    e4m3_row(x, K, 1.0f / s_in, false, q, deq);
}

void moq_act_fp8_token_avx512(const float *x, size_t K, uint8_t *q, float *scale, float *deq) {
    float s = amax16n(x, K) / 448.0f;
    if (!(s >= MOQ_FP8_TOKEN_MIN_SCALE)) s = MOQ_FP8_TOKEN_MIN_SCALE;
    e4m3_row(x, K, s, true, q, deq);
    *scale = s;
}

void moq_act_fp8_g128_avx512(const float *x, size_t K, uint8_t *q, float *scales, float *deq) {
    for (size_t g = 0; g < K / 128; g++) {
        const float a = amax16n(x + 128 * g, 128);
        const float s = (a > MOQ_FP8_G128_EPS ? a : MOQ_FP8_G128_EPS) / 448.0f;
        e4m3_row(x + 128 * g, 128, s, true, q ? q + 128 * g : NULL, deq ? deq + 128 * g : NULL);
        if (deq) for (size_t i = 0; i < 128; i++) deq[128 * g + i] *= s;
        scales[g] = s;
    }
}

void moq_act_mxfp8_avx512(const float *x, size_t K, uint8_t *q, uint8_t *sf, float *deq) {
    for (size_t b = 0; b < K / 32; b++) {
        const uint8_t c = moq_e8m0_encode_up_sat(amax16n(x + 32 * b, 32) * (1.0f / 448.0f));
        const float mult = moq_mxfp8_act_mult(c);
        sf[b] = c;
        e4m3_row(x + 32 * b, 32, mult, false, q ? q + 32 * b : NULL, deq ? deq + 32 * b : NULL);
        if (deq) {
            const float d = moq_e8m0_decode(c);
            for (size_t i = 0; i < 32; i++) deq[32 * b + i] *= d;
        }
    }
}

void moq_act_dequant_row_avx512(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp) {
    const size_t K = (size_t)l->w->K;
    moq_x_row_f32(l->x, l->x_elem, l->w->K, m, xq);
    *row_scale = 1.0f;
    switch (l->pair) {
    case MOQ_PAIR_FP8_TENSOR: moq_act_fp8_static_avx512(xq, K, l->a_scale, NULL, xq); break;
    case MOQ_PAIR_FP8_ROW: moq_act_fp8_token_avx512(xq, K, NULL, row_scale, xq); break;
    case MOQ_PAIR_FP8_BLK128: {
        float s[64];
        for (size_t g0 = 0; g0 < K; g0 += 64 * 128) /* at most 64 groups per call */
            moq_act_fp8_g128_avx512(xq + g0, K - g0 < 64 * 128 ? K - g0 : 64 * 128, NULL, s, xq + g0);
        break;
    }
    case MOQ_PAIR_MXFP8: moq_act_mxfp8_avx512(xq, K, NULL, tmp, xq); break;
    case MOQ_PAIR_NVFP4: {
        uint8_t *q = tmp, *sf = tmp + K;
        moq_act_nvfp4_avx512(xq, K, 1.0f / l->a_scale, l->rcpa_corr, q, sf, NULL, NULL);
        for (size_t i = 0; i < K; i++)
            xq[i] = moq_e2m1_decode((uint8_t)(q[i / 2] >> (4 * (i & 1)))) * moq_e4m3_decode(sf[i / 16]);
        break;
    }
    default: break;
    }
}
