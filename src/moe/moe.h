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

/* Bytes one expert stores in the checkpoint (w13 and w2: codes, block scales, scalars). */
uint64_t moq_moe_expert_bytes(moq_moe_format f, int64_t H, int64_t I);

/* The w13 (which = 0) or w2 (1) linear of local expert l; NULL when out of range. */
const moq_linear *moq_moe_expert_linear(const moq_moe *m, int64_t l, int which);

#endif
