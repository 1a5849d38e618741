#!/usr/bin/env bash
# Exploration call (docs/perf.md, kernels v6/v7): GPU tests, then the kernel table and the
# 8b pass under PTI_PREFETCH (steps of weights prefetched into L2 before the PDL wait) and
# the variants named in V.   bash scripts/gpu_explore.sh
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pticache
LOG=$OUT/explore.log
step() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }
step tests
timeout 200 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -8 | tee -a "$LOG"
V=${V:-default,t1_r1_m2_u4,t1_r1_m2_u6,t1_r1_m2_u8,t1_r1_m4_u2,t1_r1_m4_u4,t2_r1_m2_u4}
for pf in ${PFS:-0 1}; do
  step kernels prefetch $pf
  PTI_PREFETCH=$pf timeout 150 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels_pf$pf.json" --kernel-variants $V > /tmp/k.log 2>&1
  grep -v "^│\|^┃\|^┏\|^┡\|^└" /tmp/k.log | tail -3 | tee -a "$LOG"
done
for pf in ${PFS:-0 1}; do
  step 8b prefetch $pf
  PTI_PREFETCH=$pf timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,16 --twins a --repeats 2 2>&1 | grep "^seqs" | tee -a "$LOG"
  PTI_PREFETCH=$pf timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 2 --twins ab --repeats 2 2>&1 | grep "^seqs" | tee -a "$LOG"
done
step diag
timeout 90 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -22 >> "$LOG"
step done
