/* tp_common.h — the helpers and bounds shared by test_tp.c (dense, KV replication, errors) and
 * test_tp_moe.c (MoE): a checkpoint written by `moq synth`, run whole and with --tp G [--ep]; the
 * bound each comparison uses is explained at the top of test_tp.c. Each program defines
 * tp_compares(), the runs it compares for one checkpoint. */
#ifndef MOQ_TESTS_TP_COMMON_H
#define MOQ_TESTS_TP_COMMON_H

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

/* The comparisons of one checkpoint against its whole run: defined by each program (which G, --ep). */
static void tp_compares(const char *arch, const char *dir, const char *algo, bool moe, const run *ref, int64_t V);

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
    tp_compares(arch, dir, algo, moe, &ref, V);
    free(ref.lg);
    tu_rmtree(dir);
}

#endif
