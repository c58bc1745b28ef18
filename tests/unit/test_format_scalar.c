/* test_format_scalar.c — the scalar encoders and decoders against tables and rules written here
 * from the bit grammars (NUMERICS.md §1), independently of src/format:
 *
 *   - every code of e4m3, e8m0, e2m1, bf16, f16 decodes to the value its grammar gives (computed
 *     with ldexp in double), NaN codes to a NaN;
 *   - encode(decode(c)) == c for every non-NaN code, in every mode;
 *   - round to nearest even at every midpoint between neighbouring codes (e4m3, bf16, f16: all of
 *     them, incl. 464 and the overflow midpoints), one ulp either side going down/up; the e2m1 tie
 *     table of NUMERICS §1.3 and its saturation;
 *   - e8m0 UP_SAT against the ceil-to-a-power-of-two rule (frexp in double) over the golden inputs;
 *   - NUMERICS §2.3's worked NVFP4 example bytes (E7 02 F5 24 69 C0 36 1F) and §5.1's FP8 double
 *     rounding example (code 0x48) through src/quant/export_ref.c;
 *   - invalid (encoding, mode) pairs and arguments give MOQ_ERR_INVALID_ARG with a message.
 */
#include "tu.h"

#include <math.h>

#include "format/format.h"
#include "quant/export_ref.h"

static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Value of a code from its grammar: sign bit at `sbit`, `eb` exponent bits, `mb` mantissa bits,
 * bias, and whether the all-ones exponent is inf/NaN (IEEE) or only m = all-ones is NaN (fn). */
typedef struct grammar {
    int  sbit, eb, mb, bias;
    bool ieee_special; /* e = max: inf (m = 0) / NaN; else (e4m3fn) only e,m all ones is NaN */
    bool has_nan;
} grammar;

static double grammar_value(const grammar *g, uint32_t c) {
    const uint32_t s = (c >> g->sbit) & 1, e = (c >> g->mb) & ((1u << g->eb) - 1), m = c & ((1u << g->mb) - 1);
    const uint32_t emax = (1u << g->eb) - 1;
    const double sign = s ? -1.0 : 1.0;
    if (g->ieee_special && e == emax) return m ? NAN : sign * INFINITY;
    if (!g->ieee_special && g->has_nan && e == emax && m == (1u << g->mb) - 1) return NAN;
    if (e == 0) return sign * ldexp((double)m, 1 - g->bias - g->mb);
    return sign * ldexp(1.0 + ldexp((double)m, -g->mb), (int)e - g->bias);
}

static const grammar G_E4M3 = {7, 4, 3, 7, false, true};
static const grammar G_E2M1 = {3, 2, 1, 1, false, false};
static const grammar G_BF16 = {15, 8, 7, 127, true, true};
static const grammar G_F16 = {15, 5, 10, 15, true, true};

/* Compares a decoded float with the grammar's value: NaN as NaN, else bit-exact (incl. -0). */
static int same_value(float got, double want) {
    if (isnan(want)) return isnan(got);
    return fbits(got) == fbits((float)want) && (double)got == want;
}

typedef float (*dec8_fn)(uint8_t);
typedef float (*dec16_fn)(uint16_t);

static void test_decode_all_codes(void **state) {
    (void)state;
    size_t bad = 0;
    struct { const char *name; const grammar *g; uint32_t ncodes; dec8_fn d8; dec16_fn d16; } k[] = {
        {"e4m3", &G_E4M3, 256, moq_e4m3_decode, NULL},
        {"e2m1", &G_E2M1, 16, moq_e2m1_decode, NULL},
        {"bf16", &G_BF16, 65536, NULL, moq_bf16_decode},
        {"f16", &G_F16, 65536, NULL, moq_f16_decode},
    };
    for (size_t f = 0; f < sizeof k / sizeof k[0]; f++)
        for (uint32_t c = 0; c < k[f].ncodes; c++) {
            const float got = k[f].d8 ? k[f].d8((uint8_t)c) : k[f].d16((uint16_t)c);
            const double want = grammar_value(k[f].g, c);
            if (same_value(got, want)) continue;
            if (bad++ < 5) print_message("  %s decode 0x%X: got %a, want %a\n", k[f].name, c, (double)got, want);
        }
    /* e8m0: 2^(c-127), 0xFF NaN; 0x00 is the binary32 subnormal 2^-127 */
    for (uint32_t c = 0; c < 256; c++) {
        const double want = c == 255 ? NAN : ldexp(1.0, (int)c - 127);
        if (same_value(moq_e8m0_decode((uint8_t)c), want)) continue;
        if (bad++ < 5) print_message("  e8m0 decode 0x%X: got %a, want %a\n", c, (double)moq_e8m0_decode((uint8_t)c), want);
    }
    if (bad) print_message("  %zu codes decode wrongly\n", bad);
    assert_int_equal(bad, 0);
    /* spot values from NUMERICS §1.1 / §1.3 */
    assert_true(moq_e4m3_decode(0x7E) == 448.0f && moq_e4m3_decode(0x01) == 0x1p-9f && moq_e4m3_decode(0x38) == 1.0f);
    assert_true(isnan(moq_e4m3_decode(0x7F)) && isnan(moq_e4m3_decode(0xFF)));
    assert_true(moq_e2m1_decode(7) == 6.0f && moq_e2m1_decode(0xD) == -3.0f);
    assert_true(fbits(moq_e8m0_decode(0)) == 0x00400000u);
}

typedef uint32_t (*enc_fn)(float);
static uint32_t e4m3_rne(float x) { return moq_e4m3_encode_rne(x); }
static uint32_t e4m3_sat(float x) { return moq_e4m3_encode_rne_sat(x); }
static uint32_t e8m0_rne(float x) { return moq_e8m0_encode_rne(x); }
static uint32_t e8m0_up(float x) { return moq_e8m0_encode_up_sat(x); }
static uint32_t e2m1_sat(float x) { return moq_e2m1_encode_rne_sat(x); }
static uint32_t bf16_rne(float x) { return moq_bf16_encode_rne(x); }
static uint32_t f16_rne(float x) { return moq_f16_encode_rne(x); }

static void test_roundtrip(void **state) {
    (void)state;
    struct { const char *name; const grammar *g; uint32_t ncodes; enc_fn enc; } k[] = {
        {"e4m3 RNE", &G_E4M3, 256, e4m3_rne},   {"e4m3 RNE_SAT", &G_E4M3, 256, e4m3_sat},
        {"e2m1 RNE_SAT", &G_E2M1, 16, e2m1_sat}, {"bf16 RNE", &G_BF16, 65536, bf16_rne},
        {"f16 RNE", &G_F16, 65536, f16_rne},
    };
    size_t bad = 0, checked = 0;
    for (size_t f = 0; f < sizeof k / sizeof k[0]; f++)
        for (uint32_t c = 0; c < k[f].ncodes; c++) {
            const double v = grammar_value(k[f].g, c);
            if (isnan(v)) continue;
            checked++;
            const uint32_t got = k[f].enc((float)v);
            if (got == c) continue;
            if (bad++ < 5) print_message("  %s: encode(%a) = 0x%X, want 0x%X\n", k[f].name, v, got, c);
        }
    for (uint32_t c = 0; c < 255; c++) { /* e8m0: both modes, every finite code */
        const float v = (float)ldexp(1.0, (int)c - 127);
        checked += 2;
        if (e8m0_rne(v) != c && bad++ < 5) print_message("  e8m0 RNE: encode(2^%d) = 0x%X\n", (int)c - 127, e8m0_rne(v));
        if (e8m0_up(v) != c && bad++ < 5) print_message("  e8m0 UP_SAT: encode(2^%d) = 0x%X\n", (int)c - 127, e8m0_up(v));
    }
    print_message("  %zu code round trips checked\n", checked);
    assert_int_equal(bad, 0);
}

/* For each pair of neighbouring non-negative codes (lo, lo+1) of a format with the mantissa in the
 * low bits: the exact midpoint rounds to the code with the even last bit, one f32 ulp below goes
 * to lo, one above to lo+1; the same mirrored for negative inputs. Past the largest finite code
 * `last`, the neighbour is the value `top` (the next grid point the format lacks), and inputs
 * rounding there encode to `top_code` (inf, NaN, or the saturated maximum). */
static size_t check_midpoints(const char *name, const grammar *g, uint32_t last, double top, uint32_t top_code,
                              enc_fn enc) {
    size_t bad = 0;
    const uint32_t sign = 1u << g->sbit;
    for (uint32_t lo = 0; lo <= last; lo++) {
        const double vlo = grammar_value(g, lo), vhi = lo == last ? top : grammar_value(g, lo + 1);
        const uint32_t chi = lo == last ? top_code : lo + 1;
        const float mid = (float)((vlo + vhi) / 2);
        if ((double)mid != (vlo + vhi) / 2) fail_msg("%s: midpoint of 0x%X not representable", name, lo);
        const uint32_t even = (lo & 1) ? chi : lo;
        const float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        const struct { float x; uint32_t want; } cases[] = {
            {mid, even}, {below, lo}, {above, chi}, {-mid, even | sign}, {-below, lo | sign}, {-above, chi | sign},
        };
        for (size_t i = 0; i < 6; i++) {
            const uint32_t got = enc(cases[i].x);
            if (got == cases[i].want) continue;
            if (bad++ < 5)
                print_message("  %s: encode(%a) = 0x%X, want 0x%X (between 0x%X and 0x%X)\n", name, (double)cases[i].x,
                              got, cases[i].want, lo, chi);
        }
    }
    return bad;
}

static void test_rne_ties(void **state) {
    (void)state;
    size_t bad = 0;
    /* e4m3: 0x00..0x7E; above 448 the next grid point would be 480 (code 0x7F): the 464 tie goes
     * to 448; just above 464, RNE gives NaN 0x7F and RNE_SAT stays at 448. */
    bad += check_midpoints("e4m3 RNE", &G_E4M3, 0x7E, 480.0, 0x7F, e4m3_rne);
    bad += check_midpoints("e4m3 RNE_SAT", &G_E4M3, 0x7E, 480.0, 0x7E, e4m3_sat);
    /* bf16/f16: the overflow midpoint (max + half ulp) ties to inf (even), as IEEE RNE */
    bad += check_midpoints("bf16 RNE", &G_BF16, 0x7F7F, ldexp(1.0, 128), 0x7F80, bf16_rne);
    bad += check_midpoints("f16 RNE", &G_F16, 0x7BFF, 65536.0, 0x7C00, f16_rne);
    assert_int_equal(bad, 0);

    /* e4m3 values named in NUMERICS §1.1 */
    assert_int_equal(moq_e4m3_encode_rne(464.0f), 0x7E);
    assert_int_equal(moq_e4m3_encode_rne(-464.0f), 0xFE);
    assert_int_equal(moq_e4m3_encode_rne(480.0f), 0x7F);
    assert_int_equal(moq_e4m3_encode_rne(-INFINITY), 0xFF);
    assert_int_equal(moq_e4m3_encode_rne_sat(1e30f), 0x7E);
    assert_int_equal(moq_e4m3_encode_rne_sat(-INFINITY), 0xFE);
    assert_int_equal(moq_e4m3_encode_rne_sat(NAN), 0x7F);
    assert_int_equal(moq_e4m3_encode_rne(0x1p-10f), 0x00);          /* half the smallest subnormal */
    assert_int_equal(moq_e4m3_encode_rne(-0x1p-10f), 0x80);
    assert_int_equal(moq_e4m3_encode_rne(1.5f * 0x1p-9f), 0x02);    /* subnormal tie, up to even */
    assert_int_equal(moq_e4m3_encode_rne(2.5f * 0x1p-9f), 0x02);    /* subnormal tie, down to even */
    assert_int_equal(moq_e4m3_encode_rne(7.5f * 0x1p-9f), 0x08);    /* last subnormal tie -> min normal */
    assert_int_equal(moq_e4m3_encode_rne(0x1p-140f), 0x00);         /* f32 subnormal */

    /* e2m1: NUMERICS §1.3 tie table and saturation, both signs */
    const struct { float x; uint8_t code; } e2[] = {
        {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},
        {0.2500001f, 1}, {0.7499999f, 1}, {1.2500001f, 3}, {1.7499999f, 3}, {2.5000002f, 5}, {3.4999998f, 5},
        {5.0000005f, 7}, {6.0f, 7}, {6.5f, 7}, {1e30f, 7}, {INFINITY, 7}, {0.0f, 0}, {1e-30f, 0},
    };
    for (size_t i = 0; i < sizeof e2 / sizeof e2[0]; i++) {
        if (moq_e2m1_encode_rne_sat(e2[i].x) != e2[i].code || moq_e2m1_encode_rne_sat(-e2[i].x) != (e2[i].code | 8)) {
            print_message("  e2m1 encode(±%a) = 0x%X / 0x%X, want 0x%X / 0x%X\n", (double)e2[i].x,
                          moq_e2m1_encode_rne_sat(e2[i].x), moq_e2m1_encode_rne_sat(-e2[i].x), e2[i].code,
                          e2[i].code | 8);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* e8m0 UP_SAT: the rule written from NUMERICS §1.2 with frexp in double, over the golden inputs:
 * NaN -> 255; |x| = 0 or |x| <= 2^-127 -> 0; else ceil(log2 |x|) + 127 capped at 254 (inf -> 254). */
static uint32_t e8m0_up_rule(float x) {
    const double a = fabs((double)x);
    if (isnan(a)) return 255;
    if (isinf(a)) return 254;
    if (a <= ldexp(1.0, -127)) return 0;
    int k;
    const double f = frexp(a, &k); /* a = f · 2^k, f in [0.5, 1) */
    const int e = f == 0.5 ? k - 1 : k;
    return (uint32_t)(e + 127 > 254 ? 254 : e + 127);
}

static void test_e8m0_up_sat_rule(void **state) {
    (void)state;
    char *p = tu_data_path("golden/formats/inputs_f32.bin");
    size_t len = 0;
    float *in = tu_read_file(p, &len);
    free(p);
    const size_t n = len / 4;
    assert_int_equal(n, 1066068);
    uint8_t *bulk = malloc(n);
    TU_OK(moq_elem_encode_f32(MOQ_ELEM_E8M0, MOQ_ROUND_UP_SAT, in, bulk, n, 2, err_));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t want = e8m0_up_rule(in[i]), s = moq_e8m0_encode_up_sat(in[i]);
        if (s == want && bulk[i] == want) continue;
        if (bad++ < 5)
            print_message("  e8m0 UP_SAT [%zu] input 0x%08X: scalar 0x%02X, bulk 0x%02X, rule 0x%02X\n", i, fbits(in[i]),
                          s, bulk[i], want);
    }
    if (bad) print_message("  e8m0 UP_SAT: %zu of %zu mismatch\n", bad, n);
    assert_int_equal(bad, 0);
    /* the edges of the rule, named */
    assert_int_equal(moq_e8m0_encode_up_sat(from_bits(0x00400000u)), 0);   /* exactly 2^-127 */
    assert_int_equal(moq_e8m0_encode_up_sat(from_bits(0x00400001u)), 1);   /* just above */
    assert_int_equal(moq_e8m0_encode_up_sat(1.0f), 127);
    assert_int_equal(moq_e8m0_encode_up_sat(nextafterf(1.0f, 2.0f)), 128);
    assert_int_equal(moq_e8m0_encode_up_sat(-3.0f), 129);
    assert_int_equal(moq_e8m0_encode_up_sat(0x1.8p127f), 254);
    free(bulk);
    free(in);
}

/* NUMERICS §2.3 worked example: bf16 weights, tensor amax 1.34375. Row 0 is the example block,
 * row 1 holds the value that makes the tensor amax 1.34375. */
static void test_nvfp4_worked_example(void **state) {
    (void)state;
    float W[2 * 16] = {
        0.75f, -0.5f, 0.10009765625f, 0.0f, 0.330078125f, -0.75f, 0.25f, 0.125f,
        -0.0625f, 0.6015625f, 0.010009765625f, -0.30078125f, 0.44921875f, 0.2001953125f, -0.69921875f, 0.050048828125f,
    };
    W[16 + 5] = 1.34375f;
    uint8_t packed[2 * 8], sf[2];
    float ws2 = 0;
    moq_export_nvfp4_weight(W, 2, 16, -1.0f, packed, sf, &ws2);
    assert_int_equal(fbits(ws2), 0x3A030C31u);
    assert_int_equal(sf[0], 0x78); /* 256: pbs 250.05 is above the 248 midpoint */
    const uint8_t want[8] = {0xE7, 0x02, 0xF5, 0x24, 0x69, 0xC0, 0x36, 0x1F};
    for (int i = 0; i < 8; i++)
        if (packed[i] != want[i]) fail_msg("§2.3 byte %d: got 0x%02X, want 0x%02X", i, packed[i], want[i]);
    assert_int_equal(sf[1], 0x7E);                    /* block amax == tensor amax -> 448 */
    assert_int_equal(packed[8 + 2], 0x70);            /* 1.34375 at k = 5: +6.0 in the high nibble */
}

/* NUMERICS §5.1: w = 0.009521484375 (bf16 0x3C1C), s = f32(1/448): w/s = 4.265625 -> bf16 4.25 ->
 * e4m3 4.0 (0x48), where a single rounding would give 4.5 (0x49). */
static void test_fp8_double_rounding_example(void **state) {
    (void)state;
    const float W[2] = {0.009521484375f, 1.0f};
    uint8_t q[2];
    float s = 0;
    moq_export_fp8_tensor_weight(W, 1, 2, -1.0f, 1, q, &s);
    assert_int_equal(fbits(s), 0x3B124925u);
    assert_int_equal(q[0], 0x48);
    assert_int_equal(moq_e4m3_encode_rne(W[0] / s), 0x49); /* without the bf16 step */
    assert_int_equal(q[1], 0x7E);
}

static void test_invalid_args(void **state) {
    (void)state;
    float in[4] = {1, 2, 3, 4};
    uint8_t out[16];
    const struct { moq_elem e; int mode; const char *msg; } bad[] = {
        {MOQ_ELEM_E4M3, MOQ_ROUND_UP_SAT, "mode UP_SAT is not defined for e4m3"},
        {MOQ_ELEM_E2M1, MOQ_ROUND_RNE, "mode RNE is not defined for e2m1"},
        {MOQ_ELEM_E8M0, MOQ_ROUND_RNE_SAT, "mode RNE_SAT is not defined for e8m0"},
        {MOQ_ELEM_BF16, MOQ_ROUND_UP_SAT, "is not defined for bf16"},
        {MOQ_ELEM_F16, MOQ_ROUND_RNE_SAT, "is not defined for f16"},
        {MOQ_ELEM_E4M3, 7, "is not defined for e4m3"},
        {MOQ_ELEM_NONE, MOQ_ROUND_RNE, "unknown element encoding"},
        {MOQ_ELEM_COUNT, MOQ_ROUND_RNE, "unknown element encoding"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moq_error e = {0};
        moq_status st = moq_elem_encode_f32(bad[i].e, (moq_round)bad[i].mode, in, out, 4, 1, &e);
        TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "moq_elem_encode_f32", bad[i].msg);
    }
    moq_error e = {0};
    moq_status st = moq_elem_encode_f32(MOQ_ELEM_E4M3, MOQ_ROUND_RNE, NULL, out, 4, 1, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "moq_elem_encode_f32", "NULL buffer");
    memset(&e, 0, sizeof e);
    st = moq_elem_decode_f32(MOQ_ELEM_NONE, out, in, 4, 1, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "moq_elem_decode_f32", "unknown element encoding");
    memset(&e, 0, sizeof e);
    st = moq_elem_decode_f32(MOQ_ELEM_E2M1, NULL, in, 4, 1, &e);
    TU_ERR(&e, st, MOQ_ERR_INVALID_ARG, "moq_elem_decode_f32", "NULL buffer");
    /* zero elements with NULL buffers is fine */
    TU_OK(moq_elem_encode_f32(MOQ_ELEM_E4M3, MOQ_ROUND_RNE, NULL, NULL, 0, 1, err_));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_all_codes),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_rne_ties),
        cmocka_unit_test(test_e8m0_up_sat_rule),
        cmocka_unit_test(test_nvfp4_worked_example),
        cmocka_unit_test(test_fp8_double_rounding_example),
        cmocka_unit_test(test_invalid_args),
    };
    return cmocka_run_group_tests_name("format_scalar", tests, NULL, NULL);
}
