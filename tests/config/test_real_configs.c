/* test_real_configs.c — the 38 configs of published NVIDIA checkpoints (tests/data/modelopt_configs.tar.xz)
 * all parse under every profile (except the SGLang-only hybrid form under --compat vllm), and the
 * normalized fields agree with the file read independently here with cJSON. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>

#include "tu.h"

/* The quantization object as the file states it (hf_quant_config.json: "quantization"). */
static const cJSON *section(const cJSON *doc) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(doc, "quantization_config");
    if (q) return q;
    return cJSON_GetObjectItemCaseSensitive(doc, "quantization");
}

static void check_file(const char *dir, const char *name, int *n_files) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *text = tu_read_file(path, &len);
    char *z = malloc(len + 1);
    memcpy(z, text, len);
    z[len] = 0;
    cJSON *doc = cJSON_Parse(z);
    assert_non_null(doc);
    const cJSON *sec = section(doc);
    assert_non_null(sec);
    const bool is_cfg = cJSON_GetObjectItemCaseSensitive(doc, "quantization_config") != NULL;
    const cJSON *qm = cJSON_GetObjectItemCaseSensitive(sec, "quant_method");
    const bool hybrid = is_cfg && cJSON_IsString(qm) && strcmp(qm->valuestring, "fp8") == 0;

    for (int p = 0; p < MOQ_COMPAT_COUNT; p++) {
        moq_qconfig *q = NULL;
        moq_error e = {0};
        moq_status st = moq_qconfig_open(&q, path, (moq_compat)p, &e);
        if (hybrid && p == MOQ_COMPAT_VLLM) {
            TU_ERR(&e, st, MOQ_ERR_UNSUPPORTED, name, "hybrid");
            continue;
        }
        if (st != MOQ_OK) {
            char b[1024];
            moq_error_format(&e, b, sizeof b);
            fail_msg("%s (%s): %s", name, moq_compat_name((moq_compat)p), b);
        }
        /* quant_algo as written (all real files are upper case). */
        const cJSON *algo = cJSON_GetObjectItemCaseSensitive(sec, "quant_algo");
        assert_string_equal(moq_qconfig_quant_algo(q), algo->valuestring);
        /* exclude list: exclude_modules (nested) or ignore (flat), same length and order. */
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(sec, is_cfg ? "ignore" : "exclude_modules");
        assert_int_equal(moq_qconfig_exclude_count(q), cJSON_GetArraySize(ex));
        int i = 0;
        for (const cJSON *x = ex ? ex->child : NULL; x; x = x->next, i++) assert_string_equal(moq_qconfig_exclude_at(q, i), x->valuestring);
        /* quantized_layers: every entry, in order, upper-cased algo. */
        const cJSON *ql = cJSON_GetObjectItemCaseSensitive(sec, "quantized_layers");
        assert_int_equal(moq_qconfig_layer_count(q), ql ? cJSON_GetArraySize(ql) : 0);
        i = 0;
        for (const cJSON *x = ql ? ql->child : NULL; x; x = x->next, i++) {
            const char *ln, *la;
            int64_t g;
            assert_true(moq_qconfig_layer_at(q, i, &ln, &la, &g));
            assert_string_equal(ln, x->string);
            const cJSON *xa = cJSON_GetObjectItemCaseSensitive(x, "quant_algo");
            assert_int_equal(strcasecmp(la, xa->valuestring), 0);
        }
        /* quant_method vocabulary. */
        const char *m = moq_qconfig_quant_method(q);
        if (hybrid) assert_string_equal(m, "fp8");
        else if (strcmp(algo->valuestring, "MIXED_PRECISION") == 0) assert_string_equal(m, "modelopt_mixed");
        else if (strcmp(algo->valuestring, "NVFP4") == 0) assert_string_equal(m, "modelopt_fp4");
        else assert_string_equal(m, p == MOQ_COMPAT_SGLANG ? "modelopt_fp8" : "modelopt");
        /* KV: nested kv_cache_quant_algo, or kv_cache_scheme {float, 8} -> FP8. */
        const char *kv = moq_qconfig_kv_cache_quant_algo(q);
        const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(sec, is_cfg ? "kv_cache_scheme" : "kv_cache_quant_algo");
        if (cJSON_IsObject(kvs) || cJSON_IsString(kvs)) assert_string_equal(kv, "FP8");
        else if (!(p == MOQ_COMPAT_SGLANG && strcmp(m, "modelopt_fp4") == 0)) assert_null(kv);
        moq_qconfig_free(q);
    }
    cJSON_Delete(doc);
    free(z);
    free(text);
    (*n_files)++;
}

static void test_all_real_configs(void **state) {
    (void)state;
    char *dir = tu_data_path("modelopt_configs");
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0) check_file(dir, de->d_name, &n);
    }
    closedir(d);
    free(dir);
    assert_int_equal(n, 38);
}

/* Values read off specific files (their .source.md summaries say the same). */
static void test_known_values(void **state) {
    (void)state;
    static const struct { const char *file, *method, *algo, *kv; int64_t gs; } rows[] = {
        {"nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json", "modelopt", "FP8", "FP8", 0},
        {"nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json", "modelopt_fp4", "NVFP4", "FP8", 16},
        {"nvidia--GLM-5.1-NVFP4_config.json", "modelopt_fp4", "NVFP4", "FP8", 16},
        {"nvidia--DeepSeek-V4-Pro-NVFP4_config.json", "fp8", "MIXED_PRECISION", NULL, 16},
        {"nvidia--MiniMax-M3-NVFP4_hf_quant_config.json", "modelopt_mixed", "MIXED_PRECISION", NULL, 16},
        {"nvidia--Qwen3.6-35B-A3B-NVFP4_config.json", "modelopt_mixed", "MIXED_PRECISION", NULL, 16},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "modelopt_configs/%s", rows[i].file);
        char *p = tu_data_path(rel);
        moq_qconfig *q = NULL;
        TU_OK(moq_qconfig_open(&q, p, MOQ_COMPAT_MOQ, err_));
        assert_string_equal(moq_qconfig_quant_method(q), rows[i].method);
        assert_string_equal(moq_qconfig_quant_algo(q), rows[i].algo);
        if (rows[i].kv) assert_string_equal(moq_qconfig_kv_cache_quant_algo(q), rows[i].kv);
        else assert_null(moq_qconfig_kv_cache_quant_algo(q));
        assert_int_equal(moq_qconfig_group_size(q), rows[i].gs);
        moq_qconfig_free(q);
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_real_configs), cmocka_unit_test(test_known_values)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
