/* gdn.h — Gated DeltaNet linear attention (Qwen3.5 / Qwen3.6 `linear_attn` layers, Qwen3-Next), CPU.
 *
 *   per token:  w = in_proj_qkv(h) [2 Hk dk + Hv dv],  z = in_proj_z(h) [Hv dv],
 *               b = in_proj_b(h) [Hv],  a = in_proj_a(h) [Hv]
 *               w = silu(causal depthwise conv1d over the last K inputs of each channel)   (conv1d.weight [C, 1, K])
 *               q, k = w[0, Hk dk), w[Hk dk, 2 Hk dk) per key head; v = the rest per value head
 *               q, k: L2-normalized (x / sqrt(Σx² + 1e-6)), q *= dk^-1/2; value head j uses key head j / (Hv / Hk)
 *               β = sigmoid(b),  g = -exp(A_log) · softplus(a + dt_bias)
 *   state S_j [dk, dv] per value head:  S ← exp(g) S ;  S ← S + k ⊗ β (v - Sᵀk) ;  o = Sᵀ q
 *   out = out_proj( RMSNorm_w(o_j) · silu(z_j) per value head )        (norm.weight [dv], plain weight)
 * transformers' torch_recurrent_gated_delta_rule, token by token, for prefill and decode alike
 * (its chunked prefill form is the same sums in another order). State per layer: the last K - 1
 * conv inputs [K-1, C] and S [Hv, dk, dv], f32, preallocated at open; reset with the sequence.
 * Tested by tests/model/test_arch.c (transformers' logits).
 */
#ifndef MOQ_MODEL_ATTN_GDN_H
#define MOQ_MODEL_ATTN_GDN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/layers.h"

typedef struct moq_gdn_dims {
    int64_t H;              /* hidden size                                  */
    int64_t Hk, dk, Hv, dv; /* linear_num_key_heads, linear_key_head_dim, linear_num_value_heads, linear_value_head_dim */
    int64_t K;              /* linear_conv_kernel_dim                       */
    double  eps;            /* rms_norm_eps (the gated norm)                */
} moq_gdn_dims;

typedef struct moq_gdn {
    moq_gdn_dims     d;
    moq_layer_linear qkv, z, b, a, out;
    float           *conv;          /* f32 [C, K]                                           */
    float           *A, *dt_bias;   /* f32 [Hv]: exp(A_log), dt_bias                         */
    float           *norm;          /* f32 [dv]                                             */
    float           *conv_state;    /* f32 [K - 1, C]: the last inputs, oldest first        */
    float           *S;             /* f32 [Hv, dk, dv]                                     */
    /* calibration hook, NULL when unset (one pointer test per forward): which = MOQ_GDN_TAP_* */
    void           (*obs)(void *user, int64_t layer, int which, const float *x, int64_t rows, int64_t cols);
    void            *obs_user;
    int64_t          obs_layer;
} moq_gdn;

enum { MOQ_GDN_TAP_IN = 0, MOQ_GDN_TAP_OUT_IN }; /* the in_proj_* input (h); out_proj's input */

/* Per-chunk workspace (allocated by the model for C tokens). */
typedef struct moq_gdn_ws {
    float  *w, *z, *b, *a, *o;      /* [C, conv channels], [C, Hv dv], [C, Hv], [C, Hv], [C, Hv dv] */
    void   *lws;
    size_t  lws_size;
    int     n_threads;
} moq_gdn_ws;

int64_t    moq_gdn_channels(const moq_gdn_dims *d); /* 2 Hk dk + Hv dv */
/* Opens prefix ("model.layers.0.linear_attn") through the loader; state memory in blobs. */
moq_status moq_gdn_open(moq_gdn *g, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix, const moq_gdn_dims *d,
                        const moq_linear_opts *lo, moq_blobs *blobs, moq_error *err);
void       moq_gdn_close(moq_gdn *g);
size_t     moq_gdn_linear_ws(const moq_gdn *g, int64_t C);
void       moq_gdn_reset(moq_gdn *g);  /* zero state: a new sequence */
/* M tokens h f32 [M, H] (the next M of the sequence) -> out f32 [M, H]; advances the state. */
moq_status moq_gdn_forward(moq_gdn *g, const moq_gdn_ws *ws, const float *h, int64_t M, float *out, moq_error *err);

#endif
