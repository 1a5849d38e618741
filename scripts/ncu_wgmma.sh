#!/usr/bin/env bash
# ncu of one wgmma probe variant (docs/perf.md, sessions 24-25): duration, DRAM throughput, occupancy,
# issue rate and the stall split, for one launch of each VARIANT:N:K:M argument:
#   bash scripts/ncu_wgmma.sh m8_w2_b4_d2_g1_f0_o2:28672:4096:64 ...   ($OUT/ncu_wgmma.txt: every section)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for arg in "$@"; do
  IFS=: read -r v n k m <<< "$arg"
  echo "== $v ${n}x$k M=$m" | tee -a "$OUT/ncu_wgmma.txt"
  timeout 150 "$NCU" --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats --section InstructionStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum" -k regex:pti_wg_bf16_out --launch-skip 1 --launch-count 1 \
      python3 scripts/wgmma_probe.py --launch "$v" "$n" "$k" "$m" > /tmp/ncu_one.txt 2>&1 || tail -5 /tmp/ncu_one.txt
  cat /tmp/ncu_one.txt >> "$OUT/ncu_wgmma.txt"
  grep -E "^ +(Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Issued Warp Per Scheduler|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Warp Cycles Per Issued Instruction|Dynamic Shared Memory Per Block) " /tmp/ncu_one.txt
  grep -E "inst_executed.sum|Executed Instructions  " /tmp/ncu_one.txt
  grep -E "issue_stalled" /tmp/ncu_one.txt | awk '$NF + 0 >= 0.1 {print $NF, $1}' | sort -g -r | head -8
done
