/* test_quantize_gemma4.c — `moq quantize` on the tiny Gemma 4 of tests/data/hf_tiny (gemma4_text).
 *
 *  - FP8 and NVFP4 with calibration succeed; every quantized linear has a finite positive
 *    input_scale; the k_eq_v global layers (2, 4) get no v_proj weight; `moq check --values` reports
 *    0 problems and `moq run` generates.
 *  - --kv-cache fp8: each layer gets k_proj.k_scale and v_proj.v_scale, the k_eq_v layers' v_scale
 *    under the absent v_proj, as ModelOpt 0.47 writes it (tests/data/modelopt_real/gemma4_text_fp8_kv
 *    holds the same names: checked here), and the value is f32(amax(V) ⊗ f32(1/448)) with amax taken
 *    by a test observer of its own over the same tokens (NUMERICS §8; the tap's placement, after the
 *    v norm, is what the FP8-KV real export's oracle checks in test_modelopt_real).
 */
#include <math.h>

#include "tu.h"

#include "model/model.h"
#include "quant/quantize.h"

enum { N_IDS = 40, L = 5 };

static void observe(void *user, int64_t layer, moq_model_tap tap, int64_t expert, const float *x, int64_t rows, int64_t cols) {
    float *amax = user; /* [L] of V */
    (void)expert;
    if (tap != MOQ_TAP_V || layer < 0 || layer >= L) return;
    for (int64_t i = 0; i < rows * cols; i++) amax[layer] = fmaxf(amax[layer], fabsf(x[i]));
}

static float scalar_of(const moq_checkpoint *c, const char *name) {
    const moq_tensor *t = moq_checkpoint_tensor(c, name);
    if (!t) fail_msg("%s missing", name);
    assert_int_equal(t->dtype, MOQ_DT_F32);
    assert_int_equal(t->nelem, 1);
    float v;
    memcpy(&v, t->data, 4);
    return v;
}

static void run_cli(const char *what, const char *dst, const char *want) {
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s 2>&1", tu_moq_bin(), what, dst, strcmp(what, "run") == 0 ? "-p Hello -n 3" : "--values");
    if (tu_run(cmd, out, sizeof out) != 0 || (want && !strstr(out, want))) fail_msg("%s:\n%s", cmd, out);
}

static void test_quantize_gemma4(void **state) {
    (void)state;
    char *src = tu_src_data_path("hf_tiny/gemma4_text");
    int32_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids[i] = (int32_t)((i * 37 + 5) % 128);
    float vmax[L] = {0};
    moq_model *m = NULL;
    moq_model_opts mo = moq_model_opts_default();
    mo.ctx = N_IDS, mo.n_threads = 1;
    TU_OK(moq_model_open(&m, src, &mo, err_));
    moq_model_set_observer(m, observe, vmax);
    TU_OK(moq_model_prefill(m, ids, N_IDS, NULL, err_));
    moq_model_free(m);
    moq_calib cb = {0};
    TU_OK(moq_calibrate(&cb, src, ids, N_IDS, 1, err_));
    static const char *const algos[] = {"FP8", "NVFP4"};
    for (size_t a = 0; a < 2; a++) {
        char tag[64];
        snprintf(tag, sizeof tag, "qg4_%s", algos[a]);
        char *dst = tu_tmpdir(tag);
        tu_rmtree(dst);
        moq_quantize_opts o = moq_quantize_opts_default();
        o.algo = algos[a], o.calib = &cb, o.kv_fp8 = true;
        moq_quantize_report rep;
        TU_OK(moq_quantize(src, dst, &o, &rep, err_));
        assert_int_equal(rep.n_quantized, 33); /* 5 layers x (q, k, o, gate, up, down) + v in the 3 sliding layers */
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        for (int l = 0; l < L; l++) {
            char nm[128];
            const bool global = l == 2 || l == 4;
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.input_scale", l);
            const float is = scalar_of(c, nm);
            assert_true(is > 0 && isfinite(is));
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", l);
            assert_int_equal(moq_checkpoint_tensor(c, nm) != NULL, !global);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.k_scale", l);
            assert_true(scalar_of(c, nm) > 0);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.v_scale", l);
            const float want = vmax[l] * (1.0f / 448.0f), got = scalar_of(c, nm);
            if (got != want) fail_msg("%s = %.9g, expected amax %.9g / 448 = %.9g", nm, (double)got, (double)vmax[l], (double)want);
        }
        moq_checkpoint_free(c);
        run_cli("check", dst, ", 0 problems");
        run_cli("run", dst, NULL);
        tu_rmtree(dst);
        free(dst);
    }
    moq_calib_free(&cb);
    /* ModelOpt's own FP8 KV export of this model names the scales the same way */
    char *real = tu_src_data_path("modelopt_real/gemma4_text_fp8_kv");
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, real, NULL, err_));
    assert_null(moq_checkpoint_tensor(c, "model.layers.2.self_attn.v_proj.weight"));
    assert_true(scalar_of(c, "model.layers.2.self_attn.v_proj.v_scale") > 0);
    assert_true(scalar_of(c, "model.layers.2.self_attn.k_proj.k_scale") > 0);
    moq_checkpoint_free(c);
    free(real);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_gemma4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
