#!/usr/bin/env bash
# device_lt.sh — one device call for the cuBLASLt rows at M > 16 (issue 12, branch lt): cuBLASLt
# writing y directly (MOQ_CUDA_LT_DIRECT), scalar FP8 scales (MOQ_CUDA_LT_SCALAR), the heuristic
# cache (MOQ_CUDA_LT_CACHE), BF16 / W4A16 reading bf16 x without the quantizer (MOQ_CUDA_LT_X), each
# against the old path in the same call. Run on the H200 from the
# repository root with the binaries of scripts/device_all_stage.sh (.devbin/devbin.tar.xz), or
# BIN=dir for binaries built on the device:
#   1. test_linear_cuda at the defaults, with MOQ_CUDA_LT_DIRECT=2 (alpha always a device vector)
#      and with every knob at 0 (the old paths); each prints which cuBLASLt path ran;
#   2. bench/torch_linear.py at N = K = 8192 (bf16 matmul, _scaled_mm) for the same M;
#   3. `moq bench linear --device cuda --json` at N = K = 8192, M in $MS, for every dequant row and
#      the FP8 per-tensor cuBLASLt row, "new" (defaults) and "old" (all three knobs 0) alternated
#      ($ROUNDS pairs), then one knob at a time (DIRECT=0, DIRECT=2, SCALAR=0, CACHE=0) on a few rows;
#   4. the table: moq µs per variant and the ratio to torch (bf16 matmul; _scaled_mm for FP8).
# Logs under $OUT (summary.log, tests_*.log, lt.jsonl, torch.jsonl); the summary last.
# Usage: OUT=/tmp/out [MS="128 1024 8192"] [ROUNDS=1] [TESTS=0|BENCH=0] scripts/device_lt.sh
. "$(dirname "$0")/device_env.sh"
py=$(command -v python3)
for d in $($py -c 'import nvidia, os; print(" ".join(os.path.join(p, "cublas", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
# the new paths are off by default until measured (cublaslt.cu): "new" here is every knob at 1
export MOQ_CUDA_LT_DIRECT=${MOQ_CUDA_LT_DIRECT:-1} MOQ_CUDA_LT_SCALAR=${MOQ_CUDA_LT_SCALAR:-1} MOQ_CUDA_LT_CACHE=${MOQ_CUDA_LT_CACHE:-1} MOQ_CUDA_LT_X=${MOQ_CUDA_LT_X:-1}
MS=${MS:-"128 1024 8192"}
ROUNDS=${ROUNDS:-1}   # new/old pairs per (row, M)
TESTS=${TESTS:-1}     # 0: no test_linear_cuda runs
BENCH=${BENCH:-1}     # 0: tests only
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
log "device" | tee "$OUT/summary.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$OUT/summary.log"
t() { local name=$1; shift; ( timeout 240 "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?" >> "$OUT/$name.log" ) & }
if [ "$TESTS" = 1 ]; then
  t tests_default "$BIN/test_linear_cuda"
  MOQ_CUDA_LT_DIRECT=2 t tests_vector "$BIN/test_linear_cuda"
  MOQ_CUDA_LT_DIRECT=0 MOQ_CUDA_LT_SCALAR=0 MOQ_CUDA_LT_CACHE=0 MOQ_CUDA_LT_X=0 t tests_old "$BIN/test_linear_cuda"
  wait
fi
for f in tests_default tests_vector tests_old; do
  [ -f "$OUT/$f.log" ] || continue
  grep -E "PASSED|FAILED|rc=|^FAIL|CUDA rows checked|cuBLASLt paths" "$OUT/$f.log" | tail -12 | sed "s/^/$f: /" | tee -a "$OUT/summary.log"
done
[ "$BENCH" = 1 ] || exit 0
log "torch" | tee -a "$OUT/summary.log"
PYTHONUNBUFFERED=1 timeout 120 $py bench/torch_linear.py --shapes 8192x8192 --m "$(echo $MS | tr ' ' ,)" --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1 ||
  echo "torch bench failed: $(tail -3 "$OUT/torch.log")" | tee -a "$OUT/summary.log"
log "moq bench" | tee -a "$OUT/summary.log"
: > "$OUT/lt.jsonl"
# b TAG ARGS...: one bench line tagged with the variant (env set by the caller)
b() { local tag=$1; shift; timeout 60 "$BIN/moq" bench linear --device cuda --json --n 8192 --k 8192 "$@" 2>> "$OUT/moq.err" |
        sed "s/^{/{\"variant\": \"$tag\", /" >> "$OUT/lt.jsonl"; }
old() { MOQ_CUDA_LT_DIRECT=0 MOQ_CUDA_LT_SCALAR=0 MOQ_CUDA_LT_CACHE=0 MOQ_CUDA_LT_X=0 b old "$@"; }
ROWS=${ROWS:-"nvfp4_w4a4: nvfp4_w4a16: mxfp8: bf16: fp8_tensor: fp8_tensor:cuda_sm90_fp8_tensor_cublaslt"}
if [ "$BENCH" = 1 ]; then
  for r in $(seq "$ROUNDS"); do for m in $MS; do for row in $ROWS; do
    a=${row%%:*} k=${row#*:}
    set -- --algo "$a" --m "$m"; [ -n "$k" ] && set -- "$@" --kernel "$k"
    b new "$@"; old "$@"   # alternated
  done; done; done
  # one knob at a time: DIRECT=0 (y via D + epilogue, cache on), DIRECT=2 (alpha as a device
  # vector), CACHE=0 (heuristic every call: host time, matters at small M), SCALAR=0 (FP8 outer
  # vectors), X=0 (BF16 / W4A16 read the quantizer's A copy of x, not x)
  if [ "${KNOB_RUNS:-all}" != none ]; then
  for m in 1024 8192; do for a in nvfp4_w4a4 bf16; do MOQ_CUDA_LT_DIRECT=0 b direct0 --algo "$a" --m "$m"; done; done
  for m in 1024 8192; do MOQ_CUDA_LT_SCALAR=0 b scalar0 --algo fp8_tensor --kernel cuda_sm90_fp8_tensor_cublaslt --m "$m"; done
  fi
  if [ "${KNOB_RUNS:-all}" = all ]; then
  for m in 1024 8192; do MOQ_CUDA_LT_DIRECT=2 b direct2 --algo nvfp4_w4a4 --m "$m"; done
  for m in 128 1024; do for a in nvfp4_w4a4 bf16; do MOQ_CUDA_LT_CACHE=0 b cache0 --algo "$a" --m "$m"; done; done
  for m in 1024 8192; do for a in bf16 nvfp4_w4a16; do MOQ_CUDA_LT_X=0 b x0 --algo "$a" --m "$m"; done; done
  fi
fi
tail -5 "$OUT/moq.err" 2>/dev/null
log "table (cold µs, min over the runs of each variant; (x): torch µs / moq µs, torch = bf16 matmul, _scaled_mm for the fp8 cuBLASLt row)" | tee -a "$OUT/summary.log"
$py - "$OUT/lt.jsonl" "$OUT/torch.jsonl" <<'EOF' | tee -a "$OUT/summary.log"
import json, sys
rows, torch = {}, {}
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except ValueError: continue
    rows.setdefault((d["algo"], d["kernel"], d["m"]), {}).setdefault(d["variant"], []).append(d["cold_us"])
try:
    for l in open(sys.argv[2]):
        d = json.loads(l)
        if d.get("n") == 8192 and d.get("k") == 8192 and "us" in d: torch[(d.get("op"), d["m"])] = d["us"]
except (OSError, ValueError, KeyError): pass
vs = ["new", "old", "direct0", "direct2", "scalar0", "cache0", "x0"]
print("%-12s %-42s %5s " % ("algo", "kernel (new)", "M") + " ".join("%16s" % v for v in vs))
for (a, k, m), v in sorted(rows.items(), key=lambda x: (x[0][2], x[0][0], x[0][1])):
    ref = torch.get(("scaled_mm_fp8_tensor" if a.startswith("fp8") and "dequant" not in k else "bf16_matmul", m))
    cells = []
    for x in vs:
        if x not in v: cells.append("%16s" % "-"); continue
        us = min(v[x]); cells.append("%8.1f (%4.2fx)" % (us, ref / us) if ref else "%16.1f" % us)
    print("%-12s %-42s %5d " % (a, k, m) + " ".join(cells))
EOF
