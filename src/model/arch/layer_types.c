/* layer_types.c — see layer_types.h. */
#include "model/arch/layer_types.h"

#include <string.h>

#include "core/error.h"
#include "io/json.h"

moq_status moq_layer_types(const cJSON *lt, int64_t L, const char *kind, bool *is, moq_error *err) {
    if (!cJSON_IsArray(lt) || (L >= 0 && cJSON_GetArraySize(lt) != (int)L))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "layer_types is %s of %d entries, expected an array of %lld (num_hidden_layers)",
                        moq_json_type(lt), cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0, (long long)L);
    int i = 0;
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, lt) {
        const bool k = cJSON_IsString(e) && strcmp(e->valuestring, kind) == 0;
        if (!k && !(cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "layer_types[%d] is %s%s%s, expected \"%s\" or \"full_attention\"", i,
                            cJSON_IsString(e) ? "\"" : "", cJSON_IsString(e) ? e->valuestring : moq_json_type(e), cJSON_IsString(e) ? "\"" : "", kind);
        is[i++] = k;
    }
    return MOQ_OK;
}
