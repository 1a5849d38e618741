#!/usr/bin/env python3
"""h16 on a real model (GPU machine): the fused GPU pass with its default h16 matrices against the same
pass with PTI_H16=0 (bf16 inputs everywhere) and against the CPU float32 reference forward, per prompt:
logits of every prompt position (relative error, argmax agreement), then greedy tokens of each GPU form.
The model: an .ssq, or a GGUF packed first (e.g. the first layers of the default model,
scripts/gguf_first_layers.py, small enough to carry to the GPU machine).  Prints a short report.
    python3 scripts/h16_check.py MODEL.(ssq|gguf) PROMPTS [PROMPTS ...] [--steps N]
PROMPTS: a prompts file as `pti run --file` reads it (.txt, .jsonl), encoded with the chat template.
Runs of record (docs/perf.md, session 21; README, "What has not been run"):
    python3 scripts/gguf_first_layers.py $(python3 -c "from pti_cli.default_model import default_gguf; print(default_gguf())") /tmp/smollm2_8l.gguf 8
    python3 scripts/h16_check.py /tmp/smollm2_8l.gguf examples/prompts/demo.txt
    python3 scripts/h16_check.py /tmp/smollm2_8l.gguf examples/prompts/grounded.jsonl examples/prompts/open.jsonl"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def gpu_runs(ssq, prompts: list[list[int]], steps: int) -> dict:
    """Per form ("h16", "bf16"): per prompt, (logits of its positions, its greedy tokens)."""
    from pti_cli.backends.cuda import CudaBackend
    from pti_cli.gpu_model import EnginePort, h16_roles, load_ssq
    from pti_cli.gpu_ops import CudaOps
    dev = torch.device("cuda")
    backend, ops = CudaBackend(), CudaOps(dev)
    out = {}
    for form, env in (("h16", ""), ("bf16", "0")):
        os.environ["PTI_H16"] = env   # read when the model is made (gpu_model.h16_roles)
        ctx = max(len(ids) for ids in prompts) + steps + 8
        port = EnginePort(load_ssq(ssq, backend, dev, "a", max_seqs=2, max_ctx=ctx, ops=ops))
        print(f"{form}: {port.model.shape.n_layers} layers, matrices with h16 inputs: "
              f"{', '.join(sorted(h16_roles(backend, port.model.shape))) or 'none'}")
        out[form] = []
        for ids in prompts:
            kv = port.new_kv()
            logits = port.forward([(kv, 0, ids)]).cpu()
            toks = [int(logits[-1].argmax())]
            for _ in range(steps - 1):   # one pass a token, through the passes plain decoding runs
                toks.append(int(port.forward([(kv, 0, toks[-1:])])[-1].argmax()))
            out[form].append((logits, toks))
            del kv   # its KV slot goes back to the port
        del port
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args()
    from pti_cli.api import Pti
    from pti_cli.prompts import read_file
    from pti_cli.ssq.read import SSQFile

    tmp = tempfile.TemporaryDirectory()
    path = Path(args.model)
    if path.suffix == ".gguf":
        from pti_cli.pack import pack
        pack(path, None, Path(tmp.name) / "model.ssq")
        path = Path(tmp.name) / "model.ssq"
    ssq = SSQFile(path)
    cpu = Pti(path, backend="torch")   # the tokenizer, and the float32 reference forward (cpu.model)
    prompts = [cpu.encode(p) for f in args.prompts for p in read_file(Path(f))]
    runs = gpu_runs(ssq, prompts, args.steps)
    ref = cpu.model
    pairs = (("h16", "bf16"), ("h16", "cpu"), ("bf16", "cpu"))
    worst = {p: 0.0 for p in pairs}
    agree = {p: [0, 0] for p in pairs}
    same_greedy = 0
    for i, ids in enumerate(prompts):
        lg = {"h16": runs["h16"][i][0], "bf16": runs["bf16"][i][0],
              "cpu": ref.forward([(ref.new_kv(len(ids) + 8), 0, ids)]).float()}
        line = []
        for a, b in pairs:
            e = rel_err(lg[a], lg[b])
            worst[(a, b)] = max(worst[(a, b)], e)
            n_same = int((lg[a].argmax(-1) == lg[b].argmax(-1)).sum())
            agree[(a, b)][0] += n_same
            agree[(a, b)][1] += len(ids)
            line.append(f"{a}/{b} {e:.2e} ({n_same}/{len(ids)})")
        g16, gbf = runs["h16"][i][1], runs["bf16"][i][1]
        first = next((j for j, (x, y) in enumerate(zip(g16, gbf)) if x != y), args.steps)
        same_greedy += first == args.steps
        print(f"prompt {i + 1}: {len(ids)} tokens; logits relative error (same argmax): {'; '.join(line)}; "
              f"greedy h16 = bf16 for the first {first} of {args.steps}")
    print(f"{len(prompts)} prompts; largest relative error: "
          + "; ".join(f"{a}/{b} {worst[(a, b)]:.2e}" for a, b in pairs)
          + "; same argmax: " + "; ".join(f"{a}/{b} {agree[(a, b)][0]}/{agree[(a, b)][1]}" for a, b in pairs)
          + f"; greedy {args.steps} tokens identical with and without h16 in {same_greedy} of {len(prompts)}")


if __name__ == "__main__":
    main()
