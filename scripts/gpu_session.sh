#!/usr/bin/env bash
# One device call that checks and times the whole GPU path (kernels, pass, bench):
#   bash scripts/gpu_session.sh [tests|bench|all]
# Run from the repo root on the GPU machine with .whl/ carried (gguf wheel).
# Everything lands in $OUT; each step has its own timeout so one hang costs one step.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WHAT=${1:-all}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pticache
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader;
  python3 -c "import torch; from cuda.bindings import nvrtc; print('torch', torch.__version__, 'nvrtc', nvrtc.nvrtcVersion()[1:])";
  git log --oneline -1 2>/dev/null; } 2>&1 | tee "$OUT/env.txt"
pti() { python3 -m pti_cli.cli "$@"; }
step() { echo "== $(date -u +%T) $*"; }
if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
  step tests
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
      -k "every_variant or dependent_chain" 2>&1 | tail -15 | tee "$OUT/new_tests.log"
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -25 | tee "$OUT/gpu_tests.log"
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  step kernels default
  timeout 150 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels.json" \
      --kernel-variants ${VARIANTS:-default} 2>&1 | tail -80 | tee "$OUT/kernels.log"
  step 8b
  timeout 200 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,2,4,8,16,32 --twins a,ab --json "$OUT/bench_8b.json" \
      --plot "$OUT/bench_8b.png" 2>&1 | grep -v "^seqs" | tail -30 | tee "$OUT/bench_8b.log"
  step 8b no pdl
  PTI_PDL=0 timeout 100 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,16 --twins a --repeats 2 2>&1 | tail -12 | tee "$OUT/bench_8b_nopdl.log"
  step diag
  timeout 90 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -25 | tee "$OUT/diag.log"
  step kernels baseline
  PTI_KERNELS=tc PTI_PDL=0 timeout 150 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels_tc_nopdl.json" 2>&1 | tail -70 | tee "$OUT/kernels_tc_nopdl.log"
fi
step done
