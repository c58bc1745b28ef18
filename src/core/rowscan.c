/* rowscan.c — see rowscan.h. The block loops read the bits through memcpy (no aliasing of float as
 * uint32) and OR a per-entry predicate; GCC and Clang turn them into vector compares at -O2/-O3. */
#include "core/rowscan.h"

#include <string.h>

enum { BLOCK = 256 };

static inline uint32_t bits_at(const float *p, int64_t i) {
    uint32_t u;
    memcpy(&u, p + i, sizeof u);
    return u;
}

/* exponent all ones: NaN or ±Inf */
static inline uint32_t nonfinite_u(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }
/* NaN (magnitude above Inf's) or +Inf */
static inline uint32_t nan_or_posinf_u(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u || u == 0x7f800000u; }

/* the first index whose bits satisfy pred; inlined with a constant pred, so each caller's block
 * test is its own vector loop */
static inline __attribute__((always_inline)) int64_t first_where(const float *p, int64_t n, uint32_t (*pred)(uint32_t)) {
    for (int64_t i = 0; i < n; i += BLOCK) {
        const int64_t e = n - i < BLOCK ? n - i : BLOCK;
        uint32_t bad = 0;
        for (int64_t j = 0; j < e; j++) bad |= pred(bits_at(p, i + j));
        if (bad)
            for (int64_t j = 0; j < e; j++)
                if (pred(bits_at(p, i + j))) return i + j;
    }
    return -1;
}

int64_t moq_f32_first_nonfinite(const float *p, int64_t n) { return first_where(p, n, nonfinite_u); }
int64_t moq_f32_first_nan_or_posinf(const float *p, int64_t n) { return first_where(p, n, nan_or_posinf_u); }

int64_t moq_f32_copy_first_nonfinite(float *dst, const float *src, int64_t n) {
    int64_t first = -1;
    for (int64_t i = 0; i < n; i += BLOCK) { /* a block is checked while it is in L1, then copied */
        const int64_t e = n - i < BLOCK ? n - i : BLOCK;
        if (first < 0) {
            const int64_t f = moq_f32_first_nonfinite(src + i, e);
            if (f >= 0) first = i + f;
        }
        memcpy(dst + i, src + i, (size_t)e * sizeof *src);
    }
    return first;
}

int64_t moq_f32_argmax_first(const float *p, int64_t n) {
    enum { LANES = 16 }; /* per-lane maxima: an element-wise select the compiler vectorises (a float max
                          * reduction it would not reorder without -ffast-math) */
    float lane[LANES];
    for (int l = 0; l < LANES; l++) lane[l] = p[0];
    int64_t k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int l = 0; l < LANES; l++) lane[l] = p[k + l] > lane[l] ? p[k + l] : lane[l];
    float m = p[0];
    for (; k < n; k++) m = p[k] > m ? p[k] : m;
    for (int l = 0; l < LANES; l++) m = lane[l] > m ? lane[l] : m;
    for (int64_t i = 0; i < n; i += BLOCK) { /* its first index */
        const int64_t e = n - i < BLOCK ? n - i : BLOCK;
        int hit = 0;
        for (int64_t j = 0; j < e; j++) hit |= p[i + j] == m;
        if (hit)
            for (int64_t j = 0; j < e; j++)
                if (p[i + j] == m) return i + j;
    }
    return 0; /* not reached without NaN */
}
