/* test_linear_ref.c — every `_ref` linear row (src/kernels/cpu/linear_ref.c) against the fp64
 * dequantize-then-matmul oracle of kref.h (activation quantized by the test's own definitions),
 * for each (weight, activation) pair of the seeds, f32 and bf16 activations and outputs, bias,
 * fused shards with different scales. Plus the bad-input cases: each error names the layer.
 * Both sides accumulate in double, so the only differences are the final f32 rounding (and the
 * bf16 output rounding): tolerance 1e-6 (f32 out), 2^-8 (bf16 out, half an ulp plus slack). */
#include "tu.h"

#include <time.h>

#include "klin.h"

static void run_pair(tpair p, int64_t M, int64_t N, int64_t K, int shards, moq_elem xe, moq_elem ye) {
    tw t = tw_make(p, N, K, shards, 1);
    float *x = malloc((size_t)(M * K) * 4);
    uint16_t *xb = malloc((size_t)(M * K) * 2);
    fill(x, (size_t)(M * K), urand(0.1f, 10.0f));
    for (int64_t i = 0; i < M * K; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        xb[i] = (uint16_t)(u >> 16);
        if (xe == MOQ_ELEM_BF16) x[i] = bf16_round(x[i]);
    }
    double *want = malloc((size_t)(M * N) * sizeof(double));
    tw_oracle(&t, x, M, want);
    float *y = malloc((size_t)(M * N) * 4);
    uint16_t *yb = malloc((size_t)(M * N) * 2);
    char name[64], what[128];
    snprintf(name, sizeof name, "cpu_ref_%s", tpair_name[p]);
    snprintf(what, sizeof what, "linear/%s/x_%s.y_%s/m%lld_n%lld_k%lld_s%d", name, moq_elem_name(xe), moq_elem_name(ye), (long long)M,
             (long long)N, (long long)K, shards);
    const void *xin = xe == MOQ_ELEM_BF16 ? (const void *)xb : (const void *)x;
    if (ye == MOQ_ELEM_F32) {
        klin_run(&t, name, xin, xe, M, y, ye, ~0u, NULL, NULL);
        klin_err(what, y, want, (size_t)(M * N), 1e-6);
    } else {
        klin_run(&t, name, xin, xe, M, yb, ye, ~0u, NULL, NULL);
        for (int64_t i = 0; i < M * N; i++) { uint32_t u = (uint32_t)yb[i] << 16; memcpy(&y[i], &u, 4); }
        klin_err(what, y, want, (size_t)(M * N), 1.0 / 256);
    }
    free(x), free(xb), free(want), free(y), free(yb);
    tw_free(&t);
}

static void test_ref_every_pair(void **state) {
    (void)state;
    static const struct { tpair p; int64_t N, K; int shards; } cases[] = {
        {TP_F32, 19, 37, 1},         {TP_BF16, 21, 45, 1},        {TP_F16, 17, 33, 1},
        {TP_FP8_TENSOR, 24, 50, 3},  {TP_FP8_ROW, 20, 64, 1},     {TP_FP8_BLK128, 200, 256, 1},
        {TP_NVFP4, 24, 64, 3},       {TP_NVFP4_W4A16, 20, 48, 2}, {TP_MXFP8, 18, 96, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int64_t M = 1; M <= 3; M += 2) {
            run_pair(cases[c].p, M, cases[c].N, cases[c].K, cases[c].shards, MOQ_ELEM_F32, MOQ_ELEM_F32);
            run_pair(cases[c].p, M, cases[c].N, cases[c].K, cases[c].shards, MOQ_ELEM_BF16, MOQ_ELEM_BF16);
        }
}

static void expect_create_error(const tw *t, moq_status code, const char *msg_sub) {
    moq_linear_opts o = moq_linear_opts_default();
    o.name = "model.layers.3.mlp.down_proj";
    moq_linear *l = (moq_linear *)&o; /* must come back NULL */
    moq_error e = {0};
    const moq_status st = moq_linear_create_from_weight(&l, &t->w, &o, &e);
    assert_null(l);
    TU_ERR(&e, st, code, "model.layers.3.mlp.down_proj", msg_sub);
}

static void test_bad_inputs(void **state) {
    (void)state;
    tw t = tw_make(TP_NVFP4, 32, 64, 1, 0);
    ((uint8_t *)t.scale)[5] = 0x7F; /* a block scale never written: the NaN sentinel */
    expect_create_error(&t, MOQ_ERR_TENSOR, "NaN");
    ((uint8_t *)t.scale)[5] = 0x38;
    t.w.shard_scale[0] = 0.0f;
    expect_create_error(&t, MOQ_ERR_TENSOR, "weight_scale_2");
    t.w.shard_scale[0] = 1e-3f;
    t.w.shard_in_scale[0] = NAN;
    expect_create_error(&t, MOQ_ERR_TENSOR, "input_scale");
    t.w.shard_in_scale[0] = 1e-3f;
    t.w.K = 72; /* not a multiple of 16 */
    expect_create_error(&t, MOQ_ERR_TENSOR, "multiple of 16");
    t.w.K = 64;
    t.w.scale = NULL;
    expect_create_error(&t, MOQ_ERR_TENSOR, "weight_scale missing");
    t.w.scale = t.scale;
    t.w.a = MOQ_KEY_A_FP8_TOKEN_DYN; /* no scheme pairs NVFP4 weights with FP8 activations */
    expect_create_error(&t, MOQ_ERR_UNSUPPORTED, "not a pair");
    tw_free(&t);
    tw r = tw_make(TP_FP8_ROW, 16, 32, 1, 0);
    ((float *)r.scale)[3] = -1.0f;
    expect_create_error(&r, MOQ_ERR_TENSOR, "weight_scale[3]");
    tw_free(&r);
    tw m = tw_make(TP_MXFP8, 16, 64, 1, 0);
    ((uint8_t *)m.scale)[2] = 0xFF;
    expect_create_error(&m, MOQ_ERR_TENSOR, "NaN");
    m.w.K = 48;
    expect_create_error(&m, MOQ_ERR_TENSOR, "multiple of 32");
    tw_free(&m);
    tw b = tw_make(TP_FP8_BLK128, 16, 256, 1, 0);
    b.w.K = 200;
    expect_create_error(&b, MOQ_ERR_TENSOR, "multiple of 128");
    tw_free(&b);
}

static void test_run_arguments(void **state) {
    (void)state;
    tw t = tw_make(TP_BF16, 16, 16, 1, 0);
    moq_linear *l = NULL;
    TU_OK(moq_linear_create_from_weight(&l, &t.w, NULL, err_));
    float x[16] = {0}, y[16];
    moq_error e = {0};
    moq_status st = moq_linear_run(l, x, MOQ_ELEM_F32, 1, y, MOQ_ELEM_F32, NULL, 0, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "", "workspace");
    st = moq_linear_run(l, x, MOQ_ELEM_E4M3, 1, y, MOQ_ELEM_F32, NULL, 0, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "", "expected f32 or bf16");
    moq_linear_free(l);
    moq_linear_free(NULL);
    tw_free(&t);
}

int main(void) {
    g_seed = (unsigned)time(NULL);
    g_rng = g_seed;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_every_pair),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_run_arguments),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r) fprintf(stderr, "seed %u\n", g_seed);
    return r;
}
