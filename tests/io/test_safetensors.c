/* test_safetensors.c — the safetensors rules R1-R11 of src/io/safetensors.c, one crafted file per
 * rule and per distinct error, plus files that must be accepted.
 *
 * Oracle: the safetensors format as huggingface/safetensors documents it (8-byte little-endian
 * header length, header <= 100 MB, UTF-8 JSON object, data_offsets relative to the byte buffer,
 * contiguous, no holes, ending at the end of the file) and RFC 3629 for UTF-8. Every file is
 * generated here, into a temporary directory, and named for its expectation
 * (bad_header_too_large.safetensors ...). Each bad file is opened twice, by path (moq_st_open,
 * mmap) and from an exact-size heap copy (moq_st_parse, so ASan sees any read past the end); both
 * must give the same status, err.where == the file name, and a message naming the tensor.
 * Then: every prefix of a valid file fails cleanly, and single-byte corruptions never crash.
 */
#include "tu.h"

#include "io/safetensors.h"

typedef struct st_case {
    const char *file;     /* named for its expectation                                         */
    const char *header;   /* header text; NULL = `raw` is the whole file                        */
    size_t      data_len; /* bytes of data after the header                                     */
    const char *raw;      /* whole file when header == NULL                                     */
    size_t      raw_len;
    const char *tensor;   /* tensor the message must name ("tensor X:"), NULL when none         */
    const char *msg;      /* distinctive substring of the message                               */
} st_case;

#define T1(dt, shape, b, e) "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}}"

/* One row per rule and per distinct error. Expected codes are all MOQ_ERR_FORMAT. */
static const st_case bad_cases[] = {
    /* R1: shorter than the 8-byte length */
    {"bad_too_short.safetensors", NULL, 0, "\x02\x00\x00", 3, NULL, "too short for the 8-byte header length"},
    {"bad_empty_file.safetensors", NULL, 0, "", 0, NULL, "file is 0 bytes"},
    /* R2: N > 100,000,000 (only the 8 bytes are written) */
    {"bad_header_too_large.safetensors", NULL, 0, "\x01\xe1\xf5\x05\x00\x00\x00\x00{}", 10, NULL,
     "header length 100000001 exceeds the 100000000-byte limit"},
    {"bad_header_len_max.safetensors", NULL, 0, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10, NULL,
     "header length 18446744073709551615 exceeds the 100000000-byte limit"},
    /* R3: 8 + N > file size */
    {"bad_header_beyond_file.safetensors", NULL, 0, "\x10\x00\x00\x00\x00\x00\x00\x00{}", 10, NULL,
     "header length 16 needs 8 + 16 bytes, file is 10 bytes"},
    /* R4: starts with '{' */
    {"bad_header_empty.safetensors", NULL, 0, "\x00\x00\x00\x00\x00\x00\x00\x00", 8, NULL, "an empty header"},
    {"bad_header_leading_space.safetensors", " {}", 0, NULL, 0, NULL, "does not start with '{' (found byte 0x20)"},
    /* "JSON not an object" cannot get past R4: a header that starts with '{' and parses is one. */
    {"bad_header_array.safetensors", "[1, 2]", 0, NULL, 0, NULL, "does not start with '{' (found byte 0x5b)"},
    /* R5: UTF-8 (RFC 3629) */
    {"bad_utf8_overlong.safetensors", "{\"\xc0\xaf\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xc0 at header offset 2)"},
    {"bad_utf8_overlong3.safetensors", "{\"\xe0\x80\xaf\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xe0 at header offset 2)"},
    {"bad_utf8_surrogate.safetensors", "{\"\xed\xa0\x80\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xed at header offset 2)"},
    {"bad_utf8_above_max.safetensors", "{\"\xf4\x90\x80\x80\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xf4 at header offset 2)"},
    {"bad_utf8_truncated_mid.safetensors", "{\"a\xe2\x82\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xe2 at header offset 3)"},
    {"bad_utf8_truncated_end.safetensors", "{\"a\":\"\xe2\x82", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xe2 at header offset 6)"},
    {"bad_utf8_lone_continuation.safetensors", "{\"\x80\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0x80 at header offset 2)"},
    {"bad_utf8_lead_f8.safetensors", "{\"\xf8\x88\x80\x80\x80\":1}", 0, NULL, 0, NULL, "not valid UTF-8 (byte 0xf8 at header offset 2)"},
    /* R6: JSON */
    {"bad_not_json.safetensors", "{\"t\": }", 0, NULL, 0, NULL, "header is not valid JSON"},
    {"bad_json_unterminated.safetensors", "{\"t\": {\"dtype\": \"F32\"", 0, NULL, 0, NULL, "header is not valid JSON"},
    {"bad_json_trailing_garbage.safetensors", "{} x", 0, NULL, 0, NULL, "after the JSON value"},
    {"bad_json_two_objects.safetensors", "{}{}", 0, NULL, 0, NULL, "after the JSON value"},
    /* R7: __metadata__ */
    {"bad_metadata_not_object.safetensors", "{\"__metadata__\": [\"pt\"]}", 0, NULL, 0, NULL, "__metadata__ is an array, expected an object"},
    {"bad_metadata_value_number.safetensors", "{\"__metadata__\": {\"format\": 1}}", 0, NULL, 0, NULL, "__metadata__.format is a number, expected a string"},
    {"bad_metadata_value_null.safetensors", "{\"__metadata__\": {\"format\": null}}", 0, NULL, 0, NULL, "__metadata__.format is null, expected a string"},
    {"bad_metadata_twice.safetensors", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, NULL, 0, NULL, "__metadata__ appears twice"},
    /* R8: entries */
    {"bad_entry_not_object.safetensors", "{\"t\": [1]}", 0, NULL, 0, "t", "entry is an array, expected an object"},
    {"bad_dtype_missing.safetensors", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL, 0, "t", "dtype is absent, expected a string"},
    {"bad_dtype_not_string.safetensors", "{\"t\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL, 0, "t", "dtype is a number, expected a string"},
    {"bad_dtype_unknown.safetensors", T1("F9", "[1]", 0, 1), 1, NULL, 0, "t", "unknown dtype \"F9\""},
    {"bad_dtype_lower_case.safetensors", T1("f32", "[1]", 0, 4), 4, NULL, 0, "t", "unknown dtype \"f32\""},
    {"bad_shape_missing.safetensors", "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, NULL, 0, "t", "shape is absent, expected an array"},
    {"bad_shape_not_array.safetensors", T1("U8", "\"1\"", 0, 1), 1, NULL, 0, "t", "shape is a string, expected an array"},
    {"bad_shape_negative.safetensors", T1("U8", "[2,-1]", 0, 1), 1, NULL, 0, "t", "shape[1] is not a non-negative integer"},
    {"bad_shape_non_integer.safetensors", T1("U8", "[1.5]", 0, 1), 1, NULL, 0, "t", "shape[0] is not a non-negative integer"},
    {"bad_shape_string_dim.safetensors", T1("U8", "[\"1\"]", 0, 1), 1, NULL, 0, "t", "shape[0] is a string"},
    {"bad_shape_9_dims.safetensors", T1("U8", "[1,1,1,1,1,1,1,1,1]", 0, 1), 1, NULL, 0, "t", "shape has 9 dimensions, at most 8"},
    {"bad_offsets_missing.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, NULL, 0, "t", "data_offsets is absent, expected [begin, end]"},
    {"bad_offsets_length_1.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1, NULL, 0, "t",
     "data_offsets is an array of the wrong length"},
    {"bad_offsets_length_3.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1, NULL, 0, "t",
     "data_offsets is an array of the wrong length"},
    {"bad_offsets_not_integers.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", 1, NULL, 0, "t",
     "data_offsets must be two integers"},
    {"bad_offsets_negative.safetensors", T1("U8", "[0]", -1, -1), 0, NULL, 0, "t", "data_offsets must be two integers"},
    {"bad_offsets_reversed.safetensors", T1("U8", "[0]", 4, 0), 4, NULL, 0, "t", "data_offsets [4, 0] end before they begin"},
    /* R9: unique names */
    {"bad_duplicate_name.safetensors",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     2, NULL, 0, "t", "name appears twice"},
    /* R10: shape x element size == span, no overflow, whole bytes */
    {"bad_size_mismatch.safetensors", T1("F32", "[2]", 0, 4), 4, NULL, 0, "t", "is 8 bytes, but data_offsets [0, 4] span 4"},
    {"bad_size_mismatch_bf16.safetensors", T1("BF16", "[3, 5]", 0, 15), 15, NULL, 0, "t", "shape [3, 5] of BF16 is 30 bytes"},
    {"bad_shape_overflow.safetensors", T1("F32", "[4294967296, 4294967296, 16]", 0, 0), 0, NULL, 0, "t", "overflows 64-bit byte counts"},
    {"bad_shape_overflow_bytes.safetensors", T1("F64", "[4294967296, 2147483648]", 0, 0), 0, NULL, 0, "t", "overflows 64-bit byte counts"},
    {"bad_f4_odd_count.safetensors", T1("F4", "[3]", 0, 1), 1, NULL, 0, "t", "shape [3] of F4 is not a whole number of bytes"},
    /* R11: sorted, contiguous, from 0 to the end of the file */
    {"bad_first_offset_not_zero.safetensors", T1("U8", "[4]", 4, 8), 8, NULL, 0, "t", "begin at 4, but the previous data ends at 0 (a hole of 4 bytes"},
    {"bad_overlap.safetensors",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
     12, NULL, 0, "b", "inside tensor a which ends at 8 (overlap)"},
    {"bad_overlap_same_begin.safetensors",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     4, NULL, 0, "b", "(overlap)"},
    {"bad_zero_size_inside_other.safetensors",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
     8, NULL, 0, "z", "(overlap)"},
    {"bad_hole_between.safetensors",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
     12, NULL, 0, "b", "a hole of 4 bytes"},
    {"bad_truncated_data.safetensors", T1("U8", "[8]", 0, 8), 5, NULL, 0, "t", "data_offsets end at 8, past the end of the data (5 bytes"},
    {"bad_no_data_at_all.safetensors", T1("F32", "[1]", 0, 4), 0, NULL, 0, "t", "past the end of the data (0 bytes"},
    {"bad_trailing_bytes.safetensors", T1("U8", "[4]", 0, 4), 7, NULL, 0, NULL, "3 bytes short of the end of the file"},
    {"bad_trailing_bytes_no_tensor.safetensors", "{}", 1, NULL, 0, NULL, "1 bytes short of the end of the file"},
};

/* Bytes of a case's file (malloc'd, exactly *len bytes; never 0-sized so malloc returns non-NULL).
 * The data pattern is tu_write_st's: byte i = i*7+3. */
static uint8_t *case_bytes(const st_case *c, size_t *len) {
    if (!c->header) {
        *len = c->raw_len;
        uint8_t *b = malloc(c->raw_len ? c->raw_len : 1);
        memcpy(b, c->raw, c->raw_len);
        return b;
    }
    const size_t hl = strlen(c->header);
    *len = 8 + hl + c->data_len;
    uint8_t *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, c->header, hl);
    for (size_t i = 0; i < c->data_len; i++) b[8 + hl + i] = (uint8_t)(i * 7 + 3);
    return b;
}

static char *write_case(const char *dir, const st_case *c) {
    if (c->header) return tu_write_st(dir, c->file, c->header, c->data_len);
    return tu_write_file(dir, c->file, c->raw, c->raw_len);
}

static void expect_error(const st_case *c, moq_status got, const moq_error *e, const char *how) {
    char b[1200];
    moq_error_format(e, b, sizeof b);
    if (got != MOQ_ERR_FORMAT || e->code != MOQ_ERR_FORMAT)
        fail_msg("%s (%s): status %s, expected MOQ_ERR_FORMAT; error: %s", c->file, how, moq_status_str(got), b);
    if (strcmp(e->where, c->file) != 0) fail_msg("%s (%s): where is \"%s\", expected the file name", c->file, how, e->where);
    if (!strstr(e->msg, c->msg)) fail_msg("%s (%s): message \"%s\" lacks \"%s\"", c->file, how, e->msg, c->msg);
    if (c->tensor) {
        char want[128];
        snprintf(want, sizeof want, "tensor %s:", c->tensor);
        if (strncmp(e->msg, want, strlen(want)) != 0) fail_msg("%s (%s): message \"%s\" does not start with \"%s\"", c->file, how, e->msg, want);
    }
    if (strchr(e->msg, '\n')) fail_msg("%s (%s): message spans lines", c->file, how);
}

static void test_bad_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir("st_bad");
    const size_t n = sizeof bad_cases / sizeof bad_cases[0];
    assert_true(n >= 20);
    for (size_t i = 0; i < n; i++) {
        const st_case *c = &bad_cases[i];
        char *path = write_case(dir, c);
        moq_st_file f;
        moq_error e = {0};
        moq_status st = moq_st_open(&f, path, c->file, &e);
        expect_error(c, st, &e, "moq_st_open");
        /* On error f is left empty: closing it again is harmless. */
        assert_null(f.tensors);
        moq_st_close(&f);

        size_t len;
        uint8_t *buf = case_bytes(c, &len);
        moq_error e2 = {0};
        st = moq_st_parse(&f, c->file, buf, len, &e2);
        expect_error(c, st, &e2, "moq_st_parse");
        assert_string_equal(e.msg, e2.msg);
        free(buf);

        /* The checkpoint API on a single file reports the same error. */
        moq_checkpoint *ck = NULL;
        moq_error e3 = {0};
        st = moq_checkpoint_open(&ck, path, NULL, &e3);
        expect_error(c, st, &e3, "moq_checkpoint_open");
        assert_null(ck);
        free(path);
    }
    tu_rmtree(dir);
    free(dir);
}

/* Distinct rules give distinct messages: no two rows with different expectations may produce the
 * same message (the user must be able to tell which rule failed). */
static void test_messages_distinct(void **state) {
    (void)state;
    const size_t n = sizeof bad_cases / sizeof bad_cases[0];
    char (*msgs)[512] = calloc(n, sizeof *msgs);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        uint8_t *buf = case_bytes(&bad_cases[i], &len);
        moq_st_file f;
        moq_error e = {0};
        assert_int_not_equal(moq_st_parse(&f, "x.safetensors", buf, len, &e), MOQ_OK);
        snprintf(msgs[i], sizeof msgs[i], "%s", e.msg);
        free(buf);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(bad_cases[i].msg, bad_cases[j].msg) != 0 && strcmp(msgs[i], msgs[j]) == 0)
                fail_msg("%s and %s give the same message \"%s\"", bad_cases[i].file, bad_cases[j].file, msgs[i]);
    free(msgs);
}

/* Element sizes in bits as the safetensors spec lists them (written here, not read from moq). */
static const struct { const char *name; int bits; } spec_dtypes[] = {
    {"BOOL", 8}, {"U8", 8},   {"I8", 8},   {"I16", 16}, {"U16", 16}, {"F16", 16},     {"BF16", 16},    {"I32", 32},
    {"U32", 32}, {"F32", 32}, {"F64", 64}, {"I64", 64}, {"U64", 64}, {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8},
    {"F4", 4},
};

static void test_dtype_table(void **state) {
    (void)state;
    const size_t n = sizeof spec_dtypes / sizeof spec_dtypes[0];
    assert_int_equal(n, MOQ_DT_COUNT);
    for (size_t i = 0; i < n; i++) {
        moq_dtype d = moq_dtype_from_str(spec_dtypes[i].name);
        assert_int_not_equal(d, MOQ_DT_COUNT);
        assert_string_equal(moq_dtype_name(d), spec_dtypes[i].name);
        assert_int_equal(moq_dtype_bits(d), spec_dtypes[i].bits);
    }
    assert_int_equal(moq_dtype_from_str("F8_E4M3FN"), MOQ_DT_COUNT);
    assert_int_equal(moq_dtype_from_str(""), MOQ_DT_COUNT);
    assert_string_equal(moq_dtype_name(MOQ_DT_COUNT), "?");
    assert_int_equal(moq_dtype_bits((moq_dtype)-1), 0);
}

/* Opens a good file both ways; returns the parsed (path) file, which the caller closes. */
static void open_good(const char *dir, const char *name, const char *header, size_t data_len, moq_st_file *f) {
    char *path = tu_write_st(dir, name, header, data_len);
    TU_OK(moq_st_open(f, path, name, err_));
    assert_string_equal(f->name, name);
    assert_int_equal(f->header_len, strlen(header));
    assert_int_equal(f->data_size, data_len);
    /* Same answer from an exact-size heap copy. */
    size_t len;
    uint8_t *whole = tu_read_file(path, &len);
    uint8_t *buf = malloc(len);
    memcpy(buf, whole, len);
    moq_st_file g;
    TU_OK(moq_st_parse(&g, name, buf, len, err_));
    assert_int_equal(g.n_tensors, f->n_tensors);
    for (size_t i = 0; i < g.n_tensors; i++) {
        assert_string_equal(g.tensors[i].name, f->tensors[i].name);
        assert_int_equal(g.tensors[i].nbytes, f->tensors[i].nbytes);
    }
    moq_st_close(&g);
    free(buf);
    free(whole);
    free(path);
}

static const moq_tensor *find(const moq_st_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    fail_msg("tensor %s not found", name);
    return NULL;
}

static void test_good_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir("st_good");
    moq_st_file f;

    open_good(dir, "ok_empty.safetensors", "{}", 0, &f);
    assert_int_equal(f.n_tensors, 0);
    assert_int_equal(f.n_meta, 0);
    moq_st_close(&f);

    /* The writer pads headers with spaces to a multiple of 8; so may anyone. */
    open_good(dir, "ok_padded_header.safetensors", T1("U8", "[3]", 0, 3) "       ", 3, &f);
    assert_int_equal(f.n_tensors, 1);
    moq_st_close(&f);

    open_good(dir, "ok_padded_whitespace.safetensors", "{ \"t\" : {\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]} }\n\t \r", 1, &f);
    assert_int_equal(f.n_tensors, 1);
    moq_st_close(&f);

    open_good(dir, "ok_metadata_only.safetensors", "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"\"}}", 0, &f);
    assert_int_equal(f.n_tensors, 0);
    assert_int_equal(f.n_meta, 2);
    assert_string_equal(f.meta_keys[0], "format");
    assert_string_equal(f.meta_vals[0], "pt");
    assert_string_equal(f.meta_keys[1], "note");
    assert_string_equal(f.meta_vals[1], "");
    moq_st_close(&f);

    /* Scalar: shape [] has one element. */
    open_good(dir, "ok_scalar.safetensors", T1("F32", "[]", 0, 4), 4, &f);
    assert_int_equal(f.tensors[0].ndim, 0);
    assert_int_equal(f.tensors[0].nelem, 1);
    assert_int_equal(f.tensors[0].nbytes, 4);
    moq_st_close(&f);

    /* F4: two elements per byte; 8 elements -> 4 bytes. */
    open_good(dir, "ok_f4.safetensors", T1("F4", "[2, 4]", 0, 4), 4, &f);
    assert_int_equal(f.tensors[0].dtype, MOQ_DT_F4);
    assert_int_equal(f.tensors[0].nelem, 8);
    assert_int_equal(f.tensors[0].nbytes, 4);
    moq_st_close(&f);

    /* Zero-size tensors: any number of them, at the position where the data stands, data NULL.
     * A huge shape with a 0 dimension is still zero bytes and does not overflow. */
    open_good(dir, "ok_zero_size.safetensors",
              "{\"z0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
              "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
              "\"z1\":{\"dtype\":\"BF16\",\"shape\":[4294967296,0,4294967296],\"data_offsets\":[2,2]},"
              "\"z2\":{\"dtype\":\"F8_E4M3\",\"shape\":[0,7],\"data_offsets\":[2,2]}}",
              2, &f);
    assert_int_equal(f.n_tensors, 4);
    assert_null(find(&f, "z0")->data);
    assert_null(find(&f, "z1")->data);
    assert_int_equal(find(&f, "z1")->nbytes, 0);
    assert_int_equal(find(&f, "z2")->ndim, 2);
    assert_non_null(find(&f, "a")->data);
    moq_st_close(&f);

    /* Entries in any header order: sorted by offset afterwards, data pointers at data + begin. */
    open_good(dir, "ok_unsorted.safetensors",
              "{\"__metadata__\":{\"format\":\"pt\"},"
              "\"c\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[6,14]},"
              "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
              "\"b\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[2,6]}}",
              14, &f);
    assert_int_equal(f.n_tensors, 3);
    assert_string_equal(f.tensors[0].name, "a");
    assert_string_equal(f.tensors[1].name, "b");
    assert_string_equal(f.tensors[2].name, "c");
    assert_ptr_equal(find(&f, "c")->data, f.data + 6);
    assert_ptr_equal(f.data, f.buf + 8 + f.header_len);
    const uint8_t *c = find(&f, "c")->data;
    for (int i = 0; i < 8; i++) assert_int_equal(c[i], (uint8_t)((6 + i) * 7 + 3));
    assert_int_equal(find(&f, "b")->shape[1], 2);
    moq_st_close(&f);

    /* Valid multi-byte UTF-8 names (2, 3 and 4 bytes). */
    open_good(dir, "ok_utf8_names.safetensors",
              "{\"caf\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"\xe2\x82\xac\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
              "\"\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}",
              3, &f);
    assert_string_equal(f.tensors[0].name, "caf\xc3\xa9");
    assert_string_equal(f.tensors[2].name, "\xf0\x9f\x98\x80");
    moq_st_close(&f);

    /* 8 dimensions is the limit, and it is allowed. */
    open_good(dir, "ok_8_dims.safetensors", T1("U8", "[1,2,1,2,1,2,1,2]", 0, 16), 16, &f);
    assert_int_equal(f.tensors[0].ndim, 8);
    moq_st_close(&f);

    tu_rmtree(dir);
    free(dir);
}

/* One tensor of every dtype, with shape [3, 2] (F4: [3, 4]); sizes checked against spec_dtypes. */
static void test_every_dtype(void **state) {
    (void)state;
    char header[4096];
    size_t k = (size_t)snprintf(header, sizeof header, "{");
    uint64_t off = 0;
    const size_t n = sizeof spec_dtypes / sizeof spec_dtypes[0];
    for (size_t i = 0; i < n; i++) {
        const int cols = spec_dtypes[i].bits == 4 ? 4 : 2;
        const uint64_t bytes = (uint64_t)(3 * cols * spec_dtypes[i].bits / 8);
        k += (size_t)snprintf(header + k, sizeof header - k, "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[3,%d],\"data_offsets\":[%llu,%llu]}",
                              i ? "," : "", spec_dtypes[i].name, spec_dtypes[i].name, cols, (unsigned long long)off,
                              (unsigned long long)(off + bytes));
        off += bytes;
    }
    snprintf(header + k, sizeof header - k, "}");
    char *dir = tu_tmpdir("st_dtypes");
    moq_st_file f;
    open_good(dir, "ok_every_dtype.safetensors", header, (size_t)off, &f);
    assert_int_equal(f.n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t_%s", spec_dtypes[i].name);
        const moq_tensor *t = find(&f, nm);
        assert_string_equal(moq_dtype_name(t->dtype), spec_dtypes[i].name);
        assert_int_equal(t->nbytes, (uint64_t)(3 * (spec_dtypes[i].bits == 4 ? 4 : 2) * spec_dtypes[i].bits / 8));
    }
    moq_st_close(&f);
    tu_rmtree(dir);
    free(dir);
}

static const char small_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[12,16]}}  ";

/* Every strict prefix of a valid file is an error (format, naming the file); the full file is OK. */
static void test_every_truncation_fails(void **state) {
    (void)state;
    const st_case good = {"ok_small.safetensors", small_header, 16, NULL, 0, NULL, NULL};
    size_t len;
    uint8_t *full = case_bytes(&good, &len);
    for (size_t k = 0; k <= len; k++) {
        uint8_t *buf = malloc(k ? k : 1);
        memcpy(buf, full, k);
        moq_st_file f;
        moq_error e = {0};
        moq_status st = moq_st_parse(&f, "ok_small.safetensors", buf, k, &e);
        if (k == len) {
            assert_int_equal(st, MOQ_OK);
            assert_int_equal(f.n_tensors, 2);
            moq_st_close(&f);
        } else {
            if (st != MOQ_ERR_FORMAT) fail_msg("prefix of %zu/%zu bytes: status %s", k, len, moq_status_str(st));
            assert_string_equal(e.where, "ok_small.safetensors");
            assert_null(f.tensors);
        }
        free(buf);
    }
    free(full);
}

/* Single-byte corruptions at every offset: any status may come back, but never a crash, a read
 * outside the buffer (ASan) or an OK file whose tensors point outside it. */
static void test_byte_corruptions_are_safe(void **state) {
    (void)state;
    const st_case good = {"ok_small.safetensors", small_header, 16, NULL, 0, NULL, NULL};
    static const uint8_t subst[] = {0x00, 0x20, 0x22, 0x2c, 0x2d, 0x30, 0x39, 0x5b, 0x5d, 0x7b, 0x7d, 0x80, 0xc3, 0xff};
    size_t len;
    uint8_t *full = case_bytes(&good, &len);
    int ok = 0;
    for (size_t k = 0; k < len; k++)
        for (size_t s = 0; s < sizeof subst; s++) {
            uint8_t *buf = malloc(len);
            memcpy(buf, full, len);
            buf[k] = subst[s];
            moq_st_file f;
            moq_error e = {0};
            moq_status st = moq_st_parse(&f, "c.safetensors", buf, len, &e);
            if (st == MOQ_OK) {
                ok++;
                for (size_t i = 0; i < f.n_tensors; i++) {
                    const moq_tensor *t = &f.tensors[i];
                    if (t->nbytes) {
                        assert_true((const uint8_t *)t->data >= f.data);
                        assert_true((const uint8_t *)t->data + t->nbytes <= buf + len);
                    }
                }
                moq_st_close(&f);
            } else {
                assert_string_equal(e.where, "c.safetensors");
                assert_true(e.msg[0] != '\0');
            }
            free(buf);
        }
    /* Substituting a data byte keeps the file valid: at least those 16 x 14 cases are OK. */
    assert_true(ok >= 16 * 14);
    free(full);
}

static void test_open_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("st_open");
    moq_st_file f;
    moq_error e = {0};
    char *missing = tu_data_path("does/not/exist.safetensors");
    TU_ERR(&e, moq_st_open(&f, missing, "exist.safetensors", &e), MOQ_ERR_IO, "exist.safetensors", "cannot open");
    free(missing);
    /* A directory is not a shard. */
    e = (moq_error){0};
    TU_ERR(&e, moq_st_open(&f, dir, "dir.safetensors", &e), MOQ_ERR_IO, "dir.safetensors", "not a regular file");
    moq_st_close(NULL);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_messages_distinct),
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_good_files),
        cmocka_unit_test(test_every_dtype),
        cmocka_unit_test(test_every_truncation_fails),
        cmocka_unit_test(test_byte_corruptions_are_safe),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
