#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang + ASan + UBSan and run each
# for SECONDS (default 60) with a seed corpus and a dictionary. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# Writes build-fuzz/fuzz-report.txt (one line per target: seconds, execs, coverage); crashing inputs go
# to build-fuzz/artifacts/ and make the script exit non-zero. Regression inputs live in
# tests/fuzz/regress/<target>/ and are replayed by the normal test suite (tests/e2e/fuzz_regress.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
scripts/setup.sh clang libclang-rt-14-dev libomp-dev
CC=clang cmake -S . -B build-fuzz -DMOQ_FUZZ=ON -DMOQ_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=($(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//'))
cmake --build build-fuzz -j "$(nproc)" --target moq "${targets[@]}" >/dev/null
mkdir -p build-fuzz/artifacts
report=build-fuzz/fuzz-report.txt; : > "$report"
status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t; mkdir -p "$corpus"
  short=${t#fuzz_}
  # Seed corpora: the project's own generated files and the real ModelOpt configs (configuring
  # build-fuzz unpacked tests/data/modelopt_configs.tar.xz into build-fuzz/testdata).
  case "$short" in
    safetensors)
      build-fuzz/moq synth build-fuzz/seed-ckpt --layers 1 --hidden 32 --inter 32 --heads 2 --kv-heads 1 --vocab 16 --shards 2 >/dev/null
      cp build-fuzz/seed-ckpt/*.safetensors "$corpus/" ;;
    checkpoint)
      i=0
      for f in build-fuzz/testdata/modelopt_configs/*config.json; do
        { cat "$f"; printf '\0{"weight_map":{"a":"model-00001-of-00001.safetensors","b":"model-00001-of-00001.safetensors"}}'; } > "$corpus/seed$i"; i=$((i+1))
      done ;;
    config)
      # First byte: profile (value % 3) and layout (bit 2: 0 = hf_quant_config.json, 1 = config.json).
      i=0
      for f in build-fuzz/testdata/modelopt_configs/*.json; do
        for p in 0 1 2; do
          case "$f" in *hf_quant_config.json) sel=$p ;; *) sel=$((p + 4)) ;; esac
          { printf "\\$(printf '%03o' $sel)"; cat "$f"; } > "$corpus/seed$i.$p"
        done; i=$((i+1))
      done ;;
    tokenizer)
      # Texts: the project's docs and the tokenizer golden strings (multi-byte UTF-8, digits, specials).
      for f in README.md docs/*.md; do cp "$f" "$corpus/"; done
      [ -d tests/golden/tokenizer ] && for f in tests/golden/tokenizer/*.json; do cp "$f" "$corpus/"; done ;;
    gguf)
      # Small valid GGUF v3 files: every metadata value type, arrays, an alignment, F32/F16/Q8_0/Q4_0/Q4_1 tensors.
      python3 - "$corpus" <<'PY'
import struct, sys
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
def kv(k, t, v): return s(k) + struct.pack("<I", t) + v
def gguf(kvs, ts, align=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)) + b"".join(kvs)
    off, data = 0, b""
    for name, ne, ty, nbytes in ts:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", ty, off)
        data += bytes((i * 37 + 11) & 255 for i in range(nbytes)); pad = -len(data) % align; data += b"\0" * pad; off = len(data)
    out += b"\0" * (-len(out) % align)
    return out + data
kvs = [kv("general.architecture", 8, s("llama")), kv("llama.block_count", 4, struct.pack("<I", 1)),
       kv("f", 6, struct.pack("<f", 1e-5)), kv("b", 7, b"\1"), kv("i64", 11, struct.pack("<q", -3)),
       kv("toks", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("ab")),
       kv("types", 9, struct.pack("<IQ", 5, 3) + struct.pack("<iii", 1, 1, 3))]
ts = [("token_embd.weight", [32, 3], 8, 3 * 34), ("n", [32], 0, 128), ("h", [4, 2], 1, 16),
      ("q4", [32, 2], 2, 36), ("q41", [64], 3, 40)]
open(sys.argv[1] + "/seed_all.gguf", "wb").write(gguf(kvs, ts))
open(sys.argv[1] + "/seed_align64.gguf", "wb").write(gguf(kvs + [kv("general.alignment", 4, struct.pack("<I", 64))], ts, 64))
open(sys.argv[1] + "/seed_empty.gguf", "wb").write(gguf([], []))
PY
      ;;
    *) for f in build-fuzz/testdata/modelopt_configs/*.json; do cp "$f" "$corpus/"; done ;;
  esac
  [ -d "tests/fuzz/regress/$t" ] && cp tests/fuzz/regress/$t/* "$corpus/" 2>/dev/null || true
  dict=tests/fuzz/$short.dict; dictarg=(); [ -f "$dict" ] && dictarg=(-dict="$dict")
  log=build-fuzz/$t.log
  if ! ./build-fuzz/$t "$corpus" "${dictarg[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix=build-fuzz/artifacts/$t- -print_final_stats=1 >"$log" 2>&1; then
    status=1; echo "FUZZ FAILURE: $t (see $log and build-fuzz/artifacts/)"; tail -30 "$log"
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  printf '%-22s %6ss  execs %-10s cov %-6s ft %s\n' "$t" "$secs" "$execs" "$cov" "$ft" | tee -a "$report"
done
exit $status
