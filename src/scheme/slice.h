/* slice.h — one rank's part of a checkpoint matrix (tensor parallelism, issue 16), as the loader
 * reads it: a description passed down to moq_linear_layer_open_sliced (load.c), which validates the
 * whole tensors against the contract first (errors name the checkpoint's tensors), then replaces each
 * role's tensor by a view of its slice and runs the scheme's hook on the views unchanged.
 *
 *   MOQ_SLICE_ROWS  rows [start, start + count) of W [N, K]: column-parallel layers (q/k/v, gate/up)
 *                   and vocabulary-parallel embedding / lm_head; weight, per-row and block scales and
 *                   bias are cut with it, per-tensor scales and pre_quant_scale are replicated.
 *   MOQ_SLICE_COLS  columns [start, start + count) of K: row-parallel layers (o_proj, down_proj);
 *                   weight, block scales and pre_quant_scale [K] are cut, per-row and per-tensor
 *                   scales replicated, the bias kept only where `bias` is set (one rank adds it once,
 *                   before the all-reduce sums the partial outputs).
 *
 * Blocks are never cut, as vLLM's and SGLang's weight loaders refuse it (the seeds'
 * `input_size_per_partition % block_k`, `output_partition_sizes[i] % block_n`): a slice edge must
 * fall on a multiple of the weight key's group rows / columns (FP8_PB_WO 128 x 128, NVFP4 16 columns,
 * MXFP8 32) and of the activation key's group (FP8 1 x 128, NVFP4 16, MXFP8 32); the end of the
 * matrix itself may fall inside a partial last block. Rows are borrowed from the mmap (only the
 * rank's pages are touched); columns are gathered into the caller's allocation.
 * Tested by tests/dist/test_shard.c against slices cut independently in the test.
 */
#ifndef MOQ_SCHEME_SLICE_H
#define MOQ_SCHEME_SLICE_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "scheme/quant_key.h"

typedef enum moq_slice_dim { MOQ_SLICE_NONE = 0, MOQ_SLICE_ROWS, MOQ_SLICE_COLS } moq_slice_dim;

typedef struct moq_slice {
    moq_slice_dim dim;
    int64_t       start, count; /* rows of N (ROWS) or columns of K (COLS)                        */
    bool          bias;         /* COLS: this rank keeps the bias (the others drop it)            */
} moq_slice;

/* What a tensor is to its matrix W [N, K], which decides how a slice cuts it. */
typedef enum moq_slice_role {
    MOQ_ROLE_WEIGHT,    /* [N, K·bits/8 bytes] codes or model-dtype values                           */
    MOQ_ROLE_SCALE,     /* the weight key's scale grid [ceil(N/gr), ceil(K/gc)] ([nb,1,kb,1], [N],
                           [N,1], 0-d accepted); a 1-element tensor of a per-tensor key is replicated */
    MOQ_ROLE_VEC_N,     /* bias [N]                                                                  */
    MOQ_ROLE_VEC_K,     /* pre_quant_scale [K]                                                       */
    MOQ_ROLE_SCALAR,    /* weight_scale_2, input_scale: replicated                                   */
} moq_slice_role;

/* Row and column alignment a slice of a matrix of keys (w, a) must keep (>= 1). */
void moq_slice_align(const moq_quant_key *w, const moq_quant_key *a, int64_t *rows, int64_t *cols);

/* MOQ_OK when s is inside [0, N) x [0, K) and cuts no block of keys (w, a); else MOQ_ERR_UNSUPPORTED
 * naming `where`, the edge and the block. */
moq_status moq_slice_check(const moq_slice *s, const moq_quant_key *w, const moq_quant_key *a, int64_t N, int64_t K, const char *where,
                           moq_error *err);

/* Bytes of caller memory moq_slice_view needs for t (0 when the view borrows). */
size_t moq_slice_view_bytes(const moq_tensor *t, moq_slice_role role, const moq_quant_key *w, int64_t N, int64_t K, const moq_slice *s);

/* *out = the part of t (of role `role` in W [N, K] of weight key w) that slice s keeps; *keep false
 * when the rank drops the tensor (a COLS bias without s->bias). Columns are copied into buf
 * (moq_slice_view_bytes bytes, may be NULL when that is 0); rows are borrowed from t->data. The
 * slice must have passed moq_slice_check. */
moq_status moq_slice_view(const moq_tensor *t, moq_slice_role role, const moq_quant_key *w, int64_t N, int64_t K, const moq_slice *s,
                          void *buf, moq_tensor *out, bool *keep, moq_error *err);

#endif
