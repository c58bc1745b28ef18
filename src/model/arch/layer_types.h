/* layer_types.h — config.json's per-layer attention kinds, as the family readers (gemma3.c,
 * qwen3_5.c, llama4.c) read them: each entry is `kind` or "full_attention". */
#ifndef MOQ_MODEL_ARCH_LAYER_TYPES_H
#define MOQ_MODEL_ARCH_LAYER_TYPES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

/* lt: the layer_types value (not NULL, not null). It must be an array of L entries (L < 0: any
 * length); is[i] = entry i is `kind`. Errors name config.json and layer_types[i]. */
moq_status moq_layer_types(const cJSON *lt, int64_t L, const char *kind, bool *is, moq_error *err);

#endif
