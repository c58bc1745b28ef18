/* rows16.c — the rows16 layout (grammar in layout.h): 16 output rows interleaved per column so
 * the CPU kernels load one column of 16 rows with one vector load, and the nvfp4_vnni16 layout
 * (nibble planes of 4 k per row = one VNNI dword). Tested by tests/kernels/test_layout.c. */
#include "kernels/layout/layout.h"

#include <string.h>

size_t moq_layout_rows16_size(int64_t R, int64_t C, size_t unit) { return (size_t)((R + 15) / 16) * (size_t)C * 16 * unit; }

void moq_layout_rows16_pack(const void *src, int64_t R, int64_t C, size_t unit, void *dst) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    memset(d, 0, moq_layout_rows16_size(R, C, unit));
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            memcpy(d + (size_t)(((r / 16) * C + c) * 16 + r % 16) * unit, s + (size_t)(r * C + c) * unit, unit);
}

void moq_layout_rows16_unpack(const void *dst, int64_t R, int64_t C, size_t unit, void *src) {
    const uint8_t *d = dst;
    uint8_t *s = src;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            memcpy(s + (size_t)(r * C + c) * unit, d + (size_t)(((r / 16) * C + c) * 16 + r % 16) * unit, unit);
}

static inline uint8_t code_at(const uint8_t *src, int64_t K, int64_t n, int64_t k) {
    return (uint8_t)((src[n * (K / 2) + k / 2] >> (4 * (k & 1))) & 0xF);
}

size_t moq_layout_nvfp4_vnni16_size(int64_t N, int64_t K) { return (size_t)((N + 15) / 16) * (size_t)(K / 8) * 64; }

void moq_layout_nvfp4_vnni16_pack(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst) {
    memset(dst, 0, moq_layout_nvfp4_vnni16_size(N, K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < K / 8; g++)
            for (int j = 0; j < 4; j++)
                dst[(((n / 16) * (K / 8) + g) * 16 + n % 16) * 4 + j] =
                    (uint8_t)(code_at(src, K, n, 8 * g + j) | code_at(src, K, n, 8 * g + 4 + j) << 4);
}

void moq_layout_nvfp4_vnni16_unpack(const uint8_t *dst, int64_t N, int64_t K, uint8_t *src) {
    memset(src, 0, (size_t)N * (size_t)(K / 2));
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < K / 8; g++)
            for (int j = 0; j < 4; j++) {
                const uint8_t b = dst[(((n / 16) * (K / 8) + g) * 16 + n % 16) * 4 + j];
                const int64_t k0 = 8 * g + j, k1 = k0 + 4;
                src[n * (K / 2) + k0 / 2] |= (uint8_t)((b & 0xF) << (4 * (k0 & 1)));
                src[n * (K / 2) + k1 / 2] |= (uint8_t)((b >> 4) << (4 * (k1 & 1)));
            }
}

size_t moq_layout_rows16k4_size(int64_t R, int64_t C) { return (size_t)((R + 15) / 16) * (size_t)((C + 3) / 4) * 64; }

void moq_layout_rows16k4_pack(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst) {
    const int64_t G = (C + 3) / 4;
    memset(dst, 0, moq_layout_rows16k4_size(R, C));
    for (int64_t r = 0; r < R; r++) {
        uint8_t *d = dst + (size_t)(((r / 16) * G) * 16 + r % 16) * 4;
        const uint8_t *s = src + (size_t)(r * C);
        for (int64_t c = 0; c < C; c++) d[(c / 4) * 64 + c % 4] = s[c];
    }
}

void moq_layout_rows16k4_unpack(const uint8_t *dst, int64_t R, int64_t C, uint8_t *src) {
    const int64_t G = (C + 3) / 4;
    for (int64_t r = 0; r < R; r++) {
        const uint8_t *d = dst + (size_t)(((r / 16) * G) * 16 + r % 16) * 4;
        for (int64_t c = 0; c < C; c++) src[r * C + c] = d[(c / 4) * 64 + c % 4];
    }
}
