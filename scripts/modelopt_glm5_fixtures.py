#!/usr/bin/env python3
"""modelopt_glm5_fixtures.py — real ModelOpt exports of the tiny GLM-5 (tests/data/hf_tiny/glm_moe_dsa)
and their float32 oracle: scripts/modelopt_arch_fixtures.py's flow and oracle (imported, unchanged)
applied to that model, into OUT/glm_moe_dsa_{fp8,nvfp4}/ (FP8_DEFAULT_CFG, NVFP4_DEFAULT_CFG: every
linear quantized, the DSA indexer's wq_b / wk / weights_proj included; routers and lm_head not).

The oracle runs transformers' own GlmMoeDsaForCausalLM (eager) with every quantized linear replaced by
its dequantized float64 weight behind the run-time activation quantizer (kv_b_proj weight-only), the
experts per expert as modelopt_fixtures.py restates them, every dot product in float64 rounded once to
float32. Its index top-k is transformers' own (on the oracle's scores).

Usage (CPU; nvidia-modelopt 0.47 importable, a `pulp` stub is enough):
    python3 scripts/modelopt_glm5_fixtures.py OUT [--oracle-only]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modelopt_arch_fixtures as ma  # noqa: E402
import modelopt_fixtures as mf  # noqa: E402

# calibration batches from seed SEED + 7 as in modelopt_arch_fixtures.py, with SEED 1235 here: with 1234
# the FP8 export put one activation (layer 0's down_proj input at position 10) within 1e-6 relative
# of an e4m3 rounding boundary, where moq and the oracle (both right to f32 rounding) pick
# neighbouring codes and the logits then differ by 7.4e-3 (found with a x(1 +- 1e-6) probe of every
# quantizer's input)
ma.SEED = 1235
ma.FIXTURES.clear()
ma.FIXTURES["glm_moe_dsa_fp8"] = ("glm_moe_dsa", "FP8_DEFAULT_CFG")
ma.FIXTURES["glm_moe_dsa_nvfp4"] = ("glm_moe_dsa", "NVFP4_DEFAULT_CFG")


def main():
    out = sys.argv[1]
    names = list(ma.FIXTURES)
    os.makedirs(out, exist_ok=True)
    if "--oracle-only" in sys.argv:
        mf.rewrite_expected(out, names, ma.write_expected)
        return
    failed = []
    for n in names:
        try:
            ma.write_expected(os.path.join(out, n), ma.make_fixture(n, out))
        except Exception as e:  # one broken export must not lose the other
            import traceback
            traceback.print_exc()
            failed.append(f"{n}: {type(e).__name__}: {e}")
    mf.write_provenance(os.path.join(out, "provenance_glm5.json"), names, failed, "cpu")


if __name__ == "__main__":
    main()
