/* act_quant_avx512.c — AVX-512 twin of moq_act_nvfp4_ref (NUMERICS §2.4): one 16-element block
 * is one zmm. The per-block scalar steps (amax -> SFv -> e4m3 -> outScale via moq_rcpa) are the
 * reference's own code; the per-element steps are the same f32 multiply and the same e2m1
 * decision rule written as a count of crossed thresholds:
 *   m = [a > 0.25] + [a >= 0.75] + [a > 1.25] + [a >= 1.75] + [a > 2.5] + [a >= 3.5] + [a > 5]
 * (ties to even: 0.25 -> 0, 0.75 -> 1.0, ...), sign = sign bit of the product, NaN -> 8 as the
 * scalar encoder. Bit-exact with the reference for every finite input
 * (tests/kernels/test_act_quant.c); a NaN in a block makes its amax differ (max ignores NaN in
 * the reference, not here), which no finite activation reaches.
 * Also writes the VNNI operand of linear_nvfp4_avx512.c: 2·D2(code) as int8 and its block sum. */
#include <immintrin.h>

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
