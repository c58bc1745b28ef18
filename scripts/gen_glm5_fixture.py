#!/usr/bin/env python3
"""gen_glm5_fixture.py — the tiny random-weight GLM-5 (`glm_moe_dsa`, GlmMoeDsaForCausalLM) of
tests/data/hf_tiny/glm_moe_dsa, made exactly as scripts/gen_arch_fixtures.py makes its models (same
seed, weight init, prompt, ref.safetensors layout; its make() is reused):
    python3 scripts/gen_glm5_fixture.py OUTDIR      (torch + transformers 5.17)
Shape: deepseek_v32's (MLA, 8 routed experts + 1 shared, grouped sigmoid routing) with GLM-5's
differences: the indexer's interleaved RoPE, default RoPE, indexer_types with "shared" layers that
reuse the previous full layer's top-k (GLM-5.2's schedule), index_topk 5 of up to 20 keys.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_arch_fixtures as g  # noqa: E402


def glm_moe_dsa():
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
    cfg = GlmMoeDsaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
        n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        indexer_types=["full", "shared", "full", "shared"],
        q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=24,
        index_topk=5, index_n_heads=16, index_head_dim=32,
        max_position_embeddings=256, tie_word_embeddings=False, rope_interleave=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-5)
    return cfg, GlmMoeDsaForCausalLM


if __name__ == "__main__":
    cfg, cls = glm_moe_dsa()
    g.make(sys.argv[1], "glm_moe_dsa", cfg, cls)
