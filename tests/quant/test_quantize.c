/* test_quantize.c — `moq quantize` (quant/quantize.c, model/calibrate.c) on small Llama checkpoints
 * written here in BF16, F16 and F32, with edge cases planted in the weights (a zero block, a zero
 * row, a single large outlier that pushes other blocks' NVFP4 scales into the e4m3 subnormal range
 * and onto the 2^-9 clamp).
 *  - weight bytes: every quantized tensor equals values computed here from NUMERICS.md §2.3, §4.2,
 *    §5.1-§5.3, §12 with our own fp64 / bit-level arithmetic (nearest code by search over all codes,
 *    RNE to bf16/f16 by integer operations), not the export code;
 *  - every algo round-trips: `moq check --values` reports 0 problems, `moq resolve` gives each layer
 *    the intended algo (lm_head excluded), and the dequantized weights are within each format's
 *    bound of the source;
 *  - calibration: input_scale = amax/448 (FP8), amax/2688 (NVFP4), k_scale/v_scale = amax/448 of an
 *    fp64 forward of the same tokens written here (tolerance: f32 vs fp64 forward);
 *  - real ModelOpt 0.47 exports (tests/data/modelopt_real): re-quantizing their dequantized weights
 *    gives back the same tensors byte for byte and the same config files;
 *  - MIXED_PRECISION recipes, shards + index, MoE experts (per-expert calibration) and routers, and the error cases (missing
 *    --calib, bad recipes, a quantized or F8 source, an existing destination, an interrupted run
 *    leaving nothing behind);
 *  - the real SmolLM2-135M-Instruct BF16 conversion when it is cached (else skipped, saying so; also
 *    skipped under the sanitizers): every algo of `make formats` round-trips on it, FP8_PB_WO is
 *    refused for K = 576. */
#include <math.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tu.h"

#include <cjson/cJSON.h>

#include "io/mmap.h"
#include "model/model.h"
#include "quant/quantize.h"

/* ---- bit-level references (independent of src/format) ---------------------------------------- */

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

static float ref_bf16(float x) { /* RNE to bf16 */
    uint32_t b = bits_of(x);
    b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
    return f32_of_bits(b);
}

static float ref_f16(float x) { /* RNE to IEEE half (finite, normal or subnormal), via fp64 */
    const double a = fabs((double)x);
    if (a == 0) return x;
    int e;
    frexp(a, &e);                      /* a = m 2^e, m in [0.5, 1) */
    int ulp_e = e - 11;                /* 11 significant bits */
    if (ulp_e < -24) ulp_e = -24;      /* subnormal spacing */
    const double ulp = ldexp(1.0, ulp_e);
    double q = a / ulp, r = floor(q);
    if (q - r > 0.5 || (q - r == 0.5 && fmod(r, 2.0) != 0)) r += 1;
    return (float)copysign(r * ulp, (double)x);
}

static double e4m3_value(int c) { /* code -> value; NaN for 0x7F/0xFF */
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e == 0 ? m / 8.0 * ldexp(1, -6) : (1 + m / 8.0) * ldexp(1, e - 7);
    return s ? -v : v;
}

static double rne_int(double q) { /* round half to even */
    double r = floor(q);
    const double f = q - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0)) r += 1;
    return r;
}

/* float8_e4m3fn code nearest to x (RNE), saturated at 448, from the format's definition: 3 mantissa
 * bits, bias 7, subnormal step 2^-9; -0 for negatives that round to zero (a sign-preserving cast). */
static uint8_t ref_e4m3(double x) {
    const uint8_t sign = x < 0 || (x == 0 && signbit(x)) ? 0x80 : 0;
    const double a = fabs(x);
    if (a >= 448) return sign | 0x7E;
    if (a < ldexp(1, -6)) {
        const int m = (int)rne_int(a / ldexp(1, -9));   /* 0..8; 8 is the smallest normal 0x08 */
        return (uint8_t)(sign | m);
    }
    int E;
    frexp(a, &E);
    int e = E - 1, m = (int)rne_int((a / ldexp(1, e) - 1) * 8);
    if (m == 8) e++, m = 0;
    int code = ((e + 7) << 3) | m;
    if (code > 0x7E) code = 0x7E;
    return (uint8_t)(sign | code);
}

static const double k_e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
/* ModelOpt's _cast_fp4: sign bit = (w < 0), so a negative value that rounds to zero is 0x8 */
static uint8_t ref_e2m1(double x) { /* nearest magnitude (saturating), ties to even code */
    const double a = fabs(x);
    int best = 0;
    for (int c = 1; c < 8; c++) {
        const double d = fabs(k_e2m1[c] - a), bd = fabs(k_e2m1[best] - a);
        if (d < bd || (d == bd && (c & 1) == 0)) best = c;
    }
    return (uint8_t)(best | (x < 0 ? 8 : 0));
}

/* ModelOpt's amax / maxbound on a CUDA tensor: PyTorch multiplies by the f32 reciprocal of the
 * Python number (its CPU-scalar division path), one rounding of an exact double product. */
static float rcp_times(double a, double div) { return (float)(a * (double)(float)(1.0 / div)); }

/* ---- source checkpoints ------------------------------------------------------------------------ */

enum { H = 128, I = 256, NH = 2, NKV = 1, D = 64, V = 288, L = 2 };

typedef struct src_model {
    float *w[64];         /* source values (exactly representable in the dtype) */
    char   name[64][96];
    int64_t shape[64][2];
    int    n;
} src_model;

static uint64_t g_rng;
static double urand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1p-53;
}

static float in_dtype(double x, moq_dtype dt) {
    return dt == MOQ_DT_BF16 ? ref_bf16((float)x) : dt == MOQ_DT_F16 ? ref_f16((float)x) : (float)x;
}

static uint16_t f16_bits(float x) { /* exact: x is an f16 value */
    if (x == 0) return signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    int e;
    frexp(a, &e);
    uint16_t s = x < 0 ? 0x8000 : 0;
    if (e - 1 < -14) return (uint16_t)(s | (uint16_t)(a / ldexp(1, -24)));
    const int m = (int)((a / ldexp(1, e - 1) - 1) * 1024);
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)m);
}

/* Tensors are written in name order at the end, as Hugging Face's safetensors files hold them
 * (layers.10 before layers.2, mlp before self_attn), so module order has to be restored. */
typedef struct pend {
    char       name[96];
    moq_dtype  dt;
    int        ndim;
    int64_t    shape[2];
    const void *data;
    uint64_t   nbytes;
} pend;
static pend g_pend[64];
static int  g_npend;
static int pend_cmp(const void *a, const void *b) { return strcmp(((const pend *)a)->name, ((const pend *)b)->name); }

static void add_tensor(moq_writer *wr, src_model *sm, void **keep, int *nk, const char *name, int ndim, int64_t n0, int64_t n1,
                       moq_dtype dt, double std, double mean) {
    const int64_t ne = ndim == 1 ? n0 : n0 * n1;
    float *v = malloc((size_t)ne * sizeof *v);
    for (int64_t i = 0; i < ne; i++) v[i] = in_dtype(mean + std * (urand() * 2 - 1), dt);
    if (ndim == 2 && strstr(name, "q_proj")) { /* edge cases: zero block, outlier, tiny blocks */
        for (int k = 0; k < 16; k++) v[3 * n1 + 16 + k] = 0;
        v[5 * n1 + 7] = in_dtype(30.0, dt);
        for (int k = 0; k < 16; k++) v[9 * n1 + 32 + k] = in_dtype((k % 2 ? -1 : 1) * 1e-4 * (1 + k), dt);
        for (int k = 0; k < 16; k++) v[10 * n1 + 48 + k] = in_dtype((k % 3 ? -1 : 1) * 5e-4 * (1 + k), dt);
        v[11 * n1 + 3] = -0.0f, v[11 * n1 + 4] = 0.0f;   /* signed zeros: ModelOpt's _cast_fp4 gives both code 0 */
    }
    if (ndim == 2 && strstr(name, "o_proj"))
        for (int k = 0; k < n1; k++) v[2 * n1 + k] = 0;   /* a zero row (FP8 per-channel scale 1) */
    const size_t es = dt == MOQ_DT_F32 ? 4 : 2;
    uint8_t *b = malloc((size_t)ne * es);
    for (int64_t i = 0; i < ne; i++) {
        if (dt == MOQ_DT_F32) memcpy(b + 4 * i, &v[i], 4);
        else {
            const uint16_t h = dt == MOQ_DT_BF16 ? (uint16_t)(bits_of(v[i]) >> 16) : f16_bits(v[i]);
            memcpy(b + 2 * i, &h, 2);
        }
    }
    (void)wr;
    pend *pd = &g_pend[g_npend++];
    snprintf(pd->name, sizeof pd->name, "%s", name);
    pd->dt = dt, pd->ndim = ndim, pd->shape[0] = n0, pd->shape[1] = n1, pd->data = b, pd->nbytes = (uint64_t)ne * es;
    keep[(*nk)++] = b;
    snprintf(sm->name[sm->n], sizeof sm->name[0], "%.*s", (int)(strlen(name) - 7), name);
    sm->shape[sm->n][0] = n0, sm->shape[sm->n][1] = ndim == 2 ? n1 : 0;
    sm->w[sm->n++] = v;
}

static void src_free(src_model *sm) {
    for (int i = 0; i < sm->n; i++) free(sm->w[i]);
    memset(sm, 0, sizeof *sm);
}

static const float *src_weight(const src_model *sm, const char *module) {
    for (int i = 0; i < sm->n; i++)
        if (!strcmp(sm->name[i], module)) return sm->w[i];
    fail_msg("no source weight %s", module);
    return NULL;
}

/* A 2-layer Llama in dt with the tiny golden tokenizer; returns the directory. */
static char *write_src(const char *tag, moq_dtype dt, src_model *sm, uint64_t seed) {
    char *dir = tu_tmpdir(tag);
    tu_rmtree(dir);
    g_rng = seed;
    memset(sm, 0, sizeof *sm);
    moq_writer *wr = NULL;
    TU_OK(moq_writer_create(&wr, dir, err_));
    void *keep[256];
    int nk = 0;
    char nm[128];
    add_tensor(wr, sm, keep, &nk, "model.embed_tokens.weight", 2, V, H, dt, 1.0, 0);
    static const char *const lin[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const int64_t lshape[7][2] = {{NH * D, H}, {NKV * D, H}, {NKV * D, H}, {H, NH * D}, {I, H}, {I, H}, {H, I}};
    for (int l = 0; l < L; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        add_tensor(wr, sm, keep, &nk, nm, 1, H, 0, dt, 0.1, 1.0);
        for (int j = 0; j < 7; j++) {
            if (j == 4) {
                snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
                add_tensor(wr, sm, keep, &nk, nm, 1, H, 0, dt, 0.1, 1.0);
            }
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin[j]);
            add_tensor(wr, sm, keep, &nk, nm, 2, lshape[j][0], lshape[j][1], dt, 1.0 / sqrt((double)lshape[j][1]) * (1 + l), 0);
        }
    }
    add_tensor(wr, sm, keep, &nk, "model.norm.weight", 1, H, 0, dt, 0.1, 1.0);
    add_tensor(wr, sm, keep, &nk, "lm_head.weight", 2, V, H, dt, 0.1, 0);
    qsort(g_pend, (size_t)g_npend, sizeof g_pend[0], pend_cmp);
    for (int i = 0; i < g_npend; i++)
        TU_OK(moq_writer_add(wr, g_pend[i].name, g_pend[i].dt, g_pend[i].ndim, g_pend[i].shape, g_pend[i].data, g_pend[i].nbytes, err_));
    g_npend = 0;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"torch_dtype\": \"%s\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"vocab_size\": %d, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}\n",
             dt == MOQ_DT_BF16 ? "bfloat16" : dt == MOQ_DT_F16 ? "float16" : "float32", H, I, L, NH, NKV, V);
    TU_OK(moq_writer_file(wr, "config.json", cfg, err_));
    static const char *const side[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "tiny/%s", side[i]);
        char *p = tu_golden_tokenizer_path(rel);
        size_t n = 0;
        char *text = tu_read_file(p, &n);
        char *z = malloc(n + 1);
        memcpy(z, text, n), z[n] = 0;
        TU_OK(moq_writer_file(wr, side[i], z, err_));
        free(z), free(text), free(p);
    }
    TU_OK(moq_writer_file(wr, "generation_config.json", "{\"do_sample\": false}\n", err_));
    TU_OK(moq_writer_finish(wr, 1, err_));
    moq_writer_free(wr);
    for (int i = 0; i < nk; i++) free(keep[i]);
    return dir;
}

static char *out_dir(const char *tag) {
    char *d = tu_tmpdir(tag);
    tu_rmtree(d);
    return d;
}

static const moq_tensor *need(const moq_checkpoint *c, const char *module, const char *suffix) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.%s", module, suffix);
    const moq_tensor *t = moq_checkpoint_tensor(c, nm);
    if (!t) fail_msg("%s missing", nm);
    return t;
}

static float scalar(const moq_tensor *t) {
    assert_int_equal(t->dtype, MOQ_DT_F32);
    assert_int_equal(t->ndim, 0);
    float v;
    memcpy(&v, t->data, 4);
    return v;
}

static double amax_of(const float *w, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)w[i]));
    return m;
}

/* fused-group amax of module (q/k/v or gate/up of the same layer) */
static double group_amax(const src_model *sm, const char *module) {
    static const char *const groups[2][3] = {{"q_proj", "k_proj", "v_proj"}, {"gate_proj", "up_proj", NULL}};
    const char *leaf = strrchr(module, '.') + 1;
    for (int g = 0; g < 2; g++)
        for (int j = 0; j < 3 && groups[g][j]; j++)
            if (!strcmp(leaf, groups[g][j])) {
                double m = 0;
                for (int k = 0; k < 3 && groups[g][k]; k++) {
                    char nm[128];
                    snprintf(nm, sizeof nm, "%.*s%s", (int)(leaf - module), module, groups[g][k]);
                    for (int i = 0; i < sm->n; i++)
                        if (!strcmp(sm->name[i], nm)) m = fmax(m, amax_of(sm->w[i], (size_t)(sm->shape[i][0] * sm->shape[i][1])));
                }
                return m;
            }
    const float *w = src_weight(sm, module);
    for (int i = 0; i < sm->n; i++)
        if (sm->w[i] == w) return amax_of(w, (size_t)(sm->shape[i][0] * sm->shape[i][1]));
    return 0;
}

/* ---- per-format references: compare bytes, return max |w - dequant| / bound ------------------- */

static void check_nvfp4(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K) {
    const float *w = src_weight(sm, m);
    const moq_tensor *q = need(c, m, "weight"), *sf = need(c, m, "weight_scale");
    assert_int_equal(q->dtype, MOQ_DT_U8);
    assert_int_equal(sf->dtype, MOQ_DT_F8_E4M3);
    assert_int_equal(q->shape[0], N), assert_int_equal(q->shape[1], K / 2);
    assert_int_equal(sf->shape[1], K / 16);
    const float ws2 = rcp_times(group_amax(sm, m), 2688.0);
    assert_true(scalar(need(c, m, "weight_scale_2")) == ws2);
    const float den = (float)(6.0 * (double)ws2);
    const uint8_t *qb = q->data, *sb = sf->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / 16; b++) {
            double bam = amax_of(w + n * K + b * 16, 16);
            float pbs = (float)(bam / (double)den);
            if (pbs == 0) pbs = 1;
            if (pbs < 0x1p-9f) pbs = 0x1p-9f;
            if (pbs > 448) pbs = 448;
            const uint8_t want_sf = ref_e4m3(pbs);
            if (sb[n * (K / 16) + b] != want_sf) fail_msg("%s sf[%lld,%lld] = %02x, want %02x", m, (long long)n, (long long)b, sb[n * (K / 16) + b], want_sf);
            const float d = (float)(e4m3_value(want_sf) * (double)ws2);
            for (int j = 0; j < 16; j++) {
                const float x = w[n * K + b * 16 + j];
                const uint8_t want = ref_e2m1((double)(float)((double)x / (double)d));
                const uint8_t got = (uint8_t)((qb[n * (K / 2) + b * 8 + j / 2] >> (4 * (j & 1))) & 15);
                if (got != want)
                    fail_msg("%s q[%lld,%lld] = %x, want %x (w %g, d %g)", m, (long long)n, (long long)(b * 16 + j), got, want, (double)x, (double)d);
                const double deq = k_e2m1[got & 7] * (got & 8 ? -1 : 1) * (double)d;
                if (fabs(deq - x) > (double)d * 1.0 + 1e-30 && pbs < 448)
                    fail_msg("%s: dequant %g of %g beyond one e2m1 step", m, deq, (double)x);
            }
        }
}

static void check_fp8(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt) {
    const float *w = src_weight(sm, m);
    const moq_tensor *q = need(c, m, "weight");
    assert_int_equal(q->dtype, MOQ_DT_F8_E4M3);
    /* its own amax: ModelOpt does not fuse FP8 per-tensor q/k/v or gate/up weight scales */
    double a = 0;
    for (int i = 0; i < sm->n; i++)
        if (sm->w[i] == w) a = amax_of(w, (size_t)(N * K));
    if (a == 0) a = 448;
    const float s = (float)(a / 448.0);   /* a true division here: torch.tensor(amax.item() / 448) */
    assert_true(scalar(need(c, m, "weight_scale")) == s);
    const float sm_ = dt == MOQ_DT_BF16 ? ref_bf16(s) : dt == MOQ_DT_F16 ? ref_f16(s) : s;
    const uint8_t *qb = q->data;
    for (int64_t i = 0; i < N * K; i++) {
        const float quo = (float)((double)w[i] / (double)sm_);
        const float r = dt == MOQ_DT_BF16 ? ref_bf16(quo) : dt == MOQ_DT_F16 ? ref_f16(quo) : quo;
        const uint8_t want = ref_e4m3(r);
        if (qb[i] != want) fail_msg("%s q[%lld] = %02x, want %02x (w %g)", m, (long long)i, qb[i], want, (double)w[i]);
        const double deq = e4m3_value(qb[i]) * s;
        if (fabs(deq - w[i]) > 0.07 * fabs(w[i]) + s * 0x1p-9) fail_msg("%s: dequant %g of %g", m, deq, (double)w[i]);
    }
}

static void check_fp8_row(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K) {
    const float *w = src_weight(sm, m);
    const moq_tensor *q = need(c, m, "weight"), *sc = need(c, m, "weight_scale");
    assert_int_equal(sc->ndim, 1), assert_int_equal(sc->shape[0], N);
    const float *sv = sc->data;
    const uint8_t *qb = q->data;
    for (int64_t n = 0; n < N; n++) {
        double a = amax_of(w + n * K, (size_t)K);
        if (a == 0) a = 448;
        const float s = rcp_times(a, 448.0);
        if (sv[n] != s) fail_msg("%s scale[%lld] = %g, want %g", m, (long long)n, (double)sv[n], (double)s);
        for (int64_t k = 0; k < K; k++) {
            const uint8_t want = ref_e4m3((double)(float)((double)w[n * K + k] / (double)s));
            if (qb[n * K + k] != want) fail_msg("%s q[%lld,%lld]", m, (long long)n, (long long)k);
            if (fabs(e4m3_value(qb[n * K + k]) * s - w[n * K + k]) > 0.0625 * fabs(w[n * K + k]) + s * 0x1p-9) fail_msg("%s: dequant bound", m);
        }
    }
}

static void check_fp8_block(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K) {
    const float *w = src_weight(sm, m);
    const moq_tensor *q = need(c, m, "weight"), *sc = need(c, m, "weight_scale");
    const int64_t nb = (N + 127) / 128, kb = K / 128;
    const bool one = nb * kb == 1;
    if (one) assert_int_equal(sc->ndim, 0);  /* §12: a single-block weight gets a 0-d scale */
    else {
        assert_int_equal(sc->ndim, 4);
        assert_int_equal(sc->shape[0], nb), assert_int_equal(sc->shape[1], 1), assert_int_equal(sc->shape[2], kb), assert_int_equal(sc->shape[3], 1);
    }
    const float *sv = sc->data;
    const uint8_t *qb = q->data;
    for (int64_t bn = 0; bn < nb; bn++)
        for (int64_t bk = 0; bk < kb; bk++) {
            double a = 0;
            if (one) a = group_amax(sm, m); /* one-element amax: fused to the group max (§9.3) */
            else
                for (int64_t n = bn * 128; n < N && n < bn * 128 + 128; n++) a = fmax(a, amax_of(w + n * K + bk * 128, 128));
            if (a == 0) a = 448;
            const float s = rcp_times(a, 448.0);
            if (sv[bn * kb + bk] != s) fail_msg("%s block scale (%lld,%lld) = %g, want %g", m, (long long)bn, (long long)bk, (double)sv[bn * kb + bk], (double)s);
            for (int64_t n = bn * 128; n < N && n < bn * 128 + 128; n++)
                for (int64_t k = bk * 128; k < bk * 128 + 128; k++) {
                    const uint8_t want = ref_e4m3((double)(float)((double)w[n * K + k] / (double)s));
                    if (qb[n * K + k] != want) fail_msg("%s q[%lld,%lld]", m, (long long)n, (long long)k);
                }
        }
}

static void check_mxfp8(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K) {
    const float *w = src_weight(sm, m);
    const moq_tensor *q = need(c, m, "weight"), *sc = need(c, m, "weight_scale");
    assert_int_equal(sc->dtype, MOQ_DT_U8);
    assert_int_equal(sc->shape[1], K / 32);
    const uint8_t *qb = q->data, *cb = sc->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / 32; b++) {
            const double a = amax_of(w + n * K + b * 32, 32);
            int e = -127;
            if (a > 0) {
                const double y = (double)rcp_times(a, 448.0); /* the f32 reciprocal product, then exact ceil(log2) */
                e = (int)ceil(log2(y));
                if (ldexp(1.0, e - 1) >= y) e--;
                if (ldexp(1.0, e) < y) e++;
            }
            if (e < -127) e = -127;
            if (e > 127) e = 127;
            if (cb[n * (K / 32) + b] != e + 127) fail_msg("%s e8m0[%lld,%lld] = %d, want %d", m, (long long)n, (long long)b, cb[n * (K / 32) + b], e + 127);
            for (int j = 0; j < 32; j++) {
                const float x = w[n * K + b * 32 + j];
                double v = ldexp((double)x, -e);
                if (v > 448) v = 448;
                if (v < -448) v = -448;
                const uint8_t want = ref_e4m3(v), got = qb[n * K + b * 32 + j];
                if (got != want) fail_msg("%s q[%lld,%lld] = %02x, want %02x", m, (long long)n, (long long)(b * 32 + j), got, want);
                if (fabs(ldexp(e4m3_value(got), e) - x) > 0.0625 * fabs(x) + ldexp(1, e - 9)) fail_msg("%s: dequant bound", m);
            }
        }
}

typedef void check_fn(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt);
static void cnvfp4(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt) { (void)dt; check_nvfp4(c, sm, m, N, K); }
static void crow(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt) { (void)dt; check_fp8_row(c, sm, m, N, K); }
static void cblock(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt) { (void)dt; check_fp8_block(c, sm, m, N, K); }
static void cmx(const moq_checkpoint *c, const src_model *sm, const char *m, int64_t N, int64_t K, moq_dtype dt) { (void)dt; check_mxfp8(c, sm, m, N, K); }

static const struct { const char *algo; const char *written; check_fn *fn; bool calib; } k_algos[] = {
    {"FP8", "FP8", check_fp8, true},
    {"FP8_PER_CHANNEL_PER_TOKEN", "FP8_PER_CHANNEL_PER_TOKEN", crow, false},
    {"FP8_PB_WO", "fp8_pb_wo", cblock, false},
    {"NVFP4", "NVFP4", cnvfp4, true},
    {"W4A16_NVFP4", "W4A16_NVFP4", cnvfp4, false},
    {"MXFP8", "MXFP8", cmx, false},
};

static void run_ok(const char *cmd, const char *want) {
    char out[8192];
    const int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0 || (want && !strstr(out, want))) fail_msg("`%s` exit %d, wanted \"%s\":\n%s", cmd, rc, want ? want : "", out);
}

/* `moq resolve DST MODULE --kind linear --packed ... --json` names algo (as written or upper-cased). */
static void resolves_to(const char *dst, const char *module, const char *packed, const char *algo) {
    char cmd[1024], out[4096], want[128];
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' %s --kind linear%s%s --json", tu_moq_bin(), dst, module, packed ? " --packed " : "",
             packed ? packed : "");
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    char up[64], want2[128];
    snprintf(up, sizeof up, "%s", algo);
    for (char *p = up; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    snprintf(want, sizeof want, "\"algo\":\t\"%s\"", algo);
    snprintf(want2, sizeof want2, "\"algo\":\t\"%s\"", up);
    if ((!strstr(out, want) && !strstr(out, want2)) || !strstr(out, "\"excluded\":\tfalse"))
        fail_msg("%s resolves to another algo than %s:\n%s", module, algo, out);
}

/* The checkpoint dst checks clean, each quantized module resolves to algo, lm_head is excluded. */
static void round_trip_checks(const char *dst, const char *algo_written) {
    char cmd[1024], want[128];
    snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
    run_ok(cmd, ", 0 problems");
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' model.layers.1.self_attn.qkv_proj --kind linear --packed qkv_proj=q_proj,k_proj,v_proj --json", tu_moq_bin(), dst);
    char out[4096];
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    snprintf(want, sizeof want, "\"excluded\":\tfalse");
    if (!strstr(out, want)) fail_msg("qkv_proj not quantized:\n%s", out);
    snprintf(want, sizeof want, "\"algo\":\t\"%s\"", algo_written);
    char up[64];
    snprintf(up, sizeof up, "%s", algo_written);
    for (char *p = up; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    char want2[128];
    snprintf(want2, sizeof want2, "\"algo\":\t\"%s\"", up);
    if (!strstr(out, want) && !strstr(out, want2)) fail_msg("qkv_proj resolves to another algo than %s:\n%s", algo_written, out);
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' lm_head --kind lm_head --json", tu_moq_bin(), dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    if (!strstr(out, "\"excluded\":\ttrue")) fail_msg("lm_head not excluded:\n%s", out);
    /* the other linear kinds of a layer */
    resolves_to(dst, "model.layers.0.self_attn.o_proj", NULL, algo_written);
    resolves_to(dst, "model.layers.0.mlp.gate_up_proj", "gate_up_proj=gate_proj,up_proj", algo_written);
    resolves_to(dst, "model.layers.1.mlp.down_proj", NULL, algo_written);
}

static const char k_calib_text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. "
    "The quick brown fox jumps over the lazy dog 0123456789 times.";

static void quantize_and_check(moq_dtype dt, const char *tag, uint64_t seed) {
    src_model sm;
    char *src = write_src(tag, dt, &sm, seed);
    moq_calib cb = {0};
    TU_OK(moq_calibrate_text(&cb, src, k_calib_text, strlen(k_calib_text), 0, 1, err_));
    for (size_t a = 0; a < sizeof k_algos / sizeof k_algos[0]; a++) {
        char t2[96];
        snprintf(t2, sizeof t2, "%s_%s", tag, k_algos[a].algo);
        char *dst = out_dir(t2);
        moq_quantize_opts o = moq_quantize_opts_default();
        o.algo = k_algos[a].algo;
        o.calib = k_algos[a].calib ? &cb : NULL;
        moq_quantize_report rep;
        TU_OK(moq_quantize(src, dst, &o, &rep, err_));
        assert_int_equal(rep.n_linears, 15);
        assert_int_equal(rep.n_quantized, 14);
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        for (int i = 0; i < sm.n; i++) {
            if (!sm.shape[i][1]) continue; /* norms */
            if (!strstr(sm.name[i], "layers.")) { /* embeddings and lm_head: copied as they were */
                char nm[128];
                snprintf(nm, sizeof nm, "%s.weight", sm.name[i]);
                const moq_tensor *t = moq_checkpoint_tensor(c, nm);
                assert_non_null(t);
                assert_int_equal(t->dtype, dt);
                continue;
            }
            k_algos[a].fn(c, &sm, sm.name[i], sm.shape[i][0], sm.shape[i][1], dt);
        }
        moq_checkpoint_free(c);
        round_trip_checks(dst, k_algos[a].written);
        tu_rmtree(dst);
        free(dst);
    }
    moq_calib_free(&cb);
    src_free(&sm);
    tu_rmtree(src);
    free(src);
}

static void test_bf16_every_algo(void **state) { (void)state; quantize_and_check(MOQ_DT_BF16, "qz_bf16", 11); }
static void test_f16_every_algo(void **state) { (void)state; quantize_and_check(MOQ_DT_F16, "qz_f16", 12); }
static void test_f32_every_algo(void **state) { (void)state; quantize_and_check(MOQ_DT_F32, "qz_f32", 13); }

/* ---- calibration against an fp64 forward -------------------------------------------------------- */

static void rmsnorm64(const double *x, const float *w, double *out) {
    double ss = 0;
    for (int i = 0; i < H; i++) ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / H + 1e-5);
    for (int i = 0; i < H; i++) out[i] = x[i] * r * w[i];
}

static void matvec64(const float *W, int64_t N, int64_t K, const double *x, double *y) {
    for (int64_t n = 0; n < N; n++) {
        double a = 0;
        for (int64_t k = 0; k < K; k++) a += (double)W[n * K + k] * x[k];
        y[n] = a;
    }
}

static void rope64(double *v, int64_t pos) {
    for (int i = 0; i < D / 2; i++) {
        const double th = (double)pos * pow(10000.0, -2.0 * i / D), c = cos(th), s = sin(th);
        const double a = v[i], b = v[i + D / 2];
        v[i] = a * c - b * s, v[i + D / 2] = b * c + a * s;
    }
}

static double tmax(double m, const double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* amax[l][tap] of the fp64 forward over ids (one window). */
static void forward64(const src_model *sm, const int32_t *ids, int T, double am[L][MOQ_TAP_COUNT]) {
    double *x = calloc((size_t)T * H, sizeof *x), *K = calloc((size_t)T * NKV * D, sizeof *K), *Vv = calloc((size_t)T * NKV * D, sizeof *Vv);
    double *q = calloc((size_t)T * NH * D, sizeof *q), h[H], att[NH * D], o[H], g[I], u[I], a[I], dn[H], sc[512];
    memset(am, 0, sizeof(double) * L * MOQ_TAP_COUNT);
    const float *E = src_weight(sm, "model.embed_tokens");
    for (int t = 0; t < T; t++)
        for (int e = 0; e < H; e++) x[t * H + e] = E[ids[t] * H + e];
    char nm[128];
#define W_(fmt) (snprintf(nm, sizeof nm, "model.layers.%d." fmt, l), src_weight(sm, nm))
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rmsnorm64(x + t * H, W_("input_layernorm"), h);
            am[l][MOQ_TAP_QKV_IN] = tmax(am[l][MOQ_TAP_QKV_IN], h, H);
            matvec64(W_("self_attn.q_proj"), NH * D, H, h, q + t * NH * D);
            matvec64(W_("self_attn.k_proj"), NKV * D, H, h, K + t * NKV * D);
            matvec64(W_("self_attn.v_proj"), NKV * D, H, h, Vv + t * NKV * D);
            for (int hd = 0; hd < NH; hd++) rope64(q + t * NH * D + hd * D, t);
            for (int hd = 0; hd < NKV; hd++) rope64(K + t * NKV * D + hd * D, t);
            am[l][MOQ_TAP_K] = tmax(am[l][MOQ_TAP_K], K + t * NKV * D, NKV * D);
            am[l][MOQ_TAP_V] = tmax(am[l][MOQ_TAP_V], Vv + t * NKV * D, NKV * D);
        }
        for (int t = 0; t < T; t++) {
            for (int hd = 0; hd < NH; hd++) {
                const int kvh = hd / (NH / NKV);
                double mx = -INFINITY, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int e = 0; e < D; e++) d += q[t * NH * D + hd * D + e] * K[p * NKV * D + kvh * D + e];
                    sc[p] = d / sqrt((double)D);
                    mx = fmax(mx, sc[p]);
                }
                for (int p = 0; p <= t; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int p = 0; p <= t; p++) acc += sc[p] / sum * Vv[p * NKV * D + kvh * D + e];
                    att[hd * D + e] = acc;
                }
            }
            am[l][MOQ_TAP_O_IN] = tmax(am[l][MOQ_TAP_O_IN], att, NH * D);
            matvec64(W_("self_attn.o_proj"), H, NH * D, att, o);
            for (int e = 0; e < H; e++) x[t * H + e] += o[e];
            rmsnorm64(x + t * H, W_("post_attention_layernorm"), h);
            am[l][MOQ_TAP_GATE_UP_IN] = tmax(am[l][MOQ_TAP_GATE_UP_IN], h, H);
            matvec64(W_("mlp.gate_proj"), I, H, h, g);
            matvec64(W_("mlp.up_proj"), I, H, h, u);
            for (int e = 0; e < I; e++) a[e] = g[e] / (1 + exp(-g[e])) * u[e];
            am[l][MOQ_TAP_DOWN_IN] = tmax(am[l][MOQ_TAP_DOWN_IN], a, I);
            matvec64(W_("mlp.down_proj"), H, I, a, dn);
            for (int e = 0; e < H; e++) x[t * H + e] += dn[e];
        }
    }
#undef W_
    free(x), free(K), free(Vv), free(q);
}

static void near_rel(double got, double want, const char *what) {
    if (!(fabs(got - want) <= 2e-4 * fabs(want))) fail_msg("%s: %.9g, fp64 forward says %.9g", what, got, want);
}

/* ---- the real model: SmolLM2-135M-Instruct's BF16 conversion, when it is in the cache ----------
 * (`make run` / scripts/default_model.sh put it in ~/.cache/moq, or MOQ_CACHE; otherwise this test
 * says so and is skipped.) Every algo of `make formats` round-trips on it: quantize layers 0 and 29
 * (the others excluded, to keep the test quick; static scales from a short calibration text), every quantized byte of layers 0 and 29 equals the formulas above
 * (check_*: the same fp64 references and dequantization bounds as on the generated models), `moq
 * check --values` reports 0 problems, each fused layer resolves to the intended algo (per the
 * shipped recipe for MIXED_PRECISION), lm_head is excluded; FP8 KV writes k/v scales; FP8_PB_WO is
 * refused because K = 576 is not a multiple of 128, and nothing is written. */
static char *smollm2_bf16_dir(void) {
    const char *cache = getenv("MOQ_CACHE"), *home = getenv("HOME");
    char buf[1024];
    if (cache && *cache) snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct-bf16", cache);
    else snprintf(buf, sizeof buf, "%s/.cache/moq/SmolLM2-135M-Instruct-bf16", home ? home : "");
    return strdup(buf);
}

static const char *const k_smol_keep[3] = {"model.layers.[1-9].*", "model.layers.1?.*", "model.layers.2[0-8].*"};
static const char *const k_smol_lin[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

/* The source weights of the given layers (bf16 -> f32, exact) as a src_model. */
static void smollm2_src(const moq_checkpoint *c, const int *layers, int nl, src_model *sm) {
    memset(sm, 0, sizeof *sm);
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < 7; j++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", layers[i], k_smol_lin[j]);
            const moq_tensor *t = need(c, nm, "weight");
            assert_int_equal(t->dtype, MOQ_DT_BF16);
            assert_int_equal(t->ndim, 2);
            float *v = malloc((size_t)t->nelem * sizeof(float));
            const uint16_t *h = t->data;
            for (uint64_t e = 0; e < t->nelem; e++) {
                const uint32_t u = (uint32_t)h[e] << 16;
                memcpy(&v[e], &u, 4);
            }
            snprintf(sm->name[sm->n], sizeof sm->name[0], "%.95s", nm);
            sm->shape[sm->n][0] = t->shape[0], sm->shape[sm->n][1] = t->shape[1];
            sm->w[sm->n++] = v;
        }
}

static void test_smollm2_every_algo(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    print_message("SKIP under the sanitizers: quantizes the 135M-parameter model six times (the Release run covers it)\n");
    skip();
#endif
    char *src = smollm2_bf16_dir();
    struct stat sb;
    if (stat(src, &sb) != 0) {
        print_message("SKIP: %s not present (run `make run` or scripts/default_model.sh to fetch and convert SmolLM2)\n", src);
        free(src);
        skip();
    }
    moq_checkpoint *sc = NULL;
    TU_OK(moq_checkpoint_open(&sc, src, NULL, err_));
    src_model sm;
    const int layers[2] = {0, 29};
    smollm2_src(sc, layers, 2, &sm);
    moq_calib cb = {0};
    TU_OK(moq_calibrate_text(&cb, src, k_calib_text, strlen(k_calib_text), 0, 2, err_));
    /* the shipped recipe (recipes/smollm2_mixed.json beside this file's tests/ folder) */
    char rpath[1024];
    snprintf(rpath, sizeof rpath, "%s", __FILE__);
    *strrchr(rpath, '/') = 0, *strrchr(rpath, '/') = 0, *strrchr(rpath, '/') = 0;
    strncat(rpath, "/recipes/smollm2_mixed.json", sizeof rpath - strlen(rpath) - 1);
    size_t rlen = 0;
    char *recipe = tu_read_file(rpath, &rlen);
    assert_non_null(recipe);
    static const struct { const char *algo, *written; check_fn *fn; bool calib, kv, mixed; } rows[] = {
        {"FP8", "FP8", check_fp8, true, true, false},
        {"FP8_PER_CHANNEL_PER_TOKEN", "FP8_PER_CHANNEL_PER_TOKEN", crow, false, false, false},
        {"NVFP4", "NVFP4", cnvfp4, true, false, false},
        {"W4A16_NVFP4", "W4A16_NVFP4", cnvfp4, false, false, false},
        {"MXFP8", "MXFP8", cmx, false, false, false},
        {"MIXED_PRECISION", NULL, NULL, true, false, true},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char tag[96];
        snprintf(tag, sizeof tag, "qz_smollm2_%s", rows[r].algo);
        char *dst = out_dir(tag);
        moq_quantize_opts o = moq_quantize_opts_default();
        o.algo = rows[r].algo, o.calib = rows[r].calib ? &cb : NULL, o.kv_fp8 = rows[r].kv;
        o.exclude = k_smol_keep, o.n_exclude = 3;   /* layers 1-28 stay BF16: a quick test */
        if (rows[r].mixed) o.recipe = recipe, o.recipe_name = rpath;
        moq_quantize_report rep;
        TU_OK(moq_quantize(src, dst, &o, &rep, err_));
        assert_int_equal(rep.n_quantized, 14);    /* layers 0 and 29 x 7 linears; lm_head (tied) and embeddings excluded */
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        for (int i = 0; i < sm.n; i++) {
            const char *m = sm.name[i];
            check_fn *fn = rows[r].fn;
            if (rows[r].mixed) fn = strstr(m, "self_attn") ? check_fp8 : strstr(m, "down_proj") ? cmx : cnvfp4; /* the recipe */
            fn(c, &sm, m, sm.shape[i][0], sm.shape[i][1], MOQ_DT_BF16);
        }
        if (rows[r].kv) {
            assert_true(scalar(need(c, "model.layers.29.self_attn.k_proj", "k_scale")) > 0);
            assert_true(scalar(need(c, "model.layers.29.self_attn.v_proj", "v_scale")) > 0);
        }
        moq_checkpoint_free(c);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
        run_ok(cmd, ", 0 problems");
        char out[4096];
        snprintf(cmd, sizeof cmd, "'%s' resolve '%s' lm_head --kind lm_head --json", tu_moq_bin(), dst);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        if (!strstr(out, "\"excluded\":\ttrue")) fail_msg("lm_head not excluded:\n%s", out);
        snprintf(cmd, sizeof cmd, "'%s' resolve '%s' model.layers.7.mlp.down_proj --kind linear --json", tu_moq_bin(), dst);
        assert_int_equal(tu_run(cmd, out, sizeof out), 0);
        if (!strstr(out, "\"excluded\":\ttrue")) fail_msg("layer 7 not excluded:\n%s", out);
        if (rows[r].mixed) {
            resolves_to(dst, "model.layers.29.self_attn.qkv_proj", "qkv_proj=q_proj,k_proj,v_proj", "FP8");
            resolves_to(dst, "model.layers.29.self_attn.o_proj", NULL, "FP8");
            resolves_to(dst, "model.layers.29.mlp.gate_up_proj", "gate_up_proj=gate_proj,up_proj", "NVFP4");
            resolves_to(dst, "model.layers.29.mlp.down_proj", NULL, "MXFP8");
        } else {
            resolves_to(dst, "model.layers.0.self_attn.qkv_proj", "qkv_proj=q_proj,k_proj,v_proj", rows[r].written);
            resolves_to(dst, "model.layers.29.self_attn.o_proj", NULL, rows[r].written);
            resolves_to(dst, "model.layers.29.mlp.gate_up_proj", "gate_up_proj=gate_proj,up_proj", rows[r].written);
            resolves_to(dst, "model.layers.29.mlp.down_proj", NULL, rows[r].written);
        }
        tu_rmtree(dst);
        free(dst);
    }
    /* FP8_PB_WO: hidden 576 is not a multiple of 128 */
    char *dst = out_dir("qz_smollm2_fp8_pb_wo");
    char partial[1100];
    snprintf(partial, sizeof partial, "%s.moq-partial", dst);
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = "FP8_PB_WO";
    moq_error e = {0};
    const moq_status st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.0.", "K = 576 is not a multiple of 128, which FP8_PB_WO needs");
    assert_true(stat(dst, &sb) != 0 && stat(partial, &sb) != 0);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' --algo FP8_PB_WO", tu_moq_bin(), src, dst);
    const int rc = tu_run(cmd, out, sizeof out);
    if (rc == 0 || !strstr(out, "K = 576 is not a multiple of 128") || !strstr(out, "moq does not pad")) fail_msg("`%s` exit %d:\n%s", cmd, rc, out);
    assert_true(stat(dst, &sb) != 0);
    free(dst);
    free(recipe);
    moq_calib_free(&cb);
    src_free(&sm);
    moq_checkpoint_free(sc);
    free(src);
}

static void test_calibration_scales(void **state) {
    (void)state;
    src_model sm;
    char *src = write_src("qz_calib", MOQ_DT_BF16, &sm, 21);
    enum { T = 40 };
    int32_t ids[T];
    g_rng = 5;
    for (int t = 0; t < T; t++) ids[t] = (int32_t)(urand() * (V - 1));
    moq_calib cb = {0};
    TU_OK(moq_calibrate(&cb, src, ids, T, 1, err_));
    assert_int_equal(cb.n_layers, L);
    double am[L][MOQ_TAP_COUNT];
    forward64(&sm, ids, T, am);
    for (int l = 0; l < L; l++)
        for (int tap = 0; tap < MOQ_TAP_MOE_IN; tap++) {
            char what[64];
            snprintf(what, sizeof what, "layer %d tap %d amax", l, tap);
            near_rel(cb.amax[l * MOQ_TAP_COUNT + tap], am[l][tap], what);
        }
    assert_true(cb.amax[MOQ_TAP_MOE_IN] < 0); /* dense model: no expert block seen */
    static const struct { const char *algo; double div; } sc[] = {{"FP8", 448.0}, {"NVFP4", 2688.0}};
    static const struct { const char *leaf; int tap; } lin[] = {
        {"self_attn.q_proj", MOQ_TAP_QKV_IN}, {"self_attn.k_proj", MOQ_TAP_QKV_IN}, {"self_attn.v_proj", MOQ_TAP_QKV_IN},
        {"self_attn.o_proj", MOQ_TAP_O_IN},   {"mlp.gate_proj", MOQ_TAP_GATE_UP_IN}, {"mlp.up_proj", MOQ_TAP_GATE_UP_IN},
        {"mlp.down_proj", MOQ_TAP_DOWN_IN}};
    for (int a = 0; a < 2; a++) {
        char *dst = out_dir(sc[a].algo);
        moq_quantize_opts o = moq_quantize_opts_default();
        o.algo = sc[a].algo, o.calib = &cb, o.kv_fp8 = true;
        TU_OK(moq_quantize(src, dst, &o, NULL, err_));
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        for (int l = 0; l < L; l++) {
            char m[128], what[160];
            for (size_t j = 0; j < sizeof lin / sizeof lin[0]; j++) {
                snprintf(m, sizeof m, "model.layers.%d.%s", l, lin[j].leaf);
                const float is = scalar(need(c, m, "input_scale"));
                /* exact: f32(calibrated amax ⊗ f32(1/448 or 1/2688)) */
                const float want = rcp_times(cb.amax[l * MOQ_TAP_COUNT + lin[j].tap], sc[a].div);
                if (is != want) fail_msg("%s %s input_scale %.9g, want %.9g", sc[a].algo, m, (double)is, (double)want);
                snprintf(what, sizeof what, "%s %s input_scale", sc[a].algo, m);
                near_rel(is, am[l][lin[j].tap] / sc[a].div, what);
            }
            snprintf(m, sizeof m, "model.layers.%d.self_attn.k_proj", l);
            near_rel(scalar(need(c, m, "k_scale")), am[l][MOQ_TAP_K] / 448.0, "k_scale");
            snprintf(m, sizeof m, "model.layers.%d.self_attn.v_proj", l);
            near_rel(scalar(need(c, m, "v_scale")), am[l][MOQ_TAP_V] / 448.0, "v_scale");
        }
        moq_checkpoint_free(c);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
        run_ok(cmd, ", 0 problems");
        tu_rmtree(dst);
        free(dst);
    }
    moq_calib_free(&cb);
    src_free(&sm);
    tu_rmtree(src);
    free(src);
}

/* ---- MIXED_PRECISION, the CLI, MoE ------------------------------------------------------------- */

static void test_mixed_recipe(void **state) {
    (void)state;
    src_model sm;
    char *src = write_src("qz_mixed_src", MOQ_DT_BF16, &sm, 31);
    moq_calib cb = {0};
    TU_OK(moq_calibrate_text(&cb, src, k_calib_text, strlen(k_calib_text), 0, 1, err_));
    char *dst = out_dir("qz_mixed");
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = "MIXED_PRECISION";
    o.recipe = "{\"default\": \"W4A16_NVFP4\", \"layers\": {\"*.self_attn.o_proj\": \"BF16\", \"*self_attn*\": \"FP8\", "
               "\"*.mlp.down_proj\": \"MXFP8\", \"*\": \"NVFP4\"}}";
    o.calib = &cb;
    TU_OK(moq_quantize(src, dst, &o, NULL, err_));
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
    check_fp8(c, &sm, "model.layers.0.self_attn.k_proj", NKV * D, H, MOQ_DT_BF16);
    check_mxfp8(c, &sm, "model.layers.1.mlp.down_proj", H, I);
    check_nvfp4(c, &sm, "model.layers.1.mlp.gate_proj", I, H);  /* "*" -> NVFP4, after the more specific ones */
    const moq_tensor *ow = moq_checkpoint_tensor(c, "model.layers.0.self_attn.o_proj.weight");
    assert_non_null(ow);
    assert_int_equal(ow->dtype, MOQ_DT_BF16);
    const char *hq = moq_checkpoint_json_text(c, "hf_quant_config.json");
    assert_non_null(strstr(hq, "\"MIXED_PRECISION\""));
    assert_non_null(strstr(hq, "\"model.layers.0.self_attn.o_proj\""));    /* in exclude_modules */
    assert_non_null(strstr(hq, "\"model.layers.1.mlp.down_proj\": {\n                \"quant_algo\": \"MXFP8\""));
    /* module order, as ModelOpt lists them (the source file is in name order) */
    assert_true(strstr(hq, "\"model.layers.0.self_attn.q_proj\"") < strstr(hq, "\"model.layers.0.self_attn.k_proj\""));
    assert_true(strstr(hq, "\"model.layers.0.self_attn.k_proj\"") < strstr(hq, "\"model.layers.0.mlp.gate_proj\""));
    assert_true(strstr(hq, "\"model.layers.0.mlp.down_proj\"") < strstr(hq, "\"model.layers.1.self_attn.q_proj\""));
    const char *cfgm = moq_checkpoint_json_text(c, "config.json"), *g0 = strstr(cfgm, "\"group_0\"");
    assert_non_null(g0);   /* the first algo met in module order is the attention's FP8 */
    assert_true(strstr(g0, "\"input_activations\"") < strstr(g0, "\"model.layers.0.self_attn.k_proj\""));
    assert_true(strstr(g0, "\"model.layers.0.self_attn.k_proj\"") < strstr(g0, "\"group_1\""));
    moq_checkpoint_free(c);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
    run_ok(cmd, ", 0 problems");
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' model.layers.0.mlp.down_proj --kind linear", tu_moq_bin(), dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    if (!strstr(out, "MXFP8")) fail_msg("down_proj:\n%s", out);
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' model.layers.0.self_attn.o_proj --kind linear", tu_moq_bin(), dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    if (!strstr(out, "excluded  true")) fail_msg("o_proj:\n%s", out);
    tu_rmtree(dst);
    free(dst);
    moq_calib_free(&cb);
    src_free(&sm);
    tu_rmtree(src);
    free(src);
}

static void test_cli_shards_kv_and_run(void **state) {
    (void)state;
    src_model sm;
    char *src = write_src("qz_cli_src", MOQ_DT_BF16, &sm, 41);
    src_free(&sm);
    char *dst = out_dir("qz_cli");
    char *calib = tu_write_file(src, "calib.txt", k_calib_text, strlen(k_calib_text));
    char cmd[2048], out[8192];
    /* static scales without --calib: refused, nothing written */
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' --algo NVFP4", tu_moq_bin(), src, dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_INVALID_ARG);
    if (!strstr(out, "--calib FILE")) fail_msg("%s", out);
    struct stat sb;
    assert_int_not_equal(stat(dst, &sb), 0);
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' --algo NVFP4 --calib '%s' --calib-tokens 20 --kv-cache fp8 --shard-size 200K --json",
             tu_moq_bin(), src, dst, calib);
    run_ok(cmd, "\"calib_tokens\": 20");
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
    assert_true(moq_checkpoint_shard_count(c) > 1);
    assert_non_null(moq_checkpoint_json_text(c, "model.safetensors.index.json"));
    bool ver = false, cmdl = false;
    for (int i = 0; i < moq_checkpoint_metadata_count(c, 0); i++) {
        const char *k, *v;
        moq_checkpoint_metadata_at(c, 0, i, &k, &v);
        ver |= !strcmp(k, "moq_version") && !strcmp(v, moq_version_string());
        cmdl |= !strcmp(k, "moq_command") && strstr(v, "quantize") && strstr(v, "--kv-cache fp8");
    }
    assert_true(ver && cmdl);
    assert_non_null(moq_checkpoint_tensor(c, "model.layers.1.self_attn.k_proj.k_scale"));
    const char *cfg = moq_checkpoint_json_text(c, "config.json");
    assert_non_null(strstr(cfg, "\"quant_method\": \"modelopt\""));
    assert_non_null(strstr(cfg, "\"kv_cache_scheme\""));
    assert_non_null(strstr(cfg, "\"config_groups\""));
    moq_checkpoint_free(c);
    static const char *const copied[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "calib.txt"};
    for (int i = 0; i < 4; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dst, copied[i]);
        assert_int_equal(stat(p, &sb), 0);
    }
    snprintf(cmd, sizeof cmd, "'%s' run '%s' -p 'It was' -n 4 --temp 0", tu_moq_bin(), dst);
    run_ok(cmd, "decode");
    /* an existing destination is refused */
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' --algo MXFP8", tu_moq_bin(), src, dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_IO);
    if (!strstr(out, "already exists")) fail_msg("%s", out);
    free(calib);
    tu_rmtree(dst);
    free(dst);
    tu_rmtree(src);
    free(src);
}

static void test_moe_experts_and_router(void **state) {
    (void)state;
    char *src = out_dir("qz_moe_src"), *dst = out_dir("qz_moe"), cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' synth '%s' --arch qwen3moe --algo BF16 --layers 1 --hidden 128 --inter 128 --experts 2 --heads 2 --kv-heads 1",
             tu_moq_bin(), src);
    run_ok(cmd, NULL);
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = "NVFP4";
    moq_error e = {0};
    moq_status st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.0.", "pass --calib FILE");

    /* per-expert calibration: every token reaches top-k experts, so the max over the experts'
     * input amax is the MoE block's input amax, and each is at most that */
    int32_t ids[48];
    g_rng = 9;
    for (int t = 0; t < 48; t++) ids[t] = (int32_t)(urand() * 500);
    moq_calib cb = {0};
    TU_OK(moq_calibrate(&cb, src, ids, 48, 1, err_));
    assert_int_equal(cb.n_experts, 2);
    assert_non_null(cb.expert_amax);
    const float moe_in = cb.amax[MOQ_TAP_MOE_IN];
    float mx = -1;
    for (int x = 0; x < 2; x++) {
        assert_true(cb.expert_amax[x * 2] <= moe_in);
        assert_true(cb.expert_amax[x * 2 + 1] > 0);
        mx = fmaxf(mx, cb.expert_amax[x * 2]);
    }
    assert_true(mx == moe_in);
    static const char *const stat_algos[] = {"NVFP4", "FP8"};
    for (int a = 0; a < 2; a++) {
        o.algo = stat_algos[a], o.calib = &cb;
        TU_OK(moq_quantize(src, dst, &o, NULL, err_));
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        const double div = a == 0 ? 2688.0 : 448.0;
        for (int x = 0; x < 2; x++) {
            char g[128], u[128], d[128];
            snprintf(g, sizeof g, "model.layers.0.mlp.experts.%d.gate_proj", x);
            snprintf(u, sizeof u, "model.layers.0.mlp.experts.%d.up_proj", x);
            snprintf(d, sizeof d, "model.layers.0.mlp.experts.%d.down_proj", x);
            assert_true(scalar(need(c, g, "input_scale")) == rcp_times(cb.expert_amax[x * 2], div));
            assert_true(scalar(need(c, u, "input_scale")) == scalar(need(c, g, "input_scale")));
            assert_true(scalar(need(c, d, "input_scale")) == rcp_times(cb.expert_amax[x * 2 + 1], div));
        }
        moq_checkpoint_free(c);
        snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
        run_ok(cmd, ", 0 problems");
        tu_rmtree(dst);
    }
    /* an expert no token reached: the max of the layer's others (ModelOpt's fallback) */
    cb.expert_amax[1 * 2] = -1.0f, cb.expert_amax[1 * 2 + 1] = -1.0f;
    o.algo = "FP8";
    TU_OK(moq_quantize(src, dst, &o, NULL, err_));
    {
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        assert_true(scalar(need(c, "model.layers.0.mlp.experts.1.gate_proj", "input_scale")) ==
                    scalar(need(c, "model.layers.0.mlp.experts.0.gate_proj", "input_scale")));
        assert_true(scalar(need(c, "model.layers.0.mlp.experts.1.down_proj", "input_scale")) ==
                    scalar(need(c, "model.layers.0.mlp.experts.0.down_proj", "input_scale")));
        moq_checkpoint_free(c);
    }
    tu_rmtree(dst);
    moq_calib_free(&cb);
    o.calib = NULL;
    static const char *const algos[] = {"W4A16_NVFP4", "FP8_PB_WO"};
    for (int a = 0; a < 2; a++) {
        o.algo = algos[a];
        TU_OK(moq_quantize(src, dst, &o, NULL, err_));
        moq_checkpoint *c = NULL;
        TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
        const char *hq = moq_checkpoint_json_text(c, "hf_quant_config.json");
        assert_non_null(strstr(hq, "\"model.layers.0.mlp.gate\""));   /* the router, listed */
        assert_int_equal(moq_checkpoint_tensor(c, "model.layers.0.mlp.gate.weight")->dtype, MOQ_DT_BF16);
        for (int x = 0; x < 2; x++) {
            char g[128], u[128], d[128];
            snprintf(g, sizeof g, "model.layers.0.mlp.experts.%d.gate_proj", x);
            snprintf(u, sizeof u, "model.layers.0.mlp.experts.%d.up_proj", x);
            snprintf(d, sizeof d, "model.layers.0.mlp.experts.%d.down_proj", x);
            if (a == 0) { /* per expert, gate and up share the global scale */
                assert_true(scalar(need(c, g, "weight_scale_2")) == scalar(need(c, u, "weight_scale_2")));
            } else {      /* one block each: gate/up keep [1,1,1,1] and share the amax; down is 0-d */
                const moq_tensor *gs = need(c, g, "weight_scale"), *us = need(c, u, "weight_scale");
                assert_int_equal(gs->ndim, 4);
                assert_int_equal(gs->shape[0] * gs->shape[1] * gs->shape[2] * gs->shape[3], 1);
                assert_memory_equal(gs->data, us->data, 4);
                assert_int_equal(need(c, d, "weight_scale")->ndim, 0);
            }
        }
        moq_checkpoint_free(c);
        snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
        run_ok(cmd, ", 0 problems");
        tu_rmtree(dst);
    }
    free(dst);
    tu_rmtree(src);
    free(src);
}

/* --exclude: ModelOpt's sorted prefix-wildcard summary (NVFP4_MLP_ONLY writes
 * "model.layers.N.self_attn*", NUMERICS §12); a module whose prefix a quantized one shares keeps its
 * full name. */
static void test_exclude_summary(void **state) {
    (void)state;
    src_model sm;
    char *src = write_src("qz_excl_src", MOQ_DT_BF16, &sm, 61);
    src_free(&sm);
    char *dst = out_dir("qz_excl");
    const char *const ex[] = {"*self_attn*", "model.layers.1.mlp.down_proj"};
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = "w4a16_nvfp4", o.exclude = ex, o.n_exclude = 2;   /* any case */
    moq_quantize_report rep;
    TU_OK(moq_quantize(src, dst, &o, &rep, err_));
    assert_int_equal(rep.n_quantized, 5);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dst, NULL, err_));
    const char *hq = moq_checkpoint_json_text(c, "hf_quant_config.json");
    assert_non_null(strstr(hq, "\"quant_algo\": \"W4A16_NVFP4\""));
    if (!strstr(hq, "        \"exclude_modules\": [\n            \"lm_head\",\n            \"model.embed_tokens\",\n"
                    "            \"model.layers.0.self_attn*\",\n            \"model.layers.1.mlp.down_proj\",\n"
                    "            \"model.layers.1.self_attn*\"\n        ]\n"))
        fail_msg("exclude_modules:\n%s", hq);
    assert_int_equal(moq_checkpoint_tensor(c, "model.layers.1.self_attn.v_proj.weight")->dtype, MOQ_DT_BF16);
    assert_int_equal(moq_checkpoint_tensor(c, "model.layers.1.mlp.down_proj.weight")->dtype, MOQ_DT_BF16);
    const char *cfg = moq_checkpoint_json_text(c, "config.json");
    assert_non_null(strstr(cfg, "        \"ignore\": [\n            \"lm_head\",\n            \"model.embed_tokens\",\n            \"model.layers.0.self_attn*\","));
    moq_checkpoint_free(c);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' check '%s' --values", tu_moq_bin(), dst);
    run_ok(cmd, ", 0 problems");
    snprintf(cmd, sizeof cmd, "'%s' resolve '%s' model.layers.0.self_attn.o_proj --kind linear", tu_moq_bin(), dst);
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    if (!strstr(out, "excluded  true")) fail_msg("o_proj:\n%s", out);
    tu_rmtree(dst);
    free(dst);
    tu_rmtree(src);
    free(src);
}

/* The exporters split rows over OpenMP threads: the bytes must not depend on how many. */
static void test_thread_count_invariant(void **state) {
    (void)state;
    /* weights of 2^18 elements, above the exporters' threshold for splitting (2^16) */
    char *src = out_dir("qz_thr_src"), cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' synth '%s' --algo BF16 --layers 1 --hidden 256 --inter 1024 --heads 2 --kv-heads 1 --vocab 300",
             tu_moq_bin(), src);
    run_ok(cmd, NULL);
    static const char *const algos[] = {"W4A16_NVFP4", "FP8_PB_WO", "MXFP8", "FP8_PER_CHANNEL_PER_TOKEN"};
    for (int a = 0; a < 4; a++) {
        char *d1 = out_dir("qz_thr1"), *d3 = out_dir("qz_thr3");
        moq_quantize_opts o = moq_quantize_opts_default();
        o.algo = algos[a];
        omp_set_num_threads(1);
        TU_OK(moq_quantize(src, d1, &o, NULL, err_));
        omp_set_num_threads(3);
        TU_OK(moq_quantize(src, d3, &o, NULL, err_));
        moq_checkpoint *c1 = NULL, *c3 = NULL;
        TU_OK(moq_checkpoint_open(&c1, d1, NULL, err_));
        TU_OK(moq_checkpoint_open(&c3, d3, NULL, err_));
        assert_int_equal(moq_checkpoint_tensor_count(c1), moq_checkpoint_tensor_count(c3));
        for (size_t i = 0; i < moq_checkpoint_tensor_count(c1); i++) {
            const moq_tensor *t1 = moq_checkpoint_tensor_at(c1, i), *t3 = moq_checkpoint_tensor(c3, t1->name);
            assert_non_null(t3);
            assert_int_equal(t1->nbytes, t3->nbytes);
            if (t1->nbytes && memcmp(t1->data, t3->data, (size_t)t1->nbytes)) fail_msg("%s %s differs between 1 and 3 threads", algos[a], t1->name);
        }
        moq_checkpoint_free(c1), moq_checkpoint_free(c3);
        tu_rmtree(d1), tu_rmtree(d3);
        free(d1), free(d3);
    }
    tu_rmtree(src);
    free(src);
}

/* ---- against real ModelOpt 0.47 exports (tests/data/modelopt_real) ----------------------------
 * The fixtures' BF16 sources are not kept, so each fixture is dequantized here (codes x scales in
 * fp64, rounded to f32 then bf16) into a BF16 source, and moq quantizes that with the fixture's algo
 * (input and KV scales from a calibration table built from the fixture's own scales). The result must
 * have ModelOpt's tensor names, dtypes and shapes, hf_quant_config.json and quantization_config, and
 * the same bytes in every weight and scale: quantizing the bf16 rounding of ModelOpt's dequantized
 * weights gives back ModelOpt's codes and scales (each dequantized value is within 2^-9 relative of a
 * grid point whose neighbours are >= 2^-4 away; the block maxima come back exactly), except where
 * the dequantization lost what decided a code: NVFP4 code 8 (a small negative value) and MXFP8 blocks
 * whose maximum rounded down to 224, for which fixture_dequant stands in a value of the lost range. */

static const float *f32p(const moq_tensor *t) { return (const float *)t->data; }

/* The dequantized weight of fixture module m (algo as written), f32 [N*K]; NULL when m is unquantized. */
static float *fixture_dequant(const moq_checkpoint *c, const char *m, const char *algo, int64_t *N, int64_t *K) {
    char nm[320];
    snprintf(nm, sizeof nm, "%s.weight_scale", m);
    const moq_tensor *sc = moq_checkpoint_tensor(c, nm);
    if (!sc) return NULL;
    snprintf(nm, sizeof nm, "%s.weight", m);
    const moq_tensor *w = moq_checkpoint_tensor(c, nm);
    assert_non_null(w);
    const uint8_t *q = w->data;
    const bool fp4 = w->dtype == MOQ_DT_U8;
    *N = w->shape[0], *K = fp4 ? w->shape[1] * 2 : w->shape[1];
    const int64_t n_ = *N, k_ = *K;
    float *out = malloc((size_t)(n_ * k_) * sizeof *out);
    for (int64_t n = 0; n < n_; n++)
        for (int64_t k = 0; k < k_; k++) {
            double v;
            if (fp4) {
                snprintf(nm, sizeof nm, "%s.weight_scale_2", m);
                const double ws2 = f32p(moq_checkpoint_tensor(c, nm))[0];
                const uint8_t code = (uint8_t)((q[n * (k_ / 2) + k / 2] >> (4 * (k & 1))) & 15);
                const double d = e4m3_value(((const uint8_t *)sc->data)[n * (k_ / 16) + k / 16]) * ws2;
                /* code 8 is "negative, rounds to zero": the source weight was in (-d/4, 0); -0.0 would
                 * come back as code 0 (ModelOpt's sign bit is w < 0), so stand in -d/10 */
                v = code == 8 ? -0.1 * d : k_e2m1[code & 7] * (code & 8 ? -1 : 1) * d;
            } else if (sc->dtype == MOQ_DT_U8) { /* MXFP8 */
                v = ldexp(e4m3_value(q[n * k_ + k]), ((const uint8_t *)sc->data)[n * (k_ / 32) + k / 32] - 127);
            } else if (!strcmp(algo, "fp8_pb_wo")) {
                v = e4m3_value(q[n * k_ + k]) * f32p(sc)[sc->ndim ? (n / 128) * (k_ / 128) + k / 128 : 0];
            } else if (sc->ndim == 1) { /* per channel */
                v = e4m3_value(q[n * k_ + k]) * f32p(sc)[n];
            } else {
                v = e4m3_value(q[n * k_ + k]) * f32p(sc)[0];
            }
            out[n * k_ + k] = ref_bf16((float)v);
        }
    /* MXFP8: a block whose largest code is 224 came from a maximum in (224, 232) x 2^e (ModelOpt's
     * exponent ceil(log2(amax/448)) puts the maximum in (224, 448] x 2^e); 224 x 2^e itself would
     * give the exponent below, so the first such element stands in as 228 x 2^e (still code 224). */
    for (int64_t b = 0; sc->dtype == MOQ_DT_U8 && !fp4 && b < n_ * k_ / 32; b++) {
        const double e = ((const uint8_t *)sc->data)[b] - 127.0;
        double bmax = 0;
        for (int j = 0; j < 32; j++) bmax = fmax(bmax, fabs(e4m3_value(q[b * 32 + j])));
        for (int j = 0; bmax == 224 && j < 32; j++)
            if (fabs(e4m3_value(q[b * 32 + j])) == 224) {
                out[b * 32 + j] = ref_bf16((float)ldexp(e4m3_value(q[b * 32 + j]) > 0 ? 228 : -228, (int)e));
                break;
            }
    }
    return out;
}

static void real_fixture_round_trip(const char *fx) {
    char rel[128], *fdir;
    snprintf(rel, sizeof rel, "modelopt_real/%s", fx);
    fdir = tu_src_data_path(rel);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, fdir, NULL, err_));
    cJSON *fhq = cJSON_Parse(moq_checkpoint_json_text(c, "hf_quant_config.json"));
    cJSON *fcfg = cJSON_Parse(moq_checkpoint_json_text(c, "config.json"));
    const cJSON *fq = cJSON_GetObjectItem(fhq, "quantization");
    const char *algo = cJSON_GetObjectItem(fq, "quant_algo")->valuestring;
    const bool kv = cJSON_IsString(cJSON_GetObjectItem(fq, "kv_cache_quant_algo"));
    const bool fp4 = strstr(algo, "NVFP4") != NULL;

    /* the BF16 source and a calibration table from the fixture's input and KV scales */
    char tag[96];
    snprintf(tag, sizeof tag, "qz_real_src_%s", fx);
    char *src = out_dir(tag);
    moq_writer *wr = NULL;
    TU_OK(moq_writer_create(&wr, src, err_));
    void *keep[512];
    int nk = 0;
    const int64_t NL = moq_checkpoint_arch(c)->num_hidden_layers, NE = moq_checkpoint_arch(c)->num_experts;
    float *table = malloc((size_t)(NL * MOQ_TAP_COUNT) * sizeof *table);
    float *etable = NE > 0 ? malloc((size_t)(NL * NE * 2) * sizeof *etable) : NULL;
    for (int64_t i = 0; i < NL * MOQ_TAP_COUNT; i++) table[i] = -1.0f;
    for (int64_t i = 0; etable && i < NL * NE * 2; i++) etable[i] = -1.0f;
    static const struct { const char *leaf; int tap; } taps[] = {
        {"self_attn.q_proj", MOQ_TAP_QKV_IN}, {"self_attn.o_proj", MOQ_TAP_O_IN}, {"mlp.gate_proj", MOQ_TAP_GATE_UP_IN}, {"mlp.down_proj", MOQ_TAP_DOWN_IN}};
    for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        const size_t len = strlen(t->name);
        char m[256];
        if (len > 7 && !strcmp(t->name + len - 7, ".weight")) {
            snprintf(m, sizeof m, "%.*s", (int)(len - 7), t->name);
            int64_t N = 0, K = 0;
            float *w = fixture_dequant(c, m, algo, &N, &K);
            if (w) {
                uint16_t *b = malloc((size_t)(N * K) * 2);
                for (int64_t j = 0; j < N * K; j++) b[j] = (uint16_t)(bits_of(w[j]) >> 16);
                free(w);
                const int64_t sh[2] = {N, K};
                TU_OK(moq_writer_add(wr, t->name, MOQ_DT_BF16, 2, sh, b, (uint64_t)(N * K) * 2, err_));
                keep[nk++] = b;
                continue;
            }
        }
        if (strstr(t->name, "_scale")) { /* scales: into the calibration table or dropped */
            int64_t l = -1;
            sscanf(t->name, "model.layers.%lld.", (long long *)&l);
            for (size_t j = 0; l >= 0 && l < NL && j < sizeof taps / sizeof taps[0]; j++) {
                snprintf(m, sizeof m, "model.layers.%lld.%s.input_scale", (long long)l, taps[j].leaf);
                if (!strcmp(t->name, m)) table[l * MOQ_TAP_COUNT + taps[j].tap] = f32p(t)[0] * (fp4 ? 2688.0f : 448.0f);
            }
            long long x = -1;
            char proj[32] = "";
            const size_t nl = strlen(t->name);
            const bool is_in = nl > 12 && !strcmp(t->name + nl - 12, ".input_scale");
            if (etable && is_in && l >= 0 && l < NL && sscanf(t->name, "model.layers.%*d.mlp.experts.%lld.%31[a-z_].input_scale", &x, proj) == 2 && x >= 0 && x < NE)
                etable[(l * NE + x) * 2 + (strcmp(proj, "down_proj") == 0)] = f32p(t)[0] * (fp4 ? 2688.0f : 448.0f);
            if (l >= 0 && strstr(t->name, ".k_proj.k_scale")) table[l * MOQ_TAP_COUNT + MOQ_TAP_K] = f32p(t)[0] * 448.0f;
            if (l >= 0 && strstr(t->name, ".v_proj.v_scale")) table[l * MOQ_TAP_COUNT + MOQ_TAP_V] = f32p(t)[0] * 448.0f;
            continue;
        }
        TU_OK(moq_writer_add(wr, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err_));
    }
    cJSON *scfg = cJSON_Duplicate(fcfg, true);
    cJSON_DeleteItemFromObject(scfg, "quantization_config");
    char *scfg_text = cJSON_Print(scfg);
    TU_OK(moq_writer_file(wr, "config.json", scfg_text, err_));
    free(scfg_text);
    cJSON_Delete(scfg);
    TU_OK(moq_writer_finish(wr, 1, err_));
    moq_writer_free(wr);
    for (int i = 0; i < nk; i++) free(keep[i]);

    snprintf(tag, sizeof tag, "qz_real_%s", fx);
    char *dst = out_dir(tag);
    const moq_calib cb = {.n_layers = NL, .amax = table, .n_tokens = 1, .n_experts = etable ? NE : 0, .expert_amax = etable};
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = algo, o.calib = &cb, o.kv_fp8 = kv;
    TU_OK(moq_quantize(src, dst, &o, NULL, err_));
    moq_checkpoint *d = NULL;
    TU_OK(moq_checkpoint_open(&d, dst, NULL, err_));

    /* the same tensors, dtypes, shapes and bytes (input/KV scales: the calibration round trip
     * f32(f32(s * 448) / 448) may move them by one ulp) */
    assert_int_equal(moq_checkpoint_tensor_count(d), moq_checkpoint_tensor_count(c));
    int bad = 0;
    for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i), *u = moq_checkpoint_tensor(d, t->name);
        if (!u) fail_msg("%s: moq did not write %s", fx, t->name);
        assert_int_equal(u->dtype, t->dtype);
        if (u->ndim != t->ndim) fail_msg("%s: %s has %d dims, ModelOpt's %d", fx, t->name, u->ndim, t->ndim);
        for (int k = 0; k < t->ndim; k++) assert_int_equal(u->shape[k], t->shape[k]);
        const bool calibrated = strstr(t->name, "input_scale") || strstr(t->name, "k_scale") || strstr(t->name, "v_scale");
        if (calibrated) {
            const float a = f32p(t)[0], b = f32p(u)[0];
            if (fabsf(a - b) > 1.2e-7f * a) fail_msg("%s: %s = %.9g, ModelOpt %.9g", fx, t->name, (double)b, (double)a);
            continue;
        }
        size_t diff = 0;
        for (uint64_t k = 0; k < t->nbytes; k++) diff += ((const uint8_t *)t->data)[k] != ((const uint8_t *)u->data)[k];
        if (diff) print_message("%s: %s: %zu of %llu bytes differ from ModelOpt's\n", fx, t->name, diff, (unsigned long long)t->nbytes), bad++;
    }
    if (bad) fail_msg("%s: %d tensors differ", fx, bad);
    /* the configs, as JSON values */
    cJSON *dhq = cJSON_Parse(moq_checkpoint_json_text(d, "hf_quant_config.json"));
    cJSON *dcfg = cJSON_Parse(moq_checkpoint_json_text(d, "config.json"));
    if (!cJSON_Compare(dhq, fhq, true)) fail_msg("%s: hf_quant_config.json differs:\n%s", fx, moq_checkpoint_json_text(d, "hf_quant_config.json"));
    if (!cJSON_Compare(cJSON_GetObjectItem(dcfg, "quantization_config"), cJSON_GetObjectItem(fcfg, "quantization_config"), true))
        fail_msg("%s: quantization_config differs:\n%s", fx, moq_checkpoint_json_text(d, "config.json"));
    cJSON_Delete(dhq), cJSON_Delete(dcfg), cJSON_Delete(fhq), cJSON_Delete(fcfg);
    moq_checkpoint_free(d);
    moq_checkpoint_free(c);
    free(table), free(etable);
    tu_rmtree(dst), tu_rmtree(src);
    free(dst), free(src), free(fdir);
}

static void test_real_modelopt_exports(void **state) {
    (void)state;
    /* llama_nvfp4_awq and llama_fp8_kv_cast are forms moq quantize does not write */
    static const char *const fx[] = {"llama_fp8",   "llama_fp8_pc_pt", "llama_fp8_pb_wo",    "llama_nvfp4",        "llama_w4a16_nvfp4",
                                     "llama_mxfp8", "llama_fp8_kv",    "qwen3moe_fp8",       "qwen3moe_fp8_pc_pt", "qwen3moe_fp8_pb_wo",
                                     "qwen3moe_nvfp4"};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) real_fixture_round_trip(fx[i]);
}

/* ---- error cases -------------------------------------------------------------------------------- */

static void cancel_on_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    (void)done, (void)total;
    if (!strcmp(phase, "write")) *(volatile int *)user = 1;   /* after the first tensor is written */
}

static void test_errors_leave_nothing(void **state) {
    (void)state;
    src_model sm;
    char *src = write_src("qz_err_src", MOQ_DT_BF16, &sm, 51);
    src_free(&sm);
    char *dst = out_dir("qz_err");
    char partial[1024];
    snprintf(partial, sizeof partial, "%s.moq-partial", dst);
    struct stat sb;
    moq_quantize_opts o = moq_quantize_opts_default();
    moq_error e = {0};
    moq_status st;
#define NOTHING() assert_true(stat(dst, &sb) != 0 && stat(partial, &sb) != 0)
    o.algo = "FP8";
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.0.", "pass --calib FILE");
    NOTHING();
    o.algo = "MXFP8", o.kv_fp8 = true, e = (moq_error){0};
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "--kv-cache fp8", "pass --calib FILE");
    o.kv_fp8 = false;
    o.algo = "NVFP5", e = (moq_error){0};
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "--algo", "\"NVFP5\" is not a quantized algo");
    /* NVFP4 input amax 0 (ModelOpt refuses it: §9.2); FP8 maps it to scale 1 */
    float table[L * MOQ_TAP_COUNT];
    for (int i = 0; i < L * MOQ_TAP_COUNT; i++) table[i] = 0.5f;
    table[1 * MOQ_TAP_COUNT + MOQ_TAP_DOWN_IN] = 0.0f;
    const moq_calib zc = {.n_layers = L, .amax = table, .n_tokens = 1};
    o.algo = "NVFP4", o.calib = &zc, e = (moq_error){0};
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "model.layers.1.mlp.down_proj", "only zeros");
    NOTHING();
    o.algo = "FP8";
    TU_OK(moq_quantize(src, dst, &o, NULL, err_));
    moq_checkpoint *fc = NULL;
    TU_OK(moq_checkpoint_open(&fc, dst, NULL, err_));
    assert_true(scalar(need(fc, "model.layers.1.mlp.down_proj", "input_scale")) == 1.0f);
    assert_true(scalar(need(fc, "model.layers.1.mlp.up_proj", "input_scale")) == rcp_times(0.5, 448.0));
    moq_checkpoint_free(fc);
    tu_rmtree(dst);
    o.calib = NULL;
    /* recipes */
    static const struct { const char *text; moq_status code; const char *msg; } bad[] = {
        {"{\"default\": \"NVFP4\",", MOQ_ERR_FORMAT, "not valid JSON (parse error at byte"},
        {"[1]", MOQ_ERR_CONFIG, "expected an object"},
        {"{\"layers\": {}}", MOQ_ERR_CONFIG, "default is missing"},
        {"{\"default\": \"NVFP5\"}", MOQ_ERR_CONFIG, "default \"NVFP5\" is not one of"},
        {"{\"default\": \"MXFP8\", \"layers\": {\"*\": 4}}", MOQ_ERR_CONFIG, "layers[\"*\"] is not a string"},
        {"{\"default\": \"MXFP8\", \"defaults\": \"FP8\"}", MOQ_ERR_CONFIG, "unknown key \"defaults\""},
        {"{\"default\": \"MXFP8\", \"layers\": {\"*k_proj\": \"W4A16_NVFP4\"}}", MOQ_ERR_CONFIG, "k_proj, which is W4A16_NVFP4, while this one is MXFP8; fused shards need one algo"},
        {"{\"default\": \"MXFP8\"} x", MOQ_ERR_FORMAT, "not valid JSON (bytes after the JSON value at byte 21 of 22)"},
    };
    o.algo = "MIXED_PRECISION";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.recipe = bad[i].text, o.recipe_name = "recipe.json", e = (moq_error){0};
        st = moq_quantize(src, dst, &o, NULL, &e);
        TU_ERR(&e, st, bad[i].code, i == 6 ? "model.layers.0.self_attn." : "recipe.json", bad[i].msg);
        NOTHING();
    }
    o.recipe = NULL, e = (moq_error){0};
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "MIXED_PRECISION", "needs a recipe");
    /* interrupted after the first tensor is written: no destination, no partial directory */
    volatile int cancel = 0;
    o = moq_quantize_opts_default();
    o.algo = "W4A16_NVFP4", o.cancel = &cancel, o.progress = cancel_on_progress, o.progress_user = (void *)&cancel;
    e = (moq_error){0};
    st = moq_quantize(src, dst, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_IO, "qz_err", "interrupted");
    NOTHING();
    /* a quantized source, and an F8 tensor in a source without a quantization config */
    o = moq_quantize_opts_default();
    o.algo = "MXFP8";
    TU_OK(moq_quantize(src, dst, &o, NULL, err_));
    char *dst2 = out_dir("qz_err2");
    e = (moq_error){0};
    st = moq_quantize(dst, dst2, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "hf_quant_config.json", "already quantized");
    char *p = moq_path_join(dst, "hf_quant_config.json");
    unlink(p);
    free(p);
    p = moq_path_join(dst, "config.json");
    unlink(p);
    free(p);
    free(tu_write_file(dst, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 128}", 59));
    e = (moq_error){0};
    st = moq_quantize(dst, dst2, &o, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.0.mlp.down_proj.weight", "dtype F8_E4M3, expected BF16, F16 or F32");
    assert_true(stat(dst2, &sb) != 0);
    free(dst2);
#undef NOTHING
    tu_rmtree(dst);
    free(dst);
    tu_rmtree(src);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_every_algo),
        cmocka_unit_test(test_f16_every_algo),
        cmocka_unit_test(test_f32_every_algo),
        cmocka_unit_test(test_calibration_scales),
        cmocka_unit_test(test_mixed_recipe),
        cmocka_unit_test(test_cli_shards_kv_and_run),
        cmocka_unit_test(test_moe_experts_and_router),
        cmocka_unit_test(test_exclude_summary),
        cmocka_unit_test(test_thread_count_invariant),
        cmocka_unit_test(test_real_modelopt_exports),
        cmocka_unit_test(test_errors_leave_nothing),
        cmocka_unit_test(test_smollm2_every_algo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
