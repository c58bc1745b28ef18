/* nn_math.h — the small f32 helpers every layer of the runner shares (model.c and the model/attn files):
 * one definition each, so the layers round alike. Internal to src/model.
 *   moq_rmsnorm   out = x · rsqrt(mean(x²) + eps) · w (w NULL: no weight), the sum in double, the
 *                 scale rounded once to f32 (out may be x)
 *   moq_softmax   in place over n values, max-subtracted, f32
 *   moq_silu      x / (1 + exp(-x));  moq_sigmoid  1 / (1 + exp(-x))
 * Tested through tests/model (test_model.c, test_arch.c, test_dsv4.c: transformers' logits). */
#ifndef MOQ_MODEL_NN_MATH_H
#define MOQ_MODEL_NN_MATH_H

#include <math.h>
#include <stdint.h>

static inline void moq_rmsnorm(float *out, const float *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * (w ? w[i] : 1.0f);
}

static inline void moq_softmax(float *s, int64_t n) {
    float mx = -INFINITY, sum = 0;
    for (int64_t p = 0; p < n; p++) mx = s[p] > mx ? s[p] : mx;
    for (int64_t p = 0; p < n; p++) sum += (s[p] = expf(s[p] - mx));
    for (int64_t p = 0; p < n; p++) s[p] /= sum;
}

static inline float moq_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float moq_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
