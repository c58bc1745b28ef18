/* llama4.h — config.json fields of the Llama 4 text stack (Llama4ForCausalLM, and the text model of
 * Llama4ForConditionalGeneration under text_config): which layers use RoPE (no_rope_layers: 1 = RoPE,
 * 0 = NoPE; default every no_rope_layer_interval-th layer is NoPE), which attend in chunks
 * (layer_types "chunked_attention" | "full_attention", default: the RoPE layers) of
 * attention_chunk_size positions, which hold experts (moe_layers, else every
 * interleave_moe_layer_step-th), the L2 q/k norm of RoPE layers (use_qk_norm), the attention
 * temperature of NoPE layers (attn_temperature_tuning, floor_scale, attn_scale) and the dense
 * MLP size (intermediate_size_mlp). Defaults are Llama4TextConfig's (transformers 5.17).
 * Tested by tests/model/test_arch.c. */
#ifndef MOQ_MODEL_ARCH_LLAMA4_H
#define MOQ_MODEL_ARCH_LLAMA4_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

typedef struct moq_llama4_cfg {
    int64_t intermediate_size_mlp;  /* dense layers' MLP (default 16384)                         */
    int64_t attention_chunk_size;   /* chunked layers attend within chunks of this many positions
                                       (0: null, then chunked layers attend causally)           */
    int64_t floor_scale;            /* temperature: log1p(floor((pos + 1) / floor_scale))       */
    double  attn_scale;             /*              · attn_scale + 1 (default 8192, 0.1)         */
    bool    use_qk_norm;            /* L2 norm (RMS without weight) of q, k after RoPE           */
    bool    attn_temperature_tuning;/* q of NoPE layers scaled by the temperature above          */
} moq_llama4_cfg;

/* Per layer l < L: rope[l] (false: NoPE), chunked[l], moe[l]. Errors name config.json and the key. */
moq_status moq_llama4_read(const moq_checkpoint *c, int64_t L, moq_llama4_cfg *cfg, bool *rope, bool *chunked, bool *moe,
                           moq_error *err);

#endif
