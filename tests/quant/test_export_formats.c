/* test_export_formats.c — the FP8 per-channel, FP8 128x128 block and MXFP8 weight exporters
 * (quant/export_ref.c) against fp64 references written here from NUMERICS.md §4.2, §5.2, §5.3:
 * scales from the exact amax, codes = the e4m3 value nearest to w / scale (ties to even code),
 * found by a search over all 256 codes. */
#include <math.h>

#include "tu.h"

#include "format/format.h"
#include "quant/export_ref.h"

/* Nearest finite e4m3 code to x (|x| <= 448), ties to the even code. */
static uint8_t nearest_e4m3(double x) {
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        const double v = moq_e4m3_decode((uint8_t)c);
        if (isnan(v)) continue;
        const double d = fabs(v - x);
        if (d < bd || (d == bd && (c & 1) == 0 && signbit(v) == signbit(x))) bd = d, best = c;
    }
    return (uint8_t)best;
}

static void fill(float *w, size_t n, uint64_t seed, float amp) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(seed >> 11) * 0x1p-53 - 0.5;
        w[i] = moq_bf16_decode(moq_bf16_encode_rne((float)(u * amp)));
    }
}

/* ModelOpt's amax / 448 on a CUDA tensor is PyTorch's multiplication by the f32 reciprocal:
 * f32(a ⊗ f32(1/448)); the product of two floats is exact in double, so one rounding to float. */
static float rcp448_times(double a) { return (float)(a * (double)(float)(1.0 / 448.0)); }

static bool same_value(uint8_t a, uint8_t b) { return moq_e4m3_decode(a) == moq_e4m3_decode(b); }

static void test_fp8_row(void **state) {
    (void)state;
    enum { N = 8, K = 64 };
    float w[N * K], s[N];
    uint8_t q[N * K];
    fill(w, N * K, 3, 2.0f);
    for (int k = 0; k < K; k++) w[5 * K + k] = 0.0f; /* a zero row */
    moq_export_fp8_row_weight(w, N, K, q, s);
    for (int n = 0; n < N; n++) {
        double a = 0;
        for (int k = 0; k < K; k++) a = fmax(a, fabs(w[n * K + k]));
        const float want = n == 5 ? 1.0f : rcp448_times(a);
        assert_true(s[n] == want);
        for (int k = 0; k < K; k++)
            if (!same_value(q[n * K + k], nearest_e4m3((double)(float)(w[n * K + k] / s[n]))))
                fail_msg("row %d col %d: code %02x for %g", n, k, q[n * K + k], (double)w[n * K + k] / s[n]);
    }
}

static void test_fp8_block(void **state) {
    (void)state;
    enum { N = 200, K = 256 }; /* a partial trailing block of 72 rows */
    float *w = malloc(N * K * 4), s[2 * 2];
    uint8_t *q = malloc(N * K);
    fill(w, N * K, 5, 1.0f);
    w[130 * K + 200] = 3.0f; /* block (1, 1) amax */
    moq_export_fp8_block_weight(w, N, K, q, s);
    for (int bn = 0; bn < 2; bn++)
        for (int bk = 0; bk < 2; bk++) {
            double a = 0;
            for (int n = bn * 128; n < N && n < bn * 128 + 128; n++)
                for (int k = bk * 128; k < bk * 128 + 128; k++) a = fmax(a, fabs(w[n * K + k]));
            assert_true(s[bn * 2 + bk] == rcp448_times(a));
        }
    assert_true(s[3] == rcp448_times(3.0));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            const float sc = s[(n / 128) * 2 + k / 128];
            assert_true(same_value(q[n * K + k], nearest_e4m3((double)(float)(w[n * K + k] / sc))));
        }
    free(w);
    free(q);
}

static void test_mxfp8(void **state) {
    (void)state;
    enum { N = 4, K = 128 };
    float w[N * K];
    uint8_t q[N * K], sc[N * K / 32];
    fill(w, N * K, 9, 0.5f);
    for (int j = 0; j < 32; j++) w[32 + j] = 0.0f;       /* zero block -> code 0           */
    w[64] = 448.0f;                                      /* amax/448 = 1 exactly -> code 127 */
    w[3 * K] = 1.0f;                                     /* block with amax 1 -> code 119    */
    for (int j = 1; j < 32; j++) w[3 * K + j] = 0.25f;
    moq_export_mxfp8_weight(w, N, K, q, sc);
    assert_int_equal(sc[1], 0);
    assert_int_equal(sc[2], 127);
    assert_int_equal(sc[3 * 4], 119); /* NUMERICS.md §4.4: a = 1 -> 119 */
    for (int b = 0; b < N * K / 32; b++) {
        double a = 0;
        for (int j = 0; j < 32; j++) a = fmax(a, fabs(w[b * 32 + j]));
        if (a == 0) continue;
        /* smallest power of two >= a / 448 */
        const double p = ldexp(1.0, sc[b] - 127);
        assert_true(p >= (double)rcp448_times(a));
        assert_true(p / 2 < (double)rcp448_times(a));
        for (int j = 0; j < 32; j++) assert_true(same_value(q[b * 32 + j], nearest_e4m3(w[b * 32 + j] / p)));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fp8_row), cmocka_unit_test(test_fp8_block), cmocka_unit_test(test_mxfp8)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
