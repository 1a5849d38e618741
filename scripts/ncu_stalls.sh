#!/usr/bin/env bash
# ncu with sampled warp stalls per SASS instruction, for one kernel launch of each probe:
#   bash scripts/ncu_stalls.sh   (carry .whl; $OUT/sections.txt: every probe's sections;
#   $OUT/<name>_sass.csv: its source page, stall samples per instruction; five files, as the
#   device returns at most eight)
# Probes: the gate/up matmul at 16 rows and at one row, the one-row 4096x4096 matmul, the
# 16-sequence attention.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pti-cache
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats
      --section SchedulerStats --section InstructionStats --section SourceCounters"
probe() {   # name, kernel regex, launches to skip, command...
  local name=$1 k=$2 skip=$3; shift 3
  timeout 120 "$NCU" --clock-control none $SECT -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
      -f -o "$OUT/$name" "$@" > /tmp/ncu_$name.log 2>&1 || tail -5 /tmp/ncu_$name.log
  { echo "== $name"; "$NCU" --import "$OUT/$name.ncu-rep"; } > /tmp/ncu_$name.txt 2>&1
  cat /tmp/ncu_$name.txt >> "$OUT/sections.txt"
  "$NCU" --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1
  rm -f "$OUT/$name.ncu-rep"
  echo "== $name"; grep -E "Duration|DRAM Throughput|Issued Ipc|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Instructions  " /tmp/ncu_$name.txt
}
python3 -c "from pti_cli.backends.cuda import CudaBackend; CudaBackend()" > /dev/null 2>&1   # compile once
probe mm16_gateup pti_mm 1 python3 scripts/kernel_probe.py 28672 4096 16 t1_r1_m2_u1_p1
probe mm1_gateup pti_mm 1 python3 scripts/kernel_probe.py 28672 4096 1 t1_r1_m1_u4
probe mm1_o pti_mm 1 python3 scripts/kernel_probe.py 4096 4096 1 t1_r1_m1_u4_p1
probe attn16 attn_rope 3 python3 scripts/attn_probe.py 16
