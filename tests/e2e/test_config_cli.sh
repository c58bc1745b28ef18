#!/usr/bin/env bash
# test_config_cli.sh — `moq synth` for every algo, then `moq config`, `moq inspect`, `moq check
# --values` under the profiles whose engine reads that algo (docs/COMPAT.md): every checkpoint
# must check clean; SGLang reading an MXFP8 checkpoint as per-tensor FP8 must not.
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
TMP=${MOQ_TMP:-/tmp}/e2e_config_cli.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
check() { # expected-rc description command...
    local want=$1 what=$2; shift 2
    "$@" >"$TMP/out" 2>&1
    local rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL: $what: exit $rc, expected $want"; cat "$TMP/out"; fail=1; fi
}
for algo in NVFP4 FP8 BF16 FP8_PER_CHANNEL_PER_TOKEN FP8_PB_WO W4A16_NVFP4 MXFP8 MIXED_PRECISION; do
    d="$TMP/$algo"
    check 0 "synth $algo" "$MOQ" synth "$d" --algo "$algo" --layers 1
    check 0 "inspect $algo" "$MOQ" inspect "$d"
    check 0 "check $algo" "$MOQ" check --values "$d"
    [ "$algo" = BF16 ] && continue
    check 0 "config $algo" "$MOQ" config --json "$d"
    grep -q "\"quant_algo\":	\"$algo\"" "$TMP/out" || { echo "FAIL: config $algo does not say quant_algo $algo"; cat "$TMP/out"; fail=1; }
    check 0 "check --compat vllm $algo" "$MOQ" check --compat vllm "$d"
done
for algo in NVFP4 FP8 MIXED_PRECISION; do check 0 "check --compat sglang $algo" "$MOQ" check --compat sglang "$TMP/$algo"; done
# SGLang's FP8 config takes "MXFP8" (it contains "FP8") and reads it as per-tensor FP8: the
# MXFP8 tensors then break the FP8 contract, and check says so (MOQ_ERR_TENSOR = 5).
check 5 "check --compat sglang MXFP8" "$MOQ" check --compat sglang "$TMP/MXFP8"
grep -q "weight_scale: dtype U8, expected F32 (scheme FP8" "$TMP/out" || { echo "FAIL: sglang MXFP8 message"; cat "$TMP/out"; fail=1; }
# SGLang rejects W4A16_NVFP4 as a top-level algo (MOQ_ERR_UNSUPPORTED = 6).
check 6 "check --compat sglang W4A16_NVFP4" "$MOQ" check --compat sglang "$TMP/W4A16_NVFP4"
# A packed mapping whose shards resolve to FP8 and W4A16_NVFP4: MOQ_ERR_CONFIG = 4, naming both.
check 4 "resolve mixed shards" "$MOQ" resolve "$TMP/MIXED_PRECISION" model.layers.0.fused --kind linear --packed fused=self_attn.q_proj,mlp.down_proj
grep -q "shards self_attn.q_proj=FP8 and mlp.down_proj=W4A16_NVFP4 disagree" "$TMP/out" || { echo "FAIL: mixed shards message"; cat "$TMP/out"; fail=1; }
exit $fail
