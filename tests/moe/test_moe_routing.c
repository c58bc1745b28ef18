/* test_moe_routing.c — the router (src/moe/routing.c) and the activations against fp64 naive
 * implementations written here from NUMERICS §7 and the seeds' rules: softmax top-k with and
 * without renormalization, sigmoid top-k with a selection bias, DeepSeek-V3 grouped top-k
 * (group score = sum of the two best biased scores; without bias the best one), routed scaling,
 * Llama-4 top-1, DeepSeek-V4 sqrtsoftplus and hash (fixed) routing, ties to the lowest id, and the
 * configuration errors. Ids must match exactly
 * (logits are spaced so f32 and fp64 order them the same); weights to 1e-6 relative. */
#include "tu.h"

#include <math.h>

#include "moe/routing.h"
#include "tmoe_ref.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) { g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(g_rng >> 33); }
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() & 0xFFFFFF) / 16777216.0; }

/* Logits on a shuffled grid (spacing 0.09) plus small noise: no near-ties anywhere. */
static void make_logits(float *l, int E) {
    int *perm = malloc((size_t)E * sizeof(int));
    for (int i = 0; i < E; i++) perm[i] = i;
    for (int i = E - 1; i > 0; i--) { const int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i]; perm[i] = perm[j], perm[j] = t; }
    for (int i = 0; i < E; i++) l[i] = (float)((perm[i] - E / 2) * 0.09 + urand(-0.004, 0.004));
    free(perm);
}

static void check_mode(const char *what, moq_moe_routing r, int E, int tokens) {
    moq_error e = {0};
    TU_OK(moq_moe_routing_check(&r, E, "test.mlp", err_));
    float logit[512], scr[3 * 512], w[64];
    double dl[512];
    int32_t ids[64];
    int rid[64];
    double rw[64];
    for (int t = 0; t < tokens; t++) {
        make_logits(logit, E);
        moq_moe_route_ref(&r, E, logit, ids, w, scr);
        for (int i = 0; i < E; i++) dl[i] = logit[i];
        route_fp64(&r, E, dl, rid, rw);
        for (int j = 0; j < r.top_k; j++) {
            if (ids[j] != rid[j]) fail_msg("%s E=%d token %d slot %d: expert %d, expected %d", what, E, t, j, ids[j], rid[j]);
            if (fabs(w[j] - rw[j]) > 1e-6 * fabs(rw[j]) + 1e-9) fail_msg("%s token %d slot %d: weight %.9g, expected %.9g", what, t, j, (double)w[j], rw[j]);
        }
    }
    (void)e;
}

static void test_modes(void **state) {
    (void)state;
    moq_moe_routing r = {0};
    r.routed_scaling_factor = 1.0f;
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 8, r.renormalize = true;
    check_mode("softmax top-8 renorm", r, 128, 200);
    r.renormalize = false, r.top_k = 2;
    check_mode("softmax top-2", r, 8, 200);
    r.scoring = MOQ_MOE_SCORE_SIGMOID, r.top_k = 4;
    check_mode("sigmoid top-4", r, 60, 200);
    float bias[256];
    for (int i = 0; i < 256; i++) bias[i] = (float)urand(-0.3, 0.3);
    r.correction_bias = bias, r.num_expert_group = 8, r.topk_group = 4, r.top_k = 8, r.renormalize = true, r.routed_scaling_factor = 2.5f;
    check_mode("deepseek-v3 grouped (bias, 8 groups, 4 kept, x2.5)", r, 256, 200);
    r.correction_bias = NULL, r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.routed_scaling_factor = 1.0f, r.topk_group = 3, r.top_k = 6;
    check_mode("deepseek-v2 grouped softmax (group max)", r, 64, 200);
    r.scoring = MOQ_MOE_SCORE_SQRTSOFTPLUS, r.correction_bias = bias, r.num_expert_group = 0, r.topk_group = 0, r.top_k = 6,
    r.renormalize = true, r.routed_scaling_factor = 1.5f;
    check_mode("deepseek-v4 sqrtsoftplus top-6 (bias, x1.5)", r, 256, 200);
    moq_moe_routing l4 = {0};
    l4.scoring = MOQ_MOE_SCORE_SIGMOID, l4.top_k = 1, l4.weight_on_input = true, l4.routed_scaling_factor = 1.0f;
    check_mode("llama-4 top-1 sigmoid", l4, 16, 200);
}

/* DeepSeek-V4 hash routing: the given experts, weighted by their sqrtsoftplus scores, renormalized
 * and scaled (DeepseekV4HashRouter), in fp64 here; a logit above 20 takes torch's softplus threshold. */
static void test_fixed(void **state) {
    (void)state;
    moq_moe_routing r = {0};
    r.scoring = MOQ_MOE_SCORE_SQRTSOFTPLUS, r.top_k = 3, r.renormalize = true, r.routed_scaling_factor = 1.5f;
    float logit[8] = {0.3f, -1.2f, 2.0f, 25.0f, -0.4f, 1.1f, -3.0f, 0.0f}, scr[24], w[3];
    const int32_t fixed[3] = {6, 3, 1};
    int32_t ids[3];
    moq_moe_route_fixed(&r, 8, logit, fixed, ids, w, scr);
    double p[3], s = 0;
    for (int j = 0; j < 3; j++) {
        const double x = logit[fixed[j]];
        s += (p[j] = sqrt(x > 20 ? x : log(1.0 + exp(x))));
    }
    for (int j = 0; j < 3; j++) {
        assert_int_equal(ids[j], fixed[j]);
        const double want = p[j] / s * 1.5;
        if (fabs(w[j] - want) > 1e-6 * want) fail_msg("slot %d: weight %.9g, expected %.9g", j, (double)w[j], want);
    }
}

/* The selection bias changes which experts are chosen but not their weights. */
static void test_bias_selects_only(void **state) {
    (void)state;
    moq_moe_routing r = {0};
    r.scoring = MOQ_MOE_SCORE_SIGMOID, r.top_k = 1, r.routed_scaling_factor = 1.0f;
    float logit[4] = {2.0f, 0.0f, -1.0f, 1.0f}, bias[4] = {0, 0, 0.9f, 0}, scr[12], w;
    int32_t id;
    r.correction_bias = bias;
    moq_moe_route_ref(&r, 4, logit, &id, &w, scr);
    assert_int_equal(id, 2); /* sigmoid(-1) + 0.9 = 1.169 > sigmoid(2) = 0.881 */
    assert_true(fabs(w - 1.0 / (1.0 + exp(1.0))) < 1e-7);
}

static void test_ties_lowest_id(void **state) {
    (void)state;
    moq_moe_routing r = {0};
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 3, r.routed_scaling_factor = 1.0f;
    float logit[6] = {0.5f, 1.0f, 1.0f, 0.5f, 1.0f, 0.5f}, scr[18], w[3];
    int32_t ids[3];
    moq_moe_route_ref(&r, 6, logit, ids, w, scr);
    assert_int_equal(ids[0], 1), assert_int_equal(ids[1], 2), assert_int_equal(ids[2], 4);
    r.top_k = 4;
    int32_t ids4[4];
    float w4[4];
    moq_moe_route_ref(&r, 6, logit, ids4, w4, scr);
    assert_int_equal(ids4[3], 0);
    /* grouped: groups {0,1,2} and {3,4,5} tie on their best score: group 0 wins */
    float lg[6] = {1, 0, 0, 1, 0, 0};
    r.num_expert_group = 2, r.topk_group = 1, r.top_k = 1;
    moq_moe_route_ref(&r, 6, lg, ids, w, scr);
    assert_int_equal(ids[0], 0);
}

static void test_config_errors(void **state) {
    (void)state;
    moq_moe_routing r = {0};
    moq_error e = {0};
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 9, r.routed_scaling_factor = 1.0f;
    TU_ERR(&e, moq_moe_routing_check(&r, 8, "model.layers.1.mlp", &e), MOQ_ERR_CONFIG, "model.layers.1.mlp", "top_k 9");
    r.top_k = 2, r.num_expert_group = 3;
    TU_ERR(&e, moq_moe_routing_check(&r, 8, "model.layers.1.mlp", &e), MOQ_ERR_CONFIG, "model.layers.1.mlp", "does not divide");
    r.num_expert_group = 4, r.topk_group = 1, r.top_k = 3;
    TU_ERR(&e, moq_moe_routing_check(&r, 8, "model.layers.1.mlp", &e), MOQ_ERR_CONFIG, "model.layers.1.mlp", "topk_group");
    r.num_expert_group = 0, r.top_k = 2, r.weight_on_input = true;
    TU_ERR(&e, moq_moe_routing_check(&r, 8, "model.layers.1.mlp", &e), MOQ_ERR_CONFIG, "model.layers.1.mlp", "top_k 1");
    r.weight_on_input = false, r.routed_scaling_factor = NAN;
    TU_ERR(&e, moq_moe_routing_check(&r, 8, "model.layers.1.mlp", &e), MOQ_ERR_CONFIG, "model.layers.1.mlp", "routed_scaling_factor");
}

static void test_activations(void **state) {
    (void)state;
    enum { I = 300 };
    float h[2 * I], out[I];
    const moq_moe_act_params gpt = {7.0f, 1.702f, 1.0f}, ds4 = {10.0f, 1.0f, 0.0f};
    for (int a = 0; a < MOQ_MOE_ACT_COUNT; a++)
        for (int pset = 0; pset < 2; pset++) {
            const moq_moe_act_params *p = pset ? &ds4 : &gpt;
            for (int i = 0; i < 2 * I; i++) h[i] = (float)urand(-12, 12);
            h[0] = 0, h[I] = 3; /* g = 0 */
            moq_moe_act_ref((moq_moe_act)a, p, h, I, out);
            const bool gated = moq_moe_act_table[a].gated;
            for (int i = 0; i < I; i++) {
                const double want = act_fp64((moq_moe_act)a, h[i], gated ? h[I + i] : 0, p->limit, p->alpha, p->beta);
                if (fabs(out[i] - want) > 4e-6 * fabs(want) + 1e-6)
                    fail_msg("%s [%d] g=%g u=%g: %.9g, expected %.9g", moq_moe_act_table[a].name, i, (double)h[i], (double)h[I + i], (double)out[i], want);
            }
        }
    /* gpt-oss: the gate is clamped from above only, the up from both sides, and the +1 stays */
    float hh[2] = {-20.0f, -20.0f}, o;
    moq_moe_act_ref(MOQ_MOE_ACT_SWIGLU_LIMIT, &gpt, hh, 1, &o);
    assert_true(fabs(o - act_fp64(MOQ_MOE_ACT_SWIGLU_LIMIT, -20, -7, 7, 1.702, 1)) < 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes),          cmocka_unit_test(test_bias_selects_only),
        cmocka_unit_test(test_fixed), cmocka_unit_test(test_ties_lowest_id),
        cmocka_unit_test(test_config_errors),  cmocka_unit_test(test_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
