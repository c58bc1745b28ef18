/* format_simd.h — declarations of the vector converters (format_avx2.c, format_avx512.c) and the
 * table rows they contribute to format.c. Included only by format.c and the ISA files.
 *
 * The row macros expand inside format.c's moq_conv_table, where ENC/DEC are defined; each row's
 * `need` bit is checked against moq_cpu_features() (cpuid + xgetbv) at run time.
 */
#ifndef MOQ_FORMAT_SIMD_H
#define MOQ_FORMAT_SIMD_H
#include "format/format.h"

#define MOQ_FORMAT_ISA_DECLS(isa)                                                \
    void moq_e4m3_encode_rne_##isa(const float *in, void *out, size_t n);        \
    void moq_e4m3_encode_rne_sat_##isa(const float *in, void *out, size_t n);    \
    void moq_e4m3_decode_##isa(const void *in, float *out, size_t n);            \
    void moq_e8m0_encode_rne_##isa(const float *in, void *out, size_t n);        \
    void moq_e8m0_encode_up_sat_##isa(const float *in, void *out, size_t n);     \
    void moq_e8m0_decode_##isa(const void *in, float *out, size_t n);            \
    void moq_e2m1_encode_rne_sat_##isa(const float *in, void *out, size_t n);    \
    void moq_e2m1_decode_##isa(const void *in, float *out, size_t n);            \
    void moq_bf16_encode_rne_##isa(const float *in, void *out, size_t n);        \
    void moq_bf16_decode_##isa(const void *in, float *out, size_t n);            \
    void moq_f16_encode_rne_##isa(const float *in, void *out, size_t n);         \
    void moq_f16_decode_##isa(const void *in, float *out, size_t n);
MOQ_FORMAT_ISA_DECLS(avx2)
MOQ_FORMAT_ISA_DECLS(avx512)

/* One row per converter and target (same columns as format.c's portable rows). */
#define MOQ_FORMAT_ISA_ROWS(isa, TARGET, NEED)                                                                  \
    ENC("e4m3_rne_" #isa,     MOQ_ELEM_E4M3, MOQ_ROUND_RNE,     TARGET, NEED, moq_e4m3_encode_rne_##isa),     \
    ENC("e4m3_rne_sat_" #isa, MOQ_ELEM_E4M3, MOQ_ROUND_RNE_SAT, TARGET, NEED, moq_e4m3_encode_rne_sat_##isa), \
    ENC("e8m0_rne_" #isa,     MOQ_ELEM_E8M0, MOQ_ROUND_RNE,     TARGET, NEED, moq_e8m0_encode_rne_##isa),     \
    ENC("e8m0_up_sat_" #isa,  MOQ_ELEM_E8M0, MOQ_ROUND_UP_SAT,  TARGET, NEED, moq_e8m0_encode_up_sat_##isa),  \
    ENC("e2m1_rne_sat_" #isa, MOQ_ELEM_E2M1, MOQ_ROUND_RNE_SAT, TARGET, NEED, moq_e2m1_encode_rne_sat_##isa), \
    ENC("bf16_rne_" #isa,     MOQ_ELEM_BF16, MOQ_ROUND_RNE,     TARGET, NEED, moq_bf16_encode_rne_##isa),     \
    ENC("f16_rne_" #isa,      MOQ_ELEM_F16,  MOQ_ROUND_RNE,     TARGET, NEED, moq_f16_encode_rne_##isa),      \
    DEC("e4m3_decode_" #isa,  MOQ_ELEM_E4M3,                    TARGET, NEED, moq_e4m3_decode_##isa),         \
    DEC("e8m0_decode_" #isa,  MOQ_ELEM_E8M0,                    TARGET, NEED, moq_e8m0_decode_##isa),         \
    DEC("e2m1_decode_" #isa,  MOQ_ELEM_E2M1,                    TARGET, NEED, moq_e2m1_decode_##isa),         \
    DEC("bf16_decode_" #isa,  MOQ_ELEM_BF16,                    TARGET, NEED, moq_bf16_decode_##isa),         \
    DEC("f16_decode_" #isa,   MOQ_ELEM_F16,                     TARGET, NEED, moq_f16_decode_##isa),

#define MOQ_FORMAT_AVX512_ROWS MOQ_FORMAT_ISA_ROWS(avx512, MOQ_TARGET_CPU_AVX512, MOQ_CPU_AVX512)
#define MOQ_FORMAT_AVX2_ROWS   MOQ_FORMAT_ISA_ROWS(avx2, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2)

#endif
