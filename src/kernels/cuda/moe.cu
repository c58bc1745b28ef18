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
 */
#include "kernels/cuda/common.cuh"
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

__global__ void __launch_bounds__(RS_THREADS) route_sort_kernel(moq_cuda_moe_route r) {
    __shared__ int32_t lid[MOQ_CUDA_MOE_MAX_A];
    __shared__ int32_t cnt[MOQ_CUDA_MOE_MAX_E + 1], fill[MOQ_CUDA_MOE_MAX_E];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = RS_THREADS / 32;
    const int64_t E = r.E, k = r.k, A = r.T * k, L = r.L;
    for (int64_t t = warp; t < r.T; t += nw) {
        const float *lg = r.logits_d + t * E;
        float *p = r.scr_d + t * (2 * E + 2 * MOQ_CUDA_MOE_MAX_GROUPS), *sel = p + E, *gs = sel + E;
        if (!r.sigmoid) {
            float mx = -INFINITY;
            for (int64_t e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
            for (int d = 16; d; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, d));
            for (int64_t e = lane; e < E; e += 32) p[e] = expf(__fsub_rn(lg[e], mx));
            __syncwarp();
            float sum = 0.0f;
            if (lane == 0)
                for (int64_t e = 0; e < E; e++) sum = __fadd_rn(sum, p[e]);
            sum = __shfl_sync(0xFFFFFFFFu, sum, 0);
            for (int64_t e = lane; e < E; e += 32) p[e] = __fdiv_rn(p[e], sum);
        } else {
            for (int64_t e = lane; e < E; e += 32) p[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-lg[e])));
        }
        uint32_t allowed = 0; /* bit i: expert lane + 32 i may still be picked (E <= 1024) */
        for (int64_t e = lane, i = 0; e < E; e += 32, i++) {
            sel[e] = r.bias_d ? __fadd_rn(p[e], r.bias_d[e]) : p[e];
            allowed |= 1u << i;
        }
        __syncwarp();
        if (r.n_group > 1) {
            const int64_t G = r.n_group, per = E / G;
            for (int64_t g = lane; g < G; g += 32) { /* routing.c: sum of the two best biased scores, or the best */
                const float *s = sel + g * per;
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
            for (int64_t e = lane, i = 0; e < E; e += 32, i++) {
                const int64_t g = e / per;
                if (!((keep[g >> 6] >> (g & 63)) & 1)) allowed &= ~(1u << i);
            }
        }
        float wsum = 0.0f, wj = 0.0f;
        int32_t idj = 0;
        for (int64_t j = 0; j < k; j++) {
            float bv = 0.0f;
            int bi = -1;
            for (int64_t e = lane, i = 0; e < E; e += 32, i++)
                if ((allowed >> i) & 1) best_of(bv, bi, sel[e], (int)e);
            warp_best(bv, bi);
            if (bi < 0) bi = 0; /* only NaN scores leave nothing selectable */
            if ((bi & 31) == lane) allowed &= ~(1u << (bi >> 5));
            if (lane == j) idj = bi, wj = p[bi];          /* lane j keeps slot j (k <= 32 here) */
            if (lane == 0) wsum = __fadd_rn(wsum, p[bi]);
        }
        wsum = __shfl_sync(0xFFFFFFFFu, wsum, 0);
        if (lane < k) {
            if (r.renormalize) wj = __fdiv_rn(wj, wsum);
            if (r.scaling != 1.0f) wj = __fmul_rn(wj, r.scaling);
            r.ids_d[t * k + lane] = idj, r.wts_d[t * k + lane] = wj;
        }
    }
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

template <int MT> struct mshape { static constexpr int R = MT <= 2 ? 4 : MT <= 4 ? 2 : 1, U = 2; };

template <int KIND, int MT>
__global__ void __launch_bounds__(256) grouped_kernel(moq_cuda_moe_gemm g) {
    constexpr int C = mfmt<KIND>::C, R = mshape<MT>::R, U = mshape<MT>::U;
    const int32_t n_tiles = g.tiles_d[3 * g.max_tiles];
    if ((int32_t)blockIdx.y >= n_tiles) return;
    const int32_t *ti = g.tiles_d + 3 * blockIdx.y;
    const int64_t ex = ti[0], row0 = ti[1];
    const int cnt = ti[2];
    const int lane = threadIdx.x & 31;
    const int64_t n0 = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
    if (n0 >= g.N) return;
    const uint8_t *blob = g.w_d + ex * g.stride;
    const uint8_t *codes = blob + g.codes, *scales = blob + g.scales;
    const float *row_scale = (const float *)(blob + g.rs), *bias = (const float *)(blob + g.bias);
    const char *ws = (const char *)g.ws_d;
    const int64_t Kp = g.Kp, nvec = Kp / C, rowbytes = Kp * (KIND == MOQ_CK_BF16 ? 2 : 1) / (C == 32 ? 2 : 1);
    const __nv_bfloat16 *A = (const __nv_bfloat16 *)(ws + g.ws.a) + row0 * Kp;
    const float *tok = (const float *)(ws + g.ws.tok) + row0, *gs = (const float *)(ws + g.ws.gs) + row0 * (Kp / 128);
    const uint4 *wrow = (const uint4 *)(codes + n0 * rowbytes);
    const int64_t rstride = rowbytes / 16;
    float acc[R][MT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MT; m++) acc[r][m] = 0.0f;
    for (int64_t v0 = lane; v0 < nvec; v0 += 32 * U) {
        uint4 wvs[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) wvs[u][r] = v0 + 32 * u < nvec ? __ldg(wrow + r * rstride + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
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
                    const uint4 av = m < cnt ? __ldg((const uint4 *)(A + m * Kp + k0) + j) : make_uint4(0, 0, 0, 0);
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
                    const uint8_t *s = scales + n * (Kp / 16) + 2 * v;
                    sc0 = d_e4m3_dec(s[0]) * 16384.0f, sc1 = d_e4m3_dec(s[1]) * 16384.0f;
                } else if (KIND == MOQ_CK_MXFP8) {
                    sc0 = d_e8m0_dec(scales[n * (Kp / 32) + k0 / 32]);
                }
                float swg = 1.0f;
                if (KIND == MOQ_CK_FP8_BLK128) swg = ((const float *)scales)[(n / 128) * (Kp / 128) + k0 / 128];
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
                    if (KIND == MOQ_CK_FP8_BLK128) acc[r][m] = fmaf(p0, swg * (m < cnt ? gs[m * (Kp / 128) + k0 / 128] : 0.0f), acc[r][m]);
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
    if (lane == 0) {
        constexpr float undo = KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW || KIND == MOQ_CK_FP8_BLK128 ? 0x1p120f : 1.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t n = n0 + r;
            if (n >= g.N) break;
            const float rs = row_scale[n], b = bias[n];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (m >= cnt) break;
                g.y_d[(row0 + m) * g.N + n] = fmaf(acc[r][m] * undo * rs, tok[m], b);
            }
        }
    }
}

template <int KIND, int MT> static void glaunch1(const moq_cuda_moe_gemm *g) {
    const dim3 grid((unsigned)cdiv(g->N, 8 * mshape<MT>::R), (unsigned)g->grid_tiles), block(256);
    grouped_kernel<KIND, MT><<<grid, block, 0, (cudaStream_t)g->stream>>>(*g);
}
template <int KIND> static void glaunch(const moq_cuda_moe_gemm *g) {
    if (g->mt <= 1) glaunch1<KIND, 1>(g);
    else if (g->mt <= 2) glaunch1<KIND, 2>(g);
    else if (g->mt <= 4) glaunch1<KIND, 4>(g);
    else if (g->mt <= 8) glaunch1<KIND, 8>(g);
    else glaunch1<KIND, 16>(g);
}

extern "C" const char *moq_cuda_moe_grouped(const moq_cuda_moe_gemm *g) {
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
