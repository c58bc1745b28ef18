/* gguf.h — read a GGUF file (llama.cpp's single-file model format, versions 2 and 3) from a byte
 * buffer or an mmap, validated rule by rule (the rules are listed at the top of gguf.c), and
 * dequantize its tensors to f32. The file is untrusted: nothing is read outside the buffer and every
 * error names the file, the metadata key or the tensor.
 * Tested by tests/io/test_gguf.c; fuzzed by tests/fuzz/fuzz_gguf.c.
 */
#ifndef MOQ_IO_GGUF_H
#define MOQ_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/mmap.h"
#include "moq.h"

#define MOQ_GGUF_MAX_DIMS      4        /* GGML_MAX_DIMS                                    */
#define MOQ_GGUF_MAX_NAME      64       /* GGML_MAX_NAME, terminating NUL included          */
#define MOQ_GGUF_DEFAULT_ALIGN 32       /* GGUF_DEFAULT_ALIGNMENT, when general.alignment is absent */

/* Metadata value types, numbered as the file stores them (gguf_type). */
typedef enum moq_gguf_vtype {
    MOQ_GGUF_U8 = 0, MOQ_GGUF_I8 = 1, MOQ_GGUF_U16 = 2, MOQ_GGUF_I16 = 3, MOQ_GGUF_U32 = 4,
    MOQ_GGUF_I32 = 5, MOQ_GGUF_F32 = 6, MOQ_GGUF_BOOL = 7, MOQ_GGUF_STRING = 8, MOQ_GGUF_ARRAY = 9,
    MOQ_GGUF_U64 = 10, MOQ_GGUF_I64 = 11, MOQ_GGUF_F64 = 12,
    MOQ_GGUF_VTYPE_COUNT
} moq_gguf_vtype;

/* Tensor types, numbered as ggml numbers them (enum ggml_type). Only the ones in the type table of
 * gguf.c are accepted; of those, F32, F16, BF16, Q8_0, Q4_0 and Q4_1 can be dequantized. */
typedef enum moq_ggml_type {
    MOQ_GGML_F32 = 0, MOQ_GGML_F16 = 1, MOQ_GGML_Q4_0 = 2, MOQ_GGML_Q4_1 = 3, MOQ_GGML_Q5_0 = 6,
    MOQ_GGML_Q5_1 = 7, MOQ_GGML_Q8_0 = 8, MOQ_GGML_Q8_1 = 9, MOQ_GGML_Q2_K = 10, MOQ_GGML_Q3_K = 11,
    MOQ_GGML_Q4_K = 12, MOQ_GGML_Q5_K = 13, MOQ_GGML_Q6_K = 14, MOQ_GGML_Q8_K = 15,
    MOQ_GGML_I8 = 24, MOQ_GGML_I16 = 25, MOQ_GGML_I32 = 26, MOQ_GGML_I64 = 27, MOQ_GGML_F64 = 28,
    MOQ_GGML_BF16 = 30,
    MOQ_GGML_TYPE_LIMIT = 40          /* ids at or above are unknown */
} moq_ggml_type;

/* One metadata entry. `val` points into the buffer at the value's first byte: the scalar itself,
 * a string's u64 length, or an array's first element (for ARRAY, after its type and count). */
typedef struct moq_gguf_kv {
    const char    *key;         /* NUL-terminated copy                                   */
    moq_gguf_vtype type;
    moq_gguf_vtype arr_type;    /* element type when type == ARRAY                        */
    uint64_t       n;           /* number of elements when ARRAY, else 1                  */
    const uint8_t *val;
    uint64_t       val_bytes;   /* bytes the value (all elements) occupies in the file    */
} moq_gguf_kv;

/* One tensor. Shapes are in ggml order: ne[0] is the contiguous (row) dimension, so a Hugging Face
 * [out, in] matrix is ne = {in, out}. */
typedef struct moq_gguf_tensor {
    const char    *name;        /* NUL-terminated copy                                   */
    moq_ggml_type  type;
    int            n_dims;
    int64_t        ne[MOQ_GGUF_MAX_DIMS];   /* unused dims are 1                        */
    uint64_t       nelem;
    uint64_t       offset;      /* from the start of the data section                    */
    uint64_t       nbytes;
    const uint8_t *data;        /* inside the buffer                                     */
} moq_gguf_tensor;

typedef struct moq_gguf_file {
    char            *name;      /* display name used in errors                          */
    moq_map          map;       /* the mapping when opened from a path                   */
    const uint8_t   *buf;
    uint64_t         size;
    uint32_t         version;
    uint32_t         alignment;
    uint64_t         data_offset;   /* start of the data section in the file             */
    moq_gguf_kv     *kv;        /* [n_kv], in file order                                 */
    uint64_t         n_kv;
    moq_gguf_tensor *tensors;   /* [n_tensors], in file order                            */
    uint64_t         n_tensors;
    char            *strings;   /* one block holding every key and tensor name           */
} moq_gguf_file;

/* Parses and validates buf[0..size). f keeps pointers into buf, so buf must outlive f. `name` is
 * copied. On error f is left empty (nothing to free). */
moq_status moq_gguf_parse(moq_gguf_file *f, const char *name, const uint8_t *buf, uint64_t size,
                          moq_error *err);
/* Maps `path` read-only and parses it; `name` is the display name (the path when NULL). */
moq_status moq_gguf_open(moq_gguf_file *f, const char *path, const char *name, moq_error *err);
void       moq_gguf_close(moq_gguf_file *f);

/* Lookups: NULL when absent. */
const moq_gguf_kv     *moq_gguf_find_kv(const moq_gguf_file *f, const char *key);
const moq_gguf_tensor *moq_gguf_find_tensor(const moq_gguf_file *f, const char *name);

/* Typed reads of one entry. Any integer type whose value fits is accepted as an integer (files
 * differ: u32 vs i32 vs u64); a float is F32 or F64. MOQ_ERR_CONFIG naming the key otherwise. */
moq_status moq_gguf_kv_int(const moq_gguf_file *f, const moq_gguf_kv *kv, int64_t *out, moq_error *err);
moq_status moq_gguf_kv_float(const moq_gguf_file *f, const moq_gguf_kv *kv, double *out, moq_error *err);
moq_status moq_gguf_kv_bool(const moq_gguf_file *f, const moq_gguf_kv *kv, bool *out, moq_error *err);
/* A STRING entry: pointer into the buffer (not NUL-terminated) and its length. */
moq_status moq_gguf_kv_str(const moq_gguf_file *f, const moq_gguf_kv *kv, const char **s, uint64_t *len,
                           moq_error *err);
/* Element i of an integer array (any integer element type), e.g. tokenizer.ggml.token_type. */
int64_t moq_gguf_arr_int(const moq_gguf_kv *kv, uint64_t i);

/* Walks an array of strings in order: set *pos = 0 first; each call returns the next string
 * (pointer into the buffer, not NUL-terminated). The parser checked every length, so this cannot
 * step outside the value. Returns false after the last one. */
bool moq_gguf_arr_str_next(const moq_gguf_kv *kv, uint64_t *pos, const char **s, uint64_t *len);

/* Type table queries: name ("Q4_1"; "?" when unknown), elements per block, bytes per block
 * (0 when unknown), and whether moq_gguf_dequant handles it. */
const char *moq_ggml_type_name(moq_ggml_type t);
int         moq_ggml_type_block(moq_ggml_type t);
int         moq_ggml_type_size(moq_ggml_type t);
bool        moq_ggml_type_dequantizable(moq_ggml_type t);
const char *moq_gguf_vtype_name(moq_gguf_vtype t);

/* Dequantizes n elements (n a multiple of the type's block) starting at src, the way ggml's
 * dequantize_row_* functions do. Returns MOQ_ERR_UNSUPPORTED naming `where` for a type that is not
 * dequantizable. Pure: no allocation. */
moq_status moq_gguf_dequant(moq_ggml_type t, const void *src, float *dst, uint64_t n, const char *where,
                            moq_error *err);

#endif
