/* test_model.c — the model runner (src/model/) end to end on tiny generated checkpoints.
 *
 * Each case writes a 2-layer decoder (H 256, 4 heads of 64, 2 KV heads, I 256, V 128; dims that
 * every scheme accepts, FP8_PB_WO's 128-row shards included; MoE cases: 4 experts of I 128, top 2,
 * softmax routing with or without renormalization) with deterministic random bf16
 * weights, exported per format with quant/export_ref.c (ModelOpt's exporter, tested on its own in
 * tests/quant/) through moq_writer. The oracle is a naive fp64 forward written here: it decodes
 * the checkpoint codes with its own e4m3/e2m1/e8m0 formulas (NUMERICS §1), quantizes activations
 * with its own restatement of each runtime quantizer (§2.4, §4.3, §5.1-§5.3) and the FP8 KV cache
 * (§8), and computes RoPE from transformers' formulas. No expected value comes from moq.
 *
 * Tolerance (max |logit - ref| / max |ref|), per case below, and why:
 *   unquantized activations (BF16, W4A16): f32 arithmetic vs fp64 over 256-term sums through 2
 *     layers: measured <= 1e-6; limit 2e-5.
 *   quantized activations (FP8*, NVFP4, MXFP8, FP8 KV): measured <= 1e-6 as well (no code
 *     flipped), but moq's f32 activation may land on the other side of a rounding boundary than
 *     the fp64 one on another CPU path (AVX2/AVX-512/ref sum in different orders): one flipped
 *     e4m3 code moves one of 256 products by 1/16, i.e. ~2e-4 of a layer output; limit 2e-3
 *     allows a few. Skipping the activation or KV quantization in the oracle moves logits by
 *     1.3e-2 to 1.6e-1 (checked by mutating the oracle), so the limits catch a runner that
 *     skipped or misplaced a quantizer, a scale, a shard, the rope or the mask.
 * Greedy decoding must give identical tokens across runs and across 1 vs 2 threads.
 * Per-layer config keys (layout): sliding windows (Mistral, Qwen2) and Qwen3-MoE dense layers; the
 * oracle restates transformers' per-layer rules (layer_rules), and each windowed case must also
 * miss the oracle run with the neighbouring windows (W - 1, W + 1, none) by more than its limit.
 */
#include <math.h>
#include <stdbool.h>

#include "tu.h"
#include "format/format.h"
#include "model_gen.h"
#include "quant/export_ref.h"

enum { L_ = 2, LMAX = 3, H_ = 256, A_ = 4, KV_ = 2, D_ = 64, I_ = 256, V_ = 128, NTOK = 7, NPRE = 4, E_ = 4, TOPK = 2, IE_ = 128 };

/* ---- generated model ------------------------------------------------------------------------- */
typedef struct spec {
    const char *name;
    const char *arch;
    const char *attn_algo, *mlp_algo, *head_algo; /* "BF16" = unquantized                 */
    bool        bias, qk_norm, tied, fp8_kv, kv_scales;
    const char *rope;           /* config.json "rope_scaling" value                        */
    double      tol;
    bool        moe;            /* E_ routed experts, top TOPK, in place of the MLP           */
    bool        norm_topk;      /* config.json norm_topk_prob                               */
} spec;

/* Per-layer config.json keys of a case (NULL layout: L_ layers, none of these keys written).
 * The oracle applies transformers' rules to them itself (layer_rules below). */
typedef struct layout {
    int         n_layers;           /* 0 = L_                                                */
    const char *sliding_window;     /* JSON value text ("3", "null"), NULL = key absent      */
    const char *use_sliding_window; /* "true" / "false" / NULL (Qwen2)                       */
    const char *max_window_layers;  /* "1" / NULL (Qwen2; Qwen2Config default 28)            */
    int         sparse_step;        /* decoder_sparse_step, 0 = absent (Qwen3-MoE)           */
    unsigned    mlp_only_layers;    /* bit l: l listed in mlp_only_layers; 0 = key absent     */
} layout;

typedef struct oracle {
    double *emb;                /* [V, H] */
    int     L;                  /* layers                                                  */
    double *in_norm[LMAX], *post_norm[LMAX], *q_norm[LMAX], *k_norm[LMAX], *final_norm;
    olin    q[LMAX], k[LMAX], v[LMAX], o[LMAX], gate[LMAX], up[LMAX], down[LMAX], head;
    int     window[LMAX];       /* sliding window of layer l in positions, 0 = full causal   */
    bool    moe_l[LMAX];        /* layer l has routed experts                              */
    bool    norm_topk;
    olin    router[LMAX], eg[LMAX][E_], eu[LMAX][E_], ed[LMAX][E_];
    double  k_scale, v_scale;
    bool    fp8_kv, qk_norm, kv_bf16;
    double  inv_freq[D_ / 2], mscale;
} oracle;

/* HF's rope frequencies, restated (transformers modeling_rope_utils.py). */
static void oracle_rope(oracle *o, const char *type, double theta, double factor) {
    const int d = D_;
    for (int i = 0; i < d / 2; i++) o->inv_freq[i] = pow(theta, -2.0 * i / d);
    o->mscale = 1;
    if (strcmp(type, "llama3") == 0) { /* low 1, high 4, original 64 (below) */
        const double old = 64, lw = old / 1.0, hw = old / 4.0;
        for (int i = 0; i < d / 2; i++) {
            const double f = o->inv_freq[i], wl = 2 * M_PI / f;
            if (wl > lw) o->inv_freq[i] = f / factor;
            else if (wl >= hw) {
                const double sm = (old / wl - 1.0) / (4.0 - 1.0);
                o->inv_freq[i] = (1 - sm) * f / factor + sm * f;
            }
        }
    } else if (strcmp(type, "yarn") == 0) { /* beta_fast 32, beta_slow 1, original 64 */
        const double old = 64;
        double lo = floor(d * log(old / (32 * 2 * M_PI)) / (2 * log(theta)));
        double hi = ceil(d * log(old / (1 * 2 * M_PI)) / (2 * log(theta)));
        if (lo < 0) lo = 0;
        if (hi > d - 1) hi = d - 1;
        for (int i = 0; i < d / 2; i++) {
            double r = (i - lo) / (hi - lo);
            r = r < 0 ? 0 : r > 1 ? 1 : r;
            const double f = o->inv_freq[i];
            o->inv_freq[i] = f / factor * r + f * (1 - r);
        }
        o->mscale = 0.1 * log(factor) + 1;
    }
}

/* Writes the checkpoint of `s` into dir and builds the oracle. */
/* transformers' per-layer decisions, restated from the modeling/config code (not from moq):
 *   Mistral/Mixtral: every layer attends over the last sliding_window keys when it is set
 *     (MistralConfig default 4096, longer than any test context).
 *   Qwen2: Qwen2Config.layer_types[i] = "sliding_attention" iff use_sliding_window (else
 *     sliding_window is None) and i >= max_window_layers.
 *   Qwen3-MoE: Qwen3MoeDecoderLayer uses the sparse block iff i not in mlp_only_layers,
 *     num_experts > 0 and (i + 1) % decoder_sparse_step == 0, else Qwen3MoeMLP(intermediate_size). */
static void layer_rules(const spec *s, const layout *y, oracle *o) {
    for (int l = 0; l < o->L; l++) {
        o->moe_l[l] = s->moe;
        o->window[l] = 0;
        if (!y) continue;
        const int w = y->sliding_window ? atoi(y->sliding_window) : 0; /* "null" -> 0 */
        const bool use = y->use_sliding_window && strcmp(y->use_sliding_window, "true") == 0;
        if (strstr(s->arch, "Mistral") || strstr(s->arch, "Mixtral")) o->window[l] = w;
        if (strstr(s->arch, "Qwen2") && use && l >= (y->max_window_layers ? atoi(y->max_window_layers) : 28)) o->window[l] = w;
        if (s->moe && y->sparse_step > 0 && (l + 1) % y->sparse_step) o->moe_l[l] = false;
        if (s->moe && (y->mlp_only_layers >> l & 1u)) o->moe_l[l] = false;
    }
}

/* config.json RoPE keys of a case: NULL = "rope_theta": 10000.0, "rope_scaling": <spec rope>;
 * else this text (transformers 5 "rope_parameters", or nothing at all), and the theta the oracle
 * uses for it. */
static const char *g_rope_cfg = NULL;
static double g_theta = 10000.0;
static unsigned g_kv_scale_layers = ~0u; /* bit l: layer l gets k_scale / v_scale tensors (fp8_kv, kv_scales) */

static void make_model_x(const spec *s, const layout *y, const char *dir, oracle *o, uint64_t seed) {
    gen g = {.rng = seed};
    memset(o, 0, sizeof *o);
    o->L = y && y->n_layers ? y->n_layers : L_;
    layer_rules(s, y, o);
    TU_OK(moq_writer_create(&g.w, dir, err_));
    o->emb = tg_add_bf16(&g, "model.embed_tokens.weight", V_, H_, 1.0, 0);
    o->qk_norm = s->qk_norm;
    for (int l = 0; l < o->L; l++) {
        char nm[200], pre[128];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        o->in_norm[l] = tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0);
        snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
        static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t nqkv[3] = {A_ * D_, KV_ * D_, KV_ * D_};
        olin t[3];
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, qkv, nqkv, 3, H_, s->attn_algo, s->bias, t);
        o->q[l] = t[0], o->k[l] = t[1], o->v[l] = t[2];
        static const char *const on[1] = {"o_proj"};
        const int64_t no[1] = {H_};
        tg_add_linears(&g, pre, on, no, 1, A_ * D_, s->attn_algo, false, &o->o[l]);
        if (s->qk_norm) {
            snprintf(nm, sizeof nm, "%s.q_norm.weight", pre);
            o->q_norm[l] = tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0);
            snprintf(nm, sizeof nm, "%s.k_norm.weight", pre);
            o->k_norm[l] = tg_add_bf16(&g, nm, D_, 0, 0.1, 1.0);
        }
        if (s->fp8_kv && !s->kv_scales) o->k_scale = o->v_scale = 1.0; /* ModelOpt's fp8_cast: no tensors, scale 1 */
        if (s->fp8_kv && s->kv_scales && (g_kv_scale_layers >> l & 1)) {
            o->k_scale = tg_bf16r(8.0 / 448), o->v_scale = tg_bf16r(3.0 / 448);
            snprintf(nm, sizeof nm, "%s.k_proj.k_scale", pre);
            tg_add_scalar(&g, nm, (float)o->k_scale);
            snprintf(nm, sizeof nm, "%s.v_proj.v_scale", pre);
            tg_add_scalar(&g, nm, (float)o->v_scale);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        o->post_norm[l] = tg_add_bf16(&g, nm, H_, 0, 0.1, 1.0);
        if (o->moe_l[l]) { /* Mixtral: block_sparse_moe.experts.e.{w1,w3,w2}; Qwen3-MoE: mlp.experts.e.{gate,up,down}_proj */
            const bool mx = strstr(s->arch, "Mixtral") != NULL;
            static const char *const rn[1] = {"gate"};
            const int64_t nr[1] = {E_};
            snprintf(pre, sizeof pre, "model.layers.%d.%s", l, mx ? "block_sparse_moe" : "mlp");
            tg_add_linears(&g, pre, rn, nr, 1, H_, "BF16", false, &o->router[l]);
            for (int e = 0; e < E_; e++) {
                static const char *const gmx[2] = {"w1", "w3"}, *const gq[2] = {"gate_proj", "up_proj"};
                static const char *const dmx[1] = {"w2"}, *const dq[1] = {"down_proj"};
                const int64_t ngu[2] = {IE_, IE_}, nd[1] = {H_};
                snprintf(pre, sizeof pre, "model.layers.%d.%s.experts.%d", l, mx ? "block_sparse_moe" : "mlp", e);
                memset(t, 0, sizeof t);
                tg_add_linears(&g, pre, mx ? gmx : gq, ngu, 2, H_, s->mlp_algo, false, t);
                o->eg[l][e] = t[0], o->eu[l][e] = t[1];
                tg_add_linears(&g, pre, mx ? dmx : dq, nd, 1, IE_, s->mlp_algo, false, &o->ed[l][e]);
            }
        } else {
            snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
            static const char *const gu[2] = {"gate_proj", "up_proj"};
            const int64_t ngu[2] = {I_, I_};
            memset(t, 0, sizeof t);
            tg_add_linears(&g, pre, gu, ngu, 2, H_, s->mlp_algo, false, t);
            o->gate[l] = t[0], o->up[l] = t[1];
            static const char *const dn[1] = {"down_proj"};
            const int64_t nd[1] = {H_};
            tg_add_linears(&g, pre, dn, nd, 1, I_, s->mlp_algo, false, &o->down[l]);
        }
    }
    o->final_norm = tg_add_bf16(&g, "model.norm.weight", H_, 0, 0.1, 1.0);
    if (s->tied) {
        o->head.N = V_, o->head.K = H_, o->head.a = ACT_NONE;
        o->head.W = malloc(sizeof(double) * V_ * H_);
        memcpy(o->head.W, o->emb, sizeof(double) * V_ * H_);
    } else {
        static const char *const hn[1] = {"lm_head"};
        const int64_t nh[1] = {V_};
        tg_add_linears(&g, "", hn, nh, 1, H_, s->head_algo, false, &o->head);
    }
    o->fp8_kv = s->fp8_kv;
    o->norm_topk = s->norm_topk;
    char extra[512] = "";
    if (y) {
        size_t n = 0;
        if (y->sliding_window) n += (size_t)snprintf(extra + n, sizeof extra - n, ", \"sliding_window\": %s", y->sliding_window);
        if (y->use_sliding_window) n += (size_t)snprintf(extra + n, sizeof extra - n, ", \"use_sliding_window\": %s", y->use_sliding_window);
        if (y->max_window_layers) n += (size_t)snprintf(extra + n, sizeof extra - n, ", \"max_window_layers\": %s", y->max_window_layers);
        if (y->sparse_step > 0) n += (size_t)snprintf(extra + n, sizeof extra - n, ", \"decoder_sparse_step\": %d", y->sparse_step);
        if (y->mlp_only_layers) {
            n += (size_t)snprintf(extra + n, sizeof extra - n, ", \"mlp_only_layers\": [");
            for (int b = 0, first = 1; b < 16; b++)
                if (y->mlp_only_layers >> b & 1u) n += (size_t)snprintf(extra + n, sizeof extra - n, "%s%d", first ? "" : ", ", b), first = 0;
            snprintf(extra + n, sizeof extra - n, "]");
        }
    }

    /* configs */
    const bool mixed = strcmp(s->attn_algo, s->mlp_algo) != 0 || strcmp(s->attn_algo, s->head_algo) != 0;
    const char *algo = mixed ? "MIXED_PRECISION" : s->attn_algo;
    const bool quant = mixed || strcmp(algo, "BF16") != 0 || s->fp8_kv;
    char *hq = tg_keep(&g, 16384), *cfg = tg_keep(&g, 4096);
    if (quant) {
        snprintf(hq, 16384,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": {\"quant_algo\": %s%s%s, "
                 "\"kv_cache_quant_algo\": %s, \"group_size\": 16, \"exclude_modules\": [%s]%s%s%s}}",
                 strcmp(algo, "BF16") ? "\"" : "", strcmp(algo, "BF16") ? algo : "null", strcmp(algo, "BF16") ? "\"" : "",
                 s->fp8_kv ? "\"FP8\"" : "null", strcmp(s->head_algo, "BF16") == 0 && !mixed ? "\"lm_head\"" : "",
                 mixed ? ", \"quantized_layers\": {" : "", mixed ? g.layers_json : "", mixed ? "}" : "");
        TU_OK(moq_writer_file(g.w, "hf_quant_config.json", hq, err_));
    }
    snprintf(cfg, 4096,
             "{\"architectures\": [\"%s\"], \"model_type\": \"x\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, "
             "%s%s%s, \"tie_word_embeddings\": %s, "
             "\"%s\": %d, \"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d, \"norm_topk_prob\": %s%s}",
             s->arch, H_, I_, o->L, A_, KV_, D_, V_, g_rope_cfg ? g_rope_cfg : "\"rope_theta\": 10000.0, \"rope_scaling\": ",
             g_rope_cfg ? "" : s->rope ? s->rope : "null", g_rope_cfg ? "" : "", s->tied ? "true" : "false",
             strstr(s->arch, "Mixtral") ? "num_local_experts" : "num_experts", s->moe ? E_ : 0, TOPK, IE_, s->norm_topk ? "true" : "false", extra);
    TU_OK(moq_writer_file(g.w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(g.w, 2, err_));
    moq_writer_free(g.w);
    for (size_t i = 0; i < g.n_bufs; i++) free(g.bufs[i]);
    free(g.bufs);
    const char *type = "";
    double factor = 1;
    const char *rope = g_rope_cfg ? g_rope_cfg : s->rope;
    if (rope && strstr(rope, "llama3")) type = "llama3", factor = 8;
    if (rope && strstr(rope, "yarn")) type = "yarn", factor = 4;
    oracle_rope(o, type, g_theta, factor);
}

static void make_model(const spec *s, const char *dir, oracle *o, uint64_t seed) { make_model_x(s, NULL, dir, o, seed); }

static void oracle_free(oracle *o) {
    free(o->emb);
    free(o->final_norm);
    for (int l = 0; l < o->L; l++) {
        free(o->in_norm[l]), free(o->post_norm[l]), free(o->q_norm[l]), free(o->k_norm[l]);
        tg_olin_free(&o->q[l]), tg_olin_free(&o->k[l]), tg_olin_free(&o->v[l]), tg_olin_free(&o->o[l]);
        tg_olin_free(&o->gate[l]), tg_olin_free(&o->up[l]), tg_olin_free(&o->down[l]), tg_olin_free(&o->router[l]);
        for (int e = 0; e < E_; e++) tg_olin_free(&o->eg[l][e]), tg_olin_free(&o->eu[l][e]), tg_olin_free(&o->ed[l][e]);
    }
    tg_olin_free(&o->head);
}

/* ---- fp64 forward ----------------------------------------------------------------------------- */
static void rms(double *x, const double *w, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double r = 1 / sqrt(ss / (double)n + 1e-5);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * r * w[i];
}

static void rope(const oracle *o, double *x, int pos) {
    for (int i = 0; i < D_ / 2; i++) {
        const double a = pos * o->inv_freq[i], c = cos(a) * o->mscale, s = sin(a) * o->mscale;
        const double x0 = x[i], x1 = x[i + D_ / 2];
        x[i] = x0 * c - x1 * s;
        x[i + D_ / 2] = x1 * c + x0 * s;
    }
}

/* Logits [n, V] of tokens[0..n) run one after another from position 0. */
static void oracle_run(const oracle *o, const int32_t *tok, int n, double *logits) {
    double *K = calloc((size_t)(o->L * n * KV_ * D_), sizeof(double)), *Vc = calloc((size_t)(o->L * n * KV_ * D_), sizeof(double));
    double x[H_], h[H_], q[A_ * D_], k[KV_ * D_], v[KV_ * D_], att[A_ * D_], t[H_], g[I_], u[I_], sc[64];
    for (int p = 0; p < n; p++) {
        for (int e = 0; e < H_; e++) x[e] = o->emb[tok[p] * H_ + e];
        for (int l = 0; l < o->L; l++) {
            memcpy(h, x, sizeof h);
            rms(h, o->in_norm[l], H_);
            tg_lin(&o->q[l], h, q), tg_lin(&o->k[l], h, k), tg_lin(&o->v[l], h, v);
            for (int a = 0; a < A_; a++) {
                if (o->qk_norm) rms(q + a * D_, o->q_norm[l], D_);
                rope(o, q + a * D_, p);
            }
            for (int a = 0; a < KV_; a++) {
                if (o->qk_norm) rms(k + a * D_, o->k_norm[l], D_);
                rope(o, k + a * D_, p);
            }
            double *kc = K + ((size_t)l * n + p) * KV_ * D_, *vc = Vc + ((size_t)l * n + p) * KV_ * D_;
            for (int e = 0; e < KV_ * D_; e++) {
                kc[e] = o->fp8_kv ? tg_q_e4m3(k[e] / o->k_scale) * o->k_scale : o->kv_bf16 ? tg_bf16r(k[e]) : k[e];
                vc[e] = o->fp8_kv ? tg_q_e4m3(v[e] / o->v_scale) * o->v_scale : o->kv_bf16 ? tg_bf16r(v[e]) : v[e];
            }
            for (int a = 0; a < A_; a++) {
                const int kvh = a / (A_ / KV_);
                double mx = -INFINITY, sum = 0;
                /* sliding window W: keys j with j > p - W (transformers' sliding_window_overlay) */
                const int j0 = o->window[l] > 0 && p - o->window[l] + 1 > 0 ? p - o->window[l] + 1 : 0;
                for (int j = j0; j <= p; j++) {
                    const double *kk = K + ((size_t)l * n + j) * KV_ * D_ + kvh * D_;
                    double d = 0;
                    for (int e = 0; e < D_; e++) d += q[a * D_ + e] * kk[e];
                    sc[j] = d / sqrt((double)D_);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = j0; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < D_; e++) {
                    double acc = 0;
                    for (int j = j0; j <= p; j++) acc += sc[j] / sum * Vc[((size_t)l * n + j) * KV_ * D_ + kvh * D_ + e];
                    att[a * D_ + e] = acc;
                }
            }
            tg_lin(&o->o[l], att, t);
            for (int e = 0; e < H_; e++) x[e] += t[e];
            memcpy(h, x, sizeof h);
            rms(h, o->post_norm[l], H_);
            if (o->moe_l[l]) { /* softmax router, top-k (ties: lower id), optional renormalization */
                double r[E_], mx = -INFINITY, sum = 0, w[TOPK], ws = 0;
                int sel[TOPK];
                tg_lin(&o->router[l], h, r);
                for (int e = 0; e < E_; e++) mx = fmax(mx, r[e]);
                for (int e = 0; e < E_; e++) sum += (r[e] = exp(r[e] - mx));
                for (int j = 0; j < TOPK; j++) {
                    int b = -1;
                    for (int e = 0; e < E_; e++) {
                        bool taken = false;
                        for (int z = 0; z < j; z++) taken |= sel[z] == e;
                        if (!taken && (b < 0 || r[e] > r[b])) b = e;
                    }
                    sel[j] = b, w[j] = r[b] / sum, ws += w[j];
                }
                for (int j = 0; j < TOPK; j++) {
                    const int e = sel[j];
                    tg_lin(&o->eg[l][e], h, g), tg_lin(&o->eu[l][e], h, u);
                    for (int c = 0; c < IE_; c++) g[c] = g[c] / (1 + exp(-g[c])) * u[c];
                    tg_lin(&o->ed[l][e], g, t);
                    for (int c = 0; c < H_; c++) x[c] += (o->norm_topk ? w[j] / ws : w[j]) * t[c];
                }
            } else {
                tg_lin(&o->gate[l], h, g), tg_lin(&o->up[l], h, u);
                for (int e = 0; e < I_; e++) g[e] = g[e] / (1 + exp(-g[e])) * u[e];
                tg_lin(&o->down[l], g, t);
                for (int e = 0; e < H_; e++) x[e] += t[e];
            }
        }
        memcpy(h, x, sizeof h);
        rms(h, o->final_norm, H_);
        tg_lin(&o->head, h, logits + (size_t)p * V_);
    }
    free(K);
    free(Vc);
}

/* ---- cases ------------------------------------------------------------------------------------ */
static const int32_t prompt[NTOK] = {3, 17, 101, 64, 5, 127, 42};

static double rel_err(const float *got, const double *ref, size_t n, size_t *worst) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        mr = fmax(mr, fabs(ref[i]));
        const double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md)) md = d, *worst = i;
    }
    return md / mr;
}

/* Case s with layout y (NULL: default) through moq and the oracle, logits within s->tol. With
 * keep/got_keep, the oracle and moq's logits [NTOK, V] are handed to the caller to free. */
static void check_case_y(const spec *s, const layout *y, moq_elem kv_elem, oracle *keep, float **got_keep) {
    char *dir = tu_tmpdir(s->name);
    oracle o;
    make_model_x(s, y, dir, &o, 0x5EED0000u + (uint64_t)strlen(s->name));
    o.kv_bf16 = kv_elem == MOQ_ELEM_BF16;
    double *ref = malloc(sizeof(double) * NTOK * V_);
    oracle_run(&o, prompt, NTOK, ref);

    moq_model_opts opts = moq_model_opts_default();
    opts.n_threads = 2;
    opts.ctx = 16;
    opts.kv_elem = kv_elem;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &opts, err_));
    assert_int_equal(moq_model_vocab_size(m), V_);
    /* the validation pass: FP8 shards written with different input scales are reported, an
     * unquantized checkpoint has nothing to report */
    bool in_scale_warned = false;
    for (int i = 0; i < moq_model_warning_count(m); i++) in_scale_warned |= strstr(moq_model_warning(m, i), "input_scale") != NULL;
    if (strcmp(s->attn_algo, "FP8") == 0) assert_true(in_scale_warned);
    if (strcmp(s->attn_algo, "BF16") == 0 && strcmp(s->mlp_algo, "BF16") == 0 && !s->fp8_kv) assert_int_equal(moq_model_warning_count(m), 0);
    /* prefill NPRE tokens with every position's logits, then decode the rest one by one */
    float *got = malloc(sizeof(float) * NTOK * V_);
    TU_OK(moq_model_prefill(m, prompt, NPRE, got, err_));
    for (int p = NPRE; p < NTOK; p++) {
        TU_OK(moq_model_decode(m, prompt[p], err_));
        memcpy(got + (size_t)p * V_, moq_model_logits(m), sizeof(float) * V_);
    }
    assert_int_equal(moq_model_pos(m), NTOK);
    size_t worst = 0;
    const double e = rel_err(got, ref, (size_t)NTOK * V_, &worst);
    print_message("%-24s max|logit-ref|/max|ref| = %.3g (limit %.3g)\n", s->name, e, s->tol);
    if (!(e <= s->tol))
        fail_msg("%s: relative logit error %.3g > %.3g; worst at position %zu token %zu: got %.6g, ref %.6g", s->name, e, s->tol, worst / V_,
                 worst % V_, (double)got[worst], ref[worst]);
    moq_model_free(m);
    free(ref);
    if (keep) {
        *keep = o, *got_keep = got;
    } else {
        free(got);
        oracle_free(&o);
    }
    tu_rmtree(dir);
    free(dir);
}

static void check_case_kv(const spec *s, moq_elem kv_elem) { check_case_y(s, NULL, kv_elem, NULL, NULL); }
static void check_case(const spec *s) { check_case_kv(s, MOQ_ELEM_F32); }

#define LLAMA "LlamaForCausalLM"
static const spec cases[] = {
    /* name              arch                 attn                         mlp                          lm_head   bias  qkn   tied  fp8kv scales rope  tol */
    {"llama_bf16",       LLAMA,               "BF16",                      "BF16",                      "BF16",   false, false, false, false, false, NULL, 2e-5, false, false},
    {"llama_fp8",        LLAMA,               "FP8",                       "FP8",                       "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_fp8_pcpt",   LLAMA,               "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PER_CHANNEL_PER_TOKEN", "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_fp8_pb_wo",  LLAMA,               "FP8_PB_WO",                 "FP8_PB_WO",                 "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_nvfp4",      LLAMA,               "NVFP4",                     "NVFP4",                     "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_w4a16",      LLAMA,               "W4A16_NVFP4",               "W4A16_NVFP4",               "BF16",   false, false, false, false, false, NULL, 2e-5, false, false},
    {"llama_mxfp8",      LLAMA,               "MXFP8",                     "MXFP8",                     "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_mixed",      LLAMA,               "FP8",                       "W4A16_NVFP4",               "NVFP4",  false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama3_rope_fp8kv", LLAMA,              "FP8",                       "FP8",                       "BF16",   false, false, false, true,  true,
     "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}", 2e-3, false, false},
    {"mistral_nvfp4_fp8kv", "MistralForCausalLM", "NVFP4",                 "NVFP4",                     "BF16",   false, false, false, true,  true,  NULL, 2e-3, false, false},
    {"qwen2_bias_yarn",  "Qwen2ForCausalLM",  "BF16",                      "BF16",                      "BF16",   true,  false, false, false, false,
     "{\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 64}", 2e-5, false, false},
    {"qwen2_bias_fp8",   "Qwen2ForCausalLM",  "FP8",                       "FP8",                       "BF16",   true,  false, false, false, false, NULL, 2e-3, false, false},
    {"qwen3_qknorm_tied", "Qwen3ForCausalLM", "FP8_PER_CHANNEL_PER_TOKEN", "MXFP8",                     "BF16",   false, true,  true,  false, false, NULL, 2e-3, false, false},
    /* MoE: 4 experts, top 2 */
    {"qwen3moe_bf16",    "Qwen3MoeForCausalLM", "BF16",                    "BF16",                      "BF16",   false, true,  false, false, false, NULL, 2e-5, true, true},
    {"qwen3moe_nvfp4",   "Qwen3MoeForCausalLM", "NVFP4",                   "NVFP4",                     "BF16",   false, true,  false, false, false, NULL, 2e-3, true, false},
    {"mixtral_fp8_kv",   "MixtralForCausalLM", "FP8",                      "FP8",                       "BF16",   false, false, false, true,  true,  NULL, 2e-3, true, true},
    {"mixtral_mxfp8",    "MixtralForCausalLM", "MXFP8",                    "MXFP8",                     "BF16",   false, false, false, false, false, NULL, 2e-3, true, true},
    {"qwen3moe_w4a16",   "Qwen3MoeForCausalLM", "W4A16_NVFP4",             "W4A16_NVFP4",               "BF16",   false, true,  false, false, false, NULL, 2e-5, true, true},
    {"llama_nvfp4_awq",  LLAMA,               "NVFP4_AWQ",                 "NVFP4_AWQ",                 "BF16",   false, false, false, false, false, NULL, 2e-3, false, false},
    {"llama_fp8kv_noscale", LLAMA,            "FP8",                       "FP8",                       "BF16",   false, false, false, true,  false, NULL, 2e-3, false, false},
    {"qwen3moe_nvfp4_awq", "Qwen3MoeForCausalLM", "NVFP4_AWQ",             "NVFP4_AWQ",                 "BF16",   false, true,  false, false, false, NULL, 2e-3, true, true},
    {"qwen3moe_fp8_pcpt", "Qwen3MoeForCausalLM", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PER_CHANNEL_PER_TOKEN", "BF16", false, true, false, false, false, NULL, 2e-3, true, true},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void test_logits_vs_fp64(void **state) {
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) check_case(&cases[i]);
}

/* bf16 KV cache (opts.kv_elem): the oracle rounds K and V to bf16 (RNE) as they enter the cache.
 * Rounding moves cached values by <= 2^-9 relative, logits by ~1e-3, so the f32-cache limit of
 * 2e-5 would fail if the runner ignored the option; f32 arithmetic otherwise as above. */
static void test_bf16_kv_cache(void **state) {
    (void)state;
    static const spec s = {"qwen3_bf16_kv", "Qwen3ForCausalLM", "BF16", "BF16", "BF16", false, true, false, false, false, NULL, 2e-5, false, false};
    check_case_kv(&s, MOQ_ELEM_BF16);
}

/* moq's logits `got` against the oracle run with the windows `alt` instead of its own: must be off
 * by more than the case's limit, so the limit tells the right window from its neighbours (one
 * position more or less: the inclusive/exclusive question) and from no window at all. */
static void assert_window_matters(const spec *s, oracle *o, const float *got, const int *alt) {
    int own[LMAX];
    memcpy(own, o->window, sizeof own);
    memcpy(o->window, alt, sizeof own);
    double *ref = malloc(sizeof(double) * NTOK * V_);
    oracle_run(o, prompt, NTOK, ref);
    size_t worst = 0;
    const double e = rel_err(got, ref, (size_t)NTOK * V_, &worst);
    print_message("%-24s vs oracle with windows {%d, %d}: %.3g (must exceed %.3g)\n", s->name, alt[0], alt[1], e, s->tol);
    if (!(e > s->tol)) fail_msg("%s: logits match windows {%d, %d} as well (%.3g <= %.3g): the test cannot tell them apart", s->name, alt[0], alt[1], e, s->tol);
    memcpy(o->window, own, sizeof own);
    free(ref);
}

/* Sliding-window attention (Mistral: every layer; Qwen2: use_sliding_window, layers >= max_window_layers).
 * Windows of 2-3 positions over NTOK 7 tokens: the prefill of NPRE 4 and the decodes both cross them. */
static void test_sliding_window(void **state) {
    (void)state;
    oracle o;
    float *got = NULL;
    static const spec mis = {"mistral_swa3", "MistralForCausalLM", "BF16", "BF16", "BF16", false, false, false, false, false, NULL, 2e-5, false, false};
    static const layout ym = {.sliding_window = "3"};
    check_case_y(&mis, &ym, MOQ_ELEM_F32, &o, &got);
    assert_int_equal(o.window[0], 3), assert_int_equal(o.window[1], 3);
    static const int m2[LMAX] = {2, 2, 0}, m4[LMAX] = {4, 4, 0}, m0[LMAX] = {0, 0, 0};
    assert_window_matters(&mis, &o, got, m2);
    assert_window_matters(&mis, &o, got, m4);
    assert_window_matters(&mis, &o, got, m0);
    oracle_free(&o), free(got);

    /* FP8 weights and FP8 KV: the window selects among the quantized cached keys */
    static const spec misq = {"mistral_swa3_fp8kv", "MistralForCausalLM", "FP8", "FP8", "BF16", false, false, false, true, true, NULL, 2e-3, false, false};
    check_case_y(&misq, &ym, MOQ_ELEM_F32, &o, &got);
    assert_window_matters(&misq, &o, got, m2);
    assert_window_matters(&misq, &o, got, m4);
    oracle_free(&o), free(got);

    /* Qwen2: window 2 on layer 1 only (max_window_layers 1) */
    static const spec qw = {"qwen2_swa2_from1", "Qwen2ForCausalLM", "BF16", "BF16", "BF16", true, false, false, false, false, NULL, 2e-5, false, false};
    static const layout yq = {.sliding_window = "2", .use_sliding_window = "true", .max_window_layers = "1"};
    check_case_y(&qw, &yq, MOQ_ELEM_F32, &o, &got);
    assert_int_equal(o.window[0], 0), assert_int_equal(o.window[1], 2);
    static const int q_all[LMAX] = {2, 2, 0}, q_first[LMAX] = {2, 0, 0}, q3[LMAX] = {0, 3, 0};
    assert_window_matters(&qw, &o, got, q_all);
    assert_window_matters(&qw, &o, got, q_first);
    assert_window_matters(&qw, &o, got, q3);
    assert_window_matters(&qw, &o, got, m0);
    oracle_free(&o), free(got);

    /* use_sliding_window false (Qwen2's default): sliding_window is ignored; a null Mistral window
     * is full attention */
    static const spec qoff = {"qwen2_swa_off", "Qwen2ForCausalLM", "BF16", "BF16", "BF16", true, false, false, false, false, NULL, 2e-5, false, false};
    static const layout yoff = {.sliding_window = "2", .use_sliding_window = "false", .max_window_layers = "0"};
    check_case_y(&qoff, &yoff, MOQ_ELEM_F32, &o, &got);
    assert_int_equal(o.window[0], 0), assert_int_equal(o.window[1], 0);
    assert_window_matters(&qoff, &o, got, q_all);
    oracle_free(&o), free(got);
    static const spec mnull = {"mistral_swa_null", "MistralForCausalLM", "BF16", "BF16", "BF16", false, false, false, false, false, NULL, 2e-5, false, false};
    static const layout ynull = {.sliding_window = "null"};
    check_case_y(&mnull, &ynull, MOQ_ELEM_F32, NULL, NULL);
}

/* Qwen3-MoE dense layers: mlp_only_layers and decoder_sparse_step. A dense layer's checkpoint holds
 * mlp.{gate,up,down}_proj of intermediate_size and no experts, so a runner that picks the wrong
 * kind of block for a layer fails to load; the logits check the dense and routed paths' numerics. */
static void test_moe_dense_layers(void **state) {
    (void)state;
    oracle o;
    float *got = NULL;
    static const spec s1 = {"qwen3moe_mlp_only_1", "Qwen3MoeForCausalLM", "BF16", "BF16", "BF16", false, true, false, false, false, NULL, 2e-5, true, true};
    static const layout y1 = {.n_layers = 3, .mlp_only_layers = 1u << 1};
    check_case_y(&s1, &y1, MOQ_ELEM_F32, &o, &got);
    assert_true(o.moe_l[0]), assert_false(o.moe_l[1]), assert_true(o.moe_l[2]);
    oracle_free(&o), free(got);
    /* decoder_sparse_step 2: only layer 1 ((1 + 1) % 2 == 0) routes; NVFP4 experts and MLPs */
    static const spec s2 = {"qwen3moe_step2_nvfp4", "Qwen3MoeForCausalLM", "NVFP4", "NVFP4", "BF16", false, true, false, false, false, NULL, 2e-3, true, false};
    static const layout y2 = {.n_layers = 3, .sparse_step = 2};
    check_case_y(&s2, &y2, MOQ_ELEM_F32, &o, &got);
    assert_false(o.moe_l[0]), assert_true(o.moe_l[1]), assert_false(o.moe_l[2]);
    oracle_free(&o), free(got);
}

/* Malformed per-layer keys are config errors naming the key, the value and what is expected. */
static void test_layer_plan_errors(void **state) {
    (void)state;
    static const struct { const char *name, *arch; layout y; const char *msg; } rows[] = {
        {"err_mlp_only_range", "Qwen3MoeForCausalLM", {.n_layers = 3, .mlp_only_layers = 1u << 5}, "mlp_only_layers[0] is out of range or not an integer, expected a layer index in [0, 3)"},
        {"err_window_zero", "MistralForCausalLM", {.sliding_window = "0"}, "sliding_window 0, expected a positive integer or null"},
        {"err_window_str", "Qwen2ForCausalLM", {.sliding_window = "\"4\"", .use_sliding_window = "true"}, "sliding_window"},
        {"err_use_window", "Qwen2ForCausalLM", {.sliding_window = "4", .use_sliding_window = "1"}, "use_sliding_window"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const bool moe = strstr(rows[i].arch, "Moe") != NULL;
        const spec s = {rows[i].name, rows[i].arch, "BF16", "BF16", "BF16", false, moe, false, false, false, NULL, 0, moe, false};
        char *dir = tu_tmpdir(s.name);
        oracle o;
        make_model_x(&s, &rows[i].y, dir, &o, 11);
        moq_model_opts opts = moq_model_opts_default();
        opts.ctx = 8;
        moq_model *m = NULL;
        moq_error e = {0};
        const moq_status st = moq_model_open(&m, dir, &opts, &e);
        TU_ERR(&e, st, MOQ_ERR_CONFIG, "config.json", rows[i].msg);
        assert_null(m);
        oracle_free(&o);
        tu_rmtree(dir);
        free(dir);
    }
}

static int argmax(const float *x, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

static void greedy(const char *dir, int threads, int32_t *out, int n, float *last_logits) {
    moq_model_opts opts = moq_model_opts_default();
    opts.n_threads = threads;
    opts.ctx = 24;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &opts, err_));
    TU_OK(moq_model_prefill(m, prompt, NTOK, NULL, err_));
    for (int i = 0; i < n; i++) {
        out[i] = argmax(moq_model_logits(m), V_);
        TU_OK(moq_model_decode(m, out[i], err_));
    }
    memcpy(last_logits, moq_model_logits(m), sizeof(float) * V_);
    /* reset and replay: the same tokens again */
    moq_model_reset(m);
    assert_int_equal(moq_model_pos(m), 0);
    TU_OK(moq_model_prefill(m, prompt, NTOK, NULL, err_));
    for (int i = 0; i < n; i++) {
        assert_int_equal(argmax(moq_model_logits(m), V_), out[i]);
        TU_OK(moq_model_decode(m, out[i], err_));
    }
    moq_model_free(m);
}

static void test_greedy_reproducible(void **state) {
    (void)state;
    static const spec s = {"greedy_nvfp4", LLAMA, "NVFP4", "NVFP4", "BF16", false, false, false, true, true, NULL, 0, false, false};
    char *dir = tu_tmpdir(s.name);
    oracle o;
    make_model(&s, dir, &o, 99);
    enum { NG = 12 };
    int32_t a[NG], b[NG], c[NG];
    float la[V_], lb[V_], lc[V_];
    greedy(dir, 1, a, NG, la);
    greedy(dir, 1, b, NG, lb);
    greedy(dir, 2, c, NG, lc);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(la, lb, sizeof la);   /* same threads: bitwise */
    assert_memory_equal(a, c, sizeof a);      /* 1 vs 2 threads: same tokens */
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
}

/* RoPE settings as transformers 5 writes them (only inside "rope_parameters"), and a config without
 * any rope_theta: the architecture's documented default (MixtralConfig: 1e6, not the 10000 a silent
 * fallback would use), said once in the warnings and by `moq inspect`. */
static void test_rope_settings(void **state) {
    (void)state;
    static const spec q3 = {"qwen3_rope_params", "Qwen3ForCausalLM", "BF16", "BF16", "BF16", false, true, false, false, false, NULL, 2e-5, false, false};
    static const spec q3y = {"qwen3_rope_params_yarn", "Qwen3ForCausalLM", "BF16", "BF16", "BF16", false, true, false, false, false, NULL, 2e-5, false, false};
    static const spec mx = {"mixtral_no_theta", "MixtralForCausalLM", "MXFP8", "MXFP8", "BF16", false, false, false, false, false, NULL, 2e-3, true, true};
    g_rope_cfg = "\"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}", g_theta = 1e6;
    check_case(&q3);
    /* the theta matters at these positions: the 10000 oracle misses the 1e6 one by far more than the limit */
    char *dir = tu_tmpdir("rope_theta_matters");
    oracle o;
    make_model(&q3, dir, &o, 5);
    double *r6 = malloc(sizeof(double) * NTOK * V_), *r4 = malloc(sizeof(double) * NTOK * V_);
    float *f6 = malloc(sizeof(float) * NTOK * V_);
    oracle_run(&o, prompt, NTOK, r6);
    oracle_rope(&o, "", 10000.0, 1);
    oracle_run(&o, prompt, NTOK, r4);
    for (int i = 0; i < NTOK * V_; i++) f6[i] = (float)r6[i];
    size_t worst;
    const double d = rel_err(f6, r4, (size_t)NTOK * V_, &worst);
    printf("%-24s theta 1e6 vs 1e4 oracle: %.3g (must exceed 2e-05)\n", q3.name, d);
    assert_true(d > 2e-5);
    free(r6), free(r4), free(f6);
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
    g_rope_cfg = "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 64, \"rope_theta\": 500000.0}",
    g_theta = 5e5;
    check_case(&q3y);
    g_rope_cfg = "\"rope_scaling\": null", g_theta = 1e6; /* no rope_theta anywhere: MixtralConfig's default */
    check_case(&mx);
    dir = tu_tmpdir("rope_no_theta");
    make_model(&mx, dir, &o, 5);
    moq_model_opts opts = moq_model_opts_default();
    opts.ctx = 8;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &opts, err_));
    int n = 0;
    for (int i = 0; i < moq_model_warning_count(m); i++) n += strstr(moq_model_warning(m, i), "no rope_theta") != NULL;
    assert_int_equal(n, 1);
    moq_model_free(m);
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "%s inspect %s", tu_moq_bin(), dir);
    (void)tu_run(cmd, out, sizeof out);
    assert_non_null(strstr(out, "rope theta 1e+06 (MixtralConfig default: config.json has no rope_theta)"));
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
    /* an architecture row without a default would refuse: a zero theta in the file is an error naming the key */
    g_rope_cfg = "\"rope_parameters\": {\"rope_theta\": 0, \"rope_type\": \"default\"}";
    dir = tu_tmpdir("rope_zero_theta");
    make_model(&q3, dir, &o, 5);
    moq_error e = {0};
    const moq_status st = moq_model_open(&m, dir, &opts, &e);
    TU_ERR(&e, st, MOQ_ERR_CONFIG, "config.json", "rope_parameters.rope_theta is 0, expected a value > 0");
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
    g_rope_cfg = NULL, g_theta = 10000.0;
}

static void test_errors(void **state) {
    (void)state;
    moq_error e = {0};
    moq_model *m = NULL;
    moq_model_opts opts = moq_model_opts_default();
    opts.ctx = 8;
    /* FP8 KV declared, no scales in any layer: scale 1.0 (ModelOpt's fp8_cast), said in exactly one
     * warning; the logits are checked against the oracle in test_logits_vs_fp64 (llama_fp8kv_noscale) */
    static const spec nokv = {"kv_noscale", LLAMA, "FP8", "FP8", "BF16", false, false, false, true, false, NULL, 0, false, false};
    char *dir = tu_tmpdir(nokv.name);
    oracle o;
    make_model(&nokv, dir, &o, 7);
    TU_OK(moq_model_open(&m, dir, &opts, err_));
    int n_note = 0;
    for (int i = 0; i < moq_model_warning_count(m); i++) n_note += strstr(moq_model_warning(m, i), "scale 1.0 is used") != NULL;
    assert_int_equal(n_note, 1);
    moq_model_free(m);
    m = NULL;
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
    /* scales in layer 0 only: an error naming layer 1's missing tensor, from open and from `moq check` alike */
    static const spec part = {"kv_partial", LLAMA, "FP8", "FP8", "BF16", false, false, false, true, true, NULL, 0, false, false};
    dir = tu_tmpdir(part.name);
    g_kv_scale_layers = 1;
    make_model(&part, dir, &o, 7);
    g_kv_scale_layers = ~0u;
    moq_status st = moq_model_open(&m, dir, &opts, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.1.self_attn.k_proj.k_scale", "tensor missing while layer 0 has KV scales");
    assert_null(m);
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), (int)MOQ_ERR_TENSOR);
    assert_non_null(strstr(out, "model.layers.1.self_attn.k_proj.k_scale: tensor missing while layer 0 has KV scales"));
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);
    dir = tu_tmpdir(nokv.name);
    make_model(&nokv, dir, &o, 7);
    snprintf(cmd, sizeof cmd, "%s check %s", tu_moq_bin(), dir);
    (void)tu_run(cmd, out, sizeof out); /* the generator's fused shards differ in input_scale: problems, not about KV */
    const char *nt = strstr(out, "note: the config declares an FP8 KV cache");
    assert_non_null(nt);
    assert_null(strstr(nt + 1, "note: the config declares an FP8 KV cache")); /* one note */
    assert_null(strstr(out, "k_scale: tensor missing"));
    TU_OK(moq_model_open(&m, dir, &opts, err_));
    /* cache full and bad tokens */
    int32_t t[9] = {0};
    st = moq_model_prefill(m, t, 9, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "", "exceed the context of 8");
    t[0] = V_;
    st = moq_model_prefill(m, t, 1, NULL, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "", "token 128");
    moq_model_free(m);
    m = NULL;
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);

    /* unsupported architecture: named, and the message points at the list (`moq help archs`) */
    static const spec bad = {"arch_bad", "GPT2LMHeadModel", "BF16", "BF16", "BF16", false, false, false, false, false, NULL, 0, false, false};
    dir = tu_tmpdir(bad.name);
    make_model(&bad, dir, &o, 7);
    st = moq_model_open(&m, dir, &opts, &e);
    TU_ERR(&e, st, MOQ_ERR_UNSUPPORTED, "config.json", "\"GPT2LMHeadModel\" is not supported");
    assert_non_null(strstr(e.msg, "moq help archs"));
    assert_null(m);
    oracle_free(&o);
    tu_rmtree(dir);
    free(dir);

    /* a missing shard tensor names it */
    static const spec miss = {"tensor_missing", LLAMA, "NVFP4", "NVFP4", "BF16", false, false, false, false, false, NULL, 0, false, false};
    dir = tu_tmpdir(miss.name);
    make_model(&miss, dir, &o, 7);
    char path[512];
    /* rewrite without one tensor: open the checkpoint, copy every tensor but k_proj.weight_scale_2 */
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    char *dir2 = tu_tmpdir("tensor_missing2");
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dir2, err_));
    for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
        const moq_tensor *tt = moq_checkpoint_tensor_at(c, i);
        if (strcmp(tt->name, "model.layers.1.self_attn.k_proj.weight_scale_2") == 0) continue;
        TU_OK(moq_writer_add(w, tt->name, tt->dtype, tt->ndim, tt->shape, tt->data, tt->nbytes, err_));
    }
    TU_OK(moq_writer_file(w, "config.json", moq_checkpoint_json_text(c, "config.json"), err_));
    TU_OK(moq_writer_file(w, "hf_quant_config.json", moq_checkpoint_json_text(c, "hf_quant_config.json"), err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_checkpoint_free(c);
    st = moq_model_open(&m, dir2, &opts, &e);
    TU_ERR(&e, st, MOQ_ERR_TENSOR, "model.layers.1.self_attn.k_proj", "missing tensor weight_scale_2");
    assert_null(m);
    (void)path;
    oracle_free(&o);
    tu_rmtree(dir);
    tu_rmtree(dir2);
    free(dir);
    free(dir2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_vs_fp64),
        cmocka_unit_test(test_bf16_kv_cache),
        cmocka_unit_test(test_greedy_reproducible),
        cmocka_unit_test(test_rope_settings),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_moe_dense_layers),
        cmocka_unit_test(test_layer_plan_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
