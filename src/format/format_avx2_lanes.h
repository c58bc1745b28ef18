/* format_avx2_lanes.h — the lane-wise AVX2 forms of the e4m3 and bf16 rules (e4m3.c, bf16.c) on
 * eight binary32 bit patterns / codes in dwords, shared by the bulk converters (format_avx2.c) and
 * the kernels that quantize or store in registers (act_quant_avx2.c, kernels/cpu/y_store_avx2.h).
 * Same bits as the scalar files on every input, NaN payloads included; comparisons are signed and
 * valid because every operand is |x| bits < 2^31. Include only from files built with AVX2.
 * Tested through format_avx2.c's rows (tests/unit/test_format_vector.c, test_format_golden.c) and
 * the kernels' tests (test_act_quant.c, test_linear.c test_y_row16_avx2). */
#ifndef MOQ_FORMAT_AVX2_LANES_H
#define MOQ_FORMAT_AVX2_LANES_H

#include <immintrin.h>

/* e4m3 magnitude code for |x| bits a, valid for finite |x| < 480 (e4m3.c: e4m3_mag): below 2^-6
 * v·512 rounded with an RNE immediate (not MXCSR), above it the exponent rebiased and the 20
 * dropped mantissa bits rounded to nearest even by integer adds. */
static inline __m256i moq_e4m3_mag8_avx2(__m256i a) {
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i nrm = _mm256_add_epi32(a, _mm256_set1_epi32((int)(0x7FFFFu - (120u << 23))));
    nrm = _mm256_srli_epi32(_mm256_add_epi32(nrm, odd), 20);
    const __m256 scaled = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f));
    const __m256i sub = _mm256_cvttps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm256_blendv_epi8(nrm, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a));
}

static inline __m256i moq_e4m3_sign8_avx2(__m256i u) { return _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)); }

/* moq_e4m3_encode_rne_sat on the bits u of 8 floats: >= 448 and inf -> 0x7E, NaN -> 0x7F, sign kept. */
static inline __m256i moq_e4m3_rne_sat8_avx2(__m256i u) {
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i c = _mm256_blendv_epi8(moq_e4m3_mag8_avx2(a), _mm256_set1_epi32(0x7E), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x43E00000 - 1)));
    c = _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7F), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)));
    return _mm256_or_si256(c, moq_e4m3_sign8_avx2(u));
}

/* moq_e4m3_decode of 8 codes (one per dword, 0..255): NaN codes -> 0x7FC00000 | sign. */
static inline __m256 moq_e4m3_decode8_avx2(__m256i c) {
    const __m256i em = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i s = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    __m256i v = _mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(0x1p-9f));
    v = _mm256_blendv_epi8(v, _mm256_castps_si256(sub), _mm256_cmpgt_epi32(_mm256_set1_epi32(8), em));
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7F)));
    return _mm256_castsi256_ps(_mm256_or_si256(v, s));
}

/* moq_bf16_encode_rne on the bits u of 8 floats -> 8 bf16 in the low halves of the dwords
 * (round to nearest even, NaN -> 0xFFFF as torch's CPU cast). */
static inline __m256i moq_bf16_rne8_avx2(__m256i u) {
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i h = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    return _mm256_blendv_epi8(h, _mm256_set1_epi32(0xFFFF),
                              _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000)));
}

#endif
