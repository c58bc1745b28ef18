#!/usr/bin/env bash
# device_diag.sh — one device call that explains where a decode step's time goes, kernel by kernel,
# with the hardware counters (ncu, clocks left alone), on 8-layer (LAYERS) 8B-shaped Llamas (each layer's
# kernels are those of the 32-layer model: hidden 4096, intermediate 14336, 32/8 heads, vocab 128256):
#   1. per-kernel times of one batch-1 decode step at position ~2050 and of one batch-64 step
#      (prompts of 128), FP8 and NVFP4 (gpu__time_duration, scripts/ncu_step_summary.py);
#   2. ncu's full section set (speed of light, memory, warp stall reasons, occupancy, per-instruction
#      samples) of the decode attention kernel and of layer 0's four decode GEMVs (qkv, o, gate_up,
#      down), as text pages; the SASS with stall samples of the attention and the first GEMV as CSV.
# Binaries staged by scripts/device_all_stage.sh (.devbin). Usage: OUT=/tmp/out [ALGOS="FP8 NVFP4"] scripts/device_diag.sh
. "$(dirname "$0")/device_env.sh"
S=/tmp/moq_synth
mkdir -p "$S"
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*" | tee -a "$OUT/summary.log"; }
log "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$OUT/summary.log"
ALGOS=${ALGOS:-"FP8 NVFP4"}
for a in $ALGOS; do
  "$BIN/moq" synth "$S/d_$a" --algo "$a" --layers "${LAYERS:-8}" --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > "$OUT/synth_$a.log" 2>&1 &
done
for t in ${TESTS-test_model_cuda test_attn_cuda test_linear_cuda test_moe_cuda}; do
  ( timeout 110 "$BIN/$t" > "$OUT/$t.log" 2>&1; echo "$t rc=$?" >> "$OUT/$t.log" ) &
done
wait
for t in ${TESTS-test_model_cuda test_attn_cuda test_linear_cuda test_moe_cuda}; do
  grep -E "PASSED|FAILED|SKIPPED|rc=|^FAIL" "$OUT/$t.log" | tail -4 | sed "s/^/$t: /" | tee -a "$OUT/summary.log"
done
# A/B knobs of the decode step (each VAR=value, default the new path; BASE = .devbin/moq_base, the
# binary of the commit before, staged by hand), batch-1 decode, same process settings
for a in $ALGOS; do
  for knob in ${KNOBS-BASE MOQ_CUDA_PDL=0 MOQ_CUDA_PDL=1 MOQ_CUDA_GEMV_PE=1 BASE MOQ_CUDA_PDL=1}; do
    log "bench model $a (${LAYERS:-8} layers) decode, $knob"
    [ "${KNOBS_ALL:-0}" != 1 ] && [ "$a" != FP8 ] && [ "$knob" != BASE ] && [ "$knob" != MOQ_CUDA_PDL=1 ] && continue # the other knobs: FP8 only unless KNOBS_ALL=1 # PE: not for NVFP4 (gemv.cu PE_OK)
    exe=$BIN/moq; [ "$knob" = BASE ] && { exe=$BIN/moq_base; knob=MOQ_BASE=1; [ -x "$exe" ] || continue; }
    env "$knob" timeout 60 "$exe" bench model "$S/d_$a" --device cuda --prompt 2048 --decode ${AB_DECODE:-64} ${AB_BATCH:+--batch $AB_BATCH --batch-prompt 128} 2>&1 | grep -E "^decode|^prefill" | tee -a "$OUT/summary.log"
  done
done
[ "${DIAG:-1}" = 1 ] || { log end; cat "$OUT/summary.log"; exit 0; }
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
export MOQ_PROFILE_LAST_STEP=1 # bench model: only the last decode step (of each phase) inside the profiler range
for a in ${STEP_ALGOS:-$ALGOS}; do
  log "bench model $a (${LAYERS:-8} layers) batch 1 and 64"
  timeout 60 "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 32 --batch 64 --batch-prompt 128 2>&1 | tail -10 | tee -a "$OUT/summary.log"
  if [ -x "$BIN/moq_base" ]; then
    log "same, the baseline binary"
    timeout 60 "$BIN/moq_base" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 32 --batch 64 --batch-prompt 128 2>&1 | grep -E "^decode|^prefill" | tee -a "$OUT/summary.log"
  fi
  [ "$a" = FP8 ] || STEP64=0
  if [ "${STEP64:-1}" = 1 ]; then
  log "step profile $a, batch 64 (prompts of 128)"
  timeout 60 $NCU --metrics gpu__time_duration.sum --csv --page raw "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 128 --decode 2 \
    --batch 64 --batch-prompt 128 > "$OUT/step64_$a.csv" 2> "$OUT/step64_$a.err"
  python3 scripts/ncu_step_summary.py "$OUT/step64_$a.csv" 2>&1 | head -24 | tee -a "$OUT/summary.log"
  fi
  log "step profile $a, batch 1 (position ~2050)"
  timeout 60 $NCU --metrics gpu__time_duration.sum --csv --page raw "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 4 \
    > "$OUT/step1_$a.csv" 2> "$OUT/step1_$a.err"
  python3 scripts/ncu_step_summary.py "$OUT/step1_$a.csv" 2>&1 | head -24 | tee -a "$OUT/summary.log"
  re='gemv_mma'; [ "$a" = FP8 ] && re='attn_decode|gemv_mma'
  [ "${FULL:-1}" = 1 ] || continue
  [ "$a" = FP8 ] || [ "${FULL_ALL:-0}" = 1 ] || continue
  log "ncu full: attention decode + layer 0 decode GEMVs, $a"
  timeout 90 $NCU --set full --import-source no -k regex:"$re" -c 6 --page details \
    "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 2 > "$OUT/full_$a.txt" 2> "$OUT/full_$a.err"
  echo "ncu full $a rc=$?" | tee -a "$OUT/summary.log"
  [ "${SASS:-0}" = 1 ] || continue
  [ "$a" = FP8 ] && timeout 90 $NCU --set full -k regex:'attn_decode' -c 1 --page source --print-source sass --csv \
    "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 2 > "$OUT/sass_attn_$a.csv" 2> "$OUT/sass_attn_$a.err"
  timeout 90 $NCU --set full -k regex:'gemv_mma' -s 3 -c 1 --page source --print-source sass --csv \
    "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 2 > "$OUT/sass_gemv_$a.csv" 2> "$OUT/sass_gemv_$a.err"
done
log "end"
( cd "$OUT" && tar -czf diag.tar.gz *.csv *.txt *.err *.log --exclude summary.log 2>/dev/null && ls | grep -v -E '^(diag.tar.gz|summary.log)$' | xargs rm -f )
cat "$OUT/summary.log"
