/* test_format_vector.c — every vector row of moq_conv_table gives the same bits as the portable
 * `_ref` row of the same (encoding, mode).
 *
 * One cmocka test per row (named after the row). Encoders run over the 1,066,068 golden inputs
 * (golden/formats/inputs_f32.bin from tests/data/golden.tar.xz: all bf16 patterns, 1e6 random binary32 patterns incl.
 * NaN/inf/subnormals, every e4m3 and e2m1 tie) plus lengths 1, 2, 3, 15, 16, 17, 33, 4097 from
 * input and output pointers that are off the vector alignment; decoders over every code (all
 * 65,536 16-bit patterns, every byte value, every e2m1 nibble pair). Bytes past the end of the
 * output must stay untouched. NaN payloads are compared as bits. Rows whose CPU features this
 * machine lacks are skipped with a message.
 */
#include "tu.h"

#include "format/format.h"

#define N_INPUTS 1066068u
#define CANARY 0xA5

static float *g_in;

static int setup(void **state) {
    (void)state;
    char *p = tu_data_path("golden/formats/inputs_f32.bin");
    size_t len = 0;
    g_in = tu_read_file(p, &len);
    free(p);
    if (len != N_INPUTS * 4) fail_msg("inputs_f32.bin: %zu bytes, expected %u", len, N_INPUTS * 4);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_in);
    return 0;
}

/* Reports the first five differing bytes of two outputs and the count; returns the count. */
static size_t diff_bytes(const char *row, size_t n, size_t off, const uint8_t *got, const uint8_t *want,
                         size_t nbytes) {
    size_t bad = 0;
    for (size_t i = 0; i < nbytes; i++) {
        if (got[i] == want[i]) continue;
        if (bad < 5)
            print_message("  %s n=%zu offset=%zu: byte %zu: got 0x%02X, ref 0x%02X\n", row, n, off, i, got[i], want[i]);
        bad++;
    }
    if (bad) print_message("  %s n=%zu offset=%zu: %zu of %zu bytes differ\n", row, n, off, bad, nbytes);
    return bad;
}

/* Encodes in[0..n) with both rows into canary-filled buffers at byte offset `off`; compares the
 * output and the 64 bytes after it. */
static size_t check_encode(const moq_conv_row *r, const moq_conv_row *ref, const float *in, size_t n, size_t off) {
    const size_t nb = moq_elem_bytes(r->elem, n), total = off + nb + 64;
    uint8_t *a = malloc(total), *b = malloc(total);
    memset(a, CANARY, total);
    memset(b, CANARY, total);
    r->encode(in, a + off, n);
    ref->encode(in, b + off, n);
    size_t bad = diff_bytes(r->name, n, off, a + off, b + off, nb);
    for (size_t i = off + nb; i < total; i++)
        if (a[i] != CANARY) {
            print_message("  %s n=%zu: wrote byte %zu past the end of the output\n", r->name, n, i - off);
            bad++;
            break;
        }
    free(a);
    free(b);
    return bad;
}

static size_t check_decode(const moq_conv_row *r, const moq_conv_row *ref, const uint8_t *in, size_t n, size_t off) {
    const size_t total = off + n + 16;
    float *a = malloc(total * 4), *b = malloc(total * 4);
    memset(a, CANARY, total * 4);
    memset(b, CANARY, total * 4);
    r->decode(in, a + off, n);
    ref->decode(in, b + off, n);
    size_t bad = diff_bytes(r->name, n, off, (const uint8_t *)(a + off), (const uint8_t *)(b + off), n * 4);
    for (size_t i = (off + n) * 4; i < total * 4; i++)
        if (((uint8_t *)a)[i] != CANARY) {
            print_message("  %s n=%zu: wrote past the end of the output\n", r->name, n);
            bad++;
            break;
        }
    free(a);
    free(b);
    return bad;
}

static const size_t k_lengths[] = {1, 2, 3, 15, 16, 17, 33, 4097};

static void test_row(void **state) {
    const moq_conv_row *r = *state;
    if ((r->need & moq_cpu_features()) != r->need) {
        print_message("  skipped %s: this CPU (features: %s) lacks what the row needs\n", r->name,
                      moq_cpu_features_str());
        skip();
    }
    /* The same row must be what moq_conv_find returns for its target. */
    const moq_conv_row *found = moq_conv_find(r->elem, r->mode, moq_cpu_features(), r->target);
    assert_ptr_equal(found, r);
    const moq_conv_row *ref = moq_conv_find(r->elem, r->mode, 0, MOQ_TARGET_CPU_REF);
    assert_non_null(ref);
    /* Element size in bytes for offsetting outputs by one element (16-bit codes stay aligned to 2,
     * as uint16 pointers must; everything is off the 16/32/64-byte vector alignment). */
    const size_t esz = r->elem == MOQ_ELEM_BF16 || r->elem == MOQ_ELEM_F16 ? 2 : 1;
    size_t bad = 0;
    if (r->encode) {
        bad += check_encode(r, ref, g_in, N_INPUTS, 0);
        for (size_t k = 0; k < sizeof k_lengths / sizeof k_lengths[0] && bad == 0; k++)
            for (size_t start = 1; start < 4; start++) /* input off by 1..3 floats, output by 1 element */
                bad += check_encode(r, ref, g_in + 1000 * k + start, k_lengths[k], esz);
    } else {
        /* Every 16-bit pattern, little endian: also every byte value and every e2m1 nibble pair. */
        const size_t nbytes = 2 * 65536 + 64;
        uint8_t *codes = malloc(nbytes);
        for (size_t i = 0; i < 65536; i++) {
            codes[2 * i] = (uint8_t)i;
            codes[2 * i + 1] = (uint8_t)(i >> 8);
        }
        for (size_t i = 2 * 65536; i < nbytes; i++) codes[i] = (uint8_t)(i * 37u);
        const size_t n_all = r->elem == MOQ_ELEM_E2M1 ? 2 * 131072 : 131072 / esz;
        bad += check_decode(r, ref, codes, n_all, 0);
        for (size_t k = 0; k < sizeof k_lengths / sizeof k_lengths[0] && bad == 0; k++)
            /* input off the vector alignment by one element (one byte for e2m1) */
            bad += check_decode(r, ref, codes + esz, k_lengths[k], 1);
        free(codes);
    }
    assert_int_equal(bad, 0);
}

int main(void) {
    struct CMUnitTest *tests = calloc(moq_conv_table_len, sizeof *tests);
    size_t nt = 0;
    for (size_t i = 0; i < moq_conv_table_len; i++) {
        const moq_conv_row *r = &moq_conv_table[i];
        if (r->target == MOQ_TARGET_CPU_REF) continue;
        tests[nt].name = r->name;
        tests[nt].test_func = test_row;
        tests[nt].initial_state = (void *)r;
        nt++;
    }
    if (nt == 0) {
        free(tests);
        fail_msg("moq_conv_table has no vector rows");
    }
    int rc = _cmocka_run_group_tests("format_vector", tests, nt, setup, teardown);
    free(tests);
    return rc;
}
