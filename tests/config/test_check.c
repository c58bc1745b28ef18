/* test_check.c — `moq check` / moq_modules_* on tiny generated checkpoints shaped like published
 * ones (their real hf_quant_config.json, a few layers, N = 64, K = 128), written with moq_writer and
 * quant/export_ref.c. Clean checkpoints must give no problem; each corrupted one must give exactly
 * the problems planted, all of them in one pass. Expected messages restate the contract tables of
 * the seeds' create_weights (see scheme.c), not moq's output. */
#include <cjson/cJSON.h>
#include <math.h>

#include "tu.h"

#include "config/modules.h"
#include "format/format.h"
#include "quant/export_ref.h"

enum { N_ = 64, K_ = 128 };

typedef struct ck {
    moq_writer *w;
    void       *bufs[4096];
    int         nb;
    uint64_t    rng;
} ck;

static void *keep(ck *c, size_t n) {
    void *p = calloc(1, n ? n : 1);
    assert_true(c->nb < 4096);
    c->bufs[c->nb++] = p;
    return p;
}

static float urand(ck *c) {
    c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(c->rng >> 11) * 0x1p-53 - 0.5);
}

static void add(ck *c, const char *mod, const char *role, moq_dtype dt, int ndim, int64_t d0, int64_t d1, const void *data, size_t nbytes) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.%s", mod, role);
    const int64_t shape[2] = {d0, d1};
    moq_error e = {0};
    if (moq_writer_add(c->w, nm, dt, ndim, shape, data, nbytes, &e) != MOQ_OK) fail_msg("writer_add %s: %s", nm, e.msg);
}

static void add_f32(ck *c, const char *mod, const char *role, float v) {
    float *p = keep(c, 4);
    *p = v;
    add(c, mod, role, MOQ_DT_F32, 0, 0, 0, p, 4);
}

static float *rand_w(ck *c, int64_t N, int64_t K) {
    float *w = keep(c, (size_t)(N * K) * 4);
    for (int64_t i = 0; i < N * K; i++) w[i] = moq_bf16_decode(moq_bf16_encode_rne(urand(c) * 0.2f));
    return w;
}

/* Writes the tensors ModelOpt exports for one linear of the given algo ("BF16" = unquantized). */
static void linear(ck *c, const char *mod, const char *algo, int64_t N, int64_t K) {
    float *w = rand_w(c, N, K);
    if (strcmp(algo, "NVFP4") == 0 || strcmp(algo, "W4A16_NVFP4") == 0) {
        uint8_t *q = keep(c, (size_t)(N * K / 2)), *sf = keep(c, (size_t)(N * K / 16));
        float ws2;
        moq_export_nvfp4_weight(w, (size_t)N, (size_t)K, 0.5f, q, sf, &ws2); /* shared amax: fused shards agree */
        add(c, mod, "weight", MOQ_DT_U8, 2, N, K / 2, q, (size_t)(N * K / 2));
        add(c, mod, "weight_scale", MOQ_DT_F8_E4M3, 2, N, K / 16, sf, (size_t)(N * K / 16));
        add_f32(c, mod, "weight_scale_2", ws2);
        if (strcmp(algo, "NVFP4") == 0) add_f32(c, mod, "input_scale", 4.0f / 2688.0f);
    } else if (strcmp(algo, "FP8") == 0) {
        uint8_t *q = keep(c, (size_t)(N * K));
        float sc;
        moq_export_fp8_tensor_weight(w, (size_t)N, (size_t)K, -1.0f, MOQ_DT_BF16, q, &sc);
        add(c, mod, "weight", MOQ_DT_F8_E4M3, 2, N, K, q, (size_t)(N * K));
        add_f32(c, mod, "weight_scale", sc);
        add_f32(c, mod, "input_scale", 4.0f / 448.0f);
    } else if (strcmp(algo, "MXFP8") == 0) {
        uint8_t *q = keep(c, (size_t)(N * K)), *sf = keep(c, (size_t)(N * K / 32));
        for (int64_t i = 0; i < N * K; i++) q[i] = moq_e4m3_encode_rne_sat(w[i] * 64.0f);
        memset(sf, 121, (size_t)(N * K / 32)); /* 2^-6 */
        add(c, mod, "weight", MOQ_DT_F8_E4M3, 2, N, K, q, (size_t)(N * K));
        add(c, mod, "weight_scale", MOQ_DT_U8, 2, N, K / 32, sf, (size_t)(N * K / 32));
    } else {
        uint16_t *h = keep(c, (size_t)(N * K) * 2);
        for (int64_t i = 0; i < N * K; i++) h[i] = moq_bf16_encode_rne(w[i]);
        add(c, mod, "weight", MOQ_DT_BF16, 2, N, K, h, (size_t)(N * K) * 2);
    }
}

static void bf16_vec(ck *c, const char *mod, const char *role, int64_t n) {
    uint16_t *h = keep(c, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h[i] = moq_bf16_encode_rne(1.0f);
    add(c, mod, role, MOQ_DT_BF16, 1, n, 0, h, (size_t)n * 2);
}

static ck *open_ck(const char *dir) {
    ck *c = calloc(1, sizeof *c);
    c->rng = 7;
    TU_OK(moq_writer_create(&c->w, dir, err_));
    return c;
}

static void finish(ck *c, const char *hf_quant, const char *config) {
    TU_OK(moq_writer_file(c->w, "config.json", config ? config : "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\"}", err_));
    if (hf_quant) TU_OK(moq_writer_file(c->w, "hf_quant_config.json", hf_quant, err_));
    TU_OK(moq_writer_finish(c->w, 1, err_));
    moq_writer_free(c->w);
    for (int i = 0; i < c->nb; i++) free(c->bufs[i]);
    free(c);
}

static char *shared_text(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "modelopt_configs/%s", file);
    char *p = tu_data_path(rel);
    size_t n;
    char *t = tu_read_file(p, &n);
    char *z = malloc(n + 1);
    memcpy(z, t, n), z[n] = 0;
    free(t), free(p);
    return z;
}

/* Runs build + check; returns the problems joined by newlines (caller frees) and their count. */
static char *check_dir(const char *dir, bool values, int *n_probs, int *n_modules) {
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    moq_qconfig *q = NULL;
    TU_OK(moq_qconfig_open(&q, dir, MOQ_COMPAT_MOQ, err_));
    moq_modules m;
    TU_OK(moq_modules_build(&m, c, q, err_));
    TU_OK(moq_modules_check(&m, c, q, values, err_));
    size_t cap = 1 << 16, o = 0;
    char *all = calloc(1, cap);
    for (int i = 0; i < m.n_probs && o < cap; i++) o += (size_t)snprintf(all + o, cap - o, "%s: %s\n", m.probs[i].where, m.probs[i].msg);
    *n_probs = m.n_probs;
    if (n_modules) {
        *n_modules = 0;
        for (int k = 0; k < m.n; k++) *n_modules += m.mods[k].kind != MOQ_MOD_OTHER;
    }
    moq_modules_free(&m);
    moq_qconfig_free(q);
    moq_checkpoint_free(c);
    return all;
}

static void expect_clean(const char *dir, int want_modules) {
    int n, mods;
    char *all = check_dir(dir, true, &n, &mods);
    if (n) fail_msg("%s: expected clean, got %d problems:\n%s", dir, n, all);
    assert_int_equal(mods, want_modules);
    free(all);
}

/* A weight of the wrong shape is named itself when config.json's N and K (down_proj: hidden_size,
 * intermediate_size) agree with its scale; when the config agrees with neither, nothing is blamed
 * on the config's word alone. */
static void test_weight_shape_against_config(void **state) {
    (void)state;
    static const char hq[] = "{\"quantization\":{\"quant_algo\":\"MXFP8\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[]}}";
    for (int round = 0; round < 2; round++) {
        char *dir = tu_tmpdir("ck_weight_shape");
        ck *c = open_ck(dir);
        uint8_t *q = keep(c, 64 * 96), *sf = keep(c, 64 * 4);
        memset(q, 0x38, 64 * 96), memset(sf, 127, 64 * 4);
        add(c, "model.layers.0.mlp.down_proj", "weight", MOQ_DT_F8_E4M3, 2, 64, 96, q, 64 * 96);      /* K = 96    */
        add(c, "model.layers.0.mlp.down_proj", "weight_scale", MOQ_DT_U8, 2, 64, 4, sf, 64 * 4);     /* K = 4 · 32 */
        finish(c, hq, round == 0 ? "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
                                   "\"num_attention_heads\":4,\"num_hidden_layers\":1}"
                                 : "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":512,"
                                   "\"num_attention_heads\":4,\"num_hidden_layers\":1}");
        int n;
        char *all = check_dir(dir, false, &n, NULL);
        const char *want = round == 0 ? "model.layers.0.mlp.down_proj.weight: shape [64, 96], expected [64, 128] from config.json"
                                      : "model.layers.0.mlp.down_proj.weight_scale: shape [64, 4], expected [64, 3]";
        if (n != 1 || strncmp(all, want, strlen(want)) != 0) fail_msg("round %d: want one problem \"%s...\", got %d:\n%s", round, want, n, all);
        free(all);
        tu_rmtree(dir);
        free(dir);
    }
}

/* Llama-3.1-70B-Instruct-FP8 (FP8 per tensor, FP8 KV cache, lm_head excluded). */
static void test_llama_fp8(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_llama_fp8");
    ck *c = open_ck(dir);
    linear(c, "model.embed_tokens", "BF16", 256, K_);
    for (int l = 0; l < 2; l++) {
        char p[128];
        static const char *const projs[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        for (size_t i = 0; i < 7; i++) snprintf(p, sizeof p, "model.layers.%d.%s", l, projs[i]), linear(c, p, "FP8", N_, K_);
        snprintf(p, sizeof p, "model.layers.%d.self_attn.k_proj", l), add_f32(c, p, "k_scale", 0.01f);
        snprintf(p, sizeof p, "model.layers.%d.self_attn.v_proj", l), add_f32(c, p, "v_scale", 0.01f);
        snprintf(p, sizeof p, "model.layers.%d.input_layernorm", l), bf16_vec(c, p, "weight", K_);
    }
    linear(c, "lm_head", "BF16", 256, K_);
    char *hq = shared_text("nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json");
    finish(c, hq, NULL);
    free(hq);
    expect_clean(dir, 16);
    tu_rmtree(dir);
    free(dir);
}

/* Qwen3-235B-A22B NVFP4: routers excluded (BF16), experts NVFP4 per expert projection. */
static void write_qwen3_moe(const char *dir, int corrupt) {
    ck *c = open_ck(dir);
    for (int l = 0; l < 2; l++) {
        char p[160];
        static const char *const att[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        for (size_t i = 0; i < 4; i++) snprintf(p, sizeof p, "model.layers.%d.self_attn.%s", l, att[i]), linear(c, p, "NVFP4", N_, K_);
        snprintf(p, sizeof p, "model.layers.%d.mlp.gate", l), linear(c, p, "BF16", 8, K_);
        for (int e = 0; e < 4; e++) {
            static const char *const ex[] = {"gate_proj", "up_proj", "down_proj"};
            for (size_t i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%d.%s", l, e, ex[i]);
                if (corrupt && l == 1 && e == 2 && i == 2) {
                    /* planted: an expert without scales */
                    uint8_t *q = calloc(1, N_ * K_ / 2);
                    add(c, p, "weight", MOQ_DT_U8, 2, N_, K_ / 2, q, N_ * K_ / 2);
                    c->bufs[c->nb++] = q;
                } else linear(c, p, "NVFP4", N_, K_);
            }
        }
    }
    linear(c, "lm_head", "BF16", 256, K_);
    char *hq = shared_text("nvidia--Qwen3-235B-A22B-NVFP4_hf_quant_config.json");
    finish(c, hq, NULL);
    free(hq);
}

static void test_qwen3_moe(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_qwen3_moe");
    write_qwen3_moe(dir, 0);
    expect_clean(dir, 2 * (4 + 1 + 12) + 1);
    tu_rmtree(dir);
    write_qwen3_moe(dir, 1);
    int n;
    char *all = check_dir(dir, false, &n, NULL);
    assert_int_equal(n, 3);
    const char *mod = "model.layers.1.mlp.experts.2.down_proj: missing tensor ";
    char want[256];
    static const char *const miss[] = {"weight_scale (scheme NVFP4", "weight_scale_2 (scheme NVFP4", "input_scale (scheme NVFP4"};
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "%s%s", mod, miss[i]);
        if (!strstr(all, want)) fail_msg("missing \"%s\" in:\n%s", want, all);
    }
    free(all);
    tu_rmtree(dir);
    free(dir);
}

/* Writes every quantized_layers entry of a real config under the given prefixes. */
static int write_from_layers(ck *c, const char *cfg_text, const char *const *prefixes, int n_prefixes) {
    cJSON *doc = cJSON_Parse(cfg_text);
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(doc, "quantization");
    const cJSON *ql = cJSON_GetObjectItemCaseSensitive(sec, "quantized_layers");
    int n = 0;
    for (const cJSON *e = ql->child; e; e = e->next)
        for (int i = 0; i < n_prefixes; i++)
            if (strncmp(e->string, prefixes[i], strlen(prefixes[i])) == 0) {
                linear(c, e->string, cJSON_GetObjectItemCaseSensitive(e, "quant_algo")->valuestring, N_, K_);
                n++;
                break;
            }
    cJSON_Delete(doc);
    return n;
}

/* Qwen3.6-27B: MIXED_PRECISION, FP8 attention + W4A16 MLP, FP8 KV cache, mtp excluded. */
static void test_qwen36_mixed(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_qwen36");
    ck *c = open_ck(dir);
    char *hq = shared_text("nvidia--Qwen3.6-27B-NVFP4_hf_quant_config.json");
    static const char *const pre[] = {"model.language_model.layers.0.", "model.language_model.layers.3."};
    const int n = write_from_layers(c, hq, pre, 2);
    assert_int_equal(n, 6 + 7); /* layer 0: 3 linear_attn + 3 MLP; layer 3: 4 attention + 3 MLP */
    add_f32(c, "model.language_model.layers.3.self_attn.k_proj", "k_scale", 0.02f);
    linear(c, "mtp.layers.0.mlp.down_proj", "BF16", N_, K_);
    finish(c, hq, NULL);
    free(hq);
    expect_clean(dir, n + 1);
    tu_rmtree(dir);
    free(dir);
}

/* MiniMax-M3: MIXED_PRECISION, MXFP8 attention/shared experts + NVFP4 routed experts (w1/w2/w3). */
static void test_minimax_m3(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_minimax");
    ck *c = open_ck(dir);
    char *hq = shared_text("nvidia--MiniMax-M3-NVFP4_hf_quant_config.json");
    static const char *const pre[] = {"language_model.model.layers.3.self_attn.", "language_model.model.layers.3.block_sparse_moe.shared_experts.",
                                      "language_model.model.layers.3.block_sparse_moe.experts.0.", "language_model.model.layers.3.block_sparse_moe.experts.1."};
    const int n = write_from_layers(c, hq, pre, 4);
    assert_int_equal(n, 6 + 3 + 3 + 3);
    linear(c, "language_model.model.layers.3.block_sparse_moe.gate", "BF16", 8, K_);
    finish(c, hq, NULL);
    free(hq);
    expect_clean(dir, n + 1);
    tu_rmtree(dir);
    free(dir);
}

/* One pass lists every planted problem. */
static void test_every_problem(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_bad");
    ck *c = open_ck(dir);
    const char *P = "model.layers.0.";
    char p[128];
    /* q/k/v: different weight_scale_2 (planted by a different amax on k). */
    snprintf(p, sizeof p, "%sself_attn.q_proj", P), linear(c, p, "NVFP4", N_, K_);
    {
        float *w = rand_w(c, N_, K_);
        uint8_t *q = keep(c, N_ * K_ / 2), *sf = keep(c, N_ * K_ / 16);
        float ws2;
        moq_export_nvfp4_weight(w, N_, K_, 0.25f, q, sf, &ws2);
        snprintf(p, sizeof p, "%sself_attn.k_proj", P);
        add(c, p, "weight", MOQ_DT_U8, 2, N_, K_ / 2, q, N_ * K_ / 2);
        add(c, p, "weight_scale", MOQ_DT_F8_E4M3, 2, N_, K_ / 16, sf, N_ * K_ / 16);
        add_f32(c, p, "weight_scale_2", ws2);
        add_f32(c, p, "input_scale", 4.0f / 2688.0f);
    }
    snprintf(p, sizeof p, "%sself_attn.v_proj", P), linear(c, p, "NVFP4", N_, K_);
    /* o_proj stored BF16 but resolved NVFP4. */
    snprintf(p, sizeof p, "%sself_attn.o_proj", P), linear(c, p, "BF16", N_, K_);
    /* gate_proj: input_scale missing; weight_scale with a NaN at block 5 (--values). */
    {
        float *w = rand_w(c, N_, K_);
        uint8_t *q = keep(c, N_ * K_ / 2), *sf = keep(c, N_ * K_ / 16);
        float ws2;
        moq_export_nvfp4_weight(w, N_, K_, 0.5f, q, sf, &ws2);
        sf[5] = 0x7F; /* e4m3 NaN */
        snprintf(p, sizeof p, "%smlp.gate_proj", P);
        add(c, p, "weight", MOQ_DT_U8, 2, N_, K_ / 2, q, N_ * K_ / 2);
        add(c, p, "weight_scale", MOQ_DT_F8_E4M3, 2, N_, K_ / 16, sf, N_ * K_ / 16);
        add_f32(c, p, "weight_scale_2", ws2);
    }
    /* up_proj: weight_scale [N, K/8] and F32 instead of e4m3; input_scale zero (--values). */
    {
        uint8_t *q = keep(c, N_ * K_ / 2);
        float *sf = keep(c, N_ * K_ / 8 * 4);
        for (int i = 0; i < N_ * K_ / 8; i++) sf[i] = 1.0f;
        snprintf(p, sizeof p, "%smlp.up_proj", P);
        add(c, p, "weight", MOQ_DT_U8, 2, N_, K_ / 2, q, N_ * K_ / 2);
        add(c, p, "weight_scale", MOQ_DT_F32, 2, N_, K_ / 8, sf, N_ * K_ / 8 * 4);
        add_f32(c, p, "weight_scale_2", 1.0f);
        add_f32(c, p, "input_scale", 0.0f);
    }
    /* down_proj: an extra tensor. */
    snprintf(p, sizeof p, "%smlp.down_proj", P), linear(c, p, "NVFP4", N_, K_);
    add_f32(c, p, "weight_scale_inv", 1.0f);
    /* lm_head excluded but stored quantized. */
    linear(c, "lm_head", "FP8", 256, K_);
    finish(c, "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[\"lm_head\"]}}", NULL);

    int n;
    char *all = check_dir(dir, true, &n, NULL);
    static const char *const want[] = {
        "model.layers.0.self_attn.qkv_proj: fused shards have different weight_scale_2 (q_proj=",
        "model.layers.0.mlp.gate_up_proj: fused shards have different weight_scale_2 (gate_proj=",
        "model.layers.0.self_attn.o_proj: stored as BF16 but resolves to nvfp4_linear (rule quant_algo)",
        "model.layers.0.mlp.gate_proj: missing tensor input_scale (scheme NVFP4",
        "model.layers.0.mlp.gate_proj.weight_scale: 1 NaN, 0 Inf, 0 zero, 0 negative of 512 scale values; first at block 5 (row 0, column 5)",
        "model.layers.0.mlp.up_proj.weight_scale: dtype F32, expected F8_E4M3 (scheme NVFP4",
        "model.layers.0.mlp.up_proj.weight_scale: shape [64, 16], expected [64, 8] (scheme NVFP4: one e4m3 scale per group of weights; N=64, K=128, group 16)",
        "model.layers.0.mlp.up_proj.input_scale: 0 NaN, 0 Inf, 1 zero, 0 negative of 1 scale values; first at block 0",
        "model.layers.0.mlp.down_proj.weight_scale_inv: extra tensor: weight_scale_inv is not part of scheme NVFP4",
        "lm_head: holds quantized tensors (weight F8_E4M3, weight_scale, input_scale) but resolves to unquantized_linear (rule exclude-exact)",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(all, want[i])) fail_msg("missing \"%s\" in:\n%s", want[i], all);
    if (n != (int)(sizeof want / sizeof want[0])) fail_msg("%d problems, expected %zu:\n%s", n, sizeof want / sizeof want[0], all);
    free(all);

    /* The CLI lists them all and exits non-zero (the first problem's status). */
    char cmd[1024], out[1 << 14];
    snprintf(cmd, sizeof cmd, "%s check --values %s", tu_moq_bin(), dir);
    int rc = tu_run(cmd, out, sizeof out);
    assert_true(rc == MOQ_ERR_TENSOR || rc == MOQ_ERR_CONFIG);
    assert_non_null(strstr(out, "10 problems"));
    snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), dir);
    rc = tu_run(cmd, out, sizeof out);
    assert_non_null(strstr(out, "8 problems")); /* without --values */
    tu_rmtree(dir);
    free(dir);
}

/* Fused shards with different per-layer algos (MIXED_PRECISION): one config problem. */
static void test_mixed_shards(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_mixshard");
    ck *c = open_ck(dir);
    linear(c, "model.layers.0.self_attn.q_proj", "FP8", N_, K_);
    linear(c, "model.layers.0.self_attn.k_proj", "NVFP4", N_, K_);
    finish(c, "{\"quantization\":{\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"quantized_layers\":{"
              "\"model.layers.0.self_attn.q_proj\":{\"quant_algo\":\"FP8\"},\"model.layers.0.self_attn.k_proj\":{\"quant_algo\":\"NVFP4\",\"group_size\":16}}}}",
           NULL);
    int n;
    char *all = check_dir(dir, false, &n, NULL);
    assert_int_equal(n, 1);
    assert_non_null(strstr(all, "model.layers.0.self_attn.qkv_proj: shards q_proj=FP8 and k_proj=NVFP4 disagree"));
    free(all);
    /* inspect --json: one row per module with method and rule, counts per method. */
    char cmd[1024], out[1 << 15];
    snprintf(cmd, sizeof cmd, "( %s inspect --json %s 2>/dev/null )", tu_moq_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_CONFIG); /* the report, and the problem as the exit status */
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(j, "modules");
    assert_int_equal(cJSON_GetArraySize(mods), 2);
    const cJSON *m0 = cJSON_GetArrayItem(mods, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "method")->valuestring, "fp8_linear");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "rule")->valuestring, "mp-direct");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m0, "contract_found")->valueint, 3);
    const cJSON *meth = cJSON_GetObjectItemCaseSensitive(j, "methods");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(meth, "nvfp4_linear")->valueint, 1);
    cJSON_Delete(j);
    tu_rmtree(dir);
    free(dir);
}

/* Stacked experts as ModelOpt 0.47 exports Llama 4's (tests/data/modelopt_real/llama4_a_nvfp4; layout of
 * transformers' Llama4TextExperts: gate_up_proj [E, H, 2I], down_proj [E, I, H], applied as x · W),
 * NVFP4: e2m1 packed in halves along K, e4m3 scales per 16 along K as <proj>_weight_scale
 * [E, K/16, N], scalar <proj>_weight_scale_2 and <proj>_input_scale. E = 4, H = 64, I = 32. Each
 * round plants one defect; check names the tensor, as the loader (src/moe) does. gpt-oss adds
 * <proj>_bias [E, N] (GptOssExperts.gate_up_proj_bias [E, 2I], down_proj_bias [E, H]). */
static void add3(ck *c, const char *mod, const char *role, moq_dtype dt, int64_t d0, int64_t d1, int64_t d2) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.%s", mod, role);
    const int64_t shape[3] = {d0, d1, d2};
    const size_t n = (size_t)(d0 * d1 * d2) * (dt == MOQ_DT_F32 ? 4 : 1);
    moq_error e = {0};
    if (moq_writer_add(c->w, nm, dt, 3, shape, keep(c, n), n, &e) != MOQ_OK) fail_msg("writer_add %s: %s", nm, e.msg);
}

static void test_stacked_experts(void **state) {
    (void)state;
    static const char hq[] = "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[]}}";
    static const char cfg[] = "{\"architectures\":[\"Llama4ForCausalLM\"],\"model_type\":\"llama4_text\",\"hidden_size\":64,\"intermediate_size\":32,"
                              "\"intermediate_size_mlp\":96,\"num_local_experts\":4,\"num_experts_per_tok\":1,\"num_attention_heads\":4,\"num_hidden_layers\":1}";
    const char *mod = "model.layers.0.feed_forward.experts";
    static const char *const want[] = {
        NULL,
        "model.layers.0.feed_forward.experts.gate_up_proj: shape [4, 32, 48], expected [4, 32, 64]",
        "model.layers.0.feed_forward.experts.down_proj_weight_scale: dtype F32, expected F8_E4M3",
        "model.layers.0.feed_forward.experts: missing tensor down_proj_weight_scale_2",
        "model.layers.0.feed_forward.experts.down_proj_weight_scale: shape [4, 4, 64], expected [4, 2, 64]",
        "model.layers.0.feed_forward.experts.gate_up_proj_amax: extra tensor",
        "model.layers.0.feed_forward.experts: gate_up_proj_bias without down_proj_bias", /* gpt-oss biases [E, N]: both or neither */
        "model.layers.0.feed_forward.experts.down_proj_bias: shape [4, 32], expected [4, 64]",
    };
    for (int round = 0; round < (int)(sizeof want / sizeof want[0]); round++) {
        char *dir = tu_tmpdir("ck_stacked");
        ck *c = open_ck(dir);
        add3(c, mod, "gate_up_proj", MOQ_DT_U8, 4, 64 / 2, round == 1 ? 48 : 64);
        add3(c, mod, "gate_up_proj_weight_scale", MOQ_DT_F8_E4M3, 4, 64 / 16, 64);
        add_f32(c, mod, "gate_up_proj_weight_scale_2", 1e-3f);
        add_f32(c, mod, "gate_up_proj_input_scale", 1e-2f);
        add3(c, mod, "down_proj", MOQ_DT_U8, 4, 32 / 2, 64);
        add3(c, mod, "down_proj_weight_scale", round == 2 ? MOQ_DT_F32 : MOQ_DT_F8_E4M3, 4, round == 4 ? 4 : 32 / 16, 64);
        if (round != 3) add_f32(c, mod, "down_proj_weight_scale_2", 1e-3f);
        add_f32(c, mod, "down_proj_input_scale", 1e-2f);
        if (round == 5) add_f32(c, mod, "gate_up_proj_amax", 1.0f);
        if (round >= 6) add(c, mod, "gate_up_proj_bias", MOQ_DT_BF16, 2, 4, 64, keep(c, 4 * 64 * 2), 4 * 64 * 2);
        if (round == 7) add(c, mod, "down_proj_bias", MOQ_DT_BF16, 2, 4, 32, keep(c, 4 * 32 * 2), 4 * 32 * 2);
        finish(c, hq, cfg);
        int n, mods;
        char *all = check_dir(dir, false, &n, &mods);
        assert_int_equal(mods, 1); /* the experts are one MoE module */
        if (!want[round] ? n != 0 : n != 1 || strncmp(all, want[round], strlen(want[round])) != 0)
            fail_msg("round %d: want %s \"%s\", got %d:\n%s", round, want[round] ? "one problem" : "none", want[round] ? want[round] : "", n, all);
        free(all);
        tu_rmtree(dir);
        free(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_llama_fp8), cmocka_unit_test(test_qwen3_moe), cmocka_unit_test(test_qwen36_mixed),
                                       cmocka_unit_test(test_minimax_m3), cmocka_unit_test(test_every_problem), cmocka_unit_test(test_weight_shape_against_config), cmocka_unit_test(test_mixed_shards),
                                       cmocka_unit_test(test_stacked_experts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
