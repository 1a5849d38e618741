"""`pti pack A [B] -o OUT.ssq`: two same-architecture checkpoints -> one .ssq file.

Flow: open both checkpoints (pti_cli.sources), check they are twins, plan every
output tensor (name, storage, how to produce its rows), check free disk, then
stream the tensors in row chunks into a temporary file renamed to OUT at the end.
Q8_0 sources are copied bit for bit; other types are dequantised by the source
and quantised here exactly as gguf.quants.quantize(x, Q8_0).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, LlamaFileType
from gguf.constants import GGML_QUANT_VERSION

from .errors import PtiError
from .ssq import format as F
from .ssq.quantise import quantize_q8_0
from .ssq.write import KeyValue, TensorPlan, atomic_output, check_free_space, estimate_size, write_ssq_gguf

ROW_CHUNK_WEIGHTS = 8 << 20      # weights per row chunk and twin: 32 MB as f32
# Keys of twin A's metadata not copied: the writer sets the architecture, and
# storage-describing keys of the source no longer hold for the .ssq file.
SKIP_KEYS = ("general.architecture", "general.file_type", "general.quantization_version", "general.alignment")
SKIP_PREFIXES = ("split.", "ssq.")


@dataclass
class PackResult:
    output: Path
    mode: int
    identical: bool
    bytes_written: int
    seconds: float


def _q8_rows(src, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows [r0, r1) of a source matrix as Q8_0 ints and scales: copied when the
    source is Q8_0, quantised from its float32 rows otherwise."""
    got = src.q8_rows(r0, r1)
    if got is None:
        got = quantize_q8_0(src.f32_rows(r0, r1))
    q, d = got
    k = src.shape[1]
    if q.shape != (r1 - r0, F.n_blocks(k) * F.QK) or d.shape != (r1 - r0, F.n_blocks(k)):
        raise PtiError(f"tensor {src.name}: source rows have shape {q.shape}/{d.shape}, expected K={k}")
    return q, d.astype(np.float16, copy=False)


def _vector_plan(name: str, src) -> TensorPlan:
    n = src.shape[0]
    return TensorPlan(name, (n,), np.float32, None, rows=n, row_bytes=4, chunk_rows=max(n, 1),
                      fill=lambda r0, r1: np.asarray(src.f32_rows(r0, r1), dtype=np.float32).reshape(-1))


def plan_tensors(a, b) -> list[TensorPlan]:
    """The output tensors in A's order; b is None for an identical (mode 8) file."""
    plans: list[TensorPlan] = []
    for name, sa in a.tensors.items():
        shape = tuple(int(d) for d in sa.shape)
        if len(shape) == 1:
            plans.append(_vector_plan(name, sa))
            if b is not None:
                plans.append(_vector_plan(name + F.TWIN_B_SUFFIX, b.tensors[name]))
            continue
        if len(shape) != 2:
            raise PtiError(f"tensor {name} has {len(shape)} dimensions; pti packs only matrices and vectors")
        rows, k = shape
        chunk = max(1, ROW_CHUNK_WEIGHTS // k)
        if b is None:
            if k % F.QK:
                raise PtiError(f"tensor {name}: row length {k} is not a multiple of 32, which Q8_0 needs")
            plans.append(TensorPlan(name, (rows, F.q8_row_bytes(k)), np.uint8, GGMLQuantizationType.Q8_0,
                                    rows=rows, row_bytes=F.q8_row_bytes(k), chunk_rows=chunk,
                                    fill=lambda r0, r1, sa=sa: F.pack_q8(*_q8_rows(sa, r0, r1))))
        else:
            sb = b.tensors[name]
            plans.append(TensorPlan(name, (rows, F.ssq16_row_bytes(k)), np.int8, None,
                                    rows=rows, row_bytes=F.ssq16_row_bytes(k), chunk_rows=chunk,
                                    fill=lambda r0, r1, sa=sa, sb=sb: F.pack_ssq16(*_q8_rows(sa, r0, r1), *_q8_rows(sb, r0, r1))))
    return plans


def metadata_kvs(a, b, names: tuple[str, str], identical: bool) -> list[KeyValue]:
    """Twin A's architecture and tokenizer keys, then the ssq.* keys."""
    S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
    kvs: list[KeyValue] = []
    for key, (val, vtype, sub) in a.metadata.items():
        if key in SKIP_KEYS or key.startswith(SKIP_PREFIXES):
            continue
        if vtype == A and len(val) == 0:     # GGUFWriter cannot write empty arrays
            continue
        kvs.append((key, val, vtype, sub))
    if identical:
        kvs.append(("general.file_type", int(LlamaFileType.MOSTLY_Q8_0), GGUFValueType.UINT32, None))
    kvs.append(("general.quantization_version", GGML_QUANT_VERSION, GGUFValueType.UINT32, None))
    tensor_names = list(a.tensors)
    shapes = [F.shape_to_str(tuple(s.shape)) for s in a.tensors.values()]
    sb = b if b is not None else a
    kvs += [
        (F.KEY_VERSION, F.FORMAT_VERSION, GGUFValueType.UINT32, None),
        (F.KEY_MODE, F.MODE_IDENTICAL if identical else F.MODE_TWIN, GGUFValueType.UINT32, None),
        (F.KEY_IDENTICAL, identical, GGUFValueType.BOOL, None),
        (F.KEY_TWIN_NAMES, list(names), A, S),
        (F.KEY_SHA256, [a.sha256, sb.sha256], A, S),
        (F.KEY_SOURCE_KINDS, [a.kind, sb.kind], A, S),
        (F.KEY_TIED, "output.weight" not in a.tensors, GGUFValueType.BOOL, None),
        (F.KEY_TENSOR_NAMES, tensor_names, A, S),
        (F.KEY_TENSOR_SHAPES, shapes, A, S),
    ]
    return kvs


def _twin_name(path: Path) -> str:
    return path.stem if path.is_file() else path.name


def pack(a_path: Optional[Path], b_path: Optional[Path], output: Path, *, force: bool = False,
         name_a: Optional[str] = None, name_b: Optional[str] = None,
         on_start: Callable[[int], None] = lambda total: None,
         on_bytes: Callable[[int], None] = lambda n: None) -> PackResult:
    """Pack A (default: the embedded model) and optionally B into `output`."""
    from .sources.checkpoint import check_twins, open_checkpoint
    t0 = time.perf_counter()
    if a_path is None:
        from .default_model import default_gguf
        a_path = default_gguf()
    a = open_checkpoint(Path(a_path))
    b = open_checkpoint(Path(b_path)) if b_path is not None else None
    if b is not None:
        check_twins(a, b)
    identical = b is None or b.sha256 == a.sha256
    names = (name_a or _twin_name(a.path),
             name_b or (_twin_name(b.path) if b is not None else name_a or _twin_name(a.path)))
    plans = plan_tensors(a, None if identical else b)
    kvs = metadata_kvs(a, b, names, identical)
    output = Path(output)
    with atomic_output(output, force) as tmp:
        check_free_space(tmp.parent, estimate_size(kvs, plans))
        on_start(sum(p.nbytes for p in plans))
        try:
            write_ssq_gguf(tmp, a.arch, kvs, plans, on_bytes)
        except OSError as e:
            raise PtiError(f"writing {output} failed: {e.strerror or e}") from None
        size = tmp.stat().st_size
    return PackResult(output, F.MODE_IDENTICAL if identical else F.MODE_TWIN, identical, size,
                      time.perf_counter() - t0)


def pack_cli(a: Optional[Path], b: Optional[Path], output: Path, *, force: bool = False,
             name_a: Optional[str] = None, name_b: Optional[str] = None, quiet: bool = False) -> PackResult:
    """The `pti pack` command: pack() with a rich progress bar of bytes written."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    console = Console(stderr=True)
    show = not quiet and console.is_terminal
    progress = Progress(TextColumn("packing"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=console, disable=not show)
    task: list[Any] = []
    with progress:
        result = pack(a, b, output, force=force, name_a=name_a, name_b=name_b,
                      on_start=lambda total: task.append(progress.add_task("pack", total=total)),
                      on_bytes=lambda n: progress.advance(task[0], n))
    if not quiet:
        kind = "identical twins, Q8_0" if result.identical else "two twins, SSQ16"
        print(f"wrote {result.output} ({result.bytes_written / 1e6:.1f} MB, mode {result.mode}: {kind}) "
              f"in {result.seconds:.1f} s", file=sys.stdout)
    return result
