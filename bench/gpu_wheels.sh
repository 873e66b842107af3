#!/usr/bin/env bash
# Download, where pip works, the wheels bench/gpu.sh needs on the GPU image (Python 3.12, x86-64) into .whl/.
# Versions follow requirements.txt (grpcio too: the health and reflection stubs check the grpcio they run on).
# .whl/ is git-ignored; name it in the device call's `carry`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pin() { grep -iE "^$1(\[[^]]*\])?==" requirements.txt | sed -E 's/\[[^]]*\]//' | head -1; }
packages=("$(pin orjson)" "$(pin protobuf)" "$(pin uvicorn)" "httptools==0.9.0" "$(pin grpcio)" "$(pin grpcio-reflection)"
    "$(pin grpcio-health-checking)")
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${packages[@]}"
ls -l .whl
