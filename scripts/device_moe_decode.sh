#!/usr/bin/env bash
# device_moe_decode.sh — the device call of the MoE decode path (issue 13; docs/PERFORMANCE.md "MoE on
# the H200"), run on the H200 from the folder scripts/device_moe_cuda_stage.sh fills (binaries built on
# the dev machine under .devbin/; tests/data from the checkout that folder sits in):
#   1. test_moe_cuda and test_model_cuda side by side (correctness only);
#   2. alone on the GPU: `moq bench moe --device cuda --graph` at Qwen3-30B-A3B's layer shape for NVFP4 and
#      FP8 with the decode path and with the general chain (MOQ_CUDA_MOE_UNFUSED=1, the "before"), then the
#      other expert formats (decode path); `moq bench model` on 2-layer Qwen3-30B-A3B-shaped checkpoints
#      (written by `moq synth` meanwhile), decode path and chain;
#   3. while time is left: ncu (one metric, clocks left alone) over a few eager layer calls of each path.
# Usage: OUT=/tmp/out LIMIT=seconds scripts/device_moe_decode.sh
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.devbin
[ -d "$BIN" ] || tar -C "$ROOT" -xJf "$ROOT/devbin.tar.xz"
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOQ_TEST_SRCDATA=$ROOT/../tests/data MOQ_TMP=/tmp/moq_tmp TMPDIR=/tmp
mkdir -p "$MOQ_TMP"
LIMIT=${LIMIT:-190}
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
{
  log "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1
  ( timeout 60 "$BIN/test_moe_cuda" > "$OUT/test_moe_cuda.log" 2>&1; echo "test_moe_cuda rc=$?" >> "$OUT/test_moe_cuda.log" ) &
  T1=$!
  ( timeout 90 "$BIN/test_model_cuda" > "$OUT/test_model_cuda.log" 2>&1; echo "test_model_cuda rc=$?" >> "$OUT/test_model_cuda.log" ) &
  T2=$!
  wait $T1 $T2
  log "tests done"
  grep -E "T=|decode|chain" "$OUT/test_moe_cuda.log" | head -60
  grep -E "PASSED|FAILED|SKIPPED|rc=|^\[  FAIL" "$OUT/test_moe_cuda.log" "$OUT/test_model_cuda.log"
  grep -E "qwen3moe|mixtral|moe" "$OUT/test_model_cuda.log" | head -30
  for a in NVFP4 FP8; do
    for u in 0 1; do
      [ "$(left)" -lt 40 ] && break
      log "bench moe $a --device cuda --graph (MOQ_CUDA_MOE_UNFUSED=$u)"
      MOQ_CUDA_MOE_UNFUSED=$u timeout 30 "$BIN/moq" bench moe --algo "$a" --device cuda --graph 2>&1 | tail -3
    done
  done
  for a in NVFP4 FP8; do
    while kill -0 "${PID[$a]}" 2>/dev/null && [ "$(left)" -gt 30 ]; do sleep 1; done
    for u in 0 1; do
      [ "$(left)" -lt 25 ] && break
      log "bench model $a (2-layer Qwen3-30B-A3B shape) --device cuda (MOQ_CUDA_MOE_UNFUSED=$u)"
      MOQ_CUDA_MOE_UNFUSED=$u timeout 20 "$BIN/moq" bench model "$S/$a" --device cuda --prompt 256 --decode 64 2>&1 | tail -4
    done
  done
  for a in MXFP8 FP8_PB_WO W4A16_NVFP4 FP8_PER_CHANNEL_PER_TOKEN; do
    [ "$(left)" -lt 35 ] && { log "no time left for bench moe $a"; continue; }
    log "bench moe $a --device cuda --graph"; timeout 25 "$BIN/moq" bench moe --algo "$a" --device cuda --graph 2>&1 | tail -2
  done
  if command -v ncu >/dev/null; then
    for a in ${NCU_ALGOS:-NVFP4 FP8}; do
      u=${NCU_UNFUSED:-0}
      [ "$(left)" -lt 30 ] && break
      log "ncu bench moe $a (MOQ_CUDA_MOE_UNFUSED=$u): 40 kernels after the first 200"
      MOQ_CUDA_MOE_UNFUSED=$u timeout 25 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -s 200 -c 40 \
        "$BIN/moq" bench moe --algo "$a" --device cuda > "$OUT/ncu_${a}_u$u.csv" 2> "$OUT/ncu_${a}_u$u.err"
      echo "ncu rc=$?"; python3 - "$OUT/ncu_${a}_u$u.csv" <<'PY' 2>&1 | tail -9
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
h = rows[0]; ki = h.index("Kernel Name"); ti = h.index("gpu__time_duration.sum")
for r in rows[2:]:
    print(r[ti].rjust(10), r[ki][:90])
PY
    done
  fi
  log "end"
} 2>&1 | tee "$OUT/summary.log"
