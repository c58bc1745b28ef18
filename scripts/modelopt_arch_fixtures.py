#!/usr/bin/env python3
"""modelopt_arch_fixtures.py — real ModelOpt exports of the issue-17 tiny models and their float32 oracle.

The tiny random-weight transformers models of tests/data/hf_tiny (scripts/gen_arch_fixtures.py:
DeepSeek-V3, Qwen3.5-MoE, Gemma 3, Llama 4, gpt-oss, MiniMax-M2) are quantized by NVIDIA ModelOpt (`mtq.quantize`
with a forward loop over random token batches, then `export_hf_checkpoint`: the flow of
scripts/modelopt_fixtures.py and ModelOpt's examples/llm_ptq/hf_ptq.py) and written, per fixture, into
OUT/<name>/ with the same files as scripts/modelopt_fixtures.py (config.json, hf_quant_config.json,
model.safetensors as exported; the hf_tiny byte-level tokenizer.json; expected_logits.safetensors with
tokens, the oracle's logits and ModelOpt's own fake-quant logits).

The oracle is the one of scripts/modelopt_fixtures.py (its functions are imported: weights dequantized
from the exported tensors in float64, the run-time activation quantizers restated, every dot product in
float64 rounded once to float32, transformers' own model code for the rest), extended to what these
architectures export:
  - quantized linears may carry a bias (gpt-oss q/k/v/o);
  - DeepSeek's kv_b_proj is weight-only at run time (vLLM's MLA absorbs it, W_UK / W_UV, and so does
    moq: its input, the latent, is not quantized);
  - routed experts per expert (experts.N.{gate,up,down}_proj: DeepSeek-V3, Qwen3.5-MoE; MiniMax-M2's
    block_sparse_moe.experts.N.{w1,w3,w2}, renamed to transformers 5's mlp.experts.N.*) as in
    modelopt_fixtures.py, or stacked (experts.gate_up_proj [E, K/b, 2I], down_proj [E, I/b, H] with
    <proj>_weight_scale, _weight_scale_2, _input_scale and gpt-oss's _bias: what ModelOpt 0.47 writes
    for Llama 4 and gpt-oss), run by a restatement of Llama4TextExperts.forward / GptOssExperts.forward
    with the activation quantizers in front of both GEMMs (one input scale per projection for all experts).

Usage (CPU is enough; nvidia-modelopt 0.47 importable):
    python3 scripts/modelopt_arch_fixtures.py OUT [--only NAME,...]
    python3 scripts/modelopt_arch_fixtures.py --oracle-only OUT   (recompute expected logits of OUT/*)
"""
import argparse
import copy
import json
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

TINY = os.path.join(HERE, "..", "tests", "data", "hf_tiny")
TOKENS = [1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 2, 54]  # gen_arch_fixtures.PROMPT
SEED = 1234

# name -> (hf_tiny model, ModelOpt config attribute)
FIXTURES = {}
for _m in ("deepseek_v3_a", "qwen3_5_moe", "gemma3_text", "llama4_a", "gpt_oss", "minimax_m2"):
    FIXTURES[_m + "_nvfp4"] = (_m, "NVFP4_DEFAULT_CFG")
    FIXTURES[_m + "_fp8"] = (_m, "FP8_DEFAULT_CFG")
FIXTURES["llama4_a_w4a16_nvfp4"] = ("llama4_a", "W4A16_NVFP4_CFG")  # the other stacked scale forms
FIXTURES["llama4_a_mxfp8"] = ("llama4_a", "MXFP8_DEFAULT_CFG")


def stacked_format(sd, p):
    w = sd.get(p)
    if w is None or w.dtype not in (torch.float8_e4m3fn, torch.uint8):
        return None
    if w.dtype == torch.uint8:
        return "NVFP4" if (p + "_input_scale") in sd else "W4A16_NVFP4"
    if sd[p + "_weight_scale"].dtype == torch.uint8:
        return "MXFP8"
    return "FP8"


def dequant_stacked(fmt, sd, p):
    """[E, K/b, N] codes (x · W orientation, K packed in halves for e2m1) -> float64 [E, K, N]."""
    w = sd[p]
    if fmt is None:
        return w.to(torch.float64)
    if fmt in ("NVFP4", "W4A16_NVFP4"):
        E, Kh, N = w.shape
        codes = torch.stack([w & 0xF, w >> 4], dim=2).reshape(E, 2 * Kh, N)  # low nibble = even k
        sf = sd[p + "_weight_scale"].to(torch.float64)
        return mf.e2m1_decode(codes).double() * sf.repeat_interleave(16, dim=1) * sd[p + "_weight_scale_2"].to(torch.float64)
    if fmt == "MXFP8":  # e8m0 [E, K/32, N]
        return w.to(torch.float64) * mf.pow2(sd[p + "_weight_scale"].to(torch.int32) - 127).double().repeat_interleave(32, dim=1)
    return w.to(torch.float64) * sd[p + "_weight_scale"].to(torch.float64)


def stacked_act(fmt, sd, p):
    s = sd.get(p + "_input_scale")
    return mf.act_fn_for(fmt, None if s is None else s.to(torch.float32), None) if fmt else None


def llama4_experts_forward(q13, q2, gu, dn):
    """Llama4TextExperts.forward (transformers 5.17) with activation quantizers, float64 weights."""
    ident = lambda x: x  # noqa: E731
    q13, q2 = q13 or ident, q2 or ident

    def forward(self, hidden_states):
        hs = hidden_states.view(gu.shape[0], -1, self.hidden_size)
        g, u = torch.stack([F.linear(q13(hs[e]), gu[e].t()) for e in range(gu.shape[0])]).chunk(2, dim=-1)
        a = u * self.act_fn(g)
        out = torch.stack([F.linear(q2(a[e]), dn[e].t()) for e in range(dn.shape[0])])
        return out.view(-1, self.hidden_size)

    return forward


def gpt_oss_experts_forward(q13, q2, gu, dn, bgu, bdn):
    """GptOssExperts.forward (transformers 5.17) with activation quantizers, float64 weights."""
    ident = lambda x: x  # noqa: E731
    q13, q2 = q13 or ident, q2 or ident

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        nxt = torch.zeros_like(hidden_states)
        mask = F.one_hot(router_indices, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            top_k_pos, token_idx = torch.where(mask[e])
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            h = F.linear(q13(x), gu[e].t(), bgu[e])
            out = F.linear(q2(self._apply_gate(h)), dn[e].t(), bdn[e])
            nxt.index_add_(0, token_idx, (out * routing_weights[token_idx, top_k_pos, None]).to(nxt.dtype))
        return nxt

    return forward


def make_linear_forward(q, w, b):
    def forward(x):
        return F.linear(q(x) if q else x, w, b)

    return forward


# MiniMax-M2's file names (Mixtral's, what ModelOpt exports and NVIDIA publishes) -> transformers 5's module names
MIXTRAL_NAMES = ((".block_sparse_moe.", ".mlp."), (".w1.", ".gate_proj."), (".w3.", ".up_proj."), (".w2.", ".down_proj."))


def transformers_names(sd):
    out = {}
    for k, v in sd.items():
        if ".block_sparse_moe." in k:
            for a, b in MIXTRAL_NAMES:
                k = k.replace(a, b)
        out[k] = v
    return out


def oracle_logits(d, tokens):
    from transformers import AutoConfig, AutoModelForCausalLM

    sd = transformers_names(load_file(os.path.join(d, "model.safetensors")))
    hq = json.load(open(os.path.join(d, "hf_quant_config.json")))
    algo, _ = mf.algo_of(hq)
    cfg = AutoConfig.from_pretrained(d)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    msd = model.state_dict()
    new = {n: sd[n].to(torch.float32) for n in msd if n in sd and sd[n].dtype in (torch.bfloat16, torch.float16, torch.float32)}
    exact = {}
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear):
            continue
        fmt = mf.linear_format(algo, sd, name)
        if fmt is None:
            continue
        w = mf.dequant_weight(fmt, sd, name)
        new[name + ".weight"] = w.float()
        leaf = name.rsplit(".", 1)
        group = [leaf[0] + "." + s for s in mf.FUSED.get(leaf[1], (leaf[1],))]
        pqs = sd.get(name + ".pre_quant_scale")
        act = mf.act_fn_for(fmt, mf.group_input_scale(sd, group), None if pqs is None else pqs.to(torch.float32))
        if leaf[1] == "kv_b_proj":
            act = None  # MLA's absorbed kv_b: weight-only (vLLM, moq)
        b = sd.get(name + ".bias")
        exact[name] = (act, w, None if b is None else b.to(torch.float64))
    experts = {}
    for name, m in model.named_modules():
        cls = type(m).__name__
        if not cls.endswith("Experts"):
            continue
        if name + ".0.gate_proj.weight" in sd or name + ".0.gate_proj.weight_scale" in sd:  # per expert (DeepSeek, Qwen3.5)
            experts[name] = mf.make_expert_forward(*mf.per_expert(algo, sd, name, m.num_experts, new))
            continue
        pg, pd = name + ".gate_up_proj", name + ".down_proj"
        fg, fd = stacked_format(sd, pg), stacked_format(sd, pd)
        gu, dn = dequant_stacked(fg, sd, pg), dequant_stacked(fd, sd, pd)
        new[pg], new[pd] = gu.float(), dn.float()
        q13, q2 = stacked_act(fg, sd, pg), stacked_act(fd, sd, pd)
        if cls == "GptOssExperts":
            bgu, bdn = sd[pg + "_bias"].to(torch.float64), sd[pd + "_bias"].to(torch.float64)
            new[pg + "_bias"], new[pd + "_bias"] = bgu.float(), bdn.float()
            experts[name] = gpt_oss_experts_forward(q13, q2, gu, dn, bgu, bdn)
        elif cls == "Llama4TextExperts":
            experts[name] = llama4_experts_forward(q13, q2, gu, dn)
        else:
            raise RuntimeError(f"{name}: stacked experts of {cls}: no restatement here")
    emb = model.get_input_embeddings()
    for n in msd:  # tied lm_head (Gemma 3): the embedding, as exported
        if n not in new and n == "lm_head.weight" and cfg.get_text_config().tie_word_embeddings:
            new[n] = next(new[k] for k in new if k.endswith("embed_tokens.weight") and new[k].shape == emb.weight.shape)
    missing = [n for n in msd if n not in new]
    if missing:
        raise RuntimeError(f"{d}: no exported tensor for {missing[:5]}")
    model.load_state_dict(new, strict=True)
    for name, m in model.named_modules():
        if name in exact:
            m.forward = make_linear_forward(*exact[name])
        if name in experts:
            m.forward = types.MethodType(experts[name], m)
    return mf.f64_logits(model, tokens)


def make_fixture(name, out):
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM
    tiny, cfg_name = FIXTURES[name]
    src = os.path.join(TINY, tiny)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    cfg = copy.deepcopy(getattr(mtq, cfg_name))
    g = torch.Generator().manual_seed(SEED + 7)
    V = model.config.get_text_config().vocab_size
    calib = [torch.randint(0, V, (4, 32), generator=g) for _ in range(4)]

    def loop(m):
        for b in calib:
            m(b)

    with torch.no_grad():
        mtq.quantize(model, cfg, loop)
        try:  # ModelOpt's NVFP4 fake-quant forward needs CUDA ("amax must be a CUDA tensor"): none then
            fake = model(torch.tensor([TOKENS])).logits[0].float().cpu()
        except (AssertionError, RuntimeError, NotImplementedError):
            fake = None
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    with torch.inference_mode():
        export_hf_checkpoint(model, export_dir=d)
    shutil.copy(os.path.join(src, "tokenizer.json"), d)
    for f in os.listdir(d):
        if f not in ("config.json", "hf_quant_config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
            os.remove(os.path.join(d, f))
    return fake


def write_expected(d, fake=None):
    mf.write_expected(d, fake, TOKENS, oracle_logits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", default="", help="comma-separated fixture names")
    ap.add_argument("--oracle-only", action="store_true", help="recompute expected logits of existing exports")
    a = ap.parse_args()
    names = mf.fixture_names(a.only, FIXTURES)
    os.makedirs(a.out, exist_ok=True)
    if a.oracle_only:
        mf.rewrite_expected(a.out, names, write_expected)
        return
    import modelopt  # noqa: F401  (fail before any work when absent)
    import transformers  # noqa: F401
    failed = []
    for n in names:
        try:
            write_expected(os.path.join(a.out, n), make_fixture(n, a.out))
        except Exception as e:  # one broken export must not lose the others
            import traceback
            traceback.print_exc()
            failed.append(f"{n}: {type(e).__name__}: {e}")
    mf.write_provenance(os.path.join(a.out, "provenance_arch.json"), names, failed, "cpu")


if __name__ == "__main__":
    main()
