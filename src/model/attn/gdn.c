/* gdn.c — Gated DeltaNet (see gdn.h for the recurrence). Tested by tests/model/test_arch.c. */
#include "model/attn/gdn.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/nn_math.h"
#include "kernels/kernels.h"

int64_t moq_gdn_channels(const moq_gdn_dims *d) { return 2 * d->Hk * d->dk + d->Hv * d->dv; }

static moq_status want(const moq_layer_linear *l, int64_t N, int64_t K, moq_error *err) {
    if (l->w.N != N || l->w.K != K)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, l->name, "shape [%lld, %lld], expected [%lld, %lld] (from the linear_* sizes of config.json)",
                        (long long)l->w.N, (long long)l->w.K, (long long)N, (long long)K);
    return MOQ_OK;
}

moq_status moq_gdn_open(moq_gdn *g, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_gdn_dims *d,
                        const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err) {
    memset(g, 0, sizeof *g);
    g->d = *d;
    if (d->Hk < 1 || d->Hv < 1 || d->Hv % d->Hk || d->dk < 1 || d->dv < 1 || d->K < 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "linear_num_key_heads %lld, linear_num_value_heads %lld, head dims %lld / %lld, conv %lld; "
                        "expected positive values with value heads a multiple of key heads", (long long)d->Hk, (long long)d->Hv, (long long)d->dk,
                        (long long)d->dv, (long long)d->K);
    const int64_t C = moq_gdn_channels(d), V = d->Hv * d->dv;
    char p[320];
    static const struct { const char *name; size_t off; } lins[] = {
        {"in_proj_qkv", offsetof(moq_gdn, qkv)}, {"in_proj_z", offsetof(moq_gdn, z)}, {"in_proj_b", offsetof(moq_gdn, b)},
        {"in_proj_a", offsetof(moq_gdn, a)},     {"out_proj", offsetof(moq_gdn, out)},
    };
    const int64_t shapes[][2] = {{C, d->H}, {V, d->H}, {d->Hv, d->H}, {d->Hv, d->H}, {d->H, V}};
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
        moq_layer_linear *l = (moq_layer_linear *)(void *)((char *)g + lins[i].off);
        snprintf(p, sizeof p, "%s.%s", prefix, lins[i].name);
        MOQ_TRY(moq_layers_load_linear(l, c, q, p, MOQ_KIND_LINEAR, NULL, 1, lo, blobs, err));
        MOQ_TRY(want(l, shapes[i][0], shapes[i][1], err));
    }
    snprintf(p, sizeof p, "%s.conv1d.weight", prefix);
    MOQ_TRY(moq_layers_f32(&g->conv, c, p, C * d->K, blobs, err));
    snprintf(p, sizeof p, "%s.A_log", prefix);
    MOQ_TRY(moq_layers_f32(&g->A, c, p, d->Hv, blobs, err));
    for (int64_t j = 0; j < d->Hv; j++) g->A[j] = expf(g->A[j]);
    snprintf(p, sizeof p, "%s.dt_bias", prefix);
    MOQ_TRY(moq_layers_f32(&g->dt_bias, c, p, d->Hv, blobs, err));
    snprintf(p, sizeof p, "%s.norm.weight", prefix);
    MOQ_TRY(moq_layers_f32(&g->norm, c, p, d->dv, blobs, err));
    g->conv_state = moq_blobs_alloc(blobs, (size_t)((d->K - 1) * C + 1) * sizeof(float));
    g->S = moq_blobs_alloc(blobs, (size_t)(d->Hv * d->dk * d->dv) * sizeof(float));
    if (!g->conv_state || !g->S) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for the recurrent state");
    return MOQ_OK;
}

void moq_gdn_close(moq_gdn *g) {
    if (!g) return;
    moq_layer_linear *ls[] = {&g->qkv, &g->z, &g->b, &g->a, &g->out};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) moq_layers_close_linear(ls[i]);
}

size_t moq_gdn_linear_ws(const moq_gdn *g, int64_t C) {
    const moq_layer_linear *ls[] = {&g->qkv, &g->z, &g->b, &g->a, &g->out};
    size_t ws = 0;
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        const size_t s = ls[i]->lin ? moq_linear_workspace_size(ls[i]->lin, C) : 0;
        if (s > ws) ws = s;
    }
    return ws;
}

void moq_gdn_reset(moq_gdn *g) {
    if (!g->S) return;
    memset(g->conv_state, 0, (size_t)((g->d.K - 1) * moq_gdn_channels(&g->d)) * sizeof(float));
    memset(g->S, 0, (size_t)(g->d.Hv * g->d.dk * g->d.dv) * sizeof(float));
}

static moq_status run(const moq_layer_linear *l, const moq_gdn_ws *ws, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, ws->lws, ws->lws_size, err);
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); } /* torch's threshold 20 */

static void l2norm(float *x, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss + 1e-6));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}

moq_status moq_gdn_forward(moq_gdn *g, const moq_gdn_ws *ws, const float *h, int64_t M, float *out, moq_error *err) {
    const moq_gdn_dims *d = &g->d;
    const int64_t C = moq_gdn_channels(d), V = d->Hv * d->dv, K = d->K, rep = d->Hv / d->Hk;
    if (g->obs) g->obs(g->obs_user, g->obs_layer, MOQ_GDN_TAP_IN, h, M, d->H);
    MOQ_TRY(run(&g->qkv, ws, h, M, ws->w, err));
    MOQ_TRY(run(&g->z, ws, h, M, ws->z, err));
    MOQ_TRY(run(&g->b, ws, h, M, ws->b, err));
    MOQ_TRY(run(&g->a, ws, h, M, ws->a, err));
    const float qs = 1.0f / sqrtf((float)d->dk);
    /* causal depthwise conv over [state (K-1 inputs) | the M inputs], then silu; each channel is
     * independent, its state shifts token by token */
#pragma omp parallel for num_threads(ws->n_threads) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const float *cw = g->conv + ch * K;
        for (int64_t i = 0; i < M; i++) {
            float *w = ws->w + i * C;
            const float x = w[ch];
            float acc = cw[K - 1] * x;
            for (int64_t t = 0; t < K - 1; t++) acc += cw[t] * g->conv_state[t * C + ch];
            for (int64_t t = 0; t + 1 < K - 1; t++) g->conv_state[t * C + ch] = g->conv_state[(t + 1) * C + ch];
            if (K > 1) g->conv_state[(K - 2) * C + ch] = x;
            w[ch] = moq_silu(acc);
        }
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t hk = 0; hk < 2 * d->Hk; hk++) l2norm(ws->w + i * C + hk * d->dk, d->dk); /* q heads, then k heads */
    /* the delta rule: each value head's state is independent, tokens in order */
#pragma omp parallel for num_threads(ws->n_threads) schedule(dynamic, 1)
    for (int64_t j = 0; j < d->Hv; j++) {
        float *S = g->S + j * d->dk * d->dv;
        for (int64_t i = 0; i < M; i++) {
            const float *w = ws->w + i * C, *q = w, *k = w + d->Hk * d->dk, *v = w + 2 * d->Hk * d->dk;
            const float *qj = q + (j / rep) * d->dk, *kj = k + (j / rep) * d->dk, *vj = v + j * d->dv;
            const float beta = 1.0f / (1.0f + expf(-ws->b[i * d->Hv + j]));
            const float decay = expf(-g->A[j] * softplus(ws->a[i * d->Hv + j] + g->dt_bias[j]));
            float *oj = ws->o + i * V + j * d->dv;
            for (int64_t e = 0; e < d->dk * d->dv; e++) S[e] *= decay;
            for (int64_t c = 0; c < d->dv; c++) {
                float mem = 0;
                for (int64_t r = 0; r < d->dk; r++) mem += S[r * d->dv + c] * kj[r];
                const float delta = (vj[c] - mem) * beta;
                for (int64_t r = 0; r < d->dk; r++) S[r * d->dv + c] += kj[r] * delta;
            }
            for (int64_t c = 0; c < d->dv; c++) {
                float acc = 0;
                for (int64_t r = 0; r < d->dk; r++) acc += S[r * d->dv + c] * qj[r];
                oj[c] = acc * qs;
            }
            /* gated RMSNorm of the head: rmsnorm(o) · w · moq_silu(z) */
            double ss = 0;
            for (int64_t c = 0; c < d->dv; c++) ss += (double)oj[c] * oj[c];
            const float r = (float)(1.0 / sqrt(ss / (double)d->dv + d->eps));
            const float *zj = ws->z + i * V + j * d->dv;
            for (int64_t c = 0; c < d->dv; c++) oj[c] = oj[c] * r * g->norm[c] * moq_silu(zj[c]);
        }
    }
    if (g->obs) g->obs(g->obs_user, g->obs_layer, MOQ_GDN_TAP_OUT_IN, ws->o, M, V);
    return run(&g->out, ws, ws->o, M, out, err);
}
