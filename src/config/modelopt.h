/* modelopt.h — the internals of moq_qconfig (public API in moq.h) and the compat rule switches.
 *
 * Every place where vLLM's and SGLang's ModelOpt modules differ is one field of moq_compat_rules;
 * moq_compat_table has one row per profile. Parsing (modelopt.c) and resolution (resolve.c) read
 * the switches and never test the profile itself. docs/COMPAT.md lists every switch.
 */
#ifndef MOQ_CONFIG_MODELOPT_H
#define MOQ_CONFIG_MODELOPT_H

#include <cjson/cJSON.h>

#include "config/glob.h"
#include "core/strmap.h"
#include "core/notes.h"
#include "moq.h"
#include "scheme/scheme.h"

typedef enum moq_kv_rules {
    MOQ_KV_VLLM = 0,  /* flat layout: only a kv_cache_scheme dict {type float, num_bits 8} -> FP8      */
    MOQ_KV_SGLANG,    /* per config class: FP8 dict/8 else kv_cache_quant_algo; FP4 dict/str/"auto"   */
    MOQ_KV_MOQ,       /* dict 8 -> FP8, 4 -> NVFP4; strings FP8/FLOAT8/FP4/FLOAT4/NVFP4; else kv_cache_quant_algo */
} moq_kv_rules;

/* What a fused FP8 per-tensor layer does with its shards' weight scales (NUMERICS §5.1). */
typedef enum moq_fp8_fused {
    MOQ_FP8_FUSED_KEEP = 0,       /* moq: keep per-shard scales (epilogue per row), codes verbatim   */
    MOQ_FP8_FUSED_REQUANT_DIFFER, /* vLLM: requantize to the max scale only when the scales differ  */
    MOQ_FP8_FUSED_REQUANT_ALWAYS, /* SGLang: requantize to the max scale always (fp16 step included) */
} moq_fp8_fused;

typedef struct moq_compat_rules {
    const char *name;
    /* ---- parsing ---- */
    bool nested_if_quantization_key; /* vLLM: "quantization" present -> nested; SGLang: flat when quant_algo is */
    bool algo_upper;              /* vLLM upper-cases quant_algo; SGLang compares as written             */
    bool sglang_algo_set;         /* SGLang: top level FP8 (any algo containing "FP8"), NVFP4, MIXED only */
    bool algo_alias_top;          /* FP8_BLOCK_SCALES accepted as a top-level quant_algo                  */
    moq_kv_rules kv;
    bool kv_must_be_string;       /* vLLM: a non-string kv_cache_quant_algo is an error                   */
    bool kv_python_truthy;        /* SGLang: a non-string kv_cache_quant_algo is kept; truthy = KV method  */
    bool exclude_null_is_error;   /* vLLM: exclude_modules/ignore null is "must be a list"               */
    bool group_size_truncate;     /* vLLM int(): 16.5 -> 16, "16" -> 16                                    */
    bool group_size_string;       /* vLLM int("16") accepts a string holding an integer                   */
    bool group_size_int_literal;  /* SGLang isinstance(v, int): 16.0 is a float, not a group size         */
    bool group_size_from_groups;  /* flat layout: config_groups[first].weights.group_size (SGLang FP4)     */
    bool group_size_consistent;   /* every group_size in the file must agree (SGLang common_group_size)   */
    bool group_size_required_fp4; /* SGLang: NVFP4 without any group_size is an error                     */
    bool nested_required_fields;  /* vLLM: NVFP4/MXFP8 hf_quant_config.json needs its required keys       */
    bool nvfp4_wonly_groups;      /* vLLM: NVFP4 whose config_groups all lack input_activations = W4A16    */
    bool mxfp8_minimax;           /* vLLM: quant_method "mxfp8" + ignored_layers (no quant_algo) = MXFP8   */
    bool hybrid_fp8_nvfp4;        /* SGLang: quant_method "fp8" + moe_quant_algo NVFP4                     */
    bool mp_block_size_check;     /* vLLM: one group_size over all block-FP8 layers                        */
    bool mp_group_from_layers;    /* SGLang: NVFP4 group size always from quantized_layers                 */
    bool mp_unknown_algo_error;   /* moq: an unknown per-layer algo is a config error                      */
    bool moq_only_algos;          /* moq: algos neither seed accepts (scheme rows moq_only: NVFP4_AWQ)     */
    /* ---- resolution ---- */
    bool ex_substring;            /* vLLM: an exclude entry that is a substring of the prefix             */
    bool ex_fnmatch;              /* vLLM: fnmatch over the prefix                                         */
    bool ex_fnmatch_stripped;     /* moq: fnmatch also over the prefix without "language_model."           */
    bool ex_regex_parts;          /* SGLang: `*`->`.*` full match of the prefix and of each dotted part    */
    bool ex_fused_patterns;       /* SGLang: q_a_proj/... inside fused_qkv_a_proj_with_mqa                 */
    bool ex_skipped_dot_boundary; /* SGLang (#23467): an entry matches the prefix itself, a dotted suffix
                                     ("mlp.gate"), or, ending in ".", every module under it            */
    bool ex_skipped_linear_only;  /* SGLang: exact/packed is_layer_skipped only for linears (vLLM: all)   */
    bool ex_skipped_builtin_fused;/* SGLang: qkv_proj / gate_up_proj shards without a packed mapping      */
    bool vision_rule;             /* vLLM: vision_tower / vision_model / vit_large_projector unquantized  */
    bool vision_moe_linear;       /* vLLM: the vision rule hands MoE layers an unquantized *linear* method */
    bool attention_always_kv;     /* vLLM single-algo configs: attention always gets the KV method        */
    bool kv_auto_is_kv;           /* SGLang: kv algo "auto" is truthy, attention gets the KV method       */
    bool pbwo_block_moe;          /* moq: FP8_PB_WO experts are block FP8 (vLLM single-algo: per-tensor)   */
    bool pcpt_moe_channel;        /* moq: FP8_PER_CHANNEL_PER_TOKEN experts are per-channel FP8 (fp8_pcpt_moe);
                                     vLLM single-algo: ModelOptFp8MoEMethod (per-tensor fp8_moe), mixed: none */
    bool mp_experts_parent;       /* vLLM: "<x>.experts" falls back to keys under "<x>."                   */
    bool mp_builtin_shards;       /* vLLM: qkv_proj / gate_up_proj shards without a packed mapping        */
    bool mp_resolve_first;        /* SGLang: per-layer algo resolved (and may fail) before exclusion      */
    bool mp_all_linear_algos;     /* vLLM: every linear algo in mixed precision; SGLang: FP8/NVFP4/W4A16  */
    bool mp_attention_kv;         /* both: mixed precision attention gets the KV method only if kv is set */
    /* ---- loading (scheme/load.c) ---- */
    moq_fp8_fused fp8_fused;      /* fused FP8 per-tensor shards: keep / requantize (see the enum)       */
    bool nvfp4_fused_ws2_max;     /* both engines: one weight_scale_2 = max over the shards (codes kept) */
} moq_compat_rules;

extern const moq_compat_rules moq_compat_table[MOQ_COMPAT_COUNT];

typedef enum moq_qc_form { MOQ_QC_SINGLE = 0, MOQ_QC_MIXED, MOQ_QC_HYBRID } moq_qc_form;

typedef struct moq_qlayer {
    char             *name;
    char             *algo;        /* upper-cased as both engines do                    */
    int64_t           group_size;  /* 0 = absent                                        */
    const moq_scheme *scheme;      /* NULL when the algo is not a scheme row            */
} moq_qlayer;

struct moq_qconfig {
    moq_compat              profile;
    const moq_compat_rules *r;
    char                    source[320];
    const char             *quant_method;   /* static                                        */
    char                   *quant_algo;
    moq_qc_form             form;
    const moq_scheme       *scheme;         /* SINGLE: the algo; HYBRID: the linear scheme   */
    const moq_scheme       *moe_scheme;     /* HYBRID: the experts' scheme                   */
    char                   *moe_quant_algo;
    char                   *kv;             /* NULL = none; a non-string value as JSON text  */
    int64_t                 group_size;     /* effective (see moq_qconfig_group_size)        */
    int64_t                 block_size;     /* MIXED: block-FP8 group size (128 default)     */
    char                  **exclude;
    int                     n_exclude;
    moq_glob_regex         *exclude_re;     /* ex_regex_parts: each pattern compiled (SGLang) */
    moq_qlayer             *layers;
    int                     n_layers;
    moq_strmap              layer_map;      /* name -> index                                 */
    moq_notes               notes;   /* which file was used, disagreements (moq_qconfig_note_at) */
};

/* Adds a note (printf-style) to q; silently drops it on allocation failure. */
void moq_qconfig_note(moq_qconfig *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Index of a quantized_layers entry or -1. */
int  moq_qconfig_layer_find(const moq_qconfig *q, const char *name);

#endif
