#!/usr/bin/env bash
# The GPU benchmark, for a machine with one NVIDIA GPU and python3 with torch (nothing downloadable there).
#
# Measures a ResNet-50-sized CNN (TorchScript, exported here at run time) on the engine's pytorch backend on
# CUDA: torch alone and the engine in process at batch 1..256, then the standalone v2 app under uvicorn at
# 1/16/64 connections, with NVML readings per phase. Writes gpu_results.json, gpu_results.md and the logs
# under $OUT (default bench/results/gpu). Copy gpu_results.json to bench/results/ and `make bench` puts its
# tables into docs/benchmarks.md.
#
# Packages the GPU image lacks (uvicorn, httptools, orjson, the protobuf the engine's stubs were made with)
# travel as wheels in .whl/: run bench/gpu_wheels.sh where pip works, then carry .whl with the tree.
# Extra arguments go to bench/gpu_bench.py (e.g. --quick, --batches 1,8,64, --queue-delay-us 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/bench/results/gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not available"
missing=$("$PY" - <<'PY'
import importlib.util
need = ["torch", "numpy", "onnxruntime", "orjson", "google.protobuf", "uvicorn", "pynvml", "psutil", "prometheus_client"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [[ -n "$missing" ]]; then
    echo "missing Python packages: $missing (run bench/gpu_wheels.sh where pip works and carry .whl)" >&2
    exit 3
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

# the whole run is bounded so a hang cannot spend a GPU session's minutes; gpu_bench bounds each call too
set -o pipefail
timeout "${GPU_BENCH_TIMEOUT_S:-540}" "$PY" -m bench.gpu_bench --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_log.txt"
