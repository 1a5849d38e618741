#!/usr/bin/env python3
"""CI check of kernels/ with no GPU: compile pti_kernel.hip through NVRTC for sm_80,
sm_90 and sm_90a (the backend's target on sm_90 unless PTI_WGMMA=0: the Hopper kernels
too) and pti_ops.hip for sm_80 and sm_90, print ptxas' resource report per kernel, and
fail on a compile error, on any local-memory use (stack frame or spills) or on missing
Hopper kernels.  Where `hipcc` (ROCm or Debian's) is installed, also compile the HIP
path for gfx90a and gfx1030 (an offline compile only: nothing has run on AMD hardware).
    python3 scripts/check_kernels.py [--nvrtc-dir DIR]
--nvrtc-dir: compile with the NVRTC in DIR (an nvidia-cuda-nvrtc wheel's nvidia/cu13/lib) instead of
the installed one.  `make test` runs it a second time with the H200 image's NVRTC (13.0), which is
what compiles the kernels on that card: in session 28 it refused code 13.5 took, and spilled where
13.5 did not.
--nvdisasm: also disassemble the sm_90 and sm_90a binaries and fail where a kernel issues a load before its
griddepcontrol.wait that is not a weight or scale load (scripts/sass_mix.early_activation_loads): ptxas moves
ld.global.nc loads across the wait (docs/perf.md, session 55), which would read the launch before's outputs
too soon.  `make test` passes the nvidia-cuda-nvdisasm wheel's."""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pti_cli.backends.compile import compile_nvrtc, kernel_source, nvrtc_version  # noqa: E402
from pti_cli.errors import PtiError  # noqa: E402

ARCHS = {"pti_kernel.hip": ("sm_80", "sm_90", "sm_90a"), "pti_ops.hip": ("sm_80", "sm_90")}


def hopper_kernels() -> set[str]:
    """The Hopper kernels the CUDA backend loads on sm_90 (CudaBackend._load_wg), by default or under
    PTI_WG_FIX, two twins' forms included."""
    from pti_cli.backends.cuda import WG_FIX, WG_OUTS, WG_TWIN_VARIANTS, WG_VARIANTS, wg_name
    forms = [v for table in (WG_VARIANTS, WG_TWIN_VARIANTS) for vs in table.values() for v in vs] + [WG_FIX]
    return {"pti_wg_tiles"} | {wg_name(t, o, v[1]) for v in forms for t in ("bf16", "f16") for o in WG_OUTS}


def load_nvrtc(lib_dir: Path) -> None:
    """Load the NVRTC in lib_dir before cuda.bindings looks for one: it takes the library already
    loaded (libnvrtc.so.13), which finds its builtins library loaded too."""
    builtins = sorted(lib_dir.glob("libnvrtc-builtins.so.*"))
    libs = sorted(lib_dir.glob("libnvrtc.so.*"))
    if not builtins or not libs:
        raise SystemExit(f"check_kernels: no libnvrtc.so.* and libnvrtc-builtins.so.* in {lib_dir}")
    for lib in (builtins[0], libs[0]):
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvrtc-dir", type=Path, help="compile with the NVRTC library in this folder")
    ap.add_argument("--nvdisasm", help="check the loads before each kernel's wait with this nvdisasm")
    args = ap.parse_args()
    if args.nvrtc_dir:
        load_nvrtc(args.nvrtc_dir)
    failed = False
    print(f"check_kernels: {nvrtc_version()}")
    for name, arch in [(n, a) for n, archs in ARCHS.items() for a in archs]:
        print(f"{name}:")
        try:
            out = compile_nvrtc(kernel_source(name), arch)
        except PtiError as e:
            print(f"FAIL {name} {arch}: {e}")
            failed = True
            continue
        print(f"{arch}: {len(out.resources)} kernels, CUBIN {len(out.binary)} bytes")
        print(f"  {'kernel':<34} {'regs':>5} {'smem':>6} {'stack':>6} {'spill st/ld':>12}")
        for name, r in sorted(out.resources.items()):
            bad = r["stack"] or r["spill_stores"] or r["spill_loads"]
            print(f"  {name:<34} {r['registers']:>5} {r['smem']:>6} {r['stack']:>6} "
                  f"{r['spill_stores']:>5}/{r['spill_loads']:<6}{'  LOCAL MEMORY' if bad else ''}")
            failed |= bool(bad)
        if not out.resources:
            print(f"FAIL {arch}: no resource report in the compiler log")
            failed = True
        if args.nvdisasm and arch.startswith("sm_90"):
            failed |= not check_early_loads(out.binary, args.nvdisasm, arch)
        if arch == "sm_90a" and not hopper_kernels() <= set(out.resources):
            print(f"FAIL {arch}: the Hopper kernels (pti_wg_*) are missing")
            failed = True
    if not args.nvrtc_dir:   # (once: it does not depend on NVRTC)
        failed |= not check_hipcc()
    print("check_kernels: FAIL" if failed else "check_kernels: OK")
    return 1 if failed else 0


# Kernels whose loads before a wait are their design, behind a run-time flag the SASS does not show: the fused
# attention's early form requests cached keys and values before its wait inside captured passes (pti_ops.hip,
# attn_rope), and the Hopper matmuls' rest form reads its inputs with no wait, started only once the launch
# beside it is past its own (pti_kernel.hip, pti_wg_mm).  Every other kernel that waits is checked.
EARLY_BY_DESIGN = ("attn_rope", "pti_wg_")


def check_early_loads(binary: bytes, nvdisasm: str, arch: str) -> bool:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sass_mix import disassemble, early_activation_loads, functions
    funcs, labels = functions(disassemble(binary, nvdisasm))
    waits = {name for name, ins in funcs.items() if any(t.endswith("ACQBULK") for _, t in ins)}
    checked = {name for name in waits if not name.startswith(EARLY_BY_DESIGN)}
    bad = {name: early for name in checked if (early := early_activation_loads(funcs[name], labels[name]))}
    for name, early in sorted(bad.items()):
        print(f"FAIL {arch} {name}: {len(early)} loads before griddepcontrol.wait that are not weights: {early[0]}")
    print(f"  {arch}: {len(waits)} of {len(funcs)} kernels wait for the launch before ({len(waits) - len(checked)} "
          f"exempt: EARLY_BY_DESIGN); {'none' if not bad else len(bad)} of the other {len(checked)} load "
          f"activations before the wait")
    return not bad


def check_hipcc() -> bool:
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        print("hipcc: not installed, HIP compile not checked")
        return True
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [hipcc, "--offload-arch=gfx90a", "--offload-arch=gfx1030", "-O3", "-std=c++17", "-c",
               str(Path(__file__).resolve().parents[1] / "kernels" / "pti_kernel.hip"), "-o", f"{tmp}/k.o"]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    if r.returncode != 0:
        print(f"FAIL hipcc: {(r.stderr or r.stdout).strip()[-2000:]}")
        return False
    print("hipcc: gfx90a, gfx1030 compile OK")
    return True


if __name__ == "__main__":
    sys.exit(main())
