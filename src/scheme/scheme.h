/* scheme.h — the scheme table: one row per ModelOpt quant_algo with its weight and activation keys
 * (scheme/quant_key.h, so the kernel registry can be looked up from a row), the method it becomes
 * for a linear and for a MoE layer, and its tensor contract (names, dtypes, shapes in N, K, group).
 *
 * This table is the only place quant_algo strings appear (STYLE.md §6). MIXED_PRECISION is not a
 * scheme: config/resolve.c maps each layer to one of these rows.
 * Tested by tests/config/test_scheme.c (contracts vs the seeds' create_weights shapes).
 */
#ifndef MOQ_SCHEME_SCHEME_H
#define MOQ_SCHEME_SCHEME_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"
#include "scheme/quant_key.h"

/* The method vocabulary of the issue (one name per row of moq_method_table). */
typedef enum moq_method {
    MOQ_METHOD_NONE = 0,
    MOQ_METHOD_UNQUANTIZED_LINEAR,
    MOQ_METHOD_FP8_LINEAR,
    MOQ_METHOD_FP8_PCPT_LINEAR,
    MOQ_METHOD_FP8_PBWO_LINEAR,
    MOQ_METHOD_NVFP4_LINEAR,
    MOQ_METHOD_W4A16_NVFP4_LINEAR,
    MOQ_METHOD_MXFP8_LINEAR,
    MOQ_METHOD_FP8_MOE,
    MOQ_METHOD_FP8_BLOCK_MOE,
    MOQ_METHOD_NVFP4_MOE,
    MOQ_METHOD_W4A16_NVFP4_MOE,
    MOQ_METHOD_MXFP8_MOE,
    MOQ_METHOD_KV_CACHE,
    MOQ_METHOD_FP8_PCPT_MOE,
    MOQ_METHOD_NVFP4_AWQ_LINEAR,
    MOQ_METHOD_NVFP4_AWQ_MOE,
    MOQ_METHOD_COUNT
} moq_method;
const char *moq_method_name(moq_method m);

/* Shape symbols of a contract. N = output features (rows), K = input features, G = group size. */
typedef enum moq_dim {
    MOQ_DIM_END = 0,   /* terminates a shape: {MOQ_DIM_END} is a scalar                   */
    MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_K_HALF, MOQ_DIM_K_DIV_G, MOQ_DIM_N_BLK128, MOQ_DIM_K_BLK128,
    MOQ_DIM_ONE,
    MOQ_DIM_N_ROWBLK   /* N/r for any r dividing N: a scale stored once per r rows (MXFP8 row blocks) */
} moq_dim;

#define MOQ_RULE_MAX_DIMS 4
/* One tensor of a contract: <module>.<suffix>. A second accepted shape (alt) covers the forms
 * ModelOpt writes interchangeably (scalar or [1]; FP8_PB_WO scale 4-D or 2-D); scalar_if_one adds
 * the 0-d form of a one-element shape (FP8_PB_WO weight of a single 128x128 block, NUMERICS §12). */
typedef struct moq_tensor_rule {
    const char *suffix;
    moq_dtype   dtype, dtype_alt;        /* dtype_alt = dtype when only one is accepted         */
    moq_dim     shape[MOQ_RULE_MAX_DIMS + 1];
    moq_dim     shape_alt[MOQ_RULE_MAX_DIMS + 1]; /* {MOQ_DIM_N_BLK128...}; unused if alt_used=false */
    bool        alt_used;
    bool        optional;                /* may be absent (legacy or per-layer)                 */
    bool        scalar_if_one;           /* a 0-d tensor is accepted where the shape holds one
                                            element (ModelOpt's FP8_PB_WO single-block scale)     */
    const char *note;                    /* quoted in messages                                   */
} moq_tensor_rule;

typedef struct moq_scheme {
    const char            *algo;      /* quant_algo as ModelOpt writes it                       */
    const char            *alias;     /* accepted alternative spelling, or NULL                 */
    const char            *owner;     /* vLLM quant_method: modelopt, modelopt_fp4, modelopt_mxfp8 */
    const moq_quant_key   *w, *a;     /* weight and activation keys (kernel registry lookup)    */
    moq_method             linear;    /* method for a linear / lm_head layer                    */
    moq_method             moe;       /* method for routed experts                              */
    int64_t                group;     /* group size default (0 = none)                          */
    const moq_tensor_rule *contract;  /* per linear (and per expert projection), {0}-terminated */
    bool                   sglang_mixed; /* SGLang's MIXED_PRECISION dispatches this algo         */
    bool                   moq_only;  /* neither seed accepts it (compat rule moq_only_algos)      */
    const char            *summary;   /* one line for messages                                  */
} moq_scheme;

/* Rows in table order; count; lookup by algo or alias (case_insensitive: compare upper-cased). */
int               moq_scheme_count(void);
const moq_scheme *moq_scheme_at(int i);
const moq_scheme *moq_scheme_find(const char *algo, bool case_insensitive);
/* The row whose linear or moe method is m (NULL for none/unquantized/kv_cache). */
const moq_scheme *moq_scheme_for_method(moq_method m);
/* Contract of an unquantized linear: weight BF16|F16|F32 [N, K], optional bias. */
const moq_tensor_rule *moq_scheme_unquantized_contract(void);
/* The rule of a {0}-terminated contract (NULL allowed) for one tensor suffix, or NULL. */
const moq_tensor_rule *moq_contract_rule(const moq_tensor_rule *contract, const char *suffix);
/* "FP8, FP8_PER_CHANNEL_PER_TOKEN, ..." into buf (for "not one of ..." messages). */
const char *moq_scheme_list(char *buf, size_t n);
/* The same without the moq_only rows (what the seeds list). */
const char *moq_scheme_list_engines(char *buf, size_t n);

/* Evaluates a shape symbol for N, K, G; -1 when not integral (K not divisible). */
int64_t moq_dim_eval(moq_dim d, int64_t N, int64_t K, int64_t G);
/* Writes "[N, K/16]"-style text of a rule shape into buf. */
const char *moq_dim_str(const moq_dim *shape, char *buf, size_t n);

#endif
