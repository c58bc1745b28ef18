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
#include "tu.h"

#include <math.h>

#define TOL_ULP  2e-5  /* relative to max |logit|: f32 reassociation through 2 layers, with margin */
#define TOL_STEP 0.05  /* quantized activations: a few code flips of one step                       */
#define TOL_MED  1e-4

enum { NP = 8, ND = 4 };

static const char *synth(const char *tag, const char *args) {
    static char dir[512];
    char *d = tu_tmpdir(tag), cmd[1024], out[2048];
    snprintf(dir, sizeof dir, "%s", d);
    free(d);
    snprintf(cmd, sizeof cmd, "%s synth %s --vocab 512 %s", tu_moq_bin(), dir, args); /* args may override the vocabulary */
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s: %s", cmd, out);
    return dir;
}

typedef struct run { float *lg; int32_t tok[ND + 1]; } run;

/* Prefill NP tokens (logits of every row), then ND greedy steps: forced = NULL takes the argmax,
 * else feeds forced[i] (teacher forcing). lg: [(NP + ND), V]. */
static void run_model(const char *dir, int G, bool ep, const int32_t *forced, run *r, int64_t *V) {
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 1, o.ctx = 64, o.tp = G, o.tp_ep = ep;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    *V = moq_model_vocab_size(m);
    r->lg = calloc((size_t)((NP + ND) * *V), sizeof(float));
    int32_t p[NP];
    for (int i = 0; i < NP; i++) p[i] = (int32_t)((i * 37 + 11) % *V);
    TU_OK(moq_model_prefill(m, p, NP, r->lg, err_));
    for (int s = 0; s < ND; s++) {
        const float *l = moq_model_logits(m);
        int32_t best = 0;
        for (int64_t v = 1; v < *V; v++)
            if (l[v] > l[best]) best = (int32_t)v;
        r->tok[s] = best;
        TU_OK(moq_model_decode(m, forced ? forced[s] : best, err_));
        memcpy(r->lg + (NP + s) * *V, moq_model_logits(m), (size_t)*V * sizeof(float));
    }
    moq_model_free(m);
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* Compares G ranks against the whole run, position by position. */
static double max_rel(const run *a, const run *b, int64_t V) {
    double w = 0;
    for (int p = 0; p < NP + ND; p++) {
        double mx = 0, d = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, fabs(a->lg[p * V + v])), d = fmax(d, fabs((double)a->lg[p * V + v] - b->lg[p * V + v]));
        w = fmax(w, d / mx);
    }
    return w;
}

static double tol_ptok; /* the per-token format's measured bound (one() sets it) */

static void compare(const char *what, const char *dir, const char *algo, int G, bool ep, const run *ref, int64_t V) {
    run t;
    int64_t V2;
    run_model(dir, G, ep, ref->tok, &t, &V2);
    assert_int_equal(V, V2);
    const bool ptok = strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN") == 0;
    const bool exact_act = strcmp(algo, "BF16") == 0 || strcmp(algo, "W4A16_NVFP4") == 0;
    const double tol = ptok ? tol_ptok : exact_act ? TOL_ULP : TOL_STEP;
    double *rel = malloc((NP + ND) * sizeof(double)), worst = 0;
    for (int p = 0; p < NP + ND; p++) {
        const float *a = ref->lg + p * V, *b = t.lg + p * V;
        double mx = 0, d = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, fabs(a[v])), d = fmax(d, fabs((double)a[v] - b[v]));
        rel[p] = d / mx;
        worst = fmax(worst, rel[p]);
        if (rel[p] > tol) fail_msg("%s %s --tp %d%s: position %d logits differ by %.3g of max |logit| %.3g, bound %.3g", what, algo, G,
                                   ep ? " --ep" : "", p, rel[p], mx, tol);
        if (p < NP) continue;
        int64_t i1 = 0, i2 = -1, j = 0; /* the whole run's top two, and the TP argmax */
        for (int64_t v = 1; v < V; v++) {
            if (a[v] > a[i1]) i2 = i1, i1 = v;
            else if (i2 < 0 || a[v] > a[i2]) i2 = v;
            if (b[v] > b[j]) j = v;
        }
        if (a[i1] - a[i2] > 2 * tol * mx && j != i1)
            fail_msg("%s %s --tp %d%s: step %d greedy token %lld, whole run %lld (margin %.3g)", what, algo, G, ep ? " --ep" : "", p - NP,
                     (long long)j, (long long)i1, (double)(a[i1] - a[i2]));
    }
    qsort(rel, NP + ND, sizeof *rel, cmpd);
    if (!ptok && rel[(NP + ND) / 2] > (exact_act ? TOL_ULP : TOL_MED))
        fail_msg("%s %s --tp %d%s: median position differs by %.3g of max |logit|, bound %.3g", what, algo, G, ep ? " --ep" : "",
                 rel[(NP + ND) / 2], exact_act ? TOL_ULP : TOL_MED);
    print_message("%-9s %-26s --tp %d%-5s max %.2e median %.2e\n", what, algo, G, ep ? " --ep" : "", worst, rel[(NP + ND) / 2]);
    free(rel);
    free(t.lg);
}

static const char *const algos[] = {"BF16", "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8", "NVFP4_AWQ",
                                    "MIXED_PRECISION"};

static void one(const char *arch, const char *algo, bool moe) {
    char args[256], tag[96];
    /* 4 KV heads: G = 4 keeps one each; FP8_PB_WO: head_dim 128, so every rank of G = 2, 4 keeps whole
     * 128 x 128 blocks (hidden 512), the others hidden 256 */
    const char *hid = strcmp(algo, "FP8_PB_WO") == 0 ? "512" : "256";
    snprintf(args, sizeof args, "--algo %s --hidden %s --heads 4 --kv-heads 4 --inter 512 --layers 2%s%s", algo, hid, moe ? " --experts 4 --arch " : "",
             moe ? arch : "");
    snprintf(tag, sizeof tag, "tp_%s_%s", arch, algo);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", synth(tag, args));
    run ref;
    int64_t V;
    run_model(dir, 1, false, NULL, &ref, &V);
    if (strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN") == 0) { /* the quantization's own size, measured */
        snprintf(args, sizeof args, "--algo BF16 --hidden 256 --heads 4 --kv-heads 4 --inter 512 --layers 2%s%s", moe ? " --experts 4 --arch " : "",
                 moe ? arch : "");
        snprintf(tag, sizeof tag, "tp_%s_bf16ref", arch);
        char bdir[512];
        snprintf(bdir, sizeof bdir, "%s", synth(tag, args));
        run b;
        int64_t V2;
        run_model(bdir, 1, false, ref.tok, &b, &V2);
        tol_ptok = 2 * max_rel(&ref, &b, V) + TOL_ULP;
        print_message("%-9s per-token FP8 vs BF16 activations: %.3g of max |logit|; TP bound %.3g\n", arch, max_rel(&ref, &b, V), tol_ptok);
        free(b.lg);
        tu_rmtree(bdir);
    }
    /* experts split 2 ways and spread whole over 4 ranks for every format; the other two of
     * {2, 4} x {split, --ep} for BF16 and NVFP4 (the program stays short) */
    const bool all = strcmp(algo, "BF16") == 0 || strcmp(algo, "NVFP4") == 0;
    compare(arch, dir, algo, 2, false, &ref, V);
    compare(arch, dir, algo, 4, true, &ref, V);
    if (all) compare(arch, dir, algo, 4, false, &ref, V), compare(arch, dir, algo, 2, true, &ref, V);
    (void)moe;
    free(ref.lg);
    tu_rmtree(dir);
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
