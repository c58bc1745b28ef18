/* cuda_api.h — the C interface of the CUDA code (the .cu files of src/kernels/cuda). No CUDA type appears
 * here: callers are C files (the device layer src/kernels/device.c, the registry rows
 * rows_cuda.c, tests). Every function returns NULL on success or a static/`msg` string saying
 * what failed (a CUDA error name and the call); pointers named *_d are device memory.
 *
 * Layout of a packed weight (made on the host by moq_cuda_pack, uploaded once at create):
 *   Np = N rounded up to 128, Kp = K rounded up to 128; pads are zero codes / zero scales, so
 *   every kernel reads whole 16-byte vectors and whole tiles without bounds checks.
 *   codes   e4m3 u8 [Np, Kp] | e2m1 u8 [Np, Kp/2] (low nibble first) | bf16 u16 [Np, Kp]
 *   scales  NVFP4 e4m3 u8 [Np, Kp/16] | MXFP8 e8m0 u8 [Np, Kp/32] | BLK128 f32 [Np/128, Kp/128]
 *   then    row_scale f32 [Np], bias f32 [Np] (0 without bias)
 * Workspace (device, caller-owned; offsets from moq_cuda_ws_layout):
 *   A   bf16 [Mp, Kp]   the activation after quantize-dequantize, exact in bf16 for every
 *                       quantized pair (D4, D2·D4, D4·2^e), without per-token / g128 scales;
 *                       f16 when a_f16 (NVFP4 W4A4 at M <= 16: e2m1 · e4m3 is exact in f16)
 *   q   u8   [Mp, Kp]   activation codes (e4m3; NVFP4 packed [Mp, Kp/2])
 *   sf  u8   [Mp, Kp/16] NVFP4 e4m3 / MXFP8 e8m0 block scales
 *   tok f32  [Mp]       per-token scale (1 when the pair has none)
 *   gs  f32  [Mp, Kp/128] FP8 g128 activation group scales
 *   d   f32  [M, Np]    cuBLASLt output before the epilogue (cuBLASLt rows, when they do not
 *                       write y directly)
 *   lt  32 MiB          cuBLASLt workspace (cuBLASLt rows only)
 *   wb  bf16 [R, Kp]    one N-chunk of the weight dequantized to bf16, R = moq_cuda_wb_rows
 *                       (the dequant + cuBLASLt rows, NVFP4 / MXFP8, M > 16 only)
 */
#ifndef MOQ_KERNELS_CUDA_CUDA_API_H
#define MOQ_KERNELS_CUDA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device layer (device.cu) ---- */
const char *moq_cuda_probe(char *info, size_t info_len);  /* NULL: a usable sm_90 GPU is present */
const char *moq_cuda_malloc(size_t bytes, void **out);
void        moq_cuda_free(void *p);
const char *moq_cuda_h2d(void *dst_d, const void *src, size_t bytes);
const char *moq_cuda_d2h(void *dst, const void *src_d, size_t bytes);
const char *moq_cuda_d2d(void *dst_d, const void *src_d, size_t bytes);
const char *moq_cuda_sync(void);
const char *moq_cuda_mem_info(size_t *free_b, size_t *total_b);
/* cudaProfilerStart (on) / cudaProfilerStop: brackets what `ncu --profile-from-start off` sees. */
void        moq_cuda_profiler_range(int on);

/* ---- kernels (act_quant.cu, gemv.cu, gemm_mma.cu, cublaslt.cu) ---- */
/* Pair kinds the kernels know (one per moq_pair_id with a CUDA row; rows_cuda.c maps them). */
typedef enum moq_cuda_kind {
    MOQ_CK_BF16 = 0, MOQ_CK_FP8_TENSOR, MOQ_CK_FP8_ROW, MOQ_CK_FP8_BLK128, MOQ_CK_NVFP4,
    MOQ_CK_NVFP4_W4A16, MOQ_CK_MXFP8, MOQ_CK_COUNT
} moq_cuda_kind;

typedef struct moq_cuda_ws {
    size_t a, q, sf, tok, gs, d, lt, wb, total; /* byte offsets into the workspace, total size */
} moq_cuda_ws;
/* Mp: M rounded up to the GEMM tile (16 for M <= 16, else 128). */
int64_t     moq_cuda_mpad(int64_t M);
/* with_lt: 0 own kernels, 1 cuBLASLt fp8 (d, lt), 2 dequant + cuBLASLt bf16 (d, lt, wb) */
moq_cuda_ws moq_cuda_ws_layout(int64_t M, int64_t N, int64_t Kp, int with_lt);
/* weight rows per dequantized chunk (64 MiB of bf16, a multiple of 128, at most Np) */
int64_t     moq_cuda_wb_rows(int64_t Np, int64_t Kp);

typedef struct moq_cuda_args {
    moq_cuda_kind kind;
    int64_t       M, N, K, Np, Kp;
    const void   *x_d;         /* f32 | bf16 [M, K]                                            */
    int           x_bf16;
    void         *y_d;         /* f32 | bf16 [M, N]                                            */
    int           y_bf16;
    const void   *codes_d, *scales_d;
    const float  *row_scale_d, *bias_d;
    int           has_bias;    /* bias_d holds the layer's bias (else zeros)                    */
    int           rs_uniform;  /* every row_scale_d[n], n < N, equals rs_value (rows_cuda.c)     */
    float         rs_value;    /* that value on the host (rs_uniform only)                      */
    float         a_scale;     /* static activation scale (FP8 s_in, NVFP4 input_scale)         */
    int           rcp_approx;  /* NVFP4: rcp.approx.ftz (the peers' kernels) instead of IEEE 1/x */
    int           skip_a;      /* the GEMM reads only the codes (cuBLASLt): do not write A       */
    int           a_f16;       /* write A in f16, not bf16 (NVFP4 W4A4 decode: exact in f16 too)  */
    void         *ws_d;
    moq_cuda_ws   ws;
    void         *stream;      /* cudaStream_t every launch goes to (NULL: the default stream)  */
} moq_cuda_args;

/* Quantizes x into the workspace's A, q, sf, tok, gs (rows M..Mp-1 and columns K..Kp-1 zero). */
const char *moq_cuda_act_quant(const moq_cuda_args *a);
/* y = epilogue(A · Wᵀ) for M <= moq_cuda_gemv_mmax(kind) on the tensor cores (mma.sync, weight rows
 * as the m16 side), K split over warps and a thread-block cluster, weights streamed once; launched
 * as a programmatic dependent of the activation quantizer. */
const char *moq_cuda_gemv(const moq_cuda_args *a);
/* The largest M the decode kernel takes for a kind: 16, or up to 64 with MOQ_CUDA_GEMV_MMAX. */
int64_t moq_cuda_gemv_mmax(int kind);
/* 1 when this call's decode kernel quantizes its own activation (gemv.cu's gv_fuse table: FP8
 * per-tensor at M = 1, FP8 128x128 at M <= 2, NVFP4 W4A4 at M = 1 on short K slices): then the caller skips moq_cuda_act_quant and the
 * workspace's A, q, sf, tok, gs are not written. */
int moq_cuda_gemv_fuses(const moq_cuda_args *a);
/* 1 when the decode path for (kind, M) reads A in f16 (NVFP4 W4A4, gemv.cu H16): the quantizer
 * writes A in f16 then (a_f16). */
int moq_cuda_gemv_a_f16(int kind, int64_t M);
/* 1 when the decode path for (kind, M) reads the activation codes q (FP8 kinds) and not A: the
 * quantizer skips A then. */
int moq_cuda_gemv_reads_q(int kind, int64_t M);
/* gemv_fma.cu: the CUDA-core decode kernel, for the (kind, M) where it measured faster (MXFP8,
 * M <= 2); moq_cuda_gemv calls it. */
int         moq_cuda_gemv_fma_fits(int kind, int64_t M);
const char *moq_cuda_gemv_fma(const moq_cuda_args *a);
/* The same for any M: 128x128x32 tiles, weights dequantized to bf16 in shared memory,
 * mma.sync m16n8k16 bf16 with f32 accumulation (g128 partial sums scaled per 128 K). */
const char *moq_cuda_gemm_mma(const moq_cuda_args *a);
const char *moq_cuda_lt_init(void); /* the process's cuBLASLt handle, created once (at layer create) */
/* FP8 per-tensor / per-token pairs: cuBLASLt e4m3 x e4m3 straight into y with cuBLASLt's scales
 * (scalar when the row scales are uniform and the activation scale static, else outer vectors)
 * when there is no bias and M, N are multiples of 16; else -> f32 D, then the epilogue kernel. */
const char *moq_cuda_gemm_cublaslt(const moq_cuda_args *a);
/* NVFP4 / MXFP8 / FP8 per-tensor / per-channel pairs: weight N-chunks dequantized to exact bf16,
 * cuBLASLt bf16 x bf16 (A); BF16 weights go to cuBLASLt as they are. Straight into y (row scale as
 * cuBLASLt's alpha, bias in its epilogue) where the pair has no per-token scale, else (and where
 * cuBLASLt declines) -> f32 D, then the epilogue kernel. */
const char *moq_cuda_gemm_dequant_lt(const moq_cuda_args *a);
/* Counters of the cuBLASLt rows since the process started (for tests and measurements; relaxed
 * atomics): calls that wrote y directly (dequant rows: bf16 GEMM, of which reading x itself; FP8
 * rows: scalar or outer-vector scales), direct attempts cuBLASLt declined (then the D + epilogue path ran), calls on the D path,
 * heuristic queries, and cached heuristic results reused. Knobs (read once, docs/PERFORMANCE.md),
 * each 1 by default since they ran on the device (2026-12-07; 0: the path before them): MOQ_CUDA_LT_DIRECT
 * (0: dequant rows always via D; 1: direct, alpha a host scalar when the row scales are uniform,
 * else a device vector; 2: direct, always the device vector), MOQ_CUDA_LT_SCALAR (1: FP8 direct
 * with scalar scales when uniform), MOQ_CUDA_LT_CACHE (1: the heuristic cached), MOQ_CUDA_LT_X (1:
 * the direct path reads x; moq_cuda_dq_reads_x). */
enum {
    MOQ_CUDA_LT_DEQ_DIRECT = 0, MOQ_CUDA_LT_X_DIRECT, MOQ_CUDA_LT_FP8_SCALAR, MOQ_CUDA_LT_FP8_OUTER, MOQ_CUDA_LT_DECLINED,
    MOQ_CUDA_LT_D_PATH, MOQ_CUDA_LT_HEURISTIC, MOQ_CUDA_LT_CACHE_HIT, MOQ_CUDA_LT_STAT_COUNT
};
void moq_cuda_lt_stats(unsigned long long out[MOQ_CUDA_LT_STAT_COUNT]);
/* 1 when the dequant row's GEMM at this M reads x itself (BF16 / NVFP4 W4A16 with bf16 x, K % 8 == 0,
 * MOQ_CUDA_LT_DIRECT on): the caller skips moq_cuda_act_quant (the GEMM runs it if it falls back). */
int moq_cuda_dq_reads_x(const moq_cuda_args *a);


/* ---- decoder steps (model_ops.cu; src/model/model_gpu.c) ---- */
enum { MOQ_CUDA_KV_BF16 = 0, MOQ_CUDA_KV_E4M3 = 1 };
/* One layer's paged KV cache: k, v [n_pages · page, KV, D] elements; position pos of sequence s
 * lives in page block_table[s · max_pages + pos / page], row pos % page of it. */
typedef struct moq_cuda_kv {
    void          *k, *v;
    const int32_t *block_table;   /* device [n_seqs, max_pages] */
    int64_t        max_pages, page;
    int            elem;          /* MOQ_CUDA_KV_*               */
    float          k_scale, v_scale; /* e4m3: per-layer static scales (1 for bf16) */
} moq_cuda_kv;
/* Every step below enqueues on `stream` (a cudaStream_t; NULL: the default stream) and never
 * synchronises, so a whole decode step can be captured into a CUDA graph (model_gpu.c). */
/* x [M, H] = table[tok] (f32 rows) · mult. H % 4 == 0 (float4 rows) for this and the next three. */
const char *moq_cuda_embed(const int32_t *tok_d, int64_t M, const float *table_d, int64_t H, float mult, float *x_d, void *stream);
/* x += t (t may be NULL); h = rmsnorm(x) · w, per row of H (H <= 32768). */
const char *moq_cuda_add_rmsnorm(float *x_d, const float *t_d, const float *w_d, int64_t M, int64_t H, double eps, float *h_d,
                                 void *stream);
/* h [n, H]: row j = rmsnorm(x[rows[j]] + t[rows[j]]) · w (x unchanged): the rows whose logits are wanted. */
const char *moq_cuda_final_norm_rows(const float *x_d, const float *t_d, const float *w_d, const int32_t *rows_d, int64_t n, int64_t H,
                                     double eps, float *h_d, void *stream);
/* qkv [M, (A + 2 KV) D]: q, k per-head RMSNorm (norm pointers may be NULL), RoPE at pos[i] for q and
 * k (q in place), k and v stored at (seq[i], pos[i]) of kv. D: 64, 128 or 256. */
const char *moq_cuda_qk_rope_store(float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, const float *q_norm_d,
                                   const float *k_norm_d, double eps, const float *inv_freq_d, float mscale, const int32_t *seq_d,
                                   const int32_t *pos_d, const moq_cuda_kv *kv, void *stream);
/* att [M, A D] = softmax(q kᵀ · scale) v over keys lo..pos[i] of seq[i] (lo = pos - window + 1 when
 * window > 0), GQA (A a multiple of KV). Each token's span is cut into n_split (1..64) ranges of
 * max(MOQ_CUDA_SPLIT_MIN, ceil(span / n_split)) keys (flash-decoding), combined in the same launch
 * by the last block of each (token, GQA group); part_d f32 [M, A, n_split, MOQ_CUDA_PART_STRIDE(D)]
 * (D partial sums, max, sum; rows padded to 16 bytes for vector loads); done_d int32 [M, A], zero
 * before the first call, left zero by each. */
enum { MOQ_CUDA_SPLIT_MIN = 64 };
#define MOQ_CUDA_PART_STRIDE(D) ((D) + 4)
const char *moq_cuda_attention(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                               const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, int64_t n_split,
                               float *part_d, int32_t *done_d, float *att_d, void *stream);
/* The same for a prefill: the M rows are one sequence (seq[0]) at consecutive positions pos[0] + i,
 * their K/V already stored; tiles of 64 queries x 64 keys through shared memory (flash attention).
 * Two kernels: f32 on the CUDA cores (default) and, with MOQ_CUDA_ATTN_PREFILL_MMA=1, bf16 tensor
 * cores (q, K/V and the softmax weights rounded to bf16, sums in f32; model_ops.cu). */
const char *moq_cuda_attention_prefill(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                                       const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d, void *stream);
/* For tests: choose the prefill kernel of later moq_cuda_attention_prefill calls in this process
 * (0 the f32 kernel, 1 the tensor-core kernel, -1 MOQ_CUDA_ATTN_PREFILL_MMA again, read at the next
 * call). Not synchronised with prefills running on other threads. */
void moq_cuda_attn_prefill_mode(int mode);
/* act [M, I] = silu(gu[:, :I]) · gu[:, I:]; I % 4 == 0. */
const char *moq_cuda_swiglu(const float *gu_d, int64_t M, int64_t I, float *act_d, void *stream);
/* Greedy ids of n logits rows x [n, V]: out [n, 2] int32 = {argmax (the lowest index of the row's
 * maximum), -1 or 2 · (first non-finite column) + (1 for NaN)}. V < 2^30. */
const char *moq_cuda_argmax_rows(const float *x_d, int64_t n, int64_t V, int32_t *out_d, void *stream);

/* ---- streams and graphs (device.cu): handles are cudaStream_t / cudaGraphExec_t as void * ---- */
const char *moq_cuda_stream_create(void **stream);
void        moq_cuda_stream_destroy(void *stream);
const char *moq_cuda_stream_sync(void *stream);
const char *moq_cuda_h2d_async(void *dst_d, const void *src, size_t bytes, void *stream);
const char *moq_cuda_d2h_async(void *dst, const void *src_d, size_t bytes, void *stream);
const char *moq_cuda_host_alloc(size_t bytes, void **out); /* pinned host memory */
void        moq_cuda_host_free(void *p);
/* Capture: begin on stream, enqueue, then end (instantiates into *exec; on failure of the enqueue,
 * end with exec NULL to drop the capture). */
const char *moq_cuda_capture_begin(void *stream);
const char *moq_cuda_capture_end(void *stream, void **exec);
const char *moq_cuda_graph_launch(void *exec, void *stream);
void        moq_cuda_graph_destroy(void *exec);

/* verify.cu: hardware cvt.rn.satfinite.e4m3 vs the software encoder over all 2^32 inputs:
 * mismatches on non-NaN inputs (first one's bits), and on NaN inputs (sign handling). */
const char *moq_cuda_verify_e4m3(unsigned long long *mismatch, unsigned long long *nan_mismatch, unsigned int *first);

#ifdef __cplusplus
}
#endif
#endif
