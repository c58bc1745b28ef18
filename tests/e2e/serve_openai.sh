#!/usr/bin/env bash
# serve_openai.sh — `moq serve` driven by the official `openai` Python client (installed by
# scripts/setup.sh; this test skips with a message when it is missing): models.list, chat and
# completions, streaming and not, logprobs, usage, an API key, and the client's own error classes
# for a 400 and a 401. Greedy answers are compared with `moq run` for the same prompt.
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
HERE=$(cd "$(dirname "$0")" && pwd)
TOK=$HERE/../golden/tokenizer/smollm2
python3 -c 'import openai' 2>/dev/null || { echo "SKIP: the openai Python package is not installed (scripts/setup.sh installs it with pip)"; exit 77; }
TMP=${MOQ_TMP:-/tmp}/e2e_serve_openai.$$
mkdir -p "$TMP"
export OMP_WAIT_POLICY=passive
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$MOQ" synth "$TMP/m" --algo FP8 --layers 2 --vocab 1024 --hidden 128 --inter 256 >/dev/null || { echo "FAIL: synth"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$TMP/m/"
"$MOQ" serve "$TMP/m" --port 0 --port-file "$TMP/port" --threads 1 --ctx 256 --api-key k123 2>"$TMP/log" &
SPID=$!
for _ in $(seq 1 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "FAIL: server did not start"; cat "$TMP/log"; exit 1; }
"$MOQ" run "$TMP/m" -p "Hello world" -n 10 --threads 1 --json 2>/dev/null >"$TMP/run_plain.json"
"$MOQ" run "$TMP/m" -p "Hi there" --chat -n 10 --threads 1 --json 2>/dev/null >"$TMP/run_chat.json"
python3 - "$(cat "$TMP/port")" "$TMP" <<'PY'
import json, sys
import openai
port, tmp = sys.argv[1], sys.argv[2]
want_plain = json.load(open(f"{tmp}/run_plain.json"))["text"]
want_chat = json.load(open(f"{tmp}/run_chat.json"))["text"]
c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k123", max_retries=0, timeout=60)
fails = []
def check(ok, what):
    if not ok: fails.append(what)
models = c.models.list()
check([m.id for m in models.data] == ["m"], f"models.list: {models}")
r = c.completions.create(model="m", prompt="Hello world", max_tokens=10, temperature=0)
check(r.choices[0].text == want_plain, f"completions: {r.choices[0].text!r} != moq run {want_plain!r}")
check(r.usage.completion_tokens == 10 and r.usage.prompt_tokens > 0, f"completions usage: {r.usage}")
s = "".join(ch.choices[0].text for ch in c.completions.create(model="m", prompt="Hello world", max_tokens=10, temperature=0, stream=True) if ch.choices)
check(s == want_plain, f"completions stream: {s!r} != {want_plain!r}")
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there"}], max_tokens=10, temperature=0)
check(r.choices[0].message.content == want_chat, f"chat: {r.choices[0].message.content!r} != moq run --chat {want_chat!r}")
check(r.choices[0].message.role == "assistant" and r.choices[0].finish_reason in ("stop", "length"), f"chat fields: {r}")
parts, usage = [], None
for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there"}], max_tokens=10, temperature=0,
                                    stream=True, stream_options={"include_usage": True}):
    if ch.usage: usage = ch.usage
    for cc in ch.choices:
        parts.append(cc.delta.content or "")
check("".join(parts) == want_chat, f"chat stream: {''.join(parts)!r} != {want_chat!r}")
check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, f"stream usage: {usage}")
r = c.chat.completions.create(model="m", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                              max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
lp = r.choices[0].logprobs.content
check(len(lp) >= 1 and len(lp[0].top_logprobs) == 3 and lp[0].logprob <= 0, f"logprobs: {lp}")
check(abs(lp[0].logprob - lp[0].top_logprobs[0].logprob) < 1e-6, "greedy token is not the top logprob")
n_lp, n_tok = 0, None
for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0,
                                    logprobs=True, top_logprobs=1, stream=True, stream_options={"include_usage": True}):
    if ch.usage: n_tok = ch.usage.completion_tokens
    for cc in ch.choices:
        if cc.logprobs and cc.logprobs.content: n_lp += len(cc.logprobs.content)
check(n_tok is not None and n_lp == n_tok, f"streamed logprobs: {n_lp} entries for {n_tok} tokens")
r1 = c.completions.create(model="m", prompt="Once", max_tokens=8, temperature=0.8, top_p=0.9, seed=11)
r2 = c.completions.create(model="m", prompt="Once", max_tokens=8, temperature=0.8, top_p=0.9, seed=11)
check(r1.choices[0].text == r2.choices[0].text, "same seed, different text")
try:
    c.completions.create(model="m", prompt="x", max_tokens=100000)
    check(False, "over-context request accepted")
except openai.BadRequestError as e:
    check("maximum context length" in str(e), f"400 message: {e}")
try:
    openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
    check(False, "wrong key accepted")
except openai.AuthenticationError:
    pass
for f in fails: print("FAIL:", f)
sys.exit(1 if fails else 0)
PY
rc=$?
kill -TERM "$SPID"; wait "$SPID"; src=$?; SPID=
[ "$src" = 0 ] || { echo "FAIL: server exit $src after SIGTERM"; cat "$TMP/log"; rc=1; }
[ "$rc" = 0 ] && echo "serve_openai.sh: all passed"
exit $rc
