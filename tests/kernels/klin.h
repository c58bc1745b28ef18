/* klin.h — running one registry row on a test weight, and the comparison the kernel tests use:
 * relative Frobenius error ||a − b|| / ||b||, NaN never passes; the first five pairs, the first
 * mismatch, maxdiff and the error are printed on failure (STYLE.md §10). */
#ifndef MOQ_TESTS_KLIN_H
#define MOQ_TESTS_KLIN_H

#include "kernels/kernels.h"
#include "kref.h"

/* Runs row `kernel` (NULL: the registry's choice) on x [M, K]; y poisoned with NaN first.
 * Returns the layer's kernel name through *chosen when not NULL. */
static inline void klin_run(const tw *t, const char *kernel, const void *x, moq_elem xe, int64_t M, void *y, moq_elem ye,
                            uint32_t cpu_mask, const uint8_t *corr, const char **chosen) {
    moq_linear_opts o = moq_linear_opts_default();
    o.name = "test.layer";
    o.kernel = kernel;
    o.cpu_mask = cpu_mask;
    o.rcpa_corr = corr;
    o.n_threads = 2;
    moq_linear *l = NULL;
    TU_OK(moq_linear_create_from_weight(&l, &t->w, &o, err_));
    if (chosen) *chosen = moq_linear_kernel_name(l);
    const size_t n = (size_t)(M * t->w.N);
    if (ye == MOQ_ELEM_F32) for (size_t i = 0; i < n; i++) ((float *)y)[i] = NAN;
    else for (size_t i = 0; i < n; i++) ((uint16_t *)y)[i] = 0x7FC0;
    const size_t wsz = moq_linear_workspace_size(l, M);
    void *ws = malloc(wsz);
    TU_OK(moq_linear_run(l, x, xe, M, y, ye, ws, wsz, err_));
    free(ws);
    moq_linear_free(l);
}

static inline double klin_err(const char *what, const float *a, const double *b, size_t n, double tol) {
    double num = 0, den = 0, maxd = 0;
    size_t first = (size_t)-1, bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        if (isnan(a[i]) || fabs(d) > tol * (fabs(b[i]) + 1e-3)) { if (first == (size_t)-1) first = i; bad++; }
        num += d * d;
        den += b[i] * b[i];
        if (fabs(d) > maxd || isnan(d)) maxd = fabs(d);
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(e <= tol)) {
        for (size_t i = 0; i < n && i < 5; i++) print_message("  [%zu] got %.9g want %.9g\n", i, (double)a[i], b[i]);
        fail_msg("%s: relative Frobenius error %.3g > %.3g, maxdiff %.3g, first mismatch at %zu (%zu elements off); seed %u", what, e,
                 tol, maxd, first, bad, g_seed);
    }
    return e;
}

#endif
