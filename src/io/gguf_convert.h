/* gguf_convert.h — turn a GGUF model (llama architecture, GPT-2-style BPE tokenizer) into a Hugging
 * Face checkpoint directory: model.safetensors (BF16 or F32, Hugging Face tensor names, llama.cpp's
 * Q/K row permutation undone), config.json, generation_config.json, tokenizer.json and
 * tokenizer_config.json. Rules and tables: gguf_convert.c. Tested by tests/io/test_gguf.c (synthetic
 * files) and tests/e2e/smollm2.sh (the real SmolLM2 file, when cached). Used by `moq convert-gguf`.
 */
#ifndef MOQ_IO_GGUF_CONVERT_H
#define MOQ_IO_GGUF_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

/* Called after each tensor: bytes of tensor data written to memory so far, of total. */
typedef void (*moq_gguf_progress_fn)(void *ctx, uint64_t done, uint64_t total);

typedef struct moq_gguf_convert_opts {
    moq_dtype            dtype;          /* MOQ_DT_BF16 (round to nearest even) or MOQ_DT_F32 */
    moq_gguf_progress_fn progress;       /* optional */
    void                *progress_ctx;
} moq_gguf_convert_opts;

typedef struct moq_gguf_convert_info {
    double   read_s;        /* map + validate the GGUF file                          */
    double   tensors_s;     /* dequantize, unpermute, convert                        */
    double   tokenizer_s;   /* config.json, tokenizer.json, tokenizer_config.json     */
    double   write_s;       /* safetensors + side files through the writer (+ rename) */
    uint64_t n_tensors;
    uint64_t tensor_bytes;  /* safetensors data written                              */
    int      n_layers;
    bool     tied;          /* no output.weight: tie_word_embeddings                  */
    char     gguf_types[96];/* tensor types of the source, e.g. "F32 x61, Q4_1 x210, Q8_0 x1" */
} moq_gguf_convert_info;

moq_gguf_convert_opts moq_gguf_convert_opts_default(void);

/* Converts the GGUF file at `path` into the directory `out_dir`, which must not exist or be empty.
 * Files are written under temporary names and renamed only when all are complete (moq_writer), so
 * a failure leaves no checkpoint behind. `info` (optional) receives phase timings and counts. */
moq_status moq_gguf_convert(const char *path, const char *out_dir, const moq_gguf_convert_opts *opts,
                            moq_gguf_convert_info *info, moq_error *err);

#endif
