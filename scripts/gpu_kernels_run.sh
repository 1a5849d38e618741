#!/usr/bin/env bash
# One device call for the kernels (issue 4): environment, GPU tests, kernel table.
# Run on the GPU machine from the repo root with .whl carried (gguf wheel for tests).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pticache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch; from cuda.bindings import nvrtc; print('torch', torch.__version__, 'nvrtc', nvrtc.nvrtcVersion()[1:])" | tee -a "$OUT/env.txt"
python3 -m pip list 2>/dev/null | grep -i -E '^(cuda|nvidia-cuda-nvrtc)' | tee -a "$OUT/env.txt"
if [ "${MAKE_TEST_GPU:-0}" = 1 ]; then
  date -u | tee "$OUT/make_test_gpu.log"
  timeout ${TEST_TIMEOUT:-300} make test-gpu PYTHON=python3 2>&1 | tee -a "$OUT/make_test_gpu.log" | tail -15
elif [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu -p no:cacheprovider ${PYTEST_ARGS:-tests/gpu} 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
timeout ${BENCH_TIMEOUT:-240} python3 -c "from pti_cli.cli import main; main()" bench --kernels --json "$OUT/bench.json" ${VARIANTS:+--kernel-variants $VARIANTS} 2>&1 | tee "$OUT/bench.log"
