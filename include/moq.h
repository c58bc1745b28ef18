/* moq.h — load NVIDIA ModelOpt quantized checkpoints and run them.
 *
 * If a symbol is not declared in this file it is not part of the API.
 * Every function that can fail returns moq_status and, if `err` is not NULL, fills it.
 * Every *_free accepts NULL. Strings returned are borrowed and live as long as the handle
 * they came from. The library never prints and never exits; warnings that a caller may want
 * to show are kept on the handle they concern (moq_checkpoint_warning).
 *
 * Shape notation used in comments: `u8 [N, K/2]` = row-major, N rows of K/2 bytes.
 */
#ifndef MOQ_H
#define MOQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MOQ_BUILDING_LIBRARY)
#define MOQ_API __attribute__((visibility("default")))
#else
#define MOQ_API
#endif

/* ---- version --------------------------------------------------------------------------------- */
#define MOQ_VERSION_MAJOR 0
#define MOQ_VERSION_MINOR 1
#define MOQ_VERSION_PATCH 0
MOQ_API uint32_t    moq_version(void);        /* == (MAJOR<<16 | MINOR<<8 | PATCH) */
MOQ_API const char *moq_version_string(void); /* "0.1.0", static */

/* ---- status and errors ----------------------------------------------------------------------- */
typedef enum moq_status {   /* append only; never renumber. The CLI's exit code is this value. */
    MOQ_OK = 0,
    MOQ_ERR_INVALID_ARG,    /* 1: caller passed something impossible                   */
    MOQ_ERR_IO,             /* 2: open/read/mmap/write failed                          */
    MOQ_ERR_FORMAT,         /* 3: a file is malformed (safetensors, JSON)              */
    MOQ_ERR_CONFIG,         /* 4: JSON is valid but says something inconsistent        */
    MOQ_ERR_TENSOR,         /* 5: tensor missing, wrong dtype or wrong shape, bad value */
    MOQ_ERR_UNSUPPORTED,    /* 6: valid, but no kernel/device can run it               */
    MOQ_ERR_NOMEM,          /* 7: an allocation failed or a resource bound was hit     */
    MOQ_ERR_DEVICE,         /* 8: CUDA runtime error                                   */
    MOQ_ERR_INTERNAL,       /* 9: a bug in moq: please report with src_file/src_line   */
    MOQ_STATUS_COUNT
} moq_status;

typedef struct moq_error {
    moq_status  code;
    char        where[256]; /* file, tensor or layer the error is about ("" if none)          */
    char        msg[512];   /* what was found and what was expected; lower case, no period */
    const char *src_file;   /* moq source location, for bug reports                        */
    int         src_line;
} moq_error;

/* Static name of a status ("MOQ_ERR_FORMAT"), never NULL. */
MOQ_API const char *moq_status_str(moq_status s);
/* One-line meaning of a status, never NULL. */
MOQ_API const char *moq_status_meaning(moq_status s);
/* Writes "where: msg" (or "msg" when where is empty) into buf; returns snprintf's length. */
MOQ_API int moq_error_format(const moq_error *e, char *buf, size_t n);

/* ---- bit formats ----------------------------------------------------------------------------- */
/* Element encodings of quantized values and scales (src/format/format.c holds one row each). */
typedef enum moq_elem {
    MOQ_ELEM_NONE = 0,
    MOQ_ELEM_F32,
    MOQ_ELEM_BF16,
    MOQ_ELEM_F16,
    MOQ_ELEM_E4M3,  /* float8_e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448      */
    MOQ_ELEM_E8M0,  /* float8_e8m0fnu: 2^(c-127), 0xFF = NaN, no zero, no sign        */
    MOQ_ELEM_E2M1,  /* float4_e2m1fn: {0,.5,1,1.5,2,3,4,6}, two per byte, low nibble first */
    MOQ_ELEM_COUNT
} moq_elem;

/* Rounding/overflow mode of an encoder. Which reference each matches is in docs/FORMATS.md and
 * the table in src/format/format.c; tests/unit/test_format_golden.c checks each claim. */
typedef enum moq_round {
    MOQ_ROUND_RNE = 0,   /* round to nearest even, overflow as the reference cast does:
                            e4m3: |x| > 464 and ±inf -> NaN (torch CPU/CUDA, ml_dtypes);
                            e8m0: nearest power of two, ties up, overflow -> NaN, sign ignored
                                  (torch; ml_dtypes agrees on positive inputs);
                            bf16/f16: IEEE RNE, overflow -> ±inf (torch)                        */
    MOQ_ROUND_RNE_SAT,   /* round to nearest even, saturate to ±max, NaN stays NaN:
                            e4m3: clamp ±448 then cast (every quantizer, cvt.rn.satfinite);
                            e2m1: ±6 (ml_dtypes, ModelOpt, cvt.rn.satfinite.e2m1x2)             */
    MOQ_ROUND_UP_SAT,    /* e8m0 only: ceil to a power of two of |x|, saturating at 2^127, NaN ->
                            0xFF (CUDA cvt.rp.satfinite.ue8m0x2: MX scale selection)            */
    MOQ_ROUND_COUNT
} moq_round;

/* Name ("e4m3"), bits per element, largest finite value (0 for e8m0: see FORMATS.md). */
MOQ_API const char *moq_elem_name(moq_elem e);
MOQ_API int         moq_elem_bits(moq_elem e);

/* Bulk conversion, f32 -> codes. For E2M1 `out` holds (n+1)/2 bytes, element 2i in the low nibble.
 * `n_threads` <= 0 uses all. Chooses the widest vector path the CPU and OS support (cpuid+xgetbv).
 * Unsupported (elem, mode) pairs return MOQ_ERR_INVALID_ARG. */
MOQ_API moq_status moq_elem_encode_f32(moq_elem e, moq_round mode, const float *in, void *out,
                                       size_t n, int n_threads, moq_error *err);
/* Bulk conversion, codes -> f32 (exact for every format here). */
MOQ_API moq_status moq_elem_decode_f32(moq_elem e, const void *in, float *out, size_t n,
                                       int n_threads, moq_error *err);

/* ---- CPU features ---------------------------------------------------------------------------- */
enum {
    MOQ_CPU_AVX2      = 1u << 0, /* avx2 + fma + f16c, with OS support for ymm state          */
    MOQ_CPU_AVX512    = 1u << 1, /* avx512 f+bw+dq+vl, with OS support for zmm/opmask state   */
    MOQ_CPU_AVX512VNNI = 1u << 2,
    MOQ_CPU_AVX512BF16 = 1u << 3,
};
/* Features detected (cpuid + xgetbv) and allowed (MOQ_CPU_MASK env var, e.g. "0" forces the
 * portable path, "1" allows AVX2 only). Computed once; thread-safe. */
MOQ_API uint32_t    moq_cpu_features(void);
MOQ_API const char *moq_cpu_features_str(void); /* "avx2 avx512 avx512vnni avx512bf16" */

/* ---- tensors --------------------------------------------------------------------------------- */
typedef enum moq_dtype {  /* safetensors dtype strings, one row each in io/safetensors.c */
    MOQ_DT_BOOL = 0, MOQ_DT_U8, MOQ_DT_I8, MOQ_DT_I16, MOQ_DT_U16, MOQ_DT_F16, MOQ_DT_BF16,
    MOQ_DT_I32, MOQ_DT_U32, MOQ_DT_F32, MOQ_DT_F64, MOQ_DT_I64, MOQ_DT_U64,
    MOQ_DT_F8_E4M3, MOQ_DT_F8_E5M2, MOQ_DT_F8_E8M0, MOQ_DT_F4,
    MOQ_DT_COUNT
} moq_dtype;

MOQ_API const char *moq_dtype_name(moq_dtype d);  /* "F8_E4M3" */
MOQ_API int         moq_dtype_bits(moq_dtype d);  /* 4 for F4, 8 for U8, ... */

#define MOQ_MAX_DIMS 8

/* A view of one tensor inside a mapped shard. `data` is borrowed from the checkpoint. */
typedef struct moq_tensor {
    const char *name;
    moq_dtype   dtype;
    int         ndim;                  /* 0 = scalar */
    int64_t     shape[MOQ_MAX_DIMS];
    uint64_t    nelem;
    uint64_t    nbytes;
    const void *data;                  /* NULL only for a zero-byte tensor */
    int         shard;                 /* index into moq_checkpoint_shard_name */
} moq_tensor;

/* ---- checkpoints ----------------------------------------------------------------------------- */
typedef struct moq_checkpoint moq_checkpoint; /* opaque: an opened HF checkpoint directory */

/* Architecture fields of config.json (text_config is used when the top level lacks them).
 * Integers are 0 and strings "" where the file does not say. */
typedef struct moq_arch {
    char    architecture[96];      /* architectures[0]                      */
    char    model_type[64];
    char    torch_dtype[16];       /* torch_dtype or dtype: "bfloat16" ...   */
    int64_t hidden_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;   /* defaults to num_attention_heads        */
    int64_t head_dim;              /* defaults to hidden_size / heads        */
    int64_t intermediate_size;
    int64_t moe_intermediate_size;
    int64_t num_experts;           /* num_experts / num_local_experts / n_routed_experts */
    int64_t num_experts_per_tok;
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double  rope_theta;
    char    rope_scaling_type[32]; /* rope_scaling.rope_type or .type; "" when none */
    double  rope_scaling_factor;
    double  rms_norm_eps;
    bool    tie_word_embeddings;
    /* Where rope_theta and the scaling settings came from: "rope_parameters" (transformers 5),
     * "rope_theta" (top level, older files), "rope_scaling" (theta inside the scaling object), each
     * possibly under "text_config."; "" when config.json does not say (rope_theta is then 0 and
     * the runner uses the architecture's documented default, or refuses). */
    char    rope_theta_key[48];
    char    rope_params_key[48];   /* the object the rope type, factor and type parameters come from */
} moq_arch;

typedef struct moq_checkpoint_opts {
    bool require_config;   /* config.json must exist (default true for directories)  */
    int  reserved[8];
} moq_checkpoint_opts;
MOQ_API moq_checkpoint_opts moq_checkpoint_opts_default(void);

/* Opens `path`: a checkpoint directory (config.json, hf_quant_config.json, and either
 * model.safetensors.index.json + shards, model.safetensors, or *.safetensors), or a single
 * .safetensors file. Maps every shard read-only and validates every header; reads no tensor data.
 * opts may be NULL. On failure *out is NULL and err names the file or tensor. */
MOQ_API moq_status moq_checkpoint_open(moq_checkpoint **out, const char *path,
                                       const moq_checkpoint_opts *opts, moq_error *err);
MOQ_API void       moq_checkpoint_free(moq_checkpoint *c);

MOQ_API const char *moq_checkpoint_path(const moq_checkpoint *c);
MOQ_API int         moq_checkpoint_shard_count(const moq_checkpoint *c);
MOQ_API const char *moq_checkpoint_shard_name(const moq_checkpoint *c, int i); /* relative name */
MOQ_API uint64_t    moq_checkpoint_shard_size(const moq_checkpoint *c, int i); /* file bytes    */
MOQ_API int         moq_checkpoint_shard_tensor_count(const moq_checkpoint *c, int i);
/* Number of tensors, in a stable order (by shard, then by data offset). */
MOQ_API size_t      moq_checkpoint_tensor_count(const moq_checkpoint *c);
MOQ_API const moq_tensor *moq_checkpoint_tensor_at(const moq_checkpoint *c, size_t i);
/* Lookup by exact name in constant time; NULL when absent. */
MOQ_API const moq_tensor *moq_checkpoint_tensor(const moq_checkpoint *c, const char *name);
/* config.json fields; NULL when the checkpoint has no config.json. */
MOQ_API const moq_arch   *moq_checkpoint_arch(const moq_checkpoint *c);
/* Raw JSON text of a file in the checkpoint ("config.json", "hf_quant_config.json", ...) or NULL. */
MOQ_API const char       *moq_checkpoint_json_text(const moq_checkpoint *c, const char *file);
/* Safetensors __metadata__ of shard i: count and key/value pairs. */
MOQ_API int         moq_checkpoint_metadata_count(const moq_checkpoint *c, int shard);
MOQ_API bool        moq_checkpoint_metadata_at(const moq_checkpoint *c, int shard, int i,
                                               const char **key, const char **value);
/* Warnings collected while opening (never errors): e.g. a tensor in a shard that the index omits. */
MOQ_API int         moq_checkpoint_warning_count(const moq_checkpoint *c);
MOQ_API const char *moq_checkpoint_warning(const moq_checkpoint *c, int i);

/* ---- tokenizer and sampling ------------------------------------------------------------------ */
/* BPE tokenizers from a Hugging Face tokenizer.json (byte-level: GPT-2, Llama-3/4, Qwen, DeepSeek-V3,
 * gpt-oss; SentencePiece-style byte fallback: Llama-2, Gemma, Mistral), chat formatting without a
 * template engine, and token sampling (src/model/). */
typedef struct moq_tokenizer moq_tokenizer; /* opaque: a loaded tokenizer.json; immutable once open */

/* Opens `path`: a model directory holding tokenizer.json, or a tokenizer.json file. Side files in
 * the same directory are read when present: tokenizer_config.json (bos_token, eos_token,
 * chat_template), chat_template.jinja (when tokenizer_config.json has no template), config.json and
 * generation_config.json (bos_token_id, eos_token_id). A chat template of another family leaves the
 * chat format MOQ_CHAT_NONE (moq_chat_template_from_config says why).
 * Accepted: model.type "BPE" (byte-level, or SentencePiece-style with byte_fallback / unk), the
 * normalizers, pre-tokenizers (Split with any regex PCRE2 compiles), decoders and added-token flags
 * docs/COMPAT.md lists.
 * Anything else is MOQ_ERR_UNSUPPORTED naming the key; a malformed file is MOQ_ERR_FORMAT or
 * MOQ_ERR_CONFIG naming "tokenizer.json" and the key. On failure *out is NULL. */
MOQ_API moq_status moq_tokenizer_open(moq_tokenizer **out, const char *path, moq_error *err);
/* Same from text: `json` is the tokenizer.json text (len bytes); `config_json` is the text of
 * tokenizer_config.json or NULL. The texts are not kept. */
MOQ_API moq_status moq_tokenizer_open_text(moq_tokenizer **out, const char *json, size_t len,
                                           const char *config_json, moq_error *err);
MOQ_API void       moq_tokenizer_free(moq_tokenizer *t);

/* Number of ids: the largest id in model.vocab or added_tokens, plus one. */
MOQ_API int32_t moq_tokenizer_vocab_size(const moq_tokenizer *t);
/* Beginning-of-sequence id (config.json bos_token_id, else tokenizer_config.json bos_token), or -1. */
MOQ_API int32_t moq_tokenizer_bos(const moq_tokenizer *t);
/* End-of-sequence ids: the union of config.json / generation_config.json eos_token_id and
 * tokenizer_config.json eos_token. Returns the count; *ids (borrowed) receives the list. */
MOQ_API int     moq_tokenizer_eos(const moq_tokenizer *t, const int32_t **ids);
MOQ_API bool    moq_tokenizer_is_eos(const moq_tokenizer *t, int32_t id);
/* True for added tokens marked "special" in tokenizer.json. */
MOQ_API bool    moq_tokenizer_is_special(const moq_tokenizer *t, int32_t id);
/* Id of a token given by its exact text (an added token's content, or a vocab entry whose
 * byte-level decoding is `text`), or -1. */
MOQ_API int32_t moq_tokenizer_token_id(const moq_tokenizer *t, const char *text);

enum {
    MOQ_ENCODE_ADD_SPECIAL     = 1u << 0, /* add the post-processor's tokens (e.g. Llama-3's bos),
                                             as Hugging Face's add_special_tokens=True           */
    MOQ_ENCODE_SPECIAL_AS_TEXT = 1u << 1, /* special tokens in the text are plain text (for user
                                             input), as Hugging Face's encode_special_tokens      */
};
/* Encodes text[0..len) (UTF-8; bytes that are not valid UTF-8 are kept and encoded as bytes or
 * byte-fallback tokens; the normalizer applies first, so decoding gives the normalized text) into
 * ids[0..cap). *n_ids receives the number of ids the whole text needs, also when cap is too small;
 * then the first cap ids are written and MOQ_ERR_NOMEM says so. Allocates scratch of about
 * 40 bytes per input byte. Thread-safe (t is not modified). */
MOQ_API moq_status moq_tokenizer_encode(const moq_tokenizer *t, const char *text, size_t len,
                                        uint32_t flags, int32_t *ids, size_t cap, size_t *n_ids,
                                        moq_error *err);
/* The bytes of one token (borrowed from t; not NUL-terminated; may be part of a UTF-8 character).
 * An id outside the vocabulary, or a hole in it, is MOQ_ERR_INVALID_ARG. */
MOQ_API moq_status moq_tokenizer_decode_token(const moq_tokenizer *t, int32_t id,
                                              const uint8_t **bytes, size_t *len, moq_error *err);
/* The text of ids[0..n) as the `tokenizers` library's decode() gives it (UTF-8; what differs from
 * concatenating decode_token: the first token's Metaspace / Strip rules, invalid ByteFallback byte
 * runs as one U+FFFD per byte, then lossy UTF-8). *out_len receives the length needed; a cap too
 * small is MOQ_ERR_NOMEM. */
MOQ_API moq_status moq_tokenizer_decode(const moq_tokenizer *t, const int32_t *ids, size_t n, char *out,
                                        size_t cap, size_t *out_len, moq_error *err);

/* Streaming UTF-8 decoder: turns token bytes into valid UTF-8 text, holding back the start of a
 * character split across tokens until the rest arrives. Invalid bytes become U+FFFD, one per
 * maximal invalid subpart (Unicode §3.9, as Python's errors="replace" and Rust's
 * from_utf8_lossy). Zero-initialise (or moq_utf8_stream_reset) before use. */
typedef struct moq_utf8_stream { uint8_t pend[4]; uint8_t n_pend; } moq_utf8_stream;
#define MOQ_UTF8_STREAM_OUT_MAX(n) (3 * (size_t)(n) + 12) /* bytes out needs at most, for n in */
MOQ_API void moq_utf8_stream_reset(moq_utf8_stream *s);
/* Appends in[0..n); writes the text now complete to out (cap >= MOQ_UTF8_STREAM_OUT_MAX(n),
 * else MOQ_ERR_INVALID_ARG) and its length to *out_len. */
MOQ_API moq_status moq_utf8_stream_push(moq_utf8_stream *s, const uint8_t *in, size_t n, char *out,
                                        size_t cap, size_t *out_len, moq_error *err);
/* Ends the stream: a held-back incomplete character becomes U+FFFD (out needs 3 bytes). */
MOQ_API size_t moq_utf8_stream_flush(moq_utf8_stream *s, char *out, size_t cap);

/* Chat formats built in (no template engine: Debian packages no C Jinja library). The text of
 * tokenizer_config.json's chat_template (or chat_template.jinja) picks one by a marker it contains:
 * "<|im_start|>" -> ChatML, "<|start_header_id|>" -> Llama-3, "<start_of_turn>" -> Gemma,
 * "<｜User｜>" -> DeepSeek-V3, "<|header_start|>" -> Llama 4, "[gMASK]<sop>" -> GLM, "<|turn>" ->
 * Gemma 4, and ChatML with a "<think>\n" generation prompt -> ChatML-think (Qwen3.5). Templates of
 * other formats (gpt-oss harmony, Mistral [INST], anything else) are MOQ_ERR_UNSUPPORTED saying so;
 * tool calls, reasoning_content and template variables other than messages, bos_token and
 * add_generation_prompt are not rendered. */
typedef enum moq_chat_format {
    MOQ_CHAT_NONE = 0,  /* no chat template, or one moq does not recognise               */
    MOQ_CHAT_CHATML,    /* <|im_start|>role\ncontent<|im_end|>\n  (SmolLM2, Qwen)         */
    MOQ_CHAT_LLAMA3,    /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, content
                           trimmed, bos text first (Llama-3)                               */
    MOQ_CHAT_GEMMA,     /* bos<start_of_turn>user\n[system\n\n]content<end_of_turn>\n, assistant
                           written "model", content trimmed (Gemma 2 / 3)                  */
    MOQ_CHAT_DEEPSEEK,  /* bos{system}<｜User｜>content<｜Assistant｜>content<｜end▁of▁sentence｜>
                           (DeepSeek-V3 / R1; assistant text after the last </think>)      */
    MOQ_CHAT_LLAMA4,    /* bos<|header_start|>role<|header_end|>\n\ncontent<|eot|> (Llama 4) */
    MOQ_CHAT_GLM,       /* [gMASK]<sop><|role|>\ncontent (GLM-4)                          */
    MOQ_CHAT_GEMMA4,    /* bos<|turn>role\ncontent<turn|>\n, assistant written "model", content
                           trimmed, its <|channel>..<channel|> thoughts dropped; generation
                           <|turn>model\n<|channel>thought\n<channel|> (Gemma 4)          */
    MOQ_CHAT_CHATML_THINK, /* ChatML whose generation prompt opens <think>\n (Qwen3.5 / 3.6);
                           assistant turns before the last user turn keep only the text after
                           their last </think>, leading newlines dropped                    */
    MOQ_CHAT_FORMAT_COUNT
} moq_chat_format;

typedef struct moq_chat_template {
    moq_chat_format format;
    char bos[64];               /* bos_token text the format starts with ("" if none)              */
    char default_system[1024];  /* system prompt the template adds when the first message is not
                                   a system message ("" if none); read from the template text     */
    char why_none[320];         /* format NONE from a tokenizer whose template moq does not render:
                                   why ("where: msg"); "" otherwise                               */
} moq_chat_template;

typedef struct moq_chat_message { const char *role; const char *content; } moq_chat_message;

MOQ_API const char *moq_chat_format_name(moq_chat_format f); /* "chatml", "llama3", "gemma", ..., "none" */
/* Reads tokenizer_config.json text: chat_template (a string, or a list of {name, template} where
 * "default" is used) and bos_token. No chat_template gives MOQ_CHAT_NONE and MOQ_OK; a template of
 * another family is MOQ_ERR_UNSUPPORTED quoting its start. */
MOQ_API moq_status moq_chat_template_from_config(moq_chat_template *out, const char *config_json,
                                                 size_t len, moq_error *err);
/* The template read from the tokenizer's tokenizer_config.json (format NONE when none). */
MOQ_API const moq_chat_template *moq_tokenizer_chat_template(const moq_tokenizer *t);
/* Renders messages as the template would, into out[0..cap) NUL-terminated; *len receives the
 * length needed without the NUL (MOQ_ERR_NOMEM when it does not fit). add_generation_prompt
 * appends the assistant header. Encode the result with moq_tokenizer_encode (flags 0): the
 * format's special tokens are in the text. */
MOQ_API moq_status moq_chat_render(const moq_chat_template *t, const moq_chat_message *msgs, size_t n,
                                   bool add_generation_prompt, char *out, size_t cap, size_t *len,
                                   moq_error *err);

/* Sampling: greedy when temperature == 0 (argmax, lowest id on ties); else softmax(logits / T)
 * restricted to the top_k most likely ids (0 = all), then to the smallest set of most likely ids
 * whose probability reaches top_p (1 = all), drawn with the sampler's own PRNG (xoshiro256**
 * seeded by splitmix64(seed)): the same seed and logits give the same ids on every machine. */
typedef struct moq_sampler_opts {
    float    temperature;  /* >= 0; 0 = greedy                 (default 0)  */
    int32_t  top_k;        /* >= 0; 0 = no limit               (default 0)  */
    float    top_p;        /* (0, 1]; 1 = no limit             (default 1)  */
    uint64_t seed;         /*                                  (default 0)  */
} moq_sampler_opts;
typedef struct moq_sampler moq_sampler; /* opaque: options + PRNG state; not thread-safe */

MOQ_API moq_sampler_opts moq_sampler_opts_default(void);
MOQ_API moq_status moq_sampler_create(moq_sampler **out, const moq_sampler_opts *opts, moq_error *err);
MOQ_API void       moq_sampler_free(moq_sampler *s);
/* Whether s always picks the argmax (temperature 0 or top_k 1: ties -> lowest id, no random draw):
 * a caller may then take the id moq_batch_item.argmax finds instead of sampling the logits. */
MOQ_API bool       moq_sampler_is_greedy(const moq_sampler *s);
/* Scratch bytes moq_sampler_sample needs for a vocabulary of n ids. */
MOQ_API size_t     moq_sampler_scratch_size(size_t n);
/* Picks one id from logits f32 [n]. NaN or +inf logits are MOQ_ERR_INVALID_ARG naming the index.
 * Never allocates. */
MOQ_API moq_status moq_sampler_sample(moq_sampler *s, const float *logits, size_t n, void *scratch,
                                      size_t scratch_size, int32_t *id, moq_error *err);

/* ---- checkpoint writer ----------------------------------------------------------------------- */
/* Writes a Hugging Face checkpoint directory: safetensors shards (+ index when more than one) and
 * JSON side files. Tensor data is borrowed until moq_writer_finish. Files are written to
 * temporary names and renamed only when all of them are complete: a failure leaves no partial
 * file behind. Not thread-safe. */
typedef struct moq_writer moq_writer;

MOQ_API moq_status moq_writer_create(moq_writer **out, const char *dir, moq_error *err);
MOQ_API void       moq_writer_free(moq_writer *w);
/* Adds a tensor; shape has ndim entries (0 = scalar). nbytes must match shape × dtype. */
MOQ_API moq_status moq_writer_add(moq_writer *w, const char *name, moq_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data, uint64_t nbytes,
                                  moq_error *err);
/* Adds a __metadata__ entry (written into every shard). */
MOQ_API moq_status moq_writer_metadata(moq_writer *w, const char *key, const char *value,
                                       moq_error *err);
/* Adds a side file (config.json, hf_quant_config.json, tokenizer.json, ...) with the given text. */
MOQ_API moq_status moq_writer_file(moq_writer *w, const char *name, const char *text,
                                   moq_error *err);
/* Writes everything. n_shards >= 1: tensors are split in insertion order into n_shards files of
 * about equal size, named model-0000i-of-0000n.safetensors, with model.safetensors.index.json;
 * n_shards == 1 writes model.safetensors. */
MOQ_API moq_status moq_writer_finish(moq_writer *w, int n_shards, moq_error *err);


/* ---- quantization config and resolution ------------------------------------------------------ */
/* A ModelOpt quantization config (hf_quant_config.json or config.json "quantization_config"),
 * normalized, and the per-module decision of which scheme applies. Rules: docs/COMPAT.md. */
typedef struct moq_qconfig moq_qconfig;

/* Whose rules to follow where the two reference engines differ (docs/COMPAT.md). */
typedef enum moq_compat {
    MOQ_COMPAT_MOQ = 0,   /* default: vLLM's rules plus what only SGLang supports, where no conflict */
    MOQ_COMPAT_VLLM,      /* vLLM's modelopt.py exactly                                         */
    MOQ_COMPAT_SGLANG,    /* SGLang's modelopt_quant.py exactly                                 */
    MOQ_COMPAT_COUNT
} moq_compat;
MOQ_API const char *moq_compat_name(moq_compat p);                 /* "moq", "vllm", "sglang" */
/* Parses "moq" | "vllm" | "sglang"; MOQ_ERR_INVALID_ARG otherwise. */
MOQ_API moq_status  moq_compat_parse(const char *name, moq_compat *out, moq_error *err);

/* Opens the config of `path`: a checkpoint directory (config.json's quantization_config when it is
 * a ModelOpt one, else hf_quant_config.json; disagreements between the two become notes) or one
 * JSON file (hf_quant_config.json layout, a config.json, or a bare quantization_config object).
 * Errors name the file and the key. *out is NULL on failure. Free with moq_qconfig_free. */
MOQ_API moq_status moq_qconfig_open(moq_qconfig **out, const char *path, moq_compat profile, moq_error *err);
/* Same from JSON text; `file` names it in errors ("hf_quant_config.json", "config.json", ...). */
MOQ_API moq_status moq_qconfig_parse(moq_qconfig **out, const char *json_text, const char *file,
                                     moq_compat profile, moq_error *err);
MOQ_API void       moq_qconfig_free(moq_qconfig *q);

/* Accessors; strings are borrowed from q. NULL means "absent" (printed as null by the CLI). */
MOQ_API moq_compat  moq_qconfig_profile(const moq_qconfig *q);
MOQ_API const char *moq_qconfig_source(const moq_qconfig *q);        /* file (and key) used   */
MOQ_API const char *moq_qconfig_quant_method(const moq_qconfig *q);  /* modelopt, modelopt_fp4, modelopt_mxfp8, modelopt_mixed, fp8 (hybrid) */
MOQ_API const char *moq_qconfig_quant_algo(const moq_qconfig *q);    /* normalized: "NVFP4"    */
MOQ_API const char *moq_qconfig_kv_cache_quant_algo(const moq_qconfig *q); /* "FP8", "NVFP4", "auto" or NULL */
MOQ_API const char *moq_qconfig_moe_quant_algo(const moq_qconfig *q);      /* hybrid form, else NULL */
/* Group size as the engine uses it (NVFP4 family: 16 when the file says nothing); 0 when none. */
MOQ_API int64_t     moq_qconfig_group_size(const moq_qconfig *q);
MOQ_API int         moq_qconfig_exclude_count(const moq_qconfig *q);
MOQ_API const char *moq_qconfig_exclude_at(const moq_qconfig *q, int i);
/* MIXED_PRECISION per-layer entries, in file order: name, algo (upper case), group_size (0 = absent). */
MOQ_API int         moq_qconfig_layer_count(const moq_qconfig *q);
MOQ_API bool        moq_qconfig_layer_at(const moq_qconfig *q, int i, const char **name,
                                         const char **algo, int64_t *group_size);
/* Notes: which file was used and every disagreement between the two files. */
MOQ_API int         moq_qconfig_note_count(const moq_qconfig *q);
MOQ_API const char *moq_qconfig_note_at(const moq_qconfig *q, int i);

typedef enum moq_layer_kind {
    MOQ_KIND_LINEAR = 0, MOQ_KIND_LM_HEAD, MOQ_KIND_MOE, MOQ_KIND_ATTENTION, MOQ_KIND_EMBEDDING,
    MOQ_KIND_COUNT
} moq_layer_kind;
MOQ_API const char *moq_layer_kind_name(moq_layer_kind k);          /* "linear", "lm_head", ... */
MOQ_API moq_status  moq_layer_kind_parse(const char *name, moq_layer_kind *out, moq_error *err);

/* One packed-modules mapping entry: fused module name -> its shard names
 * ({"qkv_proj", {"q_proj","k_proj","v_proj"}, 3}). */
typedef struct moq_packed {
    const char        *name;
    const char *const *shards;
    int                n_shards;
} moq_packed;

/* The decision for one module. Strings are static. `method` is one of: unquantized_linear,
 * fp8_linear, fp8_pcpt_linear, fp8_pbwo_linear, nvfp4_linear, w4a16_nvfp4_linear, mxfp8_linear,
 * fp8_moe, fp8_block_moe, nvfp4_moe, w4a16_nvfp4_moe, mxfp8_moe, kv_cache, none. */
typedef struct moq_resolution {
    const char *method;
    const char *algo;       /* scheme quant_algo ("NVFP4"), the KV algo for kv_cache, or NULL    */
    bool        excluded;   /* an exclude_modules / ignore pattern (or the vision rule) matched  */
    const char *rule;       /* name of the rule that decided (docs/COMPAT.md)                     */
    int64_t     group_size; /* NVFP4 16, MXFP8 32, FP8_PB_WO 128; 0 otherwise                     */
} moq_resolution;

/* Decides the scheme of module `prefix` (runtime name, e.g. "model.layers.0.self_attn.qkv_proj")
 * of the given kind, with the config's profile. `packed` (n_packed entries, may be NULL) is the
 * model's packed-modules mapping. Errors (MOQ_ERR_CONFIG): shards of one fused module that
 * disagree (exclusion or algo), naming every shard. Pure; thread-safe on a shared q. */
MOQ_API moq_status moq_resolve(const moq_qconfig *q, const char *prefix, moq_layer_kind kind,
                               const moq_packed *packed, int n_packed, moq_resolution *out,
                               moq_error *err);
/* ---- linear layers --------------------------------------------------------------------------- */
/* y = x · Wᵀ (+ bias) for one quantized linear layer, any format of the seeds (NVFP4 W4A4 and
 * W4A16, FP8 per-tensor / per-channel / 128x128 block, MXFP8, unquantized F32/BF16/F16). The
 * activation is quantized at run time exactly as the seed engines do (NUMERICS §2.4-§5.3).
 * A kernel is chosen once at create time from the registry (src/kernels/kernels.c); the weight
 * is packed once for it. Run takes its workspace from the caller and never allocates.
 * A moq_linear is immutable after create: concurrent runs with separate y and ws are safe. */
typedef struct moq_linear moq_linear;
typedef struct moq_weight moq_weight; /* canonical weight, src/scheme/quant_key.h (internal) */

/* Where a layer's weights live and its kernels run. MOQ_DEVICE_CUDA: an NVIDIA Hopper GPU (sm_90a)
 * in a build with MOQ_CUDA; the layer's x, y and workspace are then device memory (from
 * moq_device_alloc) and moq_linear_run only enqueues work on the default stream: call
 * moq_device_sync before reading y on the host. */
typedef enum moq_device { MOQ_DEVICE_CPU = 0, MOQ_DEVICE_CUDA = 1 } moq_device;
MOQ_API const char *moq_device_name(moq_device d);                      /* "cpu", "cuda"         */
/* MOQ_OK when d can run layers here; else MOQ_ERR_UNSUPPORTED saying why (built without CUDA,
 * no GPU, not Hopper). Fills info (may be NULL) with "NVIDIA H200, sm_90, 132 SMs" style text. */
MOQ_API moq_status moq_device_check(moq_device d, char *info, size_t info_len, moq_error *err);
/* Device memory for x, y and workspaces (CPU: aligned host memory). Free accepts NULL. */
MOQ_API moq_status moq_device_alloc(moq_device d, size_t bytes, void **out, moq_error *err);
MOQ_API void       moq_device_free(moq_device d, void *p);
/* Copies: host -> device, device -> host, device -> device; each waits for completion. */
MOQ_API moq_status moq_device_upload(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err);
MOQ_API moq_status moq_device_download(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err);
MOQ_API moq_status moq_device_copy(moq_device d, void *dst, const void *src, size_t bytes, moq_error *err);
/* Waits for every enqueued run; reports a kernel fault that happened since the last sync. */
MOQ_API moq_status moq_device_sync(moq_device d, moq_error *err);

/* How NVFP4 weights are run (moq_linear_opts.nvfp4_as, moq_model_opts.nvfp4_as). At load, each
 * NVFP4 weight is dequantized exactly (e2m1 x e4m3 block scale x weight_scale_2) and re-quantized
 * to FP8 with dynamic FP8 activations; the layer then runs the FP8 kernels of its device.
 * FP8 is what vLLM PR #38728 does on Hopper: 128x128 weight blocks with 1x128 activation groups
 * (where K % 128 != 0 those blocks cannot cover K: one scale per output channel instead, with a
 * note on the layer). FP8_CHANNEL: one scale per output channel with per-token activations for every
 * layer (on moq's CUDA rows the faster form: cuBLASLt, docs/ACCURACY.md). Routed experts (src/moe)
 * stay NVFP4. Accuracy cost: docs/ACCURACY.md. */
typedef enum moq_nvfp4_as {
    MOQ_NVFP4_AS_NVFP4 = 0,     /* as stored (default)                                           */
    MOQ_NVFP4_AS_FP8,           /* FP8 128x128 blocks (per channel where K % 128 != 0), as vLLM   */
    MOQ_NVFP4_AS_FP8_CHANNEL,   /* FP8 per output channel, dynamic per-token activations          */
    MOQ_NVFP4_AS_COUNT
} moq_nvfp4_as;

typedef struct moq_linear_opts {
    const char    *name;        /* layer name used in error messages ("model.layers.0.mlp.down_proj") */
    moq_device     device;      /* MOQ_DEVICE_CPU (default) or MOQ_DEVICE_CUDA: rows of that target only */
    int            n_threads;   /* <= 0: OpenMP's default                                          */
    uint32_t       cpu_mask;    /* MOQ_CPU_* bits allowed, ANDed with moq_cpu_features()           */
    const char    *kernel;      /* force one registry row by name (bench, tests); NULL = first fit  */
    const uint8_t *rcpa_corr;   /* borrowed: golden/rcp/rcpa_ftz_corr_2bit.bin (2 MiB) so NVFP4
                                   activation codes equal the H200's; NULL = IEEE reciprocals      */
    moq_nvfp4_as   nvfp4_as;    /* used by moq_linear_layer_open: NVFP4 weights as stored or as FP8 */
    bool           plan_only;   /* validate and choose the kernel, build no layout (`moq inspect
                                   --kernels`): moq_linear_run refuses such a layer            */
} moq_linear_opts;
MOQ_API moq_linear_opts moq_linear_opts_default(void);

/* Validates w (shapes, K divisibility, NaN/zero/negative scales; errors name opts->name), picks
 * the first registry row that supports it and packs the weight. w's pointers are borrowed and
 * must outlive the layer. On failure *out is NULL; MOQ_ERR_UNSUPPORTED lists every row's reason. */
MOQ_API moq_status moq_linear_create_from_weight(moq_linear **out, const moq_weight *w,
                                                 const moq_linear_opts *opts, moq_error *err);
MOQ_API void       moq_linear_free(moq_linear *l);
/* Bytes of workspace moq_linear_run needs for M rows of x. */
MOQ_API size_t     moq_linear_workspace_size(const moq_linear *l, int64_t M);
/* x: f32 | bf16 [M, K] (x_elem MOQ_ELEM_F32 or MOQ_ELEM_BF16); y: f32 | bf16 [M, N]; M >= 1.
 * ws: caller-owned, at least moq_linear_workspace_size(l, M) bytes. */
MOQ_API moq_status moq_linear_run(const moq_linear *l, const void *x, moq_elem x_elem, int64_t M,
                                  void *y, moq_elem y_elem, void *ws, size_t ws_size, moq_error *err);
/* Name of the chosen kernel ("cpu_avx512_nvfp4_w4a4_vnni16"); borrowed, lives as long as l. */
MOQ_API const char *moq_linear_kernel_name(const moq_linear *l);
/* Name of the kernel that runs M rows: the chosen one, or where M is outside the M range of its
 * registry row, the row on the same packed weight that serves M (src/kernels/kernels.h). */
MOQ_API const char *moq_linear_kernel_name_for(const moq_linear *l, int64_t M);
/* The rows tried before the chosen one and why each was rejected ("" when the first fit). */
MOQ_API const char *moq_linear_rejections(const moq_linear *l);

/* ---- loading layers from a checkpoint -------------------------------------------------------- */
/* One linear layer loaded from an open checkpoint: the module is resolved against the config
 * (moq_resolve), its tensors are validated against the scheme's contract (the same check as
 * `moq check`: presence, dtype, shape, K divisibility, NaN/Inf/zero/negative scales), turned into
 * the scheme's canonical weight and handed to moq_linear_create_from_weight.
 *
 * Fused modules (qkv_proj, gate_up_proj) whose shards the checkpoint stores separately are loaded
 * when `prefix` ends in the name of a `packed` entry: the shards are concatenated along N into
 * memory the layer owns. Their static scales are kept per shard (profile moq: no requantization,
 * no accuracy loss); profiles vllm and sglang reproduce the engines instead: FP8 shards are
 * requantized to the max weight scale (vllm when the scales differ, sglang always, NUMERICS §5.1)
 * and NVFP4 shards share the max weight_scale_2. Every such decision is a warning on the layer.
 * A W4A16_NVFP4 input_scale is accepted and ignored (warning). */
typedef struct moq_linear_layer moq_linear_layer;

/* c, q: borrowed, must outlive the layer (codes may be read from c's mmap). q NULL: an unquantized
 * checkpoint (every linear is F32/BF16/F16). kind: MOQ_KIND_LINEAR or MOQ_KIND_LM_HEAD.
 * packed/n_packed: the model's packed-modules mapping (may be NULL/0). opts: as for
 * moq_linear_create_from_weight (opts->name is ignored: errors name the module). On failure *out
 * is NULL and err names the tensor, module or layer. */
MOQ_API moq_status moq_linear_layer_open(moq_linear_layer **out, const moq_checkpoint *c, const moq_qconfig *q,
                                         const char *prefix, moq_layer_kind kind, const moq_packed *packed,
                                         int n_packed, const moq_linear_opts *opts, moq_error *err);
MOQ_API void       moq_linear_layer_free(moq_linear_layer *l);
/* The layer's linear, for moq_linear_workspace_size / moq_linear_run; borrowed, lives as long as l. */
MOQ_API const moq_linear *moq_linear_layer_linear(const moq_linear_layer *l);
/* The resolution that decided the layer (method, algo, rule, group size); borrowed. */
MOQ_API const moq_resolution *moq_linear_layer_resolution(const moq_linear_layer *l);
/* Chosen kernel ("cpu_ref_fp8_tensor"), borrowed. */
MOQ_API const char *moq_linear_layer_kernel_name(const moq_linear_layer *l);
/* Warnings kept while loading ("keeps per-shard weight_scale (q_proj=0.01, k_proj=0.02)"). */
MOQ_API int         moq_linear_layer_warning_count(const moq_linear_layer *l);
MOQ_API const char *moq_linear_layer_warning(const moq_linear_layer *l, int i);

/* ---- mixture of experts ---------------------------------------------------------------------- */
/* One MoE layer: router (checkpoint weight or caller logits) -> top-k selection -> each selected
 * expert's gated MLP down(act(w13 · x)) run once over the tokens routed to it -> weighted sum
 * (+ optional shared expert). Expert GEMMs are moq_linear layers (the same registry rows).
 * Numerics: NUMERICS §6 (scales), §7 (activations). Implementation: src/moe/. Tests: tests/moe/.
 * Letters: T tokens, E experts (global), H hidden, I intermediate (per expert), k top-k. */
typedef struct moq_moe moq_moe;

typedef enum moq_moe_scoring {
    MOQ_MOE_SCORE_SOFTMAX = 0, /* softmax over all E logits, then top-k                    */
    MOQ_MOE_SCORE_SIGMOID,     /* sigmoid per logit, then top-k (DeepSeek-V3, Llama-4)     */
    MOQ_MOE_SCORE_SQRTSOFTPLUS,/* sqrt(softplus(logit)) (torch softplus: x above 20 stays x),
                                  then top-k (DeepSeek-V4 "sqrtsoftplus")                   */
    MOQ_MOE_SCORE_COUNT
} moq_moe_scoring;

/* Router rules. Ties are broken by the lowest expert id (and the lowest group id), always. */
typedef struct moq_moe_routing {
    moq_moe_scoring scoring;
    int   top_k;                  /* experts per token, 1..E                                   */
    bool  renormalize;            /* divide the k weights by their sum                          */
    int   num_expert_group;       /* DeepSeek-V3 grouped top-k: E split in this many groups; 0/1 = off */
    int   topk_group;             /* groups kept per token (the top experts come from these)   */
    const float *correction_bias; /* f32 [E] added to the scores for selection only (the weights
                                     are the unbiased scores); NULL = none. moq_moe_create fills
                                     it from <prefix>.<router>.e_score_correction_bias when
                                     use_correction_bias is set and this is NULL.               */
    bool  use_correction_bias;
    float routed_scaling_factor;  /* weights are multiplied by it after renormalization (1 = off) */
    bool  weight_on_input;        /* Llama-4: x is multiplied by the weight before the expert,
                                     the expert output is added with weight 1                   */
    const float *expert_scale;    /* f32 [E]: each weight × expert_scale[its expert] after the
                                     renormalization and routed_scaling_factor (Gemma 4's
                                     router.per_expert_scale); NULL = none. Borrowed during
                                     moq_moe_create only (copied).                              */
} moq_moe_routing;

/* Expert formats (ModelOpt quant_algo of the experts; the config resolver picks one). */
typedef enum moq_moe_format {
    MOQ_MOE_FMT_UNQUANTIZED = 0, /* F32 / BF16 / F16 weights, as stored                          */
    MOQ_MOE_FMT_FP8,             /* "FP8": e4m3 + f32 per-tensor weight_scale and input_scale    */
    MOQ_MOE_FMT_FP8_PB_WO,       /* "FP8_PB_WO": e4m3 + f32 128x128 block scales                 */
    MOQ_MOE_FMT_NVFP4,           /* "NVFP4" W4A4                                                 */
    MOQ_MOE_FMT_W4A16_NVFP4,     /* "W4A16_NVFP4": NVFP4 weights, unquantized activations       */
    MOQ_MOE_FMT_MXFP8,           /* "MXFP8": e4m3 + e8m0 per 32                                   */
    MOQ_MOE_FMT_FP8_PER_CHANNEL, /* "FP8_PER_CHANNEL_PER_TOKEN": e4m3 + f32 [N] per output channel,
                                    dynamic per-token activations, no input_scale               */
    MOQ_MOE_FMT_NVFP4_AWQ,       /* "NVFP4_AWQ": NVFP4 W4A4, x multiplied by each projection's
                                    pre_quant_scale (gate and up share one) where present        */
    MOQ_MOE_FMT_COUNT
} moq_moe_format;

/* Activation between the two expert GEMMs (NUMERICS §7), f32. h = w13 · x, gate = first half. */
typedef enum moq_moe_act {
    MOQ_MOE_ACT_SILU = 0,      /* silu(g)·u                                                   */
    MOQ_MOE_ACT_GELU_ERF,      /* 0.5·g·(1 + erf(g/√2))·u                                     */
    MOQ_MOE_ACT_GELU_TANH,     /* 0.5·g·(1 + tanh(√(2/π)(g + 0.044715 g³)))·u                */
    MOQ_MOE_ACT_RELU2,         /* max(h, 0)², not gated: w13 is the up projection alone        */
    MOQ_MOE_ACT_SWIGLU_LIMIT,  /* g' = min(g, L), u' = clamp(u, −L, L), g'·sigmoid(α g')·(u' + β):
                                  gpt-oss / MiniMax "swigluoai" α = 1.702, β = 1, L = 7;
                                  DeepSeek-V4 swiglu_limit α = 1, β = 0                        */
    MOQ_MOE_ACT_COUNT
} moq_moe_act;

/* How scales that the seeds merge are treated (NUMERICS §5.1, §6.2, §6.3). */
typedef enum moq_moe_compat {
    MOQ_MOE_COMPAT_EXACT = 0, /* keep w1 and w3 scales separately (each half its own scale)     */
    MOQ_MOE_COMPAT_VLLM,      /* FP8: requantize w1/w3 to max(s1, s3) when they differ (fp16
                                 intermediate); NVFP4: the gate's weight_scale_2 for both halves */
    MOQ_MOE_COMPAT_SGLANG,    /* FP8: requantize to the max always; NVFP4: separate alphas      */
    MOQ_MOE_COMPAT_COUNT
} moq_moe_compat;

typedef enum moq_moe_input_scale {
    MOQ_MOE_INPUT_SCALE_MAX = 0,   /* one scalar per projection: max over all E experts (and gate/up),
                                      what both seeds do for FP8 and their FlashInfer NVFP4 paths */
    MOQ_MOE_INPUT_SCALE_PER_EXPERT /* expert e uses its own (max of gate/up for w13)              */
} moq_moe_input_scale;

/* Tensor-parallel experts: intermediate rows [start, start + count) of every expert's w1/w3 and the
 * same input columns of its w2 (count 0: whole). The outputs of the G slices sum to the expert's. */
typedef struct moq_moe_slice {
    int64_t start, count;
    bool    bias;                     /* unused by the experts moq reads slices of (no biases)  */
} moq_moe_slice;

typedef struct moq_moe_opts {
    moq_moe_format      format;
    moq_moe_act         act;
    float               swiglu_limit, swiglu_alpha, swiglu_beta; /* MOQ_MOE_ACT_SWIGLU_LIMIT only */
    moq_moe_routing     routing;
    int64_t             num_experts;  /* E, global: expert ids 0..E-1 in the checkpoint        */
    const int32_t      *expert_map;   /* i32 [E] global -> local id, -1 = held elsewhere (expert
                                         parallelism); NULL = all local. Borrowed during create. */
    const char         *router;       /* "gate": <prefix>.gate.weight [E, H]; NULL = caller logits */
    const char         *shared_expert;/* "shared_experts": always-on MLP added to the output, same
                                         format and activation; NULL = none                      */
    moq_moe_compat      compat;
    moq_moe_input_scale input_scale;
    int                 n_threads;    /* <= 0: OpenMP's default                                */
    uint32_t            cpu_mask;     /* as moq_linear_opts                                     */
    const uint8_t      *rcpa_corr;    /* as moq_linear_opts                                     */
    bool                interleaved_gate_up; /* stacked experts (<prefix>.experts.gate_up_proj [E, H, 2I],
                                         transformers' layout, as saved or as ModelOpt 0.47 exports
                                         it): gate and up in alternating columns (gpt-oss), else
                                         [gate | up] (Llama 4) */
    moq_moe_slice       inter_slice;  /* this rank's part of each expert (tensor parallelism)  */
    bool                keep_canonical; /* keep each expert's canonical weights after its CPU rows
                                         packed them (default: freed, one copy of each weight;
                                         the GPU MoE layer packs from them) */
} moq_moe_opts;
/* The expert format of a moq_resolve() method for kind MOQ_KIND_MOE ("nvfp4_moe" ->
 * MOQ_MOE_FMT_NVFP4; "none" (excluded experts) -> MOQ_MOE_FMT_UNQUANTIZED); MOQ_ERR_UNSUPPORTED
 * for a method that is not an expert one. */
MOQ_API moq_status moq_moe_format_from_method(const char *method, moq_moe_format *out, moq_error *err);
/* Defaults: unquantized, silu, softmax top-2 with renormalization, scale factor 1, router "gate". */
MOQ_API moq_moe_opts moq_moe_opts_default(void);

/* Loads the experts under `prefix` ("model.layers.3.mlp"): per expert either
 * experts.N.{gate_proj,up_proj,down_proj} or experts.N.{w1,w3,w2} (non-gated: up_proj or w1, and
 * down_proj / w2), each with the tensors of opts->format, or (gated) transformers' stacked
 * experts.{gate_up_proj [E, H, 2I], down_proj [E, I, H]} (Llama 4, gpt-oss; unquantized, or FP8 /
 * NVFP4 / W4A16 with ModelOpt's <proj>_weight_scale etc. beside). Fuses w13 = [gate; up] (rows [0, I) gate,
 * [I', I'+I) up, I' = I padded to the kernels' multiple with zero rows). Only local experts' weights
 * are read; input scales are read for all E. Copies what it needs: the checkpoint may be freed
 * after. Errors name the missing or malformed tensor. */
MOQ_API moq_status moq_moe_create(moq_moe **out, const moq_checkpoint *ck, const char *prefix,
                                  const moq_moe_opts *opts, moq_error *err);
MOQ_API void       moq_moe_free(moq_moe *m);
/* Bytes of workspace moq_moe_run needs for T tokens. */
MOQ_API size_t     moq_moe_workspace_size(const moq_moe *m, int64_t T);
/* x: f32 | bf16 [T, H]; router_logits: f32 [T, E] or NULL (then the checkpoint router is run);
 * y: f32 | bf16 [T, H] = Σ_selected local experts w·expert(x) (+ shared expert). Tokens are grouped
 * by expert; each selected expert runs once over its tokens. Never allocates. A moq_moe is
 * immutable after create: concurrent runs with separate y and ws are safe. */
MOQ_API moq_status moq_moe_run(const moq_moe *m, const void *x, moq_elem x_elem, int64_t T,
                               const float *router_logits, void *y, moq_elem y_elem, void *ws,
                               size_t ws_size, moq_error *err);
/* Intermediate size after padding, and the number of local experts. */
MOQ_API int64_t     moq_moe_inter_padded(const moq_moe *m);
MOQ_API int64_t     moq_moe_local_experts(const moq_moe *m);
/* Kernel rows chosen for w13 and w2 ("cpu_avx512_nvfp4_w4a4_vnni16"), borrowed. */
MOQ_API const char *moq_moe_kernel_name(const moq_moe *m, int which /* 0 w13, 1 w2 */);
/* Warnings kept on the layer (the library never prints): e.g. w1/w3 scales that differ. */
MOQ_API int         moq_moe_warning_count(const moq_moe *m);
MOQ_API const char *moq_moe_warning(const moq_moe *m, int i);

/* ---- models ---------------------------------------------------------------------------------- */
/* A decoder-only language model loaded from a checkpoint directory: LlamaForCausalLM (llama3 rope
 * scaling, SmolLM2), MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias), Qwen3ForCausalLM (q/k
 * RMSNorm). Every linear goes through resolution + the kernel registry, so any scheme above (and
 * MIXED_PRECISION) runs. The KV cache and all forward workspace are allocated at open for opts.ctx
 * positions: prefill and decode never allocate. A moq_model is not thread-safe (one sequence);
 * its linears use opts.n_threads threads. Architecture notes: docs/ARCHITECTURE.md "Model runner". */
typedef struct moq_model moq_model;

/* Load progress: phase ("load"), done of total units (layers). Called on the opening thread. */
typedef void (*moq_progress_fn)(void *user, const char *phase, uint64_t done, uint64_t total);

typedef struct moq_model_opts {
    int             n_threads;          /* <= 0: OpenMP's default                                   */
    int64_t         ctx;                /* positions preallocated; <= 0: min(max_position_embeddings, 4096) */
    moq_compat      compat;             /* resolution rules (MOQ_COMPAT_MOQ)                         */
    moq_elem        kv_elem;            /* cache encoding when the config declares no KV quantization:
                                           MOQ_ELEM_F32 (default) or MOQ_ELEM_BF16                   */
    float           kv_scales_default;  /* ignored (kept for ABI): an FP8 KV cache with no k/v scale in
                                           any layer uses 1.0, ModelOpt's meaning, with one warning;
                                           scales in some layers only is MOQ_ERR_TENSOR              */
    uint32_t        cpu_mask;           /* MOQ_CPU_* bits allowed for kernels (~0u)                  */
    moq_progress_fn progress;           /* NULL: none                                                */
    void           *progress_user;
    moq_device      device;             /* MOQ_DEVICE_CPU (default), or MOQ_DEVICE_CUDA: weights, KV cache
                                           and the whole forward on the GPU (GQA dense architectures:
                                           Llama, Mistral, Qwen2, Qwen3; others MOQ_ERR_UNSUPPORTED);
                                           the cache is bf16 there (kv_elem f32 gets bf16), or FP8 as
                                           the config declares                                       */
    moq_nvfp4_as    nvfp4_as;           /* NVFP4 linears as stored (default) or re-quantized to FP8  */
    int             tp;                 /* tensor parallelism: G ranks (<= 1: one), each a thread of
                                           this process holding 1/G of every layer (heads, MLP,
                                           vocabulary); the handle is rank 0 and runs them all      */
    int             tp_ep;              /* nonzero: MoE experts spread whole over the ranks (expert
                                           parallelism) instead of each split G ways                 */
    int             tp_backend;         /* 0: CPU collectives (threads), 1: NCCL (one GPU per rank)  */
    int             reserved[3];
} moq_model_opts;
MOQ_API moq_model_opts moq_model_opts_default(void);

/* Opens the checkpoint at dir, resolves and validates every layer, packs every weight for its
 * kernel, and allocates the KV cache and workspace. On failure *out is NULL and err names the
 * checkpoint tensor, module or file. An unsupported architecture is MOQ_ERR_UNSUPPORTED listing
 * the supported ones. Free with moq_model_free. */
MOQ_API moq_status moq_model_open(moq_model **out, const char *dir, const moq_model_opts *opts, moq_error *err);
MOQ_API void       moq_model_free(moq_model *m);

/* Runs tokens [n] at positions pos..pos+n-1 (pos = tokens already in the cache) and leaves the
 * logits of the last one in moq_model_logits. logits_all: NULL, or caller-owned f32 [n, vocab]
 * receiving every position's logits (perplexity). Errors: a token outside [0, vocab), or the cache
 * full (pos + n > ctx: MOQ_ERR_INVALID_ARG; call moq_model_reset). */
MOQ_API moq_status moq_model_prefill(moq_model *m, const int32_t *tokens, int64_t n, float *logits_all, moq_error *err);
/* One decode step: moq_model_prefill(m, &token, 1, NULL, err). */
MOQ_API moq_status moq_model_decode(moq_model *m, int32_t token, moq_error *err);
/* f32 [vocab] logits of the last token run; borrowed, valid until the next prefill/decode/free. */
MOQ_API const float *moq_model_logits(const moq_model *m);
/* Forgets the sequence (position 0); keeps weights, cache memory and workspace. */
MOQ_API void       moq_model_reset(moq_model *m);

MOQ_API int64_t     moq_model_vocab_size(const moq_model *m);
MOQ_API int64_t     moq_model_ctx(const moq_model *m);        /* positions preallocated        */
MOQ_API int64_t     moq_model_pos(const moq_model *m);        /* tokens in the cache           */
MOQ_API const char *moq_model_architecture(const moq_model *m); /* config.json architectures[0] */
/* Bytes of weight data a decode step reads (all linears + one embedding row): the bound that
 * `moq bench model` divides by the measured bandwidth. */
MOQ_API uint64_t    moq_model_decode_bytes(const moq_model *m);
/* Weight memory of an open model, bytes (docs/ARCHITECTURE.md "Weight memory"): `packed` kernel
 * layouts (host or device), `owned` canonical data the layers still hold in their own allocations
 * (f32 scales, biases, AWQ scales, router weights, codes of rows that run on the canonical form),
 * `mapped` checkpoint bytes layers still read in place from the mapping (rows that run on the
 * canonical weight, embedding tables gathered by row), `file` the checkpoint's tensor bytes.
 * After a load every packed weight is counted once: its canonical codes are neither owned nor
 * mapped. Norm vectors, the KV cache and workspaces are not counted. */
typedef struct moq_model_memory { uint64_t packed, owned, mapped, file; } moq_model_memory;
MOQ_API moq_model_memory moq_model_memory_usage(const moq_model *m);

/* Findings of the validation pass that do not stop the model ("where: msg", e.g. fused shards with
 * different input_scale that the engines collapse to the max); at most 16 kept. Borrowed. */
MOQ_API int         moq_model_warning_count(const moq_model *m);
MOQ_API const char *moq_model_warning(const moq_model *m, int i);

/* Load time per phase, seconds: open (checkpoint mmap + headers + configs), validate (every module
 * resolved and checked against its scheme's contract, the `moq check` pass), pack (each layer loaded
 * through moq_linear_layer_open or moq's embedding/expert glue: canonical weight, kernel choice,
 * packing). *_cpu_s: the process's CPU time in each phase (all threads; on a shared machine the
 * wall time measures the neighbours as well). */
typedef struct moq_model_timings {
    double open_s, validate_s, pack_s;
    double open_cpu_s, validate_cpu_s, pack_cpu_s;
} moq_model_timings;
MOQ_API moq_model_timings moq_model_load_timings(const moq_model *m);

/* ---- batched decode: many sequences on one model (continuous batching) ---------------------- */
/* A moq_batch holds a paged KV pool for one model: the pool is cut into pages of page_tokens
 * positions, and each sequence (moq_seq) owns a block table of pages taken from it, so sequences
 * of any lengths share one memory budget. moq_batch_run advances any set of sequences in one
 * forward: every row (token) of every item goes through each linear together (M = all rows), and
 * attention reads each row's own sequence through its block table. A decode step is one item of
 * one token per sequence (moq_batch_step); a prefill, or a chunk of one, is one item of many
 * tokens (moq_seq_prefill); mixed runs are allowed. A sequence's logits do not depend on which
 * other sequences share its runs (the kernels compute rows independently; tests/model/
 * test_batch.c checks equality with moq_model_prefill bit for bit).
 * The contract is the device-independent one a GPU implementation keeps (docs/ARCHITECTURE.md
 * "Batched decode"). A batch uses the model's workspace: do not call moq_model_prefill/decode
 * while a batch exists on it; the batch and its sequences are not thread-safe (one caller thread).
 * GQA architectures only (Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral, Gemma 3): MLA and Gated
 * DeltaNet models are MOQ_ERR_UNSUPPORTED at create. */
typedef struct moq_batch moq_batch;  /* opaque: paged KV pool + rows plan on one model            */
typedef struct moq_seq   moq_seq;    /* opaque: one sequence: its position and block table        */

typedef struct moq_batch_opts {
    int64_t  page_tokens;  /* positions per KV page (default 16)                                 */
    uint64_t kv_bytes;     /* pool budget, bytes (K and V of every attention layer); 0: room for
                              4 sequences of the model's full context                             */
    int64_t  max_rows;     /* most rows one moq_batch_run is given (a GPU implementation sizes
                              its workspace and graphs by it; the CPU runs larger runs in chunks
                              of 32 rows); default 64                                             */
    int      reserved[8];
} moq_batch_opts;
MOQ_API moq_batch_opts moq_batch_opts_default(void);
/* Creates the pool on m (which must outlive the batch). The KV encoding and scales are the
 * model's (f32/bf16, or e4m3 with the checkpoint's k/v scales). A budget smaller than one full
 * context of one sequence is MOQ_ERR_INVALID_ARG naming the bytes needed; an allocation failure
 * is MOQ_ERR_NOMEM. */
MOQ_API moq_status moq_batch_create(moq_batch **out, moq_model *m, const moq_batch_opts *opts, moq_error *err);
/* Frees the pool; every sequence must have been freed before (else they dangle). NULL: no-op. */
MOQ_API void       moq_batch_free(moq_batch *b);
MOQ_API int64_t    moq_batch_page_tokens(const moq_batch *b);
MOQ_API int64_t    moq_batch_pages_total(const moq_batch *b);
MOQ_API int64_t    moq_batch_pages_free(const moq_batch *b);     /* not held by any sequence    */
MOQ_API uint64_t   moq_batch_page_bytes(const moq_batch *b);     /* K + V of one page, all layers */
MOQ_API int64_t    moq_batch_seq_count(const moq_batch *b);      /* sequences alive              */
/* Rows one forward takes at once (CPU: the model's 32-row workspace; larger runs are split): a
 * scheduler that keeps decode rows + prefill rows within it keeps every step one forward. */
MOQ_API int64_t    moq_batch_rows_per_forward(const moq_batch *b);
/* Pages a sequence of n positions holds: ceil(n / page_tokens). */
MOQ_API int64_t    moq_batch_pages_for(const moq_batch *b, int64_t positions);

/* A new empty sequence (position 0, no pages). Free with moq_seq_free, which returns its pages to
 * the pool at once. */
MOQ_API moq_status moq_seq_create(moq_seq **out, moq_batch *b, moq_error *err);
MOQ_API void       moq_seq_free(moq_seq *s);
/* Makes the sequence hold pages for `positions` positions in all (never gives pages back): a
 * scheduler reserves prompt + max_tokens at admission so no later run can run out. Not enough free
 * pages: MOQ_ERR_NOMEM and nothing taken (try again after other sequences are freed);
 * positions > moq_model_ctx: MOQ_ERR_INVALID_ARG. */
MOQ_API moq_status moq_seq_reserve(moq_seq *s, int64_t positions, moq_error *err);
MOQ_API int64_t    moq_seq_pos(const moq_seq *s);                /* tokens in its cache          */
MOQ_API int64_t    moq_seq_pages(const moq_seq *s);              /* pages held                   */

/* One item of a run: n >= 1 tokens appended to seq (positions pos..pos+n-1); logits: NULL, or
 * caller-owned f32 [vocab] receiving the logits of the item's last token; argmax: NULL, or receives
 * the index of that token's largest logit (the lowest index among equal ones: the greedy token,
 * as moq_sampler_sample picks it when moq_sampler_is_greedy). Either makes the run check that row's logits
 * (non-finite: MOQ_ERR_TENSOR). On a GPU model, a run whose rows all ask for argmax only computes
 * it on the GPU and downloads the ids alone instead of [rows, vocab] floats. */
typedef struct moq_batch_item {
    moq_seq       *seq;
    const int32_t *tokens;
    int64_t        n;
    float         *logits;
    int32_t       *argmax;
} moq_batch_item;
/* Runs all items in one forward (rows in item order; above the CPU's 32-row workspace, in chunks
 * of 32 rows). Pages a sequence lacks are taken from the pool first; every check (a sequence in
 * two items, a token outside [0, vocab), a sequence past the context, too few free pages) is made
 * before anything runs, and a failure leaves every sequence as it was. On a failure inside the
 * forward (non-finite output: MOQ_ERR_TENSOR naming the module) the sequences' positions do not
 * advance. Never allocates. */
MOQ_API moq_status moq_batch_run(moq_batch *b, const moq_batch_item *items, int64_t n_items, moq_error *err);
/* Prefill (or one chunk of it): moq_batch_run of one item. */
MOQ_API moq_status moq_seq_prefill(moq_batch *b, moq_seq *s, const int32_t *tokens, int64_t n, float *logits,
                                   moq_error *err);
/* Decode step: seqs[i] advances by tokens[i]; logits f32 [B, vocab] (row i for seqs[i]) or NULL. */
MOQ_API moq_status moq_batch_step(moq_batch *b, moq_seq *const *seqs, const int32_t *tokens, int64_t B, float *logits,
                                  moq_error *err);
/* Greedy decode step: seqs[i] advances by tokens[i] and next[i] receives its argmax (moq_batch_item's
 * argmax); no logits leave the device. next may be tokens (each id is read before it is replaced). */
MOQ_API moq_status moq_batch_step_greedy(moq_batch *b, moq_seq *const *seqs, const int32_t *tokens, int64_t B, int32_t *next,
                                         moq_error *err);
#ifdef __cplusplus
}
#endif
#endif /* MOQ_H */
