/* export_linear.h — what ModelOpt writes for one linear weight, one table row per quant_algo.
 *
 * A linear "P" with weight W f32 [N, K] (values already representable in the model dtype) is
 * written as the tensors P.<suffix> listed by its row, e.g. NVFP4:
 *   weight U8 [N, K/2] · weight_scale F8_E4M3 [N, K/16] · weight_scale_2 F32 [] · input_scale F32 []
 * The arithmetic is quant/export_ref.c's (NUMERICS.md §2.3, §4.2, §5.1-§5.3); this table only says
 * which exporter runs and how its outputs are named, typed and shaped. Used by `moq synth` and, later,
 * the quantizer. Caller-owned memory: moq_export_linear_plan fills the tensor descriptors (suffix,
 * dtype, shape, byte count), the caller gives each one `data` of that many bytes, and
 * moq_export_linear_run fills them. Tested by tests/quant/test_export_linear.c. */
#ifndef MOQ_QUANT_EXPORT_LINEAR_H
#define MOQ_QUANT_EXPORT_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moq.h"

#define MOQ_EXPORT_LINEAR_MAX_TENSORS 5

typedef struct moq_export_tensor {
    const char *suffix;        /* "weight", "weight_scale", ... (static string)          */
    moq_dtype   dtype;
    int         ndim;          /* 0 for a scalar                                          */
    int64_t     shape[4];
    uint64_t    nbytes;
    void       *data;          /* caller-owned, nbytes; filled by moq_export_linear_run  */
} moq_export_tensor;

/* What a linear's export needs besides its weight. */
typedef struct moq_export_args {
    float     amax;         /* the group amax (q/k/v or gate/up share it, §9.3), < 0: W's own     */
    float     act_amax;     /* the calibrated input amax (static-input algos)                     */
    moq_dtype model_dtype;  /* the source weight's dtype: FP8 per-tensor rounds through it        */
    bool      moe_gate_up;  /* a routed expert's gate/up: FP8_PB_WO keeps a one-block scale 4-D    */
} moq_export_args;
/* amax -1 (W's own), act_amax 0, BF16, not an expert. */
moq_export_args moq_export_args_default(void);

/* Fills t[0..*count) for W [N, K]; when W != NULL also writes each t[i].data. */
typedef void moq_export_linear_fn(const float *W, size_t N, size_t K, const moq_export_args *a,
                                  moq_export_tensor *t, int *count);

typedef struct moq_export_linear_row {
    const char           *algo;        /* quant_algo as moq names it (and the config reader reads) */
    const char           *written;     /* quant_algo as ModelOpt 0.47 writes it (§12)             */
    bool                  quantized;   /* false: plain BF16, no quantization config is written  */
    int                   group_size;  /* the config's "group_size" (0: the key is not written) */
    int                   k_multiple;  /* K must be a multiple of this                          */
    bool                  group_amax;  /* the weight scale comes from the group amax (FP8_PB_WO:
                                          only for a one-block weight)                           */
    bool                  static_input;/* writes input_scale: needs calibration data             */
    bool                  act_zero_ok; /* static input amax 0 is fixed up to the max bound (FP8's
                                          export_amax); false: an error, as ModelOpt's dynamic-block
                                          NVFP4 input quantizer (NUMERICS.md §9.2)                */
    bool                  synthetic;   /* a fixed pattern for `moq synth` and tests, not what a
                                          quantizer computes (NVFP4_AWQ's pre_quant_scale):
                                          `moq quantize` does not offer it                      */
    moq_export_linear_fn *export_fn;
    const char           *config_group;/* config.json quantization_config config_groups entry
                                          (without "targets") of a single-algo checkpoint, NULL
                                          when ModelOpt writes none                              */
    const char           *mixed_group; /* the same in a MIXED_PRECISION checkpoint (ModelOpt's
                                          _quant_algo_to_group_config), NULL: unquantized       */
} moq_export_linear_row;

/* The table, in the order `moq synth --help` lists the algos. */
const moq_export_linear_row *moq_export_linear_rows(size_t *count);
/* The row named algo, or NULL. */
const moq_export_linear_row *moq_export_linear_find(const char *algo);

/* Tensor descriptors for a weight [N, K] (data left NULL). Fails with MOQ_ERR_INVALID_ARG, naming
 * `where` (the linear's name), when N or K is not positive or K is not a multiple of k_multiple. */
moq_status moq_export_linear_plan(const moq_export_linear_row *row, const char *where, int64_t N,
                                  int64_t K, const moq_export_args *a,
                                  moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS], int *count, moq_error *err);

/* Exports W [N, K] into the data of t[0..count), which must be what moq_export_linear_plan gave
 * for the same row and shape, each with data of nbytes bytes. */
moq_status moq_export_linear_run(const moq_export_linear_row *row, const char *where, const float *W,
                                 int64_t N, int64_t K, const moq_export_args *a,
                                 moq_export_tensor *t, int count, moq_error *err);

#endif
