#!/usr/bin/env bash
# device_fixtures.sh — on the GPU machine: install ModelOpt 0.47 from the wheels in .whl/ (fetched
# with pip download, see tests/data/modelopt_real/README.md), make every fixture of
# scripts/modelopt_fixtures.py with their oracle logits, and pack them into $OUT/modelopt_real.tar.gz.
# Usage (repository root): OUT=dir bash scripts/device_fixtures.sh [seconds for the python step]
set -uo pipefail
OUT=${OUT:?OUT not set}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
# pulp is imported only by ModelOpt's NAS / AutoQuantize solver (also in annotations): a stub will do
mkdir -p /tmp/stub/pulp && printf 'def __getattr__(name):\n    return type(name, (), {})\n' > /tmp/stub/pulp/__init__.py
export PYTHONPATH=/tmp/site:/tmp/stub PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${1:-300}" python3 scripts/modelopt_fixtures.py /tmp/fx --device cuda 2>&1 | tee "$OUT/log.txt"
tar -C /tmp/fx -czf "$OUT/modelopt_real.tar.gz" . && ls -la /tmp/fx /tmp/fx/* | head -80
