/* linear.c — the one linear entry point for every format: the pair table (facts shared by all
 * kernels of a (weight key, activation key) pair), validation of the canonical weight, kernel
 * choice with collected reasons, packing once, and run with a caller-owned workspace.
 *
 * NVFP4_AWQ: a weight with pre_scale gets x · diag(pre_scale) (f32, into the head of the workspace)
 * before any kernel sees it, so every row of the pair runs it unchanged.
 * Fused layers keep their shards' static scales (no requantization, no accuracy loss): the
 * epilogue scale is per output row (row_scale), so a shard's weight_scale / weight_scale_2 applies
 * to exactly its rows [row0[s], row0[s+1]). Activations are quantized once per layer with the
 * maximum of the shards' input_scale, as both seed engines do (NUMERICS §2.4, §5.1).
 * Tests: tests/kernels/test_linear.c, tests/kernels/test_linear_ref.c.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"

/*                 name           w key                  a key                         K%   epilogue scale            static a */
const moq_pair moq_pairs[MOQ_PAIR_COUNT] = {
    [MOQ_PAIR_F32]         = {"f32",         &MOQ_KEY_W_F32,        &MOQ_KEY_A_NONE,              1,   MOQ_ROWSCALE_NONE,       false},
    [MOQ_PAIR_BF16]        = {"bf16",        &MOQ_KEY_W_BF16,       &MOQ_KEY_A_NONE,              1,   MOQ_ROWSCALE_NONE,       false},
    [MOQ_PAIR_F16]         = {"f16",         &MOQ_KEY_W_F16,        &MOQ_KEY_A_NONE,              1,   MOQ_ROWSCALE_NONE,       false},
    [MOQ_PAIR_FP8_TENSOR]  = {"fp8_tensor",  &MOQ_KEY_W_FP8_TENSOR, &MOQ_KEY_A_FP8_TENSOR_STATIC, 1,   MOQ_ROWSCALE_SHARD_W_IN, true},
    [MOQ_PAIR_FP8_ROW]     = {"fp8_row",     &MOQ_KEY_W_FP8_ROW,    &MOQ_KEY_A_FP8_TOKEN_DYN,     1,   MOQ_ROWSCALE_ROW,        false},
    [MOQ_PAIR_FP8_BLK128]  = {"fp8_blk128",  &MOQ_KEY_W_FP8_BLK128, &MOQ_KEY_A_FP8_G128_DYN,      128, MOQ_ROWSCALE_NONE,       false},
    [MOQ_PAIR_NVFP4]       = {"nvfp4_w4a4",  &MOQ_KEY_W_NVFP4,      &MOQ_KEY_A_NVFP4_DYN,         16,  MOQ_ROWSCALE_SHARD_W_IN, true},
    [MOQ_PAIR_NVFP4_W4A16] = {"nvfp4_w4a16", &MOQ_KEY_W_NVFP4,      &MOQ_KEY_A_NONE,              16,  MOQ_ROWSCALE_SHARD_W,    false},
    [MOQ_PAIR_MXFP8]       = {"mxfp8",       &MOQ_KEY_W_MXFP8,      &MOQ_KEY_A_MXFP8_DYN,         32,  MOQ_ROWSCALE_NONE,       false},
};

moq_pair_id moq_pair_of(const moq_weight *w) {
    for (int p = 0; p < MOQ_PAIR_COUNT; p++)
        if (moq_quant_key_eq(moq_pairs[p].w, &w->w) && moq_quant_key_eq(moq_pairs[p].a, &w->a)) return (moq_pair_id)p;
    return MOQ_PAIR_COUNT;
}

int moq_weight_shard_of(const moq_weight *w, int64_t n) {
    int s = 0;
    while (s + 1 < w->n_shards && n >= w->row0[s + 1]) s++;
    return s;
}

void moq_x_row_f32(const void *x, moq_elem e, int64_t K, int64_t m, float *out) {
    if (e == MOQ_ELEM_BF16) {
        const uint16_t *h = (const uint16_t *)x + m * K;
        for (int64_t k = 0; k < K; k++) out[k] = moq_f32_from_bits((uint32_t)h[k] << 16);
    } else {
        memcpy(out, (const float *)x + m * K, (size_t)K * sizeof(float));
    }
}

void moq_y_store(void *y, moq_elem e, int64_t N, int64_t m, int64_t n, float v) {
    if (e == MOQ_ELEM_BF16) ((uint16_t *)y)[m * N + n] = moq_bf16_encode_rne(v);
    else ((float *)y)[m * N + n] = v;
}

void moq_y_store_tile16(const moq_linear_launch *l, const float *C, const float *sm, int64_t t) {
    const moq_weight *w = l->w;
    for (int64_t m = 0; m < l->M; m++)
        for (int r = 0; r < 16 && 16 * t + r < w->N; r++) {
            const int64_t n = 16 * t + r;
            float v = C[m * 16 + r] * sm[m] * l->row_scale[n];
            if (w->bias) v += w->bias[n];
            moq_y_store(l->y, l->y_elem, w->N, m, n, v);
        }
}

struct moq_linear {
    moq_weight        w;          /* copy; pointers borrowed from the caller                 */
    moq_pair_id       pair;
    const moq_kernel *k;          /* the entry row (its name is the layer's kernel)           */
    const moq_kernel *by_m[4];    /* k, then the rows on k's packed weight that serve the M
                                     outside k's range (kernels.h m_lo/m_hi), table order     */
    int               n_by_m;
    void             *packed;     /* the row's layout, 64-byte aligned, owned                */
    size_t            packed_bytes;
    bool              plan_only;  /* chosen, not packed: run refuses                          */
    float            *row_scale;  /* f32 [N], owned                                          */
    float             a_scale;
    const uint8_t    *rcpa_corr;
    int               n_threads;
    moq_device        device;     /* where packed, x, y and ws live (the row's target)       */
    char              name[160];
    char              rejected[1024];
};

static float static_a_scale(const moq_weight *w) {
    float a = w->shard_in_scale[0];
    for (int s = 1; s < w->n_shards; s++) a = fmaxf(a, w->shard_in_scale[s]);
    return a;
}

float moq_linear_row_scale(const moq_weight *w, int64_t n) {
    const moq_pair_id p = moq_pair_of(w);
    const int s = moq_weight_shard_of(w, n);
    switch (moq_pairs[p].row_scale) {
    case MOQ_ROWSCALE_SHARD_W: return w->shard_scale[s];
    case MOQ_ROWSCALE_SHARD_W_IN: return static_a_scale(w) * w->shard_scale[s];
    case MOQ_ROWSCALE_ROW: return ((const float *)w->scale)[n];
    default: return 1.0f;
    }
}

moq_linear_opts moq_linear_opts_default(void) {
    moq_linear_opts o = {0};
    o.cpu_mask = ~0u;
    return o;
}

static bool bad_scale(float s) { return !(s > 0.0f) || !isfinite(s); }

/* Everything about w that a file could get wrong is checked here, never asserted later. */
static moq_status validate(const moq_weight *w, moq_pair_id p, const char *name, moq_error *err) {
    char kw[64], ka[64];
    if (p == MOQ_PAIR_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, name, "weight key %s with activation key %s is not a pair any scheme uses",
                        moq_quant_key_str(&w->w, kw, sizeof kw), moq_quant_key_str(&w->a, ka, sizeof ka));
    const moq_pair *pr = &moq_pairs[p];
    if (w->N < 1 || w->K < 1) return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "shape [N=%lld, K=%lld], expected both >= 1", (long long)w->N, (long long)w->K);
    if (w->K % pr->k_multiple)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "K=%lld is not a multiple of %d (%s groups along K)", (long long)w->K,
                        pr->k_multiple, pr->name);
    if (!w->q) return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "weight data missing");
    if (w->w.scale_elem != MOQ_ELEM_NONE && w->w.group_rows != -1 && !w->scale)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "weight_scale missing (%s)", pr->name);
    if (w->n_shards < 1 || w->n_shards > MOQ_MAX_SHARDS || w->row0[0] != 0 || w->row0[w->n_shards] != w->N)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "%d shards covering rows [%lld, %lld), expected 1..%d shards covering [0, %lld)",
                        w->n_shards, (long long)w->row0[0], (long long)(w->n_shards >= 1 && w->n_shards <= MOQ_MAX_SHARDS ? w->row0[w->n_shards] : -1),
                        MOQ_MAX_SHARDS, (long long)w->N);
    for (int s = 0; s < w->n_shards; s++) {
        if (w->row0[s + 1] <= w->row0[s])
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "shard %d has rows [%lld, %lld), expected a non-empty range", s,
                            (long long)w->row0[s], (long long)w->row0[s + 1]);
        if ((pr->row_scale == MOQ_ROWSCALE_SHARD_W || pr->row_scale == MOQ_ROWSCALE_SHARD_W_IN) && bad_scale(w->shard_scale[s]))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "shard %d weight scale %g, expected a finite value > 0 (%s)", s,
                            (double)w->shard_scale[s], pr->w->global_scale ? "weight_scale_2" : "weight_scale");
        if (pr->a_static && bad_scale(w->shard_in_scale[s]))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "shard %d input_scale %g, expected a finite value > 0", s, (double)w->shard_in_scale[s]);
    }
    const int64_t N = w->N, K = w->K;
    for (int64_t k = 0; w->pre_scale && k < K; k++)
        if (bad_scale(w->pre_scale[k]))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "pre_quant_scale[%lld] = %g, expected a finite value > 0", (long long)k, (double)w->pre_scale[k]);
    if (w->w.scale_elem == MOQ_ELEM_F32 && w->w.group_rows != -1) {
        const float *sc = w->scale;
        const int64_t n = w->w.group_rows == 1 ? N : ((N + 127) / 128) * (K / 128);
        for (int64_t i = 0; i < n; i++)
            if (bad_scale(sc[i]))
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "weight_scale[%lld] = %g, expected a finite value > 0", (long long)i, (double)sc[i]);
    } else if (w->w.scale_elem == MOQ_ELEM_E4M3 || w->w.scale_elem == MOQ_ELEM_E8M0) {
        const uint8_t *sc = w->scale;
        const int64_t n = N * (K / w->w.group_cols);
        for (int64_t i = 0; i < n; i++) {
            const bool nan = w->w.scale_elem == MOQ_ELEM_E8M0 ? sc[i] == 0xFF : (sc[i] & 0x7F) == 0x7F;
            const bool neg = w->w.scale_elem == MOQ_ELEM_E4M3 && (sc[i] & 0x80) && sc[i] != 0x80;
            if (nan || neg)
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "weight_scale[%lld, %lld] = 0x%02X (%s), expected a positive %s block scale%s",
                                (long long)(i / (K / w->w.group_cols)), (long long)(i % (K / w->w.group_cols)), sc[i], nan ? "NaN" : "negative",
                                moq_elem_name(w->w.scale_elem), nan ? "; a NaN block scale is the sentinel of a scale that was never written" : "");
        }
    }
    return MOQ_OK;
}

moq_status moq_linear_create_from_weight(moq_linear **out, const moq_weight *w, const moq_linear_opts *opts, moq_error *err) {
    if (!out || !w) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_linear_create_from_weight", "out and w must not be NULL");
    *out = NULL;
    const moq_linear_opts o = opts ? *opts : moq_linear_opts_default();
    const char *name = o.name ? o.name : "";
    const moq_pair_id p = moq_pair_of(w);
    MOQ_TRY(validate(w, p, name, err));
    const uint32_t feat = moq_cpu_features() & o.cpu_mask;
    if (o.device == MOQ_DEVICE_CUDA) {
        moq_status st = moq_device_check(o.device, NULL, 0, err);
        if (st != MOQ_OK) {
            if (err) snprintf(err->where, sizeof err->where, "%s", name);
            return st;
        }
        if (w->pre_scale) /* run applies it on the host, over x: x is device memory here */
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, name, "an AWQ pre_quant_scale (NVFP4_AWQ) has no CUDA path yet, expected a layer without one on --device cuda");
    } else if (o.device != MOQ_DEVICE_CPU) {
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "device %d, expected MOQ_DEVICE_CPU or MOQ_DEVICE_CUDA", (int)o.device);
    }
    char rej[1024] = "";
    const moq_kernel *k = NULL;
    for (size_t i = 0; i < moq_kernel_table_len && !k; i++) {
        const moq_kernel *r = &moq_kernel_table[i];
        if (r->op != MOQ_OP_LINEAR || r->pair != p) continue;
        if ((r->target == MOQ_TARGET_CUDA_SM90) != (o.device == MOQ_DEVICE_CUDA)) continue;
        if (o.kernel && strcmp(o.kernel, r->name) != 0) continue;
        char why[160] = "";
        if ((r->need & feat) != r->need)
            snprintf(why, sizeof why, "cpu lacks %s", (r->need & ~feat & MOQ_CPU_AVX512VNNI) ? "avx512vnni" : (r->need & ~feat & MOQ_CPU_AVX512BF16) ? "avx512bf16" : (r->need & ~feat & MOQ_CPU_AVX512) ? "avx512" : "avx2");
        else if (r->supports && !r->supports(w, why, sizeof why)) {
        } else k = r;
        if (!k) {
            size_t n = strlen(rej);
            snprintf(rej + n, sizeof rej - n, "%s%s: %s", n ? "; " : "", r->name, why);
        }
    }
    if (!k)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, name, "linear %s [n=%lld, k=%lld] on %s: no kernel fits; %s", moq_pairs[p].name,
                        (long long)w->N, (long long)w->K, moq_device_name(o.device),
                        rej[0] ? rej : "the requested kernel is not a row of this pair on this device");
    moq_linear *l = calloc(1, sizeof *l);
    if (!l) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "out of memory for the layer");
    l->w = *w;
    l->pair = p;
    l->k = k;
    /* The M chain: k, then each later row on the same packed weight that fits, until one with no
     * M bounds (every M is then served: checked, a table without such a row is a bug). */
    l->by_m[l->n_by_m++] = k;
    for (size_t i = (size_t)(k - moq_kernel_table) + 1; i < moq_kernel_table_len && (k->m_lo > 1 || k->m_hi > 0); i++) {
        const moq_kernel *r = &moq_kernel_table[i];
        const moq_kernel *last = l->by_m[l->n_by_m - 1];
        if (last->m_lo <= 1 && last->m_hi == 0) break;
        char why[160];
        if (r->op != k->op || r->pair != p || r->target != k->target || r->pack != k->pack || r->packed_size != k->packed_size ||
            (r->need & feat) != r->need || (r->supports && !r->supports(w, why, sizeof why)))
            continue;
        if (l->n_by_m == (int)(sizeof l->by_m / sizeof l->by_m[0])) break;
        l->by_m[l->n_by_m++] = r;
    }
    {
        const moq_kernel *last = l->by_m[l->n_by_m - 1];
        if (last->m_lo > 1 || last->m_hi > 0) {
            free(l);
            return MOQ_FAIL(err, MOQ_ERR_INTERNAL, name, "kernel %s serves M %d..%d and no later row on its packed weight serves the rest",
                            k->name, k->m_lo, k->m_hi);
        }
    }
    l->device = k->target == MOQ_TARGET_CUDA_SM90 ? MOQ_DEVICE_CUDA : MOQ_DEVICE_CPU;
    l->rcpa_corr = o.rcpa_corr;
    l->n_threads = o.n_threads > 0 ? o.n_threads : omp_get_max_threads();
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->rejected, sizeof l->rejected, "%s", rej);
    l->row_scale = malloc((size_t)w->N * sizeof(float));
    if (!l->row_scale) { moq_linear_free(l); return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "out of memory for %lld row scales", (long long)w->N); }
    if (moq_pairs[p].a_static) l->a_scale = static_a_scale(w);
    for (int64_t n = 0; n < w->N; n++) l->row_scale[n] = moq_linear_row_scale(w, n);
    l->plan_only = o.plan_only;
    if (k->packed_size && !o.plan_only) {
        /* Packed on the host; a device row's layout is then uploaded once and the host copy freed. */
        const size_t sz = (k->packed_size(w) + 63) & ~(size_t)63;
        /* Plain pages: MADV_HUGEPAGE here made a 1.2 GB FP8 load cost 2.8 s of CPU instead of 0.9
         * (this kernel's THP defrag=madvise compacts memory synchronously on fault; docs/PERFORMANCE.md). */
        void *host = aligned_alloc(64, sz ? sz : 64);
        if (!host) { moq_linear_free(l); return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "out of memory packing %zu bytes for %s", sz, k->name); }
        k->pack(w, host);
        l->packed_bytes = sz;
        if (l->device == MOQ_DEVICE_CPU) {
            l->packed = host;
        } else {
            moq_status st = moq_device_alloc(l->device, sz, &l->packed, err);
            if (st == MOQ_OK) st = moq_device_upload(l->device, l->packed, host, sz, err);
            free(host);
            if (st != MOQ_OK) {
                if (err) snprintf(err->where, sizeof err->where, "%s", name);
                moq_linear_free(l);
                return st;
            }
        }
    }
    *out = l;
    return MOQ_OK;
}

void moq_linear_free(moq_linear *l) {
    if (!l) return;
    moq_device_free(l->device, l->packed);
    free(l->row_scale);
    free(l);
}

/* Bytes of the AWQ-scaled copy of x (f32 [M, K]) at the start of the workspace, 64-aligned. */
static size_t pre_bytes(const moq_linear *l, int64_t M) { return l->w.pre_scale ? ((size_t)M * (size_t)l->w.K * 4 + 63) & ~(size_t)63 : 0; }

/* The row of l's M chain that runs M (the last one has no bounds). */
static const moq_kernel *row_for_m(const moq_linear *l, int64_t M) {
    for (int i = 0; i < l->n_by_m - 1; i++) {
        const moq_kernel *r = l->by_m[i];
        if (M >= (r->m_lo > 0 ? r->m_lo : 1) && (r->m_hi == 0 || M <= r->m_hi)) return r;
    }
    return l->by_m[l->n_by_m - 1];
}

size_t moq_linear_workspace_size(const moq_linear *l, int64_t M) {
    if (!l || M < 1) return 0;
    return pre_bytes(l, M) + row_for_m(l, M)->workspace(&l->w, M, l->n_threads) + 64;
}

moq_status moq_linear_run(const moq_linear *l, const void *x, moq_elem x_elem, int64_t M, void *y, moq_elem y_elem, void *ws,
                          size_t ws_size, moq_error *err) {
    return moq_linear_run_stream(l, x, x_elem, M, y, y_elem, ws, ws_size, NULL, err);
}

moq_status moq_linear_run_stream(const moq_linear *l, const void *x, moq_elem x_elem, int64_t M, void *y, moq_elem y_elem, void *ws,
                                 size_t ws_size, void *stream, moq_error *err) {
    if (!l || !x || !y || M < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l ? l->name : "", "l, x, y must not be NULL and M >= 1 (M=%lld)", (long long)M);
    if ((x_elem != MOQ_ELEM_F32 && x_elem != MOQ_ELEM_BF16) || (y_elem != MOQ_ELEM_F32 && y_elem != MOQ_ELEM_BF16))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l->name, "x %s, y %s, expected f32 or bf16 for each", moq_elem_name(x_elem), moq_elem_name(y_elem));
    if (l->plan_only)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l->name, "layer was opened with plan_only (kernel %s chosen, no layout built), expected a layer opened to run", l->k->name);
    const size_t need = moq_linear_workspace_size(l, M);
    if (ws_size < need || (!ws && need))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l->name, "workspace %zu bytes, expected >= %zu for M=%lld", ws_size, need, (long long)M);
    uintptr_t a = ((uintptr_t)ws + 63) & ~(uintptr_t)63;
    if (l->w.pre_scale) { /* AWQ: every kernel sees x · diag(pre_quant_scale), in f32 */
        if (!ws) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l->name, "workspace NULL, expected >= %zu bytes for M=%lld", need, (long long)M);
        float *xs = (float *)a;
        const int64_t K = l->w.K;
        for (int64_t m = 0; m < M; m++) {
            moq_x_row_f32(x, x_elem, K, m, xs + m * K);
            for (int64_t k = 0; k < K; k++) xs[m * K + k] *= l->w.pre_scale[k];
        }
        x = xs, x_elem = MOQ_ELEM_F32;
        a += pre_bytes(l, M);
    }
    const moq_kernel *k = row_for_m(l, M);
    moq_linear_launch la = {
        .k = k, .w = &l->w, .pair = l->pair, .packed = l->packed, .row_scale = l->row_scale, .a_scale = l->a_scale,
        .rcpa_corr = l->rcpa_corr, .x = x, .x_elem = x_elem, .M = M, .y = y, .y_elem = y_elem,
        .ws = (void *)a, .ws_size = ws_size - (size_t)(a - (uintptr_t)ws), .n_threads = l->n_threads, .stream = stream,
    };
    return k->run(&la, err);
}

const char *moq_linear_kernel_name(const moq_linear *l) { return l ? l->k->name : ""; }
const char *moq_linear_kernel_name_for(const moq_linear *l, int64_t M) { return l && M >= 1 ? row_for_m(l, M)->name : ""; }

unsigned moq_linear_forget_canonical(moq_linear *l) {
    if (!l || !l->k->packed_size || l->plan_only) return 0;
    unsigned r = MOQ_CANON_CODES;
    l->w.q = NULL;
    if (l->w.w.scale_elem == MOQ_ELEM_E4M3 || l->w.w.scale_elem == MOQ_ELEM_E8M0) {
        r |= MOQ_CANON_BLOCK_SCALES;
        l->w.scale = NULL;
    }
    return r;
}

size_t moq_linear_packed_bytes(const moq_linear *l) { return l ? l->packed_bytes : 0; }
const char *moq_linear_rejections(const moq_linear *l) { return l ? l->rejected : ""; }
