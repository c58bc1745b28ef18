/* llama4.c — Llama 4 text config fields (see llama4.h). The blocks' tensor names: self_attn.{q,k,v,o}_proj,
 * feed_forward.{gate,up,down}_proj (dense layers) or feed_forward.{router, experts.*, shared_expert.*}
 * (model.c's rows), input_layernorm, post_attention_layernorm. */
#include "model/arch/llama4.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/arch/layer_types.h"

/* An array of L entries under key (top level, else text_config); *arr NULL when absent or null. */
static moq_status layer_array(const cJSON *j, const cJSON *text, const char *key, int64_t L, const cJSON **arr, moq_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!a && text) a = cJSON_GetObjectItemCaseSensitive(text, key);
    *arr = NULL;
    if (!a || cJSON_IsNull(a)) return MOQ_OK;
    if (!cJSON_IsArray(a))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %s, expected an array", key, moq_json_type(a));
    if (L >= 0 && cJSON_GetArraySize(a) != (int)L)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s has %d entries, expected %lld (num_hidden_layers)", key, cJSON_GetArraySize(a), (long long)L);
    *arr = a;
    return MOQ_OK;
}

static moq_status read_all(const cJSON *j, int64_t L, moq_llama4_cfg *d, bool *rope, bool *chunked, bool *moe, moq_error *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (!cJSON_IsObject(text)) text = NULL;
    bool p = false;
    int64_t nope_interval = 4, moe_step = 1;
    d->intermediate_size_mlp = 16384, d->attention_chunk_size = 8192, d->floor_scale = 8192, d->attn_scale = 0.1;
    d->use_qk_norm = true, d->attn_temperature_tuning = true;
    struct { const char *key; int64_t *v; int64_t min; } ints[] = {
        {"intermediate_size_mlp", &d->intermediate_size_mlp, 1}, {"floor_scale", &d->floor_scale, 1},
        {"no_rope_layer_interval", &nope_interval, 1}, {"interleave_moe_layer_step", &moe_step, 1},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        MOQ_TRY(moq_json_int(j, ints[i].key, ints[i].v, &p, "config.json", NULL, err));
        if (!p && text) MOQ_TRY(moq_json_int(text, ints[i].key, ints[i].v, &p, "config.json", "text_config", err));
        if (*ints[i].v < ints[i].min)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %lld, expected >= %lld", ints[i].key, (long long)*ints[i].v, (long long)ints[i].min);
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "attention_chunk_size");
    if (!ch && text) ch = cJSON_GetObjectItemCaseSensitive(text, "attention_chunk_size");
    if (cJSON_IsNull(ch)) d->attention_chunk_size = 0;
    else if (ch && !moq_json_is_int(ch, 1, 1e15))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "attention_chunk_size is %s, expected a positive integer or null",
                        cJSON_IsNumber(ch) ? "not a positive integer" : moq_json_type(ch));
    else if (ch) d->attention_chunk_size = (int64_t)ch->valuedouble;
    MOQ_TRY(moq_json_num(j, "attn_scale", &d->attn_scale, &p, "config.json", NULL, err));
    if (!p && text) MOQ_TRY(moq_json_num(text, "attn_scale", &d->attn_scale, &p, "config.json", "text_config", err));
    struct { const char *key; bool *v; } bools[] = {{"use_qk_norm", &d->use_qk_norm}, {"attn_temperature_tuning", &d->attn_temperature_tuning}};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) { /* Meta's configs write attn_temperature_tuning: 4 (truthy) */
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, bools[i].key);
        if (!b && text) b = cJSON_GetObjectItemCaseSensitive(text, bools[i].key);
        if (cJSON_IsNumber(b)) *bools[i].v = b->valuedouble != 0;
        else if (b && !cJSON_IsNull(b) && !cJSON_IsBool(b))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %s, expected a boolean (or a number, nonzero = true)", bools[i].key, moq_json_type(b));
        else if (cJSON_IsBool(b)) *bools[i].v = cJSON_IsTrue(b);
    }
    /* no_rope_layers: 1 = the layer uses RoPE (Llama4TextAttention.use_rope); default interval rule */
    const cJSON *a = NULL, *e = NULL;
    MOQ_TRY(layer_array(j, text, "no_rope_layers", L, &a, err));
    if (a && cJSON_GetArraySize(a) == 0) a = NULL; /* Llama4TextConfig: an empty list means the default */
    for (int64_t l = 0; l < L; l++) rope[l] = (l + 1) % nope_interval != 0;
    int i = 0;
    cJSON_ArrayForEach(e, a) {
        if (!moq_json_is_int(e, 0, 1)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "no_rope_layers[%d] is not 0 or 1", i);
        rope[i++] = e->valuedouble != 0;
    }
    MOQ_TRY(layer_array(j, text, "layer_types", L, &a, err));
    for (int64_t l = 0; l < L; l++) chunked[l] = rope[l];
    if (a) MOQ_TRY(moq_layer_types(a, -1, "chunked_attention", chunked, err)); /* layer_array checked its length */
    /* moe_layers: the indices of MoE layers, else range(step - 1, L, step) */
    MOQ_TRY(layer_array(j, text, "moe_layers", -1, &a, err));
    for (int64_t l = 0; l < L; l++) moe[l] = a ? false : (l + 1) % moe_step == 0;
    i = 0;
    cJSON_ArrayForEach(e, a) {
        if (!moq_json_is_int(e, 0, (double)(L - 1)))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "moe_layers[%d] is not a layer index in [0, %lld)", i, (long long)L);
        moe[(int64_t)e->valuedouble] = true;
        i++;
    }
    return MOQ_OK;
}

moq_status moq_llama4_read(const moq_checkpoint *c, int64_t L, moq_llama4_cfg *cfg, bool *rope, bool *chunked, bool *moe,
                           moq_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the Llama 4 fields");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const moq_status st = read_all(j, L, cfg, rope, chunked, moe, err);
    cJSON_Delete(j);
    return st;
}
