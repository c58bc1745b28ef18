/* moe.cu — the grouped mixture-of-experts kernels (interface and step list: moe_cuda.h).
 *
 * Routing (route_sort): one warp per token computes routing.c's scores with the same f32 operations
 * in the same order where the order matters (the softmax sum and the weight sum run on lane 0 in
 * expert / slot order; max and argmax are order-free, ties to the lowest id as routing.c's strict
 * ">" scan). Only expf differs from the host's (CUDA's expf is within 2 ulp, glibc's within 1), so
 * weights agree to a few ulp and ids agree except on near ties (tests/moe/test_moe_cuda.c).
 * The rows are then grouped by local expert with shared-memory counters; the order of the rows
 * inside one expert is whatever the atomics give, which changes no value: every row is computed
 * alone (its own activation scale, its own dot products) and combine reads it through pos.
 *
 * Grouped GEMM: one launch per projection for all experts. Blocks (x: 8 warps of R output rows,
 * y: one work item = up to 16 rows of one expert) read only their expert's packed weight, so a
 * decode step streams exactly the selected experts' bytes. The inner loop is gemv.cu's (part 1)
 * decode arithmetic: 16-byte weight vectors decoded exactly in registers, bf16 activation pairs
 * from the act_quant workspace, f32 FMA, per-16/32/128 block scales, epilogue row_scale·tok + bias.
 * Work items of more than one row share every weight load (MT rows per item), so prefill reads each
 * expert's weight ceil(rows / 16) times; a tensor-core tile for large row counts is not here yet.
 * (The inner loop is gemv_fma.cu's; sharing it needs a header both include, left to that file's owner.)
 *
 * Decode (T <= 16, moe_cuda.h): route_decode + grouped mode 1 (w13 + activation) + grouped mode 2
 * (w2 quantizing its own rows + combine) do the general chain's arithmetic in the same order, so the
 * two give the same y bit for bit (tests/moe/test_moe_cuda.c); only where the steps run differs.
 */
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/moe_cuda.h"

#include <cuda_fp16.h>

/* ---- router ----------------------------------------------------------------------------------- */
__device__ __forceinline__ float ldw(const void *w, int dt, int64_t i) {
    if (dt == 1) return u2f((uint32_t)((const uint16_t *)w)[i] << 16);
    if (dt == 2) return __half2float(((const __half *)w)[i]);
    return ((const float *)w)[i];
}

__global__ void __launch_bounds__(256) router_kernel(const float *x, int64_t T, int64_t H, int64_t E, const void *w, int dt, const float *bias,
                                                     float *logits) {
    const int64_t o = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (o >= T * E) return;
    const int64_t t = o / E, e = o % E;
    float s = 0.0f;
    for (int64_t h = lane; h < H; h += 32) s = fmaf(x[t * H + h], ldw(w, dt, e * H + h), s);
    for (int d = 16; d; d >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, d);
    if (lane == 0) logits[o] = bias ? s + bias[e] : s;
}

extern "C" const char *moq_cuda_moe_router(const float *x_d, int64_t T, int64_t H, int64_t E, const void *w_d, int w_dtype, const float *bias_d,
                                           float *logits_d, void *stream) {
    router_kernel<<<(unsigned)cdiv(T * E, 8), 256, 0, (cudaStream_t)stream>>>(x_d, T, H, E, w_d, w_dtype, bias_d, logits_d);
    return moq_cuda_launch_check("moe router kernel launch");
}

/* ---- routing and grouping ---------------------------------------------------------------------- */
/* (value, index) of the larger; equal values: the lower index; index -1 = none. */
__device__ __forceinline__ void best_of(float &v, int &i, float vo, int io) {
    if (io >= 0 && (i < 0 || vo > v || (vo == v && io < i))) v = vo, i = io;
}
__device__ __forceinline__ void warp_best(float &v, int &i) {
    for (int d = 16; d; d >>= 1) {
        const float vo = __shfl_xor_sync(0xFFFFFFFFu, v, d);
        const int io = __shfl_xor_sync(0xFFFFFFFFu, i, d);
        best_of(v, i, vo, io);
    }
}

#define RS_THREADS 1024

/* routing.c's rules for token t, one warp (lane = this thread's lane): ids / weights [t·k, t·k + k).
 * Lane l keeps the scores of experts l + 32 i in registers (p, sel; E <= 1024): the softmax sum runs in
 * expert order on every lane from shuffles, not on one lane over global scratch (that change did not
 * move the ~15 us ncu gives one routing block, docs/PERFORMANCE.md: the time is elsewhere). Only
 * grouped routing writes sel to the scratch (groups span lanes). The logits are read through L2
 * (__ldcg): the fused-router decode kernel's blocks write them in the same launch. */
template <int RT_N> __device__ void route_token_n(const moq_cuda_moe_route &r, int64_t t, int lane) { /* E <= 32 RT_N */
    const int E = (int)r.E, k = (int)r.k, ni = (E + 31) / 32;
    const float *lg = r.logits_d + t * E;
    float p[RT_N], sel[RT_N];
    if (!r.sigmoid) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < RT_N; i++) p[i] = i < ni && lane + 32 * i < E ? __ldcg(lg + lane + 32 * i) : -INFINITY;
#pragma unroll
        for (int i = 0; i < RT_N; i++) mx = fmaxf(mx, p[i]);
        for (int d = 16; d; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, d));
#pragma unroll
        for (int i = 0; i < RT_N; i++) p[i] = i < ni && lane + 32 * i < E ? expf(__fsub_rn(p[i], mx)) : 0.0f;
        float sum = 0.0f; /* routing.c's order: e = 0, 1, ..., E - 1 */
#pragma unroll
        for (int i = 0; i < RT_N; i++) {
            if (i >= ni) break;
            for (int j = 0; j < 32 && 32 * i + j < E; j++) sum = __fadd_rn(sum, __shfl_sync(0xFFFFFFFFu, p[i], j));
        }
#pragma unroll
        for (int i = 0; i < RT_N; i++) p[i] = __fdiv_rn(p[i], sum);
    } else {
#pragma unroll
        for (int i = 0; i < RT_N; i++) p[i] = i < ni && lane + 32 * i < E ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__ldcg(lg + lane + 32 * i)))) : 0.0f;
    }
    uint32_t allowed = 0; /* bit i: expert lane + 32 i may still be picked (E <= 1024) */
#pragma unroll
    for (int i = 0; i < RT_N; i++) {
        const int e = lane + 32 * i;
        sel[i] = 0.0f;
        if (i < ni && e < E) sel[i] = r.bias_d ? __fadd_rn(p[i], r.bias_d[e]) : p[i], allowed |= 1u << i;
    }
    if (r.n_group > 1) {
        float *gsel = r.scr_d + t * (2 * E + 2 * MOQ_CUDA_MOE_MAX_GROUPS) + E, *gs = gsel + E;
#pragma unroll
        for (int i = 0; i < RT_N; i++)
            if (i < ni && lane + 32 * i < E) gsel[lane + 32 * i] = sel[i];
        __syncwarp();
        const int64_t G = r.n_group, per = E / G;
        for (int64_t g = lane; g < G; g += 32) { /* routing.c: sum of the two best biased scores, or the best */
            const float *s = gsel + g * per;
            float a = -INFINITY, b = -INFINITY;
            for (int64_t i = 0; i < per; i++) {
                if (s[i] > a) b = a, a = s[i];
                else if (s[i] > b) b = s[i];
            }
            gs[g] = r.bias_d && per > 1 ? __fadd_rn(a, b) : a;
            gs[MOQ_CUDA_MOE_MAX_GROUPS + g] = 1.0f; /* group still selectable */
        }
        __syncwarp();
        uint64_t keep[MOQ_CUDA_MOE_MAX_GROUPS / 64] = {0, 0, 0, 0};
        for (int j = 0; j < r.topk_group && j < G; j++) {
            float bv = 0.0f;
            int bi = -1;
            for (int64_t g = lane; g < G; g += 32)
                if (gs[MOQ_CUDA_MOE_MAX_GROUPS + g] != 0.0f) best_of(bv, bi, gs[g], (int)g);
            warp_best(bv, bi);
            if (bi < 0) bi = 0; /* only NaN scores leave nothing selectable */
            if (lane == 0) gs[MOQ_CUDA_MOE_MAX_GROUPS + bi] = 0.0f;
            __syncwarp();
            keep[bi >> 6] |= 1ull << (bi & 63);
        }
#pragma unroll
        for (int i = 0; i < RT_N; i++) {
            const int64_t e = lane + 32 * i, g = e / per;
            if (i < ni && e < E && !((keep[g >> 6] >> (g & 63)) & 1)) allowed &= ~(1u << i);
        }
    }
    float wsum = 0.0f, wj = 0.0f;
    int32_t idj = 0;
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
#pragma unroll
        for (int i = 0; i < RT_N; i++)
            if ((allowed >> i) & 1) best_of(bv, bi, sel[i], lane + 32 * i);
        warp_best(bv, bi);
        if (bi < 0) bi = 0; /* only NaN scores leave nothing selectable */
        float pb = 0.0f;    /* p of the winner, from its lane */
#pragma unroll
        for (int i = 0; i < RT_N; i++)
            if (i == (bi >> 5)) pb = p[i];
        pb = __shfl_sync(0xFFFFFFFFu, pb, bi & 31);
        if ((bi & 31) == lane) allowed &= ~(1u << (bi >> 5));
        if (lane == j) idj = bi, wj = pb; /* lane j keeps slot j (k <= 32 here) */
        wsum = __fadd_rn(wsum, pb);
    }
    if (lane < k) {
        if (r.renormalize) wj = __fdiv_rn(wj, wsum);
        if (r.scaling != 1.0f) wj = __fmul_rn(wj, r.scaling);
        r.ids_d[t * k + lane] = idj, r.wts_d[t * k + lane] = wj;
    }
}
/* registers for the scores of up to 128, 256 or 1024 experts */
__device__ void route_token(const moq_cuda_moe_route &r, int64_t t, int lane) {
    if (r.E <= 128) route_token_n<4>(r, t, lane);
    else if (r.E <= 256) route_token_n<8>(r, t, lane);
    else route_token_n<MOQ_CUDA_MOE_MAX_E / 32>(r, t, lane);
}

__global__ void __launch_bounds__(RS_THREADS) route_sort_kernel(moq_cuda_moe_route r) {
    __shared__ int32_t lid[MOQ_CUDA_MOE_MAX_A];
    __shared__ int32_t cnt[MOQ_CUDA_MOE_MAX_E + 1], fill[MOQ_CUDA_MOE_MAX_E];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = RS_THREADS / 32;
    const int64_t k = r.k, A = r.T * k, L = r.L;
    for (int64_t t = warp; t < r.T; t += nw) route_token(r, t, lane);
    /* group the assignments by local expert */
    for (int64_t l = threadIdx.x; l <= L; l += RS_THREADS) cnt[l] = 0;
    __syncthreads(); /* also orders the ids / weights written above (global, same block) */
    for (int64_t a = threadIdx.x; a < A; a += RS_THREADS) {
        const int32_t l = r.local_of_d[r.ids_d[a]];
        lid[a] = l;
        if (l >= 0) atomicAdd(&cnt[l + 1], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t n = 0;
        for (int64_t l = 0; l < L; l++) {
            const int32_t c = cnt[l + 1], r0 = cnt[l];
            cnt[l + 1] += r0; /* cnt[l] becomes expert l's first row */
            fill[l] = r0;
            for (int32_t o = 0; o < c; o += MOQ_CUDA_MOE_TILE) {
                int32_t *ti = r.tiles_d + 3 * n++;
                ti[0] = (int32_t)l, ti[1] = r0 + o, ti[2] = c - o < MOQ_CUDA_MOE_TILE ? c - o : MOQ_CUDA_MOE_TILE;
            }
        }
        r.tiles_d[3 * r.max_tiles] = n, r.tiles_d[3 * r.max_tiles + 1] = cnt[L];
    }
    __syncthreads();
    for (int64_t a = threadIdx.x; a < A; a += RS_THREADS) {
        const int32_t l = lid[a];
        int32_t row = -1;
        if (l >= 0) {
            row = atomicAdd(&fill[l], 1);
            r.tok_d[row] = (int32_t)(a / k), r.rw_d[row] = r.wts_d[a];
        }
        r.pos_d[a] = row;
    }
}

extern "C" const char *moq_cuda_moe_route_sort(const moq_cuda_moe_route *r) {
    if (r->E > MOQ_CUDA_MOE_MAX_E || r->T * r->k > MOQ_CUDA_MOE_MAX_A || r->k > 32 || r->n_group > MOQ_CUDA_MOE_MAX_GROUPS)
        return "moe route_sort: E > 1024, T·k > 8192, k > 32 or more than 256 groups";
    route_sort_kernel<<<1, RS_THREADS, 0, (cudaStream_t)r->stream>>>(*r);
    return moq_cuda_launch_check("moe route_sort kernel launch");
}

/* ---- decode: router + x quantizer + routing in one launch ---------------------------------------- */

#define DEC_THREADS 256
#define DEC_A (MOQ_CUDA_MOE_DEC_T * 32) /* assignments of a decode step: T <= 16, k <= 32 */

/* Max over the block (DEC_THREADS threads; every thread calls it). */
__device__ float dec_block_max(float v, float *red) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[0];
    for (int w = 1; w < DEC_THREADS / 32; w++) m = fmaxf(m, red[w]);
    return m;
}

/* Row t of x quantized by the whole block into the workspace's A, tok, gs (act_quant.cu's row, the
 * same aq8 arithmetic: 8 consecutive values per thread, a group across 2/4/16 consecutive lanes). */
template <int KIND> __device__ void dec_quant_row(const moq_cuda_moe_decode &d, int64_t t, float *red) {
    const int64_t K = d.H, Kp = d.Kp, nch = Kp / 8;
    const char *ws = (const char *)d.ws_d;
    __nv_bfloat16 *A = (__nv_bfloat16 *)(ws + d.ws.a) + t * Kp;
    float *gs = (float *)(ws + d.ws.gs) + t * (Kp / 128);
    float tok = 1.0f;
    if (KIND == MOQ_CK_FP8_ROW) {
        float a = 0.0f;
        for (int64_t c = threadIdx.x; c < nch; c += DEC_THREADS) {
            float v[8];
            aq_load8(d.x_d, 0, true, t * K, K, 8 * c, v);
#pragma unroll
            for (int i = 0; i < 8; i++) a = fmaxf(a, fabsf(v[i]));
        }
        tok = aq_token_scale(dec_block_max(a, red));
    }
    const aq_consts cs = aq_consts_of<KIND>(d.a_scale, d.rcp_approx, tok);
    for (int64_t c0 = 0; c0 < nch; c0 += DEC_THREADS) { /* uniform trip count: aq8 shuffles */
        const int64_t c = c0 + threadIdx.x, k0 = 8 * c;
        const bool on = c < nch;
        float v[8], dq[8], gscale;
        uint8_t q[8], scode;
        uint32_t packed;
        aq_load8(d.x_d, 0, on, t * K, K, on ? k0 : 0, v);
        aq8<KIND>(v, cs, q, dq, packed, gscale, scode);
        (void)packed, (void)scode;
        if (!on) continue;
        *(uint4 *)(A + k0) = aq_bf16x8(dq);
        if (KIND == MOQ_CK_FP8_BLK128 && (c & 15) == 0) gs[k0 / 128] = k0 < K ? gscale : 0.0f;
    }
    if (threadIdx.x == 0) ((float *)(ws + d.ws.tok))[t] = tok;
}

template <int KIND> __global__ void __launch_bounds__(DEC_THREADS) route_decode_kernel(moq_cuda_moe_decode d) {
    pdl_trigger(); /* the w13 grid may start: it waits for this one before reading anything */
    __shared__ float red[DEC_THREADS / 32];
    __shared__ int32_t lid[DEC_A], eqb[DEC_A], rowof[DEC_A];
    __shared__ int last;
    const moq_cuda_moe_route &r = d.r;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = DEC_THREADS / 32;
    const int64_t T = r.T, E = r.E, k = r.k, A = T * k, H = d.H;
    if (d.w_d) /* router logits: one warp per (token, expert), as router_kernel */
        for (int64_t o = (int64_t)blockIdx.x * nw + warp; o < T * E; o += (int64_t)gridDim.x * nw) {
            const int64_t t = o / E, e = o % E;
            float s = 0.0f;
            for (int64_t h = lane; h < H; h += 32) s = fmaf(d.x_d[t * H + h], ldw(d.w_d, d.w_dtype, e * H + h), s);
            for (int dd = 16; dd; dd >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, dd);
            if (lane == 0) ((float *)r.logits_d)[o] = d.wb_d ? s + d.wb_d[e] : s;
        }
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) dec_quant_row<KIND>(d, t, red);
    if (gridDim.x > 1) { /* the last block to get here routes (its reads see every block's logits) */
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            last = atomicAdd(d.count_d, 1) == (int)gridDim.x - 1;
            if (last) atomicExch(d.count_d, 0);
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
    }
    for (int64_t t = warp; t < T; t += nw) route_token(r, t, lane);
    __syncthreads(); /* orders the ids / weights written above (global, same block) */
    /* rows by (local expert, assignment): row = #(assignments of lower experts) + #(earlier ones of
     * the same expert); a tile starts every MOQ_CUDA_MOE_TILE rows of an expert */
    for (int64_t a = threadIdx.x; a < A; a += DEC_THREADS) lid[a] = r.local_of_d[r.ids_d[a]];
    __syncthreads();
    for (int64_t a = threadIdx.x; a < A; a += DEC_THREADS) {
        const int32_t l = lid[a];
        int32_t lo = 0, e = 0, row = -1;
        if (l >= 0) {
            for (int64_t b = 0; b < A; b++) {
                const int32_t lb = lid[b];
                lo += lb >= 0 && lb < l, e += lb == l && b < a;
            }
            row = lo + e;
            r.tok_d[row] = (int32_t)(a / k), r.rw_d[row] = r.wts_d[a];
        }
        r.pos_d[a] = row, eqb[a] = l >= 0 ? e : -1, rowof[a] = row;
    }
    __syncthreads();
    for (int64_t a = threadIdx.x; a < A; a += DEC_THREADS) {
        const int32_t l = lid[a], e = eqb[a];
        if (e < 0 || e % MOQ_CUDA_MOE_TILE) continue;
        int32_t n = e / MOQ_CUDA_MOE_TILE, c = 0;
        for (int64_t b = 0; b < A; b++) {
            const int32_t lb = lid[b];
            n += lb >= 0 && lb < l && eqb[b] % MOQ_CUDA_MOE_TILE == 0, c += lb == l;
        }
        int32_t *ti = r.tiles_d + 3 * n;
        ti[0] = l, ti[1] = rowof[a], ti[2] = c - e < MOQ_CUDA_MOE_TILE ? c - e : MOQ_CUDA_MOE_TILE;
    }
    if (threadIdx.x == 0) {
        int32_t n = 0, rows = 0;
        for (int64_t a = 0; a < A; a++) n += eqb[a] >= 0 && eqb[a] % MOQ_CUDA_MOE_TILE == 0, rows += eqb[a] >= 0;
        r.tiles_d[3 * r.max_tiles] = n, r.tiles_d[3 * r.max_tiles + 1] = rows;
    }
    for (int64_t t = 0; t < T; t++) { /* a token routed only to experts held elsewhere: y = 0 (combine's sum of nothing) */
        bool any = false;
        for (int64_t j = 0; j < k; j++) any |= lid[t * k + j] >= 0;
        if (!any)
            for (int64_t i = threadIdx.x; i < H; i += DEC_THREADS) d.y_d[t * H + i] = 0.0f;
    }
}

extern "C" const char *moq_cuda_moe_route_decode(const moq_cuda_moe_decode *d) {
    const moq_cuda_moe_route &r = d->r;
    if (r.T > MOQ_CUDA_MOE_DEC_T || r.k > 32 || r.E > MOQ_CUDA_MOE_MAX_E || r.n_group > MOQ_CUDA_MOE_MAX_GROUPS || r.on_input || d->Kp % 128)
        return "moe route_decode: T > 16, k > 32, E > 1024, more than 256 groups, weights on the input or Kp % 128 != 0";
    const int64_t nb = d->w_d ? cdiv(r.T * r.E, DEC_THREADS / 32) : 1;
    const unsigned grid = (unsigned)(nb > r.T ? nb : r.T);
#define RD(K) route_decode_kernel<K><<<grid, DEC_THREADS, 0, (cudaStream_t)r.stream>>>(*d); break
    switch (d->kind) {
    case MOQ_CK_BF16: RD(MOQ_CK_BF16);
    case MOQ_CK_FP8_TENSOR: RD(MOQ_CK_FP8_TENSOR);
    case MOQ_CK_FP8_ROW: RD(MOQ_CK_FP8_ROW);
    case MOQ_CK_FP8_BLK128: RD(MOQ_CK_FP8_BLK128);
    case MOQ_CK_NVFP4: RD(MOQ_CK_NVFP4);
    case MOQ_CK_NVFP4_W4A16: RD(MOQ_CK_NVFP4_W4A16);
    case MOQ_CK_MXFP8: RD(MOQ_CK_MXFP8);
    default: return "moe route_decode: unknown pair kind";
    }
#undef RD
    return moq_cuda_launch_check("moe route_decode kernel launch");
}

/* ---- gather ------------------------------------------------------------------------------------ */
__global__ void __launch_bounds__(256) gather_kernel(const float *x, int64_t H, const int32_t *tok, const float *rw, int on_input,
                                                     const int32_t *rows_d, float *xg) {
    const int64_t r = blockIdx.x, rows = *rows_d;
    float *d = xg + r * H;
    if (r >= rows) {
        for (int64_t i = threadIdx.x; i < H; i += blockDim.x) d[i] = 0.0f;
        return;
    }
    const float *s = x + (int64_t)tok[r] * H;
    const float w = rw[r];
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) d[i] = on_input ? __fmul_rn(s[i], w) : s[i];
}

extern "C" const char *moq_cuda_moe_gather(const float *x_d, int64_t A, int64_t H, const int32_t *tok_d, const float *rw_d, int on_input,
                                           const int32_t *tiles_d, int64_t max_tiles, float *xg_d, void *stream) {
    gather_kernel<<<(unsigned)A, 256, 0, (cudaStream_t)stream>>>(x_d, H, tok_d, rw_d, on_input, tiles_d + 3 * max_tiles + 1, xg_d);
    return moq_cuda_launch_check("moe gather kernel launch");
}

/* ---- grouped GEMV / small-tile GEMM ------------------------------------------------------------- */
template <int KIND> struct mfmt;
template <> struct mfmt<MOQ_CK_BF16> { static constexpr int C = 8; };
template <> struct mfmt<MOQ_CK_FP8_TENSOR> { static constexpr int C = 16; };
template <> struct mfmt<MOQ_CK_FP8_ROW> { static constexpr int C = 16; };
template <> struct mfmt<MOQ_CK_FP8_BLK128> { static constexpr int C = 16; };
template <> struct mfmt<MOQ_CK_MXFP8> { static constexpr int C = 16; };
template <> struct mfmt<MOQ_CK_NVFP4> { static constexpr int C = 32; };
template <> struct mfmt<MOQ_CK_NVFP4_W4A16> { static constexpr int C = 32; };

/* gemv.cu's exact decoders (4 e4m3 -> D4·2^-120, 8 e2m1 -> D2·2^-14, bf16 pairs). */
__device__ __forceinline__ void m_fp8x4(uint32_t w, float *o) {
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = u2f((uint32_t)((int32_t)(w << (24 - 8 * i)) >> 4) & 0x87F00000u);
}
__device__ __forceinline__ void m_e2m1x8(uint32_t w, float *o) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t b = (w >> (8 * j)) & 0xFF;
        const uint32_t h = ((b & 0x7u) << 9) | ((b & 0x8u) << 12) | ((b & 0x70u) << 21) | ((b & 0x80u) << 24);
        const float2 f = __half22float2(*(const __half2 *)&h);
        o[2 * j] = f.x, o[2 * j + 1] = f.y;
    }
}
__device__ __forceinline__ void m_bf16x2(uint32_t w, float *o) { o[0] = u2f(w << 16), o[1] = u2f(w & 0xFFFF0000u); }

/* routing.c's moq_moe_act_ref, one element, the same f32 operations without contraction. */
__device__ __forceinline__ float act1(int act, float limit, float alpha, float beta, float g, float u) {
    switch (act) {
    case 0: return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    case 1: return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, erff(__fmul_rn(g, 0.70710678118654752f)))), u);
    case 2: {
        const float x3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
        return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(__fmul_rn(0.79788456080286536f, __fadd_rn(g, x3))))), u);
    }
    case 3: { const float x = g > 0.0f ? g : 0.0f; return __fmul_rn(x, x); }
    case 4: {
        const float gg = fminf(g, limit), uu = fminf(fmaxf(u, -limit), limit);
        const float sg = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(alpha, gg))));
        return __fmul_rn(__fmul_rn(gg, sg), __fadd_rn(uu, beta));
    }
    default: return 0.0f;
    }
}

/* R weight rows per warp (sharing each activation load), U vectors per row per lane in flight; MINB
 * blocks per SM the registers are capped for: 2 at MT = 1 (the decode case: two blocks of 8 warps
 * per SM; ptxas spills <= 72 bytes there), else as many as the kernel needs (capping MT = 2..4 at
 * 128 registers spilled up to 1.2 KB for NVFP4). */
template <int MT> struct mshape { static constexpr int R = MT <= 2 ? 4 : MT <= 4 ? 2 : 1, U = 2, MINB = MT == 1 ? 2 : 1; };

/* 16 bytes at p: global memory through the read-only path, or shared memory (mode 2's activation). */
template <bool SMEM> __device__ __forceinline__ uint4 ld16(const void *p) { return SMEM ? *(const uint4 *)p : __ldg((const uint4 *)p); }

/* MODE 0: rows row0 + m of the act_quant workspace -> y [A, N]. MODE 1 (decode w13): row m reads its
 * token's quantized x (row_tok), warps 0-3 take gate rows and 4-7 the up rows of the same
 * intermediate indices (gated; else all 8 warps consecutive rows) and the block writes the
 * activation a [A, Ip]. MODE 2 (decode w2): the first weight vectors are loaded before waiting for
 * the w13 grid, the tile's rows of a are quantized into shared memory, o is written, and the last
 * tile of a token to finish this block's n-range adds the combine into y. */
template <int KIND, int MT, int MODE>
__global__ void __launch_bounds__(256, mshape<MT>::MINB) grouped_kernel(moq_cuda_moe_gemm g) {
    constexpr int C = mfmt<KIND>::C, R = mshape<MT>::R, U = mshape<MT>::U;
    constexpr bool SM = MODE == 2;
    if (MODE == 1) {
        pdl_wait();   /* routing and the quantized x are the previous grid's */
        pdl_trigger(); /* the w2 grid may start its weight loads */
    }
    const int32_t n_tiles = __ldcg(g.tiles_d + 3 * g.max_tiles);
    if ((int32_t)blockIdx.y >= n_tiles) return; /* whole blocks only */
    const int32_t *ti = g.tiles_d + 3 * blockIdx.y;
    const int64_t ex = __ldcg(ti), row0 = __ldcg(ti + 1);
    const int cnt = __ldcg(ti + 2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* this warp's R weight rows n0 .. n0 + R - 1 (always < Np: for mode 1 the last live gate warp's
     * up rows end below 2·Ip + 3 <= Np, as Np - 2·Ip >= 4 whenever Ip % 4 != 0) */
    int64_t n0, i0 = 0;
    bool live;
    if (MODE == 1) {
        const int P = g.gated ? 4 * R : 8 * R, wi = g.gated ? (warp & 3) : warp;
        i0 = (int64_t)blockIdx.x * P;
        live = i0 + wi * R < g.Ip;
        n0 = i0 + wi * R + (g.gated && warp >= 4 ? g.Ip : 0);
    } else {
        n0 = ((int64_t)blockIdx.x * 8 + warp) * R;
        live = n0 < g.N;
    }
    if (MODE == 0 && !live) return;
    const uint8_t *blob = g.w_d + ex * g.stride;
    const uint8_t *codes = blob + g.codes, *scales = blob + g.scales;
    const float *row_scale = (const float *)(blob + g.rs), *bias = (const float *)(blob + g.bias);
    const char *ws = (const char *)g.ws_d;
    const int64_t Kp = g.Kp, nvec = Kp / C, rowbytes = Kp * (KIND == MOQ_CK_BF16 ? 2 : 1) / (C == 32 ? 2 : 1);
    const uint4 *wrow = (const uint4 *)(codes + n0 * rowbytes);
    const int64_t rstride = rowbytes / 16;
    uint4 wvs[U][R];
    uint32_t sraw[U][R]; /* each vector's block scale(s), loaded with it (one memory round trip, not two) */
    auto load_w = [&](int64_t v0) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t v = v0 + 32 * u, n = n0 + r;
                const bool in = v < nvec;
                wvs[u][r] = in ? __ldg(wrow + r * rstride + v) : make_uint4(0, 0, 0, 0);
                sraw[u][r] = 0;
                if (in && (KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16)) sraw[u][r] = __ldg((const uint16_t *)(scales + n * (Kp / 16) + 2 * v));
                if (in && KIND == MOQ_CK_MXFP8) sraw[u][r] = __ldg(scales + n * (Kp / 32) + v * C / 32);
                if (in && KIND == MOQ_CK_FP8_BLK128 && r == 0) sraw[u][r] = __float_as_uint(__ldg((const float *)scales + (n / 128) * (Kp / 128) + v * C / 128));
            }
    };
    if (live) load_w(lane); /* mode 2: in flight while the w13 grid finishes */

    /* the activation rows: A bf16 [., Kp], tok [.], gs [., Kp/128]; row of tile row m: arow[m] */
    extern __shared__ __align__(16) uint8_t smem[];
    const __nv_bfloat16 *Ab;
    const float *tokb, *gsb;
    int arow[MT];
    if (MODE == 2) {
        __nv_bfloat16 *As = (__nv_bfloat16 *)smem;
        float *toks = (float *)(smem + (size_t)MT * Kp * 2), *gss = toks + MT;
        uint32_t *amx = (uint32_t *)(gss + MT * (Kp / 128));
        Ab = As, tokb = toks, gsb = gss;
#pragma unroll
        for (int m = 0; m < MT; m++) arow[m] = m;
        pdl_wait(); /* a is the w13 grid's output */
        const int64_t K = g.Ip, per = Kp / 8, total = cnt * per;
        if (KIND == MOQ_CK_FP8_ROW) { /* per-row amax (non-negative floats order as their bits) */
            if (threadIdx.x < MT) amx[threadIdx.x] = 0;
            __syncthreads();
            for (int64_t s = threadIdx.x; s < total; s += 256) {
                float v[8], am = 0.0f;
                aq_load8(g.a_d, 0, true, (row0 + s / per) * K, K, 8 * (s % per), v);
#pragma unroll
                for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
                atomicMax(&amx[s / per], __float_as_uint(am));
            }
            __syncthreads();
        }
        aq_consts cs = aq_consts_of<KIND>(g.a_scale, g.rcp_approx, 1.0f);
        for (int64_t s0 = 0; s0 < total; s0 += 256) { /* uniform trip count: aq8 shuffles; rows of per (16·j) slots keep groups whole */
            const int64_t s = s0 + threadIdx.x;
            const bool on = s < total;
            const int64_t m = on ? s / per : 0, c = on ? s % per : 0, k0 = 8 * c;
            if (KIND == MOQ_CK_FP8_ROW) cs.tok = aq_token_scale(__uint_as_float(amx[m]));
            float v[8], dq[8], gscale;
            uint8_t q[8], scode;
            uint32_t packed;
            aq_load8(g.a_d, 0, on, (row0 + m) * K, K, k0, v);
            aq8<KIND>(v, cs, q, dq, packed, gscale, scode);
            (void)packed, (void)scode;
            if (!on) continue;
            *(uint4 *)(As + m * Kp + k0) = aq_bf16x8(dq);
            if (KIND == MOQ_CK_FP8_BLK128 && (c & 15) == 0) gss[m * (Kp / 128) + k0 / 128] = k0 < K ? gscale : 0.0f;
        }
        if (threadIdx.x < MT) toks[threadIdx.x] = KIND == MOQ_CK_FP8_ROW ? aq_token_scale(__uint_as_float(amx[threadIdx.x])) : 1.0f;
        __syncthreads();
    } else {
        Ab = (const __nv_bfloat16 *)(ws + g.ws.a), tokb = (const float *)(ws + g.ws.tok), gsb = (const float *)(ws + g.ws.gs);
#pragma unroll
        for (int m = 0; m < MT; m++) arow[m] = MODE == 1 ? (m < cnt ? __ldcg(g.row_tok_d + row0 + m) : 0) : (int)row0 + m;
    }

    float acc[R][MT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MT; m++) acc[r][m] = 0.0f;
    for (int64_t v0 = lane; live && v0 < nvec; v0 += 32 * U) {
        if (v0 != lane) load_w(v0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = v0 + 32 * u;
            if (v >= nvec) break;
            const int64_t k0 = v * C;
            constexpr int MA = R > 1 ? MT : 1;
            uint32_t ab[MA][C / 2];
            auto load_a = [&](int ma, int m) {
#pragma unroll
                for (int j = 0; j < C / 8; j++) {
                    const uint4 av = m < cnt ? ld16<SM>((const uint4 *)(Ab + (int64_t)arow[m] * Kp + k0) + j) : make_uint4(0, 0, 0, 0);
                    ab[ma][4 * j] = av.x, ab[ma][4 * j + 1] = av.y, ab[ma][4 * j + 2] = av.z, ab[ma][4 * j + 3] = av.w;
                }
            };
            if (R > 1)
#pragma unroll
                for (int m = 0; m < MT; m++) load_a(m < MA ? m : 0, m);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t n = n0 + r;
                const uint32_t wr[4] = {wvs[u][r].x, wvs[u][r].y, wvs[u][r].z, wvs[u][r].w};
                float w[C];
                if (KIND == MOQ_CK_BF16) {
#pragma unroll
                    for (int j = 0; j < 4; j++) m_bf16x2(wr[j], w + 2 * j);
                } else if (C == 16) {
#pragma unroll
                    for (int j = 0; j < 4; j++) m_fp8x4(wr[j], w + 4 * j);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) m_e2m1x8(wr[j], w + 8 * j);
                }
                float sc0 = 1.0f, sc1 = 1.0f;
                if (KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16) {
                    sc0 = d_e4m3_dec(sraw[u][r] & 0xFFu) * 16384.0f, sc1 = d_e4m3_dec(sraw[u][r] >> 8) * 16384.0f;
                } else if (KIND == MOQ_CK_MXFP8) {
                    sc0 = d_e8m0_dec(sraw[u][r]);
                }
                float swg = 1.0f; /* the 128-block of rows n0 .. n0 + R - 1 (R divides 128) */
                if (KIND == MOQ_CK_FP8_BLK128) swg = __uint_as_float(sraw[u][0]);
                (void)n;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int ma = R > 1 ? (m < MA ? m : 0) : 0;
                    if (R == 1) load_a(0, m);
                    float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
                    for (int t = 0; t < C / 2; t++) {
                        float &p = 2 * t < 16 ? p0 : p1;
                        p = fmaf(u2f(ab[ma][t] << 16), w[2 * t], p);
                        p = fmaf(u2f(ab[ma][t] & 0xFFFF0000u), w[2 * t + 1], p);
                    }
                    if (KIND == MOQ_CK_FP8_BLK128) acc[r][m] = fmaf(p0, swg * (m < cnt ? gsb[(int64_t)arow[m] * (Kp / 128) + k0 / 128] : 0.0f), acc[r][m]);
                    else if (KIND == MOQ_CK_MXFP8) acc[r][m] = fmaf(p0 * 0x1p120f, sc0, acc[r][m]);
                    else if (C == 32) acc[r][m] = fmaf(p1, sc1, fmaf(p0, sc0, acc[r][m]));
                    else acc[r][m] = fmaf(p0, sc0, acc[r][m]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MT; m++)
            for (int o = 16; o; o >>= 1) acc[r][m] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][m], o);
    constexpr float undo = KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW || KIND == MOQ_CK_FP8_BLK128 ? 0x1p120f : 1.0f;
    if (MODE == 1) {
        __shared__ float hs[8][R][MT];
        if (lane == 0 && live)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t n = n0 + r;
                const float rs = row_scale[n], b = bias[n];
#pragma unroll
                for (int m = 0; m < MT; m++) hs[warp][r][m] = m < cnt ? fmaf(acc[r][m] * undo * rs, tokb[arow[m]], b) : 0.0f;
            }
        __syncthreads();
        const int P = g.gated ? 4 * R : 8 * R;
        for (int e = threadIdx.x; e < P * MT; e += 256) {
            const int i = e % P, m = e / P, w = i / R, r = i % R;
            if (m >= cnt || i0 + i >= g.Ip) continue;
            g.y_d[(row0 + m) * g.Ip + i0 + i] = act1(g.act, g.limit, g.alpha, g.beta, hs[w][r][m], g.gated ? hs[4 + w][r][m] : 0.0f);
        }
        return;
    }
    if (lane == 0 && live) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t n = n0 + r;
            if (n >= g.N) break;
            const float rs = row_scale[n], b = bias[n];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (m >= cnt) break;
                g.y_d[(row0 + m) * g.N + n] = fmaf(acc[r][m] * undo * rs, tokb[arow[m]], b);
            }
        }
        if (MODE == 2) __threadfence(); /* o visible to the tile that combines (release) */
    }
    if (MODE == 2) { /* combine: the last of token t's tiles to finish this n-range sums its slots in order */
        __shared__ int32_t mine[MT];
        __syncthreads();
        if (threadIdx.x < MT) {
            const int m = threadIdx.x;
            int32_t t = -1;
            if (m < cnt) {
                t = __ldcg(g.row_tok_d + row0 + m);
                int nloc = 0;
                for (int64_t j = 0; j < g.k; j++) nloc += __ldcg(g.pos_d + t * g.k + j) >= 0;
                int32_t *c = g.count_d + (int64_t)t * gridDim.x + blockIdx.x;
                if (atomicAdd(c, 1) == nloc - 1) atomicExch(c, 0);
                else t = -1;
            }
            mine[m] = t;
        }
        __syncthreads();
        bool any = false;
#pragma unroll
        for (int m = 0; m < MT; m++) any |= m < cnt && mine[m] >= 0;
        if (!any) return;
        __threadfence(); /* (acquire) the other tiles' o after their counts */
        for (int m = 0; m < MT && m < cnt; m++) {
            const int32_t t = mine[m];
            if (t < 0) continue;
            for (int e = threadIdx.x; e < 8 * R; e += 256) {
                const int64_t n = (int64_t)blockIdx.x * 8 * R + e;
                if (n >= g.N) continue;
                float v = 0.0f;
                for (int64_t j = 0; j < g.k; j++) {
                    const int32_t rr = __ldcg(g.pos_d + t * g.k + j);
                    if (rr >= 0) v = __fadd_rn(v, __fmul_rn(__ldcg(g.wts_d + t * g.k + j), __ldcg(g.y_d + (int64_t)rr * g.N + n)));
                }
                g.out_d[t * g.N + n] = v;
            }
        }
    }
}

/* grid: x = output rows / (8 warps · R) (mode 1: intermediate indices / (4 or 8) R), y = work items.
 * Modes 1 and 2 are programmatic dependents of the kernel before them (plain launch where refused). */
template <int KIND, int MT, int MODE> static void glaunch2(const moq_cuda_moe_gemm *g) {
    constexpr int R = mshape<MT>::R;
    const int64_t gx = MODE == 1 ? cdiv(g->Ip, (g->gated ? 4 : 8) * R) : cdiv(g->N, 8 * R);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)gx, (unsigned)g->grid_tiles, 1);
    cfg.blockDim = dim3(256, 1, 1);
    cfg.dynamicSmemBytes = MODE == 2 ? moq_cuda_moe_w2_smem(MT, g->Kp) : 0;
    cfg.stream = (cudaStream_t)g->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = MODE == 0 ? 0 : 1;
    void (*k)(moq_cuda_moe_gemm) = grouped_kernel<KIND, MT, MODE>;
    if (cudaLaunchKernelEx(&cfg, k, *g) != cudaSuccess && cfg.numAttrs) {
        (void)cudaGetLastError();
        cfg.numAttrs = 0;
        (void)cudaLaunchKernelEx(&cfg, k, *g);
    }
}
template <int KIND, int MT> static void glaunch1(const moq_cuda_moe_gemm *g) {
    if (g->mode == 1) glaunch2<KIND, MT, 1>(g);
    else if (g->mode == 2) glaunch2<KIND, MT, 2>(g);
    else glaunch2<KIND, MT, 0>(g);
}
template <int KIND> static void glaunch(const moq_cuda_moe_gemm *g) {
    if (g->mt <= 1) glaunch1<KIND, 1>(g);
    else if (g->mt <= 2) glaunch1<KIND, 2>(g);
    else if (g->mt <= 4) glaunch1<KIND, 4>(g);
    else if (g->mt <= 8) glaunch1<KIND, 8>(g);
    else glaunch1<KIND, 16>(g);
}

extern "C" size_t moq_cuda_moe_w2_smem(int64_t mt, int64_t Kp) { return (size_t)mt * (size_t)(Kp * 2 + 8 + Kp / 128 * 4); }

extern "C" const char *moq_cuda_moe_grouped(const moq_cuda_moe_gemm *g) {
    if (g->mode == 2 && moq_cuda_moe_w2_smem(g->mt, g->Kp) > MOQ_CUDA_MOE_DEC_SMEM) return "moe grouped gemm: mode 2's activation rows exceed shared memory";
    if (g->mode != 0 && (g->mt > MOQ_CUDA_MOE_DEC_T || g->Kp % 128)) return "moe grouped gemm: modes 1 and 2 need tiles of <= 16 rows and Kp % 128 == 0";
    if (g->grid_tiles < 1 || g->grid_tiles > g->max_tiles || g->grid_tiles > 65535) return "moe grouped gemm: work items out of range (1..max_tiles, <= 65535)";
    switch (g->kind) {
    case MOQ_CK_BF16: glaunch<MOQ_CK_BF16>(g); break;
    case MOQ_CK_FP8_TENSOR: glaunch<MOQ_CK_FP8_TENSOR>(g); break;
    case MOQ_CK_FP8_ROW: glaunch<MOQ_CK_FP8_ROW>(g); break;
    case MOQ_CK_FP8_BLK128: glaunch<MOQ_CK_FP8_BLK128>(g); break;
    case MOQ_CK_NVFP4: glaunch<MOQ_CK_NVFP4>(g); break;
    case MOQ_CK_NVFP4_W4A16: glaunch<MOQ_CK_NVFP4_W4A16>(g); break;
    case MOQ_CK_MXFP8: glaunch<MOQ_CK_MXFP8>(g); break;
    default: return "moe grouped gemm: unknown pair kind";
    }
    return moq_cuda_launch_check("moe grouped gemm kernel launch");
}

/* ---- activation and combine --------------------------------------------------------------------- */
__global__ void __launch_bounds__(256) act_kernel(int act, int gated, float limit, float alpha, float beta, const float *h, int64_t N13, int64_t Ip,
                                                  float *a) {
    const int64_t r = blockIdx.y;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < Ip; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = h[r * N13 + i], u = gated ? h[r * N13 + Ip + i] : 0.0f;
        a[r * Ip + i] = act1(act, limit, alpha, beta, g, u);
    }
}

extern "C" const char *moq_cuda_moe_act(int act, int gated, float limit, float alpha, float beta, const float *h_d, int64_t A, int64_t N13,
                                        int64_t Ip, float *a_d, void *stream) {
    const dim3 grid((unsigned)cdiv(Ip, 256) < 8 ? (unsigned)cdiv(Ip, 256) : 8u, (unsigned)A);
    act_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(act, gated, limit, alpha, beta, h_d, N13, Ip, a_d);
    return moq_cuda_launch_check("moe activation kernel launch");
}

__global__ void __launch_bounds__(256) combine_kernel(const float *o, const int32_t *pos, const float *wts, int on_input, int64_t k, int64_t H,
                                                      float *y) {
    const int64_t t = blockIdx.y;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < H; i += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = pos[t * k + j];
            if (r >= 0) v = __fadd_rn(v, __fmul_rn(on_input ? 1.0f : wts[t * k + j], o[(int64_t)r * H + i]));
        }
        y[t * H + i] = v;
    }
}

extern "C" const char *moq_cuda_moe_combine(const float *o_d, const int32_t *pos_d, const float *wts_d, int on_input, int64_t T, int64_t k,
                                            int64_t H, float *y_d, void *stream) {
    const dim3 grid((unsigned)cdiv(H, 256) < 8 ? (unsigned)cdiv(H, 256) : 8u, (unsigned)T);
    combine_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(o_d, pos_d, wts_d, on_input, k, H, y_d);
    return moq_cuda_launch_check("moe combine kernel launch");
}
