/* glm_moe_dsa.h — GLM-5 / 5.1 / 5.2 (GlmMoeDsaForCausalLM, config class GlmMoeDsaConfig): the
 * DeepSeek-V3.2 stack (MLA, the DSA lightning indexer, shared + routed experts with grouped sigmoid
 * routing, dense first layers) with what transformers' glm_moe_dsa changes:
 *   - GlmMoeDsaConfig's defaults (q_lora_rank 2048, qk_nope_head_dim 192, v_head_dim 256, n_group 1,
 *     topk_group 1, index_topk 2048, index_n_heads 32);
 *   - both the attention's and the indexer's RoPE interleaved (pairs 2i, 2i+1), whatever
 *     rope_interleave / indexer_rope_interleave say (GlmMoeDsaAttention and GlmMoeDsaIndexer
 *     hard-code apply_rotary_pos_emb_interleave; the published configs say true for both);
 *   - indexer_types: per layer "full" (own indexer) or "shared" (no indexer weights; reuses the
 *     previous full layer's top-k); absent: index_topk_pattern (a string of F/S or a list), else
 *     "full" where max(l - index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (defaults 2, 1).
 * Tensor names are DeepSeek-V3.2's. Tested by tests/model/test_glm5.c. */
#ifndef MOQ_MODEL_ARCH_GLM_MOE_DSA_H
#define MOQ_MODEL_ARCH_GLM_MOE_DSA_H

#include "model/arch/deepseek_v3.h"

extern const moq_deepseek_variant moq_glm_moe_dsa_variant;

#endif
