/* test_sampler.c — greedy / temperature / top-k / top-p sampling and its PRNG.
 *
 * Oracles: the published xoshiro256** and splitmix64 reference outputs (rand_xoshiro's reference
 * test, Vigna's splitmix64.c); fp64 softmax, top-k sets and nuclei computed here independently
 * (plain sorts); statistical bounds (5 sigma, fixed seeds, so the run is deterministic). No timing.
 */
#include "tu.h"

#include <math.h>

#include "model/sampler.h"

static void test_prng_reference(void **state) {
    (void)state;
    moq_xoshiro x = { { 1, 2, 3, 4 } };
    static const uint64_t want[] = { 11520ull, 0ull, 1509978240ull, 1215971899390074240ull, 1216172134540287360ull,
                                     607988272756665600ull, 16172922978634559625ull, 8476171486693032832ull,
                                     10595114339597558777ull, 2904607092377533576ull };
    for (int i = 0; i < 10; i++) assert_true(moq_xoshiro_next(&x) == want[i]);
    uint64_t s = 0;
    static const uint64_t sm0[] = { 0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full, 0xF88BB8A8724C81ECull };
    for (int i = 0; i < 4; i++) assert_true(moq_splitmix64(&s) == sm0[i]);
    s = 1234567;
    static const uint64_t sm1[] = { 6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                    4593380528125082431ull, 16408922859458223821ull };
    for (int i = 0; i < 5; i++) assert_true(moq_splitmix64(&s) == sm1[i]);
    /* uniform is in [0, 1) */
    moq_xoshiro_seed(&x, 7);
    for (int i = 0; i < 100000; i++) {
        double u = moq_xoshiro_uniform(&x);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

/* Test-local generator for logits (not the one under test). */
static uint64_t g_lcg = 88172645463325252ull;
static float rnd_logit(void) {
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_lcg >> 11) / 9007199254740992.0 * 12.0 - 6.0);
}

static moq_sampler *make(float temp, int32_t k, float p, uint64_t seed) {
    moq_sampler_opts o = moq_sampler_opts_default();
    o.temperature = temp; o.top_k = k; o.top_p = p; o.seed = seed;
    moq_sampler *s = NULL;
    TU_OK(moq_sampler_create(&s, &o, err_));
    return s;
}

static int32_t draw(moq_sampler *s, const float *l, size_t n, void *scratch) {
    int32_t id = -1;
    TU_OK(moq_sampler_sample(s, l, n, scratch, moq_sampler_scratch_size(n), &id, err_));
    assert_true(id >= 0 && (size_t)id < n);
    return id;
}

static void test_greedy(void **state) {
    (void)state;
    moq_sampler *s = make(0.0f, 0, 1.0f, 1);
    float l[6] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f };
    assert_int_equal(draw(s, l, 6, NULL), 1); /* ties -> lowest id; greedy needs no scratch */
    float m[3] = { -INFINITY, -INFINITY, -1e30f };
    assert_int_equal(draw(s, m, 3, NULL), 2);
    float z[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    assert_int_equal(draw(s, z, 4, NULL), 0);
    assert_true(moq_sampler_is_greedy(s)); /* what moq serve asks the batch's argmax for */
    moq_sampler_free(s);
    /* top_k = 1 is greedy whatever the temperature */
    s = make(5.0f, 1, 1.0f, 3);
    assert_true(moq_sampler_is_greedy(s));
    void *scratch = malloc(moq_sampler_scratch_size(6));
    for (int i = 0; i < 100; i++) assert_int_equal(draw(s, l, 6, scratch), 1);
    free(scratch);
    moq_sampler_free(s);
    s = make(0.7f, 2, 1.0f, 3);
    assert_false(moq_sampler_is_greedy(s));
    moq_sampler_free(s);
    assert_false(moq_sampler_is_greedy(NULL));
}

typedef struct ix { double v; int id; } ix;
static int ix_desc(const void *a, const void *b) {
    const ix *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

static void test_top_k_support(void **state) {
    (void)state;
    enum { N = 300, K = 7, DRAWS = 20000 };
    float l[N];
    ix order[N];
    for (int i = 0; i < N; i++) { l[i] = rnd_logit(); order[i] = (ix){ l[i], i }; }
    qsort(order, N, sizeof *order, ix_desc);
    bool in_top[N] = { false };
    for (int i = 0; i < K; i++) in_top[order[i].id] = true;
    moq_sampler *s = make(1.5f, K, 1.0f, 42);
    void *scratch = malloc(moq_sampler_scratch_size(N));
    int hits[N] = { 0 };
    for (int i = 0; i < DRAWS; i++) hits[draw(s, l, N, scratch)]++;
    /* never outside the k best; frequencies follow softmax(l/T) over the k (5 sigma) */
    double z = 0;
    for (int i = 0; i < K; i++) z += exp((order[i].v - order[0].v) / 1.5);
    for (int i = 0; i < N; i++) {
        if (!in_top[i]) { assert_int_equal(hits[i], 0); continue; }
        double p = exp((l[i] - order[0].v) / 1.5) / z, f = hits[i] / (double)DRAWS;
        double sigma = sqrt(p * (1 - p) / DRAWS);
        if (fabs(f - p) > 5 * sigma + 1e-9) fail_msg("id %d: frequency %.4f, softmax %.4f (sigma %.4f)", i, f, p, sigma);
    }
    free(scratch);
    moq_sampler_free(s);
}

static void test_top_p_mass(void **state) {
    (void)state;
    const float l[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
    void *scratch = malloc(moq_sampler_scratch_size(4));
    static const struct { float p; int kept; } cases[] = { { 0.3f, 1 }, { 0.7f, 2 }, { 0.9f, 3 }, { 0.97f, 4 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        moq_sampler *s = make(1.0f, 0, cases[c].p, 9 + c);
        int hits[4] = { 0 };
        enum { DRAWS = 20000 };
        for (int i = 0; i < DRAWS; i++) hits[draw(s, l, 4, scratch)]++;
        static const double prob[4] = { 0.5, 0.3, 0.15, 0.05 };
        double mass = 0;
        for (int i = 0; i < cases[c].kept; i++) mass += prob[i];
        for (int i = 0; i < 4; i++) {
            if (i >= cases[c].kept) { assert_int_equal(hits[i], 0); continue; }
            double p = prob[i] / mass, f = hits[i] / (double)DRAWS, sigma = sqrt(p * (1 - p) / DRAWS);
            if (fabs(f - p) > 5 * sigma + 1e-9) fail_msg("top_p %.2f id %d: frequency %.4f, expected %.4f", (double)cases[c].p, i, f, p);
        }
        moq_sampler_free(s);
    }
    free(scratch);
}

/* On a large vocabulary the prefilter must not change the nucleus: every draw lies in the nucleus
 * computed here by a full sort. top-k then top-p renormalises within the k. */
static void test_top_p_large(void **state) {
    (void)state;
    enum { N = 5000 };
    float *l = malloc(N * sizeof *l);
    ix *order = malloc(N * sizeof *order);
    for (int i = 0; i < N; i++) { l[i] = rnd_logit(); order[i] = (ix){ exp((double)l[i] / 0.7), i }; }
    qsort(order, N, sizeof *order, ix_desc);
    double total = 0, cum = 0;
    for (int i = 0; i < N; i++) total += order[i].v;
    bool *in = calloc(N, 1);
    int nucleus = 0;
    for (int i = 0; i < N && cum < 0.9 * total; i++) { cum += order[i].v; in[order[i].id] = true; nucleus++; }
    moq_sampler *s = make(0.7f, 0, 0.9f, 5);
    void *scratch = malloc(moq_sampler_scratch_size(N));
    int distinct = 0;
    bool *seen = calloc(N, 1);
    for (int i = 0; i < 1500; i++) {
        int32_t id = draw(s, l, N, scratch);
        assert_true(in[id]);
        if (!seen[id]) { seen[id] = true; distinct++; }
    }
    assert_true(distinct > nucleus / 2); /* it does sample across the nucleus */
    moq_sampler_free(s);
    /* top_k 50 + top_p 0.5: inside the 50 best, nucleus of their renormalised mass */
    s = make(0.7f, 50, 0.5f, 6);
    double mass50 = 0, c50 = 0;
    for (int i = 0; i < 50; i++) mass50 += order[i].v;
    memset(in, 0, N);
    for (int i = 0; i < 50 && c50 < 0.5 * mass50; i++) { c50 += order[i].v; in[order[i].id] = true; }
    for (int i = 0; i < 1000; i++) assert_true(in[draw(s, l, N, scratch)]);
    moq_sampler_free(s);
    free(seen); free(scratch); free(in); free(order); free(l);
}

static void test_determinism(void **state) {
    (void)state;
    enum { N = 1000, DRAWS = 500 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = rnd_logit();
    void *scratch = malloc(moq_sampler_scratch_size(N));
    int32_t a[DRAWS], b[DRAWS], c[DRAWS];
    moq_sampler *s1 = make(1.0f, 40, 0.95f, 1234), *s2 = make(1.0f, 40, 0.95f, 1234), *s3 = make(1.0f, 40, 0.95f, 1235);
    for (int i = 0; i < DRAWS; i++) { a[i] = draw(s1, l, N, scratch); b[i] = draw(s2, l, N, scratch); c[i] = draw(s3, l, N, scratch); }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    moq_sampler_free(s1); moq_sampler_free(s2); moq_sampler_free(s3);
    free(scratch);
}

static void test_errors(void **state) {
    (void)state;
    moq_sampler *s = NULL;
    moq_error e = {0};
    moq_sampler_opts o = moq_sampler_opts_default();
    o.temperature = -1.0f;
    TU_ERR(&e, moq_sampler_create(&s, &o, &e), MOQ_ERR_INVALID_ARG, "--temp", "temperature -1");
    o = moq_sampler_opts_default(); o.top_p = 0.0f;
    TU_ERR(&e, moq_sampler_create(&s, &o, &e), MOQ_ERR_INVALID_ARG, "--top-p", "top_p 0");
    o = moq_sampler_opts_default(); o.top_k = -2;
    TU_ERR(&e, moq_sampler_create(&s, &o, &e), MOQ_ERR_INVALID_ARG, "--top-k", "top_k -2");
    assert_null(s);
    s = make(1.0f, 0, 1.0f, 0);
    float l[4] = { 0.0f, 1.0f, 2.0f, NAN };
    int32_t id;
    char scratch[256];
    TU_ERR(&e, moq_sampler_sample(s, l, 4, scratch, sizeof scratch, &id, &e), MOQ_ERR_INVALID_ARG, "logits", "logits[3] is nan");
    l[3] = INFINITY;
    TU_ERR(&e, moq_sampler_sample(s, l, 4, scratch, sizeof scratch, &id, &e), MOQ_ERR_INVALID_ARG, "logits", "logits[3] is inf");
    l[3] = 0.0f;
    TU_ERR(&e, moq_sampler_sample(s, l, 4, scratch, 8, &id, &e), MOQ_ERR_INVALID_ARG, "", "scratch of 8 bytes");
    moq_sampler_free(s);
    moq_sampler_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prng_reference),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k_support),
        cmocka_unit_test(test_top_p_mass),
        cmocka_unit_test(test_top_p_large),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
