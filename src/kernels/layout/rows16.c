/* rows16.c — the rows16 layout (grammar in layout.h): 16 output rows interleaved per column so
 * the CPU kernels load one column of 16 rows with one vector load, and the nvfp4_vnni16 layout
 * (nibble planes of 4 k per row = one VNNI dword), and rows16k4. Large packs split their 16-row
 * tiles over OpenMP threads (load time, issue 14). These are the `_ref` packers; the entry points
 * take the AVX2 twins (rows16_avx2.c) where the cpu has AVX2. Tested by tests/kernels/test_layout.c. */
#include "kernels/layout/layout.h"

#include <string.h>

#include "moq.h"

size_t moq_layout_rows16_size(int64_t R, int64_t C, size_t unit) { return (size_t)((R + 15) / 16) * (size_t)C * 16 * unit; }

/* Tile by tile, row by row: each source row is read once in order, each destination unit written
 * once (padding rows of the last tile zeroed, nothing else cleared first). */
void moq_layout_rows16_pack_ref(const void *src, int64_t R, int64_t C, size_t unit, void *dst) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    const int64_t tiles = (R + 15) / 16;
#pragma omp parallel for schedule(static) if (R * C * (int64_t)unit > ((int64_t)1 << 20))
    for (int64_t t = 0; t < tiles; t++)
        for (int rr = 0; rr < 16; rr++) {
            const int64_t r = 16 * t + rr;
            uint8_t *o = d + (size_t)(t * C * 16 + rr) * unit;
            const uint8_t *i = s + (size_t)(r * C) * unit;
            if (r >= R) {
                for (int64_t c = 0; c < C; c++) memset(o + (size_t)c * 16 * unit, 0, unit);
            } else if (unit == 1) {
                for (int64_t c = 0; c < C; c++) o[c * 16] = i[c];
            } else if (unit == 2) {
                for (int64_t c = 0; c < C; c++) memcpy(o + c * 32, i + 2 * c, 2);
            } else if (unit == 4) {
                for (int64_t c = 0; c < C; c++) memcpy(o + c * 64, i + 4 * c, 4);
            } else {
                for (int64_t c = 0; c < C; c++) memcpy(o + (size_t)c * 16 * unit, i + (size_t)c * unit, unit);
            }
        }
}

void moq_layout_rows16_pack(const void *src, int64_t R, int64_t C, size_t unit, void *dst) {
    if (moq_cpu_features() & MOQ_CPU_AVX2) moq_layout_rows16_pack_avx2(src, R, C, unit, dst);
    else moq_layout_rows16_pack_ref(src, R, C, unit, dst);
}

void moq_layout_rows16_unpack(const void *dst, int64_t R, int64_t C, size_t unit, void *src) {
    const uint8_t *d = dst;
    uint8_t *s = src;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            memcpy(s + (size_t)(r * C + c) * unit, d + (size_t)(((r / 16) * C + c) * 16 + r % 16) * unit, unit);
}

size_t moq_layout_nvfp4_vnni16_size(int64_t N, int64_t K) { return (size_t)((N + 15) / 16) * (size_t)(K / 8) * 64; }

/* Source bytes 4g..4g+3 of a row hold k 8g..8g+7 (low nibble = even k): byte j of the destination
 * dword is code(8g + j) | code(8g + 4 + j) << 4, i.e. nibble j of bytes 0-1 with nibble j of 2-3. */
void moq_layout_nvfp4_vnni16_pack_ref(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst) {
    const int64_t G = K / 8, tiles = (N + 15) / 16;
#pragma omp parallel for schedule(static) if (N * K > ((int64_t)1 << 21))
    for (int64_t t = 0; t < tiles; t++)
        for (int rr = 0; rr < 16; rr++) {
            const int64_t n = 16 * t + rr;
            uint8_t *o = dst + (size_t)(t * G * 16 + rr) * 4;
            if (n >= N) {
                for (int64_t g = 0; g < G; g++) memset(o + g * 64, 0, 4);
                continue;
            }
            const uint8_t *i = src + n * (K / 2);
            for (int64_t g = 0; g < G; g++) {
                const uint8_t b0 = i[4 * g], b1 = i[4 * g + 1], b2 = i[4 * g + 2], b3 = i[4 * g + 3];
                uint8_t *d = o + g * 64;
                d[0] = (uint8_t)((b0 & 0xF) | (b2 & 0xF) << 4);
                d[1] = (uint8_t)((b0 >> 4) | (b2 & 0xF0));
                d[2] = (uint8_t)((b1 & 0xF) | (b3 & 0xF) << 4);
                d[3] = (uint8_t)((b1 >> 4) | (b3 & 0xF0));
            }
        }
}

void moq_layout_nvfp4_vnni16_pack(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst) {
    if (moq_cpu_features() & MOQ_CPU_AVX2) moq_layout_nvfp4_vnni16_pack_avx2(src, N, K, dst);
    else moq_layout_nvfp4_vnni16_pack_ref(src, N, K, dst);
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

void moq_layout_rows16k4_pack_ref(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst) {
    const int64_t G = (C + 3) / 4, tiles = (R + 15) / 16;
#pragma omp parallel for schedule(static) if (R * C > ((int64_t)1 << 20))
    for (int64_t t = 0; t < tiles; t++)
        for (int rr = 0; rr < 16; rr++) {
            const int64_t r = 16 * t + rr;
            uint8_t *o = dst + (size_t)(t * G * 16 + rr) * 4;
            const uint8_t *i = src + (size_t)(r * C);
            int64_t g = 0;
            if (r < R)
                for (; 4 * g + 4 <= C; g++) memcpy(o + g * 64, i + 4 * g, 4);
            for (; g < G; g++)
                for (int j = 0; j < 4; j++) o[g * 64 + j] = r < R && 4 * g + j < C ? i[4 * g + j] : 0;
        }
}

void moq_layout_rows16k4_pack(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst) {
    if (moq_cpu_features() & MOQ_CPU_AVX2) moq_layout_rows16k4_pack_avx2(src, R, C, dst);
    else moq_layout_rows16k4_pack_ref(src, R, C, dst);
}

void moq_layout_rows16k4_unpack(const uint8_t *dst, int64_t R, int64_t C, uint8_t *src) {
    const int64_t G = (C + 3) / 4;
    for (int64_t r = 0; r < R; r++) {
        const uint8_t *d = dst + (size_t)(((r / 16) * G) * 16 + r % 16) * 4;
        for (int64_t c = 0; c < C; c++) src[r * C + c] = d[(c / 4) * 64 + c % 4];
    }
}
