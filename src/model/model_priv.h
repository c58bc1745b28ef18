/* model_priv.h — the runner's state shared by model.c (CPU forward, open) and model_gpu.c (the
 * GPU forward, --device cuda). Not installed; nothing outside src/model includes it. */
#ifndef MOQ_MODEL_MODEL_PRIV_H
#define MOQ_MODEL_MODEL_PRIV_H

#include "dist/comm.h"
#include "dist/plan.h"
#include "model/arch/deepseek_v3.h"
#include "model/arch/deepseek_v4.h"
#include "model/arch/gemma3.h"
#include "model/arch/gemma4.h"
#include "model/arch/llama4.h"
#include "model/arch/qwen3_5.h"
#include "model/attn/dsv4.h"
#include "model/attn/gdn.h"
#include "model/attn/mla.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/model.h"
#include "moe/moe.h"

#define MOQ_MODEL_MAX_WARN 16

typedef struct arch_row arch_row;   /* model.c */
typedef struct moq_gpu moq_gpu;     /* model_gpu.c */
typedef struct moq_tp_group moq_tp_group; /* model_tp.c */

typedef struct layer {
    moq_layer_linear qkv, o, gate_up, down;
    moq_mla          mla;                /* ATTN_MLA layers (then qkv and o are unused)       */
    moq_layer_linear sh_gate_up, sh_down;/* shared expert of an MoE layer (arch_row.shared_expert) */
    moq_layer_linear sh_gate;            /* its sigmoid gate [1, H] (arch_row.shared_gate)       */
    bool             has_shared;
    bool             linear;             /* ATTN_HYBRID_GDN: a Gated DeltaNet layer              */
    int64_t          kvl;                /* its layer in the KV cache (linear layers have none)  */
    moq_gdn          gdn;
    moq_moe         *moe;                /* MoE: router + experts (src/moe), NULL when dense  */
    moq_moe_format   moe_fmt;
    bool             is_moe;             /* routed experts in place of the dense MLP          */
    int64_t          window;             /* sliding window in positions, 0 = full causal      */
    int64_t          chunk;              /* Llama 4 chunked attention: keys of the query's chunk of
                                            this many positions only (0 = none)                  */
    bool             nope;               /* Llama 4 NoPE layer: no RoPE                           */
    bool             l2_qk;              /* Llama 4: q, k / rms(q, k) after RoPE (no weight)       */
    bool             temp;               /* Llama 4: q × the attention temperature of its position */
    int64_t          D, KV, qh, Drot;    /* this layer's head_dim, KV heads, q values per head and
                                            rotary part (m's, except Gemma 4's global layers)     */
    int64_t          qkvN;               /* values per token of the qkv buffer: A qh + 2 KV D      */
    bool             k_eq_v;             /* Gemma 4 attention_k_eq_v global layer: fused [q | k]
                                            only, v = the k projection before k_norm              */
    bool             v_norm;             /* Gemma 4: v / rms(v) per head (no weight)               */
    bool             qk_full;            /* MiniMax-M2: q_norm / k_norm over the whole projection  */
    float            scalar;             /* Gemma 4 layer_scalar: x × this at the layer's end (1)  */
    bool             g4moe;              /* Gemma 4 MoE block: routed experts beside the MLP       */
    moq_layer_linear g4_router;          /* router.proj [E, H]                                    */
    float *router_scale, *expert_scale;  /* router.scale [H], router.per_expert_scale [E]         */
    float *post_ffn1, *pre_ffn2, *post_ffn2; /* post_feedforward_layernorm_1, pre_/post_..._2 [H] */
    float *in_norm, *post_norm;      /* f32 [H]          */
    float *pre_ffn_norm, *post_ffn_norm; /* f32 [H], arch_row.sandwich */
    const float *inv_freq;           /* this layer's RoPE (Gemma: global or local), f32 [Drot/2] */
    float  mscale;
    float *q_norm, *k_norm;          /* f32 [D] or NULL (qk_full: [A·D], [KV·D]) */
    float *sinks;                    /* f32 [A] or NULL: arch_row.sinks */
    moq_dsv4_attn    v4;                 /* ATTN_DSV4 layers: attention, compressors, mHC       */
    int32_t         *hash_ids;           /* DeepSeek-V4 hash_moe layer: tid2eid i32 [V, topk]    */
} layer;

struct moq_model {
    moq_checkpoint   *ckpt;
    moq_qconfig      *q;
    const arch_row   *arch;
    moq_model_opts    opts;
    int               n_threads;
    int64_t           H, A, KV, D, I, V, L, T, chunk;
    int64_t           E, topk, Ie;       /* experts, experts per token, expert intermediate  */
    int64_t           Is;                /* shared expert intermediate (0 = none)            */
    int64_t           kv_row;            /* cache values per position and layer              */
    bool              norm_topk;
    moq_deepseek_cfg  ds;                /* ATTN_MLA / ROUTER_SIGMOID_GROUPED rows            */
    moq_mla_dims      mla;
    moq_mla_ws        mws;
    moq_qwen3_5_cfg   qc;                /* ATTN_HYBRID_GDN rows                             */
    moq_gdn_dims      gdn;
    moq_gdn_ws        gws;
    int64_t           qh;                /* q values per head in qkv_proj: D, or 2 D with the output gate */
    int64_t           Drot;              /* rotary part of a head (partial_rotary_factor)    */
    moq_gemma3_cfg    gc;                /* FAM_GEMMA3 rows (FAM_GEMMA4: its Gemma 3 part)    */
    moq_gemma4_cfg    g4;                /* FAM_GEMMA4 rows                                  */
    int64_t           Dmax, qkv_max;     /* largest head_dim and qkv row over the layers     */
    float            *kpad, *vpad;       /* [kv_row]: a layer's K/V row padded to the cache row */
    float            *rin, *rlog, *moe_out; /* Gemma 4 MoE: router input [C, H], logits [C, E],
                                            expert output [C, H]                                */
    moq_llama4_cfg    l4;                /* FAM_LLAMA4 rows                                  */
    moq_dsv4_cfg     *v4;                /* FAM_DEEPSEEK_V4 rows (in blobs), else NULL         */
    moq_dsv4_dims     v4d;
    moq_dsv4_ws       v4ws;
    float            *inv_freq_c;        /* DeepSeek-V4 compress RoPE [Drot/2]               */
    float             mscale_c;
    float            *v4mix, *v4sh;      /* mHC mixes [chunk, hc + hc²], shared expert out [chunk, H] */
    int32_t          *v4ids;             /* hash routing ids [chunk, topk]                   */
    float            *hc_fn, *hc_base, *hc_scale; /* DeepseekV4HyperHead                        */
    bool             *moe_list;          /* MOE_LAYER_LIST: which layers hold experts        */
    float            *inv_freq_local;    /* Gemma: sliding layers' RoPE                      */
    float             mscale_local;
    float             attn_scale;        /* softmax scale (1/sqrt(D); Gemma query_pre_attn_scalar) */
    float             embed_mult;        /* 1, or bf16(sqrt(H))                              */
    double            eps;
    layer            *layers;
    moq_layer_linear  embed, lm_head_own;
    const moq_layer_linear *lm_head;   /* &lm_head_own, or &embed when tied       */
    float            *final_norm;      /* f32 [H]                                  */
    float            *inv_freq;        /* f32 [D/2]                                */
    float             mscale;
    moq_kv_cache      kv;
    moq_blobs         blobs;
    int64_t           pos;
    /* the rows of the step being run (row plan, set by moq_model_forward_rows): each row's position
       in its sequence and its sequence's block table into `rkv` (NULL: slot = position) */
    moq_kv_cache     *rkv;
    int64_t          *rpos;            /* [chunk] */
    const int32_t   **rtab;            /* [chunk] */
    int64_t           rpage;           /* positions per page of the block tables */
    /* workspace, allocated at open for `chunk` tokens */
    float  *x, *h, *qkv, *att, *tmp, *gu, *act, *logits_ws, *logits;
    float  *scratch;                   /* per thread: [T] scores + [D] row          */
    double *erow;                      /* f64 [H] embedding row                     */
    void   *lws;
    size_t  lws_size;
    moq_model_timings tm;
    const char *warn[MOQ_MODEL_MAX_WARN]; /* from the validation pass, in blobs */
    int         n_warn;
    moq_gpu           *gpu;              /* the GPU forward (opts.device CUDA), else NULL */
    /* tensor parallelism (model_tp.c): this rank's part; tp.G == 0 when the model is whole */
    moq_tp_plan       tp;
    moq_comm         *comm;              /* the rank's communicator, set before the first forward */
    moq_tp_group     *grp;               /* rank 0: the other ranks and their threads, else NULL  */
    float            *lg, *lgl;          /* f32 [chunk, G v_per] gathered / [chunk, v_per] local logits */
    float            *lrows_h;           /* GPU ranks 1..G-1: f32 [GPU chunk, V], the rows of an all-rows step */
    moq_model_observer obs;             /* calibration taps (model.h), NULL when unset */
    void              *obs_user;
};


/* model_gpu.c. Open after every layer is loaded with device CUDA: refuses (MOQ_ERR_UNSUPPORTED,
 * naming what) what the GPU forward lacks, uploads norms, RoPE, the embedding table, allocates the
 * paged KV cache and the workspaces. Forward: M tokens of sequence slot 0 at m->pos, as
 * forward_chunk (logits_rows NULL: the last row only, into m->logits). */
moq_status moq_gpu_open(moq_model *m, moq_error *err);
void       moq_gpu_free(moq_model *m);
int64_t    moq_gpu_chunk(const moq_model *m);       /* most tokens of one GPU step (a prefill) */
int64_t    moq_gpu_batch_chunk(const moq_model *m); /* most rows of one moq_batch forward      */
moq_status moq_gpu_forward(moq_model *m, const int32_t *tok, int64_t M, float *logits_rows, moq_error *err);
/* Batched decode on the GPU (the server's step; the public API is the lead's to settle): the KV
 * cache holds n sequence slots of ctx positions each (reserving frees what the slots held; slot 0
 * is the public API's sequence). prefill_slot runs tok[0..n) at positions pos0.. of `slot` (logits
 * of the last into logits_last [V]); decode_batch advances B distinct slots by one token each
 * (tokens[b] at pos[b] of slots[b], attending to that slot's positions 0..pos[b]) in one forward,
 * logits [B, V]. The caller tracks each slot's length. */
moq_status moq_gpu_reserve_seqs(moq_model *m, int64_t n, moq_error *err);
moq_status moq_gpu_prefill_slot(moq_model *m, int32_t slot, const int32_t *tok, int64_t n, int32_t pos0, float *logits_last, moq_error *err);
moq_status moq_gpu_decode_batch(moq_model *m, int64_t B, const int32_t *slots, const int32_t *tokens, const int32_t *pos, float *logits,
                                moq_error *err);
/* moq_batch on the GPU (batch.c): a pool of n_pages pages of `page` positions per layer (K and V,
 * the model's GPU encoding: 2 bytes bf16 or 1 byte e4m3 per element) and its block-table staging;
 * forward_rows is moq_model_forward_rows for it (rows of one sequence consecutive, tabs[i] that
 * sequence's page ids), logits row j into dst[j] (or NULL), its argmax into *ids[j] (ids or ids[j]
 * NULL: none; rows that want ids only get them from the GPU). Decode steps (every row wants logits, <= 64 rows)
 * replay a CUDA graph captured per row count on this pool. */
typedef struct moq_gpu_kv moq_gpu_kv;
int        moq_gpu_kv_elem_bytes(const moq_model *m);
moq_status moq_gpu_kv_create(moq_model *m, int64_t n_pages, int64_t page, moq_gpu_kv **out, moq_error *err);
void       moq_gpu_kv_free(moq_model *m, moq_gpu_kv *kv);
moq_status moq_gpu_forward_rows(moq_model *m, moq_gpu_kv *kv, const int32_t *tok, const int64_t *pos, const int32_t *const *tabs, int64_t M,
                                const int64_t *lrows, int64_t nl, float *const *dst, int32_t *const *ids, moq_error *err);
/* Bytes of GPU memory in use on the device (total - free; 0 without CUDA or a GPU). */
uint64_t   moq_gpu_mem_used(void);
/* cudaProfilerStart (on) / Stop, for `ncu --profile-from-start off` (nothing without CUDA). */
void       moq_gpu_profile_range(int on);
/* model_tp.c: rank 0 of --tp G opens the G ranks (threads), each through moq_model_open_rank, and
 * runs every prefill on all of them; tp_prefill is the prefill of a rank alone. */
moq_status moq_model_open_rank(moq_model **out, const char *dir, const moq_model_opts *opts, int G, int rank, moq_error *err);
moq_status moq_tp_open(moq_model **out, const char *dir, const moq_model_opts *opts, moq_error *err);
moq_status moq_tp_prefill(moq_model *m, const int32_t *tokens, int64_t n, float *logits_all, moq_error *err);
void       moq_tp_reset(moq_model *m);
void       moq_tp_close(moq_model *m);
moq_status moq_model_prefill_rank(moq_model *m, const int32_t *tokens, int64_t n, bool all_rows, float *logits_all, moq_error *err);

/* Whether this build has the GPU forward (false without CUDA in the build). */
bool       moq_gpu_built(void);

#endif
