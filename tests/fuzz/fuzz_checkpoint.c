/* fuzz_checkpoint.c — libFuzzer target: opening a checkpoint directory whose config.json and
 * model.safetensors.index.json come from the input (split at the first NUL byte), with one valid
 * shard "model-00001-of-00001.safetensors" holding tensors "a" and "b". Exercises the index rules
 * (shard names, listed tensors) and config.json architecture parsing. Built by `make fuzz`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];

static void put(const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void setup(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/moq-fuzz-ckpt.%d", (int)getpid());
    if (mkdir(g_dir, 0700) != 0) { /* may exist from a previous run of this pid: fine */ }
    static const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}";
    uint8_t buf[8 + sizeof hdr - 1 + 16];
    uint64_t n = sizeof hdr - 1;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, 0x3f, 16);
    put("model-00001-of-00001.safetensors", buf, sizeof buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    put("config.json", data, n1);
    put("model.safetensors.index.json", nul ? nul + 1 : (const uint8_t *)"", nul ? size - n1 - 1 : 0);
    moq_checkpoint *c = NULL;
    moq_error err;
    if (moq_checkpoint_open(&c, g_dir, NULL, &err) == MOQ_OK) {
        for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
            const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
            if (moq_checkpoint_tensor(c, t->name) != t) __builtin_trap();
        }
        moq_checkpoint_free(c);
    } else if (err.msg[0] == '\0') {
        __builtin_trap();
    }
    return 0;
}
