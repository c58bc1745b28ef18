/* moe_gpu.c — see moe_gpu.h. Built with CUDA only (MOQ_HAVE_CUDA); without it open refuses. */
#include "moe/moe_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "moe/routing.h"

#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/rows_cuda.h"

#define MAX_MEM 24

struct moq_moe_gpu {
    moq_moe_view  v;
    char          name[160];
    int64_t       Tmax, k, max_tiles;
    moq_cuda_blob b13, b2;
    float         a13, a2;             /* static activation scales (0 when the pair has none)        */
    uint8_t      *w13, *w2;            /* [n_local] packed blobs each                                 */
    void         *router;              /* the router weight as stored, or NULL                       */
    int           router_dt;           /* 0 f32, 1 bf16, 2 f16                                       */
    float        *router_b, *cbias, *logits, *scr, *wts, *rw, *xg, *h, *a, *o;
    int32_t      *local_of, *ids, *pos, *tok, *tiles;
    int32_t      *counts;             /* decode: the routing counter, then [16, ceil(H / 8)] combine counters */
    int           fused;              /* decode path allowed (0: MOQ_CUDA_MOE_UNFUSED=1, for measurements) */
    int           fuse_router;        /* decode: router logits inside route_decode (MOQ_CUDA_MOE_FUSE_ROUTER=1; see run_decode) */
    uint8_t      *ws;
    size_t        ws13_size;
    void         *mem[MAX_MEM];
    int           n_mem;
    uint64_t      bytes;
};

static moq_status galloc(moq_moe_gpu *g, void **out, size_t bytes, const char *what, moq_error *err) {
    moq_error e;
    if (g->n_mem == MAX_MEM) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, g->name, "more than %d GPU buffers", MAX_MEM);
    if (moq_device_alloc(MOQ_DEVICE_CUDA, bytes ? bytes : 16, out, &e) != MOQ_OK)
        return MOQ_FAIL(err, MOQ_ERR_DEVICE, g->name, "GPU memory for the experts' %s: %zu bytes (%.1f MiB) did not fit after %.1f MiB of this layer (%s)",
                        what, bytes, (double)bytes / 1048576.0, (double)g->bytes / 1048576.0, e.msg);
    g->mem[g->n_mem++] = *out;
    g->bytes += bytes;
    return MOQ_OK;
}

/* Allocates and fills from host (src NULL: zeros). */
static moq_status gput(moq_moe_gpu *g, void **out, const void *src, size_t bytes, const char *what, moq_error *err) {
    MOQ_TRY(galloc(g, out, bytes, what, err));
    void *z = src ? NULL : calloc(1, bytes ? bytes : 1);
    if (!src && !z) return MOQ_FAIL(err, MOQ_ERR_NOMEM, g->name, "out of host memory (%zu bytes)", bytes);
    const moq_status st = moq_device_upload(MOQ_DEVICE_CUDA, *out, src ? src : z, bytes, err);
    free(z);
    return st;
}

static float static_a(const moq_weight *w) {
    if (!moq_pairs[moq_pair_of(w)].a_static) return 0.0f;
    float a = w->shard_in_scale[0];
    for (int s = 1; s < w->n_shards; s++) a = fmaxf(a, w->shard_in_scale[s]);
    return a;
}

/* Packs every local expert's projection `which` into one stacked device buffer. */
static moq_status upload_experts(moq_moe_gpu *g, const moq_moe *m, int which, moq_cuda_blob *b, uint8_t **dst, float *a_scale, moq_error *err) {
    const moq_weight *w0 = moq_moe_expert_weight(m, 0, which);
    for (int64_t l = 0; l < g->v.n_local; l++) {
        const moq_weight *w = moq_moe_expert_weight(m, l, which);
        if (!w->q)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, g->name, "local expert %lld's canonical %s weights were dropped after the CPU packing: "
                            "open the layer with moq_moe_opts.keep_canonical to put it on the GPU", (long long)l, which ? "w2" : "w13");
    }
    *b = moq_cuda_row_blob(w0);
    *a_scale = static_a(w0);
    if (b->kind == MOQ_CK_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "experts of pair %s have no CUDA kernel (expected FP8, FP8_PB_WO, "
                        "FP8_PER_CHANNEL_PER_TOKEN, NVFP4, W4A16_NVFP4, MXFP8 or BF16 experts)", moq_pairs[moq_pair_of(w0)].name);
    const size_t n = (size_t)g->v.n_local;
    MOQ_TRY(galloc(g, (void **)dst, b->total * n, which ? "w2 (down) weights" : "w13 (gate, up) weights", err));
    void *host = malloc(b->total);
    if (!host) return MOQ_FAIL(err, MOQ_ERR_NOMEM, g->name, "out of host memory packing %zu bytes", b->total);
    moq_status st = MOQ_OK;
    for (size_t l = 0; l < n && st == MOQ_OK; l++) {
        const moq_weight *w = moq_moe_expert_weight(m, (int64_t)l, which);
        if (w->pre_scale)
            st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "local expert %zu has an AWQ pre_quant_scale: the GPU experts do not apply it; use --device cpu", l);
        else if (static_a(w) != *a_scale)
            st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "local expert %zu's %s input scale %g differs from expert 0's %g: the GPU layer quantizes all "
                          "experts' rows with one scale (the default MAX over experts does; per-expert scales run on --device cpu)",
                          l, which ? "w2" : "w13", (double)static_a(w), (double)*a_scale);
        if (st != MOQ_OK) break;
        moq_cuda_row_pack(w, host);
        st = moq_device_upload(MOQ_DEVICE_CUDA, *dst + l * b->total, host, b->total, err);
    }
    free(host);
    return st;
}

static int64_t max_tiles_of(int64_t A, int64_t L) { return (A + MOQ_CUDA_MOE_TILE - 1) / MOQ_CUDA_MOE_TILE + (L < A ? L : A); }

static moq_status gpu_open(moq_moe_gpu *g, const moq_moe *m, int64_t Tmax, moq_error *err) {
    moq_moe_get_view(m, &g->v);
    const moq_moe_view *v = &g->v;
    const moq_moe_routing *r = v->routing;
    g->Tmax = Tmax, g->k = r->top_k;
    const int64_t A = Tmax * g->k, E = v->E, H = v->H;
    if (v->has_shared)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "a shared expert inside the MoE layer: the GPU layer runs the routed experts only");
    if (v->n_local < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, g->name, "no local experts");
    if (r->expert_scale) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "per-expert weight scales (Gemma 4's per_expert_scale) are not applied by the GPU routing");
    if (r->scoring != MOQ_MOE_SCORE_SOFTMAX && r->scoring != MOQ_MOE_SCORE_SIGMOID)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "%s scores: the GPU routing runs softmax and sigmoid scores (use --device cpu)",
                        r->scoring == MOQ_MOE_SCORE_SQRTSOFTPLUS ? "sqrt(softplus)" : "unknown");
    if (E > MOQ_CUDA_MOE_MAX_E || A > MOQ_CUDA_MOE_MAX_A || g->k > 32 || r->num_expert_group > MOQ_CUDA_MOE_MAX_GROUPS)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, g->name, "%lld experts, top_k %d, %lld tokens per step: the GPU routing handles up to %d experts, "
                        "top_k <= 32 and tokens x top_k <= %d", (long long)E, r->top_k, (long long)Tmax, MOQ_CUDA_MOE_MAX_E, MOQ_CUDA_MOE_MAX_A);
    MOQ_TRY(upload_experts(g, m, 0, &g->b13, &g->w13, &g->a13, err));
    MOQ_TRY(upload_experts(g, m, 1, &g->b2, &g->w2, &g->a2, err));
    if (v->router) {
        const moq_weight *rw = v->router;
        const moq_elem e = rw->w.elem;
        g->router_dt = e == MOQ_ELEM_BF16 ? 1 : e == MOQ_ELEM_F16 ? 2 : 0;
        MOQ_TRY(gput(g, &g->router, rw->q, (size_t)(E * H) * (g->router_dt ? 2 : 4), "router weight", err));
        if (rw->bias) MOQ_TRY(gput(g, (void **)&g->router_b, rw->bias, (size_t)E * 4, "router bias", err));
    }
    if (r->correction_bias) MOQ_TRY(gput(g, (void **)&g->cbias, r->correction_bias, (size_t)E * 4, "correction bias", err));
    MOQ_TRY(gput(g, (void **)&g->local_of, v->local_of, (size_t)E * 4, "expert map", err));
    g->max_tiles = max_tiles_of(A, v->n_local);
    const moq_cuda_ws w13 = moq_cuda_ws_layout(A, v->N13, g->b13.Kp, 0), w2 = moq_cuda_ws_layout(A, H, g->b2.Kp, 0);
    g->ws13_size = w13.total > w2.total ? w13.total : w2.total;
    struct { void **p; size_t n; const char *what; } bufs[] = {
        {(void **)&g->logits, (size_t)(Tmax * E) * 4, "router logits"},
        {(void **)&g->scr, (size_t)(Tmax * (2 * E + 2 * MOQ_CUDA_MOE_MAX_GROUPS)) * 4, "routing scratch"},
        {(void **)&g->ids, (size_t)A * 4, "routing"}, {(void **)&g->wts, (size_t)A * 4, "routing"}, {(void **)&g->pos, (size_t)A * 4, "routing"},
        {(void **)&g->tok, (size_t)A * 4, "routing"}, {(void **)&g->rw, (size_t)A * 4, "routing"},
        {(void **)&g->tiles, (size_t)(3 * g->max_tiles + 2) * 4, "work list"},
        {(void **)&g->xg, (size_t)(A * H) * 4, "gathered rows"}, {(void **)&g->h, (size_t)(A * v->N13) * 4, "w13 output"},
        {(void **)&g->a, (size_t)(A * v->Ip) * 4, "activations"}, {(void **)&g->o, (size_t)(A * H) * 4, "w2 output"},
        {(void **)&g->ws, g->ws13_size, "activation workspace"},
        {(void **)&g->counts, (size_t)(1 + MOQ_CUDA_MOE_DEC_T * ((H + 7) / 8)) * 4, "decode counters"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) MOQ_TRY(gput(g, bufs[i].p, NULL, bufs[i].n, bufs[i].what, err));
    const char *kn = getenv("MOQ_CUDA_MOE_UNFUSED"); /* knob for before/after measurements (docs/PERFORMANCE.md) */
    g->fused = !(kn && kn[0] == '1');
    const char *kr = getenv("MOQ_CUDA_MOE_FUSE_ROUTER");
    g->fuse_router = kr && kr[0] == '1';
    return MOQ_OK;
}

moq_status moq_moe_gpu_open(moq_moe_gpu **out, const moq_moe *m, int64_t max_tokens, moq_error *err) {
    *out = NULL;
    if (!m || max_tokens < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_moe_gpu_open", "a layer and max_tokens >= 1 (got %lld)", (long long)max_tokens);
    moq_moe_gpu *g = calloc(1, sizeof *g);
    if (!g) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_moe_gpu_open", "out of host memory");
    moq_moe_view v;
    moq_moe_get_view(m, &v);
    snprintf(g->name, sizeof g->name, "%s.experts", v.name);
    const moq_status st = gpu_open(g, m, max_tokens, err);
    if (st != MOQ_OK) {
        moq_moe_gpu_free(g);
        return st;
    }
    *out = g;
    return MOQ_OK;
}

void moq_moe_gpu_free(moq_moe_gpu *g) {
    if (!g) return;
    for (int i = 0; i < g->n_mem; i++) moq_device_free(MOQ_DEVICE_CUDA, g->mem[i]);
    free(g);
}

uint64_t moq_moe_gpu_bytes(const moq_moe_gpu *g) { return g ? g->bytes : 0; }
uint64_t moq_moe_gpu_expert_bytes(const moq_moe_gpu *g) { return g ? (uint64_t)(g->b13.total + g->b2.total) : 0; }

static moq_cuda_moe_route route_args(const moq_moe_routing *r, int64_t T, int64_t E, int64_t L, int64_t max_tiles) {
    return (moq_cuda_moe_route){.T = T, .E = E, .k = r->top_k, .L = L, .max_tiles = max_tiles, .sigmoid = r->scoring == MOQ_MOE_SCORE_SIGMOID,
                                .renormalize = r->renormalize, .n_group = r->num_expert_group, .topk_group = r->topk_group,
                                .on_input = r->weight_on_input, .scaling = r->routed_scaling_factor};
}

static moq_status ck(const char *e, const char *where, moq_error *err) { return e ? MOQ_FAIL(err, MOQ_ERR_DEVICE, where, "%s", e) : MOQ_OK; }

/* act_quant (part 1) of rows [A, K] into the workspace, then the grouped projection into y [A, N]. */
static moq_status project(moq_moe_gpu *g, const moq_cuda_blob *b, const uint8_t *w, int64_t N, int64_t K, float a_scale, const float *x, int64_t A,
                          float *y, void *stream, moq_error *err) {
    const moq_cuda_ws ws = moq_cuda_ws_layout(A, N, b->Kp, 0);
    const moq_cuda_args qa = {.kind = (moq_cuda_kind)b->kind, .M = A, .N = N, .K = K, .Np = b->Np, .Kp = b->Kp, .x_d = x, .a_scale = a_scale,
                              .rcp_approx = g->v.rcpa, .ws_d = g->ws, .ws = ws, .stream = stream};
    MOQ_TRY(ck(moq_cuda_act_quant(&qa), g->name, err));
    const int64_t T = A / g->k;
    const moq_cuda_moe_gemm ga = {.kind = (moq_cuda_kind)b->kind, .N = N, .Kp = b->Kp, .max_tiles = g->max_tiles,
                                  .mt = T < MOQ_CUDA_MOE_TILE ? T : MOQ_CUDA_MOE_TILE, .grid_tiles = max_tiles_of(A, g->v.n_local), .w_d = w,
                                  .stride = b->total, .codes = b->codes, .scales = b->scales, .rs = b->rs, .bias = b->bias, .ws_d = g->ws,
                                  .ws = ws, .tiles_d = g->tiles, .y_d = y, .stream = stream};
    return ck(moq_cuda_moe_grouped(&ga), g->name, err);
}

/* The decode path (moe_cuda.h): T <= 16 tokens, routing weights on the output, w2's activation rows
 * of a tile within mode 2's shared memory. */
static bool decode_fits(const moq_moe_gpu *g, int64_t T) {
    return g->fused && T <= MOQ_CUDA_MOE_DEC_T && !g->v.routing->weight_on_input && g->b13.Kp % 128 == 0 && g->b2.Kp % 128 == 0 &&
           moq_cuda_moe_w2_smem(T, g->b2.Kp) <= MOQ_CUDA_MOE_DEC_SMEM;
}

/* Three launches: route_decode (x quantized per token, routing, rows grouped), grouped w13 with the
 * activation in its epilogue, grouped w2 quantizing its rows itself with the combine in its epilogue;
 * a layer that runs its own router launches the router kernel first. route_decode can compute the
 * router logits itself (blocks of warps, the last block routes: MOQ_CUDA_MOE_FUSE_ROUTER=1), but the
 * 2-layer Qwen3-30B-A3B-shaped model decoded 10-12 % slower that way than with the general chain on
 * the H200 (docs/PERFORMANCE.md, 2026-12-01 21:23 and 21:30 UTC), while the layer without its router
 * ran faster than the chain: so the router stays a kernel of its own until that is understood. */
static moq_status run_decode(moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, float *y_d, void *stream, moq_error *err) {
    const moq_moe_view *v = &g->v;
    const int64_t A = T * g->k, mt = T;
    moq_cuda_moe_decode d = {.r = route_args(v->routing, T, v->E, v->n_local, g->max_tiles), .x_d = x_d, .H = v->H, .kind = (moq_cuda_kind)g->b13.kind,
                             .Kp = g->b13.Kp, .a_scale = g->a13, .rcp_approx = v->rcpa, .ws_d = g->ws, .ws = moq_cuda_ws_layout(T, v->N13, g->b13.Kp, 0),
                             .y_d = y_d, .count_d = g->counts};
    moq_cuda_moe_route *r = &d.r;
    r->bias_d = g->cbias, r->local_of_d = g->local_of, r->scr_d = g->scr;
    r->ids_d = g->ids, r->pos_d = g->pos, r->tok_d = g->tok, r->wts_d = g->wts, r->rw_d = g->rw, r->tiles_d = g->tiles, r->stream = stream;
    if (logits_d) r->logits_d = logits_d;
    else {
        if (!g->router) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, g->name, "no router logits given and the layer has no router weight");
        r->logits_d = g->logits;
        if (g->fuse_router) d.w_d = g->router, d.w_dtype = g->router_dt, d.wb_d = g->router_b;
        else MOQ_TRY(ck(moq_cuda_moe_router(x_d, T, v->H, v->E, g->router, g->router_dt, g->router_b, g->logits, stream), g->name, err));
    }
    MOQ_TRY(ck(moq_cuda_moe_route_decode(&d), g->name, err));
    const moq_cuda_moe_gemm base = {.N = 0, .max_tiles = g->max_tiles, .mt = mt, .grid_tiles = max_tiles_of(A, v->n_local), .ws_d = g->ws, .ws = d.ws,
                                    .tiles_d = g->tiles, .stream = stream, .row_tok_d = g->tok};
    moq_cuda_moe_gemm w13 = base;
    w13.kind = (moq_cuda_kind)g->b13.kind, w13.mode = 1, w13.N = v->N13, w13.Kp = g->b13.Kp, w13.w_d = g->w13, w13.stride = g->b13.total;
    w13.codes = g->b13.codes, w13.scales = g->b13.scales, w13.rs = g->b13.rs, w13.bias = g->b13.bias, w13.y_d = g->a;
    w13.act = (int)v->act, w13.gated = moq_moe_act_table[v->act].gated, w13.limit = v->act_limit, w13.alpha = v->act_alpha, w13.beta = v->act_beta;
    w13.Ip = v->Ip;
    MOQ_TRY(ck(moq_cuda_moe_grouped(&w13), g->name, err));
    moq_cuda_moe_gemm w2 = base;
    w2.kind = (moq_cuda_kind)g->b2.kind, w2.mode = 2, w2.N = v->H, w2.Kp = g->b2.Kp, w2.w_d = g->w2, w2.stride = g->b2.total;
    w2.codes = g->b2.codes, w2.scales = g->b2.scales, w2.rs = g->b2.rs, w2.bias = g->b2.bias, w2.y_d = g->o;
    w2.Ip = v->Ip, w2.a_d = g->a, w2.a_scale = g->a2, w2.rcp_approx = v->rcpa, w2.pos_d = g->pos, w2.wts_d = g->wts, w2.k = g->k;
    w2.count_d = g->counts + 1, w2.out_d = y_d;
    return ck(moq_cuda_moe_grouped(&w2), g->name, err);
}

moq_status moq_moe_gpu_run(moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, float *y_d, void *stream, moq_error *err) {
    if (!g || !x_d || !y_d || T < 1 || T > g->Tmax)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, g ? g->name : "moq_moe_gpu_run", "%lld tokens, expected 1..%lld and non-NULL x, y", (long long)T,
                        (long long)(g ? g->Tmax : 0));
    if (decode_fits(g, T)) return run_decode(g, x_d, T, logits_d, y_d, stream, err);
    const moq_moe_view *v = &g->v;
    const int64_t A = T * g->k;
    if (!logits_d) {
        if (!g->router) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, g->name, "no router logits given and the layer has no router weight");
        MOQ_TRY(ck(moq_cuda_moe_router(x_d, T, v->H, v->E, g->router, g->router_dt, g->router_b, g->logits, stream), g->name, err));
        logits_d = g->logits;
    }
    moq_cuda_moe_route r = route_args(v->routing, T, v->E, v->n_local, g->max_tiles);
    r.bias_d = g->cbias, r.local_of_d = g->local_of, r.logits_d = logits_d, r.scr_d = g->scr;
    r.ids_d = g->ids, r.pos_d = g->pos, r.tok_d = g->tok, r.wts_d = g->wts, r.rw_d = g->rw, r.tiles_d = g->tiles, r.stream = stream;
    MOQ_TRY(ck(moq_cuda_moe_route_sort(&r), g->name, err));
    MOQ_TRY(ck(moq_cuda_moe_gather(x_d, A, v->H, g->tok, g->rw, r.on_input, g->tiles, g->max_tiles, g->xg, stream), g->name, err));
    MOQ_TRY(project(g, &g->b13, g->w13, v->N13, v->H, g->a13, g->xg, A, g->h, stream, err));
    const bool gated = moq_moe_act_table[v->act].gated;
    MOQ_TRY(ck(moq_cuda_moe_act((int)v->act, gated, v->act_limit, v->act_alpha, v->act_beta, g->h, A, v->N13, v->Ip, g->a, stream), g->name, err));
    MOQ_TRY(project(g, &g->b2, g->w2, v->H, v->Ip, g->a2, g->a, A, g->o, stream, err));
    return ck(moq_cuda_moe_combine(g->o, g->pos, g->wts, r.on_input, T, g->k, v->H, y_d, stream), g->name, err);
}

struct moq_moe_gpu_graph { void *stream, *exec; };

void moq_moe_gpu_graph_free(moq_moe_gpu_graph *gr) {
    if (!gr) return;
    moq_cuda_graph_destroy(gr->exec);
    moq_cuda_stream_destroy(gr->stream);
    free(gr);
}

moq_status moq_moe_gpu_graph_create(moq_moe_gpu_graph **out, moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, int n, float *y_d,
                                    moq_error *err) {
    *out = NULL;
    if (!g || n < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_moe_gpu_graph_create", "a layer and n >= 1 calls (got %d)", n);
    moq_moe_gpu_graph *gr = calloc(1, sizeof *gr);
    if (!gr) return MOQ_FAIL(err, MOQ_ERR_NOMEM, g->name, "out of host memory");
    moq_status st = ck(moq_cuda_stream_create(&gr->stream), g->name, err);
    if (st == MOQ_OK) st = ck(moq_cuda_capture_begin(gr->stream), g->name, err);
    if (st == MOQ_OK) {
        for (int i = 0; i < n && st == MOQ_OK; i++)
            st = moq_moe_gpu_run(g, x_d, T, logits_d ? logits_d + (size_t)i * (size_t)(T * g->v.E) : NULL, y_d, gr->stream, err);
        if (st != MOQ_OK) moq_cuda_capture_end(gr->stream, NULL);
        else st = ck(moq_cuda_capture_end(gr->stream, &gr->exec), g->name, err);
    }
    if (st != MOQ_OK) {
        moq_moe_gpu_graph_free(gr);
        return st;
    }
    *out = gr;
    return MOQ_OK;
}

moq_status moq_moe_gpu_graph_replay(moq_moe_gpu_graph *gr, moq_error *err) {
    if (!gr) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_moe_gpu_graph_replay", "no graph");
    MOQ_TRY(ck(moq_cuda_graph_launch(gr->exec, gr->stream), "moq_moe_gpu_graph_replay", err));
    return ck(moq_cuda_stream_sync(gr->stream), "moq_moe_gpu_graph_replay", err);
}

moq_status moq_moe_gpu_route(const moq_moe_routing *r, int64_t E, const float *logits, int64_t T, int32_t *ids, float *weights, moq_error *err) {
    MOQ_TRY(moq_moe_routing_check(r, E, "moq_moe_gpu_route", err));
    const int64_t k = r->top_k, A = T * k, mt = max_tiles_of(A, E);
    if (T < 1 || E > MOQ_CUDA_MOE_MAX_E || A > MOQ_CUDA_MOE_MAX_A || k > 32)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_route", "T %lld, E %lld, k %lld: expected T >= 1, E <= %d, T·k <= %d, k <= 32",
                        (long long)T, (long long)E, (long long)k, MOQ_CUDA_MOE_MAX_E, MOQ_CUDA_MOE_MAX_A);
    moq_moe_gpu tmp = {0};
    snprintf(tmp.name, sizeof tmp.name, "moq_moe_gpu_route");
    int32_t *lo = malloc((size_t)E * 4);
    moq_status st = lo ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, tmp.name, "out of host memory");
    for (int64_t e = 0; lo && e < E; e++) lo[e] = (int32_t)e;
    void *d_lg = NULL, *d_scr = NULL, *d_ids = NULL, *d_w = NULL, *d_pos = NULL, *d_tok = NULL, *d_rw = NULL, *d_ti = NULL, *d_lo = NULL, *d_b = NULL;
    if (st == MOQ_OK) st = gput(&tmp, &d_lg, logits, (size_t)(T * E) * 4, "logits", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_scr, NULL, (size_t)(T * (2 * E + 2 * MOQ_CUDA_MOE_MAX_GROUPS)) * 4, "scratch", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_ids, NULL, (size_t)A * 4, "ids", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_w, NULL, (size_t)A * 4, "weights", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_pos, NULL, (size_t)A * 4, "rows", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_tok, NULL, (size_t)A * 4, "rows", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_rw, NULL, (size_t)A * 4, "rows", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_ti, NULL, (size_t)(3 * mt + 2) * 4, "work list", err);
    if (st == MOQ_OK) st = gput(&tmp, &d_lo, lo, (size_t)E * 4, "expert map", err);
    if (st == MOQ_OK && r->correction_bias) st = gput(&tmp, &d_b, r->correction_bias, (size_t)E * 4, "bias", err);
    if (st == MOQ_OK) {
        moq_cuda_moe_route a = route_args(r, T, E, E, mt);
        a.bias_d = d_b, a.local_of_d = d_lo, a.logits_d = d_lg, a.scr_d = d_scr, a.ids_d = d_ids, a.pos_d = d_pos, a.tok_d = d_tok;
        a.wts_d = d_w, a.rw_d = d_rw, a.tiles_d = d_ti;
        st = ck(moq_cuda_moe_route_sort(&a), tmp.name, err);
    }
    if (st == MOQ_OK) st = moq_device_sync(MOQ_DEVICE_CUDA, err);
    if (st == MOQ_OK) st = moq_device_download(MOQ_DEVICE_CUDA, ids, d_ids, (size_t)A * 4, err);
    if (st == MOQ_OK) st = moq_device_download(MOQ_DEVICE_CUDA, weights, d_w, (size_t)A * 4, err);
    for (int i = 0; i < tmp.n_mem; i++) moq_device_free(MOQ_DEVICE_CUDA, tmp.mem[i]);
    free(lo);
    return st;
}

#else /* built without CUDA */

struct moq_moe_gpu { int unused; };
moq_status moq_moe_gpu_open(moq_moe_gpu **out, const moq_moe *m, int64_t max_tokens, moq_error *err) {
    (void)m, (void)max_tokens;
    *out = NULL;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_open", "this libmoq was built without CUDA (cmake -DMOQ_CUDA=ON needs nvcc)");
}
void     moq_moe_gpu_free(moq_moe_gpu *g) { (void)g; }
uint64_t moq_moe_gpu_bytes(const moq_moe_gpu *g) { (void)g; return 0; }
uint64_t moq_moe_gpu_expert_bytes(const moq_moe_gpu *g) { (void)g; return 0; }
moq_status moq_moe_gpu_run(moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, float *y_d, void *stream, moq_error *err) {
    (void)g, (void)x_d, (void)T, (void)logits_d, (void)y_d, (void)stream;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_run", "this libmoq was built without CUDA");
}
struct moq_moe_gpu_graph { int unused; };
moq_status moq_moe_gpu_graph_create(moq_moe_gpu_graph **out, moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, int n, float *y_d,
                                    moq_error *err) {
    (void)g, (void)x_d, (void)T, (void)logits_d, (void)n, (void)y_d;
    *out = NULL;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_graph_create", "this libmoq was built without CUDA");
}
moq_status moq_moe_gpu_graph_replay(moq_moe_gpu_graph *gr, moq_error *err) {
    (void)gr;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_graph_replay", "this libmoq was built without CUDA");
}
void moq_moe_gpu_graph_free(moq_moe_gpu_graph *gr) { (void)gr; }
moq_status moq_moe_gpu_route(const moq_moe_routing *r, int64_t E, const float *logits, int64_t T, int32_t *ids, float *weights, moq_error *err) {
    (void)r, (void)E, (void)logits, (void)T, (void)ids, (void)weights;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_gpu_route", "this libmoq was built without CUDA");
}
#endif
