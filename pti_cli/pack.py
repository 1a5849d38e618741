"""`pti pack A [B] -o OUT.ssq`: two same-architecture checkpoints -> one .ssq file.

Flow: open both checkpoints (pti_cli.sources), check they are twins, plan every
output tensor (name, storage, how to produce its rows), check free disk, then
stream the tensors in row chunks into a temporary file renamed to OUT at the end.
Q8_0 sources are copied bit for bit; other types are dequantised by the source
and quantised here exactly as gguf.quants.quantize(x, Q8_0).

Fast paths for Q8_0 GGUF sources (whose TensorSource offers q8_file_span): mode 8
copies each matrix file to file (ssq/write.copy_span: copy_file_range); mode 16
reads both twins' rows with preadv into reused buffers and interleaves them into
a reused output buffer, so no chunk allocates or page-faults.  The sources are
hashed in threads from the start (sources/hashing), and an OUT being replaced
gives its page cache up just ahead of the writes (ssq/write.OldPages): on this
project's VM, pack's speed is mostly where its memory comes from (docs/perf.md).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, LlamaFileType
from gguf.constants import GGML_QUANT_VERSION

from .errors import PtiError
from .sources.hashing import SourceHasher, start_hashes
from .ssq import format as F
from .ssq.quantise import quantize_q8_0
from .ssq.write import (FileSpan, KeyValue, SourceFiles, TensorPlan, atomic_output, check_free_space, check_output,
                        OldPages, estimate_size, patch_string_array, write_ssq_gguf)

ROW_CHUNK_WEIGHTS = 1 << 20      # weights per row chunk and twin (4 MB as f32): cache-sized chunks wrote 1.4x faster than 8M
# Keys of twin A's metadata not copied: the writer sets the architecture, and
# storage-describing keys of the source no longer hold for the .ssq file.
SKIP_KEYS = ("general.architecture", "general.file_type", "general.quantization_version", "general.alignment")
SKIP_PREFIXES = ("split.", "ssq.")
MAX_NAME_LEN = 63              # GGML_MAX_NAME (64) less the terminating NUL


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


def _q8_raw(src, r0: int, r1: int) -> np.ndarray | None:
    """Rows [r0, r1) as the source's stored Q8_0 bytes uint8 [n, nb*34], when the
    source can hand them out (optional TensorSource.q8_raw_rows): the fast path for
    Q8_0 checkpoints, with no split into ints and scales and no re-join."""
    raw_rows = getattr(src, "q8_raw_rows", None)
    raw = raw_rows(r0, r1) if raw_rows is not None else None
    if raw is not None and raw.shape != (r1 - r0, F.q8_row_bytes(src.shape[1])):
        raise PtiError(f"tensor {src.name}: source rows have shape {raw.shape}, expected K={src.shape[1]}")
    return raw


def _q8_bytes(src, r0: int, r1: int) -> np.ndarray:
    """Rows [r0, r1) as GGUF Q8_0 bytes uint8 [n, nb*34] (mode 8)."""
    raw = _q8_raw(src, r0, r1)
    return raw if raw is not None else F.pack_q8(*_q8_rows(src, r0, r1))


def _ssq16_bytes(sa, sb, r0: int, r1: int) -> np.ndarray:
    """Rows [r0, r1) of both twins interleaved into SSQ16 bytes uint8 [n, nb*68] (mode 16)."""
    raw_a, raw_b = _q8_raw(sa, r0, r1), _q8_raw(sb, r0, r1)
    if raw_a is not None and raw_b is not None:
        return F.pack_ssq16_q8(raw_a, raw_b)
    qa = F.unpack_q8(raw_a) if raw_a is not None else _q8_rows(sa, r0, r1)
    qb = F.unpack_q8(raw_b) if raw_b is not None else _q8_rows(sb, r0, r1)
    return F.pack_ssq16(*qa, *qb)


def _file_span(src, nbytes: int) -> FileSpan | None:
    """Where a Q8_0 source matrix's stored bytes lie in its file (optional
    TensorSource.q8_file_span), when they are exactly the nbytes pack would write."""
    get = getattr(src, "q8_file_span", None)
    span = get() if get is not None else None
    if span is None:
        return None
    span = FileSpan(Path(span[0]), int(span[1]), int(span[2]))
    return span if span.nbytes == nbytes and span.offset >= 0 else None


class _Scratch:
    """Row-chunk buffers reused by every chunk and tensor (grown when needed), one
    set per thread: the writer runs thread-safe fills on worker threads."""

    def __init__(self):
        self._local = threading.local()

    def get(self, role: str, nbytes: int) -> np.ndarray:
        bufs = self._local.__dict__.setdefault("bufs", {})
        buf = bufs.get(role)
        if buf is None or buf.nbytes < nbytes:
            buf = bufs[role] = np.empty(nbytes, np.uint8)
        return buf[:nbytes]


def _ssq16_from_files(files: SourceFiles, scratch: _Scratch, span_a: FileSpan, span_b: FileSpan, k: int):
    """fill(r0, r1) of a mode-16 matrix whose twins are Q8_0 files: preadv both
    twins' rows, interleave into this thread's reused output buffer (valid until
    the thread's next fill).  Thread-safe: explicit offsets, per-thread buffers."""
    rb = F.q8_row_bytes(k)

    def fill(r0: int, r1: int) -> np.ndarray:
        n = r1 - r0
        a, b = scratch.get("a", n * rb), scratch.get("b", n * rb)
        files.read_into(span_a.path, span_a.offset + r0 * rb, memoryview(a))
        files.read_into(span_b.path, span_b.offset + r0 * rb, memoryview(b))
        out = scratch.get("out", n * 2 * rb)
        _interleave(a.reshape(n, rb), b.reshape(n, rb), out.reshape(n, 2 * rb))
        return out
    return fill


def _interleave(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    F.interleave_q8_into(a, b, out)    # one name to patch in tests (fault injection)


def _vector_plan(name: str, src) -> TensorPlan:
    n = src.shape[0]
    return TensorPlan(name, (n,), np.float32, None, rows=n, row_bytes=4, chunk_rows=max(n, 1),
                      fill=lambda r0, r1: np.asarray(src.f32_rows(r0, r1), dtype=np.float32).reshape(-1))


def plan_tensors(a, b, files: SourceFiles | None = None) -> list[TensorPlan]:
    """The output tensors in A's order; b is None for an identical (mode 8) file.
    files: where mode 16 may read Q8_0 sources' rows directly (None: through the sources)."""
    plans: list[TensorPlan] = []
    scratch = _Scratch()
    for name, sa in a.tensors.items():
        shape = tuple(int(d) for d in sa.shape)
        if len(shape) == 1:
            plans.append(_vector_plan(name, sa))
            if b is not None:
                if len(name + F.TWIN_B_SUFFIX) > MAX_NAME_LEN:
                    raise PtiError(f"tensor name {name} is too long for its twin-B copy (GGUF names: {MAX_NAME_LEN} bytes)")
                plans.append(_vector_plan(name + F.TWIN_B_SUFFIX, b.tensors[name]))
            continue
        if len(shape) != 2:
            raise PtiError(f"tensor {name} has {len(shape)} dimensions; pti packs only matrices and vectors")
        rows, k = shape
        chunk = max(1, ROW_CHUNK_WEIGHTS // k)
        if b is None:
            if k % F.QK:
                raise PtiError(f"tensor {name}: row length {k} is not a multiple of 32, which Q8_0 needs")
            rb = F.q8_row_bytes(k)
            plans.append(TensorPlan(name, (rows, rb), np.uint8, GGMLQuantizationType.Q8_0,
                                    rows=rows, row_bytes=rb, chunk_rows=chunk,
                                    fill=lambda r0, r1, sa=sa: _q8_bytes(sa, r0, r1), span=_file_span(sa, rows * rb)))
        else:
            sb = b.tensors[name]
            span_a, span_b = _file_span(sa, rows * F.q8_row_bytes(k)), _file_span(sb, rows * F.q8_row_bytes(k))
            direct = files is not None and span_a is not None and span_b is not None
            if direct:
                fill = _ssq16_from_files(files, scratch, span_a, span_b, k)
            else:
                fill = lambda r0, r1, sa=sa, sb=sb: _ssq16_bytes(sa, sb, r0, r1)
            plans.append(TensorPlan(name, (rows, F.ssq16_row_bytes(k)), np.int8, None,
                                    rows=rows, row_bytes=F.ssq16_row_bytes(k), chunk_rows=chunk, fill=fill,
                                    threadsafe=direct))
    return plans


def metadata_kvs(a, b, names: tuple[str, str], identical: bool, sha256: tuple[str, str]) -> list[KeyValue]:
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
        (F.KEY_SHA256, list(sha256), A, S),
        (F.KEY_SOURCE_KINDS, [a.kind, sb.kind], A, S),
        (F.KEY_TIED, "output.weight" not in a.tensors, GGUFValueType.BOOL, None),
        (F.KEY_TENSOR_NAMES, tensor_names, A, S),
        (F.KEY_TENSOR_SHAPES, shapes, A, S),
    ]
    return kvs


PENDING_SHA = ("pending-sha256-of-twin-A".ljust(64, "-"), "pending-sha256-of-twin-B".ljust(64, "-"))


def _files(ck) -> list[Path]:
    return list(getattr(ck, "files", None) or [ck.path])


def same_content(a, b) -> bool:
    """Whether two checkpoints' weight files hold the same bytes.  Reads both
    until the first difference (usually within the first chunk)."""
    fa, fb = _files(a), _files(b)
    if len(fa) != len(fb) or any(x.stat().st_size != y.stat().st_size for x, y in zip(fa, fb)):
        return False
    for x, y in zip(fa, fb):
        if x.resolve() == y.resolve():
            continue
        with open(x, "rb") as p, open(y, "rb") as q:
            while True:
                u, v = p.read(1 << 22), q.read(1 << 22)
                if u != v:
                    return False
                if not u:
                    break
    return True


def _twin_name(path: Path) -> str:
    return path.stem if path.is_file() else path.name


def _hasher(files: list[Path], early: Optional[SourceHasher]) -> SourceHasher:
    """A hasher of a checkpoint's weight files: the one started early when it hashes
    exactly these files, else a new one (the early one is stopped)."""
    if early is not None and [p.resolve() for p in early.files] == [Path(p).resolve() for p in files]:
        return early
    if early is not None:
        early.stop()
    hasher = SourceHasher(files)
    hasher.start()
    return hasher


def pack(a_path: Optional[Path], b_path: Optional[Path], output: Path, *, force: bool = False,
         name_a: Optional[str] = None, name_b: Optional[str] = None,
         on_start: Callable[[int], None] = lambda total: None,
         on_bytes: Callable[[int], None] = lambda n: None,
         hashers: Sequence[Optional[SourceHasher]] = ()) -> PackResult:
    """Pack A (default: the embedded model) and optionally B into `output`.
    hashers: sources.hashing.start_hashes(a_path, b_path), when the caller started
    them earlier (pack stops them when it ends); by default pack starts them."""
    from .sources.checkpoint import check_twins, open_checkpoint
    t0 = time.perf_counter()
    running: list[SourceHasher] = [h for h in hashers if h is not None]     # all stopped at the end
    old = None
    try:
        check_output(Path(output), force)      # fail before the slow reading of checkpoints
        if a_path is None:
            from .default_model import default_gguf
            a_path = default_gguf()
        # The sources' sha256s go in the header, but hashing reads every byte once more:
        # hash in threads while the data are written, with fixed-length placeholders in
        # the header patched at the end.  Single files start hashing before their headers
        # are parsed (a checkpoint's files are then that one file; checked below).
        early = list(hashers) if hashers else start_hashes(a_path, b_path)
        early += [None] * (2 - len(early))
        running += [h for h in early if h is not None]
        # Replacing a file: its page cache is garbage once replaced; freed just ahead
        # of our writes, the new file's pages reuse it (ssq/write.OldPages).
        old = OldPages(Path(output)) if force and Path(output).is_file() else None

        def written(n: int) -> None:
            if old is not None:
                old.advance(n)
            on_bytes(n)
        a = open_checkpoint(Path(a_path))
        hash_a = _hasher(_files(a), early[0])
        b = open_checkpoint(Path(b_path)) if b_path is not None else None
        if b is not None:
            check_twins(a, b)
        identical = b is None or same_content(a, b)
        hash_b = None if identical else _hasher(_files(b), early[1])
        running += [h for h in (hash_a, hash_b) if h is not None]
        for h in early:
            if h is not None and h not in (hash_a, hash_b):
                h.stop()                       # B identical to A, or files other than expected
        names = (name_a or _twin_name(a.path),
                 name_b or (_twin_name(b.path) if b is not None else name_a or _twin_name(a.path)))
        kvs = metadata_kvs(a, b, names, identical, sha256=PENDING_SHA)
        output = Path(output)
        with SourceFiles() as files, atomic_output(output, force) as tmp:
            plans = plan_tensors(a, None if identical else b, files)
            check_free_space(tmp.parent, estimate_size(kvs, plans))
            on_start(sum(p.nbytes for p in plans))
            try:
                header_len = write_ssq_gguf(tmp, a.arch, kvs, plans, written)
                sha_a = hash_a.result()
                patch_string_array(tmp, header_len, F.KEY_SHA256, [sha_a, hash_b.result() if hash_b else sha_a])
            except OSError as e:
                raise PtiError(f"writing {output} failed: {e.strerror or e}") from None
            size = tmp.stat().st_size
    finally:
        for h in running:
            h.stop()
        if old is not None:
            old.close()
    return PackResult(output, F.MODE_IDENTICAL if identical else F.MODE_TWIN, identical, size,
                      time.perf_counter() - t0)


def pack_cli(a: Optional[Path], b: Optional[Path], output: Path, *, force: bool = False,
             name_a: Optional[str] = None, name_b: Optional[str] = None, quiet: bool = False,
             hashers: Sequence[Optional[SourceHasher]] = ()) -> PackResult:
    """The `pti pack` command: pack() with a rich progress bar of bytes written
    (quiet: no bar, no summary line, and rich not imported: 20 ms of start-up)."""
    if quiet:
        return pack(a, b, output, force=force, name_a=name_a, name_b=name_b, hashers=hashers)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    console = Console(stderr=True)
    show = console.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=console, disable=not show, transient=False)
    task: list[Any] = [progress.add_task("reading checkpoints", total=None)]

    def start(total: int) -> None:
        progress.remove_task(task[0])
        task[0] = progress.add_task("packing", total=total)

    with progress:
        result = pack(a, b, output, force=force, name_a=name_a, name_b=name_b, hashers=hashers,
                      on_start=start, on_bytes=lambda n: progress.advance(task[0], n))
    kind = "identical twins, Q8_0" if result.identical else "two twins, SSQ16"
    print(f"wrote {result.output} ({result.bytes_written / 1e6:.1f} MB, mode {result.mode}: {kind}) "
          f"in {result.seconds:.1f} s", file=sys.stdout)
    return result
