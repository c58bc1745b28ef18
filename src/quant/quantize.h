/* quantize.h — `moq quantize`: write a ModelOpt checkpoint from an unquantized Hugging Face one
 * (BF16, F16 or F32 safetensors), tensor by tensor, as ModelOpt 0.47's export_hf_checkpoint does.
 *
 *   1. plan      every tensor of the source is either a linear weight (a row of the leaf table in
 *                quantize.c: q/k/v/o, gate/up/down, w1/w3/w2, lm_head) or copied unchanged; each
 *                linear gets an algo (--algo, a MIXED_PRECISION recipe, --exclude, the defaults:
 *                lm_head, embeddings and MoE routers stay unquantized and are listed as excluded);
 *                fused shards (q/k/v, gate/up, w1/w3, per expert) must agree.
 *   2. amax      the weight amax of every linear whose scale comes from the group (NVFP4 global
 *                scale, one-block FP8_PB_WO), maxed over its fused group (§9.3; ModelOpt leaves
 *                FP8 per-tensor groups unfused).
 *   3. write     shards of at most shard_size bytes into DST.moq-partial/, each tensor read from
 *                the source mapping and exported by its row of quant/export_linear.c just before it
 *                is written (memory: about 6x the largest linear); then hf_quant_config.json,
 *                config.json with quantization_config, the index, the tokenizer and generation
 *                files; the directory is renamed to DST only when everything is written.
 *
 * Static input scales (FP8, NVFP4) and FP8 KV scales come from a moq_calib (model/calibrate.c).
 * Tested by tests/quant/test_quantize.c. Formats: docs/QUANTIZE.md. */
#ifndef MOQ_QUANT_QUANTIZE_H
#define MOQ_QUANT_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moq.h"
#include "quant/calib.h"

typedef void (*moq_quantize_progress_fn)(void *user, const char *phase, uint64_t done, uint64_t total);

typedef struct moq_quantize_opts {
    const char               *algo;          /* a row of quant/export_linear.c or MIXED_PRECISION        */
    const char               *recipe;        /* MIXED_PRECISION: recipe JSON text (docs/QUANTIZE.md)      */
    const char               *recipe_name;   /* the recipe's file name, for errors                        */
    const char *const        *exclude;       /* fnmatch patterns of modules to keep unquantized           */
    int                       n_exclude;
    bool                      kv_fp8;        /* FP8 KV cache: k_scale / v_scale from calib                */
    const moq_calib          *calib;         /* NULL: none (algos with static input scales refuse)        */
    uint64_t                  shard_size;    /* bytes per shard at most (a larger tensor gets its own); 0: 5 GB */
    const char               *command;       /* recorded in each shard's __metadata__ ("moq_command")    */
    moq_quantize_progress_fn  progress;      /* NULL: none                                                */
    void                     *progress_user;
    volatile int             *cancel;        /* non-NULL and set: stop, remove the partial output         */
} moq_quantize_opts;
moq_quantize_opts moq_quantize_opts_default(void);

typedef struct moq_quantize_report {
    size_t   n_linears, n_quantized, n_tensors_out;
    int      n_shards;
    uint64_t bytes_in, bytes_out, largest_tensor;
    double   plan_s, amax_s, write_s;
} moq_quantize_report;

/* Quantizes src_dir into dst_dir (which must not exist). On failure nothing is left at dst_dir
 * and err names the tensor, module, recipe key or file. rep may be NULL. */
moq_status moq_quantize(const char *src_dir, const char *dst_dir, const moq_quantize_opts *o, moq_quantize_report *rep,
                        moq_error *err);

#endif
