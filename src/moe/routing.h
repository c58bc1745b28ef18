/* routing.h — MoE router: scores -> top-k expert ids and weights for one token, and the
 * activations between the two expert GEMMs (NUMERICS §7). Pure functions, no allocation.
 *
 * Routing modes (moq_moe_routing in moq.h):
 *   softmax top-k       p = softmax(logits); ids = top-k(p); w = p[ids]
 *   sigmoid top-k       p = sigmoid(logits); ids = top-k(p + bias); w = p[ids]
 *   sqrtsoftplus top-k  p = sqrt(softplus(logits)), then as sigmoid (DeepSeek-V4)
 *   fixed (hash)        ids given per token (tid2eid[token]); w = p[ids] (DeepSeek-V4 hash_moe)
 *   grouped (DeepSeek)  E split into G groups of E/G; group score = sum of the 2 largest biased
 *                       scores of the group when a correction bias is given (DeepSeek-V3), else
 *                       the largest score (DeepSeek-V2); keep the topk_group best groups; ids =
 *                       top-k over the kept groups' biased scores; w = unbiased p[ids]
 *   then                renormalize: w /= Σw; w *= routed_scaling_factor
 *   Llama-4             sigmoid top-1, weight_on_input (applied by the caller to x)
 * Ties: the lowest expert id (and the lowest group id) wins — a strict ">" scan in id order.
 * torch.topk does not specify its order for equal values; we pin it.
 * Tested by tests/moe/test_moe_routing.c (fp64 naive implementation in the test).
 */
#ifndef MOQ_MOE_ROUTING_H
#define MOQ_MOE_ROUTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moq.h"

#define MOQ_MOE_MAX_GROUPS 256 /* num_expert_group bound (DeepSeek-V3 uses 8) */

/* Checks r against E (group divisibility, k <= experts reachable); errors name `where`. */
moq_status moq_moe_routing_check(const moq_moe_routing *r, int64_t E, const char *where, moq_error *err);

/* Scratch floats moq_moe_route_ref needs for E experts. */
size_t moq_moe_route_scratch(int64_t E);

/* One token: logits f32 [E] -> ids i32 [k], weights f32 [k] (in selection order, best first).
 * scratch f32 >= moq_moe_route_scratch(E). r must have passed moq_moe_routing_check. */
void moq_moe_route_ref(const moq_moe_routing *r, int64_t E, const float *logits, int32_t *ids,
                       float *weights, float *scratch);

/* Hash routing (DeepSeek-V4 hash_moe layers): ids = fixed[0..k) (checked < E by the caller),
 * weights = the scores of those ids, then renormalize and scale as above. */
void moq_moe_route_fixed(const moq_moe_routing *r, int64_t E, const float *logits, const int32_t *fixed, int32_t *ids, float *weights,
                         float *scratch);

/* Activation row: h f32 [2I] (gated: gate = h[0, I), up = h[I, 2I)) or [I] (relu2) -> out f32 [I].
 * limit/alpha/beta used by MOQ_MOE_ACT_SWIGLU_LIMIT only. */
typedef struct moq_moe_act_params { float limit, alpha, beta; } moq_moe_act_params;
typedef struct moq_moe_act_info {
    const char *name;
    bool        gated;    /* w13 holds [gate; up]; otherwise w13 is the up projection alone */
} moq_moe_act_info;
extern const moq_moe_act_info moq_moe_act_table[MOQ_MOE_ACT_COUNT];
void moq_moe_act_ref(moq_moe_act a, const moq_moe_act_params *p, const float *h, int64_t I, float *out);

#endif
