/* mmap.c — see mmap.h. */
#include "io/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

moq_status moq_map_open(moq_map *m, const char *path, const char *where, moq_error *err) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return MOQ_FAIL(err, MOQ_ERR_IO, where, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return MOQ_FAIL(err, MOQ_ERR_IO, where, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return MOQ_FAIL(err, MOQ_ERR_IO, where, "not a regular file");
    }
    m->size = (uint64_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            /* ENOMEM: address space exhausted (or RLIMIT_AS), an out-of-memory condition, not bad I/O */
            return MOQ_FAIL(err, e == ENOMEM ? MOQ_ERR_NOMEM : MOQ_ERR_IO, where, "cannot map %llu bytes: %s",
                            (unsigned long long)m->size, strerror(e));
        }
        m->data = p;
    }
    close(fd); /* the mapping keeps the file alive */
    return MOQ_OK;
}

void moq_map_close(moq_map *m) {
    if (m && m->data) munmap((void *)(uintptr_t)m->data, (size_t)m->size);
    if (m) memset(m, 0, sizeof *m);
}

moq_status moq_read_file(const char *path, const char *where, uint64_t max_bytes, char **out,
                         uint64_t *len, moq_error *err) {
    *out = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return MOQ_FAIL(err, MOQ_ERR_IO, where, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return MOQ_FAIL(err, MOQ_ERR_IO, where, "not a regular file");
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, where, "file is %llu bytes, more than the %llu-byte limit",
                        (unsigned long long)st.st_size, (unsigned long long)max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, where, "cannot allocate %zu bytes to read the file", n + 1);
    }
    size_t got = n ? fread(buf, 1, n, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (got != n || rerr) {
        free(buf);
        return MOQ_FAIL(err, MOQ_ERR_IO, where, "short read: %zu of %zu bytes", got, n);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return MOQ_OK;
}

char *moq_path_join(const char *dir, const char *name) {
    const size_t a = strlen(dir), n = a + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    snprintf(p, n, "%s%s%s", dir, (a && dir[a - 1] != '/') ? "/" : "", name);
    return p;
}

void moq_map_release(const void *p, uint64_t n) {
    const long pg = sysconf(_SC_PAGESIZE);
    if (!p || pg <= 0 || n < (uint64_t)pg) return;
    const uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e = ((uintptr_t)p + (uintptr_t)n) & ~((uintptr_t)pg - 1);
    if (e > a) (void)madvise((void *)a, (size_t)(e - a), MADV_DONTNEED);
}
