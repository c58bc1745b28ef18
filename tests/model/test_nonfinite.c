/* test_nonfinite.c — no silent garbage (issue 10): a checkpoint whose weights hold NaN or Inf is
 * named by `moq check --values`, and `moq run` / `moq eval` / moq_model_prefill stop naming the
 * first module whose output is not finite instead of producing tokens.
 *
 * Oracles: the codes this test plants itself (which tensor, which indices, which code), and the
 * element encodings' definitions (e4m3fn: S.1111.111 is NaN, no Inf; e8m0fnu: 0xFF is NaN;
 * bf16/f16/f32: IEEE exponent all ones). A crafted FP8 checkpoint (`moq synth --algo FP8`) gets a
 * few 0x7F / 0xFF codes in one down_proj.weight; an untouched copy is the control that must pass.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "tu.h"

#include "config/modules.h"

/* Overwrites bytes of tensor `name` in dir/model.safetensors: data[idx[i] * esz ..] = code (esz bytes). */
static void plant(const char *dir, const char *name, const size_t *idx, int n, const void *code, size_t esz) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    uint8_t *buf = tu_read_file(path, &len);
    uint64_t hl = 0;
    memcpy(&hl, buf, 8);
    cJSON *h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    assert_non_null(h);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, name);
    if (!t) fail_msg("%s: no tensor %s", path, name);
    const size_t begin = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "data_offsets"), 0)->valuedouble;
    for (int i = 0; i < n; i++) memcpy(buf + 8 + hl + begin + idx[i] * esz, code, esz);
    cJSON_Delete(h);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

static char *synth(const char *tag, const char *algo) {
    char *dir = tu_tmpdir(tag), cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "%s synth %s --algo %s --layers 2 --hidden 64 --inter 128 --heads 4 --kv-heads 2 --vocab 300", tu_moq_bin(), dir, algo);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s: %s", cmd, out);
    return dir;
}

/* One tensor view over caller bytes. */
static moq_tensor view(moq_dtype dt, const void *data, int64_t rows, int64_t cols) {
    moq_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "t.weight";
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = rows, t.shape[1] = cols;
    t.nelem = (uint64_t)(rows * cols);
    t.nbytes = t.nelem * (uint64_t)moq_dtype_bits(dt) / 8;
    t.data = data;
    return t;
}

static const char *one_problem(moq_modules *m, const moq_tensor *t, bool want_bad) {
    m->n_probs = 0;
    const bool clean = moq_tensor_check_payload_values(m, t);
    if (clean == want_bad) fail_msg("%s payload: clean=%d, expected %d", moq_dtype_name(t->dtype), clean, !want_bad);
    assert_int_equal(m->n_probs, want_bad ? 1 : 0);
    return want_bad ? m->probs[0].msg : "";
}

/* Every float dtype: its non-finite codes are found, counted and the first one located; finite
 * extremes (e4m3 ±448 = 0x7E/0xFE, e8m0 2^127 = 0xFE, the largest bf16/f16/f32) are not flagged. */
static void test_payload_scan_per_dtype(void **state) {
    (void)state;
    moq_modules m;
    memset(&m, 0, sizeof m);
    uint8_t b[64];
    /* e4m3fn: 0x7F and 0xFF are NaN; 0x7E, 0xFE are ±448 */
    for (int i = 0; i < 64; i++) b[i] = (uint8_t)(i % 2 ? 0x7E : 0xFE);
    moq_tensor t = view(MOQ_DT_F8_E4M3, b, 4, 16);
    one_problem(&m, &t, false);
    b[21] = 0xFF, b[40] = 0x7F;
    const char *msg = one_problem(&m, &t, true);
    if (!strstr(msg, "2 NaN and 0 Inf of 64 e4m3 values; first at index 21 (row 1, column 5) (code 0xFF)")) fail_msg("e4m3: %s", msg);
    /* e8m0fnu: 0xFF is NaN, 0xFE = 2^127 is finite */
    memset(b, 0xFE, sizeof b);
    t = view(MOQ_DT_F8_E8M0, b, 8, 8);
    one_problem(&m, &t, false);
    b[63] = 0xFF;
    msg = one_problem(&m, &t, true);
    if (!strstr(msg, "1 NaN and 0 Inf of 64 e8m0 values; first at index 63 (row 7, column 7) (code 0xFF)")) fail_msg("e8m0: %s", msg);
    /* bf16: 0x7F7F is the largest finite, 0x7F80 +Inf, 0xFF80 -Inf, 0x7FC1 NaN */
    uint16_t h[16];
    for (int i = 0; i < 16; i++) h[i] = 0x7F7F;
    t = view(MOQ_DT_BF16, h, 2, 8);
    one_problem(&m, &t, false);
    h[3] = 0xFF80, h[9] = 0x7FC1, h[10] = 0x7F80;
    msg = one_problem(&m, &t, true);
    if (!strstr(msg, "1 NaN and 2 Inf of 16 bf16 values; first at index 3 (row 0, column 3)")) fail_msg("bf16: %s", msg);
    /* f16: 0x7BFF = 65504 finite, 0x7C00 Inf, 0x7E00 NaN */
    for (int i = 0; i < 16; i++) h[i] = 0x7BFF;
    t = view(MOQ_DT_F16, h, 4, 4);
    one_problem(&m, &t, false);
    h[15] = 0x7E00, h[14] = 0x7C00;
    msg = one_problem(&m, &t, true);
    if (!strstr(msg, "1 NaN and 1 Inf of 16 f16 values; first at index 14 (row 3, column 2)")) fail_msg("f16: %s", msg);
    /* f32 */
    float f[8];
    for (int i = 0; i < 8; i++) f[i] = 3.4028235e38f;
    t = view(MOQ_DT_F32, f, 1, 8);
    one_problem(&m, &t, false);
    f[1] = NAN;
    msg = one_problem(&m, &t, true);
    if (!strstr(msg, "1 NaN and 0 Inf of 8 f32 values; first at index 1 (row 0, column 1)")) fail_msg("f32: %s", msg);
    /* integer and packed-FP4 payloads hold no NaN: every byte pattern passes */
    for (int i = 0; i < 64; i++) b[i] = 0xFF;
    t = view(MOQ_DT_U8, b, 4, 16);
    one_problem(&m, &t, false);
    t = view(MOQ_DT_I8, b, 4, 16);
    one_problem(&m, &t, false);
    free(m.probs);
}

/* The crafted FP8 checkpoint: `moq check --values` names the tensor and the first planted index. */
static void test_check_values_names_tensor(void **state) {
    (void)state;
    char *dir = synth("nonfinite_check", "FP8"), cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s check --values %s", tu_moq_bin(), dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("the untouched FP8 checkpoint is not clean: %s", out);
    /* down_proj.weight of layer 1: [hidden 64, inter 128] e4m3 */
    const size_t idx[3] = {700, 130, 8000};
    const uint8_t nan_code = 0x7F;
    plant(dir, "model.layers.1.mlp.down_proj.weight", idx, 3, &nan_code, 1);
    const int rc = tu_run(cmd, out, sizeof out);
    assert_int_equal(rc, MOQ_ERR_TENSOR);
    if (!strstr(out, "model.layers.1.mlp.down_proj.weight: 3 NaN and 0 Inf of 8192 e4m3 values; first at index 130 (row 1, column 2) (code 0x7F)"))
        fail_msg("check --values output lacks the planted NaN:\n%s", out);
    if (!strstr(out, "1 problem")) fail_msg("expected exactly one problem:\n%s", out);
    /* without --values the structure is still clean */
    snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    tu_rmtree(dir);
    free(dir);
}

/* The library stops a step whose logits are not finite and names the first module whose output is
 * not finite: the planted layer's down_proj, not a later layer, not the logits. */
static void test_prefill_names_first_module(void **state) {
    (void)state;
    static const struct { const char *layer; int plant_layer; } cases[] = {{"model.layers.0.mlp.down_proj", 0}, {"model.layers.1.mlp.down_proj", 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *dir = synth("nonfinite_run", "FP8");
        const int32_t toks[5] = {3 + 'h', 3 + 'i', 3 + ' ', 3 + 'x', 3 + 'y'};
        moq_model *m = NULL;
        moq_model_opts o = moq_model_opts_default();
        o.ctx = 16;
        o.n_threads = 1;
        TU_OK(moq_model_open(&m, dir, &o, err_));
        TU_OK(moq_model_prefill(m, toks, 5, NULL, err_)); /* control: the untouched model runs */
        for (int64_t v = 0; v < moq_model_vocab_size(m); v++) assert_true(isfinite(moq_model_logits(m)[v]));
        moq_model_free(m);
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", cases[c].plant_layer);
        const size_t idx[2] = {4000, 4001};
        const uint8_t codes = 0xFF;
        plant(dir, name, idx, 2, &codes, 1);
        TU_OK(moq_model_open(&m, dir, &o, err_));
        moq_error e = {0};
        moq_status st = moq_model_prefill(m, toks, 5, NULL, &e);
        TU_ERR(&e, st, MOQ_ERR_TENSOR, cases[c].layer, "output is not finite");
        if (strcmp(e.where, cases[c].layer) != 0) fail_msg("named %s, expected %s", e.where, cases[c].layer);
        assert_int_equal(moq_model_pos(m), 0); /* the failed step is not counted */
        /* decode after a clean prefix: the same */
        moq_model_reset(m);
        st = moq_model_decode(m, toks[0], &e);
        TU_ERR(&e, st, MOQ_ERR_TENSOR, cases[c].layer, "(NaN at token 0 of the step, position 0");
        moq_model_free(m);
        tu_rmtree(dir);
        free(dir);
    }
}

/* The CLI: `moq run` and `moq eval` exit with MOQ_ERR_TENSOR naming the module; nothing sampled. */
static void test_cli_run_eval_stop(void **state) {
    (void)state;
    char *dir = synth("nonfinite_cli", "FP8"), cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "%s run %s -p hi -n 4 --json", tu_moq_bin(), dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("run on the untouched checkpoint: %s", out);
    const size_t idx[4] = {1, 2, 3, 4};
    const uint8_t nan_code = 0x7F;
    plant(dir, "model.layers.0.mlp.down_proj.weight", idx, 4, &nan_code, 1);
    int rc = tu_run(cmd, out, sizeof out);
    assert_int_equal(rc, MOQ_ERR_TENSOR);
    if (!strstr(out, "moq: model.layers.0.mlp.down_proj: output is not finite")) fail_msg("run output:\n%s", out);
    if (strstr(out, "\"ids\"")) fail_msg("run produced tokens:\n%s", out);
    char *txt = tu_write_file(dir, "eval.txt", "hello world, hello moq\n", 23);
    snprintf(cmd, sizeof cmd, "%s eval %s --text %s --ctx 32", tu_moq_bin(), dir, txt);
    rc = tu_run(cmd, out, sizeof out);
    assert_int_equal(rc, MOQ_ERR_TENSOR);
    if (!strstr(out, "model.layers.0.mlp.down_proj: output is not finite")) fail_msg("eval output:\n%s", out);
    free(txt);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_payload_scan_per_dtype),
        cmocka_unit_test(test_check_values_names_tensor),
        cmocka_unit_test(test_prefill_names_first_module),
        cmocka_unit_test(test_cli_run_eval_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
