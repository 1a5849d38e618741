#!/usr/bin/env bash
# ncu of the attention kernel (1 and 16 sequences) and of the one-row Q8 matmul:
#   bash scripts/gpu_profile.sh   (carry .whl; results in $OUT/profile.log)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PTI_CACHE_DIR=/tmp/pticache
LOG=$OUT/profile.log
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" | tee -a "$LOG"
[ -n "$NCU" ] || exit 0
SECT="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
for S in 1 16; do
  echo "== attention, seqs $S" >> "$LOG"
  timeout 150 $NCU --clock-control none --profile-from-start off --kernel-name regex:attn_rope --launch-count 1 $SECT \
      python3 scripts/gpu_profile.py $S >> "$LOG" 2>&1
done
for shape in "4096 4096" "28672 4096"; do
  echo "== matmul $shape M=1" >> "$LOG"
  timeout 100 $NCU --clock-control none --kernel-name regex:pti_mm_ --launch-skip 2 --launch-count 1 $SECT \
      python3 scripts/kernel_probe.py $shape 1 t1_r1_m1_u8 t1_r1_m1_u8 t1_r1_m1_u8 >> "$LOG" 2>&1
done
echo "== matmul 4096 4096 M=16" >> "$LOG"
timeout 100 $NCU --clock-control none --kernel-name regex:pti_mm_ --launch-skip 2 --launch-count 1 $SECT \
    python3 scripts/kernel_probe.py 4096 4096 16 t1_r1_m2_u4 t1_r1_m2_u4 t1_r1_m2_u4 >> "$LOG" 2>&1
