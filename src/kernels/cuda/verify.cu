/* verify.cu — device facts the CPU emulation relies on, measured on the GPU itself (NUMERICS
 * [VERIFY-ON-DEVICE]; tests/kernels/test_linear_cuda.c records them): the hardware e4m3
 * conversion (`cvt.rn.satfinite.e4m3x2.f32`, what the peers' quantizers call) against the
 * software encoder the moq kernels and the CPU use, over every binary32 bit pattern. */
#include "kernels/cuda/common.cuh"

__global__ void e4m3_sweep(unsigned long long *count, unsigned long long *nan_count, unsigned int *first) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long bad = 0, badnan = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
        const uint32_t b = (uint32_t)i;
        const float x = u2f(b);
        const uint8_t hw = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), sw = d_e4m3_rne_sat(x);
        if (hw != sw) {
            if ((b & 0x7FFFFFFFu) > 0x7F800000u) badnan++;
            else {
                bad++;
                atomicMin(first, b);
            }
        }
    }
    if (bad) atomicAdd(count, bad);
    if (badnan) atomicAdd(nan_count, badnan);
}

extern "C" const char *moq_cuda_verify_e4m3(unsigned long long *mismatch, unsigned long long *nan_mismatch, unsigned int *first) {
    unsigned long long *d = NULL;
    if (cudaMalloc(&d, 3 * sizeof(unsigned long long)) != cudaSuccess) return "cudaMalloc for the e4m3 sweep failed";
    unsigned long long init[3] = {0, 0, 0xFFFFFFFFull};
    cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice);
    e4m3_sweep<<<132 * 16, 256>>>(d, d + 1, (unsigned int *)(d + 2));
    const char *e = moq_cuda_launch_check("e4m3 sweep launch");
    if (!e && cudaMemcpy(init, d, sizeof init, cudaMemcpyDeviceToHost) != cudaSuccess) e = "e4m3 sweep: copy back failed";
    cudaFree(d);
    *mismatch = init[0], *nan_mismatch = init[1], *first = (unsigned int)init[2];
    return e;
}
