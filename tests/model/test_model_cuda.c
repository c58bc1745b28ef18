/* test_model_cuda.c — the GPU forward (moq_model_opts.device = MOQ_DEVICE_CUDA, src/model/model_gpu.c)
 * against the CPU forward on the same checkpoints; label `cuda`.
 *
 * The CPU forward is the reference: tests/model/test_model.c checks it against an fp64 oracle written
 * there, test_modelopt_real.c against transformers' logits on NVIDIA's real ModelOpt exports. Here
 * the GPU and CPU runs see the same tokens (a prefill of 100, then 20 decode steps: several KV pages,
 * several key splits, the sliding window crossed many times) and every position's logits are
 * compared; the CPU runs with a bf16 KV cache when the GPU's is bf16 (the GPU has no f32 cache).
 *
 * Per position p, e_p = max over the vocabulary of |gpu - cpu| / max|cpu|. Passing needs: the median
 * e_p <= 5e-3, at most 10 % of positions with e_p > 1e-2, every e_p <= 1e-1, and an argmax that
 * differs only where the CPU's two best logits are closer than 2 e_p · max|cpu|. Why: the GPU's
 * BF16 rows multiply bf16-rounded activations (relative error <= 2^-9 per element; the CPU's keep
 * f32), and elsewhere the activations differ from the CPU's in the last bits (summation order),
 * which now and then flips an e4m3 / e2m1 activation or FP8 KV code (a 1/16 step of one element).
 * Measured on the H200 (docs/ACCURACY.md): median e_p <= 3e-3 everywhere; single flips show as a
 * few positions at 1e-2..7e-2 (an FP8 KV key flipped under a 5-position window moves exactly the 5
 * queries that see it). A forward that drops a quantizer, a scale, the RoPE, the window, a norm or a
 * KV page moves every position by 1.3e-2..1.6e-1 (the CPU tests' oracle mutations), so it fails the
 * median and the 10 % count; FP8 GEMMs on cuBLASLt's truncating FP8 accumulation (3e-4 per layer)
 * moved the logits by 2..5 % at most positions and failed. The single-token-step run and the CPU's
 * own chunked-vs-single difference are printed; the CPU reference is defined only to within the
 * latter, so where it exceeds 5e-3 the 1e-2 and median limits scale by 2 · it / 1e-2 (FP8_PB_WO on
 * the AVX-512 rows of 2026-12-01: the CPU's 100-token prefill and its single steps differed by
 * 1.5e-2 on gpu_llama_fp8_pb_wo, 1.1e-2 on the real export, every other format by <= 7e-5).
 * Likewise the GPU's own chunked-vs-single difference (its prefill rounds the activations of
 * weight-only experts to bf16, its single steps do not), but it scales only the 1e-2 limit, at most
 * 4×, never the median: a router near-tie that the two GPU paths resolve apart moves the positions
 * after it by 1e-2..2e-2 (gpu_qwen3moe_FP8_PB_WO, 17 of 120 positions, once the CPU's spread had
 * closed to 1e-3 on 2026-12-07), while a dropped quantizer, scale or norm moves the median.
 * Without a GPU (CI) each GPU test skips with the reason, and opening with device CUDA is checked to
 * fail cleanly instead.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>

#include "tu.h"
#include "model/model_priv.h"
#include "model_gen.h"

enum { L_ = 2, H_ = 256, A_ = 4, KV_ = 2, D_ = 64, I_ = 256, V_ = 128, NPRE = 100, NDEC = 20, NTOT = NPRE + NDEC };
#define TOL 1e-2      /* per position: max over the vocabulary of |gpu - cpu| / max|cpu|            */
#define MEDIAN_TOL 5e-3
#define MAX_TOL 1e-1

#define NEED_GPU() TU_NEED_GPU()

typedef struct spec {
    const char *name, *arch, *algo;
    bool        bias, qk_norm, tied, fp8_kv;
    const char *rope;     /* rope_scaling JSON or NULL */
    int         window;   /* sliding_window (Mistral), 0 = none */
} spec;

/* A 2-layer decoder (test_model.c's shapes) with every linear in `algo`, lm_head BF16. */
static void make_model(const spec *s, const char *dir) {
    gen g = {.rng = 0xC0DA0000u + (uint64_t)strlen(s->name)};
    TU_OK(moq_writer_create(&g.w, dir, err_));
    free(tg_add_bf16(&g, "model.embed_tokens.weight", V_, H_, 1.0, 0));
    for (int l = 0; l < L_; l++) {
        char nm[200], pre[128];
        olin t[3];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        free(tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0));
        snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
        static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"}, *const on[1] = {"o_proj"};
        const int64_t nqkv[3] = {A_ * D_, KV_ * D_, KV_ * D_}, no[1] = {H_};
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, qkv, nqkv, 3, H_, s->algo, s->bias, t);
        for (int i = 0; i < 3; i++) tg_olin_free(&t[i]);
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, on, no, 1, A_ * D_, s->algo, false, t);
        tg_olin_free(&t[0]);
        if (s->qk_norm) {
            snprintf(nm, sizeof nm, "%s.q_norm.weight", pre);
            free(tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0));
            snprintf(nm, sizeof nm, "%s.k_norm.weight", pre);
            free(tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0));
        }
        if (s->fp8_kv) {
            snprintf(nm, sizeof nm, "%s.k_proj.k_scale", pre);
            tg_add_scalar(&g, nm, tg_bf16r(8.0 / 448));
            snprintf(nm, sizeof nm, "%s.v_proj.v_scale", pre);
            tg_add_scalar(&g, nm, tg_bf16r(3.0 / 448));
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        free(tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0));
        snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
        static const char *const gu[2] = {"gate_proj", "up_proj"}, *const dn[1] = {"down_proj"};
        const int64_t ngu[2] = {I_, I_}, nd[1] = {H_};
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, gu, ngu, 2, H_, s->algo, false, t);
        tg_olin_free(&t[0]), tg_olin_free(&t[1]);
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, dn, nd, 1, I_, s->algo, false, t);
        tg_olin_free(&t[0]);
    }
    free(tg_add_bf16(&g, "model.norm.weight", H_, 0, 0.1, 1.0));
    if (!s->tied) {
        static const char *const hn[1] = {"lm_head"};
        const int64_t nh[1] = {V_};
        olin t;
        memset(&t, 0, sizeof t);
        tg_add_linears(&g, "", hn, nh, 1, H_, "BF16", false, &t);
        tg_olin_free(&t);
    }
    char hq[1024], cfg[2048], win[64] = "";
    const bool quant = strcmp(s->algo, "BF16") != 0;
    if (quant || s->fp8_kv) {
        snprintf(hq, sizeof hq,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": {\"quant_algo\": %s%s%s, "
                 "\"kv_cache_quant_algo\": %s, \"group_size\": 16, \"exclude_modules\": [\"lm_head\"]}}",
                 quant ? "\"" : "", quant ? s->algo : "null", quant ? "\"" : "", s->fp8_kv ? "\"FP8\"" : "null");
        TU_OK(moq_writer_file(g.w, "hf_quant_config.json", hq, err_));
    }
    if (s->window) snprintf(win, sizeof win, ", \"sliding_window\": %d", s->window);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"x\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, "
             "\"rope_theta\": 10000.0, \"rope_scaling\": %s, \"tie_word_embeddings\": %s%s}",
             s->arch, H_, I_, L_, A_, KV_, D_, V_, s->rope ? s->rope : "null", s->tied ? "true" : "false", win);
    TU_OK(moq_writer_file(g.w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(g.w, 2, err_));
    moq_writer_free(g.w);
    tg_gen_free(&g);
}

/* tests/data/<rel> of this source tree, or of $MOQ_TEST_SRCDATA (a copy of tests/data elsewhere: the
 * device machine runs binaries built here over a copy of the tree at another path). */
/* A generated checkpoint of s in a fresh directory (*dir, freed by the caller), opened on the GPU
 * with a context of 64. */
static moq_model *gpu_model(const spec *s, char **dir) {
    *dir = tu_tmpdir(s->name);
    make_model(s, *dir);
    moq_model_opts o = moq_model_opts_default();
    o.device = MOQ_DEVICE_CUDA, o.ctx = 64;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, *dir, &o, err_));
    return m;
}

static char *src_data(const char *rel) {
    const char *base = getenv("MOQ_TEST_SRCDATA");
    if (!base || !*base) return tu_src_data_path(rel);
    const size_t n = strlen(base) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", base, rel);
    return p;
}

/* prefill NPRE (every row's logits), then NDEC decode steps: out [NTOT, V]; one_by_one: the prefill
 * too as single-token steps (the GPU's M = 1 path everywhere) */
static void run(const char *dir, moq_device dev, moq_elem kv, const int32_t *ids, int64_t V, float *out, bool one_by_one) {
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 2, o.ctx = NTOT + 8, o.kv_elem = kv, o.device = dev;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    assert_int_equal(moq_model_vocab_size(m), V);
    if (!one_by_one) TU_OK(moq_model_prefill(m, ids, NPRE, out, err_));
    for (int p = one_by_one ? 0 : NPRE; p < NTOT; p++) {
        TU_OK(moq_model_decode(m, ids[p], err_));
        memcpy(out + (size_t)p * (size_t)V, moq_model_logits(m), sizeof(float) * (size_t)V);
    }
    assert_int_equal(moq_model_pos(m), NTOT);
    moq_model_free(m);
}

static int argmax(const float *x, int64_t n, float *second) { /* the first maximum; second (or NULL): the runner-up's value */
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    float s = -INFINITY;
    for (int64_t i = 0; second && i < n; i++)
        if (i != b && x[i] > s) s = x[i];
    if (second) *second = s;
    return b;
}

/* GPU vs CPU over the sequence; a failure is recorded (g_fail) and the next case still runs, so one
 * device run reports every case. */
static char g_fail[4096];
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...) {
    const size_t n = strlen(g_fail);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_fail + n, sizeof g_fail - n, fmt, ap);
    va_end(ap);
    print_message("FAIL %s\n", g_fail + n);
}
static void compare(const char *name, const char *dir, bool fp8_kv, int64_t V) {
    int32_t ids[NTOT];
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < NTOT; i++) st ^= st << 13, st ^= st >> 7, st ^= st << 17, ids[i] = (int32_t)(st % (uint64_t)V);
    const size_t n = (size_t)NTOT * (size_t)V;
    float *c = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *g1 = malloc(sizeof(float) * n), *c1 = malloc(sizeof(float) * n);
    const moq_elem kv = fp8_kv ? MOQ_ELEM_F32 : MOQ_ELEM_BF16; /* an FP8 config overrides it on both */
    run(dir, MOQ_DEVICE_CPU, kv, ids, V, c, false);
    run(dir, MOQ_DEVICE_CUDA, kv, ids, V, g, false);
    run(dir, MOQ_DEVICE_CUDA, kv, ids, V, g1, true);  /* the GPU's M = 1 path at every position */
    run(dir, MOQ_DEVICE_CPU, kv, ids, V, c1, true);   /* the CPU's own chunked-vs-single difference */
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(c[i]));
    double err[NTOT], err1 = 0, self = 0, gself = 0, worst = 0;
    int bad = 0, worst_p = 0;
    for (int p = 0; p < NTOT; p++) {
        err[p] = 0;
        for (int64_t v = 0; v < V; v++) {
            const size_t i = (size_t)p * (size_t)V + (size_t)v;
            if (!isfinite(g[i])) err[p] = INFINITY;
            err[p] = fmax(err[p], fabs((double)g[i] - c[i]) / mx);
            err1 = fmax(err1, fabs((double)g1[i] - c[i]) / mx), self = fmax(self, fabs((double)c1[i] - c[i]) / mx);
            gself = fmax(gself, fabs((double)g1[i] - g[i]) / mx);
        }
        if (err[p] > worst) worst = err[p], worst_p = p;
    }
    /* the CPU reference is defined only to within its own chunked-vs-single spread: where that exceeds
     * TOL / 2, the per-position and median limits scale with it; the GPU's own spread scales the
     * per-position limit only, at most 4× (the file's head) */
    const double sc = fmax(1.0, 2 * self / TOL), sg = fmin(4.0, fmax(1.0, 2 * gself / TOL));
    const double tol = TOL * fmax(sc, sg), med_tol = MEDIAN_TOL * sc;
    for (int p = 0; p < NTOT; p++) bad += err[p] > tol;
    double sorted[NTOT];
    memcpy(sorted, err, sizeof sorted);
    for (int i = 1; i < NTOT; i++) /* insertion sort: the median */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            const double t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    const double median = sorted[NTOT / 2];
    int ties = 0, swaps = 0;
    for (int p = 0; p < NTOT; p++) {
        float s1, s2;
        const int a = argmax(c + (size_t)p * (size_t)V, V, &s1), b = argmax(g + (size_t)p * (size_t)V, V, &s2);
        if (a == b) continue;
        /* logits that differ by at most err[p] · max can swap the argmax only across a gap below twice that */
        if (c[(size_t)p * (size_t)V + (size_t)a] - s1 <= 2 * err[p] * mx) ties++;
        else swaps++;
    }
    print_message("%-28s median %.3g, max %.3g at position %d, %d of %d positions over %.2g, %d near-tie argmax differences; "
                  "single-token steps max %.3g; cpu chunked vs single %.3g, gpu %.3g\n", name, median, worst, worst_p, bad, NTOT, tol, ties, err1, self, gself);
    if (!(median <= med_tol) || bad > NTOT / 10 || !(worst <= MAX_TOL) || swaps) {
        char pl[600] = "";
        for (int p = 0, k = 0; p < NTOT && k < 40; p++)
            if (err[p] > tol) snprintf(pl + strlen(pl), sizeof pl - strlen(pl), " %d:%.2g", p, err[p]), k++;
        record("%s: median %.3g (limit %.2g), %d positions over %.2g (limit %d), max %.3g (limit %.0e), %d argmax swaps beyond the "
               "error; positions over:%s; ", name, median, med_tol, bad, tol, NTOT / 10, worst, MAX_TOL, swaps, pl);
    }
    free(c), free(g), free(g1), free(c1);
}

#define LLAMA "LlamaForCausalLM"
static const spec cases[] = {
    /* name                    arch                  algo                         bias   qkn    tied   fp8kv  rope  window */
    {"gpu_llama_bf16",         LLAMA,                "BF16",                      false, false, false, false, NULL, 0},
    {"gpu_llama_fp8",          LLAMA,                "FP8",                       false, false, false, false, NULL, 0},
    {"gpu_llama_fp8_pcpt",     LLAMA,                "FP8_PER_CHANNEL_PER_TOKEN", false, false, false, false, NULL, 0},
    {"gpu_llama_fp8_pb_wo",    LLAMA,                "FP8_PB_WO",                 false, false, false, false, NULL, 0},
    {"gpu_llama_nvfp4",        LLAMA,                "NVFP4",                     false, false, false, false, NULL, 0},
    {"gpu_llama_w4a16",        LLAMA,                "W4A16_NVFP4",               false, false, false, false, NULL, 0},
    {"gpu_llama_mxfp8",        LLAMA,                "MXFP8",                     false, false, false, false, NULL, 0},
    {"gpu_llama3_rope_fp8kv",  LLAMA,                "FP8",                       false, false, false, true,
     "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}", 0},
    {"gpu_mistral_nvfp4_fp8kv_win", "MistralForCausalLM", "NVFP4",                false, false, false, true,  NULL, 5},
    {"gpu_mistral_bf16_win70", "MistralForCausalLM", "BF16",                      false, false, false, false, NULL, 70},
    {"gpu_mistral_nvfp4_fp8kv", "MistralForCausalLM", "NVFP4",                    false, false, false, true,  NULL, 0},
    {"gpu_mistral_nvfp4_win5", "MistralForCausalLM", "NVFP4",                     false, false, false, false, NULL, 5},
    {"gpu_qwen2_bias_yarn",    "Qwen2ForCausalLM",   "BF16",                      true,  false, false, false,
     "{\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 64}", 0},
    {"gpu_qwen3_qknorm_tied",  "Qwen3ForCausalLM",   "FP8_PER_CHANNEL_PER_TOKEN", false, true,  true,  false, NULL, 0},
};

static void test_generated(void **state) {
    (void)state;
    NEED_GPU();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = tu_tmpdir(cases[i].name);
        make_model(&cases[i], dir);
        compare(cases[i].name, dir, cases[i].fp8_kv, V_);
        tu_rmtree(dir);
        free(dir);
    }
    if (g_fail[0]) fail_msg("%s", g_fail);
}

/* A 2-layer MoE decoder: Qwen3-MoE (q/k norms, mlp.gate + mlp.experts.e.{gate,up,down}_proj) or Mixtral
 * (block_sparse_moe.gate + experts.e.{w1,w3,w2}), 8 experts of intermediate I_, top-2 renormalized,
 * attention and experts in `algo`, router and lm_head BF16. Gate and up of each expert are quantized
 * apart (their own global / per-tensor scales), so the GPU must keep their alphas separate. */
enum { ME_ = 8, MK_ = 2 };
static void make_moe_model(const char *arch, const char *algo, uint64_t seed, const char *dir) {
    const bool mixtral = strstr(arch, "Mixtral") != NULL;
    const char *blk = mixtral ? "block_sparse_moe" : "mlp";
    gen g = {.rng = seed};
    TU_OK(moq_writer_create(&g.w, dir, err_));
    free(tg_add_bf16(&g, "model.embed_tokens.weight", V_, H_, 1.0, 0));
    for (int l = 0; l < L_; l++) {
        char nm[200], pre[160];
        olin t[3];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        free(tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0));
        snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
        static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"}, *const on[1] = {"o_proj"};
        const int64_t nqkv[3] = {A_ * D_, KV_ * D_, KV_ * D_}, no[1] = {H_};
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, qkv, nqkv, 3, H_, algo, false, t);
        for (int i = 0; i < 3; i++) tg_olin_free(&t[i]);
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, on, no, 1, A_ * D_, algo, false, t);
        tg_olin_free(&t[0]);
        if (!mixtral) {
            snprintf(nm, sizeof nm, "%s.q_norm.weight", pre);
            free(tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0));
            snprintf(nm, sizeof nm, "%s.k_norm.weight", pre);
            free(tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0));
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        free(tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0));
        snprintf(nm, sizeof nm, "model.layers.%d.%s.gate.weight", l, blk);
        free(tg_add_bf16(&g, nm, ME_, H_, 0.5, 0));
        for (int e = 0; e < ME_; e++) {
            static const char *const qn[3] = {"gate_proj", "up_proj", "down_proj"}, *const mn[3] = {"w1", "w3", "w2"};
            snprintf(pre, sizeof pre, "model.layers.%d.%s.experts.%d", l, blk, e);
            for (int j = 0; j < 3; j++) {
                const char *const nmj[1] = {mixtral ? mn[j] : qn[j]};
                const int64_t n1[1] = {j == 2 ? H_ : I_};
                memset(t, 0, sizeof t);
                tg_add_linears(&g, pre, nmj, n1, 1, j == 2 ? I_ : H_, algo, false, t);
                tg_olin_free(&t[0]);
            }
        }
    }
    free(tg_add_bf16(&g, "model.norm.weight", H_, 0, 0.1, 1.0));
    static const char *const hn[1] = {"lm_head"};
    const int64_t nh[1] = {V_};
    olin th;
    memset(&th, 0, sizeof th);
    tg_add_linears(&g, "", hn, nh, 1, H_, "BF16", false, &th);
    tg_olin_free(&th);
    char hq[1024], cfg[2048];
    if (strcmp(algo, "BF16") != 0) {
        snprintf(hq, sizeof hq,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": {\"quant_algo\": \"%s\", "
                 "\"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [\"lm_head\", \"*%s.gate\"]}}", algo, blk);
        TU_OK(moq_writer_file(g.w, "hf_quant_config.json", hq, err_));
    }
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"x\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"moe_intermediate_size\": %d, \"%s\": %d, \"num_experts_per_tok\": %d, \"norm_topk_prob\": true, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}",
             arch, H_, 2 * I_, I_, mixtral ? "num_local_experts" : "num_experts", ME_, MK_, L_, A_, KV_, D_, V_);
    TU_OK(moq_writer_file(g.w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(g.w, 1, err_));
    moq_writer_free(g.w);
    tg_gen_free(&g);
}

/* Generated MoE models, every expert format the GPU runs: GPU vs CPU as the dense ones. */
static void test_generated_moe(void **state) {
    (void)state;
    NEED_GPU();
    g_fail[0] = 0;
    static const struct { const char *arch, *algo; } mc[] = {
        {"Qwen3MoeForCausalLM", "NVFP4"}, {"Qwen3MoeForCausalLM", "FP8"}, {"Qwen3MoeForCausalLM", "FP8_PER_CHANNEL_PER_TOKEN"},
        {"Qwen3MoeForCausalLM", "FP8_PB_WO"}, {"Qwen3MoeForCausalLM", "W4A16_NVFP4"}, {"Qwen3MoeForCausalLM", "MXFP8"},
        {"Qwen3MoeForCausalLM", "BF16"}, {"MixtralForCausalLM", "NVFP4"}, {"MixtralForCausalLM", "FP8"},
    };
    for (size_t i = 0; i < sizeof mc / sizeof mc[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "gpu_%s_%s", strstr(mc[i].arch, "Mixtral") ? "mixtral" : "qwen3moe", mc[i].algo);
        char *dir = tu_tmpdir("gpu_moe");
        make_moe_model(mc[i].arch, mc[i].algo, 0x30E0000u + i, dir);
        compare(name, dir, false, V_);
        tu_rmtree(dir);
        free(dir);
    }
    if (g_fail[0]) fail_msg("%s", g_fail);
}

/* NVIDIA's real ModelOpt 0.47 exports (tests/data/modelopt_real): the Llama and Qwen3-MoE ones run on the
 * GPU; the AWQ one and gpt-oss (attention sinks) are refused by name. */
static void test_modelopt_real(void **state) {
    (void)state;
    NEED_GPU();
    g_fail[0] = 0;
    static const struct { const char *name; bool fp8_kv; } ok[] = {
        {"llama_fp8", false}, {"llama_fp8_kv", true}, {"llama_fp8_kv_cast", true}, {"llama_fp8_pb_wo", false},
        {"llama_fp8_pc_pt", false}, {"llama_mxfp8", false}, {"llama_nvfp4", false}, {"llama_w4a16_nvfp4", false},
        {"qwen3moe_fp8", false}, {"qwen3moe_fp8_pb_wo", false}, {"qwen3moe_fp8_pc_pt", false}, {"qwen3moe_nvfp4", false},
    };
    char rel[128];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(rel, sizeof rel, "modelopt_real/%s", ok[i].name);
        char *dir = src_data(rel);
        compare(ok[i].name, dir, ok[i].fp8_kv, 320);
        free(dir);
    }
    if (g_fail[0]) fail_msg("%s", g_fail);
    static const struct { const char *name, *why; } refused[] = {{"llama_nvfp4_awq", "pre_quant_scale"}, {"gpt_oss_fp8", "attention sinks"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(rel, sizeof rel, "modelopt_real/%s", refused[i].name);
        char *dir = src_data(rel);
        moq_model_opts o = moq_model_opts_default();
        o.device = MOQ_DEVICE_CUDA, o.ctx = 64;
        moq_model *m = NULL;
        moq_error e;
        assert_int_equal(moq_model_open(&m, dir, &o, &e), MOQ_ERR_UNSUPPORTED);
        assert_null(m);
        if (!strstr(e.msg, refused[i].why)) fail_msg("%s: %s: %s, expected it to name %s", refused[i].name, e.where, e.msg, refused[i].why);
        free(dir);
    }
}

/* The model's own layers, one at a time: each linear of layer 0 (fused qkv of 3 shards and gate_up of
 * 2, single o and down) opened on the CPU and on the GPU from the same checkpoint and run on the same
 * x (M = 1 and 100); the quantized pairs' activation codes are bit-exact, so only summation order
 * and the bf16 rounding of unquantized activations separate them: limit 1e-2 relative. */
static void test_model_linears(void **state) {
    (void)state;
    NEED_GPU();
    g_fail[0] = 0;
    static const char *const algos[] = {"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "MXFP8", "BF16"};
    static const char *const qkv[] = {"q_proj", "k_proj", "v_proj"}, *const gu[] = {"gate_proj", "up_proj"};
    const moq_packed packed[2] = {{"qkv_proj", qkv, 3}, {"gate_up_proj", gu, 2}};
    static const char *const mods[] = {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"};
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        const spec sp = {"gpu_lin", LLAMA, algos[a], false, false, false, false, NULL, 0};
        char *dir = tu_tmpdir(sp.name);
        make_model(&sp, dir);
        moq_checkpoint *ck = NULL;
        moq_qconfig *q = NULL;
        TU_OK(moq_checkpoint_open(&ck, dir, NULL, err_));
        if (strcmp(algos[a], "BF16") != 0) TU_OK(moq_qconfig_open(&q, dir, MOQ_COMPAT_MOQ, err_));
        for (size_t mi = 0; mi < sizeof mods / sizeof mods[0]; mi++) {
            char pre[128];
            snprintf(pre, sizeof pre, "model.layers.0.%s", mods[mi]);
            moq_linear_opts oc = moq_linear_opts_default(), og = oc;
            og.device = MOQ_DEVICE_CUDA;
            moq_linear_layer *lc = NULL, *lg = NULL;
            TU_OK(moq_linear_layer_open(&lc, ck, q, pre, MOQ_KIND_LINEAR, packed, 2, &oc, err_));
            TU_OK(moq_linear_layer_open(&lg, ck, q, pre, MOQ_KIND_LINEAR, packed, 2, &og, err_));
            const moq_linear *c = moq_linear_layer_linear(lc), *g = moq_linear_layer_linear(lg);
            const int64_t K = strstr(mods[mi], "o_proj") ? A_ * D_ : strstr(mods[mi], "down") ? I_ : H_;
            const int64_t N = strstr(mods[mi], "qkv") ? (A_ + 2 * KV_) * D_ : strstr(mods[mi], "gate_up") ? 2 * I_ : H_;
            static const int64_t Ms[2] = {1, 100};
            for (int k = 0; k < 2; k++) {
                const int64_t M = Ms[k];
                float *x = malloc(sizeof(float) * (size_t)(M * K)), *yc = malloc(sizeof(float) * (size_t)(M * N)), *yg = malloc(sizeof(float) * (size_t)(M * N));
                uint64_t st = 12345u + (uint64_t)k;
                for (int64_t i = 0; i < M * K; i++) x[i] = (float)(2.0 * tg_uni(&st) - 1.0) * 3.0f;
                const size_t wc = moq_linear_workspace_size(c, M), wg = moq_linear_workspace_size(g, M);
                void *wsc = malloc(wc), *xd = NULL, *yd = NULL, *wsd = NULL;
                TU_OK(moq_linear_run(c, x, MOQ_ELEM_F32, M, yc, MOQ_ELEM_F32, wsc, wc, err_));
                TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, sizeof(float) * (size_t)(M * K), &xd, err_));
                TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, sizeof(float) * (size_t)(M * N), &yd, err_));
                TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, wg, &wsd, err_));
                TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, xd, x, sizeof(float) * (size_t)(M * K), err_));
                TU_OK(moq_linear_run(g, xd, MOQ_ELEM_F32, M, yd, MOQ_ELEM_F32, wsd, wg, err_));
                TU_OK(moq_device_download(MOQ_DEVICE_CUDA, yg, yd, sizeof(float) * (size_t)(M * N), err_));
                double mx = 0, d = 0;
                int64_t worst = 0;
                for (int64_t i = 0; i < M * N; i++) {
                    mx = fmax(mx, fabs(yc[i]));
                    if (fabs((double)yg[i] - yc[i]) > d) d = fabs((double)yg[i] - yc[i]), worst = i;
                }
                print_message("%-26s %-20s M=%-3lld %-34s %-34s rel %.3g (worst row %lld col %lld: gpu %.6g cpu %.6g)\n", algos[a], mods[mi],
                              (long long)M, moq_linear_kernel_name(c), moq_linear_kernel_name(g), d / mx, (long long)(worst / N),
                              (long long)(worst % N), (double)yg[worst], (double)yc[worst]);
                if (!(d / mx <= 1e-2)) record("%s %s M=%lld: rel %.3g; ", algos[a], mods[mi], (long long)M, d / mx);
                moq_device_free(MOQ_DEVICE_CUDA, xd), moq_device_free(MOQ_DEVICE_CUDA, yd), moq_device_free(MOQ_DEVICE_CUDA, wsd);
                free(x), free(yc), free(yg), free(wsc);
            }
            moq_linear_layer_free(lc), moq_linear_layer_free(lg);
        }
        moq_qconfig_free(q);
        moq_checkpoint_free(ck);
        tu_rmtree(dir);
        free(dir);
    }
    if (g_fail[0]) fail_msg("%s", g_fail);
}

/* Batched decode: 3 sequence slots of different lengths (10, 25, 3 tokens of prefill, a window of 9
 * crossed by two of them, FP8 KV) advanced together for 6 steps, in an order other than the slots';
 * each slot's logits must be those the sequence gets alone through the public API (slot 0). Each
 * token cuts its own key span, and a row's GEMV sums do not depend on the other rows, so on the H200
 * they are equal bit for bit; the limit is 1e-3 relative and the same greedy token. */
static void test_batched_decode(void **state) {
    (void)state;
    NEED_GPU();
    enum { B = 3, STEPS = 6 };
    static const spec s = {"gpu_batch", "MistralForCausalLM", "FP8", false, false, false, true, NULL, 9};
    char *dir = NULL;
    moq_model *m = gpu_model(&s, &dir);
    TU_OK(moq_gpu_reserve_seqs(m, B, err_));
    const int len[B] = {10, 25, 3};
    int32_t ids[B][32];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 32; i++) ids[b][i] = (int32_t)((i * 37 + b * 11 + 5) % V_);
    float *lg = malloc(sizeof(float) * V_), *got = malloc(sizeof(float) * B * STEPS * V_), *step = malloc(sizeof(float) * B * V_);
    for (int b = 0; b < B; b++) TU_OK(moq_gpu_prefill_slot(m, b, ids[b], len[b], 0, lg, err_));
    static const int32_t order[B] = {2, 0, 1};
    for (int t = 0; t < STEPS; t++) {
        int32_t tok[B], pos[B];
        for (int j = 0; j < B; j++) tok[j] = ids[order[j]][len[order[j]] + t], pos[j] = len[order[j]] + t;
        TU_OK(moq_gpu_decode_batch(m, B, order, tok, pos, step, err_));
        for (int j = 0; j < B; j++) memcpy(got + ((size_t)order[j] * STEPS + (size_t)t) * V_, step + (size_t)j * V_, sizeof(float) * V_);
    }
    const int32_t dup[2] = {1, 1}, tk[2] = {0, 0}, ps[2] = {30, 30};
    moq_error e;
    assert_int_equal(moq_gpu_decode_batch(m, 2, dup, tk, ps, step, &e), MOQ_ERR_INVALID_ARG);
    double worst = 0;
    for (int b = 0; b < B; b++) {
        moq_model_reset(m);
        TU_OK(moq_model_prefill(m, ids[b], len[b], NULL, err_));
        for (int t = 0; t < STEPS; t++) {
            TU_OK(moq_model_decode(m, ids[b][len[b] + t], err_));
            const float *ref = moq_model_logits(m), *g = got + ((size_t)b * STEPS + (size_t)t) * V_;
            double mx = 0, d = 0;
            int ar = 0, ag = 0;
            for (int v = 0; v < V_; v++) {
                mx = fmax(mx, fabs(ref[v])), d = fmax(d, fabs((double)g[v] - ref[v]));
                if (ref[v] > ref[ar]) ar = v;
                if (g[v] > g[ag]) ag = v;
            }
            worst = fmax(worst, d / mx);
            if (!(d / mx <= 1e-3) || ar != ag)
                fail_msg("slot %d step %d: batched logits off by %.3g of max (limit 1e-3), greedy %d vs alone %d", b, t, d / mx, ag, ar);
        }
    }
    print_message("batched decode of %d slots x %d steps: max rel difference to each alone %.3g\n", B, STEPS, worst);
    free(lg), free(got), free(step);
    moq_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

/* The public batch API (moq_batch, what `moq serve` runs) on the GPU: 4 sequences (prompts of 10,
 * 25, 3 and 40 tokens, a window of 9, FP8 KV, pages of 8 positions) join at different runs, their
 * prompts fed in chunks of up to 16 tokens inside runs that also advance the others by one token
 * (mixed runs: the eager path, logits rows gathered), then runs of one token each (decode steps:
 * replayed CUDA graphs, a graph per row count as sequences join and finish). Every logits vector
 * of every sequence must be the one the sequence gets alone through moq_model_prefill/decode
 * (the model's own pool): limit 1e-3 of max|logit| and the same greedy token, as test_batched_decode.
 * The pool's page size in bytes is checked against 2 · layers · page · KV heads · head_dim · 1 (e4m3). */
static void test_batch_api(void **state) {
    (void)state;
    NEED_GPU();
    enum { NS = 4, STEPS = 7, PAGE = 8, CH = 16 };
    static const spec s = {"gpu_batch_api", "MistralForCausalLM", "FP8", false, false, false, true, NULL, 9};
    char *dir = NULL;
    moq_model *m = gpu_model(&s, &dir);
    static const int len[NS] = {10, 25, 3, 40}, start[NS] = {0, 0, 1, 2};
    int32_t ids[NS][64];
    for (int b = 0; b < NS; b++)
        for (int i = 0; i < 64; i++) ids[b][i] = (int32_t)((i * 29 + b * 13 + 7) % V_);
    float *ref = malloc(sizeof(float) * NS * (STEPS + 1) * V_), *got = malloc(sizeof(float) * NS * V_);
    for (int b = 0; b < NS; b++) { /* alone, before the batch exists (moq.h: no moq_model_prefill while a batch lives) */
        moq_model_reset(m);
        TU_OK(moq_model_prefill(m, ids[b], len[b], NULL, err_));
        memcpy(ref + (size_t)b * (STEPS + 1) * V_, moq_model_logits(m), sizeof(float) * V_);
        for (int t = 0; t < STEPS; t++) {
            TU_OK(moq_model_decode(m, ids[b][len[b] + t], err_));
            memcpy(ref + ((size_t)b * (STEPS + 1) + (size_t)t + 1) * V_, moq_model_logits(m), sizeof(float) * V_);
        }
    }
    moq_batch_opts bo = moq_batch_opts_default();
    bo.page_tokens = PAGE, bo.max_rows = NS;
    moq_batch *bt = NULL;
    TU_OK(moq_batch_create(&bt, m, &bo, err_));
    assert_int_equal(moq_batch_page_bytes(bt), 2ull * L_ * PAGE * KV_ * D_);
    moq_seq *sq[NS];
    int fed[NS] = {0};
    for (int b = 0; b < NS; b++) TU_OK(moq_seq_create(&sq[b], bt, err_));
    double worst = 0;
    int checked = 0, graphs_runs = 0;
    for (int run = 0;; run++) {
        moq_batch_item it[NS];
        int n = 0, who[NS];
        bool all_one = true;
        for (int b = 0; b < NS; b++) {
            if (run < start[b] || fed[b] == len[b] + STEPS) continue;
            const int k = fed[b] < len[b] ? (len[b] - fed[b] < CH ? len[b] - fed[b] : CH) : 1;
            const bool last = fed[b] + k >= len[b];
            it[n] = (moq_batch_item){sq[b], &ids[b][fed[b]], k, last ? got + (size_t)b * V_ : NULL, NULL};
            all_one = all_one && k == 1, who[n++] = b;
        }
        if (n == 0) break;
        TU_OK(moq_batch_run(bt, it, n, err_));
        graphs_runs += all_one;
        for (int j = 0; j < n; j++) {
            const int b = who[j];
            fed[b] += (int)it[j].n;
            assert_int_equal(moq_seq_pos(sq[b]), fed[b]);
            if (!it[j].logits) continue;
            const float *r = ref + ((size_t)b * (STEPS + 1) + (size_t)(fed[b] - len[b])) * V_, *g = got + (size_t)b * V_;
            double mx = 0, d = 0;
            int ar = 0, ag = 0;
            for (int v = 0; v < V_; v++) {
                mx = fmax(mx, fabs(r[v])), d = fmax(d, fabs((double)g[v] - r[v]));
                if (r[v] > r[ar]) ar = v;
                if (g[v] > g[ag]) ag = v;
            }
            worst = fmax(worst, d / mx), checked++;
            if (!(d / mx <= 1e-3) || ar != ag)
                fail_msg("sequence %d after %d tokens (run %d, %d items): batch logits off by %.3g of max (limit 1e-3), greedy %d vs alone %d", b,
                         fed[b], run, n, d / mx, ag, ar);
        }
    }
    assert_int_equal(checked, NS * (STEPS + 1));
    assert_true(graphs_runs >= 3);
    print_message("moq_batch on the GPU: %d logits vectors of %d sequences (%d one-token runs), max rel difference to each alone %.3g\n", checked,
                  NS, graphs_runs, worst);
    for (int b = 0; b < NS; b++) moq_seq_free(sq[b]);
    assert_int_equal(moq_batch_pages_free(bt), moq_batch_pages_total(bt));
    moq_batch_free(bt);
    free(ref), free(got);
    moq_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

/* Greedy ids on the GPU: 5 sequences, 6 decode steps, three ways on fresh batches of the same model:
 * logits rows to the host and the argmax here; moq_batch_step_greedy (every row wants ids only: the
 * step's graph, then moq_cuda_argmax_rows and 8 bytes a row down, MOQ_CUDA_ARGMAX=1 set in main); runs mixing rows that want
 * logits, ids or both (the logits come down, the ids are found on the host). The GPU is
 * deterministic run to run, so the three must give the same ids, and ids asked with logits must be
 * the logits' argmax. */
static void test_batch_greedy(void **state) {
    (void)state;
    NEED_GPU();
    enum { NB = 5, STEPS = 6 };
    static const spec s = {"gpu_batch_greedy", LLAMA, "FP8", false, false, false, false, NULL, 0};
    char *dir = NULL;
    moq_model *m = gpu_model(&s, &dir);
    float *lg = malloc(sizeof(float) * NB * V_);
    int32_t got_ids[3][STEPS][NB];
    for (int way = 0; way < 3; way++) {
        moq_batch_opts bo = moq_batch_opts_default();
        bo.max_rows = NB;
        moq_batch *bt = NULL;
        TU_OK(moq_batch_create(&bt, m, &bo, err_));
        moq_seq *sq[NB];
        int32_t tok[NB];
        for (int b = 0; b < NB; b++) {
            const int32_t prompt[4] = {(int32_t)(13 * b + 1) % V_, (int32_t)(7 * b + 3) % V_, (int32_t)(5 * b + 2) % V_, 9};
            TU_OK(moq_seq_create(&sq[b], bt, err_));
            TU_OK(moq_seq_prefill(bt, sq[b], prompt, 1 + b % 4, lg, err_));
            tok[b] = argmax(lg, V_, NULL);
        }
        for (int k = 0; k < STEPS; k++) {
            if (way == 0) {
                TU_OK(moq_batch_step(bt, sq, tok, NB, lg, err_));
                for (int b = 0; b < NB; b++) tok[b] = argmax(lg + (size_t)b * V_, V_, NULL);
            } else if (way == 1) {
                TU_OK(moq_batch_step_greedy(bt, sq, tok, NB, tok, err_));
            } else {
                moq_batch_item it[NB];
                int32_t g[NB];
                for (int b = 0; b < NB; b++) {
                    const int w = (b + k) % 3; /* 0: logits, 1: ids, 2: both */
                    g[b] = -1;
                    it[b] = (moq_batch_item){sq[b], &tok[b], 1, w != 1 ? lg + (size_t)b * V_ : NULL, w != 0 ? &g[b] : NULL};
                }
                TU_OK(moq_batch_run(bt, it, NB, err_));
                for (int b = 0; b < NB; b++) {
                    const int w = (b + k) % 3;
                    if (w == 2) assert_int_equal(g[b], argmax(lg + (size_t)b * V_, V_, NULL));
                    tok[b] = w == 0 ? argmax(lg + (size_t)b * V_, V_, NULL) : g[b];
                }
            }
            memcpy(got_ids[way][k], tok, sizeof tok);
        }
        for (int b = 0; b < NB; b++) moq_seq_free(sq[b]);
        moq_batch_free(bt);
    }
    for (int k = 0; k < STEPS; k++)
        for (int b = 0; b < NB; b++)
            if (got_ids[1][k][b] != got_ids[0][k][b] || got_ids[2][k][b] != got_ids[0][k][b])
                fail_msg("step %d sequence %d: logits + argmax %d, greedy step %d, mixed run %d", k, b, got_ids[0][k][b], got_ids[1][k][b],
                         got_ids[2][k][b]);
    free(lg);
    moq_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

/* Without a GPU (or without CUDA in the build) device CUDA is refused at open, nothing leaks. */
static void test_no_gpu(void **state) {
    (void)state;
    const char *gpu_info;
    if (tu_have_gpu(&gpu_info)) {
        print_message("skipped: a GPU is present (%s)\n", gpu_info);
        skip();
    }
    static const spec s = {"gpu_nogpu", LLAMA, "BF16", false, false, false, false, NULL, 0};
    char *dir = tu_tmpdir(s.name);
    make_model(&s, dir);
    moq_model_opts o = moq_model_opts_default();
    o.device = MOQ_DEVICE_CUDA;
    moq_model *m = NULL;
    moq_error e;
    assert_int_equal(moq_model_open(&m, dir, &o, &e), MOQ_ERR_UNSUPPORTED);
    assert_null(m);
    assert_true(strstr(e.msg, "CUDA") || strstr(e.msg, "GPU") || strstr(e.msg, "cuda") || strstr(e.msg, "device"));
    o.device = (moq_device)7;
    assert_int_equal(moq_model_open(&m, dir, &o, &e), MOQ_ERR_INVALID_ARG);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    setenv("MOQ_CUDA_ARGMAX", "1", 0); /* test_batch_greedy: ids-only rows through moq_cuda_argmax_rows (off by default until run) */
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_no_gpu),
        cmocka_unit_test(test_model_linears),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_generated_moe),
        cmocka_unit_test(test_modelopt_real),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_batch_api),
        cmocka_unit_test(test_batch_greedy),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
