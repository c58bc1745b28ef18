#!/usr/bin/env bash
# device_moe_cuda.sh — the device call of issue 13's MoE part, run on the H200 from the folder
# scripts/device_moe_cuda_stage.sh fills (binaries built on the dev machine under .devbin/):
#   1. test_moe_cuda (GPU routing and grouped expert layers vs the CPU), then test_model_cuda in the
#      background (GPU vs CPU forward: dense, generated MoE of every expert format, real exports);
#   2. `moq run` / `moq eval --ref` (KL GPU vs CPU) on the real Qwen3-MoE exports with --device cuda and
#      compute-sanitizer memcheck over one `moq run --device cuda` of the NVFP4 one;
#   3. `moq bench moe --device cuda` at Qwen3-30B-A3B's layer shape (E 128, top-8, H 2048, I 768), decode in
#      NVFP4 and FP8 (+ the other formats and a 256-token prefill while time is left), and `moq bench model
#      --device cuda` on 2-layer Qwen3-30B-A3B-shaped checkpoints written by `moq synth` meanwhile.
# Usage: OUT=/tmp/out LIMIT=seconds scripts/device_moe_cuda.sh
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.devbin
[ -d "$BIN" ] || tar -C "$ROOT" -xJf "$ROOT/devbin.tar.xz" # staged compressed (the call's 64 MiB)
# the real exports come from the checkout the folder sits in (staged without them: the call's 64 MiB)
[ -e "$ROOT/tests/data/modelopt_real" ] || ln -s "$ROOT/../tests/data/modelopt_real" "$ROOT/tests/data/modelopt_real"
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOQ_TEST_SRCDATA=$ROOT/tests/data MOQ_TMP=/tmp/moq_tmp TMPDIR=/tmp
mkdir -p "$MOQ_TMP"
LIMIT=${LIMIT:-170}  # seconds after the start by which the script must have ended
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
left() { echo $((LIMIT - SECONDS)); }
S=/tmp/moq_synth
mkdir -p "$S"
declare -A PID
for a in NVFP4 FP8; do
  ( "$BIN/moq" synth "$S/$a" --arch qwen3moe --algo "$a" --layers 2 --hidden 2048 --inter 768 --heads 32 --kv-heads 4 \
      --experts 128 --top-k 8 --vocab 1024 > "$OUT/synth_$a.log" 2>&1 ) &
  PID[$a]=$!
done
R=$ROOT/tests/data/modelopt_real
{
  log "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1
  log "test_moe_cuda"; timeout 40 "$BIN/test_moe_cuda" 2>&1; echo "test_moe_cuda rc=$?"
  ( timeout 100 "$BIN/test_model_cuda" > "$OUT/test_model_cuda.log" 2>&1; echo "test_model_cuda rc=$?" >> "$OUT/test_model_cuda.log" ) &
  TMC=$!
  log "moq run qwen3moe_nvfp4 --device cuda"; timeout 20 "$BIN/moq" run "$R/qwen3moe_nvfp4" --device cuda -p "Hello there" -n 12 --ctx 64 2>&1 | tail -4
  for f in qwen3moe_nvfp4 qwen3moe_fp8 qwen3moe_fp8_pb_wo qwen3moe_fp8_pc_pt; do
    log "moq eval $f --device cuda --ref (GPU vs CPU)"
    timeout 20 "$BIN/moq" eval "$R/$f" --device cuda --ref "$R/$f" --kv-cache bf16 --text "$ROOT/tests/data/text/short.txt" --ctx 128 2>&1 | tail -3
  done
  if command -v compute-sanitizer >/dev/null; then
    log "compute-sanitizer memcheck (moq run qwen3moe_nvfp4 --device cuda)"
    timeout 50 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/qwen3moe_nvfp4" --device cuda -p "Hello there" -n 6 --ctx 64 2>&1 | tail -4
  else log "compute-sanitizer not found"; fi
  log "waiting for test_model_cuda"; wait $TMC
  grep -E "gpu_qwen3moe|gpu_mixtral|qwen3moe_|FAIL|PASSED|FAILED|SKIPPED|rc=" "$OUT/test_model_cuda.log" | head -40
  for a in NVFP4 FP8 FP8_PB_WO MXFP8 W4A16_NVFP4 FP8_PER_CHANNEL_PER_TOKEN; do
    [ "$(left)" -lt 45 ] && { log "no time left for bench moe $a"; continue; }
    log "bench moe $a --device cuda (decode)"; timeout $(( $(left) - 30 )) "$BIN/moq" bench moe --algo "$a" --device cuda 2>&1 | tail -2
  done
  if [ "$(left)" -gt 45 ]; then log "bench moe NVFP4 --device cuda --tokens 256"; timeout $(( $(left) - 30 )) "$BIN/moq" bench moe --algo NVFP4 --device cuda --tokens 256 2>&1 | tail -1; fi
} 2>&1 | tee "$OUT/tests.log"
for a in NVFP4 FP8; do
  while kill -0 "${PID[$a]}" 2>/dev/null && [ $SECONDS -lt $((LIMIT - 25)) ]; do sleep 1; done
  if [ "$(left)" -lt 20 ] || kill -0 "${PID[$a]}" 2>/dev/null; then log "no time left for bench model $a" | tee -a "$OUT/tests.log"; continue; fi
  tail -1 "$OUT/synth_$a.log"
  log "bench model $a (2-layer Qwen3-30B-A3B shape) --device cuda" | tee -a "$OUT/tests.log"
  timeout $(( $(left) - 3 )) "$BIN/moq" bench model "$S/$a" --device cuda --prompt 256 --decode 64 2>&1 | tee -a "$OUT/tests.log" | tail -4
done
log "end" | tee -a "$OUT/tests.log"
grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=|decode:|prefill:|KL|tok/s" "$OUT/tests.log" | head -60
