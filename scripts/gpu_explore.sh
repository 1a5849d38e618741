#!/usr/bin/env bash
# Exploration call (docs/perf.md, "v6"): GPU tests, then the kernel table and the 8b pass
# under L2-prefetch sizes and new variants.  bash scripts/gpu_explore.sh
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pticache
date -u | tee "$OUT/env.txt"
step() { echo "== $(date -u +%T) $*"; }
step tests
timeout 200 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -8 | tee "$OUT/gpu_tests.log"
V=default,t1_r1_m2_u4,t1_r1_m2_u8,t1_r1_m4_u2,t1_r1_m4_u4,t2_r1_m2_u4
for pf in 0 64; do
  step kernels prefetch $pf
  PTI_PREFETCH_KB=$pf timeout 120 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels_pf$pf.json" --kernel-variants $V > "$OUT/kernels_pf$pf.log" 2>&1
  tail -3 "$OUT/kernels_pf$pf.log"
done
for pf in 32 128; do
  step kernels prefetch $pf
  PTI_PREFETCH_KB=$pf timeout 120 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels_pf$pf.json" > "$OUT/kernels_pf$pf.log" 2>&1
done
for pf in 0 64; do
  step 8b prefetch $pf
  PTI_PREFETCH_KB=$pf timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,16 --twins a --repeats 2 2>&1 | grep "^seqs" | tee -a "$OUT/bench_8b.log"
  PTI_PREFETCH_KB=$pf timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 2 --twins ab --repeats 2 2>&1 | grep "^seqs" | tee -a "$OUT/bench_8b.log"
done
step diag
timeout 90 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -22 | tee "$OUT/diag.log"
step done
