#!/usr/bin/env python3
"""modelopt_gemma4_fixtures.py — real ModelOpt FP8 and NVFP4 exports of the tiny Gemma 4 of
tests/data/hf_tiny/gemma4_text (scripts/gen_gemma4_fixtures.py) and their float32 oracle.

The flow and the oracle are scripts/modelopt_arch_fixtures.py's (imported: `mtq.quantize` with
random calibration batches, `export_hf_checkpoint`, then weights dequantized from the exported tensors
in float64 with the activation quantizers restated, transformers' own Gemma 4 code for the rest). The
fused-group input scale of a k_eq_v global layer is over q_proj and k_proj (it has no v_proj), which
group_input_scale already does (it takes the prefixes present). Kept apart from that script so the
architecture lists of parallel branches do not collide.

Usage (CPU is enough; nvidia-modelopt 0.47 importable, `pulp` stubbed as tests/data/modelopt_real/README.md says):
    python3 scripts/modelopt_gemma4_fixtures.py OUT [--only NAME,...] [--oracle-only]
writes OUT/gemma4_text_{nvfp4,fp8}/ and OUT/provenance_gemma4.json.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modelopt_arch_fixtures as ma  # noqa: E402

ma.FIXTURES.clear()
ma.FIXTURES["gemma4_text_nvfp4"] = ("gemma4_text", "NVFP4_DEFAULT_CFG")
ma.FIXTURES["gemma4_text_fp8"] = ("gemma4_text", "FP8_DEFAULT_CFG")

if __name__ == "__main__":
    _write = ma.mf.write_provenance
    ma.mf.write_provenance = lambda path, *a: _write(os.path.join(os.path.dirname(path), "provenance_gemma4.json"), *a)
    ma.main()
