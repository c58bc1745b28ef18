/* cublaslt.cu — M > 16 through cuBLASLt. FP8 per-tensor and per-token pairs (variant 1): cuBLASLt
 * e4m3 × e4m3 with f32 accumulation into the workspace's D [M, N] (f32), then the epilogue kernel
 * y = D · row_scale[n] · tok[m] (+ bias[n]). In cuBLASLt's column-major terms D^T = W · x^T:
 * A = packed weight codes [Np, Kp] transposed (lda = Kp), B = activation codes [Mp, Kp]
 * (ldb = Kp), m = Np, n = M, k = Kp, D [M, Np] (pads are zero codes; FP8 wants every
 * dimension and leading dimension a multiple of 16). The descriptors live on the stack
 * (cublasLt*Init: no allocation per run); the heuristic is asked per run for the run's M.
 * NVFP4 / MXFP8 / BF16 (variant 2): the weight dequantized to exact bf16 in N chunks, cuBLASLt bf16. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <mutex>

#include "kernels/cuda/common.cuh"

#define LT_WS_BYTES ((size_t)32 << 20)

/* cuBLASLt (540 MB) is dlopen'ed at the first create of a cuBLASLt row, not linked: a program
 * that never uses it (the CLI's check, inspect, CPU layers) maps nothing of it. */
static struct {
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*desc_init)(cublasLtMatmulDesc_t, size_t, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_init)(cublasLtMatrixLayout_t, size_t, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*pref_init)(cublasLtMatmulPreference_t, size_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t, const void *,
                             cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                             const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
} lt;
static cublasLtHandle_t g_lt;
static const char *g_lt_err = "cuBLASLt not initialised";
static std::once_flag g_lt_once;

static const char *lt_load(void) {
    void *h = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return "libcublasLt.so.13 not found (CUDA toolkit or the nvidia-cublas wheel on LD_LIBRARY_PATH)";
#define SYM(f, name) if (!(*(void **)&lt.f = dlsym(h, name))) return "libcublasLt lacks " name
    SYM(create, "cublasLtCreate");
    SYM(desc_init, "cublasLtMatmulDescInit_internal");
    SYM(desc_set, "cublasLtMatmulDescSetAttribute");
    SYM(layout_init, "cublasLtMatrixLayoutInit_internal");
    SYM(pref_init, "cublasLtMatmulPreferenceInit_internal");
    SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    SYM(matmul, "cublasLtMatmul");
#undef SYM
    return lt.create(&g_lt) == CUBLAS_STATUS_SUCCESS ? NULL : "cublasLtCreate failed";
}


extern "C" const char *moq_cuda_lt_init(void) {
    std::call_once(g_lt_once, [] { g_lt_err = lt_load(); });
    return g_lt_err;
}

/* y[m, n] = D[m·sm + n·sn] · row_scale[n] · tok[m] (+ bias[n]). */
__global__ void __launch_bounds__(256) lt_epilogue(const float *D, int64_t M, int64_t N, int64_t sm, int64_t sn, const float *tok,
                                                   const float *rs, const float *bias, void *y, int ybf) {
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i >= M * N) return;
    const int64_t m = i / N, n = i % N;
    const float v = fmaf(D[m * sm + n * sn] * rs[n], tok[m], bias[n]);
    if (ybf) ((__nv_bfloat16 *)y)[i] = __float2bfloat16_rn(v);
    else ((float *)y)[i] = v;
}

/* D^T [wrows, Mp] (ld Np) = W [wrows, Kp] (op T) · X [Mp, Kp]ᵀ, elements of type ty (e4m3 codes or
 * bf16), f32 accumulation and output. NULL on success, else the failing call. */
static const char *lt_gemm(const moq_cuda_args *a, cudaDataType_t ty, const void *W, int64_t wrows, const void *X, float *D, char *msg,
                           size_t msg_len) {
    char *ws = (char *)a->ws_d;
    const int64_t Mp = moq_cuda_mpad(a->M);
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
    cublasLtMatmulPreferenceOpaque_t pref;
    cublasStatus_t st;
    const char *tn = ty == CUDA_R_16BF ? "bf16" : "fp8";
#define LT(call)                                                                                                  \
    do {                                                                                                          \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                                             \
            snprintf(msg, msg_len, "cuBLASLt %s: status %d (%s n=%lld m=%lld k=%lld)", #call, (int)st, tn,         \
                     (long long)wrows, (long long)a->M, (long long)a->Kp);                                          \
            return msg;                                                                                           \
        }                                                                                                         \
    } while (0)
    LT(lt.desc_init(&op, sizeof op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    LT(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    LT(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    LT(lt.layout_init(&la, sizeof la, ty, (uint64_t)a->Kp, (uint64_t)wrows, a->Kp)); /* pads are zero rows */
    LT(lt.layout_init(&lb, sizeof lb, ty, (uint64_t)a->Kp, (uint64_t)Mp, a->Kp));
    LT(lt.layout_init(&ld, sizeof ld, CUDA_R_32F, (uint64_t)wrows, (uint64_t)Mp, a->Np));
    LT(lt.pref_init(&pref, sizeof pref));
    const size_t wsb = LT_WS_BYTES;
    LT(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h;
    int nres = 0;
    LT(lt.heuristic(g_lt, &op, &la, &lb, &ld, &ld, &pref, 1, &h, &nres));
    if (nres < 1) {
        snprintf(msg, msg_len, "cuBLASLt has no %s algorithm for n=%lld m=%lld k=%lld", tn, (long long)wrows, (long long)a->M, (long long)a->Kp);
        return msg;
    }
    const float one = 1.0f, zero = 0.0f;
    LT(lt.matmul(g_lt, &op, &one, W, &la, X, &lb, &zero, D, &ld, D, &ld, &h.algo, ws + a->ws.lt, wsb, (cudaStream_t)a->stream));
#undef LT
    return NULL;
}

static const char *lt_finish(const moq_cuda_args *a) {
    const int64_t n = a->M * a->N;
    char *ws = (char *)a->ws_d;
    lt_epilogue<<<(unsigned)cdiv(n, 256), 256, 0, (cudaStream_t)a->stream>>>((const float *)(ws + a->ws.d), a->M, a->N, a->Np, 1, (const float *)(ws + a->ws.tok),
                                                 a->row_scale_d, a->bias_d, a->y_d, a->y_bf16);
    return moq_cuda_launch_check("cuBLASLt epilogue kernel launch");
}

/* FP8 straight into y: the per-row weight scale and the per-token scale as cuBLASLt's outer-vector
 * scales of A and B (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F), D = y (bf16 or f32, [M, N]): no f32
 * D and no epilogue kernel. Only without bias and when every dimension suits FP8 (multiples of 16);
 * returns false when cuBLASLt declines (no algorithm, or a refused attribute): the D path runs then. */
static bool lt_fp8_direct(const moq_cuda_args *a) {
    if (a->has_bias || a->N % 16 || a->M % 16) return false;
    char *ws = (char *)a->ws_d;
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
    cublasLtMatmulPreferenceOpaque_t pref;
#define LTD(call) \
    if ((call) != CUBLAS_STATUS_SUCCESS) return false
    LTD(lt.desc_init(&op, sizeof op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const void *sa = a->row_scale_d, *sb = ws + a->ws.tok;
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec));
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec));
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
    LTD(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    const cudaDataType_t yt = a->y_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    LTD(lt.layout_init(&la, sizeof la, CUDA_R_8F_E4M3, (uint64_t)a->Kp, (uint64_t)a->N, a->Kp));
    LTD(lt.layout_init(&lb, sizeof lb, CUDA_R_8F_E4M3, (uint64_t)a->Kp, (uint64_t)a->M, a->Kp));
    LTD(lt.layout_init(&ld, sizeof ld, yt, (uint64_t)a->N, (uint64_t)a->M, a->N));
    LTD(lt.pref_init(&pref, sizeof pref));
    const size_t wsb = LT_WS_BYTES;
    LTD(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h;
    int nres = 0;
    LTD(lt.heuristic(g_lt, &op, &la, &lb, &ld, &ld, &pref, 1, &h, &nres));
    if (nres < 1) return false;
    const float one = 1.0f, zero = 0.0f;
    LTD(lt.matmul(g_lt, &op, &one, a->codes_d, &la, ws + a->ws.q, &lb, &zero, a->y_d, &ld, a->y_d, &ld, &h.algo, ws + a->ws.lt, wsb, (cudaStream_t)a->stream));
#undef LTD
    return true;
}

extern "C" const char *moq_cuda_gemm_cublaslt(const moq_cuda_args *a) {
    static thread_local char msg[320];
    const char *e = moq_cuda_lt_init();
    if (e) return e;
    char *ws = (char *)a->ws_d;
    if (lt_fp8_direct(a)) return moq_cuda_launch_check("cuBLASLt fp8 matmul");
    e = lt_gemm(a, CUDA_R_8F_E4M3, a->codes_d, a->Np, ws + a->ws.q, (float *)(ws + a->ws.d), msg, sizeof msg);
    return e ? e : lt_finish(a);
}

/* rows n0 .. n0+rows-1 of the packed weight -> exact bf16 values · block scales [rows, Kp]:
 * e2m1 × e4m3 (NVFP4), e4m3 × 2^(e-127) (MXFP8) and e4m3 (FP8; its scales are the epilogue's)
 * are exact in f32 and in bf16. 8 values per thread. */
template <int KIND>
__global__ void __launch_bounds__(256) dequant_bf16(const uint8_t *codes, const uint8_t *scales, int64_t n0, int64_t rows, int64_t Kp,
                                                    __nv_bfloat16 *out) {
    const int64_t i = ((int64_t)blockIdx.x * 256 + threadIdx.x) * 8, n = n0 + i / Kp, k = i % Kp;
    if (i >= rows * Kp) return;
    float v[8];
    if (KIND == MOQ_CK_MXFP8 || KIND == MOQ_CK_FP8_TENSOR) { /* FP8 per-tensor / per-channel: no block scale */
        const uint2 c = __ldg((const uint2 *)(codes + n * Kp + k));
        const float s = KIND == MOQ_CK_MXFP8 ? d_e8m0_dec(scales[n * (Kp / 32) + k / 32]) : 1.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fmul_rn(d_e4m3_dec(((j < 4 ? c.x : c.y) >> (8 * (j & 3))) & 0xFF), s);
    } else {
        const uint32_t c = __ldg((const uint32_t *)(codes + n * (Kp / 2) + k / 2));
        const float s = d_e4m3_dec(scales[n * (Kp / 16) + k / 16]);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fmul_rn(d_e2m1_dec((c >> (4 * j)) & 0xF), s);
    }
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        w[j] = *(const uint32_t *)&h;
    }
    *(uint4 *)(out + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" int64_t moq_cuda_wb_rows(int64_t Np, int64_t Kp) {
    int64_t r = ((int64_t)32 << 20) / Kp / 128 * 128; /* a 64 MiB bf16 chunk of weight rows */
    if (r < 128) r = 128;
    return r < Np ? r : Np;
}

/* NVFP4 (W4A4, W4A16), MXFP8, FP8 per-tensor / per-channel and BF16 pairs at M > 16: the weight dequantized to exact bf16 N-chunk by
 * N-chunk into the workspace (BF16 weights as they are), cuBLASLt bf16 × bf16 (the exact bf16
 * activation A) with f32 accumulation into D, then the epilogue kernel. */
extern "C" const char *moq_cuda_gemm_dequant_lt(const moq_cuda_args *a) {
    static thread_local char msg[320];
    const char *e = moq_cuda_lt_init();
    if (e) return e;
    char *ws = (char *)a->ws_d;
    const void *X = ws + a->ws.a;
    float *D = (float *)(ws + a->ws.d);
    if (a->kind == MOQ_CK_BF16) {
        e = lt_gemm(a, CUDA_R_16BF, a->codes_d, a->Np, X, D, msg, sizeof msg);
        return e ? e : lt_finish(a);
    }
    const bool fp8 = a->kind == MOQ_CK_FP8_TENSOR || a->kind == MOQ_CK_FP8_ROW;
    if (a->kind != MOQ_CK_NVFP4 && a->kind != MOQ_CK_NVFP4_W4A16 && a->kind != MOQ_CK_MXFP8 && !fp8) return "gemm_dequant_lt: pair kind without an exact bf16 dequantization";
    const int64_t R = moq_cuda_wb_rows(a->Np, a->Kp);
    __nv_bfloat16 *wb = (__nv_bfloat16 *)(ws + a->ws.wb);
    for (int64_t n0 = 0; n0 < a->Np; n0 += R) {
        const int64_t rows = a->Np - n0 < R ? a->Np - n0 : R;
        const unsigned blocks = (unsigned)cdiv(rows * a->Kp / 8, 256);
        if (fp8) dequant_bf16<MOQ_CK_FP8_TENSOR><<<blocks, 256, 0, (cudaStream_t)a->stream>>>((const uint8_t *)a->codes_d, (const uint8_t *)a->scales_d, n0, rows, a->Kp, wb);
        else if (a->kind == MOQ_CK_MXFP8) dequant_bf16<MOQ_CK_MXFP8><<<blocks, 256, 0, (cudaStream_t)a->stream>>>((const uint8_t *)a->codes_d, (const uint8_t *)a->scales_d, n0, rows, a->Kp, wb);
        else dequant_bf16<MOQ_CK_NVFP4><<<blocks, 256, 0, (cudaStream_t)a->stream>>>((const uint8_t *)a->codes_d, (const uint8_t *)a->scales_d, n0, rows, a->Kp, wb);
        if ((e = moq_cuda_launch_check("dequant_bf16 kernel launch"))) return e;
        if ((e = lt_gemm(a, CUDA_R_16BF, wb, rows, X, D + n0, msg, sizeof msg))) return e;
    }
    return lt_finish(a);
}
