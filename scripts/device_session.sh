#!/usr/bin/env bash
# device_session.sh — the one device call of a session that changed the decode step and the
# cuBLASLt rows: scripts/device_diag.sh (CUDA tests, whole-model A/B against the staged baseline
# binary, per-kernel step profiles, ncu sections), then scripts/device_lt.sh (the cuBLASLt knobs
# against torch). Each writes under its own folder of $OUT; everything but the two summaries is
# archived (a call brings back 8 files at most). Usage: OUT=/tmp/out [LT_MS="1024 8192"] scripts/device_session.sh
set -u
OUT=${OUT:-/tmp/moq_out}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT/diag" "$OUT/lt"
DIAG=${DIAG:-1} AB_BATCH=${AB_BATCH-64} AB_DECODE=${AB_DECODE:-32} STEP_ALGOS=${STEP_ALGOS:-FP8} FULL=${FULL:-0} LAYERS=${LAYERS:-8} KNOBS=${KNOBS-"BASE MOQ_CUDA_PDL=1 MOQ_CUDA_PDL=0"} OUT=$OUT/diag timeout ${DIAG_S:-340} bash "$ROOT/scripts/device_diag.sh" > "$OUT/diag.out" 2>&1
ROWS=${ROWS:-"nvfp4_w4a4: bf16: fp8_tensor:cuda_sm90_fp8_tensor_cublaslt"} KNOB_RUNS=${KNOB_RUNS:-short} TESTS=${LT_TESTS:-1} MS=${LT_MS:-"1024 8192"} OUT=$OUT/lt timeout ${LT_S:-190} bash "$ROOT/scripts/device_lt.sh" > "$OUT/lt.out" 2>&1
cp "$OUT/diag/summary.log" "$OUT/summary_diag.log"; cp "$OUT/lt/summary.log" "$OUT/summary_lt.log" 2>/dev/null
( cd "$OUT" && tar -czf all.tar.gz diag lt diag.out lt.out && rm -rf diag lt diag.out lt.out )
cat "$OUT/summary_diag.log" | cut -c1-300 | tail -150
echo ======== lt
tail -60 "$OUT/summary_lt.log" | cut -c1-300
