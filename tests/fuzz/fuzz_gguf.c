/* fuzz_gguf.c — libFuzzer target: the GGUF parser and validator (src/io/gguf.c) on arbitrary bytes.
 * Every accepted file must yield tensor views inside the buffer, string arrays that walk to their
 * end, and tensors whose first block dequantizes; every error names the file and says what is wrong.
 * Built by `make fuzz` (scripts/fuzz.sh seeds it with small generated GGUF files). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moq_gguf_file f;
    moq_error err;
    if (moq_gguf_parse(&f, "fuzz.gguf", data, size, &err) != MOQ_OK) {
        if (err.where[0] == '\0' || err.msg[0] == '\0') __builtin_trap();
        return 0;
    }
    uint64_t sum = 0;
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const moq_gguf_kv *kv = &f.kv[i];
        if (kv->val < data || kv->val + kv->val_bytes > data + size) __builtin_trap();
        if (kv->type == MOQ_GGUF_ARRAY && kv->arr_type == MOQ_GGUF_STRING) {
            uint64_t pos = 0, n = 0, len;
            const char *s;
            while (moq_gguf_arr_str_next(kv, &pos, &s, &len)) {
                if ((const uint8_t *)s < data || (const uint8_t *)s + len > data + size) __builtin_trap();
                n++;
            }
            if (n != kv->n) __builtin_trap(); /* the walk ends at the array's last string */
        } else if (kv->type == MOQ_GGUF_ARRAY && kv->n) {
            sum += (uint64_t)moq_gguf_arr_int(kv, kv->n - 1);
        }
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const moq_gguf_tensor *t = &f.tensors[i];
        if (t->data < data || t->data + t->nbytes > data + size) __builtin_trap();
        if (moq_ggml_type_dequantizable(t->type)) {
            float y[32];
            const uint64_t n = (uint64_t)moq_ggml_type_block(t->type);
            if (moq_gguf_dequant(t->type, t->data, y, n, t->name, &err) != MOQ_OK) __builtin_trap();
            sum += (uint64_t)(y[0] == y[0]);
        }
    }
    moq_gguf_close(&f);
    return sum == 0x123456789ull;
}
