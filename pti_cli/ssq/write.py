"""Streaming, atomic GGUF writer for .ssq files.

gguf-py's GGUFWriter writes the header, the key/values and the tensor infos
(it computes every tensor's aligned offset from the byte counts we declare);
the data section we then write ourselves, tensor by tensor and each tensor in
row chunks, with GGUF's alignment padding between tensors, so no tensor is
ever held whole in memory.  The file is written to a temporary name beside
the output and renamed at the end; on any error or Ctrl-C it is removed.
"""

from __future__ import annotations

import os
import shutil
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from gguf import GGUFValueType, GGUFWriter, GGMLQuantizationType
from gguf.constants import GGUF_DEFAULT_ALIGNMENT

from ..errors import PtiError

CHUNK_BYTES = 32 << 20       # target working set of one row chunk (output bytes)


@dataclass
class TensorPlan:
    """One tensor of the output file and how to produce its bytes."""
    name: str                                 # name in the file
    shape: tuple[int, ...]                    # numpy-order shape given to GGUFWriter (byte shape for Q8_0)
    dtype: type                               # np.float32 / np.int8 / np.uint8 (with raw_dtype)
    raw_dtype: GGMLQuantizationType | None
    rows: int                                 # produced in chunks of rows
    row_bytes: int
    fill: Callable[[int, int], np.ndarray]    # rows [start, stop) -> array of (stop-start)*row_bytes bytes
    chunk_rows: int = 0                       # rows per fill() call; 0: about CHUNK_BYTES of output

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


def write_ssq_gguf(path: Path, arch: str, kvs: list[KeyValue], tensors: list[TensorPlan],
                   on_bytes: Callable[[int], None] = lambda n: None) -> int:
    """Write one GGUF v3 file: kvs as given, tensors streamed through their fill().
    Returns the offset of the data section (the header's length)."""
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
        data_offset = fout.tell()
        for t in tensors:
            start = fout.tell()
            for r0 in range(0, t.rows, t.chunk_rows):
                r1 = min(t.rows, r0 + t.chunk_rows)
                chunk = np.ascontiguousarray(t.fill(r0, r1))
                if chunk.nbytes != (r1 - r0) * t.row_bytes:
                    raise AssertionError(f"{t.name}: chunk of {chunk.nbytes} bytes, expected {(r1 - r0) * t.row_bytes}")
                fout.write(memoryview(chunk.reshape(-1).view(np.uint8)))
                on_bytes(chunk.nbytes)
            assert fout.tell() - start == t.nbytes, t.name
            w.write_padding(fout, t.nbytes)
        fout.flush()    # no fsync: atomicity against errors and Ctrl-C comes from the rename
    finally:
        w.close()
    return data_offset


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


@contextmanager
def atomic_output(out: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary path beside `out`; rename it to `out` if the body succeeds,
    remove it on any error or KeyboardInterrupt."""
    folder = check_output(out, force)
    tmp = folder / f".{Path(out).name}.{os.getpid()}.tmp"
    try:
        try:
            tmp.touch()
        except OSError as e:
            raise PtiError(f"cannot write in output folder {folder}: {e.strerror or e}") from None
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
