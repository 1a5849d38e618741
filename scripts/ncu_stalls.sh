#!/usr/bin/env bash
# ncu with sampled warp stalls per SASS instruction, for one kernel launch of each probe:
#   bash scripts/ncu_stalls.sh   (carry .whl; $OUT/sections.txt: every probe's sections;
#   $OUT/<name>_sass.csv: its source page, stall samples per instruction; five files, as the
#   device returns at most eight)
# Probes: the gate/up matmul at 16 rows and at one row, the one-row 4096x4096 matmul, the
# 16-sequence attention; or NCU_PROBES="NAME:N:K:M:VARIANT ..." (matmuls only, at most 7: one
# CSV each beside sections.txt; session 53: the policy's one-row kernels on an H200).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
source scripts/device_cache.sh   # the binaries .carry holds (scripts/device_prep.sh), if any
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
  echo "== $name"; grep -E "Duration|DRAM Throughput|Issued Ipc|Issue Slots Busy|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Instructions  |SM Frequency" /tmp/ncu_$name.txt
}
python3 -c "from pti_cli.backends.cuda import CudaBackend; CudaBackend()" > /dev/null 2>&1   # compile once
if [ -n "${NCU_PROBES:-}" ]; then
  for p in $NCU_PROBES; do
    set -- ${p//:/ }
    probe "$1" pti_mm 1 python3 scripts/kernel_probe.py "$2" "$3" "$4" "$5"
  done
  exit 0
fi
probe mm16_gateup pti_mm 1 python3 scripts/kernel_probe.py 28672 4096 16 t1_r1_m2_u1_p1
probe mm1_gateup pti_mm 1 python3 scripts/kernel_probe.py 28672 4096 1 t1_r1_m1_u4
probe mm1_o pti_mm 1 python3 scripts/kernel_probe.py 4096 4096 1 t1_r1_m1_u4_p1
probe attn16 attn_rope 3 python3 scripts/attn_probe.py 16
