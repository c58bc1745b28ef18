#!/usr/bin/env bash
# device_all.sh — one device call that checks the whole CUDA side after a merge, run on the H200 from
# the repository root with the binaries scripts/device_all_stage.sh staged (.devbin/devbin.tar.xz):
#   1. at once, side by side (correctness only): test_linear_cuda, test_moe_cuda, test_model_cuda
#      (GPU vs CPU forward for dense and MoE, batched decode, moq_batch), tests/e2e/serve.sh with
#      MOQ_SERVE_DEVICE=cuda, and compute-sanitizer memcheck over `moq run --device cuda` of a dense
#      and a MoE real export; meanwhile `moq synth` writes the speed checkpoints;
#   2. then alone on the GPU (speed): `moq bench model --device cuda` on 8B-shaped Llamas (32 layers,
#      hidden 4096, intermediate 14336, 32/8 heads, vocab 128256) in NVFP4 and FP8: prefill 2048,
#      batch-1 decode, batch 64; `moq bench moe --device cuda` at Qwen3-30B-A3B's layer shape and
#      `moq bench model` on a 2-layer Qwen3-30B-A3B-shaped MoE; `moq bench linear --device cuda` at
#      N = K = 8192, M = 1 and 16.
# Full logs under $OUT; the summary last. Usage: OUT=/tmp/out LIMIT=seconds [EVALS="fixture ..."] [ALGOS="NVFP4 FP8"]
#   [PROFILE=1 [PROFILE_ALGOS="FP8 NVFP4"]] [TESTS="test_model_cuda ..."] [MOE=0] [LINEAR=0] [LAYERS=32] scripts/device_all.sh
# TESTS names the step-1 programs to run (default all: test_linear_cuda test_moe_cuda test_model_cuda
# test_attn_cuda test_comm serve_cuda memcheck_dense memcheck_attn memcheck_moe); MOE=0 skips the MoE synth and benches,
# LINEAR=0 the linear sweep (for a call about the model's own kernels); LAYERS=L writes the 8B-shaped
# checkpoints with L layers instead of 32 (each layer's kernels as at 32; the synth takes ~3.5 s a layer);
# BENCH=0 skips `moq bench model` (the profile still runs); MIN_LEFT (default 60) is the time that must
# be left to start an 8B bench or profile. SERVE=0 skips the GPU serve benchmark (SERVE_ALGOS, default FP8).
. "$(dirname "$0")/device_env.sh"
LIMIT=${LIMIT:-360}
ALGOS=${ALGOS:-"NVFP4 FP8"}
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
# serve_bench DIR DEVICE CLIENTS PREFIX SECONDS: moq serve on a free loopback port, wait for /health,
# bench/serve_bench.py --clients 1,CLIENTS (2 requests each, 64 tokens), summary lines into the log.
serve_bench() {
  local dir=$1 dev=$2 nc=$3 pre=$4 lim=$5 port=$((18000 + RANDOM % 2000)) pid i
  "$BIN/moq" serve "$dir" --device "$dev" --port "$port" --max-batch "$nc" --ctx 512 > "$pre.server.log" 2>&1 &
  pid=$!
  for i in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  timeout "$lim" python3 "$ROOT/bench/serve_bench.py" --url "http://127.0.0.1:$port" --clients "1,$nc" --requests 2 --max-tokens 64 \
    --server-pid "$pid" > "$pre.log" 2>&1
  echo "serve_bench rc=$?" >> "$pre.log"
  kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  tail -8 "$pre.log" | tee -a "$OUT/summary.log"
}
left() { echo $((LIMIT - SECONDS)); }
R=$ROOT/tests/data/modelopt_real
S=/tmp/moq_synth
mkdir -p "$S"
head -c 4000 tests/data/text/pride_and_prejudice_ch1-2.txt > /tmp/short.txt
ldd "$BIN/moq" | grep "not found"
log "device" | tee "$OUT/summary.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1 | tee -a "$OUT/summary.log"
TESTS=${TESTS-"test_linear_cuda test_moe_cuda test_model_cuda test_attn_cuda test_comm serve_cuda memcheck_dense memcheck_attn memcheck_moe"}
MOE=${MOE:-1}
MIN_LEFT=${MIN_LEFT:-60} # seconds of LIMIT that must be left to start an 8B bench or profile
want() { case " $TESTS " in *" $1 "*) return 0 ;; esac; return 1; }
declare -A SP
for a in $ALGOS; do
  ( "$BIN/moq" synth "$S/d_$a" --algo "$a" --layers "${LAYERS:-32}" --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 --vocab 128256 > "$OUT/synth_d_$a.log" 2>&1 ) &
  SP[d_$a]=$!
  [ "$MOE" = 1 ] || continue
  ( "$BIN/moq" synth "$S/m_$a" --arch qwen3moe --algo "$a" --layers 2 --hidden 2048 --inter 768 --heads 32 --kv-heads 4 \
      --experts 128 --top-k 8 --vocab 1024 > "$OUT/synth_m_$a.log" 2>&1 ) &
  SP[m_$a]=$!
done
# 1. correctness, side by side
t() { local name=$1 lim=$2; shift 2; want "$name" || return 0; ( timeout "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?" >> "$OUT/$name.log" ) & }
t test_linear_cuda 200 "$BIN/test_linear_cuda"
t test_moe_cuda 120 "$BIN/test_moe_cuda"
t test_model_cuda 200 "$BIN/test_model_cuda"
t test_attn_cuda 60 "$BIN/test_attn_cuda"
[ -x "$BIN/test_comm" ] && NCCL_NVLS_ENABLE=0 t test_comm 60 "$BIN/test_comm"
MOQ_BIN=$BIN/moq MOQ_SERVE_DEVICE=cuda t serve_cuda 150 bash tests/e2e/serve.sh
if command -v compute-sanitizer >/dev/null; then
  t memcheck_dense 150 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/llama_nvfp4" --device cuda -p "Hello there, how are you" -n 6 --ctx 64
  t memcheck_attn 100 compute-sanitizer --tool memcheck "$BIN/test_attn_cuda"
  t memcheck_moe 150 compute-sanitizer --tool memcheck "$BIN/moq" run "$R/qwen3moe_nvfp4" --device cuda -p "Hello there" -n 6 --ctx 64
fi
wait_tests() { for j in $(jobs -p); do case " ${SP[*]} " in *" $j "*) ;; *) wait "$j" ;; esac; done; }
wait_tests
log "tests done" | tee -a "$OUT/summary.log"
for f in test_linear_cuda test_moe_cuda test_model_cuda test_attn_cuda test_comm serve_cuda memcheck_dense memcheck_attn memcheck_moe; do
  [ -f "$OUT/$f.log" ] || continue
  grep -E "PASSED|FAILED|SKIPPED|ERROR SUMMARY|rc=|^FAIL|^ok" "$OUT/$f.log" | grep -v "^ok" | tail -6 | sed "s/^/$f: /" | tee -a "$OUT/summary.log"
done
for f in ${EVALS-qwen3moe_nvfp4 llama_fp8}; do
  log "eval $f --device cuda --ref (KL GPU vs CPU)" | tee -a "$OUT/summary.log"
  timeout 30 "$BIN/moq" eval "$R/$f" --device cuda --ref "$R/$f" --kv-cache bf16 --text /tmp/short.txt --ctx 128 2>&1 | tail -2 | tee -a "$OUT/summary.log"
done
# 2. speed, alone on the GPU
for a in $ALGOS; do
  [ "$MOE" = 1 ] || break
  [ "$(left)" -lt 30 ] && break
  log "bench moe $a --device cuda (Qwen3-30B-A3B layer, decode)" | tee -a "$OUT/summary.log"
  timeout 25 "$BIN/moq" bench moe --algo "$a" --device cuda --graph 2>&1 | tail -3 | tee -a "$OUT/summary.log"
  while kill -0 "${SP[m_$a]}" 2>/dev/null && [ "$(left)" -gt 30 ]; do sleep 1; done
  [ "$(left)" -lt 30 ] && break
  log "bench model $a (2-layer Qwen3-30B-A3B shape) --device cuda" | tee -a "$OUT/summary.log"
  timeout 25 "$BIN/moq" bench model "$S/m_$a" --device cuda --prompt 256 --decode 64 2>&1 | tail -6 | tee -a "$OUT/summary.log"
  log "same, MOQ_CUDA_MOE_UNFUSED=1 (the 9-kernel chain, for comparison)" | tee -a "$OUT/summary.log"
  MOQ_CUDA_MOE_UNFUSED=1 timeout 25 "$BIN/moq" bench model "$S/m_$a" --device cuda --prompt 256 --decode 64 2>&1 | grep "^decode " | tee -a "$OUT/summary.log"
done
for a in $ALGOS; do
  while kill -0 "${SP[d_$a]}" 2>/dev/null && [ "$(left)" -gt "$MIN_LEFT" ]; do sleep 1; done
  if [ "$(left)" -lt "$MIN_LEFT" ] || kill -0 "${SP[d_$a]}" 2>/dev/null; then log "no time left for bench model $a 8B" | tee -a "$OUT/summary.log"; continue; fi
  if [ "${BENCH:-1}" = 1 ]; then
  log "bench model $a (8B shape) --device cuda" | tee -a "$OUT/summary.log"
  timeout $(( $(left) - 20 < 90 ? $(left) - 20 : 90 )) "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 32 --batch 64 --batch-prompt 128 2>&1 \
    | tee "$OUT/bench_d_$a.log" | tail -12 | tee -a "$OUT/summary.log"
  fi
  # 3. PROFILE=1: per-kernel GPU times (ncu, one metric, clocks left alone) of the 8B decode: a 2048-token
  #    prefill then 2 decode steps; profile.csv holds every kernel in launch order (the last ~450 are
  #    one decode step at position ~2050; scripts/ncu_step_summary.py groups them).
  if [ "${PROFILE:-0}" = 1 ] && command -v ncu >/dev/null && case " ${PROFILE_ALGOS:-FP8} " in *" $a "*) true ;; *) false ;; esac \
     && [ "$(left)" -ge "$MIN_LEFT" ]; then
    log "ncu decode profile $a" | tee -a "$OUT/summary.log"
    timeout $(( $(left) - MIN_LEFT / 2 )) ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      "$BIN/moq" bench model "$S/d_$a" --device cuda --prompt 2048 --decode 2 > "$OUT/profile_$a.csv" 2> "$OUT/profile_$a.err"
    echo "profile $a rc=$? lines=$(wc -l < "$OUT/profile_$a.csv")" | tee -a "$OUT/summary.log"
    python3 scripts/ncu_step_summary.py "$OUT/profile_$a.csv" 2>&1 | head -16 | tee -a "$OUT/summary.log"
  fi
  # 4. SERVE=1 (default): issue 15's GPU target, `moq serve --device cuda` on this 8B checkpoint (its
  #    synth byte-level tokenizer) with bench/serve_bench.py at 1 and 64 streaming clients (SERVE_ALGOS,
  #    default FP8): total output tok/s ratio and the inter-token latency p99 against batch-1 decode.
  if [ "${SERVE:-1}" = 1 ] && case " ${SERVE_ALGOS:-FP8} " in *" $a "*) true ;; *) false ;; esac && [ "$(left)" -ge "$MIN_LEFT" ]; then
    log "serve --device cuda $a 8B: serve_bench --clients 1,64" | tee -a "$OUT/summary.log"
    serve_bench "$S/d_$a" cuda 64 "$OUT/serve_bench_$a" $(( $(left) - 20 ))
  fi
  rm -rf "$S/d_$a"
done
for a in fp8_tensor nvfp4_w4a4 nvfp4_w4a16 fp8_blk128 mxfp8; do
  [ "${LINEAR:-1}" = 1 ] || break
  [ "$(left)" -lt 15 ] && break
  for m in 1 16; do timeout 10 "$BIN/moq" bench linear --device cuda --algo "$a" --m $m --n 8192 --k 8192 --json 2>&1 | tail -1 >> "$OUT/linear.jsonl"; done
done
[ -f "$OUT/linear.jsonl" ] && cut -c1-300 "$OUT/linear.jsonl" | tee -a "$OUT/summary.log" > /dev/null
log "end" | tee -a "$OUT/summary.log"
# a call brings back 8 files at most: every log but the summary and the profiles goes into one archive
( cd "$OUT" && ls *.log *.err *.jsonl 2>/dev/null | grep -v '^summary.log$' > /tmp/logs.lst && tar -czf logs.tar.gz -T /tmp/logs.lst && xargs rm -f < /tmp/logs.lst )
cat "$OUT/summary.log" | cut -c1-400
