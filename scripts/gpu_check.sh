#!/usr/bin/env bash
# For a lent NVIDIA GPU: the GPU tests and the CUDA benchmark in one run of at most ten minutes.
#
#     bash scripts/gpu_check.sh          # PYTHON=... to choose the interpreter (default: .venv's)
#
# It first prints the driver's and NVRTC's versions and the device, and stops there, in seconds,
# with one line when they do not fit (a driver older than NVRTC's CUDA version), so that a lent
# GPU's time is not spent on a run that cannot work. Then the tests marked `gpu` (4 minutes at
# most), then scripts/bench_cuda.py: verification, matmul 1024 and 4096 against cuBLAS, a softmax
# and a row sum against PyTorch or CuPy (5.5 minutes at most). Put its figures into the README.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export TUNESEARCH_CACHE=${TUNESEARCH_CACHE:-$(mktemp -d)/tunesearch}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
"$PYTHON" scripts/bench_cuda.py --sizes --verify -1 --others "" || exit $?
timeout 240 "$PYTHON" -m pytest -q -m gpu tests/runtime/test_cuda.py
tests=$?
timeout 330 "$PYTHON" scripts/bench_cuda.py --verify 8 --sweep 24
bench=$?
echo "gpu tests: exit $tests; benchmark: exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
