#!/bin/bash
# One A/B call on the H200 (carry .whl): GPU kernel tests of the working tree, then
# scripts/pass_ab.py over the trees under abtrees/ and the working tree (or $AB_ARGS), interleaved twice, then
# the kernel table of the working tree.  Log in $OUT/ab.log.   bash scripts/gpu_ab_call.sh
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
source scripts/device_cache.sh   # PTI_CACHE_DIR: kernel binaries of earlier calls, carried in .carry/
LOG=$OUT/ab.log
step() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }
step compile
python3 -c "from pti_cli.backends.cuda import CudaBackend; CudaBackend()" 2>&1 | tail -3 | tee -a "$LOG"
step tests
timeout ${TEST_S:-200} python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
    tests/gpu/test_glu_gpu.py tests/gpu/test_norm_gpu.py 2>&1 | tail -6 | tee -a "$LOG"
step pass_ab
TREES=${AB_ARGS:-"$(ls -d abtrees/*/ 2>/dev/null | sed 's#/$##') ."}   # AB_ARGS: pass_ab.py's arguments, run twice
timeout ${AB_S:-300} python3 scripts/pass_ab.py $TREES $TREES 2>&1 | tee -a "$LOG"
step kernels
timeout ${KERNELS_S:-120} python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels.json" > /tmp/k.log 2>&1; tail -2 /tmp/k.log | tee -a "$LOG"
kcache_save
step done
