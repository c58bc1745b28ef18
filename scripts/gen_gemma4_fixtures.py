#!/usr/bin/env python3
"""gen_gemma4_fixtures.py — the tiny Gemma 4 text model of issue 17 and transformers' logits for it.

Same method as scripts/gen_arch_fixtures.py (whose make() and init_weights() it reuses; seed 1234,
bf16 save_pretrained, transformers' eager forward and greedy generate): run where torch +
transformers >= 5.17 are installed,
    python3 scripts/gen_gemma4_fixtures.py OUTDIR [NAME ...]
writes OUTDIR/NAME.tar.gz for gemma4_text and gemma4_moe (default: both). The config follows NVIDIA's published Gemma 4 checkpoints
(nvidia/Gemma-4-31B-IT-NVFP4 config.json): attention_k_eq_v (global layers have no v_proj: v is
the raw k projection), global layers with their own head_dim (global_head_dim) and KV heads
(num_global_key_value_heads), proportional RoPE with partial_rotary_factor 0.25 on global layers,
final soft-capping 30, tied embeddings, no per-layer embeddings (hidden_size_per_layer_input 0), no
KV-shared layers. The per-layer `layer_scalar` buffers (saved with the weights, 1.0 at init) are
set to 0.5 + U(0, 1) so that they matter to the logits, and the (tied) embedding is scaled by 1/8 so
that the residual stream is not the token's own embedding alone (else greedy repeats the last id).
save_pretrained writes the resolved `per_layer_config`; NVIDIA's configs carry `global_head_dim` and
`num_global_key_value_heads` instead, so config.json is rewritten to that form, and ref.safetensors
is then made again from the model transformers reloads from the written folder in f32
(from_pretrained: the bf16 weights exactly, RoPE inv_freq computed in f32 as moq does, not rounded
to bf16 as make()'s cast does): its greedy ids and logits are the oracle.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_arch_fixtures as g  # noqa: E402


def gemma4():
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    cfg = Gemma4TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
        attention_k_eq_v=True, sliding_window=4, final_logit_softcapping=30.0, max_position_embeddings=256,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=False, tie_word_embeddings=True,
        rope_parameters={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    return cfg, Gemma4ForCausalLM


def gemma4_moe():
    """The 26B-A4B shape (enable_moe_block): every layer's MLP plus 4 routed experts, top-2."""
    cfg, cls = gemma4()
    from transformers import Gemma4TextConfig
    kw = cfg.to_dict()
    cfg = Gemma4TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
        attention_k_eq_v=True, sliding_window=4, final_logit_softcapping=30.0, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, tie_word_embeddings=True,
        enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
        rope_parameters=kw["rope_parameters"])
    return cfg, cls


def gemma4_post(model):
    import torch
    gen = torch.Generator().manual_seed(g.SEED + 2)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
        model.model.embed_tokens.weight.mul_(0.125)
        for name, p in model.named_parameters():  # MoE: router logits of O(1), scales away from 1
            if name.endswith("router.proj.weight"):
                p.mul_(16.0)
            elif name.endswith("router.scale") or name.endswith("router.per_expert_scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))


def real_config_form(d):
    """config.json as NVIDIA ships it: global_head_dim + num_global_key_value_heads, no per_layer_config."""
    import json
    import tarfile
    import torch
    from transformers import Gemma4ForCausalLM
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    plc = c.pop("per_layer_config")
    over = {tuple(sorted(v.items())) for v in plc.values()}
    assert len(over) == 1, plc
    o = dict(over.pop())
    c["global_head_dim"] = o["head_dim"]
    c["num_global_key_value_heads"] = o["num_key_value_heads"]
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    from safetensors.torch import save_file
    m = Gemma4ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.tensor([g.PROMPT])
    with torch.no_grad():
        gen = m.generate(ids, max_new_tokens=g.N_GEN, do_sample=False, min_new_tokens=g.N_GEN)
        greedy = gen[0, len(g.PROMPT):].tolist()
        tokens = gen[0].tolist()
        logits = m(torch.tensor([tokens]), use_cache=False).logits[0].float()
    save_file({"tokens": torch.tensor(tokens, dtype=torch.int32), "logits": logits.contiguous(),
               "greedy": torch.tensor(greedy, dtype=torch.int32)},
              os.path.join(d, "ref.safetensors"),
              metadata={"generator": "scripts/gen_gemma4_fixtures.py", "seed": str(g.SEED),
                        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
                        "device": "cpu", "n_prompt": str(len(g.PROMPT)),
                        "model": "Gemma4ForCausalLM.from_pretrained(folder, float32, eager)"})
    print(os.path.basename(d), "(reloaded, f32) greedy", greedy, "logit absmax", float(logits.abs().max()), flush=True)
    with tarfile.open(d + ".tar.gz", "w:gz") as t:
        t.add(d, arcname=os.path.basename(d))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    import torch
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    for name, fn in (("gemma4_text", gemma4), ("gemma4_moe", gemma4_moe)):
        if sys.argv[2:] and name not in sys.argv[2:]:
            continue
        torch.manual_seed(g.SEED)
        cfg, cls = fn()
        g.make(g.WORK, name, cfg, cls, gemma4_post)
        real_config_form(os.path.join(g.WORK, name))
        os.replace(os.path.join(g.WORK, name + ".tar.gz"), os.path.join(out, name + ".tar.gz"))


if __name__ == "__main__":
    main()
