/* fuzz_config.c — libFuzzer target: the ModelOpt quantization-config parser (both layouts, every
 * profile) and per-layer resolution of a fixed set of module names, as `moq config` and
 * `moq resolve` do. The first input byte picks the profile and which file name the text is parsed
 * as. Every error must carry a message; every success must give a method for every module.
 * Built by `make fuzz`. */
#include <stdlib.h>
#include <string.h>

#include "moq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const prefixes[] = {
    "lm_head", "model.embed_tokens", "model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
    "model.layers.1.mlp.gate_up_proj", "model.layers.1.mlp.down_proj", "model.layers.2.mlp.experts",
    "language_model.model.layers.3.self_attn.q_proj", "model.language_model.layers.3.mlp.experts.7.w1",
    "visual.blocks.0.attn.qkv", "model.layers.4.self_attn.fused_qkv_a_proj_with_mqa", "mtp.layers.0.eh_proj",
    "model.layers.0.self_attn", "model.layers.5.mlp.shared_experts.down_proj",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *const files[] = {"hf_quant_config.json", "config.json"};
    const moq_compat profile = (moq_compat)(data[0] % MOQ_COMPAT_COUNT);
    const char *file = files[(data[0] >> 2) & 1];
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    moq_qconfig *q = NULL;
    moq_error err;
    if (moq_qconfig_parse(&q, text, file, profile, &err) == MOQ_OK) {
        static const char *const qkv[] = {"q_proj", "k_proj", "v_proj"}, *const gu[] = {"gate_proj", "up_proj"};
        const moq_packed packed[] = {{"qkv_proj", qkv, 3}, {"gate_up_proj", gu, 2}};
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
            for (int k = 0; k < MOQ_KIND_COUNT; k++) {
                moq_resolution r;
                moq_status s = moq_resolve(q, prefixes[i], (moq_layer_kind)k, packed, 2, &r, &err);
                if (s == MOQ_OK && (!r.method || !r.rule)) __builtin_trap();
                if (s != MOQ_OK && err.msg[0] == '\0') __builtin_trap();
            }
        for (int i = 0; i < moq_qconfig_exclude_count(q); i++)
            if (!moq_qconfig_exclude_at(q, i)) __builtin_trap();
        moq_qconfig_free(q);
    } else if (err.msg[0] == '\0') {
        __builtin_trap();
    }
    free(text);
    return 0;
}
