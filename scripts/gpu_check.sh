#!/usr/bin/env bash
# For a lent NVIDIA GPU: the GPU tests, a model tuned and run, and the CUDA benchmark in one run
# of at most eight minutes.
#
#     bash scripts/gpu_check.sh          # PYTHON=... to choose the interpreter (default: .venv's)
#
# The interpreter needs tunesearch's test dependencies (`pip install -e ".[test]"`).
#
# It first prints the driver's and NVRTC's versions and the device, and stops there, in seconds,
# with one line when they do not fit (a driver older than NVRTC's CUDA version), so that a lent
# GPU's time is not spent on a run that cannot work. Then the tests marked `gpu` (the catalogue's
# kernels at random configs, bundled PyTorch exports against onnxruntime; 3 minutes at most), the
# README's main job on the GPU (tune the bundled tiny_cnn for 45 s, run it from the database;
# 1.5 minutes at most), then scripts/bench_cuda.py: verification, matmul 1024 and 4096 against
# cuBLAS, a softmax and a row sum against PyTorch or CuPy (3 minutes at most). Put its figures
# into the README.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export TUNESEARCH_CACHE=${TUNESEARCH_CACHE:-$(mktemp -d)/tunesearch}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
"$PYTHON" scripts/bench_cuda.py --sizes --verify -1 --others "" || exit $?
timeout 180 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_cuda.py \
    tests/onnx/test_exports.py
tests=$?
db=$(mktemp -d)/gpu.db
timeout 90 bash -c "'$PYTHON' -m tunesearch tune example:tiny_cnn --device cuda --db '$db' \
    --time-budget 45 --quiet && '$PYTHON' -m tunesearch run example:tiny_cnn --device cuda \
    --db '$db'"
model=$?
timeout 180 "$PYTHON" scripts/bench_cuda.py --verify 8 --sweep 16
bench=$?
echo "gpu tests: exit $tests; tune and run: exit $model; benchmark: exit $bench"
[ "$tests" -eq 0 ] && [ "$model" -eq 0 ] && [ "$bench" -eq 0 ]
