/* slice.c — one rank's view of a checkpoint matrix's tensors (slice.h says what is cut how).
 * Tested by tests/dist/test_shard.c. */
#include "scheme/slice.h"

#include <string.h>

#include "core/error.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void moq_slice_align(const moq_quant_key *w, const moq_quant_key *a, int64_t *rows, int64_t *cols) {
    *rows = w && w->group_rows > 1 ? w->group_rows : 1;
    *cols = w && w->group_cols > 1 ? w->group_cols : 1;
    if (a && a->group_cols > *cols) *cols = a->group_cols; /* activation groups run along K too */
}

moq_status moq_slice_check(const moq_slice *s, const moq_quant_key *w, const moq_quant_key *a, int64_t N, int64_t K, const char *where,
                           moq_error *err) {
    if (!s || s->dim == MOQ_SLICE_NONE) return MOQ_OK;
    const bool rows = s->dim == MOQ_SLICE_ROWS;
    const int64_t ext = rows ? N : K, end = s->start + s->count;
    if (s->start < 0 || s->count < 1 || end > ext)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "slice %s [%lld, %lld) outside [0, %lld)", rows ? "rows" : "columns",
                        (long long)s->start, (long long)end, (long long)ext);
    int64_t ar, ac;
    moq_slice_align(w, a, &ar, &ac);
    const int64_t al = rows ? ar : ac;
    const int64_t bad = s->start % al ? s->start : (end % al && end != ext) ? end : -1;
    if (bad >= 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, where, "a shard edge at %s %lld cuts a %lldx%lld quantization block (%s %lld of %lld per rank; "
                        "edges must be multiples of %lld): choose a --tp that keeps whole blocks, as vLLM and SGLang require",
                        rows ? "row" : "column", (long long)bad, (long long)ar, (long long)ac, rows ? "rows" : "columns",
                        (long long)s->count, (long long)ext, (long long)al);
    return MOQ_OK;
}

/* Grid of a role in units of its own elements: rows x cols, and the slice's part of it. */
typedef struct cut {
    int64_t gr, gc;            /* grid rows, cols (elements of the tensor's row-major data)  */
    int64_t r0, nr, c0, nc;    /* kept part                                                  */
} cut;

static moq_status plan(const moq_tensor *t, moq_slice_role role, const moq_quant_key *w, int64_t N, int64_t K, const moq_slice *s, cut *c,
                       moq_error *err) {
    const bool rows = s->dim == MOQ_SLICE_ROWS;
    int64_t ur = 1, uc = 1; /* matrix rows / columns per grid cell */
    c->gr = c->gc = 1;
    switch (role) {
    case MOQ_ROLE_WEIGHT: c->gr = N, c->gc = K; break;
    case MOQ_ROLE_SCALE:
        ur = w->group_rows > 0 ? w->group_rows : N, uc = w->group_cols > 0 ? w->group_cols : K;
        c->gr = cdiv(N, ur), c->gc = cdiv(K, uc);
        break;
    case MOQ_ROLE_VEC_N: c->gr = N, c->gc = 1, uc = K; break;
    case MOQ_ROLE_VEC_K: c->gr = 1, c->gc = K, ur = N; break;
    case MOQ_ROLE_SCALAR: c->gr = 1, c->gc = 1, ur = N, uc = K; break;
    }
    if ((uint64_t)(c->gr * c->gc) != t->nelem && role != MOQ_ROLE_WEIGHT)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, t->name, "%llu values, expected a %lldx%lld grid for the slice", (unsigned long long)t->nelem,
                        (long long)c->gr, (long long)c->gc);
    c->r0 = 0, c->nr = c->gr, c->c0 = 0, c->nc = c->gc;
    if (rows && ur < N) c->r0 = s->start / ur, c->nr = cdiv(s->start + s->count, ur) - c->r0;
    if (!rows && uc < K) c->c0 = s->start / uc, c->nc = cdiv(s->start + s->count, uc) - c->c0;
    return MOQ_OK;
}

size_t moq_slice_view_bytes(const moq_tensor *t, moq_slice_role role, const moq_quant_key *w, int64_t N, int64_t K, const moq_slice *s) {
    cut c;
    if (!t || !s || s->dim == MOQ_SLICE_NONE || plan(t, role, w, N, K, s, &c, NULL) != MOQ_OK) return 0;
    if (c.c0 == 0 && c.nc == c.gc) return 0; /* whole rows: borrowed */
    const uint64_t row = t->nbytes / (uint64_t)c.gr;
    return (size_t)((uint64_t)c.nr * row / (uint64_t)c.gc * (uint64_t)c.nc);
}

moq_status moq_slice_view(const moq_tensor *t, moq_slice_role role, const moq_quant_key *w, int64_t N, int64_t K, const moq_slice *s,
                          void *buf, moq_tensor *out, bool *keep, moq_error *err) {
    *out = *t;
    *keep = true;
    if (!s || s->dim == MOQ_SLICE_NONE) return MOQ_OK;
    if (role == MOQ_ROLE_VEC_N && s->dim == MOQ_SLICE_COLS && !s->bias) {
        *keep = false;
        return MOQ_OK;
    }
    cut c;
    MOQ_TRY(plan(t, role, w, N, K, s, &c, err));
    const uint64_t row = t->nbytes / (uint64_t)c.gr; /* bytes per grid row */
    if ((row * (uint64_t)c.c0) % (uint64_t)c.gc || (row * (uint64_t)c.nc) % (uint64_t)c.gc)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, t->name, "columns [%lld, %lld) of %lld do not start and end on a byte", (long long)c.c0,
                        (long long)(c.c0 + c.nc), (long long)c.gc);
    const uint64_t b0 = row * (uint64_t)c.c0 / (uint64_t)c.gc, nb = row * (uint64_t)c.nc / (uint64_t)c.gc;
    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)c.r0 * row;
    if (nb == row) {
        out->data = src;
    } else {
        if (!buf) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, t->name, "no buffer for %llu bytes of columns", (unsigned long long)(nb * (uint64_t)c.nr));
        for (int64_t r = 0; r < c.nr; r++) memcpy((uint8_t *)buf + (uint64_t)r * nb, src + (uint64_t)r * row + b0, nb);
        out->data = buf;
    }
    out->nbytes = nb * (uint64_t)c.nr;
    out->nelem = (uint64_t)(c.nr * c.nc);
    if (role == MOQ_ROLE_WEIGHT) { /* [N, K·bits/8 / dtype bytes]: the second dim scales with the bytes kept */
        out->shape[0] = c.nr;
        out->shape[1] = (int64_t)((uint64_t)t->shape[1] * nb / row);
        out->nelem = (uint64_t)(out->shape[0] * out->shape[1]);
    } else if (t->ndim == 4) { /* FP8_PB_WO [nb, 1, kb, 1] */
        out->shape[0] = c.nr, out->shape[2] = c.nc;
    } else if (t->ndim == 2) {
        out->shape[0] = c.nr, out->shape[1] = c.nc;
    } else if (t->ndim == 1) {
        out->shape[0] = c.nr * c.nc;
    }
    return MOQ_OK;
}
