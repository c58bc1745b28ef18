/* strmap.h — string -> index map with open addressing (FNV-1a), for constant-time tensor lookup
 * and duplicate detection. Keys are borrowed: they must outlive the map. */
#ifndef MOQ_CORE_STRMAP_H
#define MOQ_CORE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct moq_strmap {
    const char **keys;   /* [cap], NULL = empty slot */
    size_t      *vals;   /* [cap]                    */
    size_t       cap;    /* power of two             */
    size_t       len;
} moq_strmap;

/* Reserves room for n keys (load factor <= 1/2). Returns false on allocation failure. */
bool moq_strmap_init(moq_strmap *m, size_t n);
void moq_strmap_free(moq_strmap *m);
/* Inserts key -> val. Returns false (and leaves the map unchanged) when key is present; *old then
 * holds the existing value. The map never grows: init reserves for all keys. */
bool moq_strmap_put(moq_strmap *m, const char *key, size_t val, size_t *old);
/* Returns true and sets *val when present. */
bool moq_strmap_get(const moq_strmap *m, const char *key, size_t *val);

#endif
