/* deepseek_v3.h — the DeepSeek-V3 family's config.json fields (DeepseekV3ForCausalLM: DeepSeek-V3,
 * R1, V3.1, Kimi-K2 text): multi-head latent attention dimensions, grouped sigmoid routing, which
 * layers are dense. One table of fields in deepseek_v3.c; defaults are DeepseekV3Config's.
 * Tested by tests/model/test_arch.c. */
#ifndef MOQ_MODEL_ARCH_DEEPSEEK_V3_H
#define MOQ_MODEL_ARCH_DEEPSEEK_V3_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "model/rope.h"

#define MOQ_DEEPSEEK_MAX_LAYERS 512 /* mlp_layer_types entries read */
/* eps of the MLA's q_a_layernorm and kv_a_layernorm: transformers builds them without rms_norm_eps
 * (DeepseekV3RMSNorm / GlmMoeDsaRMSNorm default 1e-6), whatever config.json says; DeepSeek-V3's
 * configs say 1e-6 anyway, GLM-5's 1e-5 (vLLM and SGLang pass rms_norm_eps: 1e-5 there). */
#define MOQ_DEEPSEEK_LORA_NORM_EPS 1e-6

typedef struct moq_deepseek_cfg {
    int64_t q_lora_rank;            /* 0 when null: q_proj instead of q_a/q_b                 */
    int64_t kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim;
    int64_t n_group, topk_group;    /* grouped top-k                                          */
    int64_t first_k_dense_replace;  /* layers [0, k) are dense MLPs                          */
    int64_t moe_layer_freq;         /* MoE on l >= k with l % freq == 0 (DeepSeek's own code and
                                       vLLM; transformers reads no freq, all real configs say 1) */
    int64_t n_shared_experts;
    int64_t index_topk;             /* DeepSeek-V3.2 sparse attention (DSA): keys kept per query by
                                       its indexer; 0 = dense MLA (no index_topk in config.json)   */
    int64_t index_n_heads, index_head_dim; /* the indexer's heads (DeepseekV32Config: 64, 128)    */
    double  routed_scaling_factor;
    bool    norm_topk_prob, rope_interleave;
    bool    has_mlp_types;          /* mlp_layer_types given (DeepseekV32Config): it decides    */
    bool    mlp_sparse[MOQ_DEEPSEEK_MAX_LAYERS];
    bool    indexer_interleave;     /* the indexer's RoPE pairs (2i, 2i+1) (GLM-5), else rotate-half */
    bool    index_shared[MOQ_DEEPSEEK_MAX_LAYERS]; /* layer reuses the previous full layer's top-k
                                       (GLM-5 indexer_types "shared"): it has no indexer          */
} moq_deepseek_cfg;

/* A config class of the family whose defaults or extra fields differ from DeepseekV3Config's
 * (one row each, e.g. GLM-5's in glm_moe_dsa.c): its defaults for absent keys, and a hook that reads
 * its own keys after the common ones. */
typedef struct moq_deepseek_default { const char *key; double value; } moq_deepseek_default;
typedef struct moq_deepseek_variant {
    const char                 *config_class;
    const moq_deepseek_default *dflt;     /* overrides of the fields' DeepseekV3Config defaults */
    size_t                      n_dflt;
    moq_status                (*read)(const void *json, int64_t L, moq_deepseek_cfg *d, moq_error *err); /* cJSON *, may be NULL */
} moq_deepseek_variant;

/* Reads the fields from config.json (top level, else text_config) and checks their ranges; L is
 * num_hidden_layers (mlp_layer_types must have L entries, each "dense" or "sparse"). config_class
 * (the architecture row's) picks a variant's defaults and extra fields; NULL or unlisted: none. */
moq_status moq_deepseek_v3_read(const moq_checkpoint *c, int64_t L, const char *config_class, moq_deepseek_cfg *out, moq_error *err);

/* The softmax scale of DeepseekV3Attention: (dn + dr)^-1/2, times m(mscale_all_dim)² when the rope
 * type is not default and mscale_all_dim is set, m(s) = 0.1 s ln(factor) + 1 (1 when factor <= 1). */
float moq_deepseek_v3_softmax_scale(const moq_deepseek_cfg *d, const moq_rope_params *rp);

#endif
