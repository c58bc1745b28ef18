/* hf_ref.c — see hf_ref.h. */
#include "hf_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tu.h"

void hf_ref_load(ref *r, const char *model) {
    char rel[256];
    snprintf(rel, sizeof rel, "hf_tiny/%s/ref.safetensors", model);
    char *p = tu_src_data_path(rel);
    TU_OK(moq_checkpoint_open(&r->ck, p, NULL, err_));
    free(p);
    const moq_tensor *t = moq_checkpoint_tensor(r->ck, "tokens"), *g = moq_checkpoint_tensor(r->ck, "greedy"),
                     *l = moq_checkpoint_tensor(r->ck, "logits");
    assert_non_null(t);
    assert_non_null(g);
    assert_non_null(l);
    assert_int_equal(t->nelem, NT);
    assert_int_equal(g->nelem, NG);
    memcpy(r->tokens, t->data, sizeof r->tokens);
    memcpy(r->greedy, g->data, sizeof r->greedy);
    assert_int_equal(l->shape[0], NT);
    r->V = l->shape[1];
    r->logits = l->data;
}

double hf_rel_err(const float *got, const float *want, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        mr = fmax(mr, fabs((double)want[i]));
        const double d = fabs((double)got[i] - (double)want[i]);
        md = d > md || d != d ? d : md;
    }
    return md / mr;
}

int hf_argmax(const float *x, int64_t n) { return hf_argmax_except(x, n, -1); }

int hf_argmax_except(const float *x, int64_t n, int64_t never) {
    int b = never == 0 ? 1 : 0;
    for (int64_t i = b + 1; i < n; i++)
        if (i != never && x[i] > x[b]) b = (int)i;
    return b;
}
