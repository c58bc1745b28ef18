/* modules.h — a checkpoint's tensors grouped into modules (tensor name minus its last part), each
 * classified by kind, resolved against the quantization config, and validated against its scheme's
 * tensor contract (scheme/scheme.c). Used by `moq inspect` (per-module rows) and `moq check`
 * (every problem, not just the first). Tested by tests/config/test_check.c. */
#ifndef MOQ_CONFIG_MODULES_H
#define MOQ_CONFIG_MODULES_H

#include "config/modelopt.h"
#include "core/notes.h"
#include "moq.h"

typedef enum moq_module_kind { MOQ_MOD_LINEAR = 0, MOQ_MOD_LM_HEAD, MOQ_MOD_EXPERT, MOQ_MOD_EMBEDDING, MOQ_MOD_OTHER } moq_module_kind;

typedef struct moq_module {
    char            *name;          /* "model.layers.0.self_attn.q_proj"                        */
    moq_module_kind  kind;
    char            *resolve_prefix;/* what is resolved: the name, or "<...>.experts" for experts */
    moq_resolution   res;
    bool             resolved;      /* false: resolution failed (a problem says why)            */
    size_t          *tensors;       /* indices into moq_checkpoint_tensor_at                     */
    int              n_tensors;
    int              n_expected;    /* tensors the contract names (required + present optional) */
    int              n_found;       /* of those, present                                         */
    uint64_t         bytes;
} moq_module;

typedef struct moq_problem {
    moq_status code;                /* MOQ_ERR_TENSOR or MOQ_ERR_CONFIG                         */
    char       where[256];          /* tensor or module name                                    */
    char       msg[512];
} moq_problem;

typedef struct moq_modules {
    moq_module  *mods;
    int          n;
    moq_problem *probs;
    int          n_probs;
    int          cap_probs;
    moq_notes    notes;             /* accepted, worth saying (FP8 KV cache without scales)     */
} moq_modules;

const char *moq_module_kind_name(moq_module_kind k);

/* True when the checkpoint carries a quantization config (hf_quant_config.json, or config.json with
 * a quantization_config object); false means an unquantized checkpoint. */
bool moq_checkpoint_has_qconfig(const moq_checkpoint *c); /* "linear", "lm_head", "moe", "embedding", "other" */

/* Groups and resolves every module of c under q (q NULL: an unquantized checkpoint, every module
 * unquantized). Resolution errors become problems. Allocation failure is the only error. */
moq_status moq_modules_build(moq_modules *out, const moq_checkpoint *c, const moq_qconfig *q, moq_error *err);
/* Validates every module against its contract, fused shards against each other, and (values) every
 * scale tensor for NaN, Inf, zero and negative entries. Appends problems. */
moq_status moq_modules_check(moq_modules *m, const moq_checkpoint *c, const moq_qconfig *q, bool values, moq_error *err);
void       moq_modules_free(moq_modules *m);

/* Validates module `name`, resolved as res, against its scheme's tensor contract (or the unquantized
 * one): presence, dtype, shape in N, K and group, K divisibility (one problem naming the weight),
 * quantized tensors under an unquantized resolution and a float weight under a quantized one.
 * `tensors` (may be NULL) lists the module's tensor indices for the extra-tensor check. Appends
 * problems to m (only m->probs is used). The one contract validator: `moq check` and the loader
 * (scheme/load.c) both call it. */
void moq_module_validate(moq_modules *m, const moq_checkpoint *c, const char *name, const moq_resolution *res,
                         const size_t *tensors, int n_tensors, int *expected, int *found);
/* Scans a scale tensor for NaN, Inf, zero and negative values: one problem naming it, with counts. */
void moq_tensor_check_scale_values(moq_modules *m, const moq_tensor *t);
/* kv_cache_quant_algo -> KV cache encoding, one table row each (NULL / "auto": not found).
 * scaled: the encoding needs per-layer k_scale / v_scale. */
bool moq_kv_algo_find(const char *algo, moq_elem *elem, bool *scaled);
/* Per-layer FP8 KV-cache scales of decoder layers 0..L-1 (NUMERICS §8, §12), under the names in
 * modules.c's table. Every layer has both: k, v f32 [L] filled (either may be NULL). No layer has
 * any: ModelOpt's default fp8_cast export, which means scale 1.0: filled with 1.0 and *defaulted
 * set. Some layers have them and others not, or a value that is not finite and > 0:
 * MOQ_ERR_TENSOR naming the first missing tensor (or the bad one). `moq check`, `inspect` and the
 * model runner all decide through this function. */
moq_status moq_kv_scales_read(const moq_checkpoint *c, int64_t L, float *k, float *v, bool *defaulted, moq_error *err);
/* The one note said when *defaulted (for the CLI and the model's warnings). */
#define MOQ_KV_SCALES_DEFAULT_NOTE \
    "the config declares an FP8 KV cache (kv_cache_quant_algo FP8) and no layer has k_scale/v_scale tensors: " \
    "scale 1.0 is used, as ModelOpt's default fp8_cast export means and vLLM and SGLang load it"
/* Scans a tensor's payload for elements that are not finite: e4m3 codes 0x7F/0xFF, e8m0 0xFF,
 * bf16/f16/f32 NaN and Inf (decoded through the format table; integer and packed-FP4 dtypes have
 * none). One problem naming the tensor, the counts and the first index (and its code). False when
 * it found any. */
bool moq_tensor_check_payload_values(moq_modules *m, const moq_tensor *t);
/* Payload scan of every tensor the scale scan (moq_modules_check with values) does not cover;
 * progress (may be NULL) is called after each module with bytes scanned of the total. */
void moq_modules_check_payloads(moq_modules *m, const moq_checkpoint *c, moq_progress_fn progress, void *user);
/* The fused projections checkpoints store as separate shards (qkv_proj, gate_up_proj, w13). */
const moq_packed *moq_modules_fused_groups(int *n);

#endif
