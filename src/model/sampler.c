/* sampler.c — picks the next token from logits: greedy, temperature, top-k, top-p.
 *
 *   temperature == 0      argmax; ties -> lowest id
 *   otherwise             p_i ∝ exp((l_i - max l) / T)   (in double)
 *     top_k > 0           keep the k largest (ties -> lower id first)
 *     top_p < 1           then keep the shortest prefix, in decreasing probability, whose mass
 *                         (renormalised after top-k) reaches top_p: the token that crosses the
 *                         threshold is kept (vLLM/HF semantics)
 *     draw                u = uniform[0, 1) * kept mass; first kept id whose cumulative mass
 *                         exceeds u, walking in decreasing probability (or in id order when
 *                         neither top-k nor top-p truncates: no sort is needed then)
 * The order of candidates is (probability desc, id asc), so results do not depend on the sort
 * algorithm. The PRNG is xoshiro256** seeded with splitmix64 (no rand(), same stream everywhere).
 * Scratch: one {f64 p, i32 id} pair per vocabulary entry, caller-owned.
 * Tested by tests/model/test_sampler.c.
 */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/rowscan.h"

typedef struct cand { double p; int32_t id; int32_t pad; } cand;

struct moq_sampler {
    moq_sampler_opts opts;
    moq_xoshiro      rng;
};

uint64_t moq_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void moq_xoshiro_seed(moq_xoshiro *x, uint64_t seed) {
    for (int i = 0; i < 4; i++) x->s[i] = moq_splitmix64(&seed);
}

static uint64_t rotl(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }

uint64_t moq_xoshiro_next(moq_xoshiro *x) {
    uint64_t *s = x->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double moq_xoshiro_uniform(moq_xoshiro *x) { return (double)(moq_xoshiro_next(x) >> 11) * 0x1.0p-53; }

moq_sampler_opts moq_sampler_opts_default(void) {
    moq_sampler_opts o = { .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0 };
    return o;
}

moq_status moq_sampler_create(moq_sampler **out, const moq_sampler_opts *opts, moq_error *err) {
    if (!out) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_sampler_create", "out is NULL");
    *out = NULL;
    moq_sampler_opts o = opts ? *opts : moq_sampler_opts_default();
    if (!(o.temperature >= 0.0f) || isinf(o.temperature))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--temp", "temperature %g, expected a finite value >= 0", (double)o.temperature);
    if (o.top_k < 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--top-k", "top_k %d, expected >= 0 (0 = no limit)", (int)o.top_k);
    if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--top-p", "top_p %g, expected a value in (0, 1]", (double)o.top_p);
    moq_sampler *s = calloc(1, sizeof *s);
    if (!s) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_sampler_create", "out of memory for the sampler");
    s->opts = o;
    moq_xoshiro_seed(&s->rng, o.seed);
    *out = s;
    return MOQ_OK;
}

void moq_sampler_free(moq_sampler *s) { free(s); }

size_t moq_sampler_scratch_size(size_t n) { return n * sizeof(cand); }

/* (p desc, id asc) */
static int cand_cmp(const cand *x, const cand *y) {
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void swap(cand *a, cand *b) { cand t = *a; *a = *b; *b = t; }

/* Sift c[j] down a heap of n whose root is the candidate ranked last (a max-heap on cand_cmp). */
static void sift_down(cand *c, size_t n, size_t j) {
    for (;;) {
        size_t l = 2 * j + 1, r = l + 1, m = j;
        if (l < n && cand_cmp(&c[l], &c[m]) > 0) m = l;
        if (r < n && cand_cmp(&c[r], &c[m]) > 0) m = r;
        if (m == j) return;
        swap(&c[j], &c[m]);
        j = m;
    }
}

/* Heapsort of c[0..n) into cand_cmp order: in place, no allocation (glibc's qsort may malloc). */
static void sort_cands(cand *c, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(c, n, i);
    for (size_t i = n; i-- > 1;) {
        swap(&c[0], &c[i]);
        sift_down(c, i, 0);
    }
}

/* Moves the k best candidates of c[0..n) to c[0..k), sorted; the others stay in c[k..n).
 * O(n log k): a heap of the k best so far whose root is the worst of them. */
static void select_top_k(cand *c, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (cand_cmp(&c[i], &c[0]) >= 0) continue;
        swap(&c[0], &c[i]);
        sift_down(c, k, 0);
    }
    sort_cands(c, k);
}

bool moq_sampler_is_greedy(const moq_sampler *s) { return s && (s->opts.temperature == 0.0f || s->opts.top_k == 1); }

moq_status moq_sampler_sample(moq_sampler *s, const float *logits, size_t n, void *scratch, size_t scratch_size,
                              int32_t *id, moq_error *err) {
    if (!s || !logits || !id || n == 0 || n > INT32_MAX)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_sampler_sample", "NULL argument or n = %zu, expected logits of n >= 1 entries", n);
    const int64_t bad = moq_f32_first_nan_or_posinf(logits, (int64_t)n);
    if (bad >= 0)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "logits", "logits[%lld] is %g; expected a finite value or -inf", (long long)bad, (double)logits[bad]);
    const size_t best = (size_t)moq_f32_argmax_first(logits, (int64_t)n);
    if (moq_sampler_is_greedy(s) || isinf(logits[best])) { *id = (int32_t)best; return MOQ_OK; }
    if (!scratch || scratch_size < moq_sampler_scratch_size(n))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_sampler_sample", "scratch of %zu bytes, expected %zu", scratch_size, moq_sampler_scratch_size(n));
    cand *c = scratch;
    double mx = logits[best], inv_t = 1.0 / (double)s->opts.temperature, total = 0.0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = exp(((double)logits[i] - mx) * inv_t);
        c[i].id = (int32_t)i;
        total += c[i].p;
    }
    size_t k = n;
    if (s->opts.top_k > 0 && (size_t)s->opts.top_k < n) {
        k = (size_t)s->opts.top_k;
        select_top_k(c, n, k);
    } else if (s->opts.top_p < 1.0f) {
        /* Only candidates with p >= (1 - top_p) * total / n can be needed before the mass is
         * reached (the others together hold less than 1 - top_p); of those, select the best 64,
         * 256, ... until they hold the mass (peaked distributions stop at the first round). */
        double cut = (1.0 - (double)s->opts.top_p) * total / (double)n, want = (double)s->opts.top_p * total;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (c[i].p >= cut) c[m++] = c[i];
        for (k = m < 64 ? m : 64;; k = k * 4 < m ? k * 4 : m) {
            select_top_k(c, m, k);
            double sum = 0.0;
            for (size_t i = 0; i < k; i++) sum += c[i].p;
            if (sum >= want || k == m) break;
        }
    } /* else: no truncation, so no order is needed: the draw walks the ids in increasing order */
    double mass = total; /* the mass top-p is measured against: all ids, or the top-k ones */
    if (k < n && s->opts.top_k > 0) {
        mass = 0.0;
        for (size_t i = 0; i < k; i++) mass += c[i].p;
    }
    if (s->opts.top_p < 1.0f) {
        double want = (double)s->opts.top_p * mass, cum = 0.0;
        size_t keep = k;
        for (size_t i = 0; i < k; i++) {
            cum += c[i].p;
            if (cum >= want) { keep = i + 1; break; }
        }
        k = keep;
        mass = cum;
    }
    double u = moq_xoshiro_uniform(&s->rng) * mass, cum = 0.0;
    for (size_t i = 0; i < k; i++) {
        cum += c[i].p;
        if (u < cum) { *id = c[i].id; return MOQ_OK; }
    }
    *id = c[k - 1].id; /* u rounded up to the total */
    return MOQ_OK;
}
