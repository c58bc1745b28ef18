/* deepseek_v3.c — config.json fields of the DeepSeek-V3 family, one row each (see deepseek_v3.h).
 * The tensor names of its blocks are the MLA projections (model/attn/mla.c) and the MoE block
 * `mlp` with `gate` (+ e_score_correction_bias), `experts.N.*` and `shared_experts` (model.c's row). */
#include "model/arch/deepseek_v3.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "model/arch/glm_moe_dsa.h"

/* config classes with their own defaults / fields (one row each) */
static const moq_deepseek_variant *const variants[] = {&moq_glm_moe_dsa_variant};

typedef enum { F_INT, F_NUM, F_BOOL } ftype;

static const struct {
    const char *key;
    size_t      off;
    double      dflt;   /* DeepseekV3Config default                            */
    double      lo;     /* smallest accepted value (ints and numbers)          */
    ftype       t;
    bool        null0;  /* null means 0 (q_lora_rank: no q LoRA)              */
} fields[] = {
    {"q_lora_rank",            offsetof(moq_deepseek_cfg, q_lora_rank),               1536, 0,  F_INT,  true},
    {"kv_lora_rank",           offsetof(moq_deepseek_cfg, kv_lora_rank),              512,  1,  F_INT,  false},
    {"qk_rope_head_dim",       offsetof(moq_deepseek_cfg, qk_rope_head_dim),          64,   2,  F_INT,  false},
    {"qk_nope_head_dim",       offsetof(moq_deepseek_cfg, qk_nope_head_dim),          128,  0,  F_INT,  false},
    {"v_head_dim",             offsetof(moq_deepseek_cfg, v_head_dim),                128,  1,  F_INT,  false},
    {"n_group",                offsetof(moq_deepseek_cfg, n_group),                   8,    1,  F_INT,  false},
    {"topk_group",             offsetof(moq_deepseek_cfg, topk_group),                4,    1,  F_INT,  false},
    {"first_k_dense_replace",  offsetof(moq_deepseek_cfg, first_k_dense_replace),     3,    0,  F_INT,  false},
    {"moe_layer_freq",         offsetof(moq_deepseek_cfg, moe_layer_freq),            1,    1,  F_INT,  false},
    {"n_shared_experts",       offsetof(moq_deepseek_cfg, n_shared_experts),          1,    0,  F_INT,  true},
    {"index_topk",             offsetof(moq_deepseek_cfg, index_topk),                0,    0,  F_INT,  true},
    {"index_n_heads",          offsetof(moq_deepseek_cfg, index_n_heads),             64,   1,  F_INT,  false},
    {"index_head_dim",         offsetof(moq_deepseek_cfg, index_head_dim),            128,  2,  F_INT,  false},
    {"routed_scaling_factor",  offsetof(moq_deepseek_cfg, routed_scaling_factor),     2.5,  0,  F_NUM,  false},
    {"norm_topk_prob",         offsetof(moq_deepseek_cfg, norm_topk_prob),            1,    0,  F_BOOL, false},
    {"rope_interleave",        offsetof(moq_deepseek_cfg, rope_interleave),           1,    0,  F_BOOL, false},
};

static moq_status read_field(const cJSON *o, const char *path, size_t i, moq_deepseek_cfg *d, bool *present, moq_error *err) {
    char *dst = (char *)d + fields[i].off;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, fields[i].key);
    if (fields[i].null0 && v && cJSON_IsNull(v)) {
        memset(dst, 0, sizeof(int64_t));
        *present = true;
        return MOQ_OK;
    }
    if (fields[i].t == F_INT) return moq_json_int(o, fields[i].key, (int64_t *)(void *)dst, present, "config.json", path, err);
    if (fields[i].t == F_NUM) return moq_json_num(o, fields[i].key, (double *)(void *)dst, present, "config.json", path, err);
    return moq_json_bool(o, fields[i].key, (bool *)(void *)dst, present, "config.json", path, err);
}

/* mlp_layer_types: L entries "dense" / "sparse" (DeepseekV32Config); absent: first_k_dense_replace rules. */
static moq_status read_mlp_types(const cJSON *j, const cJSON *text, int64_t L, moq_deepseek_cfg *d, moq_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "mlp_layer_types");
    if (!t && text) t = cJSON_GetObjectItemCaseSensitive(text, "mlp_layer_types");
    if (!t || cJSON_IsNull(t)) return MOQ_OK;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != (int)L || L > MOQ_DEEPSEEK_MAX_LAYERS)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_layer_types is %s of %d entries, expected an array of num_hidden_layers (%lld, at most %d) entries",
                        moq_json_type(t), cJSON_IsArray(t) ? cJSON_GetArraySize(t) : 0, (long long)L, MOQ_DEEPSEEK_MAX_LAYERS);
    int i = 0;
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, t) {
        const bool sp = cJSON_IsString(e) && strcmp(e->valuestring, "sparse") == 0;
        if (!sp && !(cJSON_IsString(e) && strcmp(e->valuestring, "dense") == 0))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_layer_types[%d] is %s%s%s, expected \"dense\" or \"sparse\"", i,
                            cJSON_IsString(e) ? "\"" : "", cJSON_IsString(e) ? e->valuestring : moq_json_type(e), cJSON_IsString(e) ? "\"" : "");
        d->mlp_sparse[i++] = sp;
    }
    d->has_mlp_types = true;
    return MOQ_OK;
}

static double field_default(size_t i, const moq_deepseek_variant *v) {
    for (size_t k = 0; v && k < v->n_dflt; k++)
        if (strcmp(v->dflt[k].key, fields[i].key) == 0) return v->dflt[k].value;
    return fields[i].dflt;
}

static moq_status read_all(const cJSON *j, int64_t L, const moq_deepseek_variant *var, moq_deepseek_cfg *d, moq_error *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (!cJSON_IsObject(text)) text = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char *dst = (char *)d + fields[i].off;
        const double dflt = field_default(i, var);
        if (fields[i].t == F_INT) *(int64_t *)(void *)dst = (int64_t)dflt;
        else if (fields[i].t == F_NUM) *(double *)(void *)dst = dflt;
        else *(bool *)(void *)dst = dflt != 0;
        bool present = false;
        MOQ_TRY(read_field(j, NULL, i, d, &present, err));
        if (!present && text) MOQ_TRY(read_field(text, "text_config", i, d, &present, err));
        const double v = fields[i].t == F_INT ? (double)*(int64_t *)(void *)dst : fields[i].t == F_NUM ? *(double *)(void *)dst : 0;
        if (fields[i].t != F_BOOL && (!(v >= fields[i].lo) || !isfinite(v) || (fields[i].t == F_NUM && v <= 0)))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %g, expected %s %g", fields[i].key, v, fields[i].t == F_NUM ? ">" : ">=", fields[i].lo);
    }
    if (d->qk_rope_head_dim % 2)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "qk_rope_head_dim %lld, expected an even value", (long long)d->qk_rope_head_dim);
    if (d->topk_group > d->n_group)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "topk_group %lld exceeds n_group %lld", (long long)d->topk_group, (long long)d->n_group);
    MOQ_TRY(read_mlp_types(j, text, L, d, err));
    return var && var->read ? var->read(j, L, d, err) : MOQ_OK;
}

moq_status moq_deepseek_v3_read(const moq_checkpoint *c, int64_t L, const char *config_class, moq_deepseek_cfg *out, moq_error *err) {
    memset(out, 0, sizeof *out);
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, moq_checkpoint_path(c), "no config.json, expected one with the MLA dimensions");
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const moq_deepseek_variant *var = NULL;
    for (size_t i = 0; config_class && i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i]->config_class, config_class) == 0) var = variants[i];
    const moq_status st = read_all(j, L, var, out, err);
    cJSON_Delete(j);
    return st;
}

float moq_deepseek_v3_softmax_scale(const moq_deepseek_cfg *d, const moq_rope_params *rp) {
    double s = 1.0 / sqrt((double)(d->qk_nope_head_dim + d->qk_rope_head_dim));
    const bool scaled = rp->type[0] && strcmp(rp->type, "default") != 0;
    if (scaled && rp->mscale_all_dim != 0 && rp->factor > 1.0) {
        const double m = 0.1 * rp->mscale_all_dim * log(rp->factor) + 1.0;
        s *= m * m;
    }
    return (float)s;
}
