/* moe.h — internal hooks of the MoE layer (moe.c) for the benchmark and tests: a synthetic expert
 * writer driven by the same format table as the loader, and access to one expert's linears.
 * The public API is moq.h "mixture of experts". */
#ifndef MOQ_MOE_MOE_H
#define MOQ_MOE_MOE_H

#include "moq.h"

/* Adds E experts experts.N.{gate_proj,up_proj,down_proj} of format f with random codes and
 * plausible scales under prefix to w (shapes [I, H] / [H, I]). *keep receives one block holding
 * every tensor's bytes: free it after moq_writer_finish. For speed measurements only: the
 * values are not a quantized model. */
moq_status moq_moe_synth(moq_writer *w, const char *prefix, moq_moe_format f, int64_t E, int64_t H, int64_t I, uint64_t seed, void **keep,
                         moq_error *err);

/* Host weight bytes of the layer (issue 14): packed kernel layouts, and canonical codes and scales
 * still held (experts whose row runs on the canonical weight, f32 scales, the router copy). */
void moq_moe_memory(const moq_moe *m, uint64_t *packed, uint64_t *owned);

/* Bytes one expert stores in the checkpoint (w13 and w2: codes, block scales, scalars). */
uint64_t moq_moe_expert_bytes(moq_moe_format f, int64_t H, int64_t I);

/* The w13 (which = 0) or w2 (1) linear of local expert l; NULL when out of range. */
const moq_linear *moq_moe_expert_linear(const moq_moe *m, int64_t l, int which);

/* Calibration hook: fn(user, tag, global expert id, 0 = the expert's input rows [c, H] | 1 = its
 * down-projection input [c, I'], values, c, cols) for every expert a step routes tokens to (f32
 * input only). Calls are serialized (a critical section); NULL clears it. The layer keeps the
 * pointers; when unset the run pays one pointer test per expert. */
typedef void (*moq_moe_observer)(void *user, int64_t tag, int64_t expert, int which, const float *x, int64_t rows,
                                 int64_t cols);
void moq_moe_set_observer(moq_moe *m, moq_moe_observer fn, void *user, int64_t tag);

#endif
