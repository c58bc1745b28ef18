/* minimax_m2.h — config.json fields of MiniMax-M2 (MiniMaxM2ForCausalLM: MiniMax-M2, M2.5, M2.7):
 * the rotary part of a head (rope_parameters.partial_rotary_factor, else the top-level
 * partial_rotary_factor, else rotary_dim / head_dim, else 1 as MiniMaxM2RotaryEmbedding), and the
 * keys NVIDIA's configs carry that transformers' MiniMaxM2 does not read but that must agree with
 * what it runs: qk_norm_type "per_layer" (RMSNorm over all heads of q and of k), use_qk_norm true,
 * scoring_func "sigmoid". Defaults are MiniMaxM2Config's (transformers 5.17).
 * Tested by tests/model/test_arch.c. */
#ifndef MOQ_MODEL_ARCH_MINIMAX_M2_H
#define MOQ_MODEL_ARCH_MINIMAX_M2_H

#include <stdint.h>

#include "moq.h"

typedef struct moq_minimax_m2_cfg {
    int64_t rotary_dim; /* leading dims of each q/k head that RoPE rotates (even, <= head_dim) */
} moq_minimax_m2_cfg;

/* Reads cfg for heads of D values. Errors name config.json and the key (a disagreeing rotary_dim,
 * a qk_norm_type, use_qk_norm or scoring_func other than what transformers runs). */
moq_status moq_minimax_m2_read(const moq_checkpoint *c, int64_t D, moq_minimax_m2_cfg *cfg, moq_error *err);

#endif
