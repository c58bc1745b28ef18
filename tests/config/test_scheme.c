/* test_scheme.c — the scheme table against the seeds: each algo's (weight, activation) quant keys
 * as vLLM's resolve() pairs them, its methods, and its contract shapes as the seeds' create_weights
 * register them, evaluated at N = 256, K = 512, group 16 (restated here, not read from scheme.c). */
#include "tu.h"

#include "scheme/scheme.h"

static int64_t numel_of(const moq_dim *d, int64_t N, int64_t K, int64_t G) {
    int64_t n = 1;
    for (int i = 0; i < MOQ_RULE_MAX_DIMS && d[i] != MOQ_DIM_END; i++) n *= moq_dim_eval(d[i], N, K, G);
    return n;
}

static const moq_tensor_rule *rule(const moq_scheme *s, const char *suffix) {
    for (const moq_tensor_rule *r = s->contract; r->suffix; r++)
        if (strcmp(r->suffix, suffix) == 0) return r;
    return NULL;
}

static void test_keys_and_methods(void **state) {
    (void)state;
    static const struct { const char *algo; const moq_quant_key *w, *a; const char *lin, *moe; } rows[] = {
        /* vLLM resolve(): FP8 -> (kFp8StaticTensorSym, kFp8StaticTensorSym), PCPT -> (kFp8StaticTokenSym,
         * kFp8DynamicTokenSym), PB_WO -> (kFp8Static128BlockSym, kFp8Dynamic128Sym), MXFP8 -> (kMxfp8Static,
         * kMxfp8Dynamic), NVFP4 -> (kNvfp4Static, kNvfp4Dynamic), W4A16_NVFP4 -> (kNvfp4Static, None). */
        {"FP8", &MOQ_KEY_W_FP8_TENSOR, &MOQ_KEY_A_FP8_TENSOR_STATIC, "fp8_linear", "fp8_moe"},
        {"FP8_PER_CHANNEL_PER_TOKEN", &MOQ_KEY_W_FP8_ROW, &MOQ_KEY_A_FP8_TOKEN_DYN, "fp8_pcpt_linear", "fp8_pcpt_moe"},
        {"FP8_PB_WO", &MOQ_KEY_W_FP8_BLK128, &MOQ_KEY_A_FP8_G128_DYN, "fp8_pbwo_linear", "fp8_block_moe"},
        {"NVFP4", &MOQ_KEY_W_NVFP4, &MOQ_KEY_A_NVFP4_DYN, "nvfp4_linear", "nvfp4_moe"},
        {"W4A16_NVFP4", &MOQ_KEY_W_NVFP4, &MOQ_KEY_A_NONE, "w4a16_nvfp4_linear", "w4a16_nvfp4_moe"},
        {"MXFP8", &MOQ_KEY_W_MXFP8, &MOQ_KEY_A_MXFP8_DYN, "mxfp8_linear", "mxfp8_moe"},
        /* moq only (neither seed): NVFP4 keys, the input multiplied by pre_quant_scale first */
        {"NVFP4_AWQ", &MOQ_KEY_W_NVFP4, &MOQ_KEY_A_NVFP4_DYN, "nvfp4_awq_linear", "nvfp4_awq_moe"},
    };
    assert_int_equal(moq_scheme_count(), 7);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const moq_scheme *s = moq_scheme_find(rows[i].algo, false);
        assert_non_null(s);
        assert_true(moq_quant_key_eq(s->w, rows[i].w));
        assert_true(moq_quant_key_eq(s->a, rows[i].a));
        assert_string_equal(moq_method_name(s->linear), rows[i].lin);
        assert_string_equal(moq_method_name(s->moe), rows[i].moe);
    }
    assert_ptr_equal(moq_scheme_find("FP8_BLOCK_SCALES", false), moq_scheme_find("FP8_PB_WO", false));
    assert_null(moq_scheme_find("nvfp4", false));
    assert_non_null(moq_scheme_find("nvfp4", true));
    assert_null(moq_scheme_find("MIXED_PRECISION", true)); /* a resolution rule, not a scheme */
}

static void test_contract_shapes(void **state) {
    (void)state;
    const int64_t N = 256, K = 512, G = 16;
    static const struct { const char *algo, *suffix; moq_dtype dt; int64_t numel; bool optional; } rows[] = {
        /* SGLang ModelOptFp8LinearMethod / vLLM KFp8StaticTensor: weight e4m3 [N, K], scales per partition */
        {"FP8", "weight", MOQ_DT_F8_E4M3, 256 * 512, false},
        {"FP8", "weight_scale", MOQ_DT_F32, 1, false},
        {"FP8", "input_scale", MOQ_DT_F32, 1, false},
        /* vLLM KFp8StaticChannel: weight_scale [N] */
        {"FP8_PER_CHANNEL_PER_TOKEN", "weight_scale", MOQ_DT_F32, 256, false},
        /* vLLM KFp8Block128: weight_scale [cdiv(N,128), 1, K/128, 1] */
        {"FP8_PB_WO", "weight_scale", MOQ_DT_F32, 2 * 4, false},
        /* SGLang ModelOptFp4LinearMethod / vLLM KNvfp4Static: weight u8 [N, K/2], weight_scale e4m3 [N, K/G] */
        {"NVFP4", "weight", MOQ_DT_U8, 256 * 256, false},
        {"NVFP4", "weight_scale", MOQ_DT_F8_E4M3, 256 * 32, false},
        {"NVFP4", "weight_scale_2", MOQ_DT_F32, 1, false},
        {"NVFP4", "input_scale", MOQ_DT_F32, 1, false},
        /* W4A16: input_scale registered only for legacy checkpoints */
        {"W4A16_NVFP4", "input_scale", MOQ_DT_F32, 1, true},
        {"W4A16_NVFP4", "weight_scale_2", MOQ_DT_F32, 1, false},
        /* vLLM KMxfp8Static: weight e4m3 [N, K], weight_scale e8m0 [N, K/32] */
        {"MXFP8", "weight", MOQ_DT_F8_E4M3, 256 * 512, false},
        {"MXFP8", "weight_scale", MOQ_DT_U8, 256 * 16, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const moq_scheme *s = moq_scheme_find(rows[i].algo, false);
        const moq_tensor_rule *r = rule(s, rows[i].suffix);
        if (!r) fail_msg("%s has no %s", rows[i].algo, rows[i].suffix);
        assert_int_equal(r->dtype, rows[i].dt);
        assert_int_equal(r->optional, rows[i].optional);
        const int64_t g = s->group == 32 ? 32 : G;
        if (numel_of(r->shape, N, K, g) != rows[i].numel) fail_msg("%s.%s: %lld elements, expected %lld", rows[i].algo, rows[i].suffix,
                                                                     (long long)numel_of(r->shape, N, K, g), (long long)rows[i].numel);
    }
    /* FP8_PB_WO: the 2-D squeezed scale is accepted too; K not divisible by 128 has no valid shape. */
    const moq_tensor_rule *r = rule(moq_scheme_find("FP8_PB_WO", false), "weight_scale");
    assert_true(r->alt_used);
    assert_int_equal(numel_of(r->shape_alt, 200, 512, 0), 2 * 4);
    assert_int_equal(moq_dim_eval(MOQ_DIM_K_BLK128, 0, 500, 0), -1);
    assert_int_equal(moq_dim_eval(MOQ_DIM_K_DIV_G, 0, 40, 16), -1);
    char b[64];
    assert_string_equal(moq_dim_str(rule(moq_scheme_find("NVFP4", false), "weight_scale")->shape, b, sizeof b), "[N, K/G]");
    /* moq_contract_rule: only NVFP4_AWQ (ModelOpt NVFP4_AWQ_LITE_CFG) carries pre_quant_scale */
    const moq_tensor_rule *pq = moq_contract_rule(moq_scheme_find("NVFP4_AWQ", false)->contract, "pre_quant_scale");
    assert_non_null(pq);
    assert_string_equal(pq->suffix, "pre_quant_scale");
    assert_null(moq_contract_rule(moq_scheme_find("NVFP4", false)->contract, "pre_quant_scale"));
    assert_null(moq_contract_rule(NULL, "weight"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_keys_and_methods), cmocka_unit_test(test_contract_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
