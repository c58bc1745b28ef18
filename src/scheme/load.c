/* load.c — moq_linear_layer_open (moq.h "loading layers from a checkpoint"): resolve the module,
 * gather its shards, validate each against the scheme's contract with the one validator `moq check`
 * uses (config/modules.c), scan its scales for NaN/Inf/zero/negative values, run the scheme's
 * canonicalize hook (table below) and create the kernel. See load.h for who owns what.
 *
 *   prefix "….qkv_proj", packed {qkv_proj: q_proj, k_proj, v_proj}, no "….qkv_proj.weight" on disk
 *     -> shards "….q_proj", "….k_proj", "….v_proj" concatenated along N (row0[] = 0, Nq, Nq+Nk, N)
 *   prefix with "<prefix>.weight" on disk -> one shard
 *
 * Tested by tests/scheme/test_load.c.
 */
#include "scheme/load.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/modules.h"
#include "core/error.h"
#include "io/mmap.h"
#include "kernels/kernels.h"

struct moq_linear_layer {
    moq_weight     w;
    moq_linear    *lin;
    moq_resolution res;
    void          *arena;                              /* f32 scales, bias (may be NULL)   */
    void          *codes;                              /* built codes + u8 block scales    */
    void          *cols;                               /* column slices' bytes (may be NULL) */
    size_t         arena_bytes, codes_bytes, cols_bytes;
    const moq_tensor *src[2 * MOQ_MAX_SHARDS];         /* shards' checkpoint weight and scale tensors */
    int            n_src;
    bool           dropped;
    char           notes[MOQ_LOAD_MAX_NOTES][320];
    int            n_notes;
};

static moq_status canon_unquantized(moq_load_ctx *x, moq_error *err);

/* One row per linear method: the hook that builds its canonical weight. */
static const struct {
    moq_method   method;
    moq_canon_fn canon;
} canon_table[] = {
    {MOQ_METHOD_UNQUANTIZED_LINEAR, canon_unquantized},
    {MOQ_METHOD_FP8_LINEAR, moq_canon_fp8_tensor},
    {MOQ_METHOD_FP8_PCPT_LINEAR, moq_canon_fp8_row},
    {MOQ_METHOD_FP8_PBWO_LINEAR, moq_canon_fp8_block},
    {MOQ_METHOD_NVFP4_LINEAR, moq_canon_nvfp4},
    {MOQ_METHOD_W4A16_NVFP4_LINEAR, moq_canon_nvfp4},
    {MOQ_METHOD_NVFP4_AWQ_LINEAR, moq_canon_nvfp4},
    {MOQ_METHOD_MXFP8_LINEAR, moq_canon_mxfp8},
};

/* One row per load option value x canonical weight key: a second hook that turns the canonical
 * weight into another scheme's canonical form (the kernel of the new key pair is then chosen for the
 * device as for any checkpoint). Rows whose option is at its default never run. */
static const struct {
    moq_nvfp4_as         as;
    const moq_quant_key *from;
    moq_canon_fn         recanon;
} recanon_table[] = {
    {MOQ_NVFP4_AS_FP8, &MOQ_KEY_W_NVFP4, moq_recanon_nvfp4_fp8},
    {MOQ_NVFP4_AS_FP8_CHANNEL, &MOQ_KEY_W_NVFP4, moq_recanon_nvfp4_fp8_channel},
};

void *moq_load_take(moq_load_ctx *x, size_t bytes) {
    const size_t need = (bytes + 63) & ~(size_t)63;
    if (!x->arena || x->arena_size - x->arena_used < need) return NULL;
    void *p = x->arena + x->arena_used;
    x->arena_used += need;
    return p;
}

void moq_load_note(moq_load_ctx *x, const char *fmt, ...) {
    if (x->n_notes >= MOQ_LOAD_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->notes[x->n_notes++], sizeof x->notes[0], fmt, ap);
    va_end(ap);
}

float moq_load_scalar(const moq_tensor *t) {
    float v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

const char *moq_load_short(const char *module) {
    const char *d = strrchr(module, '.');
    return d ? d + 1 : module;
}

const char *moq_load_shard_values(const moq_load_ctx *x, const float *v, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int s = 0; s < x->n && o < n; s++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s=%.9g", s ? ", " : "", moq_load_short(x->sh[s].name), (double)v[s]);
    return buf;
}

void *moq_load_take_codes(moq_load_ctx *x, size_t bytes) {
    const size_t need = (bytes + 63) & ~(size_t)63;
    if (!x->codes || x->codes_size - x->codes_used < need) return NULL;
    void *p = x->codes + x->codes_used;
    x->codes_used += need;
    return p;
}

const void *moq_load_concat_codes(moq_load_ctx *x, const moq_tensor *const *t, const int64_t *rows, size_t row_bytes,
                                  moq_error *err) {
    if (x->n == 1) return t[0]->data;
    size_t total = 0;
    for (int s = 0; s < x->n; s++) total += (size_t)rows[s] * row_bytes;
    uint8_t *dst = moq_load_take_codes(x, total), *p = dst;
    if (!dst) {
        MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small for %zu bytes", total);
        return NULL;
    }
    for (int s = 0; s < x->n; s++) {
        memcpy(p, t[s]->data, (size_t)rows[s] * row_bytes);
        p += (size_t)rows[s] * row_bytes;
    }
    return dst;
}

static moq_status canon_unquantized(moq_load_ctx *x, moq_error *err) {
    static const struct { moq_dtype dt; const moq_quant_key *key; size_t bytes; } keys[] = {
        {MOQ_DT_F32, &MOQ_KEY_W_F32, 4}, {MOQ_DT_BF16, &MOQ_KEY_W_BF16, 2}, {MOQ_DT_F16, &MOQ_KEY_W_F16, 2}};
    const moq_dtype dt = x->sh[0].weight->dtype;
    size_t i = 0;
    while (i < 3 && keys[i].dt != dt) i++;
    if (i == 3) return MOQ_FAIL(err, MOQ_ERR_TENSOR, x->sh[0].weight->name, "dtype %s, expected F32, BF16 or F16", moq_dtype_name(dt));
    for (int s = 1; s < x->n; s++)
        if (x->sh[s].weight->dtype != dt)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, x->sh[s].weight->name, "dtype %s, expected %s like %s (one dtype per fused layer)",
                            moq_dtype_name(x->sh[s].weight->dtype), moq_dtype_name(dt), x->sh[0].weight->name);
    x->w->w = *keys[i].key;
    x->w->a = MOQ_KEY_A_NONE;
    const moq_tensor *t[MOQ_MAX_SHARDS];
    int64_t rows[MOQ_MAX_SHARDS];
    for (int s = 0; s < x->n; s++) t[s] = x->sh[s].weight, rows[s] = x->sh[s].N;
    /* A single shard is borrowed only when its data is aligned for its element type. */
    if (x->n == 1 && ((uintptr_t)t[0]->data % keys[i].bytes) == 0) x->w->q = t[0]->data;
    else {
        uint8_t *dst = moq_load_take_codes(x, (size_t)x->N * (size_t)x->K * keys[i].bytes), *p = dst;
        if (!dst) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
        for (int s = 0; s < x->n; s++) {
            const size_t b = (size_t)rows[s] * (size_t)x->K * keys[i].bytes;
            memcpy(p, t[s]->data, b);
            p += b;
        }
        x->w->q = dst;
    }
    return MOQ_OK;
}

/* Static activation scales of fused shards: both engines quantize the activation once per layer
 * with the max, and so does the kernel (kernels/linear.c); say so when they differ. */
static void note_input_scales(moq_load_ctx *x) {
    const moq_weight *w = x->w;
    if (!w->a.scale_static || x->n < 2) return;
    bool differ = false;
    float mx = 0.0f;
    char list[256];
    for (int s = 0; s < x->n; s++) {
        differ |= w->shard_in_scale[s] != w->shard_in_scale[0];
        mx = w->shard_in_scale[s] > mx ? w->shard_in_scale[s] : mx;
    }
    if (differ)
        moq_load_note(x, "%s: input_scale differs across shards (%s); activations are quantized once with the max %.9g, as both engines do",
                      x->layer, moq_load_shard_values(x, w->shard_in_scale, list, sizeof list), (double)mx);
}

static moq_method method_of(const char *name) {
    for (int i = 0; i < MOQ_METHOD_COUNT; i++)
        if (strcmp(moq_method_name((moq_method)i), name) == 0) return (moq_method)i;
    return MOQ_METHOD_NONE;
}

static const moq_tensor *role_tensor(const moq_checkpoint *c, const char *module, const char *role) {
    char nm[600];
    snprintf(nm, sizeof nm, "%s.%s", module, role);
    return moq_checkpoint_tensor(c, nm);
}

/* The first problem of a check becomes the error. */
static moq_status first_problem(moq_modules *sink, moq_error *err) {
    if (!sink->n_probs) return MOQ_OK;
    const moq_problem *p = &sink->probs[0];
    moq_status st = MOQ_FAIL(err, p->code, p->where, "%s", p->msg);
    free(sink->probs);
    memset(sink, 0, sizeof *sink);
    return st;
}

/* Shard module names of prefix: itself when "<prefix>.weight" exists, else the packed entry whose
 * name is prefix's last part. */
static moq_status gather_shards(moq_load_ctx *x, const char *prefix, const moq_packed *packed, int n_packed, moq_error *err) {
    if (role_tensor(x->c, prefix, "weight") || !packed) {
        snprintf(x->sh[0].name, sizeof x->sh[0].name, "%s", prefix);
        x->n = 1;
        return MOQ_OK;
    }
    const char *last = moq_load_short(prefix);
    const size_t plen = (size_t)(last - prefix);
    for (int i = 0; i < n_packed; i++) {
        if (strcmp(packed[i].name, last) != 0) continue;
        if (packed[i].n_shards < 1 || packed[i].n_shards > MOQ_MAX_SHARDS)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "packed entry %s has %d shards, expected 1..%d", packed[i].name,
                            packed[i].n_shards, MOQ_MAX_SHARDS);
        for (int s = 0; s < packed[i].n_shards; s++)
            snprintf(x->sh[s].name, sizeof x->sh[s].name, "%.*s%s", (int)plen, prefix, packed[i].shards[s]);
        x->n = packed[i].n_shards;
        return MOQ_OK;
    }
    snprintf(x->sh[0].name, sizeof x->sh[0].name, "%s", prefix);
    x->n = 1;
    return MOQ_OK;
}

static moq_status check_bias(moq_load_ctx *x, const moq_tensor *const *b, moq_error *err) {
    int have = 0;
    for (int s = 0; s < x->n; s++) have += b[s] != NULL;
    if (!have) return MOQ_OK;
    for (int s = 0; s < x->n; s++) {
        if (!b[s]) return MOQ_FAIL(err, MOQ_ERR_TENSOR, x->sh[s].name, "missing tensor bias (the other shards of %s have one)", x->layer);
        if (b[s]->dtype != MOQ_DT_BF16 && b[s]->dtype != MOQ_DT_F16 && b[s]->dtype != MOQ_DT_F32)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, b[s]->name, "dtype %s, expected BF16, F16 or F32 (model-dtype bias)", moq_dtype_name(b[s]->dtype));
        if (b[s]->ndim != 1 || b[s]->shape[0] != x->sh[s].N)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, b[s]->name, "%d-d tensor with %llu values, expected [%lld] (N of the weight)", b[s]->ndim,
                            (unsigned long long)b[s]->nelem, (long long)x->sh[s].N);
    }
    float *dst = moq_load_take(x, (size_t)x->N * sizeof(float));
    if (!dst) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    int64_t n = 0;
    for (int s = 0; s < x->n; s++)
        for (int64_t i = 0; i < x->sh[s].N; i++, n++) {
            const uint8_t *p = (const uint8_t *)b[s]->data;
            uint16_t h;
            if (b[s]->dtype == MOQ_DT_F32) memcpy(&dst[n], p + 4 * i, 4);
            else {
                memcpy(&h, p + 2 * i, 2);
                dst[n] = b[s]->dtype == MOQ_DT_BF16 ? moq_bf16_decode(h) : moq_f16_decode(h);
            }
        }
    x->w->bias = dst;
    return MOQ_OK;
}

/* Replaces each shard's tensors by views of its slice (after the whole tensors passed the contract):
 * rows borrowed, columns gathered into one allocation owned by the layer (l->cols). */
static moq_status apply_slices(moq_load_ctx *x, const moq_slice *slices, void **cols, size_t *cols_bytes, moq_error *err) {
    const moq_quant_key *wk = x->scheme ? x->scheme->w : NULL, *ak = x->scheme ? x->scheme->a : NULL;
    static const moq_quant_key none = {.group_rows = -1, .group_cols = -1};
    if (!wk) wk = &none;
    size_t bytes = 0;
    for (int s = 0; s < x->n; s++) {
        const moq_load_shard *sh = &x->sh[s];
        MOQ_TRY(moq_slice_check(&slices[s], wk, ak, sh->N, x->K, sh->name, err));
        const moq_tensor *t[] = {sh->weight, sh->scale, sh->bias, sh->pqs};
        const moq_slice_role r[] = {MOQ_ROLE_WEIGHT, MOQ_ROLE_SCALE, MOQ_ROLE_VEC_N, MOQ_ROLE_VEC_K};
        for (int i = 0; i < 4; i++)
            if (t[i]) bytes += (moq_slice_view_bytes(t[i], r[i], wk, sh->N, x->K, &slices[s]) + 63) & ~(size_t)63;
    }
    uint8_t *buf = bytes ? aligned_alloc(64, bytes) : NULL;
    if (bytes && !buf) return MOQ_FAIL(err, MOQ_ERR_NOMEM, x->layer, "out of memory for %zu bytes of column slices", bytes);
    *cols = buf;
    *cols_bytes = bytes;
    int64_t K = x->K;
    x->N = 0;
    for (int s = 0; s < x->n; s++) {
        moq_load_shard *sh = &x->sh[s];
        const moq_tensor **t[] = {&sh->weight, &sh->scale, &sh->bias, &sh->pqs};
        const moq_slice_role r[] = {MOQ_ROLE_WEIGHT, MOQ_ROLE_SCALE, MOQ_ROLE_VEC_N, MOQ_ROLE_VEC_K};
        for (int i = 0; i < 4; i++) {
            if (!*t[i]) continue;
            const size_t need = moq_slice_view_bytes(*t[i], r[i], wk, sh->N, x->K, &slices[s]);
            bool keep;
            MOQ_TRY(moq_slice_view(*t[i], r[i], wk, sh->N, x->K, &slices[s], need ? buf : NULL, &sh->view[i], &keep, err));
            buf += (need + 63) & ~(size_t)63;
            *t[i] = keep ? &sh->view[i] : NULL;
        }
        if (slices[s].dim == MOQ_SLICE_ROWS) sh->N = slices[s].count;
        if (slices[s].dim == MOQ_SLICE_COLS) K = slices[s].count;
        x->N += sh->N;
    }
    x->K = K;
    return MOQ_OK;
}

moq_status moq_linear_layer_open(moq_linear_layer **out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                 moq_layer_kind kind, const moq_packed *packed, int n_packed, const moq_linear_opts *opts,
                                 moq_error *err) {
    return moq_linear_layer_open_sliced(out, c, q, prefix, kind, packed, n_packed, opts, NULL, err);
}

moq_status moq_linear_layer_open_sliced(moq_linear_layer **out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                        moq_layer_kind kind, const moq_packed *packed, int n_packed, const moq_linear_opts *opts,
                                        const moq_slice *slices, moq_error *err) {
    if (!out || !c || !prefix) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix ? prefix : "", "out, c and prefix must not be NULL");
    *out = NULL;
    if (kind != MOQ_KIND_LINEAR && kind != MOQ_KIND_LM_HEAD && kind != MOQ_KIND_EMBEDDING)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, prefix, "layer kind %s, expected linear, lm_head or embedding (this entry loads one matrix)",
                        moq_layer_kind_name(kind));
    const moq_linear_opts o = opts ? *opts : moq_linear_opts_default();
    moq_linear_layer *l = calloc(1, sizeof *l);
    if (!l) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory");
    moq_load_ctx x = {.c = c, .rules = q ? q->r : &moq_compat_table[MOQ_COMPAT_MOQ], .layer = prefix, .w = &l->w};
    moq_status st = MOQ_OK;
    moq_modules sink = {0};

    /* 1. resolution */
    if (q) {
        if ((st = moq_resolve(q, prefix, kind, packed, n_packed, &l->res, err)) != MOQ_OK) goto fail;
        /* An embedding table the config leaves alone is an unquantized matrix (rows are gathered
         * from its canonical weight; a tied lm_head runs it as a linear). */
        if (kind == MOQ_KIND_EMBEDDING && strcmp(l->res.method, "none") == 0) l->res.method = "unquantized_linear";
    } else {
        l->res = (moq_resolution){.method = "unquantized_linear", .rule = "no-quantization-config"};
    }
    const moq_method meth = method_of(l->res.method);
    size_t hook = 0;
    while (hook < sizeof canon_table / sizeof canon_table[0] && canon_table[hook].method != meth) hook++;
    if (hook == sizeof canon_table / sizeof canon_table[0]) {
        st = MOQ_FAIL(err, MOQ_ERR_CONFIG, prefix, "resolves to %s (rule %s), expected a linear method", l->res.method, l->res.rule);
        goto fail;
    }
    x.scheme = moq_scheme_for_method(meth);
    x.G = l->res.group_size ? l->res.group_size : x.scheme ? x.scheme->group : 0;

    /* 2. shards, each validated against the contract (the validator of `moq check`) */
    if ((st = gather_shards(&x, prefix, packed, n_packed, err)) != MOQ_OK) goto fail;
    for (int s = 0; s < x.n; s++) {
        moq_load_shard *sh = &x.sh[s];
        int expected, found;
        if (!role_tensor(c, sh->name, "weight") && !role_tensor(c, sh->name, "weight_scale")) {
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, sh->name, "missing tensor weight (no tensor %s.weight in the checkpoint%s)", sh->name,
                          x.n > 1 ? "; it is a shard of the fused layer" : "");
            goto fail;
        }
        moq_module_validate(&sink, c, sh->name, &l->res, NULL, 0, &expected, &found);
        if ((st = first_problem(&sink, err)) != MOQ_OK) goto fail;
        /* An AWQ scale outside a scheme that applies it would be dropped silently: refuse it here
         * (`moq check` lists it among the extra tensors). */
        const moq_tensor *pqs = role_tensor(c, sh->name, "pre_quant_scale");
        const bool takes_pqs = x.scheme && moq_contract_rule(x.scheme->contract, "pre_quant_scale");
        if (pqs && !takes_pqs) {
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, pqs->name, "extra tensor: pre_quant_scale is not part of scheme %s (resolved %s); the input would run "
                          "unscaled (NVFP4_AWQ applies it)", x.scheme ? x.scheme->algo : "unquantized", l->res.method);
            goto fail;
        }
        sh->weight = role_tensor(c, sh->name, "weight");
        sh->scale = role_tensor(c, sh->name, "weight_scale");
        l->src[l->n_src++] = sh->weight; /* the checkpoint's own tensors (a slice below may view a copy) */
        if (sh->scale) l->src[l->n_src++] = sh->scale;
        sh->scale2 = role_tensor(c, sh->name, "weight_scale_2");
        sh->in_scale = role_tensor(c, sh->name, "input_scale");
        sh->bias = role_tensor(c, sh->name, "bias");
        sh->pqs = pqs;
        if (sh->weight->ndim != 2 || sh->weight->shape[0] < 1 || sh->weight->shape[1] < 1) {
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, sh->weight->name, "%d-d tensor, expected [N, K] with N, K >= 1", sh->weight->ndim);
            goto fail;
        }
        sh->N = sh->weight->shape[0];
        const bool half = x.scheme && x.scheme->contract[0].shape[1] == MOQ_DIM_K_HALF; /* two e2m1 per byte */
        const int64_t K = half ? 2 * sh->weight->shape[1] : sh->weight->shape[1];
        if (s && K != x.K) {
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, sh->weight->name, "K=%lld, expected K=%lld like %s (shards of a fused layer share K)",
                          (long long)K, (long long)x.K, x.sh[0].weight->name);
            goto fail;
        }
        x.K = K;
        x.N += sh->N;
        /* Scale values the hook will use; W4A16's legacy input_scale is ignored, so not scanned. */
        const moq_tensor *scan[3] = {sh->scale, sh->scale2, meth == MOQ_METHOD_W4A16_NVFP4_LINEAR ? NULL : sh->in_scale};
        for (int k = 0; k < 3; k++)
            if (scan[k]) moq_tensor_check_scale_values(&sink, scan[k]);
        if ((st = first_problem(&sink, err)) != MOQ_OK) goto fail;
    }

    bool sliced = false;
    for (int s = 0; slices && s < x.n; s++) sliced |= slices[s].dim != MOQ_SLICE_NONE;
    if (sliced) {
        for (int s = 0; s < x.n; s++) /* the bias is checked whole before it is cut */
            if (x.sh[s].bias && (x.sh[s].bias->ndim != 1 || x.sh[s].bias->shape[0] != x.sh[s].N)) {
                st = MOQ_FAIL(err, MOQ_ERR_TENSOR, x.sh[s].bias->name, "%d-d tensor with %llu values, expected [%lld] (N of the weight)",
                              x.sh[s].bias->ndim, (unsigned long long)x.sh[s].bias->nelem, (long long)x.sh[s].N);
                goto fail;
            }
        if ((st = apply_slices(&x, slices, &l->cols, &l->cols_bytes, err)) != MOQ_OK) goto fail;
    }

    /* 3. the layer's two allocations: bounds on everything a hook may build (codes + u8 block
     * scales in one, freed once packed; f32 scales, bias, AWQ scale in the other). Pages a hook
     * does not write are never touched, so a loose bound costs no resident memory. */
    size_t bound = 64 * 16 + (size_t)x.N * 2 * sizeof(float), cbound = 64 * 4;
    for (int s = 0; s < x.n; s++) {
        cbound += (size_t)x.sh[s].weight->nbytes + 64;
        if (x.sh[s].scale) bound += (size_t)x.sh[s].scale->nbytes + 64, cbound += (size_t)x.sh[s].scale->nbytes + 64;
    }
    if (meth == MOQ_METHOD_MXFP8_LINEAR) cbound += (size_t)x.N * (size_t)(x.K / 32) + 64;
    bound += (size_t)x.K * sizeof(float) + 64; /* an AWQ pre_quant_scale in f32 */
    if (meth == MOQ_METHOD_FP8_PBWO_LINEAR) bound += (size_t)((x.N + 127) / 128) * (size_t)(x.K / 128) * sizeof(float) + 64;
    if ((unsigned)o.nvfp4_as >= MOQ_NVFP4_AS_COUNT) {
        st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "nvfp4_as %d, expected MOQ_NVFP4_AS_NVFP4, _FP8 or _FP8_CHANNEL", (int)o.nvfp4_as);
        goto fail;
    }
    /* a re-canonicalization writes e4m3 codes [N, K], f32 scales and f64 amax per group, a shard map */
    if (o.nvfp4_as != MOQ_NVFP4_AS_NVFP4) bound += (size_t)x.N * (size_t)(4 + 8 + 4) + 4 * 64, cbound += (size_t)x.N * (size_t)x.K + 64;
    bound = (bound + 63) & ~(size_t)63, cbound = (cbound + 63) & ~(size_t)63;
    if (!(l->arena = x.arena = aligned_alloc(64, bound)) || !(l->codes = x.codes = aligned_alloc(64, cbound))) {
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for %zu bytes of layer data", bound + cbound);
        goto fail;
    }
    x.arena_size = bound, x.codes_size = cbound;

    /* 4. canonical weight */
    l->w.N = x.N, l->w.K = x.K, l->w.n_shards = x.n;
    for (int s = 0; s < x.n; s++) l->w.row0[s + 1] = l->w.row0[s] + x.sh[s].N;
    if ((st = canon_table[hook].canon(&x, err)) != MOQ_OK) goto fail;
    note_input_scales(&x);
    for (size_t r = 0; r < sizeof recanon_table / sizeof recanon_table[0]; r++)
        if (recanon_table[r].as == o.nvfp4_as && moq_quant_key_eq(&l->w.w, recanon_table[r].from)) {
            if ((st = recanon_table[r].recanon(&x, err)) != MOQ_OK) goto fail;
            break;
        }
    const moq_tensor *bias[MOQ_MAX_SHARDS];
    for (int s = 0; s < x.n; s++) bias[s] = x.sh[s].bias;
    if ((st = check_bias(&x, bias, err)) != MOQ_OK) goto fail;

    /* 5. kernel */
    moq_linear_opts ko = o;
    ko.name = prefix;
    if ((st = moq_linear_create_from_weight(&l->lin, &l->w, &ko, err)) != MOQ_OK) goto fail;
    memcpy(l->notes, x.notes, sizeof l->notes);
    l->n_notes = x.n_notes;
    l->arena_bytes = x.arena_used, l->codes_bytes = x.codes_used;
    if (!x.codes_used) free(l->codes), l->codes = NULL; /* nothing built: everything is borrowed */
    *out = l;
    return MOQ_OK;
fail:
    free(sink.probs);
    moq_linear_layer_free(l);
    return st;
}

void moq_linear_layer_free(moq_linear_layer *l) {
    if (!l) return;
    moq_linear_free(l->lin);
    free(l->arena);
    free(l->codes);
    free(l->cols);
    free(l);
}

/* Is p inside the data of one of the layer's checkpoint tensors (borrowed from the mapping)? */
static bool borrowed(const moq_linear_layer *l, const void *p) {
    for (int i = 0; p && i < l->n_src; i++) {
        const uint8_t *d = l->src[i]->data;
        if ((const uint8_t *)p >= d && (const uint8_t *)p < d + l->src[i]->nbytes) return true;
    }
    return false;
}

bool moq_linear_layer_drop_canonical(moq_linear_layer *l, bool keep_codes) {
    if (!l || l->dropped) return l && l->dropped;
    const unsigned gone = keep_codes ? 0 : moq_linear_forget_canonical(l->lin);
    if (gone & MOQ_CANON_CODES) {
        l->w.q = NULL;
        if (gone & MOQ_CANON_BLOCK_SCALES) l->w.scale = NULL;
        free(l->codes); /* only codes and u8 block scales live there */
        l->codes = NULL, l->codes_bytes = 0;
        /* column slices (--tp): the hooks copied what they keep (bias, AWQ and f32 scales) into the
         * arena; what is left there are the codes and block scales the row packed */
        free(l->cols);
        l->cols = NULL, l->cols_bytes = 0;
        l->dropped = true;
    }
    /* Packing (or the concatenation) touched these pages; the layer reads them again only when it
     * keeps a borrowed canonical weight (an embedding gathers rows, a `_ref` row runs on them). */
    if (gone || keep_codes)
        for (int i = 0; i < l->n_src; i++) moq_map_release(l->src[i]->data, l->src[i]->nbytes);
    return l->dropped;
}

void moq_linear_layer_memory(const moq_linear_layer *l, uint64_t *packed, uint64_t *owned, uint64_t *mapped) {
    *packed = *owned = *mapped = 0;
    if (!l) return;
    *packed = moq_linear_packed_bytes(l->lin);
    *owned = l->arena_bytes + l->codes_bytes + l->cols_bytes;
    if (l->dropped) return;
    const uint64_t nq = l->w.w.elem == MOQ_ELEM_E2M1 ? (uint64_t)l->w.N * (uint64_t)(l->w.K / 2)
                                                     : (uint64_t)l->w.N * (uint64_t)l->w.K * (uint64_t)moq_elem_bytes(l->w.w.elem, 1);
    if (borrowed(l, l->w.q)) *mapped += nq;
    if (borrowed(l, l->w.scale) && l->w.w.group_cols > 1) *mapped += (uint64_t)l->w.N * (uint64_t)(l->w.K / l->w.w.group_cols);
}

const moq_linear *moq_linear_layer_linear(const moq_linear_layer *l) { return l ? l->lin : NULL; }
const moq_resolution *moq_linear_layer_resolution(const moq_linear_layer *l) { return l ? &l->res : NULL; }
const char *moq_linear_layer_kernel_name(const moq_linear_layer *l) { return l ? moq_linear_kernel_name(l->lin) : ""; }
int moq_linear_layer_warning_count(const moq_linear_layer *l) { return l ? l->n_notes : 0; }
const char *moq_linear_layer_warning(const moq_linear_layer *l, int i) {
    return l && i >= 0 && i < l->n_notes ? l->notes[i] : NULL;
}
const moq_weight *moq_linear_layer_weight(const moq_linear_layer *l) { return l ? &l->w : NULL; }
