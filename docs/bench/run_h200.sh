#!/bin/bash
# The H200 run of issue 5 (one device call): GPU tests of the forward, a per-op
# time breakdown, then `pti bench --synthetic 8b`.  Everything lands in $OUT.
#   bash docs/bench/run_h200.sh [quick]
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-} PTI_CACHE_DIR=/tmp/pti-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv;
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; git log --oneline -1; } 2>&1 | tee "$OUT/env.txt"

timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_model.py 2>&1 | tail -40 | tee "$OUT/gpu_tests.log"
timeout 90 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -20

TRACE=docs/bench/accept_trace_smollm2.json
bench() {  # bench NAME ARGS...: with the fused ops; if that fails, once more with torch ops
    local name=$1; shift
    timeout 240 python3 -m pti_cli.cli bench --synthetic 8b "$@" --json "$OUT/$name.json" --plot "$OUT/$name.png" 2>&1 \
        | tee "$OUT/$name.log" | grep -v "^seqs" || true
    [ -s "$OUT/$name.json" ] || timeout 240 python3 -m pti_cli.cli bench --synthetic 8b "$@" --ops torch \
        --json "$OUT/$name.json" --plot "$OUT/$name.png" 2>&1 | tee "$OUT/$name.log"
}
bench bench_8b --seqs 1,2,4,8,16,32 --twins a,ab
[ "$1" = quick ] && exit 0
[ -f $TRACE ] && bench bench_8b_lookup --seqs 1,2,4,8 --spec none,lookup --accept-trace $TRACE
date -u
