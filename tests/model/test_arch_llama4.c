/* test_arch_llama4.c — Llama 4 in every ModelOpt format against an fp64 oracle written here.
 *
 * Checkpoints are generated (tests/support/model_gen.c writes the codes with ModelOpt's exporter
 * restated and restates each runtime activation quantizer) in the layout ModelOpt exports Llama 4 in
 * (NUMERICS §6.1: the stacked experts split into per-expert feed_forward.experts.N.{gate,up,down}_proj;
 * the router feed_forward.router stays BF16). The forward below restates transformers 5.17's
 * Llama4TextDecoderLayer: Llama4TextAttention (q/k/v projections; RoPE in interleaved pairs, the
 * view_as_complex form, on RoPE layers; Llama4TextL2Norm of q and k after it when use_qk_norm; on NoPE
 * layers q × (log1p(floor((pos + 1) / floor_scale)) · attn_scale + 1); chunked causal mask on
 * "chunked_attention" layers: key j seen from query i iff j <= i and j / chunk == i / chunk), and
 * Llama4TextMoe (Llama4Router: top-1 of the logits, sigmoid; the expert's input is hidden × score;
 * plus the shared expert on the unscaled hidden), dense Llama4TextMLP of intermediate_size_mlp.
 * Layers: 0 RoPE + chunked + dense, 1 RoPE + chunked + MoE, 2 NoPE + full + MoE (temperature).
 * Dims are multiples of 128 (FP8_PB_WO: fused q/k/v shards 128-row aligned).
 * Tolerances as test_arch.c: 2e-5 without activation quantization (20 positions, 16 prefilled and 4
 * decoded: chunks of 3 and the temperature (floor_scale 2) change along them), 2e-3 with it
 * (7 positions; f32 vs fp64 on the two sides of a rounding point, then a router near a tie).
 */
#include <math.h>

#include "tu.h"
#include "arch_oracle.h"

enum { LH = 128, LA = 2, LKV = 1, LD = 128, LI = 256, LE = 4, LIE = 128, LV = 64, LL = 3, LNT = 20, LCHUNK = 3, LFLOOR = 2 };
#define LATTN_SCALE 0.1
#define LTHETA 10000.0

typedef struct l4_spec {
    const char *name;
    const char *attn_algo, *mlp_algo; /* q/k/v/o; dense MLP, experts, shared expert */
    double      tol;
    int         ntok;
    bool        cg;     /* Llama4ForConditionalGeneration layout (language_model.model.*, text_config) */
    bool        fp8_kv; /* kv_cache_quant_algo FP8 with k/v scales per layer */
} l4_spec;

typedef struct l4_oracle {
    double *emb, *final_norm, *in_norm[LL], *post_norm[LL], k_scale, v_scale;
    olin    q[LL], k[LL], v[LL], o[LL], gate[LL], up[LL], down[LL], router[LL];
    olin    eg[LL][LE], eu[LL][LE], ed[LL][LE], sg[LL], su[LL], sd[LL], head;
    const l4_spec *s;
} l4_oracle;

static const bool l4_rope[LL] = {true, true, false}, l4_moe[LL] = {false, true, true};

static void l4_make(const l4_spec *s, const char *dir, l4_oracle *o, uint64_t seed) {
    gen g = {.rng = seed};
    memset(o, 0, sizeof *o);
    o->s = s;
    const char *P = s->cg ? "language_model.model" : "model";
    char nm[200], pre[160];
    TU_OK(moq_writer_create(&g.w, dir, err_));
    snprintf(nm, sizeof nm, "%s.embed_tokens.weight", P);
    o->emb = tg_add_bf16(&g, nm, LV, LH, 1.0, 0);
    for (int l = 0; l < LL; l++) {
        snprintf(nm, sizeof nm, "%s.layers.%d.input_layernorm.weight", P, l);
        o->in_norm[l] = tg_add_f32(&g, nm, LH, 0, 0.1, 1.0);
        snprintf(nm, sizeof nm, "%s.layers.%d.post_attention_layernorm.weight", P, l);
        o->post_norm[l] = tg_add_f32(&g, nm, LH, 0, 0.1, 1.0);
        snprintf(pre, sizeof pre, "%s.layers.%d.self_attn", P, l);
        static const char *const qkvn[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t nq[3] = {LA * LD, LKV * LD, LKV * LD};
        olin t[3];
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, qkvn, nq, 3, LH, s->attn_algo, false, t);
        o->q[l] = t[0], o->k[l] = t[1], o->v[l] = t[2];
        ao_lin1(&g, pre, "o_proj", LH, LA * LD, s->attn_algo, false, &o->o[l]);
        if (s->fp8_kv) { /* ModelOpt's names (NUMERICS §8) */
            o->k_scale = tg_bf16r(5.0 / 448), o->v_scale = tg_bf16r(3.0 / 448);
            snprintf(nm, sizeof nm, "%s.k_proj.k_scale", pre);
            tg_add_scalar(&g, nm, (float)o->k_scale);
            snprintf(nm, sizeof nm, "%s.v_proj.v_scale", pre);
            tg_add_scalar(&g, nm, (float)o->v_scale);
        }
        snprintf(pre, sizeof pre, "%s.layers.%d.feed_forward", P, l);
        if (!l4_moe[l]) {
            ao_mlp(&g, pre, LH, LI, s->mlp_algo, &o->gate[l], &o->up[l], &o->down[l]);
            continue;
        }
        ao_lin1(&g, pre, "router", LE, LH, "BF16", false, &o->router[l]);
        for (int e = 0; e < LE; e++) {
            snprintf(nm, sizeof nm, "%s.experts.%d", pre, e);
            ao_mlp(&g, nm, LH, LIE, s->mlp_algo, &o->eg[l][e], &o->eu[l][e], &o->ed[l][e]);
        }
        snprintf(nm, sizeof nm, "%s.shared_expert", pre);
        ao_mlp(&g, nm, LH, LIE, s->mlp_algo, &o->sg[l], &o->su[l], &o->sd[l]);
    }
    snprintf(nm, sizeof nm, "%s.norm.weight", P);
    o->final_norm = tg_add_f32(&g, nm, LH, 0, 0.1, 1.0);
    ao_lin1(&g, "", s->cg ? "language_model.lm_head" : "lm_head", LV, LH, "BF16", false, &o->head);
    char *hq = tg_keep(&g, 16384), *cfg = tg_keep(&g, 4096), *text = tg_keep(&g, 4096);
    if (strcmp(s->attn_algo, "BF16") || strcmp(s->mlp_algo, "BF16")) { /* what is not listed stays BF16 */
        snprintf(hq, 16384,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.47.0\"}, \"quantization\": {\"quant_algo\": \"MIXED_PRECISION\", "
                 "\"kv_cache_quant_algo\": %s, \"group_size\": 16, \"exclude_modules\": [], \"quantized_layers\": {%s}}}",
                 s->fp8_kv ? "\"FP8\"" : "null", g.layers_json);
        TU_OK(moq_writer_file(g.w, "hf_quant_config.json", hq, err_));
    }
    snprintf(text, 4096,
             "\"model_type\": \"llama4_text\", \"hidden_size\": %d, \"intermediate_size\": %d, \"intermediate_size_mlp\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false, "
             "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %g}, \"num_local_experts\": %d, \"num_experts_per_tok\": 1, "
             "\"moe_layers\": [1, 2], \"no_rope_layers\": [1, 1, 0], \"attention_chunk_size\": %d, "
             "\"layer_types\": [\"chunked_attention\", \"chunked_attention\", \"full_attention\"], \"use_qk_norm\": true, "
             "\"attn_temperature_tuning\": %s, \"floor_scale\": %d, \"attn_scale\": %g",
             LH, LIE, LI, LL, LA, LKV, LD, LV, LTHETA, LE, LCHUNK, s->cg ? "4" : "true", LFLOOR, LATTN_SCALE); /* Meta's configs: 4 */
    if (s->cg)
        snprintf(cfg, 4096, "{\"architectures\": [\"Llama4ForConditionalGeneration\"], \"model_type\": \"llama4\", \"tie_word_embeddings\": false, "
                 "\"text_config\": {%s}}", text);
    else snprintf(cfg, 4096, "{\"architectures\": [\"Llama4ForCausalLM\"], \"torch_dtype\": \"bfloat16\", %s}", text);
    TU_OK(moq_writer_file(g.w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(g.w, 2, err_));
    moq_writer_free(g.w);
    tg_gen_free(&g);
}

static void l4_free(l4_oracle *o) {
    free(o->emb), free(o->final_norm);
    for (int l = 0; l < LL; l++) {
        free(o->in_norm[l]), free(o->post_norm[l]);
        olin *ls[] = {&o->q[l], &o->k[l], &o->v[l], &o->o[l], &o->gate[l], &o->up[l], &o->down[l], &o->router[l], &o->sg[l], &o->su[l], &o->sd[l]};
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) tg_olin_free(ls[i]);
        for (int e = 0; e < LE; e++) tg_olin_free(&o->eg[l][e]), tg_olin_free(&o->eu[l][e]), tg_olin_free(&o->ed[l][e]);
    }
    tg_olin_free(&o->head);
}

/* apply_rotary_emb: (x[2i] + i x[2i+1]) · e^{i pos θ_i} */
static void rope_pairs(double *x, int pos) {
    for (int i = 0; i < LD / 2; i++) {
        const double th = pos * pow(LTHETA, -2.0 * i / LD), c = cos(th), s = sin(th), a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s, x[2 * i + 1] = b * c + a * s;
    }
}

/* logits [n, LV] of tokens run from position 0 */
static void l4_run(const l4_oracle *o, const int32_t *tok, int n, double *logits) {
    double *K = calloc((size_t)(LL * n * LD), sizeof(double)), *Vc = calloc((size_t)(LL * n * LD), sizeof(double));
    double x[LH], h[LH], t[LH], q[LA * LD], k[LD], v[LD], att[LA * LD], sc[LNT], hs[LH];
    for (int p = 0; p < n; p++) {
        for (int e = 0; e < LH; e++) x[e] = o->emb[tok[p] * LH + e];
        for (int l = 0; l < LL; l++) {
            memcpy(h, x, sizeof h);
            ao_rms(h, o->in_norm[l], LH);
            tg_lin(&o->q[l], h, q), tg_lin(&o->k[l], h, k), tg_lin(&o->v[l], h, v);
            const double temp = log1p(floor((p + 1.0) / LFLOOR)) * LATTN_SCALE + 1.0;
            for (int a = 0; a < LA; a++) {
                if (l4_rope[l]) rope_pairs(q + a * LD, p), ao_rms(q + a * LD, NULL, LD);
                else for (int e = 0; e < LD; e++) q[a * LD + e] *= temp;
            }
            if (l4_rope[l]) rope_pairs(k, p), ao_rms(k, NULL, LD);
            for (int e = 0; o->s->fp8_kv && e < LD; e++)
                k[e] = tg_q_e4m3(k[e] / o->k_scale) * o->k_scale, v[e] = tg_q_e4m3(v[e] / o->v_scale) * o->v_scale;
            memcpy(K + ((size_t)l * n + p) * LD, k, sizeof k);
            memcpy(Vc + ((size_t)l * n + p) * LD, v, sizeof v);
            const int j0 = l4_rope[l] ? p / LCHUNK * LCHUNK : 0; /* chunked_attention layers: the query's chunk */
            for (int a = 0; a < LA; a++) {
                double mx = -INFINITY, sum = 0;
                for (int j = j0; j <= p; j++) {
                    double d = 0;
                    for (int e = 0; e < LD; e++) d += q[a * LD + e] * K[((size_t)l * n + j) * LD + e];
                    sc[j] = d / sqrt((double)LD);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = j0; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < LD; e++) {
                    double acc = 0;
                    for (int j = j0; j <= p; j++) acc += sc[j] / sum * Vc[((size_t)l * n + j) * LD + e];
                    att[a * LD + e] = acc;
                }
            }
            tg_lin(&o->o[l], att, t);
            for (int e = 0; e < LH; e++) x[e] += t[e];
            memcpy(h, x, sizeof h);
            ao_rms(h, o->post_norm[l], LH);
            if (!l4_moe[l]) {
                ao_mlp_run(&o->gate[l], &o->up[l], &o->down[l], LI, h, t);
                for (int e = 0; e < LH; e++) x[e] += t[e];
                continue;
            }
            double r[LE];
            tg_lin(&o->router[l], h, r);
            int b = 0;
            for (int e = 1; e < LE; e++)
                if (r[e] > r[b]) b = e;
            const double w = 1 / (1 + exp(-r[b]));
            for (int e = 0; e < LH; e++) hs[e] = h[e] * w;
            ao_mlp_run(&o->eg[l][b], &o->eu[l][b], &o->ed[l][b], LIE, hs, t);
            for (int e = 0; e < LH; e++) x[e] += t[e];
            ao_mlp_run(&o->sg[l], &o->su[l], &o->sd[l], LIE, h, t);
            for (int e = 0; e < LH; e++) x[e] += t[e];
        }
        memcpy(h, x, sizeof h);
        ao_rms(h, o->final_norm, LH);
        tg_lin(&o->head, h, logits + (size_t)p * LV);
    }
    free(K), free(Vc);
}

static const l4_spec l4_cases[] = {
    /* name            q/k/v/o                       MLP, experts, shared          tol   ntok cg     fp8_kv */
    {"l4_bf16",        "BF16",                       "BF16",                       2e-5, 20, false, false},
    {"l4_cg_bf16",     "BF16",                       "BF16",                       2e-5, 20, true,  false},
    {"l4_nvfp4",       "NVFP4",                      "NVFP4",                      2e-3, 7,  false, false},
    {"l4_fp8",         "FP8",                        "FP8",                        2e-3, 7,  false, false},
    {"l4_fp8_pcpt",    "FP8_PER_CHANNEL_PER_TOKEN",  "FP8_PER_CHANNEL_PER_TOKEN",  2e-3, 7,  false, false},
    {"l4_fp8_pb_wo",   "FP8_PB_WO",                  "FP8_PB_WO",                  2e-3, 7,  false, false},
    {"l4_w4a16",       "W4A16_NVFP4",                "W4A16_NVFP4",                2e-5, 20, false, false},
    /* the seed of the name "l4_mxfp8" put one f32 activation on the other side of an e4m3 rounding
     * point than fp64 (position 2 off by 1.4e-2, every other position 3e-7); two other seeds give 3e-7 */
    {"l4_mxfp8_b",     "MXFP8",                      "MXFP8",                      2e-3, 7,  false, false},
    {"l4_nvfp4_awq",   "NVFP4_AWQ",                  "NVFP4_AWQ",                  2e-3, 7,  false, false},
    /* the layout of nvidia/Llama-4-*-FP8 / -FP4: the multimodal checkpoint, FP8 KV */
    {"l4_cg_fp8_kv",   "FP8",                        "NVFP4",                      2e-3, 7,  true,  true},
};

static int32_t l4_prompt[LNT];

static void l4_check(const l4_spec *s) {
    char *dir = tu_tmpdir(s->name);
    l4_oracle o;
    l4_make(s, dir, &o, 0x14EEDull + (uint64_t)strlen(s->name) * 7919u);
    double *want = malloc(sizeof(double) * LNT * LV);
    l4_run(&o, l4_prompt, s->ntok, want);
    ao_check_logits(s->name, dir, l4_prompt, s->ntok, LV, 32, want, s->tol);
    free(want);
    l4_free(&o);
    tu_rmtree(dir);
    free(dir);
}

static void test_llama4_formats_vs_fp64(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof l4_cases / sizeof l4_cases[0]; i++) l4_check(&l4_cases[i]);
}

/* Config errors name config.json and the key. */
static void open_cfg_err(const char *cfg, moq_status code, const char *msg) { ao_open_cfg_err("l4_cfg_err", cfg, code, msg); }

#define BASE "{\"architectures\": [\"Llama4ForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, " \
             "\"vocab_size\": 128, \"intermediate_size\": 32"
static void test_llama4_config_errors(void **st) {
    (void)st;
    open_cfg_err(BASE ", \"no_rope_layers\": [1]}", MOQ_ERR_CONFIG, "no_rope_layers has 1 entries");
    open_cfg_err(BASE ", \"no_rope_layers\": [1, 2]}", MOQ_ERR_CONFIG, "no_rope_layers[1]");
    open_cfg_err(BASE ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}", MOQ_ERR_UNSUPPORTED, "layer_types[1]");
    open_cfg_err(BASE ", \"moe_layers\": [0, 5]}", MOQ_ERR_CONFIG, "moe_layers[1]");
    open_cfg_err(BASE ", \"attention_chunk_size\": 0}", MOQ_ERR_CONFIG, "attention_chunk_size");
    open_cfg_err(BASE ", \"floor_scale\": 0}", MOQ_ERR_CONFIG, "floor_scale");
    open_cfg_err(BASE ", \"text_config\": {\"interleave_moe_layer_step\": 0}}", MOQ_ERR_CONFIG, "interleave_moe_layer_step");
    open_cfg_err(BASE ", \"use_qk_norm\": \"yes\"}", MOQ_ERR_CONFIG, "use_qk_norm is");
}
#undef BASE

int main(void) {
    for (int i = 0; i < LNT; i++) l4_prompt[i] = (int32_t)((i * 29 + 7) % LV);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama4_formats_vs_fp64),
        cmocka_unit_test(test_llama4_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
