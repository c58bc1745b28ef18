/* qwen3_5.h — config.json fields of the Qwen3.5 / Qwen3.6 text stack (Qwen3_5ForCausalLM,
 * Qwen3_5MoeForCausalLM): which layers are Gated DeltaNet (linear_attention) and which gated full
 * attention, the DeltaNet sizes, the partial rotary factor and the shared expert size. Read from
 * the top level, else text_config; defaults are Qwen3_5TextConfig's. Tested by tests/model/test_arch.c. */
#ifndef MOQ_MODEL_ARCH_QWEN3_5_H
#define MOQ_MODEL_ARCH_QWEN3_5_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

typedef struct moq_qwen3_5_cfg {
    int64_t linear_num_key_heads, linear_key_head_dim, linear_num_value_heads, linear_value_head_dim;
    int64_t linear_conv_kernel_dim, full_attention_interval, shared_expert_intermediate_size;
    double  partial_rotary_factor;  /* rope_parameters.partial_rotary_factor, else the top-level key */
    bool    attn_output_gate;       /* q_proj holds [query | gate] per head (default true)       */
} moq_qwen3_5_cfg;

/* Fills cfg and linear[l] (true: layer l is linear_attention) for L layers: layer_types when given
 * (each "linear_attention" or "full_attention"), else every full_attention_interval-th layer is full
 * (Qwen3_5TextConfig). Errors name config.json and the key. */
moq_status moq_qwen3_5_read(const moq_checkpoint *c, int64_t L, moq_qwen3_5_cfg *cfg, bool *linear, moq_error *err);

#endif
