"""Streaming, atomic GGUF writer for .ssq files.

gguf-py's GGUFWriter writes the header, the key/values and the tensor infos
(it computes every tensor's aligned offset from the byte counts we declare);
the data section we then write ourselves, tensor by tensor and each tensor in
row chunks, with GGUF's alignment padding between tensors, so no tensor is
ever held whole in memory.  A tensor whose bytes already lie in a source file
(a Q8_0 matrix packed as Q8_0) is copied file to file by the kernel
(os.copy_file_range), or through one reused buffer where the kernel cannot.
The file is written to a temporary name beside the output and renamed at the
end (swapped with the OUT it replaces, which is then removed: see exchange);
on any error or Ctrl-C it is removed.

Every write() from user memory is cut into WRITE_PIECE bytes: on this project's
VM a single large write() made the kernel allocate large page-cache folios, and
filling those ran 10-30x slower than 128 KiB writes (docs/perf.md, ssq/pack).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import struct
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from gguf import GGUFValueType, GGUFWriter, GGMLQuantizationType
from gguf.constants import GGUF_DEFAULT_ALIGNMENT

from ..errors import PtiError

CHUNK_BYTES = 32 << 20       # target working set of one row chunk (output bytes)
WRITE_PIECE = 128 << 10      # bytes per write() from user memory (see the module docstring)
COPY_STEP = 64 << 20         # bytes per copy_file_range call (one progress update each)
READ_STEP = 4 << 20          # bytes per read of the user-space fallback copy
WORKERS = min(2, os.cpu_count() or 1)   # threads running thread-safe fills (numpy copies and pwrite release the GIL)
# copy_file_range errors that mean "not between these files": copy through user space instead
NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF}


@dataclass
class FileSpan:
    """Bytes of a source file that the output stores unchanged."""
    path: Path
    offset: int
    nbytes: int


@dataclass
class TensorPlan:
    """One tensor of the output file and how to produce its bytes."""
    name: str                                 # name in the file
    shape: tuple[int, ...]                    # numpy-order shape given to GGUFWriter (byte shape for Q8_0)
    dtype: type                               # np.float32 / np.int8 / np.uint8 (with raw_dtype)
    raw_dtype: GGMLQuantizationType | None
    rows: int                                 # produced in chunks of rows
    row_bytes: int
    fill: Callable[[int, int], np.ndarray]    # rows [start, stop) -> array of (stop-start)*row_bytes bytes,
                                              # valid until the next fill() call (producers may reuse buffers)
    chunk_rows: int = 0                       # rows per fill() call; 0: about CHUNK_BYTES of output
    threadsafe: bool = False                  # fill() may run in several threads at once (its array then
                                              # stays valid until the same thread's next call)
    span: FileSpan | None = None              # the tensor's bytes as they lie in a source file: copied file to file

    def __post_init__(self):
        if self.chunk_rows <= 0:
            self.chunk_rows = max(1, CHUNK_BYTES // max(1, self.row_bytes))

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


KeyValue = tuple[str, Any, GGUFValueType, "GGUFValueType | None"]


def _pad(n: int, align: int = GGUF_DEFAULT_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


def estimate_size(kvs: list[KeyValue], tensors: list[TensorPlan]) -> int:
    """An upper estimate of the output file size (header + data)."""
    size = 24
    for key, val, vtype, _sub in kvs:
        size += 8 + len(key) + 12
        if vtype == GGUFValueType.ARRAY:
            size += 12 + sum(8 + len(str(v).encode()) if isinstance(v, str) else 8 for v in val)
        else:
            size += 8 + len(str(val).encode())
    for t in tensors:
        size += 8 + len(t.name) + 4 + 8 * len(t.shape) + 12
    size = _pad(size)
    return size + sum(_pad(t.nbytes) for t in tensors)


def check_free_space(folder: Path, need: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise PtiError(f"not enough free disk space in {folder}: need {need / 1e9:.2f} GB, "
                       f"{free / 1e9:.2f} GB free")


class SourceFiles:
    """Source files opened once for a pack and read at explicit offsets (os.preadv
    into the caller's buffer: no mapping, no page faults, no RSS growth)."""

    def __init__(self):
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()          # fills in worker threads open files too

    def fd(self, path: Path) -> int:
        with self._lock:
            if path not in self._fds:
                self._fds[path] = os.open(path, os.O_RDONLY)
            return self._fds[path]

    def read_into(self, path: Path, offset: int, out: memoryview) -> None:
        """Fill `out` with the bytes of `path` from `offset` (PtiError if the file is shorter)."""
        fd, done = self.fd(path), 0
        while done < len(out):
            got = os.preadv(fd, [out[done:]], offset + done)
            if got == 0:
                raise PtiError(f"{path}: file ended at byte {offset + done} while packing (changed on disk?)")
            done += got

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "SourceFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of `data` at `offset`, WRITE_PIECE bytes per call."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:done + WRITE_PIECE], offset + done)


def copy_span(files: SourceFiles, span: FileSpan, out_fd: int, out_offset: int, buf: bytearray,
              on_bytes: Callable[[int], None]) -> None:
    """Copy span's bytes to out_fd at out_offset: os.copy_file_range (in the kernel;
    a reflink on file systems that share extents), or, when the kernel refuses
    (NO_KERNEL_COPY), through `buf` from where it stopped."""
    src_fd, done, kernel = files.fd(span.path), 0, hasattr(os, "copy_file_range")
    view = memoryview(buf)
    while done < span.nbytes:
        want = span.nbytes - done
        if kernel:
            try:
                got = os.copy_file_range(src_fd, out_fd, min(want, COPY_STEP), span.offset + done, out_offset + done)
            except OSError as e:
                if e.errno not in NO_KERNEL_COPY:
                    raise
                kernel = False
                continue
        else:
            got = os.preadv(src_fd, [view[:min(want, len(view))]], span.offset + done)
            pwrite_all(out_fd, view[:got], out_offset + done)
        if got == 0:
            raise PtiError(f"{span.path}: file ended at byte {span.offset + done} while packing (changed on disk?)")
        done += got
        on_bytes(got)


def write_ssq_gguf(path: Path, arch: str, kvs: list[KeyValue], tensors: list[TensorPlan],
                   on_bytes: Callable[[int], None] = lambda n: None) -> int:
    """Write one GGUF v3 file: kvs as given, tensors copied from their span or
    streamed through their fill().  Returns the offset of the data section."""
    # GGUFWriter opens with "wb": truncating an existing file, even an empty one,
    # makes ext4 start writeback of the whole file when it is closed (auto_da_alloc,
    # 0.56 s for 1.4 GB here, measured): let it create the file instead.
    Path(path).unlink(missing_ok=True)
    w = GGUFWriter(path, arch)
    for key, val, vtype, sub in kvs:
        w.add_key_value(key, val, vtype, sub)
    for t in tensors:
        w.add_tensor_info(t.name, t.shape, np.dtype(t.dtype), t.nbytes, raw_dtype=t.raw_dtype)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        fout = w.fout[0]
        w.write_padding(fout, fout.tell())
        fout.flush()
        data_offset = pos = fout.tell()
        fd = fout.fileno()           # the data section: explicit offsets on the descriptor
        buf = bytearray(READ_STEP)   # the fallback copy's one buffer
        rows = _RowWriter(fd, on_bytes)
        try:
            with SourceFiles() as files:
                for t in tensors:
                    if t.span is not None:
                        if t.span.nbytes != t.nbytes:
                            raise AssertionError(f"{t.name}: span of {t.span.nbytes} bytes, expected {t.nbytes}")
                        copy_span(files, t.span, fd, pos, buf, on_bytes)
                    else:
                        rows.write(t, pos)
                    pad = _pad(t.nbytes, w.data_alignment) - t.nbytes
                    if pad:
                        pwrite_all(fd, memoryview(bytes(pad)), pos + t.nbytes)
                    pos += t.nbytes + pad
                rows.drain()
        finally:
            rows.close()
        os.lseek(fd, pos, os.SEEK_SET)   # the writer's own position, should it write again
    finally:
        w.close()                        # no fsync: atomicity against errors and Ctrl-C comes from the rename/exchange
    return data_offset


def _write_chunk(t: TensorPlan, r0: int, r1: int, fd: int, pos: int, on_bytes: Callable[[int], None]) -> None:
    """Rows [r0, r1) of one tensor through its fill(), written at file offset pos."""
    chunk = np.ascontiguousarray(t.fill(r0, r1))
    if chunk.nbytes != (r1 - r0) * t.row_bytes:
        raise AssertionError(f"{t.name}: chunk of {chunk.nbytes} bytes, expected {(r1 - r0) * t.row_bytes}")
    pwrite_all(fd, memoryview(chunk.reshape(-1).view(np.uint8)), pos)
    on_bytes(chunk.nbytes)


class _RowWriter:
    """Writes tensors through their fill() in row chunks.  Chunks of thread-safe
    plans run on WORKERS threads, a bounded number in flight (the file offsets are
    explicit, so their order does not matter); the others run here, in order."""

    def __init__(self, fd: int, on_bytes: Callable[[int], None], workers: int = WORKERS):
        self.fd, self.on_bytes, self.workers = fd, on_bytes, workers
        self.pool = ThreadPoolExecutor(workers) if workers > 1 else None
        self.pending: deque[Future] = deque()                 # chunks in flight, in file order

    def write(self, t: TensorPlan, pos: int) -> None:
        for r0 in range(0, t.rows, t.chunk_rows):
            r1 = min(t.rows, r0 + t.chunk_rows)
            at = pos + r0 * t.row_bytes
            if self.pool is None or not t.threadsafe:
                _write_chunk(t, r0, r1, self.fd, at, self.on_bytes)
                continue
            self.pending.append(self.pool.submit(_write_chunk, t, r0, r1, self.fd, at, self.on_bytes))
            while len(self.pending) > 2 * self.workers:
                self.pending.popleft().result()               # re-raises a worker's error here

    def drain(self) -> None:
        while self.pending:
            self.pending.popleft().result()

    def close(self) -> None:
        """Cancel what has not started, wait for what has (on errors and Ctrl-C too)."""
        for future in self.pending:
            future.cancel()
        self.pending.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def patch_string_array(path: Path, header_len: int, key: str, values: list[str]) -> None:
    """Overwrite, in place, the items of a string-array key already written in the
    header with new strings of the same lengths (the sources' sha256s, hashed
    while the data was being written)."""
    key_bytes = key.encode()
    with open(path, "r+b") as f:
        head = f.read(header_len)
        at = head.find(struct.pack("<Q", len(key_bytes)) + key_bytes)
        if at < 0:
            raise AssertionError(f"key {key} not found in the header")
        pos = at + 8 + len(key_bytes)
        vtype, item_type, count = struct.unpack_from("<IIQ", head, pos)
        assert (vtype, item_type, count) == (GGUFValueType.ARRAY, GGUFValueType.STRING, len(values)), key
        pos += 16
        for value in values:
            (n,) = struct.unpack_from("<Q", head, pos)
            data = value.encode()
            assert n == len(data), (key, n, len(data))
            f.seek(pos + 8)
            f.write(data)
            pos += 8 + n


def check_output(out: Path, force: bool) -> Path:
    """PtiError unless `out` can be written (an existing file only with force); its folder."""
    out = Path(out)
    folder = out.parent
    if out.is_dir():
        raise PtiError(f"output {out} is a directory")
    if out.exists() and not force:
        raise PtiError(f"output {out} exists; use --force to replace it")
    if not folder.is_dir():
        raise PtiError(f"output folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PtiError(f"output folder {folder} is not writable")
    return folder


FREE_AHEAD = 64 << 20        # OldPages: how far the old OUT's freed pages run ahead of the new file's bytes
FREE_STEP = 16 << 20         # OldPages: bytes of the old OUT freed per posix_fadvise call


class OldPages:
    """The page cache of an OUT about to be replaced, freed step by step just ahead
    of the new file's writes (advance(n) after each n bytes written).  Its bytes on
    disk stay, so the replacement remains atomic; its pages are garbage once the
    rename lands.  On this project's VM, memory freed and reused within about 2 s
    fills 10-20x faster than memory handed back to the host (free page reporting
    starts 2 s after a large free): freeing all of OUT at once (as `cp`'s truncation
    does) loses what the new file has not reused by then (docs/perf.md, ssq/pack).
    Best effort: any error is ignored.  Thread-safe."""

    def __init__(self, path: Path):
        self._lock = threading.Lock()
        self.written = self.freed = 0
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.written += nbytes
            if self._fd is None or self.written + FREE_AHEAD - self.freed < FREE_STEP:
                return
            upto = self.written + FREE_AHEAD
            try:
                os.posix_fadvise(self._fd, self.freed, upto - self.freed, os.POSIX_FADV_DONTNEED)
            except (OSError, AttributeError):
                pass
            self.freed = upto

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _renameat2():
    try:
        f = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return f


_RENAMEAT2 = _renameat2()
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def exchange(tmp: Path, out: Path) -> bool:
    """Swap two existing files' names atomically (renameat2 RENAME_EXCHANGE); False,
    with nothing changed, where the C library, kernel or file system cannot (or OUT
    is gone).  Replacing OUT by renaming over it makes ext4 write all of the new
    file out first (auto_da_alloc: 0.35 s per 1.4 GB here, waited for); the
    exchange is atomic just the same and has no such flush.  The caller removes
    the old OUT, now at tmp."""
    if _RENAMEAT2 is None or not out.is_file():
        return False
    return _RENAMEAT2(AT_FDCWD, os.fsencode(tmp), AT_FDCWD, os.fsencode(out), RENAME_EXCHANGE) == 0


@contextmanager
def atomic_output(out: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary path beside `out`; if the body succeeds, swap it with an
    existing `out` (exchange) and remove the old file, or rename it to `out`;
    remove it on any error or KeyboardInterrupt."""
    folder = check_output(out, force)
    tmp = folder / f".{Path(out).name}.{os.getpid()}.tmp"
    try:
        try:
            tmp.touch()
        except OSError as e:
            raise PtiError(f"cannot write in output folder {folder}: {e.strerror or e}") from None
        yield tmp
        if not exchange(tmp, Path(out)):
            os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.unlink(missing_ok=True)      # after an exchange: the old OUT
