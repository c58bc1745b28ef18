/* strmap.c — see strmap.h. Tested by tests/unit/test_strmap.c. */
#include "core/strmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

bool moq_strmap_init(moq_strmap *m, size_t n) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * n + 2) {
        if (cap > SIZE_MAX / 4) return false;
        cap *= 2;
    }
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        moq_strmap_free(m);
        return false;
    }
    m->cap = cap;
    return true;
}

void moq_strmap_free(moq_strmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

bool moq_strmap_put(moq_strmap *m, const char *key, size_t val, size_t *old) {
    size_t i = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) {
            if (old) *old = m->vals[i];
            return false;
        }
        i = (i + 1) & (m->cap - 1);
    }
    if (2 * (m->len + 1) > m->cap) return false; /* caller reserved too little: treat as refused */
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return true;
}

bool moq_strmap_get(const moq_strmap *m, const char *key, size_t *val) {
    if (!m->cap) return false;
    size_t i = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) {
            if (val) *val = m->vals[i];
            return true;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}
