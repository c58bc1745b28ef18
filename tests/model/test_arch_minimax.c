/* test_arch_minimax.c — MiniMax-M2's config fields (model/arch/minimax_m2.c) on the configs NVIDIA
 * publishes, and what `moq inspect` / `moq check` say of them.
 *
 * Oracle: nvidia/MiniMax-M2.5-NVFP4's and nvidia/MiniMax-M2.7-NVFP4's own config.json
 * (tests/data/modelopt_configs): head_dim 128 with partial_rotary_factor 0.5 and rotary_dim 64, which
 * must agree; qk_norm_type "per_layer"; scoring_func "sigmoid". Each is written beside a one-tensor
 * safetensors file (its hf_quant_config.json too) so that the CLI opens it; `moq inspect` must not
 * say that `moq run` refuses it. Edited copies (a disagreeing rotary_dim, qk_norm_type "per_head",
 * scoring_func "softmax", use_qk_norm false) must be refused naming the key, by the library and by
 * `moq check`; `moq help archs` lists the architecture. The forward is tested against transformers in tests/model/test_arch.c (minimax_m2)
 * and against real ModelOpt exports in tests/model/test_modelopt_real.c.
 */
#include <string.h>

#include "tu.h"
#include "model/arch/minimax_m2.h"
#include "model/model.h"

static char *read_text(const char *path) {
    size_t n = 0;
    char *b = tu_read_file(path, &n);
    char *s = malloc(n + 1);
    memcpy(s, b, n);
    s[n] = 0;
    free(b);
    return s;
}

/* dir with config.json = text, the release's hf_quant_config.json, and a one-tensor model.safetensors. */
static char *write_dir(const char *tag, const char *text, const char *release) {
    char *dir = tu_tmpdir(tag), rel[256];
    free(tu_write_file(dir, "config.json", text, strlen(text)));
    snprintf(rel, sizeof rel, "modelopt_configs/nvidia--%s_hf_quant_config.json", release);
    char *qp = tu_data_path(rel), *q = read_text(qp);
    free(tu_write_file(dir, "hf_quant_config.json", q, strlen(q)));
    free(tu_write_st(dir, "model.safetensors", "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2));
    free(qp);
    free(q);
    return dir;
}

static void test_nvidia_configs(void **st) {
    (void)st;
    static const char *const releases[] = {"MiniMax-M2.5-NVFP4", "MiniMax-M2.7-NVFP4"};
    for (size_t i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "modelopt_configs/nvidia--%s_config.json", releases[i]);
        char *p = tu_data_path(rel), *text = read_text(p), *dir = write_dir(releases[i], text, releases[i]);
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
        const moq_arch *a = moq_checkpoint_arch(c);
        assert_string_equal(a->architecture, "MiniMaxM2ForCausalLM");
        assert_true(moq_model_architecture_supported(a->architecture));
        assert_int_equal(a->num_experts, 256);
        assert_int_equal(a->head_dim, 128);
        moq_minimax_m2_cfg mc;
        TU_OK(moq_minimax_m2_read(c, a->head_dim, &mc, err_));
        assert_int_equal(mc.rotary_dim, 64);
        TU_OK(moq_model_config_check(c, err_));
        static char out[16384];
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", tu_moq_bin(), dir);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        assert_non_null(strstr(out, "MiniMaxM2ForCausalLM"));
        assert_null(strstr(out, "refuses"));
        moq_checkpoint_free(c);
        free(p);
        free(text);
        free(dir);
    }
}

/* M2.5's config with one key replaced: refused naming the key, by the library and by `moq check`. */
static void test_refusals(void **st) {
    (void)st;
    static const struct { const char *from, *to, *key; } edits[] = {
        {"\"rotary_dim\": 64", "\"rotary_dim\": 32", "rotary_dim"},
        {"\"qk_norm_type\": \"per_layer\"", "\"qk_norm_type\": \"per_head\"", "qk_norm_type"},
        {"\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"", "scoring_func"},
        {"\"use_qk_norm\": true", "\"use_qk_norm\": false", "use_qk_norm"},
        {"\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 1.5", "partial_rotary_factor"},
    };
    char *p = tu_data_path("modelopt_configs/nvidia--MiniMax-M2.5-NVFP4_config.json"), *text = read_text(p);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *at = strstr(text, edits[i].from);
        assert_non_null(at);
        const size_t n = strlen(text) + 64, pre = (size_t)(at - text);
        char *t = malloc(n);
        snprintf(t, n, "%.*s%s%s", (int)pre, text, edits[i].to, at + strlen(edits[i].from));
        char tag[64];
        snprintf(tag, sizeof tag, "minimax_bad%zu", i);
        char *dir = write_dir(tag, t, "MiniMax-M2.5-NVFP4");
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
        moq_error e = {0};
        assert_int_not_equal(moq_model_config_check(c, &e), MOQ_OK);
        assert_string_equal(e.where, "config.json");
        assert_non_null(strstr(e.msg, edits[i].key));
        static char out[16384];
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "'%s' check '%s'", tu_moq_bin(), dir);
        assert_int_not_equal(tu_run(cmd, out, sizeof out), 0);
        assert_non_null(strstr(out, edits[i].key));
        moq_checkpoint_free(c);
        free(dir);
        free(t);
    }
    free(p);
    free(text);
}

/* `moq help archs` lists the row (one name a line). */
static void test_help_archs(void **st) {
    (void)st;
    static char out[16384];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' help archs", tu_moq_bin());
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "\nMiniMaxM2ForCausalLM\n"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvidia_configs),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_help_archs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
