#!/usr/bin/env bash
# device_fa2.sh — one device call for the tensor-core prefill attention (issue 13, branch fa2),
# written 2026-12-08 without a GPU:
#   1. tests: test_attn_cuda (test_attention_prefill runs both prefill kernels itself), then
#      test_model_cuda as it is and with MOQ_CUDA_ATTN_PREFILL_MMA=1 (the GPU forward against the
#      CPU forward with bf16 q / P in the prefill attention: does the model test's bound hold?);
#   2. `moq bench model --prompt 2048 --decode 4` A/B, knob 0 / 1 / 0 / 1, on the 32-layer
#      8B-shaped FP8 and NVFP4 Llamas (the issue's prefill target);
#   3. ncu: the prefill attention kernel's own time, knob 0 and 1 (4 layers' launches each).
# Binaries staged by scripts/device_all_stage.sh (.devbin). Usage: OUT=/tmp/out [LIMIT=540] scripts/device_fa2.sh
. "$(dirname "$0")/device_env.sh"
device_header
for a in FP8 NVFP4; do
  "$BIN/moq" synth "$S/d32_$a" --algo "$a" --layers 32 --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > "$OUT/synth_$a.log" 2>&1 &
done
t() { # name, env..., binary
  local name=$1; shift
  ( timeout 150 env "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log" ) &
}
t attn "$BIN/test_attn_cuda"
t model_default "$BIN/test_model_cuda"
t model_mma MOQ_CUDA_ATTN_PREFILL_MMA=1 "$BIN/test_model_cuda"
wait
for n in attn model_default model_mma; do
  grep -E "PASSED|FAILED|SKIPPED|rc=|^FAIL|ERROR|prefill attention" "$OUT/$n.log" | tail -8 | sed "s/^/$n: /" | tee -a "$OUT/summary.log"
done
for a in FP8 NVFP4; do
  for k in 0 1 0 1; do
    [ "$(left)" -gt 60 ] || break
    log "bench model $a (32 layers), MOQ_CUDA_ATTN_PREFILL_MMA=$k"
    MOQ_CUDA_ATTN_PREFILL_MMA=$k timeout 120 "$BIN/moq" bench model "$S/d32_$a" --device cuda --prompt 2048 --decode 4 2>&1 | grep -E "^prefill|^decode|error" | tee -a "$OUT/summary.log"
  done
done
for k in 0 1; do # the kernel alone: 4 prefill-attention launches of the 2048-token prefill (one per layer)
  [ "$(left)" -gt 60 ] || break
  log "ncu attn_prefill kernels, FP8 32 layers, MOQ_CUDA_ATTN_PREFILL_MMA=$k"
  MOQ_CUDA_ATTN_PREFILL_MMA=$k timeout 90 ncu --kernel-name regex:attn_prefill -c 4 --metrics gpu__time_duration.sum --csv \
    "$BIN/moq" bench model "$S/d32_FP8" --device cuda --prompt 2048 --decode 1 > "$OUT/ncu_$k.csv" 2> "$OUT/ncu_$k.err"
  grep gpu__time_duration "$OUT/ncu_$k.csv" | awk -F'","' '{print $5, $NF, $(NF-1)}' | tr -d '"' | tee -a "$OUT/summary.log"
done
log "end"
( cd "$OUT" && tar -czf logs.tar.gz *.log *.csv *.err --exclude summary.log 2>/dev/null; ls | grep -v -E '^(logs.tar.gz|summary.log)$' | xargs rm -f )
cat "$OUT/summary.log"
