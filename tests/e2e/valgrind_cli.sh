#!/usr/bin/env bash
# valgrind_cli.sh — valgrind memcheck over representative CLI runs (issue #7): synth, inspect (text,
# JSON), check --values, run (3 tokens), config, resolve on a good checkpoint, and inspect/check on bad ones (a
# shard whose header is not JSON, a missing scale, a truncated shard). Any memcheck error or
# definite/indirect leak fails (--error-exitcode=99); the commands' own exit codes are checked too.
# Runs in the Release build only: skipped with a message when valgrind is absent or when the build
# uses sanitizers (MOQ_SANITIZE in CMakeCache.txt; ASan and valgrind cannot be combined).
set -euo pipefail
MOQ=${MOQ_BIN:?MOQ_BIN must point at the moq binary}
BUILD=$(dirname "$MOQ")
if ! command -v valgrind >/dev/null; then echo "SKIP: valgrind not installed"; exit 0; fi
if grep -qE '^MOQ_SANITIZE:[A-Z]*=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: sanitizer build ($(grep -E '^MOQ_SANITIZE' "$BUILD/CMakeCache.txt")); valgrind runs in the Release build"; exit 0
fi
TMP=${MOQ_TMP:-/tmp}/valgrind_cli.$$
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
VG=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect --track-origins=yes -q)
fails=0
# run WANT_STATUS ARGS...: runs moq under memcheck; WANT_STATUS is the exit code moq must give.
run() {
  local want=$1; shift
  local got=0
  OMP_NUM_THREADS=2 "${VG[@]}" --log-file="$TMP/vg.log" "$MOQ" "$@" >"$TMP/out" 2>"$TMP/err" || got=$?
  if [ "$got" = 99 ] || [ -s "$TMP/vg.log" ]; then
    echo "FAIL: memcheck errors in: moq $*"; cat "$TMP/vg.log"; fails=$((fails+1))
  elif [ "$got" != "$want" ]; then
    echo "FAIL: moq $*: exit $got, expected $want"; head -5 "$TMP/err"; fails=$((fails+1))
  else
    echo "ok   moq $* (exit $got)"
  fi
}
D=$TMP/good
run 0 synth "$D" --algo NVFP4 --layers 2 --hidden 64 --inter 128 --heads 4 --kv-heads 2 --vocab 288 --shards 2
cp "$(dirname "$0")"/../golden/tokenizer/tiny/tokenizer*.json "$D"/   # for moq run (279 tokens < vocab 288)
run 0 inspect "$D"
run 0 inspect --json "$D"
run 0 check --values "$D"
run 0 run "$D" -p "hi there" -n 3
run 0 config "$D"
run 0 resolve "$D" model.layers.0.self_attn.qkv_proj --kind linear
F=$TMP/fp8; "$MOQ" synth "$F" --algo FP8_PB_WO --layers 1 --hidden 128 --inter 128 --heads 2 --kv-heads 1 --vocab 64 >/dev/null
run 0 check --values "$F"
# Bad checkpoints: the error paths free what they allocated.
B=$TMP/bad_header; cp -r "$D" "$B"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": [1, 2,   ' | dd of="$B/model-00002-of-00002.safetensors" conv=notrunc status=none
run 3 inspect "$B"
C=$TMP/bad_contract; cp -r "$D" "$C"   # o_proj excluded but stored NVFP4: a config problem (4)
sed -i 's/"ignore": \["lm_head"\]/"ignore": ["lm_head", "model.layers.0.self_attn.o_proj"]/' "$C/config.json"
run 4 check --values "$C"
run 4 inspect "$C"
T=$TMP/truncated; cp -r "$D" "$T"; truncate -s -1 "$T/model-00001-of-00002.safetensors"
run 3 check "$T"
run 3 run "$T" -p hi -n 1
echo "valgrind_cli: $fails failure(s)"
[ "$fails" = 0 ]
