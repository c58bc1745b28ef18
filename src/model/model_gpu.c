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
 * enqueues everything on the default stream; its only host synchronisations are the upload of the
 * token ids and positions at the start and the download of the logits at the end. The KV cache is
 * paged (MOQ_GPU_PAGE positions per page, a block table per sequence slot) in bf16, or e4m3 with
 * the checkpoint's per-layer k/v scales when kv_cache_quant_algo is FP8 (kv_cache.c's rules); an
 * f32 cache request gets bf16 on the GPU. The public API runs sequence slot 0; the kernels take
 * (sequence, position) per token, so a batched decode of B slots is one step of M = B tokens.
 * Tested by tests/model/test_model_cuda.c against the CPU forward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/model_priv.h"

#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/cuda_api.h"

#define MOQ_GPU_CHUNK 256    /* tokens per prefill step                          */
#define MOQ_GPU_PAGE 16      /* positions per KV page                            */
#define MOQ_GPU_SPLITS 16    /* most key ranges one query's attention is split in */

typedef struct gpu_layer {
    float *in_norm, *post_norm, *q_norm, *k_norm; /* device f32 [H], [D] */
    void  *k, *v;                                  /* this layer's KV pages */
    float  k_scale, v_scale;
} gpu_layer;

struct moq_gpu {
    int64_t    chunk, n_seqs, max_pages;
    int        kv_elem;                  /* MOQ_CUDA_KV_*                           */
    float     *x, *h, *qkv, *att, *tmp, *gu, *act, *logits, *part;
    void      *ws;
    size_t     ws_size;
    size_t     kv_bytes;                 /* one layer's K (or V) pool                */
    int32_t   *ids;                      /* device [3, chunk]: tokens, slots, positions */
    int32_t   *h_ids;                    /* host staging of the same                 */
    int32_t   *block_table;              /* device [n_seqs, max_pages]               */
    float     *table, *final_norm, *inv_freq;
    float     *lg_d, *lg_h;              /* --tp: gathered logits [G, chunk v_per], device and host */
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
    const int64_t C = g->chunk = m->T < MOQ_GPU_CHUNK ? m->T : MOQ_GPU_CHUNK, H = m->H, D = m->D, A = m->A, KV = m->KV;
    const int64_t qkvN = (A + 2 * KV) * D;
    g->max_pages = (m->T + MOQ_GPU_PAGE - 1) / MOQ_GPU_PAGE;
    g->kv_elem = m->kv.elem == MOQ_ELEM_E4M3 ? MOQ_CUDA_KV_E4M3 : MOQ_CUDA_KV_BF16;
    g->ly = calloc((size_t)m->L, sizeof *g->ly);
    g->h_ids = calloc((size_t)(3 * C), sizeof *g->h_ids);
    if (!g->ly || !g->h_ids) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of host memory");
    MOQ_TRY(moq_gpu_reserve_seqs(m, 1, err));
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        gpu_layer *gl = &g->ly[l];
        MOQ_TRY(upload_f32(g, &gl->in_norm, ly->in_norm, H, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->post_norm, ly->post_norm, H, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->q_norm, ly->q_norm, D, "a norm weight", err));
        MOQ_TRY(upload_f32(g, &gl->k_norm, ly->k_norm, D, "a norm weight", err));
        gl->k_scale = g->kv_elem == MOQ_CUDA_KV_E4M3 ? m->kv.k_scale[ly->kvl] : 1.0f;
        gl->v_scale = g->kv_elem == MOQ_CUDA_KV_E4M3 ? m->kv.v_scale[ly->kvl] : 1.0f;
    }
    MOQ_TRY(upload_f32(g, &g->final_norm, m->final_norm, H, "the final norm", err));
    MOQ_TRY(upload_f32(g, &g->inv_freq, m->inv_freq, D / 2, "the RoPE frequencies", err));
    MOQ_TRY(upload_table(m, g, err));
    struct { float **p; int64_t n; } bufs[] = {
        {&g->x, C * H}, {&g->h, C * H}, {&g->qkv, C * qkvN}, {&g->att, C * A * D}, {&g->tmp, C * H},
        {&g->gu, C * 2 * m->I}, {&g->act, C * m->I}, {&g->logits, C * m->V}, {&g->part, C * A * MOQ_GPU_SPLITS * (D + 2)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) MOQ_TRY(dev_alloc(g, (void **)bufs[i].p, (size_t)bufs[i].n * sizeof(float), "activations", err));
    MOQ_TRY(dev_alloc(g, (void **)&g->ids, (size_t)(3 * C) * sizeof(int32_t), "token ids", err));
    if (m->tp.G > 1) { /* the vocabulary-parallel lm_head's gather */
        const size_t n = (size_t)(C * m->tp.v_per * m->tp.G);
        MOQ_TRY(dev_alloc(g, (void **)&g->lg_d, n * sizeof(float), "the gathered logits", err));
        if (!(g->lg_h = malloc(n * sizeof(float)))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of host memory");
    }
    size_t ws = lin_ws(m->lm_head, C);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const moq_layer_linear *ls[] = {&ly->qkv, &ly->o, &ly->gate_up, &ly->down};
        for (int i = 0; i < 4; i++)
            if (lin_ws(ls[i], C) > ws) ws = lin_ws(ls[i], C);
    }
    g->ws_size = ws;
    return dev_alloc(g, &g->ws, ws, "the linear workspace", err);
}

static void free_kv(moq_gpu *g, int64_t L) {
    for (int64_t l = 0; g->ly && l < L; l++) {
        moq_device_free(MOQ_DEVICE_CUDA, g->ly[l].k), moq_device_free(MOQ_DEVICE_CUDA, g->ly[l].v);
        g->ly[l].k = g->ly[l].v = NULL;
    }
    moq_device_free(MOQ_DEVICE_CUDA, g->block_table);
    g->block_table = NULL, g->n_seqs = 0;
}

moq_status moq_gpu_reserve_seqs(moq_model *m, int64_t n, moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_reserve_seqs", "the model was not opened on the GPU");
    if (n < 1 || n > (int64_t)1 << 20) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_reserve_seqs", "%lld sequences, expected 1..1048576", (long long)n);
    free_kv(g, m->L);
    const int64_t pages = n * g->max_pages;
    int32_t *bt = malloc((size_t)pages * sizeof *bt);
    if (!bt) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_gpu_reserve_seqs", "out of host memory for a block table of %lld pages", (long long)pages);
    for (int64_t i = 0; i < pages; i++) bt[i] = (int32_t)i; /* slot s owns pages s·max_pages .. (s+1)·max_pages - 1 */
    moq_error e;
    moq_status st = moq_device_alloc(MOQ_DEVICE_CUDA, (size_t)pages * sizeof *bt, (void **)&g->block_table, &e);
    if (st == MOQ_OK) st = moq_device_upload(MOQ_DEVICE_CUDA, g->block_table, bt, (size_t)pages * sizeof *bt, &e);
    free(bt);
    g->kv_bytes = (size_t)(pages * MOQ_GPU_PAGE * m->KV * m->D) * (g->kv_elem == MOQ_CUDA_KV_E4M3 ? 1 : 2);
    for (int64_t l = 0; st == MOQ_OK && l < m->L; l++) {
        st = moq_device_alloc(MOQ_DEVICE_CUDA, g->kv_bytes, &g->ly[l].k, &e);
        if (st == MOQ_OK) st = moq_device_alloc(MOQ_DEVICE_CUDA, g->kv_bytes, &g->ly[l].v, &e);
    }
    if (st == MOQ_OK) {
        g->n_seqs = n;
        return MOQ_OK;
    }
    free_kv(g, m->L);
    return MOQ_FAIL(err, MOQ_ERR_DEVICE, moq_checkpoint_path(m->ckpt),
                    "GPU memory for the KV cache (%lld sequences x %lld positions x %lld layers, %.1f MiB) did not fit after %.1f MiB of "
                    "weights' workspaces and activations: %s",
                    (long long)n, (long long)m->T, (long long)m->L, 2.0 * (double)g->kv_bytes * (double)m->L / 1048576.0,
                    (double)g->bytes / 1048576.0, e.msg);
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
    free_kv(g, m->L);
    for (size_t i = 0; i < g->n_mem; i++) moq_device_free(MOQ_DEVICE_CUDA, g->mem[i]);
    free(g->mem), free(g->ly), free(g->h_ids), free(g->lg_h), free(g);
    m->gpu = NULL;
}

int64_t moq_gpu_chunk(const moq_model *m) { return m->gpu ? m->gpu->chunk : 0; }

static moq_status lin(const moq_gpu *g, const moq_layer_linear *l, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, g->ws, g->ws_size, err);
}

/* --tp G (NCCL, one GPU per rank; model_tp.c): the all-reduce of a row-parallel output, in place on
 * the device. Nothing without --tp. */
static moq_status tp_sum_d(moq_model *m, float *x_d, int64_t n, moq_error *err) {
    return m->tp.G > 1 ? moq_comm_all_reduce(m->comm, x_d, (size_t)n, err) : MOQ_OK;
}

/* One step of M tokens: tok, slot, pos host arrays [M]; span = most keys any token attends. */
static moq_status gpu_step(moq_model *m, const int32_t *tok, const int32_t *slot, const int32_t *pos, int64_t M, int64_t span,
                           int64_t r0, float *logits_out, moq_error *err) {
    moq_gpu *g = m->gpu;
    const int64_t H = m->H, D = m->D, A = m->A, KV = m->KV, C = g->chunk;
    memcpy(g->h_ids, tok, (size_t)M * sizeof *tok);
    for (int64_t i = 0; m->tp.G > 1 && i < M; i++) { /* --tp: this rank's table rows; the zero row for the others' */
        const int64_t r = tok[i] - m->tp.v0;
        g->h_ids[i] = (int32_t)(r >= 0 && r < m->tp.v_n ? r : m->tp.v_n);
    }
    memcpy(g->h_ids + C, slot, (size_t)M * sizeof *slot);
    memcpy(g->h_ids + 2 * C, pos, (size_t)M * sizeof *pos);
    MOQ_TRY(moq_device_upload(MOQ_DEVICE_CUDA, g->ids, g->h_ids, (size_t)(3 * C) * sizeof(int32_t), err));
    const int32_t *tok_d = g->ids, *seq_d = g->ids + C, *pos_d = g->ids + 2 * C;
    const char *where = moq_checkpoint_path(m->ckpt);
    int64_t split_keys = (span + MOQ_GPU_SPLITS - 1) / MOQ_GPU_SPLITS;
    if (split_keys < 64) split_keys = 64;
    const int64_t n_split = (span + split_keys - 1) / split_keys;
    MOQ_TRY(cuda_ok(moq_cuda_embed(tok_d, M, g->table, 0, H, m->embed_mult, g->x), m->embed.name, err));
    MOQ_TRY(tp_sum_d(m, g->x, M * H, err));
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const gpu_layer *gl = &g->ly[l];
        /* x += t of the previous layer's MLP (none before layer 0), h = rmsnorm(x) */
        MOQ_TRY(cuda_ok(moq_cuda_add_rmsnorm(g->x, l ? g->tmp : NULL, gl->in_norm, M, H, m->eps, g->h), where, err));
        MOQ_TRY(lin(g, &ly->qkv, g->h, M, g->qkv, err));
        const moq_cuda_kv kv = {.k = gl->k, .v = gl->v, .block_table = g->block_table, .max_pages = g->max_pages, .page = MOQ_GPU_PAGE,
                                .elem = g->kv_elem, .k_scale = gl->k_scale, .v_scale = gl->v_scale};
        MOQ_TRY(cuda_ok(moq_cuda_qk_rope_store(g->qkv, M, A, KV, D, gl->q_norm, gl->k_norm, m->eps, g->inv_freq, ly->mscale, seq_d, pos_d, &kv),
                        ly->qkv.name, err));
        MOQ_TRY(cuda_ok(moq_cuda_attention(g->qkv, M, A, KV, D, m->attn_scale, ly->window, seq_d, pos_d, &kv, n_split, split_keys, g->part, g->att),
                        ly->o.name, err));
        MOQ_TRY(lin(g, &ly->o, g->att, M, g->tmp, err));
        MOQ_TRY(tp_sum_d(m, g->tmp, M * H, err)); /* row-parallel o_proj */
        MOQ_TRY(cuda_ok(moq_cuda_add_rmsnorm(g->x, g->tmp, gl->post_norm, M, H, m->eps, g->h), where, err));
        MOQ_TRY(lin(g, &ly->gate_up, g->h, M, g->gu, err));
        MOQ_TRY(cuda_ok(moq_cuda_swiglu(g->gu, M, m->I, g->act), ly->gate_up.name, err));
        MOQ_TRY(lin(g, &ly->down, g->act, M, g->tmp, err));
        MOQ_TRY(tp_sum_d(m, g->tmp, M * H, err)); /* row-parallel down_proj */
    }
    const int64_t nr = M - r0;
    MOQ_TRY(cuda_ok(moq_cuda_add_rmsnorm(g->x + r0 * H, g->tmp + r0 * H, g->final_norm, nr, H, m->eps, g->h), where, err));
    MOQ_TRY(lin(g, m->lm_head, g->h, nr, g->logits, err));
    if (m->tp.G > 1) { /* vocabulary-parallel: [nr, v_n] per rank, gathered [G][nr, v_per], unpacked [nr, V] */
        const int64_t vp = m->tp.v_per;
        MOQ_TRY(moq_comm_all_gather(m->comm, g->logits, g->lg_d, (size_t)(nr * vp), err));
        MOQ_TRY(moq_device_download(MOQ_DEVICE_CUDA, g->lg_h, g->lg_d, (size_t)(nr * vp * m->tp.G) * sizeof(float), err));
        for (int r = 0; r < m->tp.G; r++) {
            const int64_t v0 = r * vp, vn = m->V - v0 < vp ? m->V - v0 : vp;
            for (int64_t j = 0; j < nr; j++)
                memcpy(logits_out + j * m->V + v0, g->lg_h + (int64_t)r * nr * vp + j * vn, (size_t)vn * sizeof(float));
        }
    } else {
        MOQ_TRY(moq_device_download(MOQ_DEVICE_CUDA, logits_out, g->logits, (size_t)(nr * m->V) * sizeof(float), err));
    }
    for (int64_t c = 0; c < nr * m->V; c++)
        if (!isfinite(logits_out[c]))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, m->lm_head->name,
                            "logits are not finite (%s at row %lld, column %lld) on the GPU; `moq run --device cpu` names the module "
                            "whose output turns non-finite, `moq check --values` the tensors",
                            isnan(logits_out[c]) ? "NaN" : "Inf", (long long)(c / m->V), (long long)(c % m->V));
    return MOQ_OK;
}

moq_status moq_gpu_decode_batch(moq_model *m, int64_t B, const int32_t *slots, const int32_t *tokens, const int32_t *pos, float *logits,
                                moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "the model was not opened on the GPU");
    if (B < 1 || B > g->chunk || !slots || !tokens || !pos || !logits)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "%lld sequences, expected 1..%lld and non-NULL arrays", (long long)B, (long long)g->chunk);
    int64_t span = 0;
    for (int64_t b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= g->n_seqs || pos[b] < 0 || pos[b] >= m->T || tokens[b] < 0 || tokens[b] >= m->V)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "sequence %lld: slot %d of %lld, position %d of %lld, token %d of %lld",
                            (long long)b, slots[b], (long long)g->n_seqs, pos[b], (long long)m->T, tokens[b], (long long)m->V);
        for (int64_t c = 0; c < b; c++)
            if (slots[c] == slots[b]) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_decode_batch", "slot %d appears twice in one step", slots[b]);
        if (pos[b] + 1 > span) span = pos[b] + 1;
    }
    return gpu_step(m, tokens, slots, pos, B, span, 0, logits, err);
}

moq_status moq_gpu_prefill_slot(moq_model *m, int32_t slot, const int32_t *tok, int64_t n, int32_t pos0, float *logits_last, moq_error *err) {
    moq_gpu *g = m->gpu;
    if (!g || slot < 0 || slot >= g->n_seqs || n < 1 || pos0 < 0 || pos0 + n > m->T)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_prefill_slot", "slot %d, %lld tokens at position %d: expected a GPU model, a reserved slot and "
                        "positions inside the context of %lld", slot, (long long)n, pos0, (long long)m->T);
    int32_t s[MOQ_GPU_CHUNK], p[MOQ_GPU_CHUNK];
    for (int64_t i = 0; i < n; i += g->chunk) {
        const int64_t M = n - i < g->chunk ? n - i : g->chunk;
        for (int64_t j = 0; j < M; j++) {
            if (tok[i + j] < 0 || tok[i + j] >= m->V)
                return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gpu_prefill_slot", "token %d at index %lld, expected [0, %lld)", tok[i + j],
                                (long long)(i + j), (long long)m->V);
            s[j] = slot, p[j] = (int32_t)(pos0 + i + j);
        }
        MOQ_TRY(gpu_step(m, tok + i, s, p, M, pos0 + i + M, M - 1, logits_last, err));
    }
    return MOQ_OK;
}

moq_status moq_gpu_forward(moq_model *m, const int32_t *tok, int64_t M, float *logits_rows, moq_error *err) {
    moq_gpu *g = m->gpu;
    (void)g;
    int32_t s[MOQ_GPU_CHUNK], p[MOQ_GPU_CHUNK];
    for (int64_t i = 0; i < M; i++) s[i] = 0, p[i] = (int32_t)(m->pos + i);
    float *out = logits_rows ? logits_rows : m->logits;
    MOQ_TRY(gpu_step(m, tok, s, p, M, m->pos + M, logits_rows ? 0 : M - 1, out, err));
    if (logits_rows) memcpy(m->logits, logits_rows + (M - 1) * m->V, (size_t)m->V * sizeof(float));
    m->pos += M;
    return MOQ_OK;
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
#endif
