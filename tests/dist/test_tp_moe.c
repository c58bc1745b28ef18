/* test_tp_moe.c — the MoE half of test_tp.c (same helpers and bounds, kept apart so that each
 * program stays short): `--tp G [--ep]` against the same checkpoint run whole, for MoE (Qwen3-MoE, Mixtral) checkpoints that `moq synth` writes in every format, G = 2, 4,
 * experts split (TP) or spread whole (--ep).
 *
 * What may differ, and the bound (NUMERICS-style arithmetic, stated once here):
 *  - the embedding sum is exact (one rank holds each row, the others add zeros), the lm_head gather
 *    copies; attention heads and column-parallel rows are computed by the same kernels on the same
 *    inputs, so they are bit-identical;
 *  - each row-parallel output (o_proj, down_proj, the experts' w2) is the sum of G partial dot
 *    products over K/G instead of one over K: f32 reassociation, |Δy| <= (G - 1) · u · Σ|w x| with
 *    u = 2^-24, a few ulps of the output;
 *  - those ulps reach the next layer's activation quantizer (NVFP4, FP8, MXFP8): a value within an
 *    ulp of a rounding boundary takes the neighbouring code, one quantization step of that element
 *    (e4m3 2^-3 relative, e2m1 up to 1/3), so a quantized format's logits differ by rare steps, not
 *    by ulps. The checks below: every position's logits agree to TOL_ULP (relative to the position's
 *    largest logit) for the unquantized activations (BF16, W4A16_NVFP4), and to TOL_STEP for the
 *    quantized ones, whose median difference must still be at ulp level (TOL_MED);
 *  - FP8_PER_CHANNEL_PER_TOKEN quantizes each token with a scale from its row's amax: a row-parallel
 *    layer sees only its K/G slice of the row, so each rank's scale is its slice's (as vLLM and SGLang
 *    do: their per-token quantizer runs on the local input partition). That is a different
 *    quantization, not a reordering, so its bound is measured: two quantizations of the same
 *    activations differ by at most the sum of their errors, so the TP logits may differ from the
 *    whole run's by 2x the whole run's own distance from the unquantized-activation checkpoint
 *    (synth's BF16 of the same seed, teacher-forced alike), plus TOL_ULP.
 * Greedy tokens: teacher-forced on the whole run's tokens, the TP argmax must equal it wherever the
 * whole run's top two logits are further apart than twice the bound (else a tie within the bound).
 */
#include "tp_common.h"

static void tp_compares(const char *arch, const char *dir, const char *algo, bool moe, const run *ref, int64_t V) {
    /* experts split 2 ways and spread whole over 4 ranks for every format; the other two of
     * {2, 4} x {split, --ep} for BF16 and NVFP4 (the program stays short) */
    const bool all = strcmp(algo, "BF16") == 0 || strcmp(algo, "NVFP4") == 0;
    compare(arch, dir, algo, 2, false, ref, V);
    compare(arch, dir, algo, 4, true, ref, V);
    if (all) compare(arch, dir, algo, 4, false, ref, V), compare(arch, dir, algo, 2, true, ref, V);
    (void)moe;
}

/* Every expert format on one of the two MoE layouts (Qwen3-MoE experts.N.{gate,up,down}_proj with
 * q/k norms, Mixtral experts.N.{w1,w3,w2}), alternating; BF16 and NVFP4 on both. */
static void test_moe(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        if (strcmp(algos[i], "MIXED_PRECISION") == 0) continue;
        const bool both = strcmp(algos[i], "BF16") == 0 || strcmp(algos[i], "NVFP4") == 0;
        if (both || i % 2 == 0) one("qwen3moe", algos[i], true);
        if (both || i % 2 == 1) one("mixtral", algos[i], true);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
