/* act_quant_avx2.c — AVX2 twin of moq_act_nvfp4_ref (NUMERICS §2.4), for the AVX2 NVFP4 W4A4 row
 * (linear_nvfp4_avx2.c): the block scale path is the reference's scalar code (one e4m3 encode and
 * one rcpa per 16 values), the 16 e2m1 encodes are seven vector compares (the RNE boundaries of
 * moq_e2m1_encode_rne_sat: > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5), and the VNNI/
 * maddubs operand 2·D2(code) comes from an 8-entry permute and vpsignd. Bit-exact for finite x;
 * tested by tests/kernels/test_act_quant.c against the reference.
 */
#include <immintrin.h>

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
