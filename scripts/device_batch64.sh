#!/usr/bin/env bash
# device_batch64.sh — one device call for the batch-64 decode step (issues 13 and 15), 2026-12-08:
#   1. tests: test_attn_cuda (the greedy-ids kernel, the looping attention grid's 8-row cases, both
#      prefill attention kernels), test_model_cuda with MOQ_CUDA_ATTN_PREFILL_MMA=1 (bf16 attention),
#      test_linear_cuda with MOQ_CUDA_GEMV_MMAX=64 (the decode kernel at 17..64 rows against _ref),
#      test_model_cuda as it is and with the candidate defaults (ARGMAX=1, MMAX=64, ZLOOP=1);
#   2. `moq bench model --batch 64` A/B on 8-layer 8B-shaped FP8 and NVFP4 Llamas: the default
#      (greedy ids found on the host), MOQ_CUDA_ARGMAX=1 (on the GPU), MOQ_BENCH_LOGITS=1 (bench's
#      own argmax over the logits rows, as before),
#      MOQ_CUDA_ATTN_ZLOOP=1, MOQ_CUDA_GEMV_MMAX=64, both; the tensor-core prefill attention (prefill line);
#   3. the ncu step profile of one batch-64 step with the candidate knobs (FP8);
#   4. the 32-layer FP8 model (the issue's shape) at batch 1 and 64, default and candidates;
#   5. `moq serve --device cuda` + bench/serve_bench.py at 1 and 64 clients (issue 15's GPU target).
# Binaries staged by scripts/device_all_stage.sh (.devbin). Usage: OUT=/tmp/out [LIMIT=540] scripts/device_batch64.sh
. "$(dirname "$0")/device_env.sh"
device_header
CAND="MOQ_CUDA_ARGMAX=1 MOQ_CUDA_GEMV_MMAX=64 MOQ_CUDA_ATTN_ZLOOP=1"
for a in FP8 NVFP4; do
  "$BIN/moq" synth "$S/d_$a" --algo "$a" --layers 8 --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > "$OUT/synth_$a.log" 2>&1 &
done
( "$BIN/moq" synth "$S/d32_FP8" --algo FP8 --layers 32 --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > "$OUT/synth_32.log" 2>&1 ) &
t() { # name, env..., binary: a test with a time limit, its verdict lines into the summary
  local name=$1; shift
  ( timeout 150 env "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log" ) &
}
t attn "$BIN/test_attn_cuda"
t linear_mmax64 MOQ_CUDA_GEMV_MMAX=64 "$BIN/test_linear_cuda"
t model_default "$BIN/test_model_cuda"
t model_cand $CAND "$BIN/test_model_cuda"
t model_fa2 MOQ_CUDA_ATTN_PREFILL_MMA=1 "$BIN/test_model_cuda"
wait # the tests and every synth (the 32-layer one, ~110 s, within the tests' time): no benchmark shares the host with them
for n in attn linear_mmax64 model_default model_cand model_fa2; do
  grep -E "PASSED|FAILED|SKIPPED|rc=|^FAIL|ERROR" "$OUT/$n.log" | tail -6 | sed "s/^/$n: /" | tee -a "$OUT/summary.log"
done
bm() { # dir, env...: one bench model line set at batch 64
  local d=$1; shift
  env "$@" timeout 90 "$BIN/moq" bench model "$d" --device cuda --prompt 2048 --decode 32 --batch 64 --batch-prompt 128 2>&1 | grep -E "^decode|^prefill|error" | tee -a "$OUT/summary.log"
}
for a in FP8 NVFP4; do
  knobs="MOQ_X=0 MOQ_CUDA_ARGMAX=1 MOQ_BENCH_LOGITS=1 MOQ_CUDA_ATTN_ZLOOP=1 MOQ_CUDA_GEMV_MMAX=64 CAND MOQ_CUDA_ATTN_PREFILL_MMA=1"
  [ "$a" = FP8 ] || knobs="MOQ_X=0 CAND" # NVFP4: the decode kernel in two row groups of 32 at batch 64
  for knob in $knobs; do
    [ "$knob" = CAND ] && knob=$CAND
    [ "$(left)" -gt 150 ] || break
    log "bench model $a (8 layers), $knob"
    bm "$S/d_$a" $knob
  done
done
if [ "$(left)" -gt 120 ]; then
  log "step profile FP8 batch 64, $CAND"
  MOQ_PROFILE_LAST_STEP=1 env $CAND timeout 60 ncu --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
    "$BIN/moq" bench model "$S/d_FP8" --device cuda --prompt 128 --decode 2 --batch 64 --batch-prompt 128 > "$OUT/step64.csv" 2> "$OUT/step64.err"
  python3 scripts/ncu_step_summary.py "$OUT/step64.csv" 2>&1 | head -24 | tee -a "$OUT/summary.log"
fi
serve_bench() { # dir, clients, env...
  local dir=$1 nc=$2; shift 2
  local port=$((20000 + RANDOM % 20000))
  env "$@" "$BIN/moq" serve "$dir" --device cuda --port "$port" --max-batch "$nc" --ctx 512 > "$OUT/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
  timeout $(( $(left) - 10 )) python3 "$ROOT/bench/serve_bench.py" --url "http://127.0.0.1:$port" --clients "1,$nc" --requests 2 --max-tokens 64 \
    --server-pid "$pid" --idle-s 0 2>&1 | tee -a "$OUT/summary.log"
  kill "$pid"; wait "$pid" 2>/dev/null
}
if [ "$(left)" -gt 60 ]; then
  log "serve --device cuda FP8 (8 layers), clients 1 and 64, $CAND"
  serve_bench "$S/d_FP8" 64 $CAND
fi
tail -2 "$OUT/synth_32.log" | tee -a "$OUT/summary.log"
for knob in MOQ_X=0 "$CAND MOQ_CUDA_ATTN_PREFILL_MMA=1"; do
  [ "$(left)" -gt 100 ] || break
  log "bench model FP8 (32 layers), $knob"
  bm "$S/d32_FP8" $knob
done
log "end"
( cd "$OUT" && tar -czf logs.tar.gz *.log *.csv *.err --exclude summary.log 2>/dev/null; ls | grep -v -E '^(logs.tar.gz|summary.log)$' | xargs rm -f )
cat "$OUT/summary.log"
