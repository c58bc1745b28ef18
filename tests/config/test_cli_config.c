/* test_cli_config.c — the CLI contracts of `moq config` and `moq resolve`: JSON keys, exit codes
 * (= moq_status), "moq: where: message" on stderr. */
#include <cjson/cJSON.h>

#include "tu.h"

static char out[1 << 16];

static cJSON *run_json(const char *args, int want_rc) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s", tu_moq_bin(), args);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc != want_rc) fail_msg("`moq %s` exited %d, expected %d: %s", args, rc, want_rc, out);
    if (want_rc) return NULL;
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("`moq %s` did not print JSON: %s", args, out);
    return j;
}

static const char *s(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : cJSON_IsNull(v) ? "null" : "?";
}

static void test_config_json_keys(void **state) {
    (void)state;
    char *p = tu_data_path("modelopt_configs/nvidia--Qwen3.6-27B-NVFP4_hf_quant_config.json");
    char args[1200];
    snprintf(args, sizeof args, "config --json %s", p);
    cJSON *j = run_json(args, 0);
    static const char *const keys[] = {"source", "quant_method", "quant_algo", "kv_cache_quant_algo", "group_size",
                                       "exclude_modules", "quantized_layers", "moe_quant_algo"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(j, keys[i])) fail_msg("moq config --json lacks \"%s\"", keys[i]);
    assert_string_equal(s(j, "quant_method"), "modelopt_mixed");
    assert_string_equal(s(j, "kv_cache_quant_algo"), "FP8");
    assert_string_equal(s(j, "moe_quant_algo"), "null");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "quantized_layers")), 401);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "config --compat sglang --json %s", p);
    j = run_json(args, 0);
    assert_string_equal(s(j, "quant_method"), "modelopt_mixed");
    cJSON_Delete(j);
    free(p);
}

static void test_config_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("cli_cfg");
    const char *bad = "{\"quantization\":{\"quant_algo\":\"NVFP5\"}}";
    char *f = tu_write_file(dir, "hf_quant_config.json", bad, strlen(bad));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s config %s", tu_moq_bin(), f);
    int rc = tu_run(cmd, out, sizeof out);
    assert_int_equal(rc, MOQ_ERR_CONFIG);
    assert_non_null(strstr(out, "moq: hf_quant_config.json: quantization.quant_algo \"NVFP5\" is not one of"));
    run_json("config --compat nope x", MOQ_ERR_INVALID_ARG);
    snprintf(cmd, sizeof cmd, "config %s/missing", dir);
    run_json(cmd, MOQ_ERR_CONFIG);
    free(f);
    tu_rmtree(dir);
    free(dir);
}

static void test_resolve_contract(void **state) {
    (void)state;
    char *dir = tu_tmpdir("cli_res");
    const char *mp = "{\"quantization\":{\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[\"lm_head\"],"
                     "\"quantized_layers\":{\"model.layers.0.self_attn.q_proj\":{\"quant_algo\":\"FP8\"},\"model.layers.0.self_attn.k_proj\":{\"quant_algo\":\"NVFP4\"},"
                     "\"model.layers.0.mlp.down_proj\":{\"quant_algo\":\"NVFP4\",\"group_size\":16}}}}";
    char *f = tu_write_file(dir, "hf_quant_config.json", mp, strlen(mp));
    char args[1400];
    snprintf(args, sizeof args, "resolve --json %s model.layers.0.mlp.down_proj --kind linear", dir);
    cJSON *j = run_json(args, 0);
    int n = 0;
    for (const cJSON *c = j->child; c; c = c->next) n++;
    assert_int_equal(n, 6); /* exactly prefix, kind, method, algo, excluded, rule */
    assert_string_equal(s(j, "prefix"), "model.layers.0.mlp.down_proj");
    assert_string_equal(s(j, "kind"), "linear");
    assert_string_equal(s(j, "method"), "nvfp4_linear");
    assert_string_equal(s(j, "algo"), "NVFP4");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "excluded")));
    assert_string_equal(s(j, "rule"), "mp-direct");
    cJSON_Delete(j);
    snprintf(args, sizeof args, "resolve --json %s lm_head --kind lm_head", dir);
    j = run_json(args, 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "excluded")));
    assert_string_equal(s(j, "algo"), "null");
    cJSON_Delete(j);
    /* Mixed shards: exit MOQ_ERR_CONFIG and the message names both shards. */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s resolve %s model.layers.0.self_attn.qkv_proj --kind linear --packed qkv_proj=q_proj,k_proj,v_proj", tu_moq_bin(), dir);
    int rc = tu_run(cmd, out, sizeof out);
    assert_int_equal(rc, MOQ_ERR_CONFIG);
    assert_non_null(strstr(out, "moq: model.layers.0.self_attn.qkv_proj: shards q_proj=FP8 and k_proj=NVFP4 disagree"));
    snprintf(args, sizeof args, "resolve %s x", dir);
    run_json(args, MOQ_ERR_INVALID_ARG); /* --kind required */
    snprintf(args, sizeof args, "resolve %s x --kind conv", dir);
    run_json(args, MOQ_ERR_INVALID_ARG);
    free(f);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_config_json_keys), cmocka_unit_test(test_config_errors),
                                       cmocka_unit_test(test_resolve_contract)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
