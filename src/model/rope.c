/* rope.c — RoPE frequency tables, one row per rope_scaling type (see rope.h). The formulas restate
 * transformers' _compute_{default,linear_scaling,llama3,yarn,proportional}_parameters; computed in double and
 * rounded to f32 once. Tested by tests/model/test_model.c. */
#include "model/rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

typedef moq_status (*rope_fn)(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err);

static void base_freqs(const moq_rope_params *p, int64_t D, double *inv) {
    for (int64_t i = 0; i < D / 2; i++) inv[i] = 1.0 / pow(p->theta, (double)(2 * i) / (double)D);
}

static moq_status rope_default(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err) {
    (void)err;
    base_freqs(p, D, inv);
    *mscale = 1.0;
    return MOQ_OK;
}

static moq_status need_factor(const moq_rope_params *p, moq_error *err) {
    if (!(p->factor >= 1.0) || !isfinite(p->factor))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_scaling.factor is %g for type %s, expected a finite value >= 1", p->factor, p->type);
    return MOQ_OK;
}

/* positions divided by factor == frequencies divided by factor */
static moq_status rope_linear(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err) {
    MOQ_TRY(need_factor(p, err));
    base_freqs(p, D, inv);
    for (int64_t i = 0; i < D / 2; i++) inv[i] /= p->factor;
    *mscale = 1.0;
    return MOQ_OK;
}

/* Llama 3.1: long wavelengths divided by factor, short ones kept, a linear blend in between. */
static moq_status rope_llama3(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err) {
    MOQ_TRY(need_factor(p, err));
    const double lo = p->low_freq_factor, hi = p->high_freq_factor, old = p->original_max_pos;
    if (!(hi > lo) || !(old > 0))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_scaling llama3: low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %g; expected high > low and a positive length", lo, hi, old);
    base_freqs(p, D, inv);
    const double lo_wl = old / lo, hi_wl = old / hi;
    for (int64_t i = 0; i < D / 2; i++) {
        const double wl = 2.0 * M_PI / inv[i];
        if (wl < hi_wl) continue;
        if (wl > lo_wl) { inv[i] /= p->factor; continue; }
        const double smooth = (old / wl - lo) / (hi - lo);
        inv[i] = (1.0 - smooth) * inv[i] / p->factor + smooth * inv[i];
    }
    *mscale = 1.0;
    return MOQ_OK;
}

static double yarn_dim(double n_rot, int64_t D, double base, double max_pos) {
    return ((double)D * log(max_pos / (n_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

/* YaRN (NTK-by-parts): ramp between interpolated (inv/factor) and extrapolated (inv) frequencies
 * over the dimensions whose rotation count at the original length lies between beta_slow and
 * beta_fast; cos/sin scaled by the attention factor. */
static moq_status rope_yarn(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err) {
    MOQ_TRY(need_factor(p, err));
    if (!(p->original_max_pos > 0))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_scaling yarn: original_max_position_embeddings %g, expected > 0", p->original_max_pos);
    base_freqs(p, D, inv);
    double low = yarn_dim(p->beta_fast, D, p->theta, p->original_max_pos);
    double high = yarn_dim(p->beta_slow, D, p->theta, p->original_max_pos);
    if (!p->no_truncate) low = floor(low), high = ceil(high);
    low = fmax(low, 0.0);
    high = fmin(high, (double)(D - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < D / 2; i++) {
        double ramp = ((double)i - low) / (high - low);
        ramp = fmin(fmax(ramp, 0.0), 1.0);
        const double extrap = 1.0 - ramp;
        inv[i] = inv[i] / p->factor * (1.0 - extrap) + inv[i] * extrap;
    }
    /* transformers _compute_yarn_parameters: get_mscale(f, s) = 0.1 s ln(f) + 1 (1 when f <= 1) */
    const double m1 = p->factor <= 1.0 ? 1.0 : 0.1 * log(p->factor) + 1.0;
    const double ma = p->factor <= 1.0 ? 1.0 : 0.1 * p->mscale * log(p->factor) + 1.0;
    const double mb = p->factor <= 1.0 ? 1.0 : 0.1 * p->mscale_all_dim * log(p->factor) + 1.0;
    *mscale = p->attention_factor > 0 ? p->attention_factor : p->mscale != 0 && p->mscale_all_dim != 0 ? ma / mb : m1;
    return MOQ_OK;
}

/* Proportional (Gemma 4 global layers): the rotated frequencies keep the whole head's exponent
 * 2i / D, only the first floor(partial_rotary_factor · D / 2) of them are non-zero, so the rest of
 * the head passes unrotated while the rotate_half pairing stays (i, i + D/2); all divided by factor
 * (1 when absent). */
static moq_status rope_proportional(const moq_rope_params *p, int64_t D, double *inv, double *mscale, moq_error *err) {
    const double f = p->partial_rotary_factor > 0 ? p->partial_rotary_factor : 1.0, fac = p->factor > 0 ? p->factor : 1.0;
    if (!(f <= 1.0) || !isfinite(fac))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope proportional: partial_rotary_factor %g, factor %g; expected (0, 1] and a finite factor", f, fac);
    const int64_t n_rot = (int64_t)floor(f * (double)D / 2.0);
    base_freqs(p, D, inv);
    for (int64_t i = 0; i < D / 2; i++) inv[i] = (i < n_rot ? inv[i] : 0.0) / fac;
    *mscale = 1.0;
    return MOQ_OK;
}

static const struct { const char *type; rope_fn fn; } rope_table[] = {
    {"", rope_default}, {"default", rope_default}, {"linear", rope_linear}, {"llama3", rope_llama3}, {"yarn", rope_yarn},
    {"proportional", rope_proportional},
};

moq_status moq_rope_inv_freq(const moq_rope_params *p, int64_t D, float *inv_freq, float *mscale, moq_error *err) {
    if (D < 2 || D % 2 || D > 4096) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "head_dim %lld, expected an even value in [2, 4096]", (long long)D);
    if (!(p->theta > 1.0) || !isfinite(p->theta)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_theta %g, expected a finite value > 1", p->theta);
    for (size_t r = 0; r < sizeof rope_table / sizeof rope_table[0]; r++) {
        if (strcmp(rope_table[r].type, p->type) != 0) continue;
        double inv[2048], ms = 1.0;
        MOQ_TRY(rope_table[r].fn(p, D, inv, &ms, err));
        for (int64_t i = 0; i < D / 2; i++) inv_freq[i] = (float)inv[i];
        *mscale = (float)ms;
        return MOQ_OK;
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "rope_scaling type \"%s\", expected one of default, linear, llama3, yarn, proportional", p->type);
}

void moq_rope_apply(float *x, int64_t D, int64_t pos, const float *inv_freq, float mscale) {
    const int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) {
        /* angle in double: pos * inv_freq loses digits in f32 at long positions */
        const double a = (double)pos * (double)inv_freq[i];
        const float cs = (float)cos(a) * mscale, sn = (float)sin(a) * mscale;
        const float x0 = x[i], x1 = x[i + h];
        x[i] = x0 * cs - x1 * sn;
        x[i + h] = x1 * cs + x0 * sn;
    }
}

void moq_rope_apply_pairs(float *x, int64_t D, int64_t pos, const float *inv_freq, float mscale) {
    for (int64_t i = 0; i < D / 2; i++) {
        const double a = (double)pos * (double)inv_freq[i];
        const float cs = (float)cos(a) * mscale, sn = (float)sin(a) * mscale;
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * cs - x1 * sn;
        x[2 * i + 1] = x1 * cs + x0 * sn;
    }
}

void moq_rope_angles(int64_t D, int64_t pos, const float *inv_freq, float mscale, float *cs, float *sn) {
    for (int64_t i = 0; i < D / 2; i++) {
        const double a = (double)pos * (double)inv_freq[i]; /* as moq_rope_apply */
        cs[i] = (float)cos(a) * mscale, sn[i] = (float)sin(a) * mscale;
    }
}

void moq_rope_apply_cs(float *x, int64_t D, const float *cs, const float *sn) {
    const int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) {
        const float x0 = x[i], x1 = x[i + h];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + h] = x1 * cs[i] + x0 * sn[i];
    }
}

void moq_rope_apply_pairs_cs(float *x, int64_t D, const float *cs, const float *sn) {
    for (int64_t i = 0; i < D / 2; i++) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * cs[i] - x1 * sn[i];
        x[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
    }
}
