/* rows_cuda.h — the registry's CUDA rows (kernels.c): packing on the host (uploaded once by
 * moq_linear_create_from_weight), workspace size and run. Layouts: cuda_api.h. */
#ifndef MOQ_KERNELS_CUDA_ROWS_CUDA_H
#define MOQ_KERNELS_CUDA_ROWS_CUDA_H

#include "kernels/kernels.h"

size_t     moq_cuda_row_packed_size(const moq_weight *w);
void       moq_cuda_row_pack(const moq_weight *w, void *dst);
size_t     moq_cuda_row_workspace(const moq_weight *w, int64_t M, int n_threads);
size_t     moq_cuda_row_workspace_lt(const moq_weight *w, int64_t M, int n_threads);
size_t     moq_cuda_row_workspace_dq(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_cuda_row_run(const moq_linear_launch *l, moq_error *err);
bool       moq_cuda_row_lt_supports(const moq_weight *w, char *why, size_t why_len);

/* The packed blob's layout for w (cuda_api.h): byte offsets of codes, scales, row_scale, bias and the
 * total; padded Np, Kp; and the kernels' pair kind (MOQ_CK_COUNT: no CUDA row). For callers that
 * stack several packed weights (the grouped MoE kernels, src/moe/moe_gpu.c). */
typedef struct moq_cuda_blob { size_t codes, scales, rs, bias, total; int64_t Np, Kp; int kind; } moq_cuda_blob;
moq_cuda_blob moq_cuda_row_blob(const moq_weight *w);

#endif
