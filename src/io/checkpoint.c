/* checkpoint.c — a Hugging Face checkpoint directory, opened without reading tensor data:
 *
 *   config.json                     architecture (required for directories, see opts)
 *   hf_quant_config.json            ModelOpt's legacy quantization file (optional)
 *   generation_config.json, tokenizer.json, tokenizer_config.json  (optional)
 *   model.safetensors.index.json    {"metadata": {...}, "weight_map": {tensor: shard}}
 *     or model.safetensors, or else every *.safetensors in the directory (sorted by name)
 *
 * Rules: shard names in the index stay inside the directory (no absolute path, no ".."
 * component); every shard listed exists and passes safetensors validation; every tensor the index
 * lists is in the shard it names; no tensor name is in two shards. A tensor present in a shard but
 * missing from the index is kept and reported as a warning (the index is only a lookup aid).
 * Tested by tests/io/test_checkpoint.c.
 */
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/json.h"
#include "io/mmap.h"

static const char *const side_names[MOQ_SIDE_COUNT] = {
    [MOQ_SIDE_CONFIG] = "config.json",
    [MOQ_SIDE_HF_QUANT] = "hf_quant_config.json",
    [MOQ_SIDE_GENERATION] = "generation_config.json",
    [MOQ_SIDE_INDEX] = "model.safetensors.index.json",
    [MOQ_SIDE_TOKENIZER_CONFIG] = "tokenizer_config.json",
};

moq_checkpoint_opts moq_checkpoint_opts_default(void) {
    moq_checkpoint_opts o;
    memset(&o, 0, sizeof o);
    o.require_config = true;
    return o;
}

#define warn(c, err, ...) \
    (moq_notes_add(&(c)->warnings, __VA_ARGS__) ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, (c)->path, "cannot allocate a warning"))

void moq_checkpoint_free(moq_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_shards; i++) moq_st_close(&c->shards[i]);
    free(c->shards);
    free(c->tensors);
    moq_strmap_free(&c->by_name);
    for (int i = 0; i < MOQ_SIDE_COUNT; i++) {
        free(c->side[i].text);
        cJSON_Delete(c->side[i].json);
    }
    moq_notes_free(&c->warnings);
    free(c->path);
    free(c->dir);
    free(c);
}

static bool file_exists(const char *dir, const char *name) {
    char *p = moq_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0;
    free(p);
    return ok;
}

/* Reads an optional JSON side file; absent is fine, unreadable or invalid JSON is an error. */
static moq_status read_side(moq_checkpoint *c, int which, moq_error *err) {
    moq_side_file *s = &c->side[which];
    s->name = side_names[which];
    if (!file_exists(c->dir, s->name)) return MOQ_OK;
    char *p = moq_path_join(c->dir, s->name);
    if (!p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, s->name, "cannot allocate a path");
    moq_status st = moq_json_read(&s->json, &s->text, p, s->name, err);
    free(p);
    MOQ_TRY(st);
    if (!cJSON_IsObject(s->json))
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, s->name, "top level is %s, expected a JSON object", moq_json_type(s->json));
    return MOQ_OK;
}

/* Shard names from an index must stay inside the checkpoint directory. */
static moq_status check_shard_name(const char *name, const char *tensor, const char *where, moq_error *err) {
    if (!name[0]) return MOQ_FAIL(err, MOQ_ERR_FORMAT, where, "tensor %s: weight_map names an empty shard file", tensor);
    if (name[0] == '/')
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, where, "tensor %s: shard \"%s\" is an absolute path; shards must be inside the checkpoint directory", tensor, name);
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, where, "tensor %s: shard \"%s\" has a \"..\" component; shards must be inside the checkpoint directory", tensor, name);
        p += len + (slash ? 1 : 0);
        if (!slash) break;
    }
    if (strchr(name, '\\'))
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, where, "tensor %s: shard \"%s\" contains a backslash", tensor, name);
    return MOQ_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Collects the shard file names (malloc'd, sorted): from the index, model.safetensors, or
 * *.safetensors. */
static moq_status list_shards(moq_checkpoint *c, char ***names, int *n, moq_error *err) {
    *names = NULL;
    *n = 0;
    const moq_side_file *ix = &c->side[MOQ_SIDE_INDEX];
    char **v = NULL;
    int cnt = 0;
    if (ix->json) {
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix->json, "weight_map");
        if (!cJSON_IsObject(wm))
            return MOQ_FAIL(err, MOQ_ERR_FORMAT, ix->name, "weight_map is %s, expected an object {tensor: shard}", moq_json_type(wm));
        int total = cJSON_GetArraySize(wm);
        v = calloc((size_t)(total ? total : 1), sizeof *v);
        moq_strmap seen; /* shard names already collected: hundreds of shards x 100k tensors */
        if (!v || !moq_strmap_init(&seen, (size_t)total)) {
            free(v);
            return MOQ_FAIL(err, MOQ_ERR_NOMEM, ix->name, "cannot allocate");
        }
        moq_status st = MOQ_OK;
        for (const cJSON *e = wm->child; e && st == MOQ_OK; e = e->next) {
            if (!cJSON_IsString(e)) {
                st = MOQ_FAIL(err, MOQ_ERR_FORMAT, ix->name, "weight_map.%s is %s, expected a shard file name", e->string, moq_json_type(e));
                break;
            }
            if (moq_strmap_get(&seen, e->valuestring, NULL)) continue;
            st = check_shard_name(e->valuestring, e->string, ix->name, err);
            if (st != MOQ_OK) break;
            if (!(v[cnt] = strdup(e->valuestring))) {
                st = MOQ_FAIL(err, MOQ_ERR_NOMEM, ix->name, "cannot allocate");
                break;
            }
            moq_strmap_put(&seen, v[cnt], (size_t)cnt, NULL);
            cnt++;
        }
        moq_strmap_free(&seen);
        if (st == MOQ_OK && cnt == 0)
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, ix->name, "weight_map is empty; expected at least one tensor");
        if (st != MOQ_OK) {
            for (int i = 0; i < cnt; i++) free(v[i]);
            free(v);
            return st;
        }
        qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    } else if (file_exists(c->dir, "model.safetensors")) {
        v = calloc(1, sizeof *v);
        if (!v || !(v[0] = strdup("model.safetensors"))) {
            free(v);
            return MOQ_FAIL(err, MOQ_ERR_NOMEM, c->path, "cannot allocate");
        }
        cnt = 1;
    } else {
        DIR *d = opendir(c->dir);
        if (!d) return MOQ_FAIL(err, MOQ_ERR_IO, c->path, "cannot list directory: %s", strerror(errno));
        struct dirent *de;
        int cap = 0;
        moq_status st = MOQ_OK;
        while ((de = readdir(d)) && st == MOQ_OK) {
            size_t l = strlen(de->d_name);
            if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
            if (cnt == cap) {
                cap = cap ? 2 * cap : 8;
                char **nv = realloc(v, (size_t)cap * sizeof *nv);
                if (!nv) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c->path, "cannot allocate"); break; }
                v = nv;
            }
            if (!(v[cnt] = strdup(de->d_name))) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c->path, "cannot allocate"); break; }
            cnt++;
        }
        closedir(d);
        if (st == MOQ_OK && cnt == 0)
            st = MOQ_FAIL(err, MOQ_ERR_IO, c->path, "no model.safetensors.index.json, model.safetensors or *.safetensors file");
        if (st != MOQ_OK) {
            for (int i = 0; i < cnt; i++) free(v[i]);
            free(v);
            return st;
        }
        if (v) qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    }
    *names = v;
    *n = cnt;
    return MOQ_OK;
}

static moq_status open_shards(moq_checkpoint *c, moq_error *err) {
    char **names;
    int n;
    MOQ_TRY(list_shards(c, &names, &n, err));
    moq_status st = MOQ_OK;
    c->shards = calloc((size_t)(n > 0 ? n : 1), sizeof *c->shards);
    if (!c->shards) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c->path, "cannot allocate %d shards", n);
    for (int i = 0; i < n && st == MOQ_OK; i++) {
        char *p = moq_path_join(c->dir, names[i]);
        if (!p) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, names[i], "cannot allocate a path"); break; }
        st = moq_st_open(&c->shards[i], p, names[i], err);
        free(p);
        if (st == MOQ_OK) c->n_shards++;
        else if (st == MOQ_ERR_IO && c->side[MOQ_SIDE_INDEX].json && err) {
            /* A missing or unreadable shard: say who named it, and for which tensor. */
            const cJSON *wm = cJSON_GetObjectItemCaseSensitive(c->side[MOQ_SIDE_INDEX].json, "weight_map");
            const cJSON *e = wm ? wm->child : NULL;
            while (e && strcmp(e->valuestring, names[i]) != 0) e = e->next;
            char was[sizeof err->msg];
            snprintf(was, sizeof was, "%s", err->msg);
            st = MOQ_FAIL(err, MOQ_ERR_IO, names[i], "%s; %s lists it for tensor %s", was, side_names[MOQ_SIDE_INDEX],
                          e ? e->string : "?");
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

/* Builds the global name table and checks the index against the shards. */
static moq_status index_tensors(moq_checkpoint *c, moq_error *err) {
    size_t total = 0;
    for (int i = 0; i < c->n_shards; i++) total += c->shards[i].n_tensors;
    c->tensors = calloc(total ? total : 1, sizeof(moq_tensor *));
    if (!c->tensors || !moq_strmap_init(&c->by_name, total))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, c->path, "cannot allocate the table of %zu tensors", total);
    for (int i = 0; i < c->n_shards; i++) {
        moq_st_file *s = &c->shards[i];
        for (size_t k = 0; k < s->n_tensors; k++) {
            moq_tensor *t = &s->tensors[k];
            t->shard = i;
            size_t old;
            if (!moq_strmap_put(&c->by_name, t->name, c->n_tensors, &old))
                return MOQ_FAIL(err, MOQ_ERR_FORMAT, s->name, "tensor %s is also in %s; a tensor name must be unique across shards",
                                t->name, c->shards[c->tensors[old]->shard].name);
            c->tensors[c->n_tensors++] = t;
        }
    }
    const moq_side_file *ix = &c->side[MOQ_SIDE_INDEX];
    if (!ix->json) return MOQ_OK;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix->json, "weight_map");
    /* The index's own names, for duplicate keys and for the unlisted check in O(n) (cJSON's
     * object lookup is linear, which is quadratic over 100k tensors). */
    moq_strmap listed;
    if (!moq_strmap_init(&listed, (size_t)cJSON_GetArraySize(wm)))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, ix->name, "cannot allocate the weight_map table");
    moq_status st = MOQ_OK;
    for (const cJSON *e = wm->child; e && st == MOQ_OK; e = e->next) {
        if (!moq_strmap_put(&listed, e->string, 0, NULL)) {
            st = MOQ_FAIL(err, MOQ_ERR_FORMAT, ix->name, "tensor %s is listed twice in weight_map", e->string);
            break;
        }
        size_t at;
        if (!moq_strmap_get(&c->by_name, e->string, &at)) {
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, ix->name, "tensor %s is listed in shard %s, but %s does not contain it",
                          e->string, e->valuestring, e->valuestring);
            break;
        }
        const char *in = c->shards[c->tensors[at]->shard].name;
        if (strcmp(in, e->valuestring) != 0)
            st = MOQ_FAIL(err, MOQ_ERR_TENSOR, ix->name, "tensor %s is listed in shard %s, but it is in %s",
                          e->string, e->valuestring, in);
    }
    /* Shard tensors the index omits are kept (the index is a lookup aid); say which, at most 5. */
    int unlisted = 0;
    for (size_t i = 0; i < c->n_tensors && st == MOQ_OK; i++) {
        if (moq_strmap_get(&listed, c->tensors[i]->name, NULL)) continue;
        if (unlisted++ < 5)
            st = warn(c, err, "%s: tensor %s is in shard %s but not listed in the index", ix->name, c->tensors[i]->name,
                      c->shards[c->tensors[i]->shard].name);
    }
    if (st == MOQ_OK && unlisted > 5) st = warn(c, err, "%s: %d more tensors are in shards but not in the index", ix->name, unlisted - 5);
    moq_strmap_free(&listed);
    return st;
}

moq_status moq_checkpoint_open(moq_checkpoint **out, const char *path, const moq_checkpoint_opts *opts,
                               moq_error *err) {
    if (!out || !path) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_checkpoint_open", "NULL argument");
    *out = NULL;
    moq_checkpoint_opts o = opts ? *opts : moq_checkpoint_opts_default();
    struct stat st;
    if (stat(path, &st) != 0) return MOQ_FAIL(err, MOQ_ERR_IO, path, "cannot open: %s", strerror(errno));
    moq_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return MOQ_FAIL(err, MOQ_ERR_NOMEM, path, "cannot allocate");
    moq_status s = MOQ_OK;
    c->path = strdup(path);
    c->is_dir = S_ISDIR(st.st_mode);
    if (!c->path) { s = MOQ_FAIL(err, MOQ_ERR_NOMEM, path, "cannot allocate"); goto done; }
    if (c->is_dir) {
        c->dir = strdup(path);
        if (!c->dir) { s = MOQ_FAIL(err, MOQ_ERR_NOMEM, path, "cannot allocate"); goto done; }
        for (int i = 0; i < MOQ_SIDE_COUNT && s == MOQ_OK; i++) s = read_side(c, i, err);
        if (s != MOQ_OK) goto done;
        c->has_tokenizer = file_exists(c->dir, "tokenizer.json");
        if (!c->side[MOQ_SIDE_CONFIG].json && o.require_config) {
            s = MOQ_FAIL(err, MOQ_ERR_IO, "config.json", "not found in %s (a Hugging Face checkpoint directory has one)", path);
            goto done;
        }
        if (c->side[MOQ_SIDE_CONFIG].json) {
            s = moq_arch_parse(&c->arch, c->side[MOQ_SIDE_CONFIG].json, "config.json", err);
            if (s != MOQ_OK) goto done;
            c->has_arch = true;
        }
        if ((s = open_shards(c, err)) != MOQ_OK) goto done;
    } else {
        /* A single .safetensors file: its directory is the one it sits in. */
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        c->dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
        c->shards = calloc(1, sizeof *c->shards);
        if (!c->dir || !c->shards) { s = MOQ_FAIL(err, MOQ_ERR_NOMEM, path, "cannot allocate"); goto done; }
        if ((s = moq_st_open(&c->shards[0], path, base, err)) != MOQ_OK) goto done;
        c->n_shards = 1;
    }
    s = index_tensors(c, err);
done:
    if (s != MOQ_OK) {
        moq_checkpoint_free(c);
        return s;
    }
    *out = c;
    return MOQ_OK;
}

const char *moq_checkpoint_path(const moq_checkpoint *c) { return c ? c->path : NULL; }
int moq_checkpoint_shard_count(const moq_checkpoint *c) { return c ? c->n_shards : 0; }
const char *moq_checkpoint_shard_name(const moq_checkpoint *c, int i) {
    return (c && i >= 0 && i < c->n_shards) ? c->shards[i].name : NULL;
}
uint64_t moq_checkpoint_shard_size(const moq_checkpoint *c, int i) {
    return (c && i >= 0 && i < c->n_shards) ? c->shards[i].size : 0;
}
int moq_checkpoint_shard_tensor_count(const moq_checkpoint *c, int i) {
    return (c && i >= 0 && i < c->n_shards) ? (int)c->shards[i].n_tensors : 0;
}
size_t moq_checkpoint_tensor_count(const moq_checkpoint *c) { return c ? c->n_tensors : 0; }
const moq_tensor *moq_checkpoint_tensor_at(const moq_checkpoint *c, size_t i) {
    return (c && i < c->n_tensors) ? c->tensors[i] : NULL;
}
const moq_tensor *moq_checkpoint_tensor(const moq_checkpoint *c, const char *name) {
    size_t i;
    if (!c || !name || !moq_strmap_get(&c->by_name, name, &i)) return NULL;
    return c->tensors[i];
}
const moq_arch *moq_checkpoint_arch(const moq_checkpoint *c) { return (c && c->has_arch) ? &c->arch : NULL; }
const char *moq_checkpoint_json_text(const moq_checkpoint *c, const char *file) {
    if (!c || !file) return NULL;
    for (int i = 0; i < MOQ_SIDE_COUNT; i++)
        if (c->side[i].name && strcmp(c->side[i].name, file) == 0) return c->side[i].text;
    return NULL;
}
int moq_checkpoint_metadata_count(const moq_checkpoint *c, int shard) {
    return (c && shard >= 0 && shard < c->n_shards) ? c->shards[shard].n_meta : 0;
}
bool moq_checkpoint_metadata_at(const moq_checkpoint *c, int shard, int i, const char **key, const char **value) {
    if (!c || shard < 0 || shard >= c->n_shards || i < 0 || i >= c->shards[shard].n_meta) return false;
    if (key) *key = c->shards[shard].meta_keys[i];
    if (value) *value = c->shards[shard].meta_vals[i];
    return true;
}
int moq_checkpoint_warning_count(const moq_checkpoint *c) { return c ? c->warnings.n : 0; }
const char *moq_checkpoint_warning(const moq_checkpoint *c, int i) {
    return c ? moq_notes_at(&c->warnings, i) : NULL;
}
