/* model_ops.cu — the decoder's non-linear steps on the GPU (src/model/model_gpu.c calls them through
 * cuda_api.h): embedding gather, residual add + RMSNorm, per-head q/k RMSNorm + RoPE + the store of
 * K and V into the paged cache, attention over the paged cache (decode / batch rows: flash-decoding
 * per GQA group with the combine fused; prefill: tiled flash attention, f32 on the CUDA cores or
 * bf16 on the tensor cores), SwiGLU. At batch 1 each is sized not to be latency-bound: float4 rows
 * over up to 1024 threads, several blocks per token, many K/V loads in flight per lane. Each is the CPU runner's f32 arithmetic (model.c, rope.c,
 * kv_cache.c) in the same order where it matters: RMSNorm's sum of squares in f64 and r = f32(1 /
 * sqrt(ss / n + eps)); the RoPE angle pos · inv_freq in f64, cos/sin in f64 rounded to f32 then ×
 * mscale; FP8 KV codes E4s(f32(x / scale)) with a true division, read back D4(code) · scale. Only
 * sums (dot products, softmax) are reordered. Everything is enqueued on the caller's stream (NULL:
 * the default stream), never synchronised, so a decode step can be captured into a CUDA graph;
 * nothing here allocates.
 * Tested by tests/model/test_model_cuda.c (the GPU forward against the CPU forward) and
 * tests/model/test_attn_cuda.c (attention and the norms against fp64 at the 8B shape and more).
 */
#include <atomic>
#include "kernels/cuda/common.cuh"

#define MO_CHECK(what) return moq_cuda_launch_check(what)

/* The decode step's kernels here are launched by moq_launch_pdl (common.cuh: programmatic
 * dependents with MOQ_CUDA_PDL=1, plain launches otherwise; the prefill attention always plain) and
 * wait (pdl_wait) before their first global access. The kernels whose output a linear reads next (the
 * norms, attention, SwiGLU) also let that linear's decode kernel start at once (pdl_trigger): it
 * issues its first weight loads and then waits for this whole grid to finish and its writes to be
 * visible, so only the weight stream overlaps this kernel. */

/* x [M, H] = table[tok] · mult, float4 per thread: grid (H/4 / 256 blocks, M). */
__global__ void embed_kernel(const int32_t *tok, const float *table, int64_t H, float mult, float *x) {
    pdl_wait();
    const int64_t i = blockIdx.y, e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, H4 = H / 4;
    if (e >= H4) return;
    const float4 v = ((const float4 *)table)[tok[i] * H4 + e];
    ((float4 *)x)[i * H4 + e] = make_float4(__fmul_rn(v.x, mult), __fmul_rn(v.y, mult), __fmul_rn(v.z, mult), __fmul_rn(v.w, mult));
}

extern "C" const char *moq_cuda_embed(const int32_t *tok_d, int64_t M, const float *table_d, int64_t H, float mult, float *x_d, void *stream) {
    if (H % 4) return "embedding gather: the hidden size must be a multiple of 4";
    (void)moq_launch_pdl(embed_kernel, dim3((unsigned)cdiv(H / 4, 256), (unsigned)M), dim3(256), 0, (cudaStream_t)stream, tok_d, table_d, H, mult, x_d);
    MO_CHECK("embedding gather");
}

/* Block-wide f64 sum (blockDim.x a multiple of 32, <= 1024); every thread gets it. */
__device__ double block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, nw = blockDim.x / 32, lane = threadIdx.x & 31;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Residual add + RMSNorm of rows of H (H % 4 == 0): one block per row, up to 1024 threads, thread t
 * holding the float4s t, t + blockDim, ... (NV of them) in registers between the sum of squares and
 * the scaling, so a row is one round of loads (M = 1 is not latency-bound). Per row i (GATHER: i =
 * rows[j], output row j, x left as it is; else i = j and x[i] += t[i] written back when t is given):
 * v = x + t, ss = Σ v² in f64, r = f32(1/sqrt(ss/H + eps)), h = (v · r) · w. */
template <int NV, bool GATHER>
__global__ void __launch_bounds__(1024) rmsnorm_rows_kernel(float *x, const float *t, const float *w, const int32_t *rows, int64_t H, double eps,
                                                            float *h) {
    __shared__ double sh[32];
    pdl_wait();
    pdl_trigger();
    const int64_t j = blockIdx.x, i = GATHER ? rows[j] : j, H4 = H / 4;
    float4 *xr = (float4 *)(x + i * H);
    const float4 *tr = t ? (const float4 *)(t + i * H) : NULL;
    float4 v[NV], g[NV]; /* g: the weights, loaded with x (not after the block's sum) for NV <= 4 */
    double ss = 0;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int64_t e = threadIdx.x + (int64_t)k * blockDim.x;
        if (e >= H4) continue;
        v[k] = xr[e];
        if (NV <= 4) g[k] = ((const float4 *)w)[e]; /* 8: no room under 64 registers a thread */
        if (tr) {
            const float4 b = tr[e];
            v[k] = make_float4(__fadd_rn(v[k].x, b.x), __fadd_rn(v[k].y, b.y), __fadd_rn(v[k].z, b.z), __fadd_rn(v[k].w, b.w));
            if (!GATHER) xr[e] = v[k];
        }
        ss += (double)v[k].x * v[k].x + (double)v[k].y * v[k].y + (double)v[k].z * v[k].z + (double)v[k].w * v[k].w;
    }
    ss = block_sum(ss, sh);
    const float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    float4 *hr = (float4 *)(h + j * H);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int64_t e = threadIdx.x + (int64_t)k * blockDim.x;
        if (e >= H4) continue;
        if (NV > 4) g[k] = ((const float4 *)w)[e];
        hr[e] = make_float4(__fmul_rn(__fmul_rn(v[k].x, r), g[k].x), __fmul_rn(__fmul_rn(v[k].y, r), g[k].y), __fmul_rn(__fmul_rn(v[k].z, r), g[k].z),
                            __fmul_rn(__fmul_rn(v[k].w, r), g[k].w));
    }
}

/* The launch of rmsnorm_rows_kernel for n rows: NV = the fewest float4s per thread (1, 2, 4, 8) that
 * 1024 threads cover H with, threads = H/4 / NV rounded up to a warp. */
template <bool GATHER>
static const char *launch_rmsnorm(float *x, const float *t, const float *w, const int32_t *rows, int64_t n, int64_t H, double eps, float *h,
                                  void *stream, const char *what) {
    const int64_t H4 = H / 4;
    if (H % 4 || H4 > 8 * 1024) return GATHER ? "final rmsnorm: the hidden size must be a multiple of 4, at most 32768"
                                              : "residual add + rmsnorm: the hidden size must be a multiple of 4, at most 32768";
    const int nv = H4 <= 1024 ? 1 : H4 <= 2048 ? 2 : H4 <= 4096 ? 4 : 8;
    const unsigned th = (unsigned)(cdiv(cdiv(H4, nv), 32) * 32);
    cudaStream_t s = (cudaStream_t)stream;
    switch (nv) {
    case 1: (void)moq_launch_pdl(rmsnorm_rows_kernel<1, GATHER>, (unsigned)n, dim3(th), 0, s, x, t, w, rows, H, eps, h); break;
    case 2: (void)moq_launch_pdl(rmsnorm_rows_kernel<2, GATHER>, (unsigned)n, dim3(th), 0, s, x, t, w, rows, H, eps, h); break;
    case 4: (void)moq_launch_pdl(rmsnorm_rows_kernel<4, GATHER>, (unsigned)n, dim3(th), 0, s, x, t, w, rows, H, eps, h); break;
    default: (void)moq_launch_pdl(rmsnorm_rows_kernel<8, GATHER>, (unsigned)n, dim3(th), 0, s, x, t, w, rows, H, eps, h); break;
    }
    return moq_cuda_launch_check(what);
}

extern "C" const char *moq_cuda_add_rmsnorm(float *x_d, const float *t_d, const float *w_d, int64_t M, int64_t H, double eps, float *h_d,
                                             void *stream) {
    return launch_rmsnorm<false>(x_d, t_d, w_d, NULL, M, H, eps, h_d, stream, "residual add + rmsnorm");
}

/* h[j] = rmsnorm(x[r] + t[r]) · w for r = rows[j] (x is left as it is): the final norm of the rows
 * whose logits are wanted, gathered into consecutive rows of h. */
extern "C" const char *moq_cuda_final_norm_rows(const float *x_d, const float *t_d, const float *w_d, const int32_t *rows_d, int64_t n, int64_t H,
                                                double eps, float *h_d, void *stream) {
    return launch_rmsnorm<true>((float *)x_d, t_d, w_d, rows_d, n, H, eps, h_d, stream, "final rmsnorm of the logits rows");
}

/* Cache slot of (token's sequence, position): page from the sequence's block table. */
__device__ __forceinline__ int64_t kv_slot(const moq_cuda_kv &kv, int32_t seq, int64_t pos) {
    const int64_t page = kv.block_table[(int64_t)seq * kv.max_pages + pos / kv.page];
    return page * kv.page + pos % kv.page; /* position row in the layer's pool */
}

__device__ __forceinline__ void kv_store(void *base, int elem, int64_t idx, float v, float scale) {
    if (elem == MOQ_CUDA_KV_E4M3) ((uint8_t *)base)[idx] = d_e4m3_rne_sat(__fdiv_rn(v, scale));
    else ((__nv_bfloat16 *)base)[idx] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float kv_load(const void *base, int elem, int64_t idx, float scale) {
    if (elem == MOQ_CUDA_KV_E4M3) return __fmul_rn(d_e4m3_dec(((const uint8_t *)base)[idx]), scale);
    return __bfloat162float(((const __nv_bfloat16 *)base)[idx]);
}

/* One warp per head, 4 heads per block: grid (ceil((A + 2 KV) / 4), M), heads in the order q, k, v.
 * Per-head RMSNorm (q/k, when given), RoPE (rotate-half over the whole head, cos/sin of the lane's own
 * angles in f64), q written back in place, k and v stored into the cache. Lane j holds elements
 * j + 32 s, so element i and i + D/2 share a lane. */
template <int C>
__global__ void __launch_bounds__(128) qk_rope_store_kernel(float *qkv, int64_t A, int64_t KV, const float *qn, const float *kn, double eps,
                                                            const float *inv_freq, float mscale, const int32_t *seq, const int32_t *pos,
                                                            moq_cuda_kv kv) {
    constexpr int D = 32 * C;
    const int lane = threadIdx.x & 31;
    const int64_t hd = (int64_t)blockIdx.x * 4 + threadIdx.x / 32, i = blockIdx.y;
    pdl_wait();
    if (hd >= A + 2 * KV) return;
    const int64_t p = pos[i], qkvN = (A + 2 * KV) * D;
    float *x = qkv + i * qkvN + hd * D;
    float v[C];
#pragma unroll
    for (int s = 0; s < C; s++) v[s] = x[lane + 32 * s];
    const bool isv = hd >= A + KV;
    const float *nw_ = hd < A ? qn : (isv ? NULL : kn);
    if (nw_) {
        double ss = 0;
#pragma unroll
        for (int s = 0; s < C; s++) ss += (double)v[s] * v[s];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = (float)(1.0 / sqrt(ss / (double)D + eps));
#pragma unroll
        for (int s = 0; s < C; s++) v[s] = __fmul_rn(__fmul_rn(v[s], r), nw_[lane + 32 * s]);
    }
    if (!isv) {
#pragma unroll
        for (int s = 0; s < C / 2; s++) {
            const int e = lane + 32 * s;
            const double a = (double)p * (double)inv_freq[e];
            const float cs = __fmul_rn((float)cos(a), mscale), sn = __fmul_rn((float)sin(a), mscale);
            const float x0 = v[s], x1 = v[s + C / 2];
            v[s] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
            v[s + C / 2] = __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn));
        }
    }
    if (hd < A) {
#pragma unroll
        for (int s = 0; s < C; s++) x[lane + 32 * s] = v[s];
    } else {
        const int64_t h = isv ? hd - A - KV : hd - A, slot = kv_slot(kv, seq[i], p);
        void *base = isv ? kv.v : kv.k;
        const float sc = isv ? kv.v_scale : kv.k_scale;
#pragma unroll
        for (int s = 0; s < C; s++) kv_store(base, kv.elem, (slot * KV + h) * D + lane + 32 * s, v[s], sc);
    }
}

extern "C" const char *moq_cuda_qk_rope_store(float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, const float *q_norm_d,
                                              const float *k_norm_d, double eps, const float *inv_freq_d, float mscale, const int32_t *seq_d,
                                              const int32_t *pos_d, const moq_cuda_kv *kv, void *stream) {
    const dim3 grid((unsigned)cdiv(A + 2 * KV, 4), (unsigned)M);
    cudaStream_t s = (cudaStream_t)stream;
    switch (D) {
    case 64: (void)moq_launch_pdl(qk_rope_store_kernel<2>, grid, dim3(128), 0, s, qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    case 128: (void)moq_launch_pdl(qk_rope_store_kernel<4>, grid, dim3(128), 0, s, qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    case 256: (void)moq_launch_pdl(qk_rope_store_kernel<8>, grid, dim3(128), 0, s, qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    default: return "qk_rope_store: head_dim must be 64, 128 or 256";
    }
    MO_CHECK("q/k norm + rope + kv store");
}

/* Eight consecutive K or V values of one lane: 16 bytes of bf16 or 8 bytes of e4m3 codes, loaded
 * as one vector (read-only for the kernel's life: the step's K/V were stored before it) and decoded
 * as kv_load does (bf16 exactly; e4m3 D4(code) · scale). */
template <int E> struct kv8_raw { typedef uint4 T; };
template <> struct kv8_raw<MOQ_CUDA_KV_E4M3> { typedef uint2 T; };
template <int E> __device__ __forceinline__ typename kv8_raw<E>::T kv8_ld(const void *base, int64_t idx) {
    typedef typename kv8_raw<E>::T T;
    if (E == MOQ_CUDA_KV_E4M3) return __ldg((const T *)((const uint8_t *)base + idx));
    return __ldg((const T *)((const __nv_bfloat16 *)base + idx));
}
__device__ __forceinline__ void kv8_dec(const uint4 &r, float, float *f) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 4; k++) f[2 * k] = u2f(w[k] << 16), f[2 * k + 1] = u2f(w[k] & 0xFFFF0000u);
}
__device__ __forceinline__ void kv8_dec(const uint2 &r, float scale, float *f) {
#pragma unroll
    for (int k = 0; k < 4; k++) f[k] = __fmul_rn(d_e4m3_dec((r.x >> 8 * k) & 0xFF), scale), f[4 + k] = __fmul_rn(d_e4m3_dec((r.y >> 8 * k) & 0xFF), scale);
}

/* 2^x by the SFU (ex2.approx.ftz: ~2 ulp): the decode softmax works in base 2, scores pre-multiplied
 * by log2(e), which gives the same weights as exp of the natural-log scores. */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* q = n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by one multiply-high (Granlund-Montgomery, no
 * division in the key loop): l = ceil(log2 d), m = floor(2^(31 + l) / d) + 1 < 2^32; the error
 * n (m d - 2^(31+l)) / (d 2^(31+l)) < 2^-l <= 1/d never carries past the fraction of n / d. */
struct pg_div {
    uint32_t m;
    int      sh; /* 31 + l */
    __device__ __forceinline__ int div(int n) const { return (int)(((uint64_t)(uint32_t)n * m) >> sh); }
};
static pg_div pg_div_of(int64_t d) {
    int l = 0;
    while (((int64_t)1 << l) < d) l++;
    return pg_div{(uint32_t)(((uint64_t)1 << (31 + l)) / (uint64_t)d + 1), 31 + l};
}

/* Attention of single query rows over the paged cache, split over keys (flash-decoding), for decode
 * and batch steps: block (kv head × group part, token, z), AT_THREADS threads; block z takes the key
 * ranges z, z + gridDim.z, ... (gridDim.z = n_split, one range a block, unless M is large). The block takes up
 * to GB q heads of one GQA group (GB = 4, 2 or 1 by the group size; a group of G heads is
 * ceil(G / GB) blocks), so each K/V row of its keys is read once for all of them.
 *
 * Keys: the token at position p sees lo..p (lo = p - W + 1 for a window W, else 0); its span is cut
 * into n_split ranges of max(MOQ_CUDA_SPLIT_MIN, ceil(span / n_split)) keys, so the launch shape does
 * not depend on the positions (a CUDA graph replays it at any length; ranges past the span are
 * empty). Inside a range: a key row (D values) is read by LPK = D/8 lanes, 8 values (one 16-byte bf16
 * or 8-byte e4m3 vector) each; the block's NG = AT_THREADS / LPK lane groups take keys k0 + g + u NG
 * (u = 0..3), then the next 4 NG, and so on. Per round a group issues the K and V loads of its U = 4
 * keys before using any (16-32 KiB in flight per block; the page numbers of the next round are
 * loaded meanwhile), reduces the U × GB dot products over its LPK lanes by shuffles and folds the U
 * keys into its online softmax (max, sum, weighted V) with one rescale. The groups' states then meet
 * in shared memory and are merged in group order into the range's (m, l, o[D]), written to part
 * [M, A, n_split, MOQ_CUDA_PART_STRIDE(D)]. (GB = 4 with bf16 KV spills ~50 bytes a thread at the 128-register cap
 * that keeps two blocks per SM.)
 *
 * Ranges past the span (n_ne = ceil(span / range keys) hold keys) are skipped: a batch step's short
 * rows cost no more than their keys. Combine, fused: each block counts itself done on
 * done[token, block x] (atomic, after a fence); the last of the n_ne blocks reads the parts' (m, l)
 * in one round of loads, then the partial sums as float4 columns, each thread a fixed subset of the
 * parts with 16 loads in flight, the subsets added in a fixed order (deterministic whatever order
 * the blocks finished in): att = Σ c_s o_s / Σ c_s l_s
 * with c_s = 2^(m_s - max m), and resets the counter to 0 for the next launch. Scores are kept in
 * base 2 (q·k · scale · log2 e, weights by ex2); positions are < 2^31 (int keys, pg_div). The K/V of
 * every token of the step are stored before this runs. */
#define AT_THREADS 256
#define AT_MAX_SPLIT 64
#define AT_TARGET_BLOCKS 1024 /* ~4 waves at 2 blocks an SM on 132 SMs */
template <int D, int GB, int E, bool ZL>
__global__ void __launch_bounds__(AT_THREADS, 2) attn_decode_kernel(const float *qkv, int64_t A, int64_t KV, float scale2, int64_t W,
                                                                 const int32_t *seq, const int32_t *pos, moq_cuda_kv kv, pg_div pd, int n_split,
                                                                 float *part, int32_t *done, float *att) {
    constexpr int LPK = D / 8, NG = AT_THREADS / LPK, U = 4, PS = MOQ_CUDA_PART_STRIDE(D);
    typedef typename kv8_raw<E>::T raw;
    __shared__ __align__(16) float s_o[NG][GB][D]; /* 32 KiB at every D: NG · D = 2048 */
    __shared__ float s_m[NG][GB], s_l[NG][GB], s_cg[NG][GB], s_mx[GB];
    __shared__ float s_c[GB][AT_MAX_SPLIT], s_lk[GB][AT_MAX_SPLIT], s_L[GB];
    __shared__ int s_last;
    pdl_wait();
    pdl_trigger();
    const int G = (int)(A / KV), nb = (G + GB - 1) / GB, kvh = blockIdx.x / nb, gp = blockIdx.x % nb;
    const int ng = G - gp * GB < GB ? G - gp * GB : GB; /* q heads of this block: h0 .. h0 + ng - 1 */
    const int64_t h0 = (int64_t)kvh * G + gp * GB, i = blockIdx.y, p = pos[i];
    const int tid = threadIdx.x, r = tid % LPK, kg = tid / LPK, lane = tid & 31;
    const int64_t lo = W > 0 && p + 1 > W ? p + 1 - W : 0, span = p + 1 - lo;
    int64_t split_keys = (span + n_split - 1) / n_split;
    if (split_keys < MOQ_CUDA_SPLIT_MIN) split_keys = MOQ_CUDA_SPLIT_MIN;
    const int n_ne = (int)((span + split_keys - 1) / split_keys); /* ranges that hold keys: 0 .. n_ne - 1 */
    /* ZL: block z takes the ranges z, z + gridDim.z, ...; else (gridDim.z = n_split) its range z alone,
     * one pass the compiler sees as such (the registers of the kernel before the loop) */
    for (int sp = blockIdx.z; sp < n_ne; sp = ZL ? sp + (int)gridDim.z : n_ne) { /* past n_ne: empty, nothing to read, write or count */
    const int64_t k0 = lo + sp * split_keys, k1 = k0 + split_keys < p + 1 ? k0 + split_keys : p + 1;
    const int64_t qkvN = (A + 2 * KV) * D;
    float q[GB][8], o[GB][8], m[GB], l[GB];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        const float4 *qp = (const float4 *)(qkv + i * qkvN + (h0 + g) * D + r * 8);
        const float4 a = g < ng ? qp[0] : make_float4(0, 0, 0, 0), b = g < ng ? qp[1] : make_float4(0, 0, 0, 0);
        q[g][0] = a.x, q[g][1] = a.y, q[g][2] = a.z, q[g][3] = a.w, q[g][4] = b.x, q[g][5] = b.y, q[g][6] = b.z, q[g][7] = b.w;
        m[g] = -INFINITY, l[g] = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) o[g][e] = 0;
    }
    const int32_t *bt = kv.block_table + (int64_t)seq[i] * kv.max_pages;
    const int pg = (int)kv.page;
    /* the trip count follows the warp's first lane group, so every lane of a warp runs the same
     * iterations (the shuffles below need the whole warp); a group's keys past k1 are masked */
    /* keys past k1 read key k1 - 1 instead (no branches) and get weight 0 below; the page numbers
     * of a round's keys are loaded during the round before (the 8 vector loads of a round wait on
     * nothing but them) */
    const int kend = (int)k1 - 1;
    auto key_of = [&](int64_t j0, int u) { return (int)(j0 + u * NG) < kend ? (int)(j0 + u * NG) : kend; };
    int page[U];
#pragma unroll
    for (int u = 0; u < U; u++) page[u] = __ldg(bt + pd.div(key_of(k0 + kg, u)));
    for (int64_t jw = k0 + (kg - lane / LPK); jw < k1; jw += NG * U) {
        const int64_t j0 = jw + lane / LPK;
        raw kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = key_of(j0, u);
            const int64_t idx = (((int64_t)page[u] * pg + (j - pd.div(j) * pg)) * KV + kvh) * D + r * 8;
            kr[u] = kv8_ld<E>(kv.k, idx), vr[u] = kv8_ld<E>(kv.v, idx);
        }
        if (jw + NG * U < k1)
#pragma unroll
            for (int u = 0; u < U; u++) page[u] = __ldg(bt + pd.div(key_of(j0 + NG * U, u)));
        float s[U][GB];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float k[8];
            kv8_dec(kr[u], kv.k_scale, k);
#pragma unroll
            for (int g = 0; g < GB; g++) {
                float d = 0;
#pragma unroll
                for (int e = 0; e < 8; e++) d = fmaf(q[g][e], k[e], d);
                s[u][g] = d;
            }
        }
#pragma unroll
        for (int off = LPK / 2; off > 0; off >>= 1)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int g = 0; g < GB; g++) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
        float pu[U][GB];
#pragma unroll
        for (int g = 0; g < GB; g++) { /* mx = -inf: no key of this group in range yet */
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; u++) {
                s[u][g] = j0 + u * NG < k1 ? s[u][g] * scale2 : -INFINITY;
                mx = fmaxf(mx, s[u][g]);
            }
            const float corr = mx == -INFINITY ? 1.0f : ex2(m[g] - mx);
            float sum = 0;
#pragma unroll
            for (int u = 0; u < U; u++) pu[u][g] = s[u][g] == -INFINITY ? 0.0f : ex2(s[u][g] - mx), sum += pu[u][g];
            l[g] = l[g] * corr + sum, m[g] = mx;
#pragma unroll
            for (int e = 0; e < 8; e++) o[g][e] *= corr;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float v[8];
            kv8_dec(vr[u], kv.v_scale, v);
#pragma unroll
            for (int g = 0; g < GB; g++)
#pragma unroll
                for (int e = 0; e < 8; e++) o[g][e] = fmaf(pu[u][g], v[e], o[g][e]);
        }
    }
    /* merge the NG lane groups' states through shared memory, in group order */
#pragma unroll
    for (int g = 0; g < GB; g++) {
        float4 *dst = (float4 *)&s_o[kg][g][r * 8];
        dst[0] = make_float4(o[g][0], o[g][1], o[g][2], o[g][3]), dst[1] = make_float4(o[g][4], o[g][5], o[g][6], o[g][7]);
        if (r == 0) s_m[kg][g] = m[g], s_l[kg][g] = l[g];
    }
    __syncthreads();
    if (tid < GB * NG) { /* c = exp(m - max m) per (group, head), 0 for a group that saw no key */
        const int g = tid / NG, k = tid % NG;
        float mx = -INFINITY;
        for (int k2 = 0; k2 < NG; k2++) mx = fmaxf(mx, s_m[k2][g]);
        s_cg[k][g] = s_m[k][g] == -INFINITY ? 0.0f : ex2(s_m[k][g] - mx);
        if (k == 0) s_mx[g] = mx;
    }
    __syncthreads();
    for (int x = tid; x < ng * D; x += AT_THREADS) {
        const int g = x / D, e = x % D;
        float acc = 0, sum = 0;
        for (int k = 0; k < NG; k++) acc += s_cg[k][g] * s_o[k][g][e], sum += s_cg[k][g] * s_l[k][g];
        float *out = part + ((i * A + h0 + g) * n_split + sp) * PS;
        out[e] = acc;
        if (e == 0) out[D] = s_mx[g], out[D + 1] = sum;
    }
    /* the last of the n_ne blocks of this (token, heads) combines their parts. Ordering as in
     * cooperative groups' grid sync: the barrier orders the block's part writes before thread 0's
     * fence (cumulative), which orders them before its count; the last block's thread 0 fences after
     * seeing the count, and the barrier hands that on. One fence per block, not per warp: a
     * MEMBAR.SC.GPU in every warp cost more than the keys. */
    __syncthreads();
    int32_t *cnt = done + i * gridDim.x + blockIdx.x;
    if (tid == 0) {
        __threadfence();
        s_last = atomicAdd(cnt, 1) == n_ne - 1;
        if (s_last) __threadfence();
    }
    __syncthreads();
    if (!s_last) continue; /* s_last was read by every thread before the next write (after two barriers) */
    const float *pp = part + (i * A + h0) * n_split * PS; /* part (g, k) at pp + (g n_split + k) PS */
    for (int x = tid; x < ng * n_ne; x += AT_THREADS) { /* every (m, l) in one round of loads */
        const int g = x / n_ne, k = x % n_ne;
        s_c[g][k] = __ldcg(pp + (g * n_split + k) * PS + D), s_lk[g][k] = __ldcg(pp + (g * n_split + k) * PS + D + 1);
    }
    __syncthreads();
    if (tid < ng) {
        float mx = -INFINITY, sum = 0;
        for (int k = 0; k < n_ne; k++) mx = fmaxf(mx, s_c[tid][k]);
        for (int k = 0; k < n_ne; k++) {
            const float mk = s_c[tid][k], c = mk == -INFINITY ? 0.0f : ex2(mk - mx); /* 0: no finite score */
            sum += c * s_lk[tid][k];
            s_c[tid][k] = c;
        }
        s_L[tid] = sum;
    }
    __syncthreads();
    /* the outputs as float4 columns (GB·D/4 of them) x NSUB subsets of the parts: thread (col, sub)
     * adds c_k o_k over the parts k = sub, sub + NSUB, ... in order, 16 loads in flight (one or two
     * rounds where one element per thread took n_ne / 16 serial rounds each), then column col adds
     * its NSUB subsets in order (deterministic whatever order the blocks finished in) */
    constexpr int NCOL = GB * D / 4, NSUB = AT_THREADS / NCOL;
    static_assert(NCOL <= AT_THREADS && AT_THREADS % NCOL == 0, "attention combine: columns per block");
    float4 *s_red = (float4 *)&s_o[0][0][0]; /* NSUB x NCOL float4 <= 4 KiB of the merged states' 32 */
    {
        const int col = tid % NCOL, sub = tid / NCOL, g = col / (D / 4), e4 = col % (D / 4);
        float4 acc = make_float4(0, 0, 0, 0);
        if (g < ng)
            for (int k0c = sub; k0c < n_ne; k0c += 16 * NSUB) {
                float4 v[16];
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    const int k = k0c + u * NSUB;
                    v[u] = k < n_ne && s_c[g][k] > 0.0f ? __ldcg((const float4 *)(pp + (g * n_split + k) * PS) + e4) : make_float4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    const int k = k0c + u * NSUB;
                    const float c = k < n_ne ? s_c[g][k] : 0.0f;
                    acc.x = fmaf(c, v[u].x, acc.x), acc.y = fmaf(c, v[u].y, acc.y), acc.z = fmaf(c, v[u].z, acc.z), acc.w = fmaf(c, v[u].w, acc.w);
                }
            }
        __syncthreads(); /* s_o's last readers (the part writes above) are done */
        s_red[sub * NCOL + col] = acc;
        __syncthreads();
        if (tid < NCOL && g < ng) {
            float4 o = s_red[col];
            for (int s2 = 1; s2 < NSUB; s2++) {
                const float4 b = s_red[s2 * NCOL + col];
                o.x += b.x, o.y += b.y, o.z += b.z, o.w += b.w;
            }
            const float L = s_L[g];
            ((float4 *)(att + i * A * D + (h0 + g) * D))[e4] = make_float4(o.x / L, o.y / L, o.z / L, o.w / L);
        }
    }
    if (tid == 0) *cnt = 0;
    } /* the last range was counted: no range of this (token, heads) is left for the loop */
}

template <int D, int GB> static void launch_decode(dim3 grid, cudaStream_t s, const float *qkv_d, int64_t A, int64_t KV, float scale, int64_t window,
                                                   const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, int n_split, float *part_d,
                                                   int32_t *done_d, float *att_d) {
    const float scale2 = scale * 1.4426950408889634f; /* scores in base 2 (ex2) */
    const pg_div pd = pg_div_of(kv->page);
    const bool e4 = kv->elem == MOQ_CUDA_KV_E4M3, zl = (int)grid.z < n_split;
    auto k = e4 ? (zl ? attn_decode_kernel<D, GB, MOQ_CUDA_KV_E4M3, true> : attn_decode_kernel<D, GB, MOQ_CUDA_KV_E4M3, false>)
                : (zl ? attn_decode_kernel<D, GB, MOQ_CUDA_KV_BF16, true> : attn_decode_kernel<D, GB, MOQ_CUDA_KV_BF16, false>);
    (void)moq_launch_pdl(k, grid, dim3(AT_THREADS), 0, s, qkv_d, A, KV, scale2, window, seq_d, pos_d, *kv, pd, n_split, part_d, done_d, att_d);
}
template <int D> static void launch_decode_d(int gb, dim3 grid, cudaStream_t s, const float *qkv_d, int64_t A, int64_t KV, float scale, int64_t window,
                                             const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, int n_split, float *part_d,
                                             int32_t *done_d, float *att_d) {
    if (gb == 4) launch_decode<D, 4>(grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, n_split, part_d, done_d, att_d);
    else if (gb == 2) launch_decode<D, 2>(grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, n_split, part_d, done_d, att_d);
    else launch_decode<D, 1>(grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, n_split, part_d, done_d, att_d);
}

extern "C" const char *moq_cuda_attention(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                                          const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, int64_t n_split,
                                          float *part_d, int32_t *done_d, float *att_d, void *stream) {
    if (n_split < 1 || n_split > AT_MAX_SPLIT) return "attention: n_split must be 1..64";
    if (KV < 1 || A % KV) return "attention: the q heads must be a multiple of the kv heads";
    if (kv->page < 1 || kv->page > ((int64_t)1 << 30)) return "attention: the page size must be 1..2^30 positions";
    const int64_t G = A / KV;
    const int gb = G >= 4 ? 4 : G == 1 ? 1 : G == 2 ? 2 : 4; /* a group of 3 is one block of 4 with a head idle */
    /* z: n_split (one key range a block); with MOQ_CUDA_ATTN_ZLOOP=1 fewer at large M, each block
     * looping over its ranges, so a batch step's empty ranges (most of them when the rows are short)
     * cost a loop test instead of a block each (2 blocks an SM: 32768 blocks a layer at M = 64 took
     * ~120 us on the H100). The ranges, their parts and the combine are the same whatever z:
     * bit-identical results. The knob is off by default until the loop has run on a GPU (written
     * 2026-12-07 when the device budget ran out; test_attn_cuda's 8-row cases check it). */
    static const int zloop = moq_cuda_knob("MOQ_CUDA_ATTN_ZLOOP", 0, 0, 1);
    const int64_t gx = KV * cdiv(G, gb), z = zloop ? cdiv(AT_TARGET_BLOCKS, gx * M) : n_split;
    const dim3 grid((unsigned)gx, (unsigned)M, (unsigned)(z < 1 ? 1 : z > n_split ? n_split : z));
    cudaStream_t s = (cudaStream_t)stream;
    switch (D) {
    case 64: launch_decode_d<64>(gb, grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, (int)n_split, part_d, done_d, att_d); break;
    case 128: launch_decode_d<128>(gb, grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, (int)n_split, part_d, done_d, att_d); break;
    case 256: launch_decode_d<256>(gb, grid, s, qkv_d, A, KV, scale, window, seq_d, pos_d, kv, (int)n_split, part_d, done_d, att_d); break;
    default: return "attention: head_dim must be 64, 128 or 256";
    }
    MO_CHECK("attention (decode)");
}

/* Prefill attention, tiled (flash-attention style, f32 on the CUDA cores): the M rows of the step are
 * one sequence at consecutive positions (pos[0] + i). Block (tile of FQ = 64 query rows, q head),
 * 256 threads; the keys the tile can see (from the first row's window start to the last row's
 * position) are walked in tiles of FK = 64: K and V rows read once from the paged cache into shared
 * memory (decoded to f32, ×scale for e4m3) and reused by the 64 queries; S = q kᵀ · scale with the
 * causal / window mask, an online softmax per row (running max and sum, the accumulator rescaled),
 * O += P V. Thread (ty, tx) = (t / 16, t % 16) holds rows 4 ty .. 4 ty + 3 and, for S, keys tx + 16 c,
 * for O, head elements tx + 16 c. Shared memory (floats): Q [64][D+1], K [64][D+1], V [64][D],
 * S [64][65], row corrections [64] — dynamic, opted in above 48 KiB. */
#define FQ 64
#define FK 64
template <int D>
__global__ void __launch_bounds__(256) attn_prefill_kernel(const float *qkv, int64_t M, int64_t A, int64_t KV, float scale, int64_t W,
                                                           const int32_t *seq, const int32_t *pos, moq_cuda_kv kv, float *att) {
    extern __shared__ float fsm[];
    constexpr int DP = D + 1, NC = D / 16;
    float *Qs = fsm, *Ks = Qs + FQ * DP, *Vs = Ks + FK * DP, *Ss = Vs + FK * D, *corr = Ss + FQ * (FK + 1);
    const int t = threadIdx.x, ty = t / 16, tx = t % 16;
    const int64_t i0 = (int64_t)blockIdx.x * FQ, hd = blockIdx.y, kvh = hd / (A / KV), qkvN = (A + 2 * KV) * D;
    const int64_t nrow = M - i0 < FQ ? M - i0 : FQ, p0 = pos[0] + i0, plast = p0 + nrow - 1;
    const int32_t sq = seq[0];
    for (int e = t; e < FQ * D; e += 256) {
        const int r = e / D, d = e % D;
        Qs[r * DP + d] = r < nrow ? qkv[(i0 + r) * qkvN + hd * D + d] : 0.0f;
    }
    float o[4][NC], mrow[4], lrow[4];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        mrow[r] = -INFINITY, lrow[r] = 0;
#pragma unroll
        for (int c = 0; c < NC; c++) o[r][c] = 0;
    }
    const int64_t klo = W > 0 && p0 + 1 > W ? p0 + 1 - W : 0;
    for (int64_t k0 = klo; k0 <= plast; k0 += FK) {
        __syncthreads(); /* the previous tile's K, V, S are consumed */
        for (int e = t; e < FK * D; e += 256) {
            const int j = e / D, d = e % D;
            const int64_t kp = k0 + j;
            float kvk = 0, kvv = 0;
            if (kp <= plast) {
                const int64_t idx = (kv_slot(kv, sq, kp) * KV + kvh) * D + d;
                kvk = kv_load(kv.k, kv.elem, idx, kv.k_scale), kvv = kv_load(kv.v, kv.elem, idx, kv.v_scale);
            }
            Ks[j * DP + d] = kvk, Vs[j * D + d] = kvv;
        }
        __syncthreads();
        float sc[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) sc[r][c] = 0;
#pragma unroll 4
        for (int d = 0; d < D; d++) {
            float q[4], k[4];
#pragma unroll
            for (int r = 0; r < 4; r++) q[r] = Qs[(4 * ty + r) * DP + d];
#pragma unroll
            for (int c = 0; c < 4; c++) k[c] = Ks[(tx + 16 * c) * DP + d];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) sc[r][c] = fmaf(q[r], k[c], sc[r][c]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int64_t p = p0 + 4 * ty + r, lo = W > 0 && p + 1 > W ? p + 1 - W : 0;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t kp = k0 + tx + 16 * c;
                const bool ok = 4 * ty + r < nrow && kp <= p && kp >= lo;
                Ss[(4 * ty + r) * (FK + 1) + tx + 16 * c] = ok ? sc[r][c] * scale : -INFINITY;
            }
        }
        __syncthreads();
        { /* the tile's row maxima: 4 threads per row, 16 keys each */
            const int r = t / 4, part = t % 4;
            const float *srow = Ss + r * (FK + 1);
            float mx = -INFINITY;
            for (int j = part * 16; j < part * 16 + 16; j++) mx = fmaxf(mx, srow[j]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            if (part == 0) corr[r] = mx;
        }
        __syncthreads();
        /* running max per row (the 16 threads of a ty compute the same), the accumulator's correction */
        float cr[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float mn = fmaxf(mrow[r], corr[4 * ty + r]);
            cr[r] = mn == -INFINITY ? 1.0f : expf(mrow[r] - mn);
            mrow[r] = mn;
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float sum = 0;
            /* the 16 threads of this ty share rows 4 ty + r: thread tx converts keys tx + 16 c */
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float *sp = Ss + (4 * ty + r) * (FK + 1) + tx + 16 * c;
                const float pv = mrow[r] == -INFINITY ? 0.0f : expf(*sp - mrow[r]);
                *sp = pv, sum += pv;
            }
            for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            lrow[r] = lrow[r] * cr[r] + sum;
#pragma unroll
            for (int c = 0; c < NC; c++) o[r][c] *= cr[r];
        }
        __syncthreads();
        for (int j = 0; j < FK; j++) {
            float v[NC];
#pragma unroll
            for (int c = 0; c < NC; c++) v[c] = Vs[j * D + tx + 16 * c];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float pv = Ss[(4 * ty + r) * (FK + 1) + j];
#pragma unroll
                for (int c = 0; c < NC; c++) o[r][c] = fmaf(pv, v[c], o[r][c]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        if (4 * ty + r >= nrow) continue;
        float *out = att + (i0 + 4 * ty + r) * A * D + hd * D;
#pragma unroll
        for (int c = 0; c < NC; c++) out[tx + 16 * c] = o[r][c] / lrow[r];
    }
}

template <int D> static const char *launch_prefill(const float *qkv_d, int64_t M, int64_t A, int64_t KV, float scale, int64_t window,
                                                    const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d, void *stream) {
    const size_t smem = sizeof(float) * (size_t)(FQ * (D + 1) + FK * (D + 1) + FK * D + FQ * (FK + 1) + FQ);
    /* per D (one instantiation each) and per GPU: the opt-in is a property of the device's function, and
     * --tp runs ranks on several GPUs from several threads (issue 16) */
    static std::atomic<bool> opted[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64 || !opted[dev].load()) {
        cudaError_t e = cudaFuncSetAttribute(attn_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return moq_cuda_launch_check("attention (prefill): shared memory opt-in");
        if (dev >= 0 && dev < 64) opted[dev].store(true);
    }
    attn_prefill_kernel<D><<<dim3((unsigned)cdiv(M, FQ), (unsigned)A), 256, smem, (cudaStream_t)stream>>>(qkv_d, M, A, KV, scale, window, seq_d, pos_d,
                                                                                                           *kv, att_d);
    return moq_cuda_launch_check("attention (prefill)");
}

/* Prefill attention on the tensor cores (FlashAttention-2 style, mma.sync m16n8k16 bf16 → f32): the
 * same contract as attn_prefill_kernel (one sequence, rows at pos[0] + i, causal, GQA, window, paged
 * KV, bf16 or e4m3 KV), selected by MOQ_CUDA_ATTN_PREFILL_MMA=1 (moq_cuda_attention_prefill).
 * Block (tile of FQ = 64 query rows, q head), 4 warps; warp w owns rows 16 w .. 16 w + 15 of the
 * tile. Shared memory (bf16, rows padded to D + 8 elements so that the fragment loads of the 8 row
 * groups g and 4 column pairs t of a warp hit 32 different banks and ldmatrix rows stay 16-byte
 * aligned): Q [64][D + 8], K [64][D + 8], V [64][D + 8] — 52 KiB at D = 128, 101 KiB at D = 256.
 *   - Q is converted to bf16 once (round to nearest even).
 *   - Per key tile of FK = 64 positions (from the tile's first row's window start to its last row):
 *     K and V rows from the paged cache into shared memory as bf16: bf16 KV as stored (exact);
 *     e4m3 KV as D4(code) · scale rounded to bf16 (8 significant bits: a relative rounding of up to
 *     2^-9 that the f32 kernel does not make).
 *   - S = Q Kᵀ (16 × 64 per warp: 8 n8 tiles, f32 accumulators, 32 registers), · scale, the causal
 *     and window mask in registers (only on tiles that cut the warp's diagonal or window edge, in
 *     32-bit offsets), the online softmax per row in f32 (row max over the lane's 16 values, then
 *     the quad of lanes that share the row by two shuffles; expf as the f32 kernel).
 *   - P rounded to bf16 straight from the S accumulators into A fragments (the m16n8 C layout of
 *     two adjacent n8 tiles is the m16k16 A layout), O += P V with V's B fragments by ldmatrix.trans.
 *     The running sum l adds the bf16-rounded P, the weights the mma actually applies, so the
 *     weights of O / l sum to 1 up to f32 rounding.
 *   - O / l written as f32 (float2 per lane).
 * A warp skips a key tile wholly above its rows' diagonal or before their windows (its mma and exp
 * work; it still loads its share of the tile). Blocks are issued longest first (the last query
 * tiles see the most keys). Lane (g, t) = (lane / 4, lane % 4) holds, in every m16n8 accumulator,
 * rows g and g + 8, columns 2 t and 2 t + 1. Registers (ptxas, sm_90a, bf16 / e4m3 KV, no spills):
 * 113 / 118 at D = 64, 166 / 164 at D = 128 (3 blocks an SM; forcing 4 spills), 240 / 236 at
 * D = 256 (2 blocks). Not run on a GPU yet (2026-12-08); the fragment index math and the tile /
 * mask / online-softmax control flow were checked by a host emulation against a direct softmax. */
#define MQ_FQ 64
#define MQ_FK 64
__device__ __forceinline__ float bf16_lo(uint32_t w) { return u2f(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return u2f(w & 0xFFFF0000u); }

template <int D, int E>
__global__ void __launch_bounds__(128) attn_prefill_mma_kernel(const float *qkv, int64_t M, int64_t A, int64_t KV, float scale, int64_t W,
                                                               const int32_t *seq, const int32_t *pos, moq_cuda_kv kv, float *att) {
    extern __shared__ __align__(16) uint16_t hsm[];
    constexpr int DS = D + 8, NO = D / 8, NS = MQ_FK / 8, R8 = D / 8; /* smem row stride; O and S n8 tiles; 8-element chunks a row */
    uint16_t *Qs = hsm, *Ks = Qs + MQ_FQ * DS, *Vs = Ks + MQ_FK * DS;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t nblk = cdiv(M, MQ_FQ), i0 = (nblk - 1 - (int64_t)blockIdx.x) * MQ_FQ; /* longest tiles first */
    const int64_t hd = blockIdx.y, kvh = hd / (A / KV), qkvN = (A + 2 * KV) * D;
    const int64_t nrow = M - i0 < MQ_FQ ? M - i0 : MQ_FQ, p0 = pos[0] + i0, plast = p0 + nrow - 1;
    const int32_t sq = seq[0];
    for (int e = tid; e < MQ_FQ * D / 4; e += 128) { /* Q: float4 → 4 bf16 */
        const int r = e / (D / 4), c = 4 * (e % (D / 4));
        float4 x = make_float4(0, 0, 0, 0);
        if (r < nrow) x = *(const float4 *)(qkv + (i0 + r) * qkvN + hd * D + c);
        *(uint2 *)(Qs + r * DS + c) = make_uint2(bf16x2_rn(x.x, x.y), bf16x2_rn(x.z, x.w));
    }
    /* the warp's rows (clipped to the tile's): last position and the first row's window start */
    const int64_t wp0 = p0 + 16 * warp, wlast = wp0 + 15 < plast ? wp0 + 15 : plast;
    const int64_t wlo = W > 0 && wp0 + 1 > W ? wp0 + 1 - W : 0;
    const bool wact = 16 * warp < nrow;
    /* the mask in 32-bit offsets from the warp's first row (positions are int32): key kp is visible
     * to the row at p when kp <= p and p - kp < W (W = 0: no window; kp >= 0 always holds), tested
     * as kp > p - W so that nothing overflows */
    const int Wi = W <= 0 || W > INT32_MAX ? INT32_MAX : (int)W;
    const bool okr[2] = {16 * warp + g < nrow, 16 * warp + g + 8 < nrow};
    float o[NO][4], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0, 0};
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    const int64_t klo = W > 0 && p0 + 1 > W ? p0 + 1 - W : 0;
    for (int64_t k0 = klo; k0 <= plast; k0 += MQ_FK) {
        __syncthreads(); /* the previous tile's K and V are consumed (and, the first time, Q is stored) */
        for (int e = tid; e < MQ_FK * R8; e += 128) {
            const int j = e / R8, c = 8 * (e % R8);
            const int64_t kp = k0 + j;
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw; /* keys past the last row: zeros (P is 0 there, and 0 · V must not be NaN) */
            if (kp <= plast) {
                const int64_t idx = (kv_slot(kv, sq, kp) * KV + kvh) * D + c;
                if (E == MOQ_CUDA_KV_BF16) {
                    kw = __ldg((const uint4 *)((const __nv_bfloat16 *)kv.k + idx)), vw = __ldg((const uint4 *)((const __nv_bfloat16 *)kv.v + idx));
                } else {
                    float f[8];
                    kv8_dec(__ldg((const uint2 *)((const uint8_t *)kv.k + idx)), kv.k_scale, f);
                    kw = make_uint4(bf16x2_rn(f[0], f[1]), bf16x2_rn(f[2], f[3]), bf16x2_rn(f[4], f[5]), bf16x2_rn(f[6], f[7]));
                    kv8_dec(__ldg((const uint2 *)((const uint8_t *)kv.v + idx)), kv.v_scale, f);
                    vw = make_uint4(bf16x2_rn(f[0], f[1]), bf16x2_rn(f[2], f[3]), bf16x2_rn(f[4], f[5]), bf16x2_rn(f[6], f[7]));
                }
            }
            *(uint4 *)(Ks + j * DS + c) = kw, *(uint4 *)(Vs + j * DS + c) = vw;
        }
        __syncthreads();
        if (!wact || k0 > wlast || k0 + MQ_FK - 1 < wlo) continue; /* nothing of this tile is visible to the warp's rows */
        float s[NS][4];
#pragma unroll
        for (int n = 0; n < NS; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
        const uint16_t *qa = Qs + (16 * warp + g) * DS + 2 * t;
#pragma unroll 4
        for (int d0 = 0; d0 < D; d0 += 16) {
            uint32_t a[4];
            a[0] = *(const uint32_t *)(qa + d0), a[1] = *(const uint32_t *)(qa + 8 * DS + d0);
            a[2] = *(const uint32_t *)(qa + d0 + 8), a[3] = *(const uint32_t *)(qa + 8 * DS + d0 + 8);
#pragma unroll
            for (int n = 0; n < NS; n++) { /* B[k = d][n = key] = K[key][d]: key 8 n + g, d pairs 2t and 2t + 8 */
                const uint16_t *kb = Ks + (8 * n + g) * DS + d0 + 2 * t;
                mma_bf16_16816(s[n], a, *(const uint32_t *)kb, *(const uint32_t *)(kb + 8));
            }
        }
        /* scale, mask, the tile's row max (the quad t = 0..3 shares a row). The mask is skipped where
         * the whole tile is visible to all 16 rows of the warp (every tile but the diagonal ones
         * and a window's edge): the keys end at or before the first row, start at or after the last
         * row's window start, and the 16 rows exist. */
        const int dk = (int)(k0 - wp0); /* the tile's first key, relative to the warp's first row */
        const bool full = 16 * warp + 16 <= nrow && dk + MQ_FK - 1 <= 0 && dk > 15 - Wi; /* 15 - dk < Wi, without overflow */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int h = c / 2, kr = dk + 8 * n + 2 * t + (c & 1), rr = g + 8 * h; /* key and row, relative */
                float v = s[n][c] * scale;
                if (!full && !(okr[h] && kr <= rr && kr > rr - Wi)) v = -INFINITY;
                s[n][c] = v, mx[h] = fmaxf(mx[h], v);
            }
        float cr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(mrow[h], mx[h]);
            cr[h] = mn == -INFINITY ? 1.0f : expf(mrow[h] - mn);
            mrow[h] = mn;
        }
        /* P = exp(S - m) rounded to bf16, packed as the A fragments of the 4 k16 steps of P V;
         * this lane's share of the row sums (of the rounded values) */
        uint32_t pa[NS / 2][4];
        float ls[2] = {0, 0};
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float e0 = mrow[h] == -INFINITY ? 0.0f : expf(s[n][2 * h] - mrow[h]);
                const float e1 = mrow[h] == -INFINITY ? 0.0f : expf(s[n][2 * h + 1] - mrow[h]);
                const uint32_t w = bf16x2_rn(e0, e1);
                pa[n / 2][h + 2 * (n & 1)] = w; /* A regs: {row g, k 2t}, {row g+8, k 2t}, {row g, k 2t+8}, {row g+8, k 2t+8} */
                ls[h] += bf16_lo(w) + bf16_hi(w);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) lrow[h] = lrow[h] * cr[h] + ls[h]; /* the lane's partial sum; the quad is summed at the end */
#pragma unroll
        for (int n = 0; n < NO; n++) o[n][0] *= cr[0], o[n][1] *= cr[0], o[n][2] *= cr[1], o[n][3] *= cr[1];
        /* O += P V: B[k = key][n = d] = V[key][d] by ldmatrix.x4.trans — matrices (keys +0..7, d +0..7),
         * (keys +8..15, d +0..7), (keys +0..7, d +8..15), (keys +8..15, d +8..15); lane l gives the
         * row address of matrix l / 8, row l % 8 */
        const int mi = lane / 8, mr = lane % 8;
#pragma unroll
        for (int kk = 0; kk < NS / 2; kk++) {
            const uint16_t *vrow = Vs + (16 * kk + 8 * (mi & 1) + mr) * DS + 8 * (mi >> 1);
#pragma unroll
            for (int n = 0; n < NO; n += 2) {
                uint32_t b0, b1, b2, b3;
                const uint32_t sa = (uint32_t)__cvta_generic_to_shared(vrow + 8 * n);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                             : "r"(sa));
                mma_bf16_16816(o[n], pa[kk], b0, b1);
                mma_bf16_16816(o[n + 1], pa[kk], b2, b3);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 1);
        lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 2);
        if (!okr[h]) continue;
        float *out = att + (i0 + 16 * warp + g + 8 * h) * A * D + hd * D + 2 * t;
        const float inv = 1.0f / lrow[h];
#pragma unroll
        for (int n = 0; n < NO; n++) *(float2 *)(out + 8 * n) = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
}

template <int D, int E> static const char *launch_prefill_mma(const float *qkv_d, int64_t M, int64_t A, int64_t KV, float scale, int64_t window,
                                                               const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d,
                                                               void *stream) {
    const size_t smem = sizeof(uint16_t) * (size_t)((MQ_FQ + 2 * MQ_FK) * (D + 8));
    static std::atomic<bool> opted[64]; /* per instantiation and GPU, as launch_prefill */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64 || !opted[dev].load()) {
        cudaError_t e = cudaFuncSetAttribute(attn_prefill_mma_kernel<D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return moq_cuda_launch_check("attention (prefill, mma): shared memory opt-in");
        if (dev >= 0 && dev < 64) opted[dev].store(true);
    }
    attn_prefill_mma_kernel<D, E><<<dim3((unsigned)cdiv(M, MQ_FQ), (unsigned)A), 128, smem, (cudaStream_t)stream>>>(qkv_d, M, A, KV, scale, window,
                                                                                                                   seq_d, pos_d, *kv, att_d);
    return moq_cuda_launch_check("attention (prefill, mma)");
}
template <int D> static const char *launch_prefill_mma_e(const float *qkv_d, int64_t M, int64_t A, int64_t KV, float scale, int64_t window,
                                                          const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d,
                                                          void *stream) {
    if (kv->elem == MOQ_CUDA_KV_E4M3) return launch_prefill_mma<D, MOQ_CUDA_KV_E4M3>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    return launch_prefill_mma<D, MOQ_CUDA_KV_BF16>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
}

/* MOQ_CUDA_ATTN_PREFILL_MMA: 0 (default until it has run on a GPU) the f32 kernel, 1 the tensor-core
 * kernel; read at the first prefill, or set by moq_cuda_attn_prefill_mode (tests). */
static std::atomic<int> g_prefill_mma{-1};
extern "C" void moq_cuda_attn_prefill_mode(int mode) { g_prefill_mma.store(mode < 0 ? -1 : mode > 0 ? 1 : 0); }

extern "C" const char *moq_cuda_attention_prefill(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                                                  const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d, void *stream) {
    int mode = g_prefill_mma.load();
    if (mode < 0) g_prefill_mma.store(mode = moq_cuda_knob("MOQ_CUDA_ATTN_PREFILL_MMA", 0, 0, 1));
    if (mode == 1) { /* the tensor-core kernel covers every D below; a new D falls back to the f32 kernel */
        switch (D) {
        case 64: return launch_prefill_mma_e<64>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
        case 128: return launch_prefill_mma_e<128>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
        case 256: return launch_prefill_mma_e<256>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
        default: break;
        }
    }
    switch (D) {
    case 64: return launch_prefill<64>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    case 128: return launch_prefill<128>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    case 256: return launch_prefill<256>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    default: return "attention (prefill): head_dim must be 64, 128 or 256";
    }
}

/* act = silu(gate) · up = gate / (1 + exp(-gate)) · up (model.c swiglu), float4 per thread: grid
 * (I/4 / 256 blocks, M). */
__global__ void swiglu_kernel(const float *gu, int64_t I, float *act) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = blockIdx.y, e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, I4 = I / 4;
    if (e >= I4) return;
    const float4 g = ((const float4 *)gu)[i * 2 * I4 + e], u = ((const float4 *)gu)[i * 2 * I4 + I4 + e];
    ((float4 *)act)[i * I4 + e] = make_float4(__fmul_rn(__fdiv_rn(g.x, __fadd_rn(1.0f, expf(-g.x))), u.x), __fmul_rn(__fdiv_rn(g.y, __fadd_rn(1.0f, expf(-g.y))), u.y),
                                              __fmul_rn(__fdiv_rn(g.z, __fadd_rn(1.0f, expf(-g.z))), u.z), __fmul_rn(__fdiv_rn(g.w, __fadd_rn(1.0f, expf(-g.w))), u.w));
}

extern "C" const char *moq_cuda_swiglu(const float *gu_d, int64_t M, int64_t I, float *act_d, void *stream) {
    if (I % 4) return "swiglu: the intermediate size must be a multiple of 4";
    (void)moq_launch_pdl(swiglu_kernel, dim3((unsigned)cdiv(I / 4, 256), (unsigned)M), dim3(256), 0, (cudaStream_t)stream, gu_d, I, act_d);
    MO_CHECK("swiglu");
}

/* Greedy ids of logits rows: one block per row, each thread its own float4 columns in increasing
 * order (4 loads in flight), then a warp and a block reduction of (largest value, its lowest
 * index) and of the first non-finite column: out[2 j] = argmax of row j (ties to the lowest index,
 * -0 and +0 equal, as moq_f32_argmax_first), out[2 j + 1] = -1, or 2 · (first non-finite column)
 * + (1 if it is NaN). Non-finite entries take no part in the maximum (the caller fails the row). */
__device__ __forceinline__ void amx_take(float ov, int32_t oi, int32_t ob, float &bv, int32_t &bi, int32_t &bad) {
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    bad = ob < bad ? ob : bad;
}
__device__ __forceinline__ void amx_put(float v, int32_t k, float &bv, int32_t &bi, int32_t &bad) {
    if (!isfinite(v)) {
        if (bad == INT32_MAX) bad = 2 * k + (isnan(v) ? 1 : 0);
    } else if (v > bv) { /* a thread's columns come in increasing order: the first of equals stays */
        bv = v, bi = k;
    }
}
__global__ void __launch_bounds__(1024) argmax_rows_kernel(const float *x, int64_t V, int32_t *out) {
    const float *p = x + (int64_t)blockIdx.x * V;
    float bv = -INFINITY;
    int32_t bi = INT32_MAX, bad = INT32_MAX;
    if ((V & 3) == 0) {
        const float4 *p4 = (const float4 *)p;
        const int64_t n4 = V / 4, T = blockDim.x;
        for (int64_t q0 = threadIdx.x; q0 < n4; q0 += 4 * T) {
            float4 f[4];
#pragma unroll
            for (int u = 0; u < 4; u++) f[u] = q0 + u * T < n4 ? p4[q0 + u * T] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (q0 + u * T >= n4) break;
                const int32_t k = (int32_t)(4 * (q0 + u * T));
                amx_put(f[u].x, k, bv, bi, bad), amx_put(f[u].y, k + 1, bv, bi, bad);
                amx_put(f[u].z, k + 2, bv, bi, bad), amx_put(f[u].w, k + 3, bv, bi, bad);
            }
        }
    } else {
        for (int64_t k = threadIdx.x; k < V; k += blockDim.x) amx_put(p[k], (int32_t)k, bv, bi, bad);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1)
        amx_take(__shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o), __shfl_xor_sync(0xffffffffu, bad, o), bv, bi, bad);
    __shared__ float sv[32];
    __shared__ int32_t si[32], sb[32];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    if (lane == 0) sv[w] = bv, si[w] = bi, sb[w] = bad;
    __syncthreads();
    if (w) return;
    bv = lane < nw ? sv[lane] : -INFINITY, bi = lane < nw ? si[lane] : INT32_MAX, bad = lane < nw ? sb[lane] : INT32_MAX;
#pragma unroll
    for (int o = 16; o; o >>= 1)
        amx_take(__shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o), __shfl_xor_sync(0xffffffffu, bad, o), bv, bi, bad);
    if (lane == 0) out[2 * blockIdx.x] = bi == INT32_MAX ? 0 : bi, out[2 * blockIdx.x + 1] = bad == INT32_MAX ? -1 : bad;
}

extern "C" const char *moq_cuda_argmax_rows(const float *x_d, int64_t n, int64_t V, int32_t *out_d, void *stream) {
    if (V < 1 || V >= ((int64_t)1 << 30)) return "argmax of the logits rows: the vocabulary must hold 1 .. 2^30 - 1 ids";
    if (n < 1) return NULL;
    argmax_rows_kernel<<<(unsigned)n, 1024, 0, (cudaStream_t)stream>>>(x_d, V, out_d);
    return moq_cuda_launch_check("argmax of the logits rows");
}
