#!/bin/bash
# The full H200 call (issues 4 and 5): `make test-gpu`, the kernel table, a per-op
# breakdown of the 8b pass, then `pti bench --synthetic 8b` (sequences x twins, and the
# lookup replay).  Run from anywhere with .whl/ (the gguf wheel) carried; results in $OUT
# (few files: the device returns at most eight).   bash docs/bench/run_h200.sh [quick]
# The log's "sources" line identifies the code that ran (the device's `git log` line can be stale):
# here, `LC_ALL=C; cat kernels/*.hip pti_cli/*.py pti_cli/*/*.py | sha256sum` at the commit (LC_ALL=C: the globs'
# order is the locale's, and the device's differed from this machine's).
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
source scripts/device_cache.sh   # PTI_CACHE_DIR: kernel binaries of earlier calls, carried in .carry/
LOG=$OUT/run.log
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader;
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; git log --oneline -1 2>/dev/null;
  echo "sources: $(LC_ALL=C; cat kernels/*.hip pti_cli/*.py pti_cli/*/*.py | sha256sum | cut -c1-16)"; } >> "$LOG" 2>&1
step() { echo "== $(date -u +%T) $*" >> "$LOG"; }

step make test-gpu
timeout 300 make test-gpu PYTHON=python3 2>&1 | tail -6 >> "$LOG"
kcache_save   # the kernels are compiled by now: $OUT/kcache.tar.gz for the next call
step kernels
timeout 200 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels.json" \
    --kernel-variants default,t1_r1_m1_u8,t1_r1_m1_u4,t1_r1_m1_u4_p1,t2_r1_m1_u2,t2_r1_m1_u2_p1,t2_r2_m1_u2 > /tmp/kernels.log 2>&1
grep -v "^│\|^┃\|^┏\|^┡\|^└" /tmp/kernels.log | tail -4 >> "$LOG"
step diag
timeout 90 python3 docs/bench/h200_diag.py 8b "$OUT/diag_8b.json" 2>&1 | tail -20 >> "$LOG"

TRACE=docs/bench/accept_trace_smollm2.json
bench() {  # bench NAME ARGS...
    local name=$1; shift
    step "bench $name $*"
    timeout 240 python3 -m pti_cli.cli bench --synthetic 8b "$@" --json "$OUT/$name.json" --plot "$OUT/$name.png" 2>&1 \
        | grep -v "^[│┃┏┡└]" | tail -14 >> "$LOG"
}
bench bench_8b --seqs 1,2,4,8,16,32 --twins a,ab
[ "$1" = quick ] && exit 0
[ -f $TRACE ] && bench bench_8b_lookup --seqs 1,2,4,8 --spec none,lookup --accept-trace $TRACE
step done
