/* model.c — the decoder runner (moq.h "models"): one row per architecture in arch_rows.
 *
 *   x = embed(tokens) (× bf16(sqrt(H)) for Gemma)         f32 [M, H]
 *   per layer:  h = rmsnorm(x)
 *               attention, one of:
 *                 GQA: qkv = h · Wqkvᵀ (+b) ; q, k = rmsnorm_per_head (Qwen3, Qwen3.5, Gemma 3) ;
 *                      rope(q, k) (partial for Qwen3.5) ; cache <- k, v ;
 *                      o = softmax(q kᵀ · scale, causal, window) v (× sigmoid(gate), Qwen3.5) ; t = o · Woᵀ
 *                 MLA (DeepSeek-V3, model/attn/mla.c): latent cache, absorbed decode
 *                 Gated DeltaNet (Qwen3.5 linear_attention layers, model/attn/gdn.c): recurrent state
 *               x += t (Gemma: x += rmsnorm(t))
 *               h = rmsnorm(x) ; MLP: dense (silu or gelu-tanh)·up, or routed experts (src/moe)
 *               (+ shared expert, × sigmoid(gate) for Qwen3.5) ; x += out (Gemma: normalized first)
 *               (Gemma 4: x ×= layer_scalar; its global layers have their own head_dim and KV heads,
 *               v = k_proj(h) with attention_k_eq_v, v / rms(v), softmax scale 1)
 *   logits = rmsnorm(x) · Wlm_headᵀ (Gemma: soft-capped)   f32 [M, V]
 *
 * Every dense linear is opened by the loader (moq_linear_layer_open: resolution, contract,
 * canonical weight, kernel), routed experts by src/moe (moq_moe_create), embeddings by layers.c:
 * no format appears here. Activations are f32 between layers; the
 * kernels quantize them per scheme (NUMERICS §2.4-§5.3). The embedding row is dequantized from the
 * canonical weight (moq_weight_dequant_row), so a tied lm_head shares the embedding's weight.
 * Attention reads K and V back from the cache for every position, the current one included, so
 * an FP8 cache affects the current token as it does in vLLM's paged decode.
 * Sliding-window layers attend to the last `sliding_window` positions, the current one included;
 * MoE models may interleave dense MLP layers (Qwen3-MoE mlp_only_layers, decoder_sparse_step,
 * DeepSeek first_k_dense_replace): per-layer facts read from config.json once at open
 * (read_layer_plan and the family readers in model/arch/).
 * Workspace for min(ctx, MOQ_MODEL_CHUNK) tokens is allocated at open; prefill runs in chunks.
 * Tested by tests/model/test_model.c and tests/model/test_arch.c.
 */
#include "model/model.h"
#include "model/model_priv.h"

#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/modules.h"
#include "core/error.h"
#include "core/rowscan.h"
#include "io/json.h"
#include "kernels/kernels.h"
#include "model/arch/deepseek_v3.h"
#include "model/arch/deepseek_v4.h"
#include "model/arch/gemma3.h"
#include "model/arch/gemma4.h"
#include "model/arch/llama4.h"
#include "model/arch/minimax_m2.h"
#include "model/arch/qwen3_5.h"
#include "model/attn/dsv4.h"
#include "model/attn/gdn.h"
#include "model/attn/mla.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/nn_math.h"
#include "model/rope.h"
#include "moe/moe.h"

#define MOQ_MODEL_CHUNK 32

/* Which layers use sliding-window attention, as transformers' config classes decide it. The window
 * covers `sliding_window` key positions counting the current one: a query at position i attends to
 * keys j with i - sliding_window < j <= i (transformers masking_utils.sliding_window_overlay,
 * `kv_idx > q_idx - sliding_window`, v4.53+; vLLM passes window_size (sliding_window - 1, 0) to
 * flash-attention, the same set). */
typedef enum window_rule {
    WINDOW_NONE,         /* config has no sliding window (Llama)                                     */
    WINDOW_ALL_LAYERS,   /* Mistral, Mixtral: `sliding_window` (null = none) applies to every layer  */
    WINDOW_LAYER_TYPES,  /* gpt-oss: `layer_types` "sliding_attention" layers (default: even layers)
                            use `sliding_window`, "full_attention" ones none                         */
    WINDOW_QWEN2,        /* Qwen2/Qwen3(-MoE): only when `use_sliding_window` is true, and only for
                            layers l >= `max_window_layers` (Qwen2Config.layer_types:
                            "sliding_attention" if sliding_window is not None and i >= max_window_layers;
                            the config docstring says the opposite, the code is what runs)           */
} window_rule;

/* How a layer attends: grouped-query attention over per-head K/V (fused qkv_proj, this file), or
 * multi-head latent attention over a cached latent (DeepSeek-V3, model/attn/mla.c). */
typedef enum attn_kind {
    ATTN_GQA,
    ATTN_MLA,
    ATTN_DSV4,       /* DeepSeek-V4: sliding window + compressed entries (CSA with the lightning
                        indexer, HCA), sinks, grouped output, and mHC residual streams (model/attn/dsv4.c) */
    ATTN_HYBRID_GDN, /* Qwen3.5: layer_types picks Gated DeltaNet layers (model/attn/gdn.c) or gated
                        GQA with q_proj = [query | gate] per head and partial RoPE (this file)       */
} attn_kind;

/* What each attention kind can run on beyond the CPU forward: the GPU forward (model_gpu.c), tensor
 * parallelism (--tp), batched decode (moq_batch); `what` names it in the refusals. One row per kind. */
static const struct attn_caps {
    const char *what;
    bool        gpu, tp, batch;
} attn_caps[] = {
    [ATTN_GQA]        = {"grouped-query attention", true, true, true},
    [ATTN_MLA]        = {"multi-head latent attention", false, false, false},
    [ATTN_DSV4]       = {"DeepSeek-V4's compressed attention and hyper-connections", false, false, false},
    [ATTN_HYBRID_GDN] = {"Gated DeltaNet layers", false, false, false},
};
_Static_assert(sizeof attn_caps / sizeof attn_caps[0] == ATTN_HYBRID_GDN + 1, "one attn_caps row per attn_kind");

/* Which layers hold routed experts, and how tokens are routed to them. */
typedef enum moe_rule {
    MOE_EVERY_LAYER,    /* Mixtral                                                               */
    MOE_SPARSE_STEP,    /* Qwen3-MoE: outside mlp_only_layers with (l + 1) % decoder_sparse_step == 0
                           (Qwen3MoeDecoderLayer); the others are dense MLPs of intermediate_size   */
    MOE_FIRST_K_DENSE,  /* DeepSeek-V3: l >= first_k_dense_replace and l % moe_layer_freq == 0     */
    MOE_LAYER_LIST,     /* Llama 4: moe_layers, else every interleave_moe_layer_step-th (arch/llama4.c) */
} moe_rule;
typedef enum router_kind {
    ROUTER_SOFTMAX,        /* softmax top-k (+ renormalize when norm_topk_prob)                     */
    ROUTER_SIGMOID_GROUPED,/* DeepSeek-V3: sigmoid, e_score_correction_bias for selection, n_group /
                              topk_group grouped top-k, renormalize, routed_scaling_factor            */
    ROUTER_DSV4,           /* DeepSeek-V4: scoring_func (sqrtsoftplus) top-k with the selection bias
                              `gate.bias`, renormalized, routed_scaling_factor; hash_moe layers take
                              the experts from `gate.tid2eid[token]`; swiglu_limit on every MLP       */
    ROUTER_SIGMOID_ON_INPUT,/* Llama 4 (Llama4Router): top-k logits, sigmoid, the expert's input scaled
                              by it (not its output); no renormalization                             */
    ROUTER_SIGMOID_BIAS    /* MiniMax-M2 (MiniMaxM2TopKRouter): sigmoid, top-k of the scores +
                              <moe_block>.e_score_correction_bias, unbiased weights renormalized     */
} router_kind;

/* Which family's config fields the architecture reads beyond moq_arch (model/arch/<family>.c). */
typedef enum family_cfg { FAM_PLAIN, FAM_DEEPSEEK_V3, FAM_QWEN3_5, FAM_GEMMA3, FAM_GEMMA4, FAM_LLAMA4, FAM_DEEPSEEK_V4,
                           FAM_MINIMAX_M2 } family_cfg;

/* One row per supported config.json architecture. Bias on q/k/v is loaded wherever the checkpoint
 * has it (Qwen2 always, Llama with attention_bias), so it is no column. Window defaults are the
 * config classes' defaults when config.json lacks the key (MistralConfig 4096, MixtralConfig None,
 * Qwen2Config sliding_window 4096, max_window_layers 28). */
struct arch_row {
    const char *name;
    const char *moe_block;     /* module holding the router ("gate") and experts (src/moe finds
                                  experts.N.{gate,up,down}_proj or experts.N.{w1,w3,w2}); NULL = dense */
    const char *prefix;              /* the decoder's module: <prefix>.embed_tokens, .layers.N, .norm */
    const char *head;                /* the output projection                                        */
    const char *shared_expert;       /* always-on MLP beside the experts in moe_block; NULL = none  */
    const char *shared_gate;         /* sigmoid(<moe_block>.<this>(h)) scales the shared expert      */
    const char *config_class;        /* transformers' config class (default_theta in transformers 5,
                                        the rope_theta argument default in 4.x)                     */
    int64_t     window_default;      /* sliding_window when absent; 0 = none                        */
    int64_t     max_window_default;  /* max_window_layers when absent (WINDOW_QWEN2)                */
    double      theta_default;       /* rope_theta when config.json has none (0: refuse), config_class's */
    moe_rule    moe_layers;
    window_rule window;
    attn_kind   attn;
    router_kind router;
    family_cfg  family;
    bool        qk_norm;       /* per-head RMSNorm of q and k before RoPE (Qwen3)                   */
    bool        norm_topk;     /* renormalize the top-k router weights when config.json is silent  */
    bool        norm_plus1;          /* RMSNorm weights are stored as w - 1: the norm is x·(1 + w)
                                        (Qwen3.5's Qwen3_5RMSNorm, also q/k norms; not the gated one) */
    bool        sandwich;            /* Gemma: post_attention_layernorm normalizes the attention output,
                                        pre_/post_feedforward_layernorm wrap the MLP                 */
    bool        gelu;                /* MLP activation gelu_pytorch_tanh(gate) · up, else silu       */
    bool        embed_scale;         /* embeddings × sqrt(hidden_size), rounded to bf16 as
                                        Gemma3TextScaledWordEmbedding does for bf16 weights          */
    bool        rope_pairs;          /* RoPE rotates pairs (2i, 2i + 1) (Llama 4's complex form),
                                        else (i, i + D/2) (rotate_half)                              */
    const char *mlp;                 /* the MLP module of a layer: <prefix>.layers.N.<mlp>            */
    const char *router_name;         /* the router under moe_block: <moe_block>.<router>.weight (and
                                        .bias when present: gpt-oss)                                 */
    moq_moe_act moe_act;             /* the experts' activation (gpt-oss: the clamped SwiGLU)         */
    bool        gu_interleaved;      /* stacked experts' gate_up_proj alternates gate, up columns     */
    bool        sinks;               /* self_attn.sinks [A]: a per-head logit in every softmax's
                                        denominator (gpt-oss)                                        */
};

/* theta default: transformers' config class (default_theta in transformers 5, the rope_theta
 * argument default in 4.x): 10000 for Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE; 1e6 for Mixtral. */
static const arch_row arch_rows[] = {
    /* name                                 moe block           prefix                  head                      shared expert     shared gate           config class            win   max theta      moe layers         window             attn             router                  family           qk_nm  topk   nrm+1  sandw  gelu   emb    pairs  mlp             router  moe act                 gu_il  sinks */
    {"LlamaForCausalLM",                    NULL,               "model",                "lm_head",                NULL,             NULL,                 "LlamaConfig",          0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       false, false, false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"MistralForCausalLM",                  NULL,               "model",                "lm_head",                NULL,             NULL,                 "MistralConfig",        4096, 0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_ALL_LAYERS, ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       false, false, false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Qwen2ForCausalLM",                    NULL,               "model",                "lm_head",                NULL,             NULL,                 "Qwen2Config",          4096, 28, 10000.0,   MOE_EVERY_LAYER,   WINDOW_QWEN2,      ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       false, false, false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Qwen3ForCausalLM",                    NULL,               "model",                "lm_head",                NULL,             NULL,                 "Qwen3Config",          4096, 28, 10000.0,   MOE_EVERY_LAYER,   WINDOW_QWEN2,      ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       true,  false, false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Qwen3MoeForCausalLM",                 "mlp",              "model",                "lm_head",                NULL,             NULL,                 "Qwen3MoeConfig",       4096, 28, 10000.0,   MOE_SPARSE_STEP,   WINDOW_QWEN2,      ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       true,  false, false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"MixtralForCausalLM",                  "block_sparse_moe", "model",                "lm_head",                NULL,             NULL,                 "MixtralConfig",        0,    0,  1000000.0, MOE_EVERY_LAYER,   WINDOW_ALL_LAYERS, ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* DeepSeek-V3 / R1 / V3.1 and Kimi-K2 (text): MLA, grouped sigmoid routing, shared experts,
     * first_k_dense_replace dense layers (config fields: model/arch/deepseek_v3.c) */
    {"DeepseekV3ForCausalLM",               "mlp",              "model",                "lm_head",                "shared_experts", NULL,                 "DeepseekV3Config",     0,    0,  10000.0,   MOE_FIRST_K_DENSE, WINDOW_NONE,       ATTN_MLA,        ROUTER_SIGMOID_GROUPED, FAM_DEEPSEEK_V3, false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* DeepSeek-V3.2: MLA + a DSA indexer that keeps index_topk keys per query; up to that many
     * positions it keeps them all, so the context is capped there and the indexer weights unused */
    {"DeepseekV32ForCausalLM",              "mlp",              "model",                "lm_head",                "shared_experts", NULL,                 "DeepseekV32Config",    0,    0,  10000.0,   MOE_FIRST_K_DENSE, WINDOW_NONE,       ATTN_MLA,        ROUTER_SIGMOID_GROUPED, FAM_DEEPSEEK_V3, false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* GLM-5 / 5.1 / 5.2: DeepSeek-V3.2's blocks and names; interleaved indexer RoPE and "shared"
     * indexer layers (model/arch/glm_moe_dsa.c) */
    {"GlmMoeDsaForCausalLM",                "mlp",              "model",                "lm_head",                "shared_experts", NULL,                 "GlmMoeDsaConfig",      0,    0,  10000.0,   MOE_FIRST_K_DENSE, WINDOW_NONE,       ATTN_MLA,        ROUTER_SIGMOID_GROUPED, FAM_DEEPSEEK_V3, false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* DeepSeek-V4: DeepSeek's tensor names as transformers saves them (attn, ffn, head; config
     * fields and per-layer schedules: model/arch/deepseek_v4.c; attention and mHC: model/attn/dsv4.c) */
    {"DeepseekV4ForCausalLM",               "ffn",              "model",                "head",                   "shared_experts", NULL,                 "DeepseekV4Config",     0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_DSV4,       ROUTER_DSV4,            FAM_DEEPSEEK_V4, false, true,  false, false, false, false, true,  "ffn",          "gate", MOQ_MOE_ACT_SWIGLU_LIMIT, false, false},
    /* Qwen3.5 / 3.6: Gated DeltaNet + gated full attention (model/arch/qwen3_5.c), softmax top-k
     * always renormalized, a shared expert behind a sigmoid gate */
    {"Qwen3_5ForCausalLM",                  NULL,               "model",                "lm_head",                NULL,             NULL,                 "Qwen3_5TextConfig",    0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_HYBRID_GDN, ROUTER_SOFTMAX,         FAM_QWEN3_5,     true,  true,  true,  false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Qwen3_5MoeForCausalLM",               "mlp",              "model",                "lm_head",                "shared_expert",  "shared_expert_gate", "Qwen3_5MoeTextConfig", 0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_HYBRID_GDN, ROUTER_SOFTMAX,         FAM_QWEN3_5,     true,  true,  true,  false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* the text stack of the multimodal checkpoints NVIDIA ships (vision tower and MTP weights unused) */
    {"Qwen3_5ForConditionalGeneration",     NULL,               "model.language_model", "lm_head",                NULL,             NULL,                 "Qwen3_5TextConfig",    0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_HYBRID_GDN, ROUTER_SOFTMAX,         FAM_QWEN3_5,     true,  true,  true,  false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Qwen3_5MoeForConditionalGeneration",  "mlp",              "model.language_model", "lm_head",                "shared_expert",  "shared_expert_gate", "Qwen3_5MoeTextConfig", 0,    0,  10000.0,   MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_HYBRID_GDN, ROUTER_SOFTMAX,         FAM_QWEN3_5,     true,  true,  true,  false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"KimiK25ForConditionalGeneration",     "mlp",              "language_model.model", "language_model.lm_head", "shared_experts", NULL,                 "DeepseekV3Config",     0,    0,  10000.0,   MOE_FIRST_K_DENSE, WINDOW_NONE,       ATTN_MLA,        ROUTER_SIGMOID_GROUPED, FAM_DEEPSEEK_V3, false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* Gemma 3 text: sandwich norms, GeGLU, sqrt(H) embeddings, per-layer-type windows and RoPE,
     * query_pre_attn_scalar, soft-capping (model/arch/gemma3.c) */
    {"Gemma3ForCausalLM",                   NULL,               "model",                "lm_head",                NULL,             NULL,                 "Gemma3TextConfig",     0,    0,  1000000.0, MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SOFTMAX,         FAM_GEMMA3,      true,  false, true,  true,  true,  true, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Gemma3ForConditionalGeneration",      NULL,               "model.language_model", "lm_head",                NULL,             NULL,                 "Gemma3TextConfig",     0,    0,  1000000.0, MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SOFTMAX,         FAM_GEMMA3,      true,  false, true,  true,  true,  true, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* Gemma 4 text: Gemma 3's blocks with x·w norms, a weightless v norm, softmax scale 1, global layers with
     * their own head_dim / KV heads, k_eq_v and proportional RoPE, a per-layer scalar (model/arch/gemma4.c) */
    {"Gemma4ForCausalLM",                   NULL,               "model",                "lm_head",                NULL,             NULL,                 "Gemma4TextConfig",     0,    0,  1000000.0, MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SOFTMAX,         FAM_GEMMA4,      true,  false, false, true,  true,  true, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    {"Gemma4ForConditionalGeneration",      NULL,               "model.language_model", "lm_head",                NULL,             NULL,                 "Gemma4TextConfig",     0,    0,  1000000.0, MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SOFTMAX,         FAM_GEMMA4,      true,  false, false, true,  true,  true, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
    /* Llama 4 text: top-1 sigmoid routing on the experts' input + a shared expert, NoPE layers with
     * attention temperature, chunked attention on RoPE layers, L2 q/k norm (model/arch/llama4.c) */
    {"Llama4ForCausalLM",                   "feed_forward",     "model",                "lm_head",                "shared_expert",  NULL,                 "Llama4TextConfig",     0,    0,  500000.0,  MOE_LAYER_LIST,    WINDOW_NONE,       ATTN_GQA,        ROUTER_SIGMOID_ON_INPUT,FAM_LLAMA4,      false, false, false, false, false, false, true, "feed_forward", "router", MOQ_MOE_ACT_SILU,        false, false},
    {"Llama4ForConditionalGeneration",      "feed_forward",     "language_model.model", "language_model.lm_head", "shared_expert",  NULL,                 "Llama4TextConfig",     0,    0,  500000.0,  MOE_LAYER_LIST,    WINDOW_NONE,       ATTN_GQA,        ROUTER_SIGMOID_ON_INPUT,FAM_LLAMA4,      false, false, false, false, false, false, true, "feed_forward", "router", MOQ_MOE_ACT_SILU,        false, false},
    /* gpt-oss: attention sinks, q/k/v/o bias, alternating sliding window (layer_types), softmax top-k with
     * a router bias, stacked experts with interleaved gate/up and biases, the clamped SwiGLU */
    {"GptOssForCausalLM",                   "mlp",              "model",                "lm_head",                NULL,             NULL,                 "GptOssConfig",         128,  0,  150000.0,  MOE_EVERY_LAYER,   WINDOW_LAYER_TYPES,ATTN_GQA,        ROUTER_SOFTMAX,         FAM_PLAIN,       false, true,  false, false, false, false, false, "mlp",          "router", MOQ_MOE_ACT_SWIGLU_LIMIT, true,  true},
    /* MiniMax-M2 / M2.5 / M2.7: q/k RMSNorm over the whole projection (all heads), partial RoPE, sigmoid
     * top-k with the correction bias, every layer MoE with Mixtral's expert names (model/arch/minimax_m2.c) */
    {"MiniMaxM2ForCausalLM",                "block_sparse_moe", "model",                "lm_head",                NULL,             NULL,                 "MiniMaxM2Config",      0,    0,  5000000.0, MOE_EVERY_LAYER,   WINDOW_NONE,       ATTN_GQA,        ROUTER_SIGMOID_BIAS,    FAM_MINIMAX_M2,  false, true,  false, false, false, false, false, "mlp",          "gate", MOQ_MOE_ACT_SILU,        false, false},
};

bool moq_model_rope_theta_default(const char *architecture, double *theta, const char **config_class) {
    for (size_t i = 0; architecture && i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, architecture) == 0 && arch_rows[i].theta_default > 0) {
            *theta = arch_rows[i].theta_default, *config_class = arch_rows[i].config_class;
            return true;
        }
    return false;
}

static const char *const qkv_shards[] = {"q_proj", "k_proj", "v_proj"}; /* k_eq_v layers: the first two */

/* Tensor parallelism (plan.h): which part of each matrix this rank loads. Column-parallel layers
 * keep rows (q heads, kv heads, intermediate), row-parallel ones keep the matching input columns
 * and rank 0 keeps their bias; NULL when the model is whole. */
static const moq_slice *tp_rows(const moq_model *m, moq_slice *s, int n, const int64_t *start, const int64_t *count) {
    if (m->tp.G < 2) return NULL;
    for (int i = 0; i < n; i++) s[i] = (moq_slice){MOQ_SLICE_ROWS, start[i], count[i], false};
    return s;
}
static const moq_slice *tp_cols(const moq_model *m, moq_slice *s, int64_t start, int64_t count) {
    if (m->tp.G < 2) return NULL;
    *s = (moq_slice){MOQ_SLICE_COLS, start, count, m->tp.rank == 0};
    return s;
}
/* One collective of the forward (nothing when the model is whole). */
static moq_status tp_sum(moq_model *m, float *x, int64_t n, moq_error *err) {
    return m->tp.G > 1 ? moq_comm_all_reduce(m->comm, x, (size_t)n, err) : MOQ_OK;
}
static const char *const gate_up_shards[] = {"gate_proj", "up_proj"};
static const char *const w13_shards[] = {"w1", "w3"}; /* DeepSeek-V4's shared expert: w1 gate, w3 up, w2 down */

bool moq_model_architecture_supported(const char *name) {
    for (size_t i = 0; name && i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, name) == 0) return true;
    return false;
}

moq_status moq_model_config_check(const moq_checkpoint *c, moq_error *err) {
    const moq_arch *a = moq_checkpoint_arch(c);
    const arch_row *r = NULL;
    for (size_t i = 0; a && i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, a->architecture) == 0) r = &arch_rows[i];
    if (r && r->family == FAM_MINIMAX_M2) { /* rotary_dim, qk_norm_type, scoring_func as open_model reads them */
        moq_minimax_m2_cfg mc;
        const int64_t A = a->num_attention_heads;
        return moq_minimax_m2_read(c, a->head_dim ? a->head_dim : (A ? a->hidden_size / A : 0), &mc, err);
    }
    if (!r || r->family != FAM_GEMMA4 || a->num_hidden_layers < 1 || a->num_hidden_layers > 100000) return MOQ_OK;
    const int64_t L = a->num_hidden_layers, A = a->num_attention_heads;
    bool *sl = malloc((size_t)L * sizeof *sl);
    int64_t *hd = malloc((size_t)L * sizeof *hd), *kv = malloc((size_t)L * sizeof *kv);
    moq_gemma4_cfg g;
    moq_status st = !sl || !hd || !kv ? MOQ_FAIL(err, MOQ_ERR_NOMEM, "config.json", "out of memory for %lld layers", (long long)L)
                                      : moq_gemma4_read(c, L, (double)a->max_position_embeddings, a->head_dim ? a->head_dim : (A ? a->hidden_size / A : 0),
                                                        a->num_key_value_heads ? a->num_key_value_heads : A, &g, sl, hd, kv, err);
    char nm[256];
    snprintf(nm, sizeof nm, "%s.layers.0.experts.gate_up_proj", r->prefix);
    if (st == MOQ_OK && g.moe && moq_checkpoint_tensor(c, nm)) /* as open_moe refuses it */
        st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, nm, "Gemma 4's stacked experts [E, 2I, H] (transformers' own layout) are not read; "
                      "expected experts.N.{gate,up,down}_proj, as ModelOpt exports them");
    free(sl);
    free(hd);
    free(kv);
    return st;
}

const char *moq_model_arch_name(size_t i) { return i < sizeof arch_rows / sizeof arch_rows[0] ? arch_rows[i].name : NULL; }

size_t moq_model_arch_count(void) { return sizeof arch_rows / sizeof arch_rows[0]; }

/* Routed experts report through the MoE layer's hook (moe.h), tagged with the layer. */
static void moe_tap(void *user, int64_t l, int64_t expert, int which, const float *x, int64_t rows, int64_t cols) {
    const moq_model *m = user;
    m->obs(m->obs_user, l, which ? MOQ_TAP_EXPERT_DOWN_IN : MOQ_TAP_EXPERT_IN, expert, x, rows, cols);
}

/* MLA and Gated DeltaNet report through their own hooks (mla.h, gdn.h); which -> the model's tap. */
static const moq_model_tap k_mla_taps[] = {[MOQ_MLA_TAP_IN] = MOQ_TAP_QKV_IN, [MOQ_MLA_TAP_Q_B_IN] = MOQ_TAP_Q_B_IN, [MOQ_MLA_TAP_O_IN] = MOQ_TAP_O_IN};
static const moq_model_tap k_gdn_taps[] = {[MOQ_GDN_TAP_IN] = MOQ_TAP_QKV_IN, [MOQ_GDN_TAP_OUT_IN] = MOQ_TAP_O_IN};

static void mla_tap(void *user, int64_t l, int which, const float *x, int64_t rows, int64_t cols) {
    const moq_model *m = user;
    m->obs(m->obs_user, l, k_mla_taps[which], -1, x, rows, cols);
}

static void gdn_tap(void *user, int64_t l, int which, const float *x, int64_t rows, int64_t cols) {
    const moq_model *m = user;
    m->obs(m->obs_user, l, k_gdn_taps[which], -1, x, rows, cols);
}

void moq_model_set_observer(moq_model *m, moq_model_observer fn, void *user) {
    if (!m) return;
    m->obs = fn;
    m->obs_user = user;
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        layer *ly = &m->layers[l];
        if (ly->moe) moq_moe_set_observer(ly->moe, fn ? moe_tap : NULL, m, l);
        if (m->arch->attn == ATTN_MLA) ly->mla.obs = fn ? mla_tap : NULL, ly->mla.obs_user = m;
        if (ly->linear) ly->gdn.obs = fn ? gdn_tap : NULL, ly->gdn.obs_user = m, ly->gdn.obs_layer = l;
    }
}

#define TAP(m, l, tap, x, rows, cols) \
    do { if ((m)->obs) (m)->obs((m)->obs_user, (l), (tap), -1, (x), (rows), (cols)); } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) { /* this process, all threads */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

moq_model_opts moq_model_opts_default(void) {
    moq_model_opts o;
    memset(&o, 0, sizeof o);
    o.compat = MOQ_COMPAT_MOQ;
    o.kv_elem = MOQ_ELEM_F32;
    o.cpu_mask = ~0u;
    return o;
}

/* A top-level boolean of config.json; *v unchanged when absent. */
static moq_status read_bool(const moq_checkpoint *c, const char *key, bool *v, moq_error *err) {
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_OK;
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    bool present = false, b = false;
    const moq_status st = moq_json_bool(j, key, &b, &present, "config.json", NULL, err);
    if (st == MOQ_OK && present) *v = b;
    cJSON_Delete(j);
    return st;
}

/* rope_scaling details beyond moq_arch (llama3 and yarn parameters). */
/* RoPE settings: theta and the type's parameters from the object hf_config.c found
 * (rope_parameters or rope_scaling, maybe under text_config). A config without rope_theta takes
 * the architecture's documented default, with a note (*note, static text in `note`); a row
 * without one is an error: never a silent 10000. */
static moq_status read_rope(const moq_checkpoint *c, const moq_arch *a, moq_rope_params *p, char *note, size_t note_n, moq_error *err) {
    memset(p, 0, sizeof *p);
    note[0] = 0;
    snprintf(p->type, sizeof p->type, "%s", a->rope_scaling_type);
    p->theta = a->rope_theta;
    if (!a->rope_theta_key[0]) {
        const char *cls = NULL;
        if (!moq_model_rope_theta_default(a->architecture, &p->theta, &cls))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_theta is missing (no rope_parameters.rope_theta, rope_theta or "
                            "rope_scaling.rope_theta) and %s has no documented default", a->architecture);
        snprintf(note, note_n, "config.json: no rope_theta (looked in rope_parameters, rope_theta, rope_scaling); %s's default %g is used",
                 cls, p->theta);
    }
    p->factor = a->rope_scaling_factor > 0 ? a->rope_scaling_factor : 1.0;
    p->low_freq_factor = 1.0;
    p->high_freq_factor = 4.0;
    p->original_max_pos = (double)a->max_position_embeddings;
    p->beta_fast = 32.0;
    p->beta_slow = 1.0;
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text || !a->rope_params_key[0]) return MOQ_OK;
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const bool in_text = strncmp(a->rope_params_key, "text_config.", 12) == 0;
    const cJSON *base = in_text ? cJSON_GetObjectItemCaseSensitive(j, "text_config") : j;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(base, in_text ? a->rope_params_key + 12 : a->rope_params_key);
    static const struct { const char *key; size_t off; } keys[] = {
        {"low_freq_factor", offsetof(moq_rope_params, low_freq_factor)},
        {"high_freq_factor", offsetof(moq_rope_params, high_freq_factor)},
        {"original_max_position_embeddings", offsetof(moq_rope_params, original_max_pos)},
        {"beta_fast", offsetof(moq_rope_params, beta_fast)},
        {"beta_slow", offsetof(moq_rope_params, beta_slow)},
        {"attention_factor", offsetof(moq_rope_params, attention_factor)},
        {"mscale", offsetof(moq_rope_params, mscale)},
        {"mscale_all_dim", offsetof(moq_rope_params, mscale_all_dim)},
    };
    moq_status st = MOQ_OK;
    bool trunc = true, tp = false; /* yarn truncate (gpt-oss: false) */
    if (rs && cJSON_IsObject(rs)) st = moq_json_bool(rs, "truncate", &trunc, &tp, "config.json", a->rope_params_key, err);
    p->no_truncate = !trunc;
    for (size_t i = 0; rs && cJSON_IsObject(rs) && i < sizeof keys / sizeof keys[0] && st == MOQ_OK; i++) {
        bool present = false;
        double v = 0;
        st = moq_json_num(rs, keys[i].key, &v, &present, "config.json", a->rope_params_key, err);
        if (present) memcpy((char *)p + keys[i].off, &v, sizeof v);
    }
    cJSON_Delete(j);
    return st;
}

/* sliding_window of config.json: a positive integer, null (-> *v = 0, no window) or absent (*v unchanged). */
static moq_status read_window(const cJSON *j, int64_t *v, moq_error *err) {
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window"))) {
        *v = 0;
        return MOQ_OK;
    }
    bool present = false;
    MOQ_TRY(moq_json_int(j, "sliding_window", v, &present, "config.json", NULL, err));
    if (present && *v < 1) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "sliding_window %lld, expected a positive integer or null", (long long)*v);
    return MOQ_OK;
}

/* Per-layer plan from config.json j: each layer's attention window (arch_row.window) and whether it
 * holds routed experts (arch_row.moe_block, narrowed by arch_row.moe_layers). *n_moe: MoE layers. */
static moq_status plan_layers(moq_model *m, const cJSON *j, int64_t *n_moe, moq_error *err) {
    const arch_row *r = m->arch;
    int64_t win = r->window == WINDOW_NONE ? 0 : r->window_default, from = 0, step = 1;
    bool use = r->window != WINDOW_QWEN2, present = false;
    if (r->window != WINDOW_NONE) MOQ_TRY(read_window(j, &win, err));
    if (r->window == WINDOW_QWEN2) {
        from = r->max_window_default;
        MOQ_TRY(moq_json_bool(j, "use_sliding_window", &use, &present, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "max_window_layers", &from, &present, "config.json", NULL, err));
    }
    const cJSON *lt = r->window == WINDOW_LAYER_TYPES ? cJSON_GetObjectItemCaseSensitive(j, "layer_types") : NULL;
    if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)m->L))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "layer_types is %s of %d entries, expected an array of %lld (num_hidden_layers)",
                        moq_json_type(lt), cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0, (long long)m->L);
    const cJSON *only = NULL;
    if (r->moe_layers == MOE_SPARSE_STEP) {
        MOQ_TRY(moq_json_int(j, "decoder_sparse_step", &step, &present, "config.json", NULL, err));
        if (step < 1) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "decoder_sparse_step %lld, expected >= 1", (long long)step);
        only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_only_layers is %s, expected an array of layer indices", moq_json_type(only));
    }
    /* Qwen3MoeDecoderLayer: experts iff l not in mlp_only_layers, num_experts > 0 and (l + 1) % step == 0 */
    const bool experts = r->moe_block && (r->moe_layers != MOE_SPARSE_STEP || m->E > 0);
    for (int64_t l = 0; l < m->L; l++) {
        m->layers[l].is_moe = experts && (l + 1) % step == 0;
        if (r->moe_layers == MOE_LAYER_LIST) m->layers[l].is_moe = experts && m->moe_list[l];
        if (r->moe_layers == MOE_FIRST_K_DENSE) /* DeepSeek: mlp_layer_types, else first_k_dense_replace, moe_layer_freq */
            m->layers[l].is_moe = experts && (m->ds.has_mlp_types ? m->ds.mlp_sparse[l]
                                                                  : l >= m->ds.first_k_dense_replace && l % m->ds.moe_layer_freq == 0);
        m->layers[l].window = use && l >= from ? win : 0;
        if (r->window == WINDOW_LAYER_TYPES) { /* GptOssConfig: layer_types, else (l + 1) % 2 -> sliding */
            const cJSON *t = cJSON_IsArray(lt) ? cJSON_GetArrayItem(lt, (int)l) : NULL;
            const bool sl = t ? cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0 : (l + 1) % 2 != 0;
            if (t && !sl && !(cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0))
                return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "layer_types[%lld] is not \"sliding_attention\" or \"full_attention\"", (long long)l);
            m->layers[l].window = sl ? win : 0;
        }
    }
    const cJSON *e = NULL, *arr = cJSON_IsArray(only) ? only : NULL;
    int i = 0;
    cJSON_ArrayForEach(e, arr) {
        if (!moq_json_is_int(e, 0, (double)(m->L - 1)))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_only_layers[%d] is %s, expected a layer index in [0, %lld)", i,
                            cJSON_IsNumber(e) ? "out of range or not an integer" : moq_json_type(e), (long long)m->L);
        m->layers[(int64_t)e->valuedouble].is_moe = false;
        i++;
    }
    *n_moe = 0;
    for (int64_t l = 0; l < m->L; l++) *n_moe += m->layers[l].is_moe;
    return MOQ_OK;
}

static moq_status read_layer_plan(moq_model *m, int64_t *n_moe, moq_error *err) {
    const char *text = moq_checkpoint_json_text(m->ckpt, "config.json");
    cJSON *j = NULL;
    if (text) MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    else j = cJSON_CreateObject();
    if (!j) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "config.json", "out of memory");
    const moq_status st = plan_layers(m, j, n_moe, err);
    cJSON_Delete(j);
    return st;
}

static void progress(const moq_model *m, uint64_t done, uint64_t total) {
    if (m->opts.progress) m->opts.progress(m->opts.progress_user, "load", done, total);
}

/* Whose scale handling the experts follow, per resolution profile (one row each). */
static const moq_moe_compat moe_compat_of[MOQ_COMPAT_COUNT] = {
    [MOQ_COMPAT_MOQ] = MOQ_MOE_COMPAT_EXACT, [MOQ_COMPAT_VLLM] = MOQ_MOE_COMPAT_VLLM, [MOQ_COMPAT_SGLANG] = MOQ_MOE_COMPAT_SGLANG,
};

/* Router and experts of layer l through src/moe: the experts module is resolved once (kind
 * MOQ_KIND_MOE), the method picks the expert format; softmax top-k routing, SiLU-gated experts. */
static moq_status open_moe(moq_model *m, int64_t l, const moq_linear_opts *lo, moq_error *err) {
    layer *ly = &m->layers[l];
    char p[256], e[300];
    if (m->arch->moe_block) snprintf(p, sizeof p, "%s.layers.%lld.%s", m->arch->prefix, (long long)l, m->arch->moe_block);
    else snprintf(p, sizeof p, "%s.layers.%lld", m->arch->prefix, (long long)l); /* Gemma 4: <layer>.experts, <layer>.router */
    snprintf(e, sizeof e, "%s.experts", p);
    moq_resolution res = {.method = moq_method_name(MOQ_METHOD_NONE), .rule = "no-quantization-config"};
    if (m->q) MOQ_TRY(moq_resolve(m->q, e, MOQ_KIND_MOE, NULL, 0, &res, err));
    moq_moe_opts mo = moq_moe_opts_default();
    if (moq_moe_format_from_method(res.method, &mo.format, err) != MOQ_OK)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, e, "resolved to %s (rule %s), which is not an expert method", res.method, res.rule);
    mo.act = m->arch->moe_act;
    mo.interleaved_gate_up = m->arch->gu_interleaved;
    mo.routing.scoring = MOQ_MOE_SCORE_SOFTMAX;
    mo.routing.top_k = (int)m->topk;
    mo.routing.renormalize = m->norm_topk;
    if (m->arch->router == ROUTER_SIGMOID_GROUPED) { /* DeepseekV3TopkRouter */
        mo.routing.scoring = MOQ_MOE_SCORE_SIGMOID;
        mo.routing.num_expert_group = (int)m->ds.n_group;
        mo.routing.topk_group = (int)m->ds.topk_group;
        mo.routing.use_correction_bias = true;
        mo.routing.routed_scaling_factor = (float)m->ds.routed_scaling_factor;
    }
    if (m->arch->router == ROUTER_DSV4) { /* DeepseekV4TopKRouter / DeepseekV4HashRouter, clamped SwiGLU */
        mo.routing.scoring = (moq_moe_scoring)m->v4->scoring;
        mo.routing.use_correction_bias = !m->v4->hash[l];
        mo.routing.routed_scaling_factor = (float)m->v4->routed_scaling_factor;
        mo.swiglu_limit = (float)m->v4->swiglu_limit, mo.swiglu_alpha = 1.0f, mo.swiglu_beta = 0.0f;
    }
    if (m->arch->router == ROUTER_SIGMOID_BIAS) { /* MiniMaxM2TopKRouter: always renormalized */
        mo.routing.scoring = MOQ_MOE_SCORE_SIGMOID;
        mo.routing.use_correction_bias = true;
        mo.routing.renormalize = true;
    }
    if (m->arch->router == ROUTER_SIGMOID_ON_INPUT) { /* Llama4Router + Llama4TextMoe */
        mo.routing.scoring = MOQ_MOE_SCORE_SIGMOID;
        mo.routing.renormalize = false;
        mo.routing.weight_on_input = true;
    }
    mo.num_experts = m->E;
    mo.router = m->arch->router_name;
    if (m->arch->family == FAM_GEMMA4) { /* Gemma4TextRouter: logits from forward (gemma4_moe), × per_expert_scale; GeGLU experts */
        char st[320];
        snprintf(st, sizeof st, "%s.experts.gate_up_proj", p);
        if (moq_checkpoint_tensor(m->ckpt, st))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, st, "Gemma 4's stacked experts [E, 2I, H] (transformers' own layout) are not read; "
                            "expected experts.N.{gate,up,down}_proj, as ModelOpt exports them");
        mo.router = NULL;
        mo.act = MOQ_MOE_ACT_GELU_TANH;
        mo.routing.renormalize = true;
        mo.routing.expert_scale = ly->expert_scale;
    }
    mo.compat = moe_compat_of[m->opts.compat < MOQ_COMPAT_COUNT ? m->opts.compat : MOQ_COMPAT_MOQ];
    mo.n_threads = lo->n_threads;
    mo.cpu_mask = lo->cpu_mask;
    mo.keep_canonical = m->opts.device == MOQ_DEVICE_CUDA; /* moe_gpu.c packs the experts from it */
    int32_t *map = NULL;
    if (m->tp.G > 1 && m->tp.ep) { /* expert parallelism: this rank's experts whole (the seeds' expert_map) */
        if (!(map = moq_blobs_alloc(&m->blobs, (size_t)m->E * sizeof *map))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, p, "out of memory for the expert map");
        for (int64_t g = 0; g < m->E; g++) map[g] = moq_tp_plan_expert(&m->tp, g);
        mo.expert_map = map;
    }
    if (m->tp.G > 1 && !m->tp.ep) mo.inter_slice = (moq_moe_slice){m->tp.ie0, m->tp.ie_n, m->tp.rank == 0};
    ly->moe_fmt = mo.format;
    const double t0 = now_s();
    const moq_status st = moq_moe_create(&ly->moe, m->ckpt, p, &mo, err);
    m->blobs.pack_s += now_s() - t0;
    return st;
}

/* The shared expert of MoE layer l: an always-on SiLU MLP of intermediate Is beside the routed ones,
 * opened as ordinary linears (fused gate_up + down), so it may be quantized differently from the
 * experts (ModelOpt keeps Kimi-K2's shared experts in BF16 while the experts are NVFP4). */
static moq_status open_shared(moq_model *m, int64_t l, const moq_linear_opts *lo, moq_error *err) {
    layer *ly = &m->layers[l];
    char p[320];
    const bool v4 = m->arch->family == FAM_DEEPSEEK_V4;
    snprintf(p, sizeof p, "%s.layers.%lld.%s.%s.%s", m->arch->prefix, (long long)l, m->arch->moe_block, m->arch->shared_expert, v4 ? "w13" : "gate_up_proj");
    moq_slice sg[2], sd;
    const int64_t s0[2] = {m->tp.is0, m->tp.is0}, sn[2] = {m->tp.is_n, m->tp.is_n};
    MOQ_TRY(moq_layers_load_linear_sliced(&ly->sh_gate_up, m->ckpt, m->q, p, MOQ_KIND_LINEAR, v4 ? w13_shards : gate_up_shards, 2, lo,
                                          tp_rows(m, sg, 2, s0, sn), &m->blobs, err));
    snprintf(p, sizeof p, "%s.layers.%lld.%s.%s.%s", m->arch->prefix, (long long)l, m->arch->moe_block, m->arch->shared_expert, v4 ? "w2" : "down_proj");
    MOQ_TRY(moq_layers_load_linear_sliced(&ly->sh_down, m->ckpt, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, tp_cols(m, &sd, m->tp.is0, m->tp.is_n),
                                          &m->blobs, err));
    if (ly->sh_gate_up.w.N != 2 * m->Is || ly->sh_gate_up.w.row0[1] != m->Is || ly->sh_gate_up.w.K != m->H || ly->sh_down.w.N != m->H ||
        ly->sh_down.w.K != m->Is)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->sh_down.name, "shared expert shapes gate_up [%lld, %lld], down [%lld, %lld]; expected [2 x %lld, %lld] and [%lld, %lld]",
                        (long long)ly->sh_gate_up.w.N, (long long)ly->sh_gate_up.w.K, (long long)ly->sh_down.w.N, (long long)ly->sh_down.w.K,
                        (long long)m->Is, (long long)m->H, (long long)m->H, (long long)m->Is);
    if (m->arch->shared_gate) {
        snprintf(p, sizeof p, "%s.layers.%lld.%s.%s", m->arch->prefix, (long long)l, m->arch->moe_block, m->arch->shared_gate);
        MOQ_TRY(moq_layers_load_linear(&ly->sh_gate, m->ckpt, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, &m->blobs, err));
        if (ly->sh_gate.w.N != 1 || ly->sh_gate.w.K != m->H)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->sh_gate.name, "shape [%lld, %lld], expected [1, %lld]", (long long)ly->sh_gate.w.N,
                            (long long)ly->sh_gate.w.K, (long long)m->H);
    }
    ly->has_shared = true;
    return MOQ_OK;
}

/* An RMSNorm weight as the runner uses it: w, or 1 + w where the architecture stores w - 1. */
static moq_status load_norm(moq_model *m, float **out, const char *name, int64_t n, moq_error *err) {
    MOQ_TRY(moq_layers_f32(out, m->ckpt, name, n, &m->blobs, err));
    for (int64_t i = 0; m->arch->norm_plus1 && i < n; i++) (*out)[i] += 1.0f;
    return MOQ_OK;
}

/* DeepSeek-V4: the compress RoPE and the attention dimensions (model/attn/dsv4.h). */
static moq_status open_dsv4_dims(moq_model *m, moq_error *err) {
    const moq_dsv4_cfg *v = m->v4;
    m->inv_freq_c = moq_blobs_alloc(&m->blobs, (size_t)m->Drot / 2 * sizeof(float));
    if (!m->inv_freq_c) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "config.json", "out of memory for %lld rope frequencies", (long long)m->Drot / 2);
    MOQ_TRY(moq_rope_inv_freq(&v->rope_compress, m->Drot, m->inv_freq_c, &m->mscale_c, err));
    if ((m->A * m->D) % v->o_groups || v->hc_mult > 16)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_attention_heads %lld x head_dim %lld with o_groups %lld, hc_mult %lld; expected o_groups to "
                        "divide heads x head_dim and hc_mult <= 16", (long long)m->A, (long long)m->D, (long long)v->o_groups, (long long)v->hc_mult);
    m->v4d = (moq_dsv4_dims){.H = m->H, .A = m->A, .D = m->D, .r = m->Drot, .q_lora = v->q_lora_rank, .og = v->o_groups, .olr = v->o_lora_rank,
                             .nih = v->index_n_heads, .ihd = v->index_head_dim, .topk = v->index_topk, .W = v->sliding_window,
                             .hc = v->hc_mult, .hc_iters = v->hc_sinkhorn_iters, .eps = m->eps, .hc_eps = v->hc_eps};
    return MOQ_OK;
}

/* DeepSeek-V4 layers: attention + compressors + mHC (model/attn/dsv4.c), the norms attn_norm /
 * ffn_norm, experts with a shared expert, and a hash layer's tid2eid table (i64 or i32 [V, topk]). */
static moq_status open_layers_dsv4(moq_model *m, const moq_linear_opts *lo, moq_error *err) {
    char p[256], n[320];
    for (int64_t l = 0; l < m->L; l++) {
        layer *ly = &m->layers[l];
        snprintf(p, sizeof p, "%s.layers.%lld", m->arch->prefix, (long long)l);
        MOQ_TRY(moq_dsv4_open(&ly->v4, m->ckpt, m->q, p, &m->v4d, m->v4->ratio[l], m->v4->indexed[l], m->T, lo, &m->blobs, err));
        const bool comp = m->v4->ratio[l] > 0; /* sliding layers: the main RoPE; compressed ones: the compress RoPE */
        ly->v4.inv_freq = comp ? m->inv_freq_c : m->inv_freq, ly->v4.mscale = comp ? m->mscale_c : m->mscale;
        ly->v4.inv_freq_c = m->inv_freq_c, ly->v4.mscale_c = m->mscale_c;
        if (!ly->is_moe) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, p, "DeepSeek-V4 layers all hold experts");
        if (m->Is > 0) MOQ_TRY(open_shared(m, l, lo, err));
        MOQ_TRY(open_moe(m, l, lo, err));
        snprintf(n, sizeof n, "%s.attn_norm.weight", p);
        MOQ_TRY(load_norm(m, &ly->in_norm, n, m->H, err));
        snprintf(n, sizeof n, "%s.ffn_norm.weight", p);
        MOQ_TRY(load_norm(m, &ly->post_norm, n, m->H, err));
        if (m->v4->hash[l]) {
            snprintf(n, sizeof n, "%s.%s.gate.tid2eid", p, m->arch->moe_block);
            const moq_tensor *t = moq_checkpoint_tensor(m->ckpt, n);
            if (!t) return MOQ_FAIL(err, MOQ_ERR_TENSOR, n, "tensor missing (mlp_layer_types says hash_moe: the token -> experts table)");
            if ((t->dtype != MOQ_DT_I64 && t->dtype != MOQ_DT_I32) || t->ndim != 2 || t->shape[0] != m->V || t->shape[1] != m->topk)
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, n, "dtype %s with %d dims, expected I64 or I32 [vocab_size %lld, num_experts_per_tok %lld]",
                                moq_dtype_name(t->dtype), t->ndim, (long long)m->V, (long long)m->topk);
            ly->hash_ids = moq_blobs_alloc(&m->blobs, (size_t)(m->V * m->topk) * sizeof(int32_t));
            if (!ly->hash_ids) return MOQ_FAIL(err, MOQ_ERR_NOMEM, n, "out of memory");
            for (int64_t i = 0; i < m->V * m->topk; i++) {
                int64_t v = 0;
                if (t->dtype == MOQ_DT_I64) memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
                else { int32_t w; memcpy(&w, (const uint8_t *)t->data + 4 * i, 4); v = w; }
                if (v < 0 || v >= m->E)
                    return MOQ_FAIL(err, MOQ_ERR_TENSOR, n, "expert id %lld at token %lld, expected 0..%lld", (long long)v, (long long)(i / m->topk), (long long)m->E - 1);
                ly->hash_ids[i] = (int32_t)v;
            }
        }
        progress(m, (uint64_t)l + 1, (uint64_t)m->L);
    }
    const int64_t hc = m->v4d.hc;
    snprintf(n, sizeof n, "%s.hc_head.hc_fn", m->arch->prefix);
    MOQ_TRY(moq_layers_f32(&m->hc_fn, m->ckpt, n, hc * hc * m->H, &m->blobs, err));
    snprintf(n, sizeof n, "%s.hc_head.hc_base", m->arch->prefix);
    MOQ_TRY(moq_layers_f32(&m->hc_base, m->ckpt, n, hc, &m->blobs, err));
    snprintf(n, sizeof n, "%s.hc_head.hc_scale", m->arch->prefix);
    return moq_layers_f32(&m->hc_scale, m->ckpt, n, 1, &m->blobs, err);
}

static moq_status open_layers(moq_model *m, const moq_linear_opts *lo, moq_error *err) {
    if (m->arch->attn == ATTN_DSV4) return open_layers_dsv4(m, lo, err);
    const moq_checkpoint *c = m->ckpt;
    char p[256], n[320];
    for (int64_t l = 0; l < m->L; l++) {
        layer *ly = &m->layers[l];
        if (m->arch->attn == ATTN_MLA) {
            snprintf(p, sizeof p, "%s.layers.%lld.self_attn", m->arch->prefix, (long long)l);
            moq_mla_dims dl = m->mla;
            dl.ishared = m->ds.index_shared[l];
            MOQ_TRY(moq_mla_open(&ly->mla, c, m->q, p, &dl, lo, &m->blobs, err));
        } else if (ly->linear) {
            snprintf(p, sizeof p, "%s.layers.%lld.linear_attn", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_gdn_open(&ly->gdn, c, m->q, p, &m->gdn, lo, &m->blobs, err));
        } else {
            snprintf(p, sizeof p, "%s.layers.%lld.self_attn.qkv_proj", m->arch->prefix, (long long)l);
            snprintf(n, sizeof n, "%s.weight", p);
            if (m->tp.G > 1 && moq_checkpoint_tensor(c, n)) /* one tensor: the q/k/v edges are not where the slices expect them */
                return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, n, "a fused qkv_proj on disk under --tp %d; tensor parallelism reads q_proj, k_proj and v_proj", m->tp.G);
            moq_slice qs[3], os;
            const int64_t q0[3] = {m->tp.a0 * m->qh, m->tp.kv0 * m->D, m->tp.kv0 * m->D}, qn[3] = {m->A * m->qh, m->KV * m->D, m->KV * m->D};
            MOQ_TRY(moq_layers_load_linear_sliced(&ly->qkv, c, m->q, p, MOQ_KIND_LINEAR, qkv_shards, ly->k_eq_v ? 2 : 3, lo, tp_rows(m, qs, 3, q0, qn), &m->blobs, err));
            snprintf(p, sizeof p, "%s.layers.%lld.self_attn.o_proj", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_load_linear_sliced(&ly->o, c, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, tp_cols(m, &os, m->tp.a0 * m->D, m->A * m->D),
                                                  &m->blobs, err));
        }
        if (ly->is_moe && m->Is > 0) MOQ_TRY(open_shared(m, l, lo, err));
        if (ly->is_moe) MOQ_TRY(open_moe(m, l, lo, err));
        else {
            moq_slice gs[2], ds;
            const int64_t g0[2] = {m->tp.i0, m->tp.i0}, gn[2] = {m->I, m->I};
            snprintf(p, sizeof p, "%s.layers.%lld.%s.gate_up_proj", m->arch->prefix, (long long)l, m->arch->mlp);
            MOQ_TRY(moq_layers_load_linear_sliced(&ly->gate_up, c, m->q, p, MOQ_KIND_LINEAR, gate_up_shards, 2, lo, tp_rows(m, gs, 2, g0, gn), &m->blobs,
                                                  err));
            snprintf(p, sizeof p, "%s.layers.%lld.%s.down_proj", m->arch->prefix, (long long)l, m->arch->mlp);
            MOQ_TRY(moq_layers_load_linear_sliced(&ly->down, c, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, tp_cols(m, &ds, m->tp.i0, m->I), &m->blobs, err));
        }
        const int64_t qkvN = m->A * ly->qh + (ly->k_eq_v ? 1 : 2) * ly->KV * ly->D; /* rows of the fused projection */
        const bool gqa = ly->qkv.lin != NULL;
        if (gqa && (ly->qkv.w.N != qkvN || ly->qkv.w.K != m->H || ly->qkv.w.row0[1] != m->A * ly->qh))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->qkv.name, "qkv rows %lld (q %lld), K %lld; expected %lld x %lld + %d x %lld x %lld rows, q %lld, K = hidden %lld",
                            (long long)ly->qkv.w.N, (long long)ly->qkv.w.row0[1], (long long)ly->qkv.w.K, (long long)m->A, (long long)ly->qh,
                            ly->k_eq_v ? 1 : 2, (long long)ly->KV, (long long)ly->D, (long long)(m->A * ly->qh), (long long)m->H);
        if (gqa && (ly->o.w.N != m->H || ly->o.w.K != m->A * ly->D))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->o.name, "o_proj shape [%lld, %lld], expected [%lld, %lld]", (long long)ly->o.w.N,
                            (long long)ly->o.w.K, (long long)m->H, (long long)(m->A * ly->D));
        if (!ly->is_moe && (ly->gate_up.w.N != 2 * m->I || ly->gate_up.w.row0[1] != m->I || ly->gate_up.w.K != m->H || ly->down.w.N != m->H || ly->down.w.K != m->I))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->down.name, "mlp shapes gate_up [%lld, %lld], down [%lld, %lld]; expected [2 x %lld, %lld] and [%lld, %lld]",
                            (long long)ly->gate_up.w.N, (long long)ly->gate_up.w.K, (long long)ly->down.w.N, (long long)ly->down.w.K,
                            (long long)m->I, (long long)m->H, (long long)m->H, (long long)m->I);
        snprintf(n, sizeof n, "%s.layers.%lld.input_layernorm.weight", m->arch->prefix, (long long)l);
        MOQ_TRY(load_norm(m, &ly->in_norm, n, m->H, err));
        snprintf(n, sizeof n, "%s.layers.%lld.post_attention_layernorm.weight", m->arch->prefix, (long long)l);
        MOQ_TRY(load_norm(m, &ly->post_norm, n, m->H, err));
        if (m->arch->sandwich) {
            snprintf(n, sizeof n, "%s.layers.%lld.pre_feedforward_layernorm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->pre_ffn_norm, n, m->H, err));
            snprintf(n, sizeof n, "%s.layers.%lld.post_feedforward_layernorm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->post_ffn_norm, n, m->H, err));
        }
        if (m->arch->sinks && gqa) {
            snprintf(n, sizeof n, "%s.layers.%lld.self_attn.sinks", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_f32(&ly->sinks, c, n, m->tp.G > 1 ? m->tp.G * m->A : m->A, &m->blobs, err));
            ly->sinks += m->tp.a0; /* this rank's heads */
        }
        if (ly->qk_full) { /* MiniMax-M2: one norm over all heads of q, one over all of k */
            snprintf(n, sizeof n, "%s.layers.%lld.self_attn.q_norm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->q_norm, n, m->A * ly->D, err));
            snprintf(n, sizeof n, "%s.layers.%lld.self_attn.k_norm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->k_norm, n, ly->KV * ly->D, err));
        }
        if (m->arch->qk_norm && gqa) {
            snprintf(n, sizeof n, "%s.layers.%lld.self_attn.q_norm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->q_norm, n, ly->D, err));
            snprintf(n, sizeof n, "%s.layers.%lld.self_attn.k_norm.weight", m->arch->prefix, (long long)l);
            MOQ_TRY(load_norm(m, &ly->k_norm, n, ly->D, err));
        }
        if (m->arch->family == FAM_GEMMA4) { /* layer_scalar [1] */
            float *sc = NULL;
            snprintf(n, sizeof n, "%s.layers.%lld.layer_scalar", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_f32(&sc, c, n, 1, &m->blobs, err));
            ly->scalar = sc[0];
        }
        if (ly->g4moe) { /* Gemma4TextDecoderLayer with enable_moe_block */
            static const struct { const char *name; size_t off; } norms[] = {
                {"post_feedforward_layernorm_1", offsetof(layer, post_ffn1)}, {"pre_feedforward_layernorm_2", offsetof(layer, pre_ffn2)},
                {"post_feedforward_layernorm_2", offsetof(layer, post_ffn2)},
            };
            for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
                snprintf(n, sizeof n, "%s.layers.%lld.%s.weight", m->arch->prefix, (long long)l, norms[i].name);
                MOQ_TRY(load_norm(m, (float **)(void *)((char *)ly + norms[i].off), n, m->H, err));
            }
            snprintf(n, sizeof n, "%s.layers.%lld.router.scale", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_f32(&ly->router_scale, c, n, m->H, &m->blobs, err));
            snprintf(n, sizeof n, "%s.layers.%lld.router.per_expert_scale", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_f32(&ly->expert_scale, c, n, m->E, &m->blobs, err));
            snprintf(p, sizeof p, "%s.layers.%lld.router.proj", m->arch->prefix, (long long)l);
            MOQ_TRY(moq_layers_load_linear(&ly->g4_router, c, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, &m->blobs, err));
            if (ly->g4_router.w.N != m->E || ly->g4_router.w.K != m->H)
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->g4_router.name, "shape [%lld, %lld], expected [num_experts %lld, hidden_size %lld]",
                                (long long)ly->g4_router.w.N, (long long)ly->g4_router.w.K, (long long)m->E, (long long)m->H);
            MOQ_TRY(open_moe(m, l, lo, err));
        }
        progress(m, (uint64_t)l + 1, (uint64_t)m->L);
    }
    return MOQ_OK;
}

/* FP8 (or other scaled) KV: per-layer scales from the checkpoint, or 1.0 in every layer when none
 * has any (config/modules.c decides, as `moq check` does; the note came with the validation pass). */
static moq_status open_kv_scales(moq_model *m, moq_error *err) {
    bool defaulted;
    bool *attn = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof *attn);
    float *k = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof *k), *v = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof *v);
    if (!attn || !k || !v) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %lld KV scales", (long long)m->L);
    for (int64_t l = 0; l < m->L; l++) attn[l] = !m->layers[l].linear;
    MOQ_TRY(moq_kv_scales_read(m->ckpt, m->arch->prefix, m->L, attn, k, v, &defaulted, err));
    for (int64_t l = 0; l < m->L; l++) /* the cache numbers attention layers only */
        if (attn[l]) m->kv.k_scale[m->layers[l].kvl] = k[l], m->kv.v_scale[m->layers[l].kvl] = v[l];
    return MOQ_OK;
}

static moq_status alloc_ws(moq_model *m, moq_error *err) {
    const int64_t C = m->chunk, qkvN = m->qkv_max, I = m->I > m->Is ? m->I : m->Is;
    struct { float **p; int64_t n; } bufs[] = {
        {&m->x, C * m->H * (m->v4 ? m->v4d.hc : 1)}, {&m->h, C * m->H}, {&m->qkv, C * qkvN}, {&m->att, C * m->A * m->Dmax}, {&m->tmp, C * m->H},
        {&m->gu, C * 2 * I}, {&m->act, C * I}, {&m->logits_ws, C * m->V}, {&m->logits, m->V},
        {&m->scratch, (int64_t)m->n_threads * (m->T + m->Dmax)}, {&m->kpad, m->kv_row}, {&m->vpad, m->kv_row},
        {&m->rin, m->g4.moe ? C * m->H : 1}, {&m->rlog, m->g4.moe ? C * m->E : 1}, {&m->moe_out, m->g4.moe ? C * m->H : 1},
    };
    const moq_mla_dims *md = &m->mla;
    const bool mla = m->arch->attn == ATTN_MLA;
    struct { float **p; int64_t n; } mbufs[] = { /* MLA: its own chunk buffers */
        {&m->mws.qa, C * md->q_lora}, {&m->mws.q, C * md->A * (md->dn + md->dr)}, {&m->mws.ckv, C * (md->R + md->dr)},
        {&m->mws.att, C * md->A * md->dv}, {&m->mws.scratch, (int64_t)m->n_threads * moq_mla_scratch_floats(md, m->T)},
        {&m->mws.iq, md->topk ? C * md->nih * md->ihd : 1}, {&m->mws.ikp, md->topk ? C * md->ihd : 1}, /* DeepSeek-V3.2 indexer */
        {&m->mws.iw, md->topk ? C * md->nih : 1}, {&m->mws.isc, md->topk ? m->T : 1}, {&m->mws.sel, md->topk ? C * m->T : 1},
    };
    for (size_t i = 0; mla && i < sizeof mbufs / sizeof mbufs[0]; i++) {
        *mbufs[i].p = moq_blobs_alloc(&m->blobs, (size_t)mbufs[i].n * sizeof(float));
        if (!*mbufs[i].p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %lld floats of MLA workspace", (long long)mbufs[i].n);
    }
    const moq_gdn_dims *gd = &m->gdn;
    struct { float **p; int64_t n; } gbufs[] = { /* Gated DeltaNet layers */
        {&m->gws.w, C * moq_gdn_channels(gd)}, {&m->gws.z, C * gd->Hv * gd->dv}, {&m->gws.b, C * gd->Hv}, {&m->gws.a, C * gd->Hv},
        {&m->gws.o, C * gd->Hv * gd->dv},
    };
    for (size_t i = 0; m->arch->attn == ATTN_HYBRID_GDN && i < sizeof gbufs / sizeof gbufs[0]; i++) {
        *gbufs[i].p = moq_blobs_alloc(&m->blobs, (size_t)gbufs[i].n * sizeof(float));
        if (!*gbufs[i].p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %lld floats of DeltaNet workspace", (long long)gbufs[i].n);
    }
    if (m->v4) { /* DeepSeek-V4: its chunk buffers, the mHC mixes, the shared expert's output, hash ids */
        MOQ_TRY(moq_dsv4_ws_alloc(&m->v4ws, &m->v4d, C, m->T, m->n_threads, &m->blobs, err));
        m->v4mix = moq_blobs_alloc(&m->blobs, (size_t)(C * (m->v4d.hc + m->v4d.hc * m->v4d.hc)) * sizeof(float));
        m->v4sh = moq_blobs_alloc(&m->blobs, (size_t)(C * m->H) * sizeof(float));
        m->v4ids = moq_blobs_alloc(&m->blobs, (size_t)(C * m->topk) * sizeof(int32_t));
        if (!m->v4mix || !m->v4sh || !m->v4ids) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for DeepSeek-V4 workspace");
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i].p = moq_blobs_alloc(&m->blobs, (size_t)bufs[i].n * sizeof(float));
        if (!*bufs[i].p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %lld floats of workspace", (long long)bufs[i].n);
    }
    if (m->tp.G > 1) { /* the lm_head's local rows and every rank's, gathered */
        m->lgl = moq_blobs_alloc(&m->blobs, (size_t)(C * m->tp.v_per) * sizeof(float));
        m->lg = moq_blobs_alloc(&m->blobs, (size_t)(C * m->tp.v_per * m->tp.G) * sizeof(float));
        if (!m->lgl || !m->lg) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for the gathered logits");
    }
    m->erow = moq_blobs_alloc(&m->blobs, (size_t)m->H * sizeof(double));
    m->rpos = moq_blobs_alloc(&m->blobs, (size_t)C * sizeof *m->rpos);
    m->rtab = moq_blobs_alloc(&m->blobs, (size_t)C * sizeof *m->rtab);
    if (!m->rpos || !m->rtab) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for the row plan");
    size_t ws = moq_linear_workspace_size(m->lm_head->lin, C);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const moq_layer_linear *ls[] = {&ly->qkv, &ly->o, &ly->gate_up, &ly->down, &ly->sh_gate_up, &ly->sh_down, &ly->sh_gate, &ly->g4_router};
        if (mla && moq_mla_linear_ws(&ly->mla, C) > ws) ws = moq_mla_linear_ws(&ly->mla, C);
        if (ly->linear && moq_gdn_linear_ws(&ly->gdn, C) > ws) ws = moq_gdn_linear_ws(&ly->gdn, C);
        if (m->v4 && moq_dsv4_linear_ws(&ly->v4, &m->v4d, C) > ws) ws = moq_dsv4_linear_ws(&ly->v4, &m->v4d, C);
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
            size_t s = ls[i]->lin ? moq_linear_workspace_size(ls[i]->lin, C) : 0;
            if (s > ws) ws = s;
        }
        const size_t sm = ly->moe ? moq_moe_workspace_size(ly->moe, C) : 0;
        if (sm > ws) ws = sm;
    }
    m->lws_size = ws;
    m->lws = moq_blobs_alloc(&m->blobs, ws);
    m->mws.lws = m->lws, m->mws.lws_size = ws, m->mws.n_threads = m->n_threads, m->mws.ctx = m->T;
    m->gws.lws = m->lws, m->gws.lws_size = ws, m->gws.n_threads = m->n_threads;
    m->v4ws.lws = m->lws, m->v4ws.lws_size = ws;
    if (!m->erow || !m->lws) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %zu bytes of linear workspace", ws);
    return MOQ_OK;
}

/* What the GPU forward (model_gpu.c) lacks, checked before any weight is loaded: MOQ_ERR_UNSUPPORTED
 * naming it. */
static moq_status gpu_refusal(const moq_model *m, int64_t n_moe, moq_error *err) {
    const arch_row *r = m->arch;
    const char *why = !attn_caps[r->attn].gpu ? attn_caps[r->attn].what
                      : n_moe > 0 && (r->shared_expert || r->router != ROUTER_SOFTMAX || r->family == FAM_LLAMA4 || r->sinks)
                          ? "routed experts with shared experts, sigmoid routing, NoPE layers or attention sinks (the GPU runs "
                            "Qwen3-MoE's and Mixtral's softmax top-k experts)"
                      : r->sandwich || r->gelu || r->embed_scale ? "Gemma's sandwich norms, GeGLU and scaled embeddings"
                      : m->D != 64 && m->D != 128 && m->D != 256 ? "a head_dim other than 64, 128 or 256"
                      : m->H % 4 || (n_moe < m->L && m->I % 4) ? "a hidden or intermediate size that is not a multiple of 4 (rows are read as float4)"
                      : NULL;
    if (!why) return MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "%s on --device cuda: the GPU forward runs the dense GQA architectures "
                    "(Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral) and this checkpoint has %s; use --device cpu", r->name, why);
}

/* --tp G: what this rank holds (dist/plan.h); the runner's A, KV, I, Is become the rank's, V stays
 * the model's (the logits are gathered whole). Architectures whose attention or routing has parts
 * not split here are refused by name. */
static moq_status tp_setup(moq_model *m, int64_t n_moe, moq_error *err) {
    const arch_row *r = m->arch;
    const char *why = !attn_caps[r->attn].tp ? attn_caps[r->attn].what
                      : r->family == FAM_LLAMA4 ? "Llama 4's shared expert and chunked layers"
                      : r->family == FAM_GEMMA4 ? "Gemma 4's per-layer head sizes and k_eq_v global layers"
                      : r->family == FAM_MINIMAX_M2 ? "MiniMax-M2's q/k norms over all heads"
                      : m->opts.device == MOQ_DEVICE_CUDA && m->opts.tp_backend != MOQ_COMM_NCCL
                      ? "--device cuda with CPU collectives (the GPU forward sums through NCCL: --tp-backend nccl)" : NULL;
    if (why) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "%s under --tp %d: tensor parallelism splits GQA attention, dense and "
                             "routed MLPs (Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral, gpt-oss, Gemma 3) and this checkpoint has %s", r->name, m->tp.G, why);
    const moq_tp_dims d = {.A = m->A, .KV = m->KV, .I = n_moe == m->L ? 0 : m->I, .Ie = m->Ie, .Is = m->Is, .E = n_moe ? m->E : 0, .V = m->V};
    const int G = m->tp.G, rank = m->tp.rank;
    const bool ep = m->tp.ep;
    /* vocabulary shards in whole 128-row blocks (an FP8_PB_WO lm_head) when every rank gets one */
    MOQ_TRY(moq_tp_plan_make(&m->tp, &d, G, rank, ep, m->V >= 128 * (int64_t)G ? 128 : 1, err));
    m->A = m->tp.a_n, m->KV = m->tp.kv_n, m->Is = m->tp.is_n;
    for (int64_t l = 0; l < m->L; l++) m->layers[l].KV = m->KV; /* one head size everywhere (Gemma 4 is refused above) */
    if (d.I) m->I = m->tp.i_n;
    return MOQ_OK;
}

static moq_status open_model(moq_model *m, const char *dir, moq_error *err) {
    const double t0 = now_s(), c0 = cpu_s();
    MOQ_TRY(moq_checkpoint_open(&m->ckpt, dir, NULL, err));
    const moq_arch *a = moq_checkpoint_arch(m->ckpt);
    if (!a) return MOQ_FAIL(err, MOQ_ERR_CONFIG, dir, "no config.json, expected one naming the architecture");
    for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, a->architecture) == 0) m->arch = &arch_rows[i];
    if (!m->arch)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", MOQ_ARCH_UNSUPPORTED_FMT, a->architecture, moq_model_arch_count());
    if (moq_checkpoint_has_qconfig(m->ckpt)) MOQ_TRY(moq_qconfig_open(&m->q, dir, m->opts.compat, err));
    m->H = a->hidden_size;
    m->A = a->num_attention_heads;
    m->KV = a->num_key_value_heads ? a->num_key_value_heads : a->num_attention_heads;
    m->D = a->head_dim ? a->head_dim : (m->A ? m->H / m->A : 0);
    m->I = a->intermediate_size;
    m->V = a->vocab_size;
    m->L = a->num_hidden_layers;
    m->eps = a->rms_norm_eps > 0 ? a->rms_norm_eps : 1e-6;
    if (m->arch->moe_block) {
        m->E = a->num_experts;
        m->topk = a->num_experts_per_tok;
        m->Ie = a->moe_intermediate_size ? a->moe_intermediate_size : a->intermediate_size;
        m->norm_topk = m->arch->norm_topk;
        MOQ_TRY(read_bool(m->ckpt, "norm_topk_prob", &m->norm_topk, err));
    }
    if (m->arch->family == FAM_DEEPSEEK_V3) { /* DeepSeek-V3: the rope part of a head is what RoPE sees */
        MOQ_TRY(moq_deepseek_v3_read(m->ckpt, m->L, m->arch->config_class, &m->ds, err));
        m->D = m->ds.qk_rope_head_dim;
        m->KV = 1;
        m->Is = m->ds.n_shared_experts * m->Ie;
    }
    if (m->arch->family == FAM_DEEPSEEK_V4) { /* one K = V head of head_dim; one shared expert of the expert size */
        m->v4 = moq_blobs_alloc(&m->blobs, sizeof *m->v4);
        if (!m->v4) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for the DeepSeek-V4 config");
        MOQ_TRY(moq_deepseek_v4_read(m->ckpt, m->L, m->v4, err));
        if (!moq_checkpoint_tensor(m->ckpt, "model.embed_tokens.weight") && moq_checkpoint_tensor(m->ckpt, "embed.weight"))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "embed.weight", "DeepSeek's own tensor layout (embed, layers.N, norm, hc_head_fn; no `model.` "
                            "prefix); moq reads DeepSeek-V4 in the layout transformers' save_pretrained writes (model.embed_tokens, "
                            "model.layers.N.attn..., model.hc_head.hc_fn, head)");
        m->D = m->v4->head_dim;
        m->KV = 1;
        m->Is = m->v4->n_shared_experts > 0 ? m->Ie : 0;
    }
    if (m->H < 1 || m->A < 1 || m->KV < 1 || m->A % m->KV || m->D < 2 || m->V < 1 || m->L < 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "hidden_size %lld, num_attention_heads %lld, num_key_value_heads %lld, head_dim %lld, "
                        "vocab_size %lld, num_hidden_layers %lld; expected positive values with heads %% kv_heads == 0",
                        (long long)m->H, (long long)m->A, (long long)m->KV, (long long)m->D, (long long)m->V, (long long)m->L);
    m->layers = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof(layer));
    if (!m->layers) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld layers", (long long)m->L);
    m->qh = m->D;
    m->Drot = m->v4 ? m->v4->rope_dim : m->D;
    bool *per_layer = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof(bool));
    if (!per_layer) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld layers", (long long)m->L);
    if (m->arch->family == FAM_GEMMA3) { /* which layers slide; their RoPE is read here, made below */
        MOQ_TRY(moq_gemma3_read(m->ckpt, m->L, (double)a->max_position_embeddings, &m->gc, per_layer, err));
    }
    for (int64_t l = 0; l < m->L; l++) m->layers[l].D = m->D, m->layers[l].KV = m->KV, m->layers[l].scalar = 1.0f;
    if (m->arch->family == FAM_GEMMA4) { /* Gemma 3's facts + per-layer head sizes, k_eq_v */
        int64_t *hd = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof *hd), *kvh = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof *kvh);
        if (!hd || !kvh) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld layers", (long long)m->L);
        MOQ_TRY(moq_gemma4_read(m->ckpt, m->L, (double)a->max_position_embeddings, m->D, m->KV, &m->g4, per_layer, hd, kvh, err));
        m->gc = m->g4.g;
        if (m->g4.moe) m->E = m->g4.n_experts, m->topk = m->g4.top_k, m->Ie = m->g4.moe_I, m->norm_topk = true;
        for (int64_t l = 0; l < m->L; l++) {
            layer *ly = &m->layers[l];
            ly->D = hd[l], ly->KV = kvh[l], ly->v_norm = true, ly->k_eq_v = m->g4.k_eq_v && !per_layer[l], ly->g4moe = m->g4.moe;
            if (m->A % ly->KV)
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "layer %lld: %lld attention heads, %lld KV heads; expected heads %% kv_heads == 0",
                                (long long)l, (long long)m->A, (long long)ly->KV);
        }
    }
    if (m->arch->family == FAM_QWEN3_5) { /* Qwen3.5: which layers are linear, DeltaNet sizes, partial rope */
        MOQ_TRY(moq_qwen3_5_read(m->ckpt, m->L, &m->qc, per_layer, err));
        for (int64_t l = 0; l < m->L; l++) m->layers[l].linear = per_layer[l];
        m->qh = m->qc.attn_output_gate ? 2 * m->D : m->D; /* q_proj: [query | output gate] per head */
        m->Drot = (int64_t)((double)m->D * m->qc.partial_rotary_factor);
        m->Drot -= m->Drot % 2;
        m->gdn = (moq_gdn_dims){.H = m->H, .Hk = m->qc.linear_num_key_heads, .dk = m->qc.linear_key_head_dim, .Hv = m->qc.linear_num_value_heads,
                                .dv = m->qc.linear_value_head_dim, .K = m->qc.linear_conv_kernel_dim, .eps = m->eps};
        if (m->arch->shared_expert) m->Is = m->qc.shared_expert_intermediate_size;
    }
    if (m->arch->family == FAM_LLAMA4) { /* RoPE / NoPE, chunked, MoE layers; shared expert = expert size */
        bool *chunked = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof(bool));
        m->moe_list = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof(bool));
        if (!chunked || !m->moe_list) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld layers", (long long)m->L);
        MOQ_TRY(moq_llama4_read(m->ckpt, m->L, &m->l4, per_layer, chunked, m->moe_list, err));
        for (int64_t l = 0; l < m->L; l++) {
            layer *ly = &m->layers[l];
            ly->nope = !per_layer[l];
            ly->chunk = chunked[l] ? m->l4.attention_chunk_size : 0;
            ly->l2_qk = m->l4.use_qk_norm && per_layer[l];
            ly->temp = m->l4.attn_temperature_tuning && !per_layer[l];
        }
        m->I = m->l4.intermediate_size_mlp;
        m->Is = m->Ie;
    }
    if (m->arch->family == FAM_MINIMAX_M2) { /* partial RoPE, whole-projection q/k norms */
        moq_minimax_m2_cfg mc;
        MOQ_TRY(moq_minimax_m2_read(m->ckpt, m->D, &mc, err));
        m->Drot = mc.rotary_dim;
        for (int64_t l = 0; l < m->L; l++) m->layers[l].qk_full = true;
    }
    int64_t n_moe = 0;
    MOQ_TRY(read_layer_plan(m, &n_moe, err));
    for (int64_t l = 0; (m->arch->family == FAM_GEMMA3 || m->arch->family == FAM_GEMMA4) && l < m->L; l++)
        m->layers[l].window = per_layer[l] ? m->gc.sliding_window : 0;
    if (n_moe > 0 && (m->E < 1 || m->topk < 1 || m->topk > m->E || m->Ie < 1))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_experts %lld, num_experts_per_tok %lld, expert intermediate size %lld; expected 1 <= per_tok <= experts and a positive size",
                        (long long)m->E, (long long)m->topk, (long long)m->Ie);
    if (n_moe == m->L) m->I = 1; /* the dense MLP buffers are unused */
    if (m->I < 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "intermediate_size %lld with %lld dense MLP layers; expected a positive size",
                        (long long)m->I, (long long)(m->L - n_moe));
    if (m->tp.G > 1) MOQ_TRY(tp_setup(m, n_moe, err));
    if (m->opts.device == MOQ_DEVICE_CUDA) MOQ_TRY(gpu_refusal(m, n_moe, err));
    m->T = m->opts.ctx > 0 ? m->opts.ctx : (a->max_position_embeddings > 0 && a->max_position_embeddings < 4096 ? a->max_position_embeddings : 4096);
    m->chunk = m->T < MOQ_MODEL_CHUNK ? m->T : MOQ_MODEL_CHUNK;
    moq_rope_params rp;
    char rope_note[320];
    if (m->arch->family == FAM_GEMMA3 || m->arch->family == FAM_GEMMA4) rp = m->gc.rope_global, rope_note[0] = 0; /* per layer type: model/arch/gemma3.c */
    else if (m->v4) rp = m->v4->rope_main, rope_note[0] = 0; /* main and compress: model/arch/deepseek_v4.c */
    else MOQ_TRY(read_rope(m->ckpt, a, &rp, rope_note, sizeof rope_note, err));
    if (rope_note[0] && m->n_warn < MOQ_MODEL_MAX_WARN) {
        char *w = moq_blobs_alloc(&m->blobs, sizeof rope_note);
        if (!w) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        memcpy(w, rope_note, sizeof rope_note);
        m->warn[m->n_warn++] = w;
    }
    m->inv_freq = moq_blobs_alloc(&m->blobs, (size_t)m->Drot / 2 * sizeof(float));
    if (!m->inv_freq) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld rope frequencies", (long long)m->Drot / 2);
    MOQ_TRY(moq_rope_inv_freq(&rp, m->Drot, m->inv_freq, &m->mscale, err));
    m->inv_freq_local = m->inv_freq, m->mscale_local = m->mscale;
    if (m->arch->family == FAM_GEMMA3 || m->arch->family == FAM_GEMMA4) {
        m->inv_freq_local = moq_blobs_alloc(&m->blobs, (size_t)m->Drot / 2 * sizeof(float));
        if (!m->inv_freq_local) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld rope frequencies", (long long)m->Drot / 2);
        MOQ_TRY(moq_rope_inv_freq(&m->gc.rope_local, m->Drot, m->inv_freq_local, &m->mscale_local, err));
    }
    if (m->v4) MOQ_TRY(open_dsv4_dims(m, err));
    for (int64_t l = 0; l < m->L; l++) { /* sliding Gemma layers use the local RoPE */
        m->layers[l].inv_freq = m->layers[l].window > 0 ? m->inv_freq_local : m->inv_freq;
        m->layers[l].mscale = m->layers[l].window > 0 ? m->mscale_local : m->mscale;
    }
    m->Dmax = 0, m->qkv_max = 0, m->kv_row = 0;
    for (int64_t l = 0; l < m->L; l++) { /* per-layer head sizes (all m's but for Gemma 4's global layers) */
        layer *ly = &m->layers[l];
        ly->qh = ly->D == m->D ? m->qh : ly->D;
        ly->Drot = ly->D == m->D ? m->Drot : ly->D;
        ly->qkvN = m->A * ly->qh + 2 * ly->KV * ly->D;
        if (ly->D > m->Dmax) m->Dmax = ly->D;
        if (ly->qkvN > m->qkv_max) m->qkv_max = ly->qkvN;
        if (ly->KV * ly->D > m->kv_row) m->kv_row = ly->KV * ly->D;
        if (ly->D == m->D) continue;
        /* a global Gemma 4 layer with its own head_dim: RoPE frequencies of that size */
        float *f = moq_blobs_alloc(&m->blobs, (size_t)ly->D / 2 * sizeof(float));
        if (!f) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld rope frequencies", (long long)ly->D / 2);
        MOQ_TRY(moq_rope_inv_freq(ly->window > 0 ? &m->gc.rope_local : &m->gc.rope_global, ly->D, f, &ly->mscale, err));
        ly->inv_freq = f;
    }
    m->attn_scale = m->arch->family == FAM_GEMMA3 || m->arch->family == FAM_GEMMA4 ? (float)(1.0 / sqrt(m->gc.query_pre_attn_scalar))
                                                                                 : 1.0f / sqrtf((float)m->D);
    m->embed_mult = m->arch->embed_scale ? moq_bf16_decode(moq_bf16_encode_rne(sqrtf((float)m->H))) : 1.0f;
    if (m->arch->attn == ATTN_MLA) {
        m->mla = (moq_mla_dims){.H = m->H, .A = m->A, .q_lora = m->ds.q_lora_rank, .R = m->ds.kv_lora_rank, .dn = m->ds.qk_nope_head_dim,
                                .dr = m->ds.qk_rope_head_dim, .dv = m->ds.v_head_dim, .interleave = m->ds.rope_interleave,
                                .scale = moq_deepseek_v3_softmax_scale(&m->ds, &rp), .eps = MOQ_DEEPSEEK_LORA_NORM_EPS, .topk = m->ds.index_topk,
                                .nih = m->ds.index_n_heads, .ihd = m->ds.index_head_dim, .ctx = m->T,
                                .i_interleave = m->ds.indexer_interleave};
        m->kv_row = moq_mla_cache_row(&m->mla); /* the latent and the rope key, shared by all heads */
    }
    m->tm.open_s = now_s() - t0;
    m->tm.open_cpu_s = cpu_s() - c0;

    /* validate: every module of the checkpoint against its resolved scheme's contract, all at once
     * (the `moq check` pass); the first problem is the error */
    const double tv = now_s(), cv = cpu_s();
    moq_modules mods;
    memset(&mods, 0, sizeof mods);
    moq_status vst = moq_modules_build(&mods, m->ckpt, m->q, err);
    if (vst == MOQ_OK) vst = moq_modules_check(&mods, m->ckpt, m->q, false, err);
    /* what `moq check` reports is kept as warnings: the loader below decides what is fatal (a missing
     * or malformed tensor), the rest (fused shards with different input scales, ...) runs */
    for (int i = 0; vst == MOQ_OK && i < mods.n_probs && m->n_warn < MOQ_MODEL_MAX_WARN; i++) {
        char *w = moq_blobs_alloc(&m->blobs, 800);
        if (!w) vst = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        else snprintf(w, 800, "%.256s: %.512s", mods.probs[i].where, mods.probs[i].msg);
        m->warn[m->n_warn++] = w;
    }
    for (int i = 0; vst == MOQ_OK && i < mods.notes.n && m->n_warn < MOQ_MODEL_MAX_WARN; i++) {
        char *w = moq_blobs_alloc(&m->blobs, 800);
        if (!w) vst = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        else snprintf(w, 800, "%s", moq_notes_at(&mods.notes, i));
        m->warn[m->n_warn++] = w;
    }
    moq_modules_free(&mods);
    m->tm.validate_s = now_s() - tv;
    m->tm.validate_cpu_s = cpu_s() - cv;
    const double cp = cpu_s();
    MOQ_TRY(vst);

    moq_linear_opts lo = moq_linear_opts_default();
    lo.n_threads = m->n_threads;
    lo.cpu_mask = m->opts.cpu_mask;
    lo.nvfp4_as = m->opts.nvfp4_as;
    moq_linear_opts lo_embed = lo; /* the embedding is a GPU layer only when it is also the head */
    lo.device = m->opts.device;
    char nm[256];
    snprintf(nm, sizeof nm, "%s.weight", m->arch->head);
    const bool tied = !moq_checkpoint_tensor(m->ckpt, nm) && a->tie_word_embeddings;
    if (tied) lo_embed.device = m->opts.device;
    /* an untied embedding is only gathered by row from its canonical weight: no layout to build */
    lo_embed.plan_only = !tied;
    snprintf(nm, sizeof nm, "%s.embed_tokens", m->arch->prefix);
    moq_slice vs; /* vocabulary-parallel embedding and lm_head: rows [v0, v0 + v_n) */
    const int64_t Vl = m->tp.G > 1 ? m->tp.v_n : m->V;
    MOQ_TRY(moq_layers_load_linear_sliced(&m->embed, m->ckpt, m->q, nm, MOQ_KIND_EMBEDDING, NULL, 0, &lo_embed, tp_rows(m, &vs, 1, &m->tp.v0, &Vl),
                                          &m->blobs, err));
    if (m->embed.w.N != Vl || m->embed.w.K != m->H)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, m->embed.name, "shape [%lld, %lld], expected [vocab_size %lld, hidden_size %lld]",
                        (long long)m->embed.w.N, (long long)m->embed.w.K, (long long)m->V, (long long)m->H);
    MOQ_TRY(open_layers(m, &lo, err));
    snprintf(nm, sizeof nm, "%s.norm.weight", m->arch->prefix);
    MOQ_TRY(load_norm(m, &m->final_norm, nm, m->H, err));
    if (!tied) {
        MOQ_TRY(moq_layers_load_linear_sliced(&m->lm_head_own, m->ckpt, m->q, m->arch->head, MOQ_KIND_LM_HEAD, NULL, 1, &lo,
                                              tp_rows(m, &vs, 1, &m->tp.v0, &Vl), &m->blobs, err));
        if (m->lm_head_own.w.N != Vl || m->lm_head_own.w.K != m->H)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, m->lm_head_own.name, "shape [%lld, %lld], expected [%lld, %lld]", (long long)m->lm_head_own.w.N,
                            (long long)m->lm_head_own.w.K, (long long)Vl, (long long)m->H);
        m->lm_head = &m->lm_head_own;
    } else {
        m->lm_head = &m->embed;
    }
    m->tm.pack_s = m->blobs.validate_s + m->blobs.pack_s; /* loading and packing every layer */
    m->tm.pack_cpu_s = cpu_s() - cp;

    /* KV cache: the config's kv_cache_quant_algo picks the encoding (kv_cache.c table) */
    moq_elem ke;
    bool scaled;
    MOQ_TRY(moq_kv_elem_for_algo(m->q ? moq_qconfig_kv_cache_quant_algo(m->q) : NULL, m->opts.kv_elem, &ke, &scaled, err));
    int64_t n_kv = 0; /* attention layers, numbered in the cache (Gated DeltaNet layers keep their own state) */
    for (int64_t l = 0; l < m->L; l++) m->layers[l].kvl = m->layers[l].linear ? -1 : n_kv++;
    if (m->v4 && scaled)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "hf_quant_config.json", "kv_cache_quant_algo %s with DeepseekV4ForCausalLM: its attention keeps its own f32 state; "
                        "moq has no quantized cache for it", moq_qconfig_kv_cache_quant_algo(m->q));
    if (m->v4) MOQ_TRY(moq_kv_cache_create_k(&m->kv, ke, 1, 1, 1, err)); /* unused: the layers keep their state (attn/dsv4.c) */
    else if (m->arch->attn == ATTN_MLA) MOQ_TRY(moq_kv_cache_create_k(&m->kv, ke, n_kv, m->T, m->kv_row, err)); /* latent + rope key */
    else MOQ_TRY(moq_kv_cache_create(&m->kv, ke, n_kv, m->opts.device == MOQ_DEVICE_CUDA ? 1 : m->T, m->kv_row, err)); /* GPU: scales only */
    if (scaled) MOQ_TRY(open_kv_scales(m, err));
    MOQ_TRY(alloc_ws(m, err));
    return m->opts.device == MOQ_DEVICE_CUDA ? moq_gpu_open(m, err) : MOQ_OK;
}

moq_status moq_model_open(moq_model **out, const char *dir, const moq_model_opts *opts, moq_error *err) {
    if (!out || !dir) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_model_open", "out and dir must not be NULL");
    *out = NULL;
    if (opts && opts->tp > 1) return moq_tp_open(out, dir, opts, err); /* model_tp.c: G ranks, this handle rank 0 */
    return moq_model_open_rank(out, dir, opts, 1, 0, err);
}

moq_status moq_model_open_rank(moq_model **out, const char *dir, const moq_model_opts *opts, int G, int rank, moq_error *err) {
    *out = NULL;
    moq_model *m = calloc(1, sizeof *m);
    if (!m) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory");
    m->opts = opts ? *opts : moq_model_opts_default();
    if (G > 1) m->tp.G = G, m->tp.rank = rank, m->tp.ep = m->opts.tp_ep != 0;
    if (m->opts.kv_elem != MOQ_ELEM_F32 && m->opts.kv_elem != MOQ_ELEM_BF16) {
        free(m);
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, dir, "kv_elem %s, expected f32 or bf16", moq_elem_name(opts->kv_elem));
    }
    if ((unsigned)m->opts.nvfp4_as >= MOQ_NVFP4_AS_COUNT) {
        const int v = (int)m->opts.nvfp4_as;
        free(m);
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, dir, "nvfp4_as %d, expected MOQ_NVFP4_AS_NVFP4, _FP8 or _FP8_CHANNEL", v);
    }
    m->n_threads = m->opts.n_threads > 0 ? m->opts.n_threads : omp_get_max_threads();
    moq_status st = m->opts.device == MOQ_DEVICE_CPU ? MOQ_OK : moq_device_check(m->opts.device, NULL, 0, err);
    if (st == MOQ_OK) st = open_model(m, dir, err);
    if (st != MOQ_OK) {
        moq_model_free(m);
        return st;
    }
    *out = m;
    return MOQ_OK;
}

void moq_model_free(moq_model *m) {
    if (!m) return;
    moq_tp_close(m);
    moq_gpu_free(m);
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        moq_layers_close_linear(&m->layers[l].qkv);
        moq_layers_close_linear(&m->layers[l].o);
        moq_layers_close_linear(&m->layers[l].gate_up);
        moq_layers_close_linear(&m->layers[l].down);
        moq_layers_close_linear(&m->layers[l].sh_gate_up);
        moq_layers_close_linear(&m->layers[l].sh_down);
        moq_mla_close(&m->layers[l].mla);
        moq_dsv4_close(&m->layers[l].v4);
        moq_gdn_close(&m->layers[l].gdn);
        moq_layers_close_linear(&m->layers[l].sh_gate);
        moq_layers_close_linear(&m->layers[l].g4_router);
        moq_moe_free(m->layers[l].moe);
    }
    moq_layers_close_linear(&m->embed);
    moq_layers_close_linear(&m->lm_head_own);
    moq_kv_cache_free(&m->kv);
    moq_blobs_free(&m->blobs);
    moq_qconfig_free(m->q);
    moq_checkpoint_free(m->ckpt);
    free(m);
}

/* RMSNorm is model/nn_math.h's, shared with the attn files (w NULL: no weight, Llama 4's L2 q/k norm,
 * Llama4TextL2Norm); this file keeps calling it rmsnorm */
#define rmsnorm moq_rmsnorm

/* RoPE of one head's first R values with the layer's frequencies: rotate_half pairs, or (2i, 2i + 1)
 * (arch_row.rope_pairs) */
/* RoPE of one head with its row's cos/sin (moq_rope_angles, once per row for all heads). */
static void rope_cs(const moq_model *m, float *x, int64_t R, const float *cs, const float *sn) {
    if (m->arch->rope_pairs) moq_rope_apply_pairs_cs(x, R, cs, sn);
    else moq_rope_apply_cs(x, R, cs, sn);
}

static moq_status run_linear(moq_model *m, const moq_layer_linear *l, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, m->lws, m->lws_size, err);
}

/* Cache slot of position p of row i's sequence: its block table's page, or p itself. */
static inline int64_t row_slot(const moq_model *m, int64_t i, int64_t p) {
    const int32_t *tab = m->rtab[i];
    return tab ? (int64_t)tab[p / m->rpage] * m->rpage + p % m->rpage : p;
}

/* q · k in 16 interleaved partial sums (lane j takes e ≡ j mod 16, up to the last multiple of 16;
 * the rest in one more sum), then a pairwise fold: the
 * compiler vectorizes it, where the one running sum was a chain of D dependent adds (issue 15:
 * attention was 10 % of a batched step). Same order for every row, batch size and thread count. */
static inline float dot16(const float *a, const float *b, int64_t n) {
    float acc[16] = {0}, t = 0;
    int64_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[e + j] * b[e + j];
    for (; e < n; e++) t += a[e] * b[e]; /* D % 16 != 0 */
    for (int j = 0; j < 8; j++) acc[j] += acc[j + 8];
    for (int j = 0; j < 4; j++) acc[j] += acc[j + 4];
    for (int j = 0; j < 2; j++) acc[j] += acc[j + 2];
    return acc[0] + acc[1] + t;
}

/* Below this many cached values read by a step's attention (rows x heads x positions x D, K and
 * V), one thread runs it: waking the team costs more than the work. On the 2-vCPU KVM machine of
 * docs/PERFORMANCE.md "Serving" an OpenMP region costs 50-75 us of CPU with OMP_WAIT_POLICY=passive
 * (futex wake and join), about what one core takes for 2^19 values; a batch-1 decode step at a
 * short context was 4 of its 21 regions. Each task's arithmetic is the same either way. */
#define ATTN_SERIAL_VALUES ((int64_t)1 << 19)

/* Causal attention of the step's M rows over their sequences' caches (row i at position rpos[i]
 * sees its sequence's positions up to rpos[i]), one (token, head) per task; a sliding-window layer
 * (window W > 0) sees positions npos - W .. npos - 1 (the last W, the current one included;
 * arch_row.window). out f32 [M, A D]. */
static void attention(moq_model *m, int64_t l, int64_t M) {
    const layer *ly = &m->layers[l];
    const int64_t A = m->A, D = ly->D, grp = A / ly->KV, qkvN = ly->qkvN, W = ly->window, qh = ly->qh;
    const int64_t kl = m->layers[l].kvl, C = m->layers[l].chunk;
    const float sc = m->attn_scale, cap = (float)m->gc.attn_logit_softcapping;
    int64_t values = 0; /* an upper bound: the whole prefix of each row */
    for (int64_t i = 0; i < M; i++) values += (m->rpos[i] + 1) * 2 * A * D;
#pragma omp parallel for num_threads(m->n_threads) schedule(dynamic, 1) if (values >= ATTN_SERIAL_VALUES)
    for (int64_t t = 0; t < M * A; t++) {
        const int64_t i = t / A, hd = t % A, kvh = hd / grp, npos = m->rpos[i] + 1;
        const int64_t p_lo = C > 0 ? (npos - 1) / C * C : W > 0 && npos > W ? npos - W : 0; /* chunk, or window */
        float *s = m->scratch + (int64_t)omp_get_thread_num() * (m->T + m->Dmax), *row = s + m->T;
        const float *q = m->qkv + i * qkvN + hd * qh;
        float mx = -INFINITY;
        for (int64_t p = p_lo; p < npos; p++) {
            const float *kr = moq_kv_cache_row_f32(m->rkv, 0, kl, row_slot(m, i, p), kvh * D); /* f32: no copy */
            if (!kr) moq_kv_cache_read(m->rkv, 0, kl, row_slot(m, i, p), kvh * D, D, row), kr = row;
            s[p] = dot16(q, kr, D) * sc;
            if (cap > 0) s[p] = cap * tanhf(s[p] / cap); /* attn_logit_softcapping */
            if (s[p] > mx) mx = s[p];
        }
        const float *sk = m->layers[l].sinks; /* gpt-oss: softmax over [scores, sink], the sink's weight dropped */
        if (sk && sk[hd] > mx) mx = sk[hd];
        float sum = sk ? expf(sk[hd] - mx) : 0.0f;
        for (int64_t p = p_lo; p < npos; p++) {
            s[p] = expf(s[p] - mx);
            sum += s[p];
        }
        float *o = m->att + i * A * D + hd * D;
        memset(o, 0, (size_t)D * sizeof(float));
        for (int64_t p = p_lo; p < npos; p++) {
            const float *vr = moq_kv_cache_row_f32(m->rkv, 1, kl, row_slot(m, i, p), kvh * D);
            if (!vr) moq_kv_cache_read(m->rkv, 1, kl, row_slot(m, i, p), kvh * D, D, row), vr = row;
            const float wgt = s[p] / sum;
            for (int64_t e = 0; e < D; e++) o[e] += wgt * vr[e];
        }
    }
}

/* act [M, I] = silu(gate) * up of gu [M, 2I] (gate = first half; NUMERICS §7, one f32 rounding), or
 * gelu_pytorch_tanh(gate) * up (arch_row.gelu). */
static void swiglu(const float *gu, int64_t M, int64_t I, float *act, bool gelu) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t e = 0; e < I; e++) {
            const float g = gu[i * 2 * I + e], u = gu[i * 2 * I + I + e];
            act[i * I + e] = gelu ? 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u : moq_silu(g) * u;
        }
}

/* Routed experts on h [M, H] (src/moe: router, top-k, each expert once over its tokens), added into x. */
static moq_status moe_block(moq_model *m, const layer *ly, int64_t M, moq_error *err) {
    MOQ_TRY(moq_moe_run(ly->moe, m->h, MOQ_ELEM_F32, M, NULL, m->tmp, MOQ_ELEM_F32, m->lws, m->lws_size, err));
    MOQ_TRY(tp_sum(m, m->tmp, M * m->H, err)); /* --tp: this rank's experts (--ep) or expert slices */
    for (int64_t c = 0; c < M * m->H; c++) m->x[c] += m->tmp[c];
    return MOQ_OK;
}

/* Non-finite outputs. The logits of every step are checked (V values: cheap next to the step);
 * when one is not finite the step is run again with every module's output checked, and the first
 * module whose output is not finite while its input was is named (the step's positions are
 * rewritten with the same values; m->pos is not advanced; a Gated DeltaNet layer's state has moved
 * on by then, so the second run only locates, it does not reproduce). */
static moq_status check_out(const moq_model *m, const float *p, int64_t rows, int64_t cols, const char *where, moq_error *err) {
    const int64_t i = moq_f32_first_nonfinite(p, rows * cols);
    if (i < 0) return MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, where,
                    "output is not finite (%s at token %lld of the step, position %lld, column %lld) while its input was; "
                    "its weights or scales hold NaN/Inf (`moq check --values` names them)",
                    isnan(p[i]) ? "NaN" : "Inf", (long long)(i / cols), (long long)m->rpos[i / cols], (long long)(i % cols));
}

/* check_out when locating, the module named by fmt. */
static moq_status check_at(const moq_model *m, bool locate, const float *p, int64_t rows, int64_t cols, moq_error *err, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static moq_status check_at(const moq_model *m, bool locate, const float *p, int64_t rows, int64_t cols, moq_error *err, const char *fmt, ...) {
    if (!locate) return MOQ_OK;
    char where[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    return check_out(m, p, rows, cols, where, err);
}
#define CHECK(p, rows, cols, ...) MOQ_TRY(check_at(m, locate, p, rows, cols, err, __VA_ARGS__))

/* Grouped-query attention of layer l on m->h [M, H] -> m->tmp [M, H] (o_proj output). */
static moq_status gqa_block(moq_model *m, const layer *ly, int64_t l, int64_t M, bool locate, moq_error *err) {
    const int64_t D = ly->D, A = m->A, KV = ly->KV, qh = ly->qh, qkvN = ly->qkvN, R = ly->Drot;
    const char *pfx = m->arch->prefix;
    TAP(m, l, MOQ_TAP_QKV_IN, m->h, M, m->H);
    MOQ_TRY(run_linear(m, &ly->qkv, m->h, M, m->qkv, err));
    if (ly->k_eq_v) /* [q | k] rows -> [q | k | v = k], last row first (in place: the new rows are longer) */
        for (int64_t i = M - 1; i >= 0; i--) {
            const int64_t n = A * qh + KV * D;
            memmove(m->qkv + i * qkvN, m->qkv + i * n, (size_t)n * sizeof(float));
            memcpy(m->qkv + i * qkvN + n, m->qkv + i * qkvN + A * qh, (size_t)(KV * D) * sizeof(float));
        }
    CHECK(m->qkv, M, qkvN, "%s", ly->qkv.name);
    for (int64_t i = 0; i < M; i++) {
        float *q = m->qkv + i * qkvN, *k = q + A * qh, *v = k + KV * D;
        if (ly->qk_full) rmsnorm(q, q, ly->q_norm, A * D, m->eps), rmsnorm(k, k, ly->k_norm, KV * D, m->eps); /* MiniMax-M2 */
        /* Llama 4 temperature: log1p(floor((pos + 1) / floor_scale)) · attn_scale + 1 (NoPE layers) */
        const float temp = ly->temp ? (float)(log1p(floor((double)(m->rpos[i] + 1) / (double)m->l4.floor_scale)) * m->l4.attn_scale + 1.0) : 1.0f;
        /* the row's cos/sin once for all its heads (attention's scratch is free until attention()) */
        float *cs = m->scratch, *sn = cs + R / 2;
        if (!ly->nope) moq_rope_angles(R, m->rpos[i], ly->inv_freq, ly->mscale, cs, sn);
        for (int64_t hd = 0; hd < A; hd++) {
            float *qh_ = q + hd * qh;
            if (ly->q_norm && !ly->qk_full) rmsnorm(qh_, qh_, ly->q_norm, D, m->eps);
            if (!ly->nope) rope_cs(m, qh_, R, cs, sn);
            if (ly->l2_qk) rmsnorm(qh_, qh_, NULL, D, m->eps);
            for (int64_t e = 0; ly->temp && e < D; e++) qh_[e] *= temp;
        }
        for (int64_t hd = 0; hd < KV; hd++) {
            if (ly->k_norm && !ly->qk_full) rmsnorm(k + hd * D, k + hd * D, ly->k_norm, D, m->eps);
            if (!ly->nope) rope_cs(m, k + hd * D, R, cs, sn);
            if (ly->l2_qk) rmsnorm(k + hd * D, k + hd * D, NULL, D, m->eps);
            if (ly->v_norm) rmsnorm(v + hd * D, v + hd * D, NULL, D, m->eps); /* Gemma 4: v / rms(v), no weight */
        }
        TAP(m, l, MOQ_TAP_K, k, 1, KV * D);
        TAP(m, l, MOQ_TAP_V, v, 1, KV * D);
        if (KV * D < m->kv_row) { /* a layer with a shorter row than the cache's (Gemma 4): padded */
            memcpy(m->kpad, k, (size_t)(KV * D) * sizeof(float));
            memcpy(m->vpad, v, (size_t)(KV * D) * sizeof(float));
            k = m->kpad, v = m->vpad;
        }
        moq_kv_cache_write(m->rkv, ly->kvl, row_slot(m, i, m->rpos[i]), k, v);
    }
    CHECK(m->qkv, M, qkvN, "%s.layers.%lld.self_attn (q/k norm and rope)", pfx, (long long)l);
    attention(m, l, M);
    if (qh > D) /* output gate (Qwen3.5): att *= sigmoid(gate), the second half of each head's q rows */
        for (int64_t i = 0; i < M; i++)
            for (int64_t hd = 0; hd < A; hd++)
                for (int64_t e = 0; e < D; e++) {
                    const float g = m->qkv[i * qkvN + hd * qh + D + e];
                    m->att[i * A * D + hd * D + e] *= moq_sigmoid(g);
                }
    CHECK(m->att, M, A * D, "%s.layers.%lld.self_attn (attention)", pfx, (long long)l);
    TAP(m, l, MOQ_TAP_O_IN, m->att, M, A * D);
    MOQ_TRY(run_linear(m, &ly->o, m->att, M, m->tmp, err));
    CHECK(m->tmp, M, m->H, "%s", ly->o.name);
    return MOQ_OK;
}

/* The shared expert of an MoE layer on m->h, added into m->x. */
static moq_status shared_block(moq_model *m, const layer *ly, int64_t l, int64_t M, moq_error *err) {
    TAP(m, l, MOQ_TAP_GATE_UP_IN, m->h, M, m->H);   /* an MoE layer has no dense MLP: the shared expert's taps */
    MOQ_TRY(run_linear(m, &ly->sh_gate_up, m->h, M, m->gu, err));
    swiglu(m->gu, M, m->Is, m->act, false);
    TAP(m, l, MOQ_TAP_DOWN_IN, m->act, M, m->Is);
    MOQ_TRY(run_linear(m, &ly->sh_down, m->act, M, m->tmp, err));
    if (ly->sh_gate.lin) { /* sigmoid(shared_expert_gate(h)) per token; m->gu is free again */
        MOQ_TRY(run_linear(m, &ly->sh_gate, m->h, M, m->gu, err));
        for (int64_t i = 0; i < M; i++) {
            const float g = moq_sigmoid(m->gu[i]);
            for (int64_t e = 0; e < m->H; e++) m->tmp[i * m->H + e] *= g;
        }
    }
    MOQ_TRY(tp_sum(m, m->tmp, M * m->H, err)); /* row-parallel shared down_proj */
    for (int64_t e = 0; e < M * m->H; e++) m->x[e] += m->tmp[e];
    return MOQ_OK;
}

/* A DeepSeek-V4 decoder layer on the streams m->x [M, hc, H]: mHC collapse -> attn_norm ->
 * attention (attn/dsv4.c) -> mHC expand; mHC collapse -> ffn_norm -> experts (hash or learned
 * routing) + the shared expert, both with the clamped SwiGLU -> mHC expand. */
static moq_status dsv4_layer(moq_model *m, const layer *ly, int64_t l, const int32_t *tok, int64_t M, bool locate, moq_error *err) {
    const int64_t H = m->H, Is = m->Is, k = m->topk;
    const char *pfx = m->arch->prefix;
    moq_dsv4_hc_pre(&ly->v4, &m->v4d, 0, m->x, M, m->tmp, m->v4mix);
    for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->tmp + i * H, ly->in_norm, H, m->eps);
    MOQ_TRY(moq_dsv4_forward(&ly->v4, &m->v4d, &m->v4ws, m->h, M, m->rpos[0], m->tmp, err));
    CHECK(m->tmp, M, H, "%s.layers.%lld.attn", pfx, (long long)l);
    moq_dsv4_hc_post(&m->v4d, m->x, m->tmp, m->v4mix, M, m->v4ws.hc);
    moq_dsv4_hc_pre(&ly->v4, &m->v4d, 1, m->x, M, m->tmp, m->v4mix);
    for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->tmp + i * H, ly->post_norm, H, m->eps);
    TAP(m, l, MOQ_TAP_MOE_IN, m->h, M, H);
    if (ly->hash_ids) {
        for (int64_t i = 0; i < M; i++) memcpy(m->v4ids + i * k, ly->hash_ids + (int64_t)tok[i] * k, (size_t)k * sizeof(int32_t));
        MOQ_TRY(moq_moe_run_fixed(ly->moe, m->h, MOQ_ELEM_F32, M, m->v4ids, m->tmp, MOQ_ELEM_F32, m->lws, m->lws_size, err));
    } else {
        MOQ_TRY(moq_moe_run(ly->moe, m->h, MOQ_ELEM_F32, M, NULL, m->tmp, MOQ_ELEM_F32, m->lws, m->lws_size, err));
    }
    CHECK(m->tmp, M, H, "%s.layers.%lld.%s", pfx, (long long)l, m->arch->moe_block);
    if (ly->has_shared) { /* DeepseekV4MLP: silu(min(gate, L)) · clamp(up, -L, L) */
        const float L = (float)m->v4->swiglu_limit;
        MOQ_TRY(run_linear(m, &ly->sh_gate_up, m->h, M, m->gu, err));
        for (int64_t i = 0; i < M; i++)
            for (int64_t e = 0; e < Is; e++) {
                const float g = fminf(m->gu[i * 2 * Is + e], L), u = fminf(fmaxf(m->gu[i * 2 * Is + Is + e], -L), L);
                m->act[i * Is + e] = moq_silu(g) * u;
            }
        MOQ_TRY(run_linear(m, &ly->sh_down, m->act, M, m->v4sh, err));
        CHECK(m->v4sh, M, H, "%s", ly->sh_down.name);
        for (int64_t e = 0; e < M * H; e++) m->tmp[e] += m->v4sh[e];
    }
    moq_dsv4_hc_post(&m->v4d, m->x, m->tmp, m->v4mix, M, m->v4ws.hc);
    CHECK(m->x, M, H * m->v4d.hc, "%s.layers.%lld (residual streams after the experts)", pfx, (long long)l);
    return MOQ_OK;
}

/* Gemma 4's MoE block beside the MLP whose output is in m->tmp (Gemma4TextDecoderLayer):
 * tmp = post_ffn1(tmp) + post_ffn2(experts(pre_ffn2(x))), the experts routed by
 * softmax top-k of router.proj(x / rms(x) · router.scale · H^-1/2), renormalized, × per_expert_scale
 * (src/moe with the logits given); x is the residual stream before the MLP. */
static moq_status gemma4_moe(moq_model *m, const layer *ly, int64_t l, int64_t M, bool locate, moq_error *err) {
    const int64_t H = m->H;
    const float rs = (float)(1.0 / sqrt((double)H)); /* Gemma4TextRouter.scalar_root_size */
    const char *pfx = m->arch->prefix;
    for (int64_t i = 0; i < M; i++) {
        float *r = m->rin + i * H;
        rmsnorm(r, m->x + i * H, NULL, H, m->eps);
        for (int64_t e = 0; e < H; e++) r[e] = r[e] * ly->router_scale[e] * rs;
    }
    MOQ_TRY(run_linear(m, &ly->g4_router, m->rin, M, m->rlog, err));
    CHECK(m->rlog, M, m->E, "%s", ly->g4_router.name);
    for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->x + i * H, ly->pre_ffn2, H, m->eps);
    TAP(m, l, MOQ_TAP_MOE_IN, m->h, M, H);
    MOQ_TRY(moq_moe_run(ly->moe, m->h, MOQ_ELEM_F32, M, m->rlog, m->moe_out, MOQ_ELEM_F32, m->lws, m->lws_size, err));
    CHECK(m->moe_out, M, H, "%s.layers.%lld.experts", pfx, (long long)l);
    for (int64_t i = 0; i < M; i++) {
        rmsnorm(m->tmp + i * H, m->tmp + i * H, ly->post_ffn1, H, m->eps);
        rmsnorm(m->moe_out + i * H, m->moe_out + i * H, ly->post_ffn2, H, m->eps);
        for (int64_t e = 0; e < H; e++) m->tmp[i * H + e] += m->moe_out[i * H + e];
    }
    return MOQ_OK;
}

/* One chunk of M <= chunk rows under the row plan (m->rkv, rpos, rtab, rpage); the logits of rows
 * lrows[0..nl) go to m->logits_ws [nl, V]. MLA and DeltaNet layers take one sequence at consecutive
 * positions from rpos[0] (moq_model_forward_rows refuses other plans for them).
 * locate: check every module's output (after a step whose logits were not finite). */
static moq_status forward_chunk(moq_model *m, const int32_t *tok, int64_t M, const int64_t *lrows, int64_t nl, bool locate, moq_error *err) {
    const int64_t H = m->H, I = m->I, p0 = m->rpos[0];
    const char *pfx = m->arch->prefix;
    const int64_t ns = m->v4 ? m->v4d.hc : 1; /* residual streams (DeepSeek-V4 mHC: the embedding in each) */
    for (int64_t i = 0; i < M; i++) {
        const int64_t row = tok[i] - m->tp.v0; /* --tp: rows outside this rank's vocabulary are zero, summed below */
        if (m->tp.G > 1 && (row < 0 || row >= m->tp.v_n)) {
            memset(m->x + i * ns * H, 0, (size_t)(ns * H) * sizeof(float));
            continue;
        }
        moq_weight_dequant_row(&m->embed.w, row, m->erow);
        for (int64_t s = 0; s < ns; s++)
            for (int64_t e = 0; e < H; e++) m->x[(i * ns + s) * H + e] = (float)m->erow[e] * m->embed_mult;
    }
    MOQ_TRY(tp_sum(m, m->x, M * H, err)); /* one rank holds each row: the sum is exact */
    CHECK(m->x, M, H, "%s", m->embed.name);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        if (m->v4) {
            MOQ_TRY(dsv4_layer(m, ly, l, tok, M, locate, err));
            continue;
        }
        for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->x + i * H, ly->in_norm, H, m->eps);
        CHECK(m->h, M, H, "%s.layers.%lld.input_layernorm", pfx, (long long)l);
        if (m->arch->attn == ATTN_MLA) {
            MOQ_TRY(moq_mla_forward(&ly->mla, &m->mws, m->inv_freq, m->mscale, m->h, M, p0, &m->kv, ly->kvl, m->tmp, err));
            CHECK(m->tmp, M, H, "%s.layers.%lld.self_attn (multi-head latent attention)", pfx, (long long)l);
        } else if (ly->linear) {
            MOQ_TRY(moq_gdn_forward(&m->layers[l].gdn, &m->gws, m->h, M, m->tmp, err));
            CHECK(m->tmp, M, H, "%s.layers.%lld.linear_attn", pfx, (long long)l);
        } else {
            MOQ_TRY(gqa_block(m, ly, l, M, locate, err));
        }
        MOQ_TRY(tp_sum(m, m->tmp, M * H, err)); /* row-parallel o_proj: the ranks' partial sums */
        if (m->arch->sandwich) /* Gemma: the attention output is normalized before the residual add */
            for (int64_t i = 0; i < M; i++) rmsnorm(m->tmp + i * H, m->tmp + i * H, ly->post_norm, H, m->eps);
        for (int64_t e = 0; e < M * H; e++) m->x[e] += m->tmp[e];
        CHECK(m->x, M, H, "%s.layers.%lld (residual after attention)", pfx, (long long)l);
        const float *pre_mlp = m->arch->sandwich ? ly->pre_ffn_norm : ly->post_norm;
        for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->x + i * H, pre_mlp, H, m->eps);
        CHECK(m->h, M, H, "%s.layers.%lld.%s", pfx, (long long)l, m->arch->sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm");
        if (ly->is_moe) {
            TAP(m, l, MOQ_TAP_MOE_IN, m->h, M, H);
            MOQ_TRY(moe_block(m, ly, M, err));
            CHECK(m->tmp, M, H, "%s.layers.%lld.%s", pfx, (long long)l, m->arch->moe_block);
            if (ly->has_shared) MOQ_TRY(shared_block(m, ly, l, M, err));
            for (int64_t e = 0; ly->scalar != 1.0f && e < M * H; e++) m->x[e] *= ly->scalar;
            CHECK(m->x, M, H, "%s.layers.%lld (residual after the experts)", pfx, (long long)l);
            continue;
        }
        TAP(m, l, MOQ_TAP_GATE_UP_IN, m->h, M, H);
        MOQ_TRY(run_linear(m, &ly->gate_up, m->h, M, m->gu, err));
        CHECK(m->gu, M, 2 * I, "%s", ly->gate_up.name);
        swiglu(m->gu, M, I, m->act, m->arch->gelu);
        CHECK(m->act, M, I, "%s.layers.%lld.mlp (act(gate) * up)", pfx, (long long)l);
        TAP(m, l, MOQ_TAP_DOWN_IN, m->act, M, I);
        MOQ_TRY(run_linear(m, &ly->down, m->act, M, m->tmp, err));
        MOQ_TRY(tp_sum(m, m->tmp, M * H, err)); /* row-parallel down_proj */
        CHECK(m->tmp, M, H, "%s", ly->down.name);
        if (ly->g4moe) MOQ_TRY(gemma4_moe(m, ly, l, M, locate, err));
        if (m->arch->sandwich)
            for (int64_t i = 0; i < M; i++) rmsnorm(m->tmp + i * H, m->tmp + i * H, ly->post_ffn_norm, H, m->eps);
        for (int64_t e = 0; e < M * H; e++) m->x[e] += m->tmp[e];
        for (int64_t e = 0; ly->scalar != 1.0f && e < M * H; e++) m->x[e] *= ly->scalar; /* Gemma 4 layer_scalar */
        CHECK(m->x, M, H, "%s.layers.%lld (residual after the MLP)", pfx, (long long)l);
    }
    /* logits of the rows asked for (none: a prefill chunk that is not a prompt's last) */
    if (nl == 0) return MOQ_OK;
    const int64_t nr = nl;
    const float *xf = m->x;
    if (m->v4) moq_dsv4_hc_head(&m->v4d, m->hc_fn, m->hc_base, m->hc_scale, m->x, M, m->tmp), xf = m->tmp; /* DeepseekV4HyperHead */
    for (int64_t j = 0; j < nl; j++) rmsnorm(m->h + j * H, xf + lrows[j] * H, m->final_norm, H, m->eps);
    CHECK(m->h, nr, H, "%s.norm", pfx);
    if (m->tp.G > 1) { /* vocabulary-parallel lm_head: [nr, v_n] here, gathered [G][nr, v_per], unpacked [nr, V] */
        MOQ_TRY(run_linear(m, m->lm_head, m->h, nr, m->lgl, err));
        const int64_t vp = m->tp.v_per;
        MOQ_TRY(moq_comm_all_gather(m->comm, m->lgl, m->lg, (size_t)(nr * vp), err));
        for (int r = 0; r < m->tp.G; r++) {
            const int64_t v0 = r * vp, vn = m->V - v0 < vp ? m->V - v0 : vp;
            for (int64_t j = 0; j < nr; j++)
                memcpy(m->logits_ws + j * m->V + v0, m->lg + (int64_t)r * nr * vp + j * vn, (size_t)vn * sizeof(float));
        }
    } else {
        MOQ_TRY(run_linear(m, m->lm_head, m->h, nr, m->logits_ws, err));
    }
    const float cap = (float)m->gc.final_logit_softcapping;
    for (int64_t e = 0; cap > 0 && e < nr * m->V; e++) m->logits_ws[e] = cap * tanhf(m->logits_ws[e] / cap); /* final_logit_softcapping */
    CHECK(m->logits_ws, nr, m->V, "%s", m->lm_head->name);
    const int64_t bad = moq_f32_first_nonfinite(m->logits_ws, nr * m->V);
    if (bad >= 0 && !locate) return forward_chunk(m, tok, M, lrows, nl, true, err);
    if (bad >= 0) /* not reached: the located run stops at the module, at the latest at lm_head */
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, m->lm_head->name, "logits are not finite at column %lld, and no module output was on the second run",
                        (long long)(bad % m->V));
    return MOQ_OK;
}
#undef CHECK

moq_status moq_model_forward_rows(moq_model *m, moq_kv_cache *kv, int64_t page, const int32_t *tok, const int64_t *pos,
                                  const int32_t *const *tabs, int64_t M, const int64_t *lrows, int64_t nl, moq_error *err) {
    if (M < 1 || M > m->chunk || nl < 0 || nl > M)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "moq_model_forward_rows", "%lld rows with %lld logits rows, expected 1..%lld", (long long)M,
                        (long long)nl, (long long)m->chunk);
    m->rkv = kv ? kv : &m->kv, m->rpage = page > 0 ? page : 1;
    for (int64_t i = 0; i < M; i++) m->rpos[i] = pos[i], m->rtab[i] = tabs ? tabs[i] : NULL;
    return forward_chunk(m, tok, M, lrows, nl, false, err);
}

int64_t moq_model_chunk(const moq_model *m) { return m->chunk; }
const float *moq_model_step_logits(const moq_model *m) { return m->logits_ws; }
bool moq_model_batchable(const moq_model *m) {
    return !m->grp && m->tp.G < 2 && attn_caps[m->arch->attn].batch;
}
const moq_kv_cache *moq_model_kv(const moq_model *m) { return &m->kv; }
const char *moq_model_path(const moq_model *m) { return moq_checkpoint_path(m->ckpt); }

moq_status moq_model_prefill(moq_model *m, const int32_t *tokens, int64_t n, float *logits_all, moq_error *err) {
    if (m && m->grp) return moq_tp_prefill(m, tokens, n, logits_all, err); /* --tp: every rank (model_tp.c) */
    return moq_model_prefill_rank(m, tokens, n, logits_all != NULL, logits_all, err);
}

/* all_rows: logits of every row (into logits_all when not NULL); every rank of --tp must agree, as
 * the lm_head's all-gather is sized by it. */
moq_status moq_model_prefill_rank(moq_model *m, const int32_t *tokens, int64_t n, bool all_rows, float *logits_all, moq_error *err) {
    if (!m || !tokens || n < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_model_prefill", "model and tokens must not be NULL and n >= 1 (n=%lld)", (long long)n);
    if (m->pos + n > m->T)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_checkpoint_path(m->ckpt), "%lld cached + %lld new tokens exceed the context of %lld positions",
                        (long long)m->pos, (long long)n, (long long)m->T);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->V)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_checkpoint_path(m->ckpt), "token %d at index %lld, expected [0, %lld)", tokens[i],
                            (long long)i, (long long)m->V);
    if (m->gpu) { /* the GPU forward (model_gpu.c) keeps its own cache and positions */
        const int64_t chunk = moq_gpu_chunk(m);
        for (int64_t i = 0; i < n; i += chunk) {
            const int64_t M = n - i < chunk ? n - i : chunk;
            /* --tp: every rank gathers the same rows (a worker asked for all rows keeps them in lrows_h) */
            float *dst = logits_all ? logits_all + i * m->V : all_rows ? m->lrows_h : NULL;
            MOQ_TRY(moq_gpu_forward(m, tokens + i, M, dst, err));
        }
        return MOQ_OK;
    }
    int64_t lrows[MOQ_MODEL_CHUNK];
    m->rkv = &m->kv, m->rpage = 1;
    for (int64_t i = 0; i < n; i += m->chunk) {
        const int64_t M = n - i < m->chunk ? n - i : m->chunk, nl = all_rows ? M : 1;
        for (int64_t r = 0; r < M; r++) m->rpos[r] = m->pos + r, m->rtab[r] = NULL, lrows[r] = all_rows ? r : M - 1;
        MOQ_TRY(forward_chunk(m, tokens + i, M, lrows, nl, false, err));
        if (logits_all) memcpy(logits_all + i * m->V, m->logits_ws, (size_t)(M * m->V) * sizeof(float));
        memcpy(m->logits, m->logits_ws + (nl - 1) * m->V, (size_t)m->V * sizeof(float));
        m->pos += M;
    }
    return MOQ_OK;
}

moq_status moq_model_decode(moq_model *m, int32_t token, moq_error *err) { return moq_model_prefill(m, &token, 1, NULL, err); }
const float *moq_model_logits(const moq_model *m) { return m ? m->logits : NULL; }
void moq_model_reset(moq_model *m) {
    if (!m) return;
    moq_tp_reset(m);
    m->pos = 0;
    for (int64_t l = 0; l < m->L; l++) /* recurrent state belongs to the sequence */
        if (m->layers[l].linear) moq_gdn_reset(&m->layers[l].gdn);
}
int64_t moq_model_vocab_size(const moq_model *m) { return m ? m->V : 0; }
int64_t moq_model_ctx(const moq_model *m) { return m ? m->T : 0; }
int64_t moq_model_pos(const moq_model *m) { return m ? m->pos : 0; }
const char *moq_model_architecture(const moq_model *m) { return m ? m->arch->name : ""; }
int moq_model_warning_count(const moq_model *m) { return m ? m->n_warn : 0; }
const char *moq_model_warning(const moq_model *m, int i) { return m && i >= 0 && i < m->n_warn ? m->warn[i] : ""; }

moq_model_timings moq_model_load_timings(const moq_model *m) {
    moq_model_timings t = {0};
    return m ? m->tm : t;
}

static uint64_t weight_bytes(const moq_weight *w) {
    const uint64_t nk = (uint64_t)w->N * (uint64_t)w->K;
    uint64_t b = nk * (uint64_t)moq_elem_bits(w->w.elem) / 8;
    if (w->w.scale_elem != MOQ_ELEM_NONE && w->w.group_cols > 0)
        b += nk / (uint64_t)w->w.group_cols / (uint64_t)(w->w.group_rows > 0 ? w->w.group_rows : 1) * (uint64_t)moq_elem_bits(w->w.scale_elem) / 8;
    return b;
}

moq_model_memory moq_model_memory_usage(const moq_model *m) {
    moq_model_memory mm = {0};
    if (!m) return mm;
    for (size_t i = 0; i < moq_checkpoint_tensor_count(m->ckpt); i++) mm.file += moq_checkpoint_tensor_at(m->ckpt, i)->nbytes;
    moq_layers_memory(&m->embed, &mm);
    if (m->lm_head == &m->lm_head_own) moq_layers_memory(&m->lm_head_own, &mm);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const moq_layer_linear *all[] = {&ly->qkv, &ly->o, &ly->gate_up, &ly->down, &ly->sh_gate_up, &ly->sh_down, &ly->mla.q_a, &ly->mla.q_b,
                                         &ly->mla.kv_a, &ly->mla.kv_b, &ly->mla.o, &ly->sh_gate, &ly->gdn.qkv, &ly->gdn.z, &ly->gdn.b,
                                         &ly->gdn.a, &ly->gdn.out, &ly->v4.wq_a, &ly->v4.wq_b, &ly->v4.wkv, &ly->v4.wo_a, &ly->v4.wo_b,
                                         &ly->v4.c_wkv, &ly->v4.c_wgate, &ly->v4.i_wkv, &ly->v4.i_wgate, &ly->v4.i_wq_b, &ly->v4.i_wproj};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) moq_layers_memory(all[i], &mm);
        if (ly->moe) {
            uint64_t p, o;
            moq_moe_memory(ly->moe, &p, &o);
            mm.packed += p, mm.owned += o;
        }
    }
    return mm;
}

uint64_t moq_model_decode_bytes(const moq_model *m) {
    if (!m) return 0;
    uint64_t b = weight_bytes(&m->lm_head->w) + (uint64_t)m->H * (uint64_t)moq_elem_bits(m->embed.w.w.elem) / 8;
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        b += weight_bytes(&ly->qkv.w) + weight_bytes(&ly->o.w) + weight_bytes(&ly->gate_up.w) + weight_bytes(&ly->down.w);
        b += weight_bytes(&ly->sh_gate_up.w) + weight_bytes(&ly->sh_down.w) + weight_bytes(&ly->mla.q_a.w) + weight_bytes(&ly->mla.q_b.w) +
             weight_bytes(&ly->mla.kv_a.w) + weight_bytes(&ly->mla.kv_b.w) + weight_bytes(&ly->mla.o.w) + weight_bytes(&ly->sh_gate.w) +
             weight_bytes(&ly->gdn.qkv.w) + weight_bytes(&ly->gdn.z.w) + weight_bytes(&ly->gdn.b.w) + weight_bytes(&ly->gdn.a.w) +
             weight_bytes(&ly->gdn.out.w);
        /* MoE: the router and the k experts a token is routed to (all experts are the same size) */
        if (ly->moe) b += (uint64_t)(m->E * m->H) * 2 + (uint64_t)m->topk * moq_moe_expert_bytes(ly->moe_fmt, m->H, m->Ie);
    }
    return b;
}
