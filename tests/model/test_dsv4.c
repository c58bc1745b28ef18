/* test_dsv4.c — DeepSeek-V4 (DeepseekV4ForCausalLM) against transformers' own forward.
 *
 * Oracle: tests/data/hf_tiny/deepseek_v4/ref.safetensors, the logits transformers 5.17 computed on
 * the CPU for the checkpoint beside it (scripts/gen_arch_fixtures.py deepseek_v4; README there):
 * 20 tokens = the 12-token prompt + transformers' greedy continuation (its own cached decode). The
 * model has a sliding-only layer (window 4), a CSA layer (rate 4, index_topk 2: from position 11 on
 * the indexer drops entries) and an HCA layer (rate 8), mHC with 4 streams, a hash-routed first
 * layer, sqrtsoftplus routing with the selection bias and swiglu_limit 2 (which binds: the generator
 * triples the gate weights). Checked, as tests/model/test_arch.c does for the other families:
 *   1. prefill of all 20 tokens vs transformers' logits (max |d| / max |ref| < 1e-3);
 *   2. prefill of the prompt, then greedy decode: ids equal transformers' greedy ids, logits within 1e-3;
 *   3. decode vs prefill (same arithmetic, other order of positions) within 1e-5;
 *   4. the prompt, then the other 8 positions in one call, vs one prefill of all: within 1e-5.
 * Measured (2026-12-01): prefill 1.6e-4, decode 1.0e-4, decode vs prefill 1.0e-6. Each of these
 * mistakes, made on purpose once, fails it: the indexer keeping every entry, no inverse RoPE of the
 * attention output, one Sinkhorn iteration (3.6e-1), no swiglu_limit on the shared expert (the
 * other three change a greedy id).
 * DeepSeek-V3.2 past index_topk: hf_tiny/deepseek_v32 (the same generator; 3 MLA layers with the
 * DSA indexer keeping index_topk 5 of up to 20 keys, 16 indexer heads), the same three checks.
 * Measured: prefill 4.6e-4, decode 5.5e-4 (the generator's bf16-rounded inv_freq, as deepseek_v3_a's
 * 3.2e-4, here also in the indexer's scores), decode vs prefill 8.8e-7. Keeping every key instead (what
 * the former context cap computed) changes the first greedy id. The indexer's tensors are needed only
 * when the context exceeds index_topk (test_dsa_needs_indexer).
 * Config errors: legacy spellings (compress_ratios, num_hash_layers) read as the published
 * checkpoints write them; bad values name the key.
 */
#include <math.h>

#include "tu.h"
#include "arch_oracle.h"
#include "hf_ref.h"

/* transformers' greedy step under the generator's min_new_tokens = 8: the argmax with the
 * eos_token_id (1 in these configs) suppressed (deepseek_v32's 7th step: eos 2.955 > id 33 2.881). */
enum { EOS = 1 };
static int argmax(const float *x, int64_t n) { return hf_argmax_except(x, n, EOS); }

/* hf_tiny/<model> against its ref.safetensors: prefill, then greedy decode (see the top). */
static void check_hf(const char *model, const char *arch) {
    char rel[128];
    snprintf(rel, sizeof rel, "hf_tiny/%s", model);
    char *dir = tu_src_data_path(rel);
    ref r;
    hf_ref_load(&r, model);
    const int32_t *tok = r.tokens, *greedy = r.greedy;
    const float *want = r.logits;
    const int64_t V = r.V;
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 2;
    o.ctx = 64;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    assert_string_equal(moq_model_architecture(m), arch);
    assert_int_equal(moq_model_vocab_size(m), V);
    float *pre = malloc(sizeof(float) * NT * (size_t)V), *dec = malloc(sizeof(float) * NT * (size_t)V);
    TU_OK(moq_model_prefill(m, tok, NT, pre, err_));
    const double e1 = hf_rel_err(pre, want, NT * V);
    moq_model_reset(m);
    TU_OK(moq_model_prefill(m, tok, NP, dec, err_));
    int32_t next = (int32_t)argmax(dec + (NP - 1) * V, V);
    for (int j = 0; j < NG; j++) {
        assert_int_equal(next, greedy[j]);
        TU_OK(moq_model_decode(m, next, err_));
        memcpy(dec + (NP + j) * V, moq_model_logits(m), sizeof(float) * (size_t)V);
        next = (int32_t)argmax(moq_model_logits(m), V);
    }
    const double e2 = hf_rel_err(dec + NP * V, want + NP * V, NG * V), e3 = hf_rel_err(dec + NP * V, pre + NP * V, NG * V);
    /* 4. two prefill calls, the second of 8 positions from 12 (windows closing inside a later chunk) */
    moq_model_reset(m);
    TU_OK(moq_model_prefill(m, tok, NP, dec, err_));
    TU_OK(moq_model_prefill(m, tok + NP, NG, dec + NP * V, err_));
    const double e4 = hf_rel_err(dec, pre, NT * V);
    assert_true(e4 < 1e-5);
    print_message("  %-14s prefill vs transformers %.2e, decode vs transformers %.2e, decode vs prefill %.2e\n", model, e1, e2, e3);
    assert_true(e1 < 1e-3);
    assert_true(e2 < 1e-3);
    assert_true(e3 < 1e-5);
    free(pre);
    free(dec);
    moq_model_free(m);
    moq_checkpoint_free(r.ck);
    free(dir);
}

static void test_deepseek_v4(void **st) {
    (void)st;
    check_hf("deepseek_v4", "DeepseekV4ForCausalLM");
}

/* DeepSeek-V3.2 past index_topk (5 of up to 20 keys): the indexer picks the keys of every layer. */
static void test_deepseek_v32_dsa(void **st) {
    (void)st;
    check_hf("deepseek_v32", "DeepseekV32ForCausalLM");
}

/* The fixture's config.json in the legacy spelling of the published checkpoints (nvidia/DeepSeek-V4-*:
 * compress_ratios with compress_rate_hca, num_hash_layers, qk_rope_head_dim, rope_scaling +
 * compress_rope_theta): the same model, so the same logits bit for bit. */
static const char k_legacy[] =
    "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"model_type\": \"deepseek_v4\", \"vocab_size\": 128, \"hidden_size\": 64,"
    " \"moe_intermediate_size\": 32, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
    " \"head_dim\": 32, \"q_lora_rank\": 32, \"qk_rope_head_dim\": 8, \"num_experts_per_tok\": 2, \"n_routed_experts\": 8,"
    " \"n_shared_experts\": 1, \"scoring_func\": \"sqrtsoftplus\", \"norm_topk_prob\": true, \"routed_scaling_factor\": 1.5,"
    " \"max_position_embeddings\": 256, \"rope_theta\": 10000, \"compress_rope_theta\": 160000,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16, \"original_max_position_embeddings\": 16, \"beta_fast\": 32, \"beta_slow\": 1},"
    " \"compress_ratios\": [0, 4, 128], \"compress_rate_hca\": 8, \"num_hash_layers\": 1, \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20,"
    " \"hc_eps\": 1e-06, \"swiglu_limit\": 2.0, \"sliding_window\": 4, \"o_groups\": 2, \"o_lora_rank\": 16, \"index_n_heads\": 8,"
    " \"index_head_dim\": 16, \"index_topk\": 2, \"tie_word_embeddings\": false, \"rms_norm_eps\": 1e-06}";

static float *logits_of(const char *dir, const int32_t *tok, int n, int64_t *V) {
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 1;
    o.ctx = 32;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    *V = moq_model_vocab_size(m);
    float *l = malloc(sizeof(float) * (size_t)(n * *V));
    TU_OK(moq_model_prefill(m, tok, n, l, err_));
    moq_model_free(m);
    return l;
}

static void test_legacy_config(void **st) {
    (void)st;
    char *src = tu_src_data_path("hf_tiny/deepseek_v4"), *dst = tu_tmpdir("dsv4_legacy"), path[1024];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    void *w = tu_read_file(path, &len);
    free(tu_write_file(dst, "model.safetensors", w, len));
    free(w);
    free(tu_write_file(dst, "config.json", k_legacy, strlen(k_legacy)));
    static const int32_t tok[NT] = {1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 2, 54, 70, 94, 113, 97, 92, 96, 48, 92};
    int64_t V1 = 0, V2 = 0;
    float *a = logits_of(src, tok, NT, &V1), *b = logits_of(dst, tok, NT, &V2);
    assert_int_equal(V1, V2);
    assert_memory_equal(a, b, sizeof(float) * (size_t)(NT * V1));
    free(a), free(b);
    tu_rmtree(dst);
    free(dst), free(src);
}

/* Bad values name config.json and the key. */
static void test_config_errors(void **st) {
    (void)st;
    static const char base[] = "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"vocab_size\": 128, \"hidden_size\": 64,"
                               " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, ";
    static const struct { const char *tail, *msg; } c[] = {
        {"\"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"]}", "layer_types[1]"},
        {"\"compress_ratios\": [0, 4, 64]}", "compress_ratios[2]"},
        {"\"compress_ratios\": [0, 4]}", "at least num_hidden_layers"},
        {"\"mlp_layer_types\": [\"moe\", \"dense\", \"moe\"]}", "mlp_layer_types[1]"},
        {"\"scoring_func\": \"relu\"}", "scoring_func"},
        {"\"head_dim\": 32, \"qk_rope_head_dim\": 7}", "qk_rope_head_dim 7"},
        {"\"compress_rates\": {\"compressed_sparse_attention\": 0}}", "compress rate"},
        {"\"swiglu_limit\": -1}", "swiglu_limit"},
        {"\"num_hash_layers\": -2}", "num_hash_layers"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char cfg[1024];
        snprintf(cfg, sizeof cfg, "%s%s", base, c[i].tail);
        ao_open_cfg_err("dsv4_cfg_err", cfg, MOQ_ERR_CONFIG, c[i].msg);
    }
}

/* deepseek_v3_a's weights (no indexer) as DeepSeek-V3.2 with index_topk 4: a context of 4 opens (every
 * key kept), 64 needs the indexer and names its first tensor. */
static void test_dsa_needs_indexer(void **st) {
    (void)st;
    char *src = tu_src_data_path("hf_tiny/deepseek_v3_a"), *dst = tu_tmpdir("dsv32_idx"), path[1024];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    void *w = tu_read_file(path, &len);
    free(tu_write_file(dst, "model.safetensors", w, len));
    free(w);
    snprintf(path, sizeof path, "%s/config.json", src);
    char *cfg = tu_read_file(path, &len), *arch = strstr(cfg, "DeepseekV3ForCausalLM"), out[8192];
    assert_non_null(arch);
    assert_true(len < 7000);
    snprintf(out, sizeof out, "{\"index_topk\": 4, %.*sDeepseekV32ForCausalLM%s", (int)(arch - cfg - 1), cfg + 1, arch + strlen("DeepseekV3ForCausalLM"));
    free(cfg);
    free(tu_write_file(dst, "config.json", out, strlen(out)));
    moq_model_opts o = moq_model_opts_default();
    o.ctx = 4;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dst, &o, err_));
    moq_model_free(m);
    m = NULL;
    o.ctx = 64;
    moq_error e = {0};
    const moq_status s = moq_model_open(&m, dst, &o, &e);
    TU_ERR(&e, s, MOQ_ERR_TENSOR, "model.layers.0.self_attn.indexer.wq_b", "missing");
    assert_null(m);
    tu_rmtree(dst);
    free(dst), free(src);
}

/* DeepSeek's own layout (embed.weight, no `model.` prefix) is refused by name, not as a missing tensor. */
static void test_native_layout_refused(void **st) {
    (void)st;
    char *dst = tu_tmpdir("dsv4_native");
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dst, err_));
    static const uint16_t one[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
    TU_OK(moq_writer_add(w, "embed.weight", MOQ_DT_BF16, 2, (const int64_t[]){2, 2}, one, 8, err_));
    TU_OK(moq_writer_file(w, "config.json", k_legacy, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_model *m = NULL;
    moq_error e = {0};
    const moq_status s = moq_model_open(&m, dst, NULL, &e);
    TU_ERR(&e, s, MOQ_ERR_UNSUPPORTED, "embed.weight", "own tensor layout");
    assert_null(m);
    tu_rmtree(dst);
    free(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek_v4),
        cmocka_unit_test(test_deepseek_v32_dsa),
        cmocka_unit_test(test_dsa_needs_indexer),
        cmocka_unit_test(test_legacy_config),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_native_layout_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
