/* test_arch_gpt_oss.c — gpt-oss with its attention in every ModelOpt format against an fp64 oracle
 * written here.
 *
 * Generated checkpoints (tests/support/model_gen.c writes q/k/v/o with their biases in each format,
 * with ModelOpt's exporter restated, and restates each runtime activation quantizer). The experts are
 * transformers' stacked BF16 parameters (mlp.experts.gate_up_proj [E, H, 2I] with gate and up in
 * alternating columns, gate_up_proj_bias, down_proj [E, I, H], down_proj_bias), the router has a bias;
 * quantized stacked experts, as ModelOpt 0.47 writes them, are checked against real exports in
 * tests/model/test_modelopt_real.c. The forward below restates transformers 5.17's GptOssDecoderLayer:
 * GptOssAttention (q/k/v/o with bias, rotate_half RoPE with YaRN factor 4 and truncate false,
 * eager_attention_forward with the per-head sink appended to the logits and dropped after the
 * softmax, sliding window on "sliding_attention" layers: key j seen from i iff i - W < j <= i),
 * GptOssTopKRouter (logits = W h + b, top-k of the logits, softmax over those k) and
 * GptOssExperts._apply_gate (gate = min(g, 7), up = clamp(u, -7, 7), (up + 1) · gate · sigmoid(1.702
 * gate)) with both expert biases. Expert gate/up weights are scaled so that gates pass the limit.
 * Tolerances as test_arch.c: 2e-5 without activation quantization (20 positions), 2e-3 with it (7).
 */
#include <math.h>

#include "tu.h"
#include "arch_oracle.h"

enum { GH = 128, GA = 2, GKV = 1, GD = 128, GE = 4, GTOPK = 2, GI = 64, GV = 64, GL = 2, GNT = 20, GW = 3 };
#define GTHETA 150000.0
#define GFACTOR 4.0
#define GOLD 64.0
#define GLIMIT 7.0
#define GALPHA 1.702

typedef struct go_spec {
    const char *name, *attn_algo;
    double      tol;
    int         ntok;
} go_spec;

typedef struct go_oracle {
    double *emb, *final_norm, *in_norm[GL], *post_norm[GL], *sinks[GL];
    olin    q[GL], k[GL], v[GL], o[GL], router[GL], head;
    double *gu[GL], *gub[GL], *dn[GL], *dnb[GL]; /* [E, H, 2I], [E, 2I], [E, I, H], [E, H] */
    double  inv_freq[GD / 2], att_factor;
} go_oracle;

/* a BF16 tensor of any shape, values returned as double */
static double *add_bf16_nd(gen *g, const char *name, int nd, const int64_t *shape, double std, double mean) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)shape[i];
    float *f = malloc(n * sizeof *f);
    tg_fill(g, f, n, std, mean);
    uint16_t *h = tg_keep(g, n * 2);
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &f[i], 4); /* tg_fill rounds to bf16: the top half is exact */
        h[i] = (uint16_t)(b >> 16), d[i] = f[i];
    }
    free(f);
    tg_add(g, name, MOQ_DT_BF16, nd, shape, h, n * 2);
    return d;
}

/* transformers' _compute_yarn_parameters with truncate false (no floor / ceil of the range) */
static void go_rope(go_oracle *o) {
    const int d = GD;
    for (int i = 0; i < d / 2; i++) o->inv_freq[i] = pow(GTHETA, -2.0 * i / d);
    double lo = d * log(GOLD / (32 * 2 * M_PI)) / (2 * log(GTHETA)), hi = d * log(GOLD / (1 * 2 * M_PI)) / (2 * log(GTHETA));
    lo = fmax(lo, 0), hi = fmin(hi, d - 1);
    for (int i = 0; i < d / 2; i++) {
        const double r = fmin(fmax((i - lo) / (hi - lo), 0), 1), fr = o->inv_freq[i];
        o->inv_freq[i] = fr / GFACTOR * r + fr * (1 - r);
    }
    o->att_factor = 0.1 * log(GFACTOR) + 1;
}

static void go_make(const go_spec *s, const char *dir, go_oracle *o, uint64_t seed) {
    gen g = {.rng = seed};
    memset(o, 0, sizeof *o);
    char nm[200], pre[160];
    TU_OK(moq_writer_create(&g.w, dir, err_));
    o->emb = tg_add_bf16(&g, "model.embed_tokens.weight", GV, GH, 1.0, 0);
    for (int l = 0; l < GL; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        o->in_norm[l] = tg_add_f32(&g, nm, GH, 0, 0.1, 1.0);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        o->post_norm[l] = tg_add_f32(&g, nm, GH, 0, 0.1, 1.0);
        snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
        static const char *const qkvn[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t nq[3] = {GA * GD, GKV * GD, GKV * GD};
        olin t[3];
        memset(t, 0, sizeof t);
        tg_add_linears(&g, pre, qkvn, nq, 3, GH, s->attn_algo, true, t);
        o->q[l] = t[0], o->k[l] = t[1], o->v[l] = t[2];
        ao_lin1(&g, pre, "o_proj", GH, GA * GD, s->attn_algo, true, &o->o[l]);
        snprintf(nm, sizeof nm, "%s.sinks", pre);
        o->sinks[l] = add_bf16_nd(&g, nm, 1, (const int64_t[]){GA}, 1.0, 0.5);
        snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
        ao_lin1(&g, pre, "router", GE, GH, "BF16", true, &o->router[l]);
        snprintf(nm, sizeof nm, "%s.experts.gate_up_proj", pre);
        o->gu[l] = add_bf16_nd(&g, nm, 3, (const int64_t[]){GE, GH, 2 * GI}, 3.0 / sqrt(GH), 0);
        snprintf(nm, sizeof nm, "%s.experts.gate_up_proj_bias", pre);
        o->gub[l] = add_bf16_nd(&g, nm, 2, (const int64_t[]){GE, 2 * GI}, 0.5, 0);
        snprintf(nm, sizeof nm, "%s.experts.down_proj", pre);
        o->dn[l] = add_bf16_nd(&g, nm, 3, (const int64_t[]){GE, GI, GH}, 1.0 / sqrt(GI), 0);
        snprintf(nm, sizeof nm, "%s.experts.down_proj_bias", pre);
        o->dnb[l] = add_bf16_nd(&g, nm, 2, (const int64_t[]){GE, GH}, 0.1, 0);
    }
    o->final_norm = tg_add_f32(&g, "model.norm.weight", GH, 0, 0.1, 1.0);
    ao_lin1(&g, "", "lm_head", GV, GH, "BF16", false, &o->head);
    char *hq = tg_keep(&g, 16384), *cfg = tg_keep(&g, 4096);
    if (strcmp(s->attn_algo, "BF16")) {
        snprintf(hq, 16384,
                 "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.47.0\"}, \"quantization\": {\"quant_algo\": \"MIXED_PRECISION\", "
                 "\"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [], \"quantized_layers\": {%s}}}", g.layers_json);
        TU_OK(moq_writer_file(g.w, "hf_quant_config.json", hq, err_));
    }
    snprintf(cfg, 4096,
             "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\", \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false, \"attention_bias\": true, "
             "\"num_local_experts\": %d, \"num_experts_per_tok\": %d, \"sliding_window\": %d, "
             "\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"rope_parameters\": {\"rope_type\": \"yarn\", "
             "\"rope_theta\": %g, \"factor\": %g, \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"truncate\": false, "
             "\"original_max_position_embeddings\": %d}}",
             GH, GI, GL, GA, GKV, GD, GV, GE, GTOPK, GW, GTHETA, GFACTOR, (int)GOLD);
    TU_OK(moq_writer_file(g.w, "config.json", cfg, err_));
    TU_OK(moq_writer_finish(g.w, 2, err_));
    moq_writer_free(g.w);
    tg_gen_free(&g);
    go_rope(o);
}

static void go_free(go_oracle *o) {
    free(o->emb), free(o->final_norm);
    for (int l = 0; l < GL; l++) {
        free(o->in_norm[l]), free(o->post_norm[l]), free(o->sinks[l]), free(o->gu[l]), free(o->gub[l]), free(o->dn[l]), free(o->dnb[l]);
        olin *ls[] = {&o->q[l], &o->k[l], &o->v[l], &o->o[l], &o->router[l]};
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) tg_olin_free(ls[i]);
    }
    tg_olin_free(&o->head);
}

/* _apply_rotary_emb: rotate_half, cos/sin × the YaRN attention factor */
static void rope(const go_oracle *o, double *x, int pos) {
    for (int i = 0; i < GD / 2; i++) {
        const double c = cos(pos * o->inv_freq[i]) * o->att_factor, s = sin(pos * o->inv_freq[i]) * o->att_factor, a = x[i], b = x[i + GD / 2];
        x[i] = a * c - b * s, x[i + GD / 2] = b * c + a * s;
    }
}

/* logits [n, GV] of tokens run from position 0 */
static void go_run(const go_oracle *o, const int32_t *tok, int n, double *logits) {
    double *K = calloc((size_t)(GL * n * GD), sizeof(double)), *Vc = calloc((size_t)(GL * n * GD), sizeof(double));
    double x[GH], h[GH], t[GH], q[GA * GD], k[GD], v[GD], att[GA * GD], sc[GNT], r[GE], gu[2 * GI], a[GI];
    for (int p = 0; p < n; p++) {
        for (int e = 0; e < GH; e++) x[e] = o->emb[tok[p] * GH + e];
        for (int l = 0; l < GL; l++) {
            memcpy(h, x, sizeof h);
            ao_rms(h, o->in_norm[l], GH);
            tg_lin(&o->q[l], h, q), tg_lin(&o->k[l], h, k), tg_lin(&o->v[l], h, v);
            for (int hd = 0; hd < GA; hd++) rope(o, q + hd * GD, p);
            rope(o, k, p);
            memcpy(K + ((size_t)l * n + p) * GD, k, sizeof k);
            memcpy(Vc + ((size_t)l * n + p) * GD, v, sizeof v);
            const int j0 = l == 0 && p >= GW ? p - GW + 1 : 0; /* layer 0 slides */
            for (int hd = 0; hd < GA; hd++) {
                double mx = o->sinks[l][hd], sum = 0;
                for (int j = j0; j <= p; j++) {
                    double d = 0;
                    for (int e = 0; e < GD; e++) d += q[hd * GD + e] * K[((size_t)l * n + j) * GD + e];
                    sc[j] = d / sqrt((double)GD);
                    mx = fmax(mx, sc[j]);
                }
                sum = exp(o->sinks[l][hd] - mx);
                for (int j = j0; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < GD; e++) {
                    double acc = 0;
                    for (int j = j0; j <= p; j++) acc += sc[j] / sum * Vc[((size_t)l * n + j) * GD + e];
                    att[hd * GD + e] = acc;
                }
            }
            tg_lin(&o->o[l], att, t);
            for (int e = 0; e < GH; e++) x[e] += t[e];
            memcpy(h, x, sizeof h);
            ao_rms(h, o->post_norm[l], GH);
            tg_lin(&o->router[l], h, r);
            int sel[GTOPK];
            for (int j = 0; j < GTOPK; j++) {
                int b = -1;
                for (int e = 0; e < GE; e++) {
                    bool taken = false;
                    for (int z = 0; z < j; z++) taken |= sel[z] == e;
                    if (!taken && (b < 0 || r[e] > r[b])) b = e;
                }
                sel[j] = b;
            }
            double wsum = 0, w[GTOPK];
            for (int j = 0; j < GTOPK; j++) wsum += (w[j] = exp(r[sel[j]] - r[sel[0]]));
            for (int j = 0; j < GTOPK; j++) {
                const int e = sel[j];
                for (int c = 0; c < 2 * GI; c++) {
                    double acc = o->gub[l][e * 2 * GI + c];
                    for (int i = 0; i < GH; i++) acc += h[i] * o->gu[l][((size_t)e * GH + i) * 2 * GI + c];
                    gu[c] = acc;
                }
                for (int c = 0; c < GI; c++) {
                    const double gg = fmin(gu[2 * c], GLIMIT), uu = fmin(fmax(gu[2 * c + 1], -GLIMIT), GLIMIT);
                    a[c] = (uu + 1) * gg / (1 + exp(-GALPHA * gg));
                }
                for (int c = 0; c < GH; c++) {
                    double acc = o->dnb[l][e * GH + c];
                    for (int i = 0; i < GI; i++) acc += a[i] * o->dn[l][((size_t)e * GI + i) * GH + c];
                    x[c] += w[j] / wsum * acc;
                }
            }
        }
        memcpy(h, x, sizeof h);
        ao_rms(h, o->final_norm, GH);
        tg_lin(&o->head, h, logits + (size_t)p * GV);
    }
    free(K), free(Vc);
}

static const go_spec go_cases[] = {
    {"go_bf16", "BF16", 2e-5, 20},
    {"go_nvfp4", "NVFP4", 2e-3, 7},
    {"go_fp8", "FP8", 2e-3, 7},
    {"go_fp8_pcpt", "FP8_PER_CHANNEL_PER_TOKEN", 2e-3, 7},
    {"go_fp8_pb_wo", "FP8_PB_WO", 2e-3, 7},
    {"go_w4a16", "W4A16_NVFP4", 2e-5, 20},
    {"go_mxfp8", "MXFP8", 2e-3, 7},
    {"go_nvfp4_awq", "NVFP4_AWQ", 2e-3, 7},
};

static int32_t go_prompt[GNT];

static void go_check(const go_spec *s) {
    char *dir = tu_tmpdir(s->name);
    go_oracle o;
    go_make(s, dir, &o, 0x60EEDull + (uint64_t)strlen(s->name) * 7919u);
    double *want = malloc(sizeof(double) * GNT * GV);
    go_run(&o, go_prompt, s->ntok, want);
    ao_check_logits(s->name, dir, go_prompt, s->ntok, GV, 32, want, s->tol);
    free(want);
    go_free(&o);
    tu_rmtree(dir);
    free(dir);
}

static void test_gpt_oss_formats_vs_fp64(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof go_cases / sizeof go_cases[0]; i++) go_check(&go_cases[i]);
}

/* The hf_tiny gpt_oss checkpoint rewritten with tensor `name` dropped (shape NULL) or given another
 * shape of no more bytes; opening it must fail with `code` naming `where`. */
static void bad_stacked_q(const char *name, const int64_t *shape, int nd, const char *hq, moq_status code, const char *where, const char *msg) {
    char *src = tu_src_data_path("hf_tiny/gpt_oss"), *dst = tu_tmpdir("go_bad");
    moq_checkpoint *ck = NULL;
    TU_OK(moq_checkpoint_open(&ck, src, NULL, err_));
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dst, err_));
    for (size_t i = 0; i < moq_checkpoint_tensor_count(ck); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(ck, i);
        if (strcmp(t->name, name)) {
            TU_OK(moq_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err_));
        } else if (shape) {
            size_t n = 2;
            for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
            TU_OK(moq_writer_add(w, t->name, t->dtype, nd, shape, t->data, n, err_));
        }
    }
    TU_OK(moq_writer_file(w, "config.json", moq_checkpoint_json_text(ck, "config.json"), err_));
    if (hq) TU_OK(moq_writer_file(w, "hf_quant_config.json", hq, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_model *m = NULL;
    moq_error e = {0};
    const moq_status st = moq_model_open(&m, dst, NULL, &e);
    TU_ERR(&e, st, code, where, msg);
    assert_null(m);
    moq_checkpoint_free(ck);
    tu_rmtree(dst);
    free(dst);
    free(src);
}

static void bad_stacked(const char *name, const int64_t *shape, int nd, moq_status code, const char *where, const char *msg) {
    bad_stacked_q(name, shape, nd, NULL, code, where, msg);
}

/* Malformed stacked experts: clear errors naming the tensor, nothing leaked (ASan). */
static void test_stacked_errors(void **st) {
    (void)st;
    bad_stacked("model.layers.1.mlp.experts.down_proj", (const int64_t[]){4, 32, 32}, 3, MOQ_ERR_TENSOR, "model.layers.1.mlp.experts.down_proj", "[E, I, H]");
    bad_stacked("model.layers.0.mlp.experts.gate_up_proj", (const int64_t[]){4, 64, 64, 1}, 4, MOQ_ERR_TENSOR, "model.layers.0.mlp.experts.gate_up_proj",
                "expected [E, H, 2I]");
    bad_stacked("model.layers.1.mlp.experts.gate_up_proj_bias", NULL, 0, MOQ_ERR_TENSOR, "model.layers.1.mlp", "stacked expert biases");
    bad_stacked("model.layers.0.mlp.experts.down_proj_bias", (const int64_t[]){4, 32}, 2, MOQ_ERR_TENSOR, "model.layers.0.mlp.experts.down_proj_bias",
                "[E, H]");
    bad_stacked("model.layers.0.mlp.router.bias", (const int64_t[]){2}, 1, MOQ_ERR_TENSOR, "model.layers.0.mlp.router.bias", "router bias");
    bad_stacked("model.layers.1.self_attn.sinks", NULL, 0, MOQ_ERR_TENSOR, "model.layers.1.self_attn.sinks", "missing");
    /* ModelOpt 0.47 writes stacked MXFP8 experts with e8m0 scales per 32 output columns ([E, H, 2I/32],
     * measured on a real export of the Llama 4 tiny model): no MXFP8 kernel computes that, refused */
    bad_stacked_q("none", NULL, 0,
                  "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.47.0\"}, \"quantization\": {\"quant_algo\": \"MXFP8\", \"kv_cache_quant_algo\": null, "
                  "\"exclude_modules\": [\"lm_head\", \"model.embed_tokens\", \"*self_attn*\", \"*router*\"]}}",
                  MOQ_ERR_UNSUPPORTED, "model.layers.0.mlp", "blocks of 32 along the output dimension");
}

int main(void) {
    for (int i = 0; i < GNT; i++) go_prompt[i] = (int32_t)((i * 37 + 5) % GV);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_oss_formats_vs_fp64),
        cmocka_unit_test(test_stacked_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
