/* gemma3.c — Gemma 3 text config fields (see gemma3.h). The blocks' tensor names: self_attn.{q,k,v,o}_proj
 * with q_norm / k_norm, mlp.{gate,up,down}_proj, and four norms per layer (input, post_attention,
 * pre_feedforward, post_feedforward; model.c's row says they are all x·(1 + w)). */
#include "model/arch/gemma3.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/arch/layer_types.h"

static void rope_defaults(moq_rope_params *p, double theta, double max_pos) {
    memset(p, 0, sizeof *p);
    p->theta = theta;
    p->factor = 1.0;
    p->low_freq_factor = 1.0;
    p->high_freq_factor = 4.0;
    p->original_max_pos = max_pos;
    p->beta_fast = 32.0;
    p->beta_slow = 1.0;
}

moq_status moq_gemma_rope_obj(const cJSON *o, const char *path, moq_rope_params *p, moq_error *err) {
    bool pr = false;
    const char *t = NULL;
    MOQ_TRY(moq_json_str(o, "rope_type", &t, &pr, "config.json", path, err));
    if (!pr) MOQ_TRY(moq_json_str(o, "type", &t, &pr, "config.json", path, err));
    if (pr) snprintf(p->type, sizeof p->type, "%s", t);
    static const struct { const char *key; size_t off; } keys[] = {
        {"rope_theta", offsetof(moq_rope_params, theta)},
        {"factor", offsetof(moq_rope_params, factor)},
        {"low_freq_factor", offsetof(moq_rope_params, low_freq_factor)},
        {"high_freq_factor", offsetof(moq_rope_params, high_freq_factor)},
        {"original_max_position_embeddings", offsetof(moq_rope_params, original_max_pos)},
        {"beta_fast", offsetof(moq_rope_params, beta_fast)},
        {"beta_slow", offsetof(moq_rope_params, beta_slow)},
        {"attention_factor", offsetof(moq_rope_params, attention_factor)},
        {"partial_rotary_factor", offsetof(moq_rope_params, partial_rotary_factor)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        MOQ_TRY(moq_json_num(o, keys[i].key, (double *)(void *)((char *)p + keys[i].off), &pr, "config.json", path, err));
    return MOQ_OK;
}

static moq_status read_all(const cJSON *j, int64_t L, double max_pos, moq_gemma3_cfg *d, bool *sliding, moq_error *err) {
    bool p = false;
    d->query_pre_attn_scalar = 256;
    d->sliding_window = 4096;
    int64_t pattern = 6;
    MOQ_TRY(moq_json_num(j, "query_pre_attn_scalar", &d->query_pre_attn_scalar, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_num(j, "final_logit_softcapping", &d->final_logit_softcapping, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_num(j, "attn_logit_softcapping", &d->attn_logit_softcapping, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_int(j, "sliding_window", &d->sliding_window, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_int(j, "sliding_window_pattern", &pattern, &p, "config.json", NULL, err));
    if (!p) MOQ_TRY(moq_json_int(j, "_sliding_window_pattern", &pattern, &p, "config.json", NULL, err));
    if (!(d->query_pre_attn_scalar > 0) || d->sliding_window < 1 || pattern < 1 || d->final_logit_softcapping < 0 || d->attn_logit_softcapping < 0)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "query_pre_attn_scalar %g, sliding_window %lld, sliding_window_pattern %lld, soft-capping %g / %g; "
                        "expected positive values (soft-capping: >= 0 or null)", d->query_pre_attn_scalar, (long long)d->sliding_window, (long long)pattern,
                        d->final_logit_softcapping, d->attn_logit_softcapping);
    /* RoPE per layer type: transformers 5 rope_parameters, else the hub's keys */
    double theta = 1e6, local = 1e4;
    MOQ_TRY(moq_json_num(j, "rope_theta", &theta, &p, "config.json", NULL, err));
    MOQ_TRY(moq_json_num(j, "rope_local_base_freq", &local, &p, "config.json", NULL, err));
    rope_defaults(&d->rope_global, theta, max_pos);
    rope_defaults(&d->rope_local, local, max_pos);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (cJSON_IsObject(rs)) MOQ_TRY(moq_gemma_rope_obj(rs, "rope_scaling", &d->rope_global, err));
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (cJSON_IsObject(rp)) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(rp, "full_attention"), *s = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (cJSON_IsObject(g)) MOQ_TRY(moq_gemma_rope_obj(g, "rope_parameters.full_attention", &d->rope_global, err));
        if (cJSON_IsObject(s)) MOQ_TRY(moq_gemma_rope_obj(s, "rope_parameters.sliding_attention", &d->rope_local, err));
    }
    if (!strcmp(d->rope_global.type, "default")) d->rope_global.type[0] = 0;
    if (!strcmp(d->rope_local.type, "default")) d->rope_local.type[0] = 0;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (lt && !cJSON_IsNull(lt)) return moq_layer_types(lt, L, "sliding_attention", sliding, err);
    for (int64_t l = 0; l < L; l++) sliding[l] = (l + 1) % pattern != 0; /* Gemma3TextConfig.__post_init__ */
    return MOQ_OK;
}

moq_status moq_gemma3_read(const moq_checkpoint *c, int64_t L, double max_pos, moq_gemma3_cfg *cfg, bool *sliding, moq_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the Gemma 3 fields");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    const moq_status st = read_all(cJSON_IsObject(tc) ? tc : j, L, max_pos, cfg, sliding, err);
    cJSON_Delete(j);
    return st;
}
