/* mla.c — multi-head latent attention (see mla.h for the formulas and the two evaluation orders).
 * Tested by tests/model/test_arch.c. */
#include "model/attn/mla.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/nn_math.h"
#include "kernels/kernels.h"
#include "model/rope.h"

static moq_status want(const moq_layer_linear *l, int64_t N, int64_t K, moq_error *err) {
    if (l->w.N != N || l->w.K != K)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, l->name, "shape [%lld, %lld], expected [%lld, %lld] (from the MLA dimensions of config.json)",
                        (long long)l->w.N, (long long)l->w.K, (long long)N, (long long)K);
    return MOQ_OK;
}

moq_status moq_mla_open(moq_mla *a, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_mla_dims *d,
                        const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err) {
    memset(a, 0, sizeof *a);
    a->d = *d;
    const int64_t dq = d->dn + d->dr, A = d->A;
    char p[320];
#define OPEN(dst, name) \
    (snprintf(p, sizeof p, "%s.%s", prefix, name), moq_layers_load_linear(dst, c, q, p, MOQ_KIND_LINEAR, NULL, 1, lo, blobs, err))
    if (d->q_lora > 0) {
        MOQ_TRY(OPEN(&a->q_a, "q_a_proj"));
        MOQ_TRY(want(&a->q_a, d->q_lora, d->H, err));
        MOQ_TRY(OPEN(&a->q_b, "q_b_proj"));
        MOQ_TRY(want(&a->q_b, A * dq, d->q_lora, err));
        snprintf(p, sizeof p, "%s.q_a_layernorm.weight", prefix);
        MOQ_TRY(moq_layers_f32(&a->q_a_norm, c, p, d->q_lora, blobs, err));
    } else {
        MOQ_TRY(OPEN(&a->q_b, "q_proj"));
        MOQ_TRY(want(&a->q_b, A * dq, d->H, err));
    }
    MOQ_TRY(OPEN(&a->kv_a, "kv_a_proj_with_mqa"));
    MOQ_TRY(want(&a->kv_a, d->R + d->dr, d->H, err));
    snprintf(p, sizeof p, "%s.kv_b_proj", prefix); /* canonical kept until dequantized below */
    MOQ_TRY(moq_layers_load_linear_kept(&a->kv_b, c, q, p, MOQ_KIND_LINEAR, lo, blobs, err));
    MOQ_TRY(want(&a->kv_b, A * (d->dn + d->dv), d->R, err));
    MOQ_TRY(OPEN(&a->o, "o_proj"));
    MOQ_TRY(want(&a->o, d->H, A * d->dv, err));
    if (d->topk > 0 && d->ctx > d->topk && !d->ishared) { /* DeepSeek-V3.2: the indexer decides once keys outnumber index_topk */
        if (d->q_lora < 1 || d->nih < 1 || d->ihd < d->dr)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "DeepSeek sparse attention with q_lora_rank %lld, index_n_heads %lld, index_head_dim %lld; "
                            "expected a q LoRA, >= 1 head and index_head_dim >= qk_rope_head_dim (%lld)", (long long)d->q_lora, (long long)d->nih,
                            (long long)d->ihd, (long long)d->dr);
        MOQ_TRY(OPEN(&a->i_wq_b, "indexer.wq_b"));
        MOQ_TRY(want(&a->i_wq_b, d->nih * d->ihd, d->q_lora, err));
        MOQ_TRY(OPEN(&a->i_wk, "indexer.wk"));
        MOQ_TRY(want(&a->i_wk, d->ihd, d->H, err));
        MOQ_TRY(OPEN(&a->i_wproj, "indexer.weights_proj"));
        MOQ_TRY(want(&a->i_wproj, d->nih, d->H, err));
        snprintf(p, sizeof p, "%s.indexer.k_norm.weight", prefix);
        MOQ_TRY(moq_layers_f32(&a->i_kn_w, c, p, d->ihd, blobs, err));
        snprintf(p, sizeof p, "%s.indexer.k_norm.bias", prefix);
        MOQ_TRY(moq_layers_f32(&a->i_kn_b, c, p, d->ihd, blobs, err));
        a->ik = moq_blobs_alloc(blobs, (size_t)(d->ctx * d->ihd) * sizeof(float));
        if (!a->ik) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for the indexer's key cache");
    }
#undef OPEN
    snprintf(p, sizeof p, "%s.kv_a_layernorm.weight", prefix);
    MOQ_TRY(moq_layers_f32(&a->kv_a_norm, c, p, d->R, blobs, err));
    /* the absorbed form needs kv_b_proj as a matrix: dequantize it once (any scheme) */
    const int64_t N = A * (d->dn + d->dv);
    a->w = moq_blobs_alloc(blobs, (size_t)(N * d->R) * sizeof(float));
    double *row = malloc((size_t)d->R * sizeof(double));
    if (!a->w || !row) {
        free(row);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, a->kv_b.name, "out of memory for the dequantized [%lld, %lld] matrix", (long long)N, (long long)d->R);
    }
    for (int64_t n = 0; n < N; n++) {
        moq_weight_dequant_row(&a->kv_b.w, n, row);
        for (int64_t k = 0; k < d->R; k++) a->w[n * d->R + k] = (float)row[k];
    }
    free(row);
    moq_layers_drop_canonical(&a->kv_b);
    return MOQ_OK;
}

void moq_mla_close(moq_mla *a) {
    if (!a) return;
    moq_layers_close_linear(&a->q_a);
    moq_layers_close_linear(&a->q_b);
    moq_layers_close_linear(&a->kv_a);
    moq_layers_close_linear(&a->kv_b);
    moq_layers_close_linear(&a->o);
    moq_layers_close_linear(&a->i_wq_b);
    moq_layers_close_linear(&a->i_wk);
    moq_layers_close_linear(&a->i_wproj);
}

size_t moq_mla_linear_ws(const moq_mla *a, int64_t C) {
    const moq_layer_linear *ls[] = {&a->q_a, &a->q_b, &a->kv_a, &a->o, &a->i_wq_b, &a->i_wk, &a->i_wproj};
    size_t ws = 0;
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        const size_t s = ls[i]->lin ? moq_linear_workspace_size(ls[i]->lin, C) : 0;
        if (s > ws) ws = s;
    }
    return ws;
}

int64_t moq_mla_cache_row(const moq_mla_dims *d) { return d->R + d->dr; }

/* Per head and cached position, expanding costs R (dn + dv) multiply-adds once for the whole chunk;
 * the absorbed form costs about 2 R + dr per position for each of the M tokens. */
bool moq_mla_expands(const moq_mla_dims *d, int64_t M) { return M * (2 * d->R + d->dr) > d->R * (d->dn + d->dv); }

/* scores [ctx] + max(expanded rows [ctx, dn + dr + dv] + one latent [R], cache row + q_lat + o_lat [3 R + dr]) */
int64_t moq_mla_scratch_floats(const moq_mla_dims *d, int64_t ctx) {
    const int64_t ex = ctx * (d->dn + d->dr + d->dv) + d->R, ab = 3 * d->R + d->dr;
    return ctx + (ex > ab ? ex : ab);
}


/* RoPE of x f32 [dr] at pos: interleaved pairs (2i, 2i+1) (DeepSeek's apply_rotary_pos_emb_interleave,
 * whose de-interleaved output order is the same permutation for q and k, so dot products agree) or
 * rotate-half pairs (i, i + dr/2). */
static void rope(float *x, int64_t dr, int64_t pos, const float *inv_freq, float mscale, bool interleave) {
    if (interleave) moq_rope_apply_pairs(x, dr, pos, inv_freq, mscale);
    else moq_rope_apply(x, dr, pos, inv_freq, mscale);
}


/* Prefill order: per head, expand K_nope / V of every position once, then attend each new token. */
static void attend_expanded(const moq_mla *a, const moq_mla_ws *ws, const moq_kv_cache *kv, int64_t layer, int64_t p0, int64_t M, const float *sel) {
    const moq_mla_dims *d = &a->d;
    const int64_t A = d->A, R = d->R, dq = d->dn + d->dr, rw = d->dn + d->dr + d->dv, npos = p0 + M;
#pragma omp parallel for num_threads(ws->n_threads) schedule(dynamic, 1)
    for (int64_t hd = 0; hd < A; hd++) {
        float *s = ws->scratch + (int64_t)omp_get_thread_num() * moq_mla_scratch_floats(d, ws->ctx);
        float *ex = s + ws->ctx, *lat = ex + ws->ctx * rw;
        const float *wk = a->w + hd * (d->dn + d->dv) * R, *wv = wk + d->dn * R;
        for (int64_t p = 0; p < npos; p++) { /* ex row p: [Wk c_p (dn) | kr_p (dr) | Wv c_p (dv)] */
            float *r = ex + p * rw;
            moq_kv_cache_read(kv, 0, layer, p, 0, R, lat);
            moq_kv_cache_read(kv, 0, layer, p, R, d->dr, r + d->dn);
            for (int64_t e = 0; e < d->dn; e++) {
                float acc = 0;
                for (int64_t k = 0; k < R; k++) acc += wk[e * R + k] * lat[k];
                r[e] = acc;
            }
            for (int64_t e = 0; e < d->dv; e++) {
                float acc = 0;
                for (int64_t k = 0; k < R; k++) acc += wv[e * R + k] * lat[k];
                r[dq + e] = acc;
            }
        }
        for (int64_t i = 0; i < M; i++) {
            const float *q = ws->q + i * A * dq + hd * dq;
            const int64_t n = p0 + i + 1;
            for (int64_t p = 0; p < n; p++) {
                const float *r = ex + p * rw;
                float dot = 0;
                for (int64_t e = 0; e < dq; e++) dot += q[e] * r[e];
                s[p] = sel && sel[i * ws->ctx + p] == 0.0f ? -INFINITY : dot * d->scale;
            }
            moq_softmax(s, n);
            float *o = ws->att + i * A * d->dv + hd * d->dv;
            memset(o, 0, (size_t)d->dv * sizeof(float));
            for (int64_t p = 0; p < n; p++) {
                const float *v = ex + p * rw + dq;
                for (int64_t e = 0; e < d->dv; e++) o[e] += s[p] * v[e];
            }
        }
    }
}

/* Decode order (absorbed): q_lat = Wk_aᵀ q_nope; score = q_lat · c_p + q_rope · kr_p; out = Wv_a Σ softmax c_p. */
static void attend_absorbed(const moq_mla *a, const moq_mla_ws *ws, const moq_kv_cache *kv, int64_t layer, int64_t p0, int64_t M, const float *sel) {
    const moq_mla_dims *d = &a->d;
    const int64_t A = d->A, R = d->R, dq = d->dn + d->dr;
#pragma omp parallel for num_threads(ws->n_threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < M * A; t++) {
        const int64_t i = t / A, hd = t % A, n = p0 + i + 1;
        float *s = ws->scratch + (int64_t)omp_get_thread_num() * moq_mla_scratch_floats(d, ws->ctx);
        float *row = s + ws->ctx, *ql = row + R + d->dr, *ol = ql + R;
        const float *wk = a->w + hd * (d->dn + d->dv) * R, *wv = wk + d->dn * R;
        const float *q = ws->q + i * A * dq + hd * dq;
        memset(ql, 0, (size_t)R * sizeof(float));
        for (int64_t e = 0; e < d->dn; e++)
            for (int64_t k = 0; k < R; k++) ql[k] += q[e] * wk[e * R + k];
        for (int64_t p = 0; p < n; p++) {
            moq_kv_cache_read(kv, 0, layer, p, 0, R + d->dr, row);
            float dot = 0;
            for (int64_t k = 0; k < R; k++) dot += ql[k] * row[k];
            for (int64_t e = 0; e < d->dr; e++) dot += q[d->dn + e] * row[R + e];
            s[p] = sel && sel[i * ws->ctx + p] == 0.0f ? -INFINITY : dot * d->scale;
        }
        moq_softmax(s, n);
        memset(ol, 0, (size_t)R * sizeof(float));
        for (int64_t p = 0; p < n; p++) {
            moq_kv_cache_read(kv, 0, layer, p, 0, R, row);
            for (int64_t k = 0; k < R; k++) ol[k] += s[p] * row[k];
        }
        float *o = ws->att + i * A * d->dv + hd * d->dv;
        for (int64_t e = 0; e < d->dv; e++) {
            float acc = 0;
            for (int64_t k = 0; k < R; k++) acc += wv[e * R + k] * ol[k];
            o[e] = acc;
        }
    }
}

static moq_status run(const moq_layer_linear *l, const moq_mla_ws *ws, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ws->lws, ws->lws_size, err);
}

/* DeepSeek-V3.2's indexer over positions 0..p of each new token (mla.h): ws->sel row i = 1 at the
 * index_topk best keys (all of them while there are no more than that). */
static moq_status index_select(const moq_mla *a, const moq_mla_ws *ws, const float *h, int64_t M, int64_t p0, const float *inv_freq, float mscale,
                               moq_error *err) {
    const moq_mla_dims *d = &a->d;
    const int64_t nih = d->nih, ihd = d->ihd, ctx = ws->ctx;
    MOQ_TRY(run(&a->i_wq_b, ws, ws->qa, M, ws->iq, err));
    MOQ_TRY(run(&a->i_wk, ws, h, M, ws->ikp, err));
    MOQ_TRY(run(&a->i_wproj, ws, h, M, ws->iw, err));
    for (int64_t i = 0; i < M; i++) { /* LayerNorm of the key, then RoPE of the first dr values of keys and queries */
        const float *x = ws->ikp + i * ihd;
        float *k = a->ik + (p0 + i) * ihd;
        double mu = 0, var = 0;
        for (int64_t e = 0; e < ihd; e++) mu += x[e];
        mu /= (double)ihd;
        for (int64_t e = 0; e < ihd; e++) var += ((double)x[e] - mu) * ((double)x[e] - mu);
        const float rs = (float)(1.0 / sqrt(var / (double)ihd + 1e-6)), m = (float)mu;
        for (int64_t e = 0; e < ihd; e++) k[e] = (x[e] - m) * rs * a->i_kn_w[e] + a->i_kn_b[e];
        rope(k, d->dr, p0 + i, inv_freq, mscale, d->i_interleave);
        for (int64_t hd = 0; hd < nih; hd++) rope(ws->iq + (i * nih + hd) * ihd, d->dr, p0 + i, inv_freq, mscale, d->i_interleave);
    }
    const float ssc = 1.0f / sqrtf((float)ihd), wsc = 1.0f / sqrtf((float)nih);
    for (int64_t i = 0; i < M; i++) {
        const int64_t n = p0 + i + 1;
        float *sel = ws->sel + i * ctx, *sc = ws->isc;
        const bool all = n <= d->topk;
        for (int64_t p = 0; p < n; p++) {
            sel[p] = all ? 1.0f : 0.0f;
            if (all) continue;
            float v = 0.0f;
            for (int64_t hd = 0; hd < nih; hd++) {
                const float *q = ws->iq + (i * nih + hd) * ihd, *k = a->ik + p * ihd;
                float dot = 0.0f;
                for (int64_t e = 0; e < ihd; e++) dot += q[e] * k[e];
                dot *= ssc;
                v += (dot > 0.0f ? dot : 0.0f) * (ws->iw[i * nih + hd] * wsc);
            }
            sc[p] = v;
        }
        for (int64_t t = 0; !all && t < d->topk; t++) { /* best first, the lower position on ties */
            int64_t b = -1;
            for (int64_t p = 0; p < n; p++)
                if (sel[p] == 0.0f && (b < 0 || sc[p] > sc[b])) b = p;
            sel[b] = 1.0f;
        }
    }
    return MOQ_OK;
}

moq_status moq_mla_forward(const moq_mla *a, const moq_mla_ws *ws, const float *inv_freq, float mscale, const float *h, int64_t M,
                           int64_t p0, moq_kv_cache *kv, int64_t layer, float *out, moq_error *err) {
    const moq_mla_dims *d = &a->d;
    const int64_t A = d->A, dq = d->dn + d->dr, cr = d->R + d->dr;
    if (a->obs) a->obs(a->obs_user, layer, MOQ_MLA_TAP_IN, h, M, a->d.H);
    if (d->q_lora > 0) {
        MOQ_TRY(run(&a->q_a, ws, h, M, ws->qa, err));
        for (int64_t i = 0; i < M; i++) moq_rmsnorm(ws->qa + i * d->q_lora, ws->qa + i * d->q_lora, a->q_a_norm, d->q_lora, d->eps);
        if (a->obs) a->obs(a->obs_user, layer, MOQ_MLA_TAP_Q_B_IN, ws->qa, M, d->q_lora);
        MOQ_TRY(run(&a->q_b, ws, ws->qa, M, ws->q, err));
    } else {
        MOQ_TRY(run(&a->q_b, ws, h, M, ws->q, err));
    }
    MOQ_TRY(run(&a->kv_a, ws, h, M, ws->ckv, err));
    for (int64_t i = 0; i < M; i++) {
        float *ckv = ws->ckv + i * cr;
        moq_rmsnorm(ckv, ckv, a->kv_a_norm, d->R, d->eps);
        rope(ckv + d->R, d->dr, p0 + i, inv_freq, mscale, d->interleave);
        for (int64_t hd = 0; hd < A; hd++) rope(ws->q + i * A * dq + hd * dq + d->dn, d->dr, p0 + i, inv_freq, mscale, d->interleave);
        moq_kv_cache_write(kv, layer, p0 + i, ckv, NULL);
    }
    const float *sel = NULL;
    if (a->ik) {
        MOQ_TRY(index_select(a, ws, h, M, p0, inv_freq, mscale, err));
        sel = ws->sel;
    } else if (d->ishared && d->topk > 0 && d->ctx > d->topk) {
        sel = ws->sel; /* the previous full layer's choice for these M tokens */
    }
    if (moq_mla_expands(d, M)) attend_expanded(a, ws, kv, layer, p0, M, sel);
    else attend_absorbed(a, ws, kv, layer, p0, M, sel);
    if (a->obs) a->obs(a->obs_user, layer, MOQ_MLA_TAP_O_IN, ws->att, M, A * d->dv);
    return run(&a->o, ws, ws->att, M, out, err);
}
