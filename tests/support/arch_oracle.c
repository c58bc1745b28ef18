/* arch_oracle.c — see arch_oracle.h. Moved from tests/model/test_arch*.c. */
#include <math.h>

#include "tu.h"
#include "arch_oracle.h"

void ao_lin1(gen *g, const char *pre, const char *name, int64_t N, int64_t K, const char *algo, bool bias, olin *out) {
    const char *const names[1] = {name};
    const int64_t ns[1] = {N};
    memset(out, 0, sizeof *out);
    tg_add_linears(g, pre, names, ns, 1, K, algo, bias, out);
}

void ao_mlp(gen *g, const char *pre, int64_t H, int64_t I, const char *algo, olin *gt, olin *up, olin *dn) {
    static const char *const gu[2] = {"gate_proj", "up_proj"};
    const int64_t ngu[2] = {I, I};
    olin t[2];
    memset(t, 0, sizeof t);
    tg_add_linears(g, pre, gu, ngu, 2, H, algo, false, t);
    *gt = t[0], *up = t[1];
    ao_lin1(g, pre, "down_proj", H, I, algo, false, dn);
}

void ao_rms(double *x, const double *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double r = 1 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) x[i] = x[i] * r * (w ? w[i] : 1.0);
}

void ao_mlp_run(const olin *g, const olin *u, const olin *d, int I, const double *h, double *out) {
    double *a = malloc(sizeof(double) * (size_t)I * 2), *b = a + I;
    assert_non_null(a);
    tg_lin(g, h, a), tg_lin(u, h, b);
    for (int i = 0; i < I; i++) a[i] = a[i] / (1 + exp(-a[i])) * b[i];
    tg_lin(d, a, out);
    free(a);
}

void ao_check_logits(const char *name, const char *dir, const int32_t *prompt, int nt, int V, int ctx, const double *want,
                     double tol) {
    const int npre = nt - 4;
    moq_model_opts mo = moq_model_opts_default();
    mo.n_threads = 2;
    mo.ctx = ctx;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &mo, err_));
    float *got = malloc(sizeof(float) * (size_t)nt * (size_t)V);
    TU_OK(moq_model_prefill(m, prompt, npre, got, err_));
    for (int p = npre; p < nt; p++) {
        TU_OK(moq_model_decode(m, prompt[p], err_));
        memcpy(got + (size_t)p * V, moq_model_logits(m), sizeof(float) * V);
    }
    double md = 0, mr = 0;
    for (int i = 0; i < nt * V; i++) md = fmax(md, fabs(got[i] - want[i])), mr = fmax(mr, fabs(want[i]));
    print_message("  %-20s max|logit-ref|/max|ref| = %.3g (limit %.3g)\n", name, md / mr, tol);
    if (!(md / mr <= tol)) fail_msg("%s: relative logit error %.3g > %.3g", name, md / mr, tol);
    moq_model_free(m);
    free(got);
}

void ao_open_cfg_err(const char *tag, const char *cfg, moq_status code, const char *msg) {
    char *dst = tu_tmpdir(tag);
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dst, err_));
    static const uint16_t one[1] = {0x3f80};
    TU_OK(moq_writer_add(w, "model.norm.weight", MOQ_DT_BF16, 1, (const int64_t[]){1}, one, 2, err_));
    TU_OK(moq_writer_file(w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_model *m = NULL;
    moq_error e = {0};
    const moq_status st = moq_model_open(&m, dst, NULL, &e);
    TU_ERR(&e, st, code, "config.json", msg);
    assert_null(m);
    tu_rmtree(dst);
    free(dst);
}
