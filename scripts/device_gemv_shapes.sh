#!/usr/bin/env bash
# device_gemv_shapes.sh — one device call for the decode kernel (gemv.cu) on the shapes of an
# 8B-shaped Llama, run on the H200 from the repository root with the binaries of
# scripts/device_all_stage.sh (.devbin/devbin.tar.xz; nothing is built on the device):
#   1. correctness, side by side: test_linear_cuda at the defaults, with MOQ_CUDA_GEMV_E2M1=0 (the
#      bf16 e2m1 decode), with MOQ_CUDA_GEMV_FUSE_M=8 (every fusable kind quantizes its own
#      activation), with MOQ_CUDA_GEMV_PE=1 (the cluster reduction with all peers' loads in flight), test_model_cuda, compute-sanitizer memcheck of `moq run --device cuda` (NVFP4);
#   2. alone on the GPU, `moq bench linear --device cuda --json` at M = 1 and 16 on N x K =
#      8192x8192, 28672x4096 (gate_up), 6144x4096 (qkv), 4096x4096 (o), 4096x14336 (down): the
#      defaults of FP8 per-tensor and NVFP4 W4A4 first, then the knob runs of KNOBS (below), then
#      the other formats (at OTHER_MS, default "1 16");
#   3. `moq bench model --device cuda` on 8B-shaped Llamas (FP8, NVFP4; VARIANTS adds more, e.g.
#      "NVFP4:MOQ_CUDA_GEMV_E2M1=0").
# Logs under $OUT (summary.log, tests.log, linear.jsonl, bench_model.log); the summary last.
# Usage: OUT=/tmp/out LIMIT=seconds [KNOBS=...] [FORMATS="..."] [OTHER_MS="1 16"] [VARIANTS=...] scripts/device_gemv_shapes.sh
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
LIMIT=${LIMIT:-270}
ALGOS=${ALGOS:-"FP8 NVFP4"}
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
t test_linear_cuda 120 "$BIN/test_linear_cuda"
MOQ_CUDA_GEMV_E2M1=0 t test_linear_e2m1bf16 120 "$BIN/test_linear_cuda"
MOQ_CUDA_GEMV_FUSE_M=8 t test_linear_fuse8 120 "$BIN/test_linear_cuda"
MOQ_CUDA_GEMV_PE=1 t test_linear_pe1 120 "$BIN/test_linear_cuda"
t test_model_cuda 120 "$BIN/test_model_cuda"
command -v compute-sanitizer >/dev/null &&
  t memcheck_nvfp4 100 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_nvfp4" --device cuda -p "Hello there, how are you" -n 6 --ctx 64
for j in $(jobs -p); do case " ${SP[*]} " in *" $j "*) ;; *) wait "$j" ;; esac; done
log "tests done" | tee -a "$OUT/summary.log"
for f in test_linear_cuda test_linear_e2m1bf16 test_linear_fuse8 test_linear_pe1 test_model_cuda memcheck_nvfp4; do
  [ -f "$OUT/$f.log" ] || continue
  grep -E "PASSED|FAILED|ERROR SUMMARY|rc=|^FAIL|CUDA rows checked" "$OUT/$f.log" | tail -6 | sed "s/^/$f: /" | tee -a "$OUT/summary.log"
done
SHAPES="8192x8192 28672x4096 6144x4096 4096x4096 4096x14336"
# b TAG ALGO M NxK [ENV=V ...]: one bench, a JSON line (with the tag) and a summary line
b() {
  local tag=$1 a=$2 m=$3 nk=$4; shift 4
  [ "$(left)" -lt "${RESERVE:-45}" ] && return 1
  local r
  r=$(env "$@" timeout 15 "$BIN/moq" bench linear --device cuda --algo "$a" --m "$m" --n "${nk%x*}" --k "${nk#*x}" --json 2>&1 | tail -1)
  echo "{\"tag\":\"$tag\",${r#\{}" >> "$OUT/linear.jsonl"
  echo "$tag $a m=$m $nk $(echo "$r" | grep -o '"hot_us":[0-9.]*,"cold_us":[0-9.]*,"cold_weight_gbs":[0-9.]*,"cold_of_copy":[0-9.]*')" | tee -a "$OUT/summary.log"
}
for a in fp8_tensor nvfp4_w4a4; do for nk in $SHAPES; do for m in 1 16; do b default $a $m $nk || break 3; done; done; done
# KNOBS: "tag algo M shapes ENV=V[,ENV=V]" entries, ';'-separated (shapes: all = $SHAPES). Run 1
# (21:26) measured NVFP4 E2M1=0 / FUSE_M=1 / BALANCE=0 / WARPS=16 and FP8 BALANCE=0 / WARPS=8 / 32 /
# U2=1 (since removed) on every shape at M = 1; the default list checks what run 1 chose.
KNOBS=${KNOBS:-"pe1 fp8_tensor 1 all MOQ_CUDA_GEMV_PE=1; w16 nvfp4_w4a16 1 6144x4096 MOQ_CUDA_GEMV_WARPS=16;
w16 nvfp4_w4a16 1 4096x14336 MOQ_CUDA_GEMV_WARPS=16; fuse0 nvfp4_w4a4 1 4096x4096 MOQ_CUDA_GEMV_FUSE_M=0"}
IFS=';' read -ra KL <<< "${KNOBS//$'\n'/ }"
for k in "${KL[@]}"; do
  read -r tag a m shapes envs <<< "$k"
  [ "$shapes" = all ] && shapes=$SHAPES
  for nk in $shapes; do b "$tag" "$a" "$m" "$nk" ${envs//,/ } || break 2; done
done
RESERVE=${OTHERS_RESERVE:-70}
for a in ${FORMATS:-nvfp4_w4a16 mxfp8 fp8_blk128 fp8_row bf16}; do for nk in $SHAPES; do for m in ${OTHER_MS:-1 16}; do b default $a $m $nk || break 3; done; done; done
for v in FP8:- NVFP4:- ${VARIANTS:-}; do
  a=${v%%:*}; e=${v#*:}
  while kill -0 "${SP[$a]}" 2>/dev/null && [ "$(left)" -gt 20 ]; do sleep 1; done
  if [ "$(left)" -lt 20 ] || kill -0 "${SP[$a]}" 2>/dev/null; then log "no time left for bench model $a $e" | tee -a "$OUT/summary.log"; continue; fi
  log "bench model $a (8B shape) --device cuda $e" | tee -a "$OUT/summary.log"
  [ "$e" = - ] && e=MOQ_NONE=0
  env "$e" timeout $(( $(left) - 5 < 40 ? $(left) - 5 : 40 )) "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 32 2>&1 \
    | tee "$OUT/bench_${a}_$e.log" | grep -E "decode" | tee -a "$OUT/summary.log"
done
log "end" | tee -a "$OUT/summary.log"
for f in test_linear_cuda test_linear_e2m1bf16 test_linear_fuse8 test_linear_pe1 test_model_cuda memcheck_nvfp4; do
  [ -f "$OUT/$f.log" ] && { echo "######## $f"; cat "$OUT/$f.log"; rm "$OUT/$f.log"; } >> "$OUT/tests.log"
done
for f in "$OUT"/bench_*.log; do [ -f "$f" ] && { echo "######## $f"; cat "$f"; rm "$f"; } >> "$OUT/bench_model.log"; done
cut -c1-220 "$OUT/summary.log"
