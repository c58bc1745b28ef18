/* nvfp4_k4n_avx2.h — the packed e2m1 codes of the AVX2 NVFP4 W4A16 row (linear_nvfp4_w4a16_avx2.c,
 * issue 14): rows16 (layout/rows16.c) with the nibbles of each 16-row × 4-k chunk regrouped so
 * that one vpshufb gives a row's (k, k+1) pair in neighbouring bytes (the M = 1 vpmaddubsw loop
 * needs no unpacks).
 *
 * rows16: the 32 bytes of tile t at byte columns 2g, 2g + 1 hold, byte 16·j + r, the codes
 * (row 16t + r, k = 4g + 2j) in the low and (row, 4g + 2j + 1) in the high nibble.
 * k4n: the same 32 bytes, byte 16·L + 2·w + q (row r = 8L + w), hold (r, 4g + q) in the low and
 * (r, 4g + 2 + q) in the high nibble. Same size, same place; the e4m3 block scales stay rows16.
 * The other readers of this row's weight turn a chunk back into rows16 columns: its M = 2..8
 * loops after their table lookup (k4n_lut_col), the AVX2 panel at M > 8 before its decode
 * (k4n_cols). Tests: tests/kernels/test_linear.c (every M of the row against the _ref row). */
#ifndef MOQ_KERNELS_CPU_NVFP4_K4N_AVX2_H
#define MOQ_KERNELS_CPU_NVFP4_K4N_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* One 32-byte chunk, rows16 -> k4n, in place. */
static inline void k4n_from_rows16(uint8_t *p) {
    const __m128i b0 = _mm_loadu_si128((const __m128i *)p), b1 = _mm_loadu_si128((const __m128i *)(p + 16));
    const __m128i lo = _mm_set1_epi8(0x0F), hi = _mm_set1_epi8((char)0xF0);
    const __m128i q0 = _mm_or_si128(_mm_and_si128(b0, lo), _mm_and_si128(_mm_slli_epi16(b1, 4), hi)); /* k 4g, 4g + 2 */
    const __m128i q1 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b0, 4), lo), _mm_and_si128(b1, hi)); /* k 4g + 1, 4g + 3 */
    _mm_storeu_si128((__m128i *)p, _mm_unpacklo_epi8(q0, q1));
    _mm_storeu_si128((__m128i *)(p + 16), _mm_unpackhi_epi8(q0, q1));
}

/* One 32-byte k4n chunk -> its two rows16 byte columns (k 4g, 4g + 1 and 4g + 2, 4g + 3). */
static inline void k4n_cols(const uint8_t *p, __m128i *c0, __m128i *c1) {
    const __m256i n = _mm256_loadu_si256((const __m256i *)p); /* words: rows (q0, q1) */
    const __m256i lo = _mm256_set1_epi16(0x000F), hi = _mm256_set1_epi16(0x00F0);
    const __m256i b0 = _mm256_or_si256(_mm256_and_si256(n, lo), _mm256_and_si256(_mm256_srli_epi16(n, 4), hi));
    const __m256i b1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n, 4), lo), _mm256_and_si256(_mm256_srli_epi16(n, 8), hi));
    const __m256i pk = _mm256_packus_epi16(b0, b1); /* b0 rows 0-7, b1 rows 0-7 | b0 rows 8-15, b1 rows 8-15 */
    const __m128i l0 = _mm256_castsi256_si128(pk), l1 = _mm256_extracti128_si256(pk, 1);
    *c0 = _mm_unpacklo_epi64(l0, l1);
    *c1 = _mm_unpackhi_epi64(l0, l1);
}

/* A k4n chunk n through a 16-entry byte table (both lanes the same), the half h of its nibbles
 * (0: k 4g, 4g + 1, the rows16 column 2g; 1: k 4g + 2, 4g + 3, column 2g + 1): lanes rows 0-7 |
 * 8-15, each lane the 8 entries of the even k then the 8 of the odd k. */
static inline __m256i k4n_lut_col(__m256i n, int h, __m256i lut) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i even_odd = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9,
                                              11, 13, 15);
    const __m256i idx = h ? _mm256_and_si256(_mm256_srli_epi16(n, 4), low4) : _mm256_and_si256(n, low4);
    return _mm256_shuffle_epi8(_mm256_shuffle_epi8(lut, idx), even_odd);
}

#endif
