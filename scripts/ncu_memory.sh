#!/usr/bin/env bash
# ncu's memory sections for the matmuls whose activations may not fit L1 (docs/perf.md, session 11,
# "a lead for the 32- and 64-row targets"): L1 hit rate and L2-to-L1 bytes against each launch's
# weight bytes.  bash scripts/ncu_memory.sh   (carry .whl; $OUT/memory.txt)
# NCU_PROBES="NAME:N:K:M:VARIANT ...": other launches than the default list below (session 50: 1 and 8 rows).
# NCU_COUNTERS=1: ncu's L1 and L2 sector counters instead of its sections ($OUT/counters.txt; session 50).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
source scripts/device_cache.sh   # the binaries .carry holds (scripts/device_prep.sh), if any
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
# (NCU_COUNTERS: session 50's call 3, docs/bench/wg_backend/s50/call2/command.txt)
COUNTERS=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy"
KEEP="Duration|DRAM Throughput|L1/TEX Hit Rate|L2 Hit Rate|Mem Busy|Max Bandwidth|L1/TEX Cache Throughput|L2 Cache Throughput|Achieved Occupancy|sectors|Shared Memory Configuration Size"
if [ "${NCU_COUNTERS:-0}" = 1 ]; then
  FILE=counters.txt WHAT="--metrics $COUNTERS" KEEP="^\s+(gpu__|dram__|lts__|l1tex__)"
else
  FILE=memory.txt WHAT=$SECTIONS
fi
probe() {   # name, then kernel_probe.py's N K M VARIANT
  local name=$1; shift
  echo "== $name ($*)" >> "$OUT/$FILE"
  timeout 120 "$NCU" --clock-control none $WHAT -k regex:pti_mm --launch-skip 1 --launch-count 1 \
      python3 scripts/kernel_probe.py "$@" 2>&1 | grep -E "$KEEP" >> "$OUT/$FILE"
}
python3 -c "from pti_cli.backends.cuda import CudaBackend; CudaBackend()" > /dev/null 2>&1   # compile once
for p in ${NCU_PROBES:-gateup_1:28672:4096:1:t1_r1_m1_u2 gateup_16:28672:4096:16:t1_r1_m2_u1
           gateup_32:28672:4096:32:t1_r1_m4_u1 gateup_32_r2:28672:4096:32:t1_r2_m4_u2
           down_16:4096:14336:16:t1_r1_m2_u2_p1 down_32:4096:14336:32:t1_r1_m4_u2}; do
  probe ${p//:/ }
done
cat "$OUT/$FILE"
