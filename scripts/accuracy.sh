#!/usr/bin/env bash
# accuracy.sh — the SmolLM2 table of docs/ACCURACY.md: `moq eval` of every format that `make formats`
# writes (and NVFP4 re-quantized to FP8 at load, both forms) against the BF16 conversion, over
# tests/data/text/pride_and_prejudice_ch1-2.txt (windows of 256 tokens), printed as Markdown rows.
# The static scales were calibrated on chapters 3-4 (scripts/formats.sh), so these are out of sample.
#
# usage: scripts/accuracy.sh     env: MOQ_CACHE (default ~/.cache/moq), MOQ_BIN, MOQ_THREADS,
#        EVAL_LINES (only the first N lines of the text: a quick run)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
moq="${MOQ_BIN:-$root/build/moq}"
cache="${MOQ_CACHE:-$HOME/.cache/moq}"
threads="${MOQ_THREADS:-$(nproc)}"
text="$root/tests/data/text/pride_and_prejudice_ch1-2.txt"
if [ -n "${EVAL_LINES:-}" ]; then head -n "$EVAL_LINES" "$text" > "/tmp/accuracy_text.$$"; text="/tmp/accuracy_text.$$"; fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
base="$cache/SmolLM2-135M-Instruct"
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
row() { # label dir [ref] [options...]
  local label=$1 dir=$2 ref=$3; shift 3
  [ -d "$dir" ] || { echo "| $label | (missing: $dir) |"; return; }
  local j
  j=$("$moq" eval "$dir" --text "$text" --ctx 256 --threads "$threads" --ref "$ref" --json "$@" 2>/dev/null)
  printf '| %s | %.4f | %.4g | %.4g | %.2f %% |\n' "$label" "$(field ppl <<< "$j")" "$(field kl_mean <<< "$j")" \
    "$(field kl_max <<< "$j")" "$(awk -v a="$(field top1_agree <<< "$j")" 'BEGIN { print 100 * a }')"
}
echo "| format | perplexity | KL mean (nats) | KL max | top-1 agreement |"
echo "|---|---:|---:|---:|---:|"
row "BF16 (reference)" "$base-bf16" "$base-bf16"
row "FP8 (per-tensor, static)" "$base-fp8" "$base-bf16"
row "FP8 + FP8 KV cache" "$base-fp8-kv" "$base-bf16"
row "FP8_PER_CHANNEL_PER_TOKEN" "$base-fp8-pcpt" "$base-bf16"
row "MXFP8" "$base-mxfp8" "$base-bf16"
row "MIXED_PRECISION (recipes/smollm2_mixed.json)" "$base-mixed" "$base-bf16"
row "W4A16_NVFP4" "$base-w4a16" "$base-bf16"
row "NVFP4 (W4A4)" "$base-nvfp4" "$base-bf16"
row "NVFP4 --nvfp4-as fp8" "$base-nvfp4" "$base-bf16" --nvfp4-as fp8
row "NVFP4 --nvfp4-as fp8, vs NVFP4 as stored" "$base-nvfp4" "$base-nvfp4" --nvfp4-as fp8
row "NVFP4 --nvfp4-as fp8-channel" "$base-nvfp4" "$base-bf16" --nvfp4-as fp8-channel
row "NVFP4 --nvfp4-as fp8-channel, vs NVFP4 as stored" "$base-nvfp4" "$base-nvfp4" --nvfp4-as fp8-channel
rm -f "/tmp/accuracy_text.$$"
