/* model.h — the decoder runner behind moq.h "models" (model.c). Shape letters used in model.c:
 *   M tokens in a step, H hidden, A attention heads, KV key/value heads, D head dim,
 *   I intermediate, V vocabulary, T cache positions (ctx), L layers.
 * The architecture table (one row per config.json `architectures` value) is in model.c.
 * Tested by tests/model/test_model.c.
 */
#ifndef MOQ_MODEL_MODEL_H
#define MOQ_MODEL_MODEL_H

#include "moq.h"
#include "quant/calib.h"
#include "model/kv_cache.h"

/* The architecture table's names, in table order: NULL past the last (`moq help archs` lists them). */
const char *moq_model_arch_name(size_t i);
size_t moq_model_arch_count(void);
/* The refusal of an architecture not in the table (name, row count): short enough for moq_error.msg
 * however many rows are added; the full list is `moq help archs`. */
#define MOQ_ARCH_UNSUPPORTED_FMT "architecture \"%s\" is not supported, expected one of the %zu that `moq help archs` lists"
/* True when config.json architectures[0] == name is a row of the architecture table (moq run
 * accepts it); inspect and check use it to warn before run refuses. */
bool moq_model_architecture_supported(const char *name);
/* What `moq run` refuses in config.json beyond the architecture name, found without weights: the
 * family's config reader (Gemma 4: per-layer embeddings, KV-shared layers, the MoE block, ...). MOQ_OK
 * for a row without such refusals; inspect and check use it as they use the above. */
moq_status moq_model_config_check(const moq_checkpoint *c, moq_error *err);
/* The rope_theta an architecture's transformers config class uses when config.json has none
 * (its documented default); false when the architecture has none here. */
bool moq_model_rope_theta_default(const char *architecture, double *theta, const char **config_class);

/* Called with rows x cols f32 values (row-major, contiguous) at each tap of layer `layer`; expert is
 * the global expert id for MOQ_TAP_EXPERT_IN / MOQ_TAP_EXPERT_DOWN_IN, else -1. Expert taps may come
 * from the MoE layer's worker threads, one at a time; x is borrowed for the call. */
typedef void (*moq_model_observer)(void *user, int64_t layer, moq_model_tap tap, int64_t expert, const float *x,
                                   int64_t rows, int64_t cols);
/* Sets (fn != NULL) or clears the observer. Caller-owned: the model keeps only the pointers; when
 * unset the forward pass tests one pointer per tap and does nothing else. */
void moq_model_set_observer(moq_model *m, moq_model_observer fn, void *user);

/* Max calibration (model/calibrate.c): runs the unquantized model at src_dir over ids[0..n_ids) in
 * windows of up to 512 tokens (the cache reset between windows) and records the amax at every tap.
 * n_threads <= 0: OpenMP's default. NaN or Inf at a tap is MOQ_ERR_INVALID_ARG naming the layer. */
moq_status moq_calibrate(moq_calib *out, const char *src_dir, const int32_t *ids, int64_t n_ids, int n_threads,
                         moq_error *err);
/* Tokenizes text[0..len) with src_dir's tokenizer (special tokens added as its post-processor does,
 * Hugging Face's default), keeps the first max_tokens ids (0: all; then only a prefix of 64 bytes per
 * token is tokenized) and calls moq_calibrate. */
moq_status moq_calibrate_text(moq_calib *out, const char *src_dir, const char *text, size_t len, int64_t max_tokens,
                              int n_threads, moq_error *err);

/* The row-plan forward behind moq_model_prefill and the batch API (batch.c): M <= moq_model_chunk
 * rows, row i the token tok[i] at position pos[i] of a sequence whose cache slots are given by its
 * block table tabs[i] (page ids, `page` positions each: slot = tabs[i][p / page] * page + p % page;
 * tabs NULL or tabs[i] NULL: slot = p) in kv (NULL: the model's own cache). Rows of one sequence
 * come in position order; every position a row attends to is written before (earlier step) or in
 * this step. The logits of rows lrows[0..nl) are left in order in moq_model_step_logits. GQA
 * architectures only (moq_model_batchable) when rows belong to more than one sequence. */
moq_status moq_model_forward_rows(moq_model *m, moq_kv_cache *kv, int64_t page, const int32_t *tok, const int64_t *pos,
                                  const int32_t *const *tabs, int64_t M, const int64_t *lrows, int64_t nl, moq_error *err);
const float *moq_model_step_logits(const moq_model *m);  /* f32 [nl, V] of the last forward_rows */
int64_t moq_model_chunk(const moq_model *m);              /* rows per forward (workspace)        */
bool moq_model_batchable(const moq_model *m);             /* no MLA, no recurrent (DeltaNet) layers */
const moq_kv_cache *moq_model_kv(const moq_model *m);     /* the single-sequence cache: encoding, scales */
const char *moq_model_path(const moq_model *m);           /* the checkpoint directory (messages)  */

#endif
