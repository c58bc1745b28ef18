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

/* Where a contract tensor goes in moq_weight. A per-tensor f32 scale (group -1 x -1) or a second
 * global scale is a per-shard scalar; other scales are arrays concatenated along N. */
typedef enum role { ROLE_CODES, ROLE_SCALE_ARRAY, ROLE_SHARD_W, ROLE_SHARD_IN, ROLE_IGNORE } role;

typedef struct role_row {
    const char *suffix;  /* ModelOpt tensor suffix                                 */
    role (*of)(const moq_scheme *s);
} role_row;

static role role_weight(const moq_scheme *s) { (void)s; return ROLE_CODES; }
static role role_weight_scale(const moq_scheme *s) {
    return s->w->group_rows == -1 && s->w->group_cols == -1 ? ROLE_SHARD_W : ROLE_SCALE_ARRAY;
}
static role role_weight_scale_2(const moq_scheme *s) { return s->w->global_scale ? ROLE_SHARD_W : ROLE_IGNORE; }
static role role_input_scale(const moq_scheme *s) { return s->a->scale_static || s->a->global_scale ? ROLE_SHARD_IN : ROLE_IGNORE; }

static const role_row roles[] = {
    {"weight", role_weight},
    {"weight_scale", role_weight_scale},
    {"weight_scale_2", role_weight_scale_2},
    {"input_scale", role_input_scale},
};

static role role_of(const moq_scheme *s, const char *suffix) {
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(roles[i].suffix, suffix) == 0) return roles[i].of(s);
    return ROLE_IGNORE;
}

/* Unquantized weight dtypes and their keys: one row each. */
static const struct { moq_dtype dt; const moq_quant_key *key; } unq_keys[] = {
    {MOQ_DT_BF16, &MOQ_KEY_W_BF16}, {MOQ_DT_F16, &MOQ_KEY_W_F16}, {MOQ_DT_F32, &MOQ_KEY_W_F32},
};

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

static bool dtype_ok(const moq_tensor_rule *r, moq_dtype d) { return d == r->dtype || d == r->dtype_alt; }

static int64_t rule_nelem(const moq_dim *shape, int64_t N, int64_t K, int64_t G) {
    int64_t n = 1;
    for (int i = 0; i < MOQ_RULE_MAX_DIMS && shape[i] != MOQ_DIM_END; i++) {
        int64_t d = moq_dim_eval(shape[i], N, K, G);
        if (d < 0) return -1;
        n *= d;
    }
    return n;
}

/* K implied by the weight tensor's last dimension under the contract's first rule. */
static int64_t k_of(const moq_tensor_rule *wr, const moq_tensor *t) {
    if (t->ndim != 2) return -1;
    return wr->shape[1] == MOQ_DIM_K_HALF ? t->shape[1] * 2 : t->shape[1];
}

static moq_status build_weight(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const moq_resolution *given,
                               const char *prefix, moq_layer_kind kind, const char *const *shards, int n_shards, moq_blobs *blobs,
                               moq_error *err) {
    memset(out, 0, sizeof *out);
    if (!shards) n_shards = 1;
    if (n_shards < 1 || n_shards > MOQ_MAX_SHARDS)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, prefix, "%d shards, expected 1..%d", n_shards, MOQ_MAX_SHARDS);
    /* module names of the shards: <parent>.<shard> */
    char names[MOQ_MAX_SHARDS][256];
    const char *dot = strrchr(prefix, '.');
    const size_t plen = dot ? (size_t)(dot - prefix) : 0;
    for (int s = 0; s < n_shards; s++) {
        if (shards) snprintf(names[s], sizeof names[s], "%.*s%s%s", (int)plen, prefix, plen ? "." : "", shards[s]);
        else snprintf(names[s], sizeof names[s], "%s", prefix);
    }
    moq_resolution res = {.method = "unquantized_linear", .rule = "no-quantization-config"};
    if (given) {
        res = *given;
    } else if (q) {
        moq_packed pk = {dot ? dot + 1 : prefix, shards, n_shards};
        MOQ_TRY(moq_resolve(q, prefix, kind, shards ? &pk : NULL, shards ? 1 : 0, &res, err));
    }
    const moq_scheme *sc = NULL;
    if (res.algo && !res.excluded && strcmp(res.method, moq_method_name(MOQ_METHOD_NONE)) != 0) {
        sc = moq_scheme_find(res.algo, false);
        if (!sc) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, prefix, "resolved to %s (%s), which has no linear scheme", res.method, res.algo);
    }
    const moq_tensor_rule *contract = sc ? sc->contract : moq_scheme_unquantized_contract();
    const int64_t G = res.group_size > 0 ? res.group_size : (sc ? sc->group : 0);

    /* first pass: shapes of every shard */
    const moq_tensor *tw[MOQ_MAX_SHARDS];
    int64_t Ns[MOQ_MAX_SHARDS], K = -1, N = 0;
    moq_dtype wdt = MOQ_DT_COUNT;
    char tn[320];
    for (int s = 0; s < n_shards; s++) {
        snprintf(tn, sizeof tn, "%.250s.weight", names[s]);
        tw[s] = moq_checkpoint_tensor(c, tn);
        if (!tw[s]) return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "tensor missing (module resolved to %s by rule %s)", res.method, res.rule);
        if (!dtype_ok(&contract[0], tw[s]->dtype) && !(!sc && tw[s]->dtype == MOQ_DT_F32))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "dtype %s, expected %s (%s: %s)", moq_dtype_name(tw[s]->dtype),
                            moq_dtype_name(contract[0].dtype), res.method, contract[0].note);
        const int64_t k = k_of(&contract[0], tw[s]);
        if (k < 1) return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "%d dimensions, expected 2 (%s)", tw[s]->ndim, contract[0].note);
        if (K >= 0 && k != K) return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "K=%lld, expected %lld like %s.weight", (long long)k, (long long)K, names[0]);
        if (s && tw[s]->dtype != wdt) return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "dtype %s, expected %s like the other shards", moq_dtype_name(tw[s]->dtype), moq_dtype_name(wdt));
        K = k;
        wdt = tw[s]->dtype;
        Ns[s] = tw[s]->shape[0];
        N += Ns[s];
    }
    moq_weight *w = &out->w;
    w->N = N;
    w->K = K;
    w->n_shards = n_shards;
    for (int s = 0; s < n_shards; s++) w->row0[s + 1] = w->row0[s] + Ns[s];
    if (sc) {
        w->w = *sc->w;
        w->a = *sc->a;
    } else {
        w->a = MOQ_KEY_A_NONE;
        for (size_t i = 0; i < sizeof unq_keys / sizeof unq_keys[0]; i++)
            if (unq_keys[i].dt == wdt) w->w = *unq_keys[i].key;
    }

    /* second pass: every contract tensor, checked, then placed by its role */
    for (const moq_tensor_rule *r = contract; r->suffix; r++) {
        const role ro = sc ? role_of(sc, r->suffix) : (strcmp(r->suffix, "weight") == 0 ? ROLE_CODES : ROLE_IGNORE);
        if (ro == ROLE_IGNORE) continue;
        const moq_tensor *t[MOQ_MAX_SHARDS];
        uint64_t total = 0;
        for (int s = 0; s < n_shards; s++) {
            snprintf(tn, sizeof tn, "%.250s.%s", names[s], r->suffix);
            t[s] = moq_checkpoint_tensor(c, tn);
            if (!t[s]) {
                if (r->optional) break;
                char sh[64];
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "tensor missing, expected %s %s (%s: %s)", moq_dtype_name(r->dtype),
                                moq_dim_str(r->shape, sh, sizeof sh), res.method, r->note);
            }
            if (!dtype_ok(r, t[s]->dtype) && !(ro == ROLE_CODES && !sc))
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "dtype %s, expected %s (%s: %s)", moq_dtype_name(t[s]->dtype),
                                moq_dtype_name(r->dtype), res.method, r->note);
            const int64_t want = rule_nelem(r->shape, Ns[s], K, G);
            if (want < 0 || (int64_t)t[s]->nelem != want) {
                char sh[64];
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "%llu elements, expected %lld = %s with N=%lld, K=%lld, G=%lld (%s)",
                                (unsigned long long)t[s]->nelem, (long long)want, moq_dim_str(r->shape, sh, sizeof sh),
                                (long long)Ns[s], (long long)K, (long long)G, r->note);
            }
            if (ro == ROLE_SCALE_ARRAY && w->w.group_rows > 1 && s + 1 < n_shards && Ns[s] % w->w.group_rows)
                return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, tn, "shard has %lld rows, expected a multiple of %d to fuse its %dx%d scale blocks",
                                (long long)Ns[s], w->w.group_rows, w->w.group_rows, w->w.group_cols);
            total += t[s]->nbytes;
        }
        if (n_shards && !t[0]) continue; /* optional and absent */
        if (ro == ROLE_SHARD_W || ro == ROLE_SHARD_IN) {
            for (int s = 0; s < n_shards; s++) MOQ_TRY(to_f32(ro == ROLE_SHARD_W ? &w->shard_scale[s] : &w->shard_in_scale[s], t[s], 1, err));
            continue;
        }
        /* array: borrow when unfused and aligned for its element, else concatenate into a blob */
        const size_t align = t[0]->dtype == MOQ_DT_F32 ? 4 : (t[0]->dtype == MOQ_DT_BF16 || t[0]->dtype == MOQ_DT_F16) ? 2 : 1;
        const void *p;
        if (n_shards == 1 && (uintptr_t)t[0]->data % align == 0) {
            p = t[0]->data;
        } else {
            uint8_t *d = moq_blobs_alloc(blobs, (size_t)total);
            if (!d) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for %llu bytes", (unsigned long long)total);
            size_t o = 0;
            for (int s = 0; s < n_shards; s++) {
                memcpy(d + o, t[s]->data, (size_t)t[s]->nbytes);
                o += (size_t)t[s]->nbytes;
            }
            p = d;
        }
        if (ro == ROLE_CODES) w->q = p;
        else w->scale = p;
    }
    /* bias: optional for every scheme, model dtype, converted to f32 */
    int n_bias = 0;
    for (int s = 0; s < n_shards; s++) {
        snprintf(tn, sizeof tn, "%.250s.bias", names[s]);
        n_bias += moq_checkpoint_tensor(c, tn) != NULL;
    }
    if (n_bias) {
        float *b = moq_blobs_alloc(blobs, (size_t)N * sizeof(float));
        if (!b) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for the bias");
        for (int s = 0; s < n_shards; s++) {
            snprintf(tn, sizeof tn, "%.250s.bias", names[s]);
            const moq_tensor *t = moq_checkpoint_tensor(c, tn);
            if (!t) return MOQ_FAIL(err, MOQ_ERR_TENSOR, tn, "tensor missing while %d other shard(s) of %s have a bias", n_bias, prefix);
            MOQ_TRY(to_f32(b + w->row0[s], t, Ns[s], err));
        }
        w->bias = b;
    }
    out->res = res;
    return MOQ_OK;
}

static moq_status open_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const moq_resolution *given,
                              const char *prefix, moq_layer_kind kind, const char *const *shards, int n_shards,
                              const moq_linear_opts *lopts, moq_blobs *blobs, moq_error *err) {
    const double t0 = now_s();
    moq_status st = build_weight(out, c, q, given, prefix, kind, shards, n_shards, blobs, err);
    snprintf(out->name, sizeof out->name, "%s", prefix);
    const double t1 = now_s();
    blobs->validate_s += t1 - t0;
    if (st != MOQ_OK) return st;
    moq_linear_opts lo = lopts ? *lopts : moq_linear_opts_default();
    lo.name = prefix;
    st = moq_linear_create_from_weight(&out->own, &out->w, &lo, err);
    out->lin = out->own;
    blobs->pack_s += now_s() - t1;
    return st;
}

moq_status moq_layers_load_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                  moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                  moq_blobs *blobs, moq_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", prefix);
    const char *dot = strrchr(prefix, '.');
    const moq_packed pk = {dot ? dot + 1 : prefix, shards, n_shards};
    const double t0 = now_s();
    const moq_status st = moq_linear_layer_open(&out->ll, c, q, prefix, kind, shards ? &pk : NULL, shards ? 1 : 0, lopts, err);
    blobs->pack_s += now_s() - t0;
    if (st != MOQ_OK) return st;
    out->w = *moq_linear_layer_weight(out->ll);
    out->lin = moq_linear_layer_linear(out->ll);
    out->res = *moq_linear_layer_resolution(out->ll);
    return MOQ_OK;
}

moq_status moq_layers_open_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                  moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                  moq_blobs *blobs, moq_error *err) {
    return open_linear(out, c, q, NULL, prefix, kind, shards, n_shards, lopts, blobs, err);
}

void moq_layers_close_linear(moq_layer_linear *l) {
    if (!l) return;
    moq_linear_free(l->own);
    moq_linear_layer_free(l->ll);
    l->own = NULL;
    l->ll = NULL;
    l->lin = NULL;
}
