/* mmap.h — read-only file mappings and bounded whole-file reads. */
#ifndef MOQ_IO_MMAP_H
#define MOQ_IO_MMAP_H

#include <stdint.h>

#include "moq.h"

typedef struct moq_map {
    const uint8_t *data;   /* NULL for an empty file */
    uint64_t       size;
} moq_map;

/* Maps `path` read-only. `where` names the file in errors. */
moq_status moq_map_open(moq_map *m, const char *path, const char *where, moq_error *err);
void       moq_map_close(moq_map *m);

/* Tells the kernel the pages wholly inside [p, p + n) of a read-only mapping are not needed soon
 * (madvise MADV_DONTNEED: they leave this process's resident set and are read back from the page
 * cache if touched again). Used by streaming passes so resident memory stays near one tensor. */
void       moq_map_release(const void *p, uint64_t n);

/* Reads a whole file into a NUL-terminated malloc'd buffer, refusing files over max_bytes.
 * Returns MOQ_ERR_IO with errno text when the file cannot be read. */
moq_status moq_read_file(const char *path, const char *where, uint64_t max_bytes, char **out,
                         uint64_t *len, moq_error *err);

/* Joins dir and name with one '/' into a malloc'd string (NULL on allocation failure). */
char *moq_path_join(const char *dir, const char *name);

#endif
