/* y_store_avx2.h — the vector twin of moq_y_store (kernels.h) for the AVX2 rows' epilogues: 8 or
 * 16 finished outputs (rows n0.. of token m, already scaled and biased) into y, f32 as they are or
 * bf16 by round-to-nearest-even with NaN -> 0xFFFF (moq_bf16_encode_rne, through
 * format/format_avx2_lanes.h). Callers use it for whole 8- or 16-row groups of f32 or bf16 y and
 * take moq_y_store for the rest; moq_nan_rows8_avx2 is the e4m3 rows' NaN-row mask. Include only
 * from files built with AVX2 (the *_avx2.c files). Tested bit for bit against moq_y_store by
 * test_linear.c test_y_row16_avx2, and through every AVX2 row's f32 and bf16 y. */
#ifndef MOQ_KERNELS_CPU_Y_STORE_AVX2_H
#define MOQ_KERNELS_CPU_Y_STORE_AVX2_H

#include <immintrin.h>

#include "format/format_avx2_lanes.h"
#include "kernels/kernels.h"

/* Rows n0 .. n0 + rows - 1 exist and y is f32 or bf16: the vector stores below apply. */
static inline bool moq_y_rows_fit_avx2(const moq_linear_launch *l, int64_t n0, int rows) {
    return n0 + rows <= l->w->N && (l->y_elem == MOQ_ELEM_F32 || l->y_elem == MOQ_ELEM_BF16);
}
static inline bool moq_y_row16_fits_avx2(const moq_linear_launch *l, int64_t n0) { return moq_y_rows_fit_avx2(l, n0, 16); }

static inline void moq_y_row8_avx2(const moq_linear_launch *l, int64_t m, int64_t n0, __m256 v) {
    const int64_t N = l->w->N;
    if (l->y_elem == MOQ_ELEM_F32) {
        _mm256_storeu_ps((float *)l->y + m * N + n0, v);
        return;
    }
    const __m256i h = moq_bf16_rne8_avx2(_mm256_castps_si256(v));
    _mm_storeu_si128((__m128i *)((uint16_t *)l->y + m * N + n0), _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

static inline void moq_y_row16_avx2(const moq_linear_launch *l, int64_t m, int64_t n0, __m256 v0, __m256 v1) {
    const int64_t N = l->w->N;
    if (l->y_elem == MOQ_ELEM_F32) {
        _mm256_storeu_ps((float *)l->y + m * N + n0, v0);
        _mm256_storeu_ps((float *)l->y + m * N + n0 + 8, v1);
        return;
    }
    const __m256i p = _mm256_packus_epi32(moq_bf16_rne8_avx2(_mm256_castps_si256(v0)), moq_bf16_rne8_avx2(_mm256_castps_si256(v1)));
    _mm256_storeu_si256((__m256i *)((uint16_t *)l->y + m * N + n0), _mm256_permute4x64_epi64(p, 0xD8)); /* qwords 0 2 1 3 */
}

/* The e4m3 rows' pack-time NaN flags of 8 output rows (bytes, nonzero = the row holds a NaN code)
 * as a lane mask, for _mm256_blendv_ps(y, NaN, mask). */
static inline __m256 moq_nan_rows8_avx2(const uint8_t *flags) {
    const __m256i f = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)flags));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(f, _mm256_setzero_si256()));
}

#endif
