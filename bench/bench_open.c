/* bench_open.c — time to open and validate a sharded checkpoint (moq_checkpoint_open + free).
 *
 * Builds a sparse checkpoint named and shaped like Llama-3.1-70B exported by ModelOpt as NVFP4
 * (80 layers x 7 linears x {weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16], weight_scale_2
 * F32, input_scale F32} + norms + BF16 embeddings and lm_head: 2403 tensors, ~43 GB) in a
 * temporary directory: each shard is its header followed by ftruncate, so the data occupies no
 * disk blocks. Opening must cost only the header reads, never a pass over tensor data; the
 * minor page faults during the open show how many pages were touched.
 *
 *   usage: bench_open [--dir DIR] [--shards N] [--layers L] [--reps R]
 *          defaults: --dir /tmp --shards 8 --layers 80 --reps 20
 *
 * The files are deleted at the end. Refuses (exit 2) when the filesystem cannot hold the headers
 * or does not store files sparsely.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "moq.h"

typedef struct btensor {
    char     name[96];
    const char *dtype;
    int      ndim;
    int64_t  shape[2];
    uint64_t nbytes;
} btensor;

typedef struct model {
    btensor *t;
    size_t   n, cap;
} model;

static void add(model *m, const char *name, const char *dtype, int bits, int ndim, int64_t d0, int64_t d1) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->t = realloc(m->t, m->cap * sizeof *m->t);
        if (!m->t) {
            fprintf(stderr, "bench_open: out of memory\n");
            exit(7);
        }
    }
    btensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    uint64_t el = ndim == 0 ? 1 : ndim == 1 ? (uint64_t)d0 : (uint64_t)d0 * (uint64_t)d1;
    t->nbytes = el * (uint64_t)bits / 8;
}

/* Llama-3.1-70B: hidden 8192, intermediate 28672, 64 heads, 8 kv heads, head_dim 128, vocab 128256. */
static void llama70b_nvfp4(model *m, int layers) {
    const int64_t H = 8192, I = 28672, KV = 8 * 128, V = 128256;
    static const struct { const char *name; int64_t n_hidden, n_kv, n_inter, k_inter; } lin[] = {
        /* out = H*n_hidden + KV*n_kv + I*n_inter; in = I if k_inter else H */
        {"self_attn.q_proj", 1, 0, 0, 0}, {"self_attn.k_proj", 0, 1, 0, 0}, {"self_attn.v_proj", 0, 1, 0, 0},
        {"self_attn.o_proj", 1, 0, 0, 0}, {"mlp.gate_proj", 0, 0, 1, 0},    {"mlp.up_proj", 0, 0, 1, 0},
        {"mlp.down_proj", 1, 0, 0, 1},
    };
    char nm[96];
    add(m, "model.embed_tokens.weight", "BF16", 16, 2, V, H);
    for (int l = 0; l < layers; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        add(m, nm, "BF16", 16, 1, H, 0);
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            const int64_t N = H * lin[i].n_hidden + KV * lin[i].n_kv + I * lin[i].n_inter;
            const int64_t K = lin[i].k_inter ? I : H;
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin[i].name);
            add(m, nm, "U8", 8, 2, N, K / 2);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight_scale", l, lin[i].name);
            add(m, nm, "F8_E4M3", 8, 2, N, K / 16);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight_scale_2", l, lin[i].name);
            add(m, nm, "F32", 32, 0, 0, 0);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.input_scale", l, lin[i].name);
            add(m, nm, "F32", 32, 0, 0, 0);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        add(m, nm, "BF16", 16, 1, H, 0);
    }
    add(m, "model.norm.weight", "BF16", 16, 1, H, 0);
    add(m, "lm_head.weight", "BF16", 16, 2, V, H);
}

typedef struct buf {
    char  *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k >= 0 && b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = b->cap ? 2 * b->cap + (size_t)k : 1 << 16;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "bench_open: out of memory\n");
            exit(7);
        }
    }
}

static char g_dir[4096];
static char **g_files;
static int g_nfiles;

static void cleanup(void) {
    for (int i = 0; i < g_nfiles; i++) {
        unlink(g_files[i]);
        free(g_files[i]);
    }
    free(g_files);
    g_files = NULL;
    g_nfiles = 0;
    if (g_dir[0]) rmdir(g_dir);
}

static char *track(const char *name) {
    g_files = realloc(g_files, (size_t)(g_nfiles + 1) * sizeof *g_files);
    size_t n = strlen(g_dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!g_files || !p) {
        fprintf(stderr, "bench_open: out of memory\n");
        exit(7);
    }
    snprintf(p, n, "%s/%s", g_dir, name);
    g_files[g_nfiles++] = p;
    return p;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "bench_open: %s %s: %s\n", what, path, strerror(errno));
    cleanup();
    exit(2);
}

static void write_file(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("cannot create", path);
    if (write(fd, p, n) != (ssize_t)n) die("cannot write", path);
    close(fd);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *base = "/tmp";
    int shards = 8, layers = 80, reps = 20;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--dir")) base = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--shards")) shards = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_open [--dir DIR] [--shards N] [--layers L] [--reps R]\n");
            return 1;
        }
    }
    if (shards < 1 || shards > 9999 || layers < 1 || layers > 1000 || reps < 1) {
        fprintf(stderr, "bench_open: --shards 1..9999, --layers 1..1000, --reps >= 1\n");
        return 1;
    }
    model m = {0};
    llama70b_nvfp4(&m, layers);
    if ((size_t)shards > m.n) shards = (int)m.n;
    uint64_t total = 0;
    for (size_t i = 0; i < m.n; i++) total += m.t[i].nbytes;

    /* Split in order into shards of about total/shards bytes (the writer's rule). */
    size_t *start = calloc((size_t)shards + 1, sizeof *start);
    {
        size_t i = 0;
        uint64_t acc = 0;
        for (int s = 0; s < shards; s++) {
            start[s] = i;
            if (s == shards - 1) break;
            const uint64_t target = (uint64_t)((unsigned __int128)total * (unsigned)(s + 1) / (unsigned)shards);
            do acc += m.t[i++].nbytes;
            while (m.n - i > (size_t)(shards - 1 - s) && acc < target);
        }
        start[shards] = m.n;
    }

    /* Headers first, so the space check knows what will be written. */
    buf *hdr = calloc((size_t)shards, sizeof *hdr);
    uint64_t *data_bytes = calloc((size_t)shards, sizeof *data_bytes);
    buf index = {0};
    put(&index, "{\"metadata\": {\"total_size\": %llu}, \"weight_map\": {", (unsigned long long)total);
    uint64_t header_bytes = 0;
    for (int s = 0; s < shards; s++) {
        char sn[64];
        snprintf(sn, sizeof sn, "model-%05d-of-%05d.safetensors", s + 1, shards);
        put(&hdr[s], "{\"__metadata__\":{\"format\":\"pt\"}");
        uint64_t off = 0;
        for (size_t i = start[s]; i < start[s + 1]; i++) {
            const btensor *t = &m.t[i];
            put(&hdr[s], ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dtype);
            for (int d = 0; d < t->ndim; d++) put(&hdr[s], "%s%lld", d ? "," : "", (long long)t->shape[d]);
            put(&hdr[s], "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + t->nbytes));
            off += t->nbytes;
            put(&index, "%s\"%s\": \"%s\"", i ? ", " : "", t->name, sn);
        }
        put(&hdr[s], "}");
        while (hdr[s].n % 8) put(&hdr[s], " ");
        data_bytes[s] = off;
        header_bytes += 8 + hdr[s].n;
    }
    put(&index, "}}\n");
    static const char config[] =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"torch_dtype\": \"bfloat16\", "
        "\"hidden_size\": 8192, \"intermediate_size\": 28672, \"num_hidden_layers\": 80, \"num_attention_heads\": 64, "
        "\"num_key_value_heads\": 8, \"vocab_size\": 128256, \"rope_theta\": 500000.0, \"rms_norm_eps\": 1e-05}\n";
    const uint64_t side_bytes = index.n + sizeof config - 1;

    /* df: room for the headers and side files (the data is sparse), plus inodes. */
    struct statvfs vfs;
    if (statvfs(base, &vfs) != 0) {
        fprintf(stderr, "bench_open: cannot stat filesystem of %s: %s\n", base, strerror(errno));
        return 2;
    }
    const uint64_t need = header_bytes + side_bytes + (64ull << 20);
    const uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail < need || (vfs.f_favail != 0 && vfs.f_favail < (fsfilcnt_t)shards + 8)) {
        fprintf(stderr,
                "bench_open: %s has %llu MB and %llu inodes free; the sparse checkpoint needs %llu MB of metadata "
                "and %d inodes. Choose another filesystem with --dir.\n",
                base, (unsigned long long)(avail >> 20), (unsigned long long)vfs.f_favail, (unsigned long long)(need >> 20),
                shards + 8);
        return 2;
    }

    snprintf(g_dir, sizeof g_dir, "%s/moq_bench_open.%d", base, (int)getpid());
    if (mkdir(g_dir, 0777) != 0) {
        fprintf(stderr, "bench_open: cannot create %s: %s\n", g_dir, strerror(errno));
        return 2;
    }
    write_file(track("config.json"), config, sizeof config - 1);
    write_file(track("model.safetensors.index.json"), index.p, index.n);
    uint64_t allocated = 0;
    for (int s = 0; s < shards; s++) {
        char sn[64];
        snprintf(sn, sizeof sn, "model-%05d-of-%05d.safetensors", s + 1, shards);
        char *p = track(sn);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die("cannot create", p);
        uint8_t len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)hdr[s].n >> (8 * k));
        if (write(fd, len8, 8) != 8 || write(fd, hdr[s].p, hdr[s].n) != (ssize_t)hdr[s].n) die("cannot write", p);
        if (ftruncate(fd, (off_t)(8 + hdr[s].n + data_bytes[s])) != 0) die("cannot extend (sparse)", p);
        struct stat sb;
        if (fstat(fd, &sb) != 0) die("cannot stat", p);
        allocated += (uint64_t)sb.st_blocks * 512;
        close(fd);
    }
    if (allocated > header_bytes + (16ull << 20) * (uint64_t)shards) {
        fprintf(stderr, "bench_open: %s does not keep files sparse (%llu MB allocated); choose another filesystem with --dir\n",
                base, (unsigned long long)(allocated >> 20));
        cleanup();
        return 2;
    }

    /* Time open + free; the first run separately (headers not yet in the page cache of this
     * process's mappings, though the kernel has them from the writes above). */
    double *ms = calloc((size_t)reps, sizeof *ms);
    long faults = 0;
    size_t n_tensors = 0;
    for (int r = 0; r < reps; r++) {
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        const double t0 = now_ms();
        moq_checkpoint *c = NULL;
        moq_error err = {0};
        if (moq_checkpoint_open(&c, g_dir, NULL, &err) != MOQ_OK) {
            char b[1024];
            moq_error_format(&err, b, sizeof b);
            fprintf(stderr, "bench_open: moq: %s\n", b);
            cleanup();
            return err.code;
        }
        n_tensors = moq_checkpoint_tensor_count(c);
        moq_checkpoint_free(c);
        ms[r] = now_ms() - t0;
        getrusage(RUSAGE_SELF, &ru1);
        if (r == 0) faults = ru1.ru_minflt - ru0.ru_minflt + ru1.ru_majflt - ru0.ru_majflt;
    }
    const double first = ms[0];
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    cleanup();

    printf("%-34s %7s %8s %10s %12s %10s %9s %9s %9s\n", "checkpoint", "shards", "tensors", "data GB", "header bytes",
           "faults", "first ms", "best ms", "median ms");
    char name[64];
    snprintf(name, sizeof name, "llama-70b-nvfp4 (%d layers, sparse)", layers);
    printf("%-34s %7d %8zu %10.2f %12llu %10ld %9.2f %9.2f %9.2f\n", name, shards, n_tensors, (double)total / 1e9,
           (unsigned long long)(header_bytes + side_bytes), faults, first, ms[0], ms[reps / 2]);
    printf("(header bytes = shard headers + index + config.json; faults = page faults during the first open)\n");

    for (int s = 0; s < shards; s++) free(hdr[s].p);
    free(hdr);
    free(data_bytes);
    free(index.p);
    free(start);
    free(ms);
    free(m.t);
    return 0;
}
