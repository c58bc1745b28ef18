/* gemma4.c — Gemma 4 text config fields (see gemma4.h). With enable_moe_block every layer also has
 * router.{proj, scale, per_expert_scale}, experts.N.{gate,up,down}_proj (as ModelOpt exports them)
 * and post_feedforward_layernorm_1, pre_/post_feedforward_layernorm_2 (model.c gemma4_moe).
 * The blocks are Gemma 3's (model.c's row):
 * self_attn.{q,k,v,o}_proj with q_norm / k_norm (global k_eq_v layers: no v_proj) and a weightless
 * RMS norm of v, mlp.{gate,up,down}_proj with gelu_pytorch_tanh, the four sandwich norms, and per layer
 * a `layer_scalar` [1] that multiplies the residual stream at the layer's end. Unlike Gemma 3 the
 * norms are x·w (Gemma4RMSNorm), not x·(1 + w). */
#include "model/arch/gemma4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/arch/layer_types.h"

/* Gemma4TextConfig.__post_init__ default_rope_params */
static void rope_init(moq_rope_params *p, const char *type, double theta, double prf, double max_pos) {
    memset(p, 0, sizeof *p);
    snprintf(p->type, sizeof p->type, "%s", type);
    p->theta = theta;
    p->factor = 1.0;
    p->low_freq_factor = 1.0;
    p->high_freq_factor = 4.0;
    p->original_max_pos = max_pos;
    p->beta_fast = 32.0;
    p->beta_slow = 1.0;
    p->partial_rotary_factor = prf;
}

/* Features of the Gemma 4 family moq does not run: refused with the key that asks for them. */
static moq_status refuse_unrun(const cJSON *j, moq_error *err) {
    bool p = false;
    int64_t ple = 0, shared = 0;
    const char *bidi = NULL, *act = NULL;
    MOQ_TRY(moq_json_int(j, "hidden_size_per_layer_input", &ple, &p, "config.json", NULL, err));
    if (ple > 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "hidden_size_per_layer_input is %lld: per-layer embeddings (Gemma 4 E2B/E4B) are not "
                        "run by moq; expected 0 (as in NVIDIA's Gemma 4 31B / 26B-A4B checkpoints)", (long long)ple);
    MOQ_TRY(moq_json_int(j, "num_kv_shared_layers", &shared, &p, "config.json", NULL, err));
    if (shared > 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "num_kv_shared_layers is %lld: KV-shared layers are not run by moq; expected 0", (long long)shared);
    MOQ_TRY(moq_json_str(j, "use_bidirectional_attention", &bidi, &p, "config.json", NULL, err));
    if (p && strcmp(bidi, "all") == 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "use_bidirectional_attention is \"all\"; expected null or \"vision\" (causal text attention)");
    MOQ_TRY(moq_json_str(j, "hidden_activation", &act, &p, "config.json", NULL, err));
    if (p && strcmp(act, "gelu_pytorch_tanh") != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "hidden_activation is \"%s\", expected \"gelu_pytorch_tanh\"", act);
    return MOQ_OK;
}

/* per_layer_config {"<layer>": {"head_dim": n, "num_key_value_heads": n}} (transformers' saved form). */
static moq_status read_per_layer(const cJSON *plc, int64_t L, int64_t *head_dim, int64_t *kv_heads, moq_error *err) {
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, plc) {
        char *end = NULL;
        const long l = strtol(e->string ? e->string : "", &end, 10);
        char path[64];
        snprintf(path, sizeof path, "per_layer_config.%.20s", e->string ? e->string : "");
        if (!e->string || !e->string[0] || *end || l < 0 || l >= L)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s: key is not a layer index in [0, %lld)", path, (long long)L);
        if (!cJSON_IsObject(e)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %s, expected an object", path, moq_json_type(e));
        bool p = false;
        MOQ_TRY(moq_json_int(e, "head_dim", &head_dim[l], &p, "config.json", path, err));
        MOQ_TRY(moq_json_int(e, "num_key_value_heads", &kv_heads[l], &p, "config.json", path, err));
    }
    return MOQ_OK;
}

static moq_status read_all(const cJSON *j, int64_t L, double max_pos, int64_t base_D, int64_t base_KV, moq_gemma4_cfg *d, bool *sliding,
                           int64_t *head_dim, int64_t *kv_heads, moq_error *err) {
    bool p = false;
    MOQ_TRY(refuse_unrun(j, err));
    d->g.query_pre_attn_scalar = 1.0; /* Gemma4TextAttention.scaling = 1.0 */
    d->g.sliding_window = 512;
    MOQ_TRY(moq_json_num(j, "final_logit_softcapping", &d->g.final_logit_softcapping, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_int(j, "sliding_window", &d->g.sliding_window, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_bool(j, "attention_k_eq_v", &d->k_eq_v, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_bool(j, "enable_moe_block", &d->moe, &p, "config.json", NULL, err));
    if (d->moe) { /* Gemma4TextRouter / Gemma4TextExperts sizes */
        MOQ_TRY(moq_json_int(j, "num_experts", &d->n_experts, &p, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "top_k_experts", &d->top_k, &p, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "moe_intermediate_size", &d->moe_I, &p, "config.json", NULL, err));
        if (d->n_experts < 1 || d->top_k < 1 || d->top_k > d->n_experts || d->moe_I < 1)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "enable_moe_block with num_experts %lld, top_k_experts %lld, moe_intermediate_size %lld; "
                            "expected 1 <= top_k_experts <= num_experts and a positive size", (long long)d->n_experts, (long long)d->top_k,
                            (long long)d->moe_I);
    }
    if (d->g.sliding_window < 1 || d->g.final_logit_softcapping < 0)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "sliding_window %lld, final_logit_softcapping %g; expected a positive window and a "
                        "soft-capping >= 0 or null", (long long)d->g.sliding_window, d->g.final_logit_softcapping);
    /* which layers slide: layer_types, else 5 sliding : 1 global; the last layer is always global */
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (lt && !cJSON_IsNull(lt)) MOQ_TRY(moq_layer_types(lt, L, "sliding_attention", sliding, err));
    else
        for (int64_t l = 0; l < L; l++) sliding[l] = (l + 1) % 6 != 0;
    sliding[L - 1] = false;
    /* RoPE per layer type */
    rope_init(&d->g.rope_global, "proportional", 1e6, 0.25, max_pos);
    rope_init(&d->g.rope_local, "", 1e4, 0, max_pos);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (cJSON_IsObject(rp)) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(rp, "full_attention"), *s = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (cJSON_IsObject(g)) MOQ_TRY(moq_gemma_rope_obj(g, "rope_parameters.full_attention", &d->g.rope_global, err));
        if (cJSON_IsObject(s)) MOQ_TRY(moq_gemma_rope_obj(s, "rope_parameters.sliding_attention", &d->g.rope_local, err));
    }
    if (!strcmp(d->g.rope_global.type, "default")) d->g.rope_global.type[0] = 0;
    if (!strcmp(d->g.rope_local.type, "default")) d->g.rope_local.type[0] = 0;
    /* head_dim and KV heads per layer */
    for (int64_t l = 0; l < L; l++) head_dim[l] = base_D, kv_heads[l] = base_KV;
    const cJSON *plc = cJSON_GetObjectItemCaseSensitive(j, "per_layer_config");
    if (cJSON_IsObject(plc)) {
        MOQ_TRY(read_per_layer(plc, L, head_dim, kv_heads, err));
    } else {
        int64_t gd = 512, gkv = 0;
        MOQ_TRY(moq_json_int(j, "global_head_dim", &gd, &p, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "num_global_key_value_heads", &gkv, &p, "config.json", NULL, err));
        for (int64_t l = 0; l < L; l++)
            if (!sliding[l]) head_dim[l] = gd, kv_heads[l] = d->k_eq_v && p ? gkv : base_KV;
    }
    for (int64_t l = 0; l < L; l++)
        if (head_dim[l] < 2 || head_dim[l] % 2 || kv_heads[l] < 1)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "layer %lld: head_dim %lld, num_key_value_heads %lld (global_head_dim, "
                            "num_global_key_value_heads or per_layer_config); expected an even head_dim >= 2 and >= 1 KV head",
                            (long long)l, (long long)head_dim[l], (long long)kv_heads[l]);
    return MOQ_OK;
}

moq_status moq_gemma4_read(const moq_checkpoint *c, int64_t L, double max_pos, int64_t base_D, int64_t base_KV, moq_gemma4_cfg *cfg,
                           bool *sliding, int64_t *head_dim, int64_t *kv_heads, moq_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the Gemma 4 fields");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    const moq_status st = read_all(cJSON_IsObject(tc) ? tc : j, L, max_pos, base_D, base_KV, cfg, sliding, head_dim, kv_heads, err);
    cJSON_Delete(j);
    return st;
}
