/* test_rowscan.c — core/rowscan.c against the plain scalar loops written here with libm's isnan /
 * isinf / isfinite: every position of a special value across block edges (256) and tails, several
 * lengths, ties and signed zeros for the argmax, and the copy's bytes. */
#include "tu.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rowscan.h"

static int64_t ref_first_nonfinite(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return i;
    return -1;
}

static int64_t ref_first_nan_or_posinf(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(p[i]) || (isinf(p[i]) && p[i] > 0)) return i;
    return -1;
}

static int64_t ref_argmax(const float *p, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (p[i] > p[b]) b = i;
    return b;
}

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

static void fill(float *p, int64_t n, uint32_t *s) {
    for (int64_t i = 0; i < n; i++) p[i] = ((float)(lcg(s) >> 8) - 8388608.0f) * 0x1p-10f; /* ±8192, finite */
}

static const int64_t lens[] = {1, 2, 7, 255, 256, 257, 511, 512, 1000, 128256 % 4096 + 4096};

static void test_nonfinite_every_position(void **state) {
    (void)state;
    uint32_t s = 7;
    const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0x1p-149f, -0.0f};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int64_t n = lens[li];
        float *p = malloc((size_t)n * sizeof *p), *d = malloc((size_t)n * sizeof *d);
        assert_non_null(p), assert_non_null(d);
        for (size_t k = 0; k < sizeof specials / sizeof *specials; k++)
            for (int64_t at = 0; at < n; at += (n > 600 ? 37 : 1)) {
                fill(p, n, &s);
                p[at] = specials[k];
                if (n > 3 && (at & 1)) p[n - 1] = NAN; /* a later one must not win */
                assert_int_equal(moq_f32_first_nonfinite(p, n), ref_first_nonfinite(p, n));
                assert_int_equal(moq_f32_first_nan_or_posinf(p, n), ref_first_nan_or_posinf(p, n));
                memset(d, 0xA5, (size_t)n * sizeof *d);
                assert_int_equal(moq_f32_copy_first_nonfinite(d, p, n), ref_first_nonfinite(p, n));
                assert_memory_equal(d, p, (size_t)n * sizeof *p); /* all of it, NaN payloads too */
            }
        fill(p, n, &s);
        assert_int_equal(moq_f32_first_nonfinite(p, n), -1);
        assert_int_equal(moq_f32_first_nan_or_posinf(p, n), -1);
        free(p), free(d);
    }
}

static void test_argmax_ties_and_zeros(void **state) {
    (void)state;
    uint32_t s = 11;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int64_t n = lens[li];
        float *p = malloc((size_t)n * sizeof *p);
        assert_non_null(p);
        for (int round = 0; round < 40; round++) {
            fill(p, n, &s);
            if (round % 4 == 1) /* coarse values: many ties, the maximum among them */
                for (int64_t i = 0; i < n; i++) p[i] = (float)(lcg(&s) % 5);
            if (round % 4 == 2) /* the maximum is zero, of either sign */
                for (int64_t i = 0; i < n; i++) p[i] = (lcg(&s) & 1) ? -0.0f : (lcg(&s) & 2) ? 0.0f : -1.0f - (float)(lcg(&s) % 9);
            if (round % 4 == 3) /* masked logits: -inf, one finite or none */
                for (int64_t i = 0; i < n; i++) p[i] = (lcg(&s) % 97 == 0) ? -3.0f : -INFINITY;
            assert_int_equal(moq_f32_argmax_first(p, n), ref_argmax(p, n));
        }
        for (int64_t at = 0; at < n; at += (n > 600 ? 41 : 1)) { /* the one maximum at every position */
            fill(p, n, &s);
            p[at] = 1e30f;
            assert_int_equal(moq_f32_argmax_first(p, n), at);
        }
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_every_position),
        cmocka_unit_test(test_argmax_ties_and_zeros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
