/* plan.h — what rank r of G holds under tensor parallelism (issue 16), as vLLM and SGLang split a
 * decoder (the seeds' column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj,
 * vocabulary-parallel embedding and lm_head, `expert_map` for expert parallelism):
 *
 *   q heads      [a0, a0 + A/G)                 A % G == 0, else an error
 *   kv heads     [kv0, kv0 + max(1, KV/G))      KV % G == 0 when G <= KV; when G > KV each KV head is
 *                                               replicated on G/KV ranks (G % KV == 0), the ones whose
 *                                               q heads read it: kv0 = a0 / (A/KV)
 *   intermediate [i0, i0 + I/G) of the dense MLP, [ie0, ie0 + Ie/G) of each expert (TP experts),
 *                of the shared expert [is0, is0 + Is/G)      I % G == 0, else an error
 *   vocabulary   rows [v0, v0 + v_n), v_per = ceil(V/G) rounded up to v_align (the lm_head's row
 *                block) unless that would leave the last rank no rows (then not rounded: a quantized
 *                lm_head whose blocks that cuts is refused by the loader, naming it); the last rank
 *                may hold fewer rows, none may hold zero
 *   experts      --ep: experts [e0, e0 + e_n), E split as evenly as possible (the first E % G ranks
 *                one more), expert_map[e] = e - e0 there, -1 elsewhere; each expert whole
 *
 * Quantization blocks are checked where the tensors are cut (scheme/slice.h), naming the tensor.
 * Tested by tests/dist/test_shard.c. */
#ifndef MOQ_DIST_PLAN_H
#define MOQ_DIST_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

typedef struct moq_tp_dims {
    int64_t A, KV, I, Ie, Is, E, V; /* heads, kv heads, dense / expert / shared intermediate, experts, vocab */
} moq_tp_dims;

typedef struct moq_tp_plan {
    int     G, rank;
    bool    ep;
    int64_t a0, a_n, kv0, kv_n, i0, i_n, ie0, ie_n, is0, is_n;
    int64_t v0, v_n, v_per;
    int64_t e0, e_n;
} moq_tp_plan;

/* The plan of `rank`; MOQ_ERR_UNSUPPORTED naming the config key that G does not divide. */
moq_status moq_tp_plan_make(moq_tp_plan *p, const moq_tp_dims *d, int G, int rank, bool ep, int64_t v_align, moq_error *err);
/* Local id of global expert e on this rank, -1 when held elsewhere (the seeds' expert_map). */
int32_t    moq_tp_plan_expert(const moq_tp_plan *p, int64_t e);

#endif
