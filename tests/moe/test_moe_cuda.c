/* test_moe_cuda.c — the GPU MoE layer (src/moe/moe_gpu.c, src/kernels/cuda/moe.cu); label `cuda`.
 *
 * Routing: GPU ids / weights against tmoe_ref.h's fp64 routing (written from NUMERICS §7 and the seeds'
 * rules, independently of routing.c) and against routing.c on the same f32 logits, for softmax top-k
 * (with and without renormalization), sigmoid top-k, DeepSeek-V3 grouped top-k with a correction bias
 * and routed scaling, grouped softmax without bias, Llama-4 top-1, and ties (lowest id wins, also
 * between groups). Logits on a shuffled grid (test_moe_routing.c's): ids must match exactly; weights
 * 1e-6 relative to fp64 and 4e-7 relative to routing.c (CUDA's expf is within 2 ulp, glibc's 1 ulp;
 * the sums run in the same order).
 *
 * Layers: for every expert format (FP8, FP8_PB_WO, FP8_PER_CHANNEL_PER_TOKEN, NVFP4, W4A16_NVFP4, MXFP8,
 * bf16) random experts (moq_moe_synth), opened on the CPU, run by moq_moe_run (the CPU reference,
 * tests/moe/test_moe.c checks it against an fp64 MoE) and by the GPU layer on the same x and router
 * logits at T = 1 (decode), 5 and 40 (several 16-row work items per expert): max |gpu - cpu| / max
 * |cpu| <= 1e-2, the limit of test_model_cuda.c's linears (the quantized activation codes are the
 * CPU's bit for bit; summation order, and through it a rare flipped code of the second projection's
 * activation, separate them). T = 1 and 5 run the decode path (3 launches: routing + x quantizer,
 * w13 + activation, w2 with its own quantizer + combine) and again the general chain
 * (MOQ_CUDA_MOE_UNFUSED=1 at open); T = 40 the general chain. One format also runs with half the
 * experts mapped elsewhere (expert_map), whose rows must then be skipped alike (and a token with no
 * local expert gets y = 0). Without a GPU each test skips with the reason.
 */
#include "tu.h"

#include <math.h>

#include "moe/moe.h"
#include "moe/moe_gpu.h"
#include "moe/routing.h"
#include "tmoe_ref.h"

#define NEED_GPU() TU_NEED_GPU()

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) { g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(g_rng >> 33); }
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() & 0xFFFFFF) / 16777216.0; }

static void make_logits(float *l, int E) {
    int *perm = malloc((size_t)E * sizeof(int));
    for (int i = 0; i < E; i++) perm[i] = i;
    for (int i = E - 1; i > 0; i--) { const int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i]; perm[i] = perm[j], perm[j] = t; }
    for (int i = 0; i < E; i++) l[i] = (float)((perm[i] - E / 2) * 0.09 + urand(-0.004, 0.004));
    free(perm);
}

enum { TOK = 64 };

static void check_mode(const char *what, moq_moe_routing r, int E) {
    const int k = r.top_k;
    float *lg = malloc(sizeof(float) * (size_t)(TOK * E)), *wg = malloc(sizeof(float) * (size_t)(TOK * k)), scr[3 * 512], wc[64];
    int32_t *ig = malloc(sizeof(int32_t) * (size_t)(TOK * k)), ic[64];
    double dl[512], rw[64];
    int rid[64], exact = 0;
    for (int t = 0; t < TOK; t++) make_logits(lg + t * E, E);
    TU_OK(moq_moe_gpu_route(&r, E, lg, TOK, ig, wg, err_));
    for (int t = 0; t < TOK; t++) {
        moq_moe_route_ref(&r, E, lg + t * E, ic, wc, scr);
        for (int i = 0; i < E; i++) dl[i] = lg[t * E + i];
        route_fp64(&r, E, dl, rid, rw);
        for (int j = 0; j < k; j++) {
            const int32_t id = ig[t * k + j];
            const double w = wg[t * k + j];
            if (id != rid[j] || id != ic[j]) fail_msg("%s E=%d token %d slot %d: GPU expert %d, fp64 %d, CPU %d", what, E, t, j, id, rid[j], ic[j]);
            if (fabs(w - rw[j]) > 1e-6 * fabs(rw[j]) + 1e-9) fail_msg("%s token %d slot %d: GPU weight %.9g, fp64 %.9g", what, t, j, w, rw[j]);
            if (fabs(w - wc[j]) > 4e-7 * fabs(wc[j])) fail_msg("%s token %d slot %d: GPU weight %.9g, CPU %.9g", what, t, j, w, (double)wc[j]);
            exact += wg[t * k + j] == wc[j];
        }
    }
    print_message("%-52s E=%-3d %d tokens: ids equal, %d of %d weights bit-equal to routing.c\n", what, E, TOK, exact, TOK * k);
    free(lg), free(wg), free(ig);
}

static void test_route_modes(void **state) {
    (void)state;
    NEED_GPU();
    moq_moe_routing r = {0};
    r.routed_scaling_factor = 1.0f;
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 8, r.renormalize = true;
    check_mode("softmax top-8 renorm (Qwen3-MoE)", r, 128);
    r.renormalize = false, r.top_k = 2;
    check_mode("softmax top-2", r, 8);
    r.scoring = MOQ_MOE_SCORE_SIGMOID, r.top_k = 4;
    check_mode("sigmoid top-4", r, 60);
    float bias[256];
    for (int i = 0; i < 256; i++) bias[i] = (float)urand(-0.3, 0.3);
    r.correction_bias = bias, r.num_expert_group = 8, r.topk_group = 4, r.top_k = 8, r.renormalize = true, r.routed_scaling_factor = 2.5f;
    check_mode("deepseek-v3 grouped (bias, 8 groups, 4 kept, x2.5)", r, 256);
    r.correction_bias = NULL, r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.routed_scaling_factor = 1.0f, r.topk_group = 3, r.top_k = 6;
    check_mode("grouped softmax (group max, no bias)", r, 64);
    moq_moe_routing l4 = {0};
    l4.scoring = MOQ_MOE_SCORE_SIGMOID, l4.top_k = 1, l4.weight_on_input = true, l4.routed_scaling_factor = 1.0f;
    check_mode("llama-4 top-1 sigmoid", l4, 16);
}

static void test_route_ties(void **state) {
    (void)state;
    NEED_GPU();
    moq_moe_routing r = {0};
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 4, r.routed_scaling_factor = 1.0f;
    const float logit[6] = {0.5f, 1.0f, 1.0f, 0.5f, 1.0f, 0.5f};
    int32_t ids[4];
    float w[4];
    TU_OK(moq_moe_gpu_route(&r, 6, logit, 1, ids, w, err_));
    assert_int_equal(ids[0], 1), assert_int_equal(ids[1], 2), assert_int_equal(ids[2], 4), assert_int_equal(ids[3], 0);
    const float lg[6] = {0, 0, 1, 1, 0, 0}; /* groups {0,1,2} and {3,4,5} tie on their best score: group 0 wins */
    r.num_expert_group = 2, r.topk_group = 1, r.top_k = 1;
    TU_OK(moq_moe_gpu_route(&r, 6, lg, 1, ids, w, err_));
    assert_int_equal(ids[0], 2);
}

/* ---- layers -------------------------------------------------------------------------------------- */
enum { E_ = 8, K_ = 2, H_ = 256, I_ = 256 };
#define PREFIX "model.layers.0.mlp"

static float g_last[64 * H_]; /* the GPU output of the last run_case (T <= 64) */

static double run_case(const moq_moe *m, int64_t T, uint64_t seed) {
    const size_t nx = (size_t)(T * H_), nl = (size_t)(T * E_);
    float *x = malloc(4 * nx), *lg = malloc(4 * nl), *yc = malloc(4 * nx), *yg = malloc(4 * nx);
    g_rng = seed;
    for (size_t i = 0; i < nx; i++) x[i] = (float)urand(-2, 2);
    for (size_t i = 0; i < nl; i++) lg[i] = (float)urand(-3, 3);
    const size_t wsz = moq_moe_workspace_size(m, T);
    void *ws = malloc(wsz), *xd = NULL, *ld = NULL, *yd = NULL;
    TU_OK(moq_moe_run(m, x, MOQ_ELEM_F32, T, lg, yc, MOQ_ELEM_F32, ws, wsz, err_));
    moq_moe_gpu *g = NULL;
    TU_OK(moq_moe_gpu_open(&g, m, T, err_));
    TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, 4 * nx, &xd, err_));
    TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, 4 * nl, &ld, err_));
    TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, 4 * nx, &yd, err_));
    TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, xd, x, 4 * nx, err_));
    TU_OK(moq_device_upload(MOQ_DEVICE_CUDA, ld, lg, 4 * nl, err_));
    TU_OK(moq_moe_gpu_run(g, xd, T, ld, yd, NULL, err_));
    TU_OK(moq_device_sync(MOQ_DEVICE_CUDA, err_));
    TU_OK(moq_device_download(MOQ_DEVICE_CUDA, yg, yd, 4 * nx, err_));
    double mx = 0, d = 0;
    for (size_t i = 0; i < nx; i++) mx = fmax(mx, fabs(yc[i])), d = fmax(d, isfinite(yg[i]) ? fabs((double)yg[i] - yc[i]) : INFINITY);
    memcpy(g_last, yg, 4 * nx);
    moq_moe_gpu_free(g);
    moq_device_free(MOQ_DEVICE_CUDA, xd), moq_device_free(MOQ_DEVICE_CUDA, ld), moq_device_free(MOQ_DEVICE_CUDA, yd);
    free(x), free(lg), free(yc), free(yg), free(ws);
    return mx > 0 ? d / mx : INFINITY;
}

static void test_layers(void **state) {
    (void)state;
    NEED_GPU();
    static const moq_moe_format fmts[] = {MOQ_MOE_FMT_FP8, MOQ_MOE_FMT_FP8_PB_WO, MOQ_MOE_FMT_FP8_PER_CHANNEL, MOQ_MOE_FMT_NVFP4,
                                          MOQ_MOE_FMT_W4A16_NVFP4, MOQ_MOE_FMT_MXFP8, MOQ_MOE_FMT_UNQUANTIZED};
    static const int64_t Ts[] = {1, 5, 40};
    char fails[2048] = "";
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        char *dir = tu_tmpdir("moe_cuda");
        moq_writer *w = NULL;
        void *keep = NULL;
        TU_OK(moq_writer_create(&w, dir, err_));
        TU_OK(moq_moe_synth(w, PREFIX, fmts[f], E_, H_, I_, 7 + f, &keep, err_));
        TU_OK(moq_writer_finish(w, 1, err_));
        moq_writer_free(w);
        free(keep);
        moq_checkpoint_opts co = moq_checkpoint_opts_default();
        co.require_config = false;
        moq_checkpoint *ck = NULL;
        TU_OK(moq_checkpoint_open(&ck, dir, &co, err_));
        for (int map = 0; map < (fmts[f] == MOQ_MOE_FMT_NVFP4 ? 2 : 1); map++) {
            int32_t emap[E_];
            for (int e = 0; e < E_; e++) emap[e] = map ? (e % 2 ? (int32_t)(e / 2) : -1) : (int32_t)e; /* odd experts local */
            moq_moe_opts o = moq_moe_opts_default();
            o.format = fmts[f], o.num_experts = E_, o.routing.top_k = K_, o.router = NULL, o.n_threads = 2;
            o.keep_canonical = true; /* moq_moe_gpu_open packs the experts from the canonical weights */
            if (map) o.expert_map = emap;
            moq_moe *m = NULL;
            TU_OK(moq_moe_create(&m, ck, PREFIX, &o, err_));
            for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) {
                static float dec[64 * H_];
                for (int unfused = 0; unfused < (Ts[t] <= 16 ? 2 : 1); unfused++) {
                    if (unfused) setenv("MOQ_CUDA_MOE_UNFUSED", "1", 1);
                    const double rel = run_case(m, Ts[t], 0x1234 + t);
                    unsetenv("MOQ_CUDA_MOE_UNFUSED");
                    const char *path = Ts[t] > 16 || unfused ? "chain" : "decode";
                    print_message("%-28s %-14s T=%-3lld %-6s %s: max |gpu - cpu| / max |cpu| = %.3g\n", moq_moe_kernel_name(m, 0),
                                  map ? "expert map" : "all local", (long long)Ts[t], path, moq_moe_kernel_name(m, 1), rel);
                    if (!(rel <= 1e-2))
                        snprintf(fails + strlen(fails), sizeof fails - strlen(fails), "format %d%s T=%lld %s: %.3g; ", (int)fmts[f], map ? " (map)" : "",
                                 (long long)Ts[t], path, rel);
                    /* the decode path does the chain's arithmetic in the same order: equal bit for bit */
                    if (!unfused) memcpy(dec, g_last, sizeof(float) * (size_t)(Ts[t] * H_));
                    else if (memcmp(dec, g_last, sizeof(float) * (size_t)(Ts[t] * H_)) != 0)
                        snprintf(fails + strlen(fails), sizeof fails - strlen(fails), "format %d%s T=%lld: decode != chain; ", (int)fmts[f],
                                 map ? " (map)" : "", (long long)Ts[t]);
                }
            }
            moq_moe_free(m);
        }
        moq_checkpoint_free(ck);
        tu_rmtree(dir);
        free(dir);
    }
    if (fails[0]) fail_msg("%s", fails);
}

/* Layers the GPU does not run are refused at open, naming why; bad run arguments are refused. */
static void test_refusals(void **state) {
    (void)state;
    NEED_GPU();
    char *dir = tu_tmpdir("moe_cuda_ref");
    moq_writer *w = NULL;
    void *keep = NULL;
    TU_OK(moq_writer_create(&w, dir, err_));
    TU_OK(moq_moe_synth(w, PREFIX, MOQ_MOE_FMT_NVFP4, E_, H_, I_, 3, &keep, err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    free(keep);
    moq_checkpoint_opts co = moq_checkpoint_opts_default();
    co.require_config = false;
    moq_checkpoint *ck = NULL;
    TU_OK(moq_checkpoint_open(&ck, dir, &co, err_));
    moq_moe_opts o = moq_moe_opts_default();
    o.format = MOQ_MOE_FMT_NVFP4, o.num_experts = E_, o.routing.top_k = K_, o.router = NULL, o.n_threads = 1;
    moq_moe *m = NULL;
    TU_OK(moq_moe_create(&m, ck, PREFIX, &o, err_)); /* without keep_canonical: the CPU rows dropped the canonical codes */
    moq_moe_gpu *g = NULL;
    moq_error e = {0};
    TU_ERR(&e, moq_moe_gpu_open(&g, m, 4, &e), MOQ_ERR_INVALID_ARG, PREFIX ".experts", "keep_canonical");
    assert_null(g);
    moq_moe_free(m), m = NULL;
    o.keep_canonical = true;
    TU_OK(moq_moe_create(&m, ck, PREFIX, &o, err_));
    TU_ERR(&e, moq_moe_gpu_open(&g, m, 8192, &e), MOQ_ERR_UNSUPPORTED, PREFIX ".experts", "tokens x top_k");
    assert_null(g);
    TU_OK(moq_moe_gpu_open(&g, m, 4, err_));
    float *xd = NULL;
    TU_OK(moq_device_alloc(MOQ_DEVICE_CUDA, 4 * 5 * H_, (void **)&xd, err_));
    TU_ERR(&e, moq_moe_gpu_run(g, xd, 5, NULL, xd, NULL, &e), MOQ_ERR_INVALID_ARG, PREFIX ".experts", "expected 1..4");
    TU_ERR(&e, moq_moe_gpu_run(g, xd, 1, NULL, xd, NULL, &e), MOQ_ERR_INVALID_ARG, PREFIX ".experts", "no router");
    moq_device_free(MOQ_DEVICE_CUDA, xd);
    moq_moe_gpu_free(g);
    moq_moe_free(m);
    moq_checkpoint_free(ck);
    tu_rmtree(dir);
    free(dir);
}

/* Built or run without a GPU: opening is refused cleanly (no crash, nothing allocated). */
static void test_no_gpu(void **state) {
    (void)state;
    if (tu_have_gpu(NULL)) skip();
    moq_moe_routing r = {0};
    r.scoring = MOQ_MOE_SCORE_SOFTMAX, r.top_k = 1, r.routed_scaling_factor = 1.0f;
    const float lg[2] = {0, 1};
    int32_t id;
    float w;
    moq_error e = {0};
    assert_int_not_equal(moq_moe_gpu_route(&r, 2, lg, 1, &id, &w, &e), MOQ_OK);
    print_message("without a GPU: %s: %s\n", e.where, e.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_modes), cmocka_unit_test(test_route_ties), cmocka_unit_test(test_layers),
        cmocka_unit_test(test_refusals),    cmocka_unit_test(test_no_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
