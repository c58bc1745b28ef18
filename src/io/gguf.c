/* gguf.c — parse and validate a GGUF file (versions 2 and 3, little-endian), rule by rule, and
 * dequantize its tensors as ggml does. Each rule has its own error naming the file and the key or
 * tensor involved. Layout (ggml/docs/gguf.md; all integers little-endian):
 *
 *   file:    "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv[n_kv] | tensor_info[n_tensors]
 *            | padding to `alignment` | data section
 *   string:  u64 len | len bytes (no NUL)
 *   kv:      string key | u32 type | value
 *   value:   scalar (u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64) | string | u32 elem_type u64 n elem[n]
 *   tensor:  string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset
 *
 *   G1  the file holds the 24-byte fixed header
 *   G2  it starts with the magic "GGUF"
 *   G3  version is 2 or 3 (1 used 32-bit counts and is refused; a byte-swapped version means a
 *       big-endian file, refused by name)
 *   G4  n_kv and n_tensors fit in the file (each entry takes at least 13 resp. 24 bytes)
 *   G5  every string lies inside the file; keys are 1..65535 bytes, tensor names 1..63 bytes
 *       (GGML_MAX_NAME), neither holds a NUL byte
 *   G6  every value type is one of the 13; an array's element type too, and not ARRAY (nested
 *       arrays are refused); a bool is 0 or 1
 *   G7  an array's n × element size (strings: each string) lies inside the file
 *   G8  keys are unique; general.alignment, when present, is a u32 power of two
 *   G9  tensor names are unique; n_dims is 1..4; every ne >= 1 and their product fits in int64
 *   G10 the tensor type is in the type table below; ne[0] is a multiple of its block size
 *   G11 offsets are multiples of the alignment, and tensors follow one another in file order, each
 *       at the previous one's end rounded up to the alignment (ggml's rule: no overlap, no gaps
 *       beyond padding)
 *   G12 the data section starts at the end of the tensor infos rounded up to the alignment, inside
 *       the file, and every tensor's bytes lie inside it
 *
 * Dequantization (ggml-quants.c, dequantize_row_*): blocks of 32 with an f16 scale d (and min m):
 *   Q8_0  {f16 d; i8 q[32]}          x[j] = q[j] * d
 *   Q4_0  {f16 d; u8 qs[16]}         x[j] = ((qs[j] & 15) - 8) * d,  x[j+16] = ((qs[j] >> 4) - 8) * d
 *   Q4_1  {f16 d, m; u8 qs[16]}      x[j] = (qs[j] & 15) * d + m,    x[j+16] = (qs[j] >> 4) * d + m
 *   F16, BF16 widen exactly; F32 is copied.
 * Tested by tests/io/test_gguf.c (one crafted file per rule; dequantization against independent
 * fp64 formulas); fuzzed by tests/fuzz/fuzz_gguf.c.
 */
#include "io/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strmap.h"
#include "format/format.h"

#define GGUF_MAGIC_LEN   4
#define GGUF_FIXED_BYTES 24u           /* magic, version, n_tensors, n_kv          */
#define GGUF_MIN_KV      13u           /* empty key (8) + type (4) + u8 value (1)  */
#define GGUF_MIN_TENSOR  24u           /* empty name (8) + n_dims (4) + type (4) + offset (8), no dims */
#define GGUF_MAX_KEY     65535u

/* One row per metadata value type: name and element size (0 for STRING and ARRAY). */
static const struct { const char *name; uint8_t size; } vtype_table[MOQ_GGUF_VTYPE_COUNT] = {
    [MOQ_GGUF_U8] = {"UINT8", 1},   [MOQ_GGUF_I8] = {"INT8", 1},       [MOQ_GGUF_U16] = {"UINT16", 2},
    [MOQ_GGUF_I16] = {"INT16", 2},  [MOQ_GGUF_U32] = {"UINT32", 4},    [MOQ_GGUF_I32] = {"INT32", 4},
    [MOQ_GGUF_F32] = {"FLOAT32", 4}, [MOQ_GGUF_BOOL] = {"BOOL", 1},    [MOQ_GGUF_STRING] = {"STRING", 0},
    [MOQ_GGUF_ARRAY] = {"ARRAY", 0}, [MOQ_GGUF_U64] = {"UINT64", 8},   [MOQ_GGUF_I64] = {"INT64", 8},
    [MOQ_GGUF_F64] = {"FLOAT64", 8},
};

static void dq_f32(const uint8_t *s, float *y, uint64_t n);
static void dq_f16(const uint8_t *s, float *y, uint64_t n);
static void dq_bf16(const uint8_t *s, float *y, uint64_t n);
static void dq_q8_0(const uint8_t *s, float *y, uint64_t n);
static void dq_q4_0(const uint8_t *s, float *y, uint64_t n);
static void dq_q4_1(const uint8_t *s, float *y, uint64_t n);

/* One row per ggml tensor type moq knows the size of (ggml type_traits: blck_size, type_size).
 * Rows without a dequantizer parse but cannot be converted. */
typedef struct ggml_type_row {
    const char *name;
    uint16_t    block;    /* elements per block */
    uint16_t    size;     /* bytes per block    */
    void      (*dequant)(const uint8_t *src, float *dst, uint64_t n);
} ggml_type_row;

static const ggml_type_row type_table[MOQ_GGML_TYPE_LIMIT] = {
    [MOQ_GGML_F32] = {"F32", 1, 4, dq_f32},       [MOQ_GGML_F16] = {"F16", 1, 2, dq_f16},
    [MOQ_GGML_Q4_0] = {"Q4_0", 32, 18, dq_q4_0},  [MOQ_GGML_Q4_1] = {"Q4_1", 32, 20, dq_q4_1},
    [MOQ_GGML_Q5_0] = {"Q5_0", 32, 22, NULL},     [MOQ_GGML_Q5_1] = {"Q5_1", 32, 24, NULL},
    [MOQ_GGML_Q8_0] = {"Q8_0", 32, 34, dq_q8_0},  [MOQ_GGML_Q8_1] = {"Q8_1", 32, 36, NULL},
    [MOQ_GGML_Q2_K] = {"Q2_K", 256, 84, NULL},    [MOQ_GGML_Q3_K] = {"Q3_K", 256, 110, NULL},
    [MOQ_GGML_Q4_K] = {"Q4_K", 256, 144, NULL},   [MOQ_GGML_Q5_K] = {"Q5_K", 256, 176, NULL},
    [MOQ_GGML_Q6_K] = {"Q6_K", 256, 210, NULL},   [MOQ_GGML_Q8_K] = {"Q8_K", 256, 292, NULL},
    [MOQ_GGML_I8] = {"I8", 1, 1, NULL},           [MOQ_GGML_I16] = {"I16", 1, 2, NULL},
    [MOQ_GGML_I32] = {"I32", 1, 4, NULL},         [MOQ_GGML_I64] = {"I64", 1, 8, NULL},
    [MOQ_GGML_F64] = {"F64", 1, 8, NULL},         [MOQ_GGML_BF16] = {"BF16", 1, 2, dq_bf16},
};

static const ggml_type_row *type_row(moq_ggml_type t) {
    return (unsigned)t < MOQ_GGML_TYPE_LIMIT && type_table[t].name ? &type_table[t] : NULL;
}
const char *moq_ggml_type_name(moq_ggml_type t) { return type_row(t) ? type_row(t)->name : "?"; }
int moq_ggml_type_block(moq_ggml_type t) { return type_row(t) ? type_row(t)->block : 0; }
int moq_ggml_type_size(moq_ggml_type t) { return type_row(t) ? type_row(t)->size : 0; }
bool moq_ggml_type_dequantizable(moq_ggml_type t) { return type_row(t) && type_row(t)->dequant; }
const char *moq_gguf_vtype_name(moq_gguf_vtype t) {
    return (unsigned)t < MOQ_GGUF_VTYPE_COUNT ? vtype_table[t].name : "?";
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* ---- dequantizers (pure) ------------------------------------------------------------------- */

static void dq_f32(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) y[i] = moq_f32_from_bits(rd32(s + 4 * i));
}
static void dq_f16(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) y[i] = moq_f16_decode(rd16(s + 2 * i));
}
static void dq_bf16(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) y[i] = moq_bf16_decode(rd16(s + 2 * i));
}
static void dq_q8_0(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; b++, s += 34, y += 32) {
        const float d = moq_f16_decode(rd16(s));
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)s[2 + j] * d;
    }
}
static void dq_q4_0(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; b++, s += 18, y += 32) {
        const float d = moq_f16_decode(rd16(s));
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((s[2 + j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((s[2 + j] >> 4) - 8) * d;
        }
    }
}
static void dq_q4_1(const uint8_t *s, float *y, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; b++, s += 20, y += 32) {
        const float d = moq_f16_decode(rd16(s)), m = moq_f16_decode(rd16(s + 2));
        for (int j = 0; j < 16; j++) {
            /* ggml computes x0*d + m in float; the product is rounded before the add (no FMA:
             * C11 with GCC's default -ffp-contract=off in ISO mode). */
            const float p0 = (float)(s[4 + j] & 0x0F) * d, p1 = (float)(s[4 + j] >> 4) * d;
            y[j] = p0 + m;
            y[j + 16] = p1 + m;
        }
    }
}

moq_status moq_gguf_dequant(moq_ggml_type t, const void *src, float *dst, uint64_t n, const char *where,
                            moq_error *err) {
    const ggml_type_row *r = type_row(t);
    if (!r || !r->dequant)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, where, "tensor type %s (%d) cannot be dequantized; moq reads F32, F16, BF16, Q8_0, Q4_0, Q4_1",
                        moq_ggml_type_name(t), (int)t);
    if (n % r->block)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "%llu elements of %s, expected a multiple of the block size %d",
                        (unsigned long long)n, r->name, r->block);
    r->dequant(src, dst, n);
    return MOQ_OK;
}

/* ---- parser -------------------------------------------------------------------------------- */

/* A bounded reader over the file; every read checks the bytes are there first. */
typedef struct cursor {
    const uint8_t *buf;
    uint64_t       size, pos;
    const char    *fn;
    moq_error     *err;
} cursor;

static moq_status need(cursor *c, uint64_t n, const char *what, const char *whose) {
    if (n <= c->size - c->pos) return MOQ_OK;
    return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s%s%s needs %llu bytes at offset %llu, file is %llu bytes (truncated?)",
                    whose, *whose ? ": " : "", what, (unsigned long long)n, (unsigned long long)c->pos,
                    (unsigned long long)c->size);
}

/* A string: checks its length against the file and `max` (G5); returns a pointer to its bytes. */
static moq_status read_str(cursor *c, uint64_t max, const char *what, const char *whose, const uint8_t **s,
                           uint64_t *len) {
    MOQ_TRY(need(c, 8, what, whose));
    const uint64_t n = rd64(c->buf + c->pos);
    c->pos += 8;
    if (max && (n == 0 || n > max))
        return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s%s%s is %llu bytes long, expected 1 to %llu", whose, *whose ? ": " : "", what,
                        (unsigned long long)n, (unsigned long long)max);
    MOQ_TRY(need(c, n, what, whose));
    *s = c->buf + c->pos;
    *len = n;
    if (max && memchr(*s, 0, (size_t)n))
        return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s%s%s holds a NUL byte", whose, *whose ? ": " : "", what);
    c->pos += n;
    return MOQ_OK;
}

/* Skips one value of type t (G6, G7), for the key `key`. */
static moq_status read_value(cursor *c, moq_gguf_vtype t, const char *key, moq_gguf_kv *kv) {
    if ((unsigned)t >= MOQ_GGUF_VTYPE_COUNT)
        return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: value type %u is not one of the 13 GGUF types (0..12)", key, (unsigned)t);
    kv->type = t;
    kv->n = 1;
    const uint64_t start = c->pos;
    if (t == MOQ_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        MOQ_TRY(read_str(c, 0, "string value", key, &s, &len));
    } else if (t == MOQ_GGUF_ARRAY) {
        MOQ_TRY(need(c, 12, "array header", key));
        const uint32_t et = rd32(c->buf + c->pos);
        const uint64_t n = rd64(c->buf + c->pos + 4);
        c->pos += 12;
        if (et >= MOQ_GGUF_VTYPE_COUNT)
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: array element type %u is not one of the 13 GGUF types (0..12)", key, et);
        if (et == MOQ_GGUF_ARRAY)
            return MOQ_FAIL(c->err, MOQ_ERR_UNSUPPORTED, c->fn, "key %s: array of arrays; moq reads arrays of scalars or strings", key);
        kv->arr_type = (moq_gguf_vtype)et;
        kv->n = n;
        kv->val = c->buf + c->pos;
        if (et == MOQ_GGUF_STRING) {
            /* each string takes at least its 8-byte length: bound n before walking (G7) */
            if (n > (c->size - c->pos) / 8)
                return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: array of %llu strings cannot fit in the %llu bytes left",
                                key, (unsigned long long)n, (unsigned long long)(c->size - c->pos));
            for (uint64_t i = 0; i < n; i++) {
                const uint8_t *s;
                uint64_t len;
                MOQ_TRY(read_str(c, 0, "string array element", key, &s, &len));
            }
        } else {
            const uint64_t es = vtype_table[et].size;
            if (n > (c->size - c->pos) / es)
                return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: array of %llu %s (%llu bytes each) runs past the end of the file",
                                key, (unsigned long long)n, vtype_table[et].name, (unsigned long long)es);
            if (et == MOQ_GGUF_BOOL)
                for (uint64_t i = 0; i < n; i++)
                    if (c->buf[c->pos + i] > 1)
                        return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: element %llu is bool byte %u, expected 0 or 1", key,
                                        (unsigned long long)i, c->buf[c->pos + i]);
            c->pos += n * es;
        }
        kv->val_bytes = c->pos - (uint64_t)(kv->val - c->buf);
        return MOQ_OK;
    } else {
        MOQ_TRY(need(c, vtype_table[t].size, "value", key));
        if (t == MOQ_GGUF_BOOL && c->buf[c->pos] > 1)
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "key %s: bool byte %u, expected 0 or 1", key, c->buf[c->pos]);
        c->pos += vtype_table[t].size;
    }
    kv->val = c->buf + start;
    kv->val_bytes = c->pos - start;
    return MOQ_OK;
}

static char *put_str(char **sp, const uint8_t *s, uint64_t len) {
    char *d = *sp;
    memcpy(d, s, (size_t)len);
    d[len] = 0;
    *sp += len + 1;
    return d;
}

/* Walks the kv and tensor-info sections. With fill == false it only validates and counts the
 * bytes the names need; with fill == true (second pass, arrays allocated) it stores them. */
static moq_status walk(moq_gguf_file *f, cursor *c, uint64_t n_kv, uint64_t n_tensors, bool fill,
                       uint64_t *str_bytes) {
    char *sp = f->strings;
    char key[96];
    for (uint64_t i = 0; i < n_kv; i++) {
        const uint8_t *k;
        uint64_t klen;
        snprintf(key, sizeof key, "metadata entry %llu", (unsigned long long)i);
        MOQ_TRY(read_str(c, GGUF_MAX_KEY, "key", key, &k, &klen));
        snprintf(key, sizeof key, "%.*s%s", (int)(klen < 80 ? klen : 80), (const char *)k, klen > 80 ? "..." : "");
        MOQ_TRY(need(c, 4, "value type", key));
        const uint32_t t = rd32(c->buf + c->pos);
        c->pos += 4;
        moq_gguf_kv kv = {0};
        MOQ_TRY(read_value(c, (moq_gguf_vtype)t, key, &kv));
        *str_bytes += klen + 1;
        if (fill) {
            kv.key = put_str(&sp, k, klen);
            f->kv[i] = kv;
        }
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        const uint8_t *nm;
        uint64_t nlen;
        snprintf(key, sizeof key, "tensor info %llu", (unsigned long long)i);
        MOQ_TRY(read_str(c, MOQ_GGUF_MAX_NAME - 1, "name", key, &nm, &nlen));
        snprintf(key, sizeof key, "tensor %.*s", (int)nlen, (const char *)nm);
        MOQ_TRY(need(c, 4, "n_dims", key));
        const uint32_t nd = rd32(c->buf + c->pos);
        c->pos += 4;
        if (nd < 1 || nd > MOQ_GGUF_MAX_DIMS) /* G9 */
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: n_dims %u, expected 1 to %d", key, nd, MOQ_GGUF_MAX_DIMS);
        MOQ_TRY(need(c, 8ull * nd + 12, "dims, type and offset", key));
        moq_gguf_tensor t = {.n_dims = (int)nd, .ne = {1, 1, 1, 1}};
        unsigned __int128 nel = 1;
        for (uint32_t d = 0; d < nd; d++) {
            const uint64_t ne = rd64(c->buf + c->pos + 8 * d);
            if (ne < 1 || ne > INT64_MAX)
                return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: ne[%u] = %llu, expected 1 to 2^63-1", key, d, (unsigned long long)ne);
            t.ne[d] = (int64_t)ne;
            nel *= ne;
            if (nel > INT64_MAX)
                return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: the element count overflows int64 at ne[%u]", key, d);
        }
        c->pos += 8ull * nd;
        t.nelem = (uint64_t)nel;
        const uint32_t ty = rd32(c->buf + c->pos);
        t.offset = rd64(c->buf + c->pos + 4);
        c->pos += 12;
        const ggml_type_row *r = type_row((moq_ggml_type)ty); /* G10 */
        if (!r)
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: tensor type %u is not a ggml type moq knows (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q8_K, I8..I64, F64)", key, ty);
        t.type = (moq_ggml_type)ty;
        if (t.ne[0] % r->block)
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: ne[0] = %lld is not a multiple of the %s block size %d", key,
                            (long long)t.ne[0], r->name, r->block);
        t.nbytes = t.nelem / r->block * r->size; /* nelem < 2^63, size < 2^9: fits */
        if ((t.nelem / r->block) > UINT64_MAX / r->size)
            return MOQ_FAIL(c->err, MOQ_ERR_FORMAT, c->fn, "%s: byte count overflows", key);
        *str_bytes += nlen + 1;
        if (fill) {
            t.name = put_str(&sp, nm, nlen);
            f->tensors[i] = t;
        }
    }
    return MOQ_OK;
}

void moq_gguf_close(moq_gguf_file *f) {
    if (!f) return;
    free(f->name);
    free(f->kv);
    free(f->tensors);
    free(f->strings);
    moq_map_close(&f->map);
    memset(f, 0, sizeof *f);
}

static moq_status parse(moq_gguf_file *f, moq_error *err) {
    const char *fn = f->name;
    const uint8_t *b = f->buf;
    if (f->size < GGUF_FIXED_BYTES) /* G1 */
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "file is %llu bytes, too short for the 24-byte GGUF header",
                        (unsigned long long)f->size);
    if (memcmp(b, "GGUF", GGUF_MAGIC_LEN) != 0) /* G2 */
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "magic is %02x %02x %02x %02x, expected \"GGUF\" (47 47 55 46)", b[0], b[1], b[2], b[3]);
    f->version = rd32(b + 4);
    if (f->version == 1) /* G3 */
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, fn, "GGUF version 1 (32-bit counts) is not supported; moq reads versions 2 and 3");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xFFFF) == 0 && (f->version >> 24) >= 1 && (f->version >> 24) <= 3)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, fn, "version reads 0x%08x: a big-endian GGUF file; moq reads little-endian files",
                            f->version);
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "GGUF version %u, expected 2 or 3", f->version);
    }
    const uint64_t n_tensors = rd64(b + 8), n_kv = rd64(b + 16);
    const uint64_t rest = f->size - GGUF_FIXED_BYTES;
    if (n_kv > rest / GGUF_MIN_KV) /* G4 */
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header says %llu metadata entries; the %llu bytes after the header hold at most %llu",
                        (unsigned long long)n_kv, (unsigned long long)rest, (unsigned long long)(rest / GGUF_MIN_KV));
    if (n_tensors > rest / GGUF_MIN_TENSOR)
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header says %llu tensors; the %llu bytes after the header hold at most %llu",
                        (unsigned long long)n_tensors, (unsigned long long)rest, (unsigned long long)(rest / GGUF_MIN_TENSOR));

    /* Pass 1 validates every bound without allocating; pass 2 stores. */
    cursor c = {b, f->size, GGUF_FIXED_BYTES, fn, err};
    uint64_t str_bytes = 0;
    MOQ_TRY(walk(f, &c, n_kv, n_tensors, false, &str_bytes));
    f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    f->strings = malloc(str_bytes ? str_bytes : 1);
    if (!f->kv || !f->tensors || !f->strings)
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "cannot allocate the index of %llu entries and %llu tensors",
                        (unsigned long long)n_kv, (unsigned long long)n_tensors);
    c.pos = GGUF_FIXED_BYTES;
    str_bytes = 0;
    MOQ_TRY(walk(f, &c, n_kv, n_tensors, true, &str_bytes));
    f->n_kv = n_kv;
    f->n_tensors = n_tensors;

    /* G8: unique keys; general.alignment. */
    moq_strmap seen;
    if (!moq_strmap_init(&seen, (size_t)(n_kv > n_tensors ? n_kv : n_tensors)))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "cannot allocate the key table");
    moq_status st = MOQ_OK;
    for (uint64_t i = 0; i < n_kv && st == MOQ_OK; i++)
        if (!moq_strmap_put(&seen, f->kv[i].key, (size_t)i, NULL))
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "key %s appears twice in the metadata", f->kv[i].key);
    moq_strmap_free(&seen);
    MOQ_TRY(st);
    f->alignment = MOQ_GGUF_DEFAULT_ALIGN;
    const moq_gguf_kv *al = moq_gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != MOQ_GGUF_U32)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "key general.alignment: type %s, expected UINT32", moq_gguf_vtype_name(al->type));
        const uint32_t a = rd32(al->val);
        if (a == 0 || (a & (a - 1)))
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "key general.alignment: %u is not a power of two", a);
        f->alignment = a;
    }

    /* G9: unique tensor names. */
    if (!moq_strmap_init(&seen, (size_t)n_tensors))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "cannot allocate the tensor name table");
    for (uint64_t i = 0; i < n_tensors && st == MOQ_OK; i++)
        if (!moq_strmap_put(&seen, f->tensors[i].name, (size_t)i, NULL))
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: name appears twice", f->tensors[i].name);
    moq_strmap_free(&seen);
    MOQ_TRY(st);

    /* G12: the data section. */
    const uint64_t a = f->alignment;
    const uint64_t pad = (a - c.pos % a) % a;
    if (pad > f->size - c.pos)
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "the data section would start at %llu (tensor infos end at %llu, alignment %llu), past the end of the %llu-byte file",
                        (unsigned long long)(c.pos + pad), (unsigned long long)c.pos, (unsigned long long)a, (unsigned long long)f->size);
    f->data_offset = c.pos + pad;
    const uint64_t data_size = f->size - f->data_offset;

    /* G11: aligned, in file order, each at the previous end rounded up. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        moq_gguf_tensor *t = &f->tensors[i];
        if (t->offset % a)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: offset %llu is not a multiple of the alignment %llu", t->name,
                            (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset != expect)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: offset %llu, expected %llu (%s; tensors follow one another in file order, padded to %llu bytes)",
                            t->name, (unsigned long long)t->offset, (unsigned long long)expect,
                            t->offset < expect ? "overlaps the previous tensor" : "leaves a gap", (unsigned long long)a);
        if (t->nbytes > data_size || t->offset > data_size - t->nbytes)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: %llu bytes at data offset %llu run past the end of the data section (%llu bytes; file truncated?)",
                            t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset, (unsigned long long)data_size);
        t->data = b + f->data_offset + t->offset;
        expect = t->offset + t->nbytes;
        expect += (a - expect % a) % a; /* cannot overflow: offset + nbytes <= data_size */
    }
    return MOQ_OK;
}

moq_status moq_gguf_parse(moq_gguf_file *f, const char *name, const uint8_t *buf, uint64_t size, moq_error *err) {
    memset(f, 0, sizeof *f);
    f->name = strdup(name ? name : "");
    if (!f->name) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    f->buf = buf;
    f->size = size;
    moq_status st = parse(f, err);
    if (st != MOQ_OK) moq_gguf_close(f);
    return st;
}

moq_status moq_gguf_open(moq_gguf_file *f, const char *path, const char *name, moq_error *err) {
    memset(f, 0, sizeof *f);
    if (!name) name = path;
    moq_map m;
    MOQ_TRY(moq_map_open(&m, path, name, err));
    moq_status st = moq_gguf_parse(f, name, m.data, m.size, err);
    if (st != MOQ_OK) {
        moq_map_close(&m);
        return st;
    }
    f->map = m;
    return MOQ_OK;
}

const moq_gguf_kv *moq_gguf_find_kv(const moq_gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const moq_gguf_tensor *moq_gguf_find_tensor(const moq_gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* Integer value of a scalar of integer type t at p; false when t is not an integer type or the
 * value does not fit in int64. */
static bool int_at(moq_gguf_vtype t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case MOQ_GGUF_U8: *out = p[0]; return true;
    case MOQ_GGUF_I8: *out = p[0] < 128 ? (int64_t)p[0] : (int64_t)p[0] - 256; return true;
    case MOQ_GGUF_U16: *out = rd16(p); return true;
    case MOQ_GGUF_I16: *out = (int16_t)rd16(p); return true;
    case MOQ_GGUF_U32: *out = rd32(p); return true;
    case MOQ_GGUF_I32: *out = (int32_t)rd32(p); return true;
    case MOQ_GGUF_U64: if (rd64(p) > INT64_MAX) return false; *out = (int64_t)rd64(p); return true;
    case MOQ_GGUF_I64: *out = (int64_t)rd64(p); return true;
    default: return false;
    }
}

moq_status moq_gguf_kv_int(const moq_gguf_file *f, const moq_gguf_kv *kv, int64_t *out, moq_error *err) {
    if (!int_at(kv->type, kv->val, out))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %s, expected an integer that fits in int64", kv->key, moq_gguf_vtype_name(kv->type));
    return MOQ_OK;
}

moq_status moq_gguf_kv_float(const moq_gguf_file *f, const moq_gguf_kv *kv, double *out, moq_error *err) {
    if (kv->type == MOQ_GGUF_F32) *out = moq_f32_from_bits(rd32(kv->val));
    else if (kv->type == MOQ_GGUF_F64) {
        const uint64_t u = rd64(kv->val);
        memcpy(out, &u, 8);
    } else
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %s, expected FLOAT32 or FLOAT64", kv->key, moq_gguf_vtype_name(kv->type));
    return MOQ_OK;
}

moq_status moq_gguf_kv_bool(const moq_gguf_file *f, const moq_gguf_kv *kv, bool *out, moq_error *err) {
    if (kv->type != MOQ_GGUF_BOOL)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %s, expected BOOL", kv->key, moq_gguf_vtype_name(kv->type));
    *out = kv->val[0] != 0;
    return MOQ_OK;
}

moq_status moq_gguf_kv_str(const moq_gguf_file *f, const moq_gguf_kv *kv, const char **s, uint64_t *len, moq_error *err) {
    if (kv->type != MOQ_GGUF_STRING)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %s, expected STRING", kv->key, moq_gguf_vtype_name(kv->type));
    *len = rd64(kv->val);
    *s = (const char *)kv->val + 8;
    return MOQ_OK;
}

int64_t moq_gguf_arr_int(const moq_gguf_kv *kv, uint64_t i) {
    int64_t v = 0;
    if (kv->type != MOQ_GGUF_ARRAY || i >= kv->n) return 0;
    const unsigned es = vtype_table[kv->arr_type].size;
    if (!es || !int_at(kv->arr_type, kv->val + i * es, &v)) return 0;
    return v;
}

bool moq_gguf_arr_str_next(const moq_gguf_kv *kv, uint64_t *pos, const char **s, uint64_t *len) {
    if (kv->type != MOQ_GGUF_ARRAY || kv->arr_type != MOQ_GGUF_STRING || *pos + 8 > kv->val_bytes) return false;
    *len = rd64(kv->val + *pos);
    *s = (const char *)kv->val + *pos + 8;
    *pos += 8 + *len;
    return true;
}
