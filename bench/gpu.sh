#!/usr/bin/env bash
# The GPU check and benchmark, for a machine with one NVIDIA GPU and python3 with torch (nothing downloadable there).
#
# First the GPU tests (tests/engine/backends/test_gpu_cuda.py: graphs, pinned staging, instance streams, placement,
# IO binding, NVML, on the real device), then bench/gpu_bench.py: a ResNet-50-sized CNN with torch alone (plain and
# hand-tuned), onnxruntime alone where it has the CUDA provider, the engine in process (sequential batches, graphs
# on and off, one and two instances under concurrent callers), and the standalone v2 app under uvicorn with
# /metrics scraped under load; NVML readings per phase. Writes gpu_tests.txt, gpu_results.json, gpu_results.md and
# the logs under $OUT (default bench/results/gpu). `python -m bench --gpu-results $OUT/gpu_results.json` then puts
# its tables and targets into docs/benchmarks.md.
#
# Packages the GPU image lacks (uvicorn, httptools, orjson, grpcio's health and reflection, the protobuf and grpcio
# the engine's stubs were made with)
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
need = ["torch", "numpy", "onnxruntime", "orjson", "google.protobuf", "uvicorn", "grpc_health", "grpc_reflection",
        "pynvml", "psutil", "prometheus_client", "pytest"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [[ -n "$missing" ]]; then
    echo "missing Python packages: $missing (run bench/gpu_wheels.sh where pip works and carry .whl)" >&2
    exit 3
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

"$PY" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"

# the tests need neither Django nor the suite's fixtures (--noconftest); a failure is reported and the bench runs on
set +e
timeout "${GPU_TESTS_TIMEOUT_S:-150}" "$PY" -m pytest --noconftest -p no:cacheprovider -q -rs \
    tests/engine/backends/test_gpu_cuda.py 2>&1 | tee "$OUT/gpu_tests.txt"
tests_status=${PIPESTATUS[0]}
set -e
echo "GPU tests exit status: $tests_status"

# the whole run is bounded so a hang cannot spend a GPU session's minutes; gpu_bench bounds each call too
set -o pipefail
timeout "${GPU_BENCH_TIMEOUT_S:-420}" "$PY" -m bench.gpu_bench --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_log.txt"
exit "$tests_status"
