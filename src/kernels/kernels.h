/* kernels.h — the kernel registry (STYLE.md §7): one row per (op, weight key, activation key,
 * target) with supports() that says why not, a packed-weight layout, a workspace size and run().
 *
 * moq_linear_create_from_weight() (linear.c) tries the rows of its (w, a) pair in priority order,
 * collects every rejection's reason, packs the weight once for the chosen row, and from then on
 * moq_linear_run() is the same call for every format. `_ref` rows are always present and last.
 *
 * Shapes (STYLE.md §9): M tokens, N outputs, K inputs.
 *   x  f32 | bf16 [M, K]      y  f32 | bf16 [M, N]      W, scales: see moq_weight (quant_key.h)
 *
 * Tests: tests/kernels/test_linear_ref.c (ref vs an fp64 oracle), tests/kernels/test_linear.c
 * (every row vs its _ref), tests/kernels/test_act_quant.c, tests/kernels/test_layout.c.
 */
#ifndef MOQ_KERNELS_KERNELS_H
#define MOQ_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/format.h"
#include "scheme/quant_key.h"

typedef enum moq_op { MOQ_OP_LINEAR = 0, MOQ_OP_COUNT } moq_op;

/* One row per (weight key, activation key) pair the seeds use: the facts every kernel of that
 * pair shares (what the activation quantizer is, what the per-output-row epilogue scale is). */
typedef enum moq_pair_id {
    MOQ_PAIR_F32 = 0, MOQ_PAIR_BF16, MOQ_PAIR_F16,
    MOQ_PAIR_FP8_TENSOR,   /* e4m3 W, static per-tensor e4m3 x                 (NUMERICS §5.1) */
    MOQ_PAIR_FP8_ROW,      /* e4m3 W + f32 [N], dynamic per-token e4m3 x       (§5.2)          */
    MOQ_PAIR_FP8_BLK128,   /* e4m3 W + f32 [N/128, K/128], per-token-128 x     (§5.3)          */
    MOQ_PAIR_NVFP4,        /* W4A4                                            (§2.4, §2.5)     */
    MOQ_PAIR_NVFP4_W4A16,  /* NVFP4 W, unquantized x                           (§2.6)          */
    MOQ_PAIR_MXFP8,        /* e4m3 W + e8m0 [N, K/32], dynamic MXFP8 x         (§4.3)          */
    MOQ_PAIR_COUNT
} moq_pair_id;

/* Epilogue scale applied per output row n (after the dot product), f32:
 *   NONE        1
 *   SHARD_W     shard_scale[s]                      (W4A16 NVFP4: weight_scale_2)
 *   SHARD_W_IN  f32(a_scale · shard_scale[s])       (FP8 static: s_in·s_w; NVFP4: alpha)
 *   ROW         scale[n]                            (FP8 per-channel)                        */
typedef enum moq_row_scale { MOQ_ROWSCALE_NONE, MOQ_ROWSCALE_SHARD_W, MOQ_ROWSCALE_SHARD_W_IN, MOQ_ROWSCALE_ROW } moq_row_scale;

typedef struct moq_pair {
    const char          *name;       /* "nvfp4_w4a4": used in kernel names and messages        */
    const moq_quant_key *w, *a;
    int                  k_multiple; /* K % k_multiple == 0 is required                       */
    moq_row_scale        row_scale;
    bool                 a_static;   /* activation scale = max of shard_in_scale              */
} moq_pair;
extern const moq_pair moq_pairs[MOQ_PAIR_COUNT];
/* The pair of w's keys, or MOQ_PAIR_COUNT when the pair is not one the seeds use. */
moq_pair_id moq_pair_of(const moq_weight *w);

/* Everything a kernel's run() needs; filled by moq_linear_run(). */
typedef struct moq_linear_launch {
    const struct moq_kernel *k;
    const moq_weight *w;
    moq_pair_id      pair;
    const void      *packed;     /* the row's packed layout (NULL when pack is NULL: canonical)  */
    const float     *row_scale;  /* f32 [N], the pair's epilogue scale (CPU rows; CUDA rows keep
                                    theirs in the packed weight)                                 */
    float            a_scale;    /* static activation scale (FP8 s_in, NVFP4 input_scale) or 0  */
    const uint8_t   *rcpa_corr;  /* golden/rcp table (2 MiB) for NVFP4 x: GPU bits; NULL = IEEE */
    const void      *x;          /* f32 | bf16 [M, K]                                           */
    moq_elem         x_elem;
    int64_t          M;
    void            *y;          /* f32 | bf16 [M, N]                                           */
    moq_elem         y_elem;
    void            *ws;         /* caller-owned, >= workspace(w, M) bytes, 64-byte aligned     */
    size_t           ws_size;
    int              n_threads;  /* >= 1                                                        */
    void            *stream;     /* CUDA rows: the cudaStream_t to enqueue on (NULL: default)   */
} moq_linear_launch;

typedef struct moq_kernel {
    const char       *name;        /* "cpu_avx512_nvfp4_vnni16": target, format, algorithm      */
    moq_op            op;
    moq_pair_id       pair;
    moq_target        target;
    uint32_t          need;        /* MOQ_CPU_* bits required                                   */
    int               variant;     /* private to the row's driver                               */
    /* NULL = always. Fills why (one clause) and returns false when the row cannot run w. */
    bool            (*supports)(const moq_weight *w, char *why, size_t why_len);
    size_t          (*packed_size)(const moq_weight *w);   /* NULL: runs on the canonical weight */
    void            (*pack)(const moq_weight *w, void *dst);
    size_t          (*workspace)(const moq_weight *w, int64_t M, int n_threads);
    moq_status      (*run)(const moq_linear_launch *l, moq_error *err);
    /* The token counts M this row runs, m_lo..m_hi (0 = no bound). The row chosen for a layer (the
     * first that fits, whatever M) is its entry row; a call whose M is outside the entry row's range
     * runs the next row of the table on the same packed weight (same pack hook, its features and
     * supports() fitting) whose range holds M (moq_linear_run). So which code runs for which M is
     * read from this table, e.g. FP8 per-tensor on AVX-512 BF16: M >= 4 k4bf16dot, 2..3 the gemm
     * row's small-M pass, M = 1 k4fma; without AVX512_BF16 the gemm row 2..64, k4fma above. A row with no bounds ends the chain. */
    int               m_lo, m_hi;
} moq_kernel;

extern const moq_kernel moq_kernel_table[];
extern const size_t     moq_kernel_table_len;
const moq_kernel *moq_kernel_find(const char *name);
/* moq_linear_run with the work enqueued on a CUDA stream (cudaStream_t; NULL: the default stream;
 * ignored by CPU rows): the GPU decoder captures its decode step into a CUDA graph on its stream. */
moq_status moq_linear_run_stream(const moq_linear *l, const void *x, moq_elem x_elem, int64_t M, void *y, moq_elem y_elem, void *ws,
                                 size_t ws_size, void *stream, moq_error *err);

/* The public entry points (moq.h "linear layers") take a moq_weight; the glue "checkpoint prefix
 * -> config resolution -> moq_weight" builds one and calls moq_linear_create_from_weight. */

/* Helpers shared by rows. */
int     moq_weight_shard_of(const moq_weight *w, int64_t n);       /* shard holding output row n */
void    moq_x_row_f32(const void *x, moq_elem e, int64_t K, int64_t m, float *out);
/* Weight row n dequantized with all of the weight's own scales (group, row, shard), no
 * activation scale: the F32 weight a user would otherwise run (bench baselines). w must have
 * passed moq_linear_create_from_weight's validation. */
void    moq_weight_dequant_row(const moq_weight *w, int64_t n, double *out);
/* The pair's epilogue scale of output row n (moq_row_scale above) for a validated w; a static
 * activation scale is the max of the shards' input_scale. Rows that pack it with the weight. */
float   moq_linear_row_scale(const moq_weight *w, int64_t n);
void    moq_y_store(void *y, moq_elem e, int64_t N, int64_t m, int64_t n, float v);
/* Epilogue of a 16-row output tile t of the panel kernels: y[m, 16t + r] = C[m, r] · sm[m] ·
 * row_scale[n] (+ bias[n]) for every m < M and row n < N. C f32 [M, 16], sm f32 [M]. */
void    moq_y_store_tile16(const moq_linear_launch *l, const float *C, const float *sm, int64_t t);

/* One copy of each weight (issue 14). A row with a packed layout (packed_size != NULL) never reads
 * the canonical codes (w->q) or u8 block scales (NVFP4 e4m3, MXFP8 e8m0 weight_scale) in run(): its
 * layout holds them. It may read f32 scales (FP8 per-channel, 128x128) and the bias from the
 * canonical weight. tests/kernels/test_linear.c poisons the canonical buffers after create to hold
 * every row to this. moq_linear_forget_canonical tells the caller which parts it may now free (the
 * layer's copy of w forgets them: NULL); 0 for rows that run on the canonical weight (`_ref`). */
enum { MOQ_CANON_CODES = 1, MOQ_CANON_BLOCK_SCALES = 2 };
unsigned moq_linear_forget_canonical(moq_linear *l);
/* Bytes of the row's packed layout (host or device), 0 for rows that run on the canonical weight. */
size_t   moq_linear_packed_bytes(const moq_linear *l);

#endif
