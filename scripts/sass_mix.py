#!/usr/bin/env python3
"""Instruction mix of the matmul kernels' main loops, on the CPU: compile kernels/pti_kernel.hip of a
tree for sm_90 through NVRTC, disassemble it with nvdisasm, and print per kernel its registers,
spills and the instructions of its main loop (the shortest loop holding both an MMA and a
streaming weight load), by opcode.  Fewer instructions per block helped at 16 rows (docs/perf.md,
session 8), little at one row (session 10, item 1: not bound by each warp's issue there).
nvdisasm: on PATH, or NVDISASM=path (e.g. from the nvidia-cuda-nvdisasm wheel; not a project
dependency).
    python3 scripts/sass_mix.py [--tree DIR] [--probe | --arch sm_90a] [--dump] KERNEL [KERNEL ...]
--probe: the kernels of scripts/wgmma_probe.cu (sm_90a) instead; their main loop is the shortest loop
holding a warpgroup MMA (HGMMA), with the instructions that run once a slice included.
    e.g. python3 scripts/sass_mix.py pti_mm_bf16_out_t1_r1_m1_u4 pti_mm_bf16_out_t1_r1_m2_u1_p1
--wait: the kernels matching the KERNEL regexes, each with the global loads it can issue before griddepcontrol.wait
(and how many are not weight-shaped: check_kernels.py --nvdisasm fails on those)
    e.g. python3 scripts/sass_mix.py --arch sm_90a --wait '_p[12]$'"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def functions(sass: str) -> tuple[dict, dict]:
    """nvdisasm text -> {kernel: [(address, instruction)]}, {kernel: {label: address}}."""
    funcs, labels, cur, lab, pending = {}, {}, None, {}, []
    for line in sass.splitlines():
        m = re.match(r"\.text\.(\w+):", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            lab = labels.setdefault(m.group(1), {})
            continue
        m = re.match(r"(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(.*?)\s*;", line)
        if m and cur is not None:
            addr = int(m.group(1), 16)
            lab.update((p, addr) for p in pending)
            pending = []
            cur.append((addr, m.group(2).strip()))
    return funcs, labels


def main_loop(ins: list, lab: dict) -> list:
    loops = []
    for addr, text in ins:
        target = re.findall(r"(\.L_x_\d+)", text) if "BRA" in text else []
        start = lab.get(target[-1]) if target else None
        if start is not None and start < addr:
            body = [x for x in ins if start <= x[0] <= addr]
            if any("HGMMA" in t for _, t in body) or (any("HMMA" in t for _, t in body) and any(".NA." in t for _, t in body)):
                loops.append(body)
    return min(loops, key=len) if loops else []


def loads_before_wait(ins: list, lab: dict) -> list[str] | None:
    """The global loads (LDG, and cp.async's LDGSTS and TMA's UTMALDG) a kernel can issue before it has passed a
    griddepcontrol.wait (SASS ACQBULK); None: no wait.  Paths, not addresses: a walk from the entry along
    fall-throughs and branches that stops at each unpredicated wait (a kernel may wait in more than one branch).
    ptxas moves ld.global.nc loads across the wait both ways (docs/perf.md, session 55)."""
    if not any(text.endswith("ACQBULK") for _, text in ins):
        return None
    at = {addr: i for i, (addr, _) in enumerate(ins)}
    seen, todo, loads = set(), [0], []
    while todo:
        i = todo.pop()
        if i in seen or i >= len(ins):
            continue
        seen.add(i)
        words = ins[i][1].split()
        pred = words[0].startswith("@")
        op = words[1 if pred else 0]
        if op == "ACQBULK" and not pred:
            continue
        if op.startswith(("LDG", "UTMALDG")) and not op.startswith("LDGDEPBAR"):   # (LDGDEPBAR: cp.async's commit)
            loads.append((ins[i][0], ins[i][1]))
        if op.startswith(("BRA", "JMP", "CALL")):   # (a called subroutine's body too)
            todo += [at[lab[t]] for t in re.findall(r"(\.L_x_\d+)", ins[i][1]) if t in lab]
            if op in ("BRA", "JMP") and not pred:
                continue
        elif op.startswith(("EXIT", "RET", "KILL")) and not pred:
            continue
        todo.append(i + 1)
    return [text for _, text in sorted(loads)]


def early_activation_loads(ins: list, lab: dict) -> list[str]:
    """Of loads_before_wait, those that are not weight-shaped: weights stream in 16 bytes with L1::no_allocate
    (.NA.) and their scales in 4 (a plain LDG.E, .nc or not), while activations are cached 16-byte or 2-byte
    loads.  Anything else there may read the launch before's outputs before they are written.  A kernel with no
    wait is not a dependent launch's and is not checked."""
    return [t for t in loads_before_wait(ins, lab) or []
            if not re.search(r"(^|\s)LDG\.E(\.NA\.128(\.CONSTANT)?|(\.CONSTANT)?)\s", t)]


def disassemble(binary: bytes, nvdisasm: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(binary)
        f.flush()
        return subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--dump", action="store_true", help="print the loop's instructions too")
    ap.add_argument("--probe", action="store_true", help="the wgmma probe's kernels (scripts/wgmma_probe.cu)")
    ap.add_argument("--arch", default="sm_90", help="pti_kernel.hip's target (sm_90a: with the Hopper kernels)")
    ap.add_argument("--wait", action="store_true",
                    help="per kernel matching a KERNEL regex: the global loads before griddepcontrol.wait")
    ap.add_argument("--source", help="this kernel source instead of the tree's (e.g. a scripts/probe_source.py copy)")
    ap.add_argument("--nvrtc-dir", help="compile with the NVRTC in this folder (as check_kernels.py)")
    ap.add_argument("kernels", nargs="+")
    args = ap.parse_args()
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        print("sass_mix: nvdisasm not found (PATH or NVDISASM=...)", file=sys.stderr)
        return 2
    sys.path.insert(0, args.tree)
    if args.nvrtc_dir:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from check_kernels import load_nvrtc
        load_nvrtc(Path(args.nvrtc_dir))
    from pti_cli.backends.compile import compile_nvrtc
    if args.probe:
        sys.path.insert(0, str(Path(args.tree) / "scripts"))
        from wgmma_probe import probe_source
        out = compile_nvrtc(probe_source(), "sm_90a", options=("-std=c++17", "--ptxas-options=-v"))
    else:
        out = compile_nvrtc(Path(args.source or Path(args.tree) / "kernels" / "pti_kernel.hip").read_text(), args.arch)
    funcs, labels = functions(disassemble(out.binary, nvdisasm))
    if args.wait:
        for name in sorted(f for f in funcs if any(re.search(k, f) for k in args.kernels)):
            found = loads_before_wait(funcs[name], labels[name])
            print(f"{name}: " + ("no wait" if found is None else
                                 f"{len(found)} loads before the wait, "
                                 f"{len(early_activation_loads(funcs[name], labels[name]))} of them not weights"))
        return 0
    for name in args.kernels:
        if name not in funcs:
            print(f"{name}: no such kernel")
            continue
        body = main_loop(funcs[name], labels[name])
        mix = collections.Counter()
        for _, text in body:
            op = text.split()
            mix[(op[1] if op[0].startswith("@") else op[0]).split(".")[0]] += 1
        if args.dump:
            print("\n".join(t for _, t in body))
        r = out.resources[name]
        print(f"{name}: {r['registers']} registers, {r['spill_stores']} bytes spilled; main loop "
              f"{len(body)} instructions, {mix['HMMA'] + mix['HGMMA']} MMAs: " + " ".join(f"{k}:{v}" for k, v in mix.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
