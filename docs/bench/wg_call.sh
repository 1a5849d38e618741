#!/bin/bash
# Session 27's H200 calls: the backend's Hopper path (PTI_WGMMA=1) on the card.  carry [".whl"].
#   bash docs/bench/wg_call.sh STEP...   steps, in the order given:
#     hopper   the Hopper tests alone (tests/gpu/test_kernels_gpu.py -k hopper, PTI_WGMMA=1)
#     table    the kernel table of 28672x4096 (the one matrix of width class "x") with and without the path
#     table16  the same with f16 activations (the h16 matrices' kernels: --kernel-act f16)
#     table16a the f16 table with the path only (PTI_WGMMA=1)
#     save     the kernel binaries to $OUT/kcache.tar.gz (carry ".carry" next time; scripts/device_cache.sh)
#     test     make test-gpu;   test-wg: make test-gpu with PTI_WGMMA=1
#     synth    pti bench --synthetic 8b, sequences 1,16,32,64, twins a and ab, with and without the path
#     narrow   the cluster forms (PTI_WG_NARROW=1): make test-gpu with them, the kernel table of all four
#              matrices with and without them, and the synthetic bench (sequences 1,32,64) with and without;
#              or one part: narrow-test, narrow-table, narrow-synth
#     gap      scripts/wg_gap.py (the cluster forms' call, matmul, tiles, policy, resident clusters) and the
#              probe's forms of the same shapes, in one call (docs/perf.md, session 28, item 2)
#     synth-narrow the synthetic bench (sequences 32,64, twins a and ab) with PTI_WG_NARROW=0, w, 1 and auto
#              (or the values in SYNTH_NW, e.g. SYNTH_NW="0 w auto")
#     synth-sum    the same for session 29's default against its parts: PTI_WG_NARROW=w with PTI_WG_SUM_INV=0
#              (session 28's path with the faster cluster forms), auto with 0, auto with 1 (the default);
#              or the settings in SUM_CFGS, e.g. SUM_CFGS="w:0 auto:1 w:0 auto:1" (each run's JSON numbered)
#     synth-all    pti bench --synthetic 8b --seqs 1,2,4,8,16,32,64 --twins a,ab (the README's table)
#     synth-twin-min   sequences 16,24,32 of twins ab with PTI_WG_TWIN_MIN_ROWS from TWIN_MINS (default "17 9 17 9")
#     synth-env    the same (sequences SYNTH_SEQS, default 32,64, twins SYNTH_TWINS, default a,ab) under each NAME=VALUE[,NAME=VALUE] of
#              SYNTH_ENVS, in order (session 30: SYNTH_ENVS="PTI_WG_TILES=0,PTI_WG_RESIDUAL=0 PTI_WG_TILES=1 ...")
#     kernels      pti bench --kernels (issue 4's table, with session 31's "given" rows); kernels16: --kernel-act f16;
#              kernelsh16: --kernel-act h16 (a bf16 backend's matrices on h16 inputs, the Hopper rows too: the model's form)
#     clusters     scripts/wg_gap.py --clusters (session 31's next lead: which cluster sizes fit one wave)
#     waves        64 rows of the cluster forms at 30, 32 and 60 units (session 31: one wave of clusters or two)
#     fix-ab       pti bench --synthetic 8b --seqs 64 with PTI_WG_FIX=0 1 0 1, if fixtable's fixup form was faster
#     fixtable     1 and 64 rows of the narrower matrices with PTI_WG_FIX=0 and 1 (the fixup form), PTI_WG_NARROW=1
#     m2table      1, 9, 12, 16 and 32 rows of the tall matrices with session 31's 9-16 row paths and with the m2 form
#     m2ctas       1, 9 and 16 rows (q8) of three tall matrices on m4, on m2 at 3 CTAs a SM (PTI_WG_SPREAD=0), and on
#              m2 with its CTAs spread (two a SM where the grid fits one wave of them: wg_launch_smem); session 33's
#              call 2 ran commit bf6dabd's "PTI_WG_M2=1 PTI_WG_M2_CTAS=2" (every m2 launch at two a SM, a setting
#              since replaced by that rule) where SPREAD=1 is now
#     tall16-test  tests/gpu/test_gpu_model.py -k tall_class_16, its output in the log
#     twin-head    1, 9, 12 and 16 rows a twin of gate/up and the head (ssq16): m4 (PTI_WG_M2=1), m2 at three CTAs a SM
#              (PTI_WG_M2=2 PTI_WG_SPREAD=1), m2 spread by the waves rule (PTI_WG_M2=2 PTI_WG_SPREAD=2); or TWIN_HEAD_CFGS
#     twin-narrow  two twins of down (4096x14336) and QKV (6144x4096) at 9-16 rows a twin with PTI_WG_TWIN_FORMS 0,
#              1 and 2 (or TWIN_FORMS_CFGS); session 34's call 2 ran commit 4a550e7's (9-32 rows, a 32-row form since
#              removed, and O under PTI_WG_NARROW=1)
#     v1sweep      the policy's one-row variants on gate/up, QKV and O (1 and 8 rows, q8 and ssq16)
#     timeline     scripts/pass_timeline.py 8b (sequences TIMELINE_SEQS, default 32; twins TIMELINE_TWINS, default ab) under
#              each NAME=VALUE[,NAME=VALUE] of TIMELINE_ENVS: each kernel kind's time added to the pass (session 35)
#     gtest        the GPU tests whose names match GTEST_K (pytest -k), their summary in the log (session 36)
#     attn-tiles   session 36's change, not yet run on the card: its GPU tests (gtest), then twins ab at 24 and 32
#              sequences with PTI_ATTN_TILES 0 / 1 / 0 / 1, and one model at 32 and 64 with PTI_WG_NARROW=auto and
#              with NARROW=1 plus ATTN_TILES=1, alternated (its JSON "a" and "ab" as synth-env names them)
#     short-one    session 37's default (one model's O at 17-32 rows on the Hopper kernels): one model at 24, 32 and 64
#              sequences with PTI_WG_SHORT_ONE 0 / 32 / 0 / 32 (JSON "a")
#     short-two    twins ab at 40 and 64 sequences (20 and 32 rows a twin) with PTI_WG_SHORT_TWO 16 / 32 / 16 / 32: two
#              twins' O past their own form's 16 rows a twin on the narrow class's forms (session 37)
#     attn-ab      twins ab at 24 and 32 sequences with PTI_ATTN_TILES 0 / 1 / 0 / 1 (JSON "ab"; session 37 repeats its
#              first call's A/B, whose logs were lost)
#     mmsmem       1 and 8 rows of the three smaller matrices with the policy kernels asking PTI_MM_SMEM bytes (MM_SMEMS)
#     qkv-p1       session 45: 6144x4096 (QKV, width class "w") at 1, 2, 4 and 8 rows, q8, bf16 then h16 activations,
#              on t1_r1_m1_u4 and on t1_r1_m1_u2_p1 (PTI_VARIANTS=1:8:w=...), alternated twice; then one model at
#              SYNTH_SEQS (default 1,2,4,8) sequences the same way (JSON kernels_qkv_ACT_N.json, synth_8b_a_*.json).
#              Session 45's calls 2 and 4 ran it with an empty PTI_VARIANTS as the first setting, the policy: u4 in
#              call 2, and in call 4 (bf16 policy already u2_p1) the bf16 half compared u2_p1 with itself
#     nowait       session 55: the four matrices at 1 and 8 rows, q8 and ssq16, h16, on the kernels and on their probe copy
#              nowait (scripts/probe_source.py: no griddepcontrol.wait, timing only), real / probe / real / probe
#              (kernels_nowait_SRC_N.json); carry the probe's binary (PROBE=nowait scripts/device_prep.sh)
#     xcoh, p1xcoh session 56's probes, adopted in session 57 (aaf77d9): no longer in probe_source.py
#     srcab        session 57: the tree's kernels against another kernel source carried in the call (SRC_AB, e.g. the
#              commit before's: git show C:kernels/pti_kernel.hip > .carry/prev_kernel.hip, its sm_90a binary in
#              .carry too): the four matrices at SRCAB_ROWS rows (default 1,2,4,8,16; session 58 added 16, whose q8
#              kernels gained their early step in aaf77d9), q8 and ssq16, bf16 then h16, tree / other / tree / other
#              (kernels_srcab_ACT_SRC_N.json)
#     pre2         session 58: the probe pre2 (every _p1 kernel requests two steps of weights before the wait, one before;
#              the same bits): the GPU tests of every variant's bits and of dependent launches on it, then the four
#              matrices at 1, 8 and 16 rows, q8 and ssq16, h16, real / probe / real / probe (kernels_pre2_*.json);
#              carry its binary (PROBES=pre2 scripts/device_prep.sh)
#     p2           session 55: the _p2 variant (the whole slice before the wait): its GPU tests (the bits of every variant,
#              the carveouts), then the four matrices at 1, 2, 4 and 8 rows, q8, on the policy and with every one-row
#              matrix of K <= 4096 on t1_r1_m1_u16_p2 (PTI_P2=1: QKV, O and gate/up; down keeps the policy; session 55
#              wrote PTI_VARIANTS for every class, down too), h16 twice alternated, then bf16 (kernels_p2_ACT_V_N.json);
#              P2_CFGS="ACT:policy|p2 ..." chooses the tables
#     ctatrace     session 55: scripts/cta_timeline.py on the trace probe (each CTA's entry, wait return, loop end and
#              finish on the global timer) for CTA_CELLS (default: the script's cells), raw stamps in $OUT/trace.npz
#     cluster-probe  scripts/cluster_probe.py: where the card puts the cluster forms' CTAs, by GPC (session 38, not run
#              yet), its JSON in $OUT/cluster_probe.json
#     rest         session 39's rest form (PTI_WG_REST=1: a 64-row launch of one twin of a 4096-row matrix as the resident
#              clusters plus the units left over in m8_d8, alongside): its GPU tests (gtest rest), then the kernel table
#              of 4096x4096 and 4096x14336 at 1, 32 and 64 rows (q8, PTI_WG_NARROW=REST_NARROW, default 1) under each
#              setting of REST_CFGS (default REST 0 / 1 / 0 / 1); or one part: rest-test, rest-table; rest-synth: one
#              model at 48 and 64 sequences with PTI_WG_REST 0 / 1 / 0 / 1 (JSON "a")
#     rest32       session 40's settings: PTI_WG_REST32 (the split at 17-32 rows, m4_c8 held to two CTAs a SM plus
#              the units left over in m4_d8) and PTI_WG_REST_TWINS (two twins of m8_c8 as one split launch a twin):
#              the GPU tests -k rest, then the kernel table of 6144x4096, 4096x4096 and 4096x14336 at 1, 32 and 64
#              rows, q8 and ssq16, with both off / on / off / on (REST32=1, PTI_WG_NARROW=auto); session 40's call 1
#              ran it with a third setting since removed (PTI_WG_REST_MORE)
#     rest32-table the kernel table of down and O (4096x14336, 4096x4096) at REST_ROWS (default 24,32) rows, q8,
#              with PTI_WG_REST32 0 / 2 / 0 / 2 (session 41: the model lost with REST32=2 on an H100)
#     slack        session 41's PTI_WG_SPLIT_SLACK (a split's clusters two fewer than the card holds): the GPU tests -k
#              rest (their rest backend has it at 2), then one model at 24, 32 and 64 sequences with REST32=0 and with
#              REST32=2 plus SPLIT_SLACK=2, alternated twice (at 64 that compares the 64-row split's slack 0 and 2)
#     rest32-synth one model at 24 and 32 sequences with PTI_WG_REST32 0 / 2 / 0 / 2 (2: down only, not O; JSON
#              "a"), then twins ab at 128 sequences (64 rows a twin) with PTI_WG_REST_TWINS 0 / 1 / 0 / 1 (JSON "ab")
#     vsweep       the policy kernels' variants (VSWEEP_VARIANTS, default every one-row and 16-row variant loaded) on
#              VSWEEP_SHAPES (default 6144x4096,4096x4096) at 1, 8 and 16 rows, q8 and ssq16, twice (session 43: are
#              the H200's choices the fastest on an H100 too?), JSON vsweep_ACT_1.json and _2.json; VSWEEP_ACT: the
#              activations (--kernel-act: bf16, the default, f16 or h16); session 43 call 3 wrote vsweep_1.json, _2.json
#     overhead     scripts/table_overhead.py: each cell of the kernel table timed three ways (the table's timing before
#              session 44, its timing since, the marginal launch of a 3R graph against an R graph), $OUT/overhead.json
#     xclass       session 47: the extra-wide class (gate/up 28672x4096 and an 8B head 128256x4096) at 1, 8, 16 rows on
#              t1_r1_m1_u2 (the policy), u4, u4_p1 and u2_p1, bf16 then h16 (vsweep_x_ACT_N.json, twice each); then one
#              model at SYNTH_SEQS (default 1,2,4,8) with PTI_VARIANTS=1:8:x=t1_r1_m1_u2 / u4_p1 / u2 / u4_p1 (JSON "a")
#     xrow0        session 47: the four matrices at 1, 2, 4, 8 rows, q8 and ssq16, on the kernels and on their probe copy
#              x_row0 (scripts/probe_source.py: every lane reads activation row 0, so 8 rows move one row's activation
#              bytes; outputs wrong, timing only), bf16 real / probe / real / probe, then h16 real / probe
#              (kernels_xrow0_ACT_SRC_N.json); carry the probe's binary (probe_source.py --compile) in .carry
#     xrow16       session 58: the same probe at 1 and 16 rows, h16, real / probe / real / probe (kernels_x_row0_SRC_N.json):
#              is the 16-row Q8 kernels' time (55-72% on the H200) their activation traffic, as 8 rows' loss was?
# Results in $OUT (run.log, JSON; call 1 of session 27 wrote kernels_wg{0,1}.json, before the _bf16/_f16 suffix).
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
source scripts/device_cache.sh
LOG=$OUT/run.log
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader;
  echo "sources: $(LC_ALL=C; cat kernels/*.hip pti_cli/*.py pti_cli/*/*.py | sha256sum | cut -c1-16)";
  python3 -c "from pti_cli.backends.compile import nvrtc_version; print(nvrtc_version())"; } >> "$LOG" 2>&1
step() { echo "== $(date -u +%T) $*" >> "$LOG"; }
# ktable OUT.json NxK,... M,... KIND,... [ACT]: the kernel table (pti bench --kernels' rows) of those shapes, rows and
# kinds (activations ACT: bf16, the default, f16 or h16), printed to the log and written to OUT.json
ktable() {
  timeout 200 python3 - "$@" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pti_cli.bench_kernels import bench_kernels, print_table
out, shapes, ms, kinds = sys.argv[1:5]
res = bench_kernels(shapes=tuple(tuple(int(v) for v in s.split("x")) for s in shapes.split(",")),
                    ms=tuple(int(m) for m in ms.split(",")), kinds=tuple(kinds.split(",")),
                    act=sys.argv[5] if len(sys.argv) > 5 else "bf16")
print_table(res)
open(out, "w").write(json.dumps(res, indent=1))
PY
}
# probe_ab PROBE ROWS WHAT: the four matrices at ROWS rows, q8 and ssq16, h16, on the kernels and on the probe copy
# PROBE (scripts/probe_source.py), real / probe / real / probe (kernels_PROBE_SRC_N.json)
probe_ab() {
  python3 scripts/probe_source.py "$1" "/tmp/$1.hip" || exit 1
  local i=0 src
  for src in real probe real probe; do
    i=$((i + 1))
    step "kernel table, 4 matrices, rows $2, h16, $src source (probe $1: $3)"
    ( [ $src = probe ] && export PTI_KERNEL_SOURCE="/tmp/$1.hip"
      ktable "$OUT/kernels_$1_${src}_$i.json" 6144x4096,4096x4096,28672x4096,4096x14336 "$2" q8,ssq16 h16 )
  done
}
# probe_tested_ab PROBE ROWS WHAT: a probe whose outputs are right: the GPU tests of every variant's bits and of
# dependent launches on it, then probe_ab
probe_tested_ab() {
  ( export PTI_KERNEL_SOURCE="/tmp/$1.hip"; python3 scripts/probe_source.py "$1" "/tmp/$1.hip" && gtest "every_variant or dependent" )
  probe_ab "$1" "$2" "$3"
}
# gtest K: the GPU tests whose names match K (pytest -k), their summary in the log
gtest() {
  step "GPU tests -k $1"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu -k "$1" 2>&1 | tail -30 >> "$LOG"
}
# synth_env: pti bench --synthetic 8b under each setting of SYNTH_ENVS (the synth-env step)
synth_env() {
  # (the JSON's name: "ab" unless SYNTH_TWINS is given; session 35's call 7 named its twins-a runs "ab" too)
  i=0; tw=${SYNTH_TWINS:-ab}; tw=${tw//,/}
  for cfg in ${SYNTH_ENVS:-PTI_WG_TILES=0 PTI_WG_TILES=1}; do
    i=$((i + 1))
    step "bench --synthetic 8b --seqs ${SYNTH_SEQS:-32,64} --twins ${SYNTH_TWINS:-a,ab} $cfg"
    env ${cfg//,/ } timeout 150 python3 -m pti_cli.cli bench --synthetic 8b --seqs ${SYNTH_SEQS:-32,64} --twins ${SYNTH_TWINS:-a,ab} \
        --repeats 3 --json "$OUT/synth_8b_${tw}_${cfg//[^A-Za-z0-9]/_}_$i.json" 2>&1 | grep -v "^[┏┡└]" | tail -12 >> "$LOG"
  done
}
# vsweep_rounds PREFIX: two rounds of the kernel table of VSWEEP_SHAPES at 1, 8 and 16 rows on each of VSWEEP_VARIANTS,
# activations VSWEEP_ACT, written to PREFIX_1.json and PREFIX_2.json (the vsweep and xclass steps)
vsweep_rounds() {
  for i in 1 2; do
    step "policy variants on ${VSWEEP_SHAPES:-6144x4096,4096x4096} at 1, 8, 16 rows, ${VSWEEP_ACT:-bf16} (round $i)"
    timeout 200 python3 - "${1}_$i.json" "${VSWEEP_SHAPES:-6144x4096,4096x4096}" "${VSWEEP_ACT:-bf16}" "${VSWEEP_VARIANTS:-t1_r1_m1_u2,t1_r1_m1_u4,t1_r1_m1_u4_p1,t1_r1_m1_u8,t1_r2_m1_u4,t1_r1_m2_u1,t1_r1_m2_u1_p1,t1_r1_m2_u2_p1,t1_r1_m2_u3,t1_r1_m2_u4,t1_r1_m2_u6,t1_r1_m2_u8,t1_r2_m2_u4,t2_r1_m1_u2,t2_r1_m1_u2_p1,t2_r2_m1_u2}" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pti_cli.bench_kernels import bench_kernels, print_table
out, shapes, act, variants = sys.argv[1:5]
res = bench_kernels(shapes=tuple(tuple(int(v) for v in s.split("x")) for s in shapes.split(",")), ms=(1, 8, 16),
                    variants=tuple(variants.split(",")), act=act)
print_table(res)
open(out, "w").write(json.dumps(res, indent=1))
PY
  done
}
for s in "$@"; do case $s in
hopper)
  step hopper tests
  PTI_WGMMA=1 timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_gpu.py -k hopper 2>&1 | tail -30 >> "$LOG" ;;
table|table16|table16a)
  act=bf16; wgs="1 0"; [ "$s" != table ] && act=f16; [ "$s" = table16a ] && wgs=1
  for wg in $wgs; do
    step "kernel table PTI_WGMMA=$wg $act"
    PTI_WGMMA=$wg timeout 120 python3 - "$OUT/kernels_wg${wg}_$act.json" $act >> "$LOG" 2>&1 <<'PY'
import json, sys
from pti_cli.bench_kernels import bench_kernels, print_table
res = bench_kernels(shapes=((28672, 4096),), ms=(1, 16, 32, 64), act=sys.argv[2])
print_table(res)
open(sys.argv[1], "w").write(json.dumps(res, indent=1))
PY
  done ;;
gtest)
  gtest "$GTEST_K" ;;
test)
  step make test-gpu
  timeout 420 make test-gpu PYTHON=python3 > "$OUT/test.log" 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/test.log" | tail -20 >> "$LOG" ;;
test-wg)
  step PTI_WGMMA=1 make test-gpu
  PTI_WGMMA=1 timeout 300 make test-gpu PYTHON=python3 > "$OUT/test_wg.log" 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/test_wg.log" | tail -20 >> "$LOG" ;;
synth)
  for wg in 0 1; do
    step "bench --synthetic 8b PTI_WGMMA=$wg"
    PTI_WGMMA=$wg timeout 200 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,16,32,64 --twins a,ab --repeats 3 \
        --json "$OUT/synth_8b_wg$wg.json" 2>&1 | grep -v "^[┏┡└]" | tail -22 >> "$LOG"
  done ;;
narrow|narrow-test)
  step PTI_WG_NARROW=1 make test-gpu
  PTI_WG_NARROW=1 timeout 300 make test-gpu PYTHON=python3 > "$OUT/test_narrow.log" 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/test_narrow.log" | tail -20 >> "$LOG" ;;&
narrow|narrow-table)
  for nw in 1 0; do
    step "kernel table PTI_WG_NARROW=$nw"
    PTI_WG_NARROW=$nw timeout 150 python3 -m pti_cli.cli bench --kernels --json "$OUT/kernels_narrow$nw.json" 2>&1 \
        | grep -v "^[┏┡└]" | tail -60 >> "$LOG"
  done ;;&
narrow|narrow-synth)
  for nw in 1 0; do
    step "bench --synthetic 8b PTI_WG_NARROW=$nw"
    PTI_WG_NARROW=$nw timeout 150 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,32,64 --repeats 3 \
        --json "$OUT/synth_8b_narrow$nw.json" 2>&1 | grep -v "^[┏┡└]" | tail -12 >> "$LOG"
  done ;;
synth-narrow)
  for nw in ${SYNTH_NW:-0 w 1 auto}; do
    step "bench --synthetic 8b --twins a,ab PTI_WG_NARROW=$nw"
    PTI_WG_NARROW=$nw timeout 150 python3 -m pti_cli.cli bench --synthetic 8b --seqs 32,64 --twins a,ab --repeats 3 \
        --json "$OUT/synth_8b_ab_narrow$nw.json" 2>&1 | grep -v "^[┏┡└]" | tail -12 >> "$LOG"
  done ;;
synth-sum)
  i=0
  for cfg in ${SUM_CFGS:-w:0 auto:0 auto:1}; do
    nw=${cfg%:*} si=${cfg#*:} i=$((i + 1))
    step "bench --synthetic 8b --twins a,ab PTI_WG_NARROW=$nw PTI_WG_SUM_INV=$si"
    PTI_WG_NARROW=$nw PTI_WG_SUM_INV=$si timeout 150 python3 -m pti_cli.cli bench --synthetic 8b --seqs 32,64 --twins a,ab \
        --repeats 3 --json "$OUT/synth_8b_ab_${nw}_sum${si}_$i.json" 2>&1 | grep -v "^[┏┡└]" | tail -12 >> "$LOG"
  done ;;
synth-env)
  synth_env ;;
rest|rest-test)
  gtest "rest" ;;&
rest|rest-table)
  i=0
  for cfg in ${REST_CFGS:-PTI_WG_REST=0 PTI_WG_REST=1 PTI_WG_REST=0 PTI_WG_REST=1}; do
    i=$((i + 1))
    step "kernel table 4096x4096,4096x14336 rows 1,32,64 q8 PTI_WG_NARROW=${REST_NARROW:-1} $cfg"
    ( export PTI_WG_NARROW=${REST_NARROW:-1} ${cfg//,/ }; ktable "$OUT/kernels_rest_${cfg//[^A-Za-z0-9]/_}_$i.json" 4096x4096,4096x14336 1,32,64 q8 )
  done ;;
rest-synth)
  SYNTH_SEQS=${SYNTH_SEQS:-48,64} SYNTH_TWINS=a SYNTH_ENVS=${SYNTH_ENVS:-"PTI_WG_REST=0 PTI_WG_REST=1 PTI_WG_REST=0 PTI_WG_REST=1"} synth_env ;;
rest32)
  gtest "rest"; i=0
  for cfg in 0 1 0 1; do
    i=$((i + 1))
    step "kernel table 6144x4096,4096x4096,4096x14336 rows 1,32,64 q8,ssq16 PTI_WG_NARROW=auto REST32, REST_TWINS=$cfg"
    ( export PTI_WG_NARROW=auto PTI_WG_REST32=$cfg PTI_WG_REST_TWINS=$cfg
      ktable "$OUT/kernels_rest32_${cfg}_$i.json" 6144x4096,4096x4096,4096x14336 1,32,64 q8,ssq16 )
  done ;;
rest32-table)
  i=0
  for cfg in 0 2 0 2; do
    i=$((i + 1))
    step "kernel table 4096x14336,4096x4096 rows ${REST_ROWS:-24,32} q8 PTI_WG_NARROW=auto PTI_WG_REST32=$cfg"
    ( export PTI_WG_NARROW=auto PTI_WG_REST32=$cfg; ktable "$OUT/kernels_rest32t_${cfg}_$i.json" 4096x14336,4096x4096 ${REST_ROWS:-24,32} q8 )
  done ;;
slack)
  gtest rest
  SYNTH_SEQS=24,32,64 SYNTH_TWINS=a SYNTH_ENVS="PTI_WG_REST32=0 PTI_WG_REST32=2,PTI_WG_SPLIT_SLACK=2 PTI_WG_REST32=0
      PTI_WG_REST32=2,PTI_WG_SPLIT_SLACK=2" synth_env ;;
rest32-synth)
  SYNTH_SEQS=24,32 SYNTH_TWINS=a SYNTH_ENVS="PTI_WG_REST32=0 PTI_WG_REST32=2 PTI_WG_REST32=0 PTI_WG_REST32=2" synth_env
  SYNTH_SEQS=128 SYNTH_TWINS=ab SYNTH_ENVS="PTI_WG_REST_TWINS=0 PTI_WG_REST_TWINS=1 PTI_WG_REST_TWINS=0 PTI_WG_REST_TWINS=1" synth_env ;;
rest-twins)
  SYNTH_SEQS=128 SYNTH_TWINS=ab SYNTH_ENVS="PTI_WG_REST_TWINS=0 PTI_WG_REST_TWINS=1 PTI_WG_REST_TWINS=0 PTI_WG_REST_TWINS=1" synth_env ;;
timeline)
  for cfg in ${TIMELINE_ENVS:-PTI_WG_TWIN_FORMS=1}; do
    step "pass_timeline 8b ${TIMELINE_SEQS:-32} ${TIMELINE_TWINS:-ab} $cfg"
    env ${cfg//,/ } timeout 150 python3 scripts/pass_timeline.py 8b ${TIMELINE_SEQS:-32} ${TIMELINE_TWINS:-ab} >> "$LOG" 2>&1
  done ;;
synth-all)
  step "bench --synthetic 8b --seqs 1,2,4,8,16,32,64 --twins a,ab"
  timeout 420 python3 -m pti_cli.cli bench --synthetic 8b --seqs 1,2,4,8,16,32,64 --twins a,ab --repeats 3 \
      --json "$OUT/synth_8b_all.json" 2>&1 | grep -v "^[┏┡└]" | tail -24 >> "$LOG" ;;
synth-twin-min)
  for v in ${TWIN_MINS:-17 9 17 9}; do
    step "bench --synthetic 8b --seqs 16,24,32 --twins ab PTI_WG_TWIN_MIN_ROWS=$v"
    PTI_WG_TWIN_MIN_ROWS=$v timeout 150 python3 -m pti_cli.cli bench --synthetic 8b --seqs 16,24,32 --twins ab --repeats 3 \
        --json "$OUT/synth_8b_twinmin$v.json" 2>&1 | grep -v "^[┏┡└]" | tail -8 >> "$LOG"
  done ;;
clusters)
  step "wg_gap.py --clusters: the clusters of 2, 4 and 8 the card holds at once, by form"
  PTI_WG_NARROW=1 timeout 100 python3 scripts/wg_gap.py --clusters >> "$LOG" 2>&1 ;;
gap)
  step "wg_gap.py (PTI_WG_NARROW=1) and the probe's forms for the same shapes"
  PTI_WG_NARROW=1 timeout 200 python3 scripts/wg_gap.py >> "$LOG" 2>&1
  timeout 200 python3 scripts/wgmma_probe.py --shapes 6144x4096,4096x4096,4096x14336 \
      --variants m4_w2_b4_r3_o2_c4_x1,m4_w2_b2_r4_o2_c8_x1,m8_w2_b2_r4_o2_c8_x1,m4_w2_b2_r4_o3_c8_x1 2>&1 | tail -40 >> "$LOG" ;;
kernels|kernels16|kernelsh16)
  act=bf16; [ "$s" = kernels16 ] && act=f16; [ "$s" = kernelsh16 ] && act=h16
  step "pti bench --kernels --kernel-act $act (issue 4's table; the Hopper rows also as \"given\")"
  timeout 240 python3 -m pti_cli.cli bench --kernels --kernel-act $act --json "$OUT/kernels_$act.json" 2>&1 \
      | grep -v "^[┏┡└]" | tail -100 >> "$LOG" ;;
waves)
  step "cluster waves: 64 rows of the cluster forms at 30 and 32 units of 128 rows, and at 60 (PTI_WG_NARROW=1)"
  PTI_WG_NARROW=1 ktable "$OUT/waves.json" 3840x4096,4096x4096,7680x4096,3840x14336,4096x14336 1,32,64 q8 ;;
fixtable)
  for fx in 0 1; do
    step "the fixup form: 1 and 64 rows, PTI_WG_NARROW=1 PTI_WG_FIX=$fx"
    PTI_WG_NARROW=1 PTI_WG_FIX=$fx ktable "$OUT/fix$fx.json" 4096x4096,4096x14336,6144x4096,3840x4096 1,64 q8,ssq16
  done ;;
m2table)
  for cfg in "PTI_WG_TALL_MIN_ROWS=17 PTI_WG_M2=0" "PTI_WG_TALL_MIN_ROWS=9 PTI_WG_M2=1"; do
    step "the tall class at 9-16 rows: $cfg (session 32)"
    (export $cfg; ktable "$OUT/m2_${cfg//[^A-Za-z0-9]/_}.json" 28672x4096,49152x4096 1,9,12,16,32 q8,ssq16)
  done ;;
m2ctas)
  # session 33: m2 at 16 rows of gate/up was slower than m4 at 32 (43.1 / 37.8 us, tiles given); m2 fits 3 CTAs a SM
  for cfg in ${M2CTAS_CFGS:-"PTI_WG_M2=0" "PTI_WG_SPREAD=0" "PTI_WG_SPREAD=1"}; do
    step "the tall class at 16 rows: $cfg"
    (export $cfg; ktable "$OUT/m2ctas_${cfg//[^A-Za-z0-9]/_}.json" 28672x4096,49152x4096,128256x4096 1,9,16 q8)
  done ;;
mmsmem)
  # session 33's next lead: the policy kernels at one row held to fewer CTAs a SM (PTI_MM_SMEM: 0, then 2 and 1 a SM)
  for v in ${MM_SMEMS:-0 34000 60000 0}; do
    step "the small matrices at 1 and 8 rows, PTI_MM_SMEM=$v"
    PTI_MM_SMEM=$v ktable "$OUT/mmsmem_$v.json" 6144x4096,4096x4096,4096x14336 1,8 q8,ssq16
  done ;;
twin-head)
  # session 33's next lead: two twins on m2 (PTI_WG_M2=2) lost 1-2% in the model, but one model's head gains most
  # from m2 (128256x4096 at 16 rows: 138 us against m4's 168); time both tall matrices for two twins both ways.
  # Session 34: m4 (M2=1), m2 at three CTAs a SM (M2=2 with session 33's spread rule, PTI_WG_SPREAD=1), and m2
  # with the waves rule (PTI_WG_SPREAD=2, the default: gate/up's 448 CTAs at two a SM, two waves either way)
  for cfg in ${TWIN_HEAD_CFGS:-"PTI_WG_M2=1" "PTI_WG_M2=2 PTI_WG_SPREAD=1" "PTI_WG_M2=2 PTI_WG_SPREAD=2"}; do
    step "two twins of the tall matrices at 9, 12 and 16 rows a twin: $cfg"
    (export $cfg; ktable "$OUT/twin_head_${cfg//[^A-Za-z0-9]/_}.json" 28672x4096,128256x4096 1,9,12,16 ssq16)
  done ;;
twin-narrow)
  # session 34: two twins at 9-16 rows a twin in the 16-row form in clusters of 4 at three CTAs a SM (m2_c4):
  # PTI_WG_TWIN_FORMS 0 (none: m4_c8 / m4_c4, session 33's), 1 (the narrow class: down), 2 (the wide class too: QKV)
  for v in ${TWIN_FORMS_CFGS:-0 1 2}; do
    step "two twins of the narrower classes at 9-16 rows a twin: PTI_WG_TWIN_FORMS=$v"
    PTI_WG_TWIN_FORMS=$v ktable "$OUT/twin_narrow_$v.json" 4096x14336,6144x4096 1,9,16 ssq16
  done ;;
v1sweep)
  # session 34: the one-row variants of the policy on gate/up (its Q8 cell sits at 90%) and the two small matrices
  step "one-row variants: 28672x4096, 6144x4096, 4096x4096 at 1 and 8 rows"
  timeout 200 python3 - "$OUT/v1sweep.json" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pti_cli.bench_kernels import bench_kernels, print_table
res = bench_kernels(shapes=((28672, 4096), (6144, 4096), (4096, 4096)), ms=(1, 8),
                    variants=("t1_r1_m1_u2", "t1_r1_m1_u4", "t1_r1_m1_u4_p1", "t1_r1_m1_u8", "t1_r2_m1_u4",
                              "t2_r1_m1_u2", "t2_r1_m1_u2_p1", "t2_r2_m1_u2"))
print_table(res)
open(sys.argv[1], "w").write(json.dumps(res, indent=1))
PY
  ;;
tall16-test)
  step "test_tall_class_16_row_form_in_the_pass"
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_model.py -k tall_class_16 2>&1 | tail -60 >> "$LOG" ;;
fix-ab)
  # only where the fixup form beat the clusters on down's shape (4096x14336, 64 rows, q8, tiles given)
  if python3 - "$OUT" <<'PY'
import json, sys
t = [{r["kernel"]: r["us"] for r in json.load(open(f"{sys.argv[1]}/fix{f}.json"))["rows"]
      if (r["n"], r["k"], r["m"], r["kind"]) == (4096, 14336, 64, "q8") and r["kernel"].endswith("given")} for f in (0, 1)]
sys.exit(0 if min(t[1].values()) < min(t[0].values()) else 1)
PY
  then
    i=0
    for fx in 0 1 0 1; do
      i=$((i + 1))   # (not inside the pipeline: its parts run in subshells; session 31's call 4 lost runs 1-2' JSON)
      step "bench --synthetic 8b --seqs 64 --twins a,ab PTI_WG_FIX=$fx"
      PTI_WG_FIX=$fx timeout 120 python3 -m pti_cli.cli bench --synthetic 8b --seqs 64 --twins a,ab --repeats 3 \
          --json "$OUT/synth_fix${fx}_$i.json" 2>&1 | grep -v "^[┏┡└]" | tail -6 >> "$LOG"
    done
  else step "fix-ab: the fixup form was not faster; no synthetic A/B"; fi ;;
save)
  step kcache_save; kcache_save ;;
attn-tiles)
  gtest "clusters_give_the_counters_bits or tiles_and_residual_form_in_the_pass"
  SYNTH_TWINS=ab SYNTH_SEQS=24,32 SYNTH_ENVS="PTI_ATTN_TILES=0 PTI_ATTN_TILES=1 PTI_ATTN_TILES=0 PTI_ATTN_TILES=1" synth_env
  SYNTH_TWINS=a SYNTH_SEQS=32,64 SYNTH_ENVS="PTI_WG_NARROW=auto PTI_WG_NARROW=1,PTI_ATTN_TILES=1 PTI_WG_NARROW=auto
      PTI_WG_NARROW=1,PTI_ATTN_TILES=1" synth_env ;;
short-one)
  SYNTH_TWINS=a SYNTH_SEQS=24,32,64 SYNTH_ENVS="PTI_WG_SHORT_ONE=0 PTI_WG_SHORT_ONE=32 PTI_WG_SHORT_ONE=0 PTI_WG_SHORT_ONE=32" synth_env ;;
short-two)
  SYNTH_TWINS=ab SYNTH_SEQS=40,64 SYNTH_ENVS="PTI_WG_SHORT_TWO=16 PTI_WG_SHORT_TWO=32 PTI_WG_SHORT_TWO=16 PTI_WG_SHORT_TWO=32" synth_env ;;
attn-ab)
  SYNTH_TWINS=ab SYNTH_SEQS=24,32 SYNTH_ENVS="PTI_ATTN_TILES=0 PTI_ATTN_TILES=1 PTI_ATTN_TILES=0 PTI_ATTN_TILES=1" synth_env ;;
vsweep)
  vsweep_rounds "$OUT/vsweep_${VSWEEP_ACT:-bf16}" ;;
overhead)
  step "table_overhead.py: the kernel table timed per replay / R, after a sleep, and as the marginal launch (session 44)"
  timeout 400 python3 scripts/table_overhead.py "$OUT/overhead.json" >> "$LOG" 2>&1 ;;
qkv-p1)
  # session 45: the wide class's 1-8 rows of one model on t1_r1_m1_u2_p1 (PTI_VARIANTS) against the policy's
  for act in bf16 h16; do
    i=0
    for cfg in PTI_VARIANTS=1:8:w=t1_r1_m1_u4 PTI_VARIANTS=1:8:w=t1_r1_m1_u2_p1 PTI_VARIANTS=1:8:w=t1_r1_m1_u4 \
               PTI_VARIANTS=1:8:w=t1_r1_m1_u2_p1; do
      i=$((i + 1))
      step "kernel table 6144x4096 rows 1,2,4,8 q8 $act $cfg"
      ( export "$cfg"; ktable "$OUT/kernels_qkv_${act}_$i.json" 6144x4096 1,2,4,8 q8 $act )
    done
  done
  SYNTH_TWINS=a SYNTH_SEQS=${SYNTH_SEQS:-1,2,4,8} SYNTH_ENVS="PTI_VARIANTS=1:8:w=t1_r1_m1_u4 PTI_VARIANTS=1:8:w=t1_r1_m1_u2_p1
      PTI_VARIANTS=1:8:w=t1_r1_m1_u4 PTI_VARIANTS=1:8:w=t1_r1_m1_u2_p1" synth_env ;;
xclass)
  for act in bf16 h16; do
    VSWEEP_SHAPES=28672x4096,128256x4096 VSWEEP_ACT=$act VSWEEP_VARIANTS=t1_r1_m1_u2,t1_r1_m1_u4,t1_r1_m1_u4_p1,t1_r1_m1_u2_p1 \
        vsweep_rounds "$OUT/vsweep_x_$act"
  done
  SYNTH_TWINS=a SYNTH_SEQS=${SYNTH_SEQS:-1,2,4,8} SYNTH_ENVS="PTI_VARIANTS=1:8:x=t1_r1_m1_u2 PTI_VARIANTS=1:8:x=t1_r1_m1_u4_p1
    PTI_VARIANTS=1:8:x=t1_r1_m1_u2 PTI_VARIANTS=1:8:x=t1_r1_m1_u4_p1" synth_env ;;
xrow0)
  python3 scripts/probe_source.py x_row0 /tmp/x_row0.hip || exit 1
  i=0
  for cfg in bf16:real bf16:probe bf16:real bf16:probe h16:real h16:probe; do
    i=$((i + 1)); act=${cfg%:*}; src=${cfg#*:}
    step "kernel table, 4 matrices, rows 1,2,4,8, $act, $src source"
    ( [ $src = probe ] && export PTI_KERNEL_SOURCE=/tmp/x_row0.hip
      ktable "$OUT/kernels_xrow0_${act}_${src}_$i.json" 6144x4096,4096x4096,28672x4096,4096x14336 1,2,4,8 q8,ssq16 $act )
  done ;;
xrow16)
  probe_ab x_row0 1,16 "every lane reads activation row 0" ;;
nowait)
  probe_ab nowait 1,8 "no griddepcontrol.wait" ;;
pre2)
  probe_tested_ab pre2 1,8,16 "two steps of weights before the wait" ;;
srcab)
  [ -f "${SRC_AB:-}" ] || { echo "srcab: SRC_AB=${SRC_AB:-} is not a file" >> "$LOG"; continue; }
  for act in bf16 h16; do
    i=0
    for src in tree other tree other; do
      i=$((i + 1))
      step "kernel table, 4 matrices, rows ${SRCAB_ROWS:-1,2,4,8,16}, $act, $src source (SRC_AB=$SRC_AB)"
      ( [ $src = other ] && export PTI_KERNEL_SOURCE="$SRC_AB"
        ktable "$OUT/kernels_srcab_${act}_${src}_$i.json" 6144x4096,4096x4096,28672x4096,4096x14336 \
          ${SRCAB_ROWS:-1,2,4,8,16} q8,ssq16 $act )
    done
  done ;;
p2)
  [ "${P2_TEST:-1}" = 1 ] && gtest "every_variant or fuses_the_same_bits or carveout"
  i=0
  for cfg in ${P2_CFGS:-h16:policy h16:p2 h16:policy h16:p2 bf16:policy bf16:p2}; do
    i=$((i + 1)); act=${cfg%:*}; v=${cfg#*:}
    step "kernel table, 4 matrices, rows 1,2,4,8, q8, $act, $v"
    ( [ $v = p2 ] && export PTI_P2=1
      ktable "$OUT/kernels_p2_${act}_${v}_$i.json" 6144x4096,4096x4096,28672x4096,4096x14336 1,2,4,8 q8 $act )
  done ;;
ctatrace)
  python3 scripts/probe_source.py trace /tmp/trace.hip || exit 1
  step "CTA timeline (scripts/cta_timeline.py on the trace probe) ${CTA_CELLS:-}"
  PTI_KERNEL_SOURCE=/tmp/trace.hip timeout 300 python3 scripts/cta_timeline.py ${CTA_CELLS:-} --npz "$OUT/trace.npz" >> "$LOG" 2>&1 ;;
cluster-probe)
  step "cluster placement probe"
  timeout 120 python3 scripts/cluster_probe.py --json "$OUT/cluster_probe.json" >> "$LOG" 2>&1 ;;
esac; done
step done
