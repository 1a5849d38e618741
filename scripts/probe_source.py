#!/usr/bin/env python3
"""Write a probe copy of kernels/pti_kernel.hip: the same kernels with one thing changed, for timing only
(their outputs are wrong).  Run a backend on it with PTI_KERNEL_SOURCE=OUT (compile.kernel_source).
    python3 scripts/probe_source.py PROBE OUT [--compile NVRTC_LIB_DIR CACHE_DIR]
Probes:
  x_row0   every lane of the tensor-core kernels reads activation row 0, so M rows cost the activation
           traffic of one row (L1 and L2) while the instructions, MMAs and epilogue stay those of M rows
           (docs/perf.md, session 47: does the H200's loss from one to eight rows come from that traffic?)
--compile: build the probe's sm_90a binary into CACHE_DIR with the NVRTC in NVRTC_LIB_DIR (the device's
version), so a device call carrying CACHE_DIR does not spend its time compiling it."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# probe -> (text in the source, its replacement); the text must occur exactly once
PROBES = {
    "x_row0": ("(p.xok[tw][mt] ? (pti_u64)row * a.ldx : 0)", "(pti_u64)0"),
}


def probe_text(name: str, source: str) -> str:
    old, new = PROBES[name]
    if source.count(old) != 1:
        raise SystemExit(f"probe_source: {name}: expected one {old!r} in the source, found {source.count(old)}")
    return source.replace(old, new)


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
