/* rows16_avx2.c — the nvfp4_vnni16 pack (layout.h) on AVX2: per 16-row tile and 8 source dwords
 * (64 k) of each row, the nibble regrouping of moq_layout_nvfp4_vnni16_pack_ref on 32 bytes at once
 * (two vpshufb pairs on the low and high nibble planes), then two 8 x 8 dword transposes so that
 * each destination dword group (16 rows of one g, 64 bytes) is written by two 32-byte stores instead
 * of 16 scattered 4-byte ones; rows16k4 and rows16 (2- and 4-byte units) through the same
 * transposes. Bit-identical to the `_ref` packers of rows16.c (tests/kernels/test_layout.c checks
 * every packer against the layouts' formulas). Load time, issue 14. */
#include <immintrin.h>
#include <string.h>

#include "kernels/layout/layout.h"

/* bytes (b0 b1 b2 b3) of each dword -> (l0|l2<<4, h0|h2<<4, l1|l3<<4, h1|h3<<4), l/h = low/high nibble */
static inline __m256i regroup(__m256i x) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i L = _mm256_and_si256(x, m), H = _mm256_and_si256(_mm256_srli_epi16(x, 4), m);
#define I4(a, b, c, d) (a), (b), (c), (d), 4 + (a), 4 + (b), 4 + (c), 4 + (d), 8 + (a), 8 + (b), 8 + (c), 8 + (d), 12 + (a), 12 + (b), 12 + (c), 12 + (d)
#define Z (-128) /* stays negative (high bit set: vpshufb writes 0) after the +4, +8, +12 of I4 */
    const __m256i iA = _mm256_setr_epi8(I4(0, Z, 1, Z), I4(0, Z, 1, Z)), iB = _mm256_setr_epi8(I4(Z, 0, Z, 1), I4(Z, 0, Z, 1));
    const __m256i iC = _mm256_setr_epi8(I4(2, Z, 3, Z), I4(2, Z, 3, Z)), iD = _mm256_setr_epi8(I4(Z, 2, Z, 3), I4(Z, 2, Z, 3));
#undef I4
#undef Z
    const __m256i t1 = _mm256_or_si256(_mm256_shuffle_epi8(L, iA), _mm256_shuffle_epi8(H, iB));
    const __m256i t2 = _mm256_or_si256(_mm256_shuffle_epi8(L, iC), _mm256_shuffle_epi8(H, iD));
    return _mm256_or_si256(t1, _mm256_slli_epi16(t2, 4)); /* t2 bytes < 16: no carry across bytes */
}

/* r[0..7] (8 rows × 8 dwords) -> r[g] = dword g of rows 0..7 */
static inline void transpose8(__m256i r[8]) {
    __m256i a[8], b[8];
    for (int i = 0; i < 8; i += 2) a[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), a[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {
        b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]), b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]), b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    /* b[0..3]: rows 0-3, dwords (0,4) (1,5) (2,6) (3,7) per 128-bit lane; b[4..7]: rows 4-7 */
    for (int i = 0; i < 4; i++) r[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20), r[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
}

/* Tile t: for dword groups g < G8 (a multiple of 8), destination dword (g, row 16t + r) = the source
 * row's dword g, regrouped for nvfp4_vnni16 when asked; rows past R give 0. Destination groups are 64
 * bytes (16 rows), source rows row_bytes apart. */
static inline void dword_tiles(const uint8_t *src, int64_t row_bytes, int64_t R, int64_t t, int64_t G8, uint8_t *o, int nibbles) {
    for (int64_t g = 0; g < G8; g += 8)
        for (int h = 0; h < 2; h++) {
            __m256i r[8];
            for (int i = 0; i < 8; i++) {
                const int64_t n = 16 * t + 8 * h + i;
                if (n >= R) {
                    r[i] = _mm256_setzero_si256();
                    continue;
                }
                const __m256i v = _mm256_loadu_si256((const __m256i *)(src + n * row_bytes + 4 * g));
                r[i] = nibbles ? regroup(v) : v;
            }
            transpose8(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_si256((__m256i *)(o + (g + j) * 64 + 32 * h), r[j]);
        }
}

void moq_layout_nvfp4_vnni16_pack_avx2(const uint8_t *src, int64_t N, int64_t K, uint8_t *dst) {
    const int64_t G = K / 8, tiles = (N + 15) / 16, G8 = G / 8 * 8;
#pragma omp parallel for schedule(static) if (N * K > ((int64_t)1 << 21))
    for (int64_t t = 0; t < tiles; t++) {
        uint8_t *o = dst + (size_t)(t * G * 64);
        dword_tiles(src, K / 2, N, t, G8, o, 1);
        for (int rr = 0; rr < 16; rr++) { /* the last G % 8 groups: as the reference */
            const int64_t n = 16 * t + rr;
            for (int64_t g = G8; g < G; g++) {
                uint8_t *d = o + g * 64 + 4 * rr;
                if (n >= N) {
                    d[0] = d[1] = d[2] = d[3] = 0;
                    continue;
                }
                const uint8_t *i = src + n * (K / 2) + 4 * g;
                d[0] = (uint8_t)((i[0] & 0xF) | (i[2] & 0xF) << 4);
                d[1] = (uint8_t)((i[0] >> 4) | (i[2] & 0xF0));
                d[2] = (uint8_t)((i[1] & 0xF) | (i[3] & 0xF) << 4);
                d[3] = (uint8_t)((i[1] >> 4) | (i[3] & 0xF0));
            }
        }
    }
}

/* rows16k4 (C bytes per row, groups of 4 columns; the last group and padding rows zero-filled). */
void moq_layout_rows16k4_pack_avx2(const uint8_t *src, int64_t R, int64_t C, uint8_t *dst) {
    const int64_t G = (C + 3) / 4, tiles = (R + 15) / 16, G8 = C / 4 / 8 * 8; /* whole groups only in the vector part */
#pragma omp parallel for schedule(static) if (R * C > ((int64_t)1 << 20))
    for (int64_t t = 0; t < tiles; t++) {
        uint8_t *o = dst + (size_t)(t * G * 64);
        dword_tiles(src, C, R, t, G8, o, 0);
        for (int rr = 0; rr < 16; rr++) {
            const int64_t r = 16 * t + rr;
            for (int64_t g = G8; g < G; g++)
                for (int j = 0; j < 4; j++) o[g * 64 + 4 * rr + j] = r < R && 4 * g + j < C ? src[r * C + 4 * g + j] : 0;
        }
    }
}

/* rows16 with 2-byte units: per tile and 16 columns, pairs of columns as dwords through the same
 * transposes, then each column's 8 + 8 rows gathered from the pair (vpshufb + vpermq) into one 32-byte
 * store. 4-byte units are rows16k4's dword groups. Other units: the reference. */
void moq_layout_rows16_pack_avx2(const void *src, int64_t R, int64_t C, size_t unit, void *dst) {
    if (unit == 4) {
        /* unit 4: destination (c, r) at (t·C + c)·64 + 4r, i.e. rows16k4 of 4C bytes per row */
        moq_layout_rows16k4_pack_avx2(src, R, 4 * C, dst);
        return;
    }
    if (unit != 2) {
        moq_layout_rows16_pack_ref(src, R, C, unit, dst);
        return;
    }
    const uint8_t *s = src;
    uint8_t *d = dst;
    const int64_t tiles = (R + 15) / 16, C16 = C / 16 * 16;
    /* per 128-bit lane: the even u16 of its 4 dwords to bytes 0-7, the odd ones to 8-15 */
    const __m256i eo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
#pragma omp parallel for schedule(static) if (R * C * 2 > ((int64_t)1 << 20))
    for (int64_t t = 0; t < tiles; t++) {
        uint8_t *o = d + (size_t)(t * C * 32);
        for (int64_t c = 0; c < C16; c += 16) {
            __m256i a[8], b[8];
            for (int i = 0; i < 8; i++) {
                const int64_t r0 = 16 * t + i, r1 = r0 + 8;
                a[i] = r0 < R ? _mm256_loadu_si256((const __m256i *)(s + (r0 * C + c) * 2)) : _mm256_setzero_si256();
                b[i] = r1 < R ? _mm256_loadu_si256((const __m256i *)(s + (r1 * C + c) * 2)) : _mm256_setzero_si256();
            }
            transpose8(a), transpose8(b); /* a[j]: column pair (c + 2j, c + 2j + 1) of rows 0-7, b[j]: rows 8-15 */
            for (int j = 0; j < 8; j++) {
                /* -> [rows 0-7 of column c + 2j | rows 0-7 of column c + 2j + 1] */
                const __m256i A = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a[j], eo), 0xD8);
                const __m256i B = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b[j], eo), 0xD8);
                _mm256_storeu_si256((__m256i *)(o + (c + 2 * j) * 32), _mm256_permute2x128_si256(A, B, 0x20));
                _mm256_storeu_si256((__m256i *)(o + (c + 2 * j + 1) * 32), _mm256_permute2x128_si256(A, B, 0x31));
            }
        }
        for (int rr = 0; rr < 16; rr++) { /* the last C % 16 columns */
            const int64_t r = 16 * t + rr;
            for (int64_t c = C16; c < C; c++) {
                uint8_t *q = o + c * 32 + 2 * rr;
                if (r < R) memcpy(q, s + (r * C + c) * 2, 2);
                else q[0] = q[1] = 0;
            }
        }
    }
}
