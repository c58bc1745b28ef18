#!/usr/bin/env bash
# synth_bench_cli.sh — small things a user meets (issue 10):
#  - `moq synth` writes a byte-level tokenizer, so `moq run` works on its output (the `make demo`
#    checkpoint included); its encodings equal Hugging Face `tokenizers`' (tests/golden/synth_tokenizer,
#    written by gen.py there); below 259 ids no tokenizer is written and run says what is missing;
#  - `moq bench linear|moe --algo` takes the kernel pair names and ModelOpt's quant_algo names alike
#    (the pairs restated here from docs/PERFORMANCE.md and NUMERICS: NVFP4 = W4A4, W4A16_NVFP4 =
#    NVFP4 weights with unquantized activations, FP8 = static per-tensor, FP8_PER_CHANNEL_PER_TOKEN =
#    per-row weights and per-token activations, FP8_PB_WO = 128x128 blocks, MXFP8);
#  - `moq bench SUB --help` prints SUB's usage first.
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
HERE=$(cd "$(dirname "$0")" && pwd)
GOLD=$HERE/../golden/synth_tokenizer/expected.tsv
TMP=${MOQ_TMP:-/tmp}/e2e_synth_bench.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
check() { # expected-rc description command...
    local want=$1 what=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL: $what: exit $rc, expected $want"; cat "$TMP/out" "$TMP/err"; fail=1; fi
}

# ---- synth's tokenizer ----
check 0 "synth default" "$MOQ" synth "$TMP/ck"
[ -f "$TMP/ck/tokenizer.json" ] && [ -f "$TMP/ck/tokenizer_config.json" ] || { echo "FAIL: synth wrote no tokenizer"; fail=1; }
want_sha=$(head -1 "$GOLD" | cut -f2)
got_sha=$(sha256sum "$TMP/ck/tokenizer.json" | cut -d' ' -f1)
[ "$want_sha" = "$got_sha" ] || { echo "FAIL: synth's tokenizer.json changed (sha256 $got_sha, golden $want_sha): re-run python3 tests/golden/synth_tokenizer/gen.py build/moq and review"; fail=1; }
n=0
while IFS=$'\t' read -r ids text; do
    check 0 "tokenize \"$text\"" "$MOQ" tokenize "$TMP/ck" --text "$text"
    got=$(tr -s ' \n' ' ' < "$TMP/out" | sed 's/^ //; s/ $//')
    [ "$got" = "$ids" ] || { echo "FAIL: tokenize \"$text\": [$got], Hugging Face tokenizers gives [$ids]"; fail=1; }
    n=$((n + 1))
done < <(tail -n +2 "$GOLD")
[ "$n" -ge 14 ] || { echo "FAIL: only $n golden cases read"; fail=1; }
check 0 "run on synth output" "$MOQ" run "$TMP/ck" -p "hi" -n 4 --threads 1 --json
grep -q '"generated_tokens":4' "$TMP/out" || { echo "FAIL: run did not generate 4 tokens"; cat "$TMP/out"; fail=1; }
# the `make demo` checkpoint (Makefile: synth demo --algo NVFP4 --layers 2 --shards 2)
check 0 "synth demo" "$MOQ" synth "$TMP/demo" --algo NVFP4 --layers 2 --shards 2
check 0 "run demo -p hi -n 4" "$MOQ" run "$TMP/demo" -p hi -n 4
check 0 "synth MoE" "$MOQ" synth "$TMP/moe" --arch qwen3moe --algo FP8 --layers 1 --hidden 64 --inter 64 --experts 4 --top-k 2
check 0 "run MoE synth output" "$MOQ" run "$TMP/moe" -p "hello" -n 2 --threads 1
check 0 "synth --vocab 100" "$MOQ" synth "$TMP/small" --vocab 100 --hidden 64 --inter 64 --heads 4 --kv-heads 2
grep -q "no tokenizer" "$TMP/out" || { echo "FAIL: synth --vocab 100 does not say it wrote no tokenizer"; cat "$TMP/out"; fail=1; }
[ ! -e "$TMP/small/tokenizer.json" ] || { echo "FAIL: a 100-id checkpoint got a byte-level tokenizer"; fail=1; }
check 2 "run without tokenizer (MOQ_ERR_IO)" "$MOQ" run "$TMP/small" -p hi -n 1
grep -q "tokenizer.json" "$TMP/err" || { echo "FAIL: run without tokenizer does not name tokenizer.json"; cat "$TMP/err"; fail=1; }

# ---- bench --algo: pair names and ModelOpt names ----
for pair in "nvfp4_w4a4 NVFP4" "nvfp4_w4a16 W4A16_NVFP4" "fp8_tensor FP8" "fp8_row FP8_PER_CHANNEL_PER_TOKEN" \
            "fp8_blk128 FP8_PB_WO" "mxfp8 MXFP8" "bf16 BF16"; do
    set -- $pair
    for name in "$1" "$2" "$(echo "$2" | tr 'A-Z' 'a-z')"; do
        check 0 "bench linear --algo $name" "$MOQ" bench linear --algo "$name" --m 1 --n 128 --k 256 --threads 1 --hot-only --json
        grep -q "\"algo\":\"$1\"" "$TMP/out" || { echo "FAIL: bench linear --algo $name does not run $1"; cat "$TMP/out"; fail=1; }
    done
done
for name in NVFP4 nvfp4_w4a4 FP8_PB_WO; do
    check 0 "bench moe --algo $name" "$MOQ" bench moe --algo "$name" --experts 4 --topk 2 --hidden 128 --inter 128 --threads 1 --json
done
grep -q '"algo":"fp8_blk128"' "$TMP/out" || { echo "FAIL: bench moe --algo FP8_PB_WO does not run fp8_blk128"; cat "$TMP/out"; fail=1; }
check 1 "bench linear --algo NVFP5" "$MOQ" bench linear --algo NVFP5 --hot-only
grep -q "nvfp4_w4a4 (NVFP4)" "$TMP/err" || { echo "FAIL: unknown --algo does not list the names"; cat "$TMP/err"; fail=1; }
check 0 "bench moe --algo fp8_row (per-channel FP8 experts)" "$MOQ" bench moe --algo fp8_row --tokens 4 --experts 4 --topk 2 --hidden 256 --inter 256

# ---- bench SUB --help ----
for sub in linear moe model; do
    check 0 "bench $sub --help" "$MOQ" bench "$sub" --help
    head -1 "$TMP/out" | grep -q "^usage: moq bench $sub" || { echo "FAIL: moq bench $sub --help starts with: $(head -1 "$TMP/out")"; fail=1; }
    check 0 "help bench $sub" "$MOQ" help bench "$sub"
    head -1 "$TMP/out" | grep -q "^usage: moq bench $sub" || { echo "FAIL: moq help bench $sub starts with: $(head -1 "$TMP/out")"; fail=1; }
done
check 0 "bench --help" "$MOQ" bench --help
[ "$(grep -c '^usage: moq bench' "$TMP/out")" = 3 ] || { echo "FAIL: moq bench --help does not list the three subcommands"; fail=1; }
exit $fail
