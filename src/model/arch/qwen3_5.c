/* qwen3_5.c — Qwen3.5 / 3.6 config fields, one row each (see qwen3_5.h). The blocks' tensor names:
 * linear_attn.* (model/attn/gdn.c), self_attn.{q,k,v,o}_proj with q_proj holding [query | gate] per
 * head and q_norm / k_norm, mlp.{gate, experts.N.*, shared_expert, shared_expert_gate} (model.c's rows). */
#include "model/arch/qwen3_5.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/arch/layer_types.h"

static const struct {
    const char *key;
    size_t      off;
    int64_t     dflt; /* Qwen3_5TextConfig / Qwen3_5MoeTextConfig default */
} int_fields[] = {
    {"linear_num_key_heads",            offsetof(moq_qwen3_5_cfg, linear_num_key_heads),            16},
    {"linear_key_head_dim",             offsetof(moq_qwen3_5_cfg, linear_key_head_dim),             128},
    {"linear_num_value_heads",          offsetof(moq_qwen3_5_cfg, linear_num_value_heads),          32},
    {"linear_value_head_dim",           offsetof(moq_qwen3_5_cfg, linear_value_head_dim),           128},
    {"linear_conv_kernel_dim",          offsetof(moq_qwen3_5_cfg, linear_conv_kernel_dim),          4},
    {"full_attention_interval",         offsetof(moq_qwen3_5_cfg, full_attention_interval),         4},
    {"shared_expert_intermediate_size", offsetof(moq_qwen3_5_cfg, shared_expert_intermediate_size), 0},
};

static moq_status read_all(const cJSON *j, int64_t L, moq_qwen3_5_cfg *d, bool *linear, moq_error *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (!cJSON_IsObject(text)) text = NULL;
    bool p = false;
    for (size_t i = 0; i < sizeof int_fields / sizeof int_fields[0]; i++) {
        int64_t *dst = (int64_t *)(void *)((char *)d + int_fields[i].off);
        *dst = int_fields[i].dflt;
        MOQ_TRY(moq_json_int(j, int_fields[i].key, dst, &p, "config.json", NULL, err));
        if (!p && text) MOQ_TRY(moq_json_int(text, int_fields[i].key, dst, &p, "config.json", "text_config", err));
        if (*dst < (i + 1 == sizeof int_fields / sizeof int_fields[0] ? 0 : 1))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %lld, expected a positive value", int_fields[i].key, (long long)*dst);
    }
    d->attn_output_gate = true;
    MOQ_TRY(moq_json_bool(j, "attn_output_gate", &d->attn_output_gate, &p, "config.json", NULL, err));
    if (!p && text) MOQ_TRY(moq_json_bool(text, "attn_output_gate", &d->attn_output_gate, &p, "config.json", "text_config", err));
    /* partial_rotary_factor: rope_parameters (transformers 5), else the top-level key; default 0.25 */
    d->partial_rotary_factor = 0.25;
    const cJSON *scopes[] = {j, text};
    for (size_t s = 0; s < 2; s++) {
        if (!scopes[s]) continue;
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(scopes[s], "rope_parameters");
        p = false;
        if (cJSON_IsObject(rp)) MOQ_TRY(moq_json_num(rp, "partial_rotary_factor", &d->partial_rotary_factor, &p, "config.json", "rope_parameters", err));
        if (!p) MOQ_TRY(moq_json_num(scopes[s], "partial_rotary_factor", &d->partial_rotary_factor, &p, "config.json", s ? "text_config" : NULL, err));
        if (p) break;
    }
    if (!(d->partial_rotary_factor > 0 && d->partial_rotary_factor <= 1))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "partial_rotary_factor %g, expected a value in (0, 1]", d->partial_rotary_factor);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (!lt && text) lt = cJSON_GetObjectItemCaseSensitive(text, "layer_types");
    if (lt && !cJSON_IsNull(lt)) return moq_layer_types(lt, L, "linear_attention", linear, err);
    for (int64_t l = 0; l < L; l++) linear[l] = (l + 1) % d->full_attention_interval != 0;
    return MOQ_OK;
}

moq_status moq_qwen3_5_read(const moq_checkpoint *c, int64_t L, moq_qwen3_5_cfg *cfg, bool *linear, moq_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the linear attention sizes");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const moq_status st = read_all(j, L, cfg, linear, err);
    cJSON_Delete(j);
    return st;
}
