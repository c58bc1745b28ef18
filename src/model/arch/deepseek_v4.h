/* deepseek_v4.h — DeepSeek-V4's config.json fields (DeepseekV4ForCausalLM, transformers 5.17
 * models/deepseek_v4): per layer its attention type (sliding only, compressed sparse attention "CSA"
 * with the lightning indexer, or heavily compressed attention "HCA") and its router (hash or
 * learned top-k), the grouped output projection, the indexer, the manifold-constrained
 * hyper-connections (mHC) and the two RoPEs ("main" for sliding layers, "compress" with YaRN for
 * compressed ones). Read in both spellings: transformers' (layer_types + compress_rates,
 * mlp_layer_types, partial_rotary_factor, rope_parameters {main, compress}) and the legacy one the
 * published checkpoints carry (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling +
 * compress_rope_theta). Defaults are DeepseekV4Config's. Tested by tests/model/test_dsv4.c. */
#ifndef MOQ_MODEL_ARCH_DEEPSEEK_V4_H
#define MOQ_MODEL_ARCH_DEEPSEEK_V4_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "model/rope.h"

#define MOQ_DSV4_MAX_LAYERS 512

typedef struct moq_dsv4_cfg {
    int64_t q_lora_rank, head_dim, rope_dim;     /* rope_dim = qk_rope_head_dim (trailing part)   */
    int64_t o_groups, o_lora_rank;
    int64_t index_n_heads, index_head_dim, index_topk;
    int64_t sliding_window;
    int64_t hc_mult, hc_sinkhorn_iters;
    int64_t n_shared_experts;
    double  hc_eps, swiglu_limit, routed_scaling_factor;
    int     scoring;                             /* moq_moe_scoring                              */
    moq_rope_params rope_main, rope_compress;
    int64_t ratio[MOQ_DSV4_MAX_LAYERS];          /* 0 sliding only, else the compression rate     */
    bool    indexed[MOQ_DSV4_MAX_LAYERS];        /* CSA (overlapping windows + indexer), else HCA */
    bool    hash[MOQ_DSV4_MAX_LAYERS];           /* hash_moe: experts from tid2eid[token]         */
} moq_dsv4_cfg;

/* Reads and range-checks the fields for L layers; errors name config.json and the key. */
moq_status moq_deepseek_v4_read(const moq_checkpoint *c, int64_t L, moq_dsv4_cfg *out, moq_error *err);

#endif
