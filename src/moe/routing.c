/* routing.c — see routing.h for the rules. Every score is one f32 expression (expf, division),
 * as the engines compute them in f32; tests/moe/test_moe_routing.c checks ids exactly and
 * weights to a few f32 ulps against an fp64 implementation of the same rules. */
#include "moe/routing.h"

#include <math.h>
#include <stdbool.h>

#include "core/error.h"

moq_status moq_moe_routing_check(const moq_moe_routing *r, int64_t E, const char *where, moq_error *err) {
    if (E < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "num_experts %lld, expected >= 1", (long long)E);
    if ((unsigned)r->scoring >= MOQ_MOE_SCORE_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "scoring %d is not a moq_moe_scoring", (int)r->scoring);
    int64_t reach = E;
    if (r->num_expert_group > 1) {
        if (r->num_expert_group > MOQ_MOE_MAX_GROUPS)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, where, "num_expert_group %d, at most %d supported", r->num_expert_group,
                            MOQ_MOE_MAX_GROUPS);
        if (E % r->num_expert_group)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, where, "num_expert_group %d does not divide num_experts %lld", r->num_expert_group,
                            (long long)E);
        if (r->topk_group < 1 || r->topk_group > r->num_expert_group)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, where, "topk_group %d, expected 1..num_expert_group (%d)", r->topk_group,
                            r->num_expert_group);
        reach = E / r->num_expert_group * r->topk_group;
    }
    if (r->top_k < 1 || r->top_k > reach)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, where, "top_k %d, expected 1..%lld (experts reachable%s)", r->top_k, (long long)reach,
                        r->num_expert_group > 1 ? " in topk_group groups" : "");
    if (r->weight_on_input && r->top_k != 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, where, "weight applied to the input needs top_k 1 (Llama-4), got %d", r->top_k);
    if (!(r->routed_scaling_factor > 0.0f) || !isfinite(r->routed_scaling_factor))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, where, "routed_scaling_factor %g, expected a finite value > 0", (double)r->routed_scaling_factor);
    return MOQ_OK;
}

size_t moq_moe_route_scratch(int64_t E) { return 3 * (size_t)E; }

/* Index of the largest value among those with allowed[i] set; lowest index on ties. */
static int64_t argmax_allowed(const float *v, const float *allowed, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (allowed[i] != 0.0f && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

/* The scores p f32 [E] of one token's logits under r->scoring. */
static void scores(const moq_moe_routing *r, int64_t E, const float *logits, float *p) {
    if (r->scoring == MOQ_MOE_SCORE_SOFTMAX) {
        float mx = logits[0];
        for (int64_t e = 1; e < E; e++) mx = fmaxf(mx, logits[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; e++) sum += (p[e] = expf(logits[e] - mx));
        for (int64_t e = 0; e < E; e++) p[e] /= sum;
    } else if (r->scoring == MOQ_MOE_SCORE_SQRTSOFTPLUS) {
        for (int64_t e = 0; e < E; e++) p[e] = sqrtf(logits[e] > 20.0f ? logits[e] : log1pf(expf(logits[e])));
    } else {
        for (int64_t e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-logits[e]));
    }
}

/* Renormalization and routed_scaling_factor of the k selected weights. */
static void finish(const moq_moe_routing *r, const int32_t *ids, float *weights, float sum) {
    if (r->renormalize)
        for (int j = 0; j < r->top_k; j++) weights[j] /= sum;
    if (r->routed_scaling_factor != 1.0f)
        for (int j = 0; j < r->top_k; j++) weights[j] *= r->routed_scaling_factor;
    for (int j = 0; r->expert_scale && j < r->top_k; j++) weights[j] *= r->expert_scale[ids[j]]; /* Gemma 4 per_expert_scale */
}

void moq_moe_route_fixed(const moq_moe_routing *r, int64_t E, const float *logits, const int32_t *fixed, int32_t *ids, float *weights,
                         float *scratch) {
    scores(r, E, logits, scratch);
    float sum = 0.0f;
    for (int j = 0; j < r->top_k; j++) ids[j] = fixed[j], weights[j] = scratch[fixed[j]], sum += weights[j];
    finish(r, ids, weights, sum);
}

void moq_moe_route_ref(const moq_moe_routing *r, int64_t E, const float *logits, int32_t *ids, float *weights, float *scratch) {
    float *p = scratch, *sel = scratch + E, *allowed = scratch + 2 * E;
    scores(r, E, logits, p);
    for (int64_t e = 0; e < E; e++) {
        sel[e] = r->correction_bias ? p[e] + r->correction_bias[e] : p[e];
        allowed[e] = 1.0f;
    }
    if (r->num_expert_group > 1) {
        const int64_t G = r->num_expert_group, per = E / G;
        float gs[MOQ_MOE_MAX_GROUPS], gallow[MOQ_MOE_MAX_GROUPS]; /* routing_check bounds G */
        const int64_t Gc = G < MOQ_MOE_MAX_GROUPS ? G : MOQ_MOE_MAX_GROUPS;
        for (int64_t g = 0; g < Gc; g++) {
            const float *s = sel + g * per;
            float a = -INFINITY, b = -INFINITY;
            for (int64_t i = 0; i < per; i++) {
                if (s[i] > a) b = a, a = s[i];
                else if (s[i] > b) b = s[i];
            }
            gs[g] = r->correction_bias && per > 1 ? a + b : a;
            gallow[g] = 1.0f;
        }
        for (int64_t e = 0; e < E; e++) allowed[e] = 0.0f;
        for (int t = 0; t < r->topk_group && t < Gc; t++) {
            const int64_t g = argmax_allowed(gs, gallow, Gc);
            gallow[g] = 0.0f;
            for (int64_t i = 0; i < per; i++) allowed[g * per + i] = 1.0f;
        }
    }
    float sum = 0.0f;
    for (int j = 0; j < r->top_k; j++) {
        const int64_t e = argmax_allowed(sel, allowed, E);
        allowed[e] = 0.0f;
        ids[j] = (int32_t)e;
        weights[j] = p[e];
        sum += p[e];
    }
    finish(r, ids, weights, sum);
}

/*                                         name          gated */
const moq_moe_act_info moq_moe_act_table[MOQ_MOE_ACT_COUNT] = {
    [MOQ_MOE_ACT_SILU]         = {"silu",         true},
    [MOQ_MOE_ACT_GELU_ERF]     = {"gelu",         true},
    [MOQ_MOE_ACT_GELU_TANH]    = {"gelu_tanh",    true},
    [MOQ_MOE_ACT_RELU2]        = {"relu2",        false},
    [MOQ_MOE_ACT_SWIGLU_LIMIT] = {"swiglu_limit", true},
};

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void moq_moe_act_ref(moq_moe_act a, const moq_moe_act_params *pr, const float *h, int64_t I, float *out) {
    const float *g = h, *u = h + I;
    for (int64_t i = 0; i < I; i++) {
        float v = 0.0f;
        switch (a) {
        case MOQ_MOE_ACT_SILU: v = g[i] / (1.0f + expf(-g[i])) * u[i]; break;
        case MOQ_MOE_ACT_GELU_ERF: v = 0.5f * g[i] * (1.0f + erff(g[i] * 0.70710678118654752f)) * u[i]; break;
        case MOQ_MOE_ACT_GELU_TANH: {
            const float x = g[i];
            v = 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))) * u[i];
            break;
        }
        case MOQ_MOE_ACT_RELU2: { const float x = h[i] > 0.0f ? h[i] : 0.0f; v = x * x; break; }
        case MOQ_MOE_ACT_SWIGLU_LIMIT: {
            const float gg = fminf(g[i], pr->limit), uu = fminf(fmaxf(u[i], -pr->limit), pr->limit);
            v = gg * sigmoidf_(pr->alpha * gg) * (uu + pr->beta);
            break;
        }
        case MOQ_MOE_ACT_COUNT: break;
        }
        out[i] = v;
    }
}
