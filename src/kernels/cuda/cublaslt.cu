/* cublaslt.cu — M > 16 through cuBLASLt. In cuBLASLt's column-major terms y^T = W · x^T: A = the
 * weight [rows, Kp] transposed (lda = Kp), B = the activation [M, Kp] (ldb = Kp), m = weight rows,
 * n = tokens, k = Kp; an output [M, N] row-major is column-major [N, M] with ld N.
 * FP8 per-tensor and per-token pairs (variant 1): cuBLASLt e4m3 × e4m3 straight into y with
 * cuBLASLt's scales (scalar or outer-vector, lt_fp8_direct) when there is no bias and M, N are
 * multiples of 16 (FP8 wants them so), else into the workspace's f32 D [M, Np] (pads are zero
 * codes), then the epilogue kernel y = D · row_scale[n] · tok[m] (+ bias[n]).
 * NVFP4 / MXFP8 / FP8 / BF16 (variant 2): the weight dequantized to exact bf16 in N chunks, cuBLASLt
 * bf16 straight into y (alpha = row scale, bias epilogue) unless the pair has per-token scales,
 * else the same D + epilogue. The descriptors live on the stack (cublasLt*Init: no allocation per
 * run); the heuristic's algorithm is cached per descriptor set (lt_key). */
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
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

/* Knobs for before/after measurements (read once; docs/PERFORMANCE.md, cuda_api.h). Each new path is
 * on by default since the H100 run of 2026-12-07 22:25 UTC (tests pass with every setting; 8192^3
 * BF16 0.76 -> 0.95x, NVFP4 0.75 -> 0.87x bf16 torch.matmul): =0 turns one off (the old path),
 * DIRECT=2 makes the alpha always a device vector. */
static int knob_direct(void) { static const int v = moq_cuda_knob("MOQ_CUDA_LT_DIRECT", 1, 0, 2); return v; }
static int knob_scalar(void) { static const int v = moq_cuda_knob("MOQ_CUDA_LT_SCALAR", 1, 0, 1); return v; }
static int knob_cache(void) { static const int v = moq_cuda_knob("MOQ_CUDA_LT_CACHE", 1, 0, 1); return v; }
static int knob_x(void) { static const int v = moq_cuda_knob("MOQ_CUDA_LT_X", 1, 0, 1); return v; }

static std::atomic<unsigned long long> g_stat[MOQ_CUDA_LT_STAT_COUNT];
static void stat(int i) { g_stat[i].fetch_add(1, std::memory_order_relaxed); }
extern "C" void moq_cuda_lt_stats(unsigned long long out[MOQ_CUDA_LT_STAT_COUNT]) {
    for (int i = 0; i < MOQ_CUDA_LT_STAT_COUNT; i++) out[i] = g_stat[i].load(std::memory_order_relaxed);
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

/* One cuBLASLt GEMM in column-major terms: D [m, n] (ld ldd, type dt) = alpha · op_T(A) · B
 * (+ bias[i] per row i of D), A [k, m] (ld lda) transposed, B [k, n] (ld ldb), types ab, f32
 * compute and scale type. For us m = weight rows, n = tokens, k = Kp, so D is y or D row-major.
 *   ptr_mode  CUBLASLT_POINTER_MODE_HOST (alpha: a host f32) or
 *             CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO (alpha: device f32 [m])
 *   scale     LT_SCALE_SCALAR: A_SCALE_POINTER / B_SCALE_POINTER, one device f32 each (FP8);
 *             LT_SCALE_OUTER: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, device f32 [m] and [n]
 *   bias      NULL, or CUBLASLT_EPILOGUE_BIAS with a device vector of bias_t [m] */
enum { LT_SCALE_NONE = 0, LT_SCALE_SCALAR, LT_SCALE_OUTER };
struct lt_plan {
    cudaDataType_t ab, dt, bias_t;
    int32_t ptr_mode, scale;
    int64_t m, n, k, lda, ldb, ldd;
    const void *A, *B, *alpha, *bias, *sa, *sb;
    void *D;
};

/* The heuristic's answer depends on the descriptors (types, sizes, leading dimensions, pointer and
 * scale modes, epilogue), on the alignment of the pointers (the preferences below) and on the
 * device (one process may drive several under --tp), so that is the key. A fixed table (LT_CACHE_SLOTS, open addressing, one mutex): no allocation ever; when it
 * is full, a new shape asks the heuristic on every call (as with MOQ_CUDA_LT_CACHE=0). Negative
 * answers (no algorithm) are kept too, so a declined direct path costs one lookup per call. */
struct lt_key {
    int32_t ab, dt, bias_t, ptr_mode, scale, has_bias, al_a, al_b, al_d, al_bias, al_alpha, dev;
    int64_t m, n, k, lda, ldb, ldd;
};
#define LT_CACHE_SLOTS 512
static struct lt_slot {
    bool used, found;
    cublasStatus_t st; /* the heuristic call's status */
    lt_key key;
    cublasLtMatmulAlgo_t algo;
} g_cache[LT_CACHE_SLOTS];
static std::mutex g_cache_mu;

static int32_t lt_align(const void *p) { /* the pointer's alignment in bytes, at most 256 */
    const uintptr_t u = (uintptr_t)p;
    return u & 255 ? (int32_t)(u & (~u + 1)) : 256;
}
static lt_key lt_key_of(const lt_plan *p) {
    lt_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.ab = p->ab, k.dt = p->dt, k.bias_t = p->bias ? p->bias_t : 0, k.ptr_mode = p->ptr_mode, k.scale = p->scale, k.has_bias = p->bias != NULL;
    k.al_a = lt_align(p->A), k.al_b = lt_align(p->B), k.al_d = lt_align(p->D), k.al_bias = p->bias ? lt_align(p->bias) : 0;
    k.al_alpha = p->ptr_mode == CUBLASLT_POINTER_MODE_HOST ? 0 : lt_align(p->alpha);
    k.m = p->m, k.n = p->n, k.k = p->k, k.lda = p->lda, k.ldb = p->ldb, k.ldd = p->ldd;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
    k.dev = dev;
    return k;
}
static uint32_t lt_hash(const lt_key *k) { /* FNV-1a */
    const unsigned char *b = (const unsigned char *)k;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}
/* the slot holding k, else the empty slot where it would go, else NULL (full); under g_cache_mu */
static lt_slot *lt_slot_of(const lt_key *k) {
    const uint32_t h = lt_hash(k);
    for (uint32_t i = 0; i < LT_CACHE_SLOTS; i++) {
        lt_slot *s = &g_cache[(h + i) % LT_CACHE_SLOTS];
        if (!s->used || memcmp(&s->key, k, sizeof *k) == 0) return s;
    }
    return NULL;
}

struct lt_descs {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
};

/* The descriptors of p (cublasLt*Init on the stack: no allocation). CUBLAS_STATUS_SUCCESS or the
 * first refusal, with *what the call that refused. */
static cublasStatus_t lt_build(const lt_plan *p, lt_descs *d, const char **what) {
    cublasStatus_t st;
#define LTB(call)                                              \
    do {                                                       \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {          \
            *what = #call;                                     \
            return st;                                         \
        }                                                      \
    } while (0)
    LTB(lt.desc_init(&d->op, sizeof d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    if (p->ptr_mode != CUBLASLT_POINTER_MODE_HOST) LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &p->ptr_mode, sizeof p->ptr_mode));
    if (p->bias) {
        const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bt = p->bias_t;
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias));
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (p->scale == LT_SCALE_OUTER) {
        const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec));
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec));
    }
    if (p->scale != LT_SCALE_NONE) { /* LT_SCALE_SCALAR: the default mode, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F */
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->sa, sizeof p->sa));
        LTB(lt.desc_set(&d->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->sb, sizeof p->sb));
    }
    LTB(lt.layout_init(&d->la, sizeof d->la, p->ab, (uint64_t)p->k, (uint64_t)p->m, p->lda));
    LTB(lt.layout_init(&d->lb, sizeof d->lb, p->ab, (uint64_t)p->k, (uint64_t)p->n, p->ldb));
    LTB(lt.layout_init(&d->ld, sizeof d->ld, p->dt, (uint64_t)p->m, (uint64_t)p->n, p->ldd));
#undef LTB
    return CUBLAS_STATUS_SUCCESS;
}

/* cuBLASLt's best algorithm for p (cached unless MOQ_CUDA_LT_CACHE=0): SUCCESS with *found 0 or 1,
 * or the status of a refused preference / heuristic call (a heuristic's refusal, e.g.
 * CUBLAS_STATUS_NOT_SUPPORTED for a configuration it has nothing for, is cached as well). */
static cublasStatus_t lt_algo(const lt_plan *p, lt_descs *d, cublasLtMatmulAlgo_t *algo, int *found, const char **what) {
    const bool cache = knob_cache() != 0;
    const lt_key key = lt_key_of(p);
    if (cache) {
        std::lock_guard<std::mutex> g(g_cache_mu);
        const lt_slot *s = lt_slot_of(&key);
        if (s && s->used) {
            stat(MOQ_CUDA_LT_CACHE_HIT);
            *found = s->found;
            if (s->found) *algo = s->algo;
            if (s->st != CUBLAS_STATUS_SUCCESS) *what = "lt.heuristic (cached)";
            return s->st;
        }
    }
    cublasLtMatmulPreferenceOpaque_t pref;
    cublasStatus_t st;
#define LTP(call)                                              \
    do {                                                       \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {          \
            *what = #call;                                     \
            return st;                                         \
        }                                                      \
    } while (0)
    LTP(lt.pref_init(&pref, sizeof pref));
    const size_t wsb = LT_WS_BYTES;
    const uint32_t al_a = (uint32_t)key.al_a, al_b = (uint32_t)key.al_b, al_d = (uint32_t)key.al_d;
    LTP(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    LTP(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LTP(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LTP(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    LTP(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
#undef LTP
    cublasLtMatmulHeuristicResult_t h;
    memset(&h, 0, sizeof h);
    int nres = 0;
    stat(MOQ_CUDA_LT_HEURISTIC);
    st = lt.heuristic(g_lt, &d->op, &d->la, &d->lb, &d->ld, &d->ld, &pref, 1, &h, &nres);
    *found = st == CUBLAS_STATUS_SUCCESS && nres >= 1;
    if (*found) *algo = h.algo;
    if (st != CUBLAS_STATUS_SUCCESS) *what = "lt.heuristic(g_lt, &d->op, &d->la, &d->lb, &d->ld, &d->ld, &pref, 1, &h, &nres)";
    if (cache) {
        std::lock_guard<std::mutex> g(g_cache_mu);
        lt_slot *s = lt_slot_of(&key);
        if (s && !s->used) s->used = true, s->found = *found, s->st = st, s->key = key, s->algo = h.algo;
    }
    return st;
}

/* Runs p on a's stream. 0: enqueued; 1: cuBLASLt declined (a refused attribute, or no algorithm:
 * nothing was enqueued); 2: cublasLtMatmul failed. With msg: what failed, for the caller's error. */
enum { LT_OK = 0, LT_DECLINED = 1, LT_FAILED = 2 };
static int lt_run(const lt_plan *p, const moq_cuda_args *a, bool enqueue, char *msg, size_t msg_len) {
    lt_descs d;
    const char *what = "";
    cublasLtMatmulAlgo_t algo;
    int found = 0;
    cublasStatus_t st = lt_build(p, &d, &what);
    if (st == CUBLAS_STATUS_SUCCESS) st = lt_algo(p, &d, &algo, &found, &what);
    const char *tn = p->ab == CUDA_R_16BF ? "bf16" : "fp8";
    if (st != CUBLAS_STATUS_SUCCESS || !found) {
        if (msg && st != CUBLAS_STATUS_SUCCESS)
            snprintf(msg, msg_len, "cuBLASLt %s: status %d (%s m=%lld n=%lld k=%lld)", what, (int)st, tn, (long long)p->m, (long long)p->n, (long long)p->k);
        else if (msg)
            snprintf(msg, msg_len, "cuBLASLt has no %s algorithm for m=%lld n=%lld k=%lld", tn, (long long)p->m, (long long)p->n, (long long)p->k);
        return LT_DECLINED;
    }
    if (!enqueue) return LT_OK;
    const float zero = 0.0f;
    st = lt.matmul(g_lt, &d.op, p->alpha, p->A, &d.la, p->B, &d.lb, &zero, p->D, &d.ld, p->D, &d.ld, &algo, (char *)a->ws_d + a->ws.lt, LT_WS_BYTES,
                   (cudaStream_t)a->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        if (msg) snprintf(msg, msg_len, "cuBLASLt cublasLtMatmul: status %d (%s m=%lld n=%lld k=%lld)", (int)st, tn, (long long)p->m, (long long)p->n, (long long)p->k);
        return LT_FAILED;
    }
    return LT_OK;
}

static const float g_one = 1.0f;

/* D^T [wrows, Mp] (ld Np) = W [wrows, Kp] (op T) · X [Mp, Kp]ᵀ, elements of type ty (e4m3 codes or
 * bf16), f32 accumulation and output. NULL on success, else the failing call. */
static const char *lt_gemm(const moq_cuda_args *a, cudaDataType_t ty, const void *W, int64_t wrows, const void *X, float *D, char *msg,
                           size_t msg_len) {
    lt_plan p = {};
    p.ab = ty, p.dt = CUDA_R_32F, p.ptr_mode = CUBLASLT_POINTER_MODE_HOST, p.scale = LT_SCALE_NONE;
    p.m = wrows, p.n = moq_cuda_mpad(a->M), p.k = a->Kp, p.lda = a->Kp, p.ldb = a->Kp, p.ldd = a->Np; /* pads are zero rows */
    p.A = W, p.B = X, p.D = D, p.alpha = &g_one;
    return lt_run(&p, a, true, msg, msg_len) == LT_OK ? NULL : msg;
}

static const char *lt_finish(const moq_cuda_args *a) {
    const int64_t n = a->M * a->N;
    char *ws = (char *)a->ws_d;
    stat(MOQ_CUDA_LT_D_PATH);
    lt_epilogue<<<(unsigned)cdiv(n, 256), 256, 0, (cudaStream_t)a->stream>>>((const float *)(ws + a->ws.d), a->M, a->N, a->Np, 1, (const float *)(ws + a->ws.tok),
                                                 a->row_scale_d, a->bias_d, a->y_d, a->y_bf16);
    return moq_cuda_launch_check("cuBLASLt epilogue kernel launch");
}

/* FP8 straight into y, D = y (bf16 or f32, [M, N]): no f32 D and no epilogue kernel. Scales:
 * scalar (A_SCALE_POINTER = &row_scale[0] = s_in · s_w, B_SCALE_POINTER = &tok[0] = 1) when the pair's
 * activation scale is static and every row scale is the same (FP8 per-tensor, one weight scale:
 * cuBLASLt's scalar-scaled kernels, those of torch._scaled_mm; MOQ_CUDA_LT_SCALAR=0 turns it off),
 * else outer vectors (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: row_scale [N] of A, tok [M] of B).
 * Only without bias and when every dimension suits FP8 (multiples of 16); returns false when
 * cuBLASLt declines (no algorithm, or a refused attribute): the D path runs then. */
static bool lt_fp8_direct(const moq_cuda_args *a) {
    if (a->has_bias || a->N % 16 || a->M % 16) return false;
    char *ws = (char *)a->ws_d;
    const bool scalar = knob_scalar() && a->kind == MOQ_CK_FP8_TENSOR && a->rs_uniform;
    lt_plan p = {};
    p.ab = CUDA_R_8F_E4M3, p.dt = a->y_bf16 ? CUDA_R_16BF : CUDA_R_32F, p.ptr_mode = CUBLASLT_POINTER_MODE_HOST;
    p.scale = scalar ? LT_SCALE_SCALAR : LT_SCALE_OUTER;
    p.m = a->N, p.n = a->M, p.k = a->Kp, p.lda = a->Kp, p.ldb = a->Kp, p.ldd = a->N;
    p.A = a->codes_d, p.B = ws + a->ws.q, p.D = a->y_d, p.alpha = &g_one, p.sa = a->row_scale_d, p.sb = ws + a->ws.tok;
    if (lt_run(&p, a, true, NULL, 0) != LT_OK) {
        stat(MOQ_CUDA_LT_DECLINED);
        return false;
    }
    stat(scalar ? MOQ_CUDA_LT_FP8_SCALAR : MOQ_CUDA_LT_FP8_OUTER);
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

/* BF16 and NVFP4 W4A16 with bf16 x: A would be x itself (aq8 copies the values), so the direct
 * path reads x (ldb = K, k = K: the weight's pad columns are skipped) and the caller skips the
 * quantizer (rows_cuda.c), saving x's read and A's write (M·K·4 bytes). Needs K % 8 (16-byte
 * columns) and a 16-byte aligned x; the D path, if cuBLASLt declines, runs the quantizer first.
 * MOQ_CUDA_LT_X=0 turns this off (A as before). */
extern "C" int moq_cuda_dq_reads_x(const moq_cuda_args *a) {
    return knob_direct() && knob_x() && a->M > 16 && (a->kind == MOQ_CK_BF16 || a->kind == MOQ_CK_NVFP4_W4A16) && a->x_bf16 && a->K % 8 == 0 &&
           (uintptr_t)a->x_d % 16 == 0;
}

/* rows n0 .. n0+rows-1 of the weight dequantized into wb (one launch) */
static const char *dequant_chunk(const moq_cuda_args *a, int64_t n0, int64_t rows, __nv_bfloat16 *wb) {
    const unsigned blocks = (unsigned)cdiv(rows * a->Kp / 8, 256);
    const uint8_t *c = (const uint8_t *)a->codes_d, *sc = (const uint8_t *)a->scales_d;
    const cudaStream_t s = (cudaStream_t)a->stream;
    if (a->kind == MOQ_CK_FP8_TENSOR || a->kind == MOQ_CK_FP8_ROW) dequant_bf16<MOQ_CK_FP8_TENSOR><<<blocks, 256, 0, s>>>(c, sc, n0, rows, a->Kp, wb);
    else if (a->kind == MOQ_CK_MXFP8) dequant_bf16<MOQ_CK_MXFP8><<<blocks, 256, 0, s>>>(c, sc, n0, rows, a->Kp, wb);
    else dequant_bf16<MOQ_CK_NVFP4><<<blocks, 256, 0, s>>>(c, sc, n0, rows, a->Kp, wb);
    return moq_cuda_launch_check("dequant_bf16 kernel launch");
}

/* y rows n0 .. n0+v-1 (of N; column-major D [v, M] at y + n0, ld N) = alpha · W_chunk · Aᵀ (+ bias):
 * alpha the host scalar rs_value when the row scales are uniform, else the device vector
 * row_scale[n0 ..] (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO: length = cuBLASLt's m = v);
 * the f32 bias through CUBLASLT_EPILOGUE_BIAS (bias type f32 with bf16 or f32 y). */
static lt_plan direct_plan(const moq_cuda_args *a, const void *W, int64_t n0, int64_t v) {
    const bool vec = knob_direct() == 2 || !a->rs_uniform, xd = moq_cuda_dq_reads_x(a);
    lt_plan p = {};
    p.ab = CUDA_R_16BF, p.dt = a->y_bf16 ? CUDA_R_16BF : CUDA_R_32F, p.bias_t = CUDA_R_32F, p.scale = LT_SCALE_NONE;
    p.ptr_mode = vec ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO : CUBLASLT_POINTER_MODE_HOST;
    p.m = v, p.n = a->M, p.k = xd ? a->K : a->Kp, p.lda = a->Kp, p.ldb = xd ? a->K : a->Kp, p.ldd = a->N;
    p.A = W, p.B = xd ? a->x_d : (const char *)a->ws_d + a->ws.a, p.D = (char *)a->y_d + n0 * (a->y_bf16 ? 2 : 4);
    p.alpha = vec ? (const void *)(a->row_scale_d + n0) : (const void *)&a->rs_value;
    p.bias = a->has_bias ? a->bias_d + n0 : NULL;
    return p;
}

/* The direct path of moq_cuda_gemm_dequant_lt: false (nothing left half-done in y that the D path
 * would not overwrite) when cuBLASLt declines a chunk's plan or fails; *e set on a launch error. */
static bool dequant_direct(const moq_cuda_args *a, const char **e) {
    if (a->kind == MOQ_CK_BF16) {
        const lt_plan p = direct_plan(a, a->codes_d, 0, a->N);
        return lt_run(&p, a, true, NULL, 0) == LT_OK;
    }
    const int64_t R = moq_cuda_wb_rows(a->Np, a->Kp), last = (a->N - 1) / R * R;
    __nv_bfloat16 *wb = (__nv_bfloat16 *)((char *)a->ws_d + a->ws.wb);
    /* the first and the last chunk's plans (every middle one is the first's) before any launch;
     * with MOQ_CUDA_LT_CACHE=0 not (two more heuristic queries per call would skew its timing): a
     * chunk declined half-way then costs the chunks already done, which the D path redoes */
    const lt_plan p0 = direct_plan(a, wb, 0, a->N < R ? a->N : R), pl = direct_plan(a, wb, last, a->N - last);
    if (knob_cache() && (lt_run(&p0, a, false, NULL, 0) != LT_OK || lt_run(&pl, a, false, NULL, 0) != LT_OK)) return false;
    for (int64_t n0 = 0; n0 < a->N; n0 += R) {
        const int64_t v = a->N - n0 < R ? a->N - n0 : R; /* valid rows only: the pads never reach y */
        if ((*e = dequant_chunk(a, n0, v, wb))) return false;
        const lt_plan p = direct_plan(a, wb, n0, v);
        if (lt_run(&p, a, true, NULL, 0) != LT_OK) return false;
    }
    return true;
}

/* NVFP4 (W4A4, W4A16), MXFP8, FP8 per-tensor / per-channel and BF16 pairs at M > 16: the weight
 * dequantized to exact bf16 N-chunk by N-chunk into the workspace (BF16 weights as they are),
 * cuBLASLt bf16 × bf16 (the exact bf16 activation A) with f32 accumulation. Where the pair has no
 * per-token scale (tok = 1: every kind but FP8 per-token, whose A is the codes without their token
 * scale) cuBLASLt writes y itself, row scale as alpha and bias in its epilogue (dequant_direct;
 * MOQ_CUDA_LT_DIRECT=0 turns it off); else, or when cuBLASLt declines, into f32 D [M, Np], then the
 * epilogue kernel. */
extern "C" const char *moq_cuda_gemm_dequant_lt(const moq_cuda_args *a) {
    static thread_local char msg[320];
    const char *e = moq_cuda_lt_init();
    if (e) return e;
    const bool fp8 = a->kind == MOQ_CK_FP8_TENSOR || a->kind == MOQ_CK_FP8_ROW;
    if (a->kind != MOQ_CK_BF16 && a->kind != MOQ_CK_NVFP4 && a->kind != MOQ_CK_NVFP4_W4A16 && a->kind != MOQ_CK_MXFP8 && !fp8)
        return "gemm_dequant_lt: pair kind without an exact bf16 dequantization";
    if (knob_direct() && a->kind != MOQ_CK_FP8_ROW) {
        if (dequant_direct(a, &e)) {
            stat(MOQ_CUDA_LT_DEQ_DIRECT);
            if (moq_cuda_dq_reads_x(a)) stat(MOQ_CUDA_LT_X_DIRECT);
            return moq_cuda_launch_check("cuBLASLt bf16 matmul");
        }
        if (e) return e;
        stat(MOQ_CUDA_LT_DECLINED);
    }
    if (moq_cuda_dq_reads_x(a) && (e = moq_cuda_act_quant(a))) return e; /* the caller skipped it: the D path reads A */
    char *ws = (char *)a->ws_d;
    const void *X = ws + a->ws.a;
    float *D = (float *)(ws + a->ws.d);
    if (a->kind == MOQ_CK_BF16) {
        e = lt_gemm(a, CUDA_R_16BF, a->codes_d, a->Np, X, D, msg, sizeof msg);
        return e ? e : lt_finish(a);
    }
    const int64_t R = moq_cuda_wb_rows(a->Np, a->Kp);
    __nv_bfloat16 *wb = (__nv_bfloat16 *)(ws + a->ws.wb);
    for (int64_t n0 = 0; n0 < a->Np; n0 += R) {
        const int64_t rows = a->Np - n0 < R ? a->Np - n0 : R;
        if ((e = dequant_chunk(a, n0, rows, wb))) return e;
        if ((e = lt_gemm(a, CUDA_R_16BF, wb, rows, X, D + n0, msg, sizeof msg))) return e;
    }
    return lt_finish(a);
}
