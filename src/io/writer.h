/* writer.h — the safetensors header as moq writes it, shared by moq_writer (writer.c) and
 * `moq quantize` (quant/quantize.c): one entry per tensor {dtype, shape, data_offsets} after the
 * caller's "__metadata__", printed unformatted and padded with spaces to a multiple of 8 bytes. */
#ifndef MOQ_IO_WRITER_H
#define MOQ_IO_WRITER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

/* Adds tensor `name` with data_offsets [off, off + nbytes] to the header object root; false when
 * out of memory (the entry could not be made). */
bool moq_st_header_tensor(cJSON *root, const char *name, moq_dtype dtype, int ndim, const int64_t *shape, uint64_t off,
                          uint64_t nbytes);
/* Prints root, deletes it and pads the text: the header (caller frees), *len its length; NULL when
 * out of memory. */
char *moq_st_header_finish(cJSON *root, uint64_t *len);

#endif
