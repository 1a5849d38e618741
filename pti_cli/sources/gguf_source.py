"""A GGUF file as a Checkpoint.

The header is bound-checked by gguf_validate first; then gguf-py's GGUFReader
parses it and maps the tensor data read-only.  Row chunks are dequantised with
gguf.quants.dequantize; Q8_0 rows are also offered bit for bit, and as the
file span that holds them (pack copies those file to file).
"""

from __future__ import annotations

import mmap
from functools import lru_cache
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from ..errors import PtiError
from .checkpoint import SUPPORTED_ARCHS, Checkpoint, TensorSource
from .gguf_validate import validate_gguf

Q8_0 = GGMLQuantizationType.Q8_0
PAGE = mmap.PAGESIZE

# keys every supported checkpoint carries, and the integer value types allowed for counts
REQUIRED_INT_KEYS = ("block_count", "embedding_length", "attention.head_count")
INT_TYPES = (GGUFValueType.UINT8, GGUFValueType.UINT16, GGUFValueType.UINT32, GGUFValueType.UINT64,
             GGUFValueType.INT8, GGUFValueType.INT16, GGUFValueType.INT32, GGUFValueType.INT64)


@lru_cache(maxsize=None)
def dequantisable(ggml_type: GGMLQuantizationType) -> bool:
    """Whether gguf-py can dequantise this type (tried on one zero block)."""
    if ggml_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return True
    block, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
    try:
        gguf.quants.dequantize(np.zeros((1, type_size), np.uint8), ggml_type)
    except NotImplementedError:
        return False
    return True


class _Reader(GGUFReader):
    """GGUFReader over a plain ndarray view of its memmap: gguf-py slices its data
    once per header item (twice per token string), and every slice of an np.memmap
    runs memmap.__array_finalize__; the plain view parses a 32k-token vocabulary
    about 2.5x faster (docs/perf.md).  The view shares the read-only mapping."""

    @property
    def data(self):
        return self._plain

    @data.setter
    def data(self, mm: np.memmap) -> None:
        self._memmap = mm                       # keeps the mapping alive; madvise goes through it
        self._plain = mm.view(np.ndarray)


class GGUFTensor(TensorSource):
    """Rows of one tensor of an open GGUFReader (data is a read-only memmap view)."""

    def __init__(self, name, shape, ggml_type, data: np.ndarray, base: np.memmap,
                 path: Path | None = None, file_offset: int = 0):
        super().__init__(name, shape, ggml_type)
        self._base = base
        self._path, self._file_offset = path, file_offset
        if len(shape) == 1:
            self._data = data.reshape(-1)
        else:   # 2-D: one row per matrix row (bytes for quantised types, elements for F32/F16)
            self._data = data.reshape(self.rows, -1)

    def _release(self, view: np.ndarray) -> None:
        """Drop the mapped pages just read from this process's RSS (the page cache keeps them)."""
        mm = getattr(self._base, "_mmap", None)
        if mm is None or not hasattr(mm, "madvise"):
            return
        start = view.__array_interface__["data"][0] - self._base.__array_interface__["data"][0]
        stop = start + view.nbytes
        lo = (start + PAGE - 1) // PAGE * PAGE
        hi = stop // PAGE * PAGE
        if hi > lo:
            try:
                mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError):
                pass

    def _chunk(self, start: int, stop: int) -> np.ndarray:
        n = self.shape[0] if len(self.shape) == 1 else self.rows
        if not 0 <= start <= stop <= n:
            raise IndexError(f"rows {start}:{stop} out of range for {self.name} with {n} rows")
        return self._data[start:stop]

    def q8_rows(self, start, stop):
        if self.ggml_type != Q8_0 or len(self.shape) == 1:
            return None
        chunk = self._chunk(start, stop)
        blocks = chunk.reshape(stop - start, -1, 34)
        scales = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16).reshape(stop - start, -1)
        quants = np.ascontiguousarray(blocks[:, :, 2:]).view(np.int8).reshape(stop - start, -1)
        self._release(chunk)
        return quants, scales

    def q8_raw_rows(self, start, stop):
        """Q8_0 matrices only: the stored bytes uint8 [n, nblocks*34] (a copy); else None."""
        if self.ggml_type != Q8_0 or len(self.shape) == 1:
            return None
        chunk = self._chunk(start, stop)
        out = np.array(chunk, dtype=np.uint8)
        self._release(chunk)
        return out

    def q8_file_span(self) -> tuple[Path, int, int] | None:
        """Q8_0 matrices only: (file, byte offset, byte count) of the stored bytes, which
        are q8_raw_rows(0, rows) in file order; else None."""
        if self.ggml_type != Q8_0 or len(self.shape) == 1 or self._path is None:
            return None
        return self._path, self._file_offset, self._data.nbytes

    def f32_rows(self, start, stop):
        if len(self.shape) == 1 and self.ggml_type not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            # a quantised vector: dequantise it whole (vectors are small), then slice
            return np.array(gguf.quants.dequantize(self._data, self.ggml_type)[start:stop], np.float32)
        chunk = self._chunk(start, stop)
        out = np.array(gguf.quants.dequantize(chunk, self.ggml_type), dtype=np.float32)
        self._release(chunk)
        return out


def _field_entry(field):
    """(value, type, array item type) of a ReaderField, as a GGUF writer takes them."""
    vtype = field.types[0]
    if vtype == GGUFValueType.ARRAY:
        item_type = GGUFValueType(int(field.parts[3][0]))   # parts: key len, key, type, item type, count, ...
        return list(field.contents()), vtype, item_type
    return field.contents(), vtype, None


def _arch(reader: GGUFReader, path: Path) -> str:
    field = reader.fields.get("general.architecture")
    if field is None or field.types != [GGUFValueType.STRING]:
        raise PtiError(f"{path}: GGUF has no general.architecture string")
    arch = field.contents()
    if arch not in SUPPORTED_ARCHS:
        raise PtiError(f"{path}: unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
    return arch


def _check_required(metadata: dict, arch: str, path: Path) -> None:
    for short in REQUIRED_INT_KEYS:
        key = f"{arch}.{short}"
        if key not in metadata:
            raise PtiError(f"{path}: missing GGUF key {key}")
        value, vtype, _ = metadata[key]
        if vtype not in INT_TYPES or not 1 <= value <= 1 << 20:
            raise PtiError(f"{path}: GGUF key {key} must be an integer in 1..{1 << 20}, got {vtype.name} {value!r}")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if tokens is None or tokens[1] != GGUFValueType.ARRAY or tokens[2] != GGUFValueType.STRING:
        raise PtiError(f"{path}: GGUF has no tokenizer.ggml.tokens string array")
    model = metadata.get("tokenizer.ggml.model")
    if model is None or model[1] != GGUFValueType.STRING:
        raise PtiError(f"{path}: GGUF has no tokenizer.ggml.model string")


def open_gguf(path) -> Checkpoint:
    path = Path(path)
    validate_gguf(path)
    try:
        reader = _Reader(path, "r")
    except (ValueError, KeyError, IndexError, UnicodeDecodeError) as e:  # validate_gguf should have caught it
        raise PtiError(f"{path}: corrupt GGUF: {e}") from None
    arch = _arch(reader, path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith(arch + ".") or key.startswith("tokenizer.") or key == "general.name":
            metadata[key] = _field_entry(field)
    _check_required(metadata, arch, path)
    tensors: dict[str, TensorSource] = {}
    for t in reader.tensors:
        ggml_type = GGMLQuantizationType(t.tensor_type)
        if not dequantisable(ggml_type):
            raise PtiError(f"{path}: tensor {t.name} has unsupported type {ggml_type.name}")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors[t.name] = GGUFTensor(t.name, shape, ggml_type, t.data, reader._memmap, path, int(t.data_offset))
    if not tensors:
        raise PtiError(f"{path}: GGUF has no tensors")
    return Checkpoint(path=path, kind="gguf", arch=arch, metadata=metadata, tensors=tensors, files=[path])
