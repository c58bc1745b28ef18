#!/usr/bin/env bash
# device_gpu_speed.sh — the device call of issue 13's speed part and issue 15's GPU part (one call):
#   1. test_model_cuda (GPU vs CPU forward, batched decode and the moq_batch API on the GPU);
#   2. tests/e2e/serve.sh with MOQ_SERVE_DEVICE=cuda (`moq serve --device cuda` = `moq run --device cuda`,
#      16 concurrent clients = each alone, bad requests, soak);
#   3. `moq bench model --device cuda` on 8B-shaped synthetic Llamas (32 layers, hidden 4096,
#      intermediate 14336, 32 heads, 8 KV heads, vocab 128256) in NVFP4 and FP8, written by
#      `moq synth` meanwhile: prefill of 2048 tokens, batch-1 decode after it, batch 64 (prompts of 128);
#   4. compute-sanitizer memcheck over one `moq run --device cuda` (graphs + the tiled prefill kernel).
# Staged by scripts/device_model_cuda_stage.sh (binaries built on the dev machine, under .devbin/).
# Usage: OUT=/tmp/out LIMIT=seconds scripts/device_gpu_speed.sh
#   SHAPE=1b: benches only (no tests), on the 1B-shaped Llama of the earlier runs (16 layers, hidden 2048,
#   intermediate 8192, 32 heads, 8 KV heads, vocab 32000) with their command (--prompt 512 --decode 128 --batch 64).
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.devbin
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for _ in 1 2 3; do # libraries the image lacks (libmicrohttpd, ...): from the staged fallbacks, only those
  for l in $(ldd "$BIN/moq" | awk '/not found/ {print $1}'); do [ -f "$BIN/lib_fb/$l" ] && cp "$BIN/lib_fb/$l" "$BIN/lib/"; done
done
ldd "$BIN/moq" | grep "not found"
export MOQ_TEST_SRCDATA=$ROOT/tests/data MOQ_TMP=/tmp/moq_tmp
mkdir -p "$MOQ_TMP"
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
S=/tmp/moq_synth8b
mkdir -p "$S"
ALGOS=${ALGOS:-"NVFP4 FP8"}
LIMIT=${LIMIT:-280} # seconds after the start by which the script must have ended (the call's timeout)
SHAPE=${SHAPE:-8b}
SYNTH=(--layers 32 --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256)
BENCH=(--prompt 2048 --decode 32 --batch 64 --batch-prompt 128)
if [ "$SHAPE" = 1b ]; then
  SYNTH=(--layers 16 --hidden 2048 --inter 8192 --heads 32 --kv-heads 8 --vocab 32000)
  BENCH=(--prompt 512 --decode 128 --batch 64)
fi
declare -A PID
for a in $ALGOS; do
  ( /usr/bin/time -f "synth $a: %e s" "$BIN/moq" synth "$S/$a" --algo "$a" "${SYNTH[@]}" > "$OUT/synth_$a.log" 2>&1 ) &
  PID[$a]=$!
done
R=$ROOT/tests/data/modelopt_real
[ "$SHAPE" = 1b ] || {
  log "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1
  log "test_model_cuda"; timeout 110 "$BIN/test_model_cuda" 2>&1; echo "test_model_cuda rc=$?"
  log "serve.sh --device cuda"
  MOQ_BIN=$BIN/moq MOQ_SERVE_DEVICE=cuda timeout 70 bash "$ROOT/tests/e2e/serve.sh" > "$OUT/serve.log" 2>&1; echo "serve.sh rc=$?"
  tail -5 "$OUT/serve.log"
  log "moq run --device cuda"; timeout 20 "$BIN/moq" run "$R/llama_fp8" --device cuda -p "Hello there" -n 12 --ctx 64 2>&1 | tail -3
} 2>&1 | tee "$OUT/tests.log"
for a in $ALGOS; do
  while kill -0 "${PID[$a]}" 2>/dev/null && [ $SECONDS -lt $((LIMIT - 40)) ]; do sleep 1; done
  left=$((LIMIT - SECONDS))
  cat "$OUT/synth_$a.log" | tail -2 | tee -a "$OUT/tests.log"
  if [ $left -lt 40 ] || kill -0 "${PID[$a]}" 2>/dev/null; then log "no time left for bench $a" | tee -a "$OUT/tests.log"; continue; fi
  log "bench model $a (${left} s left)" | tee -a "$OUT/tests.log"
  timeout $((left - 8)) "$BIN/moq" bench model "$S/$a" --device cuda "${BENCH[@]}" 2>&1 \
    | tee -a "$OUT/tests.log" "$OUT/bench_$a.log"
  rm -rf "$S/$a" # disk: the next algorithm's synth may still be writing
done
left=$((LIMIT - SECONDS))
if [ "$SHAPE" != 1b ] && command -v compute-sanitizer >/dev/null && [ $left -gt 45 ]; then
  log "compute-sanitizer memcheck (moq run --device cuda)" | tee -a "$OUT/tests.log"
  timeout $((left - 5)) compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_nvfp4" --device cuda -p "Hello there, how are you" -n 6 --ctx 64 2>&1 \
    | tail -4 | tee -a "$OUT/tests.log"
else log "memcheck skipped (${left} s left)" | tee -a "$OUT/tests.log"; fi
grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=|^prefill|^decode|GPU memory|synth " "$OUT/tests.log" | head -60
