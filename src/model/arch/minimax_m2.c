/* minimax_m2.c — MiniMax-M2 config fields (see minimax_m2.h). The blocks' tensor names:
 * self_attn.{q,k,v,o}_proj with q_norm [A·D] / k_norm [KV·D] over the whole projection,
 * block_sparse_moe.{gate, e_score_correction_bias, experts.N.{w1,w2,w3}} (model.c's row). */
#include "model/arch/minimax_m2.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"

/* A top-level string key that must be `want` when present. */
static moq_status want_str(const cJSON *j, const char *key, const char *want, const char *why, moq_error *err) {
    const char *s = NULL;
    bool p = false;
    MOQ_TRY(moq_json_str(j, key, &s, &p, "config.json", NULL, err));
    if (p && s && strcmp(s, want) != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "%s \"%s\"; moq runs MiniMax-M2 with %s \"%s\" (%s)", key, s, key, want, why);
    return MOQ_OK;
}

static moq_status read_all(const cJSON *j, int64_t D, moq_minimax_m2_cfg *d, moq_error *err) {
    double f = 1.0;
    bool p = false, pf = false;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (cJSON_IsObject(rp)) MOQ_TRY(moq_json_num(rp, "partial_rotary_factor", &f, &pf, "config.json", "rope_parameters", err));
    if (!pf) MOQ_TRY(moq_json_num(j, "partial_rotary_factor", &f, &pf, "config.json", NULL, err));
    if (pf && !(f > 0 && f <= 1))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "partial_rotary_factor %g, expected a value in (0, 1]", f);
    int64_t rd = 0;
    MOQ_TRY(moq_json_int(j, "rotary_dim", &rd, &p, "config.json", NULL, err));
    d->rotary_dim = pf ? (int64_t)((double)D * f) : p ? rd : D; /* MiniMaxM2RotaryEmbedding: int(head_dim * factor) */
    if (p && rd != d->rotary_dim)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rotary_dim %lld disagrees with head_dim %lld x partial_rotary_factor %g = %lld",
                        (long long)rd, (long long)D, f, (long long)d->rotary_dim);
    if (d->rotary_dim < 2 || d->rotary_dim > D || d->rotary_dim % 2)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rotary dimension %lld for head_dim %lld; expected an even value in [2, head_dim]",
                        (long long)d->rotary_dim, (long long)D);
    bool qk = true;
    MOQ_TRY(moq_json_bool(j, "use_qk_norm", &qk, &p, "config.json", NULL, err));
    if (!qk)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "use_qk_norm false; transformers' MiniMaxM2Attention always applies q_norm and k_norm");
    MOQ_TRY(want_str(j, "qk_norm_type", "per_layer", "q_norm and k_norm over all heads of the projection, as MiniMaxM2Attention", err));
    return want_str(j, "scoring_func", "sigmoid", "MiniMaxM2TopKRouter's sigmoid scores", err);
}

moq_status moq_minimax_m2_read(const moq_checkpoint *c, int64_t D, moq_minimax_m2_cfg *cfg, moq_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the MiniMax-M2 fields");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const moq_status st = read_all(j, D, cfg, err);
    cJSON_Delete(j);
    return st;
}
