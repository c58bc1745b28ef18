/* tmoe_ref.h — what the MoE tests share and moq does not: an fp64 router and the activations,
 * written from NUMERICS §7 and the seeds' routing rules (see test_moe_routing.c for the list). */
#ifndef MOQ_TESTS_TMOE_REF_H
#define MOQ_TESTS_TMOE_REF_H

#include <math.h>

#include "moq.h"

/* Selection margin of the last call: the gap between the k-th chosen and the best unchosen
 * biased score (only used to skip near-ties where f32 and fp64 may legitimately differ). */
static double g_route_margin;

static inline void route_fp64(const moq_moe_routing *r, int E, const double *logit, int *ids, double *w) {
    double p[512], sel[512];
    int allowed[512];
    if (r->scoring == MOQ_MOE_SCORE_SOFTMAX) {
        double mx = -INFINITY, s = 0;
        for (int e = 0; e < E; e++) mx = fmax(mx, logit[e]);
        for (int e = 0; e < E; e++) s += exp(logit[e] - mx);
        for (int e = 0; e < E; e++) p[e] = exp(logit[e] - mx) / s;
    } else if (r->scoring == MOQ_MOE_SCORE_SQRTSOFTPLUS) { /* DeepSeek-V4: sqrt(softplus), torch's threshold 20 */
        for (int e = 0; e < E; e++) p[e] = sqrt(logit[e] > 20.0 ? logit[e] : log1p(exp(logit[e])));
    } else {
        for (int e = 0; e < E; e++) p[e] = 1.0 / (1.0 + exp(-logit[e]));
    }
    for (int e = 0; e < E; e++) sel[e] = p[e] + (r->correction_bias ? r->correction_bias[e] : 0.0), allowed[e] = 1;
    if (r->num_expert_group > 1) {
        const int G = r->num_expert_group, per = E / G;
        double gs[64];
        int gok[64];
        for (int g = 0; g < G; g++) {
            double b1 = -INFINITY, b2 = -INFINITY;
            for (int i = 0; i < per; i++) {
                const double v = sel[g * per + i];
                if (v > b1) b2 = b1, b1 = v; else if (v > b2) b2 = v;
            }
            gs[g] = r->correction_bias ? b1 + b2 : b1;
            gok[g] = 0;
        }
        for (int t = 0; t < r->topk_group; t++) {
            int best = -1;
            for (int g = 0; g < G; g++) if (!gok[g] && (best < 0 || gs[g] > gs[best])) best = g;
            gok[best] = 1;
        }
        for (int e = 0; e < E; e++) allowed[e] = gok[e / per];
    }
    double sum = 0, last = 0;
    for (int j = 0; j < r->top_k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) if (allowed[e] && (best < 0 || sel[e] > sel[best])) best = e;
        allowed[best] = 0;
        ids[j] = best, w[j] = p[best], sum += p[best], last = sel[best];
    }
    double next = -INFINITY;
    for (int e = 0; e < E; e++) if (allowed[e]) next = fmax(next, sel[e]);
    g_route_margin = last - next;
    for (int j = 0; j < r->top_k; j++) w[j] = (r->renormalize ? w[j] / sum : w[j]) * r->routed_scaling_factor;
}

static inline double act_fp64(moq_moe_act a, double g, double u, double L, double al, double be) {
    switch (a) {
    case MOQ_MOE_ACT_SILU: return g / (1 + exp(-g)) * u;
    case MOQ_MOE_ACT_GELU_ERF: return 0.5 * g * (1 + erf(g / sqrt(2.0))) * u;
    case MOQ_MOE_ACT_GELU_TANH: return 0.5 * g * (1 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
    case MOQ_MOE_ACT_RELU2: return g > 0 ? g * g : 0;
    case MOQ_MOE_ACT_SWIGLU_LIMIT: {
        const double gg = fmin(g, L), uu = fmax(fmin(u, L), -L);
        return gg / (1 + exp(-al * gg)) * (uu + be);
    }
    default: return NAN;
    }
}

#endif
