"""SSQFile: open and validate an .ssq file (a GGUF v3 file, see docs/ssq-format.md).

Tensor data stay in gguf-py's read-only memmap; q8()/dense() copy out one
tensor for one twin, raw() returns the stored bytes (a view) for kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from ..errors import PtiError
from ..sources.gguf_validate import validate_gguf
from . import format as F

T = GGMLQuantizationType


def _field_value(field) -> Any:
    if not field.types:
        return None
    value = field.contents()
    if field.types[0] == GGUFValueType.ARRAY and field.types[-1] == GGUFValueType.BOOL:
        value = [bool(v) for v in value]
    elif field.types[0] == GGUFValueType.BOOL:
        value = bool(value)
    return value


class _Reader(GGUFReader):
    """GGUFReader over a plain ndarray view of its memmap.  gguf-py slices its
    memmap once per header item (twice per token string); every slice of an
    np.memmap runs memmap.__array_finalize__, which made opening a 49k-token
    file take 2x longer.  The view shares the read-only mapping."""

    @property
    def data(self):
        return self._plain

    @data.setter
    def data(self, mm: np.memmap) -> None:
        self._memmap = mm                       # keeps the mapping alive
        self._plain = mm.view(np.ndarray)


class SSQFile:
    """An opened .ssq file.  Twin 0 = A, 1 = B.  Raises PtiError on any inconsistency."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise PtiError(f"{self.path}: no such file")
        validate_gguf(self.path)       # bound checks before gguf-py trusts the header
        try:
            self._reader = _Reader(self.path, "r")
        except PtiError:
            raise
        except Exception as e:  # gguf-py raises ValueError/KeyError/IndexError on bad files
            raise PtiError(f"{self.path}: not a readable GGUF file ({e})") from None
        self.metadata: dict[str, Any] = {
            name: _field_value(f) for name, f in self._reader.fields.items() if not name.startswith("GGUF.")}
        self._tensors = {t.name: t for t in self._reader.tensors}
        self._check_keys()
        self._shapes = self._read_shapes()
        self._check_tensors()

    # --- validation -------------------------------------------------------
    def _key(self, key: str, kind: type):
        if key not in self.metadata:
            raise PtiError(f"{self.path}: not an .ssq file (missing key {key})")
        value = self.metadata[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise PtiError(f"{self.path}: key {key} has the wrong type")
        return value

    def _check_keys(self) -> None:
        version = self._key(F.KEY_VERSION, int)
        if version != F.FORMAT_VERSION:
            raise PtiError(f"{self.path}: unsupported ssq.format_version {version} (this pti reads {F.FORMAT_VERSION})")
        self.arch: str = self._key("general.architecture", str)
        self.mode: int = self._key(F.KEY_MODE, int)
        if self.mode not in (F.MODE_IDENTICAL, F.MODE_TWIN):
            raise PtiError(f"{self.path}: ssq.mode is {self.mode}, expected 8 or 16")
        self.identical: bool = self._key(F.KEY_IDENTICAL, bool)
        if self.identical != (self.mode == F.MODE_IDENTICAL):
            raise PtiError(f"{self.path}: ssq.identical={self.identical} contradicts ssq.mode={self.mode}")
        names = self._key(F.KEY_TWIN_NAMES, list)
        if len(names) != 2:
            raise PtiError(f"{self.path}: ssq.twin_names must hold 2 names, has {len(names)}")
        self.twin_names: tuple[str, str] = (str(names[0]), str(names[1]))
        shas = self._key(F.KEY_SHA256, list)
        if len(shas) != 2:
            raise PtiError(f"{self.path}: ssq.source_sha256 must hold 2 hashes, has {len(shas)}")
        self.source_sha256: tuple[str, str] = (str(shas[0]), str(shas[1]))
        self.tied_embeddings: bool = bool(self.metadata.get(F.KEY_TIED, "output.weight" not in self._tensors))

    def _read_shapes(self) -> dict[str, tuple[int, ...]]:
        names = self._key(F.KEY_TENSOR_NAMES, list)
        shapes = self._key(F.KEY_TENSOR_SHAPES, list)
        if len(names) != len(shapes):
            raise PtiError(f"{self.path}: ssq.tensor_names and ssq.tensor_shapes differ in length")
        out: dict[str, tuple[int, ...]] = {}
        for name, text in zip(names, shapes):
            try:
                shape = F.shape_from_str(text)
            except ValueError:
                raise PtiError(f"{self.path}: bad shape {text!r} for tensor {name}") from None
            if len(shape) not in (1, 2) or min(shape) < 1 or name in out:
                raise PtiError(f"{self.path}: bad logical shape {text!r} for tensor {name}")
            out[name] = shape
        self.tensor_names: list[str] = list(out)
        return out

    def _expect(self, stored: str, ggml_type: T, shape: tuple[int, ...]) -> None:
        t = self._tensors.get(stored)
        if t is None:
            raise PtiError(f"{self.path}: tensor {stored} is missing")
        got = tuple(int(d) for d in t.data.shape)
        if t.tensor_type != ggml_type or got != shape:
            raise PtiError(f"{self.path}: tensor {stored} is {t.tensor_type.name} {got}, "
                           f"expected {ggml_type.name} {shape}")

    def _check_tensors(self) -> None:
        expected: set[str] = set()
        for name, shape in self._shapes.items():
            if len(shape) == 2:
                rows, k = shape
                if self.mode == F.MODE_TWIN:
                    self._expect(name, T.I8, (rows, F.ssq16_row_bytes(k)))
                else:
                    if k % F.QK:
                        raise PtiError(f"{self.path}: Q8_0 tensor {name} has K={k}, not a multiple of 32")
                    self._expect(name, T.Q8_0, (rows, F.q8_row_bytes(k)))
                expected.add(name)
            else:
                self._expect(name, T.F32, shape)
                expected.add(name)
                if not self.identical:
                    self._expect(name + F.TWIN_B_SUFFIX, T.F32, shape)
                    expected.add(name + F.TWIN_B_SUFFIX)
        extra = sorted(set(self._tensors) - expected)
        if extra:
            raise PtiError(f"{self.path}: tensor {extra[0]} is not listed in ssq.tensor_names")

    # --- the contract -----------------------------------------------------
    def logical_shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def is_matrix(self, name: str) -> bool:
        return len(self._shapes[name]) == 2

    def storage(self, name: str) -> str:
        """How a tensor is stored: 'SSQ16', 'Q8_0' or 'F32' (x2 for per-twin vectors)."""
        if self.is_matrix(name):
            return "SSQ16" if self.mode == F.MODE_TWIN else "Q8_0"
        return "F32" if self.identical else "F32 x2"

    def stored_bytes(self, name: str) -> int:
        """Bytes the file holds for a logical tensor (both twins' copies)."""
        n = int(self._tensors[name].n_bytes)
        if not self.is_matrix(name) and not self.identical:
            n += int(self._tensors[name + F.TWIN_B_SUFFIX].n_bytes)
        return n

    def raw(self, name: str, twin: int = 0) -> np.ndarray:
        """Stored bytes as uint8 [rows, row_bytes] (a read-only memmap view):
        [rows, nb*68] for SSQ16, [rows, nb*34] for Q8_0; a vector's f32 bytes (twin picks the copy)."""
        if not self.is_matrix(name) and twin == 1 and not self.identical:
            name = name + F.TWIN_B_SUFFIX
        data = self._tensors[name].data
        return data.view(np.uint8).reshape(data.shape[0], -1) if data.ndim == 2 else data.view(np.uint8)

    def q8(self, name: str, twin: int) -> tuple[np.ndarray, np.ndarray]:
        """(int8 [rows, nb*32], float16 [rows, nb]) of one twin's matrix."""
        if not self.is_matrix(name):
            raise PtiError(f"tensor {name} is a vector, not a quantised matrix")
        if self.mode == F.MODE_TWIN:
            return F.unpack_ssq16(self.raw(name), twin)
        return F.unpack_q8(self.raw(name))

    def dense(self, name: str, twin: int) -> np.ndarray:
        """float32 in the logical shape: a dequantised matrix or an f32 vector."""
        shape = self._shapes[name]
        if len(shape) == 2:
            q, d = self.q8(name, twin)
            return F.dequantize_q8(q, d, shape[1])
        stored = name + F.TWIN_B_SUFFIX if twin == 1 and not self.identical else name
        return np.array(self._tensors[stored].data, dtype=np.float32).reshape(shape)

    # --- sizes --------------------------------------------------------------
    def file_size(self) -> int:
        return self.path.stat().st_size

    def pass_bytes(self, twins: int) -> int:
        """Weight bytes one decode pass reads for one twin (twins=1) or for both (2).

        Counted: every matrix but the token embedding table (a pass gathers a few
        of its rows), plus the vectors; with tied embeddings the table is the
        output matrix too and is counted whole.  One twin is 34 bytes per 32
        weights (Q8_0); both twins are 68 (SSQ16, read once for both) or, in an
        identical file, still 34: the one stored model serves both."""
        copies = 1 if self.identical else twins
        total = 0
        for name, shape in self._shapes.items():
            if name == "token_embd.weight" and not self.tied_embeddings:
                continue
            if len(shape) == 2:
                total += shape[0] * F.q8_row_bytes(shape[1]) * copies
            else:
                total += 4 * shape[0] * copies
        return total
