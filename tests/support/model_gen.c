/* model_gen.c — see model_gen.h. Moved from tests/model/test_model.c. */
#include <math.h>

#include "tu.h"
#include "format/format.h"
#include "model_gen.h"
#include "quant/export_ref.h"

double tg_d_e4m3(uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m, -9);
    return s ? -v : v;
}
double tg_d_e2m1(uint8_t c) {
    static const double t[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (c & 8) ? -t[c & 7] : t[c & 7];
}
/* Round |x| to a binary grid with `mbits` mantissa bits and minimum exponent emin (subnormals
 * below), ties to even, saturating at max: e4m3 (emin -6, 3 bits, 448), e2m1 (0, 1, 6). */
static double grid(double x, int emin, int mbits, double max) {
    const double a = fabs(x);
    if (a == 0) return 0 * x;
    int e = (int)floor(log2(a));
    if (e < emin) e = emin;
    const double step = ldexp(1.0, e - mbits);
    double r = nearbyint(a / step) * step;
    if (r > max) r = max;
    return x < 0 ? -r : r;
}
double tg_q_e4m3(double x) { return grid(x, -6, 3, 448.0); }
double tg_q_e2m1(double x) { return grid(x, 0, 1, 6.0); }

void *tg_keep(gen *g, size_t n) {
    void *p = calloc(1, n ? n : 1);
    g->bufs = realloc(g->bufs, (g->n_bufs + 1) * sizeof *g->bufs);
    g->bufs[g->n_bufs++] = p;
    return p;
}

double tg_uni(uint64_t *st) { /* splitmix64 -> [0, 1) */
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

float tg_bf16r(double x) { return moq_bf16_decode(moq_bf16_encode_rne((float)x)); }

void tg_fill(gen *g, float *x, size_t n, double std, double mean) {
    for (size_t i = 0; i < n; i++) x[i] = tg_bf16r(mean + (tg_uni(&g->rng) * 2 - 1) * std * 1.7);
}

void tg_add(gen *g, const char *name, moq_dtype dt, int ndim, const int64_t *shape, const void *data, size_t nbytes) {
    TU_OK(moq_writer_add(g->w, name, dt, ndim, shape, data, nbytes, err_));
}

void tg_add_scalar(gen *g, const char *name, float v) {
    float *p = tg_keep(g, 4);
    *p = v;
    tg_add(g, name, MOQ_DT_F32, 0, NULL, p, 4);
}

/* bf16 tensor written, returned as double */
double *tg_add_bf16(gen *g, const char *name, int64_t n0, int64_t n1, double std, double mean) {
    const size_t n = (size_t)(n0 * (n1 ? n1 : 1));
    float *f = malloc(n * sizeof *f);
    tg_fill(g, f, n, std, mean);
    uint16_t *h = tg_keep(g, n * 2);
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) h[i] = moq_bf16_encode_rne(f[i]), d[i] = f[i];
    free(f);
    const int64_t sh[2] = {n0, n1};
    tg_add(g, name, MOQ_DT_BF16, n1 ? 2 : 1, sh, h, n * 2);
    return d;
}


const double TG_ACT_AMAX = 4.0; /* "calibrated" activation amax used for static scales */

/* One module (or the shards of one fused module, sharing NVFP4's global amax like ModelOpt's
 * fusion unification, §9.3). Writes the checkpoint tensors and fills the oracle linears. */
double *tg_add_f32(gen *g, const char *name, int64_t n0, int64_t n1, double std, double mean) {
    const size_t n = (size_t)(n0 * (n1 ? n1 : 1));
    float *f = tg_keep(g, n * sizeof *f);
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) f[i] = (float)(mean + (tg_uni(&g->rng) * 2 - 1) * std * 1.7), d[i] = f[i];
    const int64_t sh[2] = {n0, n1};
    tg_add(g, name, MOQ_DT_F32, n1 ? 2 : 1, sh, f, n * sizeof *f);
    return d;
}

void tg_add_linears(gen *g, const char *prefix, const char *const *names, const int64_t *ns, int cnt, int64_t K,
                        const char *algo, bool bias, olin *out) {
    float *W[3];
    double amax = 0;
    for (int i = 0; i < cnt; i++) {
        W[i] = malloc((size_t)(ns[i] * K) * sizeof(float));
        tg_fill(g, W[i], (size_t)(ns[i] * K), 1.0 / sqrt((double)K), 0);
        for (int64_t j = 0; j < ns[i] * K; j++) amax = fmax(amax, fabs(W[i][j]));
    }
    for (int i = 0; i < cnt; i++) {
        const int64_t N = ns[i];
        char nm[256], mod[200];
        snprintf(mod, sizeof mod, "%s%s%s", prefix, prefix[0] ? "." : "", names[i]);
        olin *o = &out[i];
        o->N = N, o->K = K, o->a = ACT_NONE;
        o->W = malloc((size_t)(N * K) * sizeof(double));
        if (strcmp(algo, "BF16") == 0) {
            uint16_t *h = tg_keep(g, (size_t)(N * K) * 2);
            for (int64_t j = 0; j < N * K; j++) h[j] = moq_bf16_encode_rne(W[i][j]), o->W[j] = W[i][j];
            const int64_t sh[2] = {N, K};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_BF16, 2, sh, h, (size_t)(N * K) * 2);
        } else if (strcmp(algo, "NVFP4") == 0 || strcmp(algo, "W4A16_NVFP4") == 0 || strcmp(algo, "NVFP4_AWQ") == 0) {
            uint8_t *q = tg_keep(g, (size_t)(N * K / 2)), *sf = tg_keep(g, (size_t)(N * K / 16));
            float ws2;
            moq_export_nvfp4_weight(W[i], (size_t)N, (size_t)K, (float)amax, q, sf, &ws2);
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < K; k++)
                    o->W[n * K + k] = tg_d_e2m1((uint8_t)(q[(n * K + k) / 2] >> ((k & 1) * 4))) * tg_d_e4m3(sf[(n * K + k) / 16]) * ws2;
            const int64_t sq[2] = {N, K / 2}, ss[2] = {N, K / 16};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_U8, 2, sq, q, (size_t)(N * K / 2));
            snprintf(nm, sizeof nm, "%s.weight_scale", mod);
            tg_add(g, nm, MOQ_DT_F8_E4M3, 2, ss, sf, (size_t)(N * K / 16));
            snprintf(nm, sizeof nm, "%s.weight_scale_2", mod);
            tg_add_scalar(g, nm, ws2);
            if (strcmp(algo, "W4A16_NVFP4") != 0) {
                const float is = (float)(TG_ACT_AMAX / 2688.0);
                snprintf(nm, sizeof nm, "%s.input_scale", mod);
                tg_add_scalar(g, nm, is);
                o->a = ACT_NVFP4, o->in_scale = is;
            }
            if (strcmp(algo, "NVFP4_AWQ") == 0 && strcmp(names[i], "o_proj") == 0) {
                /* ModelOpt 0.47 keeps the AWQ scale only where it cannot fold it (o_proj, §12) */
                uint16_t *h = tg_keep(g, (size_t)K * 2);
                o->pqs = malloc((size_t)K * sizeof(double));
                for (int64_t k = 0; k < K; k++) {
                    h[k] = moq_bf16_encode_rne((float)(0.5 + 1.5 * (double)((k * 29) % 64) / 64.0));
                    o->pqs[k] = (double)moq_bf16_decode(h[k]);
                }
                snprintf(nm, sizeof nm, "%s.pre_quant_scale", mod);
                tg_add(g, nm, MOQ_DT_BF16, 1, (const int64_t[]){K}, h, (size_t)K * 2);
            }
        } else if (strcmp(algo, "FP8") == 0) {
            uint8_t *q = tg_keep(g, (size_t)(N * K));
            float sc;
            moq_export_fp8_tensor_weight(W[i], (size_t)N, (size_t)K, -1.0f, MOQ_DT_BF16, q, &sc);
            for (int64_t j = 0; j < N * K; j++) o->W[j] = tg_d_e4m3(q[j]) * sc;
            const int64_t sq[2] = {N, K};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_F8_E4M3, 2, sq, q, (size_t)(N * K));
            snprintf(nm, sizeof nm, "%s.weight_scale", mod);
            tg_add_scalar(g, nm, sc);
            /* shards get different input scales: the layer must use their maximum (§5.1) */
            const float is = (float)(TG_ACT_AMAX * (1.0 + 0.25 * i) / 448.0);
            snprintf(nm, sizeof nm, "%s.input_scale", mod);
            tg_add_scalar(g, nm, is);
            o->a = ACT_FP8_STATIC, o->in_scale = is;
        } else if (strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN") == 0) {
            uint8_t *q = tg_keep(g, (size_t)(N * K));
            float *sc = tg_keep(g, (size_t)N * 4);
            moq_export_fp8_row_weight(W[i], (size_t)N, (size_t)K, q, sc);
            for (int64_t j = 0; j < N * K; j++) o->W[j] = tg_d_e4m3(q[j]) * sc[j / K];
            const int64_t sq[2] = {N, K}, ss[1] = {N};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_F8_E4M3, 2, sq, q, (size_t)(N * K));
            snprintf(nm, sizeof nm, "%s.weight_scale", mod);
            tg_add(g, nm, MOQ_DT_F32, 1, ss, sc, (size_t)N * 4);
            o->a = ACT_FP8_TOKEN;
        } else if (strcmp(algo, "FP8_PB_WO") == 0) {
            const int64_t nb = (N + 127) / 128, kb = K / 128;
            uint8_t *q = tg_keep(g, (size_t)(N * K));
            float *sc = tg_keep(g, (size_t)(nb * kb) * 4);
            moq_export_fp8_block_weight(W[i], (size_t)N, (size_t)K, q, sc);
            for (int64_t j = 0; j < N * K; j++) o->W[j] = tg_d_e4m3(q[j]) * sc[(j / K / 128) * kb + (j % K) / 128];
            const int64_t sq[2] = {N, K}, ss[4] = {nb, 1, kb, 1};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_F8_E4M3, 2, sq, q, (size_t)(N * K));
            snprintf(nm, sizeof nm, "%s.weight_scale", mod);
            tg_add(g, nm, MOQ_DT_F32, 4, ss, sc, (size_t)(nb * kb) * 4);
            o->a = ACT_FP8_G128;
        } else if (strcmp(algo, "MXFP8") == 0) {
            uint8_t *q = tg_keep(g, (size_t)(N * K)), *sc = tg_keep(g, (size_t)(N * K / 32));
            moq_export_mxfp8_weight(W[i], (size_t)N, (size_t)K, q, sc);
            for (int64_t j = 0; j < N * K; j++) o->W[j] = tg_d_e4m3(q[j]) * ldexp(1.0, (int)sc[j / 32] - 127);
            const int64_t sq[2] = {N, K}, ss[2] = {N, K / 32};
            snprintf(nm, sizeof nm, "%s.weight", mod);
            tg_add(g, nm, MOQ_DT_F8_E4M3, 2, sq, q, (size_t)(N * K));
            snprintf(nm, sizeof nm, "%s.weight_scale", mod);
            tg_add(g, nm, MOQ_DT_U8, 2, ss, sc, (size_t)(N * K / 32));
            o->a = ACT_MXFP8;
        } else {
            fail_msg("test has no exporter for %s", algo);
        }
        if (strcmp(algo, "BF16") != 0) {
            size_t l = strlen(g->layers_json);
            snprintf(g->layers_json + l, sizeof g->layers_json - l, "%s\"%s\": {\"quant_algo\": \"%s\"%s}", l ? ", " : "", mod, algo,
                     strstr(algo, "NVFP4") ? ", \"group_size\": 16" : "");
        }
        if (bias) {
            snprintf(nm, sizeof nm, "%s.bias", mod);
            o->bias = tg_add_bf16(g, nm, N, 0, 0.1, 0);
        }
        free(W[i]);
    }
    /* static activation scale of a fused layer: the maximum over its shards */
    double mx = 0;
    for (int i = 0; i < cnt; i++) mx = fmax(mx, out[i].in_scale);
    for (int i = 0; i < cnt; i++) out[i].in_scale = mx;
}

void tg_olin_free(olin *l) {
    free(l->W);
    free(l->bias);
    free(l->pqs);
}

void tg_act_quant(act a, double in_scale, const double *x, int64_t K, double *out) {
    switch (a) {
    case ACT_NONE: memcpy(out, x, (size_t)K * sizeof *x); break;
    case ACT_FP8_STATIC:
        for (int64_t k = 0; k < K; k++) out[k] = tg_q_e4m3(x[k] / in_scale) * in_scale;
        break;
    case ACT_FP8_TOKEN: {
        double m = 0;
        for (int64_t k = 0; k < K; k++) m = fmax(m, fabs(x[k]));
        const double s = fmax(m / 448.0, 1.0 / (448.0 * 512.0));
        for (int64_t k = 0; k < K; k++) out[k] = tg_q_e4m3(x[k] / s) * s;
        break;
    }
    case ACT_FP8_G128:
        for (int64_t g0 = 0; g0 < K; g0 += 128) {
            double m = 1e-10;
            for (int64_t k = g0; k < g0 + 128; k++) m = fmax(m, fabs(x[k]));
            const double s = m / 448.0;
            for (int64_t k = g0; k < g0 + 128; k++) out[k] = tg_q_e4m3(x[k] / s) * s;
        }
        break;
    case ACT_NVFP4: {
        const double S = 1.0 / in_scale; /* global: 448 * 6 / amax */
        for (int64_t g0 = 0; g0 < K; g0 += 16) {
            double m = 0;
            for (int64_t k = g0; k < g0 + 16; k++) m = fmax(m, fabs(x[k]));
            const double sf = tg_q_e4m3(S * (m / 6.0));
            for (int64_t k = g0; k < g0 + 16; k++) out[k] = sf == 0 ? 0 : tg_q_e2m1(x[k] * S / sf) * sf / S;
        }
        break;
    }
    case ACT_MXFP8:
        for (int64_t g0 = 0; g0 < K; g0 += 32) {
            double m = 0;
            for (int64_t k = g0; k < g0 + 32; k++) m = fmax(m, fabs(x[k]));
            if (m == 0) {
                for (int64_t k = g0; k < g0 + 32; k++) out[k] = 0;
                continue;
            }
            const double s = ldexp(1.0, (int)ceil(log2(m / 448.0)));
            for (int64_t k = g0; k < g0 + 32; k++) out[k] = tg_q_e4m3(x[k] / s) * s;
        }
        break;
    }
}

void tg_lin(const olin *l, const double *x, double *y) {
    double *xq = malloc((size_t)l->K * sizeof *xq), *xs = NULL;
    if (l->pqs) { /* AWQ: the input times the per-channel scale, then the NVFP4 quantizer */
        xs = malloc((size_t)l->K * sizeof *xs);
        for (int64_t k = 0; k < l->K; k++) xs[k] = x[k] * l->pqs[k];
        x = xs;
    }
    tg_act_quant(l->a, l->in_scale, x, l->K, xq);
    free(xs);
    for (int64_t n = 0; n < l->N; n++) {
        double acc = 0;
        for (int64_t k = 0; k < l->K; k++) acc += l->W[n * l->K + k] * xq[k];
        y[n] = acc + (l->bias ? l->bias[n] : 0);
    }
    free(xq);
}

void tg_gen_free(gen *g) {
    for (size_t i = 0; i < g->n_bufs; i++) free(g->bufs[i]);
    free(g->bufs);
    g->bufs = NULL, g->n_bufs = 0;
}
