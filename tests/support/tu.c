/* tu.c — see tu.h. */
#include "tu.h"

#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

char *tu_data_path(const char *rel) {
    const char *base = getenv("MOQ_TESTDATA");
    if (!base || !*base) fail_msg("MOQ_TESTDATA is not set: run the tests with ctest (it points at build/testdata)");
    size_t n = strlen(base) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", base, rel);
    return p;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

void tu_rmtree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

char *tu_tmpdir(const char *tag) {
    const char *base = getenv("MOQ_TMP");
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0777);
    size_t n = strlen(base) + strlen(tag) + 32;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s.%d", base, tag, (int)getpid());
    tu_rmtree(p);
    if (mkdir(p, 0777) != 0) fail_msg("cannot create %s: %s", p, strerror(errno));
    return p;
}

void *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read %s", path);
    fclose(f);
    ((char *)buf)[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

char *tu_write_file(const char *dir, const char *name, const void *data, size_t len) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) fail_msg("cannot create %s", p);
    if (len && fwrite(data, 1, len, f) != len) fail_msg("short write %s", p);
    fclose(f);
    return p;
}

char *tu_write_st(const char *dir, const char *name, const char *header, size_t data_len) {
    size_t hl = strlen(header), n = 8 + hl + data_len;
    uint8_t *buf = malloc(n);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (uint8_t)(i * 7 + 3);
    char *p = tu_write_file(dir, name, buf, n);
    free(buf);
    return p;
}

int tu_run(const char *cmd, char *out, size_t n) {
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t k = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0)
        if (out && k + 1 < n) {
            size_t c = got < n - 1 - k ? got : n - 1 - k;
            memcpy(out + k, buf, c);
            k += c;
        }
    if (out && n) out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *tu_moq_bin(void) {
    const char *b = getenv("MOQ_BIN");
    return b && *b ? b : "./moq";
}

void tu_assert_error(const moq_error *e, moq_status got, moq_status code, const char *where_sub,
                     const char *msg_sub, const char *file, int line) {
    char b[1024];
    moq_error_format(e, b, sizeof b);
    if (got != code || e->code != code)
        fail_msg("%s:%d: status %s (err.code %s), expected %s; error: %s", file, line, moq_status_str(got),
                 moq_status_str(e->code), moq_status_str(code), b);
    if (where_sub && !strstr(e->where, where_sub))
        fail_msg("%s:%d: where \"%s\" does not contain \"%s\"; error: %s", file, line, e->where, where_sub, b);
    if (msg_sub && !strstr(e->msg, msg_sub))
        fail_msg("%s:%d: message \"%s\" does not contain \"%s\"", file, line, e->msg, msg_sub);
}

/* <this source tree>/tests/<sub>/<rel>, found from this file's own path (tests/support/tu.c). */
static char *tests_path(const char *sub, const char *rel) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    size_t n = strlen(dir) + strlen(sub) + strlen(rel) + 32;
    char *p = malloc(n);
    snprintf(p, n, "%s/../%s/%s", dir, sub, rel);
    return p;
}

char *tu_golden_path(const char *rel) { return tests_path("golden", rel); }

char *tu_golden_tokenizer_path(const char *rel) { return tests_path("golden/tokenizer", rel); }

char *tu_src_data_path(const char *rel) { return tests_path("data", rel); }

moq_tokenizer *tu_open_golden_tokenizer(const char *style) {
    char *p = tu_golden_tokenizer_path(style);
    moq_tokenizer *t = NULL;
    TU_OK(moq_tokenizer_open(&t, p, err_));
    free(p);
    return t;
}

bool tu_have_gpu(const char **info) {
    static char gi[600];
    static int state = -1;
    if (state < 0) {
        moq_error e;
        state = moq_device_check(MOQ_DEVICE_CUDA, gi, sizeof gi, &e) == MOQ_OK;
        if (!state) snprintf(gi, sizeof gi, "%s", e.msg);
    }
    if (info) *info = gi;
    return state == 1;
}
