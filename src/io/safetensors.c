/* safetensors.c — parse and validate a safetensors file, rule by rule as the format promises
 * (huggingface/safetensors, safetensors/src/tensor.rs). Each rule has its own error, naming the
 * file and (where one is involved) the tensor:
 *
 *   file:   u64 N (little-endian) | N bytes of header | data
 *   header: UTF-8 JSON object; optional "__metadata__": {string: string};
 *           every other key is a tensor: {"dtype": STR, "shape": [u64...], "data_offsets": [b, e]}
 *
 *   R1  the file holds at least the 8-byte length
 *   R2  N <= 100,000,000 (MOQ_ST_MAX_HEADER)
 *   R3  8 + N <= file size
 *   R4  the header starts with '{'
 *   R5  the header is valid UTF-8
 *   R6  the header is valid JSON, and an object
 *   R7  __metadata__, when present, is an object of string values
 *   R8  each tensor entry is an object with a known dtype string, a shape array of integers >= 0
 *       (at most MOQ_MAX_DIMS) and data_offsets = [begin, end] with begin <= end
 *   R9  tensor names are unique
 *   R10 product(shape) × element size does not overflow and equals end - begin (sub-byte dtypes:
 *       the bit count is a whole number of bytes)
 *   R11 sorted by begin, the first tensor starts at 0, each next begins where the previous ends
 *       (no overlap, no hole), and the last ends exactly at the end of the file
 *
 * Tested by tests/io/test_safetensors.c (one crafted file per rule).
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strmap.h"
#include "io/json.h"

typedef struct dtype_row {
    const char *name;
    int         bits;
    moq_elem    elem;  /* the float encoding of one element (MOQ_ELEM_NONE: integers, packed FP4, E5M2, F64) */
} dtype_row;

/* One row per safetensors dtype string. */
static const dtype_row dtype_table[MOQ_DT_COUNT] = {
    [MOQ_DT_BOOL] = {"BOOL", 8, MOQ_ELEM_NONE},        [MOQ_DT_U8] = {"U8", 8, MOQ_ELEM_NONE},
    [MOQ_DT_I8] = {"I8", 8, MOQ_ELEM_NONE},            [MOQ_DT_I16] = {"I16", 16, MOQ_ELEM_NONE},
    [MOQ_DT_U16] = {"U16", 16, MOQ_ELEM_NONE},         [MOQ_DT_F16] = {"F16", 16, MOQ_ELEM_F16},
    [MOQ_DT_BF16] = {"BF16", 16, MOQ_ELEM_BF16},       [MOQ_DT_I32] = {"I32", 32, MOQ_ELEM_NONE},
    [MOQ_DT_U32] = {"U32", 32, MOQ_ELEM_NONE},         [MOQ_DT_F32] = {"F32", 32, MOQ_ELEM_F32},
    [MOQ_DT_F64] = {"F64", 64, MOQ_ELEM_NONE},         [MOQ_DT_I64] = {"I64", 64, MOQ_ELEM_NONE},
    [MOQ_DT_U64] = {"U64", 64, MOQ_ELEM_NONE},         [MOQ_DT_F8_E4M3] = {"F8_E4M3", 8, MOQ_ELEM_E4M3},
    [MOQ_DT_F8_E5M2] = {"F8_E5M2", 8, MOQ_ELEM_NONE},  [MOQ_DT_F8_E8M0] = {"F8_E8M0", 8, MOQ_ELEM_E8M0},
    [MOQ_DT_F4] = {"F4", 4, MOQ_ELEM_NONE},
};

const char *moq_dtype_name(moq_dtype d) { return (unsigned)d < MOQ_DT_COUNT ? dtype_table[d].name : "?"; }
int         moq_dtype_bits(moq_dtype d) { return (unsigned)d < MOQ_DT_COUNT ? dtype_table[d].bits : 0; }
moq_elem    moq_dtype_elem(moq_dtype d) { return (unsigned)d < MOQ_DT_COUNT ? dtype_table[d].elem : MOQ_ELEM_NONE; }

moq_dtype moq_dtype_from_str(const char *s) {
    for (int i = 0; i < MOQ_DT_COUNT; i++)
        if (strcmp(s, dtype_table[i].name) == 0) return (moq_dtype)i;
    return MOQ_DT_COUNT;
}

/* Returns the offset of the first invalid UTF-8 byte, or len when valid (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF). */
size_t moq_utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
        else return i;
        for (size_t k = 1; k <= n; k++) {
            if (i + k >= len || (s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n + 1;
    }
    return len;
}

static void shape_str(const moq_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int cmp_offset(const void *a, const void *b) {
    const moq_tensor *x = a, *y = b;
    const uintptr_t xa = (uintptr_t)x->data, ya = (uintptr_t)y->data;
    if (xa != ya) return xa < ya ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

void moq_st_close(moq_st_file *f) {
    if (!f) return;
    free(f->name);
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->strings);
    moq_map_close(&f->map);
    memset(f, 0, sizeof *f);
}

/* Header entries keep their begin offset in `data` (as an integer) until the sort. */
static moq_status parse_header(moq_st_file *f, cJSON *root, moq_error *err) {
    const char *fn = f->name;
    /* Count entries and string bytes so the names live in one block. */
    size_t n_tensors = 0, n_meta = 0, bytes = 0;
    const cJSON *meta = NULL;
    for (const cJSON *e = root->child; e; e = e->next) {
        bytes += strlen(e->string) + 1;
        if (strcmp(e->string, "__metadata__") == 0) {
            if (meta) return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "__metadata__ appears twice in the header");
            meta = e;
            if (!cJSON_IsObject(e))
                return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "__metadata__ is %s, expected an object of strings", moq_json_type(e));
            for (const cJSON *m = e->child; m; m = m->next) {
                if (!cJSON_IsString(m))
                    return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "__metadata__.%s is %s, expected a string", m->string, moq_json_type(m));
                bytes += strlen(m->string) + strlen(m->valuestring) + 2;
                n_meta++;
            }
        } else {
            n_tensors++;
        }
    }
    if (n_meta > 1000000) return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "__metadata__ has %zu entries", n_meta);
    f->strings = malloc(bytes ? bytes : 1);
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    f->meta_keys = calloc(n_meta ? n_meta : 1, sizeof(char *));
    f->meta_vals = calloc(n_meta ? n_meta : 1, sizeof(char *));
    if (!f->strings || !f->tensors || !f->meta_keys || !f->meta_vals)
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "cannot allocate the index of %zu tensors", n_tensors);
    char *sp = f->strings;
#define PUT(dst, s)                                                                                \
    do {                                                                                           \
        size_t l_ = strlen(s) + 1;                                                                 \
        memcpy(sp, (s), l_);                                                                       \
        (dst) = sp;                                                                                \
        sp += l_;                                                                                  \
    } while (0)
    if (meta)
        for (const cJSON *m = meta->child; m; m = m->next, f->n_meta++) {
            PUT(f->meta_keys[f->n_meta], m->string);
            PUT(f->meta_vals[f->n_meta], m->valuestring);
        }

    moq_strmap seen;
    if (!moq_strmap_init(&seen, n_tensors))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "cannot allocate the name table of %zu tensors", n_tensors);
    moq_status st = MOQ_OK;
    for (const cJSON *e = root->child; e && st == MOQ_OK; e = e->next) {
        if (e == meta) continue;
        const char *tn = e->string;
        moq_tensor *t = &f->tensors[f->n_tensors];
        if (!cJSON_IsObject(e)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: entry is %s, expected an object with dtype, shape, data_offsets", tn, moq_json_type(e));
            break;
        }
        PUT(t->name, tn);
        if (!moq_strmap_put(&seen, t->name, f->n_tensors, NULL)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: name appears twice in the header", tn);
            break;
        }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: dtype is %s, expected a string such as \"BF16\"", tn, moq_json_type(dt));
            break;
        }
        t->dtype = moq_dtype_from_str(dt->valuestring);
        if (t->dtype == MOQ_DT_COUNT) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: unknown dtype \"%.40s\", expected one of BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 F8_E4M3 F8_E5M2 F8_E8M0 F4", tn, dt->valuestring);
            break;
        }
        if (!cJSON_IsArray(sh)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape is %s, expected an array of integers", tn, moq_json_type(sh));
            break;
        }
        int nd = cJSON_GetArraySize(sh);
        if (nd > MOQ_MAX_DIMS) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape has %d dimensions, at most %d are supported", tn, nd, MOQ_MAX_DIMS);
            break;
        }
        t->ndim = nd;
        /* nelem and bit count with overflow checks (R10). */
        unsigned __int128 nel = 1;
        bool overflow = false;
        int d = 0;
        for (const cJSON *x = sh->child; x; x = x->next, d++) {
            if (!moq_json_is_int(x, 0, 9007199254740992.0)) {
                st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape[%d] is %s, expected an integer >= 0", tn, d,
                              cJSON_IsNumber(x) ? "not a non-negative integer" : moq_json_type(x));
                break;
            }
            t->shape[d] = (int64_t)x->valuedouble;
            nel *= (uint64_t)t->shape[d];
            if (nel > UINT64_MAX) overflow = true, nel = (unsigned __int128)UINT64_MAX + 1; /* saturate */
        }
        if (st != MOQ_OK) break;
        char shs[160];
        shape_str(t, shs, sizeof shs);
        if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets is %s, expected [begin, end]", tn,
                          cJSON_IsArray(off) ? "an array of the wrong length" : moq_json_type(off));
            break;
        }
        const cJSON *b = off->child, *en = off->child->next;
        if (!moq_json_is_int(b, 0, 9007199254740992.0) || !moq_json_is_int(en, 0, 9007199254740992.0)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets must be two integers in [0, 2^53]", tn);
            break;
        }
        const uint64_t begin = (uint64_t)b->valuedouble, end = (uint64_t)en->valuedouble;
        if (begin > end) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets [%llu, %llu] end before they begin", tn,
                          (unsigned long long)begin, (unsigned long long)end);
            break;
        }
        const unsigned __int128 bits = nel * (unsigned)dtype_table[t->dtype].bits;
        if (overflow || bits / 8 > UINT64_MAX) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape %s of %s overflows 64-bit byte counts", tn, shs, dtype_table[t->dtype].name);
            break;
        }
        if (bits % 8) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape %s of %s is not a whole number of bytes", tn, shs, dtype_table[t->dtype].name);
            break;
        }
        t->nelem = (uint64_t)nel;
        t->nbytes = (uint64_t)(bits / 8);
        if (t->nbytes != end - begin) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: shape %s of %s is %llu bytes, but data_offsets [%llu, %llu] span %llu", tn, shs,
                          dtype_table[t->dtype].name, (unsigned long long)t->nbytes, (unsigned long long)begin,
                          (unsigned long long)end, (unsigned long long)(end - begin));
            break;
        }
        t->data = (const void *)(uintptr_t)begin; /* offset for now; made a pointer after R11 */
        f->n_tensors++;
    }
#undef PUT
    moq_strmap_free(&seen);
    MOQ_TRY(st);

    /* R11: contiguous, sorted, no holes, ending at the file's end. */
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_offset);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        moq_tensor *t = &f->tensors[i];
        const uint64_t begin = (uint64_t)(uintptr_t)t->data;
        if (begin < pos)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets begin at %llu, inside tensor %s which ends at %llu (overlap)",
                            t->name, (unsigned long long)begin, f->tensors[i - 1].name, (unsigned long long)pos);
        if (begin > pos)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets begin at %llu, but the previous data ends at %llu (a hole of %llu bytes; holes are not allowed)",
                            t->name, (unsigned long long)begin, (unsigned long long)pos, (unsigned long long)(begin - pos));
        pos = begin + t->nbytes;
        if (pos > f->data_size)
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor %s: data_offsets end at %llu, past the end of the data (%llu bytes; file truncated?)",
                            t->name, (unsigned long long)pos, (unsigned long long)f->data_size);
        t->data = t->nbytes ? f->data + begin : NULL;
    }
    if (pos != f->data_size)
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "tensor data ends at %llu, %llu bytes short of the end of the file (trailing bytes are not allowed)",
                        (unsigned long long)pos, (unsigned long long)(f->data_size - pos));
    return MOQ_OK;
}

moq_status moq_st_parse(moq_st_file *f, const char *name, const uint8_t *buf, uint64_t size, moq_error *err) {
    memset(f, 0, sizeof *f);
    f->name = strdup(name ? name : "");
    if (!f->name) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    f->buf = buf;
    f->size = size;
    moq_status st;
    const char *fn = f->name;
    if (size < 8) { /* R1 */
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "file is %llu bytes, too short for the 8-byte header length", (unsigned long long)size);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    f->header_len = n;
    if (n > MOQ_ST_MAX_HEADER) { /* R2 */
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header length %llu exceeds the %llu-byte limit", (unsigned long long)n, MOQ_ST_MAX_HEADER);
        goto fail;
    }
    if (n > size - 8) { /* R3 */
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header length %llu needs 8 + %llu bytes, file is %llu bytes",
                      (unsigned long long)n, (unsigned long long)n, (unsigned long long)size);
        goto fail;
    }
    const uint8_t *h = buf + 8;
    if (n == 0 || h[0] != '{') { /* R4 */
        if (n) st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header does not start with '{' (found byte 0x%02x)", h[0]);
        else st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header does not start with '{' (found an empty header)");
        goto fail;
    }
    size_t bad = moq_utf8_invalid_at(h, (size_t)n); /* R5 */
    if (bad != n) {
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header is not valid UTF-8 (byte 0x%02x at header offset %zu)", h[bad], bad);
        goto fail;
    }
    cJSON *root;
    moq_error jerr = {0};
    st = moq_json_parse(&root, (const char *)h, (size_t)n, fn, &jerr); /* R6 */
    if (st == MOQ_ERR_NOMEM) {
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, fn, "header: %s", jerr.msg);
        goto fail;
    }
    if (st != MOQ_OK) {
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header is %s", jerr.msg);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        st = MOQ_FAIL(err, MOQ_ERR_FORMAT, fn, "header is %s, expected a JSON object", moq_json_type(root));
        cJSON_Delete(root);
        goto fail;
    }
    f->data = h + n;
    f->data_size = size - 8 - n;
    st = parse_header(f, root, err);
    cJSON_Delete(root);
    if (st != MOQ_OK) goto fail;
    return MOQ_OK;
fail:
    moq_st_close(f);
    return st;
}

moq_status moq_st_open(moq_st_file *f, const char *path, const char *name, moq_error *err) {
    memset(f, 0, sizeof *f);
    moq_map m;
    MOQ_TRY(moq_map_open(&m, path, name, err));
    moq_status st = moq_st_parse(f, name, m.data, m.size, err);
    if (st != MOQ_OK) {
        moq_map_close(&m);
        return st;
    }
    f->map = m;
    return MOQ_OK;
}
