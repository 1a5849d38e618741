#!/bin/bash
# One iteration call on the H200 (carry .whl): `make test-gpu`, the kernel table for the
# variants in $VARIANTS, the per-op breakdown (one and 16 sequences) and a short
# `pti bench --synthetic 8b`.  Log in $OUT/iter.log.   VARIANTS=a,b bash scripts/gpu_iter.sh
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PTI_CACHE_DIR=/tmp/pti-cache
LOG=$OUT/iter.log
step() { echo "== $(date -u +%T) $*" >> "$LOG"; }
{ date -u; git log --oneline -1 2>/dev/null; git status --short | head; } >> "$LOG" 2>&1
step compile
python3 -c "
import torch; from pti_cli.backends.cuda import CudaBackend; from pti_cli.gpu_ops import CudaOps
CudaBackend(); CudaOps(torch.device('cuda'))" >> "$LOG" 2>&1
step make test-gpu
timeout ${TEST_S:-300} make test-gpu PYTHON=python3 > /tmp/tg.log 2>&1; grep -E "passed|failed|Error|assert" /tmp/tg.log | tail -15 >> "$LOG"
if [ -n "$VARIANTS" ]; then
  step kernels $VARIANTS
  timeout ${KERNELS_S:-240} python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels.json" --kernel-variants "$VARIANTS" \
      > /tmp/kernels.log 2>&1; tail -3 /tmp/kernels.log >> "$LOG"
fi
step diag
timeout 150 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -32 >> "$LOG"
step bench
timeout 200 python3 -m pti_cli.cli bench --synthetic 8b --seqs ${SEQS:-1,2,16} --twins a,ab --repeats 2 --json "$OUT/bench.json" 2>&1 \
    | grep -v "^[┃┏┡└]" | tail -14 >> "$LOG"
step done
