/* act_quant_avx2.c — AVX2 twin of moq_act_nvfp4_ref (NUMERICS §2.4), for the AVX2 NVFP4 W4A4 row
 * (linear_nvfp4_avx2.c): the block scale path is the reference's scalar code (one e4m3 encode and
 * one rcpa per 16 values), the 16 e2m1 encodes are seven vector compares (the RNE boundaries of
 * moq_e2m1_encode_rne_sat: > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5), and the VNNI/
 * maddubs operand 2·D2(code) comes from an 8-entry permute and vpsignd. Bit-exact for finite x;
 * tested by tests/kernels/test_act_quant.c against the reference.
 * Below it the FP8 / MXFP8 twins (moq_act_fp8_*_avx2, moq_act_mxfp8_avx2) and the dequant row
 * built on them, for the AVX2 FP8 kernels (linear_gemm_avx2.c, linear_fp8_avx2.c, the panel).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "format/format_avx2_lanes.h"
#include "kernels/cpu/act_quant.h"

static inline __m256i e2m1_mag(__m256 a) {
    __m256i m = _mm256_setzero_si256();
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_GT_OQ)));
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.75f), _CMP_GE_OQ)));
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(1.25f), _CMP_GT_OQ)));
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(1.75f), _CMP_GE_OQ)));
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(2.5f), _CMP_GT_OQ)));
    m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(3.5f), _CMP_GE_OQ)));
    return _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(5.0f), _CMP_GT_OQ)));
}

void moq_act_nvfp4_avx2(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf, int8_t *a8, int32_t *asum) {
    const float r6 = moq_rcpa(6.0f, corr), rS = moq_rcpa(S, corr);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256i twice = _mm256_setr_epi32(0, 1, 2, 3, 4, 6, 8, 12);
    for (size_t b = 0; b < K / 16; b++) {
        const __m256 x0 = _mm256_loadu_ps(x + 16 * b), x1 = _mm256_loadu_ps(x + 16 * b + 8);
        __m256 mx = _mm256_max_ps(_mm256_and_ps(x0, absm), _mm256_and_ps(x1, absm));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float sfv = S * (amax * r6);
        const uint8_t code = moq_e4m3_encode_rne_sat(sfv);
        const float sfd = moq_e4m3_decode(code);
        const float os = sfd != 0.0f ? moq_rcpa(sfd * rS, corr) : 0.0f;
        sf[b] = code;
        const __m256 v0 = _mm256_mul_ps(x0, _mm256_set1_ps(os)), v1 = _mm256_mul_ps(x1, _mm256_set1_ps(os));
        const __m256i m0 = e2m1_mag(_mm256_and_ps(v0, absm)), m1 = e2m1_mag(_mm256_and_ps(v1, absm));
        if (q) {
            const __m256i s8 = _mm256_set1_epi32(8);
            const __m256i c0 = _mm256_or_si256(m0, _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v0), 28), s8));
            const __m256i c1 = _mm256_or_si256(m1, _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v1), 28), s8));
            int32_t c[16];
            _mm256_storeu_si256((__m256i *)c, c0);
            _mm256_storeu_si256((__m256i *)(c + 8), c1);
            for (size_t i = 0; i < 8; i++) q[8 * b + i] = (uint8_t)(c[2 * i] | c[2 * i + 1] << 4);
        }
        if (a8) {
            /* vpsignd: negative v (-0 included) negates, +0 gives 0 (its magnitude code is 0 anyway) */
            const __m256i t0 = _mm256_sign_epi32(_mm256_permutevar8x32_epi32(twice, m0), _mm256_castps_si256(v0));
            const __m256i t1 = _mm256_sign_epi32(_mm256_permutevar8x32_epi32(twice, m1), _mm256_castps_si256(v1));
            const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(t0, t1), 0xD8); /* 16 words in order */
            const __m256i p8 = _mm256_packs_epi16(p16, p16);
            _mm_storeu_si128((__m128i *)(a8 + 16 * b), _mm_unpacklo_epi64(_mm256_castsi256_si128(p8), _mm256_extracti128_si256(p8, 1)));
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(_mm256_add_epi32(t0, t1)), _mm256_extracti128_si256(_mm256_add_epi32(t0, t1), 1));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
            asum[b] = _mm_cvtsi128_si32(s);
        }
    }
}

/* ---- FP8 / MXFP8 (§5.1-§5.3, §4.3) ------------------------------------------------------------
 * AVX2 twins of moq_act_fp8_static_ref, _token_ref, _g128_ref, moq_act_mxfp8_ref, 8 lanes per
 * step, the last K % 8 values through a masked load and a partial store. Per element the same one
 * f32 operation as the reference (static, MXFP8: x ⊗ the scalar multiplier; token, g128: x ⊘ s,
 * a true vdivps), then E4s (moq_e4m3_rne_sat8_avx2, format/format_avx2_lanes.h, the lanes of
 * format_avx2.c's encoder: >= 448 and inf -> 0x7E, NaN -> 0x7F, sign kept) and D4 by
 * moq_e4m3_decode8_avx2. The
 * reference's clamp to ±448 is not done: E4s already maps every |v| >= 448 to 0x7E|sign, the code
 * the clamped value gets. amax: vector max, the reference's fmaxf loop for a row holding a NaN
 * (amax8n). Hence bit-exact with the reference for every input, NaN (signalling too) and inf
 * included (tests/kernels/test_act_quant.c). */

/* Lanes [0, n) of 8 set (n <= 8), for maskload/maskstore. */
static inline __m256i lanes(size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 codes (dwords 0..255) -> 8 bytes. */
static inline __m128i bytes8(__m256i c) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    return _mm_packus_epi16(w, w);
}

/* max |x| over n values as the reference's fmaxf loop computes it. Vector max, exact when no
 * value is NaN (max is order-free there); a row with a NaN goes to the reference's own loop,
 * because glibc's fmaxf turns a signalling NaN into NaN, so that loop's result depends on where
 * the NaNs sit (the max of the values after the last signalling one). */
static float amax8n(const float *x, size_t n) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, nan = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        m0 = _mm256_max_ps(m0, _mm256_and_ps(a, absm));
        m1 = _mm256_max_ps(m1, _mm256_and_ps(b, absm));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    }
    for (; i < n; i += 8) {
        const __m256 a = _mm256_maskload_ps(x + i, lanes(n - i));
        m0 = _mm256_max_ps(m0, _mm256_and_ps(a, absm));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan)) {
        float r = 0.0f;
        for (size_t j = 0; j < n; j++) r = fmaxf(r, fabsf(x[j]));
        return r;
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* One step of e4m3_row8: 8 values (r < 8: the first r, masked). */
static inline __attribute__((always_inline)) void e4m3_step8(const float *x, size_t r, __m256 fv, const int div, uint8_t *q, float *deq, float d) {
    const __m256i t = r < 8 ? lanes(r) : _mm256_set1_epi32(-1);
    const __m256 xv = r < 8 ? _mm256_maskload_ps(x, t) : _mm256_loadu_ps(x);
    const __m256i c = moq_e4m3_rne_sat8_avx2(_mm256_castps_si256(div ? _mm256_div_ps(xv, fv) : _mm256_mul_ps(xv, fv)));
    if (q) {
        const __m128i b = bytes8(c);
        if (r < 8) {
            uint8_t tb[16];
            _mm_storeu_si128((__m128i *)tb, b);
            memcpy(q, tb, r);
        } else {
            _mm_storel_epi64((__m128i *)q, b);
        }
    }
    if (deq) {
        __m256 y = moq_e4m3_decode8_avx2(c);
        if (d != 1.0f) y = _mm256_mul_ps(y, _mm256_set1_ps(d)); /* the reference's D4(code) ⊗ d */
        if (r < 8) _mm256_maskstore_ps(deq, t, y);
        else _mm256_storeu_ps(deq, y);
    }
}

/* Codes of n values, each x ⊗ f (div == 0) or x ⊘ f (div == 1), to q and/or D4(code) ⊗ d to deq
 * (d == 1: no multiply, the same value). deq may be x. */
static inline __attribute__((always_inline)) void e4m3_loop8(const float *x, size_t n, __m256 fv, const int div, uint8_t *q, float *deq, float d) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) e4m3_step8(x + i, 8, fv, div, q ? q + i : NULL, deq ? deq + i : NULL, d);
    if (i < n) e4m3_step8(x + i, n - i, fv, div, q ? q + i : NULL, deq ? deq + i : NULL, d);
}

static inline __attribute__((always_inline)) void e4m3_row8(const float *x, size_t n, float f, const int div, uint8_t *q, float *deq, float d) {
    const __m256 fv = _mm256_set1_ps(f);
    if (q && deq) e4m3_loop8(x, n, fv, div, q, deq, d); /* one branch per row, none per step */
    else if (q) e4m3_loop8(x, n, fv, div, q, NULL, d);
    else if (deq) e4m3_loop8(x, n, fv, div, NULL, deq, d);
}

void moq_act_fp8_static_avx2(const float *x, size_t K, float s_in, uint8_t *q, float *deq) {
    e4m3_row8(x, K, 1.0f / s_in, 0, q, deq, 1.0f);
}

void moq_act_fp8_token_avx2(const float *x, size_t K, uint8_t *q, float *scale, float *deq) {
    float s = amax8n(x, K) / 448.0f;
    if (!(s >= MOQ_FP8_TOKEN_MIN_SCALE)) s = MOQ_FP8_TOKEN_MIN_SCALE; /* fmaxf(s, min): s is never NaN */
    e4m3_row8(x, K, s, 1, q, deq, 1.0f);
    *scale = s;
}

void moq_act_fp8_g128_avx2(const float *x, size_t K, uint8_t *q, float *scales, float *deq) {
    for (size_t g = 0; g < K / 128; g++) {
        const float a = amax8n(x + 128 * g, 128);
        const float s = (a > MOQ_FP8_G128_EPS ? a : MOQ_FP8_G128_EPS) / 448.0f;
        e4m3_row8(x + 128 * g, 128, s, 1, q ? q + 128 * g : NULL, deq ? deq + 128 * g : NULL, s);
        scales[g] = s;
    }
}

void moq_act_mxfp8_avx2(const float *x, size_t K, uint8_t *q, uint8_t *sf, float *deq) {
    for (size_t b = 0; b < K / 32; b++) {
        const uint8_t c = moq_e8m0_encode_up_sat(amax8n(x + 32 * b, 32) * (1.0f / 448.0f));
        sf[b] = c;
        e4m3_row8(x + 32 * b, 32, moq_mxfp8_act_mult(c), 0, q ? q + 32 * b : NULL, deq ? deq + 32 * b : NULL, moq_e8m0_decode(c));
    }
}

void moq_act_dequant_row_avx2(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp) {
    const size_t K = (size_t)l->w->K;
    if (l->pair != MOQ_PAIR_FP8_TENSOR && l->pair != MOQ_PAIR_FP8_ROW && l->pair != MOQ_PAIR_FP8_BLK128 && l->pair != MOQ_PAIR_MXFP8) {
        moq_act_dequant_row(l, m, xq, row_scale, tmp); /* NVFP4 and unquantized pairs: the reference path */
        return;
    }
    moq_x_row_f32(l->x, l->x_elem, l->w->K, m, xq);
    *row_scale = 1.0f;
    switch (l->pair) {
    case MOQ_PAIR_FP8_TENSOR: moq_act_fp8_static_avx2(xq, K, l->a_scale, NULL, xq); break; /* s_in lives in row_scale (SHARD_W_IN) */
    case MOQ_PAIR_FP8_ROW: moq_act_fp8_token_avx2(xq, K, NULL, row_scale, xq); break;
    case MOQ_PAIR_FP8_BLK128: {
        float s[64];
        for (size_t g0 = 0; g0 < K; g0 += 64 * 128) /* at most 64 groups per call */
            moq_act_fp8_g128_avx2(xq + g0, K - g0 < 64 * 128 ? K - g0 : 64 * 128, NULL, s, xq + g0);
        break;
    }
    default: moq_act_mxfp8_avx2(xq, K, NULL, tmp, xq); break;
    }
}

void moq_act_e4m3_codes_avx2(const moq_linear_launch *l, int64_t m, float *xr, uint8_t *codes, float *tok, float *sx) {
    const size_t K = (size_t)l->w->K;
    moq_x_row_f32(l->x, l->x_elem, l->w->K, m, xr);
    *tok = 1.0f;
    switch (l->pair) {
    case MOQ_PAIR_FP8_TENSOR: moq_act_fp8_static_avx2(xr, K, l->a_scale, codes, NULL); break; /* s_in lives in row_scale */
    case MOQ_PAIR_FP8_ROW: moq_act_fp8_token_avx2(xr, K, codes, tok, NULL); break;
    case MOQ_PAIR_FP8_BLK128: moq_act_fp8_g128_avx2(xr, K, codes, sx, NULL); break;
    default: { /* MXFP8 */
        uint8_t *sf = codes + K;
        moq_act_mxfp8_avx2(xr, K, codes, sf, NULL);
        for (size_t b = 0; b < K / 32; b++) sx[b] = moq_e8m0_decode(sf[b]);
        break;
    }
    }
}
