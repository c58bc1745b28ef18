/* hf_ref.c — see hf_ref.h. */
#include "hf_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tu.h"
#include "model/model.h"

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

void hf_ref_check_dir(const char *model, const char *dir, const char *arch, int threads) {
    ref r;
    hf_ref_load(&r, model);
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = threads;
    o.ctx = 64;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    assert_string_equal(moq_model_architecture(m), arch);
    assert_int_equal(moq_model_vocab_size(m), r.V);
    const int64_t V = r.V;
    float *pre = malloc(sizeof(float) * NT * (size_t)V), *dec = malloc(sizeof(float) * NT * (size_t)V);

    /* 1. prefill of every token */
    TU_OK(moq_model_prefill(m, r.tokens, NT, pre, err_));
    const double e1 = hf_rel_err(pre, r.logits, NT * V);

    /* 2. prompt, then greedy decode step by step */
    moq_model_reset(m);
    TU_OK(moq_model_prefill(m, r.tokens, NP, dec, err_));
    int32_t next = (int32_t)hf_argmax(dec + (NP - 1) * V, V);
    for (int j = 0; j < NG; j++) {
        assert_int_equal(next, r.greedy[j]);
        TU_OK(moq_model_decode(m, next, err_));
        memcpy(dec + (NP + j) * V, moq_model_logits(m), sizeof(float) * (size_t)V);
        next = (int32_t)hf_argmax(moq_model_logits(m), V);
    }
    const double e2 = hf_rel_err(dec + NP * V, r.logits + NP * V, NG * V);
    const double e3 = hf_rel_err(dec + NP * V, pre + NP * V, NG * V);
    print_message("  %-14s prefill vs transformers %.2e, decode vs transformers %.2e, decode vs prefill %.2e\n", model, e1, e2, e3);
    assert_true(e1 < 1e-3);
    assert_true(e2 < 1e-3);
    assert_true(e3 < 1e-5);
    free(pre);
    free(dec);
    moq_model_free(m);
    moq_checkpoint_free(r.ck);
}
