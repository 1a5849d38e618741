#!/usr/bin/env bash
# ncu of one launch of the Hopper form each probe picks (scripts/wg_probe.py, tiles given): duration, DRAM
# throughput, occupancy, the SMs' active cycles (min / avg / max: how evenly the CTAs land) and the stall split.
#   bash scripts/ncu_wg.sh "ENV=V,...:N:K:M:TWINS" ...   ($OUT/ncu_wg.txt: every section; carry .whl, .carry)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
source scripts/device_cache.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for arg in "$@"; do
  IFS=: read -r envs n k m tw <<< "$arg"
  echo "== $envs ${n}x$k M=$m twins=$tw" | tee -a "$OUT/ncu_wg.txt"
  env ${envs//,/ } timeout 150 "$NCU" --clock-control none --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section LaunchStats --section SchedulerStats \
      --metrics "sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__ctas_launched.min,sm__ctas_launched.max,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      -k regex:pti_wg_bf16 --launch-skip 1 --launch-count 1 python3 scripts/wg_probe.py "$n" "$k" "$m" "$tw" \
      > /tmp/ncu_one.txt 2>&1 || tail -5 /tmp/ncu_one.txt
  cat /tmp/ncu_one.txt >> "$OUT/ncu_wg.txt"
  grep -E "wg_probe:|^ +(Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Grid Size|Cluster Size|Dynamic Shared Memory Per Block|Warp Cycles Per Issued Instruction) |sm__cycles_active|sm__ctas_launched" /tmp/ncu_one.txt
  grep -E "issue_stalled" /tmp/ncu_one.txt | awk '$NF + 0 >= 0.2 {print $NF, $1}' | sort -g -r | head -6
done
