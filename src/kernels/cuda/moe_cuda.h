/* moe_cuda.h — the C interface of moe.cu: the steps of one mixture-of-experts layer on the GPU
 * (src/moe/moe_gpu.c strings them together). No CUDA type appears here; every function enqueues on
 * the default stream and returns NULL or a string naming the failed launch. Pointers *_d are device
 * memory. The rules are src/moe/routing.c's and src/moe/moe.c's (see there); tests:
 * tests/moe/test_moe_cuda.c.
 *
 * Per step of T tokens, k experts each, A = T·k assignments, L local experts:
 *   router      logits f32 [T, E] = x f32 [T, H] · Wᵀ (+ bias), W f32 | bf16 | f16 [E, H]
 *   route_sort  ids / weights [A] (routing.c's rules, one warp per token), then rows grouped by local
 *               expert: pos [A] (row of assignment a, or -1 for an expert held elsewhere),
 *               tok / rw [A] (token and weight of each row), and the work list `tiles`:
 *               [max_tiles] x {local expert, first row, rows <= 16}, then n_tiles and the row count
 *   gather      xg [A, H] = x[tok[r]] (· rw[r] when the weight goes on the input), zero past the rows
 *   grouped     y [A, N] rows of each tile = that expert's packed weight (stacked, `stride` bytes
 *               apart, rows_cuda.c's layout) times the quantized rows part 1's act_quant left in its
 *               workspace; epilogue row_scale · tok (+ bias) as gemv.cu. ONE launch for all experts.
 *   act         a [A, Ip] = act(h [A, N13]) (routing.c's moq_moe_act_ref, op for op)
 *   combine     y [T, H] = Σ_j w_j · o[pos[t, j]] in slot order (weight 1 on the input side)
 *
 * Decode (T <= 16 tokens, weights not on the input; src/moe/moe_gpu.c picks it): three launches,
 *   route_decode  optionally the router logits (w_d set: blocks of warps, one per (token, expert))
 *                 and each token's x quantized for w13 (act_quant.cuh's arithmetic, one block per
 *                 token, into the workspace rows t < T); the last block to finish (an atomic counter,
 *                 reset by it) routes every token (route_sort's rules) and groups the rows by local
 *                 expert in a fixed order (expert, then assignment: ranks, no atomics), and zeroes y
 *                 of a token with no local expert
 *   grouped mode 1 (w13): a tile's rows read their token's quantized x (row_tok); a block's warps
 *                 hold gate rows [i0, i0 + 4R) and the up rows [Ip + i0, ...) of the same i, so the
 *                 epilogue writes the activation a [A, Ip] (moq_moe_act_ref's arithmetic) directly
 *   grouped mode 2 (w2): weight loads issued first, then (after the w13 grid) the block quantizes
 *                 its tile's rows of a into shared memory (the quantizer's arithmetic), streams, writes
 *                 o, and the last of a token's tiles to finish an n-range (atomic counter per
 *                 (token, n-block), reset by it) adds Σ_j w_j · o[pos[t, j]] in slot order into y
 *   Modes 1 and 2 are launched as programmatic dependents of the kernel before them.
 */
#ifndef MOQ_KERNELS_CUDA_MOE_CUDA_H
#define MOQ_KERNELS_CUDA_MOE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOQ_CUDA_MOE_MAX_E 1024      /* experts one route_sort block handles                 */
#define MOQ_CUDA_MOE_MAX_A 8192      /* assignments (T·k) one route_sort block handles       */
#define MOQ_CUDA_MOE_MAX_GROUPS 256  /* as MOQ_MOE_MAX_GROUPS                                 */
#define MOQ_CUDA_MOE_TILE 16         /* rows of one expert per work item                      */

/* logits [T, E]; w_dtype 0 f32, 1 bf16, 2 f16; bias_d NULL or [E]. */
const char *moq_cuda_moe_router(const float *x_d, int64_t T, int64_t H, int64_t E, const void *w_d, int w_dtype, const float *bias_d,
                                float *logits_d, void *stream);

typedef struct moq_cuda_moe_route {
    int64_t        T, E, k, L, max_tiles;
    int            sigmoid, renormalize, n_group, topk_group, on_input;
    float          scaling;           /* routed_scaling_factor                        */
    const float   *bias_d;            /* correction bias [E] or NULL                  */
    const int32_t *local_of_d;        /* [E]                                          */
    const float   *logits_d;          /* [T, E]                                       */
    float         *scr_d;             /* [T, 2E + 2·MOQ_CUDA_MOE_MAX_GROUPS]          */
    int32_t       *ids_d, *pos_d, *tok_d;
    float         *wts_d, *rw_d;
    int32_t       *tiles_d;           /* [3 · max_tiles + 2]                          */
    void          *stream;            /* cudaStream_t (NULL: the default stream)      */
} moq_cuda_moe_route;
/* max_tiles >= ceil(A / 16) + min(L, A) covers every split. */
const char *moq_cuda_moe_route_sort(const moq_cuda_moe_route *r);

#define MOQ_CUDA_MOE_DEC_T 16                /* tokens of the decode path (one tile per expert)     */
#define MOQ_CUDA_MOE_DEC_SMEM (48 << 10)     /* mode 2's shared memory bound (moq_cuda_moe_w2_smem) */
typedef struct moq_cuda_moe_decode {
    moq_cuda_moe_route r;                /* routing as route_sort (r.logits_d is written when w_d is set) */
    const float   *x_d;                  /* x f32 [T, H]                                                 */
    int64_t        H;
    const void    *w_d;                  /* router weight [E, H] (w_dtype as moq_cuda_moe_router), or NULL */
    int            w_dtype;
    const float   *wb_d;                 /* router bias [E] or NULL                                      */
    moq_cuda_kind  kind;                 /* w13's pair: x quantized into ws rows t < T (Kp = w13's Kp)   */
    int64_t        Kp;
    float          a_scale;
    int            rcp_approx;
    void          *ws_d;
    moq_cuda_ws    ws;
    float         *y_d;                  /* [T, H]: rows of tokens without a local expert are zeroed     */
    int32_t       *count_d;              /* one counter, 0 between calls                                 */
} moq_cuda_moe_decode;
const char *moq_cuda_moe_route_decode(const moq_cuda_moe_decode *d);
/* Dynamic shared memory of mode 2 for tiles of up to mt rows and w2's Kp. */
size_t      moq_cuda_moe_w2_smem(int64_t mt, int64_t Kp);

const char *moq_cuda_moe_gather(const float *x_d, int64_t A, int64_t H, const int32_t *tok_d, const float *rw_d, int on_input,
                                const int32_t *tiles_d, int64_t max_tiles, float *xg_d, void *stream);

typedef struct moq_cuda_moe_gemm {
    moq_cuda_kind  kind;
    int            mode;                    /* 0 plain, 1 decode w13 + activation, 2 decode w2 + combine */
    int64_t        N, Kp, max_tiles, mt;    /* mt: rows per tile bound (min(T, 16))        */
    int64_t        grid_tiles;              /* blocks along y: >= this step's work items   */
    const uint8_t *w_d;                     /* local expert 0's packed blob                */
    size_t         stride, codes, scales, rs, bias; /* blob bytes and offsets (rows_cuda.h) */
    const void    *ws_d;                    /* act_quant's workspace                        */
    moq_cuda_ws    ws;
    const int32_t *tiles_d;
    float         *y_d;                     /* [A, N]; mode 1: the activation a [A, Ip]; mode 2: o [A, N] */
    void          *stream;                  /* cudaStream_t (NULL: the default stream)      */
    /* modes 1 and 2 */
    const int32_t *row_tok_d;               /* [A] token of each row (route's tok)          */
    int            act, gated;              /* mode 1: MOQ_MOE_ACT_* and its parameters     */
    float          limit, alpha, beta;
    int64_t        Ip;                      /* mode 1: a's row length; mode 2: K (a's row)  */
    const float   *a_d;                     /* mode 2: a [A, Ip], quantized per row here    */
    float          a_scale;                 /* mode 2: w2's static activation scale         */
    int            rcp_approx;
    const int32_t *pos_d;                   /* mode 2: route's pos [T·k] and weights [T·k]  */
    const float   *wts_d;
    int64_t        k;
    int32_t       *count_d;                 /* mode 2: [T, ceil(N / 8)] counters, 0 between calls */
    float         *out_d;                   /* mode 2: y [T, N]                             */
} moq_cuda_moe_gemm;
const char *moq_cuda_moe_grouped(const moq_cuda_moe_gemm *g);

/* act: MOQ_MOE_ACT_* (moq.h) value; h [A, N13] (gate rows [0, Ip), up [Ip, 2Ip); non-gated: [A, Ip]). */
const char *moq_cuda_moe_act(int act, int gated, float limit, float alpha, float beta, const float *h_d, int64_t A, int64_t N13,
                             int64_t Ip, float *a_d, void *stream);

const char *moq_cuda_moe_combine(const float *o_d, const int32_t *pos_d, const float *wts_d, int on_input, int64_t T, int64_t k,
                                 int64_t H, float *y_d, void *stream);

#ifdef __cplusplus
}
#endif
#endif
