/* test_layout.c — every layout transform in src/kernels/layout/: pack -> unpack is the identity,
 * each element lands where the grammar in layout.h says (position computed here from the
 * grammar, not from moq), and padding rows are zero. */
#include "tu.h"

#include <time.h>

#include "kernels/layout/layout.h"
#include "moq.h"
#include "kref.h"

/* Every packer (the dispatching one, _ref, _avx2 where the cpu has it); shapes with columns below,
 * at and above the AVX2 packers' 16 (2-byte) and 8 (4-byte) column steps, and a partial last tile. */
static void test_rows16(void **state) {
    (void)state;
    typedef void (*pack_fn)(const void *, int64_t, int64_t, size_t, void *);
    const pack_fn packs[] = {moq_layout_rows16_pack, moq_layout_rows16_pack_ref, moq_layout_rows16_pack_avx2};
    const int npacks = moq_cpu_features() & MOQ_CPU_AVX2 ? 3 : 2;
    static const int64_t shapes[][2] = {{1, 1}, {15, 7}, {16, 16}, {17, 33}, {40, 272}, {130, 5}, {16, 8}, {23, 47}, {33, 64}};
    static const size_t units[] = {1, 2, 4};
    for (int p = 0; p < npacks; p++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t u = 0; u < 3; u++) {
            const int64_t R = shapes[s][0], C = shapes[s][1];
            const size_t unit = units[u], n = (size_t)(R * C) * unit, psz = moq_layout_rows16_size(R, C, unit);
            assert_int_equal(psz, (size_t)((R + 15) / 16 * 16 * C) * unit);
            uint8_t *src = malloc(n), *dst = malloc(psz), *back = malloc(n);
            for (size_t i = 0; i < n; i++) src[i] = (uint8_t)rnd();
            memset(dst, 0xAB, psz);
            packs[p](src, R, C, unit, dst);
            for (int64_t r = 0; r < (R + 15) / 16 * 16; r++)
                for (int64_t c = 0; c < C; c++) {
                    const uint8_t *d = dst + (size_t)(((r / 16) * C + c) * 16 + r % 16) * unit;
                    for (size_t b = 0; b < unit; b++) assert_int_equal(d[b], r < R ? src[(size_t)(r * C + c) * unit + b] : 0);
                }
            moq_layout_rows16_unpack(dst, R, C, unit, back);
            assert_memory_equal(src, back, n);
            free(src), free(dst), free(back);
        }
}

/* Every packer of the layout (the dispatching one, _ref, and _avx2 where the cpu has it) against the
 * layout's formula; shapes with a partial last tile, K / 8 below, at and above multiples of 8 groups
 * (the AVX2 packer's 64-k steps and scalar tail). */
static void test_nvfp4_vnni16(void **state) {
    (void)state;
    typedef void (*pack_fn)(const uint8_t *, int64_t, int64_t, uint8_t *);
    const pack_fn packs[] = {moq_layout_nvfp4_vnni16_pack, moq_layout_nvfp4_vnni16_pack_ref, moq_layout_nvfp4_vnni16_pack_avx2};
    const int npacks = moq_cpu_features() & MOQ_CPU_AVX2 ? 3 : 2;
    static const int64_t shapes[][2] = {{1, 16}, {16, 32}, {17, 48}, {40, 272}, {16, 64}, {33, 1024}, {7, 576}, {48, 520}};
    for (int p = 0; p < npacks; p++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t N = shapes[s][0], K = shapes[s][1];
            const size_t n = (size_t)(N * K / 2), psz = moq_layout_nvfp4_vnni16_size(N, K);
            uint8_t *src = malloc(n), *dst = malloc(psz), *back = malloc(n);
            for (size_t i = 0; i < n; i++) src[i] = (uint8_t)rnd();
            memset(dst, 0xAB, psz);
            packs[p](src, N, K, dst);
            /* byte (t, g, r, j): low nibble = code(16t+r, 8g+j), high nibble = code(16t+r, 8g+4+j) */
            for (int64_t row = 0; row < (N + 15) / 16 * 16; row++)
                for (int64_t g = 0; g < K / 8; g++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t b = dst[(((row / 16) * (K / 8) + g) * 16 + row % 16) * 4 + j];
                        const int64_t k0 = 8 * g + j, k1 = k0 + 4;
                        const int lo = row < N ? (src[row * K / 2 + k0 / 2] >> (4 * (k0 & 1))) & 15 : 0;
                        const int hi = row < N ? (src[row * K / 2 + k1 / 2] >> (4 * (k1 & 1))) & 15 : 0;
                        if (b != (lo | hi << 4))
                            fail_msg("packer %d, N=%lld K=%lld: byte (row %lld, g %lld, j %d) = %#x, expected %#x", p, (long long)N, (long long)K,
                                     (long long)row, (long long)g, j, b, lo | hi << 4);
                    }
            moq_layout_nvfp4_vnni16_unpack(dst, N, K, back);
            assert_memory_equal(src, back, n);
            free(src), free(dst), free(back);
        }
}

/* rows16k4: byte (r, c) at (((r/16)·ceil(C/4) + c/4)·16 + r%16)·4 + c%4; padding rows and columns 0. */
static void test_rows16k4(void **state) {
    (void)state;
    typedef void (*pack_fn)(const uint8_t *, int64_t, int64_t, uint8_t *);
    const pack_fn packs[] = {moq_layout_rows16k4_pack, moq_layout_rows16k4_pack_ref, moq_layout_rows16k4_pack_avx2};
    const int npacks = moq_cpu_features() & MOQ_CPU_AVX2 ? 3 : 2;
    static const int64_t shapes[][2] = {{1, 1}, {15, 7}, {16, 16}, {17, 33}, {40, 300}, {130, 5}, {16, 32}, {21, 35}, {48, 130}};
    for (int p = 0; p < npacks; p++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t R = shapes[s][0], C = shapes[s][1], Rp = (R + 15) / 16 * 16, Cp = (C + 3) / 4 * 4;
        const size_t n = (size_t)(R * C), psz = moq_layout_rows16k4_size(R, C);
        assert_int_equal(psz, (size_t)(Rp * Cp));
        uint8_t *src = malloc(n), *dst = malloc(psz), *back = malloc(n);
        for (size_t i = 0; i < n; i++) src[i] = (uint8_t)rnd();
        memset(dst, 0xAB, psz);
        packs[p](src, R, C, dst);
        for (int64_t r = 0; r < Rp; r++)
            for (int64_t c = 0; c < Cp; c++)
                assert_int_equal(dst[(((r / 16) * (Cp / 4) + c / 4) * 16 + r % 16) * 4 + c % 4], r < R && c < C ? src[r * C + c] : 0);
        moq_layout_rows16k4_unpack(dst, R, C, back);
        assert_memory_equal(src, back, n);
        free(src), free(dst), free(back);
    }
}

int main(void) {
    g_seed = (unsigned)time(NULL);
    g_rng = g_seed;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows16), cmocka_unit_test(test_nvfp4_vnni16),
                                       cmocka_unit_test(test_rows16k4)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
