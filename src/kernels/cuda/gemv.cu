/* gemv.cu — decode path (M <= 16) on the tensor cores, built to stream the weight once (measured
 * at M = 1: ~10 µs per call fixed plus the bytes at ~3.7 TB/s, docs/PERFORMANCE.md). MXFP8 at
 * M <= 2 goes to the CUDA-core kernel of gemv_fma.cu instead (measured 2x faster there).
 *
 * Each warp owns T = 2 tiles of 16 weight rows and a share of K; the weight rows are the mma's
 * A operand (m16), the M <= 16 activation rows its B operand (n8, two n8 halves for M > 8).
 * Per K chunk each lane loads one 8/16/32-byte vector of weight row g and one of row g + 8
 * (g = lane / 4; the 4 lanes of a quad read 4 consecutive vectors: whole 32-byte sectors) from
 * the row-major packed weight, several chunks in flight, and decodes them in registers:
 *   e4m3 -> f16 by the hardware cvt (FP8 per-tensor / per-channel / 128x128 / MXFP8; the
 *           activation codes q are converted the same way): f16 mma, exact products;
 *   e2m1 -> bf16 by bit placement (value · 2^-126), times its e4m3 block scale · 2^116 (exact in
 *           bf16: 2-bit × 4-bit significands, >= 2^-20): bf16 mma with the bf16 activation A
 *           (W4A16); W4A4 (H16): e2m1 -> f16 4 codes per integer op (e2m1x8_f16), times the
 *           block scale · 2^6 in f16, f16 mma with the activation A in f16 (exact for W4A4);
 *   bf16 weights feed the bf16 mma as they are.
 * The mma sums over its 16 k positions in any order, so each lane's k positions map to
 * consecutive k of its own vector (the same map for the activation's B fragment): no repacking
 * of the weight at load. MXFP8 (32-blocks) and FP8 128x128 (128-blocks) chunks are one scale
 * block: their partial sums are scaled (s_w · s_x) and added in f32, as in the CPU reference.
 * The warps of a block and the KS blocks of a cluster (grid.y) split K; partial sums meet in
 * shared memory, the cluster's rank 0 reads its peers' through distributed shared memory, in a
 * fixed order (deterministic), and writes y = acc · undo · row_scale[n] · tok[m] (+ bias[n]).
 * Launched with programmatic dependent launch: the first weight loads are issued before
 * griddepcontrol.wait, so they overlap the activation quantizer kernel before it. Where gv_fuse
 * says so (FP8 per-tensor M = 1, FP8 128x128 M <= 2, NVFP4 W4A4 M = 1 with K slices of <= 1024
 * values: measured faster) there is no quantizer kernel: the blocks quantize their own K slices
 * of x into shared memory (FUSED). */
#include "kernels/cuda/act_quant.cuh"

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <stdlib.h>

namespace cg = cooperative_groups;

#define GV_WARPS 4 /* warps per block, splitting K */
#define GV_T 2     /* 16-row tiles per warp */

template <int KIND> struct sk;
/* VB: weight bytes per lane per row per chunk; VPT: values per lane per row per chunk (chunk K =
 * 4 VPT); F16: fp8 codes through f16 mma (else bf16); SB: chunk = one scale block (MXFP8, BLK128). */
template <> struct sk<MOQ_CK_BF16> { static constexpr int VB = 16, VPT = 8; static constexpr bool F16 = false, SB = false; };
template <> struct sk<MOQ_CK_FP8_TENSOR> { static constexpr int VB = 32, VPT = 32; static constexpr bool F16 = true, SB = false; };
template <> struct sk<MOQ_CK_FP8_ROW> { static constexpr int VB = 32, VPT = 32; static constexpr bool F16 = true, SB = false; };
template <> struct sk<MOQ_CK_FP8_BLK128> { static constexpr int VB = 32, VPT = 32; static constexpr bool F16 = true, SB = true; };
template <> struct sk<MOQ_CK_MXFP8> { static constexpr int VB = 8, VPT = 8; static constexpr bool F16 = true, SB = true; };
template <> struct sk<MOQ_CK_NVFP4> { static constexpr int VB = 16, VPT = 32; static constexpr bool F16 = false, SB = false; };
template <> struct sk<MOQ_CK_NVFP4_W4A16> { static constexpr int VB = 16, VPT = 32; static constexpr bool F16 = false, SB = false; };

template <int KIND> struct skd {
    static constexpr int VB = sk<KIND>::VB, VPT = sk<KIND>::VPT, CK = 4 * VPT, STEPS = VPT / 4, WW = VB / 4;
    static constexpr bool FP4 = KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16;
    /* W4A4 may run on f16 (e2m1x8_f16): its activation (e2m1 · e4m3) is exact in f16 too; W4A16's
     * bf16 activation is not, so it keeps the bf16 decode */
    static constexpr bool H16_OK = KIND == MOQ_CK_NVFP4;
    /* PE (gemv_mma_kernel): the cluster reduction with all peers' loads in flight at once; not
     * for NVFP4, whose whole kernel it moved to 96-127 registers (ptxas; 80 without) */
    static constexpr bool PE_OK = !FP4;
    /* activation words per lane per token per chunk: bf16 values (2 per word) or e4m3 codes (4) */
    static constexpr int AW = sk<KIND>::F16 ? VPT / 4 : VPT / 2;
    /* chunks in flight per iteration: about 128 weight bytes per lane */
    static constexpr int U = 64 / (VB * GV_T) > 0 ? 64 / (VB * GV_T) : 1;
    /* rows of one row group (8 · n8 tiles) at most; more rows run as several groups (grid.x), each
     * reading the weights again (from L2 where the groups of a tile run together). The activation
     * words a lane holds per chunk (AW per tile) and the accumulators (GV_T · 4 per tile; the
     * block-scaled kinds a second set per scale block) must stay in registers. ptxas -v (sm_90a,
     * CUDA 13.0) at 8 tiles: BF16 208 registers, FP8 per-tensor / per-token 230, no spill; MXFP8 255
     * and 36 bytes of spill, FP8 128x128 176 bytes, NVFP4 16 activation words a tile: those take
     * groups of 4 tiles (FP8 128x128 4 bytes of spill, MXFP8 194 registers, W4A4 on f16 218, W4A16
     * 182). The instances of 1 and 2 tiles (M <= 16) are those of before the groups, register for
     * register. */
    static constexpr int MG = !sk<KIND>::SB && AW <= 8 ? 64 : 32;
};

/* WB words from p: global memory through the read-only path, or shared memory (SMEM) */
template <int WB, bool SMEM = false> __device__ __forceinline__ void ldvec(uint32_t *w, const uint8_t *p) {
    if (WB == 2) {
        const uint2 v = SMEM ? *(const uint2 *)p : __ldg((const uint2 *)p);
        w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < WB / 4; i++) {
            const uint4 v = SMEM ? ((const uint4 *)p)[i] : __ldg((const uint4 *)p + i);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    }
}

__device__ __forceinline__ uint32_t e4m3x2_f16(uint32_t w16) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w16 & 0xFFFF), __NV_E4M3);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
/* e2m1 codes i and i + 4 of w (low nibble first) -> bf16x2 of value · 2^-126 (0.5 subnormal). */
template <int I> __device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
    const uint32_t x = w >> (4 * I);
    return ((x & 0x00070007u) << 6) | ((x & 0x00080008u) << 12);
}
__device__ __forceinline__ uint32_t bmul2(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hmul2(*(const __nv_bfloat162 *)&a, *(const __nv_bfloat162 *)&b);
    return *(const uint32_t *)&r;
}
/* two e4m3 block scales (u16) -> bf16 of scale · 2^116 each, exact: (lo, lo) and (hi, hi) */
__device__ __forceinline__ void fp4_scales(uint32_t s16, uint32_t &lo2, uint32_t &hi2) {
    const uint32_t h = e4m3x2_f16(s16);
    const float2 f = __half22float2(*(const __half2 *)&h);
    const __nv_bfloat16 a = __float2bfloat16_rn(f.x * 0x1p116f), b = __float2bfloat16_rn(f.y * 0x1p116f);
    const uint32_t ua = *(const uint16_t *)&a, ub = *(const uint16_t *)&b;
    lo2 = ua | (ua << 16), hi2 = ub | (ub << 16);
}
/* f16 decode (H16, NVFP4 W4A4). e2m1 code v = s e1 e0 m as f16 of value · 2^-14 has a zero low
 * byte and the high byte H(v) = s·128 + (e1 e0 m)·2 (exponent field e, mantissa bit m; e = 0 is
 * the f16 subnormal m · 2^-15), so the 8 codes v0..v7 of a word (v_2i the low nibble of byte i)
 * decode 4 at a time, one per byte: 7 integer ops for the 8 high bytes, then 4 byte permutes
 * into f16x2 (v0, v2) (v4, v6) (v1, v3) (v5, v7) — 11 ops per 8 values, against 4-5 per 2 for
 * the bf16 bit placement above (SASS counts: docs/PERFORMANCE.md, "Decode on the 8B shapes"). */
__device__ __forceinline__ void e2m1x8_f16(uint32_t w, uint32_t *o) {
    const uint32_t lo = ((w << 1) & 0x0E0E0E0Eu) | ((w << 4) & 0x80808080u); /* H(v0) H(v2) H(v4) H(v6) */
    const uint32_t hi = ((w >> 3) & 0x0E0E0E0Eu) | (w & 0x80808080u);        /* H(v1) H(v3) H(v5) H(v7) */
    o[0] = __byte_perm(lo, 0u, 0x1404), o[1] = __byte_perm(lo, 0u, 0x3424);
    o[2] = __byte_perm(hi, 0u, 0x1404), o[3] = __byte_perm(hi, 0u, 0x3424);
}
__device__ __forceinline__ uint32_t hmul2u(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*(const __half2 *)&a, *(const __half2 *)&b);
    return *(const uint32_t *)&r;
}
/* two e4m3 block scales (u16) -> f16 of scale · 2^6 each, (lo, lo) and (hi, hi). Exact: e4m3 is
 * exact in f16 and 448 · 2^6 < 65504; a product v · 2^-14 · s · 2^6 (<= 6 significant bits,
 * >= 2^-18, <= 10.5) is exact in f16 as well. The epilogue multiplies by 2^8. */
__device__ __forceinline__ void fp4_scales_f16(uint32_t s16, uint32_t &lo2, uint32_t &hi2) {
    const uint32_t h = hmul2u(e4m3x2_f16(s16), 0x54005400u); /* f16 64.0 = 0x5400 */
    lo2 = __byte_perm(h, 0u, 0x1010), hi2 = __byte_perm(h, 0u, 0x3232);
}

template <bool F16> __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if (F16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A and B fragments of step S of a chunk. Lane positions 2t, 2t+1, 2t+8, 2t+9 of the mma's k16
 * are 4 of the lane's own values (the same 4 for the weight rows and the activation rows). */
template <int KIND, int S>
__device__ __forceinline__ void frag_a(const uint32_t *wg, const uint32_t *wg8, const uint32_t *sc, uint32_t *A) {
    if (KIND == MOQ_CK_BF16) {
        A[0] = wg[2 * S], A[2] = wg[2 * S + 1], A[1] = wg8[2 * S], A[3] = wg8[2 * S + 1];
    } else if (sk<KIND>::F16) { /* word S: e4m3 values 4S .. 4S+3 */
        A[0] = e4m3x2_f16(wg[S]), A[2] = e4m3x2_f16(wg[S] >> 16), A[1] = e4m3x2_f16(wg8[S]), A[3] = e4m3x2_f16(wg8[S] >> 16);
    } else { /* NVFP4: word j = S / 2 holds values 8j .. 8j+7; half h = S % 2 takes values {2h, 2h+4} and {2h+1, 2h+5} */
        constexpr int j = S / 2, h = S % 2;
        const uint32_t sg = sc[j / 2], sg8 = sc[2 + j / 2];
        A[0] = bmul2(e2m1_pair<2 * h>(wg[j]), sg), A[2] = bmul2(e2m1_pair<2 * h + 1>(wg[j]), sg);
        A[1] = bmul2(e2m1_pair<2 * h>(wg8[j]), sg8), A[3] = bmul2(e2m1_pair<2 * h + 1>(wg8[j]), sg8);
    }
}
template <int KIND, int S> __device__ __forceinline__ void frag_b(const uint32_t *act, uint32_t *B) {
    if (KIND == MOQ_CK_BF16) {
        B[0] = act[2 * S], B[1] = act[2 * S + 1];
    } else if (sk<KIND>::F16) {
        B[0] = e4m3x2_f16(act[S]), B[1] = e4m3x2_f16(act[S] >> 16);
    } else {
        constexpr int j = S / 2, h = S % 2;
        const uint32_t a0 = act[4 * j + h], a2 = act[4 * j + h + 2];
        B[0] = __byte_perm(a0, a2, 0x5410), B[1] = __byte_perm(a0, a2, 0x7632);
    }
}

/* Steps S.. of a chunk: B fragments once per step, A fragments (the decode) once per tile.
 * H16 (NVFP4 W4A4 on f16): two steps per weight word j, each word decoded once (e2m1x8_f16):
 * step 2j takes the lane's values {0, 2} and {1, 3} of the word, step 2j + 1 {4, 6} and {5, 7};
 * the activation's B fragments pair the same values (its f16 words hold 2 consecutive values). */
template <int KIND, bool H16, int S, int NT>
__device__ __forceinline__ void steps(float (*c)[4], const uint32_t (*w)[2][skd<KIND>::WW], const uint32_t (*act)[skd<KIND>::AW],
                                      const uint32_t (*sc)[4]) {
    if constexpr (H16 && S < skd<KIND>::STEPS) {
        constexpr int j = S / 2;
        uint32_t B[2][NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint32_t *x = act[nt] + 4 * j;
            B[0][nt][0] = __byte_perm(x[0], x[1], 0x5410), B[0][nt][1] = __byte_perm(x[0], x[1], 0x7632);
            B[1][nt][0] = __byte_perm(x[2], x[3], 0x5410), B[1][nt][1] = __byte_perm(x[2], x[3], 0x7632);
        }
#pragma unroll
        for (int i = 0; i < GV_T; i++) {
            uint32_t d0[4], d8[4];
            e2m1x8_f16(w[i][0][j], d0), e2m1x8_f16(w[i][1][j], d8);
            const uint32_t sg = sc[i][j / 2], sg8 = sc[i][2 + j / 2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t A[4] = {hmul2u(d0[h], sg), hmul2u(d8[h], sg8), hmul2u(d0[2 + h], sg), hmul2u(d8[2 + h], sg8)};
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma<true>(c[i * NT + nt], A, B[h][nt][0], B[h][nt][1]);
            }
        }
        steps<KIND, H16, S + 2, NT>(c, w, act, sc);
    } else if constexpr (!H16 && S < skd<KIND>::STEPS) {
        uint32_t B[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) frag_b<KIND, S>(act[nt], B[nt]);
#pragma unroll
        for (int i = 0; i < GV_T; i++) {
            uint32_t A[4];
            frag_a<KIND, S>(w[i][0], w[i][1], sc[i], A);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mma<sk<KIND>::F16>(c[i * NT + nt], A, B[nt][0], B[nt][1]);
        }
        steps<KIND, H16, S + 1, NT>(c, w, act, sc);
    }
}

/* FUSED: no quantizer kernel before this one; each block quantizes the activation slices of its
 * own K chunks (every token m < M) into shared memory first (aq8, the quantizer's arithmetic),
 * laid out [m][local chunk][chunk values] (codes for the f16 path, bf16 A otherwise), then the
 * per-chunk block scales (MXFP8 e8m0 u8, FP8 128-block f32) [m][local chunk]. Local chunk
 * lc = GV_WARPS · j + w is the block's j-th chunk of warp w: c = j · KW + GV_WARPS · blockIdx.y + w.
 * H16: NVFP4 W4A4 on f16 (e2m1x8_f16; the activation A, fused or from the quantizer, in f16).
 * PE: the cluster's final reduction reads every peer's partial sums before adding any (one
 * distributed-shared-memory round trip instead of one per peer; PE_OK kinds).
 * Launch bounds: H16 at M <= 8 unfused is held to 6 blocks per SM (80 registers, as the bf16
 * decode; ptxas otherwise takes 95, 5 blocks). */
template <int KIND, int NT, bool FUSED, bool H16, bool PE>
__global__ void __launch_bounds__(GV_WARPS * 32, H16 && NT == 1 && !FUSED ? 6 : 0) gemv_mma_kernel(moq_cuda_args a) {
    using D = skd<KIND>;
    constexpr int WW = D::WW, AW = D::AW, U = D::U, CK = D::CK, R = GV_T * NT * 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* grid.x = weight tiles × nz row groups of 8 · NT rows (nz > 1 only above the kind's NT: the
     * groups of one tile are neighbours in launch order, so the later ones read its weights from L2) */
    constexpr bool RG = NT >= 4; /* only the 17..64-row instances: the decode ones (M <= 16) keep one group and their registers */
    const unsigned nz = RG ? (unsigned)((a.M + 8 * NT - 1) / (8 * NT)) : 1u;
    const int mz = RG ? (int)(blockIdx.x % nz) * 8 * NT : 0;
    const int64_t Kp = a.Kp, nch = Kp / CK, nb = (int64_t)(RG ? blockIdx.x / nz : blockIdx.x) * (16 * GV_T);
    const int kw = blockIdx.y * GV_WARPS + warp, KW = gridDim.y * GV_WARPS;
    const char *ws = (const char *)a.ws_d;
    const uint8_t *codes = (const uint8_t *)a.codes_d;
    /* bytes per weight row: Kp values of 2, 1 or 1/2 bytes */
    const int64_t rowb = KIND == MOQ_CK_BF16 ? Kp * 2 : D::FP4 ? Kp / 2 : Kp;
    const uint8_t *act_base = KIND == MOQ_CK_BF16 || D::FP4 ? (const uint8_t *)(ws + a.ws.a) : (const uint8_t *)(ws + a.ws.q);
    const int64_t act_rowb = sk<KIND>::F16 ? Kp : Kp * 2;

    float acc[R / 4][4];
#pragma unroll
    for (int r = 0; r < R / 4; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;

    typedef uint32_t wbuf[U][GV_T][2][WW];
    /* NVFP4: the chunk's two e4m3 block scales of rows g and g + 8 (u16), loaded with the weights
     * (issued at the chunk's math, they added a round trip per chunk after the first) */
    typedef uint32_t sbuf[U][GV_T][2];
    auto load_w = [&](wbuf &w, sbuf &sr, int64_t c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * KW;
#pragma unroll
            for (int i = 0; i < GV_T; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t n = nb + 16 * i + g + 8 * h;
                    if (c < nch) {
                        ldvec<WW>(w[u][i][h], codes + n * rowb + c * (CK * D::VB / D::VPT) + t * D::VB);
                        if constexpr (D::FP4) sr[u][i][h] = __ldg((const unsigned short *)((const uint8_t *)a.scales_d + n * (Kp / 16) + c * (CK / 16) + 2 * t));
                    } else {
#pragma unroll
                        for (int q = 0; q < WW; q++) w[u][i][h][q] = 0;
                        if constexpr (D::FP4) sr[u][i][h] = 0;
                    }
                }
        }
    };
    wbuf w;
    sbuf sr;
    load_w(w, sr, kw); /* weights do not depend on the previous kernel: in flight before the wait */
    /* the epilogue's row scales and biases (rank 0's rows; read-only weights too): loaded now, not
     * one more round trip after the reduction */
    constexpr int NE = R / GV_WARPS; /* outputs per thread of rank 0: R · 32 over the block's threads */
    float ep_rs[NE], ep_b[NE];
    if (blockIdx.y == 0) /* cluster (1, ks, 1) over grid.y = ks: rank 0 */
#pragma unroll
        for (int j = 0; j < NE; j++) {
            const int e = threadIdx.x + j * GV_WARPS * 32, r = e / 32, ln = e % 32, i = r / (NT * 4), ce = r % 4;
            const int64_t n = nb + 16 * i + (ln >> 2) + (ce >= 2 ? 8 : 0);
            ep_rs[j] = n < a.N ? __ldg(a.row_scale_d + n) : 0.0f, ep_b[j] = n < a.N ? __ldg(a.bias_d + n) : 0.0f;
        }
    pdl_wait(); /* the activation is the previous kernel's output */
    extern __shared__ __align__(16) uint8_t fz[];
    constexpr int VBY = sk<KIND>::F16 ? 1 : 2; /* activation bytes per value in fz */
    const int LC = GV_WARPS * (int)cdiv(nch, KW);
    uint8_t *fz_s = fz + (size_t)a.M * LC * CK * VBY; /* block scales after the values */
    if constexpr (FUSED) {
        constexpr int SPC = CK / 8; /* 8-value slots per chunk; a scale group never straddles two */
        const int64_t total = a.M * LC * SPC;
        const aq_consts cs = aq_consts_of<KIND>(a.a_scale, a.rcp_approx, 1.0f);
        for (int64_t s0 = 0; s0 < total; s0 += GV_WARPS * 32) { /* uniform trip count: aq8 shuffles */
            const int64_t s = s0 + threadIdx.x;
            const bool on = s < total;
            const int64_t m = on ? s / ((int64_t)LC * SPC) : 0;
            const int lc = on ? (int)((s / SPC) % LC) : 0, o = (int)(s % SPC);
            const int64_t c = (int64_t)(lc / GV_WARPS) * KW + blockIdx.y * GV_WARPS + lc % GV_WARPS, k0 = c * CK + o * 8;
            const bool live = on && c < nch;
            float v[8], d[8], gscale;
            uint8_t q[8], scode;
            uint32_t packed;
            aq_load8(a.x_d, a.x_bf16, live, m * a.K, a.K, live ? k0 : 0, v);
            aq8<KIND>(v, cs, q, d, packed, gscale, scode);
            (void)packed;
            if (!live) continue;
            uint8_t *dst = fz + ((m * LC + lc) * CK + o * 8) * VBY;
            if (sk<KIND>::F16) *(uint2 *)dst = aq_u8x8(q);
            else *(uint4 *)dst = H16 ? aq_f16x8(d) : aq_bf16x8(d);
            if (KIND == MOQ_CK_MXFP8 && o == 0) fz_s[m * LC + lc] = scode;
            if (KIND == MOQ_CK_FP8_BLK128 && o == 0) ((float *)fz_s)[m * LC + lc] = k0 < a.K ? gscale : 0.0f;
        }
        __syncthreads();
    }
    for (int64_t c0 = kw; c0 < nch; c0 += (int64_t)KW * U) {
        if (c0 != kw) load_w(w, sr, c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * KW, k0 = c * CK;
            if (c >= nch) break;
            const int lc = (int)((c - kw) / KW) * GV_WARPS + warp; /* FUSED: the chunk's slot in fz */
            uint32_t act[NT][AW];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int64_t m = mz + nt * 8 + g;
                if (m < a.M) {
                    if (FUSED) ldvec<AW, true>(act[nt], fz + ((m * LC + lc) * CK + t * D::VPT) * VBY);
                    else ldvec<AW>(act[nt], act_base + m * act_rowb + (sk<KIND>::F16 ? k0 + t * D::VPT : (k0 + t * D::VPT) * 2));
                } else {
#pragma unroll
                    for (int q = 0; q < AW; q++) act[nt][q] = 0;
                }
            }
            uint32_t sc[GV_T][4] = {};
            if constexpr (D::FP4) {
#pragma unroll
                for (int i = 0; i < GV_T; i++) {
                    if (H16) fp4_scales_f16(sr[u][i][0], sc[i][0], sc[i][1]), fp4_scales_f16(sr[u][i][1], sc[i][2], sc[i][3]);
                    else fp4_scales(sr[u][i][0], sc[i][0], sc[i][1]), fp4_scales(sr[u][i][1], sc[i][2], sc[i][3]);
                }
            }
            if (sk<KIND>::SB && !FUSED) {
                /* after the quantizer kernel: the chunk's scales first (weight rows g, g + 8 of each
                 * tile; tokens 2t, 2t + 1 of each n8 half), in flight during the mma steps (measured:
                 * MXFP8 M = 16 79 -> 63 us, FP8 128x128 M = 16 42 -> 39 us, with the sliced quantizer) */
                const float *tok_s = (const float *)(ws + (KIND == MOQ_CK_MXFP8 ? a.ws.sf : a.ws.gs));
                float swv[GV_T][2], sxv[NT][2];
#pragma unroll
                for (int i = 0; i < GV_T; i++) {
                    if (KIND == MOQ_CK_MXFP8) {
                        const uint8_t *s = (const uint8_t *)a.scales_d + (nb + 16 * i + g) * (Kp / 32) + k0 / 32;
                        swv[i][0] = d_e8m0_dec(s[0]), swv[i][1] = d_e8m0_dec(s[8 * (Kp / 32)]);
                    } else {
                        swv[i][0] = swv[i][1] = ((const float *)a.scales_d)[((nb + 16 * i) / 128) * (Kp / 128) + k0 / 128];
                    }
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const int64_t m = mz + nt * 8 + 2 * t + j;
                        sxv[nt][j] = KIND == MOQ_CK_MXFP8 ? d_e8m0_dec(((const uint8_t *)tok_s)[m * (Kp / 32) + k0 / 32]) : tok_s[m * (Kp / 128) + k0 / 128];
                    }
                float tmp[R / 4][4];
#pragma unroll
                for (int r = 0; r < R / 4; r++) tmp[r][0] = tmp[r][1] = tmp[r][2] = tmp[r][3] = 0.0f;
                steps<KIND, H16, 0, NT>(tmp, w[u], act, sc);
#pragma unroll
                for (int i = 0; i < GV_T; i++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float sw = swv[i][e >> 1], sx = sxv[nt][e & 1];
                            float &o = acc[i * NT + nt][e];
                            if (KIND == MOQ_CK_MXFP8) o = fmaf(tmp[i * NT + nt][e] * sx, sw, o);
                            else o = fmaf(tmp[i * NT + nt][e], sw * sx, o);
                        }
            } else if (sk<KIND>::SB) {
                /* FUSED: the scales after the steps (loaded first, M = 1 measured 28 -> 34 us) */
                float tmp[R / 4][4];
#pragma unroll
                for (int r = 0; r < R / 4; r++) tmp[r][0] = tmp[r][1] = tmp[r][2] = tmp[r][3] = 0.0f;
                steps<KIND, H16, 0, NT>(tmp, w[u], act, sc);
#pragma unroll
                for (int i = 0; i < GV_T; i++) {
                    float swg, swg8;
                    if (KIND == MOQ_CK_MXFP8) {
                        const uint8_t *s = (const uint8_t *)a.scales_d + (nb + 16 * i + g) * (Kp / 32) + k0 / 32;
                        swg = d_e8m0_dec(s[0]), swg8 = d_e8m0_dec(s[8 * (Kp / 32)]);
                    } else {
                        swg = swg8 = ((const float *)a.scales_d)[((nb + 16 * i) / 128) * (Kp / 128) + k0 / 128];
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int64_t m = mz + nt * 8 + 2 * t + (e & 1);
                            const float sw = e < 2 ? swg : swg8;
                            float &o = acc[i * NT + nt][e];
                            if (KIND == MOQ_CK_MXFP8) {
                                const float sx = m < a.M ? d_e8m0_dec(fz_s[m * LC + lc]) : 0.0f;
                                o = fmaf(tmp[i * NT + nt][e] * sx, sw, o);
                            } else {
                                const float sx = m < a.M ? ((const float *)fz_s)[m * LC + lc] : 0.0f;
                                o = fmaf(tmp[i * NT + nt][e], sw * sx, o);
                            }
                        }
                }
            } else {
                steps<KIND, H16, 0, NT>(acc, w[u], act, sc);
            }
        }
    }

    pdl_trigger(); /* the next kernel (norm, RoPE, SwiGLU: moq_launch_pdl) may launch during the reduction */
    /* partial sums of the block's warps, [warp][register][lane]; the cluster's rank 0 adds all:
     * per peer in rank order, its warps in order (deterministic). PE: each block first adds its
     * own warps (sum[e], e = 32 · register + lane), then rank 0 loads all peers' sums before the
     * first add. */
    __shared__ float red[GV_WARPS][R][32];
    __shared__ float sum[PE ? R * 32 : 1];
#pragma unroll
    for (int r = 0; r < R; r++) red[warp][r][lane] = acc[r / 4][r % 4];
    cg::cluster_group cl = cg::this_cluster();
    if constexpr (PE) {
        __syncthreads();
        for (int e = threadIdx.x; e < R * 32; e += GV_WARPS * 32) {
            float v = 0.0f;
#pragma unroll
            for (int wi = 0; wi < GV_WARPS; wi++) v += red[wi][e / 32][e % 32];
            sum[e] = v;
        }
    }
    cl.sync();
    if (cl.block_rank() == 0) {
        const int ks = (int)cl.num_blocks();
        constexpr float undo = D::FP4 ? (H16 ? 256.0f : 1024.0f) : 1.0f;
        const float *tok = (const float *)(ws + a.ws.tok);
#pragma unroll
        for (int j = 0; j < NE; j++) {
            const int e = threadIdx.x + j * GV_WARPS * 32, r = e / 32, ln = e % 32;
            float v = 0.0f;
            if constexpr (PE) {
                float part[8];
#pragma unroll
                for (int b = 0; b < 8; b++) part[b] = b == 0 ? sum[e] : b < ks ? cl.map_shared_rank(sum, b)[e] : 0.0f; /* ks <= 8 */
#pragma unroll
                for (int b = 0; b < 8; b++) v += part[b];
            } else { /* every peer's loads in flight first, then added per peer in rank order, its warps in order */
                float pv[8][GV_WARPS];
#pragma unroll
                for (int b = 0; b < 8; b++) {
                    const float *pr = b == 0 ? &red[0][0][0] : cl.map_shared_rank(&red[0][0][0], b < ks ? b : 0);
#pragma unroll
                    for (int wi = 0; wi < GV_WARPS; wi++) pv[b][wi] = b < ks ? pr[(wi * R + r) * 32 + ln] : 0.0f;
                }
#pragma unroll
                for (int b = 0; b < 8; b++)
                    if (b < ks)
#pragma unroll
                        for (int wi = 0; wi < GV_WARPS; wi++) v += pv[b][wi];
            }
            const int i = r / (NT * 4), nt = (r / 4) % NT, ce = r % 4;
            const int64_t n = nb + 16 * i + (ln >> 2) + (ce >= 2 ? 8 : 0), m = mz + nt * 8 + 2 * (ln & 3) + (ce & 1);
            if (n >= a.N || m >= a.M) continue;
            const float y = fmaf(v * undo * ep_rs[j], FUSED ? 1.0f : tok[m], ep_b[j]); /* fused kinds: tok = 1 */
            if (a.y_bf16) ((__nv_bfloat16 *)a.y_d)[m * a.N + n] = __float2bfloat16_rn(y);
            else ((float *)a.y_d)[m * a.N + n] = y;
        }
    }
    cl.sync(); /* peers keep their shared memory until rank 0 has read it */
}

static int sm_count(void) {
    static int n;
    if (!n) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0) n = v;
        else n = 132;
    }
    return n;
}

/* Warps of demand per SM that the K split aims at, per pair kind, for M <= 8 and M > 8, and for
 * fewer than GV_WIDE tiles (N < 8192) or more: the best of 16 / 32 / 64 at N = K = 8192, M = 1 and
 * 16 (2026-12-01 18:26), and for NVFP4 at M = 1 of 16 / 32 on the 8B shapes (21:26: qkv 6144x4096
 * 22 % and down 4096x14336 14 % faster at 16, o 4096x4096 the same split either way, N = 8192 and
 * 28672 6-14 % faster at 32; FP8 best at 16 on every shape but qkv, within 8 % there), on the H200
 * (docs/PERFORMANCE.md). W4A16 keeps 32 below 256 tiles until measured there. */
#define GV_WIDE 256
static const int demand_warps[MOQ_CK_COUNT][2][2] = {
    [MOQ_CK_BF16] = {{16, 16}, {32, 32}},       [MOQ_CK_FP8_TENSOR] = {{16, 16}, {16, 16}}, [MOQ_CK_FP8_ROW] = {{16, 16}, {16, 16}},
    [MOQ_CK_FP8_BLK128] = {{16, 16}, {16, 16}}, [MOQ_CK_NVFP4] = {{16, 32}, {16, 16}},      [MOQ_CK_NVFP4_W4A16] = {{32, 32}, {16, 16}},
    [MOQ_CK_MXFP8] = {{16, 16}, {16, 16}},
};
/* whether the kernel reads the activation codes q (f16 path) or the bf16 A */
static const bool sk_reads_q[MOQ_CK_COUNT] = {
    [MOQ_CK_BF16] = sk<MOQ_CK_BF16>::F16,   [MOQ_CK_FP8_TENSOR] = sk<MOQ_CK_FP8_TENSOR>::F16, [MOQ_CK_FP8_ROW] = sk<MOQ_CK_FP8_ROW>::F16,
    [MOQ_CK_FP8_BLK128] = sk<MOQ_CK_FP8_BLK128>::F16, [MOQ_CK_NVFP4] = sk<MOQ_CK_NVFP4>::F16,
    [MOQ_CK_NVFP4_W4A16] = sk<MOQ_CK_NVFP4_W4A16>::F16, [MOQ_CK_MXFP8] = sk<MOQ_CK_MXFP8>::F16,
};

/* Tuning knob for measurements (read once; docs/PERFORMANCE.md): MOQ_CUDA_GEMV_WARPS = warps of
 * demand per SM that the K split aims at (default: demand_warps). (Issuing the next chunks' weight
 * loads before the current chunks' math was measured too, with no gain, and removed.) */
static int g_warps = -1; /* 0: the table */

/* Fusion per pair kind: whether the kernel can quantize its own activation (FUSED: the
 * quantizer's arithmetic needs nothing beyond the block's K slice; FP8 per-token needs the whole
 * row's amax, not fused) and up to which M it does by default: where it measured faster than the
 * quantizer kernel + this kernel (H200, N = K = 8192, docs/PERFORMANCE.md 2026-12-01 19:00). Every
 * block of a row of tiles quantizes the same K slice again (tiles times the quantizer's work)
 * before its first chunk: that serial step costs more than the launch it saves for NVFP4, BF16
 * and at M >= 2 (FP8) or 4 (FP8 128-blocks). MXFP8 at M <= 2 runs gemv_fma.cu, never fused.
 * NVFP4 W4A4 fuses at M = 1 only where a block's K slice is at most max_k values (one quantizer
 * step per thread: N = K = 4096 at 4 blocks per cluster 13.6 -> 11.9 us, qkv 20.8 -> 17.8, but
 * 2048-value slices 1-9 us slower, 2026-12-01 21:26); 0 = no limit.
 * MOQ_CUDA_GEMV_FUSE_M (0..8, for measurements) replaces max_m of every fusable kind and drops max_k. */
static const struct { bool fusable; int max_m, max_k; } gv_fuse[MOQ_CK_COUNT] = {
    [MOQ_CK_BF16] = {true, 0, 0},       [MOQ_CK_FP8_TENSOR] = {true, 1, 0},  [MOQ_CK_FP8_ROW] = {false, 0, 0}, [MOQ_CK_FP8_BLK128] = {true, 2, 0},
    [MOQ_CK_NVFP4] = {true, 1, 1024},   [MOQ_CK_NVFP4_W4A16] = {true, 0, 0}, [MOQ_CK_MXFP8] = {true, 0, 0},
};
#define GV_FUSE_SMEM (40 << 10) /* activation slices per block, within the 48 KiB default */
static int g_fuse_m = -2;       /* -1: the table */
/* MOQ_CUDA_GEMV_E2M1 (for measurements): 1 (default) NVFP4 W4A4 on f16 (e2m1x8_f16), 0 the bf16
 * bit placement that W4A16 keeps. MOQ_CUDA_GEMV_BALANCE: 1 (default) the K split rounded down to
 * the fewest blocks with the same chunks per warp, 0 the demand's split as it is. */
static int g_e2m1 = -1, g_balance = -1;
/* MOQ_CUDA_GEMV_PE (for measurements): 1 = the PE cluster reduction for the PE_OK kinds; default 0
 * until it has run on the device (written after the last device call of 2026-12-01) */
static int g_pe = -1;
/* per pair kind, host copies of the kernel's constants */
#define GV_ROW(K) {skd<K>::CK, skd<K>::U, sk<K>::F16 ? 1 : 2, sk<K>::SB ? (K == MOQ_CK_MXFP8 ? 1 : 4) : 0, skd<K>::H16_OK, skd<K>::PE_OK, skd<K>::MG}
static const struct { int ck, u, vby, sby; bool h16, pe; int mg; } gv_kind[MOQ_CK_COUNT] = {
    [MOQ_CK_BF16] = GV_ROW(MOQ_CK_BF16), [MOQ_CK_FP8_TENSOR] = GV_ROW(MOQ_CK_FP8_TENSOR), [MOQ_CK_FP8_ROW] = GV_ROW(MOQ_CK_FP8_ROW),
    [MOQ_CK_FP8_BLK128] = GV_ROW(MOQ_CK_FP8_BLK128), [MOQ_CK_NVFP4] = GV_ROW(MOQ_CK_NVFP4), [MOQ_CK_NVFP4_W4A16] = GV_ROW(MOQ_CK_NVFP4_W4A16),
    [MOQ_CK_MXFP8] = GV_ROW(MOQ_CK_MXFP8),
};
static bool h16_of(int kind) {
    if (g_e2m1 < 0) g_e2m1 = moq_cuda_knob("MOQ_CUDA_GEMV_E2M1", 1, 0, 1);
    return gv_kind[kind].h16 && g_e2m1;
}

/* Grid of one call: tiles x ks blocks (ks = the cluster's K split), and whether it is FUSED with
 * its dynamic shared memory. */
typedef struct gv_plan { int64_t tiles, ks; bool fused, h16, pe; size_t smem; int nt, nz; } gv_plan;
static gv_plan plan_of(const moq_cuda_args *a) {
    if (g_warps < 0) g_warps = moq_cuda_knob("MOQ_CUDA_GEMV_WARPS", 0, 1, 256);
    if (g_fuse_m < -1) g_fuse_m = moq_cuda_knob("MOQ_CUDA_GEMV_FUSE_M", -1, 0, 8);
    if (g_balance < 0) g_balance = moq_cuda_knob("MOQ_CUDA_GEMV_BALANCE", 1, 0, 1);
    if (g_pe < 0) g_pe = moq_cuda_knob("MOQ_CUDA_GEMV_PE", 0, 0, 1);
    gv_plan p = {a->Np / (16 * GV_T), 1, false, h16_of(a->kind), g_pe && gv_kind[a->kind].pe, 0, 1, 1};
    const int k = a->kind, nt = a->M <= 8 ? 1 : 2; /* the demand table's column: M <= 8, or more */
    /* n8 tiles of a row group: the fewest that hold M, at most the kind's; then nz groups */
    p.nt = a->M <= 8 ? 1 : a->M <= 16 ? 2 : a->M <= 32 || gv_kind[k].mg < 64 ? 4 : 8;
    p.nz = (int)cdiv(a->M, 8 * p.nt);
    const int64_t nch = a->Kp / gv_kind[k].ck;
    /* about that many warps per SM of demand; each warp at least U chunks; at most 8 blocks per cluster */
    const int warps = g_warps ? g_warps : demand_warps[k][nt - 1][p.tiles >= GV_WIDE];
    int64_t ks = cdiv((int64_t)sm_count() * warps, p.tiles * p.nz * GV_WARPS);
    const int64_t kmax = nch / (GV_WARPS * gv_kind[k].u);
    if (ks > kmax) ks = kmax;
    if (ks > 8) ks = 8;
    if (ks < 1) ks = 1;
    /* e.g. N = K = 4096 FP8: 32 chunks over ks = 5 blocks x 4 warps leave 2 chunks on some warps
     * and 1 on others; ks = 4 gives every warp 2 with a fifth fewer blocks (one wave, less
     * repeated activation quantizing when fused) */
    if (g_balance) ks = cdiv(nch, GV_WARPS * cdiv(nch, GV_WARPS * ks));
    p.ks = ks;
    const int64_t lc = GV_WARPS * cdiv(nch, ks * GV_WARPS);
    const size_t smem = (size_t)(a->M * lc) * (size_t)(gv_kind[k].ck * gv_kind[k].vby + gv_kind[k].sby);
    const int max_m = g_fuse_m >= 0 ? g_fuse_m : gv_fuse[k].max_m, max_k = g_fuse_m >= 0 ? 0 : gv_fuse[k].max_k;
    if (gv_fuse[k].fusable && a->M <= max_m && (!max_k || lc * gv_kind[k].ck <= max_k) && !moq_cuda_gemv_fma_fits(k, a->M) && smem <= GV_FUSE_SMEM)
        p.fused = true, p.smem = smem;
    p.h16 = p.h16 && (p.fused || a->a_f16); /* A in f16: quantized here, or by the quantizer told so */
    return p;
}

template <int KIND, int NT, bool FUSED, bool H16, bool PE> static const char *launch1(const moq_cuda_args *a, const gv_plan &p) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(p.tiles * p.nz), (unsigned)p.ks, 1); /* nz = cdiv(M, 8 NT), as the kernel computes it */
    cfg.blockDim = dim3(GV_WARPS * 32, 1, 1);
    cfg.dynamicSmemBytes = FUSED ? p.smem : 0;
    cfg.stream = (cudaStream_t)a->stream;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = (unsigned)p.ks, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 2;
    void (*k)(moq_cuda_args) = gemv_mma_kernel<KIND, NT, FUSED, H16, PE>;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, *a);
    if (e != cudaSuccess) { /* without the dependent launch (a stream or driver that refuses it) */
        (void)cudaGetLastError();
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, k, *a);
    }
    return moq_cuda_launch_check("gemv kernel launch");
}
template <int KIND, bool H16, bool PE> static const char *launch_u(const moq_cuda_args *a, const gv_plan &p) {
    if constexpr (KIND != MOQ_CK_FP8_ROW) /* gv_fuse[].fusable */
        if (p.fused) return launch1<KIND, 1, true, H16, PE>(a, p); /* M <= 8 */
    switch (p.nt) {
    case 1: return launch1<KIND, 1, false, H16, PE>(a, p);
    case 2: return launch1<KIND, 2, false, H16, PE>(a, p);
    case 4: return launch1<KIND, 4, false, H16, PE>(a, p);
    default:
        if constexpr (skd<KIND>::MG >= 64) return launch1<KIND, 8, false, H16, PE>(a, p);
        return "gemv: 8 n8 tiles asked of a kind that stops at 4";
    }
}
template <int KIND, bool H16> static const char *launch_h(const moq_cuda_args *a, const gv_plan &p) {
    if constexpr (skd<KIND>::PE_OK)
        if (p.pe) return launch_u<KIND, H16, true>(a, p);
    return launch_u<KIND, H16, false>(a, p);
}
template <int KIND> static const char *launch_gemv(const moq_cuda_args *a) {
    const gv_plan p = plan_of(a);
    if constexpr (skd<KIND>::H16_OK)
        if (p.h16) return launch_h<KIND, true>(a, p);
    return launch_h<KIND, false>(a, p);
}

/* MOQ_CUDA_GEMV_MMAX (16 by default; 32 or 64): the largest M the decode kernel takes; above it the
 * GEMM of the row's variant (rows_cuda.c). At 17..64 rows the kernel still streams the weight (row
 * groups of up to 32 or 64 rows, skd<>::MG, each reading it once) where the dequant + cuBLASLt rows
 * write and read a bf16 copy of it. Off by default until it has run on a GPU (2026-12-08). */
static int g_mmax = -1;
extern "C" int64_t moq_cuda_gemv_mmax(int kind) {
    if (g_mmax < 0) {
        const int v = moq_cuda_knob("MOQ_CUDA_GEMV_MMAX", 16, 16, 64);
        g_mmax = v <= 16 ? 16 : v <= 32 ? 32 : 64;
    }
    return kind < 0 || kind >= MOQ_CK_COUNT ? 16 : g_mmax;
}

extern "C" const char *moq_cuda_gemv(const moq_cuda_args *a) {
    if (a->M > moq_cuda_gemv_mmax(a->kind)) return "gemv: M above the decode kernel's limit (MOQ_CUDA_GEMV_MMAX)";
    if (moq_cuda_gemv_fma_fits(a->kind, a->M)) return moq_cuda_gemv_fma(a);
    if (a->Np % (16 * GV_T)) return "gemv: N not padded to 32";
    switch (a->kind) {
    case MOQ_CK_BF16: return launch_gemv<MOQ_CK_BF16>(a);
    case MOQ_CK_FP8_TENSOR: return launch_gemv<MOQ_CK_FP8_TENSOR>(a);
    case MOQ_CK_FP8_ROW: return launch_gemv<MOQ_CK_FP8_ROW>(a);
    case MOQ_CK_FP8_BLK128: return launch_gemv<MOQ_CK_FP8_BLK128>(a);
    case MOQ_CK_NVFP4: return launch_gemv<MOQ_CK_NVFP4>(a);
    case MOQ_CK_NVFP4_W4A16: return launch_gemv<MOQ_CK_NVFP4_W4A16>(a);
    case MOQ_CK_MXFP8: return launch_gemv<MOQ_CK_MXFP8>(a);
    default: return "gemv: unknown pair kind";
    }
}

extern "C" int moq_cuda_gemv_fuses(const moq_cuda_args *a) {
    if (a->M > 8 || a->kind < 0 || a->kind >= MOQ_CK_COUNT || a->Np % (16 * GV_T)) return 0;
    return (int)plan_of(a).fused;
}

/* Whether the decode path reads A in f16 (NVFP4 W4A4 on f16, H16) rather than bf16. */
extern "C" int moq_cuda_gemv_a_f16(int kind, int64_t M) {
    if (kind < 0 || kind >= MOQ_CK_COUNT || M > moq_cuda_gemv_mmax(kind) || moq_cuda_gemv_fma_fits(kind, M)) return 0;
    return (int)h16_of(kind);
}

/* Whether the decode path reads the activation codes q (fp8 kinds, this kernel) rather than A. */
extern "C" int moq_cuda_gemv_reads_q(int kind, int64_t M) {
    if (kind < 0 || kind >= MOQ_CK_COUNT || moq_cuda_gemv_fma_fits(kind, M)) return 0;
    return (int)sk_reads_q[kind];
}
