#!/usr/bin/env python3
"""modelopt_dsv4_fixtures.py — real ModelOpt exports of the tiny DeepSeek-V4 and their float32 oracle.

tests/data/hf_tiny/deepseek_v4 (scripts/gen_arch_fixtures.py) is quantized by NVIDIA ModelOpt 0.47
(`mtq.quantize` with a forward loop over random token batches, then `export_hf_checkpoint`, the flow of
scripts/modelopt_arch_fixtures.py) into OUT/deepseek_v4_{fp8,nvfp4}/ with the same files as the other
fixtures (config.json, hf_quant_config.json, model.safetensors as exported; the hf_tiny tokenizer.json;
expected_logits.safetensors with tokens, the oracle's logits and ModelOpt's fake-quant logits when its
forward runs on the CPU).

Two facts of ModelOpt 0.47 + transformers 5.17 on DeepseekV4ForCausalLM (measured 2026-12-01, CPU):
  - in bf16 both transformers' forward and mtq.quantize fail (the fp32-kept modules meet bf16 ones:
    "expected m1 and m2 to have the same dtype"), so the model is loaded in float32 and the export's
    unquantized tensors are F32;
  - with the default configs everything quantized but the grouped output projection wo_a
    (DeepseekV4GroupedLinear: left unquantized and not listed in exclude_modules) and the head (listed
    as `lm_head`, saved as `head`). The recipe here is the one of NVIDIA's own DeepSeek-V4 release
    (its hf_quant_config quantizes the routed experts only; attention, shared experts and head stay
    high precision): FP8_DEFAULT_CFG / NVFP4_DEFAULT_CFG with `*self_attn*`, `*shared_experts*` and
    `*lm_head*` quantizers disabled, which ModelOpt writes as exclude_modules.

Oracle: transformers' own DeepseekV4ForCausalLM in float32 (eager), its weights those of
tests/data/hf_tiny/deepseek_v4 after checking that every unquantized tensor of the export equals them,
the routed experts replaced by the export's dequantized w1 / w3 / w2 (float64, scripts/modelopt_fixtures.py's
formulas) with the run-time activation quantizer in front of both GEMMs (one input scale per projection
kind for all experts of a layer: the max, as the engines fuse them), the clamp of DeepseekV4Experts
kept; every dot product in float64 rounded once to float32 (modelopt_fixtures.f64_logits).

Usage (CPU; nvidia-modelopt 0.47 importable, a `pulp` stub is enough):
    python3 scripts/modelopt_dsv4_fixtures.py OUT [--oracle-only]
"""
import argparse
import copy
import os
import shutil
import sys
import types

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modelopt_fixtures as mf  # noqa: E402

TINY = os.path.join(HERE, "..", "tests", "data", "hf_tiny", "deepseek_v4")
TOKENS = [1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 2, 54]  # gen_arch_fixtures.PROMPT
SEED = 1234
FIXTURES = {"deepseek_v4_fp8": "FP8_DEFAULT_CFG", "deepseek_v4_nvfp4": "NVFP4_DEFAULT_CFG"}
KEEP_HIGH = ("*self_attn*", "*shared_experts*", "*lm_head*")


def load_tiny():
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32, attn_implementation="eager").eval()


def experts_forward(q13, q2, gu, dn):
    """DeepseekV4Experts.forward (transformers 5.17) with activation quantizers, float64 weights."""
    ident = lambda x: x  # noqa: E731
    q13, q2 = q13 or ident, q2 or ident

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            top_k_pos, token_idx = torch.where(mask[e])
            if token_idx.numel() == 0:
                continue
            cur = self._apply_gate(F.linear(q13(hidden_states[token_idx]), gu[e]))
            cur = F.linear(q2(cur), dn[e]) * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, cur.to(final.dtype))
        return final

    return forward


def oracle_logits(d, tokens):
    import json
    sd = load_file(os.path.join(d, "model.safetensors"))
    tiny = load_file(os.path.join(TINY, "model.safetensors"))
    algo, _ = mf.algo_of(json.load(open(os.path.join(d, "hf_quant_config.json"))))
    for k, v in tiny.items():  # the unquantized rest of the export is the tiny model's
        if ".experts." in k:
            continue
        if k not in sd or not torch.equal(sd[k].to(torch.float32), v.to(torch.float32)):
            raise RuntimeError(f"{d}: {k} is not the tiny model's tensor (a quantized non-expert module?)")
    model = load_tiny()
    for li, layer in enumerate(model.model.layers):
        ep = f"model.layers.{li}.ffn.experts"
        ex = layer.mlp.experts
        gu, dn, fmts = [], [], set()
        for e in range(ex.num_experts):
            w = {}
            for pr in ("w1", "w3", "w2"):
                p = f"{ep}.{e}.{pr}"
                f = mf.linear_format(algo, sd, p)
                fmts.add(f)
                w[pr] = mf.dequant_weight(f, sd, p) if f else sd[p + ".weight"].to(torch.float64)
            gu.append(torch.cat([w["w1"], w["w3"]], 0))
            dn.append(w["w2"])
        if len(fmts) != 1 or None in fmts:
            raise RuntimeError(f"{ep}: experts in formats {fmts}, expected one quantized format")
        (fmt,) = fmts
        with torch.no_grad():
            ex.gate_up_proj.copy_(torch.stack(gu).float())
            ex.down_proj.copy_(torch.stack(dn).float())
        a13 = mf.group_input_scale(sd, [f"{ep}.{e}.{pr}" for e in range(ex.num_experts) for pr in ("w1", "w3")])
        a2 = mf.group_input_scale(sd, [f"{ep}.{e}.w2" for e in range(ex.num_experts)])
        ex.forward = types.MethodType(experts_forward(mf.act_fn_for(fmt, a13, None), mf.act_fn_for(fmt, a2, None), gu, dn), ex)
    return mf.f64_logits(model, tokens)


def make_fixture(name, out):
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    model = load_tiny()
    cfg = copy.deepcopy(getattr(mtq, FIXTURES[name]))
    cfg["quant_cfg"] += [{"quantizer_name": p, "enable": False} for p in KEEP_HIGH]
    g = torch.Generator().manual_seed(SEED + 7)
    calib = [torch.randint(0, model.config.vocab_size, (4, 32), generator=g) for _ in range(4)]
    with torch.no_grad():
        mtq.quantize(model, cfg, lambda m: [m(b) for b in calib])
        try:  # ModelOpt's NVFP4 fake-quant forward fails on the CPU (DeepSeek-V4's experts: "no attribute
            # 'down_proj_input_quantizer'" after calibration): none then
            fake = model(torch.tensor([TOKENS])).logits[0].float().cpu()
        except (AssertionError, RuntimeError, NotImplementedError, AttributeError):
            fake = None
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    with torch.inference_mode():
        export_hf_checkpoint(model, export_dir=d)
    shutil.copy(os.path.join(TINY, "tokenizer.json"), d)
    for f in os.listdir(d):
        if f not in ("config.json", "hf_quant_config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
            os.remove(os.path.join(d, f))
    return fake


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--oracle-only", action="store_true", help="recompute expected logits of existing exports")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    write = lambda d, fake=None: mf.write_expected(d, fake, TOKENS, oracle_logits)  # noqa: E731
    if a.oracle_only:
        mf.rewrite_expected(a.out, list(FIXTURES), write)
        return
    failed = []
    for n in FIXTURES:  # ModelOpt patches transformers' classes in this process: the oracle runs in a fresh one
        try:
            fake = make_fixture(n, a.out)
            if fake is not None:  # kept by --oracle-only, which rewrites "logits"
                from safetensors.torch import save_file
                save_file({"tokens": torch.tensor(TOKENS, dtype=torch.int32), "logits": fake.clone(), "fakequant": fake.contiguous()},
                          os.path.join(a.out, n, "expected_logits.safetensors"))
        except Exception as e:
            import traceback
            traceback.print_exc()
            failed.append(f"{n}: {type(e).__name__}: {e}")
    import subprocess
    subprocess.run([sys.executable, os.path.abspath(__file__), a.out, "--oracle-only"], check=True)
    mf.write_provenance(os.path.join(a.out, "provenance_dsv4.json"), list(FIXTURES), failed, "cpu")


if __name__ == "__main__":
    main()
