"""A safetensors checkpoint (one file, or a Hugging Face folder) as a Checkpoint.

What llama.cpp's converter (convert_hf_to_gguf.py) would write is rebuilt
here without writing a GGUF: tensor names through gguf-py's TensorNameMap,
llama Q/K rows permuted to llama.cpp's order, architecture keys from
config.json, tokenizer keys from tokenizer.json (merges, special ids and chat
template through gguf-py's SpecialVocab, which reads the JSON files).

Weights are read with the safetensors library, in row slices (get_slice), so
large tensors stream.  The header length and offsets are bound-checked first.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType, GGUFValueType, TokenType

from ..errors import PtiError
from .checkpoint import Checkpoint, TensorSource
from .hf_names import HF_ARCH, hf_to_gguf_name, permute_qk

T = GGUFValueType
MAX_HEADER = 100 << 20          # the safetensors library's own limit on the JSON header
MAX_JSON_FILE = 256 << 20       # config/tokenizer/index files
DTYPES = {                      # safetensors dtype -> (bytes per element, storage type we report)
    "F32": (4, GGMLQuantizationType.F32),
    "F16": (2, GGMLQuantizationType.F16),
    "BF16": (2, GGMLQuantizationType.BF16),
}
OTHER_DTYPE_SIZES = {"F64": 8, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
                     "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
SKIPPED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")


# --- files ---------------------------------------------------------------

def read_json(path: Path, what: str) -> dict:
    try:
        if path.stat().st_size > MAX_JSON_FILE:
            raise PtiError(f"{path}: {what} is larger than {MAX_JSON_FILE >> 20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PtiError(f"{path}: {what} not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PtiError(f"{path}: {what} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise PtiError(f"{path}: {what} is not a JSON object")
    return data


def validate_safetensors(path: Path) -> dict:
    """Check the 8-byte header length, the JSON header and every tensor's offsets against the file size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise PtiError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = struct.unpack("<Q", head)[0]
        if n > size - 8 or n > MAX_HEADER or n < 2:
            raise PtiError(f"{path}: corrupt safetensors header: length {n} exceeds file size {size} "
                           f"or the limit {MAX_HEADER}")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PtiError(f"{path}: corrupt safetensors header: not valid JSON") from None
    if not isinstance(header, dict):
        raise PtiError(f"{path}: corrupt safetensors header: not a JSON object")
    data_size = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            itemsize = DTYPES[dtype][0] if dtype in DTYPES else OTHER_DTYPE_SIZES[dtype]
            count = math.prod(int(d) for d in shape)
            ok = all(isinstance(d, int) and d >= 0 for d in shape) and isinstance(begin, int) \
                and isinstance(end, int) and 0 <= begin <= end
        except (KeyError, TypeError, ValueError):
            raise PtiError(f"{path}: corrupt safetensors header: tensor {name!r} entry is malformed") from None
        if not ok or end - begin != count * itemsize:
            raise PtiError(f"{path}: corrupt safetensors header: tensor {name!r} offsets {begin}..{end} "
                           f"do not match its shape {shape} and dtype {dtype}")
        if end > data_size:
            raise PtiError(f"truncated: {path}: tensor {name!r} data ends at {8 + n + end} beyond file size {size}")
    return header


def locate(path: Path) -> tuple[Path, list[Path]]:
    """(folder with config.json, weight files in order) for a file or a Hugging Face folder."""
    if path.is_file():
        folder = path.parent
        if not (folder / "config.json").is_file():
            raise PtiError(f"{path}: a bare .safetensors file needs a config.json beside it")
        return folder, [path]
    folder = path
    if not (folder / "config.json").is_file():
        raise PtiError(f"{folder}: not a Hugging Face checkpoint folder (no config.json)")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, "model.safetensors.index.json").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise PtiError(f"{index}: no weight_map")
        shards = []
        for shard in weight_map.values():
            if not isinstance(shard, str) or "/" in shard or "\\" in shard or shard.startswith("."):
                raise PtiError(f"{index}: bad shard file name {shard!r}")
            if shard not in shards:
                shards.append(shard)
        files = [folder / s for s in sorted(shards)]
        for f in files:
            if not f.is_file():
                raise PtiError(f"{f}: shard listed in model.safetensors.index.json is missing")
        return folder, files
    single = folder / "model.safetensors"
    if single.is_file():
        return folder, [single]
    raise PtiError(f"{folder}: no model.safetensors or model.safetensors.index.json")


# --- tensors -------------------------------------------------------------

class SafetensorsTensor(TensorSource):
    """One tensor read through safetensors' get_slice; llama Q/K rows permuted on the fly."""

    def __init__(self, name, shape, ggml_type, path: Path, hf_name: str, permute_heads: int = 0):
        super().__init__(name, shape, ggml_type)
        self._path, self._hf_name, self._heads = path, hf_name, permute_heads

    def _slice(self, start: int, stop: int) -> np.ndarray:
        """Rows start:stop as a float32 copy.  The file is opened for each read: its mapping
        goes away with the handle, so pages read do not pile up in RSS over a large tensor."""
        import torch
        from safetensors import safe_open
        with safe_open(str(self._path), framework="pt") as f:
            t = f.get_slice(self._hf_name)[start:stop]
            t = t.to(torch.float32) if t.dtype != torch.float32 else t.clone()
        return t.numpy()

    def _read(self, start: int, stop: int) -> np.ndarray:
        rows = self.shape[0]
        if not 0 <= start <= stop <= rows:
            raise IndexError(f"rows {start}:{stop} out of range for {self.name} with {rows} rows")
        if not self._heads:
            return self._slice(start, stop)
        # Permuted rows stay inside their head: read whole heads, permute them, then cut.
        head = rows // self._heads
        h0, h1 = start // head, -(-stop // head)
        block = self._slice(h0 * head, h1 * head)
        return permute_qk(block, h1 - h0)[start - h0 * head:stop - h0 * head]

    def f32_rows(self, start, stop):
        return np.ascontiguousarray(self._read(start, stop), dtype=np.float32)


class ArrayTensor(TensorSource):
    """A tensor computed here (llama3's rope_freqs), as llama.cpp's converter adds it."""

    def __init__(self, name, data: np.ndarray):
        super().__init__(name, tuple(data.shape), GGMLQuantizationType.F32)
        self._data = data.astype(np.float32)

    def f32_rows(self, start, stop):
        return self._data[start:stop].copy()


def _sort_key(item):
    i, name = item
    parts = name.split(".")
    if name.startswith("token_embd"):
        return (0, 0, i)
    if parts[0] == "blk" and parts[1].isdigit():
        return (1, int(parts[1]), i)
    return (2, 0, i)


def _tensors(files: list[Path], arch: str, config: dict) -> dict[str, TensorSource]:
    from safetensors import safe_open
    n_layers = int(config["num_hidden_layers"])
    n_head = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads") or n_head)
    found: list[tuple[str, TensorSource]] = []
    hf_seen: dict[str, Path] = {}
    for path in files:
        header = validate_safetensors(path)
        try:
            with safe_open(str(path), framework="pt") as f:
                names = set(f.keys())
        except Exception as e:  # SafetensorError is not exported as a stable type
            raise PtiError(f"{path}: cannot open safetensors file: {e}") from None
        for hf_name, info in header.items():
            if hf_name == "__metadata__" or hf_name.endswith(SKIPPED_SUFFIXES):
                continue
            if hf_name in hf_seen:
                raise PtiError(f"{path}: tensor {hf_name} also in {hf_seen[hf_name]}")
            hf_seen[hf_name] = path
            name = hf_to_gguf_name(hf_name, arch, n_layers)
            if info["dtype"] not in DTYPES:
                raise PtiError(f"{path}: tensor {hf_name} has unsupported type {info['dtype']}")
            shape = tuple(int(d) for d in info["shape"])
            if not shape or 0 in shape or len(shape) > 2:
                raise PtiError(f"{path}: tensor {hf_name} has unsupported shape {list(shape)}")
            heads = 0
            if arch == "llama" and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
                heads = n_head
            elif arch == "llama" and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
                heads = n_kv
            if heads and shape[0] % (2 * heads):
                raise PtiError(f"{path}: tensor {hf_name} has {shape[0]} rows, not a multiple of 2 x {heads} heads")
            if hf_name not in names:
                raise PtiError(f"{path}: tensor {hf_name} is in the header but the safetensors library does not list it")
            found.append((name, SafetensorsTensor(name, shape, DTYPES[info["dtype"]][1], path, hf_name, heads)))
    index = files[0].parent / "model.safetensors.index.json"
    if len(files) > 1 or index.is_file() and files[0].name != "model.safetensors":
        listed = read_json(index, "model.safetensors.index.json").get("weight_map") or {}
        for hf_name, shard in listed.items():
            if hf_name not in hf_seen and not hf_name.endswith(SKIPPED_SUFFIXES):
                raise PtiError(f"{index}: tensor {hf_name} is listed in {shard} but not found there")
    order = sorted(enumerate(n for n, _ in found), key=_sort_key)
    return {found[i][0]: found[i][1] for i, _ in order}


# --- metadata ------------------------------------------------------------

def _rope(config: dict) -> dict:
    """Rope settings: transformers 5 writes `rope_parameters`, older versions `rope_theta` and `rope_scaling`."""
    rope = dict(config.get("rope_scaling") or {})
    rope.update(config.get("rope_parameters") or {})
    if "rope_theta" in config:
        rope.setdefault("rope_theta", config["rope_theta"])
    return rope


def arch_metadata(config: dict, arch: str) -> dict:
    """The "{arch}.*" keys llama.cpp's converter writes for a llama / qwen2 / qwen3 config."""
    md: dict = {}

    def put(key, value, vtype):
        md[f"{arch}.{key}"] = (value, vtype, None)

    try:
        n_head, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
        put("block_count", int(config["num_hidden_layers"]), T.UINT32)
        if "max_position_embeddings" in config:
            put("context_length", int(config["max_position_embeddings"]), T.UINT32)
        put("embedding_length", hidden, T.UINT32)
        if "intermediate_size" in config:
            put("feed_forward_length", int(config["intermediate_size"]), T.UINT32)
        put("attention.head_count", n_head, T.UINT32)
        if config.get("num_key_value_heads") is not None:
            put("attention.head_count_kv", int(config["num_key_value_heads"]), T.UINT32)
        rope = _rope(config)
        if rope.get("rope_theta") is not None:
            put("rope.freq_base", float(rope["rope_theta"]), T.FLOAT32)
        if config.get("rms_norm_eps") is not None:
            put("attention.layer_norm_rms_epsilon", float(config["rms_norm_eps"]), T.FLOAT32)
        head_dim = int(config.get("head_dim") or hidden // n_head)
        if head_dim != hidden // n_head:
            put("attention.key_length", head_dim, T.UINT32)
            put("attention.value_length", head_dim, T.UINT32)
        if arch == "llama":
            put("vocab_size", int(config["vocab_size"]), T.UINT32)
            put("rope.dimension_count", head_dim, T.UINT32)
        kind = rope.get("rope_type", rope.get("type"))
        if kind == "linear" and "factor" in rope:
            put("rope.scaling.type", "linear", T.STRING)
            put("rope.scaling.factor", float(rope["factor"]), T.FLOAT32)
        elif kind == "yarn" and "factor" in rope:
            put("rope.scaling.type", "yarn", T.STRING)
            put("rope.scaling.factor", float(rope["factor"]), T.FLOAT32)
            put("rope.scaling.original_context_length", int(rope["original_max_position_embeddings"]), T.UINT32)
        elif kind not in (None, "default", "llama3"):
            raise PtiError(f"unsupported rope scaling type {kind!r}")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise PtiError(f"config.json: missing or bad hyper-parameter: {e}") from None
    return md


def llama3_rope_freqs(config: dict) -> np.ndarray | None:
    """Per-frequency rope factors for llama3-style scaling (llama.cpp stores them as rope_freqs.weight)."""
    rope = _rope(config)
    if rope.get("rope_type", rope.get("type")) != "llama3":
        return None
    n_head, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
    dim = int(config.get("head_dim") or hidden // n_head)
    base = float(rope.get("rope_theta", 10000.0))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    freqs = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:          # high frequencies: unchanged
            out.append(1.0)
        elif wavelen > old_ctx / low:         # low frequencies: scaled by the whole factor
            out.append(factor)
        else:                                 # in between: smooth blend
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# Pre-tokenizer -> llama.cpp's `tokenizer.ggml.pre` name.  llama.cpp's converter
# recognises a pre-tokenizer by hashing its output on a test text; here it is
# recognised by its structure in tokenizer.json, which is what that output depends on.
SPLIT_PATTERNS = {
    # Llama 3: digits in groups of up to three
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    # Qwen2 / Qwen2.5 / Qwen3: single digits
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
}


def _pre_steps(pre: dict | None) -> list[dict]:
    if not pre:
        return []
    return list(pre.get("pretokenizers") or []) if pre.get("type") == "Sequence" else [pre]


def pre_tokenizer_name(tokenizer: dict) -> str:
    steps = _pre_steps(tokenizer.get("pre_tokenizer"))
    kinds = [s.get("type") for s in steps]
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"        # SmolLM / SmolLM2: each digit alone, then GPT-2's split
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        if pattern in SPLIT_PATTERNS:
            return SPLIT_PATTERNS[pattern]
    raise PtiError(f"unrecognised BPE pre-tokenizer in tokenizer.json: {kinds}")


def _looks_special(text: str) -> bool:
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>")


def tokenizer_metadata(folder: Path, vocab_size: int) -> dict:
    """tokenizer.* keys for a BPE (GPT-2 style) tokenizer.json, as llama.cpp's converter writes them."""
    tok_path = folder / "tokenizer.json"
    tokenizer = read_json(tok_path, "tokenizer.json")
    model = tokenizer.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise PtiError(f"{tok_path}: unsupported tokenizer model {model.get('type')!r} (only BPE)")
    if model.get("byte_fallback"):
        raise PtiError(f"{tok_path}: SentencePiece-style BPE (byte fallback) is not supported")
    pre = pre_tokenizer_name(tokenizer)
    by_id: dict[int, str] = {}
    for text, i in model["vocab"].items():
        by_id[int(i)] = text
    added: dict[int, dict] = {}
    for t in tokenizer.get("added_tokens") or []:
        by_id[int(t["id"])] = t["content"]
        added[int(t["id"])] = t
    if by_id and max(by_id) >= vocab_size:
        raise PtiError(f"{tok_path}: token id {max(by_id)} is beyond the model's vocab_size {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(int(TokenType.UNUSED))
        elif i in added:
            tokens.append(by_id[i])
            special = added[i].get("special") or _looks_special(by_id[i])
            types.append(int(TokenType.CONTROL if special else TokenType.USER_DEFINED))
        else:
            tokens.append(by_id[i])
            types.append(int(TokenType.NORMAL))
    md = {
        "tokenizer.ggml.model": ("gpt2", T.STRING, None),
        "tokenizer.ggml.pre": (pre, T.STRING, None),
        "tokenizer.ggml.tokens": (tokens, T.ARRAY, T.STRING),
        "tokenizer.ggml.token_type": (types, T.ARRAY, T.INT32),
    }
    try:
        special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PtiError(f"{folder}: bad tokenizer files: {e}") from None
    if special.merges:
        md["tokenizer.ggml.merges"] = (list(special.merges), T.ARRAY, T.STRING)
    K = gguf.Keys.Tokenizer
    id_keys = {"bos": K.BOS_ID, "eos": K.EOS_ID, "unk": K.UNK_ID, "sep": K.SEP_ID, "pad": K.PAD_ID,
               "mask": K.MASK_ID, "eot": K.EOT_ID, "eom": K.EOM_ID}
    for typ, tid in special.special_token_ids.items():
        if typ in id_keys:
            md[id_keys[typ]] = (int(tid), T.UINT32, None)
    for typ, flag in special.add_special_token.items():
        if typ in ("bos", "eos", "sep"):
            md[f"tokenizer.ggml.add_{typ}_token"] = (bool(flag), T.BOOL, None)
    template = special.chat_template
    if isinstance(template, str):
        md["tokenizer.chat_template"] = (template, T.STRING, None)
    elif isinstance(template, list):
        for entry in template:
            name, text = entry.get("name"), entry.get("template")
            if isinstance(name, str) and isinstance(text, str):
                key = "tokenizer.chat_template" if name == "default" else f"tokenizer.chat_template.{name}"
                md[key] = (text, T.STRING, None)
    return md


# --- entry ---------------------------------------------------------------

def open_safetensors(path) -> Checkpoint:
    path = Path(path)
    folder, files = locate(path)
    config = read_json(folder / "config.json", "config.json")
    model_type = config.get("model_type")
    if model_type not in HF_ARCH:
        raise PtiError(f"{folder / 'config.json'}: unsupported architecture {model_type!r} "
                       f"(supported: {', '.join(sorted(HF_ARCH))})")
    arch = HF_ARCH[model_type]
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"):
        if not isinstance(config.get(key), int) or not 1 <= config[key] <= 1 << 24:
            raise PtiError(f"{folder / 'config.json'}: {key} missing or out of range: {config.get(key)!r}")
    name = config.get("_name_or_path") if isinstance(config.get("_name_or_path"), str) else ""
    metadata = {"general.name": (Path(name).name or folder.resolve().name, T.STRING, None)}
    metadata.update(arch_metadata(config, arch))
    metadata.update(tokenizer_metadata(folder, int(config["vocab_size"])))
    tensors = _tensors(files, arch, config)
    freqs = llama3_rope_freqs(config)
    if freqs is not None:
        tensors = {"rope_freqs.weight": ArrayTensor("rope_freqs.weight", freqs), **tensors}
    if "token_embd.weight" not in tensors:
        raise PtiError(f"{path}: no token embedding (model.embed_tokens.weight) found")
    return Checkpoint(path=path, kind="safetensors", arch=arch, metadata=metadata, tensors=tensors, files=files)
