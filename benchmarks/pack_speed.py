"""Pack speed vs a plain file copy, in the same run.

Generates a random Q8_0 llama GGUF of about 1.4 GB (and a second one for the
two-twin case), then times, alternating, best of --repeat:
  copy1  shutil.copyfile(A)                      (the same bytes as one checkpoint; sendfile, in the kernel)
  loop1  a read/write loop copying A through one user-space buffer (for context)
  pack1  `pti pack A -o out.ssq`                 (identical twins: Q8_0 copied bit for bit)
  copy2  shutil.copyfile(A) + shutil.copyfile(B)
  pack2  `pti pack A B -o out.ssq`               (two twins: SSQ16 interleave)
  new1   shutil.copyfile(A) to a new file          (for context: no old copy to truncate)
The pack times are of the `pti` command in a subprocess (start-up, hashing and
header included).  Every case replaces its own output of the previous round
(the same number of bytes), as `cp` and `pti pack --force` do when run again;
an untimed first round makes those outputs.
Each timing starts after os.sync(); it is reported twice:
page cache (the command alone) and durable (the command plus os.sync() of
what it wrote).  Target: pack speed >= 0.5x copy speed.  It also prints the
ratio of each round alone, the CPU time other processes and kernel threads used
during each timing (a disturbed run shows there) and the load average.

    python benchmarks/pack_speed.py [--dir /tmp/pti-bench] [--layers 5] [--repeat 2] [--pti PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import gguf

HIDDEN, FFN, KV, VOCAB = 4096, 14336, 1024, 32000


def shapes(layers: int) -> dict[str, tuple[int, ...]]:
    s: dict[str, tuple[int, ...]] = {"token_embd.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        b = f"blk.{i}."
        s.update({b + "attn_norm.weight": (HIDDEN,), b + "attn_q.weight": (HIDDEN, HIDDEN),
                  b + "attn_k.weight": (KV, HIDDEN), b + "attn_v.weight": (KV, HIDDEN),
                  b + "attn_output.weight": (HIDDEN, HIDDEN), b + "ffn_norm.weight": (HIDDEN,),
                  b + "ffn_gate.weight": (FFN, HIDDEN), b + "ffn_up.weight": (FFN, HIDDEN),
                  b + "ffn_down.weight": (HIDDEN, FFN)})
    s["output_norm.weight"] = (HIDDEN,)
    s["output.weight"] = (VOCAB, HIDDEN)
    return s


def random_q8(rng, rows: int, k: int) -> np.ndarray:
    """Random Q8_0 bytes [rows, k/32*34]: random ints, f16 scales in [1e-4, 1e-2]."""
    blocks = rng.integers(0, 256, (rows, k // 32, 34), dtype=np.uint8)
    blocks[:, :, :2] = rng.uniform(1e-4, 1e-2, (rows, k // 32)).astype("<f2").view(np.uint8).reshape(rows, k // 32, 2)
    return blocks.reshape(rows, -1)


def write_q8_gguf(path: Path, layers: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    for key, val in (("block_count", layers), ("context_length", 4096), ("embedding_length", HIDDEN),
                     ("feed_forward_length", FFN), ("attention.head_count", 32), ("attention.head_count_kv", 8)):
        w.add_uint32(f"llama.{key}", val)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(VOCAB)])
    sh = shapes(layers)
    for name, s in sh.items():
        if len(s) == 1:
            w.add_tensor_info(name, s, np.dtype(np.float32), 4 * s[0])
        else:
            w.add_tensor_info(name, (s[0], s[1] // 32 * 34), np.dtype(np.uint8), s[0] * s[1] // 32 * 34,
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    w.write_padding(f, f.tell())
    for name, s in sh.items():
        if len(s) == 1:
            data = rng.standard_normal(s).astype(np.float32)
            f.write(data.tobytes())
            w.write_padding(f, data.nbytes)
            continue
        step = max(1, (64 << 20) // (s[1] // 32 * 34))
        for r0 in range(0, s[0], step):
            f.write(random_q8(rng, min(step, s[0] - r0), s[1]).tobytes())
        w.write_padding(f, s[0] * s[1] // 32 * 34)
    w.close()


def copy_loop(src: Path, dst: Path) -> None:
    """The same bytes through user space: read into one buffer, write it out."""
    buf = memoryview(bytearray(1 << 20))
    with open(src, "rb", buffering=0) as f, open(dst, "wb", buffering=0) as g:
        while n := f.readinto(buf):
            g.write(buf[:n])


def busy_cpu() -> tuple[float, float]:
    """(CPU seconds the whole machine spent busy, CPU seconds of this process and its
    children): their difference over a timing is what others ran meanwhile."""
    ticks = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, own     # all but idle and iowait


OTHERS: list[float] = []      # per timing: CPU seconds used by other processes and kernel threads


def timed(fn, durable: bool, setup=None) -> float:
    """Seconds for fn(), starting with no dirty pages (setup() and os.sync before,
    untimed); durable: the timing also includes os.sync() of what fn wrote.
    Appends to OTHERS the CPU time others used meanwhile (a disturbed run shows)."""
    if setup is not None:
        setup()
    os.sync()
    m0, o0 = busy_cpu()
    t = time.perf_counter()
    fn()
    if durable:
        os.sync()
    t = time.perf_counter() - t
    m1, o1 = busy_cpu()
    OTHERS.append(max(0.0, (m1 - m0) - (o1 - o0)))
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/pti-bench")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--pti", default=str(Path(sys.executable).with_name("pti")), help="the pti command to time")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    a, b = d / "a.gguf", d / "b.gguf"
    for p, seed in ((a, 1), (b, 2)):
        if not p.exists():
            write_q8_gguf(p, args.layers, seed)
    pti = args.pti
    # Every case replaces its own result of the previous round (the same bytes):
    # copies truncate their target, pack renames over its own output.  (One output
    # shared by pack A and pack A B made pack A B replace a file half its size.)
    out1, out2, cp_a, cp_b = d / "out1.ssq", d / "out2.ssq", d / "copy_a.gguf", d / "copy_b.gguf"

    def pack(out: Path, *srcs: Path) -> None:
        subprocess.run([pti, "pack", *map(str, srcs), "-o", str(out), "--force", "-q"], check=True)

    cases = {"copy1": lambda: shutil.copyfile(a, cp_a), "loop1": lambda: copy_loop(a, cp_a), "pack1": lambda: pack(out1, a),
             "copy2": lambda: (shutil.copyfile(a, cp_a), shutil.copyfile(b, cp_b)), "pack2": lambda: pack(out2, a, b),
             "new1": lambda: shutil.copyfile(a, new_a)}
    # new1, for context: the copy to a file that does not exist (removed untimed): no truncation
    # and no ext4 flush at close (auto_da_alloc), but its page cache cannot reuse the pages of
    # an old copy (on this VM, memory nobody just freed is the slow part: docs/perf.md).
    new_a = d / "new_a.gguf"
    setups = {"new1": lambda: new_a.unlink(missing_ok=True)}
    runs = {(k, durable): [] for k in cases for durable in (False, True)}
    load0 = os.getloadavg()
    for k, fn in cases.items():      # untimed: every timed run then replaces an output of its own
        timed(fn, False, setups.get(k))
    OTHERS.clear()
    others = {key: [] for key in runs}
    for _ in range(args.repeat):
        for durable in (False, True):
            for k, fn in cases.items():
                runs[k, durable].append(timed(fn, durable, setups.get(k)))
                others[k, durable].append(OTHERS[-1])
    best = {key: min(v) for key, v in runs.items()}
    size_a = a.stat().st_size
    print(f"source A: {size_a / 1e9:.3f} GB Q8_0 ({args.layers} layers); identical-twin output "
          f"{out1.stat().st_size / 1e9:.3f} GB, two-twin output {out2.stat().st_size / 1e9:.3f} GB; best of {args.repeat}")
    for durable in (False, True):
        print("page cache (no sync)" if not durable else "durable (timing includes os.sync)")
        for case, copy, pk, n_in in (("pack A (mode 8)", "copy1", "pack1", 1), ("pack A B (mode 16)", "copy2", "pack2", 2)):
            gb = n_in * size_a / 1e9
            tp, tc = best[pk, durable], best[copy, durable]
            print(f"  {case:20s}: pack {tp:6.2f} s ({gb / tp:5.2f} GB/s in), copy {tc:6.2f} s ({gb / tc:5.2f} GB/s): "
                  f"pack at {tc / tp:.2f}x copy speed")
        tl = best["loop1", durable]
        print(f"  {'(user-space copy)':20s}: read/write loop of A {tl:6.2f} s ({size_a / 1e9 / tl:5.2f} GB/s): "
              f"pack A at {tl / best['pack1', durable]:.2f}x its speed")
        tn = best["new1", durable]
        print(f"  {'(copy to a new file)':20s}: copy of A {tn:6.2f} s ({size_a / 1e9 / tn:5.2f} GB/s): "
              f"pack A at {tn / best['pack1', durable]:.2f}x its speed")
        print("  every run (s): " + "; ".join(f"{k} " + " ".join(f"{t:.2f}" for t in runs[k, durable]) for k in cases))
        print("  ratio per round (same round): " + "; ".join(
            f"{case} " + " ".join(f"{c / p:.2f}" for c, p in zip(runs[copy, durable], runs[pk, durable]))
            for case, copy, pk in (("pack A", "copy1", "pack1"), ("pack A B", "copy2", "pack2"))))
        print("  CPU s used by others during each run: " + "; ".join(
            f"{k} " + " ".join(f"{t:.2f}" for t in others[k, durable]) for k in cases))
    print(f"load average (1 min) at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    for p in (out1, out2, cp_a, cp_b, new_a):
        p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
