#!/usr/bin/env bash
# device_cuda.sh — the one device call of issue 12 (CUDA backend), run on the H200 from the
# repository root:
#   1. build with MOQ_CUDA (on the device when its image has cmake, pkg-config, cJSON and cmocka;
#      else the binaries built on the dev machine under .devbin/ with their .so files and
#      testdata/golden/rcp: scripts/device_cuda_stage.sh makes it);
#   2. CUDA tests (ctest -L cuda / test_linear_cuda) and compute-sanitizer memcheck on the test
#      binary (MOQ_TEST_QUICK=1: fewer shapes under the checker);
#   3. bench/torch_linear.py (bf16 matmul, _scaled_mm FP8 per-tensor and block-scaled, copy);
#   4. `moq bench linear --device cuda --json` for every CUDA format, the issue's shapes and M
#      (--quick: N = K = 8192 at M = 1..8192, the decode kernel's knobs, the other shapes at
#      M = 1, 16, 8192), and the non-default rows at large M;
#   5. the short table last (bench/cuda_table.py). Full logs and JSON under $OUT.
# Usage: OUT=/tmp/out scripts/device_cuda.sh [--quick]
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
QUICK=${1:-}
ROOT=$(pwd)
export LD_LIBRARY_PATH=$ROOT/.devbin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
py=$(command -v python3)
for d in $($py -c 'import nvidia, os; print(" ".join(os.path.join(p, "cublas", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
log() { echo "== $(date -u +%H:%M:%S) $*"; }
BIN=$ROOT/.devbin
if cmake --version >/dev/null 2>&1 && pkg-config --exists libcjson cmocka 2>/dev/null; then
  log "build on the device"
  cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DMOQ_CUDA=ON >/dev/null && cmake --build build-dev -j16 2>&1 | grep -E "warning|error"
  BIN=$ROOT/build-dev
else
  log "device image lacks cJSON/cmocka: using the binaries built on the dev machine (.devbin)"
fi
# the reference data the tests read (golden/rcp): the build's unpacked copy (CMake makes it)
export MOQ_TESTDATA=${MOQ_TESTDATA:-$BIN/testdata}
{
  log "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1
  ls -la "$BIN" | head -20
  log "CPU kernel tests"; "$BIN/test_linear" 2>&1 | tail -3
  log "CUDA tests"; "$BIN/test_linear_cuda" 2>&1 | tail -40; echo "test_linear_cuda rc=${PIPESTATUS[0]}"
  if command -v compute-sanitizer >/dev/null; then
    log "compute-sanitizer memcheck"; MOQ_TEST_QUICK=1 timeout 240 compute-sanitizer --tool memcheck --leak-check full "$BIN/test_linear_cuda" 2>&1 | tail -15
  else log "compute-sanitizer not found"; fi
} 2>&1 | tee "$OUT/tests.log"
log "torch" | tee -a "$OUT/tests.log"
TARGS=""
[ "$QUICK" = "--quick" ] && TARGS="--m 1,16,128,1024,8192"
PYTHONUNBUFFERED=1 timeout 200 $py bench/torch_linear.py $TARGS --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1 || echo "torch bench failed: $(tail -3 "$OUT/torch.log")"
log "moq bench" | tee -a "$OUT/tests.log"
: > "$OUT/moq.jsonl"; : > "$OUT/moq_knobs.jsonl"
ALGOS="fp8_tensor fp8_row fp8_blk128 nvfp4_w4a4 nvfp4_w4a16 mxfp8 bf16"
bench() { timeout 60 "$BIN/moq" bench linear --device cuda --json "$@" >> "$OUT/moq.jsonl" 2>> "$OUT/moq.err" || echo "moq bench $* failed" >> "$OUT/moq.err"; }
# knob runs (gemv.cu's MOQ_CUDA_GEMV_*) go to moq_knobs.jsonl, each line tagged with its knob
bench_k() { local tag=$1; shift; timeout 60 "$BIN/moq" bench linear --device cuda --json "$@" 2>> "$OUT/moq.err" | sed "s/^{/{\"knob\": \"$tag\", /" >> "$OUT/moq_knobs.jsonl"; }
if [ "$QUICK" = "--quick" ]; then
  # N = K = 8192 at every M first, then the decode kernel's knobs, the other rows, the other shapes
  for a in $ALGOS; do for m in 1 8 16 128 1024 8192; do bench --algo "$a" --m "$m" --n 8192 --k 8192; done; done
  for a in fp8_tensor nvfp4_w4a4 mxfp8 bf16; do for m in 1 16; do
    MOQ_CUDA_GEMV_WARPS=16 bench_k warps16 --algo "$a" --m "$m" --n 8192 --k 8192
    MOQ_CUDA_GEMV_WARPS=64 bench_k warps64 --algo "$a" --m "$m" --n 8192 --k 8192
  done; done
else
  for a in $ALGOS; do for s in 8192x8192 4096x14336 14336x4096; do for m in 1 16 128 1024 8192; do
    bench --algo "$a" --m "$m" --n "${s%x*}" --k "${s#*x}"
  done; done; done
fi
# The other rows at large M, N = K = 8192: FP8 cuBLASLt (inexact sums: not the default) and the
# own mma GEMMs (the defaults are the weight dequantized to bf16 + cuBLASLt bf16).
for ak in fp8_tensor:cuda_sm90_fp8_tensor_cublaslt fp8_row:cuda_sm90_fp8_row_cublaslt fp8_tensor:cuda_sm90_fp8_tensor_dequant_mma \
          nvfp4_w4a4:cuda_sm90_nvfp4_w4a4_dequant_mma mxfp8:cuda_sm90_mxfp8_dequant_mma bf16:cuda_sm90_bf16_mma; do for m in 128 1024 8192; do
  bench --algo "${ak%%:*}" --kernel "${ak#*:}" --m "$m" --n 8192 --k 8192
done; done
[ "$QUICK" = "--quick" ] && for a in $ALGOS; do for s in 4096x14336 14336x4096; do for m in 1 16 8192; do
  bench --algo "$a" --m "$m" --n "${s%x*}" --k "${s#*x}"
done; done; done
$py bench/cuda_table.py "$OUT/moq.jsonl" "$OUT/torch.jsonl" --full > "$OUT/table_full.txt" 2>&1
tail -5 "$OUT/moq.err" 2>/dev/null
grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=" "$OUT/tests.log" | head -20
$py bench/cuda_table.py "$OUT/moq.jsonl" "$OUT/torch.jsonl"
