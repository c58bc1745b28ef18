/* rowscan.h — scans of f32 rows that every step makes over its logits (V entries a row, 128 K for
 * Llama 3: at batch 64 eight million values a step): the first non-finite entry, the same fused
 * with the copy out of a staging buffer, and the first maximum. The checks test blocks of 256
 * entries with branch-free loops the compiler vectorises and look for the exact index only inside
 * a block that holds it; the argmax keeps 16 lane maxima, then finds the first index equal to
 * their maximum the same way. The results equal the plain scalar loops' (tests/unit/test_rowscan.c). */
#ifndef MOQ_CORE_ROWSCAN_H
#define MOQ_CORE_ROWSCAN_H

#include <stdint.h>

/* Index of the first NaN or ±Inf of p[0..n), or -1. */
int64_t moq_f32_first_nonfinite(const float *p, int64_t n);
/* Index of the first NaN or +Inf of p[0..n) (-Inf allowed: a masked logit), or -1. */
int64_t moq_f32_first_nan_or_posinf(const float *p, int64_t n);
/* Copies src[0..n) to dst (all of it) and returns the index of src's first NaN or ±Inf, or -1. */
int64_t moq_f32_copy_first_nonfinite(float *dst, const float *src, int64_t n);
/* Index of the first entry equal to the maximum of p[0..n) (n >= 1, no NaN): the plain loop
 * `if (p[i] > p[best]) best = i`, ties to the lowest index (-0 and +0 tie). */
int64_t moq_f32_argmax_first(const float *p, int64_t n);

#endif
