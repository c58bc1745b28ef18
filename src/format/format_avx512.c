/* format_avx512.c — AVX-512 (F+BW+DQ+VL) bulk converters between f32 and every element encoding;
 * 16 elements per step, the tail (n % 16, or % 32 for e2m1) goes to the scalar `_ref` function.
 *
 * Each converter is the integer form of the rule written in the scalar file (e4m3.c, e8m0.c,
 * e2m1.c, bf16.c, f16.c) applied lane-wise to the binary32 bits, so results are the same bits on
 * every input, NaN payloads included. f16 uses the F16C/AVX-512F conversion instructions
 * (vcvtps2ph with an explicit round-to-nearest-even immediate, vcvtph2ps): their rules — RNE,
 * overflow to inf, exact subnormals, NaN quieted keeping sign and top payload bits — are the
 * ones f16.c implements; f32 subnormal inputs become ±0 whether or not MXCSR.DAZ is set.
 * The AVX-512 BF16 instruction (vcvtneps2bf16) is not used: it flushes subnormal inputs and
 * quiets NaN differently from the torch cast.
 *
 * Rows: MOQ_FORMAT_AVX512_ROWS in format_simd.h (need MOQ_CPU_AVX512), chosen at run time.
 * Tested by tests/unit/test_format_vector.c (bits equal to `_ref` on the golden inputs, odd
 * lengths, unaligned pointers) and tests/unit/test_format_golden.c (via moq_elem_encode_f32).
 */
#include <immintrin.h>

#include "format/format_simd.h"

#define I32(x) _mm512_set1_epi32((int)(x))

static inline __m512i load_bits(const float *p) { return _mm512_castps_si512(_mm512_loadu_ps(p)); }
static inline __m512i abs_bits(__m512i u) { return _mm512_and_si512(u, I32(0x7FFFFFFFu)); }

/* ---- e4m3 ------------------------------------------------------------------------------------ */

/* Magnitude code for |x| bits a, valid for finite |x| < 480 (e4m3.c: e4m3_mag). */
static inline __m512i e4m3_mag(__m512i a) {
    /* normal: rebias 127 -> 7 and round away the 20 low mantissa bits, ties to even */
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), I32(1));
    __m512i nrm = _mm512_add_epi32(a, I32(0x7FFFFu - (120u << 23)));
    nrm = _mm512_srli_epi32(_mm512_add_epi32(nrm, odd), 20);
    /* below 2^-6: the 2^-9 grid, |x|·512 rounded to nearest even (8 = the smallest normal) */
    const __m512 scaled = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f));
    const __m512i sub = _mm512_cvt_roundps_epi32(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, I32(0x3C800000u)), nrm, sub);
}

static inline __m512i e4m3_sign(__m512i u) { return _mm512_and_si512(_mm512_srli_epi32(u, 24), I32(0x80)); }

void moq_e4m3_encode_rne_avx512(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = load_bits(in + i), a = abs_bits(u);
        __m512i c = e4m3_mag(a);
        c = _mm512_mask_mov_epi32(c, _mm512_cmpge_epu32_mask(a, I32(0x43F00000u)), I32(0x7F)); /* >= 480, inf, NaN */
        _mm_storeu_si128((__m128i *)(o + i), _mm512_cvtepi32_epi8(_mm512_or_si512(c, e4m3_sign(u))));
    }
    moq_e4m3_encode_rne_ref(in + i, o + i, n - i);
}

void moq_e4m3_encode_rne_sat_avx512(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = load_bits(in + i), a = abs_bits(u);
        __m512i c = e4m3_mag(a);
        c = _mm512_mask_mov_epi32(c, _mm512_cmpge_epu32_mask(a, I32(0x43E00000u)), I32(0x7E)); /* >= 448, inf */
        c = _mm512_mask_mov_epi32(c, _mm512_cmpgt_epu32_mask(a, I32(0x7F800000u)), I32(0x7F)); /* NaN */
        _mm_storeu_si128((__m128i *)(o + i), _mm512_cvtepi32_epi8(_mm512_or_si512(c, e4m3_sign(u))));
    }
    moq_e4m3_encode_rne_sat_ref(in + i, o + i, n - i);
}

void moq_e4m3_decode_avx512(const void *in, float *out, size_t n) {
    const uint8_t *c8 = in;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c8 + i)));
        const __m512i em = _mm512_and_si512(c, I32(0x7F));
        const __m512i s = _mm512_slli_epi32(_mm512_and_si512(c, I32(0x80)), 24);
        /* normal: exponent field e+120 and mantissa m land on binary32 bits 30..20 */
        __m512i v = _mm512_add_epi32(_mm512_slli_epi32(em, 20), I32(120u << 23));
        /* subnormal (e = 0): m · 2^-9, exact */
        const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(0x1p-9f));
        v = _mm512_mask_mov_epi32(v, _mm512_cmplt_epu32_mask(em, I32(8)), _mm512_castps_si512(sub));
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(em, I32(0x7F)), I32(0x7FC00000u));
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_or_si512(v, s)));
    }
    moq_e4m3_decode_ref(c8 + i, out + i, n - i);
}

/* ---- e8m0 ------------------------------------------------------------------------------------ */

/* Both modes are "add a rounding bias to |x| and keep the exponent field" (e8m0.c). Subnormal
 * inputs use bias 0x3FFFFF: only mantissas above 0x400000 (|x| > 2^-127) reach code 1. */
void moq_e8m0_encode_rne_avx512(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i a = abs_bits(load_bits(in + i));
        const __m512i bias = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, I32(0x800000u)), I32(0x400000u),
                                                     I32(0x3FFFFFu));
        /* 255 for inf, NaN and anything rounding past 2^127; NaN can reach 256 before the min */
        const __m512i r = _mm512_min_epu32(_mm512_srli_epi32(_mm512_add_epi32(a, bias), 23), I32(255));
        _mm_storeu_si128((__m128i *)(o + i), _mm512_cvtepi32_epi8(r));
    }
    moq_e8m0_encode_rne_ref(in + i, o + i, n - i);
}

void moq_e8m0_encode_up_sat_avx512(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i a = abs_bits(load_bits(in + i));
        const __m512i bias = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, I32(0x800000u)), I32(0x7FFFFFu),
                                                     I32(0x3FFFFFu));
        __m512i r = _mm512_min_epu32(_mm512_srli_epi32(_mm512_add_epi32(a, bias), 23), I32(254)); /* inf -> 254 */
        r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, I32(0x7F800000u)), I32(255));   /* NaN */
        _mm_storeu_si128((__m128i *)(o + i), _mm512_cvtepi32_epi8(r));
    }
    moq_e8m0_encode_up_sat_ref(in + i, o + i, n - i);
}

void moq_e8m0_decode_avx512(const void *in, float *out, size_t n) {
    const uint8_t *c8 = in;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c8 + i)));
        __m512i v = _mm512_slli_epi32(c, 23);
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(c, I32(0)), I32(0x00400000u));   /* 2^-127 */
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(c, I32(255)), I32(0x7FC00000u)); /* NaN */
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(v));
    }
    moq_e8m0_decode_ref(c8 + i, out + i, n - i);
}

/* ---- e2m1 ------------------------------------------------------------------------------------ */

/* 4-bit codes of 16 inputs, one per 32-bit lane. e2m1 is a float with 1 mantissa bit and bias 1,
 * so the e4m3 method applies: |x| >= 1 rebiases the exponent (127 -> 1) and rounds the 22 dropped
 * mantissa bits to nearest even, saturating at code 7 (6.0; 5 is the tie that goes to 4, above 5
 * goes to 6); |x| < 1 is the 0.5 grid, rint(2|x|) (0.25 -> 0, 0.75 -> 2 = 1.0). Same results as
 * the threshold table of NUMERICS §1.3 that e2m1.c spells out. */
static inline __m512i e2m1_codes(__m512i u) {
    const __m512i a = abs_bits(u);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 22), I32(1));
    __m512i nrm = _mm512_add_epi32(_mm512_add_epi32(a, I32(0x1FFFFFu - (126u << 23))), odd);
    nrm = _mm512_min_epu32(_mm512_srli_epi32(nrm, 22), I32(7));
    const __m512 twice = _mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(a));
    const __m512i sub = _mm512_cvt_roundps_epi32(twice, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i m = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, I32(0x3F800000u)), nrm, sub);
    const __m512i s = _mm512_and_si512(_mm512_srli_epi32(u, 28), I32(8));
    const __m512i c = _mm512_or_si512(m, s);
    /* NaN: a zero with the sign bit inverted, as ml_dtypes */
    return _mm512_mask_mov_epi32(c, _mm512_cmpgt_epu32_mask(a, I32(0x7F800000u)), _mm512_xor_si512(s, I32(8)));
}

/* 32 codes (bytes, element order) -> 16 bytes, element 2i in the low nibble of byte i. */
static inline __m128i e2m1_pack(__m128i lo16, __m128i hi16) {
    const __m128i mask = _mm_set1_epi16(0xFF);
    const __m128i a = _mm_and_si128(_mm_or_si128(lo16, _mm_srli_epi16(lo16, 4)), mask);
    const __m128i b = _mm_and_si128(_mm_or_si128(hi16, _mm_srli_epi16(hi16, 4)), mask);
    return _mm_packus_epi16(a, b);
}

void moq_e2m1_encode_rne_sat_avx512(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m128i c0 = _mm512_cvtepi32_epi8(e2m1_codes(load_bits(in + i)));
        const __m128i c1 = _mm512_cvtepi32_epi8(e2m1_codes(load_bits(in + i + 16)));
        _mm_storeu_si128((__m128i *)(o + i / 2), e2m1_pack(c0, c1));
    }
    moq_e2m1_encode_rne_sat_ref(in + i, o + i / 2, n - i);
}

void moq_e2m1_decode_avx512(const void *in, float *out, size_t n) {
    const uint8_t *b = in;
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i nib = _mm_set1_epi8(0x0F);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(b + i / 2));
        const __m128i lo = _mm_and_si128(x, nib), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
        const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi); /* element order */
        _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c0), table));
        _mm512_storeu_ps(out + i + 16, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c1), table));
    }
    moq_e2m1_decode_ref(b + i / 2, out + i, n - i);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

void moq_bf16_encode_rne_avx512(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = load_bits(in + i);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), I32(1));
        __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, I32(0x7FFF)), lsb), 16);
        h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epu32_mask(abs_bits(u), I32(0x7F800000u)), I32(0xFFFF)); /* NaN */
        _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtepi32_epi16(h));
    }
    moq_bf16_encode_rne_ref(in + i, o + i, n - i);
}

void moq_bf16_decode_avx512(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    moq_bf16_decode_ref(h + i, out + i, n - i);
}

/* ---- f16 ------------------------------------------------------------------------------------- */

void moq_f16_encode_rne_avx512(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(o + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    moq_f16_encode_rne_ref(in + i, o + i, n - i);
}

void moq_f16_decode_avx512(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
    moq_f16_decode_ref(h + i, out + i, n - i);
}
