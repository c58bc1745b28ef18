/* gemma3.h — config.json fields of the Gemma 3 text stack (Gemma3ForCausalLM): which layers slide
 * (layer_types, else every sliding_window_pattern-th layer is global), each layer type's RoPE
 * (rope_parameters.{full_attention,sliding_attention} of transformers 5, or the hub's rope_theta +
 * rope_scaling for global layers and rope_local_base_freq for sliding ones), the softmax scale
 * query_pre_attn_scalar^-1/2 and the soft-capping values. Defaults are Gemma3TextConfig's.
 * Tested by tests/model/test_arch.c. */
#ifndef MOQ_MODEL_ARCH_GEMMA3_H
#define MOQ_MODEL_ARCH_GEMMA3_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "model/rope.h"

typedef struct moq_gemma3_cfg {
    double          query_pre_attn_scalar;            /* softmax scale = this^-1/2 (default 256)     */
    double          final_logit_softcapping;          /* 0 = none: logits = c · tanh(logits / c)      */
    double          attn_logit_softcapping;           /* 0 = none: scores = c · tanh(scores / c)      */
    int64_t         sliding_window;                   /* default 4096                                 */
    moq_rope_params rope_global, rope_local;
} moq_gemma3_cfg;

/* One rope_parameters.<layer type> / rope_scaling object o (at JSON path `path`, for errors) into p:
 * rope_type (or type), rope_theta, factor, the llama3 / yarn keys, partial_rotary_factor; keys absent
 * keep p's values. Shared with gemma4.c. */
moq_status moq_gemma_rope_obj(const cJSON *o, const char *path, moq_rope_params *p, moq_error *err);

/* Fills cfg and sliding[l] for L layers; max_pos: max_position_embeddings (llama3/yarn default). */
moq_status moq_gemma3_read(const moq_checkpoint *c, int64_t L, double max_pos, moq_gemma3_cfg *cfg, bool *sliding, moq_error *err);

#endif
