#!/usr/bin/env bash
# tp_cli.sh — `--tp G [--ep] [--tp-backend]` on run, eval and bench model (issue 16), on checkpoints
# `moq synth` writes. What holds whatever the weights: greedy ids of --tp 2 / 4 (and --ep on MoE) equal
# the whole run's for a format whose row-parallel sums differ only by f32 reassociation (BF16, NVFP4:
# tests/dist/test_tp.c bounds the logits); `eval --tp 2 --ref DIR` against itself has KL near 0 and a
# top-1 agreement near 1; each refusal exits with its status and names what: heads not divisible
# (MOQ_ERR_UNSUPPORTED = 6), a 128x128 block cut, --tp 0 (usage, 1), NCCL without a GPU per rank,
# --batch with --tp.
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
TMP=${MOQ_TMP:-/tmp}/e2e_tp_cli.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
check() { # expected-rc description command...
    local want=$1 what=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL: $what: exit $rc, expected $want"; cat "$TMP/out" "$TMP/err"; fail=1; fi
}
says() { grep -q -- "$1" "$TMP/err" || { echo "FAIL: stderr lacks \"$1\":"; cat "$TMP/err"; fail=1; }; }
ids() { sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' "$TMP/out"; }
check 0 "synth NVFP4" "$MOQ" synth "$TMP/nvfp4" --algo NVFP4 --layers 2 --vocab 600
check 0 "synth BF16 qwen3moe" "$MOQ" synth "$TMP/moe" --algo BF16 --arch qwen3moe --experts 4 --layers 2 --vocab 600
check 0 "synth FP8_PB_WO" "$MOQ" synth "$TMP/pb" --algo FP8_PB_WO --layers 1 --vocab 600
for d in nvfp4 moe; do
    check 0 "run $d whole" "$MOQ" run "$TMP/$d" -p "It is a truth" -n 12 --threads 1 --json
    a=$(ids)
    for opt in "--tp 2" "--tp 4" "--tp 2 --ep" "--tp 4 --ep"; do
        [ "$d" = nvfp4 ] && [ "${opt#*--ep}" != "$opt" ] && continue
        check 0 "run $d $opt" "$MOQ" run "$TMP/$d" -p "It is a truth" -n 12 --threads 2 --json $opt
        b=$(ids)
        [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: $d $opt greedy ids [$b], whole run [$a]"; fail=1; }
    done
done
head -c 3000 "$(dirname "$0")/../data/text/pride_and_prejudice_ch3-4.txt" > "$TMP/text.txt"
check 0 "eval --tp 2 --ref" "$MOQ" eval "$TMP/nvfp4" --text "$TMP/text.txt" --ctx 64 --tp 2 --ref "$TMP/nvfp4" --json
awk 'match($0, /"kl_mean":[0-9.e+-]+/) { v = substr($0, RSTART + 10, RLENGTH - 10) + 0; ok = v < 1e-3 }
     match($0, /"top1_agree":[0-9.e+-]+/) { t = substr($0, RSTART + 13, RLENGTH - 13) + 0; ok2 = t > 0.98 } END { exit !(ok && ok2) }' "$TMP/out" \
    || { echo "FAIL: eval --tp 2 against the whole model: $(cat "$TMP/out")"; fail=1; }
check 0 "bench model --tp 2" "$MOQ" bench model "$TMP/nvfp4" --prompt 8 --decode 4 --tp 2 --json
check 6 "--tp 3 (4 heads)" "$MOQ" run "$TMP/nvfp4" -p hi -n 1 --tp 3
says "num_attention_heads 4 is not divisible by --tp 3"
check 6 "FP8_PB_WO --tp 2 (64 k_proj rows per rank)" "$MOQ" run "$TMP/pb" -p hi -n 1 --tp 2
says "k_proj: rank 0 of --tp 2: a shard edge at row 64 cuts a 128x128 quantization block"
check 1 "--tp 0" "$MOQ" run "$TMP/nvfp4" -p hi -n 1 --tp 0
says "--tp 0, expected 1..64"
check 1 "--tp-backend mpi" "$MOQ" run "$TMP/nvfp4" -p hi -n 1 --tp 2 --tp-backend mpi
check 1 "bench --batch with --tp" "$MOQ" bench model "$TMP/nvfp4" --tp 2 --batch 4
says "a moq_batch runs on one rank"
if ! nvidia-smi -L >/dev/null 2>&1; then
    check 6 "--tp-backend nccl without GPUs" "$MOQ" run "$TMP/nvfp4" -p hi -n 1 --tp 2 --tp-backend nccl
    says "nccl"
fi
exit $fail
