/* writer.c — write a Hugging Face checkpoint directory: safetensors shards, the shard index and
 * JSON side files. Used by tests, by `moq synth` and (later) by the quantizer.
 *
 * Layout written (the safetensors spec): u64 header length | JSON header padded with spaces to a
 * multiple of 8 bytes | tensor data in insertion order, contiguous. Every file is written to
 * "<name>.tmp-moq" first; only when all files are complete are they renamed into place, so a
 * failure leaves the directory as it was (no partial shard, no index naming a missing shard).
 * Tested by tests/io/test_checkpoint.c (write -> moq_checkpoint_open round trip, failures).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "io/writer.h"

typedef struct wtensor {
    char       *name;
    moq_dtype   dtype;
    int         ndim;
    int64_t     shape[MOQ_MAX_DIMS];
    const void *data;
    uint64_t    nbytes;
} wtensor;

typedef struct wfile {
    char *name;
    char *text;
} wfile;

struct moq_writer {
    char    *dir;
    wtensor *t;
    size_t   n, cap;
    char   **meta_k, **meta_v;
    int      n_meta;
    wfile   *files;
    int      n_files;
};

moq_status moq_writer_create(moq_writer **out, const char *dir, moq_error *err) {
    if (!out || !dir) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_writer_create", "NULL argument");
    *out = NULL;
    moq_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "cannot allocate a writer");
    }
    *out = w;
    return MOQ_OK;
}

void moq_writer_free(moq_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_k[i]);
        free(w->meta_v[i]);
    }
    free(w->meta_k);
    free(w->meta_v);
    for (int i = 0; i < w->n_files; i++) {
        free(w->files[i].name);
        free(w->files[i].text);
    }
    free(w->files);
    free(w->dir);
    free(w);
}

moq_status moq_writer_add(moq_writer *w, const char *name, moq_dtype dtype, int ndim, const int64_t *shape,
                          const void *data, uint64_t nbytes, moq_error *err) {
    if (!w || !name || !name[0]) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_writer_add", "NULL writer or empty name");
    if ((unsigned)dtype >= MOQ_DT_COUNT) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "unknown dtype %d, expected a moq_dtype below %d", (int)dtype, (int)MOQ_DT_COUNT);
    if (ndim < 0 || ndim > MOQ_MAX_DIMS || (ndim && !shape))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "ndim %d, expected 0..%d with a shape", ndim, MOQ_MAX_DIMS);
    if (strcmp(name, "__metadata__") == 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "reserved name");
    unsigned __int128 bits = (unsigned)moq_dtype_bits(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "shape[%d] = %lld is negative", d, (long long)shape[d]);
        bits *= (uint64_t)shape[d];
        if (bits > (unsigned __int128)UINT64_MAX) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "shape overflows");
    }
    if (bits % 8 || bits / 8 != nbytes)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "%llu bytes given, shape × %s needs %llu bits",
                        (unsigned long long)nbytes, moq_dtype_name(dtype), (unsigned long long)bits);
    if (nbytes && !data) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "NULL data for %llu bytes", (unsigned long long)nbytes);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "tensor added twice");
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
        w->t = t;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = nbytes;
    w->n++;
    return MOQ_OK;
}

moq_status moq_writer_metadata(moq_writer *w, const char *key, const char *value, moq_error *err) {
    if (!w || !key || !value) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_writer_metadata", "NULL argument");
    char **k = realloc(w->meta_k, (size_t)(w->n_meta + 1) * sizeof *k);
    if (!k) return MOQ_FAIL(err, MOQ_ERR_NOMEM, key, "cannot allocate");
    w->meta_k = k;
    char **v = realloc(w->meta_v, (size_t)(w->n_meta + 1) * sizeof *v);
    if (!v) return MOQ_FAIL(err, MOQ_ERR_NOMEM, key, "cannot allocate");
    w->meta_v = v;
    k[w->n_meta] = strdup(key);
    v[w->n_meta] = strdup(value);
    if (!k[w->n_meta] || !v[w->n_meta]) {
        free(k[w->n_meta]);
        free(v[w->n_meta]);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, key, "cannot allocate");
    }
    w->n_meta++;
    return MOQ_OK;
}

moq_status moq_writer_file(moq_writer *w, const char *name, const char *text, moq_error *err) {
    if (!w || !name || !text) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_writer_file", "NULL argument");
    if (strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "side file names are plain file names");
    wfile *f = realloc(w->files, (size_t)(w->n_files + 1) * sizeof *f);
    if (!f) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    w->files = f;
    f[w->n_files].name = strdup(name);
    f[w->n_files].text = strdup(text);
    if (!f[w->n_files].name || !f[w->n_files].text) {
        free(f[w->n_files].name);
        free(f[w->n_files].text);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    }
    w->n_files++;
    return MOQ_OK;
}

bool moq_st_header_tensor(cJSON *root, const char *name, moq_dtype dtype, int ndim, const int64_t *shape, uint64_t off,
                          uint64_t nbytes) {
    cJSON *e = cJSON_AddObjectToObject(root, name);
    if (!e) return false;
    cJSON_AddStringToObject(e, "dtype", moq_dtype_name(dtype));
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; sh && d < ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
    if (o) {
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nbytes)));
    }
    return true;
}

char *moq_st_header_finish(cJSON *root, uint64_t *len) {
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) return NULL;
    size_t n = strlen(s), padded = (n + 7) / 8 * 8;
    char *p = realloc(s, padded + 1);
    if (!p) {
        free(s);
        return NULL;
    }
    memset(p + n, ' ', padded - n);
    p[padded] = '\0';
    *len = padded;
    return p;
}

/* Builds the padded header of tensors [lo, hi). */
static char *shard_header(const moq_writer *w, size_t lo, size_t hi, uint64_t *len) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    if (w->n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < w->n_meta; i++) cJSON_AddStringToObject(m, w->meta_k[i], w->meta_v[i]);
    }
    uint64_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        const wtensor *t = &w->t[i];
        if (!moq_st_header_tensor(root, t->name, t->dtype, t->ndim, t->shape, off, t->nbytes)) break;
        off += t->nbytes;
    }
    return moq_st_header_finish(root, len);
}

static moq_status write_all(FILE *f, const void *p, size_t n, const char *where, moq_error *err) {
    if (n && fwrite(p, 1, n, f) != n) return MOQ_FAIL(err, MOQ_ERR_IO, where, "write failed: %s", strerror(errno));
    return MOQ_OK;
}

/* Writes one file at tmp path; name is for errors. */
static moq_status write_shard(const moq_writer *w, size_t lo, size_t hi, const char *tmp, const char *name, moq_error *err) {
    uint64_t hlen = 0;
    char *hdr = shard_header(w, lo, hi, &hlen);
    if (!hdr) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot build the header");
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(hdr);
        return MOQ_FAIL(err, MOQ_ERR_IO, name, "cannot create: %s", strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hlen >> (8 * i));
    moq_status st = write_all(f, len8, 8, name, err);
    if (st == MOQ_OK) st = write_all(f, hdr, (size_t)hlen, name, err);
    for (size_t i = lo; i < hi && st == MOQ_OK; i++) st = write_all(f, w->t[i].data, (size_t)w->t[i].nbytes, name, err);
    free(hdr);
    if (fclose(f) != 0 && st == MOQ_OK) st = MOQ_FAIL(err, MOQ_ERR_IO, name, "close failed: %s", strerror(errno));
    return st;
}

static moq_status write_text(const char *tmp, const char *name, const char *text, moq_error *err) {
    FILE *f = fopen(tmp, "wb");
    if (!f) return MOQ_FAIL(err, MOQ_ERR_IO, name, "cannot create: %s", strerror(errno));
    moq_status st = write_all(f, text, strlen(text), name, err);
    if (fclose(f) != 0 && st == MOQ_OK) st = MOQ_FAIL(err, MOQ_ERR_IO, name, "close failed: %s", strerror(errno));
    return st;
}

moq_status moq_writer_finish(moq_writer *w, int n_shards, moq_error *err) {
    if (!w) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_writer_finish", "NULL writer");
    if (n_shards < 1 || (size_t)n_shards > (w->n ? w->n : 1) || n_shards > 99999)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, w->dir, "%d shards requested for %zu tensors", n_shards, w->n);
    bool made_dir = mkdir(w->dir, 0777) == 0;
    if (!made_dir && errno != EEXIST)
        return MOQ_FAIL(err, MOQ_ERR_IO, w->dir, "cannot create directory: %s", strerror(errno));

    /* Split in insertion order into shards of about total/n_shards bytes, each non-empty. */
    uint64_t total = 0;
    for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes;
    size_t *start = calloc((size_t)n_shards + 1, sizeof *start);
    int nfiles = n_shards + (n_shards > 1) + w->n_files;
    char **names = calloc((size_t)nfiles, sizeof *names), **tmps = calloc((size_t)nfiles, sizeof *tmps);
    moq_status st = MOQ_OK;
    int renamed = 0; /* files already moved into place (rolled back on failure) */
    if (!start || !names || !tmps) {
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, w->dir, "cannot allocate");
        goto done;
    }
    {
        size_t i = 0;
        uint64_t acc = 0;
        for (int s = 0; s < n_shards; s++) {
            start[s] = i;
            if (s == n_shards - 1) break;
            const size_t must_leave = (size_t)(n_shards - 1 - s); /* one tensor per later shard */
            const uint64_t target = (uint64_t)((unsigned __int128)total * (unsigned)(s + 1) / (unsigned)n_shards);
            do acc += w->t[i++].nbytes;
            while (w->n - i > must_leave && acc < target);
        }
        start[n_shards] = w->n;
    }
    int k = 0;
    char nm[64];
    for (int s = 0; s < n_shards && st == MOQ_OK; s++, k++) {
        if (n_shards == 1) snprintf(nm, sizeof nm, "model.safetensors");
        else snprintf(nm, sizeof nm, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        names[k] = moq_path_join(w->dir, nm);
        tmps[k] = names[k] ? malloc(strlen(names[k]) + 16) : NULL;
        if (!tmps[k]) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "cannot allocate"); break; }
        sprintf(tmps[k], "%s.tmp-moq", names[k]);
        st = write_shard(w, start[s], start[s + 1], tmps[k], nm, err);
    }
    if (st == MOQ_OK && n_shards > 1) {
        cJSON *ix = cJSON_CreateObject();
        cJSON *md = cJSON_AddObjectToObject(ix, "metadata");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        cJSON *wm = cJSON_AddObjectToObject(ix, "weight_map");
        for (int s = 0; s < n_shards; s++) {
            snprintf(nm, sizeof nm, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
            for (size_t i = start[s]; i < start[s + 1]; i++) cJSON_AddStringToObject(wm, w->t[i].name, nm);
        }
        char *text = cJSON_Print(ix);
        cJSON_Delete(ix);
        names[k] = moq_path_join(w->dir, "model.safetensors.index.json");
        tmps[k] = names[k] ? malloc(strlen(names[k]) + 16) : NULL;
        if (!text || !tmps[k]) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, "model.safetensors.index.json", "cannot allocate");
        else {
            sprintf(tmps[k], "%s.tmp-moq", names[k]);
            st = write_text(tmps[k], "model.safetensors.index.json", text, err);
        }
        free(text);
        k++;
    }
    for (int i = 0; i < w->n_files && st == MOQ_OK; i++, k++) {
        names[k] = moq_path_join(w->dir, w->files[i].name);
        tmps[k] = names[k] ? malloc(strlen(names[k]) + 16) : NULL;
        if (!tmps[k]) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, w->files[i].name, "cannot allocate"); break; }
        sprintf(tmps[k], "%s.tmp-moq", names[k]);
        st = write_text(tmps[k], w->files[i].name, w->files[i].text, err);
    }
    /* A target that is a directory would make its rename fail after others succeeded: refuse
     * before renaming anything. */
    for (int i = 0; i < nfiles && st == MOQ_OK; i++) {
        struct stat sb;
        if (names[i] && lstat(names[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            st = MOQ_FAIL(err, MOQ_ERR_IO, names[i], "is a directory; cannot write the file there");
    }
    for (int i = 0; i < nfiles && st == MOQ_OK; i++) {
        if (rename(tmps[i], names[i]) != 0) st = MOQ_FAIL(err, MOQ_ERR_IO, names[i], "cannot rename into place: %s", strerror(errno));
        else renamed++;
    }
done:
    for (int i = 0; names && tmps && i < nfiles; i++) {
        if (st != MOQ_OK && i < renamed && names[i]) unlink(names[i]); /* roll back: no half-written checkpoint */
        else if (st != MOQ_OK && tmps[i]) unlink(tmps[i]);
        free(names[i]);
        free(tmps[i]);
    }
    free(names);
    free(tmps);
    free(start);
    if (st != MOQ_OK && made_dir) rmdir(w->dir);
    return st;
}
