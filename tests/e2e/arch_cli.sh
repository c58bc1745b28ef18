#!/usr/bin/env bash
# arch_cli.sh — `moq run`, `moq check` and `moq inspect` on the tiny transformers models of
# tests/data/hf_tiny (README there). `moq run -f prompt.bin -n 8` must print transformers' greedy
# continuation: the ids below are the `greedy` tensor of each ref.safetensors (transformers 5.17's
# model.generate), written out here so the test needs no Python. Each folder's tokenizer.json maps
# byte b to id b, so the prompt bytes are the prompt ids. check must be clean; inspect must not warn
# that `moq run` refuses the architecture.
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/../data/hf_tiny
TMP=${MOQ_TMP:-/tmp}/e2e_arch_cli.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
while read -r model want; do
    "$MOQ" run "$DATA/$model" -f "$DATA/prompt.bin" -n 8 --threads 2 --json >"$TMP/out" 2>"$TMP/err"
    rc=$?
    got=$(sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' "$TMP/out")
    if [ "$rc" != 0 ] || [ "$got" != "$want" ]; then
        echo "FAIL: run $model: exit $rc, ids [$got], transformers [$want]"; cat "$TMP/err"; fail=1
    fi
    "$MOQ" check "$DATA/$model" >"$TMP/out" 2>&1 || { echo "FAIL: check $model"; cat "$TMP/out"; fail=1; }
    "$MOQ" inspect "$DATA/$model" >"$TMP/out" 2>&1 || { echo "FAIL: inspect $model"; cat "$TMP/out"; fail=1; }
    if grep -q "refuses it" "$TMP/out"; then echo "FAIL: inspect $model says run refuses it"; fail=1; fi
done <<'LIST'
deepseek_v3_a 45,104,114,67,104,114,74,97
deepseek_v3_b 54,54,54,54,54,54,54,54
qwen3_5_moe 62,91,5,79,104,108,44,113
qwen3_5 31,31,109,76,76,90,0,65
gemma3_text 54,54,54,54,54,54,54,54
gemma4_text 5,9,8,23,36,36,124,29
llama4_a 44,44,42,42,42,42,42,42
gpt_oss 67,44,107,18,40,74,51,11
deepseek_v4 70,94,113,97,92,96,48,92
minimax_m2 90,67,67,67,67,67,67,67
LIST
exit $fail
