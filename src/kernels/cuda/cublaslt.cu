/* cublaslt.cu — FP8 per-tensor and per-token pairs at M > 16: cuBLASLt e4m3 × e4m3 with f32
 * accumulation into the workspace's D [M, N] (f32), then the epilogue kernel
 * y = D · row_scale[n] · tok[m] (+ bias[n]). In cuBLASLt's column-major terms D^T = W · x^T:
 * A = packed weight codes [Np, Kp] transposed (lda = Kp), B = activation codes [Mp, Kp]
 * (ldb = Kp), m = Np, n = M, k = Kp, D [M, Np] (pads are zero codes; FP8 wants every
 * dimension and leading dimension a multiple of 16). The descriptors live on the stack
 * (cublasLt*Init: no allocation per run); the heuristic is asked per run for the run's M. */
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

/* swap = 0: A = W (op T), B = x, D [Mp, Np]; swap = 1: A = x (op T), B = W, D [Np, Mp]. NULL on
 * success, else the failing call. */
static const char *lt_try(const moq_cuda_args *a, int swap, char *msg, size_t msg_len) {
    char *ws = (char *)a->ws_d;
    float *D = (float *)(ws + a->ws.d);
    const int64_t Mp = moq_cuda_mpad(a->M);
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
    cublasLtMatmulPreferenceOpaque_t pref;
    cublasStatus_t st;
#define LT(call)                                                                                                  \
    do {                                                                                                          \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                                             \
            snprintf(msg, msg_len, "cuBLASLt %s: status %d (fp8 n=%lld m=%lld k=%lld%s)", #call, (int)st,          \
                     (long long)a->N, (long long)a->M, (long long)a->Kp, swap ? ", swapped" : "");                 \
            return msg;                                                                                           \
        }                                                                                                         \
    } while (0)
    LT(lt.desc_init(&op, sizeof op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    LT(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    LT(lt.desc_set(&op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    const void *W = a->codes_d, *X = ws + a->ws.q;
    const int64_t rows_a = swap ? Mp : a->Np, rows_b = swap ? a->Np : Mp; /* pads are zero rows */
    LT(lt.layout_init(&la, sizeof la, CUDA_R_8F_E4M3, (uint64_t)a->Kp, (uint64_t)rows_a, a->Kp));
    LT(lt.layout_init(&lb, sizeof lb, CUDA_R_8F_E4M3, (uint64_t)a->Kp, (uint64_t)rows_b, a->Kp));
    LT(lt.layout_init(&ld, sizeof ld, CUDA_R_32F, (uint64_t)rows_a, (uint64_t)rows_b, swap ? Mp : a->Np));
    LT(lt.pref_init(&pref, sizeof pref));
    const size_t wsb = LT_WS_BYTES;
    LT(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h;
    int nres = 0;
    LT(lt.heuristic(g_lt, &op, &la, &lb, &ld, &ld, &pref, 1, &h, &nres));
    if (nres < 1) {
        snprintf(msg, msg_len, "cuBLASLt has no fp8 algorithm for n=%lld m=%lld k=%lld", (long long)a->N, (long long)a->M, (long long)a->Kp);
        return msg;
    }
    const float one = 1.0f, zero = 0.0f;
    LT(lt.matmul(g_lt, &op, &one, swap ? X : W, &la, swap ? W : X, &lb, &zero, D, &ld, D, &ld, &h.algo, ws + a->ws.lt, wsb, (cudaStream_t)a->stream));
#undef LT
    return NULL;
}

extern "C" const char *moq_cuda_gemm_cublaslt(const moq_cuda_args *a) {
    static thread_local char msg[1][320];
    const char *e = moq_cuda_lt_init();
    if (e) return e;
    const int swap = 0;
    e = lt_try(a, swap, msg[0], sizeof msg[0]);
    if (e) return e;
    const int64_t n = a->M * a->N, Mp = moq_cuda_mpad(a->M);
    char *ws = (char *)a->ws_d;
    lt_epilogue<<<(unsigned)cdiv(n, 256), 256, 0, (cudaStream_t)a->stream>>>((const float *)(ws + a->ws.d), a->M, a->N, swap ? 1 : a->Np, swap ? Mp : 1,
                                                 (const float *)(ws + a->ws.tok), a->row_scale_d, a->bias_d, a->y_d, a->y_bf16);
    return moq_cuda_launch_check("cuBLASLt epilogue kernel launch");
}
