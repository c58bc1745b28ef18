#!/usr/bin/env bash
# device_model_cuda.sh — the device call of issue 13 (the decoder forward on the GPU), run on the H200
# from the folder scripts/device_model_cuda_stage.sh fills (the device image has no cJSON/cmocka:
# it runs the binaries built on the dev machine, .devbin/, with their two .so files):
#   1. test_model_cuda (GPU forward vs CPU forward, generated and real ModelOpt checkpoints);
#   2. `moq run --device cuda` on a real export, `moq eval --device cuda --ref` (KL GPU vs CPU) and
#      compute-sanitizer memcheck over one `moq run --device cuda`;
#   3. `moq bench model --device cuda` on synthetic 1B-shaped Llamas (16 layers, hidden 2048,
#      intermediate 8192, 32 heads, 8 KV heads, vocab 32000), written by `moq synth` meanwhile.
# Usage: OUT=/tmp/out scripts/device_model_cuda.sh
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.devbin
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOQ_TEST_SRCDATA=$ROOT/tests/data MOQ_TMP=/tmp/moq_tmp
mkdir -p "$MOQ_TMP"
log() { echo "== $(date -u +%H:%M:%S) $*"; }
S=/tmp/moq_synth
mkdir -p "$S"
ALGOS=${ALGOS:-"NVFP4 FP8 BF16"}
declare -A PID
for a in $ALGOS; do
  ( "$BIN/moq" synth "$S/$a" --algo "$a" --layers 16 --hidden 2048 --inter 8192 --heads 32 --kv-heads 8 --vocab 32000 > "$OUT/synth_$a.log" 2>&1 ) &
  PID[$a]=$!
done
LIMIT=${LIMIT:-225}  # seconds after the start by which the script must have ended (the call's timeout)
R=$ROOT/tests/data/modelopt_real
{
  log "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1
  log "test_model_cuda"; timeout 100 "$BIN/test_model_cuda" 2>&1; echo "test_model_cuda rc=$?"
  log "moq run --device cuda"; timeout 20 "$BIN/moq" run "$R/llama_fp8" --device cuda -p "Hello there" -n 12 --ctx 64 2>&1; echo "run rc=$?"
  for f in llama_fp8_kv llama_fp8_pc_pt llama_nvfp4 llama_mxfp8; do
    log "moq eval $f --device cuda --ref (GPU vs CPU)"
    timeout 20 "$BIN/moq" eval "$R/$f" --device cuda --ref "$R/$f" --kv-cache bf16 --text "$ROOT/tests/data/text/short.txt" --ctx 128 2>&1 | tail -6
  done
  if command -v compute-sanitizer >/dev/null; then
    log "compute-sanitizer memcheck (moq run --device cuda)"
    timeout 45 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_nvfp4" --device cuda -p "Hello there" -n 6 --ctx 64 2>&1 | tail -6
  else log "compute-sanitizer not found"; fi
} 2>&1 | tee "$OUT/tests.log"
for a in $ALGOS; do
  while kill -0 "${PID[$a]}" 2>/dev/null && [ $SECONDS -lt $((LIMIT - 30)) ]; do sleep 1; done
  left=$((LIMIT - SECONDS))
  if [ $left -lt 25 ]; then log "no time left for bench $a" | tee -a "$OUT/tests.log"; continue; fi
  tail -1 "$OUT/synth_$a.log"
  log "bench model $a (${left} s left)" | tee -a "$OUT/tests.log"
  timeout $((left - 5)) "$BIN/moq" bench model "$S/$a" --device cuda --prompt 512 --decode 128 --batch 64 2>&1 | tee -a "$OUT/tests.log"
done
grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=|max\|gpu" "$OUT/tests.log" | head -40
