/* glm_moe_dsa.c — GLM-5's row of the DeepSeek family's variants (see glm_moe_dsa.h). */
#include "model/arch/glm_moe_dsa.h"

#include <string.h>

#include "core/error.h"
#include "io/json.h"

static const moq_deepseek_default glm_defaults[] = { /* GlmMoeDsaConfig's, where DeepseekV3Config's differ */
    {"q_lora_rank", 2048}, {"qk_nope_head_dim", 192}, {"v_head_dim", 256}, {"n_group", 1},
    {"topk_group", 1},     {"index_topk", 2048},      {"index_n_heads", 32},
};

static const struct { char c; const char *name; bool shared; } kinds[] = {{'F', "full", false}, {'S', "shared", true}};

/* One entry of indexer_types (a string "full" / "shared") or of index_topk_pattern (also 'F' / 'S'). */
static moq_status kind_of(const cJSON *e, const char *key, int i, bool *shared, moq_error *err) {
    for (size_t k = 0; cJSON_IsString(e) && k < sizeof kinds / sizeof kinds[0]; k++)
        if (strcmp(e->valuestring, kinds[k].name) == 0 || (e->valuestring[0] == kinds[k].c && !e->valuestring[1])) {
            *shared = kinds[k].shared;
            return MOQ_OK;
        }
    return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s[%d] is %s%s%s, expected \"full\" or \"shared\"", key, i, cJSON_IsString(e) ? "\"" : "",
                    cJSON_IsString(e) ? e->valuestring : moq_json_type(e), cJSON_IsString(e) ? "\"" : "");
}

static moq_status read_types(const cJSON *j, int64_t L, moq_deepseek_cfg *d, moq_error *err) {
    const char *key = "indexer_types";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!t || cJSON_IsNull(t)) t = cJSON_GetObjectItemCaseSensitive(j, key = "index_topk_pattern");
    if (t && !cJSON_IsNull(t)) {
        const bool str = strcmp(key, "index_topk_pattern") == 0 && cJSON_IsString(t);
        const int n = str ? (int)strlen(t->valuestring) : cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
        if (n != (int)L)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s is %s of %d entries, expected num_hidden_layers (%lld) entries", key,
                            moq_json_type(t), n, (long long)L);
        for (int i = 0; i < n; i++) {
            if (str) {
                char one[2] = {t->valuestring[i], 0};
                cJSON s = {.type = cJSON_String, .valuestring = one};
                MOQ_TRY(kind_of(&s, key, i, &d->index_shared[i], err));
            } else {
                MOQ_TRY(kind_of(cJSON_GetArrayItem(t, i), key, i, &d->index_shared[i], err));
            }
        }
    } else {
        int64_t freq = 1, off = 2;
        bool present = false;
        MOQ_TRY(moq_json_int(j, "index_topk_freq", &freq, &present, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "index_skip_topk_offset", &off, &present, "config.json", NULL, err));
        if (freq < 1) freq = 1; /* GlmMoeDsaConfig: max(freq, 1) */
        for (int64_t l = 0; l < L; l++) d->index_shared[l] = ((l - off + 1 > 0 ? l - off + 1 : 0) % freq) != 0;
    }
    if (L > 0 && d->index_shared[0])
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "%s[0] is \"shared\", expected \"full\" (a shared layer reuses an earlier full layer's top-k)", key);
    return MOQ_OK;
}

static moq_status glm_read(const void *json, int64_t L, moq_deepseek_cfg *d, moq_error *err) {
    d->rope_interleave = d->indexer_interleave = true; /* hard-coded by transformers' glm_moe_dsa */
    if (L > MOQ_DEEPSEEK_MAX_LAYERS)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_hidden_layers %lld, expected at most %d", (long long)L, MOQ_DEEPSEEK_MAX_LAYERS);
    return read_types((const cJSON *)json, L, d, err);
}

const moq_deepseek_variant moq_glm_moe_dsa_variant = {"GlmMoeDsaConfig", glm_defaults, sizeof glm_defaults / sizeof glm_defaults[0], glm_read};
