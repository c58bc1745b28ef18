/* gemma4.h — config.json fields of the Gemma 4 text stack (Gemma4ForCausalLM, and the text_config of
 * Gemma4ForConditionalGeneration, the form NVIDIA ships): which layers slide (layer_types, else every
 * 6th is global; the last layer is always global), each layer type's RoPE (rope_parameters; global
 * layers default to "proportional" with partial_rotary_factor 0.25, theta 1e6), each layer's head_dim
 * and KV heads (per_layer_config as transformers writes it, else global_head_dim (default 512) and,
 * with attention_k_eq_v, num_global_key_value_heads for the global layers), attention_k_eq_v (global
 * layers have no v_proj: v is the raw k projection), final soft-capping. The softmax scale is 1 (q and
 * k are RMS-normalized per head), the MoE block (enable_moe_block: num_experts, top_k_experts,
 * moe_intermediate_size). Refused, naming the key: per-layer embeddings
 * (hidden_size_per_layer_input > 0), KV-shared layers (num_kv_shared_layers > 0), bidirectional
 * attention "all", an activation other than gelu_pytorch_tanh.
 * Defaults are Gemma4TextConfig's (transformers 5.17). Tested by tests/model/test_arch_gemma4.c. */
#ifndef MOQ_MODEL_ARCH_GEMMA4_H
#define MOQ_MODEL_ARCH_GEMMA4_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "model/arch/gemma3.h"

typedef struct moq_gemma4_cfg {
    moq_gemma3_cfg g;        /* sliding_window (default 512), final_logit_softcapping, rope_global /
                                rope_local; query_pre_attn_scalar and attn soft-capping unused      */
    bool           k_eq_v;   /* attention_k_eq_v: global layers take v = k_proj(h) (before k_norm)  */
    bool           moe;      /* enable_moe_block: every layer adds routed experts beside its MLP    */
    int64_t        n_experts, top_k, moe_I; /* num_experts, top_k_experts, moe_intermediate_size */
} moq_gemma4_cfg;

/* For L layers: sliding[l], head_dim[l] and kv_heads[l] (base_D / base_KV: the config's head_dim and
 * num_key_value_heads, kept by sliding layers); max_pos: max_position_embeddings. */
moq_status moq_gemma4_read(const moq_checkpoint *c, int64_t L, double max_pos, int64_t base_D, int64_t base_KV, moq_gemma4_cfg *cfg,
                           bool *sliding, int64_t *head_dim, int64_t *kv_heads, moq_error *err);

#endif
