/* test_export_linear.c — the export table (quant/export_linear.c), every row:
 *  - the tensors it plans are the ones the seeds' loaders expect for that quant_algo (names, dtypes
 *    and shapes written here from SGLang/vLLM's ModelOpt modules, e.g. NVFP4 weight uint8 [N, K/2],
 *    weight_scale fp8 [N, K/16], scalar weight_scale_2 and input_scale);
 *  - the bytes it writes equal direct calls of the quant/export_ref.c exporters, and its input
 *    scales are act_amax ⊗ f32(1/448) (FP8) and act_amax ⊗ f32(1/(6 · 448)) (NVFP4), the reciprocal
 *    products PyTorch computes for ModelOpt's amax / maxbound;
 *  - a checkpoint written from its output (moq_writer) opens with moq_checkpoint_open and `moq check`
 *    reports it clean;
 *  - plan/run refuse a K the algo cannot group and buffers that differ from the plan. */
#include "tu.h"

#include "format/format.h"
#include "quant/export_linear.h"
#include "quant/export_ref.h"

typedef struct want_tensor {
    const char *suffix;
    moq_dtype   dtype;
    int         ndim;
    int64_t     shape[4];
} want_tensor;

/* The loaders' contract for a weight [N, K] (seeds: create_weights of each ModelOpt method). */
static int want_for(const char *algo, int64_t N, int64_t K, want_tensor *w) {
    const want_tensor scalar_ws2 = {"weight_scale_2", MOQ_DT_F32, 0, {0}}, scalar_in = {"input_scale", MOQ_DT_F32, 0, {0}};
    if (!strcmp(algo, "NVFP4") || !strcmp(algo, "W4A16_NVFP4")) {
        w[0] = (want_tensor){"weight", MOQ_DT_U8, 2, {N, K / 2}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_F8_E4M3, 2, {N, K / 16}};
        w[2] = scalar_ws2;
        if (algo[0] == 'W') return 3;
        w[3] = scalar_in;
        return 4;
    }
    if (!strcmp(algo, "NVFP4_AWQ")) { /* NUMERICS §12: NVFP4 plus pre_quant_scale bf16 [K] */
        w[0] = (want_tensor){"weight", MOQ_DT_U8, 2, {N, K / 2}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_F8_E4M3, 2, {N, K / 16}};
        w[2] = scalar_ws2;
        w[3] = scalar_in;
        w[4] = (want_tensor){"pre_quant_scale", MOQ_DT_BF16, 1, {K}};
        return 5;
    }
    if (!strcmp(algo, "FP8")) {
        w[0] = (want_tensor){"weight", MOQ_DT_F8_E4M3, 2, {N, K}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_F32, 0, {0}};
        w[2] = scalar_in;
        return 3;
    }
    if (!strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN")) {
        w[0] = (want_tensor){"weight", MOQ_DT_F8_E4M3, 2, {N, K}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_F32, 1, {N}};
        return 2;
    }
    if (!strcmp(algo, "FP8_PB_WO")) {
        w[0] = (want_tensor){"weight", MOQ_DT_F8_E4M3, 2, {N, K}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_F32, 4, {(N + 127) / 128, 1, K / 128, 1}};
        return 2;
    }
    if (!strcmp(algo, "MXFP8")) {
        w[0] = (want_tensor){"weight", MOQ_DT_F8_E4M3, 2, {N, K}};
        w[1] = (want_tensor){"weight_scale", MOQ_DT_U8, 2, {N, K / 32}};
        return 2;
    }
    if (!strcmp(algo, "BF16")) {
        w[0] = (want_tensor){"weight", MOQ_DT_BF16, 2, {N, K}};
        return 1;
    }
    fail_msg("algo %s has no expectation in this test", algo);
    return 0;
}

static void fill(float *w, size_t n, uint64_t seed, float amp) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(seed >> 11) * 0x1p-53 - 0.5;
        w[i] = moq_bf16_decode(moq_bf16_encode_rne((float)(u * amp)));
    }
}

static uint64_t bytes_of(const want_tensor *w) {
    uint64_t n = 1;
    for (int d = 0; d < w->ndim; d++) n *= (uint64_t)w->shape[d];
    return n * (uint64_t)moq_dtype_bits(w->dtype) / 8;
}

/* The bytes of every tensor from direct export_ref.c calls, concatenated in `want` order. */
static uint8_t *direct_export(const char *algo, const float *W, size_t N, size_t K, float amax, float act_amax,
                              size_t *len) {
    uint8_t *b = calloc(1, N * K * 2 + N * 4 + 64), *p = b;
    if (!strcmp(algo, "NVFP4") || !strcmp(algo, "W4A16_NVFP4")) {
        float ws2, in = act_amax * (1.0f / 2688.0f);
        moq_export_nvfp4_weight(W, N, K, amax, p, p + N * K / 2, &ws2);
        p += N * K / 2 + N * K / 16;
        memcpy(p, &ws2, 4), p += 4;
        if (algo[0] == 'N') memcpy(p, &in, 4), p += 4;
    } else if (!strcmp(algo, "NVFP4_AWQ")) { /* synthetic AWQ: W / s with s[k] = bf16(0.5 + 1.5 ((37 k) mod 64) / 64) */
        float *Ws = malloc(N * K * sizeof *Ws), ws2, in = 2.0f * act_amax / 2688.0f;
        uint16_t sb[1024];
        for (size_t k = 0; k < K; k++) sb[k] = moq_bf16_encode_rne(0.5f + 1.5f * (float)((k * 37) % 64) / 64.0f);
        for (size_t i = 0; i < N * K; i++) Ws[i] = W[i] / moq_bf16_decode(sb[i % K]);
        moq_export_nvfp4_weight(Ws, N, K, amax < 0 ? -1.0f : 2.0f * amax, p, p + N * K / 2, &ws2);
        free(Ws);
        p += N * K / 2 + N * K / 16;
        memcpy(p, &ws2, 4), p += 4;
        memcpy(p, &in, 4), p += 4;
        memcpy(p, sb, K * 2), p += K * 2;
    } else if (!strcmp(algo, "FP8")) {
        float sc, in = act_amax * (1.0f / 448.0f);
        moq_export_fp8_tensor_weight(W, N, K, -1.0f, MOQ_DT_BF16, p, &sc); /* each shard its own amax */
        p += N * K;
        memcpy(p, &sc, 4), p += 4;
        memcpy(p, &in, 4), p += 4;
    } else if (!strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN")) {
        moq_export_fp8_row_weight(W, N, K, p, (float *)(void *)(p + N * K));
        p += N * K + N * 4;
    } else if (!strcmp(algo, "FP8_PB_WO")) {
        moq_export_fp8_block_weight(W, N, K, p, (float *)(void *)(p + N * K));
        p += N * K + (N + 127) / 128 * (K / 128) * 4;
    } else if (!strcmp(algo, "MXFP8")) {
        moq_export_mxfp8_weight(W, N, K, p, p + N * K);
        p += N * K + N * K / 32;
    } else {
        for (size_t i = 0; i < N * K; i++, p += 2) {
            const uint16_t h = moq_bf16_encode_rne(W[i]);
            memcpy(p, &h, 2);
        }
    }
    *len = (size_t)(p - b);
    return b;
}

/* Plans and runs row for W [N, K]; checks the plan against want_for and the bytes against
 * direct_export. Returns the tensors (data malloc'ed, caller frees each). */
static int export_and_compare(const moq_export_linear_row *row, const float *W, int64_t N, int64_t K, float amax,
                              float act_amax, moq_export_tensor *t) {
    int nt = 0;
    moq_export_args a = moq_export_args_default();
    a.amax = amax, a.act_amax = act_amax;
    TU_OK(moq_export_linear_plan(row, "model.layers.0.mlp.down_proj", N, K, &a, t, &nt, err_));
    want_tensor want[5];
    const int nw = want_for(row->algo, N, K, want);
    assert_int_equal(nt, nw);
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        assert_string_equal(t[i].suffix, want[i].suffix);
        assert_int_equal(t[i].dtype, want[i].dtype);
        assert_int_equal(t[i].ndim, want[i].ndim);
        for (int d = 0; d < want[i].ndim; d++) assert_int_equal(t[i].shape[d], want[i].shape[d]);
        assert_int_equal(t[i].nbytes, bytes_of(&want[i]));
        assert_null(t[i].data);
        t[i].data = malloc((size_t)t[i].nbytes);
        total += (size_t)t[i].nbytes;
    }
    TU_OK(moq_export_linear_run(row, "model.layers.0.mlp.down_proj", W, N, K, &a, t, nt, err_));
    size_t len = 0;
    uint8_t *ref = direct_export(row->algo, W, (size_t)N, (size_t)K, amax, act_amax, &len);
    assert_int_equal(len, total);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        if (memcmp(t[i].data, ref + off, (size_t)t[i].nbytes) != 0)
            fail_msg("%s %s: bytes differ from the direct export_ref.c call", row->algo, t[i].suffix);
        off += (size_t)t[i].nbytes;
    }
    free(ref);
    return nt;
}

static void test_every_row_matches_export_ref(void **state) {
    (void)state;
    enum { N = 200, K = 256 }; /* N ends in a partial 128-row block */
    float *W = malloc(N * K * sizeof *W);
    fill(W, N * K, 11, 0.5f);
    const float amax = 1.5f * moq_amax_f32(W, N * K); /* a group amax larger than this shard's */
    size_t n_rows = 0;
    const moq_export_linear_row *rows = moq_export_linear_rows(&n_rows);
    assert_int_equal(n_rows, 8);
    for (size_t r = 0; r < n_rows; r++) {
        assert_ptr_equal(moq_export_linear_find(rows[r].algo), &rows[r]);
        moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS];
        const int nt = export_and_compare(&rows[r], W, N, K, amax, 4.0f, t);
        for (int i = 0; i < nt; i++) free(t[i].data);
    }
    assert_null(moq_export_linear_find("NVFP5"));
    assert_null(moq_export_linear_find("MIXED_PRECISION")); /* a mix of rows, not a row */
    free(W);
}

/* One Llama layer's down_proj [hidden, inter] written through the table, then opened and checked. */
static void test_every_row_loads_and_checks_clean(void **state) {
    (void)state;
    enum { H = 128, I = 256 };
    float *W = malloc(H * I * sizeof *W);
    fill(W, H * I, 7, 0.25f);
    size_t n_rows = 0;
    const moq_export_linear_row *rows = moq_export_linear_rows(&n_rows);
    for (size_t r = 0; r < n_rows; r++) {
        const moq_export_linear_row *row = &rows[r];
        char tag[64];
        snprintf(tag, sizeof tag, "export_linear_%s", row->algo);
        char *dir = tu_tmpdir(tag);
        moq_writer *wr = NULL;
        TU_OK(moq_writer_create(&wr, dir, err_));
        moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS];
        const int nt = export_and_compare(row, W, H, I, -1.0f, 4.0f, t);
        for (int i = 0; i < nt; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.0.mlp.down_proj.%s", t[i].suffix);
            TU_OK(moq_writer_add(wr, nm, t[i].dtype, t[i].ndim, t[i].shape, t[i].data, t[i].nbytes, err_));
        }
        char gs[32] = "", cfg[1024], hq[512];
        if (row->group_size) snprintf(gs, sizeof gs, ", \"group_size\": %d", row->group_size);
        snprintf(hq, sizeof hq,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": "
                 "{\"quant_algo\": \"%s\", \"kv_cache_quant_algo\": null%s, \"exclude_modules\": [\"lm_head\"]}}\n",
                 row->algo, gs);
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"torch_dtype\": \"bfloat16\", "
                 "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                 "\"num_key_value_heads\": 1, \"vocab_size\": 64}\n", H, I);
        TU_OK(moq_writer_file(wr, "config.json", cfg, err_));
        if (row->quantized) TU_OK(moq_writer_file(wr, "hf_quant_config.json", hq, err_));
        TU_OK(moq_writer_finish(wr, 1, err_));
        moq_writer_free(wr);

        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
        assert_int_equal(moq_checkpoint_tensor_count(c), (size_t)nt);
        for (int i = 0; i < nt; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.0.mlp.down_proj.%s", t[i].suffix);
            const moq_tensor *x = moq_checkpoint_tensor(c, nm);
            assert_non_null(x);
            assert_int_equal(x->dtype, t[i].dtype);
            assert_int_equal(x->nbytes, t[i].nbytes);
            assert_memory_equal(x->data, t[i].data, (size_t)t[i].nbytes);
            free(t[i].data);
        }
        moq_checkpoint_free(c);

        char cmd[1024], out[4096];
        snprintf(cmd, sizeof cmd, "'%s' check '%s'", tu_moq_bin(), dir);
        const int rc = tu_run(cmd, out, sizeof out);
        if (rc != 0 || !strstr(out, ", 0 problems")) fail_msg("%s: moq check exit %d:\n%s", row->algo, rc, out);
        tu_rmtree(dir);
        free(dir);
    }
    free(W);
}

static void test_plan_and_run_refuse_mismatches(void **state) {
    (void)state;
    moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS];
    int nt = 0;
    moq_error e = {0};
    moq_status st = moq_export_linear_plan(moq_export_linear_find("FP8_PB_WO"), "model.layers.3.mlp.down_proj", 64, 192, NULL, t, &nt, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.3.mlp.down_proj", "K = 192 is not a multiple of 128, which FP8_PB_WO needs");
    assert_int_equal(nt, 0);
    e = (moq_error){0};
    st = moq_export_linear_plan(moq_export_linear_find("NVFP4"), "x.q_proj", 0, 64, NULL, t, &nt, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "x.q_proj", "weight shape [0, 64]");

    /* run with one buffer the wrong size */
    const moq_export_linear_row *row = moq_export_linear_find("MXFP8");
    float W[8 * 64] = {0};
    TU_OK(moq_export_linear_plan(row, "x.o_proj", 8, 64, NULL, t, &nt, err_));
    uint8_t q[8 * 64], sc[8 * 2];
    t[0].data = q, t[1].data = sc;
    t[1].nbytes = 8;
    e = (moq_error){0};
    st = moq_export_linear_run(row, "x.o_proj", W, 8, 64, NULL, t, nt, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "x.o_proj", "weight_scale of 8 bytes, expected weight_scale of 16 bytes");
    e = (moq_error){0};
    st = moq_export_linear_run(row, "x.o_proj", W, 8, 64, NULL, t, 1, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "x.o_proj", "given 1 tensors, expected 2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_matches_export_ref),
        cmocka_unit_test(test_every_row_loads_and_checks_clean),
        cmocka_unit_test(test_plan_and_run_refuse_mismatches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
