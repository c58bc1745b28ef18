/* format.c — the element table (one row per encoding), the converter table (one row per
 * encoder/decoder and target) and the public bulk converters that pick a row at run time.
 *
 * Vector rows (format_avx2.c, format_avx512.c) are listed before the portable rows; the first row
 * whose required CPU bits are present wins. Tested by tests/unit/test_format_golden.c and
 * tests/unit/test_format_vector.c.
 */
#include "format/format.h"

#include <omp.h>

#include "core/error.h"

#define M(r) (1u << (r))
const moq_elem_info moq_elem_table[MOQ_ELEM_COUNT] = {
    /*                  name    bits  max            encode modes                                   */
    [MOQ_ELEM_NONE] = {"none",  0,    0.0f,          0},
    [MOQ_ELEM_F32]  = {"f32",   32,   0x1.fffffep127f, M(MOQ_ROUND_RNE)},
    [MOQ_ELEM_BF16] = {"bf16",  16,   0x1.fep127f,   M(MOQ_ROUND_RNE)},
    [MOQ_ELEM_F16]  = {"f16",   16,   65504.0f,      M(MOQ_ROUND_RNE)},
    [MOQ_ELEM_E4M3] = {"e4m3",  8,    448.0f,        M(MOQ_ROUND_RNE) | M(MOQ_ROUND_RNE_SAT)},
    [MOQ_ELEM_E8M0] = {"e8m0",  8,    0x1p127f,      M(MOQ_ROUND_RNE) | M(MOQ_ROUND_UP_SAT)},
    [MOQ_ELEM_E2M1] = {"e2m1",  4,    6.0f,          M(MOQ_ROUND_RNE_SAT)},
};
#undef M

/* Vector rows are declared by their files; the portable rows close each group. */
#include "format/format_simd.h"

#define ENC(nm, el, md, tg, nd, fn) {nm, el, md, tg, nd, fn, NULL}
#define DEC(nm, el, tg, nd, fn)     {nm, el, -1, tg, nd, NULL, fn}
const moq_conv_row moq_conv_table[] = {
    MOQ_FORMAT_AVX512_ROWS
    MOQ_FORMAT_AVX2_ROWS
    /* name                   elem            mode               target              need  function */
    ENC("e4m3_rne_ref",       MOQ_ELEM_E4M3, MOQ_ROUND_RNE,     MOQ_TARGET_CPU_REF, 0, moq_e4m3_encode_rne_ref),
    ENC("e4m3_rne_sat_ref",   MOQ_ELEM_E4M3, MOQ_ROUND_RNE_SAT, MOQ_TARGET_CPU_REF, 0, moq_e4m3_encode_rne_sat_ref),
    ENC("e8m0_rne_ref",       MOQ_ELEM_E8M0, MOQ_ROUND_RNE,     MOQ_TARGET_CPU_REF, 0, moq_e8m0_encode_rne_ref),
    ENC("e8m0_up_sat_ref",    MOQ_ELEM_E8M0, MOQ_ROUND_UP_SAT,  MOQ_TARGET_CPU_REF, 0, moq_e8m0_encode_up_sat_ref),
    ENC("e2m1_rne_sat_ref",   MOQ_ELEM_E2M1, MOQ_ROUND_RNE_SAT, MOQ_TARGET_CPU_REF, 0, moq_e2m1_encode_rne_sat_ref),
    ENC("bf16_rne_ref",       MOQ_ELEM_BF16, MOQ_ROUND_RNE,     MOQ_TARGET_CPU_REF, 0, moq_bf16_encode_rne_ref),
    ENC("f16_rne_ref",        MOQ_ELEM_F16,  MOQ_ROUND_RNE,     MOQ_TARGET_CPU_REF, 0, moq_f16_encode_rne_ref),
    ENC("f32_copy_ref",       MOQ_ELEM_F32,  MOQ_ROUND_RNE,     MOQ_TARGET_CPU_REF, 0, moq_f32_copy_ref),
    DEC("e4m3_decode_ref",    MOQ_ELEM_E4M3,                    MOQ_TARGET_CPU_REF, 0, moq_e4m3_decode_ref),
    DEC("e8m0_decode_ref",    MOQ_ELEM_E8M0,                    MOQ_TARGET_CPU_REF, 0, moq_e8m0_decode_ref),
    DEC("e2m1_decode_ref",    MOQ_ELEM_E2M1,                    MOQ_TARGET_CPU_REF, 0, moq_e2m1_decode_ref),
    DEC("bf16_decode_ref",    MOQ_ELEM_BF16,                    MOQ_TARGET_CPU_REF, 0, moq_bf16_decode_ref),
    DEC("f16_decode_ref",     MOQ_ELEM_F16,                     MOQ_TARGET_CPU_REF, 0, moq_f16_decode_ref),
    DEC("f32_decode_ref",     MOQ_ELEM_F32,                     MOQ_TARGET_CPU_REF, 0, moq_f32_decode_ref),
};
#undef ENC
#undef DEC
const size_t moq_conv_table_len = sizeof moq_conv_table / sizeof moq_conv_table[0];

const moq_conv_row *moq_conv_find(moq_elem e, int mode, uint32_t features, moq_target only) {
    for (size_t i = 0; i < moq_conv_table_len; i++) {
        const moq_conv_row *r = &moq_conv_table[i];
        if (r->elem != e || r->mode != mode) continue;
        if (only != MOQ_TARGET_COUNT && r->target != only) continue;
        if ((r->need & features) != r->need) continue;
        return r;
    }
    return NULL;
}

const char *moq_elem_name(moq_elem e) {
    return (unsigned)e < MOQ_ELEM_COUNT ? moq_elem_table[e].name : "invalid";
}

int moq_elem_bits(moq_elem e) { return (unsigned)e < MOQ_ELEM_COUNT ? moq_elem_table[e].bits : 0; }

static const char *const round_names[MOQ_ROUND_COUNT] = {"RNE", "RNE_SAT", "UP_SAT"};

/* Work is split in chunks of 4096 elements (even, so e2m1 bytes never straddle two threads). */
#define CHUNK 4096

moq_status moq_elem_encode_f32(moq_elem e, moq_round mode, const float *in, void *out, size_t n,
                               int n_threads, moq_error *err) {
    if ((unsigned)e >= MOQ_ELEM_COUNT || e == MOQ_ELEM_NONE)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_elem_encode_f32", "unknown element encoding %d", (int)e);
    if ((unsigned)mode >= MOQ_ROUND_COUNT || !(moq_elem_table[e].modes & (1u << mode)))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_elem_encode_f32", "mode %s is not defined for %s",
                        (unsigned)mode < MOQ_ROUND_COUNT ? round_names[mode] : "?", moq_elem_table[e].name);
    if (n && (!in || !out))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_elem_encode_f32", "NULL buffer for %zu elements", n);
    const moq_conv_row *r = moq_conv_find(e, (int)mode, moq_cpu_features(), MOQ_TARGET_COUNT);
    if (!r) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "moq_elem_encode_f32", "no converter row for %s", moq_elem_table[e].name);
    const size_t nchunks = (n + CHUNK - 1) / CHUNK;
    const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    if (nchunks <= 1 || nt == 1) {
        r->encode(in, out, n);
        return MOQ_OK;
    }
    const size_t bytes_per_chunk = moq_elem_bytes(e, CHUNK);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        const size_t lo = c * CHUNK, len = (n - lo) < CHUNK ? n - lo : CHUNK;
        r->encode(in + lo, (uint8_t *)out + c * bytes_per_chunk, len);
    }
    return MOQ_OK;
}

moq_status moq_elem_decode_f32(moq_elem e, const void *in, float *out, size_t n, int n_threads,
                               moq_error *err) {
    if ((unsigned)e >= MOQ_ELEM_COUNT || e == MOQ_ELEM_NONE)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_elem_decode_f32", "unknown element encoding %d", (int)e);
    if (n && (!in || !out))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_elem_decode_f32", "NULL buffer for %zu elements", n);
    const moq_conv_row *r = moq_conv_find(e, -1, moq_cpu_features(), MOQ_TARGET_COUNT);
    if (!r) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "moq_elem_decode_f32", "no converter row for %s", moq_elem_table[e].name);
    const size_t nchunks = (n + CHUNK - 1) / CHUNK;
    const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    if (nchunks <= 1 || nt == 1) {
        r->decode(in, out, n);
        return MOQ_OK;
    }
    const size_t bytes_per_chunk = moq_elem_bytes(e, CHUNK);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        const size_t lo = c * CHUNK, len = (n - lo) < CHUNK ? n - lo : CHUNK;
        r->decode((const uint8_t *)in + c * bytes_per_chunk, out + lo, len);
    }
    return MOQ_OK;
}
