/* model_gpu.c — the decoder forward on the GPU (moq_model_opts.device = MOQ_DEVICE_CUDA) for the GQA
 * dense architectures (Llama, Mistral, Qwen2, Qwen3): every linear is the layer the loader opened on
 * the GPU (part 1's rows, src/kernels/cuda), the steps between them are model_ops.cu's kernels:
 *
 *   x = embed[tok]                    (f32 table on the GPU, rows dequantized once at open)
 *   per layer: h = rmsnorm(x) (fused with the previous residual add: x += t first)
 *              qkv = h Wqkvᵀ ; q/k norm + RoPE, K/V -> paged cache ; att = attention ; t = att Woᵀ
 *              h = rmsnorm(x += t) ; gu = h Wguᵀ ; a = silu(g)·u ; t = a Wdᵀ
 *   logits = (rmsnorm(x += t)) Wlmᵀ    (the rows asked for only)
 *
 * Activations stay f32 between kernels (the linears quantize them per scheme as on the CPU). A step
 * enqueues everything on the model's stream: the token ids, positions and logits rows (and a
 * batch's block tables) go up asynchronously from pinned buffers, the forward is enqueued (a decode
 * step of B <= 64 rows is captured once into a CUDA graph per B and per KV pool, then replayed:
 * attention's split is cut per token on the device, so nothing in it depends on the lengths), and
 * the one host synchronisation is before the logits come down. MoE layers (Qwen3-MoE, Mixtral) run
 * their routed experts through src/moe/moe_gpu.c in place of the dense MLP (routing and grouped
 * expert GEMMs, one launch per projection per layer, on the same stream). The KV cache is
 * paged (MOQ_GPU_PAGE positions per page, a block table per sequence slot) in bf16, or e4m3 with
 * the checkpoint's per-layer k/v scales when kv_cache_quant_algo is FP8 (kv_cache.c's rules); an
 * f32 cache request gets bf16 on the GPU. The public API runs sequence slot 0; the kernels take
 * (sequence, position) per token, so a batched decode of B slots is one step of M = B tokens; a
 * moq_batch (batch.c) owns its own pool (moq_gpu_kv) whose block tables come with each step.
 * Tested by tests/model/test_model_cuda.c against the CPU forward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rowscan.h"
#include "kernels/kernels.h"
#include "model/model_priv.h"
#include "moe/moe_gpu.h"

#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/moe_cuda.h"

#define MOQ_GPU_PREFILL 2048 /* tokens per step of one sequence's prefill       */
#define MOQ_GPU_CHUNK 256    /* rows per step of a batch run (several sequences)  */
#define MOQ_GPU_PAGE 16      /* positions per KV page                            */
#define MOQ_GPU_SPLITS 16    /* most key ranges of an eager step's query (ceil(span / 64) of them) */
#define MOQ_GPU_GRAPH_SPLITS 64 /* key ranges of a graph step's query: 64-key ranges up to span 4096,
                                 * ~2 blocks per SM for one 8B token (8 KV heads x 33 ranges at 2k) */
#define MOQ_GPU_GRAPHS 64    /* steps of 1..64 rows that all want logits (decode) replay a CUDA graph */
#define MOQ_GPU_LROWS 64     /* logits rows downloaded at once through the pinned buffer */

typedef struct gpu_layer {
    float *in_norm, *post_norm, *q_norm, *k_norm; /* device f32 [H], [D] */
    float  k_scale, v_scale;
    moq_moe_gpu *moe;                              /* routed experts (src/moe/moe_gpu.c), or NULL */
} gpu_layer;

/* One paged KV pool: K and V pages of every layer and a device block table [bt_rows, max_pages]
 * (row = the `seq` index the step's tokens carry). The model's own pool has one table row per
 * sequence slot, uploaded once; a moq_batch's pool gets the tables of each step's sequences
 * uploaded with the step. Decode-step graphs bake the pool's pointers in, so they live here. */
struct moq_gpu_kv {
    void   **k, **v;                     /* [L] device pools of n_pages · page positions */
    int32_t *bt;                         /* device [bt_rows, max_pages]                  */
    int32_t *h_bt;                       /* pinned host staging of bt (batch pools)      */
    int64_t  n_pages, page, max_pages, bt_rows;
    void    *graph[MOQ_GPU_GRAPHS + 1];  /* cudaGraphExec_t by row count, NULL until used */
};

struct moq_gpu {
    int64_t    rows, chunk, n_seqs, max_pages; /* rows: most of a step (prefill); chunk: of a batch run */
    int        kv_elem;                  /* MOQ_CUDA_KV_*                           */
    float     *x, *h, *qkv, *att, *tmp, *gu, *act, *logits, *part;
    void      *ws;
    size_t     ws_size;
    int32_t   *ids;                      /* device [4, rows]: tokens, seqs, positions, logits rows */
    int32_t   *att_done;                 /* device [chunk, A]: attention's split counters, kept zero */
    int32_t   *h_ids;                    /* pinned host staging of the same           */
    float     *h_logits;                 /* pinned [MOQ_GPU_LROWS, V]                 */
    int32_t   *amax, *h_amax;            /* greedy ids of logits rows [MOQ_GPU_LROWS, 2] (moq_cuda_argmax_rows), device and pinned host */
    void      *stream;                   /* every step runs on it                     */
    bool       no_graphs;                /* a capture failed once: run steps eagerly  */
    moq_gpu_kv own;                      /* the public API's pool (sequence slots)    */
    float     *table, *final_norm, *inv_freq;
    float     *lg_d, *lg_h;              /* --tp: gathered logits [G, LROWS v_per], device and pinned host */
    gpu_layer *ly;
    void     **mem;                      /* every device allocation, freed together  */
    size_t     n_mem, cap_mem;
    uint64_t   bytes;
};

bool moq_gpu_built(void) { return true; }

static moq_status dev_alloc(moq_gpu *g, void **out, size_t bytes, const char *what, moq_error *err) {
    if (g->n_mem == g->cap_mem) {
        const size_t cap = g->cap_mem ? 2 * g->cap_mem : 64;
        void **p = realloc(g->mem, cap * sizeof *p);
        if (!p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_gpu_open", "out of host memory");
        g->mem = p, g->cap_mem = cap;
    }
    moq_error e;
    if (moq_device_alloc(MOQ_DEVICE_CUDA, bytes ? bytes : 16, out, &e) != MOQ_OK)
        return MOQ_FAIL(err, MOQ_ERR_DEVICE, what, "GPU memory for %s: %zu bytes (%.1f MiB) did not fit after %.1f MiB already taken by the model (%s)",
                        what, bytes, (double)bytes / 1048576.0, (double)g->bytes / 1048576.0, e.msg);
    g->mem[g->n_mem++] = *out;
    g->bytes += bytes;
    return MOQ_OK;
}

static moq_status upload_f32(moq_gpu *g, float **out, const float *src, int64_t n, const char *what, moq_error *err) {
    *out = NULL;
    if (!src) return MOQ_OK;
    MOQ_TRY(dev_alloc(g, (void **)out, (size_t)n * sizeof(float), what, err));
    return moq_device_upload(MOQ_DEVICE_CUDA, *out, src, (size_t)n * sizeof(float), err);
}

static moq_status cuda_ok(const char *e, const char *where, moq_error *err) {
    return e ? MOQ_FAIL(err, MOQ_ERR_DEVICE, where, "%s", e) : MOQ_OK;
}

/* The embedding table as f32 rows (moq_weight_dequant_row, as the CPU gathers them), in slices.
 * --tp: this rank's rows [v0, v0 + v_n) and one zero row after them, which tokens of the other ranks
 * gather (gpu_step maps them), so the all-reduce of the embeddings is exact. */
static moq_status upload_table(moq_model *m, moq_gpu *g, moq_error *err) {
    const int64_t V = m->embed.w.N, zero = m->tp.G > 1;
    MOQ_TRY(dev_alloc(g, (void **)&g->table, (size_t)((V + zero) * m->H) * sizeof(float), "the embedding table", err));
    if (zero) {
        float *z = calloc((size_t)m->H, sizeof(float));
        moq_status st = z ? moq_device_upload(MOQ_DEVICE_CUDA, g->table + V * m->H, z, (size_t)m->H * sizeof(float), err)
                          : MOQ_FAIL(err, MOQ_ERR_NOMEM, m->embed.name, "out of host memory");
        free(z);
        MOQ_TRY(st);
    }
    const int64_t rows = 256;
    float *buf = malloc((size_t)(rows * m->H) * sizeof(float));
    double *row = malloc((size_t)m->H * sizeof(double));
    moq_status st = buf && row ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, m->embed.name, "out of host memory for the embedding upload");
    for (int64_t r0 = 0; st == MOQ_OK && r0 < V; r0 += rows) {
        const int64_t n = V - r0 < rows ? V - r0 : rows;
        for (int64_t r = 0; r < n; r++) {
            moq_weight_dequant_row(&m->embed.w, r0 + r, row);
            for (int64_t e = 0; e < m->H; e++) buf[r * m->H + e] = (float)row[e];
        }
        st = moq_device_upload(MOQ_DEVICE_CUDA, g->table + r0 * m->H, buf, (size_t)(n * m->H) * sizeof(float), err);
    }
    free(buf), free(row);
    return st;
}

static size_t lin_ws(const moq_layer_linear *l, int64_t M) { return l->lin ? moq_linear_workspace_size(l->lin, M) : 0; }

static moq_status gpu_open(moq_model *m, moq_gpu *g, moq_error *err) {
    int64_t rows = m->T < MOQ_GPU_PREFILL ? m->T : MOQ_GPU_PREFILL;
    for (int64_t l = 0; l < m->L; l++) { /* a MoE step routes rows x top_k assignments: moe_cuda.h's bound */
        if (!m->layers[l].moe) continue;
        moq_moe_view v;
        moq_moe_get_view(m->layers[l].moe, &v);
        if (v.routing->top_k > 0 && rows * v.routing->top_k > MOQ_CUDA_MOE_MAX_A) rows = MOQ_CUDA_MOE_MAX_A / v.routing->top_k;
    }
    const int64_t C = g->rows = rows, H = m->H, D = m->D, A = m->A, KV = m->KV;
    g->chunk = m->T < MOQ_GPU_CHUNK ? m->T : MOQ_GPU_CHUNK;
    if (g->chunk > C) g->chunk = C;
    const int64_t qkvN = (A + 2 * KV) * D;
    const char *where = moq_checkpoint_path(m->ckpt);
    g->max_pages = (m->T + MOQ_GPU_PAGE - 1) / MOQ_GPU_PAGE;
    g->kv_elem = m->kv.elem == MOQ_ELEM_E4M3 ? MOQ_CUDA_KV_E4M3 : MOQ_CUDA_KV_BF16;
    g->ly = calloc((size_t)m->L, sizeof *g->ly);
    if (!g->ly) return MOQ_FAIL(err, MOQ_ERR_NOMEM, where, "out of host memory");
    MOQ_TRY(cuda_ok(moq_cuda_stream_create(&g->stream), where, err));
    MOQ_TRY(cuda_ok(moq_cuda_host_alloc((size_t)(4 * C) * sizeof(int32_t), (void **)&g->h_ids), where, err));
    MOQ_TRY(cuda_ok(moq_cuda_host_alloc((size_t)(MOQ_GPU_LROWS * m->V) * sizeof(float), (void **)&g->h_logits), where, err));
    MOQ_TRY(cuda_ok(moq_cuda_host_alloc((size_t)(2 * MOQ_GPU_LROWS) * sizeof(int32_t), (void **)&g->h_amax), where, err));
    MOQ_TRY(dev_alloc(g, (void **)&g->amax, (size_t)(2 * MOQ_GPU_LROWS) * sizeof(int32_t), "the greedy ids", err));
    MOQ_TRY(moq_gpu_reserve_seqs(m, 1, err));
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        gpu_layer *gl = &g->ly[l];
        MOQ_TRY(upload_f32(g, &gl->in_norm, ly->in_norm, H, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->post_norm, ly->post_norm, H, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->q_norm, ly->q_norm, D, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->k_norm, ly->k_norm, D, "a norm weight", err));
        if (ly->moe) { /* MoE block: the layer's experts stacked on the GPU, workspace for a step's rows */
            MOQ_TRY(moq_moe_gpu_open(&gl->moe, ly->moe, C, err));
            g->bytes += moq_moe_gpu_bytes(gl->moe);
        }
        gl->k_scale = g->kv_elem == MOQ_CUDA_KV_E4M3 ? m->kv.k_scale[ly->kvl] : 1.0f;
        gl->v_scale = g->kv_elem == MOQ_CUDA_KV_E4M3 ? m->kv.v_scale[ly->kvl] : 1.0f;
    }
    MOQ_TRY(upload_f32(g, &g->final_norm, m->final_norm, H, "the final norm", err));
    MOQ_TRY(upload_f32(g, &g->inv_freq, m->inv_freq, D / 2, "the RoPE frequencies", err));
    MOQ_TRY(upload_table(m, g, err));
    /* attention parts: eager steps (up to chunk rows, MOQ_GPU_SPLITS ranges) or graph steps (up to
     * MOQ_GPU_GRAPHS rows, MOQ_GPU_GRAPH_SPLITS ranges) */
    const int64_t graph_rows = g->chunk < MOQ_GPU_GRAPHS ? g->chunk : MOQ_GPU_GRAPHS;
    const int64_t part_rows = g->chunk * MOQ_GPU_SPLITS > graph_rows * MOQ_GPU_GRAPH_SPLITS ? g->chunk * MOQ_GPU_SPLITS : graph_rows * MOQ_GPU_GRAPH_SPLITS;
    struct { float **p; int64_t n; } bufs[] = {
        {&g->x, C * H}, {&g->h, C * H}, {&g->qkv, C * qkvN}, {&g->att, C * A * D}, {&g->tmp, C * H},
        {&g->gu, C * 2 * m->I}, {&g->act, C * m->I}, {&g->logits, MOQ_GPU_LROWS * m->V}, {&g->part, part_rows * A * MOQ_CUDA_PART_STRIDE(D)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) MOQ_TRY(dev_alloc(g, (void **)bufs[i].p, (size_t)bufs[i].n * sizeof(float), "activations", err));
    MOQ_TRY(dev_alloc(g, (void **)&g->ids, (size_t)(4 * C) * sizeof(int32_t), "token ids", err));
    { /* attention's per-(token, GQA group) counters start at zero; each launch leaves them so */
        const size_t n = (size_t)(g->chunk * A) * sizeof(int32_t);
        int32_t *z = calloc(n, 1);
        if (!z) return MOQ_FAIL(err, MOQ_ERR_NOMEM, where, "out of host memory");
        moq_status st = dev_alloc(g, (void **)&g->att_done, n, "attention counters", err);
        if (st == MOQ_OK) st = moq_device_upload(MOQ_DEVICE_CUDA, g->att_done, z, n, err);
        free(z);
        MOQ_TRY(st);
    }
    if (m->tp.G > 1) { /* --tp: the vocabulary-parallel lm_head's gather, MOQ_GPU_LROWS rows at a time */
        const size_t n = (size_t)(MOQ_GPU_LROWS * m->tp.v_per * m->tp.G);
        MOQ_TRY(dev_alloc(g, (void **)&g->lg_d, n * sizeof(float), "the gathered logits", err));
        MOQ_TRY(cuda_ok(moq_cuda_host_alloc(n * sizeof(float), (void **)&g->lg_h), where, err));
        g->no_graphs = true; /* the collectives run eagerly (NCCL inside a captured graph is not tried yet) */
    }
    size_t ws = lin_ws(m->lm_head, MOQ_GPU_LROWS);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const moq_layer_linear *ls[] = {&ly->qkv, &ly->o, &ly->gate_up, &ly->down};
        for (int i = 0; i < 4; i++)
            if (lin_ws(ls[i], C) > ws) ws = lin_ws(ls[i], C);
    }
    g->ws_size = ws;
    return dev_alloc(g, &g->ws, ws, "the linear workspace", err);
}

static void kv_release(moq_gpu_kv *kv, int64_t L) {
    for (int i = 0; i <= MOQ_GPU_GRAPHS; i++) moq_cuda_graph_destroy(kv->graph[i]), kv->graph[i] = NULL;
    for (int64_t l = 0; l < L && kv->k; l++) moq_device_free(MOQ_DEVICE_CUDA, kv->k[l]), moq_device_free(MOQ_DEVICE_CUDA, kv->v[l]);
    free(kv->k), free(kv->v);
    moq_device_free(MOQ_DEVICE_CUDA, kv->bt);
    moq_cuda_host_free(kv->h_bt);
    memset(kv, 0, sizeof *kv);
}

int moq_gpu_kv_elem_bytes(const moq_model *m) { return m->gpu && m->gpu->kv_elem == MOQ_CUDA_KV_E4M3 ? 1 : 2; }

/* n_pages pages of `page` positions per layer for K and V, and a block table of bt_rows rows. */
static moq_status kv_alloc(moq_model *m, moq_gpu_kv *kv, int64_t n_pages, int64_t page, int64_t bt_rows, moq_error *err) {
    moq_gpu *g = m->gpu;
    memset(kv, 0, sizeof *kv);
    kv->n_pages = n_pages, kv->page = page, kv->max_pages = (m->T + page - 1) / page, kv->bt_rows = bt_rows;
    const size_t bytes = (size_t)(n_pages * page * m->KV * m->D) * (size_t)moq_gpu_kv_elem_bytes(m);
    kv->k = calloc((size_t)m->L, sizeof *kv->k), kv->v = calloc((size_t)m->L, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        kv_release(kv, m->L);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_gpu_kv", "out of host memory");
    }
    moq_error e;
    moq_status st = moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)(bt_rows * kv->max_pages) * sizeof(int32_t), (void **)&kv->bt, &e);
    for (int64_t l = 0; st == MOQ_OK && l < m->L; l++) {
        st = moq_device_alloc(MOQ_DEVICE_CUDA, bytes, &kv->k[l], &e);
        if (st == MOQ_OK) st = moq_device_alloc(MOQ_DEVICE_CUDA, bytes, &kv->v[l], &e);
    }
    if (st == MOQ_OK) return MOQ_OK;
    kv_release(kv, m->L);
    return MOQ_FAIL(err, MOQ_ERR_DEVICE, moq_checkpoint_path(m->ckpt),
                    "GPU memory for the KV cache (%lld pages x %lld positions x %lld layers, %.1f MiB) did not fit after %.1f MiB of "
                    "weights' workspaces and activations: %s",
                    (long long)n_pages, (long long)page, (long long)m->L, 2.0 * (double)bytes * (double)m->L / 1048576.0,
                    (double)g->bytes / 1048576.0, e.msg);
}

moq_status moq_gpu_reserve_seqs(moq_model *m, int64_t n, moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_reserve_seqs", "the model was not opened on the GPU");
    if (n < 1 || n > (int64_t)1 << 20) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_reserve_seqs", "%lld sequences, expected 1..1048576", (long long)n);
    kv_release(&g->own, m->L);
    g->n_seqs = 0;
    const int64_t pages = n * g->max_pages;
    int32_t *bt = malloc((size_t)pages * sizeof *bt);
    if (!bt) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_gpu_reserve_seqs", "out of host memory for a block table of %lld pages", (long long)pages);
    for (int64_t i = 0; i < pages; i++) bt[i] = (int32_t)i; /* slot s owns pages s·max_pages .. (s+1)·max_pages - 1 */
    moq_status st = kv_alloc(m, &g->own, pages, MOQ_GPU_PAGE, n, err);
    if (st == MOQ_OK) st = moq_device_upload(MOQ_DEVICE_CUDA, g->own.bt, bt, (size_t)pages * sizeof *bt, err);
    free(bt);
    if (st != MOQ_OK) return st;
    g->n_seqs = n;
    return MOQ_OK;
}

moq_status moq_gpu_open(moq_model *m, moq_error *err) {
    moq_gpu *g = calloc(1, sizeof *g);
    if (!g) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of host memory");
    m->gpu = g;
    return gpu_open(m, g, err); /* on failure the caller frees the model, and with it g */
}

void moq_gpu_free(moq_model *m) {
    moq_gpu *g = m ? m->gpu : NULL;
    if (!g) return;
    if (g->stream) moq_cuda_stream_sync(g->stream);
    kv_release(&g->own, m->L);
    for (int64_t l = 0; g->ly && l < m->L; l++) moq_moe_gpu_free(g->ly[l].moe);
    for (size_t i = 0; i < g->n_mem; i++) moq_device_free(MOQ_DEVICE_CUDA, g->mem[i]);
    moq_cuda_host_free(g->h_ids), moq_cuda_host_free(g->h_logits), moq_cuda_host_free(g->h_amax), moq_cuda_host_free(g->lg_h);
    moq_cuda_stream_destroy(g->stream);
    free(g->mem), free(g->ly), free(g);
    m->gpu = NULL;
}

int64_t moq_gpu_chunk(const moq_model *m) { return m->gpu ? m->gpu->rows : 0; }
int64_t moq_gpu_batch_chunk(const moq_model *m) { return m->gpu ? m->gpu->chunk : 0; }

static moq_status lin(const moq_gpu *g, const moq_layer_linear *l, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run_stream(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, g->ws, g->ws_size, g->stream, err);
}

/* --tp G (NCCL, one GPU per rank; model_tp.c): the all-reduce of a row-parallel output, in place on
 * the device, enqueued on the forward's stream. Nothing without --tp. */
static moq_status tp_sum_d(moq_model *m, float *x_d, int64_t n, moq_error *err) {
    return m->tp.G > 1 ? moq_comm_all_reduce_on(m->comm, x_d, (size_t)n, m->gpu->stream, err) : MOQ_OK;
}

/* Enqueues the forward of M tokens (ids, seqs, positions on the device) up to the last layer's
 * output on the stream: no host work that depends on the values, so a capture replays it for any
 * tokens and positions. flash: the rows are one sequence at consecutive positions (a prefill), and
 * attention is the tiled prefill kernel; else the split (flash-decoding) kernel in n_split ranges. */
static moq_status enqueue_layers(moq_model *m, const moq_gpu_kv *pool, int64_t M, int64_t n_split, bool flash, moq_error *err) {
    moq_gpu *g = m->gpu;
    const int64_t H = m->H, D = m->D, A = m->A, KV = m->KV, C = g->rows;
    const int32_t *tok_d = g->ids, *seq_d = g->ids + C, *pos_d = g->ids + 2 * C;
    const char *where = moq_checkpoint_path(m->ckpt);
    void *st = g->stream;
    MOQ_TRY(cuda_ok(moq_cuda_embed(tok_d, M, g->table, H, m->embed_mult, g->x, st), m->embed.name, err));
    MOQ_TRY(tp_sum_d(m, g->x, M * H, err)); /* --tp: one rank holds each token's row, the others zeros */
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const gpu_layer *gl = &g->ly[l];
        /* x += t of the previous layer's MLP (none before layer 0), h = rmsnorm(x) */
        MOQ_TRY(cuda_ok(moq_cuda_add_rmsnorm(g->x, l ? g->tmp : NULL, gl->in_norm, M, H, m->eps, g->h, st), where, err));
        MOQ_TRY(lin(g, &ly->qkv, g->h, M, g->qkv, err));
        const moq_cuda_kv kv = {.k = pool->k[l], .v = pool->v[l], .block_table = pool->bt, .max_pages = pool->max_pages, .page = pool->page,
                                .elem = g->kv_elem, .k_scale = gl->k_scale, .v_scale = gl->v_scale};
        MOQ_TRY(cuda_ok(moq_cuda_qk_rope_store(g->qkv, M, A, KV, D, gl->q_norm, gl->k_norm, m->eps, g->inv_freq, ly->mscale, seq_d, pos_d, &kv, st),
                        ly->qkv.name, err));
        if (flash)
            MOQ_TRY(cuda_ok(moq_cuda_attention_prefill(g->qkv, M, A, KV, D, m->attn_scale, ly->window, seq_d, pos_d, &kv, g->att, st), ly->o.name, err));
        else
            MOQ_TRY(cuda_ok(moq_cuda_attention(g->qkv, M, A, KV, D, m->attn_scale, ly->window, seq_d, pos_d, &kv, n_split, g->part, g->att_done, g->att, st),
                            ly->o.name, err));
        MOQ_TRY(lin(g, &ly->o, g->att, M, g->tmp, err));
        MOQ_TRY(tp_sum_d(m, g->tmp, M * H, err)); /* row-parallel o_proj */
        MOQ_TRY(cuda_ok(moq_cuda_add_rmsnorm(g->x, g->tmp, gl->post_norm, M, H, m->eps, g->h, st), where, err));
        if (gl->moe) { /* MoE block: routed experts, t = Σ_j w_j expert_j(h) */
            MOQ_TRY(moq_moe_gpu_run(gl->moe, g->h, M, NULL, g->tmp, st, err));
            MOQ_TRY(tp_sum_d(m, g->tmp, M * H, err)); /* --tp: this rank's experts (--ep) or expert slices */
            continue;
        }
        MOQ_TRY(lin(g, &ly->gate_up, g->h, M, g->gu, err));
        MOQ_TRY(cuda_ok(moq_cuda_swiglu(g->gu, M, m->I, g->act, st), ly->gate_up.name, err));
        MOQ_TRY(lin(g, &ly->down, g->act, M, g->tmp, err));
        MOQ_TRY(tp_sum_d(m, g->tmp, M * H, err)); /* row-parallel down_proj */
    }
    return MOQ_OK;
}

/* Logits of the step's logits rows r .. r + n - 1 (n <= MOQ_GPU_LROWS) into g->logits: final norm
 * of those rows only, then lm_head. */
static moq_status enqueue_logits(moq_model *m, int64_t r, int64_t n, moq_error *err) {
    moq_gpu *g = m->gpu;
    MOQ_TRY(cuda_ok(moq_cuda_final_norm_rows(g->x, g->tmp, g->final_norm, g->ids + 3 * g->rows + r, n, m->H, m->eps, g->h, g->stream),
                    moq_checkpoint_path(m->ckpt), err));
    return lin(g, m->lm_head, g->h, n, g->logits, err);
}

/* MOQ_CUDA_ARGMAX=1: rows that want only their greedy id get it from moq_cuda_argmax_rows (8 bytes a
 * row down). Off by default until it has run on a GPU (written 2026-12-08, when no device could be
 * had): without it the rows come down and the host finds the ids (the rowscan path, as before). */
static bool device_argmax(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("MOQ_CUDA_ARGMAX");
        on = v && v[0] == '1';
    }
    return on == 1;
}

/* The error of a non-finite logit (row, column) found on the GPU. */
static moq_status logits_not_finite(const moq_model *m, int64_t row, int64_t col, bool nan, moq_error *err) {
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, m->lm_head->name,
                    "logits are not finite (%s at row %lld, column %lld) on the GPU; `moq run --device cpu` names the module "
                    "whose output turns non-finite, `moq check --values` the tensors",
                    nan ? "NaN" : "Inf", (long long)row, (long long)col);
}

/* One step of M tokens whose ids, seqs, positions and logits rows (nl of them) are in g->h_ids (and,
 * for a batch pool, n_bt block tables in pool->h_bt): upload, run, download logits row j into
 * dst[j] (NULL: not wanted) and its argmax into *ids[j] (ids NULL or ids[j] NULL: not wanted). A
 * chunk of rows that want no logits, only ids, gets its ids from the GPU with MOQ_CUDA_ARGMAX=1
 * (moq_cuda_argmax_rows: 8 bytes a row cross the bus instead of 4 V); otherwise the rows come down,
 * are checked and the ids found on the host. A step where every row wants logits and M <= MOQ_GPU_GRAPHS (a decode
 * step) replays the pool's CUDA graph for M rows (captured at its first use); other steps are
 * enqueued eagerly, their logits MOQ_GPU_LROWS rows at a time. span = most keys any token attends;
 * one_seq: the rows are one sequence at consecutive positions (a prefill: the tiled attention
 * kernel). The host waits on the stream only to read the logits (or, without logits rows, at the end). */
static moq_status gpu_step(moq_model *m, moq_gpu_kv *pool, int64_t M, int64_t nl, int64_t n_bt, int64_t span, bool one_seq, float *const *dst,
                           int32_t *const *ids, moq_error *err) {
    moq_gpu *g = m->gpu;
    const char *where = moq_checkpoint_path(m->ckpt);
    for (int64_t i = 0; m->tp.G > 1 && i < M; i++) { /* --tp: this rank's table rows; the zero row after them for the others' */
        const int64_t r = g->h_ids[i] - m->tp.v0;
        g->h_ids[i] = (int32_t)(r >= 0 && r < m->tp.v_n ? r : m->tp.v_n);
    }
    MOQ_TRY(cuda_ok(moq_cuda_h2d_async(g->ids, g->h_ids, (size_t)(4 * g->rows) * sizeof(int32_t), g->stream), where, err));
    if (n_bt)
        MOQ_TRY(cuda_ok(moq_cuda_h2d_async(pool->bt, pool->h_bt, (size_t)(n_bt * pool->max_pages) * sizeof(int32_t), g->stream), where, err));
    const bool graph = !g->no_graphs && nl == M && M <= MOQ_GPU_GRAPHS;
    const bool flash = !graph && one_seq && M > 1;
    int64_t n_split = MOQ_GPU_GRAPH_SPLITS; /* a graph covers every length: 64 ranges, each token cuts its own */
    if (!graph) {
        n_split = (span + MOQ_CUDA_SPLIT_MIN - 1) / MOQ_CUDA_SPLIT_MIN;
        n_split = n_split < 1 ? 1 : n_split > MOQ_GPU_SPLITS ? MOQ_GPU_SPLITS : n_split;
    }
    if (graph && !pool->graph[M]) { /* first step of this row count: capture it */
        MOQ_TRY(cuda_ok(moq_cuda_capture_begin(g->stream), where, err));
        moq_status st = enqueue_layers(m, pool, M, n_split, false, err);
        if (st == MOQ_OK) st = enqueue_logits(m, 0, nl, err);
        if (st != MOQ_OK) {
            moq_cuda_capture_end(g->stream, NULL);
            return st;
        }
        MOQ_TRY(cuda_ok(moq_cuda_capture_end(g->stream, &pool->graph[M]), where, err));
    }
    if (graph) MOQ_TRY(cuda_ok(moq_cuda_graph_launch(pool->graph[M], g->stream), where, err));
    else MOQ_TRY(enqueue_layers(m, pool, M, n_split, flash, err));
    const int64_t V = m->V;
    if (nl == 0) return cuda_ok(moq_cuda_stream_sync(g->stream), where, err); /* the staging buffers are reused next step */
    for (int64_t r = 0; r < nl; r += MOQ_GPU_LROWS) {
        const int64_t n = nl - r < MOQ_GPU_LROWS ? nl - r : MOQ_GPU_LROWS;
        if (!graph) MOQ_TRY(enqueue_logits(m, r, n, err));
        bool ids_only = ids && m->tp.G == 1 && device_argmax();
        for (int64_t j = 0; ids_only && j < n; j++) ids_only = !dst[r + j] && ids[r + j];
        if (ids_only) {
            MOQ_TRY(cuda_ok(moq_cuda_argmax_rows(g->logits, n, V, g->amax, g->stream), where, err));
            MOQ_TRY(cuda_ok(moq_cuda_d2h_async(g->h_amax, g->amax, (size_t)(2 * n) * sizeof(int32_t), g->stream), where, err));
            MOQ_TRY(cuda_ok(moq_cuda_stream_sync(g->stream), where, err));
            for (int64_t j = 0; j < n; j++)
                if (g->h_amax[2 * j + 1] >= 0) return logits_not_finite(m, r + j, g->h_amax[2 * j + 1] >> 1, g->h_amax[2 * j + 1] & 1, err);
            for (int64_t j = 0; j < n; j++) *ids[r + j] = g->h_amax[2 * j];
            continue;
        }
        if (m->tp.G > 1) { /* vocabulary-parallel lm_head: [n, v_n] per rank, gathered [G][n, v_per], unpacked [n, V] */
            const int64_t vp = m->tp.v_per;
            MOQ_TRY(moq_comm_all_gather_on(m->comm, g->logits, g->lg_d, (size_t)(n * vp), g->stream, err));
            MOQ_TRY(cuda_ok(moq_cuda_d2h_async(g->lg_h, g->lg_d, (size_t)(n * vp * m->tp.G) * sizeof(float), g->stream), where, err));
            MOQ_TRY(cuda_ok(moq_cuda_stream_sync(g->stream), where, err));
            for (int q = 0; q < m->tp.G; q++) {
                const int64_t v0 = q * vp, vn = V - v0 < vp ? V - v0 : vp;
                for (int64_t j = 0; j < n; j++)
                    memcpy(g->h_logits + j * V + v0, g->lg_h + (int64_t)q * n * vp + j * vn, (size_t)vn * sizeof(float));
            }
        } else {
            MOQ_TRY(cuda_ok(moq_cuda_d2h_async(g->h_logits, g->logits, (size_t)(n * V) * sizeof(float), g->stream), where, err));
            MOQ_TRY(cuda_ok(moq_cuda_stream_sync(g->stream), where, err));
        }
        /* each row checked block by block as it is copied, rows over the threads at batch sizes (a
         * scalar isfinite loop and one thread took ~10 ms of a batch-64 step of 8M logits) */
        int64_t bad[MOQ_GPU_LROWS];
#pragma omp parallel for num_threads(m->n_threads) schedule(static) if (n * V >= ((int64_t)1 << 20))
        for (int64_t j = 0; j < n; j++) {
            const float *src = g->h_logits + j * V;
            bad[j] = dst[r + j] ? moq_f32_copy_first_nonfinite(dst[r + j], src, V) : moq_f32_first_nonfinite(src, V);
            if (bad[j] < 0 && ids && ids[r + j]) *ids[r + j] = (int32_t)moq_f32_argmax_first(src, V);
        }
        for (int64_t j = 0; j < n; j++)
            if (bad[j] >= 0) return logits_not_finite(m, r + j, bad[j], isnan(g->h_logits[j * V + bad[j]]), err);
    }
    return MOQ_OK;
}

/* Fills row i of the step plan. */
static void plan_row(moq_gpu *g, int64_t i, int32_t tok, int32_t seq, int32_t pos) {
    g->h_ids[i] = tok, g->h_ids[g->rows + i] = seq, g->h_ids[2 * g->rows + i] = pos;
}

moq_status moq_gpu_decode_batch(moq_model *m, int64_t B, const int32_t *slots, const int32_t *tokens, const int32_t *pos, float *logits,
                                moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "the model was not opened on the GPU");
    if (B < 1 || B > g->chunk || !slots || !tokens || !pos || !logits)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "%lld sequences, expected 1..%lld and non-NULL arrays", (long long)B, (long long)g->chunk);
    int64_t span = 0;
    float *dst[MOQ_GPU_CHUNK];
    for (int64_t b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= g->n_seqs || pos[b] < 0 || pos[b] >= m->T || tokens[b] < 0 || tokens[b] >= m->V)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "sequence %lld: slot %d of %lld, position %d of %lld, token %d of %lld",
                            (long long)b, slots[b], (long long)g->n_seqs, pos[b], (long long)m->T, tokens[b], (long long)m->V);
        for (int64_t c = 0; c < b; c++)
            if (slots[c] == slots[b]) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "slot %d appears twice in one step", slots[b]);
        if (pos[b] + 1 > span) span = pos[b] + 1;
        plan_row(g, b, tokens[b], slots[b], pos[b]);
        g->h_ids[3 * g->rows + b] = (int32_t)b, dst[b] = logits + b * m->V;
    }
    return gpu_step(m, &g->own, B, B, 0, span, false, dst, NULL, err);
}

moq_status moq_gpu_prefill_slot(moq_model *m, int32_t slot, const int32_t *tok, int64_t n, int32_t pos0, float *logits_last, moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g || slot < 0 || slot >= g->n_seqs || n < 1 || pos0 < 0 || pos0 + n > m->T)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_prefill_slot", "slot %d, %lld tokens at position %d: expected a GPU model, a reserved slot and "
                        "positions inside the context of %lld", slot, (long long)n, pos0, (long long)m->T);
    for (int64_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= m->V)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_prefill_slot", "token %d at index %lld, expected [0, %lld)", tok[i], (long long)i, (long long)m->V);
    for (int64_t i = 0; i < n; i += g->rows) {
        const int64_t M = n - i < g->rows ? n - i : g->rows;
        for (int64_t j = 0; j < M; j++) plan_row(g, j, tok[i + j], slot, (int32_t)(pos0 + i + j));
        g->h_ids[3 * g->rows] = (int32_t)(M - 1);
        MOQ_TRY(gpu_step(m, &g->own, M, 1, 0, pos0 + i + M, true, &logits_last, NULL, err));
    }
    return MOQ_OK;
}

moq_status moq_gpu_forward(moq_model *m, const int32_t *tok, int64_t M, float *logits_rows, moq_error *err) {
    moq_gpu *g = m->gpu;
    float *dst[MOQ_GPU_PREFILL] = {NULL};
    const int64_t nl = logits_rows ? M : 1;
    for (int64_t i = 0; i < M; i++) plan_row(g, i, tok[i], 0, (int32_t)(m->pos + i));
    for (int64_t j = 0; j < nl; j++) g->h_ids[3 * g->rows + j] = (int32_t)(logits_rows ? j : M - 1), dst[j] = logits_rows ? logits_rows + j * m->V : m->logits;
    MOQ_TRY(gpu_step(m, &g->own, M, nl, 0, m->pos + M, true, dst, NULL, err));
    if (logits_rows) memcpy(m->logits, logits_rows + (M - 1) * m->V, (size_t)m->V * sizeof(float));
    m->pos += M;
    return MOQ_OK;
}

void moq_gpu_profile_range(int on) { moq_cuda_profiler_range(on); }

uint64_t moq_gpu_mem_used(void) {
    size_t fr = 0, tot = 0;
    return moq_cuda_mem_info(&fr, &tot) ? 0 : (uint64_t)(tot - fr);
}

/* ---- moq_batch's pool on the GPU (batch.c) ---- */
moq_status moq_gpu_kv_create(moq_model *m, int64_t n_pages, int64_t page, moq_gpu_kv **out, moq_error *err) {
    *out = NULL;
    moq_gpu *g = m->gpu;
    moq_gpu_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_batch_create", "out of host memory");
    moq_status st = kv_alloc(m, kv, n_pages, page, g->chunk, err);
    if (st == MOQ_OK && moq_cuda_host_alloc((size_t)(g->chunk * kv->max_pages) * sizeof(int32_t), (void **)&kv->h_bt))
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_batch_create", "out of pinned host memory for the block tables");
    if (st != MOQ_OK) {
        kv_release(kv, m->L);
        free(kv);
        return st;
    }
    *out = kv;
    return MOQ_OK;
}

void moq_gpu_kv_free(moq_model *m, moq_gpu_kv *kv) {
    if (!kv) return;
    if (m->gpu) moq_cuda_stream_sync(m->gpu->stream);
    kv_release(kv, m->L);
    free(kv);
}

moq_status moq_gpu_forward_rows(moq_model *m, moq_gpu_kv *kv, const int32_t *tok, const int64_t *pos, const int32_t *const *tabs, int64_t M,
                                const int64_t *lrows, int64_t nl, float *const *dst, int32_t *const *ids, moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g || M < 1 || M > g->chunk || nl < 0 || nl > M)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "moq_gpu_forward_rows", "%lld rows with %lld logits rows, expected 1..%lld", (long long)M, (long long)nl,
                        (long long)(g ? g->chunk : 0));
    int64_t n_bt = 0, span = 0;
    bool consecutive = true;
    for (int64_t i = 0; i < M; i++) {
        if (i && pos[i] != pos[i - 1] + 1) consecutive = false; /* rows of one sequence are consecutive: one table row per sequence */
        if (i == 0 || tabs[i] != tabs[i - 1]) n_bt++;
        plan_row(g, i, tok[i], (int32_t)(n_bt - 1), (int32_t)pos[i]);
        if (pos[i] + 1 > span) span = pos[i] + 1;
        if (i == M - 1 || tabs[i + 1] != tabs[i]) /* the sequence's last row: its pages so far */
            memcpy(kv->h_bt + (n_bt - 1) * kv->max_pages, tabs[i], (size_t)((pos[i] + kv->page) / kv->page) * sizeof(int32_t));
    }
    for (int64_t j = 0; j < nl; j++) g->h_ids[3 * g->rows + j] = (int32_t)lrows[j];
    return gpu_step(m, kv, M, nl, n_bt, span, n_bt == 1 && consecutive, dst, ids, err);
}

#else /* built without CUDA: moq_model_open refuses device CUDA before any of these is reached */

bool moq_gpu_built(void) { return false; }
moq_status moq_gpu_open(moq_model *m, moq_error *err) {
    (void)m;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_model_open", "this libmoq was built without CUDA (cmake -DMOQ_CUDA=ON needs nvcc)");
}
void moq_gpu_free(moq_model *m) { (void)m; }
int64_t moq_gpu_chunk(const moq_model *m) {
    (void)m;
    return 0;
}
int64_t moq_gpu_batch_chunk(const moq_model *m) {
    (void)m;
    return 0;
}
moq_status moq_gpu_forward(moq_model *m, const int32_t *tok, int64_t M, float *logits_rows, moq_error *err) {
    (void)m, (void)tok, (void)M, (void)logits_rows;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_model_prefill", "this libmoq was built without CUDA");
}
moq_status moq_gpu_reserve_seqs(moq_model *m, int64_t n, moq_error *err) {
    (void)m, (void)n;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_gpu_reserve_seqs", "this libmoq was built without CUDA");
}
moq_status moq_gpu_decode_batch(moq_model *m, int64_t B, const int32_t *slots, const int32_t *tokens, const int32_t *pos, float *logits,
                                moq_error *err) {
    (void)m, (void)B, (void)slots, (void)tokens, (void)pos, (void)logits;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_gpu_decode_batch", "this libmoq was built without CUDA");
}
moq_status moq_gpu_prefill_slot(moq_model *m, int32_t slot, const int32_t *tok, int64_t n, int32_t pos0, float *logits_last, moq_error *err) {
    (void)m, (void)slot, (void)tok, (void)n, (void)pos0, (void)logits_last;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_gpu_prefill_slot", "this libmoq was built without CUDA");
}
int moq_gpu_kv_elem_bytes(const moq_model *m) {
    (void)m;
    return 2;
}
uint64_t moq_gpu_mem_used(void) { return 0; }
void moq_gpu_profile_range(int on) { (void)on; }
moq_status moq_gpu_kv_create(moq_model *m, int64_t n_pages, int64_t page, moq_gpu_kv **out, moq_error *err) {
    (void)m, (void)n_pages, (void)page;
    *out = NULL;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_batch_create", "this libmoq was built without CUDA");
}
void moq_gpu_kv_free(moq_model *m, moq_gpu_kv *kv) { (void)m, (void)kv; }
moq_status moq_gpu_forward_rows(moq_model *m, moq_gpu_kv *kv, const int32_t *tok, const int64_t *pos, const int32_t *const *tabs, int64_t M,
                                const int64_t *lrows, int64_t nl, float *const *dst, int32_t *const *ids, moq_error *err) {
    (void)m, (void)kv, (void)tok, (void)pos, (void)tabs, (void)M, (void)lrows, (void)nl, (void)dst, (void)ids;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_batch_run", "this libmoq was built without CUDA");
}
#endif
