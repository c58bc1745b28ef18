/* hf_config.c — the architecture fields of config.json into moq_arch.
 *
 * Multimodal configs (Gemma 3/4, Llama 4, Qwen-VL, Kimi-VL) keep the decoder's fields under
 * text_config; a field absent at the top level is looked up there. Several names exist for the
 * expert count across families; the first present wins, in the order of the table below.
 * A field of the wrong type is an error naming the key ("config.json: hidden_size is a string,
 * expected an integer"). Tested by tests/io/test_checkpoint.c.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/json.h"

typedef struct int_field {
    const char *key;
    size_t      off;
} int_field;

#define F(key, field) {key, offsetof(moq_arch, field)}
/* One row per config.json integer key; rows for the same field: first present wins. */
static const int_field int_fields[] = {
    F("hidden_size", hidden_size),
    F("num_hidden_layers", num_hidden_layers),
    F("num_attention_heads", num_attention_heads),
    F("num_key_value_heads", num_key_value_heads),
    F("head_dim", head_dim),
    F("intermediate_size", intermediate_size),
    F("moe_intermediate_size", moe_intermediate_size),
    F("num_experts", num_experts),          /* Qwen3-MoE            */
    F("num_local_experts", num_experts),    /* Mixtral, Llama 4     */
    F("n_routed_experts", num_experts),     /* DeepSeek, Kimi, GLM  */
    F("num_experts_per_tok", num_experts_per_tok),
    F("vocab_size", vocab_size),
    F("max_position_embeddings", max_position_embeddings),
};
#undef F

static moq_status get_int(const cJSON *top, const cJSON *text, const char *key, int64_t *out, bool *found,
                          const char *file, moq_error *err) {
    bool p = false, in_text = false;
    MOQ_TRY(moq_json_int(top, key, out, &p, file, NULL, err));
    if (!p && text) {
        MOQ_TRY(moq_json_int(text, key, out, &p, file, "text_config", err));
        in_text = p;
    }
    if (p && *out < 0)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s%s is %lld, expected a value >= 0", in_text ? "text_config." : "", key, (long long)*out);
    *found = p;
    return MOQ_OK;
}

static moq_status get_num(const cJSON *top, const cJSON *text, const char *key, double *out,
                          const char *file, moq_error *err) {
    bool p = false;
    MOQ_TRY(moq_json_num(top, key, out, &p, file, NULL, err));
    if (!p && text) MOQ_TRY(moq_json_num(text, key, out, &p, file, "text_config", err));
    return MOQ_OK;
}

static moq_status get_str(const cJSON *top, const cJSON *text, const char *key, char *out, size_t n,
                          const char *file, moq_error *err) {
    bool p = false;
    const char *s = NULL;
    MOQ_TRY(moq_json_str(top, key, &s, &p, file, NULL, err));
    if (!p && text) MOQ_TRY(moq_json_str(text, key, &s, &p, file, "text_config", err));
    if (p) snprintf(out, n, "%s", s);
    return MOQ_OK;
}

moq_status moq_arch_parse(moq_arch *a, const cJSON *cfg, const char *file, moq_error *err) {
    memset(a, 0, sizeof *a);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    if (text && !cJSON_IsObject(text)) text = NULL;

    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    if (archs && !cJSON_IsNull(archs)) {
        if (!cJSON_IsArray(archs))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "architectures is %s, expected an array of strings", moq_json_type(archs));
        const cJSON *first = archs->child;
        if (first && !cJSON_IsString(first))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "architectures[0] is %s, expected a string", moq_json_type(first));
        if (first) snprintf(a->architecture, sizeof a->architecture, "%s", first->valuestring);
    }
    MOQ_TRY(get_str(cfg, text, "model_type", a->model_type, sizeof a->model_type, file, err));
    MOQ_TRY(get_str(cfg, NULL, "torch_dtype", a->torch_dtype, sizeof a->torch_dtype, file, err));
    if (!a->torch_dtype[0]) MOQ_TRY(get_str(cfg, text, "dtype", a->torch_dtype, sizeof a->torch_dtype, file, err));
    if (!a->torch_dtype[0] && text) MOQ_TRY(get_str(text, NULL, "torch_dtype", a->torch_dtype, sizeof a->torch_dtype, file, err));

    bool seen_experts = false;
    for (size_t i = 0; i < sizeof int_fields / sizeof int_fields[0]; i++) {
        int64_t *dst = (int64_t *)((char *)a + int_fields[i].off);
        if (dst == &a->num_experts && seen_experts) continue;
        bool found = false;
        int64_t v = 0;
        MOQ_TRY(get_int(cfg, text, int_fields[i].key, &v, &found, file, err));
        if (found) {
            *dst = v;
            if (dst == &a->num_experts) seen_experts = true;
        }
    }
    if (!a->num_key_value_heads) a->num_key_value_heads = a->num_attention_heads;
    if (!a->head_dim && a->num_attention_heads) a->head_dim = a->hidden_size / a->num_attention_heads;

    MOQ_TRY(get_num(cfg, text, "rms_norm_eps", &a->rms_norm_eps, file, err));
    bool p = false;
    MOQ_TRY(moq_json_bool(cfg, "tie_word_embeddings", &a->tie_word_embeddings, &p, file, NULL, err));
    if (!p && text) MOQ_TRY(moq_json_bool(text, "tie_word_embeddings", &a->tie_word_embeddings, &p, file, "text_config", err));

    /* RoPE (transformers 5 writes rope_theta and rope_type only inside "rope_parameters"; older
     * files have a top-level rope_theta and a "rope_scaling" object, or null). First found wins:
     * the object: rope_parameters, then rope_scaling, at the top level, then under text_config;
     * theta: that object's rope_theta (transformers 5 keeps the dict's own value), then the
     * top-level rope_theta, then text_config.rope_theta. */
    static const struct { const char *key; bool in_text; } objs[] = {
        {"rope_parameters", false}, {"rope_scaling", false}, {"rope_parameters", true}, {"rope_scaling", true}};
    const cJSON *rs = NULL;
    char rs_path[48] = "";
    for (size_t i = 0; i < sizeof objs / sizeof objs[0] && !rs; i++) {
        const cJSON *base = objs[i].in_text ? text : cfg;
        const cJSON *o = base ? cJSON_GetObjectItemCaseSensitive(base, objs[i].key) : NULL;
        snprintf(rs_path, sizeof rs_path, "%s%s", objs[i].in_text ? "text_config." : "", objs[i].key);
        if (!o || cJSON_IsNull(o)) continue;
        if (!cJSON_IsObject(o)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s, expected an object or null", rs_path, moq_json_type(o));
        rs = o;
    }
    if (rs) {
        snprintf(a->rope_params_key, sizeof a->rope_params_key, "%s", rs_path);
        const char *t = NULL;
        MOQ_TRY(moq_json_str(rs, "rope_type", &t, &p, file, rs_path, err));
        if (!p) MOQ_TRY(moq_json_str(rs, "type", &t, &p, file, rs_path, err));
        if (p) snprintf(a->rope_scaling_type, sizeof a->rope_scaling_type, "%s", t);
        MOQ_TRY(moq_json_num(rs, "factor", &a->rope_scaling_factor, &p, file, rs_path, err));
        MOQ_TRY(moq_json_num(rs, "rope_theta", &a->rope_theta, &p, file, rs_path, err));
        if (p) snprintf(a->rope_theta_key, sizeof a->rope_theta_key, "%s.rope_theta", rs_path);
    }
    if (!a->rope_theta_key[0]) {
        MOQ_TRY(moq_json_num(cfg, "rope_theta", &a->rope_theta, &p, file, NULL, err));
        if (p) snprintf(a->rope_theta_key, sizeof a->rope_theta_key, "rope_theta");
        else if (text) {
            MOQ_TRY(moq_json_num(text, "rope_theta", &a->rope_theta, &p, file, "text_config", err));
            if (p) snprintf(a->rope_theta_key, sizeof a->rope_theta_key, "text_config.rope_theta");
        }
    }
    if (a->rope_theta_key[0] && !(a->rope_theta > 0))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %g, expected a value > 0", a->rope_theta_key, a->rope_theta);
    return MOQ_OK;
}
