/* model_ops.cu — the decoder's non-linear steps on the GPU (src/model/model_gpu.c calls them through
 * cuda_api.h): embedding gather, residual add + RMSNorm, per-head q/k RMSNorm + RoPE + the store of
 * K and V into the paged cache, attention over the paged cache (split over keys, then a combine),
 * SwiGLU. Each is the CPU runner's f32 arithmetic (model.c, rope.c, kv_cache.c) in the same order
 * where it matters: RMSNorm's sum of squares in f64 and r = f32(1 / sqrt(ss / n + eps)); the RoPE
 * angle pos · inv_freq in f64, cos/sin in f64 rounded to f32 then × mscale; FP8 KV codes
 * E4s(f32(x / scale)) with a true division, read back D4(code) · scale. Only sums (dot products,
 * softmax) are reordered. Everything is enqueued on the caller's stream (NULL: the default stream), never synchronised, so
 * a decode step can be captured into a CUDA graph; nothing here allocates.
 * Tested by tests/model/test_model_cuda.c (the GPU forward against the CPU forward).
 */
#include <atomic>
#include "kernels/cuda/common.cuh"

#define MO_CHECK(what) return moq_cuda_launch_check(what)

__global__ void embed_kernel(const int32_t *tok, const void *table, int bf16, int64_t H, float mult, float *x) {
    const int64_t i = blockIdx.x, t = tok[i];
    for (int64_t e = threadIdx.x; e < H; e += blockDim.x) {
        const float v = bf16 ? __bfloat162float(((const __nv_bfloat16 *)table)[t * H + e]) : ((const float *)table)[t * H + e];
        x[i * H + e] = __fmul_rn(v, mult);
    }
}

extern "C" const char *moq_cuda_embed(const int32_t *tok_d, int64_t M, const void *table_d, int table_bf16, int64_t H, float mult, float *x_d,
                                      void *stream) {
    embed_kernel<<<(unsigned)M, 256, 0, (cudaStream_t)stream>>>(tok_d, table_d, table_bf16, H, mult, x_d);
    MO_CHECK("embedding gather");
}

/* Block-wide f64 sum (blockDim.x a multiple of 32, <= 1024). */
__device__ double block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

/* x[i] += t[i] (t may be NULL); h[i] = x[i] · r · w with r = f32(1/sqrt(mean(x²) + eps)). */
__global__ void add_rmsnorm_kernel(float *x, const float *t, const float *w, int64_t H, double eps, float *h) {
    __shared__ double sh[32];
    const int64_t i = blockIdx.x;
    float *xr = x + i * H;
    double ss = 0;
    for (int64_t e = threadIdx.x; e < H; e += blockDim.x) {
        float v = xr[e];
        if (t) v = __fadd_rn(v, t[i * H + e]), xr[e] = v;
        ss += (double)v * v;
    }
    ss = block_sum(ss, sh);
    const float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    for (int64_t e = threadIdx.x; e < H; e += blockDim.x) h[i * H + e] = __fmul_rn(__fmul_rn(xr[e], r), w[e]);
}

extern "C" const char *moq_cuda_add_rmsnorm(float *x_d, const float *t_d, const float *w_d, int64_t M, int64_t H, double eps, float *h_d,
                                             void *stream) {
    add_rmsnorm_kernel<<<(unsigned)M, 256, 0, (cudaStream_t)stream>>>(x_d, t_d, w_d, H, eps, h_d);
    MO_CHECK("residual add + rmsnorm");
}

/* h[j] = rmsnorm(x[r] + t[r]) · w for r = rows[j] (x is left as it is): the final norm of the rows
 * whose logits are wanted, gathered into consecutive rows of h; the arithmetic of add_rmsnorm. */
__global__ void final_norm_rows_kernel(const float *x, const float *t, const float *w, const int32_t *rows, int64_t H, double eps, float *h) {
    __shared__ double sh[32];
    const int64_t j = blockIdx.x, i = rows[j];
    double ss = 0;
    for (int64_t e = threadIdx.x; e < H; e += blockDim.x) {
        const float v = __fadd_rn(x[i * H + e], t[i * H + e]);
        ss += (double)v * v;
    }
    ss = block_sum(ss, sh);
    const float r = (float)(1.0 / sqrt(ss / (double)H + eps));
    for (int64_t e = threadIdx.x; e < H; e += blockDim.x) h[j * H + e] = __fmul_rn(__fmul_rn(__fadd_rn(x[i * H + e], t[i * H + e]), r), w[e]);
}

extern "C" const char *moq_cuda_final_norm_rows(const float *x_d, const float *t_d, const float *w_d, const int32_t *rows_d, int64_t n, int64_t H,
                                                double eps, float *h_d, void *stream) {
    final_norm_rows_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)stream>>>(x_d, t_d, w_d, rows_d, H, eps, h_d);
    MO_CHECK("final rmsnorm of the logits rows");
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

/* One block per token, one warp per head (q heads, then k heads, then v heads): per-head RMSNorm
 * (q/k, when given), RoPE (rotate-half over the whole head), q written back in place, k and v
 * stored into the cache. Lane j holds elements j + 32 s, so element i and i + D/2 share a lane. */
template <int C>
__global__ void qk_rope_store_kernel(float *qkv, int64_t A, int64_t KV, const float *qn, const float *kn, double eps,
                                     const float *inv_freq, float mscale, const int32_t *seq, const int32_t *pos, moq_cuda_kv kv) {
    constexpr int D = 32 * C, Hh = D / 2;
    __shared__ float cs[Hh], sn[Hh];
    const int64_t i = blockIdx.x, p = pos[i];
    for (int e = threadIdx.x; e < Hh; e += blockDim.x) {
        const double a = (double)p * (double)inv_freq[e];
        cs[e] = __fmul_rn((float)cos(a), mscale), sn[e] = __fmul_rn((float)sin(a), mscale);
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, nw = blockDim.x / 32;
    const int64_t qkvN = (A + 2 * KV) * D, slot = kv_slot(kv, seq[i], p);
    for (int64_t hd = threadIdx.x / 32; hd < A + 2 * KV; hd += nw) {
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
                const float x0 = v[s], x1 = v[s + C / 2];
                v[s] = __fsub_rn(__fmul_rn(x0, cs[e]), __fmul_rn(x1, sn[e]));
                v[s + C / 2] = __fadd_rn(__fmul_rn(x1, cs[e]), __fmul_rn(x0, sn[e]));
            }
        }
        if (hd < A) {
#pragma unroll
            for (int s = 0; s < C; s++) x[lane + 32 * s] = v[s];
        } else {
            const int64_t h = isv ? hd - A - KV : hd - A;
            void *base = isv ? kv.v : kv.k;
            const float sc = isv ? kv.v_scale : kv.k_scale;
#pragma unroll
            for (int s = 0; s < C; s++) kv_store(base, kv.elem, (slot * KV + h) * D + lane + 32 * s, v[s], sc);
        }
    }
}

extern "C" const char *moq_cuda_qk_rope_store(float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, const float *q_norm_d,
                                              const float *k_norm_d, double eps, const float *inv_freq_d, float mscale, const int32_t *seq_d,
                                              const int32_t *pos_d, const moq_cuda_kv *kv, void *stream) {
    switch (D) {
    case 64: qk_rope_store_kernel<2><<<(unsigned)M, 256, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    case 128: qk_rope_store_kernel<4><<<(unsigned)M, 256, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    case 256: qk_rope_store_kernel<8><<<(unsigned)M, 256, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, q_norm_d, k_norm_d, eps, inv_freq_d, mscale, seq_d, pos_d, *kv); break;
    default: return "qk_rope_store: head_dim must be 64, 128 or 256";
    }
    MO_CHECK("q/k norm + rope + kv store");
}

/* Attention, split over keys (flash-decoding): block (head, token, split) with 4 warps; each token
 * cuts its own span (p + 1 - lo keys) into n_split ranges of max(MOQ_CUDA_SPLIT_MIN, ceil(span /
 * n_split)) keys, so the launch shape does not depend on the positions (a CUDA graph replays it at
 * any length; ranges past the span write an empty part); warp w takes
 * keys start + w, start + w + 4, ... of its split, lane j holds elements j·C .. j·C + C - 1 of the
 * head (16-byte loads of bf16 K/V at C = 8), keeps an online softmax (max, sum, weighted V); the
 * warps merge in shared memory and the block writes (max, sum, o[D]) for its split. The token at
 * position p sees keys lo..p (lo = p - W + 1 for a window W, else 0); the K/V of every token of the
 * step are stored before this runs, so prefill and decode are the same kernel. */
template <int C>
__global__ void attn_split_kernel(const float *qkv, int64_t A, int64_t KV, float scale, int64_t W, const int32_t *seq, const int32_t *pos,
                                  moq_cuda_kv kv, int64_t n_split, float *part) {
    constexpr int D = 32 * C, NW = 4;
    const int64_t hd = blockIdx.x, i = blockIdx.y, sp = blockIdx.z, p = pos[i], grp = A / KV, kvh = hd / grp;
    const int64_t lo = W > 0 && p + 1 > W ? p + 1 - W : 0, span = p + 1 - lo;
    int64_t split_keys = (span + n_split - 1) / n_split;
    if (split_keys < MOQ_CUDA_SPLIT_MIN) split_keys = MOQ_CUDA_SPLIT_MIN;
    const int64_t k0 = lo + sp * split_keys;
    const int64_t k1 = k0 + split_keys < p + 1 ? k0 + split_keys : p + 1;
    const int lane = threadIdx.x & 31, w = threadIdx.x / 32;
    const int64_t qkvN = (A + 2 * KV) * D;
    float q[C], o[C];
#pragma unroll
    for (int s = 0; s < C; s++) q[s] = qkv[i * qkvN + hd * D + lane * C + s], o[s] = 0;
    float mx = -INFINITY, sum = 0;
    const int32_t sq = seq[i];
    for (int64_t j = k0 + w; j < k1; j += NW) {
        const int64_t base = (kv_slot(kv, sq, j) * KV + kvh) * D + lane * C;
        float d = 0;
#pragma unroll
        for (int s = 0; s < C; s++) d = fmaf(q[s], kv_load(kv.k, kv.elem, base + s, kv.k_scale), d);
        for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        const float sc = d * scale, mn = fmaxf(mx, sc), corr = expf(mx - mn), e = expf(sc - mn);
        sum = sum * corr + e;
#pragma unroll
        for (int s = 0; s < C; s++) o[s] = fmaf(e, kv_load(kv.v, kv.elem, base + s, kv.v_scale), o[s] * corr);
        mx = mn;
    }
    __shared__ float smx[NW], ssum[NW], so[NW][D];
    if (lane == 0) smx[w] = mx, ssum[w] = sum;
#pragma unroll
    for (int s = 0; s < C; s++) so[w][lane * C + s] = o[s];
    __syncthreads();
    float *out = part + ((i * A + hd) * n_split + sp) * (D + 2);
    float M = -INFINITY;
    for (int k = 0; k < NW; k++) M = fmaxf(M, smx[k]);
    for (int e = threadIdx.x; e < D + 2; e += blockDim.x) {
        float acc = 0, l = 0;
        for (int k = 0; k < NW; k++) {
            const float c = smx[k] == -INFINITY ? 0.0f : expf(smx[k] - M);
            if (e < D) acc += c * so[k][e];
            l += c * ssum[k];
        }
        out[e] = e < D ? acc : (e == D ? M : l);
    }
}

/* att[i, hd, :] = Σ_s c_s o_s / Σ_s c_s l_s, c_s = exp(m_s - max m). */
__global__ void attn_combine_kernel(const float *part, int64_t A, int64_t D, int64_t n_split, float *att) {
    const int64_t hd = blockIdx.x, i = blockIdx.y;
    const float *pp = part + (i * A + hd) * n_split * (D + 2);
    float M = -INFINITY;
    for (int64_t s = 0; s < n_split; s++) M = fmaxf(M, pp[s * (D + 2) + D]);
    float l = 0;
    for (int64_t s = 0; s < n_split; s++) {
        const float m = pp[s * (D + 2) + D];
        if (m != -INFINITY) l += expf(m - M) * pp[s * (D + 2) + D + 1];
    }
    for (int64_t e = threadIdx.x; e < D; e += blockDim.x) {
        float acc = 0;
        for (int64_t s = 0; s < n_split; s++) {
            const float m = pp[s * (D + 2) + D];
            if (m != -INFINITY) acc += expf(m - M) * pp[s * (D + 2) + e];
        }
        att[i * A * D + hd * D + e] = acc / l;
    }
}

extern "C" const char *moq_cuda_attention(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                                          const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, int64_t n_split,
                                          float *part_d, float *att_d, void *stream) {
    const dim3 grid((unsigned)A, (unsigned)M, (unsigned)n_split);
    switch (D) {
    case 64: attn_split_kernel<2><<<grid, 128, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, scale, window, seq_d, pos_d, *kv, n_split, part_d); break;
    case 128: attn_split_kernel<4><<<grid, 128, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, scale, window, seq_d, pos_d, *kv, n_split, part_d); break;
    case 256: attn_split_kernel<8><<<grid, 128, 0, (cudaStream_t)stream>>>(qkv_d, A, KV, scale, window, seq_d, pos_d, *kv, n_split, part_d); break;
    default: return "attention: head_dim must be 64, 128 or 256";
    }
    const char *e = moq_cuda_launch_check("attention (split)");
    if (e) return e;
    attn_combine_kernel<<<dim3((unsigned)A, (unsigned)M), 128, 0, (cudaStream_t)stream>>>(part_d, A, D, n_split, att_d);
    MO_CHECK("attention (combine)");
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

extern "C" const char *moq_cuda_attention_prefill(const float *qkv_d, int64_t M, int64_t A, int64_t KV, int64_t D, float scale, int64_t window,
                                                  const int32_t *seq_d, const int32_t *pos_d, const moq_cuda_kv *kv, float *att_d, void *stream) {
    switch (D) {
    case 64: return launch_prefill<64>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    case 128: return launch_prefill<128>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    case 256: return launch_prefill<256>(qkv_d, M, A, KV, scale, window, seq_d, pos_d, kv, att_d, stream);
    default: return "attention (prefill): head_dim must be 64, 128 or 256";
    }
}

/* act = silu(gate) · up = gate / (1 + exp(-gate)) · up (model.c swiglu). */
__global__ void swiglu_kernel(const float *gu, int64_t M, int64_t I, float *act) {
    const int64_t n = M * I;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n; c += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = c / I, e = c % I;
        const float g = gu[i * 2 * I + e], u = gu[i * 2 * I + I + e];
        act[c] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    }
}

extern "C" const char *moq_cuda_swiglu(const float *gu_d, int64_t M, int64_t I, float *act_d, void *stream) {
    const int64_t n = M * I, b = cdiv(n, 256) < 4096 ? cdiv(n, 256) : 4096;
    swiglu_kernel<<<(unsigned)b, 256, 0, (cudaStream_t)stream>>>(gu_d, M, I, act_d);
    MO_CHECK("swiglu");
}
