/* test_load.c — moq_linear_layer_open on small generated checkpoints, one per quant_algo, written
 * with moq_writer and ModelOpt's exporters (quant/export_ref.c), loaded through config resolution
 * and run with moq_linear_run.
 *
 * Oracle: the fp64 dequantize-then-matmul of tests/kernels/kref.h (tw_oracle: activations quantized
 * by the test's own definitions of NUMERICS §2.4, §4.3, §5.1-§5.3, code books built from §1),
 * applied to a reference weight the test assembles itself from the bytes it wrote (its own shard
 * concatenation, scale squeeze, row-block expansion, requantization). Nothing of the loader is
 * reused by the oracle. Bad inputs assert status, `where` (tensor or layer) and message.
 */
#include "tu.h"

#include <math.h>

#include "../kernels/klin.h"
#include "quant/export_ref.h"
#include "scheme/load.h"

enum { K_ = 256, M_ = 3 };
#define TOL 2e-5

static const char *const qkv_names[] = {"q_proj", "k_proj", "v_proj"};
static const char *const gu_names[] = {"gate_proj", "up_proj"};
static const moq_packed packed[] = {{"qkv_proj", qkv_names, 3}, {"gate_up_proj", gu_names, 2}};

/* ---- checkpoint writing ------------------------------------------------------------------------ */
typedef struct ck {
    char       *dir;
    moq_writer *w;
    void       *bufs[256];
    int         nb;
} ck;

static void *keep(ck *c, size_t n) {
    assert_true(c->nb < 256);
    return c->bufs[c->nb++] = calloc(1, n ? n : 1);
}

static void put(ck *c, const char *mod, const char *role, moq_dtype dt, int ndim, const int64_t *shape, const void *data, size_t nbytes) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.%s", mod, role);
    void *p = keep(c, nbytes);
    memcpy(p, data, nbytes);
    TU_OK(moq_writer_add(c->w, nm, dt, ndim, shape, p, nbytes, err_));
}
static void put_scalar(ck *c, const char *mod, const char *role, float v) { put(c, mod, role, MOQ_DT_F32, 0, NULL, &v, 4); }

static void ck_begin(ck *c, const char *tag) {
    memset(c, 0, sizeof *c);
    c->dir = tu_tmpdir(tag);
    TU_OK(moq_writer_create(&c->w, c->dir, err_));
}

/* algo NULL: no quantization config. layers_json: MIXED_PRECISION quantized_layers body. */
static void ck_finish(ck *c, const char *algo, const char *layers_json) {
    TU_OK(moq_writer_file(c->w, "config.json",
                          "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 256, "
                          "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"torch_dtype\": \"bfloat16\"}", err_));
    if (algo) {
        char hq[2048];
        snprintf(hq, sizeof hq,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": {\"quant_algo\": \"%s\", "
                 "\"kv_cache_quant_algo\": null%s, \"exclude_modules\": [\"lm_head\"]%s%s%s}}",
                 algo, strstr(algo, "NVFP4") || layers_json ? ", \"group_size\": 16" : "", layers_json ? ", \"quantized_layers\": {" : "",
                 layers_json ? layers_json : "", layers_json ? "}" : "");
        TU_OK(moq_writer_file(c->w, "hf_quant_config.json", hq, err_));
    }
    TU_OK(moq_writer_finish(c->w, 1, err_));
    moq_writer_free(c->w);
    c->w = NULL;
    for (int i = 0; i < c->nb; i++) free(c->bufs[i]);
    c->nb = 0;
}

static void ck_done(ck *c) {
    tu_rmtree(c->dir);
    free(c->dir);
}

/* ---- one quantized module, exported as ModelOpt does, and its reference ------------------------- */
static uint64_t g_wrng = 7;
static float wrand(void) { /* bf16-exact values in (-1, 1) */
    g_wrng = g_wrng * 6364136223846793005ull + 1442695040888963407ull;
    return bf16_round((float)((double)(g_wrng >> 11) * 0x1p-52 - 1.0));
}

typedef enum fault {
    F_NONE = 0, F_SCALE_DTYPE, F_SCALE_SHAPE, F_NO_INPUT_SCALE, F_NAN_SCALE, F_ZERO_IN_SCALE, F_NEG_SCALE2, F_SENTINEL,
    F_LEGACY_IN, F_ROWBLK4
} fault;

/* Reference of one shard, in the canonical order the test expects (owned). */
typedef struct shard_ref {
    int64_t  N;
    uint8_t *q;      /* codes as written                          */
    void    *scale;  /* f32 [N] | f32 [nb, kb] | u8 [N, K/G] expanded */
    float    s, s_in;
} shard_ref;

/* Writes module `mod` of pair p (N rows, weights scaled by `range`, group amax `amax` or < 0). */
/* How FP8_PB_WO scales are written: 0 = [nb, 1, kb, 1], 1 = [nb, kb], 2 = 0-d (ModelOpt 0.47 for a
 * single-block weight, NUMERICS §12). */
static int g_blk_form = 0;

static shard_ref emit(ck *c, const char *mod, tpair p, int64_t N, int64_t K, float range, float amax, float s_in, fault f) {
    shard_ref r = {.N = N, .s_in = s_in};
    float *W = malloc((size_t)(N * K) * sizeof(float));
    /* Magnitudes vary by row and by 32-column block, so row, block and group scales all differ. */
    for (int64_t i = 0; i < N * K; i++)
        W[i] = bf16_round(range * 0.25f * (float)(1 + (i / K) * 5 % 11) * (float)(1 + (i % K) / 32 % 3) * wrand());
    const int64_t sq[2] = {N, K}, sh[2] = {N, K / 2}, s16[2] = {N, K / 16}, s32[2] = {N, K / 32};
    const int64_t nb = (N + 127) / 128, kb = K / 128, sblk[4] = {nb, 1, kb, 1}, srow[1] = {N};
    switch (p) {
    case TP_BF16: {
        uint16_t *h = malloc((size_t)(N * K) * 2);
        for (int64_t i = 0; i < N * K; i++) { uint32_t u; memcpy(&u, &W[i], 4); h[i] = (uint16_t)(u >> 16); }
        put(c, mod, "weight", MOQ_DT_BF16, 2, sq, h, (size_t)(N * K) * 2);
        r.q = (uint8_t *)h;
        break;
    }
    case TP_F16: { /* random f16 codes of magnitude < 1 (subnormals included), sign random */
        uint16_t *h = malloc((size_t)(N * K) * 2);
        for (int64_t i = 0; i < N * K; i++) {
            g_wrng = g_wrng * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = (uint16_t)(((g_wrng >> 33) % 0x3C00) | ((g_wrng >> 20) & 0x8000));
        }
        put(c, mod, "weight", MOQ_DT_F16, 2, sq, h, (size_t)(N * K) * 2);
        r.q = (uint8_t *)h;
        break;
    }
    case TP_F32:
        put(c, mod, "weight", MOQ_DT_F32, 2, sq, W, (size_t)(N * K) * 4);
        r.q = malloc((size_t)(N * K) * 4);
        memcpy(r.q, W, (size_t)(N * K) * 4);
        break;
    case TP_FP8_TENSOR:
        r.q = malloc((size_t)(N * K));
        moq_export_fp8_tensor_weight(W, (size_t)N, (size_t)K, amax, MOQ_DT_BF16, r.q, &r.s);
        put(c, mod, "weight", MOQ_DT_F8_E4M3, 2, sq, r.q, (size_t)(N * K));
        put_scalar(c, mod, "weight_scale", f == F_NAN_SCALE ? NAN : r.s);
        if (f != F_NO_INPUT_SCALE) put_scalar(c, mod, "input_scale", f == F_ZERO_IN_SCALE ? 0.0f : s_in);
        break;
    case TP_FP8_ROW:
        r.q = malloc((size_t)(N * K));
        r.scale = malloc((size_t)N * 4);
        moq_export_fp8_row_weight(W, (size_t)N, (size_t)K, r.q, r.scale);
        put(c, mod, "weight", MOQ_DT_F8_E4M3, 2, sq, r.q, (size_t)(N * K));
        put(c, mod, "weight_scale", MOQ_DT_F32, 1, srow, r.scale, (size_t)N * 4);
        break;
    case TP_FP8_BLK128:
        r.q = malloc((size_t)(N * K));
        r.scale = malloc((size_t)(nb * kb) * 4);
        moq_export_fp8_block_weight(W, (size_t)N, (size_t)K, r.q, r.scale);
        put(c, mod, "weight", MOQ_DT_F8_E4M3, 2, sq, r.q, (size_t)(N * K));
        put(c, mod, "weight_scale", MOQ_DT_F32, g_blk_form == 0 ? 4 : g_blk_form == 1 ? 2 : 0, g_blk_form == 1 ? (const int64_t[]){nb, kb} : sblk,
            r.scale, (size_t)(nb * kb) * 4);
        break;
    case TP_NVFP4: case TP_NVFP4_W4A16: {
        r.q = malloc((size_t)(N * K / 2));
        uint8_t *sf = malloc((size_t)(N * K / 16));
        r.scale = sf;
        moq_export_nvfp4_weight(W, (size_t)N, (size_t)K, amax, r.q, sf, &r.s);
        if (f == F_SENTINEL) sf[K / 16 + 1] = 0x7F; /* row 1, block 1 */
        put(c, mod, "weight", MOQ_DT_U8, 2, sh, r.q, (size_t)(N * K / 2));
        if (f == F_SCALE_DTYPE) {
            uint16_t *h = calloc((size_t)(N * K / 16), 2);
            put(c, mod, "weight_scale", MOQ_DT_BF16, 2, s16, h, (size_t)(N * K / 16) * 2);
            free(h);
        } else if (f == F_SCALE_SHAPE) {
            put(c, mod, "weight_scale", MOQ_DT_F8_E4M3, 2, s32, sf, (size_t)(N * K / 32));
        } else {
            put(c, mod, "weight_scale", MOQ_DT_F8_E4M3, 2, s16, sf, (size_t)(N * K / 16));
        }
        put_scalar(c, mod, "weight_scale_2", f == F_NEG_SCALE2 ? -r.s : r.s);
        if (p == TP_NVFP4 || f == F_LEGACY_IN) put_scalar(c, mod, "input_scale", s_in);
        break;
    }
    case TP_MXFP8: {
        r.q = malloc((size_t)(N * K));
        uint8_t *sc = malloc((size_t)(N * K / 32));
        r.scale = sc;
        moq_export_mxfp8_weight(W, (size_t)N, (size_t)K, r.q, sc);
        put(c, mod, "weight", MOQ_DT_F8_E4M3, 2, sq, r.q, (size_t)(N * K));
        if (f == F_ROWBLK4) { /* one scale row per 4 weight rows: keep every 4th row's scales */
            const int64_t s4[2] = {N / 4, K / 32};
            uint8_t *st = malloc((size_t)(N / 4 * K / 32));
            for (int64_t n = 0; n < N / 4; n++) memcpy(st + n * (K / 32), sc + 4 * n * (K / 32), (size_t)(K / 32));
            put(c, mod, "weight_scale", MOQ_DT_U8, 2, s4, st, (size_t)(N / 4 * K / 32));
            for (int64_t n = 0; n < N; n++) memcpy(sc + n * (K / 32), st + (n / 4) * (K / 32), (size_t)(K / 32)); /* expanded */
            free(st);
        } else {
            put(c, mod, "weight_scale", MOQ_DT_U8, 2, s32, sc, (size_t)(N * K / 32));
        }
        break;
    }
    default: fail_msg("pair %d not emitted", p);
    }
    free(W);
    return r;
}

static size_t elem_bytes(tpair p, int64_t K) { /* bytes of one weight row */
    return p == TP_F32 ? (size_t)K * 4 : p == TP_BF16 || p == TP_F16 ? (size_t)K * 2 : (p == TP_NVFP4 || p == TP_NVFP4_W4A16) ? (size_t)K / 2 : (size_t)K;
}
static size_t scale_row_bytes(tpair p, int64_t K) {
    return p == TP_FP8_ROW ? 4 : (p == TP_NVFP4 || p == TP_NVFP4_W4A16) ? (size_t)K / 16 : p == TP_MXFP8 ? (size_t)K / 32 : 0;
}

/* The reference layer of shards r[0..n): concatenated by the test, shard scales as written. */
static tw ref_layer(tpair p, const shard_ref *r, int n, int64_t K) {
    static const moq_quant_key *const wk[TP_COUNT] = {&MOQ_KEY_W_F32, &MOQ_KEY_W_BF16, &MOQ_KEY_W_F16, &MOQ_KEY_W_FP8_TENSOR, &MOQ_KEY_W_FP8_ROW, &MOQ_KEY_W_FP8_BLK128, &MOQ_KEY_W_NVFP4, &MOQ_KEY_W_NVFP4, &MOQ_KEY_W_MXFP8};
    tw t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.w.w = *wk[p];
    int64_t N = 0;
    for (int s = 0; s < n; s++) N += r[s].N;
    t.w.N = N, t.w.K = K, t.w.n_shards = n;
    const size_t eb = elem_bytes(p, K), sb = scale_row_bytes(p, K);
    uint8_t *q = malloc((size_t)N * eb), *sc = sb ? malloc((size_t)N * sb) : NULL;
    if (p == TP_FP8_BLK128) sc = malloc((size_t)((N + 127) / 128 * (K / 128)) * 4);
    size_t oq = 0, os = 0;
    for (int s = 0; s < n; s++) {
        t.w.row0[s + 1] = t.w.row0[s] + r[s].N;
        memcpy(q + oq, r[s].q, (size_t)r[s].N * eb), oq += (size_t)r[s].N * eb;
        const size_t ns = p == TP_FP8_BLK128 ? (size_t)((r[s].N + 127) / 128 * (K / 128)) * 4 : (size_t)r[s].N * sb;
        if (ns) memcpy(sc + os, r[s].scale, ns), os += ns;
        t.w.shard_scale[s] = p == TP_FP8_TENSOR || p == TP_NVFP4 || p == TP_NVFP4_W4A16 ? r[s].s : 1.0f;
        t.w.shard_in_scale[s] = p == TP_FP8_TENSOR || p == TP_NVFP4 ? r[s].s_in : 1.0f;
    }
    t.q = q, t.scale = sc;
    t.w.q = q, t.w.scale = sc;
    return t;
}

static void ref_free(shard_ref *r, int n) {
    for (int s = 0; s < n; s++) free(r[s].q), free(r[s].scale);
}

/* ---- load + run + compare ---------------------------------------------------------------------- */
static uint32_t g_cpu_mask = ~0u; /* MOQ_CPU_* bits the layers may use (0: the _ref rows) */
static moq_status open_layer(const char *dir, moq_compat prof, bool with_config, const char *prefix, moq_layer_kind kind,
                             moq_linear_layer **l, moq_checkpoint **c, moq_qconfig **q, moq_error *e) {
    *l = NULL, *q = NULL;
    TU_OK(moq_checkpoint_open(c, dir, NULL, err_));
    if (with_config) TU_OK(moq_qconfig_open(q, dir, prof, err_));
    moq_linear_opts o = moq_linear_opts_default();
    o.n_threads = 2;
    o.cpu_mask = g_cpu_mask;
    return moq_linear_layer_open(l, *c, *q, prefix, kind, packed, 2, &o, e);
}

static void close_layer(moq_linear_layer *l, moq_checkpoint *c, moq_qconfig *q) {
    moq_linear_layer_free(l);
    moq_qconfig_free(q);
    moq_checkpoint_free(c);
}

static void run_compare(const char *what, const moq_linear_layer *l, const tw *ref) {
    const moq_linear *lin = moq_linear_layer_linear(l);
    const int64_t N = ref->w.N, K = ref->w.K;
    float *x = malloc((size_t)(M_ * K) * 4), *y = malloc((size_t)(M_ * N) * 4);
    double *yr = malloc((size_t)(M_ * N) * 8);
    for (int64_t i = 0; i < M_ * K; i++) x[i] = bf16_round(2.0f * wrand());
    for (int64_t i = 0; i < M_ * N; i++) y[i] = NAN;
    const size_t wsz = moq_linear_workspace_size(lin, M_);
    void *ws = malloc(wsz);
    TU_OK(moq_linear_run(lin, x, MOQ_ELEM_F32, M_, y, MOQ_ELEM_F32, ws, wsz, err_));
    tw_oracle(ref, x, M_, yr);
    char name[256];
    snprintf(name, sizeof name, "%s [%s, kernel %s]", what, moq_linear_layer_resolution(l)->method, moq_linear_layer_kernel_name(l));
    klin_err(name, y, yr, (size_t)(M_ * N), TOL);
    free(x), free(y), free(yr), free(ws);
}

static bool has_warning(const moq_linear_layer *l, const char *sub) {
    for (int i = 0; i < moq_linear_layer_warning_count(l); i++)
        if (strstr(moq_linear_layer_warning(l, i), sub)) return true;
    return false;
}

/* ---- every algo, one module each, through resolution ------------------------------------------- */
static const struct { const char *algo; tpair p; int64_t N; const char *method; } algos[] = {
    {"FP8", TP_FP8_TENSOR, 64, "fp8_linear"},
    {"FP8_PER_CHANNEL_PER_TOKEN", TP_FP8_ROW, 64, "fp8_pcpt_linear"},
    {"FP8_PB_WO", TP_FP8_BLK128, 200, "fp8_pbwo_linear"}, /* partial last 128-row block (72 rows) */
    {"NVFP4", TP_NVFP4, 64, "nvfp4_linear"},
    {"W4A16_NVFP4", TP_NVFP4_W4A16, 64, "w4a16_nvfp4_linear"},
    {"MXFP8", TP_MXFP8, 64, "mxfp8_linear"},
};

static void test_every_algo(void **state) {
    (void)state;
    static const uint32_t masks[] = {~0u, MOQ_CPU_AVX2, 0}; /* widest rows, AVX2 rows, _ref rows */
    for (size_t a = 0; a < 3 * (sizeof algos / sizeof algos[0]); a++) {
        g_cpu_mask = masks[a % 3];
        ck c;
        ck_begin(&c, "load_algo");
        shard_ref r = emit(&c, "model.layers.0.mlp.down_proj", algos[a / 3].p, algos[a / 3].N, K_, 0.05f, -1.0f, 2.0f / 448.0f, F_NONE);
        shard_ref h = emit(&c, "lm_head", TP_BF16, 32, K_, 0.05f, -1.0f, 0, F_NONE); /* excluded: stays BF16 */
        if (algos[a / 3].p == TP_NVFP4) r.s_in = 2.0f / 448.0f;
        ck_finish(&c, algos[a / 3].algo, NULL);
        moq_linear_layer *l;
        moq_checkpoint *cp;
        moq_qconfig *q;
        TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
        assert_string_equal(moq_linear_layer_resolution(l)->method, algos[a / 3].method);
        assert_int_equal(moq_linear_layer_warning_count(l), 0);
        if (!g_cpu_mask) assert_non_null(strstr(moq_linear_layer_kernel_name(l), "_ref"));
        tw t = ref_layer(algos[a / 3].p, &r, 1, K_);
        run_compare(algos[a / 3].algo, l, &t);
        tw_free(&t);
        moq_linear_layer_free(l);
        TU_OK(moq_linear_layer_open(&l, cp, q, "lm_head", MOQ_KIND_LM_HEAD, NULL, 0, NULL, err_));
        assert_string_equal(moq_linear_layer_resolution(l)->method, "unquantized_linear");
        assert_true(moq_linear_layer_resolution(l)->excluded);
        t = ref_layer(TP_BF16, &h, 1, K_);
        run_compare("lm_head excluded", l, &t);
        tw_free(&t);
        close_layer(l, cp, q);
        ref_free(&r, 1), ref_free(&h, 1);
        ck_done(&c);
    }
    g_cpu_mask = ~0u;
}

/* No quantization config: F32, BF16 (with a bias: f32 of the bf16 values) and F16 linears. */
static void test_unquantized_no_config(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_unq");
    shard_ref a = emit(&c, "model.layers.0.mlp.up_proj", TP_F32, 40, K_, 0.1f, -1, 0, F_NONE);
    shard_ref b = emit(&c, "model.layers.0.mlp.down_proj", TP_BF16, 24, K_, 0.1f, -1, 0, F_NONE);
    shard_ref h = emit(&c, "model.layers.0.mlp.gate_proj", TP_F16, 16, K_, 0.1f, -1, 0, F_NONE);
    uint16_t bias[24];
    float biasf[24];
    for (int i = 0; i < 24; i++) biasf[i] = bf16_round(wrand()), bias[i] = (uint16_t)(moq_f32_bits(biasf[i]) >> 16);
    const int64_t bs[1] = {24};
    put(&c, "model.layers.0.mlp.down_proj", "bias", MOQ_DT_BF16, 1, bs, bias, sizeof bias);
    ck_finish(&c, NULL, NULL);
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, false, "model.layers.0.mlp.up_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    tw t = ref_layer(TP_F32, &a, 1, K_);
    run_compare("f32 no config", l, &t);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, NULL, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, NULL, 0, NULL, err_));
    t = ref_layer(TP_BF16, &b, 1, K_);
    t.bias = malloc(sizeof biasf);
    memcpy(t.bias, biasf, sizeof biasf);
    run_compare("bf16 + bias no config", l, &t);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, NULL, "model.layers.0.mlp.gate_proj", MOQ_KIND_LINEAR, NULL, 0, NULL, err_));
    t = ref_layer(TP_F16, &h, 1, K_);
    run_compare("f16 no config", l, &t);
    tw_free(&t);
    close_layer(l, cp, q);
    ref_free(&a, 1), ref_free(&b, 1), ref_free(&h, 1);
    ck_done(&c);
}

/* ---- fused shards with differing static scales --------------------------------------------------- */
/* Test's own fp16 rounding (RNE, subnormals down to 2^-24) and §5.1 requantization. */
static double t_f16_round(double v) {
    const double a = fabs(v);
    if (a == 0) return v;
    int e;
    frexp(a, &e);
    const double quantum = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    return copysign(nearbyint(a / quantum) * quantum, v);
}
static uint8_t t_requant(uint8_t c, float s, float inv) {
    const double d = (c & 0x80 ? -1 : 1) * e4m3_val(c & 0x7F);
    const float p = (float)(d * (double)s);                 /* f32(D4(q) * s), exact product rounded once */
    const float v = (float)(t_f16_round(p) * (double)inv);  /* fp16 intermediate, then f32 product       */
    return t_e4s(clampf(v, 448));
}

/* Three FP8 shards (q 64, k 32, v 32 rows) with weight ranges 4x apart, so their scales differ. */
static void fused_fp8(moq_compat prof, float r0, float r1, float r2, bool expect_requant) {
    ck c;
    ck_begin(&c, "load_fused_fp8");
    shard_ref r[3];
    const float ranges[3] = {r0, r1, r2}, ins[3] = {3.0f / 448, 2.0f / 448, 4.0f / 448};
    const int64_t ns[3] = {64, 32, 32};
    char mod[128];
    for (int s = 0; s < 3; s++) {
        snprintf(mod, sizeof mod, "model.layers.0.self_attn.%s", qkv_names[s]);
        r[s] = emit(&c, mod, TP_FP8_TENSOR, ns[s], K_, ranges[s], -1, ins[s], F_NONE);
    }
    ck_finish(&c, "FP8", NULL);
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, prof, true, "model.layers.0.self_attn.qkv_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    const moq_weight *w = moq_linear_layer_weight(l);
    assert_int_equal(w->n_shards, 3);
    assert_int_equal(w->N, 128);
    assert_true(has_warning(l, "input_scale differs across shards (q_proj=0.00669642864, k_proj=0.00446428591, v_proj=0.00892857183); activations are quantized once with the max 0.00892857183"));
    size_t changed = 0;
    if (expect_requant) {
        float smax = 0;
        for (int s = 0; s < 3; s++) smax = fmaxf(smax, r[s].s);
        const float inv = 1.0f / smax;
        const uint8_t *got = w->q;
        for (int s = 0; s < 3; s++) {
            for (int64_t i = 0; i < ns[s] * K_; i++) {
                const uint8_t want = t_requant(r[s].q[i], r[s].s, inv);
                if (got[w->row0[s] * K_ + i] != want)
                    fail_msg("%s shard %s code %lld: got 0x%02X, want 0x%02X (from 0x%02X, scale %.9g -> %.9g)", moq_compat_name(prof),
                             qkv_names[s], (long long)i, got[w->row0[s] * K_ + i], want, r[s].q[i], (double)r[s].s, (double)smax);
                changed += want != r[s].q[i];
                r[s].q[i] = want;
            }
            r[s].s = smax;
        }
        assert_true(changed > 0); /* the planted scales / fp16 range make some codes move */
        assert_true(has_warning(l, "requantized"));
    } else {
        for (int s = 0; s < 3; s++) assert_memory_equal((const uint8_t *)w->q + w->row0[s] * K_, r[s].q, (size_t)(ns[s] * K_));
        assert_true(r[0].s != r[1].s);
        assert_true(has_warning(l, "keeps per-shard weight_scale"));
        assert_false(has_warning(l, "requantized"));
    }
    tw t = ref_layer(TP_FP8_TENSOR, r, 3, K_);
    run_compare(moq_compat_name(prof), l, &t);
    tw_free(&t);
    close_layer(l, cp, q);
    ref_free(r, 3);
    ck_done(&c);
}

static void test_fused_fp8_keeps_shard_scales(void **state) { (void)state; fused_fp8(MOQ_COMPAT_MOQ, 0.05f, 0.2f, 0.0125f, false); }
static void test_fused_fp8_vllm_requant(void **state) { (void)state; fused_fp8(MOQ_COMPAT_VLLM, 0.05f, 0.2f, 0.0125f, true); }
static void test_fused_fp8_sglang_requant(void **state) { (void)state; fused_fp8(MOQ_COMPAT_SGLANG, 0.05f, 0.2f, 0.0125f, true); }

/* Equal scales: vLLM keeps the codes; SGLang requantizes anyway and the fp16 step moves codes
 * whose D4(q)·s is an fp16 subnormal (weights <= 1e-3: s ~ 2.2e-6, so most products are < 6.1e-5). */
static void test_fused_fp8_equal_scales(void **state) {
    (void)state;
    for (int p = MOQ_COMPAT_VLLM; p <= MOQ_COMPAT_SGLANG; p++) {
        g_wrng = 99; /* same weights in both runs */
        ck c;
        ck_begin(&c, "load_fused_eq");
        shard_ref r[2];
        char mod[128];
        for (int s = 0; s < 2; s++) {
            snprintf(mod, sizeof mod, "model.layers.0.mlp.%s", gu_names[s]);
            r[s] = emit(&c, mod, TP_FP8_TENSOR, 32, K_, 1e-4f, 1e-3f, 2.0f / 448, F_NONE); /* shared amax (>= every |w|): equal scales */
        }
        assert_true(r[0].s == r[1].s);
        ck_finish(&c, "FP8", NULL);
        moq_linear_layer *l;
        moq_checkpoint *cp;
        moq_qconfig *q;
        TU_OK(open_layer(c.dir, (moq_compat)p, true, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
        const moq_weight *w = moq_linear_layer_weight(l);
        size_t changed = 0;
        for (int s = 0; s < 2; s++)
            for (int64_t i = 0; i < 32 * K_; i++) {
                const uint8_t want = p == MOQ_COMPAT_VLLM ? r[s].q[i] : t_requant(r[s].q[i], r[s].s, 1.0f / r[s].s);
                assert_int_equal(((const uint8_t *)w->q)[w->row0[s] * K_ + i], want);
                changed += want != r[s].q[i];
            }
        if (p == MOQ_COMPAT_SGLANG) assert_true(changed > 0);
        /* An unfused layer: SGLang requantizes it too (s_max = its own scale), vLLM never does. */
        moq_linear_layer_free(l);
        TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.up_proj", MOQ_KIND_LINEAR, NULL, 0, NULL, err_));
        w = moq_linear_layer_weight(l);
        changed = 0;
        for (int64_t i = 0; i < 32 * K_; i++) {
            const uint8_t want = p == MOQ_COMPAT_VLLM ? r[1].q[i] : t_requant(r[1].q[i], r[1].s, 1.0f / r[1].s);
            assert_int_equal(((const uint8_t *)w->q)[i], want);
            changed += want != r[1].q[i];
        }
        assert_true(p == MOQ_COMPAT_VLLM ? changed == 0 : changed > 0);
        close_layer(l, cp, q);
        ref_free(r, 2);
        ck_done(&c);
    }
}

/* NVFP4 gate/up with different weight_scale_2: moq keeps them per shard; vllm uses the max. */
static void test_fused_nvfp4(void **state) {
    (void)state;
    for (int p = MOQ_COMPAT_MOQ; p <= MOQ_COMPAT_VLLM; p++) {
        ck c;
        ck_begin(&c, "load_fused_nvfp4");
        shard_ref r[2];
        char mod[128];
        for (int s = 0; s < 2; s++) {
            snprintf(mod, sizeof mod, "model.layers.0.mlp.%s", gu_names[s]);
            r[s] = emit(&c, mod, TP_NVFP4, 48, K_, s ? 0.2f : 0.05f, -1, (s ? 3.0f : 2.0f) / 2688, F_NONE);
        }
        assert_true(r[0].s != r[1].s);
        ck_finish(&c, "NVFP4", NULL);
        moq_linear_layer *l;
        moq_checkpoint *cp;
        moq_qconfig *q;
        TU_OK(open_layer(c.dir, (moq_compat)p, true, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
        if (p == MOQ_COMPAT_VLLM) {
            assert_true(has_warning(l, "using the max"));
            r[0].s = r[1].s = fmaxf(r[0].s, r[1].s);
        } else {
            assert_true(has_warning(l, "keeps per-shard weight_scale_2"));
        }
        tw t = ref_layer(TP_NVFP4, r, 2, K_);
        run_compare("nvfp4 gate_up", l, &t);
        tw_free(&t);
        close_layer(l, cp, q);
        ref_free(r, 2);
        ck_done(&c);
    }
}

/* W4A16 with a legacy input_scale: accepted, ignored, one warning. */
static void test_w4a16_legacy_input_scale(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_w4a16");
    shard_ref r = emit(&c, "model.layers.0.mlp.down_proj", TP_NVFP4_W4A16, 32, K_, 0.05f, -1, NAN, F_LEGACY_IN);
    ck_finish(&c, "W4A16_NVFP4", NULL);
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    assert_int_equal(moq_linear_layer_warning_count(l), 1);
    assert_non_null(strstr(moq_linear_layer_warning(l, 0), "input_scale of a W4A16_NVFP4 checkpoint ignored"));
    tw t = ref_layer(TP_NVFP4_W4A16, &r, 1, K_);
    run_compare("w4a16 legacy input_scale", l, &t);
    tw_free(&t);
    close_layer(l, cp, q);
    ref_free(&r, 1);
    ck_done(&c);
}

/* MXFP8 scale stored once per 4 rows ([N/4, K/32]); fused with a plain [N, K/32] shard. */
static void test_mxfp8_row_blocks(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_mx_rows");
    shard_ref r[2];
    r[0] = emit(&c, "model.layers.0.mlp.gate_proj", TP_MXFP8, 32, K_, 0.05f, -1, 0, F_ROWBLK4);
    r[1] = emit(&c, "model.layers.0.mlp.up_proj", TP_MXFP8, 64, K_, 0.05f, -1, 0, F_NONE);
    ck_finish(&c, "MXFP8", NULL);
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    assert_true(has_warning(l, "per 4 rows"));
    tw t = ref_layer(TP_MXFP8, r, 2, K_);
    run_compare("mxfp8 row blocks", l, &t);
    tw_free(&t);
    close_layer(l, cp, q);
    ref_free(r, 2);
    ck_done(&c);
}

/* MIXED_PRECISION: FP8 o_proj, MXFP8 gate/up (fused from per-shard entries), W4A16 down_proj. */
static void test_mixed_precision(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_mixed");
    shard_ref a = emit(&c, "model.layers.0.self_attn.o_proj", TP_FP8_TENSOR, 64, K_, 0.05f, -1, 2.0f / 448, F_NONE);
    shard_ref b = emit(&c, "model.layers.0.mlp.down_proj", TP_NVFP4_W4A16, 64, K_, 0.05f, -1, 0, F_NONE);
    shard_ref g[2];
    g[0] = emit(&c, "model.layers.0.mlp.gate_proj", TP_MXFP8, 32, K_, 0.05f, -1, 0, F_NONE);
    g[1] = emit(&c, "model.layers.0.mlp.up_proj", TP_MXFP8, 32, K_, 0.05f, -1, 0, F_NONE);
    ck_finish(&c, "MIXED_PRECISION",
              "\"model.layers.0.self_attn.o_proj\": {\"quant_algo\": \"FP8\"}, "
              "\"model.layers.0.mlp.gate_proj\": {\"quant_algo\": \"MXFP8\"}, \"model.layers.0.mlp.up_proj\": {\"quant_algo\": \"MXFP8\"}, "
              "\"model.layers.0.mlp.down_proj\": {\"quant_algo\": \"W4A16_NVFP4\", \"group_size\": 16}");
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.self_attn.o_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    assert_string_equal(moq_linear_layer_resolution(l)->method, "fp8_linear");
    tw t = ref_layer(TP_FP8_TENSOR, &a, 1, K_);
    run_compare("mixed fp8", l, &t);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, NULL, 0, NULL, err_));
    assert_string_equal(moq_linear_layer_resolution(l)->method, "w4a16_nvfp4_linear");
    t = ref_layer(TP_NVFP4_W4A16, &b, 1, K_);
    run_compare("mixed w4a16", l, &t);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, packed, 2, NULL, err_));
    assert_string_equal(moq_linear_layer_resolution(l)->method, "mxfp8_linear");
    t = ref_layer(TP_MXFP8, g, 2, K_);
    run_compare("mixed mxfp8 gate_up", l, &t);
    tw_free(&t);
    close_layer(l, cp, q);
    ref_free(&a, 1), ref_free(&b, 1), ref_free(g, 2);
    ck_done(&c);
}

/* ---- bad inputs: status, where, message ----------------------------------------------------------- */
#define MOD "model.layers.0.mlp.down_proj"
static const struct {
    const char *name, *algo;
    tpair       p;
    fault       f;
    moq_status  code;
    const char *where, *msg;
} bad[] = {
    {"wrong dtype", "NVFP4", TP_NVFP4, F_SCALE_DTYPE, MOQ_ERR_TENSOR, MOD ".weight_scale", "dtype BF16, expected F8_E4M3"},
    {"wrong shape", "NVFP4", TP_NVFP4, F_SCALE_SHAPE, MOQ_ERR_TENSOR, MOD ".weight_scale", "shape [32, 8], expected [32, 16]"},
    {"missing scale", "FP8", TP_FP8_TENSOR, F_NO_INPUT_SCALE, MOQ_ERR_TENSOR, MOD, "missing tensor input_scale"},
    {"NaN scale", "FP8", TP_FP8_TENSOR, F_NAN_SCALE, MOQ_ERR_TENSOR, MOD ".weight_scale", "1 NaN, 0 Inf, 0 zero, 0 negative of 1"},
    {"zero scale", "FP8", TP_FP8_TENSOR, F_ZERO_IN_SCALE, MOQ_ERR_TENSOR, MOD ".input_scale", "1 zero"},
    {"negative scale", "NVFP4", TP_NVFP4, F_NEG_SCALE2, MOQ_ERR_TENSOR, MOD ".weight_scale_2", "1 negative"},
    {"NaN sentinel", "NVFP4", TP_NVFP4, F_SENTINEL, MOQ_ERR_TENSOR, MOD ".weight_scale", "1 NaN, 0 Inf, 0 zero, 0 negative of 512 scale values; first at block 17 (row 1, column 1)"},
    {"BF16 under NVFP4", "NVFP4", TP_BF16, F_NONE, MOQ_ERR_CONFIG, MOD, "stored as BF16 but resolves to nvfp4_linear"},
    {"BF16 under FP8", "FP8", TP_BF16, F_NONE, MOQ_ERR_CONFIG, MOD, "stored as BF16 but resolves to fp8_linear"},
};

static void expect_error(const char *dir, const char *prefix, moq_status code, const char *where, const char *msg) {
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    moq_error e = {0};
    moq_status st = open_layer(dir, MOQ_COMPAT_MOQ, true, prefix, MOQ_KIND_LINEAR, &l, &cp, &q, &e);
    assert_null(l);
    TU_ERR(&e, st, code, where, msg);
    assert_true(e.where[0] != 0);
    close_layer(l, cp, q);
}

static void test_bad_inputs(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck c;
        ck_begin(&c, "load_bad");
        shard_ref r = emit(&c, MOD, bad[i].p, 32, K_, 0.05f, -1, 2.0f / 448, bad[i].f);
        ck_finish(&c, bad[i].algo, NULL);
        print_message("bad input: %s\n", bad[i].name);
        expect_error(c.dir, MOD, bad[i].code, bad[i].where, bad[i].msg);
        ref_free(&r, 1);
        ck_done(&c);
    }
}

/* K not divisible by the scheme's group: raw tensors of the right sizes for the odd K. */
static void test_k_not_divisible(void **state) {
    (void)state;
    static const struct { const char *algo; int64_t K; const char *msg; } ks[] = {
        {"NVFP4", 40, "K=40 is not a multiple of 16 (scheme NVFP4"},
        {"FP8_PB_WO", 192, "K=192 is not a multiple of 128 (scheme FP8_PB_WO"},
        {"MXFP8", 48, "K=48 is not a multiple of 32 (scheme MXFP8"},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        ck c;
        ck_begin(&c, "load_kdiv");
        const int64_t N = 32, K = ks[i].K;
        uint8_t *buf = calloc((size_t)(N * K * 4), 1);
        for (int64_t j = 0; j < N * K; j++) buf[j] = 0x38; /* 1.0 in e4m3, a valid scale byte too */
        if (i == 0) {
            const int64_t w[2] = {N, K / 2}, s[2] = {N, (K + 15) / 16};
            put(&c, MOD, "weight", MOQ_DT_U8, 2, w, buf, (size_t)(N * K / 2));
            put(&c, MOD, "weight_scale", MOQ_DT_F8_E4M3, 2, s, buf, (size_t)(N * s[1]));
            put_scalar(&c, MOD, "weight_scale_2", 1e-3f), put_scalar(&c, MOD, "input_scale", 1e-3f);
        } else {
            const int64_t w[2] = {N, K};
            put(&c, MOD, "weight", MOQ_DT_F8_E4M3, 2, w, buf, (size_t)(N * K));
            if (i == 1) {
                const int64_t s[4] = {1, 1, 2, 1};
                const float one[2] = {1, 1};
                put(&c, MOD, "weight_scale", MOQ_DT_F32, 4, s, one, 8);
            } else {
                const int64_t s[2] = {N, 2};
                put(&c, MOD, "weight_scale", MOQ_DT_U8, 2, s, buf, (size_t)(N * 2));
            }
        }
        ck_finish(&c, ks[i].algo, NULL);
        expect_error(c.dir, MOD, MOQ_ERR_TENSOR, MOD ".weight", ks[i].msg);
        free(buf);
        ck_done(&c);
    }
}

/* Fused layers: a missing shard, shards with different K, FP8_PB_WO shards off a 128-row boundary. */
static void test_fused_errors(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_fused_bad");
    shard_ref r[4];
    r[0] = emit(&c, "model.layers.0.self_attn.q_proj", TP_FP8_TENSOR, 32, K_, 0.05f, -1, 0.01f, F_NONE);
    r[1] = emit(&c, "model.layers.0.self_attn.k_proj", TP_FP8_TENSOR, 32, K_, 0.05f, -1, 0.01f, F_NONE); /* no v_proj */
    r[2] = emit(&c, "model.layers.0.mlp.gate_proj", TP_FP8_TENSOR, 32, K_, 0.05f, -1, 0.01f, F_NONE);
    r[3] = emit(&c, "model.layers.0.mlp.up_proj", TP_FP8_TENSOR, 32, 2 * K_, 0.05f, -1, 0.01f, F_NONE);
    ck_finish(&c, "FP8", NULL);
    expect_error(c.dir, "model.layers.0.self_attn.qkv_proj", MOQ_ERR_TENSOR, "model.layers.0.self_attn.v_proj", "missing tensor weight");
    expect_error(c.dir, "model.layers.0.mlp.gate_up_proj", MOQ_ERR_TENSOR, "model.layers.0.mlp.up_proj.weight",
                 "K=512, expected K=256 like model.layers.0.mlp.gate_proj.weight");
    ref_free(r, 4);
    ck_done(&c);

    /* Mixed precision whose q/k/v shards disagree: the resolution error names every shard. */
    ck_begin(&c, "load_mixed_disagree");
    r[0] = emit(&c, "model.layers.0.self_attn.q_proj", TP_FP8_TENSOR, 32, K_, 0.05f, -1, 0.01f, F_NONE);
    r[1] = emit(&c, "model.layers.0.self_attn.k_proj", TP_NVFP4, 32, K_, 0.05f, -1, 0.01f, F_NONE);
    ck_finish(&c, "MIXED_PRECISION",
              "\"model.layers.0.self_attn.q_proj\": {\"quant_algo\": \"FP8\"}, "
              "\"model.layers.0.self_attn.k_proj\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16}, "
              "\"model.layers.0.self_attn.v_proj\": {\"quant_algo\": \"FP8\"}");
    expect_error(c.dir, "model.layers.0.self_attn.qkv_proj", MOQ_ERR_CONFIG, "model.layers.0.self_attn.qkv_proj", "shards q_proj=FP8 and k_proj=NVFP4 and v_proj=FP8 disagree");
    ref_free(r, 2);
    ck_done(&c);

    ck_begin(&c, "load_pbwo_unaligned");
    r[0] = emit(&c, "model.layers.0.mlp.gate_proj", TP_FP8_BLK128, 100, K_, 0.05f, -1, 0, F_NONE);
    r[1] = emit(&c, "model.layers.0.mlp.up_proj", TP_FP8_BLK128, 128, K_, 0.05f, -1, 0, F_NONE);
    ck_finish(&c, "FP8_PB_WO", NULL);
    expect_error(c.dir, "model.layers.0.mlp.gate_up_proj", MOQ_ERR_UNSUPPORTED, "model.layers.0.mlp.gate_proj.weight",
                 "N=100 is not a multiple of 128");
    ref_free(r, 2);
    ck_done(&c);
}

/* Fused shards of the per-row and per-block FP8 schemes concatenate their scales (FP8_PB_WO: the
 * first shard 128-aligned, the last one a partial block). */
static void test_fused_fp8_row_and_block(void **state) {
    (void)state;
    static const struct { const char *algo; tpair p; } f[] = {{"FP8_PER_CHANNEL_PER_TOKEN", TP_FP8_ROW}, {"FP8_PB_WO", TP_FP8_BLK128}};
    for (int i = 0; i < 2; i++) {
        ck c;
        ck_begin(&c, "load_fp8_fused");
        shard_ref r[2];
        r[0] = emit(&c, "model.layers.0.mlp.gate_proj", f[i].p, 128, K_, 0.05f, -1, 0, F_NONE);
        r[1] = emit(&c, "model.layers.0.mlp.up_proj", f[i].p, 72, K_, 0.2f, -1, 0, F_NONE);
        ck_finish(&c, f[i].algo, NULL);
        moq_linear_layer *l;
        moq_checkpoint *cp;
        moq_qconfig *q;
        TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
        tw t = ref_layer(f[i].p, r, 2, K_);
        run_compare(f[i].algo, l, &t);
        tw_free(&t);
        close_layer(l, cp, q);
        ref_free(r, 2);
        ck_done(&c);
    }
}

/* FP8_PB_WO as ModelOpt 0.47 writes it: quant_algo "fp8_pb_wo" (lower case) and a weight_scale in
 * every form that means the same blocks: [nb, 1, kb, 1], [nb, kb], 0-d for a single block. A 0-d
 * scale for a weight of two blocks is an error naming the tensor. */
static void test_fp8_pb_wo_forms(void **state) {
    (void)state;
    static const struct { int form; int64_t N, K; } f[] = {{0, 200, 256}, {1, 200, 256}, {2, 100, 128}, {2, 128, 128}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        ck c;
        ck_begin(&c, "load_pbwo_forms");
        g_blk_form = f[i].form;
        shard_ref r = emit(&c, "model.layers.0.mlp.down_proj", TP_FP8_BLK128, f[i].N, f[i].K, 0.05f, -1, 0, F_NONE);
        g_blk_form = 0;
        ck_finish(&c, "fp8_pb_wo", NULL);
        moq_linear_layer *l;
        moq_checkpoint *cp;
        moq_qconfig *q;
        TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
        assert_string_equal(moq_linear_layer_resolution(l)->method, "fp8_pbwo_linear");
        tw t = ref_layer(TP_FP8_BLK128, &r, 1, f[i].K);
        run_compare("fp8_pb_wo scale form", l, &t);
        tw_free(&t);
        close_layer(l, cp, q);
        ref_free(&r, 1);
        ck_done(&c);
    }
    /* 0-d where the weight has 1 x 2 blocks */
    ck c;
    ck_begin(&c, "load_pbwo_bad0d");
    uint8_t codes[64 * 256] = {0};
    const float one = 0.01f;
    put(&c, "model.layers.0.mlp.down_proj", "weight", MOQ_DT_F8_E4M3, 2, (const int64_t[]){64, 256}, codes, sizeof codes);
    put(&c, "model.layers.0.mlp.down_proj", "weight_scale", MOQ_DT_F32, 0, NULL, &one, 4);
    ck_finish(&c, "fp8_pb_wo", NULL);
    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    moq_error e = {0};
    const moq_status st = open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, &l, &cp, &q, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.0.mlp.down_proj.weight_scale", "shape [], expected [1, 1, 2, 1]");
    close_layer(l, cp, q);
    ck_done(&c);
}

/* NVFP4_AWQ as ModelOpt 0.47 writes it (NUMERICS §12): NVFP4 tensors plus <module>.pre_quant_scale
 * bf16 [K] where the scale could not be folded (o_proj), none where it was. Oracle: the test
 * multiplies x by the scale itself (f32, as documented in docs/FORMATS.md) and runs the plain NVFP4
 * fp64 oracle on that. Fused shards need one scale; the seeds' profiles refuse the algo. */
static void write_pqs(ck *c, const char *mod, int64_t K, float base, uint16_t *h, float *f) {
    for (int64_t k = 0; k < K; k++) {
        f[k] = bf16_round(base * (0.5f + 1.5f * (float)((k * 37) % 64) / 64.0f)); /* in [0.5, 2) x base */
        h[k] = (uint16_t)(moq_f32_bits(f[k]) >> 16);
    }
    put(c, mod, "pre_quant_scale", MOQ_DT_BF16, 1, (const int64_t[]){K}, h, (size_t)K * 2);
}

static void awq_compare(const char *what, const moq_linear_layer *l, const tw *ref, const float *pqs) {
    const moq_linear *lin = moq_linear_layer_linear(l);
    const int64_t N = ref->w.N, K = ref->w.K;
    float *x = malloc((size_t)(M_ * K) * 4), *xs = malloc((size_t)(M_ * K) * 4), *y = malloc((size_t)(M_ * N) * 4);
    double *yr = malloc((size_t)(M_ * N) * 8);
    for (int64_t i = 0; i < M_ * K; i++) x[i] = bf16_round(2.0f * wrand()), xs[i] = pqs ? x[i] * pqs[i % K] : x[i];
    const size_t wsz = moq_linear_workspace_size(lin, M_);
    void *ws = malloc(wsz);
    TU_OK(moq_linear_run(lin, x, MOQ_ELEM_F32, M_, y, MOQ_ELEM_F32, ws, wsz, err_));
    tw_oracle(ref, xs, M_, yr);
    klin_err(what, y, yr, (size_t)(M_ * N), TOL);
    /* the scale matters: the oracle without it misses by far more than the tolerance */
    if (pqs) {
        tw_oracle(ref, x, M_, yr);
        double e2 = 0, r2 = 0;
        for (int64_t i = 0; i < M_ * N; i++) e2 += (y[i] - yr[i]) * (y[i] - yr[i]), r2 += yr[i] * yr[i];
        assert_true(sqrt(e2 / r2) > 100 * TOL);
    }
    free(x), free(xs), free(y), free(yr), free(ws);
}

/* --nvfp4-as fp8 (vLLM PR #38728): a fused NVFP4 gate/up (shards with different weight_scale_2)
 * re-quantized to FP8 at load, against the test's own fp64 requantization of its own exactly
 * dequantized reference (tw_weight: e2m1 x e4m3 x weight_scale_2 in fp64): per group (128x128
 * block when K % 128 == 0, the last row block partial; else per output row) scale
 * f32(max(amax, 1e-4) / 448) as vLLM's per_block_cast_to_fp8, codes the nearest e4m3 (t_e4s) of
 * w / scale. Then the layer runs against the fp64 oracle of that FP8 weight with its dynamic
 * activations (1x128 groups, or per token). */
/* The reference's NVFP4 weight with its shard's weight_scale_2 (tw_weight leaves that to the oracle). */
static double w_exact(const tw *t, int64_t n, int64_t k) { return tw_weight(t, n, k) * (double)t->w.shard_scale[tw_shard(t, n)]; }

static void nvfp4_as_fp8(int64_t K, int64_t Ns, moq_nvfp4_as as, bool block) {
    ck c;
    ck_begin(&c, "load_nvfp4_as_fp8");
    shard_ref r[2];
    char mod[128];
    for (int s = 0; s < 2; s++) {
        snprintf(mod, sizeof mod, "model.layers.0.mlp.%s", gu_names[s]);
        r[s] = emit(&c, mod, TP_NVFP4, Ns, K, s ? 0.2f : 0.05f, -1, (s ? 3.0f : 2.0f) / 2688, F_NONE);
    }
    ck_finish(&c, "NVFP4", NULL);
    moq_checkpoint *cp;
    moq_qconfig *q;
    moq_linear_layer *l;
    TU_OK(moq_checkpoint_open(&cp, c.dir, NULL, err_));
    TU_OK(moq_qconfig_open(&q, c.dir, MOQ_COMPAT_MOQ, err_));
    moq_linear_opts o = moq_linear_opts_default();
    o.n_threads = 2, o.cpu_mask = g_cpu_mask, o.nvfp4_as = as;
    TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, packed, 2, &o, err_));
    tw src = ref_layer(TP_NVFP4, r, 2, K);
    const int64_t N = 2 * Ns, kb = K / 128, ng = block ? (N + 127) / 128 * kb : N;
    const moq_weight *w = moq_linear_layer_weight(l);
    assert_true(moq_quant_key_eq(&w->w, block ? &MOQ_KEY_W_FP8_BLK128 : &MOQ_KEY_W_FP8_ROW));
    assert_true(moq_quant_key_eq(&w->a, block ? &MOQ_KEY_A_FP8_G128_DYN : &MOQ_KEY_A_FP8_TOKEN_DYN));
    assert_int_equal(has_warning(l, "per-channel FP8 with per-token activations (K=144"), as == MOQ_NVFP4_AS_FP8 && !block);
    double *amax = calloc((size_t)ng, sizeof(double));
#define GRP(n, k) (block ? ((n) / 128) * kb + (k) / 128 : (n))
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) amax[GRP(n, k)] = fmax(amax[GRP(n, k)], fabs(w_exact(&src, n, k)));
    tw t;
    memset(&t, 0, sizeof t);
    t.p = block ? TP_FP8_BLK128 : TP_FP8_ROW;
    t.w = src.w;
    t.w.w = *(block ? &MOQ_KEY_W_FP8_BLK128 : &MOQ_KEY_W_FP8_ROW);
    for (int s = 0; s < 2; s++) t.w.shard_scale[s] = 1.0f, t.w.shard_in_scale[s] = 1.0f;
    float *sc = malloc((size_t)ng * sizeof(float));
    uint8_t *qq = malloc((size_t)(N * K));
    int n_bad = 0;
    for (int64_t g = 0; g < ng; g++) {
        sc[g] = (float)(fmax(amax[g], 1e-4) / 448.0);
        if (((const float *)w->scale)[g] != sc[g] && n_bad++ < 5) print_error("scale[%lld] = %.9g, expected %.9g\n", (long long)g, (double)((const float *)w->scale)[g], (double)sc[g]);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const double v = w_exact(&src, n, k);
            qq[n * K + k] = t_e4s((float)(v / (double)sc[GRP(n, k)]));
            const uint8_t got = ((const uint8_t *)w->q)[n * K + k];
            if (got != qq[n * K + k] && n_bad++ < 10)
                print_error("code [%lld, %lld] 0x%02x, expected 0x%02x (w = %.9g, scale %.9g)\n", (long long)n, (long long)k, got, qq[n * K + k], v,
                            (double)sc[GRP(n, k)]);
        }
#undef GRP
    assert_int_equal(n_bad, 0);
    t.q = qq, t.scale = sc, t.w.q = qq, t.w.scale = sc;
    run_compare(block ? "nvfp4 as fp8 128x128" : "nvfp4 as fp8 per channel", l, &t);
    tw_free(&t);
    tw_free(&src);
    free(amax);
    close_layer(l, cp, q);
    ref_free(r, 2);
    ck_done(&c);
}
static void test_nvfp4_as_fp8_blocks(void **state) { (void)state; nvfp4_as_fp8(256, 48, MOQ_NVFP4_AS_FP8, true); }
static void test_nvfp4_as_fp8_channels(void **state) {
    (void)state;
    nvfp4_as_fp8(144, 40, MOQ_NVFP4_AS_FP8, false);          /* K % 128 != 0: per channel, with a note */
    nvfp4_as_fp8(256, 48, MOQ_NVFP4_AS_FP8_CHANNEL, false);  /* asked for                              */
}

/* An out-of-range option value is refused, naming the layer. */
static void test_nvfp4_as_bad_value(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_nvfp4_as_bad");
    shard_ref r = emit(&c, "model.layers.0.mlp.down_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    ck_finish(&c, "NVFP4", NULL);
    moq_checkpoint *cp;
    moq_qconfig *q;
    moq_linear_layer *l = NULL;
    TU_OK(moq_checkpoint_open(&cp, c.dir, NULL, err_));
    TU_OK(moq_qconfig_open(&q, c.dir, MOQ_COMPAT_MOQ, err_));
    moq_linear_opts o = moq_linear_opts_default();
    o.nvfp4_as = (moq_nvfp4_as)7;
    moq_error e = {0};
    const moq_status st = moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, packed, 2, &o, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.0.mlp.down_proj", "nvfp4_as 7, expected");
    assert_null(l);
    close_layer(NULL, cp, q);
    ref_free(&r, 1);
    ck_done(&c);
}

static void test_nvfp4_awq(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_awq");
    uint16_t h[3][K_];
    float pq[3][K_];
    shard_ref o = emit(&c, "model.layers.0.self_attn.o_proj", TP_NVFP4, 64, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.0.self_attn.o_proj", K_, 1.0f, h[0], pq[0]);
    shard_ref qkv[3];
    static const char *const qn[3] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"};
    for (int i = 0; i < 3; i++) {
        qkv[i] = emit(&c, qn[i], TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
        write_pqs(&c, qn[i], K_, 0.75f, h[1], pq[1]); /* the same scale on the three shards */
    }
    shard_ref d = emit(&c, "model.layers.0.mlp.down_proj", TP_NVFP4, 48, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE); /* folded: none */
    /* gate/up: a scale on gate only; up/down of layer 1 with different scales */
    shard_ref g = emit(&c, "model.layers.0.mlp.gate_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.0.mlp.gate_proj", K_, 1.0f, h[2], pq[2]);
    shard_ref u = emit(&c, "model.layers.0.mlp.up_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    shard_ref g1 = emit(&c, "model.layers.1.mlp.gate_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.1.mlp.gate_proj", K_, 1.0f, h[2], pq[2]);
    shard_ref u1 = emit(&c, "model.layers.1.mlp.up_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.1.mlp.up_proj", K_, 1.25f, h[2], pq[2]);
    ck_finish(&c, "NVFP4_AWQ", NULL);

    moq_linear_layer *l;
    moq_checkpoint *cp;
    moq_qconfig *q;
    TU_OK(open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.self_attn.o_proj", MOQ_KIND_LINEAR, &l, &cp, &q, err_));
    assert_string_equal(moq_linear_layer_resolution(l)->method, "nvfp4_awq_linear");
    tw t = ref_layer(TP_NVFP4, &o, 1, K_);
    awq_compare("nvfp4_awq o_proj", l, &t, pq[0]);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.self_attn.qkv_proj", MOQ_KIND_LINEAR, packed, 2, NULL, err_));
    t = ref_layer(TP_NVFP4, qkv, 3, K_);
    awq_compare("nvfp4_awq fused qkv", l, &t, pq[1]);
    tw_free(&t);
    moq_linear_layer_free(l);
    TU_OK(moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.down_proj", MOQ_KIND_LINEAR, packed, 2, NULL, err_));
    t = ref_layer(TP_NVFP4, &d, 1, K_);
    awq_compare("nvfp4_awq folded down_proj", l, &t, NULL);
    tw_free(&t);
    moq_linear_layer_free(l);
    moq_error e = {0};
    moq_status st = moq_linear_layer_open(&l, cp, q, "model.layers.0.mlp.gate_up_proj", MOQ_KIND_LINEAR, packed, 2, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.0.mlp.up_proj.pre_quant_scale", "tensor missing while model.layers.0.mlp.gate_proj.pre_quant_scale has one");
    st = moq_linear_layer_open(&l, cp, q, "model.layers.1.mlp.gate_up_proj", MOQ_KIND_LINEAR, packed, 2, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.1.mlp.up_proj.pre_quant_scale", "differs from model.layers.1.mlp.gate_proj.pre_quant_scale");
    close_layer(NULL, cp, q);
    /* the seeds' profiles: the errors their config classes raise */
    q = NULL;
    st = moq_qconfig_open(&q, c.dir, MOQ_COMPAT_VLLM, &e);
    TU_ERR(&e, st, MOQ_ERR_UNSUPPORTED, "hf_quant_config.json", "ModelOpt currently only supports");
    st = moq_qconfig_open(&q, c.dir, MOQ_COMPAT_SGLANG, &e);
    TU_ERR(&e, st, MOQ_ERR_UNSUPPORTED, "hf_quant_config.json", "ModelOpt currently only supports: FP8, NVFP4 quantizations in sglang");
    assert_null(q);
    /* a pre_quant_scale under plain NVFP4 is not part of the scheme */
    ref_free(&o, 1), ref_free(qkv, 3), ref_free(&d, 1), ref_free(&g, 1), ref_free(&u, 1), ref_free(&g1, 1), ref_free(&u1, 1);
    ck_done(&c);
    ck_begin(&c, "load_awq_plain");
    o = emit(&c, "model.layers.0.self_attn.o_proj", TP_NVFP4, 64, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.0.self_attn.o_proj", K_, 1.0f, h[0], pq[0]);
    ck_finish(&c, "NVFP4", NULL);
    st = open_layer(c.dir, MOQ_COMPAT_MOQ, true, "model.layers.0.self_attn.o_proj", MOQ_KIND_LINEAR, &l, &cp, &q, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.0.self_attn.o_proj.pre_quant_scale", "extra tensor: pre_quant_scale is not part of scheme NVFP4 (resolved nvfp4_linear)");
    close_layer(l, cp, q);
    ref_free(&o, 1);
    ck_done(&c);
}

/* The CLI agrees with the loader on ModelOpt 0.47's forms: `moq check` is clean and `moq inspect`
 * shows the method, for NVFP4_AWQ with a pre_quant_scale and for fp8_pb_wo with a 0-d scale; and
 * `moq check` reports fused shards whose AWQ scales differ, as the loader refuses them. */
static void test_cli_export_forms(void **state) {
    (void)state;
    static const struct { const char *algo; tpair p; int64_t N, K; int pqs; const char *method; } f[] = {
        {"NVFP4_AWQ", TP_NVFP4, 64, K_, 1, "nvfp4_awq_linear"},
        {"fp8_pb_wo", TP_FP8_BLK128, 100, 128, 0, "fp8_pbwo_linear"},
    };
    char cmd[1024], out[16384];
    for (int i = 0; i < 2; i++) {
        ck c;
        ck_begin(&c, "load_cli_forms");
        uint16_t h[K_];
        float pq[K_];
        g_blk_form = 2;
        shard_ref r = emit(&c, "model.layers.0.self_attn.o_proj", f[i].p, f[i].N, f[i].K, 0.05f, -1, 2.0f / 448.0f, F_NONE);
        g_blk_form = 0;
        if (f[i].pqs) write_pqs(&c, "model.layers.0.self_attn.o_proj", f[i].K, 1.0f, h, pq);
        ck_finish(&c, f[i].algo, NULL);
        snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), c.dir);
        if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s: moq check is not clean:\n%s", f[i].algo, out);
        snprintf(cmd, sizeof cmd, "%s inspect %s --kernels", tu_moq_bin(), c.dir);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        const char *row = strstr(out, "model.layers.0.self_attn.o_proj ");
        assert_non_null(row);
        assert_non_null(strstr(row, f[i].method));
        ref_free(&r, 1);
        ck_done(&c);
    }
    ck c;
    ck_begin(&c, "load_cli_awq_fused");
    uint16_t h[K_];
    float pq[K_];
    shard_ref r[2];
    r[0] = emit(&c, "model.layers.0.mlp.gate_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.0.mlp.gate_proj", K_, 1.0f, h, pq);
    r[1] = emit(&c, "model.layers.0.mlp.up_proj", TP_NVFP4, 32, K_, 0.05f, -1, 2.0f / 448.0f, F_NONE);
    write_pqs(&c, "model.layers.0.mlp.up_proj", K_, 1.5f, h, pq);
    ck_finish(&c, "NVFP4_AWQ", NULL);
    snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), c.dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), (int)MOQ_ERR_TENSOR);
    assert_non_null(strstr(out, "model.layers.0.mlp.gate_up_proj: fused shards have different pre_quant_scale (2 of 2 have one)"));
    ref_free(r, 2);
    ck_done(&c);
}

/* `moq inspect --kernels`: per module the kernel and the loader's note, under each profile (the
 * seeds' rule: vLLM requantizes fused FP8 shards whose scales differ, moq keeps them). */
static void test_inspect_kernels(void **state) {
    (void)state;
    ck c;
    ck_begin(&c, "load_inspect");
    shard_ref r[2];
    r[0] = emit(&c, "model.layers.0.mlp.gate_proj", TP_FP8_TENSOR, 32, K_, 0.05f, -1, 0.01f, F_NONE);
    r[1] = emit(&c, "model.layers.0.mlp.up_proj", TP_FP8_TENSOR, 32, K_, 0.2f, -1, 0.01f, F_NONE);
    ck_finish(&c, "FP8", NULL);
    static const struct { const char *compat, *note; } want[] = {
        {"moq", "model.layers.0.mlp.gate_up_proj: keeps per-shard weight_scale (gate_proj="},
        {"vllm", "model.layers.0.mlp.gate_up_proj: requantized to the max weight_scale"},
    };
    for (int i = 0; i < 2; i++) {
        char cmd[1024], out[8192];
        snprintf(cmd, sizeof cmd, "%s inspect %s --kernels --compat %s", tu_moq_bin(), c.dir, want[i].compat);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        const char *row = strstr(out, "model.layers.0.mlp.up_proj ");
        assert_non_null(row);
        const char *eol = strchr(row, '\n'), *k = strstr(row, "  kernel cpu_"), *n = strstr(row, want[i].note);
        if (!k || !n || (eol && (k > eol || n > eol))) fail_msg("profile %s: row lacks kernel or note:\n%s", want[i].compat, out);
    }
    ref_free(r, 2);
    ck_done(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_algo),
        cmocka_unit_test(test_unquantized_no_config),
        cmocka_unit_test(test_fused_fp8_keeps_shard_scales),
        cmocka_unit_test(test_fused_fp8_vllm_requant),
        cmocka_unit_test(test_fused_fp8_sglang_requant),
        cmocka_unit_test(test_fused_fp8_equal_scales),
        cmocka_unit_test(test_fused_nvfp4),
        cmocka_unit_test(test_fused_fp8_row_and_block),
        cmocka_unit_test(test_fp8_pb_wo_forms),
        cmocka_unit_test(test_nvfp4_awq),
        cmocka_unit_test(test_nvfp4_as_fp8_blocks),
        cmocka_unit_test(test_nvfp4_as_fp8_channels),
        cmocka_unit_test(test_nvfp4_as_bad_value),
        cmocka_unit_test(test_cli_export_forms),
        cmocka_unit_test(test_w4a16_legacy_input_scale),
        cmocka_unit_test(test_mxfp8_row_blocks),
        cmocka_unit_test(test_mixed_precision),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_k_not_divisible),
        cmocka_unit_test(test_fused_errors),
        cmocka_unit_test(test_inspect_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
