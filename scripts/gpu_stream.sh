#!/bin/bash
# One exploratory H200 call for the streaming (bulk-copy) matmul kernels:
# their GPU tests, the kernel table against the register kernels, ring sizes,
# the 8b pass with and without them.   bash scripts/gpu_stream.sh   (carry .whl)
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PTI_CACHE_DIR=/tmp/pti-cache
LOG=$OUT/run.log
{ date -u; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
step() { echo "== $(date -u +%T) $*" >> "$LOG"; }
table() { grep -v "^┃\|^┏\|^┡\|^└" | sed 's/│/ /g' | tr -s ' ' >> "$LOG"; }

step read probes
timeout 100 python3 scripts/read_probe.py >> "$LOG" 2>&1
step kernel tests
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_gpu.py -rf --tb=line 2>&1 | tail -12 >> "$LOG"
step kernels default vs register
timeout 120 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels.json" \
    --kernel-variants default,t1_r1_m1_u8,t2_r1_m1_u4,t1_r1_m1_u8_s1,t2_r1_m1_u4_s1 2>&1 | table
for cap in 200000; do
  step kernels PTI_STREAM_SMEM=$cap
  PTI_STREAM_SMEM=$cap timeout 60 python3 -m pti_cli.cli bench --kernels --kernel-variants t1_r1_m1_u4_s1,t2_r1_m1_u2_s1 2>&1 | table
done
step kernels PTI_STREAM_CTAS=2
PTI_STREAM_CTAS=2 timeout 60 python3 -m pti_cli.cli bench --kernels --kernel-variants t1_r1_m1_u4_s1,t2_r1_m1_u2_s1 2>&1 | table
for s in 1 0; do
  step diag PTI_STREAM=$s
  PTI_STREAM=$s timeout 60 python3 docs/bench/h200_diag.py 8b "$OUT/diag_$s.json" 2>&1 | tail -18 | head -8 >> "$LOG"
  step bench PTI_STREAM=$s
  PTI_STREAM=$s timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,2,16 --twins a,ab 2>&1 \
      | grep "tok/s\|bandwidth" | head -8 >> "$LOG"
done
step done
