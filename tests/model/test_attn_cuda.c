/* test_attn_cuda.c — the GPU forward's attention and row kernels (src/kernels/cuda/model_ops.cu) at the
 * shapes the whole-model test (test_model_cuda.c: head_dim 64, 2 q heads per KV head, hidden 256)
 * does not reach, against fp64 references written here; label `cuda`.
 *   1. moq_cuda_attention (flash-decoding, fused combine) over a paged cache with shuffled pages:
 *      head_dim 64 / 128 / 256, GQA groups of 1, 2, 3, 4 and 8 q heads, bf16 and e4m3 KV (codes
 *      decoded by src/format's tested decoder, times the scale), windows, pages of 1, 8 and 16,
 *      positions 0 .. 2049 (the 8B benchmark's shape: 32 q / 8 KV heads, head_dim 128), n_split
 *      1, 16 and 64, batches of 8 rows whose blocks loop over several key ranges. Reference: softmax(q kᵀ · scale) v in fp64 over the keys the window admits.
 *      The kernel sums in f32 in another order (and exp in f32): max |gpu - ref| / max |ref| per
 *      row <= 2e-5 (f32 rounding over ~2k keys lands near 1e-6). Also: a row alone (M = 1) equals
 *      the same row inside a batch bit for bit (the batch API's promise), and a second launch
 *      equals the first (the split counters were left at zero).
 *   2. moq_cuda_add_rmsnorm / moq_cuda_final_norm_rows at H = 256, 4096, 12288 (1 and 3 float4s
 *      per thread): the CPU's arithmetic (model.c: v = x + t in f32, Σ v² in f64, r = f32(1 /
 *      sqrt(ss / H + eps)), h = (v · r) · w in f32) recomputed here; x += t exact, h within ~3 ulp
 *      (the f64 sum's order differs, which can move r by one f32 ulp).
 *   3. moq_cuda_argmax_rows (the greedy ids of logits rows): see the test.
 *   4. moq_cuda_attention_prefill, the f32 and the tensor-core kernel (MOQ_CUDA_ATTN_PREFILL_MMA,
 *      toggled by moq_cuda_attn_prefill_mode): see the test.
 * Without a GPU each test skips with the reason. */
#include "tu.h"

#include <math.h>

#include "format/format.h"
#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/cuda_api.h"

static uint64_t g_rng = 0x5EED0A77u;
static double urand(void) { /* [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1p-52 - 1.0;
}
static uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float bf16_val(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void *dev_up(const void *h, size_t n) {
    void *p = NULL;
    TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, n, &p, err_));
    if (h) TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, p, h, n, err_));
    return p;
}
static void dev_down(void *h, const void *d, size_t n) { TU_OK(moq_device_download(MOQ_DEVICE_CUDA, h, d, n, err_)); }

typedef struct acase {
    int64_t A, KV, D;
    int     elem, window, page, n_split;
    int     npos;
    int32_t pos[8];
} acase;

/* n random K and V elements of eb bytes: e4m3 codes without NaN, keys below |2^1| (scores of a few
 * units), or bf16 values in [-1, 1). */
static void fill_kv(uint8_t *kh, uint8_t *vh, size_t n, int eb) {
    for (size_t e = 0; e < n; e++) {
        if (eb == 1) {
            uint8_t a = (uint8_t)((urand() + 1.0) * 128.0), b = (uint8_t)((urand() + 1.0) * 128.0);
            if ((a & 0x7F) == 0x7F) a ^= 1; /* no NaN codes */
            if ((b & 0x7F) == 0x7F) b ^= 1;
            kh[e] = (uint8_t)(a & 0xBF), vh[e] = b;
        } else {
            const uint16_t a = bf16_rne((float)urand()), b = bf16_rne((float)urand());
            memcpy(kh + 2 * e, &a, 2), memcpy(vh + 2 * e, &b, 2);
        }
    }
}

/* One attention case: returns nothing, fails the test on a mismatch. */
static void run_case(const acase *c) {
    const int64_t A = c->A, KV = c->KV, D = c->D, M = c->npos, qkvN = (A + 2 * KV) * D, G = A / KV;
    const int eb = c->elem == MOQ_CUDA_KV_E4M3 ? 1 : 2;
    int64_t maxpos = 0;
    for (int i = 0; i < M; i++) maxpos = c->pos[i] > maxpos ? c->pos[i] : maxpos;
    const int64_t max_pages = (maxpos + 1 + c->page - 1) / c->page, n_pages = M * max_pages, rowsz = KV * D;
    const float scale = 1.0f / sqrtf((float)D), ksc = c->elem == MOQ_CUDA_KV_E4M3 ? 0.37f : 1.0f, vsc = c->elem == MOQ_CUDA_KV_E4M3 ? 1.9f : 1.0f;
    /* the pool: every position random (reading a position the window or the span excludes shows) */
    const size_t pool_n = (size_t)(n_pages * c->page * rowsz);
    uint8_t *kh = malloc(pool_n * (size_t)eb), *vh = malloc(pool_n * (size_t)eb);
    fill_kv(kh, vh, pool_n, eb);
    /* block tables: a shuffled permutation of all pages */
    int32_t *bt = malloc((size_t)n_pages * sizeof *bt);
    for (int64_t k = 0; k < n_pages; k++) bt[k] = (int32_t)k;
    for (int64_t k = n_pages - 1; k > 0; k--) {
        const int64_t j = (int64_t)((urand() + 1.0) * 0.5 * (double)(k + 1)) % (k + 1);
        const int32_t t = bt[k];
        bt[k] = bt[j], bt[j] = t;
    }
    float *qkv = malloc((size_t)(M * qkvN) * sizeof(float));
    for (int64_t e = 0; e < M * qkvN; e++) qkv[e] = (float)(2.0 * urand());
    int32_t seq[8], pos[8];
    for (int i = 0; i < M; i++) seq[i] = i, pos[i] = c->pos[i];
    void *kd = dev_up(kh, pool_n * (size_t)eb), *vd = dev_up(vh, pool_n * (size_t)eb);
    int32_t *btd = dev_up(bt, (size_t)n_pages * sizeof *bt), *seqd = dev_up(seq, sizeof seq), *posd = dev_up(pos, sizeof pos);
    float *qkvd = dev_up(qkv, (size_t)(M * qkvN) * sizeof(float));
    float *partd = dev_up(NULL, (size_t)(M * A * c->n_split * MOQ_CUDA_PART_STRIDE(D)) * sizeof(float)), *attd = dev_up(NULL, (size_t)(M * A * D) * sizeof(float));
    int32_t *zeros = calloc((size_t)(M * A), sizeof(int32_t));
    int32_t *doned = dev_up(zeros, (size_t)(M * A) * sizeof(int32_t));
    const moq_cuda_kv kv = {.k = kd, .v = vd, .block_table = btd, .max_pages = max_pages, .page = c->page, .elem = c->elem, .k_scale = ksc, .v_scale = vsc};
    float *att = malloc((size_t)(M * A * D) * sizeof(float)), *att2 = malloc((size_t)(M * A * D) * sizeof(float));
    for (int64_t e = 0; e < M * A * D; e++) att[e] = NAN;
    TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, attd, att, (size_t)(M * A * D) * sizeof(float), err_));
    const char *ce = moq_cuda_attention(qkvd, M, A, KV, D, scale, c->window, seqd, posd, &kv, c->n_split, partd, doned, attd, NULL);
    if (!ce) ce = moq_cuda_sync();
    if (ce) fail_msg("moq_cuda_attention: %s", ce);
    dev_down(att, attd, (size_t)(M * A * D) * sizeof(float));
    /* fp64 reference per (row, head) */
    double *sc = malloc((size_t)(maxpos + 1) * sizeof(double)), *ref = malloc((size_t)D * sizeof(double));
    for (int64_t i = 0; i < M; i++) {
        double err = 0, mag = 0;
        const int64_t p = pos[i], lo = c->window > 0 && p + 1 > c->window ? p + 1 - c->window : 0;
        for (int64_t h = 0; h < A; h++) {
            const int64_t kvh = h / G;
            const float *q = qkv + i * qkvN + h * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j <= p; j++) {
                const int64_t row = ((int64_t)bt[i * max_pages + j / c->page] * c->page + j % c->page) * rowsz + kvh * D;
                double d = 0;
                for (int64_t e = 0; e < D; e++) {
                    const double kval = eb == 1 ? (double)(moq_e4m3_decode(kh[row + e]) * ksc) : (double)bf16_val((uint16_t)(kh[2 * (row + e)] | kh[2 * (row + e) + 1] << 8));
                    d += (double)q[e] * kval;
                }
                sc[j] = d * (double)scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t e = 0; e < D; e++) ref[e] = 0;
            for (int64_t j = lo; j <= p; j++) {
                const double w = exp(sc[j] - mx);
                const int64_t row = ((int64_t)bt[i * max_pages + j / c->page] * c->page + j % c->page) * rowsz + kvh * D;
                sum += w;
                for (int64_t e = 0; e < D; e++)
                    ref[e] += w * (eb == 1 ? (double)(moq_e4m3_decode(vh[row + e]) * vsc) : (double)bf16_val((uint16_t)(vh[2 * (row + e)] | vh[2 * (row + e) + 1] << 8)));
            }
            for (int64_t e = 0; e < D; e++) {
                const double r = ref[e] / sum, g = att[(i * A + h) * D + e];
                if (!(fabs(g - r) <= err)) err = isnan(g) ? INFINITY : fabs(g - r);
                if (fabs(r) > mag) mag = fabs(r);
            }
        }
        if (!(err <= 2e-5 * mag))
            fail_msg("attention D=%lld A=%lld KV=%lld %s window %d page %d n_split %d, row %lld at position %lld: max |gpu - fp64| %.3g, max |ref| %.3g",
                     (long long)D, (long long)A, (long long)KV, eb == 1 ? "e4m3" : "bf16", c->window, c->page, c->n_split, (long long)i, (long long)p, err,
                     mag);
    }
    /* a second launch gives the same bits (the counters were reset), and each row alone the same as in the batch */
    ce = moq_cuda_attention(qkvd, M, A, KV, D, scale, c->window, seqd, posd, &kv, c->n_split, partd, doned, attd, NULL);
    if (!ce) ce = moq_cuda_sync();
    if (ce) fail_msg("moq_cuda_attention (again): %s", ce);
    dev_down(att2, attd, (size_t)(M * A * D) * sizeof(float));
    assert_memory_equal(att, att2, (size_t)(M * A * D) * sizeof(float));
    for (int64_t i = 0; i < M; i++) {
        ce = moq_cuda_attention(qkvd + i * qkvN, 1, A, KV, D, scale, c->window, seqd + i, posd + i, &kv, c->n_split, partd, doned, attd, NULL);
        if (!ce) ce = moq_cuda_sync();
        if (ce) fail_msg("moq_cuda_attention (row alone): %s", ce);
        dev_down(att2, attd, (size_t)(A * D) * sizeof(float));
        if (memcmp(att + i * A * D, att2, (size_t)(A * D) * sizeof(float)))
            fail_msg("attention D=%lld A=%lld KV=%lld: row %lld alone differs from the same row in a batch of %lld", (long long)D, (long long)A,
                     (long long)KV, (long long)i, (long long)M);
    }
    void *ds[] = {kd, vd, btd, seqd, posd, qkvd, partd, attd, doned};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) moq_device_free(MOQ_DEVICE_CUDA, ds[k]);
    free(kh), free(vh), free(bt), free(qkv), free(zeros), free(att), free(att2), free(sc), free(ref);
}

static void test_attention_decode(void **state) {
    (void)state;
    TU_NEED_GPU();
    const acase cases[] = {
        /* A   KV  D    elem                window page split npos positions */
        {32, 8, 128, MOQ_CUDA_KV_BF16, 0, 16, 16, 5, {2049, 0, 63, 64, 700}}, /* the 8B shape */
        {8, 8, 64, MOQ_CUDA_KV_E4M3, 0, 8, 16, 2, {130, 5}},                  /* MHA, FP8 KV */
        {6, 2, 256, MOQ_CUDA_KV_BF16, 37, 16, 16, 3, {300, 20, 36}},          /* groups of 3, window */
        {16, 2, 64, MOQ_CUDA_KV_BF16, 0, 16, 64, 2, {1000, 3000}},            /* groups of 8: 2 blocks each */
        {4, 2, 128, MOQ_CUDA_KV_E4M3, 50, 1, 1, 2, {129, 7}},                 /* pages of 1, one split */
        {8, 4, 256, MOQ_CUDA_KV_E4M3, 0, 16, 16, 1, {1500}},
        /* 8 rows at n_split 64: fewer z blocks than ranges, each looping over its ranges (the batch
         * step's grid with MOQ_CUDA_ATTN_ZLOOP=1, set in main); the rows alone run one range a block,
         * and must give the same bits */
        {32, 8, 128, MOQ_CUDA_KV_BF16, 0, 16, 64, 8, {2049, 130, 0, 64, 700, 1500, 129, 4095}},
        {16, 2, 64, MOQ_CUDA_KV_E4M3, 300, 8, 64, 8, {1000, 3, 299, 300, 301, 2500, 64, 65}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k]);
}

static void test_rmsnorm_rows(void **state) {
    (void)state;
    TU_NEED_GPU();
    const int64_t Hs[] = {256, 4096, 12288}, M = 3;
    const double eps = 1e-5;
    for (size_t c = 0; c < sizeof Hs / sizeof Hs[0]; c++) {
        const int64_t H = Hs[c], n = M * H;
        float *x = malloc((size_t)n * sizeof(float)), *t = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)H * sizeof(float));
        float *v = malloc((size_t)n * sizeof(float)), *h = malloc((size_t)n * sizeof(float)), *ref = malloc((size_t)n * sizeof(float));
        for (int64_t e = 0; e < n; e++) x[e] = (float)(3.0 * urand()), t[e] = (float)urand();
        for (int64_t e = 0; e < H; e++) w[e] = (float)(1.0 + 0.5 * urand());
        float *xd = dev_up(x, (size_t)n * sizeof(float)), *td = dev_up(t, (size_t)n * sizeof(float)), *wd = dev_up(w, (size_t)H * sizeof(float));
        float *hd = dev_up(NULL, (size_t)n * sizeof(float));
        const int32_t rows[2] = {2, 0};
        int32_t *rowsd = dev_up(rows, sizeof rows);
        for (int pass = 0; pass < 3; pass++) { /* 0: x += t then norm; 1: norm of x alone; 2: final norm of rows {2, 0} of x + t */
            const int64_t nr = pass == 2 ? 2 : M;
            for (int64_t j = 0; j < nr; j++) {
                const int64_t i = pass == 2 ? rows[j] : j;
                double ss = 0;
                for (int64_t e = 0; e < H; e++) {
                    const float a = pass == 1 ? x[i * H + e] : x[i * H + e] + t[i * H + e];
                    v[i * H + e] = a, ss += (double)a * a;
                }
                const float r = (float)(1.0 / sqrt(ss / (double)H + eps));
                for (int64_t e = 0; e < H; e++) {
                    const float a = v[i * H + e] * r;
                    ref[j * H + e] = a * w[e];
                }
            }
            const char *ce = pass == 2 ? moq_cuda_final_norm_rows(xd, td, wd, rowsd, 2, H, eps, hd, NULL)
                                       : moq_cuda_add_rmsnorm(xd, pass == 0 ? td : NULL, wd, M, H, eps, hd, NULL);
            if (!ce) ce = moq_cuda_sync();
            if (ce) fail_msg("rmsnorm H=%lld pass %d: %s", (long long)H, pass, ce);
            dev_down(h, hd, (size_t)(nr * H) * sizeof(float));
            for (int64_t e = 0; e < nr * H; e++)
                if (!(fabsf(h[e] - ref[e]) <= 4e-7f * fabsf(ref[e])))
                    fail_msg("rmsnorm H=%lld pass %d: element %lld is %.9g, expected %.9g", (long long)H, pass, (long long)e, (double)h[e], (double)ref[e]);
            if (pass == 0) { /* x now holds x + t, exactly */
                float *xg = malloc((size_t)n * sizeof(float));
                dev_down(xg, xd, (size_t)n * sizeof(float));
                assert_memory_equal(xg, v, (size_t)n * sizeof(float));
                memcpy(x, v, (size_t)n * sizeof(float));
                free(xg);
            }
        }
        void *ds[] = {xd, td, wd, hd, rowsd};
        for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) moq_device_free(MOQ_DEVICE_CUDA, ds[k]);
        free(x), free(t), free(w), free(v), free(h), free(ref);
    }
}

/* 3. moq_cuda_argmax_rows against a plain loop written here (first maximum; -0 and +0 equal; the
 *    first non-finite column and whether it is NaN): rows of 128256 (Llama 3's vocabulary, float4
 *    path), 1000 and 4097 (V % 4 != 0: the scalar path), 1 and 3; rows with ties of the maximum
 *    across warps and threads, a maximum of -0 against earlier +0, all-negative rows, and NaN, +Inf
 *    and -Inf at various places (a later NaN after an earlier Inf must report the Inf). */
static void test_argmax_rows(void **state) {
    (void)state;
    TU_NEED_GPU();
    const int64_t Vs[] = {128256, 1000, 4097, 1, 3};
    enum { R = 9 };
    for (size_t c = 0; c < sizeof Vs / sizeof Vs[0]; c++) {
        const int64_t V = Vs[c];
        float *x = malloc((size_t)(R * V) * sizeof(float));
        for (int64_t e = 0; e < R * V; e++) x[e] = (float)urand();
        float *r;
        r = x + 1 * V; /* ties: the maximum at three places far apart */
        r[V - 1] = 2.0f, r[V / 2] = 2.0f, r[V / 3] = 2.0f;
        r = x + 2 * V; /* all negative, the maximum -0 after a +0... both zero: the first wins */
        for (int64_t e = 0; e < V; e++) r[e] = -1.0f - (float)fabs(urand());
        r[V - 1] = -0.0f, r[V / 2] = 0.0f;
        r = x + 3 * V; /* NaN late, +Inf earlier */
        r[V - 1] = NAN, r[(2 * V) / 3] = INFINITY;
        r = x + 4 * V, r[V / 2] = -INFINITY; /* -Inf alone */
        r = x + 5 * V, r[0] = NAN;           /* NaN first */
        r = x + 6 * V, r[V - 1] = 3.0f;      /* maximum last */
        r = x + 7 * V, r[0] = 3.0f;          /* maximum first */
        r = x + 8 * V;                       /* equal everywhere */
        for (int64_t e = 0; e < V; e++) r[e] = 0.5f;
        float *xd = dev_up(x, (size_t)(R * V) * sizeof(float));
        int32_t *od = dev_up(NULL, 2 * R * sizeof(int32_t)), out[2 * R];
        const char *ce = moq_cuda_argmax_rows(xd, R, V, od, NULL);
        if (!ce) ce = moq_cuda_sync();
        if (ce) fail_msg("argmax V=%lld: %s", (long long)V, ce);
        dev_down(out, od, sizeof out);
        for (int j = 0; j < R; j++) {
            const float *p = x + j * V;
            int64_t best = -1, bad = -1;
            for (int64_t e = 0; e < V; e++) {
                if (!isfinite(p[e])) {
                    if (bad < 0) bad = e;
                } else if (best < 0 || p[e] > p[best]) {
                    best = e;
                }
            }
            const int32_t want_bad = bad < 0 ? -1 : (int32_t)(2 * bad + (isnan(p[bad]) ? 1 : 0));
            if (out[2 * j + 1] != want_bad) fail_msg("argmax V=%lld row %d: non-finite code %d, expected %d", (long long)V, j, out[2 * j + 1], want_bad);
            if (bad < 0 && out[2 * j] != best) fail_msg("argmax V=%lld row %d: %d, expected %lld", (long long)V, j, out[2 * j], (long long)best);
        }
        moq_device_free(MOQ_DEVICE_CUDA, xd), moq_device_free(MOQ_DEVICE_CUDA, od);
        free(x);
    }
}

/* 4. moq_cuda_attention_prefill: M rows of one sequence at positions start .. start + M - 1 (their
 *    K/V, and those of every earlier position, already in a paged cache with shuffled pages and a
 *    few pages no row may read), causal, optional window; both kernels against one fp64 reference
 *    softmax(q kᵀ · scale) v over the keys lo .. p of each row, K/V = the cache's decoded values
 *    (bf16 exactly; e4m3 D4(code) · scale in f32, as kv_load).
 *    - f32 kernel (MOQ_CUDA_ATTN_PREFILL_MMA=0): max |gpu - ref| / max |ref| per row <= 2e-5, the
 *      decode test's bound (f32 sums over <= 1300 keys in another order, expf in f32).
 *    - tensor-core kernel (=1): q, the softmax weights P and (e4m3 only) K/V are rounded to bf16
 *      (8 significant bits: relative error <= 2^-9 = 2e-3 per operand), the sums stay f32. A score
 *      q·k · scale (|q| <= 2, |k| <= 1 here, k exact) moves by <= 2^-9 Σ|q k| · scale, about 2^-9 ·
 *      sqrt(D) for these data (<= 0.03 even with every error of one sign), so each weight moves by
 *      a factor within e^±0.03, and P's own rounding adds 2^-9. O / l is a weighted mean of the v
 *      rows, whose weights sum to 1 (l sums the rounded P), so |ΔO| <= max_j |δ_j| · 2 max |v|
 *      in the worst case; the errors are of random sign and average out over the keys as |ref|
 *      does, which leaves some 2^-9 · few relative to max |ref|: bound 2e-2 per row (10 × 2^-9).
 *      A CPU simulation of these roundings on this test's data (2026-12-08; D 64..256, 17..1000
 *      keys, v up to 400) gave 1.8e-3 .. 2.6e-3, so the bound has a margin of ~8×.
 *    Shapes: M 1, 17, 64, 100, 300 (partial and several query tiles), start 0, 37, 1000, windows 0
 *    and 50, head_dim 64 / 128 / 256, GQA groups 1, 4, 8 (2 KV heads), bf16 and e4m3 KV, pages of
 *    16, 8 and 1; combined so that every (head_dim, group) pair and every (head_dim, window) pair
 *    appears; plus the 8B shape (32 q / 8 KV heads, head_dim 128). */
typedef struct pcase {
    int64_t A, KV, D;
    int     elem, window, page;
    int64_t M, start;
} pcase;

static void run_prefill_case(const pcase *c) {
    const int64_t A = c->A, KV = c->KV, D = c->D, M = c->M, qkvN = (A + 2 * KV) * D, G = A / KV, npos = c->start + M;
    const int eb = c->elem == MOQ_CUDA_KV_E4M3 ? 1 : 2;
    const int64_t max_pages = (npos + c->page - 1) / c->page, n_pages = max_pages + 3, rowsz = KV * D;
    const float scale = 1.0f / sqrtf((float)D), ksc = eb == 1 ? 0.37f : 1.0f, vsc = eb == 1 ? 1.9f : 1.0f;
    const size_t pool_n = (size_t)(n_pages * c->page * rowsz);
    uint8_t *kh = malloc(pool_n * (size_t)eb), *vh = malloc(pool_n * (size_t)eb);
    fill_kv(kh, vh, pool_n, eb);
    int32_t *bt = malloc((size_t)n_pages * sizeof *bt); /* a shuffled permutation of all pages; the pages of its last 3 entries are outside the sequence's max_pages */
    for (int64_t k = 0; k < n_pages; k++) bt[k] = (int32_t)k;
    for (int64_t k = n_pages - 1; k > 0; k--) {
        const int64_t j = (int64_t)((urand() + 1.0) * 0.5 * (double)(k + 1)) % (k + 1);
        const int32_t t = bt[k];
        bt[k] = bt[j], bt[j] = t;
    }
    /* decoded K and V [npos, KV, D] in fp64, as the kernels read them */
    double *kd64 = malloc((size_t)(npos * rowsz) * sizeof(double)), *vd64 = malloc((size_t)(npos * rowsz) * sizeof(double));
    for (int64_t j = 0; j < npos; j++) {
        const int64_t row = ((int64_t)bt[j / c->page] * c->page + j % c->page) * rowsz;
        for (int64_t e = 0; e < rowsz; e++) {
            const int64_t x = row + e;
            kd64[j * rowsz + e] = eb == 1 ? (double)(moq_e4m3_decode(kh[x]) * ksc) : (double)bf16_val((uint16_t)(kh[2 * x] | kh[2 * x + 1] << 8));
            vd64[j * rowsz + e] = eb == 1 ? (double)(moq_e4m3_decode(vh[x]) * vsc) : (double)bf16_val((uint16_t)(vh[2 * x] | vh[2 * x + 1] << 8));
        }
    }
    float *qkv = malloc((size_t)(M * qkvN) * sizeof(float));
    for (int64_t e = 0; e < M * qkvN; e++) qkv[e] = (float)(2.0 * urand());
    int32_t *posh = malloc((size_t)M * sizeof(int32_t)), seq = 0;
    for (int64_t i = 0; i < M; i++) posh[i] = (int32_t)(c->start + i);
    /* fp64 reference [M, A, D] */
    double *ref = malloc((size_t)(M * A * D) * sizeof(double)), *sc = malloc((size_t)npos * sizeof(double));
    for (int64_t i = 0; i < M; i++) {
        const int64_t p = c->start + i, lo = c->window > 0 && p + 1 > c->window ? p + 1 - c->window : 0;
        for (int64_t h = 0; h < A; h++) {
            const float *q = qkv + i * qkvN + h * D;
            double *r = ref + (i * A + h) * D, mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j <= p; j++) {
                const double *k = kd64 + j * rowsz + (h / G) * D;
                double d = 0;
                for (int64_t e = 0; e < D; e++) d += (double)q[e] * k[e];
                sc[j] = d * (double)scale, mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t e = 0; e < D; e++) r[e] = 0;
            for (int64_t j = lo; j <= p; j++) {
                const double w = exp(sc[j] - mx), *v = vd64 + j * rowsz + (h / G) * D;
                sum += w;
                for (int64_t e = 0; e < D; e++) r[e] += w * v[e];
            }
            for (int64_t e = 0; e < D; e++) r[e] /= sum;
        }
    }
    void *kd = dev_up(kh, pool_n * (size_t)eb), *vd = dev_up(vh, pool_n * (size_t)eb);
    int32_t *btd = dev_up(bt, (size_t)n_pages * sizeof *bt), *seqd = dev_up(&seq, sizeof seq), *posd = dev_up(posh, (size_t)M * sizeof(int32_t));
    float *qkvd = dev_up(qkv, (size_t)(M * qkvN) * sizeof(float)), *attd = dev_up(NULL, (size_t)(M * A * D) * sizeof(float));
    const moq_cuda_kv kv = {.k = kd, .v = vd, .block_table = btd, .max_pages = max_pages, .page = c->page, .elem = c->elem, .k_scale = ksc, .v_scale = vsc};
    float *att = malloc((size_t)(M * A * D) * sizeof(float));
    for (int mode = 0; mode < 2; mode++) {
        const double tol = mode ? 2e-2 : 2e-5;
        for (int64_t e = 0; e < M * A * D; e++) att[e] = NAN;
        TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, attd, att, (size_t)(M * A * D) * sizeof(float), err_));
        moq_cuda_attn_prefill_mode(mode);
        const char *ce = moq_cuda_attention_prefill(qkvd, M, A, KV, D, scale, c->window, seqd, posd, &kv, attd, NULL);
        if (!ce) ce = moq_cuda_sync();
        moq_cuda_attn_prefill_mode(-1);
        if (ce) fail_msg("moq_cuda_attention_prefill (%s kernel): %s", mode ? "mma" : "f32", ce);
        dev_down(att, attd, (size_t)(M * A * D) * sizeof(float));
        for (int64_t i = 0; i < M; i++) {
            double err = 0, mag = 0;
            for (int64_t e = i * A * D; e < (i + 1) * A * D; e++) {
                const double g = att[e], r = ref[e];
                if (!(fabs(g - r) <= err)) err = isnan(g) ? INFINITY : fabs(g - r);
                if (fabs(r) > mag) mag = fabs(r);
            }
            if (!(err <= tol * mag))
                fail_msg("prefill attention (%s kernel) D=%lld A=%lld KV=%lld %s window %d page %d M=%lld start %lld, row %lld: max |gpu - fp64| %.3g, "
                         "max |ref| %.3g (bound %.0e relative)",
                         mode ? "mma" : "f32", (long long)D, (long long)A, (long long)KV, eb == 1 ? "e4m3" : "bf16", c->window, c->page, (long long)M,
                         (long long)c->start, (long long)i, err, mag, tol);
        }
    }
    void *ds[] = {kd, vd, btd, seqd, posd, qkvd, attd};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) moq_device_free(MOQ_DEVICE_CUDA, ds[k]);
    free(kh), free(vh), free(bt), free(kd64), free(vd64), free(qkv), free(posh), free(ref), free(sc), free(att);
}

static void test_attention_prefill(void **state) {
    (void)state;
    TU_NEED_GPU();
    const int64_t Ms[] = {1, 17, 64, 100, 300}, starts[] = {0, 37, 1000}, Ds[] = {64, 128, 256}, Gs[] = {1, 4, 8};
    const int windows[] = {0, 50}, pages[] = {16, 8, 1};
    int k = 0;
    for (int im = 0; im < 5; im++)
        for (int is = 0; is < 3; is++)
            for (int iw = 0; iw < 2; iw++, k++) {
                /* k % 3 and (k / 3) % 3 cover the 9 (D, group) pairs every 9 cases; k % 2 and k % 3 the 6 (window, D) pairs */
                const pcase c = {.A = 2 * Gs[(k / 3) % 3], .KV = 2, .D = Ds[k % 3], .elem = (k / 9) % 2 ? MOQ_CUDA_KV_E4M3 : MOQ_CUDA_KV_BF16,
                                 .window = windows[iw], .page = pages[(k / 5) % 3], .M = Ms[im], .start = starts[is]};
                run_prefill_case(&c);
            }
    const pcase big = {.A = 32, .KV = 8, .D = 128, .elem = MOQ_CUDA_KV_BF16, .window = 0, .page = 16, .M = 100, .start = 1000}; /* the 8B shape */
    run_prefill_case(&big);
    const pcase big8 = {.A = 32, .KV = 8, .D = 128, .elem = MOQ_CUDA_KV_E4M3, .window = 0, .page = 16, .M = 130, .start = 0};
    run_prefill_case(&big8);
}
#endif

static void test_no_gpu_skips(void **state) {
    (void)state;
    const char *info;
    if (!tu_have_gpu(&info)) print_message("no usable GPU (%s): the kernel tests skip\n", info);
}

int main(void) {
    setenv("MOQ_CUDA_ATTN_ZLOOP", "1", 0); /* the looping grid for the 8-row cases (off by default; the rows alone run without it) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_gpu_skips),
#ifdef MOQ_HAVE_CUDA
        cmocka_unit_test(test_attention_decode),
        cmocka_unit_test(test_rmsnorm_rows),
        cmocka_unit_test(test_argmax_rows),
        cmocka_unit_test(test_attention_prefill),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
