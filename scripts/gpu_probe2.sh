#!/bin/bash
# Diagnostics for the streaming matmul: read-pattern probes, failing GPU tests, ncu.
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD PTI_CACHE_DIR=/tmp/pti-cache
LOG=$OUT/run.log
step() { echo "== $(date -u +%T) $*" >> "$LOG"; }
step read probes
timeout 120 python3 scripts/read_probe.py >> "$LOG" 2>&1
step gpu tests
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu -rf --tb=line 2>&1 | tail -30 >> "$LOG"
NCU=/usr/local/cuda/bin/ncu
SECT="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy"
for v in t1_r1_m1_u4_s1 t1_r1_m1_u8; do
  step ncu $v 28672x4096
  timeout 100 $NCU --clock-control none --kernel-name regex:pti_mm_ --launch-skip 2 --launch-count 1 $SECT \
      python3 scripts/kernel_probe.py 28672 4096 1 $v $v $v > /tmp/ncu_$v.log 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Stall|Warp Cycles|Issued|Achieved Occupancy|Theoretical Occ|Block Limit|L2 Hit|Mem Busy|Max Bandwidth|Registers|Dynamic Shared|stalled|spends" /tmp/ncu_$v.log | head -40 >> "$LOG"
done
step done
