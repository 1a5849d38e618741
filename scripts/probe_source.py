#!/usr/bin/env python3
"""Write a probe copy of kernels/pti_kernel.hip: the same kernels with one thing changed, for timing (the outputs
of x_row0, nowait and trace are wrong; pre2's are the kernels' own, and xnc is not for running).  Run a backend on it with PTI_KERNEL_SOURCE=OUT (compile.kernel_source).
    python3 scripts/probe_source.py PROBE OUT [--compile NVRTC_LIB_DIR CACHE_DIR]
Probes:
  x_row0   every lane of the tensor-core kernels reads activation row 0, so M rows cost the activation
           traffic of one row (L1 and L2) while the instructions, MMAs and epilogue stay those of M rows
           (docs/perf.md, session 47: does the H200's loss from one to eight rows come from that traffic?)
  nowait   the tensor-core kernels skip griddepcontrol.wait: each CTA computes as soon as it is resident, so a
           chain of launches pays no dependency (timing only: in the kernel table no launch reads another's
           outputs).  Session 55: how much of a small matrix's time over its bytes is the dependency?
  xnc      the tensor-core kernels load activations through ld.global.nc (__ldg) again, as before session 57:
           with NVRTC 13.5 ptxas then moves them above griddepcontrol.wait in 33 kernels, a race (session 55's
           change as it was).  Not for timing: the case check_kernels --nvdisasm must fail on
           (PTI_KERNEL_SOURCE=OUT)
  pre2     every pipelined (_p1) kernel requests two steps of weights before griddepcontrol.wait, not one: the
           loop's second buffer B is filled there too, and the loop's first pass, peeled, computes it without
           loading it again.  The same loads in the same order of arithmetic, so the same bits (its GPU tests
           run on it); twice the bytes in flight while a CTA waits, in registers the loop holds anyway
           (session 58: does more of the slice before the wait hide more of the dependency?)
  trace    the tensor-core kernels record, for every CTA, the global timer when it enters, when its wait
           returns, when warp 0 leaves the main loop and when pti_finish is done, with its SM and block
           (pti_trace_buf, 6 words a CTA in entry order: scripts/cta_timeline.py reads them).  Thread 0 takes
           its slot by an atomic at entry, used only at the end; the stamps wait in shared memory.
--compile: build the probe's sm_90a binary into CACHE_DIR with the NVRTC in NVRTC_LIB_DIR (the device's
version), so a device call carrying CACHE_DIR does not spend its time compiling it."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE_MAX = 1 << 17   # CTAs a trace holds (scripts/cta_timeline.py reads the same number)
TRACE_HEAD = f"""
#define PTI_TRACE_MAX {TRACE_MAX}u
__device__ unsigned long long pti_trace_buf[PTI_TRACE_MAX * 6];
__device__ unsigned pti_trace_n;
__device__ __forceinline__ unsigned long long pti_now() {{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}}
__device__ __forceinline__ unsigned pti_smid() {{
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}}
"""
ENTRY = "    int unit = blockIdx.x;\n    pti_pdl_trigger();\n    if (INVC && a.n_inv) {"
WAIT = "    pti_pdl_wait();\n    if (PF == 2) {\n"
LOOP_END = "    // PF = 0, U = 1: the tail's first block"
PRE1 = "    PtiStep<NTW, RG, MT, U> A;\n    if (PF == 1 && nsteps > 0) pti_load_w_step<0, NTW, RG, MT, U, true>(A, p);\n"
LOOP_HEAD = ("        PtiStep<NTW, RG, MT, U> B;\n        if (nsteps > 0) pti_load_x_step<0>(A, p);\n"
             "        int i = 0;\n")
TWO_LEFT = "        if (i + 1 < nsteps) {                   // two steps left\n            pti_load_step<1, XF>(B, p);\n"
FINISH = "    pti_finish<TIN, TOUT, NTW, RG, MT, INVC>(a, unit, warp, lane, acc, (float*)pti_smem);\n"

# probe -> [(text in the source, its replacement), ...]; each text must occur exactly once
PROBES = {
    "x_row0": [("(p.xok[tw][mt] ? (pti_u64)row * a.ldx : 0)", "(pti_u64)0")],
    "nowait": [(WAIT, WAIT.replace("    pti_pdl_wait();\n", ""))],
    # session 55's race, kept as the case check_kernels' guard must catch (docs/perf.md, sessions 56-57)
    "xnc": [("    if (vec_ok && k0 + 8 <= K) return pti_ld_v4(p);", "    if (vec_ok && k0 + 8 <= K) return __ldg((const uint4*)p);"),
            ("? pti_ld_v4(p.x[tw][mt] + (J * U + u) * 8 * 4)", "? __ldg(p.x[tw][mt] + (J * U + u) * 8 * 4)")],
    "pre2": [(PRE1, PRE1.replace("A;\n", "A, B;\n") +
                     "    if (PF == 1 && nsteps > 1) pti_load_w_step<1, NTW, RG, MT, U, true>(B, p);\n"),
             (LOOP_HEAD, "        if (nsteps > 0) pti_load_x_step<0>(A, p);\n"
                         "        if (nsteps > 1) pti_load_x_step<1>(B, p);   // its weights came before the wait\n"
                         "        int i = 0;\n"
                         "        if (nsteps > 2) {                       // steps 0 and 1, B not loaded again\n"
                         "            pti_compute_step<TIN>(A, acc, k);\n"
                         "            pti_load_step<2, XF>(A, p);\n"
                         "            pti_compute_step<TIN>(B, acc, k);\n"
                         "            pti_advance<2, U>(p);\n"
                         "            i = 2;\n"
                         "        }\n"),
             (TWO_LEFT, TWO_LEFT.replace("            pti_load_step", "            if (i > 0) pti_load_step"))],
    "trace": [
        ("__device__ __forceinline__ void pti_pdl_trigger() {", TRACE_HEAD + "__device__ __forceinline__ void pti_pdl_trigger() {"),
        (ENTRY, ENTRY.replace("    pti_pdl_trigger();\n",
                              "    pti_pdl_trigger();\n    __shared__ unsigned long long pti_tr[3];\n"
                              "    unsigned pti_slot = 0;\n"
                              "    if (threadIdx.x == 0) { pti_tr[0] = pti_now(); pti_slot = atomicAdd(&pti_trace_n, 1u); }\n")),
        (WAIT, WAIT.replace("    if (PF == 2) {\n", "    if (threadIdx.x == 0) pti_tr[1] = pti_now();\n    if (PF == 2) {\n")),
        (LOOP_END, "    if (threadIdx.x == 0) pti_tr[2] = pti_now();\n" + LOOP_END),
        (FINISH, FINISH + "    if (threadIdx.x == 0 && pti_slot < PTI_TRACE_MAX) {\n"
                          "        unsigned long long* t = pti_trace_buf + (unsigned long long)pti_slot * 6;\n"
                          "        t[3] = pti_now(); t[0] = pti_tr[0]; t[1] = pti_tr[1]; t[2] = pti_tr[2];\n"
                          "        t[4] = pti_smid() | ((unsigned long long)blockIdx.x << 16);\n"
                          "        t[5] = (unsigned long long)a.q[0];\n    }\n"),
    ],
}


def probe_text(name: str, source: str) -> str:
    for old, new in PROBES[name]:
        if source.count(old) != 1:
            raise SystemExit(f"probe_source: {name}: expected one {old!r} in the source, found {source.count(old)}")
        source = source.replace(old, new)
    return source


def main() -> int:
    if len(sys.argv) not in (3, 6) or sys.argv[1] not in PROBES or (len(sys.argv) == 6 and sys.argv[3] != "--compile"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[2])
    out.write_text(probe_text(sys.argv[1], (ROOT / "kernels" / "pti_kernel.hip").read_text()))
    if len(sys.argv) == 6:
        from check_kernels import load_nvrtc
        load_nvrtc(Path(sys.argv[4]))
        os.environ["PTI_KERNEL_SOURCE"] = str(out.resolve())
        os.environ["PTI_CACHE_DIR"] = str(Path(sys.argv[5]).resolve())
        from pti_cli.backends.compile import cache_path, cached_binary, nvrtc_version
        cached_binary("cuda", "sm_90a")
        print(nvrtc_version(), cache_path("cuda", "sm_90a").name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
