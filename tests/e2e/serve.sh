#!/usr/bin/env bash
# serve.sh — `moq serve` on loopback with curl, against a `moq synth` checkpoint (smollm2 golden
# tokenizer copied in). Oracles: `moq run` (greedy text for the same prompt, plain and --chat), each
# client's own text when alone (16 concurrent streaming clients must each get exactly that), the
# OpenAI error shape and status for each bad request, Prometheus text format. Then a short soak with
# random client disconnects, after which /metrics must show no running request and every KV page
# free, and SIGTERM must end the server with exit 0 (under ASan: no leak reported).
# MOQ_SERVE_DEVICE=cuda (the device script) runs the server and `moq run` on the GPU (head_dim 64).
set -u
MOQ=${MOQ_BIN:?MOQ_BIN not set}
HERE=$(cd "$(dirname "$0")" && pwd)
TOK=$HERE/../golden/tokenizer/smollm2
TMP=${MOQ_TMP:-/tmp}/e2e_serve.$$
mkdir -p "$TMP"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
export OMP_WAIT_POLICY=passive
fail=0
DEV=${MOQ_SERVE_DEVICE:-cpu}
SHAPE=()
[ "$DEV" = cpu ] || SHAPE=(--heads 2 --kv-heads 1) # the GPU forward takes head_dim 64, 128 or 256
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$MOQ" synth "$TMP/m" --algo NVFP4 --layers 2 --vocab 1024 --hidden 128 --inter 256 "${SHAPE[@]}" >/dev/null || { echo "FAIL: synth"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$TMP/m/"

start() { # extra serve flags...
    rm -f "$TMP/port"
    "$MOQ" serve "$TMP/m" --port 0 --port-file "$TMP/port" --threads 1 --ctx 256 --device "$DEV" "$@" 2>"$TMP/log" &
    SPID=$!
    for _ in $(seq 1 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
    [ -s "$TMP/port" ] || { echo "FAIL: server did not start"; cat "$TMP/log"; exit 1; }
    URL=http://127.0.0.1:$(cat "$TMP/port")
}
stop() { # expect exit 0 on SIGTERM
    kill -TERM "$SPID"
    wait "$SPID"
    local rc=$?
    SPID=
    [ "$rc" = 0 ] || { echo "FAIL: server exit $rc after SIGTERM"; cat "$TMP/log"; fail=1; }
    grep -q "ERROR: LeakSanitizer\|AddressSanitizer" "$TMP/log" && { echo "FAIL: sanitizer report"; cat "$TMP/log"; fail=1; }
}
waitc() { local p; p=$(jobs -p | grep -v "^$SPID$"); [ -z "$p" ] || wait $p 2>/dev/null; } # the clients, not the server
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d'+sys.argv[1]))" "$1"; }
post() { curl -s -o "$TMP/body" -w '%{http_code}' "$URL$1" -H 'Content-Type: application/json' --data-binary "$2"; }

start --max-batch 8
# ---- endpoints
[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] || { echo "FAIL: /health"; fail=1; }
[ "$(curl -s "$URL/v1/models" | field '["data"][0]["id"]')" = m ] || { echo "FAIL: /v1/models"; fail=1; }
want=$("$MOQ" run "$TMP/m" -p "Hello world" -n 12 --threads 1 --device "$DEV" --json 2>/dev/null | field '["text"]')
code=$(post /v1/completions '{"model":"m","prompt":"Hello world","max_tokens":12,"temperature":0}')
got=$(field '["choices"][0]["text"]' <"$TMP/body")
[ "$code" = 200 ] && [ "$got" = "$want" ] || { echo "FAIL: completions greedy [$got] != moq run [$want] ($code)"; cat "$TMP/body"; fail=1; }
[ "$(field '["usage"]["completion_tokens"]' <"$TMP/body")" = 12 ] || { echo "FAIL: usage"; cat "$TMP/body"; fail=1; }
want=$("$MOQ" run "$TMP/m" -p "Hi there" --chat -n 10 --threads 1 --device "$DEV" --json 2>/dev/null | field '["text"]')
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":10,"temperature":0}')
got=$(field '["choices"][0]["message"]["content"]' <"$TMP/body")
[ "$code" = 200 ] && [ "$got" = "$want" ] || { echo "FAIL: chat greedy [$got] != moq run --chat [$want] ($code)"; cat "$TMP/body"; fail=1; }
# streaming: the deltas joined equal the plain answer; ends with [DONE]
curl -sN "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":10,"temperature":0,"stream":true}' >"$TMP/sse"
tail -n 2 "$TMP/sse" | grep -q '^data: \[DONE\]$' || { echo "FAIL: stream does not end with [DONE]"; cat "$TMP/sse"; fail=1; }
sgot=$(python3 - "$TMP/sse" <<'EOF'
import json, sys
out = ""
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        for c in json.loads(line[6:])["choices"]:
            out += c["delta"].get("content", "") or ""
print(out)
EOF
)
[ "$sgot" = "$want" ] || { echo "FAIL: chat stream [$sgot] != [$want]"; fail=1; }
# logprobs, stop strings, seeded sampling
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":2}')
[ "$code" = 200 ] && [ "$(field '["choices"][0]["logprobs"]["content"][0]["top_logprobs"].__len__()' <"$TMP/body")" = 2 ] || { echo "FAIL: logprobs"; cat "$TMP/body"; fail=1; }
# top 20 and top 3 of the same greedy tokens: each list in non-increasing order, the
# greedy token first, the top 3 the first 3 of the top 20, the probabilities summing to at most 1
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":20}' >/dev/null
cp "$TMP/body" "$TMP/lp20"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":3}' >/dev/null
python3 - "$TMP/lp20" "$TMP/body" <<'EOF' || { echo "FAIL: top_logprobs order"; fail=1; }
import json, math, sys
a, b = (json.load(open(f))["choices"][0]["logprobs"]["content"] for f in sys.argv[1:3])
assert len(a) == len(b) >= 1, (len(a), len(b))
for ea, eb in zip(a, b):
    ta, tb = ea["top_logprobs"], eb["top_logprobs"]
    assert len(ta) == 20 and len(tb) == 3, (len(ta), len(tb))
    lp = [x["logprob"] for x in ta]
    assert all(x >= y for x, y in zip(lp, lp[1:])), lp
    assert ta[0]["bytes"] == ea["bytes"] and abs(ta[0]["logprob"] - ea["logprob"]) < 1e-9, (ta[0], ea)
    assert [(x["bytes"], x["logprob"]) for x in ta[:3]] == [(x["bytes"], x["logprob"]) for x in tb], (ta[:3], tb)
    assert sum(math.exp(x) for x in lp) <= 1 + 1e-9, lp
EOF
a=$(post /v1/completions '{"prompt":"Hello","max_tokens":8,"temperature":0.9,"top_k":40,"seed":5}'; field '["choices"][0]["text"]' <"$TMP/body")
b=$(post /v1/completions '{"prompt":"Hello","max_tokens":8,"temperature":0.9,"top_k":40,"seed":5}'; field '["choices"][0]["text"]' <"$TMP/body")
[ "$a" = "$b" ] || { echo "FAIL: same seed, different text"; fail=1; }
full=$(post /v1/completions '{"prompt":"Hello world","max_tokens":12,"temperature":0}' >/dev/null; field '["choices"][0]["text"]' <"$TMP/body")
stopper=${full:3:2}
if [ -n "$stopper" ]; then
    post /v1/completions "{\"prompt\":\"Hello world\",\"max_tokens\":12,\"temperature\":0,\"stop\":[\"$stopper\"]}" >/dev/null
    got=$(field '["choices"][0]["text"]' <"$TMP/body")
    [ "$got" = "${full%%"$stopper"*}" ] && [ "$(field '["choices"][0]["finish_reason"]' <"$TMP/body")" = stop ] || { echo "FAIL: stop [$stopper]: [$got] from [$full]"; fail=1; }
fi

# ---- 16 concurrent streaming clients get what each gets alone
for i in $(seq 1 16); do
    post /v1/completions "{\"prompt\":\"Story $i:\",\"max_tokens\":$((4 + i % 5)),\"temperature\":0}" >/dev/null
    field '["choices"][0]["text"]' <"$TMP/body" >"$TMP/alone.$i"
done
for i in $(seq 1 16); do
    curl -sN "$URL/v1/completions" -d "{\"prompt\":\"Story $i:\",\"max_tokens\":$((4 + i % 5)),\"temperature\":0,\"stream\":true}" >"$TMP/conc.$i" &
done
waitc
for i in $(seq 1 16); do
    python3 - "$TMP/conc.$i" >"$TMP/conc_text.$i" <<'EOF'
import json, sys
print("".join(json.loads(l[6:])["choices"][0]["text"] for l in open(sys.argv[1], encoding="utf-8")
              if l.startswith("data: ") and l.strip() != "data: [DONE]" and json.loads(l[6:])["choices"]))
EOF
    cmp -s "$TMP/alone.$i" "$TMP/conc_text.$i" || { echo "FAIL: concurrent client $i: [$(cat "$TMP/conc_text.$i")] alone [$(cat "$TMP/alone.$i")]"; fail=1; }
done

# ---- bad requests: status, OpenAI error object
bad() { # want-status what path body [curl args]
    local want=$1 what=$2 path=$3 body=$4; shift 4
    local code
    code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL$path" --data-binary "$body" "$@")
    [ "$code" = "$want" ] || { echo "FAIL: $what: HTTP $code, expected $want"; cat "$TMP/body"; fail=1; return; }
    python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e['message'] and e['type']" "$TMP/body" 2>/dev/null \
        || { echo "FAIL: $what: no OpenAI error object"; cat "$TMP/body"; fail=1; }
}
bad 400 "malformed JSON" /v1/completions '{"prompt": "x",'
bad 400 "not an object" /v1/completions '[1,2]'
bad 400 "wrong type" /v1/completions '{"prompt":"x","max_tokens":"five"}'
bad 400 "non-integer max_tokens" /v1/completions '{"prompt":"x","max_tokens":2.5}'
bad 400 "unknown field" /v1/completions '{"prompt":"x","frobnicate":1}'
bad 400 "messages on completions" /v1/completions '{"messages":[]}'
bad 400 "missing prompt" /v1/completions '{"max_tokens":3}'
bad 400 "n = 2" /v1/completions '{"prompt":"x","n":2}'
bad 400 "temperature 3" /v1/completions '{"prompt":"x","temperature":3}'
bad 400 "top_p 0" /v1/completions '{"prompt":"x","top_p":0}'
bad 400 "token id out of range" /v1/completions '{"prompt":[1,99999]}'
bad 400 "bad role" /v1/chat/completions '{"messages":[{"role":"robot","content":"x"}]}'
bad 400 "empty messages" /v1/chat/completions '{"messages":[]}'
bad 400 "over the context" /v1/completions '{"prompt":"x","max_tokens":100000}'
grep -q "maximum context length is 256" "$TMP/body" || { echo "FAIL: over-context message"; cat "$TMP/body"; fail=1; }
head -c 2000000 /dev/zero | tr '\0' 'a' >"$TMP/big"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/completions" --data-binary @"$TMP/big")
[ "$code" = 413 ] || { echo "FAIL: oversize body: HTTP $code, expected 413"; fail=1; }
bad 404 "unknown path" /v1/embeddings '{}'
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions")
[ "$code" = 405 ] || { echo "FAIL: GET on completions: $code, expected 405"; fail=1; }

# ---- metrics
curl -s "$URL/metrics" >"$TMP/metrics"
for k in moq_requests_total moq_prompt_tokens_total moq_generation_tokens_total moq_queue_depth moq_batch_size_bucket \
         moq_time_to_first_token_seconds_bucket moq_inter_token_latency_seconds_count; do
    grep -q "^$k" "$TMP/metrics" || { echo "FAIL: /metrics lacks $k"; fail=1; }
done
grep -vq '^#\|^[a-z_]*\({[^}]*}\)\? [0-9.e+-]*$' "$TMP/metrics" && { echo "FAIL: /metrics line not in Prometheus text format"; grep -v '^#\|^[a-z_]*\({[^}]*}\)\? [0-9.e+-]*$' "$TMP/metrics"; fail=1; }

# ---- soak: mixed requests, a third cut off mid-stream; then nothing may be left held
for i in $(seq 1 48); do
    case $((i % 3)) in
    0) curl -sN --max-time 0.$((RANDOM % 4))$((RANDOM % 9 + 1)) "$URL/v1/completions" -d "{\"prompt\":\"Soak $i\",\"max_tokens\":240,\"stream\":true}" >/dev/null 2>&1 & ;;
    1) curl -s "$URL/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Soak $i\"}],\"max_tokens\":6}" >/dev/null 2>&1 & ;;
    2) curl -sN "$URL/v1/completions" -d "{\"prompt\":\"Soak $i\",\"max_tokens\":5,\"stream\":true,\"temperature\":0.7}" >/dev/null 2>&1 & ;;
    esac
    [ $((i % 12)) = 0 ] && waitc
done
waitc
for _ in $(seq 1 50); do
    curl -s "$URL/metrics" >"$TMP/metrics"
    grep -q '^moq_running_requests 0$' "$TMP/metrics" && break
    sleep 0.1
done
total=$(sed -n 's/^moq_kv_pages_total //p' "$TMP/metrics")
free=$(sed -n 's/^moq_kv_pages_free //p' "$TMP/metrics")
grep -q '^moq_running_requests 0$' "$TMP/metrics" && [ "$free" = "$total" ] || { echo "FAIL: after the soak: pages free $free of $total"; grep "running\|queue" "$TMP/metrics"; fail=1; }
grep -q 'outcome="cancelled"} [1-9]' "$TMP/metrics" || echo "note: no request was cut off mid-stream in the soak"
stop

# ---- API key, and a budget that queues
start --api-key sekret --max-batch 8 --kv-cache-mem 512K
code=$(post /v1/completions '{"prompt":"x","max_tokens":2}')
[ "$code" = 401 ] || { echo "FAIL: no key: $code, expected 401"; fail=1; }
code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$URL/v1/completions" -H 'Authorization: Bearer sekret' -d '{"prompt":"x","max_tokens":2}')
[ "$code" = 200 ] || { echo "FAIL: with the key: $code"; cat "$TMP/body"; fail=1; }
[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] || { echo "FAIL: /health needs no key"; fail=1; }
for i in 1 2 3 4 5 6; do # more than the pool holds at once: they queue, all finish
    curl -s -o "$TMP/q.$i" -w '%{http_code}' "$URL/v1/completions" -H 'Authorization: Bearer sekret' -d '{"prompt":"Queue","max_tokens":100,"temperature":0}' >"$TMP/qc.$i" &
done
waitc
for i in 1 2 3 4 5 6; do [ "$(cat "$TMP/qc.$i")" = 200 ] || { echo "FAIL: queued request $i: $(cat "$TMP/qc.$i")"; fail=1; }; done
stop
[ "$fail" = 0 ] && echo "serve.sh: all passed"
exit $fail
