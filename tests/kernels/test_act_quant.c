/* test_act_quant.c — the activation quantizers (src/kernels/cpu/act_quant_ref.c) bit-exact against
 * definitions written here from NUMERICS.md §2.4, §4.3, §5.1-§5.3, with encoders of our own
 * (nearest value by search over the code book, ties to the even code) that share nothing with
 * src/format; the §2.4 worked example; the H200 rcpa table facts (golden/rcp/README.md); and the
 * "exact vs rcpa forms differ at most one e2m1 step, only at ties" property.
 * Fresh random data each run; the seed is printed on failure. */
#include "tu.h"

#include <math.h>
#include <time.h>

#include "kernels/cpu/act_quant.h"

#include "kref.h"

static void test_fp8_static(void **state) {
    (void)state;
    enum { K = 1000 };
    float x[K];
    uint8_t q[K];
    const float scales[] = {1.0f / 448.0f, 1.0f, 0.01f, 3.7e-5f, 0.123f};
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
        fill(x, K, 500.0f * scales[s]);
        moq_act_fp8_static_ref(x, K, scales[s], q);
        const float inv = 1.0f / scales[s]; /* §5.1: multiply by the f32 reciprocal */
        for (int i = 0; i < K; i++)
            if (q[i] != t_e4s(clampf(x[i] * inv, 448.0f))) fail_msg("i=%d x=%a s=%a got %02X want %02X; seed %u", i, (double)x[i], (double)scales[s], q[i], t_e4s(clampf(x[i] * inv, 448.0f)), g_seed);
    }
}

static void test_fp8_token(void **state) {
    (void)state;
    enum { K = 777 };
    float x[K], s;
    uint8_t q[K];
    for (int rep = 0; rep < 4; rep++) {
        fill(x, K, rep == 3 ? 1e-9f : urand(0.01f, 100.0f));
        moq_act_fp8_token_ref(x, K, q, &s);
        float amax = 0;
        for (int i = 0; i < K; i++) amax = fmaxf(amax, fabsf(x[i]));
        float want = amax / 448.0f;
        const float minf = 1.0f / (448.0f * 512.0f);
        if (want < minf) want = minf;
        assert_true(s == want);
        for (int i = 0; i < K; i++) assert_int_equal(q[i], t_e4s(clampf(x[i] / want, 448.0f))); /* true division */
    }
    memset(x, 0, sizeof x); /* zero row: minimum scale, zero codes */
    moq_act_fp8_token_ref(x, K, q, &s);
    assert_true(s == (float)(1.0 / 229376.0));
    for (int i = 0; i < K; i++) assert_int_equal(q[i], 0);
}

static void test_fp8_g128(void **state) {
    (void)state;
    enum { K = 512 };
    float x[K], s[K / 128];
    uint8_t q[K];
    fill(x, K, 3.0f);
    for (int i = 128; i < 256; i++) x[i] = 0; /* a zero group: eps floor */
    moq_act_fp8_g128_ref(x, K, q, s);
    for (int g = 0; g < K / 128; g++) {
        float amax = 1e-10f;
        for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(x[128 * g + i]));
        const float want = amax / 448.0f;
        assert_true(s[g] == want);
        for (int i = 0; i < 128; i++) assert_int_equal(q[128 * g + i], t_e4s(clampf(x[128 * g + i] / want, 448.0f)));
    }
    assert_true(s[1] == 1e-10f / 448.0f);
}

static void test_nvfp4_worked_example(void **state) {
    (void)state;
    const float blk[16] = {1.0f, -2.5f, 0.3008f, 0.0f, 3.0938f, -0.05f, 0.6992f, 1.8984f, -1.2031f, 0.4492f, 2.2031f, -3.2969f, 0.8984f, 0.1504f, -0.6016f, 2.75f};
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = bf16_round(blk[i]) == blk[i] ? blk[i] : blk[i]; /* as written */
    const float is = 5.375f / 2688.0f;
    uint32_t isb;
    memcpy(&isb, &is, 4);
    assert_int_equal(isb, 0x3B030C31);
    const float S = 1.0f / is;
    uint8_t q[8], sf[1];
    moq_act_nvfp4_ref(x, 16, S, NULL, q, sf);
    const uint8_t want[8] = {0xE3, 0x01, 0x87, 0x52, 0x2C, 0xF6, 0x13, 0x6A};
    assert_int_equal(sf[0], 0x79);
    assert_memory_equal(q, want, 8);
}

static void test_nvfp4_random_exact(void **state) {
    (void)state;
    enum { K = 1024 };
    float x[K];
    uint8_t q[K / 2], sf[K / 16], q2[K / 2], sf2[K / 16];
    for (int rep = 0; rep < 20; rep++) {
        const float is = urand(1e-4f, 0.05f);
        fill(x, K, is * urand(100.0f, 3000.0f));
        for (int i = 0; i < 16; i++) x[64 + i] = 0.0f;        /* zero block: scale 0, codes 0 */
        for (int i = 0; i < 16; i++) x[128 + i] = 1e-12f * (float)i; /* far below the global scale */
        moq_act_nvfp4_ref(x, K, 1.0f / is, NULL, q, sf);
        t_nvfp4(x, K, 1.0f / is, q2, sf2);
        assert_memory_equal(sf, sf2, sizeof sf);
        assert_memory_equal(q, q2, sizeof q);
        assert_int_equal(sf[4], 0);
    }
}

static uint8_t *g_corr;

/* The AVX-512 FP8 / MXFP8 twins against the references, codes, scales and dequantized values. */
static void test_fp8_mxfp8_avx512_twins(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX512)) { print_message("no avx512: twins not run\n"); skip(); }
    enum { K = 1024 + 128 };
    static float x[K], d[K];
    static uint8_t q[K], q2[K], sf[K / 32], sf2[K / 32];
    float s1, s2, g1[K / 128], g2[K / 128];
    for (int rep = 0; rep < 30; rep++) {
        fill(x, K, urand(1e-6f, 1e4f));
        for (int i = 0; i < 32; i++) x[i] = 0.0f;                  /* zero group/block */
        for (int i = 32; i < 40; i++) x[i] = 1e-5f * (float)(i - 36); /* e4m3 subnormals after scaling */
        x[50] = 1e30f;                                            /* saturation */
        const float sc = urand(1e-4f, 1.0f);
        moq_act_fp8_static_ref(x, K - 3, sc, q);
        moq_act_fp8_static_avx512(x, K - 3, sc, q2, d);            /* odd length: masked tail */
        assert_memory_equal(q, q2, K - 3);
        for (int i = 0; i < K - 3; i++) assert_true(d[i] == (float)((q[i] & 0x80 ? -1 : 1) * e4m3_val(q[i] & 0x7F)));
        moq_act_fp8_token_ref(x, K, q, &s1);
        moq_act_fp8_token_avx512(x, K, q2, &s2, NULL);
        assert_true(s1 == s2);
        assert_memory_equal(q, q2, K);
        moq_act_fp8_g128_ref(x, K, q, g1);
        moq_act_fp8_g128_avx512(x, K, q2, g2, d);
        assert_memory_equal(g1, g2, sizeof g1);
        assert_memory_equal(q, q2, K);
        for (int i = 0; i < K; i++) assert_true(d[i] == (float)((q[i] & 0x80 ? -1 : 1) * e4m3_val(q[i] & 0x7F)) * g1[i / 128]);
        moq_act_mxfp8_ref(x, K, q, sf);
        moq_act_mxfp8_avx512(x, K, q2, sf2, NULL);
        assert_memory_equal(sf, sf2, sizeof sf);
        assert_memory_equal(q, q2, K);
    }
}

/* ---- AVX2 FP8 / MXFP8 twins: bit for bit against the reference quantizers (codes, scales) and
 * the reference decode of the reference codes (dequantized output, compared as bits so NaN
 * counts), on every input class: random rows, e4m3 rounding boundaries (every midpoint and its
 * neighbours, reached exactly: multiplier or scale 1), NaN, ±inf, ±0, f32 subnormals, zero and
 * all-NaN rows (amax = 0), K = 1 and K not a multiple of 8. In-place dequant (deq == x) too. */

static float dec_ref(uint8_t c) { return moq_e4m3_decode(c); } /* format/e4m3.c, scalar */

static void assert_bits_equal(const float *a, const float *b, size_t n, const char *what, size_t K) {
    for (size_t i = 0; i < n; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        if (ua != ub) fail_msg("%s K=%zu i=%zu: got %08X want %08X; seed %u", what, K, i, ua, ub, g_seed);
    }
}

static void check_fp8_avx2_row(const float *x, size_t K, float s_in) {
    static uint8_t q[4096], q2[4096 + 16], sf[128], sf2[128];
    static float d[4096], want[4096], xc[4096 + 1];
    float s1, s2, g1[32], g2[32];
    assert_true(K <= 4096);
    /* static */
    moq_act_fp8_static_ref(x, K, s_in, q);
    memset(q2, 0xAB, K + 16);
    moq_act_fp8_static_avx2(x, K, s_in, q2, NULL);
    assert_memory_equal(q, q2, K);
    assert_int_equal(q2[K], 0xAB); /* the tail store stops at K */
    for (size_t i = 0; i < K; i++) want[i] = dec_ref(q[i]);
    memcpy(xc, x, K * 4);
    xc[K] = 12345.0f;
    moq_act_fp8_static_avx2(xc, K, s_in, NULL, xc); /* in place */
    assert_bits_equal(xc, want, K, "static deq", K);
    assert_true(xc[K] == 12345.0f);
    /* per token */
    moq_act_fp8_token_ref(x, K, q, &s1);
    moq_act_fp8_token_avx2(x, K, q2, &s2, d);
    if (memcmp(&s1, &s2, 4)) fail_msg("token scale K=%zu got %a want %a; seed %u", K, (double)s2, (double)s1, g_seed);
    assert_memory_equal(q, q2, K);
    for (size_t i = 0; i < K; i++) want[i] = dec_ref(q[i]);
    assert_bits_equal(d, want, K, "token deq", K);
    memcpy(xc, x, K * 4);
    moq_act_fp8_token_avx2(xc, K, NULL, &s2, xc);
    assert_true(memcmp(&s1, &s2, 4) == 0);
    assert_bits_equal(xc, want, K, "token deq in place", K);
    /* per 128 */
    const size_t K128 = K / 128 * 128;
    if (K128) {
        moq_act_fp8_g128_ref(x, K128, q, g1);
        moq_act_fp8_g128_avx2(x, K128, q2, g2, d);
        assert_memory_equal(g1, g2, K128 / 128 * 4);
        assert_memory_equal(q, q2, K128);
        for (size_t i = 0; i < K128; i++) want[i] = dec_ref(q[i]) * g1[i / 128];
        assert_bits_equal(d, want, K128, "g128 deq", K);
        memcpy(xc, x, K128 * 4);
        moq_act_fp8_g128_avx2(xc, K128, NULL, g2, xc);
        assert_bits_equal(xc, want, K128, "g128 deq in place", K);
    }
    /* MXFP8 */
    const size_t K32 = K / 32 * 32;
    if (K32) {
        moq_act_mxfp8_ref(x, K32, q, sf);
        moq_act_mxfp8_avx2(x, K32, q2, sf2, d);
        assert_memory_equal(sf, sf2, K32 / 32);
        assert_memory_equal(q, q2, K32);
        for (size_t i = 0; i < K32; i++) want[i] = dec_ref(q[i]) * moq_e8m0_decode(sf[i / 32]);
        assert_bits_equal(d, want, K32, "mxfp8 deq", K);
        memcpy(xc, x, K32 * 4);
        moq_act_mxfp8_avx2(xc, K32, NULL, sf2, xc);
        assert_bits_equal(xc, want, K32, "mxfp8 deq in place", K);
    }
}

static float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_fp8_mxfp8_avx2_twins(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX2)) { print_message("no avx2: twins not run\n"); skip(); }
    static float x[4096];
    /* random rows, every length class: K = 1, tails of 1..7, exact multiples of 8/32/128 */
    const size_t lens[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 127, 128, 129, 255, 256, 1000, 1024 + 128 - 3, 1152, 4096};
    for (int rep = 0; rep < 6; rep++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t K = lens[li];
            fill(x, K, urand(1e-6f, 1e4f));
            if (K > 50) {
                for (int i = 0; i < 32; i++) x[i] = 0.0f;                     /* zero group/block */
                for (int i = 32; i < 40; i++) x[i] = 1e-5f * (float)(i - 36); /* e4m3 subnormals after scaling */
            }
            check_fp8_avx2_row(x, K, urand(1e-4f, 1.0f));
        }
    /* e4m3 rounding boundaries: every code value, every midpoint between neighbours and the f32
     * numbers either side, both signs, plus the saturation region (448, the 464 tie, 480, huge).
     * Each 32-block starts with an anchor that makes the scale 1 (448 with |x| <= 448: token and
     * g128 s = 448 ⊘ 448) or the MXFP8 multiplier 1 (300 with |x| < 300: c = 127), so the
     * boundaries reach the encoder as they are; the third row keeps the saturation region (static
     * multiplier 1). */
    size_t n = 0;
    float b[2048];
    for (int c = 0; c <= 126; c++) {
        const float v = (float)e4m3_val(c);
        b[n++] = v;
        if (c < 126) {
            const float mid = (float)((e4m3_val(c) + e4m3_val(c + 1)) / 2);
            b[n++] = mid;
            b[n++] = nextafterf(mid, 0.0f);
            b[n++] = nextafterf(mid, INFINITY);
        }
    }
    const float sat[] = {447.99997f, 448.0f, 448.00003f, 463.99997f, 464.0f, 464.00003f, 479.99997f, 480.0f, 1e30f, 3.4e38f};
    for (size_t i = 0; i < sizeof sat / sizeof sat[0]; i++) b[n++] = sat[i];
    const size_t nb = n;
    for (size_t i = 0; i < nb; i++) b[n++] = -b[i];
    const float anchors[] = {448.0f, 300.0f, 448.0f}, limits[] = {448.0f, 299.0f, INFINITY};
    for (int a = 0; a < 3; a++) {
        size_t K = 0;
        for (size_t i = 0; i < n; i++) {
            if (K % 32 == 0) x[K++] = anchors[a];
            x[K++] = fabsf(b[i]) <= limits[a] ? b[i] : 0.0f;
        }
        while (K % 128) x[K++] = 0.0f;
        check_fp8_avx2_row(x, K, 1.0f);        /* static: multiplier exactly 1 */
        check_fp8_avx2_row(x, K - 5, 1.0f);    /* and with a tail */
        check_fp8_avx2_row(x, K, 0.5f);        /* multiplier 2 */
    }
    /* scale 3 (anchor 1344 = 3·448, s_in = 3): planted x near 3·midpoint where x ⊘ 3 and
     * x ⊗ f32(1/3) get different codes (found with the test's own encoder), so a division done as
     * a multiplication by the reciprocal (token, g128) or the other way round (static) fails. */
    {
        size_t K = 0;
        int planted = 0;
        const float r3 = 1.0f / 3.0f;
        for (int c = 0; c < 125; c++) {
            const float mid = (float)((e4m3_val(c) + e4m3_val(c + 1)) / 2);
            float v = 3.0f * mid;
            for (int u = 0; u < 8; u++) v = nextafterf(v, 0.0f);
            for (int u = 0; u < 17; u++, v = nextafterf(v, INFINITY)) {
                if (t_e4s(v / 3.0f) == t_e4s(v * r3)) continue;
                for (int sg = 0; sg < 2; sg++) {
                    if (K % 32 == 0) x[K++] = 1344.0f;
                    x[K++] = sg ? -v : v;
                }
                planted++;
            }
        }
        while (K % 128) x[K++] = 0.0f;
        assert_true(planted >= 10);
        check_fp8_avx2_row(x, K, 3.0f);
        check_fp8_avx2_row(x, K - 3, 3.0f);
    }
    /* special values: NaN (both signs, quiet and signalling payloads), ±inf, ±0, f32 subnormals,
     * FLT_MIN and its neighbours, sprinkled into random rows and into otherwise zero rows */
    const float spec[] = {f32_bits(0x7FC00000u), f32_bits(0xFFC00000u), f32_bits(0x7F800001u), f32_bits(0xFFA00000u),
                          INFINITY, -INFINITY, 0.0f, -0.0f, f32_bits(1u), f32_bits(0x80000001u), f32_bits(0x007FFFFFu),
                          f32_bits(0x807FFFFFu), f32_bits(0x00800000u), f32_bits(0x00800001u), 1e-40f, -3e-39f};
    const size_t ns = sizeof spec / sizeof spec[0];
    for (int rep = 0; rep < 40; rep++) {
        const size_t K = rep < 20 ? 128 * (1 + rep % 3) + (size_t)(rep % 8) : 1 + rnd() % 300;
        if (rep % 4 == 0) memset(x, 0, K * 4);
        else fill(x, K, urand(1e-3f, 1e3f));
        const int kinds = rep % 5; /* 0: NaN only, 1: +inf, 2: -inf, 3: subnormals/zeros only, 4: all */
        for (size_t i = 0; i < K; i++) {
            if (rnd() % 7) continue;
            const size_t j = rnd() % ns;
            const float v = spec[j];
            if (kinds == 0 && !isnan(v)) continue;
            if (kinds == 1 && !(isnan(v) || v == INFINITY)) continue;
            if (kinds == 2 && v != -INFINITY) continue;
            if (kinds == 3 && (isnan(v) || isinf(v))) continue;
            x[i] = v;
        }
        check_fp8_avx2_row(x, K, rep & 1 ? 1.0f : urand(1e-3f, 10.0f));
        check_fp8_avx2_row(x, K, 0.0f); /* s_in = 0: multiplier inf, 0 ⊗ inf = NaN */
    }
    /* zero rows (+0, -0), all-NaN rows, all f32-subnormal rows: amax 0 -> minimum / eps scales, c = 0 */
    for (size_t K = 1; K <= 300; K += 37) {
        for (size_t i = 0; i < K; i++) x[i] = (i & 1) ? -0.0f : 0.0f;
        check_fp8_avx2_row(x, K, 1.0f);
        for (size_t i = 0; i < K; i++) x[i] = (i & 1) ? f32_bits(0xFFC00000u) : f32_bits(0x7FC00001u);
        check_fp8_avx2_row(x, K, 1.0f);
        for (size_t i = 0; i < K; i++) x[i] = f32_bits((uint32_t)(1 + rnd() % 0x7FFFFF) | (i & 1 ? 0x80000000u : 0));
        check_fp8_avx2_row(x, K, 1e-30f);
        check_fp8_avx2_row(x, K, 1.0f);
    }
    /* the launch-level row (moq_act_dequant_row_avx2) against moq_act_dequant_row, f32 and bf16 x */
    {
        enum { K = 1024 + 256, M = 3 };
        static float xs[M * K], a[K], b2[K];
        static uint16_t xb[M * K];
        static uint8_t tmp[2 * K + 64];
        fill(xs, M * K, 7.0f);
        xs[5] = NAN, xs[K + 9] = INFINITY, xs[2 * K + 100] = 1e-41f;
        for (size_t i = 0; i < M * K; i++) {
            uint32_t u;
            memcpy(&u, &xs[i], 4);
            xb[i] = (uint16_t)(u >> 16);
        }
        moq_weight w;
        memset(&w, 0, sizeof w);
        w.K = K;
        const moq_pair_id pairs[] = {MOQ_PAIR_FP8_TENSOR, MOQ_PAIR_FP8_ROW, MOQ_PAIR_FP8_BLK128, MOQ_PAIR_MXFP8, MOQ_PAIR_NVFP4, MOQ_PAIR_BF16};
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
            for (int e = 0; e < 2; e++) {
                moq_linear_launch l;
                memset(&l, 0, sizeof l);
                l.w = &w, l.pair = pairs[p], l.a_scale = 0.037f, l.x = e ? (const void *)xb : (const void *)xs;
                l.x_elem = e ? MOQ_ELEM_BF16 : MOQ_ELEM_F32, l.M = M;
                for (int64_t m = 0; m < M; m++) {
                    float r1 = -1, r2 = -2;
                    moq_act_dequant_row(&l, m, a, &r1, tmp);
                    moq_act_dequant_row_avx2(&l, m, b2, &r2, tmp);
                    assert_true(memcmp(&r1, &r2, 4) == 0);
                    assert_bits_equal(b2, a, K, "dequant_row_avx2", K);
                }
            }
    }
}

/* The AVX-512 twin against the reference, both reciprocal forms, bit for bit; a8/asum against the
 * codes. Skipped (with a message) on a CPU without AVX-512. */
typedef void (*nvfp4_twin_fn)(const float *, size_t, float, const uint8_t *, uint8_t *, uint8_t *, int8_t *, int32_t *);

static void check_nvfp4_twin(nvfp4_twin_fn twin) {
    enum { K = 2048 };
    static float x[K];
    uint8_t q[K / 2], sf[K / 16], q2[K / 2], sf2[K / 16];
    int8_t a8[K];
    int32_t asum[K / 16];
    static const int twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int rep = 0; rep < 40; rep++) {
        const float is = urand(1e-4f, 0.05f);
        fill(x, K, is * urand(100.0f, 3000.0f));
        for (int i = 0; i < 16; i++) x[32 + i] = 0.0f, x[64 + i] = -1e-30f * (float)i; /* zero, tiny, -0 blocks */
        x[100] = -0.0f;
        const uint8_t *corr = (rep & 1) ? g_corr : NULL;
        moq_act_nvfp4_ref(x, K, 1.0f / is, corr, q, sf);
        twin(x, K, 1.0f / is, corr, q2, sf2, a8, asum);
        assert_memory_equal(sf, sf2, sizeof sf);
        assert_memory_equal(q, q2, sizeof q);
        for (int b = 0; b < K / 16; b++) {
            int s = 0;
            for (int i = 0; i < 16; i++) {
                const int k = 16 * b + i, c = (q[k / 2] >> (4 * (k & 1))) & 15;
                assert_int_equal(a8[k], twice[c]);
                s += twice[c];
            }
            assert_int_equal(asum[b], s);
        }
    }
}

static void test_nvfp4_avx512_twin(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX512)) { print_message("no avx512: twin not run\n"); skip(); }
    check_nvfp4_twin(moq_act_nvfp4_avx512);
}

static void test_nvfp4_avx2_twin(void **state) {
    (void)state;
    if (!(moq_cpu_features() & MOQ_CPU_AVX2)) { print_message("no avx2: twin not run\n"); skip(); }
    check_nvfp4_twin(moq_act_nvfp4_avx2);
}

static void test_rcpa_table_facts(void **state) {
    (void)state;
    uint32_t u;
    float r = moq_rcpa(6.0f, g_corr);
    memcpy(&u, &r, 4);
    assert_int_equal(u, 0x3E2AAAAB);
    r = moq_rcpa(448.0f, g_corr);
    memcpy(&u, &r, 4);
    assert_int_equal(u, 0x3B124925);
    /* Every entry is within one ulp of IEEE and scales by powers of two (README facts). */
    for (int rep = 0; rep < 10000; rep++) {
        const float m = 1.0f + (float)(rnd() & 0x7FFFFF) / 8388608.0f;
        const float a = moq_rcpa(m, g_corr), b = moq_rcpa(m * 1024.0f, g_corr);
        const float ie = 1.0f / m;
        uint32_t ua, ui;
        memcpy(&ua, &a, 4);
        memcpy(&ui, &ie, 4);
        assert_true(ua - ui + 1 <= 2);
        assert_true(b == a / 1024.0f);
    }
    assert_true(isinf(moq_rcpa(0.0f, g_corr)));
    assert_true(moq_rcpa(1e-39f, g_corr) == INFINITY); /* subnormal input flushed */
}

/* Exact vs GPU (rcpa) forms: same block scales; codes differ by one step, same sign, and only
 * where the exact form's scaled value sits within a few ulps of an e2m1 decision threshold. */
static void test_nvfp4_rcpa_vs_exact(void **state) {
    (void)state;
    enum { K = 4096 };
    static float x[K];
    uint8_t q[K / 2], sf[K / 16], qa[K / 2], sfa[K / 16];
    const double thr[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
    int diffs = 0;
    for (int rep = 0; rep < 50; rep++) {
        const float is = urand(1e-4f, 0.05f);
        fill(x, K, is * 2688.0f);
        /* Plant exact ties: in every block, values whose product with the exact outScale is exactly
         * a decision threshold, so a one-ulp different GPU outScale tips them to the neighbour. */
        for (int b = 0; b < K / 16; b++) {
            float amax = 0;
            for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[16 * b + i]));
            const float S = 1.0f / is, sfv = S * (amax * (1.0f / 6.0f));
            const float sfd = (float)e4m3_val(t_e4s(sfv) & 0x7F);
            if (sfd == 0) continue;
            const float os = 1.0f / (sfd * (1.0f / S));
            for (int t = 0; t < 7; t++) {
                float c = (float)thr[t] / os;
                for (int tries = 0; tries < 8 && c * os != (float)thr[t]; tries++) c = nextafterf(c, (c * os < (float)thr[t]) ? INFINITY : 0.0f);
                if (c * os == (float)thr[t] && fabsf(c) <= amax) x[16 * b + 1 + 2 * t % 15] = (t & 1) ? -c : c;
            }
        }
        moq_act_nvfp4_ref(x, K, 1.0f / is, NULL, q, sf);
        moq_act_nvfp4_ref(x, K, 1.0f / is, g_corr, qa, sfa);
        assert_memory_equal(sf, sfa, sizeof sf);
        for (int k = 0; k < K; k++) {
            const int c0 = (q[k / 2] >> (4 * (k & 1))) & 0xF, c1 = (qa[k / 2] >> (4 * (k & 1))) & 0xF;
            if (c0 == c1) continue;
            diffs++;
            if ((c0 & 7) && (c1 & 7)) assert_int_equal(c0 & 8, c1 & 8);
            assert_true(abs((c0 & 7) - (c1 & 7)) == 1);
            const float sfd = (float)e4m3_val(sf[k / 16]), os = 1.0f / (sfd * (1.0f / (1.0f / is)));
            const double v = fabs((double)(x[k] * os));
            double near = INFINITY;
            for (int t = 0; t < 7; t++) near = fmin(near, fabs(v - thr[t]) / thr[t]);
            if (near > 4e-7) fail_msg("k=%d codes %X vs %X at |x·os|=%.9g, %.3g from the nearest tie; seed %u", k, c0, c1, v, near, g_seed);
        }
    }
    assert_true(diffs > 0); /* the planted ties must show the GPU's reciprocal */
    print_message("nvfp4 exact vs rcpa: %d of %d codes differ (all at ties)\n", diffs, 50 * K);
}

static void test_mxfp8(void **state) {
    (void)state;
    /* §4.4 table, ceil rule: block max a -> code */
    const struct { float a; int code; } rows[] = {{1.0f, 119}, {255.0f, 127}, {448.0f, 127}, {500.0f, 128}};
    float x[32];
    uint8_t q[32], sf[1];
    for (size_t r = 0; r < 4; r++) {
        memset(x, 0, sizeof x);
        x[5] = -rows[r].a;
        moq_act_mxfp8_ref(x, 32, q, sf);
        assert_int_equal(sf[0], rows[r].code);
    }
    memset(x, 0, sizeof x); /* zero block: code 0, zero elements */
    moq_act_mxfp8_ref(x, 32, q, sf);
    assert_int_equal(sf[0], 0);
    for (int i = 0; i < 32; i++) assert_int_equal(q[i] & 0x7F, 0);
    enum { K = 2048 };
    float xs[K];
    uint8_t qs[K], sfs[K / 32];
    fill(xs, K, urand(1e-3f, 1e3f));
    moq_act_mxfp8_ref(xs, K, qs, sfs);
    for (int b = 0; b < K / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xs[32 * b + i]));
        const float y = amax * (1.0f / 448.0f);
        int c = 0; /* smallest c with 2^(c-127) >= y */
        while (c < 254 && ldexp(1.0, c - 127) < (double)y) c++;
        assert_int_equal(sfs[b], c);
        for (int i = 0; i < 32; i++) {
            const float v = clampf(xs[32 * b + i] * (float)ldexp(1.0, 127 - c), 448.0f);
            assert_int_equal(qs[32 * b + i], t_e4s(v));
        }
    }
}

int main(void) {
    g_seed = (unsigned)time(NULL);
    g_rng = g_seed;
    char *p = tu_data_path("golden/rcp/rcpa_ftz_corr_2bit.bin");
    FILE *f = fopen(p, "rb");
    g_corr = malloc(MOQ_RCPA_TABLE_BYTES);
    if (!f || fread(g_corr, 1, MOQ_RCPA_TABLE_BYTES, f) != MOQ_RCPA_TABLE_BYTES) {
        fprintf(stderr, "%s: missing or short (tests/data/golden.tar.xz is unpacked there by CMake)\n", p);
        return 1;
    }
    fclose(f);
    free(p);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_static),       cmocka_unit_test(test_fp8_token),
        cmocka_unit_test(test_fp8_g128),         cmocka_unit_test(test_nvfp4_worked_example),
        cmocka_unit_test(test_nvfp4_random_exact), cmocka_unit_test(test_rcpa_table_facts),
        cmocka_unit_test(test_nvfp4_rcpa_vs_exact), cmocka_unit_test(test_mxfp8),
        cmocka_unit_test(test_nvfp4_avx512_twin),   cmocka_unit_test(test_nvfp4_avx2_twin),   cmocka_unit_test(test_fp8_mxfp8_avx512_twins),
        cmocka_unit_test(test_fp8_mxfp8_avx2_twins),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r) fprintf(stderr, "seed %u\n", g_seed);
    free(g_corr);
    return r;
}
