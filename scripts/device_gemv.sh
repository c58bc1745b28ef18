#!/usr/bin/env bash
# device_gemv.sh — one device call for the decode kernel's fused activation quantizer (gemv.cu,
# MOQ_CUDA_GEMV_FUSE_M), run on the H200 from the repository root with the binaries of
# scripts/device_all_stage.sh (.devbin/devbin.tar.xz): correctness first, side by side
# (test_linear_cuda at the default and with fusion up to M = 8, test_model_cuda, compute-sanitizer
# memcheck over `moq run --device cuda` of a dense NVFP4 and FP8 export), then alone on the GPU:
# `moq bench linear --device cuda` (N = K = 8192) at M = 1, 2, 4 with fusion off (FUSE_M=0) and on,
# and `moq bench model --device cuda` on 8B-shaped Llamas (NVFP4, FP8) with fusion off and on.
# DATA: the tests/data folder (default: this checkout's). Logs under $OUT (summary.log, tests.log,
# linear.jsonl, bench_model.log: at most 8 files come back); the summary last.
# Knobs: FUSES (MOQ_CUDA_GEMV_FUSE_M values of the linear benches, default "0 8"; -1 = gemv.cu's
# table), MS (default "1 2 4"), WARPS_RUNS=0 skips the K-split runs, MODEL=0 the 8B model benches,
# LINEAR_RESERVE (default 100) the seconds kept for the model benches.
# Usage: OUT=/tmp/out LIMIT=seconds DATA=dir scripts/device_gemv.sh
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DATA=$(cd "${DATA:-$ROOT/tests/data}" && pwd)
[ -x .devbin/moq ] || tar -C "$ROOT" -xJf .devbin/devbin.tar.xz
BIN=$ROOT/.devbin
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOQ_TESTDATA=$BIN/testdata MOQ_TEST_SRCDATA=$DATA MOQ_TMP=/tmp/moq_tmp TMPDIR=/tmp
mkdir -p "$MOQ_TMP"
LIMIT=${LIMIT:-280}
ALGOS=${ALGOS:-"NVFP4 FP8"}
FUSES=${FUSES:-"0 8"}
MS=${MS:-"1 2 4"}
WARPS_RUNS=${WARPS_RUNS:-1}
MODEL=${MODEL:-1}
[ "$MODEL" = 1 ] || ALGOS=""
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
left() { echo $((LIMIT - SECONDS)); }
R=$DATA/modelopt_real
S=/tmp/moq_synth
mkdir -p "$S"
ldd "$BIN/moq" | grep "not found"
log "device" | tee "$OUT/summary.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$OUT/summary.log"
declare -A SP
for a in $ALGOS; do
  ( "$BIN/moq" synth "$S/d_$a" --algo "$a" --layers 32 --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > /dev/null 2>&1 ) &
  SP[$a]=$!
done
t() { local name=$1 lim=$2; shift 2; ( timeout "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?" >> "$OUT/$name.log" ) & }
t test_linear_cuda 150 "$BIN/test_linear_cuda"
MOQ_CUDA_GEMV_FUSE_M=8 t test_linear_fuse8 150 "$BIN/test_linear_cuda"
t test_model_cuda 150 "$BIN/test_model_cuda"
t test_moe_cuda 120 "$BIN/test_moe_cuda"
if command -v compute-sanitizer >/dev/null; then
  t memcheck_nvfp4 120 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_nvfp4" --device cuda -p "Hello there, how are you" -n 6 --ctx 64
  t memcheck_fp8 120 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_fp8" --device cuda -p "Hello there, how are you" -n 6 --ctx 64
fi
for j in $(jobs -p); do case " ${SP[*]} " in *" $j "*) ;; *) wait "$j" ;; esac; done
log "tests done" | tee -a "$OUT/summary.log"
for f in test_linear_cuda test_linear_fuse8 test_model_cuda test_moe_cuda memcheck_nvfp4 memcheck_fp8; do
  [ -f "$OUT/$f.log" ] || continue
  grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=|^FAIL|CUDA rows checked" "$OUT/$f.log" | tail -8 | sed "s/^/$f: /" | tee -a "$OUT/summary.log"
done
# speed, alone on the GPU: M = 1, 2, 4 with fusion off and on (FUSE_M = 8 covers M <= 8)
for a in fp8_tensor nvfp4_w4a4 nvfp4_w4a16 fp8_blk128 mxfp8 bf16 fp8_row; do
  for m in $MS; do
    for f in $FUSES; do
      [ "$(left)" -lt "${LINEAR_RESERVE:-100}" ] && break 3
      r=$(MOQ_CUDA_GEMV_FUSE_M=$f timeout 10 "$BIN/moq" bench linear --device cuda --algo "$a" --m $m --n 8192 --k 8192 --json 2>&1 | tail -1)
      echo "{\"fuse_m\":$f,${r#\{}" >> "$OUT/linear.jsonl"
      echo "$a m=$m fuse_m=$f $(echo "$r" | grep -o '"cold_us":[0-9.]*,"cold_weight_gbs":[0-9.]*,"cold_of_copy":[0-9.]*')" | tee -a "$OUT/summary.log"
    done
  done
done
[ "$WARPS_RUNS" = 1 ] && for a in fp8_tensor nvfp4_w4a4; do # the K split's demand (warps per SM) with fusion on, M = 1
  for wp in 8 32; do
    [ "$(left)" -lt 90 ] && break 2
    r=$(MOQ_CUDA_GEMV_WARPS=$wp timeout 10 "$BIN/moq" bench linear --device cuda --algo "$a" --m 1 --n 8192 --k 8192 --json 2>&1 | tail -1)
    echo "{\"warps\":$wp,${r#\{}" >> "$OUT/linear.jsonl"
    echo "$a m=1 fuse_m=2 warps=$wp $(echo "$r" | grep -o '"cold_us":[0-9.]*,"cold_weight_gbs":[0-9.]*,"cold_of_copy":[0-9.]*')" | tee -a "$OUT/summary.log"
  done
done
for a in $ALGOS; do
  for f in 0 2; do
    while kill -0 "${SP[$a]}" 2>/dev/null && [ "$(left)" -gt 25 ]; do sleep 1; done
    if [ "$(left)" -lt 25 ] || kill -0 "${SP[$a]}" 2>/dev/null; then log "no time left for bench model $a fuse_m=$f" | tee -a "$OUT/summary.log"; continue; fi
    log "bench model $a (8B shape) --device cuda, MOQ_CUDA_GEMV_FUSE_M=$f" | tee -a "$OUT/summary.log"
    MOQ_CUDA_GEMV_FUSE_M=$f timeout $(( $(left) - 5 < 40 ? $(left) - 5 : 40 )) "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 32 2>&1 \
      | tee "$OUT/bench_${a}_f$f.log" | grep -E "decode" | tee -a "$OUT/summary.log"
  done
done
log "end" | tee -a "$OUT/summary.log"
# at most 8 files come back: the test logs and the model benches in one file each
for f in test_linear_cuda test_linear_fuse8 test_model_cuda test_moe_cuda memcheck_nvfp4 memcheck_fp8; do
  [ -f "$OUT/$f.log" ] && { echo "######## $f"; cat "$OUT/$f.log"; rm "$OUT/$f.log"; } >> "$OUT/tests.log"
done
for f in "$OUT"/bench_*.log; do [ -f "$f" ] && { echo "######## $f"; cat "$f"; rm "$f"; } >> "$OUT/bench_model.log"; done
cat "$OUT/summary.log" | cut -c1-300
