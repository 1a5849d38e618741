"""Bound-check a GGUF header against the file size before gguf-py reads it.

gguf-py's GGUFReader trusts every count and length in the header: an array
count of 2**62 in a 49-byte file makes it loop for ever, a bad tensor offset
makes numpy fail deep inside.  This module walks the header once with struct
over an mmap of the file, checking each count, length, type and offset against
the bytes that remain, and raises PtiError naming the field.  It only
validates; all values are parsed afterwards by gguf-py.

The layout rules are llama.cpp's (gguf.cpp): versions 2 and 3, at most 4
dimensions, tensor data laid out in order, each tensor at the next aligned
offset after the previous one.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
from gguf import GGMLQuantizationType, GGUFValueType

from ..errors import PtiError

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4                 # GGML_MAX_DIMS
MAX_KEY_LEN = 1 << 16        # keys are short ASCII paths
MAX_NAME_LEN = 64            # GGML_MAX_NAME
MAX_ARRAY_ITEMS = 1 << 22    # 4M: a 256k vocabulary's merges fit; gguf-py makes one numpy object per item
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20

SCALAR_SIZE = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}


@dataclass
class TensorInfo:
    name: str
    ne: tuple[int, ...]          # GGUF order: ne[0] is the row length
    ggml_type: GGMLQuantizationType
    offset: int                  # relative to the data section
    nbytes: int


@dataclass
class GGUFLayout:
    """What the walk learned; gguf-py re-reads the same file afterwards."""
    version: int
    n_kv: int
    alignment: int
    data_offset: int             # absolute start of the tensor data section
    file_size: int
    tensors: list[TensorInfo]


class _Cursor:
    """Little-endian reads over the mapped file that never go past its end."""

    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n > self.left():
            raise PtiError(f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                           f"only {self.left()} left in the file")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return vals[0] if len(vals) == 1 else vals

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.unpack("<Q", f"{what} length")
        if max_len is not None and n > max_len:
            raise PtiError(f"corrupt GGUF header: {what} length {n} exceeds the limit {max_len}")
        if n > self.left():
            raise PtiError(f"corrupt GGUF header: {what} length {n} exceeds file size "
                           f"({self.left()} bytes left at offset {self.pos})")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PtiError(f"corrupt GGUF header: {what} is not valid UTF-8") from None


def _value_type(raw: int, what: str) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise PtiError(f"corrupt GGUF header: {what} has unknown value type {raw}") from None


def _skip_value(cur: _Cursor, vtype: GGUFValueType, what: str):
    """Step over one value; returns it for scalars (needed: general.alignment)."""
    if vtype == GGUFValueType.STRING:
        cur.string(what)
        return None
    if vtype in SCALAR_SIZE:
        fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[SCALAR_SIZE[vtype]]
        return cur.unpack(fmt, what)
    # ARRAY: item type, count, items (nested arrays are not used by any model)
    item_type = _value_type(cur.unpack("<I", f"{what} array item type"), f"{what} array")
    count = cur.unpack("<Q", f"{what} array count")
    if item_type == GGUFValueType.ARRAY:
        raise PtiError(f"corrupt GGUF header: {what} is a nested array (not supported)")
    min_item = 8 if item_type == GGUFValueType.STRING else SCALAR_SIZE[item_type]
    if count * min_item > cur.left():
        raise PtiError(f"corrupt GGUF header: {what} array count {count} exceeds file size")
    if count > MAX_ARRAY_ITEMS:
        raise PtiError(f"corrupt GGUF header: {what} array count {count} exceeds the limit {MAX_ARRAY_ITEMS}")
    if item_type == GGUFValueType.STRING:
        for i in range(count):
            cur.string(f"{what} item {i}")
    else:
        cur.pos += count * min_item
    return None


def _walk_kv(cur: _Cursor, n_kv: int) -> int:
    """Walk the key/value section; returns the data alignment."""
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    seen: set[str] = set()
    for i in range(n_kv):
        key = cur.string(f"kv {i} key", MAX_KEY_LEN)
        if key in seen:
            raise PtiError(f"corrupt GGUF header: kv {i} duplicate key {key!r}")
        seen.add(key)
        what = f"kv {i} {key!r}"
        vtype = _value_type(cur.unpack("<I", f"{what} type"), what)
        value = _skip_value(cur, vtype, what)
        if key == "general.alignment":
            if vtype != GGUFValueType.UINT32:
                raise PtiError(f"corrupt GGUF header: {what} has type {vtype.name}, expected UINT32")
            if value == 0 or value & (value - 1) or value > 1 << 20:
                raise PtiError(f"corrupt GGUF header: {what} value {value} is not a power of two up to 1 MiB")
            alignment = value
    return alignment


def _tensor_nbytes(name: str, ne: tuple[int, ...], ggml_type: GGMLQuantizationType) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
    if ne[0] % block:
        raise PtiError(f"corrupt GGUF header: tensor {name!r} row length {ne[0]} is not a multiple "
                       f"of the {ggml_type.name} block size {block}")
    n = 1
    for d in ne:
        n *= d
    return n // block * type_size


def _walk_tensor_infos(cur: _Cursor, n_tensors: int) -> list[TensorInfo]:
    infos: list[TensorInfo] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = cur.string(f"tensor {i} name", MAX_NAME_LEN)
        if name in seen:
            raise PtiError(f"corrupt GGUF header: duplicate tensor name {name!r}")
        seen.add(name)
        what = f"tensor {i} {name!r}"
        n_dims = cur.unpack("<I", f"{what} n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            raise PtiError(f"corrupt GGUF header: {what} n_dims {n_dims} not in 1..{MAX_DIMS}")
        ne = tuple(cur.unpack("<Q", f"{what} dim {d}") for d in range(n_dims))
        for d, n in enumerate(ne):
            if n == 0 or n > cur.size * 8:  # no type stores more than 8 elements per byte... ~ 2 bits
                raise PtiError(f"corrupt GGUF header: {what} dim {d} = {n} is out of range for the file size")
        raw_type = cur.unpack("<I", f"{what} type")
        try:
            ggml_type = GGMLQuantizationType(raw_type)
            gguf.GGML_QUANT_SIZES[ggml_type]
        except (ValueError, KeyError):
            raise PtiError(f"corrupt GGUF header: {what} has unknown ggml type {raw_type}") from None
        offset = cur.unpack("<Q", f"{what} offset")
        infos.append(TensorInfo(name, ne, ggml_type, offset, _tensor_nbytes(name, ne, ggml_type)))
    return infos


def _check_data(infos: list[TensorInfo], data_offset: int, alignment: int, size: int) -> None:
    """Tensors follow each other in order, each at the next aligned offset (as llama.cpp requires)."""
    expected = 0
    for t in infos:
        if t.offset != expected:
            raise PtiError(f"corrupt GGUF header: tensor {t.name!r} offset {t.offset} "
                           f"(expected {expected}: data must be in order and {alignment}-byte aligned)")
        end = data_offset + t.offset + t.nbytes
        if end > size:
            raise PtiError(f"truncated: tensor {t.name!r} data ends at {end} beyond file size {size}")
        expected = t.offset + (t.nbytes + alignment - 1) // alignment * alignment


def validate_gguf(path) -> GGUFLayout:
    """Check a GGUF file's header and tensor layout; PtiError naming the first bad field."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size < 4 or f.read(4) != GGUF_MAGIC:
                raise PtiError(f"{path}: not a GGUF file (no GGUF magic)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise PtiError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PtiError(f"{path}: is a folder, not a GGUF file") from None
    except PermissionError:
        raise PtiError(f"{path}: permission denied") from None
    try:
        return _walk(buf, size)
    except PtiError as e:
        raise PtiError(f"{path}: {e}") from None
    finally:
        buf.close()


def _check_count(what: str, count: int, limit: int, min_bytes: int, cur: _Cursor) -> None:
    if count > limit:
        raise PtiError(f"corrupt GGUF header: {what} {count} exceeds the limit {limit}")
    if count * min_bytes > cur.left():
        raise PtiError(f"truncated: {what} {count} needs at least {count * min_bytes} bytes, "
                       f"only {cur.left()} left in the file")


def _walk(buf, size: int) -> GGUFLayout:
    cur = _Cursor(buf, size)
    cur.pos = 4
    version = cur.unpack("<I", "version")
    if version not in (2, 3):
        raise PtiError(f"unsupported GGUF version {version} (only 2 and 3, little-endian)")
    n_tensors, n_kv = cur.unpack("<QQ", "tensor and kv counts")
    _check_count("kv count", n_kv, MAX_KV, 13, cur)                 # a kv is at least 8 + 1 + 4 bytes
    _check_count("tensor count", n_tensors, MAX_TENSORS, 29, cur)   # 8 + 1 + 4 + 8 + 4 + 8 bytes at least
    alignment = _walk_kv(cur, n_kv)
    infos = _walk_tensor_infos(cur, n_tensors)
    data_offset = (cur.pos + alignment - 1) // alignment * alignment
    if infos and data_offset > size:
        raise PtiError(f"truncated: tensor data section starts at {data_offset} beyond file size {size}")
    _check_data(infos, data_offset, alignment, size)
    return GGUFLayout(version, n_kv, alignment, data_offset, size, infos)
