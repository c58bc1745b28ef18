/* blk_scale_avx512.h — the MXFP8 block factor split of linear_cpu.h on 16 lanes, for the AVX-512
 * k4fma and small-M rows (linear_fp8_avx512.c, linear_gemm_avx512.c): acc + s · 2^(c-127) · sx · 2^8
 * where that factor F may leave the f32 range. With E = c + log2(sx) + 8 (F's biased exponent; sx a
 * power of two, 2^-127 included), a = 2^(clamp(E, 1, 254) - 127), b = 2^(min(E - clamp(E, 1, 254), 127)):
 * fma(s·b, a, acc), s·b exact unless the term vanishes or overflows anyway. The AVX2 twin is
 * mx_fma_split in linear_fp8_avx2.c. Include only from files built with AVX-512 (the *_avx512.c
 * files). Not run on the Zen 3 development machine (no AVX-512); tested where the CPU has it by
 * test_block_scale_extremes (tests/kernels/test_linear.c). */
#ifndef MOQ_KERNELS_CPU_BLK_SCALE_AVX512_H
#define MOQ_KERNELS_CPU_BLK_SCALE_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* c16: e8m0 codes of 16 rows. */
static inline __m512 moq_mx_fma_split16(__m512 s, __m128i c16, float sx, __m512 acc) {
    if (sx != sx) return _mm512_fmadd_ps(s, _mm512_set1_ps(sx), acc); /* NaN propagates, as on the exact path */
    uint32_t u;
    memcpy(&u, &sx, 4);
    const int ex = (int)((u >> 23) & 255) - 127; /* 2^-127 (subnormal) has exponent field 0: -127 */
    const __m512i E = _mm512_add_epi32(_mm512_cvtepu8_epi32(c16), _mm512_set1_epi32(ex + 8));
    const __m512i ea = _mm512_min_epi32(_mm512_max_epi32(E, _mm512_set1_epi32(1)), _mm512_set1_epi32(254));
    const __m512i eb = _mm512_min_epi32(_mm512_add_epi32(_mm512_sub_epi32(E, ea), _mm512_set1_epi32(127)), _mm512_set1_epi32(254));
    const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(ea, 23)), b = _mm512_castsi512_ps(_mm512_slli_epi32(eb, 23));
    return _mm512_fmadd_ps(_mm512_mul_ps(s, b), a, acc);
}

#endif
