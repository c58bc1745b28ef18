/* fuzz_safetensors.c — libFuzzer target: the safetensors header parser and validator on arbitrary
 * bytes. Every accepted file must yield views inside the buffer. Built by `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moq_st_file f;
    moq_error err;
    if (moq_st_parse(&f, "fuzz.safetensors", data, size, &err) == MOQ_OK) {
        uint64_t sum = 0;
        for (size_t i = 0; i < f.n_tensors; i++) {
            const moq_tensor *t = &f.tensors[i];
            if (t->nbytes) {
                const uint8_t *p = t->data;
                if (p < data || p + t->nbytes > data + size) __builtin_trap(); /* view outside the file */
                sum += p[0] + p[t->nbytes - 1];
            }
        }
        moq_st_close(&f);
        if (sum == 0x123456789ull) return 1;
    } else if (err.where[0] == '\0' || err.msg[0] == '\0') {
        __builtin_trap(); /* every error names the file and says what is wrong */
    }
    return 0;
}
