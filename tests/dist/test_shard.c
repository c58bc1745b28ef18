/* test_shard.c — the per-rank plan (dist/plan.h) and the shard loader (scheme/slice.h through
 * moq_linear_layer_open_sliced) on checkpoints `moq synth` writes in every format.
 *
 * Oracle for the loader: the whole layer is loaded as usual, and the test cuts its dequantized rows
 * itself (rows [r0, r0 + n) of a column-parallel slice; columns [c0, c0 + n) of every row of a
 * row-parallel one): the sliced layer's dequantized weight must equal that exactly, element for
 * element (slicing moves codes and their scales, it never requantizes). The plan is checked against
 * the rules restated here: HF's repeat_kv (q head h reads KV head h / (A / KV)), a cover of
 * [0, V) and of the experts by disjoint rank ranges. Every refusal asserts its status, where and
 * message. */
#include "tu.h"

#include <math.h>

#include "config/modules.h"
#include "dist/plan.h"
#include "kernels/kernels.h"
#include "scheme/load.h"

static char *synth(const char *tag, const char *args) {
    char *dir = tu_tmpdir(tag), cmd[1024], out[2048];
    snprintf(cmd, sizeof cmd, "%s synth %s %s --layers 1 --vocab 512", tu_moq_bin(), dir, args);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s: %s", cmd, out);
    return dir;
}

/* ---- plan ---------------------------------------------------------------------------------------- */
static void test_plan_heads(void **s) {
    (void)s;
    const moq_tp_dims d = {.A = 8, .KV = 2, .I = 64, .V = 1000};
    for (int G = 1; G <= 8; G *= 2) {
        int64_t vcov = 0;
        for (int r = 0; r < G; r++) {
            moq_tp_plan p;
            TU_OK(moq_tp_plan_make(&p, &d, G, r, false, 128, err_));
            assert_int_equal(p.a_n, 8 / G);
            assert_int_equal(p.a0, r * (8 / G));
            for (int64_t h = p.a0; h < p.a0 + p.a_n; h++) { /* every local q head's KV head is local */
                const int64_t kvh = h / (d.A / d.KV);
                assert_true(kvh >= p.kv0 && kvh < p.kv0 + p.kv_n);
            }
            assert_int_equal(p.kv_n, G <= 2 ? 2 / G : 1); /* G > KV: one replicated KV head each */
            assert_int_equal(p.i_n * G, 64);
            assert_int_equal(p.v0, vcov); /* vocabulary: disjoint ranges covering [0, V) */
            vcov += p.v_n;
            assert_true(p.v_n >= 1 && p.v_n <= p.v_per);
            assert_int_equal(p.v_per % 128, 0); /* whole 128-row blocks (rank 7 of 8 holds 1000 - 7 x 128 = 104) */
        }
        assert_int_equal(vcov, 1000);
    }
    moq_tp_plan p; /* 600 rows in 256-row shards would leave rank 3 none: unaligned 150 each */
    const moq_tp_dims d6 = {.A = 8, .KV = 2, .I = 64, .V = 600};
    TU_OK(moq_tp_plan_make(&p, &d6, 4, 3, false, 128, err_));
    assert_int_equal(p.v_per, 150);
    assert_int_equal(p.v0, 450);
    assert_int_equal(p.v_n, 150);
}

static void test_plan_experts(void **s) {
    (void)s;
    const moq_tp_dims d = {.A = 4, .KV = 4, .I = 0, .Ie = 64, .E = 10, .V = 512};
    int seen[10] = {0};
    for (int r = 0; r < 4; r++) {
        moq_tp_plan p;
        TU_OK(moq_tp_plan_make(&p, &d, 4, r, true, 1, err_));
        assert_int_equal(p.e_n, r < 2 ? 3 : 2); /* 10 = 3 + 3 + 2 + 2 */
        assert_int_equal(p.ie_n, 64);           /* --ep: experts whole */
        for (int64_t e = 0; e < 10; e++)
            if (moq_tp_plan_expert(&p, e) >= 0) {
                assert_int_equal(moq_tp_plan_expert(&p, e), e - p.e0);
                seen[e]++;
            }
        TU_OK(moq_tp_plan_make(&p, &d, 4, r, false, 1, err_));
        assert_int_equal(p.ie_n, 16); /* TP experts: each split 4 ways, all local */
        assert_int_equal(p.ie0, 16 * r);
        assert_int_equal(moq_tp_plan_expert(&p, 9), 9);
    }
    for (int e = 0; e < 10; e++) assert_int_equal(seen[e], 1);
}

static void test_plan_errors(void **s) {
    (void)s;
    moq_tp_plan p;
    moq_error e;
    struct { moq_tp_dims d; int G; bool ep; const char *msg; } c[] = {
        {{.A = 6, .KV = 6, .I = 64, .V = 512}, 4, false, "num_attention_heads 6 is not divisible by --tp 4"},
        {{.A = 6, .KV = 3, .I = 64, .V = 512}, 2, false, "num_key_value_heads 3 is not divisible by --tp 2"},
        {{.A = 12, .KV = 4, .I = 72, .V = 512}, 6, false, "--tp 6 is not a multiple of num_key_value_heads 4"},
        {{.A = 8, .KV = 8, .I = 100, .V = 512}, 8, false, "intermediate_size 100 is not divisible by --tp 8"},
        {{.A = 4, .KV = 4, .I = 64, .Ie = 30, .E = 8, .V = 512}, 4, false, "moe_intermediate_size 30 is not divisible by --tp 4"},
        {{.A = 4, .KV = 4, .I = 64, .Ie = 32, .E = 2, .V = 512}, 4, true, "num_experts 2 is fewer than --tp 4"},
        {{.A = 4, .KV = 4, .I = 64, .V = 5}, 4, false, "vocab_size 5 in 2-row shards leaves rank 3 no rows"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        TU_ERR(&e, moq_tp_plan_make(&p, &c[i].d, c[i].G, 0, c[i].ep, 1, &e), MOQ_ERR_UNSUPPORTED, "config.json", c[i].msg);
}

/* ---- the shard loader ---------------------------------------------------------------------------- */
/* The slice's dequantized rows against the whole layer's, cut here. */
static void check_slice(const char *algo, const char *dir, const char *mod, moq_slice_dim dim, int G) {
    moq_checkpoint *c = NULL; /* the layers borrow rows from its mapping: open until they are freed */
    moq_qconfig *q = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    if (moq_checkpoint_has_qconfig(c)) TU_OK(moq_qconfig_open(&q, dir, MOQ_COMPAT_MOQ, err_));
    moq_linear_layer *whole = NULL;
    TU_OK(moq_linear_layer_open_sliced(&whole, c, q, mod, MOQ_KIND_LINEAR, NULL, 0, NULL, NULL, err_));
    const moq_weight *W = moq_linear_layer_weight(whole);
    double *a = malloc((size_t)W->K * sizeof(double)), *b = malloc((size_t)W->K * sizeof(double));
    const int64_t ext = dim == MOQ_SLICE_ROWS ? W->N : W->K, n = ext / G;
    for (int r = 0; r < G; r++) {
        const moq_slice sl = {dim, r * n, n, r == 0};
        moq_linear_layer *part = NULL;
        TU_OK(moq_linear_layer_open_sliced(&part, c, q, mod, MOQ_KIND_LINEAR, NULL, 0, NULL, &sl, err_));
        const moq_weight *P = moq_linear_layer_weight(part);
        assert_int_equal(P->N, dim == MOQ_SLICE_ROWS ? n : W->N);
        assert_int_equal(P->K, dim == MOQ_SLICE_COLS ? n : W->K);
        for (int64_t i = 0; i < P->N; i++) {
            moq_weight_dequant_row(W, dim == MOQ_SLICE_ROWS ? r * n + i : i, a);
            moq_weight_dequant_row(P, i, b);
            const double *want = dim == MOQ_SLICE_COLS ? a + r * n : a;
            for (int64_t k = 0; k < P->K; k++)
                if (want[k] != b[k])
                    fail_msg("%s %s rank %d/%d %s: row %lld col %lld = %.9g, the whole layer's cut gives %.9g", algo, mod, r, G,
                             dim == MOQ_SLICE_ROWS ? "rows" : "cols", (long long)i, (long long)k, b[k], want[k]);
        }
        if (W->pre_scale) /* AWQ pre_quant_scale [K]: cut with the columns, replicated with rows */
            for (int64_t k = 0; k < P->K; k++) assert_true(P->pre_scale[k] == W->pre_scale[(dim == MOQ_SLICE_COLS ? r * n : 0) + k]);
        if (!W->pre_scale) assert_null(P->pre_scale);
        moq_linear_layer_free(part);
    }
    free(a), free(b);
    moq_linear_layer_free(whole);
    moq_qconfig_free(q);
    moq_checkpoint_free(c);
}

static void test_loader_every_format(void **s) {
    (void)s;
    static const char *const algos[] = {"BF16", "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8", "NVFP4_AWQ"};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "--algo %s --hidden 512 --inter 512 --heads 4 --kv-heads 4", algos[i]);
        char *dir = synth("shard", args);
        for (int G = 2; G <= 4; G *= 2) {
            check_slice(algos[i], dir, "model.layers.0.mlp.gate_proj", MOQ_SLICE_ROWS, G);  /* column-parallel */
            check_slice(algos[i], dir, "model.layers.0.mlp.down_proj", MOQ_SLICE_COLS, G);  /* row-parallel    */
        }
        tu_rmtree(dir);
        free(dir);
    }
}

/* A slice edge inside a quantization block is refused, naming the tensor and the block. */
static void test_loader_block_cut(void **s) {
    (void)s;
    struct { const char *algo; moq_slice sl; const char *mod, *msg; } c[] = {
        {"FP8_PB_WO", {MOQ_SLICE_ROWS, 64, 64, false}, "model.layers.0.mlp.gate_proj", "a shard edge at row 64 cuts a 128x128 quantization block"},
        {"FP8_PB_WO", {MOQ_SLICE_COLS, 0, 192, true}, "model.layers.0.mlp.down_proj", "a shard edge at column 192 cuts a 128x128 quantization block"},
        {"NVFP4", {MOQ_SLICE_COLS, 8, 16, false}, "model.layers.0.mlp.down_proj", "a shard edge at column 8 cuts a 1x16 quantization block"},
        {"MXFP8", {MOQ_SLICE_COLS, 0, 48, true}, "model.layers.0.mlp.down_proj", "a shard edge at column 48 cuts a 1x32 quantization block"},
        {"BF16", {MOQ_SLICE_ROWS, 500, 20, false}, "model.layers.0.mlp.gate_proj", "slice rows [500, 520) outside [0, 512)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char args[96];
        snprintf(args, sizeof args, "--algo %s --hidden 256 --inter 512", c[i].algo);
        char *dir = synth("shard_cut", args);
        moq_checkpoint *ck = NULL;
        moq_qconfig *q = NULL;
        moq_linear_layer *l = NULL;
        moq_error e;
        TU_OK(moq_checkpoint_open(&ck, dir, NULL, err_));
        if (moq_checkpoint_has_qconfig(ck)) TU_OK(moq_qconfig_open(&q, dir, MOQ_COMPAT_MOQ, err_));
        const moq_status st = moq_linear_layer_open_sliced(&l, ck, q, c[i].mod, MOQ_KIND_LINEAR, NULL, 0, NULL, &c[i].sl, &e);
        TU_ERR(&e, st, i == 4 ? MOQ_ERR_INVALID_ARG : MOQ_ERR_UNSUPPORTED, c[i].mod, c[i].msg);
        assert_null(l);
        moq_qconfig_free(q);
        moq_checkpoint_free(ck);
        tu_rmtree(dir);
        free(dir);
    }
}

/* The slice views alone: rows borrowed from the mapping, columns copied; a per-tensor scale and a
 * COLS bias on a rank that does not keep it. Bytes cut here from a tensor built here. */
static void test_slice_view(void **s) {
    (void)s;
    uint8_t w[8 * 6], out[64];
    for (int i = 0; i < 48; i++) w[i] = (uint8_t)i;
    const moq_tensor t = {.name = "w", .dtype = MOQ_DT_F8_E4M3, .ndim = 2, .shape = {8, 6}, .nelem = 48, .nbytes = 48, .data = w};
    const moq_quant_key k = {.elem = MOQ_ELEM_E4M3, .scale_elem = MOQ_ELEM_F32, .group_rows = 1, .group_cols = -1};
    moq_tensor v;
    bool keep;
    moq_slice rows = {MOQ_SLICE_ROWS, 2, 4, false}, cols = {MOQ_SLICE_COLS, 2, 3, false};
    assert_int_equal(moq_slice_view_bytes(&t, MOQ_ROLE_WEIGHT, &k, 8, 6, &rows), 0);
    TU_OK(moq_slice_view(&t, MOQ_ROLE_WEIGHT, &k, 8, 6, &rows, NULL, &v, &keep, err_));
    assert_ptr_equal(v.data, w + 12); /* borrowed */
    assert_int_equal(v.shape[0], 4);
    assert_int_equal(moq_slice_view_bytes(&t, MOQ_ROLE_WEIGHT, &k, 8, 6, &cols), 24);
    TU_OK(moq_slice_view(&t, MOQ_ROLE_WEIGHT, &k, 8, 6, &cols, out, &v, &keep, err_));
    for (int r = 0; r < 8; r++)
        for (int j = 0; j < 3; j++) assert_int_equal(((const uint8_t *)v.data)[r * 3 + j], r * 6 + 2 + j);
    float sc[8] = {1, 2, 3, 4, 5, 6, 7, 8}, one = 0.5f;
    const moq_tensor ts = {.name = "s", .dtype = MOQ_DT_F32, .ndim = 1, .shape = {8}, .nelem = 8, .nbytes = 32, .data = sc};
    TU_OK(moq_slice_view(&ts, MOQ_ROLE_SCALE, &k, 8, 6, &rows, NULL, &v, &keep, err_)); /* per row: cut with the rows */
    assert_int_equal(v.shape[0], 4);
    assert_true(((const float *)v.data)[0] == 3.0f);
    TU_OK(moq_slice_view(&ts, MOQ_ROLE_SCALE, &k, 8, 6, &cols, NULL, &v, &keep, err_)); /* ... replicated with columns */
    assert_int_equal(v.shape[0], 8);
    const moq_tensor t1 = {.name = "s2", .dtype = MOQ_DT_F32, .ndim = 0, .nelem = 1, .nbytes = 4, .data = &one};
    TU_OK(moq_slice_view(&t1, MOQ_ROLE_SCALAR, &k, 8, 6, &rows, NULL, &v, &keep, err_));
    assert_ptr_equal(v.data, &one);
    TU_OK(moq_slice_view(&ts, MOQ_ROLE_VEC_N, &k, 8, 6, &cols, NULL, &v, &keep, err_));
    assert_false(keep); /* a row-parallel bias lives on one rank */
    cols.bias = true;
    TU_OK(moq_slice_view(&ts, MOQ_ROLE_VEC_N, &k, 8, 6, &cols, NULL, &v, &keep, err_));
    assert_true(keep);
    assert_int_equal(v.shape[0], 8);
}

/* Tensor-parallel experts (moq_moe_opts.inter_slice): the G slices' outputs summed equal the whole
 * layer's up to f32 reassociation of w2's sum over I (the routing, w13 rows and the activation are the
 * whole layer's exactly), for every expert format whose activation groups stay within a slice; and
 * a slice edge inside an FP8_PB_WO 128-row block is refused naming the expert tensor. */
static void test_moe_slices(void **s) {
    (void)s;
    static const struct { const char *algo; moq_moe_format f; } fm[] = {
        {"BF16", MOQ_MOE_FMT_UNQUANTIZED}, {"FP8", MOQ_MOE_FMT_FP8}, {"FP8_PB_WO", MOQ_MOE_FMT_FP8_PB_WO}, {"NVFP4", MOQ_MOE_FMT_NVFP4},
        {"W4A16_NVFP4", MOQ_MOE_FMT_W4A16_NVFP4}, {"MXFP8", MOQ_MOE_FMT_MXFP8}, {"NVFP4_AWQ", MOQ_MOE_FMT_NVFP4_AWQ}};
    enum { T = 6, H = 512 };
    for (size_t i = 0; i < sizeof fm / sizeof fm[0]; i++) {
        char args[160];
        snprintf(args, sizeof args, "--algo %s --arch qwen3moe --experts 4 --hidden %d --inter 512 --heads 4 --kv-heads 4", fm[i].algo, H);
        char *dir = synth("shard_moe", args);
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
        moq_moe_opts o = moq_moe_opts_default();
        o.format = fm[i].f, o.num_experts = 4, o.n_threads = 1;
        float x[T * H], whole[T * H], part[T * H], sum[T * H] = {0};
        for (int k = 0; k < T * H; k++) x[k] = (float)sin(0.37 * k) * 0.8f;
        moq_moe *m = NULL;
        TU_OK(moq_moe_create(&m, c, "model.layers.0.mlp", &o, err_));
        size_t wsz = moq_moe_workspace_size(m, T);
        void *ws = malloc(wsz);
        TU_OK(moq_moe_run(m, x, MOQ_ELEM_F32, T, NULL, whole, MOQ_ELEM_F32, ws, wsz, err_));
        moq_moe_free(m), free(ws);
        for (int r = 0; r < 2; r++) {
            o.inter_slice = (moq_moe_slice){256 * r, 256, r == 0};
            TU_OK(moq_moe_create(&m, c, "model.layers.0.mlp", &o, err_));
            wsz = moq_moe_workspace_size(m, T), ws = malloc(wsz);
            TU_OK(moq_moe_run(m, x, MOQ_ELEM_F32, T, NULL, part, MOQ_ELEM_F32, ws, wsz, err_));
            for (int k = 0; k < T * H; k++) sum[k] += part[k];
            moq_moe_free(m), free(ws);
        }
        double mx = 0, d = 0;
        for (int k = 0; k < T * H; k++) mx = fmax(mx, fabs(whole[k])), d = fmax(d, fabs((double)whole[k] - sum[k]));
        if (!(d <= 1e-5 * mx)) fail_msg("%s experts split 2 ways: max |sum of slices - whole| %.3g of max %.3g", fm[i].algo, d, mx);
        if (fm[i].f == MOQ_MOE_FMT_FP8_PB_WO) { /* 64-row slices cut the experts' 128-row blocks */
            moq_error e;
            o.inter_slice = (moq_moe_slice){64, 64, false};
            TU_ERR(&e, moq_moe_create(&m, c, "model.layers.0.mlp", &o, &e), MOQ_ERR_UNSUPPORTED, "experts.0.gate_proj.weight",
                   "a shard edge at row 64 cuts a 128x128 quantization block");
            assert_null(m);
        }
        moq_checkpoint_free(c);
        tu_rmtree(dir);
        free(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_heads),        cmocka_unit_test(test_plan_experts), cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_slice_view),        cmocka_unit_test(test_loader_every_format),
        cmocka_unit_test(test_loader_block_cut), cmocka_unit_test(test_moe_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
