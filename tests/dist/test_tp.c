/* test_tp.c — `--tp G [--ep]` (moq_model_opts.tp) against the same checkpoint run whole, for dense
 * (Llama) and MoE (Qwen3-MoE, Mixtral) checkpoints that `moq synth` writes in every format, G = 2, 4,
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
    for (int G = 2; G <= 4; G *= 2) {
        compare(arch, dir, algo, G, false, ref, V);
        if (moe) compare(arch, dir, algo, G, true, ref, V);
    }
}

static void test_dense(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) one("llama", algos[i], false);
}


/* KV heads replicated when G > kv heads (2 KV heads, G = 4), and a vocabulary the ranks hold unevenly
 * (601 rows: 151, 151, 151, 148): the same logits as the whole run. */
static void test_kv_replicated(void **s) {
    (void)s;
    const char *dir = synth("tp_kvrep", "--algo NVFP4 --hidden 256 --heads 4 --kv-heads 2 --inter 512 --layers 2 --vocab 601");
    run ref;
    int64_t V;
    run_model(dir, 1, false, NULL, &ref, &V);
    compare("kv-rep", dir, "NVFP4", 4, false, &ref, V);
    free(ref.lg);
    tu_rmtree(dir);
}

/* Errors at open, named: heads G does not divide; a shard that would cut a 128 x 128 block. */
static void test_errors(void **s) {
    (void)s;
    const char *dir = synth("tp_err", "--algo FP8_PB_WO --layers 1");
    char d[512];
    snprintf(d, sizeof d, "%s", dir);
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 1, o.ctx = 16;
    moq_model *m = NULL;
    moq_error e;
    o.tp = 3;
    TU_ERR(&e, moq_model_open(&m, d, &o, &e), MOQ_ERR_UNSUPPORTED, "config.json", "num_attention_heads 4 is not divisible by --tp 3");
    assert_null(m);
    o.tp = 2; /* 2 KV heads of 64: 64 k_proj rows per rank, half a block */
    TU_ERR(&e, moq_model_open(&m, d, &o, &e), MOQ_ERR_UNSUPPORTED, "k_proj", "cuts a 128x128 quantization block");
    assert_null(m);
    o.tp = 8; /* 4 heads */
    TU_ERR(&e, moq_model_open(&m, d, &o, &e), MOQ_ERR_UNSUPPORTED, "config.json", "num_attention_heads 4 is not divisible by --tp 8");
    tu_rmtree(d);
    dir = synth("tp_err2", "--algo BF16 --layers 1 --heads 32 --kv-heads 32 --inter 48");
    snprintf(d, sizeof d, "%s", dir);
    o.tp = 32;
    TU_ERR(&e, moq_model_open(&m, d, &o, &e), MOQ_ERR_UNSUPPORTED, "config.json", "intermediate_size 48 is not divisible by --tp 32");
    tu_rmtree(d);
    dir = synth("tp_err3", "--algo NVFP4 --layers 1 --arch qwen3moe --experts 2 --top-k 1");
    snprintf(d, sizeof d, "%s", dir);
    o.tp = 4, o.tp_ep = 1;
    TU_ERR(&e, moq_model_open(&m, d, &o, &e), MOQ_ERR_UNSUPPORTED, "config.json", "num_experts 2 is fewer than --tp 4");
    tu_rmtree(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_kv_replicated),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
