/* safetensors.h — header parse + validation of one safetensors file, from a byte buffer (so the
 * fuzzer and the mmap path share it). Rules: see safetensors.c. */
#ifndef MOQ_IO_SAFETENSORS_H
#define MOQ_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "io/mmap.h"
#include "moq.h"

/* The header may be at most this long (the safetensors spec's limit). */
#define MOQ_ST_MAX_HEADER 100000000ull

typedef struct moq_st_file {
    char       *name;          /* display name used in errors (relative to the checkpoint)   */
    moq_map     map;           /* the mapping when opened from a path                        */
    const uint8_t *buf;        /* whole file                                                 */
    uint64_t    size;
    uint64_t    header_len;    /* N from the first 8 bytes                                   */
    const uint8_t *data;       /* buf + 8 + N: the byte buffer offsets refer to              */
    uint64_t    data_size;
    moq_tensor *tensors;       /* [n_tensors], sorted by data offset                         */
    size_t      n_tensors;
    char      **meta_keys;     /* [n_meta] __metadata__, in file order                       */
    char      **meta_vals;
    int         n_meta;
    char       *strings;       /* one block holding every name, key and value                */
} moq_st_file;

/* Parses and validates buf[0..size). The file keeps pointers into buf (tensor data), so buf must
 * outlive f. `name` is copied. On error f is left empty (nothing to free). */
moq_status moq_st_parse(moq_st_file *f, const char *name, const uint8_t *buf, uint64_t size,
                        moq_error *err);
/* Maps `path` and parses it. */
moq_status moq_st_open(moq_st_file *f, const char *path, const char *name, moq_error *err);
void       moq_st_close(moq_st_file *f);

/* Offset of the first invalid UTF-8 byte of s[0..len), or len when valid (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF). */
size_t moq_utf8_invalid_at(const uint8_t *s, size_t len);

/* dtype string <-> enum, one table row each. Returns MOQ_DT_COUNT when unknown. */
moq_dtype   moq_dtype_from_str(const char *s);
/* The float element encoding of a dtype (MOQ_ELEM_NONE for integers, F4, F8_E5M2, F64). */
moq_elem    moq_dtype_elem(moq_dtype d);

#endif
