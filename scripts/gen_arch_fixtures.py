#!/usr/bin/env python3
"""gen_arch_fixtures.py — tiny random-weight models of the architectures of issue 17, made with
Hugging Face transformers' own config and model classes, and transformers' logits for them.

Run where torch + transformers (5.17 was used) are installed:
    python3 scripts/gen_arch_fixtures.py OUTDIR [NAME ...]
and, anywhere (no torch needed), the CLI side files of every fixture folder under DIR:
    python3 scripts/gen_arch_fixtures.py --cli-files DIR
which writes DIR/<model>/tokenizer.json (byte-level BPE, id = byte value, no merges: the prompt
bytes are the prompt ids) and DIR/prompt.bin (the PROMPT ids as bytes) for `moq run -f`.
For each model NAME it writes OUTDIR/NAME.tar.gz holding NAME/{config.json, model.safetensors,
ref.safetensors, keys.txt}: the checkpoint as save_pretrained wrote it (bf16), and ref.safetensors
with
    tokens  I32 [T]     the prompt (the first N_PROMPT ids) then transformers' greedy continuation
    logits  F32 [T, V]  transformers' logits for every position of `tokens` (one full forward, f32
                        arithmetic over the bf16-rounded weights, eager attention)
    greedy  I32 [G]     model.generate(greedy, KV cache) continuation of the prompt
Weights: torch.manual_seed(SEED); each weight matrix ~ N(0, 1/fan_in) (embeddings N(0, 1)), norms
1 + N(0, 0.1^2), router correction biases N(0, 0.05^2), so activations are O(1) and every part
matters to the logits. The config.json is save_pretrained's, plus the legacy top-level rope_theta /
rope_scaling keys real hub checkpoints carry (same values as rope_parameters).
"""
import json
import os
import sys
import tarfile
import traceback

SEED = 1234
PROMPT = [1, 17, 42, 99, 5, 63, 120, 8, 77, 31, 2, 54]
N_GEN = 8
WORK = "/tmp/gen_arch_fixtures"


def init_weights(model):
    import torch
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "A_log" in name:
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 4.0, generator=g)))
            elif "dt_bias" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1] if p.dim() >= 2 else 1
                if "conv1d" in name:
                    fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(0.05 * torch.randn(b.shape, generator=g))


def legacy_rope_keys(cfg_path):
    with open(cfg_path) as f:
        c = json.load(f)
    rp = c.get("rope_parameters")
    if isinstance(rp, dict) and "rope_type" in rp:
        if "rope_theta" in rp:
            c["rope_theta"] = rp["rope_theta"]
        if rp.get("rope_type", "default") != "default":
            rs = {k: v for k, v in rp.items() if k != "rope_theta"}
            rs["type"] = rp["rope_type"]
            c["rope_scaling"] = rs
    with open(cfg_path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def make(out, name, cfg, model_cls, post=None):
    import torch
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg)
    init_weights(model)
    if post:
        post(model)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(d, safe_serialization=True)
    legacy_rope_keys(os.path.join(d, "config.json"))
    from safetensors.torch import load_file, save_file
    sd = load_file(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "keys.txt"), "w") as f:
        for k in sorted(sd):
            f.write(f"{k} {str(sd[k].dtype)} {list(sd[k].shape)}\n")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    m32 = model.to(torch.float32).to(dev)
    ids = torch.tensor([PROMPT], device=dev)
    with torch.no_grad():
        gen = m32.generate(ids, max_new_tokens=N_GEN, do_sample=False, min_new_tokens=N_GEN)
        greedy = gen[0, len(PROMPT):].tolist()
        tokens = gen[0].tolist()
        logits = m32(torch.tensor([tokens], device=dev), use_cache=False).logits[0].float().cpu()
    save_file({"tokens": torch.tensor(tokens, dtype=torch.int32),
               "logits": logits.contiguous(),
               "greedy": torch.tensor(greedy, dtype=torch.int32)},
              os.path.join(d, "ref.safetensors"),
              metadata={"generator": "scripts/gen_arch_fixtures.py", "seed": str(SEED),
                        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
                        "device": dev, "n_prompt": str(len(PROMPT))})
    print(name, "greedy", greedy, "logit absmax", float(logits.abs().max()), flush=True)
    with tarfile.open(os.path.join(out, name + ".tar.gz"), "w:gz") as t:
        t.add(d, arcname=name)


def deepseek_a():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
        q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=24,
        max_position_embeddings=256, rope_interleave=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 0.8},
        num_mtp_layers=0, rms_norm_eps=1e-6)
    return cfg, DeepseekV3ForCausalLM


def deepseek_b():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        n_shared_experts=2, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        routed_scaling_factor=1.0, norm_topk_prob=False, first_k_dense_replace=0,
        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=24, v_head_dim=16,
        max_position_embeddings=256, rope_interleave=False, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        num_mtp_layers=0, rms_norm_eps=1e-6)
    return cfg, DeepseekV3ForCausalLM


def qwen3_5_moe():
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_experts_per_tok=2, num_experts=8,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_interleaved": True, "mrope_section": [1, 1, 0]},
        max_position_embeddings=256, tie_word_embeddings=False)
    return cfg, Qwen3_5MoeForCausalLM


def qwen3_5():
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=256, tie_word_embeddings=True)
    return cfg, Qwen3_5ForCausalLM


def gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    cfg = Gemma3TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        final_logit_softcapping=30.0, max_position_embeddings=256,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    return cfg, Gemma3ForCausalLM


def llama4():
    from transformers import Llama4ForCausalLM, Llama4TextConfig
    cfg = Llama4TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
        no_rope_layers=[1, 1, 0, 1], attention_chunk_size=5, attn_temperature_tuning=True,
        floor_scale=4, attn_scale=0.1, use_qk_norm=True, max_position_embeddings=256,
        tie_word_embeddings=False, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    return cfg, Llama4ForCausalLM


def gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(
        vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        max_position_embeddings=256, tie_word_embeddings=False, rms_norm_eps=1e-5, attention_bias=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64})
    return cfg, GptOssForCausalLM


def gpt_oss_post(model):
    """Expert gate/up weights x3 and sinks ~ N(0, 1): some gates pass the clamp limit 7, sinks matter."""
    import torch
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("experts.gate_up_proj"):
                p.mul_(3.0)
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))


def minimax_m2():
    """MiniMax-M2 as NVIDIA's MiniMax-M2.5/M2.7 configs carry it (their extra top-level keys too):
    partial RoPE (rotary_dim = head_dim / 2), q/k RMSNorm over the whole projection, sigmoid top-k
    with e_score_correction_bias, renormalized; experts saved as block_sparse_moe.experts.N.w1/w2/w3."""
    from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM
    cfg = MiniMaxM2Config(
        vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=256, tie_word_embeddings=False, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
        partial_rotary_factor=0.5, rotary_dim=8, use_qk_norm=True, qk_norm_type="per_layer", scoring_func="sigmoid",
        use_routing_bias=True, shared_intermediate_size=0, attn_type_list=[1, 1, 1])
    return cfg, MiniMaxM2ForCausalLM


MODELS = [("deepseek_v3_a", deepseek_a), ("deepseek_v3_b", deepseek_b), ("qwen3_5_moe", qwen3_5_moe),
          ("qwen3_5", qwen3_5), ("gemma3_text", gemma3), ("llama4_a", llama4),
          ("gpt_oss", gpt_oss, gpt_oss_post), ("minimax_m2", minimax_m2)]


def deepseek_v4():
    """DeepSeek-V4: sliding (W 4) / CSA (m 4, index_topk 2 of up to 5 entries) / HCA (m' 8) layers,
    mHC with 4 streams, hash-routed first layer, sqrtsoftplus routing, swiglu_limit 2 (binds)."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    cfg = DeepseekV4Config(
        vocab_size=128, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=32,
        partial_rotary_factor=0.25, num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1,
        scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5,
        max_position_embeddings=256, rope_theta=10000.0,
        layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        compress_rope_theta=160000.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        mlp_layer_types=["hash_moe", "moe", "moe"], swiglu_limit=2.0, sliding_window=4,
        o_groups=2, o_lora_rank=16, index_n_heads=8, index_head_dim=16, index_topk=2,
        num_nextn_predict_layers=0, tie_word_embeddings=False, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16,
                         "beta_fast": 32, "beta_slow": 1})
    return cfg, DeepseekV4ForCausalLM


def deepseek_v4_post(model):
    """Sinks ~ N(0, 1), hc scale ~ 1 + N(0, 0.1^2), a hash table of distinct experts per token, the
    expert gate/up weights x3 so some pass swiglu_limit."""
    import torch
    g = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("_hc.scale") or name.endswith("hc_scale"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("experts.gate_up_proj") or name.endswith("shared_experts.gate_proj.weight"):
                p.mul_(3.0)
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                E = model.config.n_routed_experts
                b.copy_(torch.stack([torch.randperm(E, generator=g)[: b.shape[1]] for _ in range(b.shape[0])]))


MODELS.append(("deepseek_v4", deepseek_v4, deepseek_v4_post))


def deepseek_v32():
    """DeepSeek-V3.2: deepseek_v3_a's shape with the DSA indexer keeping index_topk 5 of up to 20 keys
    (16 indexer heads of 32, so that an all-zero relu score, a tie, is rare)."""
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM
    cfg = DeepseekV32Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
        mlp_layer_types=["dense", "sparse", "sparse"],
        q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=24,
        index_topk=5, index_n_heads=16, index_head_dim=32,
        max_position_embeddings=256, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 0.8},
        rms_norm_eps=1e-6)
    return cfg, DeepseekV32ForCausalLM


MODELS.append(("deepseek_v32", deepseek_v32))


def byte_level_alphabet():
    """tokenizers' ByteLevel byte -> unicode table (GPT-2's bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def cli_files(root):
    b2u = byte_level_alphabet()
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {b2u[b]: b for b in range(256)}, "merges": []}}
    for name in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, name, "config.json")):
            with open(os.path.join(root, name, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(root, "prompt.bin"), "wb") as f:
        f.write(bytes(PROMPT))


def main():
    if sys.argv[1] == "--cli-files":
        cli_files(sys.argv[2])
        return
    out = sys.argv[1]
    only = set(sys.argv[2:])  # model names to make (default: all)
    os.makedirs(out, exist_ok=True)
    import torch
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    for name, fn, *post in MODELS:
        if only and name not in only:
            continue
        try:
            torch.manual_seed(SEED)
            cfg, cls = fn()
            make(WORK, name, cfg, cls, *post)
            os.replace(os.path.join(WORK, name + ".tar.gz"), os.path.join(out, name + ".tar.gz"))
        except Exception:
            print("FAILED", name, flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    main()
