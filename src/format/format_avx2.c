/* format_avx2.c — AVX2 (+F16C) bulk converters between f32 and every element encoding; 8 lanes
 * per register, 32 elements per step for the 8-bit encoders (four registers packed to one), the
 * tail goes to the scalar `_ref` function.
 *
 * Same integer rules as format_avx512.c and the scalar files (e4m3.c, e8m0.c, e2m1.c, bf16.c,
 * f16.c), lane-wise on the binary32 bits: the same bits on every input, NaN payloads included.
 * Comparisons are signed (AVX2 has no unsigned compare); every operand is |x| bits < 2^31, where
 * signed and unsigned order agree. Rounding steps done in float (the e4m3 and e2m1 subnormal grids)
 * use an explicit round-to-nearest-even immediate, so they do not depend on MXCSR; the scalar
 * rintf in e4m3.c uses the current mode, which is round-to-nearest unless a caller changed it.
 * f16 uses F16C vcvtps2ph (RNE immediate) / vcvtph2ps: see format_avx512.c for why that is
 * bit-exact with f16.c.
 *
 * The lane-wise e4m3 and bf16 rules live in format_avx2_lanes.h (shared with the AVX2 kernels).
 * Rows: MOQ_FORMAT_AVX2_ROWS in format_simd.h (need MOQ_CPU_AVX2 = avx2+fma+f16c+bmi2), chosen at
 * run time. Tested by tests/unit/test_format_vector.c and tests/unit/test_format_golden.c.
 */
#include <immintrin.h>

#include "format/format_avx2_lanes.h"
#include "format/format_simd.h"

#define I32(x) _mm256_set1_epi32((int)(x))

static inline __m256i load_bits(const float *p) { return _mm256_castps_si256(_mm256_loadu_ps(p)); }
static inline __m256i abs_bits(__m256i u) { return _mm256_and_si256(u, I32(0x7FFFFFFFu)); }
static inline __m256i blend(__m256i a, __m256i b, __m256i mask) { return _mm256_blendv_epi8(a, b, mask); }

/* Four registers of 32-bit codes (each 0..255) -> 32 bytes in element order. packs/packus work
 * per 128-bit lane, leaving dwords in the order c0.lo c1.lo c2.lo c3.lo | c0.hi c1.hi c2.hi c3.hi. */
static inline void store_u8x32(uint8_t *o, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    _mm256_storeu_si256((__m256i *)o, _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* ---- e4m3 ------------------------------------------------------------------------------------ */

static inline __m256i e4m3_rne8(__m256i u) {
    const __m256i a = abs_bits(u);
    const __m256i c = blend(moq_e4m3_mag8_avx2(a), I32(0x7F), _mm256_cmpgt_epi32(a, I32(0x43F00000u - 1))); /* >= 480 */
    return _mm256_or_si256(c, moq_e4m3_sign8_avx2(u));
}

void moq_e4m3_encode_rne_avx2(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        store_u8x32(o + i, e4m3_rne8(load_bits(in + i)), e4m3_rne8(load_bits(in + i + 8)),
                    e4m3_rne8(load_bits(in + i + 16)), e4m3_rne8(load_bits(in + i + 24)));
    moq_e4m3_encode_rne_ref(in + i, o + i, n - i);
}

void moq_e4m3_encode_rne_sat_avx2(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        store_u8x32(o + i, moq_e4m3_rne_sat8_avx2(load_bits(in + i)), moq_e4m3_rne_sat8_avx2(load_bits(in + i + 8)),
                    moq_e4m3_rne_sat8_avx2(load_bits(in + i + 16)), moq_e4m3_rne_sat8_avx2(load_bits(in + i + 24)));
    moq_e4m3_encode_rne_sat_ref(in + i, o + i, n - i);
}

void moq_e4m3_decode_avx2(const void *in, float *out, size_t n) {
    const uint8_t *c8 = in;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c8 + i)));
        _mm256_storeu_ps(out + i, moq_e4m3_decode8_avx2(c));
    }
    moq_e4m3_decode_ref(c8 + i, out + i, n - i);
}

/* ---- e8m0 ------------------------------------------------------------------------------------ */

/* Rounding bias added to |x| before keeping the exponent field (e8m0.c); subnormal inputs get one
 * less (cmpgt yields -1) so only mantissas above 0x400000 reach code 1. */
static inline __m256i e8m0_rne8(__m256i u) {
    const __m256i a = abs_bits(u);
    const __m256i bias = _mm256_add_epi32(I32(0x400000u), _mm256_cmpgt_epi32(I32(0x800000u), a));
    return _mm256_min_epu32(_mm256_srli_epi32(_mm256_add_epi32(a, bias), 23), I32(255));
}

static inline __m256i e8m0_up_sat8(__m256i u) {
    const __m256i a = abs_bits(u);
    const __m256i bias = blend(I32(0x7FFFFFu), I32(0x3FFFFFu), _mm256_cmpgt_epi32(I32(0x800000u), a));
    const __m256i r = _mm256_min_epu32(_mm256_srli_epi32(_mm256_add_epi32(a, bias), 23), I32(254));
    return blend(r, I32(255), _mm256_cmpgt_epi32(a, I32(0x7F800000u)));
}

void moq_e8m0_encode_rne_avx2(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        store_u8x32(o + i, e8m0_rne8(load_bits(in + i)), e8m0_rne8(load_bits(in + i + 8)),
                    e8m0_rne8(load_bits(in + i + 16)), e8m0_rne8(load_bits(in + i + 24)));
    moq_e8m0_encode_rne_ref(in + i, o + i, n - i);
}

void moq_e8m0_encode_up_sat_avx2(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        store_u8x32(o + i, e8m0_up_sat8(load_bits(in + i)), e8m0_up_sat8(load_bits(in + i + 8)),
                    e8m0_up_sat8(load_bits(in + i + 16)), e8m0_up_sat8(load_bits(in + i + 24)));
    moq_e8m0_encode_up_sat_ref(in + i, o + i, n - i);
}

void moq_e8m0_decode_avx2(const void *in, float *out, size_t n) {
    const uint8_t *c8 = in;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c8 + i)));
        __m256i v = _mm256_slli_epi32(c, 23);
        v = blend(v, I32(0x00400000u), _mm256_cmpeq_epi32(c, _mm256_setzero_si256())); /* 2^-127 */
        v = blend(v, I32(0x7FC00000u), _mm256_cmpeq_epi32(c, I32(255)));                /* NaN */
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(v));
    }
    moq_e8m0_decode_ref(c8 + i, out + i, n - i);
}

/* ---- e2m1 ------------------------------------------------------------------------------------ */

/* 4-bit codes of 8 inputs: |x| >= 1 by exponent rebias + RNE on the 22 dropped bits, saturating
 * at 7; |x| < 1 on the 0.5 grid (see format_avx512.c). */
static inline __m256i e2m1_codes8(__m256i u) {
    const __m256i a = abs_bits(u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 22), I32(1));
    __m256i nrm = _mm256_add_epi32(_mm256_add_epi32(a, I32(0x1FFFFFu - (126u << 23))), odd);
    nrm = _mm256_min_epu32(_mm256_srli_epi32(nrm, 22), I32(7));
    const __m256 twice = _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(a));
    const __m256i sub = _mm256_cvttps_epi32(_mm256_round_ps(twice, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i m = blend(nrm, sub, _mm256_cmpgt_epi32(I32(0x3F800000u), a));
    const __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 28), I32(8));
    const __m256i c = _mm256_or_si256(m, s);
    return blend(c, _mm256_xor_si256(s, I32(8)), _mm256_cmpgt_epi32(a, I32(0x7F800000u))); /* NaN */
}

void moq_e2m1_encode_rne_sat_avx2(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i c0 = e2m1_codes8(load_bits(in + i)), c1 = e2m1_codes8(load_bits(in + i + 8));
        const __m256i c2 = e2m1_codes8(load_bits(in + i + 16)), c3 = e2m1_codes8(load_bits(in + i + 24));
        /* 32 codes as bytes (per-lane order, see store_u8x32), then byte pairs (2i, 2i+1) -> one
         * byte: word w -> (w | w >> 4) & 0xFF; packus per lane gives 16 bytes in two halves. */
        const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
        const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        const __m256i w = _mm256_and_si256(_mm256_or_si256(ordered, _mm256_srli_epi16(ordered, 4)),
                                           _mm256_set1_epi16(0xFF));
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08); /* qwords 0, 2 */
        _mm_storeu_si128((__m128i *)(o + i / 2), _mm256_castsi256_si128(p));
    }
    moq_e2m1_encode_rne_sat_ref(in + i, o + i / 2, n - i);
}

void moq_e2m1_decode_avx2(const void *in, float *out, size_t n) {
    const uint8_t *b = in;
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m128i nib = _mm_set1_epi8(0x0F);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(b + i / 2));
        const __m128i lo = _mm_and_si128(x, nib), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
        const __m128i cs[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)}; /* element order */
        for (int h = 0; h < 2; h++) {
            for (int q = 0; q < 2; q++) {
                const __m256i c = _mm256_cvtepu8_epi32(q ? _mm_srli_si128(cs[h], 8) : cs[h]);
                /* permutevar8x32 reads the low 3 bits: the magnitude; bit 3 is the sign */
                const __m256 v = _mm256_permutevar8x32_ps(mag, c);
                const __m256i s = _mm256_slli_epi32(_mm256_and_si256(c, I32(8)), 28);
                _mm256_storeu_ps(out + i + 16 * h + 8 * q, _mm256_or_ps(v, _mm256_castsi256_ps(s)));
            }
        }
    }
    moq_e2m1_decode_ref(b + i / 2, out + i, n - i);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

void moq_bf16_encode_rne_avx2(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i p = _mm256_packus_epi32(moq_bf16_rne8_avx2(load_bits(in + i)), moq_bf16_rne8_avx2(load_bits(in + i + 8)));
        _mm256_storeu_si256((__m256i *)(o + i), _mm256_permute4x64_epi64(p, 0xD8)); /* qwords 0 2 1 3 */
    }
    moq_bf16_encode_rne_ref(in + i, o + i, n - i);
}

void moq_bf16_decode_avx2(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    moq_bf16_decode_ref(h + i, out + i, n - i);
}

/* ---- f16 ------------------------------------------------------------------------------------- */

void moq_f16_encode_rne_avx2(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    moq_f16_encode_rne_ref(in + i, o + i, n - i);
}

void moq_f16_decode_avx2(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    moq_f16_decode_ref(h + i, out + i, n - i);
}
