/* dsv4.h — DeepSeek-V4 attention and manifold-constrained hyper-connections (mHC), CPU
 * (transformers 5.17 models/deepseek_v4: DeepseekV4Attention, the CSA / HCA compressors, the
 * lightning indexer, DeepseekV4HyperConnection / HyperHead). Tensor names are DeepSeek's own, as
 * transformers' save_pretrained writes them: <layer>.attn.{wq_a, q_norm, wq_b, wkv, norm, wo_a, wo_b,
 * attn_sink, compressor.{wkv, wgate, ape, norm}, indexer.{wq_b, weights_proj, compressor.*}},
 * <layer>.hc_{attn,ffn}_{fn,base,scale}.
 *
 *   per token at position p (D = head_dim, r = rope_dim, the trailing r values of a head rotate in
 *   pairs (2i, 2i + 1); sliding layers use the "main" RoPE, compressed ones the "compress" one):
 *     qr  = rmsnorm(wq_a h) · q_norm                       [q_lora]
 *     q_a = rope(rms(wq_b qr)_a, p)  (no weight)          [A, D]
 *     kv  = rope(rmsnorm(wkv h) · norm, p)                 [D]   one head, key = value
 *   compressor, rate m (every m-th position closes window w = (p + 1)/m - 1):
 *     HCA: C_w = rmsnorm(Σ_j softmax_j(wgate h_j + ape_j) ⊙ wkv h_j) over the window's m tokens
 *     CSA: the same over 2m slots: the first D of window w - 1's projections and the last D of
 *          window w's (wkv, wgate and ape are 2D wide); window 0 has only the second half
 *     then rope(C_w, w m) with the compress RoPE. Entry w is visible to p iff w < (p + 1) / m.
 *   indexer (CSA): its own CSA compressor at index_head_dim gives K_w; q^I = rope(wq_b^I qr, p)
 *     [n_h^I, c^I]; score_w = Σ_h (weights_proj h)_h n_h^-1/2 · relu(q^I_h · K_w) c^-1/2; the
 *     index_topk best visible entries are attended (all visible ones while fewer).
 *   attention: softmax over [q_a · kv_j / sqrt(D) for the last sliding_window positions j <= p,
 *     q_a · C_w / sqrt(D) for the attended entries, attn_sink_a]; o_a = Σ prob · value (sink
 *     dropped); rope(o_a, -p) undoes the rotation of the values' rope part.
 *   output: A D values in o_groups groups; wo_a [g · o_lora, A D / g] maps group i through its rows
 *     [i o_lora, (i + 1) o_lora); wo_b [H, g o_lora] (both ordinary moq linears; wo_a is run over
 *     the g groups as g rows and the diagonal blocks kept).
 *   mHC (hc streams of H): flat = rms(x) over hc H; mix = fn flat; pre = sigmoid(mix · s0 + b) + eps,
 *     post = 2 sigmoid(mix · s1 + b), comb = Sinkhorn(softmax_rows(mix · s2 + b) + eps) (columns
 *     then rows, iters); the block sees Σ pre_s x_s; x'_s = post_s · out + Σ_r comb_rs x_r.
 * State per layer (the sequence's, indexed by position, so moq_model_reset only rewinds): kv rows,
 * the compressors' projections and their entries, f32, allocated at open for ctx positions.
 * Tested by tests/model/test_dsv4.c (transformers' logits; prefill vs decode).
 */
#ifndef MOQ_MODEL_ATTN_DSV4_H
#define MOQ_MODEL_ATTN_DSV4_H

#include <stdbool.h>
#include <stdint.h>

#include "model/arch/deepseek_v4.h"
#include "model/layers.h"

typedef struct moq_dsv4_dims {
    int64_t H, A, D, r, q_lora, og, olr, nih, ihd, topk, W, hc, hc_iters;
    double  eps, hc_eps;
} moq_dsv4_dims;

typedef struct moq_dsv4_attn {
    moq_layer_linear wq_a, wq_b, wkv, wo_a, wo_b;
    moq_layer_linear c_wkv, c_wgate, i_wkv, i_wgate, i_wq_b, i_wproj;  /* compressor, indexer        */
    float  *q_norm, *kv_norm, *sinks;           /* [q_lora], [D], [A]                                */
    float  *c_ape, *c_norm, *i_ape, *i_norm;    /* [m, cw], [D], [m, 2 ihd], [ihd]                    */
    int64_t m;                                  /* compression rate, 0 = sliding only                */
    bool    indexed;                            /* CSA: overlapping windows + the indexer            */
    const float *inv_freq, *inv_freq_c;         /* the layer's RoPE, the compress RoPE [r/2]         */
    float   mscale, mscale_c;
    /* state for ctx positions */
    float  *kv, *ckv, *cgate, *cent, *ikv, *igate, *ient;
    int64_t ctx;
    /* mHC of the attention and the MLP sites: fn [(2 + hc) hc, hc H], base [(2 + hc) hc], scale [3] */
    float  *hc_fn[2], *hc_base[2], *hc_scale[2];
} moq_dsv4_attn;

/* Per-chunk workspace (shared by the layers), allocated by moq_dsv4_ws_alloc for C tokens. */
typedef struct moq_dsv4_ws {
    float  *qr, *q, *kvp, *cp, *cg, *ip, *ig, *iq, *iw, *att, *oa, *ob, *hc;
    float  *sc;               /* per thread: scores [ctx + sliding_window + 2]                  */
    float  *sel;              /* per token: 1 at the compressed entries it attends [C, ctx + 1] */
    void   *lws;
    size_t  lws_size;
    int     n_threads;        /* attention over (token, head) pairs                             */
    int64_t ctx;
} moq_dsv4_ws;

/* Opens layer `prefix` ("model.layers.3"): projections through the loader, norms, sinks, the
 * compressor / indexer of a compressed layer (m > 0), the mHC parameters; state for ctx positions.
 * Shapes are checked against d (errors name the tensor). */
moq_status moq_dsv4_open(moq_dsv4_attn *a, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_dsv4_dims *d,
                         int64_t m, bool indexed, int64_t ctx, const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err);
void       moq_dsv4_close(moq_dsv4_attn *a);
size_t     moq_dsv4_linear_ws(const moq_dsv4_attn *a, const moq_dsv4_dims *d, int64_t C);
moq_status moq_dsv4_ws_alloc(moq_dsv4_ws *ws, const moq_dsv4_dims *d, int64_t C, int64_t ctx, int n_threads, moq_blobs *blobs, moq_error *err);

/* M tokens at positions p0.. of h f32 [M, H] -> out f32 [M, H] (wo_b output). Never allocates. */
moq_status moq_dsv4_forward(const moq_dsv4_attn *a, const moq_dsv4_dims *d, const moq_dsv4_ws *ws, const float *h, int64_t M, int64_t p0,
                            float *out, moq_error *err);

/* mHC before a block (site 0 attention, 1 MLP): x f32 [M, hc, H] -> in f32 [M, H] (Σ pre_s x_s),
 * mix f32 [M, hc + hc²] (post, then comb) kept for moq_dsv4_hc_post. */
void moq_dsv4_hc_pre(const moq_dsv4_attn *a, const moq_dsv4_dims *d, int site, const float *x, int64_t M, float *in, float *mix);
/* x_s <- post_s · out + Σ_r comb_rs x_r, per token. tmp f32 [hc H]. */
void moq_dsv4_hc_post(const moq_dsv4_dims *d, float *x, const float *out, const float *mix, int64_t M, float *tmp);
/* The final collapse (DeepseekV4HyperHead): x [M, hc, H] -> y [M, H]; fn [hc, hc H], base [hc], scale [1]. */
void moq_dsv4_hc_head(const moq_dsv4_dims *d, const float *fn, const float *base, const float *scale, const float *x, int64_t M, float *y);

#endif
