/* format.h — element encodings: scalar encoders/decoders (the reference), bulk converters and the
 * table that names them. No scales, no blocks, no layouts, no allocation (STYLE.md §2, §5).
 *
 * Scalar functions are the reference; the vector paths in format_avx2.c / format_avx512.c must give
 * the same bits on every input (tests/unit/test_format_vector.c).
 */
#ifndef MOQ_FORMAT_FORMAT_H
#define MOQ_FORMAT_FORMAT_H

#include <stdint.h>
#include <string.h>

#include "moq.h"

static inline uint32_t moq_f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float    moq_f32_from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* ---- scalar reference (one file each: e4m3.c e8m0.c e2m1.c bf16.c f16.c) ---- */
float    moq_e4m3_decode(uint8_t c);
uint8_t  moq_e4m3_encode_rne(float x);      /* overflow/inf -> NaN (0x7F|sign)   */
uint8_t  moq_e4m3_encode_rne_sat(float x);  /* clamp ±448; inf -> ±448; NaN -> 0x7F|sign */
float    moq_e8m0_decode(uint8_t c);
uint8_t  moq_e8m0_encode_rne(float x);      /* torch cast                         */
uint8_t  moq_e8m0_encode_up_sat(float x);   /* CUDA cvt.rp.satfinite.ue8m0        */
float    moq_e2m1_decode(uint8_t c);        /* low nibble of c                    */
uint8_t  moq_e2m1_encode_rne_sat(float x);  /* 4-bit code; NaN -> 0x8 / 0x0 (ml_dtypes) */
float    moq_bf16_decode(uint16_t h);
uint16_t moq_bf16_encode_rne(float x);      /* NaN -> 0xFFFF (torch CPU cast)      */
float    moq_f16_decode(uint16_t h);
uint16_t moq_f16_encode_rne(float x);       /* NaN -> s|0x7E00|payload (vcvtps2ph) */

/* ---- bulk converters ---- */
/* Encode n f32 values. E2M1 output: (n+1)/2 bytes, element 2i in the low nibble; callers split
 * work only at even element offsets. 8-bit formats: n bytes; 16-bit: n uint16. */
typedef void (*moq_encode_bulk_fn)(const float *in, void *out, size_t n);
typedef void (*moq_decode_bulk_fn)(const void *in, float *out, size_t n);

typedef enum moq_target {
    MOQ_TARGET_CPU_REF = 0,   /* portable C, always available          */
    MOQ_TARGET_CPU_AVX2,
    MOQ_TARGET_CPU_AVX512,
    MOQ_TARGET_CUDA_SM90,     /* NVIDIA Hopper (sm_90a), src/kernels/cuda  */
    MOQ_TARGET_COUNT
} moq_target;

/* One row per (elem, mode, target) encoder and per (elem, target) decoder. Rows of a wider
 * target come first; the first row whose feature bits the CPU has is used. */
typedef struct moq_conv_row {
    const char        *name;      /* "e4m3_rne_sat_avx512": encoding, mode, target          */
    moq_elem           elem;
    int                mode;      /* moq_round for encoders, -1 for decoders               */
    moq_target         target;
    uint32_t           need;      /* MOQ_CPU_* bits required                                */
    moq_encode_bulk_fn encode;
    moq_decode_bulk_fn decode;
} moq_conv_row;

extern const moq_conv_row moq_conv_table[];
extern const size_t       moq_conv_table_len;

/* Element table: one row per encoding (ggml type_traits style). */
typedef struct moq_elem_info {
    const char *name;
    int         bits;
    float       max;        /* largest finite magnitude; e8m0: 2^127                   */
    uint32_t    modes;      /* bit (1 << moq_round) set for each supported encode mode */
} moq_elem_info;
extern const moq_elem_info moq_elem_table[MOQ_ELEM_COUNT];

/* The row used for (elem, mode) given `features` (normally moq_cpu_features()); mode -1 selects
 * the decoder. `only` != MOQ_TARGET_COUNT restricts to one target (tests). NULL when none. */
const moq_conv_row *moq_conv_find(moq_elem e, int mode, uint32_t features, moq_target only);

/* Bytes needed to hold n elements of e. */
static inline size_t moq_elem_bytes(moq_elem e, size_t n) {
    switch (e) {
    case MOQ_ELEM_E2M1: return (n + 1) / 2;
    case MOQ_ELEM_E4M3: case MOQ_ELEM_E8M0: return n;
    case MOQ_ELEM_BF16: case MOQ_ELEM_F16: return 2 * n;
    case MOQ_ELEM_F32: return 4 * n;
    default: return 0;
    }
}

/* Scalar bulk references (in their element files), used by the table and by the vector files
 * for tails. */
void moq_e4m3_encode_rne_ref(const float *in, void *out, size_t n);
void moq_e4m3_encode_rne_sat_ref(const float *in, void *out, size_t n);
void moq_e4m3_decode_ref(const void *in, float *out, size_t n);
void moq_e8m0_encode_rne_ref(const float *in, void *out, size_t n);
void moq_e8m0_encode_up_sat_ref(const float *in, void *out, size_t n);
void moq_e8m0_decode_ref(const void *in, float *out, size_t n);
void moq_e2m1_encode_rne_sat_ref(const float *in, void *out, size_t n);
void moq_e2m1_decode_ref(const void *in, float *out, size_t n);
void moq_bf16_encode_rne_ref(const float *in, void *out, size_t n);
void moq_bf16_decode_ref(const void *in, float *out, size_t n);
void moq_f16_encode_rne_ref(const float *in, void *out, size_t n);
void moq_f16_decode_ref(const void *in, float *out, size_t n);
void moq_f32_copy_ref(const float *in, void *out, size_t n);
void moq_f32_decode_ref(const void *in, float *out, size_t n);

#endif
