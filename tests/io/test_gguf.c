/* test_gguf.c — the GGUF rules G1-G12 of src/io/gguf.c (one crafted file per rule and per distinct
 * error), the dequantizers, and `moq_gguf_convert` on a tiny synthetic llama file.
 *
 * Oracles (none shared with moq):
 *   - the GGUF layout as ggml/docs/gguf.md documents it; every file is assembled here byte by byte;
 *   - dequantization as ggml-quants.c defines the blocks, restated here in fp64 with an f16 decoder
 *     written from IEEE 754 binary16 (ldexp), over random blocks; every f16 and bf16 code;
 *   - llama.cpp's convert_hf_to_gguf.py permutation, written here in its forward direction
 *     (reshape(n_head, 2, D/2, K).swapaxes(1, 2)): converting a file whose Q/K were permuted that way
 *     must give the original rows back.
 * Each bad file is parsed from an exact-size heap copy (ASan sees any read past the end) and opened
 * by path; both must fail with the same status, name the file in `where` and say the expected text.
 * Then every prefix of a valid file fails cleanly, and single-byte corruptions never crash.
 */
#include "tu.h"

#include <math.h>
#include <sys/stat.h>

#include "io/gguf.h"
#include "io/gguf_convert.h"

/* ---- a byte builder ---------------------------------------------------------------------------- */

typedef struct gbuf {
    uint8_t *p;
    size_t   n, cap;
} gbuf;

static void put(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u8(gbuf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(gbuf *b, uint32_t v) { uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)}; put(b, x, 4); }
static void put_u64(gbuf *b, uint64_t v) { put_u32(b, (uint32_t)v); put_u32(b, (uint32_t)(v >> 32)); }
static void put_strn(gbuf *b, const char *s, size_t n) { put_u64(b, n); put(b, s, n); }
static void put_str(gbuf *b, const char *s) { put_strn(b, s, strlen(s)); }

/* metadata entries */
typedef struct kvs {
    gbuf     b;
    uint64_t n;
} kvs;
static void kv_u32(kvs *k, const char *key, uint32_t v) { put_str(&k->b, key); put_u32(&k->b, 4); put_u32(&k->b, v); k->n++; }
static void kv_i32(kvs *k, const char *key, int32_t v) { put_str(&k->b, key); put_u32(&k->b, 5); put_u32(&k->b, (uint32_t)v); k->n++; }
static void kv_f32(kvs *k, const char *key, float v) { uint32_t u; memcpy(&u, &v, 4); put_str(&k->b, key); put_u32(&k->b, 6); put_u32(&k->b, u); k->n++; }
static void kv_bool(kvs *k, const char *key, uint8_t v) { put_str(&k->b, key); put_u32(&k->b, 7); put_u8(&k->b, v); k->n++; }
static void kv_str(kvs *k, const char *key, const char *v) { put_str(&k->b, key); put_u32(&k->b, 8); put_str(&k->b, v); k->n++; }
static void kv_arr_hdr(kvs *k, const char *key, uint32_t et, uint64_t n) { put_str(&k->b, key); put_u32(&k->b, 9); put_u32(&k->b, et); put_u64(&k->b, n); k->n++; }

typedef struct gt {
    const char *name;
    uint32_t    nd;
    uint64_t    ne[4];
    uint32_t    type;
    int64_t     off;      /* -1: the next aligned offset */
    const void *data;     /* NULL: pattern */
} gt;

typedef struct gfile {
    const char *magic;    /* NULL = "GGUF" */
    uint32_t    version;  /* 0 = 3 */
    int64_t     n_t_claim, n_kv_claim;   /* -1 = the real counts */
    uint32_t    align;    /* the one used to place data; 0 = 32 */
    size_t      cut;      /* bytes dropped from the end */
} gfile;

static size_t type_bytes(uint32_t type, uint64_t nel) {
    switch (type) {
    case 0: return nel * 4;
    case 1: case 30: return nel * 2;
    case 2: return nel / 32 * 18;
    case 3: return nel / 32 * 20;
    case 8: return nel / 32 * 34;
    case 6: return nel / 32 * 22;
    default: return nel;
    }
}

/* Assembles header, metadata, tensor infos, padding and data. */
static gbuf gguf_build(const gfile *g, const kvs *k, const gt *ts, size_t nt) {
    gbuf b = {0};
    put(&b, g->magic ? g->magic : "GGUF", 4);
    put_u32(&b, g->version ? g->version : 3);
    put_u64(&b, g->n_t_claim >= 0 ? (uint64_t)g->n_t_claim : nt);
    put_u64(&b, g->n_kv_claim >= 0 ? (uint64_t)g->n_kv_claim : k->n);
    put(&b, k->b.p, k->b.n);
    const uint64_t a = g->align ? g->align : 32;
    uint64_t next = 0;
    uint64_t offs[64], sizes[64];
    assert_true(nt <= 64);
    for (size_t i = 0; i < nt; i++) {
        uint64_t nel = 1;
        for (uint32_t d = 0; d < ts[i].nd && d < 4; d++) nel *= ts[i].ne[d];
        sizes[i] = type_bytes(ts[i].type, nel);
        offs[i] = ts[i].off >= 0 ? (uint64_t)ts[i].off : next;
        next = (offs[i] + sizes[i] + a - 1) / a * a;
        put_str(&b, ts[i].name);
        put_u32(&b, ts[i].nd);
        for (uint32_t d = 0; d < ts[i].nd; d++) put_u64(&b, d < 4 ? ts[i].ne[d] : 1);
        put_u32(&b, ts[i].type);
        put_u64(&b, offs[i]);
    }
    while (b.n % a) put_u8(&b, 0);
    const size_t base = b.n;
    for (size_t i = 0; i < nt; i++) {
        while (b.n < base + offs[i]) put_u8(&b, 0);
        if (b.n > base + offs[i]) { /* overlapping test files: keep the bytes, cover this tensor */
            while (b.n < base + offs[i] + sizes[i]) put_u8(&b, 0);
            continue;
        }
        if (ts[i].data) put(&b, ts[i].data, sizes[i]);
        else for (uint64_t j = 0; j < sizes[i]; j++) put_u8(&b, (uint8_t)(j * 7 + 3));
    }
    b.n -= g->cut < b.n ? g->cut : b.n;
    return b;
}

/* ---- bad files: one per rule and distinct error -------------------------------------------------- */

typedef struct bad_case {
    const char *file;
    void      (*make)(gbuf *out);
    moq_status  code;
    const char *msg;
} bad_case;

static const gfile G0 = { NULL, 0, -1, -1, 0, 0 };
static const gt T_OK = { "w", 2, {32, 2}, 0, -1, NULL };

static void mk_file(gbuf *out, gfile g, void (*kvf)(kvs *), const gt *ts, size_t nt) {
    kvs k = {0};
    if (kvf) kvf(&k);
    *out = gguf_build(&g, &k, ts, nt);
    free(k.b.p);
}
static void kv_basic(kvs *k) { kv_str(k, "general.architecture", "llama"); kv_u32(k, "llama.block_count", 1); }

static void b_short(gbuf *o) { gfile g = G0; g.cut = 1000; mk_file(o, g, NULL, NULL, 0); o->n = 23; }
static void b_magic(gbuf *o) { gfile g = G0; g.magic = "GGML"; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_v1(gbuf *o) { gfile g = G0; g.version = 1; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_v4(gbuf *o) { gfile g = G0; g.version = 4; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_big_endian(gbuf *o) { gfile g = G0; g.version = 0x03000000; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_nkv_huge(gbuf *o) { gfile g = G0; g.n_kv_claim = INT64_MAX; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_nt_huge(gbuf *o) { gfile g = G0; g.n_t_claim = 1000000; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_nkv_more(gbuf *o) { /* 2 entries, 3 claimed, nothing after them */
    gfile g = G0; g.n_kv_claim = 3; kvs k = {0}; kv_basic(&k); mk_file(o, g, kv_basic, NULL, 0); o->n = 24 + k.b.n; free(k.b.p); }
static void kv_key_empty(kvs *k) { kv_u32(k, "", 1); }
static void b_key_empty(gbuf *o) { mk_file(o, G0, kv_key_empty, NULL, 0); }
static void kv_key_nul(kvs *k) { put_strn(&k->b, "a\0b", 3); put_u32(&k->b, 4); put_u32(&k->b, 1); k->n++; }
static void b_key_nul(gbuf *o) { mk_file(o, G0, kv_key_nul, NULL, 0); }
static void kv_key_long(kvs *k) { put_u64(&k->b, 70000); for (int i = 0; i < 64; i++) put_u8(&k->b, 'k'); k->n++; }
static void b_key_long(gbuf *o) { mk_file(o, G0, kv_key_long, NULL, 0); }
static void kv_str_past(kvs *k) { put_str(&k->b, "s"); put_u32(&k->b, 8); put_u64(&k->b, 1u << 30); k->n++; }
static void b_str_past_end(gbuf *o) { mk_file(o, G0, kv_str_past, NULL, 0); }
static void kv_vtype(kvs *k) { put_str(&k->b, "x"); put_u32(&k->b, 13); put_u32(&k->b, 0); k->n++; }
static void b_vtype(gbuf *o) { mk_file(o, G0, kv_vtype, NULL, 0); }
static void kv_arr_etype(kvs *k) { kv_arr_hdr(k, "a", 99, 1); }
static void b_arr_etype(gbuf *o) { mk_file(o, G0, kv_arr_etype, NULL, 0); }
static void kv_arr_nested(kvs *k) { kv_arr_hdr(k, "a", 9, 1); }
static void b_arr_nested(gbuf *o) { mk_file(o, G0, kv_arr_nested, NULL, 0); }
static void kv_bool2(kvs *k) { kv_bool(k, "b", 2); }
static void b_bool(gbuf *o) { mk_file(o, G0, kv_bool2, NULL, 0); }
static void kv_arr_bool2(kvs *k) { kv_arr_hdr(k, "bs", 7, 2); put_u8(&k->b, 1); put_u8(&k->b, 5); }
static void b_arr_bool(gbuf *o) { mk_file(o, G0, kv_arr_bool2, NULL, 0); }
static void kv_arr_past(kvs *k) { kv_arr_hdr(k, "a", 4, UINT64_MAX / 2); }
static void b_arr_past(gbuf *o) { mk_file(o, G0, kv_arr_past, NULL, 0); }
static void kv_arr_strs(kvs *k) { kv_arr_hdr(k, "toks", 8, 1u << 28); put_str(&k->b, "x"); }
static void b_arr_strs(gbuf *o) { mk_file(o, G0, kv_arr_strs, NULL, 0); }
static void kv_arr_str_past(kvs *k) { kv_arr_hdr(k, "toks", 8, 2); put_str(&k->b, "x"); put_u64(&k->b, 1000); }
static void b_arr_str_past(gbuf *o) { mk_file(o, G0, kv_arr_str_past, NULL, 0); }
static void kv_dup(kvs *k) { kv_u32(k, "general.x", 1); kv_u32(k, "general.x", 2); }
static void b_key_dup(gbuf *o) { mk_file(o, G0, kv_dup, NULL, 0); }
static void kv_align_type(kvs *k) { kv_i32(k, "general.alignment", 32); }
static void b_align_type(gbuf *o) { mk_file(o, G0, kv_align_type, &T_OK, 1); }
static void kv_align_48(kvs *k) { kv_u32(k, "general.alignment", 48); }
static void b_align_pow2(gbuf *o) { mk_file(o, G0, kv_align_48, &T_OK, 1); }
static void kv_align_0(kvs *k) { kv_u32(k, "general.alignment", 0); }
static void b_align_zero(gbuf *o) { mk_file(o, G0, kv_align_0, &T_OK, 1); }
static void b_name_dup(gbuf *o) { gt t[2] = {T_OK, T_OK}; mk_file(o, G0, kv_basic, t, 2); }
static void b_name_empty(gbuf *o) { gt t = T_OK; t.name = ""; mk_file(o, G0, kv_basic, &t, 1); }
static void b_name_long(gbuf *o) {
    gt t = T_OK;
    t.name = "a_tensor_name_that_is_longer_than_the_sixty_three_bytes_ggml_allows";
    mk_file(o, G0, kv_basic, &t, 1);
}
static void b_ndims0(gbuf *o) { gt t = T_OK; t.nd = 0; mk_file(o, G0, kv_basic, &t, 1); }
static void b_ndims5(gbuf *o) { gt t = T_OK; t.nd = 5; mk_file(o, G0, kv_basic, &t, 1); }
static void b_dim0(gbuf *o) { gt t = T_OK; t.ne[1] = 0; mk_file(o, G0, kv_basic, &t, 1); }
static void b_dim_overflow(gbuf *o) { gt t = {"w", 3, {1u << 31, 1u << 31, 1u << 31}, 0, 0, NULL}; gfile g = G0; g.cut = 0; kvs k = {0}; kv_basic(&k);
    /* the builder would try to write the data: build the header only */
    gbuf b = {0}; put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 1); put_u64(&b, k.n); put(&b, k.b.p, k.b.n);
    put_str(&b, t.name); put_u32(&b, 3); for (int d = 0; d < 3; d++) put_u64(&b, t.ne[d]); put_u32(&b, 0); put_u64(&b, 0);
    free(k.b.p); (void)g; *o = b; }
static void b_type_unknown(gbuf *o) { gt t = T_OK; t.type = 4; mk_file(o, G0, kv_basic, &t, 1); }
static void b_type_block(gbuf *o) { gt t = {"q", 2, {16, 2}, 8, -1, NULL}; mk_file(o, G0, kv_basic, &t, 1); }
static void b_off_align(gbuf *o) { gt t[2] = {T_OK, T_OK}; t[1].name = "w2"; t[1].off = 260; mk_file(o, G0, kv_basic, t, 2); }
static void b_off_gap(gbuf *o) { gt t[2] = {T_OK, T_OK}; t[1].name = "w2"; t[1].off = 512; mk_file(o, G0, kv_basic, t, 2); }
static void b_off_overlap(gbuf *o) { gt t[2] = {T_OK, T_OK}; t[1].name = "w2"; t[0].ne[0] = 64; t[1].off = 128; mk_file(o, G0, kv_basic, t, 2); }
static void b_first_off(gbuf *o) { gt t = T_OK; t.off = 32; mk_file(o, G0, kv_basic, &t, 1); }
static void b_data_trunc(gbuf *o) { gfile g = G0; g.cut = 1; mk_file(o, g, kv_basic, &T_OK, 1); }
static void b_no_data_section(gbuf *o) { gfile g = G0; mk_file(o, g, kv_basic, &T_OK, 1); /* keep only the infos, minus padding */
    o->n -= 256; while (o->n % 32 == 0) o->n--; }

static const bad_case bad_cases[] = {
    {"bad_short.gguf", b_short, MOQ_ERR_FORMAT, "too short for the 24-byte GGUF header"},                     /* G1 */
    {"bad_magic.gguf", b_magic, MOQ_ERR_FORMAT, "expected \"GGUF\""},                                         /* G2 */
    {"bad_version_1.gguf", b_v1, MOQ_ERR_UNSUPPORTED, "GGUF version 1 (32-bit counts) is not supported"},    /* G3 */
    {"bad_version_4.gguf", b_v4, MOQ_ERR_FORMAT, "GGUF version 4, expected 2 or 3"},
    {"bad_big_endian.gguf", b_big_endian, MOQ_ERR_UNSUPPORTED, "big-endian GGUF file"},
    {"bad_n_kv_huge.gguf", b_nkv_huge, MOQ_ERR_FORMAT, "metadata entries; the"},                              /* G4 */
    {"bad_n_tensors_huge.gguf", b_nt_huge, MOQ_ERR_FORMAT, "header says 1000000 tensors"},
    {"bad_n_kv_more.gguf", b_nkv_more, MOQ_ERR_FORMAT, "metadata entry 2: key needs 8 bytes"},
    {"bad_key_empty.gguf", b_key_empty, MOQ_ERR_FORMAT, "metadata entry 0: key is 0 bytes long, expected 1 to 65535"}, /* G5 */
    {"bad_key_nul.gguf", b_key_nul, MOQ_ERR_FORMAT, "metadata entry 0: key holds a NUL byte"},
    {"bad_key_long.gguf", b_key_long, MOQ_ERR_FORMAT, "key is 70000 bytes long"},
    {"bad_string_past_end.gguf", b_str_past_end, MOQ_ERR_FORMAT, "s: string value needs 1073741824 bytes"},
    {"bad_value_type.gguf", b_vtype, MOQ_ERR_FORMAT, "key x: value type 13 is not one of the 13 GGUF types"},  /* G6 */
    {"bad_array_type.gguf", b_arr_etype, MOQ_ERR_FORMAT, "key a: array element type 99"},
    {"bad_array_nested.gguf", b_arr_nested, MOQ_ERR_UNSUPPORTED, "key a: array of arrays"},
    {"bad_bool.gguf", b_bool, MOQ_ERR_FORMAT, "key b: bool byte 2, expected 0 or 1"},
    {"bad_array_bool.gguf", b_arr_bool, MOQ_ERR_FORMAT, "key bs: element 1 is bool byte 5"},
    {"bad_array_past_end.gguf", b_arr_past, MOQ_ERR_FORMAT, "key a: array of 9223372036854775807 UINT32"},      /* G7 */
    {"bad_array_strings.gguf", b_arr_strs, MOQ_ERR_FORMAT, "key toks: array of 268435456 strings cannot fit"},
    {"bad_array_string_past_end.gguf", b_arr_str_past, MOQ_ERR_FORMAT, "toks: string array element needs 1000 bytes"},
    {"bad_key_twice.gguf", b_key_dup, MOQ_ERR_FORMAT, "key general.x appears twice"},                           /* G8 */
    {"bad_alignment_type.gguf", b_align_type, MOQ_ERR_FORMAT, "general.alignment: type INT32, expected UINT32"},
    {"bad_alignment_48.gguf", b_align_pow2, MOQ_ERR_FORMAT, "general.alignment: 48 is not a power of two"},
    {"bad_alignment_0.gguf", b_align_zero, MOQ_ERR_FORMAT, "general.alignment: 0 is not a power of two"},
    {"bad_tensor_twice.gguf", b_name_dup, MOQ_ERR_FORMAT, "tensor w: name appears twice"},                      /* G9 */
    {"bad_tensor_name_empty.gguf", b_name_empty, MOQ_ERR_FORMAT, "tensor info 0: name is 0 bytes long, expected 1 to 63"},
    {"bad_tensor_name_long.gguf", b_name_long, MOQ_ERR_FORMAT, "name is 67 bytes long, expected 1 to 63"},
    {"bad_n_dims_0.gguf", b_ndims0, MOQ_ERR_FORMAT, "tensor w: n_dims 0, expected 1 to 4"},
    {"bad_n_dims_5.gguf", b_ndims5, MOQ_ERR_FORMAT, "tensor w: n_dims 5, expected 1 to 4"},
    {"bad_dim_zero.gguf", b_dim0, MOQ_ERR_FORMAT, "tensor w: ne[1] = 0, expected 1 to 2^63-1"},
    {"bad_dim_overflow.gguf", b_dim_overflow, MOQ_ERR_FORMAT, "tensor w: the element count overflows int64 at ne[2]"},
    {"bad_type_unknown.gguf", b_type_unknown, MOQ_ERR_FORMAT, "tensor w: tensor type 4 is not a ggml type moq knows"}, /* G10 */
    {"bad_type_block.gguf", b_type_block, MOQ_ERR_FORMAT, "tensor q: ne[0] = 16 is not a multiple of the Q8_0 block size 32"},
    {"bad_offset_unaligned.gguf", b_off_align, MOQ_ERR_FORMAT, "tensor w2: offset 260 is not a multiple of the alignment 32"}, /* G11 */
    {"bad_offset_gap.gguf", b_off_gap, MOQ_ERR_FORMAT, "tensor w2: offset 512, expected 256 (leaves a gap"},
    {"bad_offset_overlap.gguf", b_off_overlap, MOQ_ERR_FORMAT, "tensor w2: offset 128, expected 512 (overlaps the previous tensor"},
    {"bad_first_offset.gguf", b_first_off, MOQ_ERR_FORMAT, "tensor w: offset 32, expected 0"},
    {"bad_data_truncated.gguf", b_data_trunc, MOQ_ERR_FORMAT, "tensor w: 256 bytes at data offset 0 run past the end of the data section (255 bytes"}, /* G12 */
    {"bad_no_data_section.gguf", b_no_data_section, MOQ_ERR_FORMAT, "past the end of the"},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

static void check_bad(const char *name, const uint8_t *bytes, size_t n, moq_status code, const char *msg, const char *dir) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, bytes, n);
    moq_gguf_file f;
    moq_error e = {0};
    moq_status st = moq_gguf_parse(&f, name, copy, n, &e);
    if (st == MOQ_OK) fail_msg("%s: accepted, expected \"%s\"", name, msg);
    TU_ERR(&e, st, code, name, msg);
    free(copy);
    char *path = tu_write_file(dir, name, bytes, n);
    moq_error e2 = {0};
    moq_status st2 = moq_gguf_open(&f, path, name, &e2);
    assert_int_equal(st2, st);
    assert_string_equal(e2.msg, e.msg);
    free(path);
}

static void test_bad_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir("gguf_bad");
    for (size_t i = 0; i < N_BAD; i++) {
        gbuf b = {0};
        bad_cases[i].make(&b);
        check_bad(bad_cases[i].file, b.p, b.n, bad_cases[i].code, bad_cases[i].msg, dir);
        free(b.p);
    }
    tu_rmtree(dir);
    free(dir);
}

/* ---- accepted files ------------------------------------------------------------------------------ */

static void kv_all_types(kvs *k) {
    put_str(&k->b, "u8"); put_u32(&k->b, 0); put_u8(&k->b, 200); k->n++;
    put_str(&k->b, "i8"); put_u32(&k->b, 1); put_u8(&k->b, 0xFE); k->n++;
    put_str(&k->b, "u16"); put_u32(&k->b, 2); put_u8(&k->b, 0x34); put_u8(&k->b, 0x12); k->n++;
    put_str(&k->b, "i16"); put_u32(&k->b, 3); put_u8(&k->b, 0xFF); put_u8(&k->b, 0xFF); k->n++;
    kv_u32(k, "u32", 4000000000u);
    kv_i32(k, "i32", -7);
    kv_f32(k, "f32", 0.25f);
    kv_bool(k, "bool", 1);
    kv_str(k, "str", "héllo");
    put_str(&k->b, "u64"); put_u32(&k->b, 10); put_u64(&k->b, 1ull << 40); k->n++;
    put_str(&k->b, "i64"); put_u32(&k->b, 11); put_u64(&k->b, (uint64_t)-5); k->n++;
    double d = -1.5; uint64_t u; memcpy(&u, &d, 8);
    put_str(&k->b, "f64"); put_u32(&k->b, 12); put_u64(&k->b, u); k->n++;
    kv_arr_hdr(k, "arr_i32", 5, 3); put_u32(&k->b, 1); put_u32(&k->b, (uint32_t)-2); put_u32(&k->b, 3);
    kv_arr_hdr(k, "arr_str", 8, 3); put_str(&k->b, "a"); put_str(&k->b, ""); put_str(&k->b, "ccc");
    kv_arr_hdr(k, "arr_empty", 6, 0);
    kv_u32(k, "general.alignment", 64);
}

static void test_good_file(void **state) {
    (void)state;
    gfile g = G0;
    g.align = 64;
    gt ts[3] = { {"a", 1, {5}, 0, -1, NULL}, {"b.q8", 2, {64, 3}, 8, -1, NULL}, {"c", 4, {2, 1, 3, 1}, 30, -1, NULL} };
    gbuf b = {0};
    mk_file(&b, g, kv_all_types, ts, 3);
    moq_gguf_file f;
    TU_OK(moq_gguf_parse(&f, "good.gguf", b.p, b.n, err_));
    assert_int_equal(f.version, 3);
    assert_int_equal(f.alignment, 64);
    assert_int_equal(f.n_kv, 16);
    assert_int_equal(f.n_tensors, 3);
    assert_int_equal(f.data_offset % 64, 0);
    int64_t v;
    static const struct { const char *key; int64_t want; } ints[] = {
        {"u8", 200}, {"i8", -2}, {"u16", 0x1234}, {"i16", -1}, {"u32", 4000000000ll}, {"i32", -7}, {"u64", 1ll << 40}, {"i64", -5} };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        TU_OK(moq_gguf_kv_int(&f, moq_gguf_find_kv(&f, ints[i].key), &v, err_));
        assert_int_equal(v, ints[i].want);
    }
    double d;
    TU_OK(moq_gguf_kv_float(&f, moq_gguf_find_kv(&f, "f32"), &d, err_));
    assert_true(d == 0.25);
    TU_OK(moq_gguf_kv_float(&f, moq_gguf_find_kv(&f, "f64"), &d, err_));
    assert_true(d == -1.5);
    bool bl;
    TU_OK(moq_gguf_kv_bool(&f, moq_gguf_find_kv(&f, "bool"), &bl, err_));
    assert_true(bl);
    const char *s;
    uint64_t n;
    TU_OK(moq_gguf_kv_str(&f, moq_gguf_find_kv(&f, "str"), &s, &n, err_));
    assert_int_equal(n, strlen("héllo"));
    assert_memory_equal(s, "héllo", n);
    moq_error e;
    TU_ERR(&e, moq_gguf_kv_int(&f, moq_gguf_find_kv(&f, "str"), &v, &e), MOQ_ERR_CONFIG, "good.gguf", "key str: STRING, expected an integer");
    const moq_gguf_kv *ai = moq_gguf_find_kv(&f, "arr_i32");
    assert_int_equal(ai->n, 3);
    assert_int_equal(moq_gguf_arr_int(ai, 1), -2);
    const moq_gguf_kv *as = moq_gguf_find_kv(&f, "arr_str");
    uint64_t pos = 0;
    const char *want[3] = {"a", "", "ccc"};
    for (int i = 0; i < 3; i++) {
        assert_true(moq_gguf_arr_str_next(as, &pos, &s, &n));
        assert_int_equal(n, strlen(want[i]));
        assert_memory_equal(s, want[i], n);
    }
    assert_false(moq_gguf_arr_str_next(as, &pos, &s, &n));
    assert_int_equal(moq_gguf_find_kv(&f, "arr_empty")->n, 0);
    const moq_gguf_tensor *t = moq_gguf_find_tensor(&f, "b.q8");
    assert_non_null(t);
    assert_int_equal(t->type, MOQ_GGML_Q8_0);
    assert_int_equal(t->nelem, 192);
    assert_int_equal(t->nbytes, 6 * 34);
    assert_int_equal(t->offset, 64);               /* "a" is 20 bytes, padded to 64 */
    assert_ptr_equal(t->data, b.p + f.data_offset + 64);
    assert_int_equal(moq_gguf_find_tensor(&f, "c")->nelem, 6);
    assert_null(moq_gguf_find_tensor(&f, "nope"));
    moq_gguf_close(&f);
    /* version 2 has the same layout */
    b.p[4] = 2;
    TU_OK(moq_gguf_parse(&f, "good_v2.gguf", b.p, b.n, err_));
    assert_int_equal(f.version, 2);
    moq_gguf_close(&f);
    /* every prefix fails cleanly (exact-size copies), every single-byte change is safe */
    for (size_t cut = 0; cut < b.n; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, b.p, cut);
        moq_error pe = {0};
        assert_int_not_equal(moq_gguf_parse(&f, "prefix.gguf", c, cut, &pe), MOQ_OK);
        assert_string_equal(pe.where, "prefix.gguf");
        free(c);
    }
    for (size_t i = 0; i < f.size || i < b.n; i += 3) {
        uint8_t *c = malloc(b.n);
        memcpy(c, b.p, b.n);
        c[i] ^= (uint8_t)(0x5A + i);
        moq_error pe = {0};
        if (moq_gguf_parse(&f, "flip.gguf", c, b.n, &pe) == MOQ_OK) moq_gguf_close(&f);
        else assert_true(pe.msg[0] != 0);
        free(c);
    }
    free(b.p);
}

/* ---- dequantization ------------------------------------------------------------------------------- */

/* IEEE 754 binary16 → double, written from the definition. */
static double f16_ref(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
/* a finite f16 scale of either sign, magnitudes 2^-14 .. 2^4 */
static uint16_t rnd_scale(void) { return (uint16_t)((rnd() & 0x8000) | ((1 + rnd() % 18) << 10) | (rnd() & 1023)); }

static void test_dequant_codes(void **state) {
    (void)state;
    uint8_t in[4];
    float out[2];
    for (uint32_t c = 0; c < 65536; c++) {
        in[0] = (uint8_t)c; in[1] = (uint8_t)(c >> 8);
        TU_OK(moq_gguf_dequant(MOQ_GGML_F16, in, out, 1, "f16", err_));
        const double r = f16_ref((uint16_t)c);
        if (isnan(r)) assert_true(isnan(out[0]));
        else if ((double)out[0] != r || !signbit(out[0]) != !signbit(r)) fail_msg("f16 0x%04x: %.9g, expected %.9g", c, (double)out[0], r);
        TU_OK(moq_gguf_dequant(MOQ_GGML_BF16, in, out, 1, "bf16", err_));
        uint32_t u = c << 16;
        float want;
        memcpy(&want, &u, 4);
        assert_memory_equal(&out[0], &want, 4);
    }
    const float x = -3.75e-5f;
    memcpy(in, &x, 4);
    TU_OK(moq_gguf_dequant(MOQ_GGML_F32, in, out, 1, "f32", err_));
    assert_true(out[0] == x);
}

static void test_dequant_blocks(void **state) {
    (void)state;
    enum { NB = 64 };
    uint8_t q8[NB * 34], q40[NB * 18], q41[NB * 20];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof q40; i++) q40[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof q41; i++) q41[i] = (uint8_t)rnd();
    for (int b = 0; b < NB; b++) {
        uint16_t d = rnd_scale(), m = rnd_scale();
        q8[b * 34] = (uint8_t)d; q8[b * 34 + 1] = (uint8_t)(d >> 8);
        q40[b * 18] = (uint8_t)d; q40[b * 18 + 1] = (uint8_t)(d >> 8);
        q41[b * 20] = (uint8_t)d; q41[b * 20 + 1] = (uint8_t)(d >> 8);
        q41[b * 20 + 2] = (uint8_t)m; q41[b * 20 + 3] = (uint8_t)(m >> 8);
    }
    /* a zero scale and the extreme codes in block 0 */
    q8[0] = q8[1] = 0;
    q40[2] = 0x0F; q40[3] = 0xF0;
    static float y[NB * 32];
    TU_OK(moq_gguf_dequant(MOQ_GGML_Q8_0, q8, y, NB * 32, "q8_0", err_));
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            /* x = q * d: a product of an int8 and an f16 is exact in float */
            const double want = (double)(int8_t)q8[b * 34 + 2 + j] * f16_ref((uint16_t)(q8[b * 34] | q8[b * 34 + 1] << 8));
            if ((double)y[b * 32 + j] != want) fail_msg("Q8_0 block %d [%d]: %.9g, expected %.9g", b, j, (double)y[b * 32 + j], want);
        }
    TU_OK(moq_gguf_dequant(MOQ_GGML_Q4_0, q40, y, NB * 32, "q4_0", err_));
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            /* element j < 16: low nibble of byte j; j >= 16: high nibble of byte j - 16; minus 8 */
            const uint8_t byte = q40[b * 18 + 2 + (j % 16)];
            const int code = (j < 16 ? byte & 15 : byte >> 4) - 8;
            const double want = code * f16_ref((uint16_t)(q40[b * 18] | q40[b * 18 + 1] << 8));
            if ((double)y[b * 32 + j] != want) fail_msg("Q4_0 block %d [%d]: %.9g, expected %.9g", b, j, (double)y[b * 32 + j], want);
        }
    TU_OK(moq_gguf_dequant(MOQ_GGML_Q4_1, q41, y, NB * 32, "q4_1", err_));
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            const uint8_t byte = q41[b * 20 + 4 + (j % 16)];
            const int code = j < 16 ? byte & 15 : byte >> 4;
            /* x = code * d + m in float: code * d is exact, the sum is exact in double and
             * rounded once to float, as float addition rounds */
            const double d = f16_ref((uint16_t)(q41[b * 20] | q41[b * 20 + 1] << 8));
            const double m = f16_ref((uint16_t)(q41[b * 20 + 2] | q41[b * 20 + 3] << 8));
            const float want = (float)(code * d + m);
            if (y[b * 32 + j] != want) fail_msg("Q4_1 block %d [%d]: %.9g, expected %.9g", b, j, (double)y[b * 32 + j], (double)want);
        }
    /* hand-computed block: d = 0.5 (0x3800), bytes 0x0F, 0xF0 → x[0] = (15-8)/2, x[16] = (0-8)/2, x[1] = (0-8)/2, x[17] = (15-8)/2 */
    uint8_t h[18] = {0x00, 0x38, 0x0F, 0xF0};
    for (int j = 2; j < 16; j++) h[2 + j] = 0x88;
    float hy[32];
    TU_OK(moq_gguf_dequant(MOQ_GGML_Q4_0, h, hy, 32, "q4_0", err_));
    assert_true(hy[0] == 3.5f && hy[16] == -4.0f && hy[1] == -4.0f && hy[17] == 3.5f && hy[2] == 0.0f && hy[31] == 0.0f);
    moq_error e;
    TU_ERR(&e, moq_gguf_dequant(MOQ_GGML_Q5_0, q40, y, 32, "t", &e), MOQ_ERR_UNSUPPORTED, "t", "tensor type Q5_0 (6) cannot be dequantized");
    TU_ERR(&e, moq_gguf_dequant(MOQ_GGML_Q8_0, q8, y, 31, "t", &e), MOQ_ERR_INVALID_ARG, "t", "31 elements of Q8_0");
    assert_string_equal(moq_ggml_type_name(MOQ_GGML_BF16), "BF16");
    assert_int_equal(moq_ggml_type_size(MOQ_GGML_Q4_1), 20);
    assert_int_equal(moq_ggml_type_block(MOQ_GGML_Q4_K), 256);
    assert_false(moq_ggml_type_dequantizable(MOQ_GGML_Q4_K));
}

/* ---- conversion of a tiny llama --------------------------------------------------------------------- */

enum { L = 2, HID = 32, HEADS = 4, KVH = 2, HD = 8, INTER = 64, NV = 259 };

/* the GPT-2 byte-to-unicode table (bytes.decode of the byte-level alphabet), UTF-8 encoded */
static void byte_symbol(unsigned b, char out[4]) {
    unsigned cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) cp = b;
    else {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 63)); out[2] = 0; }
}

static float hfw[16][64 * 64];   /* the "Hugging Face" matrices the GGUF is made from */

/* llama.cpp's permute, forward: reshape(n_head, 2, D/2, K).swapaxes(1, 2).reshape(N, K):
 * output row (h, i, s) [i < D/2, s < 2] = input row (h, s, i). */
static void permute_fwd(const float *in, float *out, int n_rows, int k, int n_head) {
    const int d = n_rows / n_head;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < d / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(out + (size_t)(h * d + i * 2 + s) * k, in + (size_t)(h * d + s * (d / 2) + i) * k, (size_t)k * 4);
}

static float bf16_round(float x) { /* values drawn below are bf16 already: this only checks it */
    uint32_t u; memcpy(&u, &x, 4); u &= 0xFFFF0000u; float y; memcpy(&y, &u, 4); return y;
}

static char *build_tiny_llama(const char *dir, const char *name, bool tied, uint32_t q_type) {
    kvs k = {0};
    kv_str(&k, "general.architecture", "llama");
    kv_u32(&k, "llama.block_count", L);
    kv_u32(&k, "llama.embedding_length", HID);
    kv_u32(&k, "llama.feed_forward_length", INTER);
    kv_u32(&k, "llama.attention.head_count", HEADS);
    kv_u32(&k, "llama.attention.head_count_kv", KVH);
    kv_u32(&k, "llama.context_length", 128);
    kv_f32(&k, "llama.rope.freq_base", 10000.0f);
    kv_f32(&k, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(&k, "tokenizer.ggml.model", "gpt2");
    kv_str(&k, "tokenizer.ggml.pre", "smollm");
    kv_arr_hdr(&k, "tokenizer.ggml.tokens", 8, NV);
    put_str(&k.b, "<|im_start|>");
    for (unsigned b = 0; b < 256; b++) { char s[4]; byte_symbol(b, s); put_str(&k.b, s); }
    put_str(&k.b, "he"); put_str(&k.b, "hel");
    kv_arr_hdr(&k, "tokenizer.ggml.token_type", 5, NV);
    for (int i = 0; i < NV; i++) put_u32(&k.b, i == 0 ? 3 : 1);
    kv_arr_hdr(&k, "tokenizer.ggml.merges", 8, 2);
    put_str(&k.b, "h e"); put_str(&k.b, "he l");
    kv_u32(&k, "tokenizer.ggml.bos_token_id", 0);
    kv_u32(&k, "tokenizer.ggml.eos_token_id", 0);
    kv_str(&k, "tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}");
    /* tensors: values k/64 with small integers k are exact in bf16 */
    gt ts[3 + 9 * L];
    static float data[3 + 9 * L][NV * HID];
    static float perm[64 * 64];
    size_t nt = 0;
    int mi = 0;
#define ADD(nm, rows, cols, pm)                                                                     \
    do {                                                                                            \
        static char names_[3 + 9 * L][48];                                                          \
        snprintf(names_[nt], 48, "%s", nm);                                                         \
        float *m_ = data[nt];                                                                       \
        for (int i_ = 0; i_ < (rows) * (cols); i_++) m_[i_] = bf16_round((float)((int)(rnd() % 129) - 64) / 256.0f); \
        if ((pm) && mi < 16) memcpy(hfw[mi++], m_, (size_t)(rows) * (cols) * 4);                      \
        if (pm) { permute_fwd(m_, perm, rows, cols, pm); memcpy(m_, perm, (size_t)(rows) * (cols) * 4); } \
        ts[nt] = (gt){ names_[nt], (rows) > 1 ? 2u : 1u, {(uint64_t)(cols), (uint64_t)(rows)}, 0, -1, m_ }; \
        if ((rows) == 1) ts[nt].ne[0] = (uint64_t)(cols);                                            \
        nt++;                                                                                       \
    } while (0)
    ADD("token_embd.weight", NV, HID, 0);
    ADD("output_norm.weight", 1, HID, 0);
    if (!tied) ADD("output.weight", NV, HID, 0);
    for (int l = 0; l < L; l++) {
        char b[48];
        snprintf(b, sizeof b, "blk.%d.attn_q.weight", l); ADD(b, HEADS * HD, HID, HEADS);
        snprintf(b, sizeof b, "blk.%d.attn_k.weight", l); ADD(b, KVH * HD, HID, KVH);
        snprintf(b, sizeof b, "blk.%d.attn_v.weight", l); ADD(b, KVH * HD, HID, 0);
        snprintf(b, sizeof b, "blk.%d.attn_output.weight", l); ADD(b, HID, HEADS * HD, 0);
        snprintf(b, sizeof b, "blk.%d.attn_norm.weight", l); ADD(b, 1, HID, 0);
        snprintf(b, sizeof b, "blk.%d.ffn_norm.weight", l); ADD(b, 1, HID, 0);
        snprintf(b, sizeof b, "blk.%d.ffn_gate.weight", l); ADD(b, INTER, HID, 0);
        snprintf(b, sizeof b, "blk.%d.ffn_up.weight", l); ADD(b, INTER, HID, 0);
        snprintf(b, sizeof b, "blk.%d.ffn_down.weight", l); ADD(b, HID, INTER, 0);
    }
#undef ADD
    ts[nt - 1].type = q_type; /* the last tensor's type is the caller's (F32 or an unsupported one) */
    if (q_type != 0) ts[nt - 1].data = NULL;
    gbuf g = gguf_build(&G0, &k, ts, nt);
    char *p = tu_write_file(dir, name, g.p, g.n);
    free(g.p);
    free(k.b.p);
    return p;
}

static void expect_rows(const moq_checkpoint *c, const char *name, const float *want, int rows, int cols) {
    const moq_tensor *t = moq_checkpoint_tensor(c, name);
    if (!t) fail_msg("%s missing", name);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], rows);
    assert_int_equal(t->shape[1], cols);
    for (int i = 0; i < rows * cols; i++) {
        float v;
        if (t->dtype == MOQ_DT_F32) memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
        else { uint32_t u = (uint32_t)((const uint8_t *)t->data)[2 * i] << 16 | (uint32_t)((const uint8_t *)t->data)[2 * i + 1] << 24; memcpy(&v, &u, 4); }
        if (v != want[i]) fail_msg("%s [%d, %d] = %g, expected %g (row permutation?)", name, i / cols, i % cols, (double)v, (double)want[i]);
    }
}

static void test_convert_tiny(void **state) {
    (void)state;
    char *dir = tu_tmpdir("gguf_convert");
    rng = 12345;
    char *src = build_tiny_llama(dir, "tiny.gguf", true, 0);
    char out[1024], out2[1024], out3[1024];
    snprintf(out, sizeof out, "%s/hf", dir);
    snprintf(out2, sizeof out2, "%s/hf_bf16", dir);
    snprintf(out3, sizeof out3, "%s/hf_bad", dir);
    moq_gguf_convert_opts o = moq_gguf_convert_opts_default();
    o.dtype = MOQ_DT_F32;
    moq_gguf_convert_info info;
    TU_OK(moq_gguf_convert(src, out, &o, &info, err_));
    assert_true(info.tied);
    assert_int_equal(info.n_layers, L);
    assert_int_equal(info.n_tensors, 2 + 9 * L);
    moq_checkpoint *c;
    TU_OK(moq_checkpoint_open(&c, out, NULL, err_));
    /* Q/K come back in Hugging Face order; hfw holds them in the order they were added */
    expect_rows(c, "model.layers.0.self_attn.q_proj.weight", hfw[0], HEADS * HD, HID);
    expect_rows(c, "model.layers.0.self_attn.k_proj.weight", hfw[1], KVH * HD, HID);
    expect_rows(c, "model.layers.1.self_attn.q_proj.weight", hfw[2], HEADS * HD, HID);
    expect_rows(c, "model.layers.1.self_attn.k_proj.weight", hfw[3], KVH * HD, HID);
    assert_null(moq_checkpoint_tensor(c, "lm_head.weight"));
    const moq_tensor *emb = moq_checkpoint_tensor(c, "model.embed_tokens.weight");
    assert_non_null(emb);
    assert_int_equal(emb->shape[0], NV);
    assert_int_equal(emb->shape[1], HID);
    assert_int_equal(moq_checkpoint_tensor(c, "model.layers.1.post_attention_layernorm.weight")->ndim, 1);
    const moq_arch *a = moq_checkpoint_arch(c);
    assert_string_equal(a->architecture, "LlamaForCausalLM");
    assert_int_equal(a->num_hidden_layers, L);
    assert_int_equal(a->num_key_value_heads, KVH);
    assert_int_equal(a->head_dim, HD);
    assert_int_equal(a->intermediate_size, INTER);
    assert_int_equal(a->vocab_size, NV);
    assert_true(a->tie_word_embeddings);
    assert_true(a->rope_theta == 10000.0);
    assert_non_null(strstr(moq_checkpoint_json_text(c, "config.json"), "\"rms_norm_eps\":\t1e-05"));
    moq_checkpoint_free(c);
    /* the tokenizer: "<|im_start|>" is special id 0; "hello" = "hel" (merges h e, he l) + l + o */
    moq_tokenizer *t;
    TU_OK(moq_tokenizer_open(&t, out, err_));
    int32_t ids[8];
    size_t n;
    TU_OK(moq_tokenizer_encode(t, "<|im_start|>hello", 17, 0, ids, 8, &n, err_));
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 258);
    assert_int_equal(ids[2], 1 + 'l');
    assert_int_equal(ids[3], 1 + 'o');
    assert_true(moq_tokenizer_is_special(t, 0));
    moq_tokenizer_free(t);
    /* the checkpoint runs */
    moq_model *m;
    moq_model_opts mo = moq_model_opts_default();
    mo.ctx = 16;
    TU_OK(moq_model_open(&m, out, &mo, err_));
    moq_model_free(m);
    /* BF16: same values (they are bf16-exact), stored as bf16 */
    TU_OK(moq_gguf_convert(src, out2, NULL, NULL, err_));
    TU_OK(moq_checkpoint_open(&c, out2, NULL, err_));
    assert_int_equal(moq_checkpoint_tensor(c, "model.layers.1.self_attn.k_proj.weight")->dtype, MOQ_DT_BF16);
    expect_rows(c, "model.layers.1.self_attn.k_proj.weight", hfw[3], KVH * HD, HID);
    moq_checkpoint_free(c);
    /* a non-empty output directory is refused */
    moq_error e;
    TU_ERR(&e, moq_gguf_convert(src, out, NULL, NULL, &e), MOQ_ERR_IO, out, "exists and is not empty");
    free(src);
    /* an unsupported tensor type: an error naming the tensor, and nothing written */
    src = build_tiny_llama(dir, "q5.gguf", false, MOQ_GGML_Q5_0);
    TU_ERR(&e, moq_gguf_convert(src, out3, NULL, NULL, &e), MOQ_ERR_UNSUPPORTED, "q5.gguf", "tensor blk.1.ffn_down.weight: type Q5_0");
    struct stat st;
    assert_int_not_equal(stat(out3, &st), 0);
    free(src);
    tu_rmtree(dir);
    free(dir);
}

/* `moq convert-gguf` through the CLI: exit codes are moq_status values, errors one line. */
static void test_convert_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir("gguf_cli");
    rng = 777;
    char *src = build_tiny_llama(dir, "tiny.gguf", false, 0);
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' convert-gguf '%s' '%s/hf'", tu_moq_bin(), src, dir);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("%s: exit %d: %s", cmd, rc, out);
    assert_non_null(strstr(out, "2 layers, "));
    assert_non_null(strstr(out, "moq: convert "));                 /* per-phase timings */
    assert_null(strstr(out, "tied embeddings"));                   /* this file has output.weight */
    rc = tu_run(cmd, out, sizeof out);                             /* again: the directory is not empty */
    assert_int_equal(rc, MOQ_ERR_IO);
    assert_non_null(strstr(out, "/hf: exists and is not empty"));
    assert_non_null(strstr(out, "moq: "));
    snprintf(cmd, sizeof cmd, "'%s' convert-gguf '%s' '%s/hf2' --dtype f16", tu_moq_bin(), src, dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_INVALID_ARG);
    assert_non_null(strstr(out, "--dtype f16: expected bf16 or f32"));
    snprintf(cmd, sizeof cmd, "'%s' convert-gguf '%s'", tu_moq_bin(), src);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_INVALID_ARG);
    snprintf(cmd, sizeof cmd, "'%s' convert-gguf '%s/missing.gguf' '%s/hf3'", tu_moq_bin(), dir, dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_IO);
    assert_non_null(strstr(out, "missing.gguf"));
    snprintf(cmd, sizeof cmd, "'%s' check '%s/hf'", tu_moq_bin(), dir);
    rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("%s: exit %d: %s", cmd, rc, out);
    snprintf(cmd, sizeof cmd, "'%s' run '%s/hf' -p hello -n 3 --ctx 16", tu_moq_bin(), dir);
    rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("%s: exit %d: %s", cmd, rc, out);
    free(src);
    tu_rmtree(dir);
    free(dir);
}

/* Converter errors: each names the file and the key or tensor. */
static void kv_no_arch(kvs *k) { kv_u32(k, "llama.block_count", 1); }
static void kv_arch_gpt2(kvs *k) { kv_str(k, "general.architecture", "gpt2"); }
static void kv_missing_heads(kvs *k) {
    kv_str(k, "general.architecture", "llama");
    kv_u32(k, "llama.block_count", 1); kv_u32(k, "llama.embedding_length", 32); kv_u32(k, "llama.feed_forward_length", 64);
}
static void test_convert_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("gguf_convert_err");
    static const struct { const char *file; void (*kvf)(kvs *); moq_status code; const char *msg; } cases[] = {
        {"no_arch.gguf", kv_no_arch, MOQ_ERR_CONFIG, "key general.architecture is missing"},
        {"gpt2.gguf", kv_arch_gpt2, MOQ_ERR_UNSUPPORTED, "key general.architecture is \"gpt2\"; the converter knows llama"},
        {"no_heads.gguf", kv_missing_heads, MOQ_ERR_CONFIG, "key llama.attention.head_count is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gbuf b = {0};
        mk_file(&b, G0, cases[i].kvf, &T_OK, 1);
        char *p = tu_write_file(dir, cases[i].file, b.p, b.n);
        char out[1024];
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        moq_error e;
        TU_ERR(&e, moq_gguf_convert(p, out, NULL, NULL, &e), cases[i].code, cases[i].file, cases[i].msg);
        struct stat st;
        assert_int_not_equal(stat(out, &st), 0);
        free(p);
        free(b.p);
    }
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_dequant_codes),
        cmocka_unit_test(test_dequant_blocks),
        cmocka_unit_test(test_convert_tiny),
        cmocka_unit_test(test_convert_errors),
        cmocka_unit_test(test_convert_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
