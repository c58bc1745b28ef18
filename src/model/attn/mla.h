/* mla.h — multi-head latent attention (DeepSeek-V2/V3, Kimi-K2), CPU.
 *
 *   per token:  q   = q_b(rmsnorm(q_a(h)))  (or q_proj(h) without a q LoRA)   [A, dn + dr]
 *               ckv = kv_a_proj_with_mqa(h) = [c' | kr]                       [R + dr]
 *               c   = rmsnorm(c')  (kv_a_layernorm)                           [R]
 *               rope(q[:, dn:]), rope(kr)  (one rope key shared by every head)
 *   cache:      [c | kr] per position: the compressed latent and the rope key, R + dr values
 *   kv_b_proj:  W [A (dn + dv), R]; head a: Wk_a = rows [a (dn+dv), a (dn+dv) + dn), Wv_a = the next dv
 *   score(a, p) = scale · (q_nope_a · Wk_a c_p + q_rope_a · kr_p)
 *   out_a       = Σ_p softmax_p · Wv_a c_p ;  o_proj(out)                      [H]
 *
 * Two orders of the same sums: the absorbed form (q_nope_a Wk_a) · c_p and Wv_a (Σ_p softmax_p c_p)
 * reads only the R + dr cached values per position (decode always); a chunk of M tokens large enough
 * that M (2R + dr) > R (dn + dv) instead expands Wk_a c_p and Wv_a c_p once per head for every cached
 * position (transformers' DeepseekV3Attention.expand_kv), which is then cheaper (moq_mla_expands). kv_b_proj is loaded by the one loader (any scheme) and dequantized
 * once at open into f32 W (both paths use it; activations into it are not quantized: vLLM's MLA
 * decode does the same with its W_UK / W_UV). Every other projection is an ordinary moq linear.
 * RoPE pairing: interleaved (x[2i], x[2i+1]) when rope_interleave (DeepSeek checkpoints), else
 * rotate-half (x[i], x[i + dr/2]).
 * DeepSeek-V3.2 (DSA, DeepseekV32Indexer): with index_topk set and more cached positions than it,
 * each query attends only to the index_topk keys of the best index score
 *   I(p) = Σ_h (weights_proj h)_h nih^-1/2 · relu(qI_h · kI_p · ihd^-1/2),
 *   qI = wq_b(rmsnorm(q_a(h))) [nih, ihd], kI = LayerNorm(wk h) (k_norm, eps 1e-6) [ihd], both with
 *   rotate-half RoPE (with the mscale) on their first dr values (GLM-5: interleaved pairs, i_interleave);
 *   kI is cached per position; ties go to the lower position (torch.topk leaves them unspecified).
 *   GLM-5's "shared" layers (ishared) run no indexer and reuse the previous layer's selection.
 * Tested by tests/model/test_arch.c (fp64 oracle; transformers' logits; prefill vs decode).
 */
#ifndef MOQ_MODEL_ATTN_MLA_H
#define MOQ_MODEL_ATTN_MLA_H

#include <stdbool.h>
#include <stdint.h>

#include "model/kv_cache.h"
#include "model/layers.h"

typedef struct moq_mla_dims {
    int64_t H, A;            /* hidden size, heads                                            */
    int64_t q_lora;          /* q_lora_rank; 0 = q_proj directly                              */
    int64_t R;               /* kv_lora_rank                                                  */
    int64_t dn, dr, dv;      /* qk_nope_head_dim, qk_rope_head_dim, v_head_dim                 */
    bool    interleave;      /* rope_interleave                                               */
    float   scale;           /* softmax scale                                                 */
    double  eps;             /* q_a_layernorm / kv_a_layernorm eps (MOQ_DEEPSEEK_LORA_NORM_EPS) */
    int64_t topk, nih, ihd;  /* DeepSeek-V3.2 DSA: index_topk (0: none), index_n_heads, index_head_dim */
    int64_t ctx;             /* positions of the indexer's key cache                           */
    bool    i_interleave;    /* the indexer's RoPE interleaved (GLM-5), else rotate-half (V3.2) */
    bool    ishared;         /* this layer has no indexer: it keeps the keys the previous layer's
                                indexer chose (GLM-5 indexer_types "shared"; the model runs layers
                                in order over one workspace, so ws->sel still holds them)        */
} moq_mla_dims;

typedef struct moq_mla {
    moq_mla_dims     d;
    moq_layer_linear q_a, q_b, kv_a, kv_b, o;   /* q_b is q_proj when d.q_lora == 0          */
    float           *q_a_norm, *kv_a_norm;      /* f32 [q_lora], [R]                          */
    float           *w;                          /* f32 [A, dn + dv, R]: kv_b_proj dequantized */
    /* DeepSeek-V3.2's lightning indexer (opened when ctx > index_topk, else it never drops a key) */
    moq_layer_linear i_wq_b, i_wk, i_wproj;     /* indexer.{wq_b, wk, weights_proj}            */
    float           *i_kn_w, *i_kn_b;           /* indexer.k_norm (LayerNorm) [ihd]             */
    float           *ik;                         /* its key cache f32 [ctx, ihd], NULL = no indexer */
    /* calibration hook, NULL when unset (one pointer test per forward): which = MOQ_MLA_TAP_* */
    void           (*obs)(void *user, int64_t layer, int which, const float *x, int64_t rows, int64_t cols);
    void            *obs_user;
} moq_mla;

enum { MOQ_MLA_TAP_IN = 0, MOQ_MLA_TAP_Q_B_IN, MOQ_MLA_TAP_O_IN }; /* h; q_b_proj's input; o_proj's input */

/* Per-chunk workspace, allocated by the model at open for `chunk` tokens and `ctx` positions. */
typedef struct moq_mla_ws {
    float  *qa, *q, *ckv, *att;   /* [C, q_lora], [C, A (dn+dr)], [C, R + dr], [C, A dv]      */
    float  *scratch;              /* per thread: moq_mla_scratch_floats()                    */
    float  *iq, *ikp, *iw, *isc;  /* indexer: [C, nih ihd], [C, ihd], [C, nih], scores [ctx]  */
    float  *sel;                  /* [C, ctx]: 1 where the indexer keeps the key              */
    void   *lws;                  /* linear workspace (shared with the model)                */
    size_t  lws_size;
    int     n_threads;
    int64_t ctx;
} moq_mla_ws;

/* Opens the projections under prefix ("model.layers.3.self_attn") through the loader and checks
 * their shapes against d. Memory in blobs (and the loader's layers, closed by moq_mla_close). */
moq_status moq_mla_open(moq_mla *a, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_mla_dims *d,
                        const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err);
void       moq_mla_close(moq_mla *a);
/* Largest linear workspace of the layer's projections for C tokens. */
size_t     moq_mla_linear_ws(const moq_mla *a, int64_t C);
/* Floats of per-thread scratch for ctx positions. */
int64_t    moq_mla_scratch_floats(const moq_mla_dims *d, int64_t ctx);
/* True when a chunk of M tokens is attended in the expanded form (see above). */
bool       moq_mla_expands(const moq_mla_dims *d, int64_t M);
/* The cache row per position: R + dr. */
int64_t    moq_mla_cache_row(const moq_mla_dims *d);

/* M tokens at positions p0.. of h f32 [M, H] -> out f32 [M, H] (o_proj output). Writes the
 * tokens' [c | kr] rows into kv's K of `layer`, then attends over positions 0..p0+i. inv_freq f32
 * [dr/2] and the rope cos/sin factor mscale come from rope.c. Never allocates. */
moq_status moq_mla_forward(const moq_mla *a, const moq_mla_ws *ws, const float *inv_freq, float mscale, const float *h, int64_t M,
                           int64_t p0, moq_kv_cache *kv, int64_t layer, float *out, moq_error *err);

#endif
