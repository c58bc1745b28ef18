#!/usr/bin/env bash
# `moq tokenize` on the generated tokenizers in tests/golden/tokenizer: ids match the `tokenizers`
# package's (expected.json, row "Hello world" of each style), decode(encode(text)) gives the text back,
# --chat renders the ChatML header, and a missing directory exits with MOQ_ERR_IO (2).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
g="$root/tests/golden/tokenizer"
for style in gpt2 llama3 qwen2 smollm2; do
  # the reference ids for "Hello world" (plain flags) from expected.json, one row per line
  want=$(grep "\"tokenizer\": \"$style\", \"flags\": \[\"plain\"\], \"text_hex\": \"48656c6c6f20776f726c64\"" "$g/expected.json" \
         | sed 's/.*"ids": \[\([^]]*\)\].*/\1/; s/,//g')
  got=$("$MOQ_BIN" tokenize "$g/$style" --text "Hello world")
  [ -n "$want" ] && [ "$got" = "$want" ] || { echo "$style: got [$got], want [$want]" >&2; exit 1; }
  text=$'tabs\tand  spaces 1234567 héllo 日本 😀 <|im_end|>\n'
  back=$("$MOQ_BIN" tokenize "$g/$style" --decode "$(printf '%s' "$text" | "$MOQ_BIN" tokenize "$g/$style")")
  [ "$back" = "${text%$'\n'}" ] || { echo "$style: round trip gave [$back]" >&2; exit 1; }
done
"$MOQ_BIN" tokenize "$g/smollm2" --chat --text "hi" --pieces | grep -q $'^1\t<|im_start|>$'
# the user message holds the text, with and without --system ("Hello world" ids inside the chat ids)
hw=$("$MOQ_BIN" tokenize "$g/smollm2" --text "Hello world")
for sys in "" "--system=Be brief."; do
  chat=$("$MOQ_BIN" tokenize "$g/smollm2" --chat --text "Hello world" ${sys:+"$sys"})
  case " $chat " in *" $hw "*) ;; *) echo "--chat $sys: [$chat] lacks the user text [$hw]" >&2; exit 1 ;; esac
done
rc=0; "$MOQ_BIN" tokenize "$g/does-not-exist" --text x 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "missing directory: exit $rc, expected 2" >&2; exit 1; }
