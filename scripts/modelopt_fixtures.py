#!/usr/bin/env python3
"""modelopt_fixtures.py — tiny real ModelOpt exports and their float32 oracle logits.

Builds two tiny random-weight models with transformers (Llama: hidden 128, intermediate 256,
2 layers, 4 heads of 64 / 2 KV heads, vocab 320; Qwen3-MoE: same attention, 4 experts top-2 of
intermediate 128, rope_theta 1e6), quantizes them with NVIDIA ModelOpt (`mtq.quantize` with a
forward loop over random token batches, then `export_hf_checkpoint`, the flow of ModelOpt's
examples/llm_ptq/hf_ptq.py) and writes, per fixture, into OUT/<name>/:

  config.json, hf_quant_config.json, model.safetensors   what ModelOpt exported, untouched
  tokenizer.json, tokenizer_config.json                   the tiny byte-level golden tokenizer
  expected_logits.safetensors                             tokens I32 [T], logits F32 [T, vocab]
                                                          (the oracle), fakequant F32 [T, vocab]
                                                          (ModelOpt's own fake-quant forward: a
                                                          loose sanity value only)

The oracle is an exact float32 recomputation of the EXPORTED FILES with transformers' own model
code (eager attention): every quantized weight is dequantized from the exported tensors by the
format's formula (NUMERICS.md §2.2, §4.1, §5), loaded into a float32 model of the exported config,
and the activation quantization the format implies at run time is emulated with forward hooks in
the arithmetic moq's CPU reference uses (src/kernels/cpu/act_quant_ref.c: one f32 operation per
step in the spec's order):

  FP8        static per-tensor: q = E4s(clamp(x * f32(1/input_scale), ±448)), x' = D4(q)*input_scale
  FP8_PC_PT  per token: s = max(f32(amax/448), 1/(448*512)), q = E4s(clamp(x/s, ±448))
  FP8_PB_WO  per token per 128 columns: s = f32(max(1e-10, amax)/448), q = E4s(clamp(x/s, ±448))
  NVFP4      16-blocks, global S = f32(1/input_scale) (§2.4 with IEEE reciprocals)
  NVFP4_AWQ  x * pre_quant_scale (f32) first, then NVFP4
  W4A16      none
  MXFP8      32-blocks: c = U8up(amax * f32(1/448)), q = E4s(clamp(x * 2^(127-c), ±448))
  KV FP8     K (after RoPE) and V: D4(E4s(x / scale)) * scale; scale 1.0 when none was exported

Fused modules read one input (q/k/v, gate/up, every expert's gate/up): their static input scale is
the max over the group (what the engines and moq do; ModelOpt already exports them equal). MoE
expert input scales are one max over all experts per projection (moq's default, both engines'
FP8 and FlashInfer NVFP4 paths, NUMERICS §6.2/§6.3).

Usage (on a CUDA machine with nvidia-modelopt 0.47 importable):
    python3 scripts/modelopt_fixtures.py OUT [--only NAME,...] [--device cuda]
    python3 scripts/modelopt_fixtures.py --oracle-only OUT   (recompute expected logits of OUT/*)
"""
import argparse
import datetime
import importlib
import json
import os
import shutil
import sys
import types

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "tests", "golden", "tokenizer", "tiny")
# 12 fixed token ids (< 279, the tiny tokenizer's vocabulary)
TOKENS = [1, 44, 72, 101, 108, 108, 111, 32, 109, 111, 113, 278]
SEED = 1234

LLAMA = dict(
    architectures=["LlamaForCausalLM"], vocab_size=320, hidden_size=128, intermediate_size=256,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    initializer_range=0.05, hidden_act="silu",
)
QWEN3MOE = dict(
    architectures=["Qwen3MoeForCausalLM"], vocab_size=320, hidden_size=128, intermediate_size=256,
    moe_intermediate_size=128, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
    decoder_sparse_step=1, mlp_only_layers=[], num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=False, initializer_range=0.05, hidden_act="silu",
)
MODELS = {"llama": ("llama", LLAMA), "qwen3moe": ("qwen3_moe", QWEN3MOE)}

# name -> (model, ModelOpt config attribute, KV cache mode: None | "calibrated" | "cast")
FIXTURES = {
    "llama_fp8": ("llama", "FP8_DEFAULT_CFG", None),
    "llama_fp8_pc_pt": ("llama", "FP8_PER_CHANNEL_PER_TOKEN_CFG", None),
    "llama_fp8_pb_wo": ("llama", "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", None),
    "llama_nvfp4": ("llama", "NVFP4_DEFAULT_CFG", None),
    "llama_w4a16_nvfp4": ("llama", "W4A16_NVFP4_CFG", None),
    "llama_nvfp4_awq": ("llama", "NVFP4_AWQ_LITE_CFG", None),
    "llama_fp8_kv": ("llama", "FP8_DEFAULT_CFG", "calibrated"),
    "llama_fp8_kv_cast": ("llama", "FP8_DEFAULT_CFG", "cast"),
    "qwen3moe_fp8": ("qwen3moe", "FP8_DEFAULT_CFG", None),
    "qwen3moe_fp8_pc_pt": ("qwen3moe", "FP8_PER_CHANNEL_PER_TOKEN_CFG", None),
    "qwen3moe_fp8_pb_wo": ("qwen3moe", "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", None),
    "qwen3moe_nvfp4": ("qwen3moe", "NVFP4_DEFAULT_CFG", None),
    "llama_mxfp8": ("llama", "MXFP8_DEFAULT_CFG", None),  # last: ModelOpt may build its MX extension first
}


# ---- bit formats (NUMERICS §1), float32 tensors in, float32 tensors out --------------------------
# the shards a fused linear's activation scale is shared over (ModelOpt's requantize of q/k/v, gate/up)
FUSED = {"q_proj": ("q_proj", "k_proj", "v_proj"), "k_proj": ("q_proj", "k_proj", "v_proj"),
         "v_proj": ("q_proj", "k_proj", "v_proj"), "gate_proj": ("gate_proj", "up_proj"),
         "up_proj": ("gate_proj", "up_proj")}


def e4m3_sat(x):
    """E4s: round to nearest even e4m3fn, saturating at ±448 (clamp first: the torch CPU cast
    gives NaN beyond 464, NUMERICS §10.1)."""
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)


E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_decode(codes):
    """codes: uint8 nibbles (0..15) -> float32."""
    c = codes.to(torch.int64)
    v = E2M1_GRID[c & 7]
    return torch.where((c & 8) != 0, -v, v)


def e2m1_rne_sat(x):
    """Round to nearest e2m1 value, ties to the even code, saturating at ±6 (NUMERICS §1.3)."""
    a = x.abs()
    m = torch.full_like(a, 7.0)
    # thresholds from the top down; <= where the tie goes to the lower (even) code, < otherwise
    m = torch.where(a <= 5.0, torch.full_like(a, 4.0), m)
    m = torch.where(a < 3.5, torch.full_like(a, 3.0), m)
    m = torch.where(a <= 2.5, torch.full_like(a, 2.0), m)
    m = torch.where(a < 1.75, torch.full_like(a, 1.5), m)
    m = torch.where(a <= 1.25, torch.full_like(a, 1.0), m)
    m = torch.where(a < 0.75, torch.full_like(a, 0.5), m)
    m = torch.where(a <= 0.25, torch.zeros_like(a), m)
    m = torch.where(m == 7.0, torch.full_like(a, 6.0), m)
    return torch.where(x < 0, -m, m)


def e8m0_up_sat(v):
    """Smallest power of two >= v as an e8m0 code (moq_e8m0_encode_up_sat), v >= 0 finite f32."""
    b = v.contiguous().view(torch.int32)
    e = (b >> 23) & 0xFF
    m = b & 0x7FFFFF
    c = torch.where(e == 0, (m > 0x400000).to(torch.int32), e + (m != 0).to(torch.int32))
    return c.clamp(max=254)


def pow2(c):
    """2^c for an integer tensor, exactly, as float32."""
    return torch.ldexp(torch.ones_like(c, dtype=torch.float32), c.to(torch.int32))


# ---- activation quantizers (moq's src/kernels/cpu/act_quant_ref.c, one f32 op per step) ----------
def act_fp8_static(x, s_in):
    inv = torch.tensor(1.0, dtype=torch.float32) / s_in
    return e4m3_sat(x * inv) * s_in


def act_fp8_token(x):
    s = x.abs().amax(dim=-1, keepdim=True) / 448.0
    s = torch.clamp(s, min=1.0 / (448.0 * 512.0))
    return e4m3_sat(x / s) * s


def act_fp8_g128(x):
    sh = x.shape
    g = x.reshape(*sh[:-1], sh[-1] // 128, 128)
    s = torch.clamp(g.abs().amax(dim=-1, keepdim=True), min=1e-10) / 448.0
    return (e4m3_sat(g / s) * s).reshape(sh)


def act_nvfp4(x, input_scale):
    one = torch.tensor(1.0, dtype=torch.float32)
    S = one / input_scale
    r6, rS = one / 6.0, one / S
    sh = x.shape
    b = x.reshape(*sh[:-1], sh[-1] // 16, 16)
    amax = b.abs().amax(dim=-1, keepdim=True)
    sfd = e4m3_sat(S * (amax * r6))
    out_scale = torch.where(sfd != 0, one / (sfd * rS), torch.zeros_like(sfd))
    q = e2m1_rne_sat(b * out_scale)
    # moq dequantizes to D2 * D4 and folds input_scale into the row scale; the product is the same
    return (q * sfd * input_scale).reshape(sh)


def act_mxfp8(x):
    sh = x.shape
    b = x.reshape(*sh[:-1], sh[-1] // 32, 32)
    r448 = torch.tensor(1.0, dtype=torch.float32) / 448.0
    c = e8m0_up_sat(b.abs().amax(dim=-1, keepdim=True) * r448)
    mult = torch.where(c == 0, torch.zeros_like(c, dtype=torch.float32), pow2(127 - c))
    return (e4m3_sat(b * mult) * pow2(c - 127)).reshape(sh)


# ---- weight dequantization (NUMERICS §2.2, §4.1, §5.1-§5.3) --------------------------------------
def algo_of(hq):
    q = hq["quantization"]
    return str(q.get("quant_algo") or "").upper(), q


def linear_format(algo, sd, p):
    """The format one exported linear prefix is in (None: unquantized), from its tensors."""
    w = sd.get(p + ".weight")
    if w is None or w.dtype not in (torch.float8_e4m3fn, torch.uint8):
        return None
    if w.dtype == torch.uint8:
        return "NVFP4" if (p + ".input_scale") in sd else "W4A16_NVFP4"
    s = sd[p + ".weight_scale"]
    if s.dtype == torch.uint8:
        return "MXFP8"
    if algo == "FP8_PB_WO":
        return "FP8_PB_WO"
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return "FP8_PC_PT"
    return "FP8"


def dequant_weight(fmt, sd, p):
    """The exported weight of prefix p as float64: every product of a code and its scales is exact
    there (at most 2 + 4 + 24 significant bits), as in moq's reference kernels."""
    w = sd[p + ".weight"]
    if fmt in ("NVFP4", "W4A16_NVFP4"):
        N, Kh = w.shape
        codes = torch.stack([w & 0xF, w >> 4], dim=-1).reshape(N, 2 * Kh)  # low nibble = even k
        sf = sd[p + ".weight_scale"].to(torch.float64)
        ws2 = sd[p + ".weight_scale_2"].to(torch.float64)
        return e2m1_decode(codes).double() * sf.repeat_interleave(16, dim=1) * ws2
    wf = w.to(torch.float64)
    s = sd[p + ".weight_scale"]
    if fmt == "MXFP8":
        return wf * pow2(s.to(torch.int32) - 127).double().repeat_interleave(32, dim=1)
    s = s.to(torch.float64)
    if fmt == "FP8":
        return wf * s
    if fmt == "FP8_PC_PT":
        return wf * s.reshape(-1, 1)
    if fmt == "FP8_PB_WO":
        N, K = wf.shape
        nb, kb = (N + 127) // 128, (K + 127) // 128
        s = s.reshape(nb, kb)  # [nb,1,kb,1], [nb,kb] or 0-d when nb = kb = 1
        full = s.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:N, :K]
        return wf * full
    raise ValueError(fmt)


def act_fn_for(fmt, input_scale, pqs):
    if fmt == "FP8":
        return lambda x: act_fp8_static(x, input_scale)
    if fmt == "FP8_PC_PT":
        return act_fp8_token
    if fmt == "FP8_PB_WO":
        return act_fp8_g128
    if fmt == "NVFP4":
        if pqs is not None:
            return lambda x: act_nvfp4(x * pqs, input_scale)
        return lambda x: act_nvfp4(x, input_scale)
    if fmt == "MXFP8":
        return act_mxfp8
    if fmt == "W4A16_NVFP4" and pqs is not None:
        return lambda x: x * pqs
    return None


def group_input_scale(sd, prefixes):
    v = [sd[p + ".input_scale"].to(torch.float32) for p in prefixes if (p + ".input_scale") in sd]
    return torch.stack(v).max() if v else None


# ---- the oracle --------------------------------------------------------------------------------
def per_expert(algo, sd, ep, E, new):
    """Experts exported one module each (ep.N.{gate,up,down}_proj) in one format: their float64 weights
    stacked as transformers 5 holds them (gate_up_proj [E, 2I, H], down_proj [E, H, I], put into new
    rounded to f32) and the activation quantizers, as make_expert_forward's (q13, q2, gu, dn)."""
    def expert_weight(p):
        f = linear_format(algo, sd, p)
        return f, (dequant_weight(f, sd, p) if f else sd[p + ".weight"].to(torch.float64))

    gu, dn, fmts = [], [], set()
    for e in range(E):
        (fg, wg), (fu, wu), (fd, wd) = (expert_weight(f"{ep}.{e}.{pr}") for pr in ("gate_proj", "up_proj", "down_proj"))
        fmts |= {fg, fu, fd}
        gu.append(torch.cat([wg, wu], 0))
        dn.append(wd)
    if len(fmts) != 1:
        raise RuntimeError(f"{ep}: experts in several formats {fmts}")
    (fmt,) = fmts
    new[ep + ".gate_up_proj"] = torch.stack(gu).float()
    new[ep + ".down_proj"] = torch.stack(dn).float()
    a13 = group_input_scale(sd, [f"{ep}.{e}.{pr}" for e in range(E) for pr in ("gate_proj", "up_proj")])
    a2 = group_input_scale(sd, [f"{ep}.{e}.down_proj" for e in range(E)])
    return act_fn_for(fmt, a13, None), act_fn_for(fmt, a2, None), gu, dn


def oracle_logits(d, tokens):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sd = load_file(os.path.join(d, "model.safetensors"))
    hq = json.load(open(os.path.join(d, "hf_quant_config.json")))
    algo, qsec = algo_of(hq)
    cfg = AutoConfig.from_pretrained(d)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    L = cfg.num_hidden_layers

    # FP8 KV cache: per layer (k_scale, v_scale), 1.0 where none was exported (fp8_cast)
    kv = None
    if str(qsec.get("kv_cache_quant_algo") or "").upper() == "FP8":
        kv = []
        for l in range(L):
            a = f"model.layers.{l}.self_attn."
            k = sd.get(a + "k_proj.k_scale", torch.tensor(1.0))
            v = sd.get(a + "v_proj.v_scale", torch.tensor(1.0))
            kv.append((k.to(torch.float32), v.to(torch.float32)))

    mt = cfg.model_type
    eager = importlib.import_module(f"transformers.models.{mt}.modeling_{mt}").eager_attention_forward

    def kv_attention(module, query, key, value, attention_mask, **kw):
        ks, vs = kv[module.layer_idx]
        key = e4m3_sat(key / ks) * ks
        value = e4m3_sat(value / vs) * vs
        return eager(module, query, key, value, attention_mask, **kw)

    impl = "eager"
    if kv is not None:
        ALL_ATTENTION_FUNCTIONS.register("moq_kv_fp8", kv_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register("moq_kv_fp8", ALL_MASK_ATTENTION_FUNCTIONS["eager"])
        impl = "moq_kv_fp8"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=torch.float32).eval()

    # unquantized tensors: as exported, widened to f32
    msd = model.state_dict()
    new = {}
    for name, t in msd.items():
        if name in sd and sd[name].dtype in (torch.bfloat16, torch.float16, torch.float32):
            new[name] = sd[name].to(torch.float32)
    # quantized linears: exact float64 weights; the f32 model holds them rounded (for load_state_dict)
    exact = {}
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear):
            continue
        fmt = linear_format(algo, sd, name)
        if fmt is None:
            continue
        w = dequant_weight(fmt, sd, name)
        new[name + ".weight"] = w.float()
        leaf = name.rsplit(".", 1)
        group = [leaf[0] + "." + s for s in FUSED.get(leaf[1], (leaf[1],))]
        pqs = sd.get(name + ".pre_quant_scale")
        exact[name] = (act_fn_for(fmt, group_input_scale(sd, group), None if pqs is None else pqs.to(torch.float32)), w)
    # routed experts (transformers 5: fused 3-D gate_up_proj [E, 2I, H], down_proj [E, H, I])
    moe = {}
    for l in range(L):
        ep = f"model.layers.{l}.mlp.experts"
        if ep + ".gate_up_proj" not in msd:
            continue
        moe[ep] = per_expert(algo, sd, ep, cfg.num_experts, new)
    missing = [n for n in msd if n not in new]
    if missing:
        raise RuntimeError(f"{d}: no exported tensor for {missing[:5]}")
    model.load_state_dict(new, strict=True)

    for name, m in model.named_modules():
        if name in exact:
            m.forward = make_linear_forward(*exact[name])
        if name in moe:
            m.forward = types.MethodType(make_expert_forward(*moe[name]), m)

    return f64_logits(model, tokens)


def f64_logits(model, tokens):
    """The model's logits [T, V] of tokens with every dot product in float64, rounded once to float32: the
    correctly rounded f32 linear, whatever BLAS's summation order (torch's f32 CPU sgemm flipped
    activation codes otherwise)."""
    f32_linear = F.linear

    def f64_linear(x, w, b=None):
        y = f32_linear(x.double(), w.double(), None if b is None else b.double())
        return y.to(x.dtype)

    F.linear = f64_linear
    try:
        with torch.no_grad():
            out = model(torch.tensor([tokens]), use_cache=False)
    finally:
        F.linear = f32_linear
    return out.logits[0].to(torch.float32).contiguous()


def make_linear_forward(q, w):
    """A quantized Linear: the run-time activation quantizer q (None: none), then x·w with the exact
    float64 weight w (F.linear is the float64 one while the oracle runs)."""
    def forward(x):
        return F.linear(q(x) if q else x, w)

    return forward


def make_expert_forward(q13, q2, gu, dn):
    """Qwen3MoeExperts.forward of transformers 5.17 with the experts' activation quantizers and
    exact float64 weights gu[e] = [gate; up], dn[e]."""
    ident = lambda x: x  # noqa: E731
    q13, q2 = q13 or ident, q2 or ident

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            top_k_pos, token_idx = torch.where(mask[e])
            if token_idx.numel() == 0:
                continue
            gate, up = F.linear(q13(hidden_states[token_idx]), gu[e]).chunk(2, dim=-1)
            h = F.linear(q2(self.act_fn(gate) * up), dn[e]) * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, h.to(final.dtype))
        return final

    return forward


# ---- making the exports ------------------------------------------------------------------------
def base_model(kind, device):
    from transformers import AutoConfig, AutoModelForCausalLM
    model_type, kw = MODELS[kind]
    cfg = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(SEED)
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():  # norms away from 1 and experts of different sizes, so loading shows
        g = torch.Generator().manual_seed(SEED + 1)
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_((1 + 0.2 * torch.randn(p.shape, generator=g)).to(p.dtype))
    return m.to(device).eval()


def kv_cfg_list(mode):
    import modelopt.torch.quantization as mtq
    if mode == "calibrated":
        return mtq.FP8_KV_CFG["quant_cfg"]
    from modelopt.torch.quantization.config import _load_quantize_config_dict
    return _load_quantize_config_dict("configs/ptq/presets/kv/fp8_cast")["quant_cfg"]  # hf_ptq's default


def make_fixture(name, out, device, base_sd):
    import copy

    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    kind, cfg_name, kv = FIXTURES[name]
    model = base_model(kind, device)
    model.load_state_dict(base_sd[kind])
    cfg = copy.deepcopy(getattr(mtq, cfg_name))
    if kv:
        cfg = mtq.update_quant_cfg_with_kv_cache_quant(cfg, kv_cfg_list(kv))
    g = torch.Generator().manual_seed(SEED + 7)
    calib = [torch.randint(0, 279, (4, 64), generator=g).to(device) for _ in range(4)]

    def loop(m):
        for b in calib:
            m(b)

    with torch.no_grad():
        mtq.quantize(model, cfg, loop)
        fake = model(torch.tensor([TOKENS], device=device)).logits[0].float().cpu()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    with torch.inference_mode():
        export_hf_checkpoint(model, export_dir=d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), d)
    for f in os.listdir(d):  # keep what moq reads; generation_config.json stays
        if f not in ("config.json", "hf_quant_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json", "generation_config.json"):
            os.remove(os.path.join(d, f))
    return fake


def write_expected(d, fake=None, tokens=None, oracle=None):
    """d/expected_logits.safetensors: tokens (default TOKENS), oracle(d, tokens) (default oracle_logits)
    and ModelOpt's fake-quant logits when given."""
    tokens = TOKENS if tokens is None else tokens
    t = {"tokens": torch.tensor(tokens, dtype=torch.int32), "logits": (oracle or oracle_logits)(d, tokens)}
    if fake is not None:
        t["fakequant"] = fake
    save_file(t, os.path.join(d, "expected_logits.safetensors"))
    lg = t["logits"]
    line = f"{os.path.basename(d)}: logits max|.| {lg.abs().max():.4f}"
    if fake is not None:
        line += f", oracle vs ModelOpt fake-quant max abs diff {(lg - fake).abs().max():.4g}"
    print(line, flush=True)


def fixture_names(only, known):
    """--only's comma-separated names (all of known when empty); exits naming an unknown one."""
    names = [n for n in (only.split(",") if only else known) if n]
    for n in names:
        if n not in known:
            sys.exit(f"unknown fixture {n}; known: {', '.join(known)}")
    return names


def rewrite_expected(out, names, write):
    """--oracle-only: write(d, fake) again for each existing export; ModelOpt's fake-quant logits cannot be
    remade without it: keep them."""
    for n in names:
        d = os.path.join(out, n)
        old = os.path.join(d, "expected_logits.safetensors")
        write(d, load_file(old).get("fakequant") if os.path.exists(old) else None)


def write_provenance(path, names, failed, device):
    import modelopt
    import transformers
    prov = {
        "modelopt": modelopt.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0], "device": device,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv), "fixtures": names, "failed": failed,
    }
    with open(path, "w") as f:
        json.dump(prov, f, indent=1)
    print(json.dumps(prov, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", default="", help="comma-separated fixture names")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--oracle-only", action="store_true", help="recompute expected logits of existing exports")
    a = ap.parse_args()
    names = fixture_names(a.only, FIXTURES)
    os.makedirs(a.out, exist_ok=True)
    failed = []
    if a.oracle_only:
        rewrite_expected(a.out, names, write_expected)
        return
    import modelopt  # noqa: F401  (fail before any work when absent)
    import transformers  # noqa: F401
    base_sd = {k: {n: t.clone() for n, t in base_model(k, a.device).state_dict().items()} for k in MODELS}
    for n in names:
        try:
            fake = make_fixture(n, a.out, a.device, base_sd)
            write_expected(os.path.join(a.out, n), fake)
        except Exception as e:  # one broken format must not lose the others
            import traceback
            traceback.print_exc()
            failed.append(f"{n}: {type(e).__name__}: {e}")
    write_provenance(os.path.join(a.out, "provenance.json"), names, failed,
                     torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")


if __name__ == "__main__":
    main()
