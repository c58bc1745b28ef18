/* dsv4.c — DeepSeek-V4 attention (sliding window + CSA / HCA compressed entries + the lightning
 * indexer, attention sinks, grouped output projection) and mHC; see dsv4.h for the arithmetic. */
#include "model/attn/dsv4.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/nn_math.h"
#include "model/rope.h"

static moq_status lin(moq_layer_linear *l, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const char *name, int64_t N,
                      int64_t K, const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err) {
    char p[320];
    snprintf(p, sizeof p, "%s.%s", prefix, name);
    MOQ_TRY(moq_layers_load_linear(l, c, q, p, MOQ_KIND_LINEAR, NULL, 1, lo, blobs, err));
    if (l->w.N != N || l->w.K != K)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, l->name, "shape [%lld, %lld], expected [%lld, %lld]", (long long)l->w.N, (long long)l->w.K,
                        (long long)N, (long long)K);
    return MOQ_OK;
}

static moq_status vec(float **out, const moq_checkpoint *c, const char *prefix, const char *name, int64_t n, moq_blobs *blobs, moq_error *err) {
    char p[320];
    snprintf(p, sizeof p, "%s.%s", prefix, name);
    return moq_layers_f32(out, c, p, n, blobs, err);
}

static moq_status state(float **p, int64_t n, moq_blobs *blobs, moq_error *err) {
    *p = moq_blobs_alloc(blobs, (size_t)n * sizeof(float));
    return *p ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, "DeepSeek-V4 attention", "out of memory for %lld floats of state", (long long)n);
}

moq_status moq_dsv4_open(moq_dsv4_attn *a, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_dsv4_dims *d,
                         int64_t m, bool indexed, int64_t ctx, const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err) {
    char at[300];
    snprintf(at, sizeof at, "%s.attn", prefix);
    a->m = m, a->indexed = indexed && m > 0, a->ctx = ctx;
    MOQ_TRY(lin(&a->wq_a, c, q, at, "wq_a", d->q_lora, d->H, lo, blobs, err));
    MOQ_TRY(lin(&a->wq_b, c, q, at, "wq_b", d->A * d->D, d->q_lora, lo, blobs, err));
    MOQ_TRY(lin(&a->wkv, c, q, at, "wkv", d->D, d->H, lo, blobs, err));
    MOQ_TRY(lin(&a->wo_a, c, q, at, "wo_a", d->og * d->olr, d->A * d->D / d->og, lo, blobs, err));
    MOQ_TRY(lin(&a->wo_b, c, q, at, "wo_b", d->H, d->og * d->olr, lo, blobs, err));
    MOQ_TRY(vec(&a->q_norm, c, at, "q_norm.weight", d->q_lora, blobs, err));
    MOQ_TRY(vec(&a->kv_norm, c, at, "norm.weight", d->D, blobs, err));
    MOQ_TRY(vec(&a->sinks, c, at, "attn_sink", d->A, blobs, err));
    MOQ_TRY(state(&a->kv, ctx * d->D, blobs, err));
    if (m > 0) {
        const int64_t cw = (a->indexed ? 2 : 1) * d->D, ne = ctx / m + 1;
        MOQ_TRY(lin(&a->c_wkv, c, q, at, "compressor.wkv", cw, d->H, lo, blobs, err));
        MOQ_TRY(lin(&a->c_wgate, c, q, at, "compressor.wgate", cw, d->H, lo, blobs, err));
        MOQ_TRY(vec(&a->c_ape, c, at, "compressor.ape", m * cw, blobs, err));
        MOQ_TRY(vec(&a->c_norm, c, at, "compressor.norm.weight", d->D, blobs, err));
        MOQ_TRY(state(&a->ckv, ctx * cw, blobs, err));
        MOQ_TRY(state(&a->cgate, ctx * cw, blobs, err));
        MOQ_TRY(state(&a->cent, ne * d->D, blobs, err));
        if (a->indexed) {
            MOQ_TRY(lin(&a->i_wkv, c, q, at, "indexer.compressor.wkv", 2 * d->ihd, d->H, lo, blobs, err));
            MOQ_TRY(lin(&a->i_wgate, c, q, at, "indexer.compressor.wgate", 2 * d->ihd, d->H, lo, blobs, err));
            MOQ_TRY(vec(&a->i_ape, c, at, "indexer.compressor.ape", m * 2 * d->ihd, blobs, err));
            MOQ_TRY(vec(&a->i_norm, c, at, "indexer.compressor.norm.weight", d->ihd, blobs, err));
            MOQ_TRY(lin(&a->i_wq_b, c, q, at, "indexer.wq_b", d->nih * d->ihd, d->q_lora, lo, blobs, err));
            MOQ_TRY(lin(&a->i_wproj, c, q, at, "indexer.weights_proj", d->nih, d->H, lo, blobs, err));
            MOQ_TRY(state(&a->ikv, ctx * 2 * d->ihd, blobs, err));
            MOQ_TRY(state(&a->igate, ctx * 2 * d->ihd, blobs, err));
            MOQ_TRY(state(&a->ient, ne * d->ihd, blobs, err));
        }
    }
    static const char *const site[2] = {"attn", "ffn"};
    const int64_t mix = (2 + d->hc) * d->hc;
    for (int s = 0; s < 2; s++) {
        char n[64];
        snprintf(n, sizeof n, "hc_%s_fn", site[s]);
        MOQ_TRY(vec(&a->hc_fn[s], c, prefix, n, mix * d->hc * d->H, blobs, err));
        snprintf(n, sizeof n, "hc_%s_base", site[s]);
        MOQ_TRY(vec(&a->hc_base[s], c, prefix, n, mix, blobs, err));
        snprintf(n, sizeof n, "hc_%s_scale", site[s]);
        MOQ_TRY(vec(&a->hc_scale[s], c, prefix, n, 3, blobs, err));
    }
    return MOQ_OK;
}

void moq_dsv4_close(moq_dsv4_attn *a) {
    moq_layer_linear *ls[] = {&a->wq_a, &a->wq_b, &a->wkv, &a->wo_a, &a->wo_b, &a->c_wkv, &a->c_wgate, &a->i_wkv, &a->i_wgate, &a->i_wq_b, &a->i_wproj};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) moq_layers_close_linear(ls[i]);
}

size_t moq_dsv4_linear_ws(const moq_dsv4_attn *a, const moq_dsv4_dims *d, int64_t C) {
    const moq_layer_linear *ls[] = {&a->wq_a, &a->wq_b, &a->wkv, &a->wo_b, &a->c_wkv, &a->c_wgate, &a->i_wkv, &a->i_wgate, &a->i_wq_b, &a->i_wproj};
    size_t ws = a->wo_a.lin ? moq_linear_workspace_size(a->wo_a.lin, C * d->og) : 0;
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        const size_t s = ls[i]->lin ? moq_linear_workspace_size(ls[i]->lin, C) : 0;
        if (s > ws) ws = s;
    }
    return ws;
}

moq_status moq_dsv4_ws_alloc(moq_dsv4_ws *ws, const moq_dsv4_dims *d, int64_t C, int64_t ctx, int n_threads, moq_blobs *blobs, moq_error *err) {
    ws->n_threads = n_threads > 0 ? n_threads : 1, ws->ctx = ctx;
    struct { float **p; int64_t n; } b[] = {
        {&ws->qr, C * d->q_lora}, {&ws->q, C * d->A * d->D}, {&ws->kvp, C * d->D}, {&ws->cp, C * 2 * d->D}, {&ws->cg, C * 2 * d->D},
        {&ws->ip, C * 2 * d->ihd}, {&ws->ig, C * 2 * d->ihd}, {&ws->iq, C * d->nih * d->ihd}, {&ws->iw, C * d->nih},
        {&ws->att, C * d->A * d->D}, {&ws->oa, C * d->og * d->og * d->olr}, {&ws->ob, C * d->og * d->olr},
        {&ws->sc, (int64_t)ws->n_threads * (ctx + d->W + 2)}, {&ws->sel, C * (ctx + 1)}, {&ws->hc, d->hc * d->H + (2 + d->hc) * d->hc},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) MOQ_TRY(state(b[i].p, b[i].n, blobs, err));
    return MOQ_OK;
}


static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Entry w of a compressor over rows of width cw (kv, gate) with position bias ape [m, cw]: HCA sums
 * window w's m rows (Dc = cw); CSA (overlap) the first Dc of window w - 1 and the last Dc of window w.
 * Then rmsnorm · norm and the compress RoPE at position w m. */
static void compress(const float *kv, const float *gate, const float *ape, int64_t cw, int64_t Dc, int64_t m, bool overlap, int64_t w,
                     const float *norm, double eps, const float *inv_freq, float mscale, int64_t r, float *out) {
    const int64_t off = overlap ? Dc : 0;
    for (int64_t e = 0; e < Dc; e++) {
        float mx = -INFINITY, s = 0.0f, acc = 0.0f;
        for (int pass = 0; pass < 2; pass++)
            for (int64_t half = overlap && w > 0 ? 0 : 1; half < 2; half++)
                for (int64_t j = 0; j < m; j++) {
                    const int64_t row = (half ? w : w - 1) * m + j, col = half ? off + e : e;
                    const float g = gate[row * cw + col] + ape[j * cw + col];
                    if (pass == 0) mx = fmaxf(mx, g);
                    else {
                        const float p = expf(g - mx);
                        s += p, acc += p * kv[row * cw + col];
                    }
                }
        out[e] = acc / s;
    }
    moq_rmsnorm(out, out, norm, Dc, eps);
    moq_rope_apply_pairs(out + Dc - r, r, w * m, inv_freq, mscale);
}

static moq_status run(const moq_dsv4_ws *ws, const moq_layer_linear *l, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ws->lws, ws->lws_size, err);
}

moq_status moq_dsv4_forward(const moq_dsv4_attn *a, const moq_dsv4_dims *d, const moq_dsv4_ws *ws, const float *h, int64_t M, int64_t p0,
                            float *out, moq_error *err) {
    const int64_t A = d->A, D = d->D, r = d->r, m = a->m, ihd = d->ihd, nih = d->nih;
    if (p0 + M > a->ctx)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, a->wq_a.name, "positions up to %lld exceed the context of %lld", (long long)(p0 + M), (long long)a->ctx);
    MOQ_TRY(run(ws, &a->wq_a, h, M, ws->qr, err));
    for (int64_t i = 0; i < M; i++) moq_rmsnorm(ws->qr + i * d->q_lora, ws->qr + i * d->q_lora, a->q_norm, d->q_lora, d->eps);
    MOQ_TRY(run(ws, &a->wq_b, ws->qr, M, ws->q, err));
    MOQ_TRY(run(ws, &a->wkv, h, M, ws->kvp, err));
    for (int64_t i = 0; i < M; i++) {
        const int64_t p = p0 + i;
        for (int64_t hd = 0; hd < A; hd++) {
            float *qh = ws->q + (i * A + hd) * D;
            moq_rmsnorm(qh, qh, NULL, D, d->eps);
            moq_rope_apply_pairs(qh + D - r, r, p, a->inv_freq, a->mscale);
        }
        float *kv = a->kv + p * D;
        memcpy(kv, ws->kvp + i * D, (size_t)D * sizeof(float));
        moq_rmsnorm(kv, kv, a->kv_norm, D, d->eps);
        moq_rope_apply_pairs(kv + D - r, r, p, a->inv_freq, a->mscale);
    }
    if (m > 0) { /* the compressors' projections of these positions, then every window they close */
        const int64_t cw = (a->indexed ? 2 : 1) * D;
        MOQ_TRY(run(ws, &a->c_wkv, h, M, ws->cp, err));
        MOQ_TRY(run(ws, &a->c_wgate, h, M, ws->cg, err));
        memcpy(a->ckv + p0 * cw, ws->cp, (size_t)(M * cw) * sizeof(float));
        memcpy(a->cgate + p0 * cw, ws->cg, (size_t)(M * cw) * sizeof(float));
        if (a->indexed) {
            MOQ_TRY(run(ws, &a->i_wkv, h, M, ws->ip, err));
            MOQ_TRY(run(ws, &a->i_wgate, h, M, ws->ig, err));
            memcpy(a->ikv + p0 * 2 * ihd, ws->ip, (size_t)(M * 2 * ihd) * sizeof(float));
            memcpy(a->igate + p0 * 2 * ihd, ws->ig, (size_t)(M * 2 * ihd) * sizeof(float));
            MOQ_TRY(run(ws, &a->i_wq_b, ws->qr, M, ws->iq, err));
            MOQ_TRY(run(ws, &a->i_wproj, h, M, ws->iw, err));
        }
        for (int64_t p = p0; p < p0 + M; p++) {
            if ((p + 1) % m) continue;
            const int64_t w = (p + 1) / m - 1;
            compress(a->ckv, a->cgate, a->c_ape, cw, D, m, a->indexed, w, a->c_norm, d->eps, a->inv_freq_c, a->mscale_c, r, a->cent + w * D);
            if (a->indexed)
                compress(a->ikv, a->igate, a->i_ape, 2 * ihd, ihd, m, true, w, a->i_norm, d->eps, a->inv_freq_c, a->mscale_c, r, a->ient + w * ihd);
        }
    }
    const float scale = 1.0f / sqrtf((float)D);
    const int64_t srow = ws->ctx + d->W + 2, selrow = ws->ctx + 1;
    /* which entries each token attends: every visible one, or the indexer's index_topk best (CSA) */
#pragma omp parallel for num_threads(ws->n_threads) schedule(dynamic, 1) if (M > 1)
    for (int64_t i = 0; i < M; i++) {
        const int64_t p = p0 + i, nvis = m > 0 ? (p + 1) / m : 0;
        float *sel = ws->sel + i * selrow;
        for (int64_t s = 0; s < nvis; s++) sel[s] = 1.0f;
        if (!a->indexed || nvis <= d->topk) continue;
        float *iq = ws->iq + i * nih * ihd, *sc = ws->sc + (int64_t)omp_get_thread_num() * srow;
        for (int64_t hd = 0; hd < nih; hd++) moq_rope_apply_pairs(iq + hd * ihd + ihd - r, r, p, a->inv_freq_c, a->mscale_c);
        const float wsc = 1.0f / sqrtf((float)nih), ssc = 1.0f / sqrtf((float)ihd);
        for (int64_t s = 0; s < nvis; s++) {
            float v = 0.0f;
            for (int64_t hd = 0; hd < nih; hd++) {
                const float qk = dot(iq + hd * ihd, a->ient + s * ihd, ihd);
                v += (qk > 0.0f ? qk * ssc : 0.0f) * (ws->iw[i * nih + hd] * wsc);
            }
            sc[s] = v, sel[s] = 0.0f;
        }
        for (int64_t k = 0; k < d->topk; k++) { /* best first; the lowest index on ties */
            int64_t b = -1;
            for (int64_t s = 0; s < nvis; s++)
                if (sel[s] == 0.0f && (b < 0 || sc[s] > sc[b])) b = s;
            sel[b] = 1.0f;
        }
    }
#pragma omp parallel for num_threads(ws->n_threads) schedule(dynamic, 1) if (M * A > 1)
    for (int64_t t = 0; t < M * A; t++) {
        const int64_t i = t / A, hd = t % A, p = p0 + i, lo = p - d->W + 1 > 0 ? p - d->W + 1 : 0, nvis = m > 0 ? (p + 1) / m : 0;
        const float *sel = ws->sel + i * selrow, *q = ws->q + (i * A + hd) * D;
        float *o = ws->att + (i * A + hd) * D, *sc = ws->sc + (int64_t)omp_get_thread_num() * srow;
        float mx = a->sinks[hd];
        for (int64_t j = lo; j <= p; j++) sc[j - lo] = dot(q, a->kv + j * D, D) * scale, mx = fmaxf(mx, sc[j - lo]);
        const int64_t nk = p - lo + 1;
        for (int64_t s = 0; s < nvis; s++)
            if (sel[s] != 0.0f) sc[nk + s] = dot(q, a->cent + s * D, D) * scale, mx = fmaxf(mx, sc[nk + s]);
        float sum = expf(a->sinks[hd] - mx);
        for (int64_t j = 0; j < nk; j++) sum += (sc[j] = expf(sc[j] - mx));
        for (int64_t s = 0; s < nvis; s++)
            if (sel[s] != 0.0f) sum += (sc[nk + s] = expf(sc[nk + s] - mx));
        memset(o, 0, (size_t)D * sizeof(float));
        for (int64_t j = 0; j < nk; j++) {
            const float pj = sc[j] / sum, *v = a->kv + (lo + j) * D;
            for (int64_t e = 0; e < D; e++) o[e] += pj * v[e];
        }
        for (int64_t s = 0; s < nvis; s++) {
            if (sel[s] == 0.0f) continue;
            const float ps = sc[nk + s] / sum, *v = a->cent + s * D;
            for (int64_t e = 0; e < D; e++) o[e] += ps * v[e];
        }
        moq_rope_apply_pairs(o + D - r, r, -p, a->inv_freq, a->mscale);
    }
    /* grouped output projection: row (i, g) of att is group g of token i; keep block g of its output */
    const int64_t G = d->og, NO = G * d->olr;
    MOQ_TRY(moq_linear_run(a->wo_a.lin, ws->att, MOQ_ELEM_F32, M * G, ws->oa, MOQ_ELEM_F32, ws->lws, ws->lws_size, err));
    for (int64_t i = 0; i < M; i++)
        for (int64_t g = 0; g < G; g++) memcpy(ws->ob + i * NO + g * d->olr, ws->oa + (i * G + g) * NO + g * d->olr, (size_t)d->olr * sizeof(float));
    return run(ws, &a->wo_b, ws->ob, M, out, err);
}


/* mix = fn · rms(x) over hc H values (no weight), f32 [n]. */
static void hc_mix(const moq_dsv4_dims *d, const float *fn, int64_t n, const float *x, float *mix) {
    const int64_t F = d->hc * d->H;
    double ss = 0;
    for (int64_t e = 0; e < F; e++) ss += (double)x[e] * x[e];
    const float rs = (float)(1.0 / sqrt(ss / (double)F + d->eps));
    for (int64_t k = 0; k < n; k++) {
        float s = 0.0f;
        for (int64_t e = 0; e < F; e++) s += fn[k * F + e] * (x[e] * rs);
        mix[k] = s;
    }
}

void moq_dsv4_hc_pre(const moq_dsv4_attn *a, const moq_dsv4_dims *d, int site, const float *x, int64_t M, float *in, float *mix) {
    const int64_t hc = d->hc, H = d->H, n = (2 + hc) * hc;
    const float *fn = a->hc_fn[site], *b = a->hc_base[site], *sc = a->hc_scale[site];
    const float eps = (float)d->hc_eps;
    for (int64_t i = 0; i < M; i++) {
        const float *xi = x + i * hc * H;
        float *mi = mix + i * (hc + hc * hc), raw[(2 + 16) * 16], pre[16];
        hc_mix(d, fn, n, xi, raw);
        for (int64_t s = 0; s < hc; s++) pre[s] = moq_sigmoid(raw[s] * sc[0] + b[s]) + eps;
        for (int64_t s = 0; s < hc; s++) mi[s] = 2.0f * moq_sigmoid(raw[hc + s] * sc[1] + b[hc + s]);
        float *cb = mi + hc;
        for (int64_t rr = 0; rr < hc; rr++) { /* softmax over each row, + eps */
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t c = 0; c < hc; c++) cb[rr * hc + c] = raw[2 * hc + rr * hc + c] * sc[2] + b[2 * hc + rr * hc + c], mx = fmaxf(mx, cb[rr * hc + c]);
            for (int64_t c = 0; c < hc; c++) sum += (cb[rr * hc + c] = expf(cb[rr * hc + c] - mx));
            for (int64_t c = 0; c < hc; c++) cb[rr * hc + c] = cb[rr * hc + c] / sum + eps;
        }
        for (int64_t it = 0; it < d->hc_iters; it++) { /* columns, then (after the first) rows and columns */
            for (int pass = it == 0 ? 1 : 0; pass < 2; pass++)
                for (int64_t u = 0; u < hc; u++) {
                    float s = 0.0f;
                    for (int64_t v = 0; v < hc; v++) s += pass ? cb[v * hc + u] : cb[u * hc + v];
                    for (int64_t v = 0; v < hc; v++) {
                        float *c = pass ? &cb[v * hc + u] : &cb[u * hc + v];
                        *c /= s + eps;
                    }
                }
        }
        for (int64_t e = 0; e < H; e++) {
            float v = 0.0f;
            for (int64_t s = 0; s < hc; s++) v += pre[s] * xi[s * H + e];
            in[i * H + e] = v;
        }
    }
}

void moq_dsv4_hc_post(const moq_dsv4_dims *d, float *x, const float *out, const float *mix, int64_t M, float *tmp) {
    const int64_t hc = d->hc, H = d->H;
    for (int64_t i = 0; i < M; i++) {
        float *xi = x + i * hc * H;
        const float *post = mix + i * (hc + hc * hc), *cb = post + hc;
        for (int64_t s = 0; s < hc; s++)
            for (int64_t e = 0; e < H; e++) {
                float v = post[s] * out[i * H + e];
                for (int64_t rr = 0; rr < hc; rr++) v += cb[rr * hc + s] * xi[rr * H + e];
                tmp[s * H + e] = v;
            }
        memcpy(xi, tmp, (size_t)(hc * H) * sizeof(float));
    }
}

void moq_dsv4_hc_head(const moq_dsv4_dims *d, const float *fn, const float *base, const float *scale, const float *x, int64_t M, float *y) {
    const int64_t hc = d->hc, H = d->H;
    for (int64_t i = 0; i < M; i++) {
        const float *xi = x + i * hc * H;
        float mix[16];
        hc_mix(d, fn, hc, xi, mix);
        for (int64_t s = 0; s < hc; s++) mix[s] = moq_sigmoid(mix[s] * scale[0] + base[s]) + (float)d->hc_eps;
        for (int64_t e = 0; e < H; e++) {
            float v = 0.0f;
            for (int64_t s = 0; s < hc; s++) v += mix[s] * xi[s * H + e];
            y[i * H + e] = v;
        }
    }
}
