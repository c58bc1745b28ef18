/* layout.h — pure layout transforms of canonical weights into kernel layouts (STYLE.md §1.6:
 * swizzles exist once, here). Every pack has an unpack; tests/kernels/test_layout.c checks
 * pack -> unpack == identity and the byte positions against definitions written in the test. */
#ifndef MOQ_KERNELS_LAYOUT_H
#define MOQ_KERNELS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* rows16: src [R, C] units of `unit` bytes (row-major) -> dst [ceil(R/16), C, 16] units:
 * unit (r, c) at ((r/16)·C + c)·16 + r%16. Rows past R are zero. A 16-lane vector load at
 * (tile, c) then holds column c of 16 consecutive rows. */
size_t moq_layout_rows16_size(int64_t R, int64_t C, size_t unit);
void   moq_layout_rows16_pack(const void *src, int64_t R, int64_t C, size_t unit, void *dst); /* _avx2 where the cpu has it */
void   moq_layout_rows16_pack_ref(const void *src, int64_t R, int64_t C, size_t unit, void *dst);
void   moq_layout_rows16_pack_avx2(const void *src, int64_t R, int64_t C, size_t unit, void *dst); /* units 2, 4; others: _ref */
void   moq_layout_rows16_unpack(const void *dst, int64_t R, int64_t C, size_t unit, void *src);

/* nvfp4_vnni16: canonical packed e2m1 u8 [N, K/2] (K % 8 == 0) -> u8 [ceil(N/16), K/8, 16, 4]:
 * byte (t, g, r, j) = code(16t + r, 8g + j) | code(16t + r, 8g + 4 + j) << 4, j = 0..3.
 * Low nibbles of one 64-byte line are k = 8g..8g+3 of 16 rows, high nibbles k = 8g+4..8g+7: each
 * nibble plane is one VNNI dword per row. Rows past N are code 0. */
size_t moq_layout_nvfp4_vnni16_size(int64_t N, int64_t K);
void   moq_layout_nvfp4_vnni16_pack(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst); /* _avx2 where the cpu has it */
void   moq_layout_nvfp4_vnni16_pack_ref(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst);
void   moq_layout_nvfp4_vnni16_pack_avx2(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst); /* rows16_avx2.c */
void   moq_layout_nvfp4_vnni16_unpack(const uint8_t *dst, int64_t N, int64_t K, uint8_t *src);

/* rows16k4: bytes src [R, C] -> dst [ceil(R/16), ceil(C/4), 16, 4]: byte (r, c) at
 * (((r/16)·ceil(C/4) + c/4)·16 + r%16)·4 + c%4. Rows past R and columns past C are zero. One
 * 32-byte load at (tile, group, half) holds 4 consecutive columns of 8 rows, one dword per row
 * (the AVX2 e4m3 kernel's operand: a byte shuffle puts column j of each row in a dword's top). */
size_t moq_layout_rows16k4_size(int64_t R, int64_t C);
void   moq_layout_rows16k4_pack(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst); /* _avx2 where the cpu has it */
void   moq_layout_rows16k4_pack_ref(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst);
void   moq_layout_rows16k4_pack_avx2(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst);
void   moq_layout_rows16k4_unpack(const uint8_t *dst, int64_t R, int64_t C, uint8_t *src);

#endif
