#!/usr/bin/env python3
"""modelopt_gemma4_fixtures.py — real ModelOpt FP8 and NVFP4 exports of the tiny Gemma 4 of
tests/data/hf_tiny/gemma4_text (scripts/gen_gemma4_fixtures.py) and their float32 oracle.

The flow and the oracle are scripts/modelopt_arch_fixtures.py's (imported: `mtq.quantize` with
random calibration batches, `export_hf_checkpoint`, then weights dequantized from the exported tensors
in float64 with the activation quantizers restated, transformers' own Gemma 4 code for the rest). The
fused-group input scale of a k_eq_v global layer is over q_proj and k_proj (it has no v_proj), which
group_input_scale already does (it takes the prefixes present). Kept apart from that script so the
architecture lists of parallel branches do not collide.

gemma4_text_fp8_kv adds ModelOpt's calibrated FP8 KV cache (mtq.FP8_KV_CFG, as
scripts/modelopt_fixtures.py's llama_fp8_kv): ModelOpt writes a k_eq_v layer's v scale as
self_attn.v_proj.v_scale although the layer has no v_proj. Its oracle quantizes K (after k_norm and
RoPE) and V (after the v norm) as the cache stores them, D4(E4s(x / scale)) · scale, by wrapping
transformers' Gemma 4 eager_attention_forward (as modelopt_fixtures.py's oracle does for Llama).

Usage (CPU is enough; nvidia-modelopt 0.47 importable, `pulp` stubbed as tests/data/modelopt_real/README.md says):
    python3 scripts/modelopt_gemma4_fixtures.py OUT [--only NAME,...] [--oracle-only]
writes OUT/gemma4_text_{nvfp4,fp8,fp8_kv}/, OUT/gemma4_moe_{nvfp4,fp8}/ and OUT/provenance_gemma4.json.
gemma4_moe (the 26B-A4B shape): ModelOpt 0.47 writes Gemma4TextExperts one module per expert
(experts.N.{gate,up,down}_proj) and keeps router.proj in BF16; the oracle's per-expert path
(modelopt_fixtures.per_expert / make_expert_forward, which calls the module's own act_fn: GELU-tanh
here) restates Gemma4TextExperts.forward, transformers' Gemma4TextRouter runs as is.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modelopt_arch_fixtures as ma  # noqa: E402

ma.FIXTURES.clear()
ma.FIXTURES["gemma4_text_nvfp4"] = ("gemma4_text", "NVFP4_DEFAULT_CFG")
ma.FIXTURES["gemma4_text_fp8"] = ("gemma4_text", "FP8_DEFAULT_CFG")
ma.FIXTURES["gemma4_text_fp8_kv"] = ("gemma4_text", "MOQ_GEMMA4_FP8_KV_CFG")  # set below on mtq
ma.FIXTURES["gemma4_moe_nvfp4"] = ("gemma4_moe", "NVFP4_DEFAULT_CFG")
ma.FIXTURES["gemma4_moe_fp8"] = ("gemma4_moe", "FP8_DEFAULT_CFG")

_oracle = ma.oracle_logits


def oracle_kv(d, tokens):
    """ma.oracle_logits with the FP8 KV cache of hf_quant_config.json emulated per layer."""
    import json
    import torch
    from safetensors.torch import load_file
    import transformers.models.gemma4.modeling_gemma4 as g4
    hq = json.load(open(os.path.join(d, "hf_quant_config.json")))
    if str(hq["quantization"].get("kv_cache_quant_algo") or "").upper() != "FP8":
        return _oracle(d, tokens)
    sd = load_file(os.path.join(d, "model.safetensors"))
    one = torch.tensor(1.0)
    kv = {}
    for k in sd:
        if k.endswith("self_attn.k_proj.k_scale") or k.endswith("self_attn.v_proj.v_scale"):
            kv[(int(k.split(".layers.")[1].split(".")[0]), k.endswith("v_scale"))] = sd[k].to(torch.float32)
    eager = g4.eager_attention_forward

    def kv_attention(module, query, key, value, attention_mask, **kw):
        ks, vs = kv.get((module.layer_idx, False), one), kv.get((module.layer_idx, True), one)
        key = ma.mf.e4m3_sat(key / ks) * ks
        value = ma.mf.e4m3_sat(value / vs) * vs
        return eager(module, query, key, value, attention_mask, **kw)

    g4.eager_attention_forward = kv_attention
    try:
        return _oracle(d, tokens)
    finally:
        g4.eager_attention_forward = eager


ma.oracle_logits = oracle_kv

if __name__ == "__main__":
    if "--oracle-only" not in sys.argv:
        import copy
        import modelopt.torch.quantization as mtq
        mtq.MOQ_GEMMA4_FP8_KV_CFG = mtq.update_quant_cfg_with_kv_cache_quant(copy.deepcopy(mtq.FP8_DEFAULT_CFG), mtq.FP8_KV_CFG["quant_cfg"])
    _write = ma.mf.write_provenance
    ma.mf.write_provenance = lambda path, *a: _write(os.path.join(os.path.dirname(path), "provenance_gemma4.json"), *a)
    ma.main()
