/* test_calib_arch.c — `moq quantize --calib` on the non-GQA and shared-expert architectures
 * (model/calibrate.c, the taps of model.c, attn/mla.c, attn/gdn.c, quant/quantize.c's leaf table).
 *
 *  - deepseek_v3_a (MLA + shared experts), deepseek_v3_b (MLA with q_proj), qwen3_5_moe (Gated DeltaNet + shared expert), qwen3_5,
 *    llama4_a (feed_forward.shared_expert, stacked experts), gemma3_text and gpt_oss from
 *    tests/data/hf_tiny: FP8 and NVFP4 with calibration succeed, every quantized linear (one with a
 *    weight_scale) has an input_scale that is finite and > 0, `moq check --values` reports 0
 *    problems and `moq run` generates.
 *  - the value: for MLA's q_b_proj and o_proj and DeltaNet's in_proj_qkv and out_proj, FP8's
 *    input_scale == f32(amax ⊗ f32(1/448)) (NUMERICS.md §9.1) where amax is taken by a test observer
 *    of its own over the same tokens (not the calibrator: this checks calibrator -> input_scale, not
 *    the tap's placement); and independently in fp64 from the source BF16 weights: layer 0's input
 *    h = rmsnorm(input_layernorm, embed[ids]) (q_a_proj, in_proj_qkv) and q_b_proj's input
 *    rmsnorm(q_a_layernorm, W_q_a · h), within 1e-4 relative.
 *  - --kv-cache fp8 on MLA is refused with a clear error and nothing written.
 */
#include <math.h>
#include <sys/stat.h>

#include "tu.h"

#include "format/format.h"
#include "model/model.h"
#include "quant/quantize.h"

enum { N_IDS = 40 };

static void make_ids(int32_t *ids, int64_t V) {
    for (int i = 0; i < N_IDS; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
}

/* ---- the test observer: amax per (layer, tap) of layers 0..3 ------------------------------------ */
typedef struct obs {
    float amax[4][MOQ_TAP_COUNT];
} obs;

static void observe(void *user, int64_t layer, moq_model_tap tap, int64_t expert, const float *x, int64_t rows, int64_t cols) {
    obs *o = user;
    (void)expert;
    if (layer < 0 || layer >= 4 || (int)tap < 0 || tap >= MOQ_TAP_COUNT) return;
    for (int64_t i = 0; i < rows * cols; i++)
        if (fabsf(x[i]) > o->amax[layer][tap]) o->amax[layer][tap] = fabsf(x[i]);
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

static void expect_scale(const moq_checkpoint *c, const char *module, float amax) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.input_scale", module);
    const float want = amax * (1.0f / 448.0f), got = scalar_of(c, nm);
    if (got != want) fail_msg("%s = %.9g, expected amax %.9g / 448 = %.9g", nm, (double)got, (double)amax, (double)want);
}

static int64_t model_vocab(const char *src) {
    moq_model *m = NULL;
    moq_model_opts mo = moq_model_opts_default();
    mo.ctx = N_IDS;
    TU_OK(moq_model_open(&m, src, &mo, err_));
    const int64_t V = moq_model_vocab_size(m);
    moq_model_free(m);
    return V;
}

/* Runs src (unquantized) over ids with the test observer. */
static void observe_model(const char *src, const int32_t *ids, obs *o) {
    moq_model *m = NULL;
    moq_model_opts mo = moq_model_opts_default();
    mo.ctx = N_IDS, mo.n_threads = 1;
    TU_OK(moq_model_open(&m, src, &mo, err_));
    for (int l = 0; l < 4; l++)
        for (int t = 0; t < MOQ_TAP_COUNT; t++) o->amax[l][t] = -1.0f;
    moq_model_set_observer(m, observe, o);
    TU_OK(moq_model_prefill(m, ids, N_IDS, NULL, err_));
    moq_model_free(m);
}

/* Every module with a weight_scale has an input_scale, finite and > 0. Returns the count. */
static int check_input_scales(const moq_checkpoint *c) {
    int n = 0;
    for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        const size_t len = strlen(t->name);
        if (len < 13 || strcmp(t->name + len - 13, ".weight_scale") != 0) continue;
        char nm[512];
        snprintf(nm, sizeof nm, "%.*s.input_scale", (int)(len - 13), t->name);
        const float v = scalar_of(c, nm);
        if (!(v > 0.0f) || !isfinite(v)) fail_msg("%s = %g, expected finite > 0", nm, (double)v);
        n++;
    }
    return n;
}

static double bf(const moq_tensor *t, int64_t i) {
    assert_int_equal(t->dtype, MOQ_DT_BF16);
    return (double)moq_bf16_decode(((const uint16_t *)t->data)[i]);
}

/* Layer 0's normed input in fp64 from the source: rmsnorm(input_layernorm, embed[ids]) (Qwen3.5's
 * norm weight is stored as w - 1: plus1). Returns its amax. */
static double fp64_h0(const moq_checkpoint *sc, const int32_t *ids, int64_t H, double eps, bool plus1, double *h) {
    const moq_tensor *e = moq_checkpoint_tensor(sc, "model.embed_tokens.weight"), *w = moq_checkpoint_tensor(sc, "model.layers.0.input_layernorm.weight");
    assert_non_null(e);
    assert_non_null(w);
    double amax = 0;
    for (int i = 0; i < N_IDS; i++) {
        double ss = 0;
        for (int64_t k = 0; k < H; k++) h[i * H + k] = bf(e, ids[i] * H + k), ss += h[i * H + k] * h[i * H + k];
        const double inv = 1.0 / sqrt(ss / (double)H + eps);
        for (int64_t k = 0; k < H; k++) h[i * H + k] *= inv * (bf(w, k) + (plus1 ? 1.0 : 0.0)), amax = fmax(amax, fabs(h[i * H + k]));
    }
    return amax;
}

static void expect_near(const moq_checkpoint *c, const char *module, double amax) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.input_scale", module);
    const double got = (double)scalar_of(c, nm) * 448.0;
    if (fabs(got - amax) > 1e-4 * amax) fail_msg("%s * 448 = %.9g, fp64 amax %.9g", nm, got, amax);
}

static void test_every_arch_quantizes(void **state) {
    (void)state;
    static const char *const models[] = {"deepseek_v3_a", "deepseek_v3_b", "qwen3_5_moe", "qwen3_5", "llama4_a", "gemma3_text", "gpt_oss"};
    static const char *const algos[] = {"FP8", "NVFP4"};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char rel[64];
        snprintf(rel, sizeof rel, "hf_tiny/%s", models[mi]);
        char *src = tu_src_data_path(rel);
        int32_t ids[N_IDS];
        make_ids(ids, model_vocab(src));
        moq_calib cb = {0};
        TU_OK(moq_calibrate(&cb, src, ids, N_IDS, 1, err_));
        for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
            char tag[96];
            snprintf(tag, sizeof tag, "ca_%s_%s", models[mi], algos[a]);
            char *dst = tu_tmpdir(tag);
            tu_rmtree(dst);
            moq_quantize_opts o = moq_quantize_opts_default();
            o.algo = algos[a], o.calib = &cb;
            moq_quantize_report rep;
            TU_OK(moq_quantize(src, dst, &o, &rep, err_));
            moq_checkpoint *c = NULL;
            TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
            const int n = check_input_scales(c);
            /* not a loop over an empty set: every tiny model has quantizable linears */
            if (n < 4) fail_msg("%s %s: %d quantized linears with an input_scale, expected at least 4", models[mi], algos[a], n);
            if (n != (int)rep.n_quantized) fail_msg("%s %s: %d input_scales for %d quantized linears", models[mi], algos[a], n, (int)rep.n_quantized);
            moq_checkpoint_free(c);
            char cmd[1024], out[8192];
            snprintf(cmd, sizeof cmd, "'%s' check '%s' --values 2>&1", tu_moq_bin(), dst);
            if (tu_run(cmd, out, sizeof out) != 0 || !strstr(out, ", 0 problems")) fail_msg("%s:\n%s", cmd, out);
            snprintf(cmd, sizeof cmd, "'%s' run '%s' -p Hello -n 3 2>&1", tu_moq_bin(), dst);
            if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s:\n%s", cmd, out);
            tu_rmtree(dst);
            free(dst);
        }
        moq_calib_free(&cb);
        free(src);
    }
}

static void test_mla_and_deltanet_values(void **state) {
    (void)state;
    /* DeepSeek-V3: MLA on layer 0 */
    char *src = tu_src_data_path("hf_tiny/deepseek_v3_a");
    const int64_t H = 64, QL = 32;
    int32_t ids[N_IDS];
    make_ids(ids, model_vocab(src));
    obs ob;
    observe_model(src, ids, &ob);
    moq_calib cb = {0};
    TU_OK(moq_calibrate(&cb, src, ids, N_IDS, 1, err_));
    char *dst = tu_tmpdir("ca_mla");
    tu_rmtree(dst);
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = "FP8", o.calib = &cb;
    moq_quantize_report rep;
    TU_OK(moq_quantize(src, dst, &o, &rep, err_));
    moq_checkpoint *c = NULL, *sc = NULL;
    TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
    expect_scale(c, "model.layers.0.self_attn.q_a_proj", ob.amax[0][MOQ_TAP_QKV_IN]);
    expect_scale(c, "model.layers.0.self_attn.kv_a_proj_with_mqa", ob.amax[0][MOQ_TAP_QKV_IN]);
    expect_scale(c, "model.layers.0.self_attn.q_b_proj", ob.amax[0][MOQ_TAP_Q_B_IN]);
    expect_scale(c, "model.layers.0.self_attn.o_proj", ob.amax[0][MOQ_TAP_O_IN]);
    expect_scale(c, "model.layers.1.mlp.shared_experts.down_proj", ob.amax[1][MOQ_TAP_DOWN_IN]);
    /* q_b_proj's input in fp64: rmsnorm(q_a_layernorm, W_q_a h), W from the source BF16 */
    TU_OK(moq_checkpoint_open(&sc, src, NULL, err_));
    const moq_tensor *wa = moq_checkpoint_tensor(sc, "model.layers.0.self_attn.q_a_proj.weight");
    const moq_tensor *nw = moq_checkpoint_tensor(sc, "model.layers.0.self_attn.q_a_layernorm.weight");
    assert_non_null(wa);
    assert_non_null(nw);
    assert_int_equal(wa->dtype, MOQ_DT_BF16);
    double *h = malloc(N_IDS * H * sizeof *h), amax = 0;
    expect_near(c, "model.layers.0.self_attn.q_a_proj", fp64_h0(sc, ids, H, 1e-6, false, h));
    for (int i = 0; i < N_IDS; i++) {
        double qa[32], ss = 0;
        for (int r = 0; r < QL; r++) {
            double acc = 0;
            for (int k = 0; k < H; k++) acc += bf(wa, r * H + k) * h[i * H + k];
            qa[r] = acc, ss += acc * acc;
        }
        const double inv = 1.0 / sqrt(ss / QL + 1e-6);
        for (int r = 0; r < QL; r++) amax = fmax(amax, fabs(qa[r] * inv * bf(nw, r)));
    }
    expect_near(c, "model.layers.0.self_attn.q_b_proj", amax);
    free(h);
    moq_checkpoint_free(sc);
    moq_checkpoint_free(c);
    /* --kv-cache fp8 on MLA: refused, nothing written */
    char *kdst = tu_tmpdir("ca_mla_kv");
    tu_rmtree(kdst);
    moq_quantize_opts ok = o;
    ok.kv_fp8 = true;
    moq_error e = {0};
    TU_ERR(&e, moq_quantize(src, kdst, &ok, &rep, &e), MOQ_ERR_INVALID_ARG, "--kv-cache fp8", "MLA");
    struct stat stt;
    assert_int_not_equal(stat(kdst, &stt), 0);
    free(kdst);
    moq_calib_free(&cb);
    tu_rmtree(dst);
    free(dst);
    free(src);

    /* Qwen3.5: Gated DeltaNet on layer 0 */
    src = tu_src_data_path("hf_tiny/qwen3_5");
    make_ids(ids, model_vocab(src));
    obs oq;
    observe_model(src, ids, &oq);
    TU_OK(moq_calibrate(&cb, src, ids, N_IDS, 1, err_));
    dst = tu_tmpdir("ca_gdn");
    tu_rmtree(dst);
    TU_OK(moq_quantize(src, dst, &o, &rep, err_));
    TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
    expect_scale(c, "model.layers.0.linear_attn.in_proj_qkv", oq.amax[0][MOQ_TAP_QKV_IN]);
    expect_scale(c, "model.layers.0.linear_attn.in_proj_z", oq.amax[0][MOQ_TAP_QKV_IN]);
    expect_scale(c, "model.layers.0.linear_attn.out_proj", oq.amax[0][MOQ_TAP_O_IN]);
    TU_OK(moq_checkpoint_open(&sc, src, NULL, err_));
    double *hq = malloc(N_IDS * H * sizeof *hq);
    expect_near(c, "model.layers.0.linear_attn.in_proj_qkv", fp64_h0(sc, ids, H, 1e-6, true, hq));
    free(hq);
    moq_checkpoint_free(sc);
    moq_checkpoint_free(c);
    moq_calib_free(&cb);
    tu_rmtree(dst);
    free(dst);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_arch_quantizes),
        cmocka_unit_test(test_mla_and_deltanet_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
