/* y_store_avx2.h — the vector twin of moq_y_store (kernels.h) for the AVX2 rows' epilogues: 16
 * finished outputs (rows n0..n0+15 of token m, already scaled and biased) into y, f32 as they are or
 * bf16 by round-to-nearest-even with NaN -> 0xFFFF (moq_bf16_encode_rne). Callers use it for whole
 * 16-row tiles of f32 or bf16 y and take moq_y_store for the rest. Include only from files built
 * with AVX2 (the *_avx2.c files). Tested through every AVX2 row's f32 and bf16 y in test_linear.c. */
#ifndef MOQ_KERNELS_CPU_Y_STORE_AVX2_H
#define MOQ_KERNELS_CPU_Y_STORE_AVX2_H

#include <immintrin.h>

#include "kernels/kernels.h"

static inline bool moq_y_row16_fits_avx2(const moq_linear_launch *l, int64_t n0) {
    return n0 + 16 <= l->w->N && (l->y_elem == MOQ_ELEM_F32 || l->y_elem == MOQ_ELEM_BF16);
}

static inline void moq_y_row16_avx2(const moq_linear_launch *l, int64_t m, int64_t n0, __m256 v0, __m256 v1) {
    const int64_t N = l->w->N;
    if (l->y_elem == MOQ_ELEM_F32) {
        _mm256_storeu_ps((float *)l->y + m * N + n0, v0);
        _mm256_storeu_ps((float *)l->y + m * N + n0 + 8, v1);
        return;
    }
    __m256i h[2];
    for (int q = 0; q < 2; q++) {
        const __m256i u = _mm256_castps_si256(q ? v1 : v0);
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)),
                                                             _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
        h[q] = _mm256_blendv_epi8(r, _mm256_set1_epi32(0xFFFF),
                                  _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000)));
    }
    _mm256_storeu_si256((__m256i *)((uint16_t *)l->y + m * N + n0), _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xD8));
}

#endif
