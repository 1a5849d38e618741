"""The `pti` command line: typer commands only, each a thin call into the library.

Errors: every PtiError and every usage error becomes one line on stderr and
exit code 2, with no traceback (see main()).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .errors import PtiError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="pti: Packed Twin Inference - fast, lossless decoding from twin (.ssq) files.",
)


@app.command()
def pack(
    a: Optional[Path] = typer.Argument(None, help="Twin A: a GGUF file or a safetensors checkpoint (file or Hugging Face folder). Default: the embedded SmolLM2-135M-Instruct."),
    b: Optional[Path] = typer.Argument(None, help="Twin B (same architecture). Omit to store A alone."),
    output: Path = typer.Option(..., "-o", "--output", help="Output .ssq file."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output file."),
    name_a: Optional[str] = typer.Option(None, "--name-a", help="Name recorded for twin A."),
    name_b: Optional[str] = typer.Option(None, "--name-b", help="Name recorded for twin B."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bar."),
):
    """Pack one or two same-architecture checkpoints into one .ssq twin file."""
    from .sources.hashing import start_hashes     # stdlib only: the sha256s start before the imports below
    hashers = start_hashes(a, b)
    from .pack import pack_cli
    pack_cli(a, b, output, force=force, name_a=name_a, name_b=name_b, quiet=quiet, hashers=hashers)


@app.command()
def inspect(
    file: Path = typer.Argument(..., help="An .ssq file."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
):
    """Show an .ssq file's metadata, twins, tensors and bytes read per pass."""
    from .inspect import inspect_cli
    inspect_cli(file, json_out=json_out)


# --- run command (engine) goes here ---
@app.command()
def run(
    model: Optional[str] = typer.Argument(None, help="An .ssq file (default: the embedded SmolLM2-135M-Instruct)."),
    source: Optional[str] = typer.Argument(None, help="'-': read one prompt from stdin (also `pti run -`)."),
    prompt: List[str] = typer.Option([], "-p", "--prompt", help="A prompt (repeatable)."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="Prompts file: .jsonl ({\"prompt\"} or {\"messages\"} per line) or .txt (one per line)."),
    chat: Optional[bool] = typer.Option(None, "--chat/--raw", help="Use the model's chat template (default when it has one)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per sequence on stdout."),
    stats: bool = typer.Option(False, "--stats", help="Tokens, passes, tau, tok/s on stderr."),
    backend: str = typer.Option("auto", "--backend", help="auto | torch | cuda | hip."),
    seqs: int = typer.Option(1, "--seqs", help="Sequences served at once (prompts repeat to fill them)."),
    twins: str = typer.Option("a", "--twins", help="a | b | ab (ab: sequence s on twin s % 2)."),
    spec: str = typer.Option("lookup", "--spec", help="Drafts: none | lookup (n-gram lookup, lossless)."),
    draft: int = typer.Option(8, "--draft", help="K: the longest draft, 1..16."),
    temp: float = typer.Option(0.0, "--temp", help="Temperature; 0 = greedy."),
    top_k: int = typer.Option(0, "--top-k", help="Keep the k most likely tokens (0 = off)."),
    top_p: float = typer.Option(1.0, "--top-p", help="Keep the smallest set with this probability mass."),
    min_p: float = typer.Option(0.0, "--min-p", help="Drop tokens below min-p x the top probability."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    max_tokens: int = typer.Option(256, "-n", "--max-tokens", help="Most new tokens per sequence."),
    stop: List[str] = typer.Option([], "--stop", help="Stop before this string (repeatable)."),
):
    """Generate from an .ssq model: many sequences, lossless speculative decoding."""
    from .run_view import run_cli
    run_cli(model=model, source=source, prompt=prompt, file=file, chat=chat, json_out=json_out, stats=stats,
            backend=backend, seqs=seqs, twins=twins, spec=spec, draft=draft, temp=temp, top_k=top_k,
            top_p=top_p, min_p=min_p, seed=seed, max_tokens=max_tokens, stop=stop)



# --- bench command goes here ---
# (model-level options: H5 area, pti_cli/bench.py; H6 merges --kernels into this command)
@app.command()
def bench(
    synthetic: Optional[str] = typer.Option(None, "--synthetic", help="Random-weight model built on the device: 1b | 8b | 32b (tiny: tests)."),
    seqs: str = typer.Option("1,2,4,8,16,32", "--seqs", help="Sequences per pass, comma-separated."),
    spec: str = typer.Option("none", "--spec", help="none | lookup (lookup replays --accept-trace), comma-separated."),
    twins: str = typer.Option("a", "--twins", help="a | b | ab (ab: distinct SSQ16 twins), comma-separated."),
    prompt_len: int = typer.Option(512, "--prompt-len", help="Prompt tokens per sequence (prefill, timed apart)."),
    gen: int = typer.Option(128, "--gen", help="Tokens decoded per sequence."),
    repeats: int = typer.Option(3, "--repeats", help="Timed repeats after one warm-up; the median is kept."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    ops: str = typer.Option("auto", "--ops", help="auto | torch | cuda: the non-matmul ops (cuda: kernels/pti_ops.hip)."),
    backend: str = typer.Option("auto", "--backend", help="auto | torch | cuda: the matmuls (cuda: the kernels backend)."),
    accept_trace: Optional[Path] = typer.Option(None, "--accept-trace", help="Accept trace (JSON) recorded on a real model, replayed for --spec lookup."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON to this file."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write tok/s against sequences, with the ceiling, to this PNG."),
    kernels: bool = typer.Option(False, "--kernels", help="Instead: time the matmul kernels (Q8, SSQ16) against the card's read bandwidth."),
    kernel_variants: Optional[str] = typer.Option(None, "--kernel-variants", help="With --kernels: kernel variants to compare, comma-separated (e.g. t1_r1_m1_u8,t1_r2_m1_u4)."),
    kernel_act: str = typer.Option("bf16", "--kernel-act", help="With --kernels: the activations, bf16, f16, or h16 (a bf16 model's matrices on f16 inputs: what the model runs)."),
):
    """Decode speed against the memory-bandwidth ceiling (model level), or the kernels alone (--kernels)."""
    if kernels:
        from .bench_kernels import bench_kernels_cli
        return bench_kernels_cli(json_out=json_out, variants=kernel_variants, act=kernel_act)
    from .bench import bench_cli
    bench_cli(synthetic, seqs=seqs, spec=spec, twins=twins, prompt_len=prompt_len, gen=gen, repeats=repeats,
              device=device, json_out=json_out, plot=plot, accept_trace=accept_trace, ops=ops, backend=backend)



def _click_exceptions(name: str) -> tuple[type, ...]:
    """Exception class `name` from click and from the click that typer >= 0.29
    vendors (typer._click): a usage error can come from either."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if cls is not None:
            found.append(cls)
    return tuple(found)


NO_ARGS_HELP = _click_exceptions("NoArgsIsHelpError")
USAGE_ERRORS = _click_exceptions("UsageError")
ABORTS = (typer.Abort, *_click_exceptions("Abort"))
EXITS = (typer.Exit, *_click_exceptions("Exit"))


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: one line on stderr and exit 2 for any bad input."""
    try:
        app(args=argv, standalone_mode=False)
    except PtiError as e:
        print(f"pti: error: {e}", file=sys.stderr)
        sys.exit(2)
    except (KeyboardInterrupt, *ABORTS):
        print("pti: interrupted", file=sys.stderr)
        sys.exit(130)
    except NO_ARGS_HELP as e:  # a bare `pti`: the help text, as a success
        print(e.ctx.get_help())
        sys.exit(0)
    except USAGE_ERRORS as e:
        print(f"pti: error: {e.format_message()}", file=sys.stderr)
        sys.exit(2)
    except EXITS as e:
        sys.exit(getattr(e, "exit_code", 0))
    except BrokenPipeError:
        sys.exit(0)
    except OSError as e:  # disk full, permission denied, ... raised outside our checks
        where = f": {e.filename}" if e.filename else ""
        print(f"pti: error: {e.strerror or e}{where}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
