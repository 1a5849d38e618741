"""What `pti run` shows: one sequence streams plainly to stdout; several show a
live rich table on stderr (only when stderr is a terminal) and print their
final texts in input order; --json prints one object per sequence; --stats
prints totals on stderr."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .api import Pti, check_choices, engine_config
from .engine import Result
from .errors import PtiError
from .prompts import gather


def _prompt_source(model: str | None, source: str | None) -> tuple[str | None, bool]:
    """(model path, read stdin?) from the two optional positionals: [MODEL.ssq] [-]."""
    if model == "-" and source is None:
        return None, True
    if source is not None and source != "-":
        raise PtiError(f"unexpected argument {source!r} (the prompt source is -p, --file or -)")
    return model, source == "-"


def result_json(r: Result, prompt_index: int) -> str:
    return json.dumps({
        "sequence": r.s, "prompt": prompt_index, "twin": "ab"[r.twin], "text": r.text,
        "token_ids": r.token_ids, "tokens": r.tokens, "prompt_tokens": r.prompt_tokens,
        "passes": r.passes, "tau": round(r.tau, 4), "seconds": round(r.seconds, 4),
        "drafted": r.drafted, "accepted": r.accepted, "acceptance": round(r.acceptance, 4),
        "finish": r.finish}, ensure_ascii=False)


def stats_line(results: list[Result], engine_passes: int, seconds: float, where: str = "") -> str:
    tokens = sum(len(r.token_ids) for r in results)
    seq_passes = sum(r.passes for r in results)
    drafted = sum(r.drafted for r in results)
    accepted = sum(r.accepted for r in results)
    line = (f"tokens {tokens}, passes {engine_passes}, tau {tokens / seq_passes:.3f}, "
            f"tokens/pass {tokens / engine_passes:.3f}, {tokens / seconds:.1f} tok/s, {seconds:.2f} s, "
            f"{len(results)} sequence{'s' if len(results) != 1 else ''}")
    if drafted:
        line += f", draft acceptance {accepted}/{drafted} ({100 * accepted / drafted:.0f}%)"
    ctx = [str(r.s + 1) for r in results if r.finish == "context"]
    if ctx:
        line += f"; stopped at the context end: sequence {', '.join(ctx)}"
    return line + (f"; {where}" if where else "")


def _live_table(eng, total: int):
    from rich.table import Table
    t = Table(box=None, show_header=True, header_style="bold")
    for col in ("seq", "state", "tokens", "tau"):
        t.add_column(col, no_wrap=True, min_width=len(col) + 3)
    t.add_column("text", no_wrap=True, overflow="ellipsis", max_width=70)
    for seq in eng.active:
        tau = len(seq.out_ids) / seq.passes if seq.passes else 0.0
        tail = seq.text[-70:].replace("\n", " ")
        t.add_row(str(seq.req.s + 1), "running", str(len(seq.out_ids)), f"{tau:.2f}", tail)
    t.caption = f"{len(eng.done)}/{total} done, {eng.passes} passes"
    return t


def run_cli(*, model: str | None, source: str | None, prompt: list[str], file: Path | None,
            chat: bool | None, json_out: bool, stats: bool, backend: str, seqs: int, twins: str,
            spec: str, draft: int, temp: float, top_k: int, top_p: float, min_p: float, seed: int,
            max_tokens: int, stop: list[str]) -> None:
    opts = dict(max_tokens=max_tokens, spec=spec, draft=draft, seqs=seqs, temperature=temp,
                top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, stops=stop)
    engine_config(**opts)          # every option checked before anything is loaded
    check_choices(twins, backend)
    model, stdin = _prompt_source(model, source)
    prompts = gather(prompt, file, stdin)
    pti = Pti(model, backend=backend, twins=twins)
    eng = pti.engine(**opts)
    reqs = pti.requests(prompts, seqs, chat)
    eng.submit(reqs)
    n_prompts = len(prompts)
    t0 = time.perf_counter()
    out = sys.stdout
    if json_out:
        results = eng.run()
    elif len(reqs) == 1:
        def show(seqs_):
            for seq in seqs_:
                piece = eng.new_text(seq)
                if piece:
                    out.write(piece)
                    out.flush()
        results = eng.run(show)
        out.write("\n")
    else:
        from rich.console import Console
        from rich.live import Live
        console = Console(stderr=True)
        if console.is_terminal:
            with Live(_live_table(eng, len(reqs)), console=console, refresh_per_second=8, transient=True) as live:
                results = eng.run(lambda _s: live.update(_live_table(eng, len(reqs))))
        else:
            results = eng.run()
    seconds = time.perf_counter() - t0
    if json_out:
        for r in results:
            out.write(result_json(r, r.s % n_prompts) + "\n")
    elif len(reqs) > 1:
        for r in results:
            out.write(f"--- sequence {r.s + 1} (prompt {r.s % n_prompts + 1}, twin {'ab'[r.twin]}) ---\n{r.text}\n")
    out.flush()
    for r in results:
        if r.finish == "context":
            print(f"pti: sequence {r.s + 1} stopped at the model's context end "
                  f"({r.prompt_tokens + len(r.token_ids)} tokens)", file=sys.stderr)
    if stats:
        where = "fused GPU pass" if pti.fused else f"{pti.backend.name} backend, reference forward"
        print(stats_line(results, eng.passes, seconds, where), file=sys.stderr)
