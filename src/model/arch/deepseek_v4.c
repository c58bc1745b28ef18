/* deepseek_v4.c — config.json fields of DeepSeek-V4, one row each (see deepseek_v4.h), and the
 * per-layer schedules. The tensor names of its blocks are in model/attn/dsv4.c. */
#include "model/arch/deepseek_v4.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"

static const struct {
    const char *key;
    size_t      off;
    double      dflt;   /* DeepseekV4Config default */
    double      lo;     /* smallest accepted value  */
    bool        num;    /* double, else int64       */
} fields[] = {
    {"q_lora_rank",           offsetof(moq_dsv4_cfg, q_lora_rank),           1024,   1, false},
    {"head_dim",              offsetof(moq_dsv4_cfg, head_dim),              512,    2, false},
    {"o_groups",              offsetof(moq_dsv4_cfg, o_groups),              8,      1, false},
    {"o_lora_rank",           offsetof(moq_dsv4_cfg, o_lora_rank),           1024,   1, false},
    {"index_n_heads",         offsetof(moq_dsv4_cfg, index_n_heads),         64,     1, false},
    {"index_head_dim",        offsetof(moq_dsv4_cfg, index_head_dim),        128,    2, false},
    {"index_topk",            offsetof(moq_dsv4_cfg, index_topk),            512,    1, false},
    {"sliding_window",        offsetof(moq_dsv4_cfg, sliding_window),        128,    1, false},
    {"hc_mult",               offsetof(moq_dsv4_cfg, hc_mult),               4,      1, false},
    {"hc_sinkhorn_iters",     offsetof(moq_dsv4_cfg, hc_sinkhorn_iters),     20,     1, false},
    {"n_shared_experts",      offsetof(moq_dsv4_cfg, n_shared_experts),      1,      0, false},
    {"hc_eps",                offsetof(moq_dsv4_cfg, hc_eps),                1e-6,   0, true},
    {"swiglu_limit",          offsetof(moq_dsv4_cfg, swiglu_limit),          10.0,   0, true},
    {"routed_scaling_factor", offsetof(moq_dsv4_cfg, routed_scaling_factor), 1.5,    0, true},
};

/* scoring_func -> moq_moe_scoring (DeepseekV4TopKRouter: ACT2FN[scoring_func]) */
static const struct { const char *name; moq_moe_scoring s; } scorings[] = {
    {"sqrtsoftplus", MOQ_MOE_SCORE_SQRTSOFTPLUS}, {"sigmoid", MOQ_MOE_SCORE_SIGMOID}, {"softmax", MOQ_MOE_SCORE_SOFTMAX},
};

/* Attention layer types and the legacy compress_ratios values that name them (0 / 4 / 128). */
static const struct { const char *name; int legacy; bool compressed, indexed; } ltypes[] = {
    {"sliding_attention", 0, false, false},
    {"compressed_sparse_attention", 4, true, true},
    {"heavily_compressed_attention", 128, true, false},
};

static moq_status read_rope_obj(const cJSON *o, const char *path, moq_rope_params *p, moq_error *err) {
    static const struct { const char *key; size_t off; } keys[] = {
        {"rope_theta", offsetof(moq_rope_params, theta)},
        {"factor", offsetof(moq_rope_params, factor)},
        {"original_max_position_embeddings", offsetof(moq_rope_params, original_max_pos)},
        {"beta_fast", offsetof(moq_rope_params, beta_fast)},
        {"beta_slow", offsetof(moq_rope_params, beta_slow)},
        {"attention_factor", offsetof(moq_rope_params, attention_factor)},
    };
    if (!cJSON_IsObject(o)) return MOQ_OK;
    const char *t = NULL;
    bool present = false, tp = false, trunc = true;
    MOQ_TRY(moq_json_str(o, "rope_type", &t, &present, "config.json", path, err));
    if (!present) MOQ_TRY(moq_json_str(o, "type", &t, &present, "config.json", path, err));
    if (present) snprintf(p->type, sizeof p->type, "%s", t);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        double v = 0;
        MOQ_TRY(moq_json_num(o, keys[i].key, &v, &present, "config.json", path, err));
        if (present) memcpy((char *)p + keys[i].off, &v, sizeof v);
    }
    MOQ_TRY(moq_json_bool(o, "truncate", &trunc, &tp, "config.json", path, err));
    p->no_truncate = !trunc;
    return MOQ_OK;
}

/* The two RoPEs (DeepseekV4Config.__post_init__): nested rope_parameters {main, compress}, else
 * main = default RoPE of rope_theta, compress = rope_scaling / rope_parameters with
 * compress_rope_theta; a YaRN compress RoPE has attention_factor 1 unless given. */
static moq_status read_ropes(const cJSON *j, double max_pos, moq_dsv4_cfg *d, moq_error *err) {
    moq_rope_params *r[2] = {&d->rope_main, &d->rope_compress};
    for (int i = 0; i < 2; i++) {
        memset(r[i], 0, sizeof *r[i]);
        snprintf(r[i]->type, sizeof r[i]->type, "default");
        r[i]->factor = 1.0, r[i]->beta_fast = 32.0, r[i]->beta_slow = 1.0, r[i]->original_max_pos = max_pos;
        r[i]->low_freq_factor = 1.0, r[i]->high_freq_factor = 4.0;
    }
    bool present = false;
    d->rope_main.theta = 10000.0, d->rope_compress.theta = 160000.0;
    MOQ_TRY(moq_json_num(j, "rope_theta", &d->rope_main.theta, &present, "config.json", NULL, err));
    MOQ_TRY(moq_json_num(j, "compress_rope_theta", &d->rope_compress.theta, &present, "config.json", NULL, err));
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(rp, "main"), *cp = cJSON_GetObjectItemCaseSensitive(rp, "compress");
    if (cJSON_IsObject(mn) && cJSON_IsObject(cp)) {
        MOQ_TRY(read_rope_obj(mn, "rope_parameters.main", &d->rope_main, err));
        MOQ_TRY(read_rope_obj(cp, "rope_parameters.compress", &d->rope_compress, err));
    } else {
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
        const double theta = d->rope_compress.theta;
        if (cJSON_IsObject(rs)) MOQ_TRY(read_rope_obj(rs, "rope_scaling", &d->rope_compress, err));
        else if (cJSON_IsObject(rp)) MOQ_TRY(read_rope_obj(rp, "rope_parameters", &d->rope_compress, err));
        d->rope_compress.theta = theta; /* compress_rope_theta, not the main rope_theta a flat dict may repeat */
        if (strcmp(d->rope_compress.type, "yarn") == 0 && d->rope_compress.attention_factor == 0) d->rope_compress.attention_factor = 1.0;
    }
    return MOQ_OK;
}

/* layer_types (+ compress_rates) or compress_ratios, else the V4-Pro default. */
static moq_status read_layer_types(const cJSON *j, int64_t L, moq_dsv4_cfg *d, moq_error *err) {
    int64_t rate[3] = {0, 4, 128};
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(j, "compress_rates");
    bool present = false;
    if (cJSON_IsObject(cr))
        for (int t = 1; t < 3; t++) MOQ_TRY(moq_json_int(cr, ltypes[t].name, &rate[t], &present, "config.json", "compress_rates", err));
    MOQ_TRY(moq_json_int(j, "compress_rate_csa", &rate[1], &present, "config.json", NULL, err));
    MOQ_TRY(moq_json_int(j, "compress_rate_hca", &rate[2], &present, "config.json", NULL, err));
    for (int t = 1; t < 3; t++)
        if (rate[t] < 1 || rate[t] > 65536)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "compress rate of %s is %lld, expected 1..65536", ltypes[t].name, (long long)rate[t]);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    const bool legacy = !cJSON_IsArray(lt);
    if (legacy) lt = cJSON_GetObjectItemCaseSensitive(j, "compress_ratios");
    if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) < (int)L))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %s of %d entries, expected an array of at least num_hidden_layers (%lld)",
                        legacy ? "compress_ratios" : "layer_types", moq_json_type(lt), cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0, (long long)L);
    for (int64_t l = 0; l < L; l++) {
        int t = -1;
        if (!cJSON_IsArray(lt)) t = l < 2 ? 2 : ((l - 2) % 2 ? 1 : 2); /* 2 x HCA, then HCA / CSA alternating */
        else {
            const cJSON *e = cJSON_GetArrayItem(lt, (int)l);
            for (int k = 0; k < 3; k++)
                if (legacy ? moq_json_is_int(e, ltypes[k].legacy, ltypes[k].legacy) : cJSON_IsString(e) && strcmp(e->valuestring, ltypes[k].name) == 0) t = k;
            if (t < 0)
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s[%lld] is %s, expected %s", legacy ? "compress_ratios" : "layer_types", (long long)l,
                                moq_json_type(e), legacy ? "0, 4 or 128" : "sliding_attention, compressed_sparse_attention or heavily_compressed_attention");
        }
        d->ratio[l] = rate[t], d->indexed[l] = ltypes[t].indexed;
    }
    return MOQ_OK;
}

/* mlp_layer_types ("hash_moe" / "moe") or num_hash_layers (default 3). */
static moq_status read_mlp_types(const cJSON *j, int64_t L, moq_dsv4_cfg *d, moq_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
    if (cJSON_IsArray(t)) {
        if (cJSON_GetArraySize(t) < (int)L)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_layer_types has %d entries, expected num_hidden_layers (%lld)", cJSON_GetArraySize(t), (long long)L);
        for (int64_t l = 0; l < L; l++) {
            const cJSON *e = cJSON_GetArrayItem(t, (int)l);
            const bool h = cJSON_IsString(e) && strcmp(e->valuestring, "hash_moe") == 0;
            if (!h && !(cJSON_IsString(e) && strcmp(e->valuestring, "moe") == 0))
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_layer_types[%lld] is %s, expected \"hash_moe\" or \"moe\"", (long long)l, moq_json_type(e));
            d->hash[l] = h;
        }
        return MOQ_OK;
    }
    int64_t nh = 3;
    bool present = false;
    MOQ_TRY(moq_json_int(j, "num_hash_layers", &nh, &present, "config.json", NULL, err));
    if (nh < 0) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_hash_layers %lld, expected >= 0", (long long)nh);
    for (int64_t l = 0; l < L; l++) d->hash[l] = l < nh;
    return MOQ_OK;
}

static moq_status read_all(const cJSON *j, int64_t L, double max_pos, moq_dsv4_cfg *d, moq_error *err) {
    bool present = false;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char *dst = (char *)d + fields[i].off;
        double v = fields[i].dflt;
        if (fields[i].num) {
            *(double *)(void *)dst = v;
            MOQ_TRY(moq_json_num(j, fields[i].key, (double *)(void *)dst, &present, "config.json", NULL, err));
            v = *(double *)(void *)dst;
        } else {
            *(int64_t *)(void *)dst = (int64_t)v;
            MOQ_TRY(moq_json_int(j, fields[i].key, (int64_t *)(void *)dst, &present, "config.json", NULL, err));
            v = (double)*(int64_t *)(void *)dst;
        }
        if (!isfinite(v) || v < fields[i].lo || (fields[i].num && v <= 0))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %g, expected >= %g%s", fields[i].key, v, fields[i].lo, fields[i].num ? " (and > 0)" : "");
    }
    d->rope_dim = d->head_dim / 8; /* default partial_rotary_factor 64 / 512 */
    double prf = 0;
    MOQ_TRY(moq_json_num(j, "partial_rotary_factor", &prf, &present, "config.json", NULL, err));
    if (present && prf > 0) d->rope_dim = (int64_t)((double)d->head_dim * prf);
    MOQ_TRY(moq_json_int(j, "qk_rope_head_dim", &d->rope_dim, &present, "config.json", NULL, err));
    if (d->rope_dim < 2 || d->rope_dim % 2 || d->rope_dim > d->head_dim || d->rope_dim > d->index_head_dim)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "qk_rope_head_dim %lld, expected an even value in [2, min(head_dim %lld, index_head_dim %lld)]",
                        (long long)d->rope_dim, (long long)d->head_dim, (long long)d->index_head_dim);
    const char *sf = "sqrtsoftplus";
    MOQ_TRY(moq_json_str(j, "scoring_func", &sf, &present, "config.json", NULL, err));
    d->scoring = -1;
    for (size_t i = 0; i < sizeof scorings / sizeof scorings[0]; i++)
        if (strcmp(sf, scorings[i].name) == 0) d->scoring = (int)scorings[i].s;
    if (d->scoring < 0) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "scoring_func \"%s\", expected sqrtsoftplus, sigmoid or softmax", sf);
    if (L > MOQ_DSV4_MAX_LAYERS) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_hidden_layers %lld, at most %d", (long long)L, MOQ_DSV4_MAX_LAYERS);
    MOQ_TRY(read_layer_types(j, L, d, err));
    MOQ_TRY(read_mlp_types(j, L, d, err));
    return read_ropes(j, max_pos, d, err);
}

moq_status moq_deepseek_v4_read(const moq_checkpoint *c, int64_t L, moq_dsv4_cfg *out, moq_error *err) {
    memset(out, 0, sizeof *out);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with DeepSeek-V4's fields");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    bool present = false;
    int64_t mp = 1048576;
    moq_status st = moq_json_int(j, "max_position_embeddings", &mp, &present, "config.json", NULL, err);
    if (st == MOQ_OK) st = read_all(j, L, (double)mp, out, err);
    cJSON_Delete(j);
    return st;
}
