"""CPU decoding on the default model, side by side in one run.

    python benchmarks/cpu_decode.py [--max-tokens 128] [--out bench.json] [--quick]

For every prompt of examples/prompts/ (grounded.jsonl: input-grounded; open.jsonl:
open-ended), with the same chat-rendered prompt ids and greedy decoding:
  * transformers generate() (float32, holding exactly the dequantised weights of the .ssq)
  * pti --spec none, pti --spec lookup (tau, tok/s, identical output?)
and then 4 prompts served --seqs 1 (one after another) vs --seqs 4 (together).
Prints per-prompt rows and the medians the targets are stated in.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pti_cli.api import Pti  # noqa: E402
from pti_cli.prompts import read_file  # noqa: E402


def hf_model(pti: Pti):
    """transformers' Llama holding exactly the dequantised weights pti runs (tests/model_helpers.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import logging
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from model_helpers import hf_reference, llama_config_from_gguf_keys
    config = llama_config_from_gguf_keys(pti.ssq.metadata, pti.config.vocab)
    return hf_reference(pti.ssq, config)


class Clock:
    """Wall seconds and this process's CPU seconds (user + system, all threads).

    The shared 2-core machine's load swings make wall times of back-to-back runs
    differ several-fold; CPU seconds measure the work a run did, so ratios are
    reported from both (both runs use the same fixed thread count)."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0


def hf_generate(model, ids: list[int], n: int, eos: list[int]):
    x = torch.tensor([ids])
    with torch.inference_mode(), Clock() as c:
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos[0])
    new = out[0, len(ids):].tolist()
    return len(new), c, new


def pti_one(pti: Pti, ids_prompt, n: int, spec: str, draft: int):
    with Clock() as c:
        r = pti.generate([ids_prompt], max_tokens=n, spec=spec, draft=draft)[0]
    return r, c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--draft", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="two prompts of each kind")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers")
    ap.add_argument("--kind", choices=["grounded", "open"], help="only this prompt set")
    ap.add_argument("--only-seqs", action="store_true", help="only the --seqs 1 vs --seqs 4 comparison")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    n = args.max_tokens
    sets = {kind: read_file(ROOT / "examples" / "prompts" / f"{kind}.jsonl") for kind in ("grounded", "open")}
    if args.quick:
        sets = {k: v[:2] for k, v in sets.items()}
    if args.kind:
        sets = {args.kind: sets[args.kind]}

    pti = Pti()
    eos = sorted(pti.tokenizer.eog_ids)
    hf = None if args.no_hf or args.only_seqs else hf_model(pti)
    # warm-up: first calls allocate
    pti.generate(["Hello"], max_tokens=4, spec="none")
    if hf is not None:
        hf_generate(hf, pti.encode("Hello"), 4, eos)

    rows = []
    print(f"{'kind':9}{'#':>3}{'hf tok/s':>10}{'none tok/s':>11}{'lookup tok/s':>13}{'tau':>7}"
          f"{'lk/none':>9}{'none/hf':>9}{'lk/none cpu':>12}{'none/hf cpu':>12}{'same':>6}{'hf same':>8}")
    for kind, prompts in ({} if args.only_seqs else sets).items():
        for i, p in enumerate(prompts):
            ids = pti.encode(p)
            row = {"kind": kind, "prompt": i, "prompt_tokens": len(ids)}
            if hf is not None:
                k, c, hf_ids = hf_generate(hf, ids, n, eos)
                row.update(hf_tokens=k, hf_tok_s=k / c.wall, hf_tok_cpu_s=k / c.cpu)
            rn, dn = pti_one(pti, p, n, "none", args.draft)
            rl, dl = pti_one(pti, p, n, "lookup", args.draft)
            row.update(none_tokens=len(rn.token_ids), none_tok_s=len(rn.token_ids) / dn.wall,
                       none_tok_cpu_s=len(rn.token_ids) / dn.cpu,
                       lookup_tokens=len(rl.token_ids), lookup_tok_s=len(rl.token_ids) / dl.wall,
                       lookup_tok_cpu_s=len(rl.token_ids) / dl.cpu,
                       tau=rl.tau, passes=rl.passes, acceptance=rl.acceptance,
                       identical=rn.token_ids == rl.token_ids)
            row["lookup_vs_none"] = row["lookup_tok_s"] / row["none_tok_s"]
            row["lookup_vs_none_cpu"] = row["lookup_tok_cpu_s"] / row["none_tok_cpu_s"]
            if hf is not None:
                row["none_vs_hf"] = row["none_tok_s"] / row["hf_tok_s"]
                row["none_vs_hf_cpu"] = row["none_tok_cpu_s"] / row["hf_tok_cpu_s"]
                # HF's generate ends on EOS without emitting it into our count; compare the shared prefix
                row["hf_same_prefix"] = next((j for j, (a, b) in enumerate(zip(hf_ids, rn.token_ids)) if a != b),
                                             min(len(hf_ids), len(rn.token_ids)))
            rows.append(row)
            print(f"{kind:9}{i:>3}{row.get('hf_tok_s', float('nan')):>10.1f}{row['none_tok_s']:>11.1f}"
                  f"{row['lookup_tok_s']:>13.1f}{row['tau']:>7.2f}{row['lookup_vs_none']:>9.2f}"
                  f"{row.get('none_vs_hf', float('nan')):>9.2f}{row['lookup_vs_none_cpu']:>12.2f}"
                  f"{row.get('none_vs_hf_cpu', float('nan')):>12.2f}{str(row['identical']):>6}"
                  f"{row.get('hf_same_prefix', -1):>8}", flush=True)

    summary = {}
    for kind in ({} if args.only_seqs else sets):
        rs = [r for r in rows if r["kind"] == kind]
        med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
        summary[kind] = {"median_tau": med("tau"), "median_lookup_vs_none": med("lookup_vs_none"),
                         "min_lookup_vs_none": min(r["lookup_vs_none"] for r in rs),
                         "median_lookup_vs_none_cpu": med("lookup_vs_none_cpu"),
                         "min_lookup_vs_none_cpu": min(r["lookup_vs_none_cpu"] for r in rs),
                         "median_none_tok_s": med("none_tok_s"), "median_lookup_tok_s": med("lookup_tok_s")}
        if hf is not None:
            summary[kind].update(median_hf_tok_s=med("hf_tok_s"), median_none_vs_hf=med("none_vs_hf"),
                                 median_none_vs_hf_cpu=med("none_vs_hf_cpu"))
    if hf is not None and rows:
        summary["all_median_none_vs_hf"] = statistics.median(r["none_vs_hf"] for r in rows)
        summary["all_median_none_vs_hf_cpu"] = statistics.median(r["none_vs_hf_cpu"] for r in rows)

    # --seqs 1 vs --seqs 4: four prompts, plain decoding, aggregate tokens/s
    # Exactly four prompts (cycled when a --kind/--quick set has fewer), so --seqs 4
    # serves the same four that --seqs 1 runs one by one.
    four = ([p for ps in sets.values() for p in ps] * 4)[:4]
    with Clock() as c1:
        one = [pti.generate([p], max_tokens=n, spec="none")[0] for p in four]
    with Clock() as c4:
        together = pti.generate(four, max_tokens=n, spec="none", seqs=4)
    k1, k4 = sum(len(r.token_ids) for r in one), sum(len(r.token_ids) for r in together)
    summary["seqs"] = {"seqs1_tok_s": k1 / c1.wall, "seqs4_tok_s": k4 / c4.wall,
                       "ratio": (k4 / c4.wall) / (k1 / c1.wall), "ratio_cpu": (k4 / c4.cpu) / (k1 / c1.cpu),
                       "identical": [a.token_ids for a in one] == [b.token_ids for b in together]}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary, "max_tokens": n}, indent=2))


if __name__ == "__main__":
    main()
