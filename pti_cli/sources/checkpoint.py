"""A model checkpoint seen through GGUF names: `Checkpoint` of `TensorSource`s.

`open_checkpoint(path)` accepts a GGUF file, one .safetensors file (with a
config.json beside it) or a Hugging Face folder.  `check_twins(a, b)` says
whether two checkpoints can share one .ssq file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from ..errors import PtiError

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3")


@dataclass
class TensorSource:
    """One tensor of a checkpoint, read in row chunks.

    shape is numpy row-major order (reversed GGUF ne): (rows, K) for a matrix,
    (n,) for a vector.  Subclasses implement the reads.
    """
    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType

    @property
    def rows(self) -> int:
        return self.shape[0] if len(self.shape) == 1 else int(np.prod(self.shape[:-1]))

    def q8_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Q8_0 matrices only: (int8 [n, nblocks*32], float16 [n, nblocks]), bit for bit; else None."""
        return None

    def q8_raw_rows(self, start: int, stop: int) -> np.ndarray | None:
        """Q8_0 matrices only: the stored Q8_0 bytes uint8 [n, nblocks*34]; else None (pack's fast path)."""
        return None

    def f32_rows(self, start: int, stop: int) -> np.ndarray:
        """float32 [n, K] for rows start:stop of a matrix; float32 [n] for elements of a vector."""
        raise NotImplementedError


@dataclass
class Checkpoint:
    path: Path
    kind: str                                 # "gguf" | "safetensors"
    arch: str                                 # llama, qwen2, qwen3
    metadata: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]
    tensors: dict[str, TensorSource]          # file order, llama.cpp names and row order
    files: list[Path] = field(default_factory=list)   # the weight files, hashed in this order
    _sha256: str | None = field(default=None, repr=False)

    @property
    def sha256(self) -> str:
        """sha256 of the source weight bytes (all shards, in order); computed on first use."""
        if self._sha256 is None:
            self._sha256 = sha256_files(self.files)
        return self._sha256


def sha256_files(files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def _looks_like_safetensors(head: bytes) -> bool:
    # 8-byte little-endian header length, then a JSON object
    return len(head) >= 9 and head[8:9] == b"{"


def open_checkpoint(path) -> Checkpoint:
    """A GGUF file, a .safetensors file or a Hugging Face folder, as a Checkpoint; PtiError on bad input."""
    path = Path(path)
    if not path.exists():
        raise PtiError(f"{path}: no such file or folder")
    if path.is_dir():
        from .safetensors_source import open_safetensors
        return open_safetensors(path)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise PtiError(f"{path}: cannot read: {e.strerror}") from None
    if head[:4] == b"GGUF":
        from .gguf_source import open_gguf
        return open_gguf(path)
    if path.suffix == ".safetensors" or _looks_like_safetensors(head):
        from .safetensors_source import open_safetensors
        return open_safetensors(path)
    raise PtiError(f"{path}: not a GGUF or safetensors file")


# --- twins ---------------------------------------------------------------

# tokenizer keys that define the vocabulary: token strings, ids, special ids
VOCAB_KEYS = ("tokenizer.ggml.tokens",)
SPECIAL_ID_KEYS = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                   "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                   "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


def _first_list_difference(a: list, b: list) -> str:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} entries"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"entry {i}: {x!r} vs {y!r}"
    return ""


def _hyper_values(ck: Checkpoint) -> dict[str, Any]:
    """Architecture hyper-parameters ("{arch}.*") as plain values (types may differ between writers).

    Keys that converters write or leave out when they hold their default value
    (llama.cpp's converter has changed over time) are filled in with that default,
    so that a GGUF and a Hugging Face folder of the same shape compare equal.
    """
    a = ck.arch + "."
    hp = {k: v[0] for k, v in ck.metadata.items() if k.startswith(a)}
    heads, width = hp.get(a + "attention.head_count"), hp.get(a + "embedding_length")
    if isinstance(heads, int) and isinstance(width, int) and heads > 0:
        hp.setdefault(a + "attention.head_count_kv", heads)
        hp.setdefault(a + "attention.key_length", width // heads)
        hp.setdefault(a + "attention.value_length", width // heads)
        hp.setdefault(a + "rope.dimension_count", hp[a + "attention.key_length"])
    tokens = ck.metadata.get("tokenizer.ggml.tokens", (None,))[0]
    if isinstance(tokens, list):
        hp.setdefault(a + "vocab_size", len(tokens))
    return hp


def _same_value(x: Any, y: Any) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
            np.float32(x) == np.float32(y)
    return x == y


def check_twins(a: Checkpoint, b: Checkpoint) -> None:
    """PtiError naming the first field or tensor where a and b cannot be twins."""
    if a.arch != b.arch:
        raise PtiError(f"twins differ in architecture: {a.arch} vs {b.arch}")
    ha, hb = _hyper_values(a), _hyper_values(b)
    for key in sorted(set(ha) | set(hb)):
        if key not in ha or key not in hb:
            side = "A" if key not in ha else "B"
            raise PtiError(f"twins differ in hyper-parameter {key}: missing in twin {side}")
        if isinstance(ha[key], list) or isinstance(hb[key], list):
            diff = _first_list_difference(list(ha[key]), list(hb[key]))
            if diff:
                raise PtiError(f"twins differ in hyper-parameter {key}: {diff}")
        elif not _same_value(ha[key], hb[key]):
            raise PtiError(f"twins differ in hyper-parameter {key}: {ha[key]!r} vs {hb[key]!r}")
    for key in VOCAB_KEYS + SPECIAL_ID_KEYS:
        va = a.metadata.get(key, (None,))[0]
        vb = b.metadata.get(key, (None,))[0]
        if isinstance(va, list) and isinstance(vb, list):
            diff = _first_list_difference(va, vb)
            if diff:
                raise PtiError(f"twins differ in vocabulary {key}: {diff}")
        elif va != vb:
            raise PtiError(f"twins differ in vocabulary {key}: {va!r} vs {vb!r}")
    names_a, names_b = list(a.tensors), list(b.tensors)
    for name in names_a:
        if name not in b.tensors:
            raise PtiError(f"twins differ in tensors: {name} is missing in twin B")
    for name in names_b:
        if name not in a.tensors:
            raise PtiError(f"twins differ in tensors: {name} is missing in twin A")
    for name in names_a:
        sa, sb = a.tensors[name].shape, b.tensors[name].shape
        if tuple(sa) != tuple(sb):
            raise PtiError(f"twins differ in tensor {name} shape: {tuple(sa)} vs {tuple(sb)}")
