/* moe.h — internal hooks of the MoE layer (moe.c) for the benchmark and tests: a synthetic expert
 * writer driven by the same format table as the loader, and access to one expert's linears.
 * The public API is moq.h "mixture of experts". */
#ifndef MOQ_MOE_MOE_H
#define MOQ_MOE_MOE_H

#include <stdbool.h>

#include "kernels/kernels.h"
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

/* What the GPU layer (moe_gpu.c) reads of a CPU-opened layer: shapes, routing, the experts' canonical
 * weights (borrowed: valid while m lives). router: NULL when the layer has no router weight. */
typedef struct moq_moe_view {
    const char            *name;       /* the layer's checkpoint prefix                           */
    int64_t                E, H, I, Ip, N13, n_local;
    const int32_t         *local_of;   /* [E]: local id or -1                                     */
    const moq_moe_routing *routing;    /* correction_bias resolved                                 */
    moq_moe_act            act;
    float                  act_limit, act_alpha, act_beta;
    bool                   has_shared; /* a shared expert inside the layer (moq_moe_opts.shared_expert) */
    bool                   rcpa;       /* NVFP4 reciprocals as rcp.approx (opts.rcpa_corr given)   */
    bool                   pre_scale;  /* AWQ pre_quant_scale on the experts                        */
    const moq_weight      *router;     /* [E, H] F32 | BF16 | F16, bias [E] or NULL                 */
} moq_moe_view;
void moq_moe_get_view(const moq_moe *m, moq_moe_view *v);
/* The canonical weight of local expert l: w13 (which = 0) or w2 (1); NULL when out of range. */
const moq_weight *moq_moe_expert_weight(const moq_moe *m, int64_t l, int which);
/* moq_moe_run with the experts of each token given (DeepSeek-V4 hash_moe: ids i32 [T, k] from
 * tid2eid[token], each < E, else MOQ_ERR_INVALID_ARG); the checkpoint router still gives the scores
 * whose values at those ids are the weights (moq_moe_route_fixed). */
moq_status moq_moe_run_fixed(const moq_moe *m, const void *x, moq_elem x_elem, int64_t T, const int32_t *ids, void *y, moq_elem y_elem,
                             void *ws, size_t ws_size, moq_error *err);

/* Calibration hook: fn(user, tag, global expert id, 0 = the expert's input rows [c, H] | 1 = its
 * down-projection input [c, I'], values, c, cols) for every expert a step routes tokens to (f32
 * input only). Calls are serialized (a critical section); NULL clears it. The layer keeps the
 * pointers; when unset the run pays one pointer test per expert. */
typedef void (*moq_moe_observer)(void *user, int64_t tag, int64_t expert, int which, const float *x, int64_t rows,
                                 int64_t cols);
void moq_moe_set_observer(moq_moe *m, moq_moe_observer fn, void *user, int64_t tag);

#endif
