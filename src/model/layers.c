/* layers.c — checkpoint prefix -> resolution -> contract tensors -> canonical moq_weight -> moq_linear.
 * See layers.h. The only facts about tensor roles live in the role table below (which contract
 * suffix feeds which field of moq_weight, chosen by the scheme's quant keys, never by its name).
 * Tested through tests/model/test_model.c (every scheme, fused and unfused, bias, tied heads).
 */
#include "model/layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "format/format.h"
#include "scheme/load.h"
#include "scheme/scheme.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *moq_blobs_alloc(moq_blobs *b, size_t n) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        void **p = realloc(b->p, cap * sizeof *p);
        if (!p) return NULL;
        b->p = p;
        b->cap = cap;
    }
    size_t sz = (n + 63) & ~(size_t)63;
    void *m = aligned_alloc(64, sz ? sz : 64);
    if (!m) return NULL;
    memset(m, 0, sz ? sz : 64);
    b->p[b->n++] = m;
    b->bytes += sz;
    return m;
}

void moq_blobs_free(moq_blobs *b) {
    for (size_t i = 0; i < b->n; i++) free(b->p[i]);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static moq_status to_f32(float *dst, const moq_tensor *t, int64_t n, moq_error *err) {
    if ((int64_t)t->nelem != n)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "%llu elements, expected %lld", (unsigned long long)t->nelem, (long long)n);
    const uint8_t *b = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case MOQ_DT_F32: memcpy(&dst[i], b + 4 * i, 4); break;
        case MOQ_DT_BF16: memcpy(&h, b + 2 * i, 2); dst[i] = moq_bf16_decode(h); break;
        case MOQ_DT_F16: memcpy(&h, b + 2 * i, 2); dst[i] = moq_f16_decode(h); break;
        default:
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected F32, BF16 or F16", moq_dtype_name(t->dtype));
        }
    }
    return MOQ_OK;
}

moq_status moq_layers_f32(float **out, const moq_checkpoint *c, const char *name, int64_t n, moq_blobs *blobs, moq_error *err) {
    const moq_tensor *t = moq_checkpoint_tensor(c, name);
    if (!t) return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "tensor missing, expected [%lld] (F32, BF16 or F16)", (long long)n);
    float *d = moq_blobs_alloc(blobs, (size_t)n * sizeof(float));
    if (!d) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "out of memory for %lld floats", (long long)n);
    MOQ_TRY(to_f32(d, t, n, err));
    *out = d;
    return MOQ_OK;
}

moq_status moq_layers_scalar(float *out, bool *found, const moq_checkpoint *c, const char *name, moq_error *err) {
    const moq_tensor *t = moq_checkpoint_tensor(c, name);
    *found = t != NULL;
    if (!t) return MOQ_OK;
    if (t->nelem != 1)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "%llu elements, expected a scalar", (unsigned long long)t->nelem);
    return to_f32(out, t, 1, err);
}

static moq_status load_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, moq_layer_kind kind,
                              const char *const *shards, int n_shards, const moq_linear_opts *lopts, const moq_slice *slices, bool keep,
                              moq_blobs *blobs, moq_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", prefix);
    const char *dot = strrchr(prefix, '.');
    const moq_packed pk = {dot ? dot + 1 : prefix, shards, n_shards};
    const double t0 = now_s();
    const moq_status st = moq_linear_layer_open_sliced(&out->ll, c, q, prefix, kind, shards ? &pk : NULL, shards ? 1 : 0, lopts, slices, err);
    if (st == MOQ_OK && !keep) moq_linear_layer_drop_canonical(out->ll, kind == MOQ_KIND_EMBEDDING);
    blobs->pack_s += now_s() - t0;
    if (st != MOQ_OK) return st;
    out->w = *moq_linear_layer_weight(out->ll);
    out->lin = moq_linear_layer_linear(out->ll);
    out->res = *moq_linear_layer_resolution(out->ll);
    return MOQ_OK;
}

moq_status moq_layers_load_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                  moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                  moq_blobs *blobs, moq_error *err) {
    return load_linear(out, c, q, prefix, kind, shards, n_shards, lopts, NULL, false, blobs, err);
}

moq_status moq_layers_load_linear_sliced(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                         moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                         const moq_slice *slices, moq_blobs *blobs, moq_error *err) {
    return load_linear(out, c, q, prefix, kind, shards, n_shards, lopts, slices, false, blobs, err);
}

moq_status moq_layers_load_linear_kept(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                       moq_layer_kind kind, const moq_linear_opts *lopts, moq_blobs *blobs, moq_error *err) {
    return load_linear(out, c, q, prefix, kind, NULL, 1, lopts, NULL, true, blobs, err);
}

void moq_layers_drop_canonical(moq_layer_linear *l) {
    if (!l || !l->ll) return;
    moq_linear_layer_drop_canonical(l->ll, false);
    l->w = *moq_linear_layer_weight(l->ll);
}

void moq_layers_memory(const moq_layer_linear *l, moq_model_memory *mm) {
    uint64_t p, o, m;
    moq_linear_layer_memory(l->ll, &p, &o, &m);
    mm->packed += p, mm->owned += o, mm->mapped += m;
}

void moq_layers_close_linear(moq_layer_linear *l) {
    if (!l) return;
    moq_linear_layer_free(l->ll);
    l->ll = NULL;
    l->lin = NULL;
}
