/* plan.c — the per-rank ranges of plan.h. Tested by tests/dist/test_shard.c. */
#include "dist/plan.h"

#include <string.h>

#include "core/error.h"

static moq_status divides(int64_t n, int G, const char *key, const char *why, moq_error *err) {
    if (n % G == 0) return MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "%s %lld is not divisible by --tp %d (%s)", key, (long long)n, G, why);
}

moq_status moq_tp_plan_make(moq_tp_plan *p, const moq_tp_dims *d, int G, int rank, bool ep, int64_t v_align, moq_error *err) {
    memset(p, 0, sizeof *p);
    if (G < 1 || rank < 0 || rank >= G) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--tp", "rank %d of %d, expected 0 <= rank < G", rank, G);
    p->G = G, p->rank = rank, p->ep = ep;
    MOQ_TRY(divides(d->A, G, "num_attention_heads", "each rank runs whole attention heads", err));
    p->a_n = d->A / G, p->a0 = (int64_t)rank * p->a_n;
    if (G <= d->KV) {
        MOQ_TRY(divides(d->KV, G, "num_key_value_heads", "each rank holds whole KV heads; G > kv heads replicates them", err));
        p->kv_n = d->KV / G, p->kv0 = (int64_t)rank * p->kv_n;
    } else {
        if (G % d->KV)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "--tp %d is not a multiple of num_key_value_heads %lld (KV heads are replicated "
                            "when G exceeds them, G / kv heads ranks each)", G, (long long)d->KV);
        p->kv_n = 1, p->kv0 = p->a0 / (d->A / d->KV);
    }
    if (d->I > 0) MOQ_TRY(divides(d->I, G, "intermediate_size", "the MLP's gate/up rows and down_proj columns are split", err));
    p->i_n = d->I / G, p->i0 = (int64_t)rank * p->i_n;
    if (d->Is > 0) MOQ_TRY(divides(d->Is, G, "shared_expert_intermediate_size", "the shared expert is split like the MLP", err));
    p->is_n = d->Is / G, p->is0 = (int64_t)rank * p->is_n;
    if (d->E > 0 && ep) {
        if (d->E < G)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "num_experts %lld is fewer than --tp %d ranks; --ep needs an expert per rank",
                            (long long)d->E, G);
        const int64_t base = d->E / G, extra = d->E % G;
        p->e_n = base + (rank < extra), p->e0 = (int64_t)rank * base + (rank < extra ? rank : extra);
        p->ie_n = d->Ie, p->ie0 = 0;
    } else if (d->E > 0) {
        MOQ_TRY(divides(d->Ie, G, "moe_intermediate_size", "each expert's w13 rows and w2 columns are split; --ep keeps experts whole", err));
        p->ie_n = d->Ie / G, p->ie0 = (int64_t)rank * p->ie_n, p->e0 = 0, p->e_n = d->E;
    }
    int64_t al = v_align > 1 ? v_align : 1;
    if ((int64_t)(G - 1) * (((d->V + G - 1) / G + al - 1) / al * al) >= d->V) al = 1; /* aligned shards would leave a rank none */
    p->v_per = ((d->V + G - 1) / G + al - 1) / al * al;
    p->v0 = (int64_t)rank * p->v_per;
    p->v_n = d->V - p->v0 < p->v_per ? d->V - p->v0 : p->v_per;
    if ((int64_t)(G - 1) * p->v_per >= d->V)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "vocab_size %lld in %lld-row shards leaves rank %d no rows under --tp %d",
                        (long long)d->V, (long long)p->v_per, G - 1, G);
    return MOQ_OK;
}

int32_t moq_tp_plan_expert(const moq_tp_plan *p, int64_t e) { return e >= p->e0 && e < p->e0 + p->e_n ? (int32_t)(e - p->e0) : -1; }
