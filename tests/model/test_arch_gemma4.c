/* test_arch_gemma4.c — the Gemma 4 text stack against transformers' own forward, and its config.json.
 *
 * Oracle: tests/data/hf_tiny/gemma4_text/ref.safetensors (scripts/gen_gemma4_fixtures.py, README
 * there): transformers 5.17's Gemma4ForCausalLM, reloaded in f32 from the bf16 folder, on a 12-token
 * prompt and its 8-token greedy continuation. The tiny model has what NVIDIA's Gemma 4 31B config has:
 * sliding layers 0, 1, 3 (window 4, head_dim 16, 2 KV heads, default RoPE theta 1e4) and global layers
 * 2, 4 with their own head_dim 32 and 1 KV head (global_head_dim, num_global_key_value_heads),
 * attention_k_eq_v (no v_proj: v is the k projection before k_norm), proportional RoPE (theta 1e6,
 * partial_rotary_factor 0.25: 4 of 16 frequencies rotate), the weightless v norm, softmax scale 1,
 * x·w norms, sandwich norms, GeGLU, sqrt(H) embedding scale, per-layer layer_scalar in [0.5, 1.5),
 * final soft-cap 30, tied embeddings. Checked as tests/model/test_arch.c does: prefill of all 20
 * tokens vs transformers, greedy decode ids equal transformers' and its logits vs transformers, decode
 * vs prefill; the same weights under Gemma4ForConditionalGeneration's layout (model.language_model,
 * config in text_config) give the same logits. hf_tiny/gemma4_moe adds the MoE block (26B-A4B shape),
 * checked the same way after its stacked experts are split per expert (measured 4.0e-6; without
 * per_expert_scale, router.scale or post_feedforward_layernorm_2 the greedy ids differ).
 *
 * Tolerance (max |d| / max |ref|): 1e-3 vs transformers, as test_arch.c (there the oracle's RoPE
 * inv_freq was rounded to bf16; here transformers computed it in f32 as moq does: measured 2.9e-6
 * for prefill and decode). Decode vs prefill < 1e-5 (2.4e-6). Mutations of moq measured (the greedy
 * ids fail first; the multimodal-layout prefill error shown): layer_scalar ignored 7.4e-1, softmax
 * scale 1/sqrt(16) instead of 1 9.0e-1, no v norm 6.4e-1, every RoPE frequency of the global layers
 * rotating (proportional read as default) 1.7e-1.
 *
 * Config (model/arch/gemma4.c): the text_config of nvidia/Gemma-4-31B-IT-NVFP4 (tests/data/
 * modelopt_configs.tar.xz) read by moq_gemma4_read: per-layer head sizes, layer types, RoPE, k_eq_v;
 * nvidia/Gemma-4-26B-A4B-NVFP4's MoE sizes; per-layer embeddings, KV-shared layers and bidirectional
 * attention are refused naming the key, also by `moq inspect`.
 */
#include <math.h>

#include "tu.h"
#include "hf_ref.h"
#include "arch_oracle.h"
#include "model/arch/gemma4.h"
#include "model/model.h"


/* Prefill of all 20 tokens, then prompt + greedy decode, against transformers' logits of `model`. */
static void check_dir(const char *model, const char *dir) { hf_ref_check_dir(model, dir, "Gemma4ForCausalLM", 2); }

static void test_vs_transformers(void **st) {
    (void)st;
    char *dir = tu_src_data_path("hf_tiny/gemma4_text");
    check_dir("gemma4_text", dir);
    free(dir);
}

/* The MoE block (hf_tiny/gemma4_moe, the 26B-A4B shape: 4 layers, 4 experts top-2 of intermediate 32,
 * router.scale and per_expert_scale in [0.5, 1.5), router logits of O(1)). transformers saves the
 * experts stacked (experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]), which moq refuses by name;
 * ModelOpt writes them one module per expert, the layout moq reads, so the test splits them so
 * (gate = rows [0, I), up = rows [I, 2I), as Gemma4TextExperts' chunk(2)) and compares with
 * transformers' logits of the stacked model. */
static void test_moe_vs_transformers(void **st) {
    (void)st;
    char *src = tu_src_data_path("hf_tiny/gemma4_moe"), *dst = tu_tmpdir("gemma4_moe_split");
    moq_model *m = NULL;
    moq_error e = {0};
    moq_model_opts o = moq_model_opts_default();
    o.ctx = 32;
    const moq_status st0 = moq_model_open(&m, src, &o, &e);
    TU_ERR(&e, st0, MOQ_ERR_UNSUPPORTED, "model.layers.0.experts.gate_up_proj", "stacked experts [E, 2I, H]");
    assert_null(m);
    char cmd[1024], out[16384]; /* inspect says so too (and exits non-zero: the stacked shapes are problems for `moq check`) */
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' 2>&1", tu_moq_bin(), src);
    assert_int_not_equal(tu_run(cmd, out, sizeof out), 0);
    if (!strstr(out, "stacked experts [E, 2I, H]") || !strstr(out, "refuses it")) fail_msg("%s:\n%s", cmd, out);
    moq_checkpoint *ck = NULL;
    TU_OK(moq_checkpoint_open(&ck, src, NULL, err_));
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dst, err_));
    int n_split = 0;
    for (size_t i = 0; i < moq_checkpoint_tensor_count(ck); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(ck, i);
        const char *x = strstr(t->name, ".experts.");
        if (!x) {
            TU_OK(moq_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err_));
            continue;
        }
        assert_int_equal(t->dtype, MOQ_DT_BF16);
        assert_int_equal(t->ndim, 3);
        const int64_t E = t->shape[0], N = t->shape[1], K = t->shape[2];
        const bool gu = strcmp(x, ".experts.gate_up_proj") == 0;
        const int64_t rows = gu ? N / 2 : N;
        for (int64_t ex = 0; ex < E; ex++)
            for (int part = 0; part < (gu ? 2 : 1); part++) {
                char nm[320];
                snprintf(nm, sizeof nm, "%.*s.experts.%lld.%s.weight", (int)(x - t->name), t->name, (long long)ex,
                         gu ? (part ? "up_proj" : "gate_proj") : "down_proj");
                const uint8_t *p = (const uint8_t *)t->data + ((size_t)(ex * N + part * rows) * (size_t)K) * 2;
                TU_OK(moq_writer_add(w, nm, MOQ_DT_BF16, 2, (const int64_t[]){rows, K}, p, (uint64_t)(rows * K) * 2, err_));
                n_split++;
            }
    }
    assert_int_equal(n_split, 4 * 4 * 3); /* 4 layers x 4 experts x gate, up, down */
    TU_OK(moq_writer_file(w, "config.json", moq_checkpoint_json_text(ck, "config.json"), err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    check_dir("gemma4_moe", dst);
    moq_checkpoint_free(ck);
    tu_rmtree(dst);
    free(dst);
    free(src);
}

/* NVIDIA's layout: Gemma4ForConditionalGeneration, weights under model.language_model, the text
 * fields (global_head_dim, num_global_key_value_heads, ...) in text_config. */
static void test_multimodal_layout(void **st) {
    (void)st;
    char *src = tu_src_data_path("hf_tiny/gemma4_text"), *dst = tu_tmpdir("gemma4_mm");
    moq_checkpoint *ck = NULL;
    TU_OK(moq_checkpoint_open(&ck, src, NULL, err_));
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dst, err_));
    for (size_t i = 0; i < moq_checkpoint_tensor_count(ck); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(ck, i);
        char nm[320];
        if (strncmp(t->name, "model.", 6) == 0) snprintf(nm, sizeof nm, "model.language_model.%s", t->name + 6);
        else snprintf(nm, sizeof nm, "%s", t->name);
        TU_OK(moq_writer_add(w, nm, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err_));
    }
    const char *text = moq_checkpoint_json_text(ck, "config.json");
    assert_non_null(strstr(text, "\"global_head_dim\": 32"));
    const size_t n = strlen(text) + 256;
    char *cfg = malloc(n);
    snprintf(cfg, n, "{\"architectures\": [\"Gemma4ForConditionalGeneration\"], \"model_type\": \"gemma4\", \"tie_word_embeddings\": true, "
             "\"text_config\": %s}", text);
    TU_OK(moq_writer_file(w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    free(cfg);
    ref r;
    hf_ref_load(&r, "gemma4_text");
    moq_model_opts o = moq_model_opts_default();
    o.ctx = 32;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dst, &o, err_));
    assert_string_equal(moq_model_architecture(m), "Gemma4ForConditionalGeneration");
    float *got = malloc(sizeof(float) * NT * (size_t)r.V);
    TU_OK(moq_model_prefill(m, r.tokens, NT, got, err_));
    const double e = hf_rel_err(got, r.logits, NT * r.V);
    print_message("  Gemma4ForConditionalGeneration vs transformers %.2e\n", e);
    assert_true(e < 1e-3);
    free(got);
    moq_model_free(m);
    moq_checkpoint_free(r.ck);
    moq_checkpoint_free(ck);
    tu_rmtree(dst);
    free(dst);
    free(src);
}

/* A checkpoint of one tensor with config.json = text, for moq_gemma4_read. */
static moq_checkpoint *cfg_ckpt(const char *tag, const char *text, char **dir) {
    *dir = tu_tmpdir(tag);
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, *dir, err_));
    static const uint16_t one[1] = {0x3f80};
    TU_OK(moq_writer_add(w, "model.norm.weight", MOQ_DT_BF16, 1, (const int64_t[]){1}, one, 2, err_));
    TU_OK(moq_writer_file(w, "config.json", text, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, *dir, NULL, err_));
    return c;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* nvidia/Gemma-4-31B-IT-NVFP4: 60 layers, every 6th global (head_dim 512, 4 KV heads, k_eq_v,
 * proportional RoPE 0.25 theta 1e6), sliding ones head_dim 256 with 16 KV heads, window 1024. */
static void test_nvidia_31b_config(void **st) {
    (void)st;
    char *p = tu_data_path("modelopt_configs/nvidia--Gemma-4-31B-IT-NVFP4_config.json"), *dir = NULL;
    char *text = read_text(p);
    moq_checkpoint *c = cfg_ckpt("gemma4_31b", text, &dir);
    const moq_arch *a = moq_checkpoint_arch(c);
    assert_string_equal(a->architecture, "Gemma4ForConditionalGeneration");
    assert_true(moq_model_architecture_supported(a->architecture));
    enum { L = 60 };
    assert_int_equal(a->num_hidden_layers, L);
    bool sl[L];
    int64_t hd[L], kv[L];
    moq_gemma4_cfg g;
    TU_OK(moq_gemma4_read(c, L, (double)a->max_position_embeddings, a->head_dim, a->num_key_value_heads, &g, sl, hd, kv, err_));
    for (int l = 0; l < L; l++) {
        const bool global = (l + 1) % 6 == 0;
        assert_int_equal(sl[l], !global);
        assert_int_equal(hd[l], global ? 512 : 256);
        assert_int_equal(kv[l], global ? 4 : 16);
    }
    assert_true(g.k_eq_v);
    assert_int_equal(g.g.sliding_window, 1024);
    assert_true(g.g.final_logit_softcapping == 30.0);
    assert_string_equal(g.g.rope_global.type, "proportional");
    assert_true(g.g.rope_global.partial_rotary_factor == 0.25 && g.g.rope_global.theta == 1e6);
    assert_string_equal(g.g.rope_local.type, "");
    assert_true(g.g.rope_local.theta == 1e4);
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
    free(text);
    free(p);
}

/* nvidia/Gemma-4-26B-A4B-NVFP4: 30 layers, the MoE block (128 experts, top 8, intermediate 704)
 * beside an MLP of 2112, global layers head_dim 512 with 2 KV heads. */
static void test_nvidia_26b_config(void **st) {
    (void)st;
    char *p = tu_data_path("modelopt_configs/nvidia--Gemma-4-26B-A4B-NVFP4_config.json"), *dir = NULL;
    char *text = read_text(p);
    moq_checkpoint *c = cfg_ckpt("gemma4_26b", text, &dir);
    const moq_arch *a = moq_checkpoint_arch(c);
    enum { L = 30 };
    assert_int_equal(a->num_hidden_layers, L);
    bool sl[L];
    int64_t hd[L], kv[L];
    moq_gemma4_cfg g;
    TU_OK(moq_gemma4_read(c, L, (double)a->max_position_embeddings, a->head_dim, a->num_key_value_heads, &g, sl, hd, kv, err_));
    assert_true(g.moe);
    assert_int_equal(g.n_experts, 128);
    assert_int_equal(g.top_k, 8);
    assert_int_equal(g.moe_I, 704);
    for (int l = 0; l < L; l++) {
        assert_int_equal(hd[l], (l + 1) % 6 == 0 ? 512 : 256);
        assert_int_equal(kv[l], (l + 1) % 6 == 0 ? 2 : 8);
    }
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
    free(text);
    free(p);
}

/* A Gemma 4 config feature moq does not run: moq_model_open fails naming config.json and the key. */
static void refused(const char *tag, const char *cfg, moq_status code, const char *msg) { ao_open_cfg_err(tag, cfg, code, msg); }

#define BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_hidden_layers\": 2, " \
             "\"vocab_size\": 8, \"intermediate_size\": 8"
static void test_config_refusals(void **st) {
    (void)st;
    refused("g4_moe", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"enable_moe_block\": true, \"num_experts\": 4, \"top_k_experts\": 5, "
            "\"moe_intermediate_size\": 8}", MOQ_ERR_CONFIG, "top_k_experts 5");
    refused("g4_ple", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"hidden_size_per_layer_input\": 256}", MOQ_ERR_UNSUPPORTED,
            "hidden_size_per_layer_input is 256");
    refused("g4_shared", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"num_kv_shared_layers\": 1}", MOQ_ERR_UNSUPPORTED,
            "num_kv_shared_layers is 1");
    refused("g4_bidi", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"use_bidirectional_attention\": \"all\"}", MOQ_ERR_UNSUPPORTED,
            "use_bidirectional_attention");
    refused("g4_act", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"hidden_activation\": \"silu\"}", MOQ_ERR_UNSUPPORTED,
            "hidden_activation is \"silu\"");
    refused("g4_gdim", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"global_head_dim\": 7}", MOQ_ERR_CONFIG, "layer 1: head_dim 7");
    refused("g4_gkv", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"attention_k_eq_v\": true, \"num_global_key_value_heads\": 3}",
            MOQ_ERR_CONFIG, "layer 1: 4 attention heads, 3 KV heads");
    refused("g4_plc", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"per_layer_config\": {\"5\": {\"head_dim\": 32}}}", MOQ_ERR_CONFIG,
            "per_layer_config.5");
    refused("g4_rope", "{\"architectures\": [\"Gemma4ForCausalLM\"], " BASE ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
            "\"proportional\", \"partial_rotary_factor\": 2}}}", MOQ_ERR_CONFIG, "partial_rotary_factor 2");
}
#undef BASE

/* `moq inspect` on NVIDIA's two Gemma 4 configs: both run (no "refuses it"); a config with per-layer
 * embeddings is named as what `moq run` refuses (inspect exits 0 either way: it is informational). */
static void test_inspect_nvidia_configs(void **st) {
    (void)st;
    static const struct { const char *file; bool refused; } k[] = {
        {"modelopt_configs/nvidia--Gemma-4-31B-IT-NVFP4_config.json", false},
        {"modelopt_configs/nvidia--Gemma-4-26B-A4B-NVFP4_config.json", false},
        {NULL, true},
    };
    for (size_t i = 0; i < 3; i++) {
        char *p = k[i].file ? tu_data_path(k[i].file) : NULL, *dir = NULL;
        char *text = p ? read_text(p) : strdup("{\"architectures\": [\"Gemma4ForCausalLM\"], \"hidden_size\": 64, \"num_attention_heads\": 4, "
                                               "\"num_hidden_layers\": 2, \"vocab_size\": 8, \"hidden_size_per_layer_input\": 256}");
        char tag[32];
        snprintf(tag, sizeof tag, "g4_inspect%zu", i);
        moq_checkpoint *c = cfg_ckpt(tag, text, &dir);
        moq_checkpoint_free(c);
        char cmd[1024], out[16384];
        snprintf(cmd, sizeof cmd, "'%s' inspect '%s' 2>&1", tu_moq_bin(), dir);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        const bool refused = strstr(out, "refuses it") != NULL;
        if (refused != k[i].refused || (refused && !strstr(out, "hidden_size_per_layer_input is 256"))) fail_msg("%s:\n%s", cmd, out);
        tu_rmtree(dir);
        free(dir);
        free(text);
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vs_transformers),
        cmocka_unit_test(test_moe_vs_transformers),
        cmocka_unit_test(test_multimodal_layout),
        cmocka_unit_test(test_nvidia_31b_config),
        cmocka_unit_test(test_nvidia_26b_config),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_inspect_nvidia_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
