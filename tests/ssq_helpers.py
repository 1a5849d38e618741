"""Builders of small GGUF checkpoints (written with gguf.GGUFWriter) for the SSQ tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

VOCAB = [f"t{i}" for i in range(96)]


def llama_tensor_shapes(hidden: int = 64, ffn: int = 96, layers: int = 2, vocab: int = len(VOCAB),
                        kv_dim: int = 32, tied: bool = False) -> dict[str, tuple[int, ...]]:
    """A llama tensor set in llama.cpp's names; numpy shapes (rows, K) / (n,)."""
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, hidden)}
    for i in range(layers):
        b = f"blk.{i}."
        shapes.update({
            b + "attn_norm.weight": (hidden,),
            b + "attn_q.weight": (hidden, hidden),
            b + "attn_k.weight": (kv_dim, hidden),
            b + "attn_v.weight": (kv_dim, hidden),
            b + "attn_output.weight": (hidden, hidden),
            b + "ffn_norm.weight": (hidden,),
            b + "ffn_gate.weight": (ffn, hidden),
            b + "ffn_up.weight": (ffn, hidden),
            b + "ffn_down.weight": (hidden, ffn),
        })
    shapes["output_norm.weight"] = (hidden,)
    if not tied:
        shapes["output.weight"] = (vocab, hidden)
    return shapes


def random_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32)
        if len(shape) == 2:   # per-row scales spread over decades, as trained weights
            x *= np.exp(rng.uniform(-4, 1, (shape[0], 1))).astype(np.float32)
        out[name] = x
    return out


def write_gguf(path: Path, weights: dict[str, np.ndarray], qtype: T = T.Q8_0, arch: str = "llama",
               name: str = "tiny", extra_kv: dict | None = None) -> Path:
    """A GGUF checkpoint: matrices stored as qtype (F32/F16/BF16/Q*), vectors as F32,
    with the hyper-parameter and tokenizer keys a llama GGUF carries."""
    w = gguf.GGUFWriter(path, arch)
    hidden = weights["token_embd.weight"].shape[1]
    layers = sum(1 for n in weights if n.endswith("attn_norm.weight"))
    w.add_name(name)
    w.add_uint32(f"{arch}.block_count", layers)
    w.add_uint32(f"{arch}.context_length", 256)
    w.add_uint32(f"{arch}.embedding_length", hidden)
    w.add_uint32(f"{arch}.feed_forward_length", weights["blk.0.ffn_up.weight"].shape[0])
    w.add_uint32(f"{arch}.attention.head_count", 4)
    w.add_uint32(f"{arch}.attention.head_count_kv", 2)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", VOCAB[:weights["token_embd.weight"].shape[0]])
    w.add_array("tokenizer.ggml.token_type", [1] * weights["token_embd.weight"].shape[0])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    for key, value in (extra_kv or {}).items():
        w.add_key_value(key, *value)
    for tname, x in weights.items():
        if x.ndim == 1 or qtype == T.F32:
            w.add_tensor(tname, x.astype(np.float32))
        elif qtype == T.F16:
            w.add_tensor(tname, x.astype(np.float16))
        else:
            w.add_tensor(tname, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def tiny_llama(path: Path, seed: int, qtype: T = T.Q8_0, tied: bool = False, **shape_kw) -> dict[str, np.ndarray]:
    """Write a tiny random llama GGUF; return its float32 weights (before quantisation)."""
    weights = random_weights(llama_tensor_shapes(tied=tied, **shape_kw), seed)
    write_gguf(path, weights, qtype)
    return weights


def gguf_tensor_q8_bytes(path: Path, name: str) -> np.ndarray:
    """The raw Q8_0 bytes of one tensor as gguf-py reads them: uint8 [rows, nb*34]."""
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    assert t.tensor_type == T.Q8_0
    return np.array(t.data)


def gguf_tensor_f32(path: Path, name: str) -> np.ndarray:
    """A tensor dequantised by gguf-py, float32 in numpy shape."""
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)


def write_big_gguf(path: Path, rows: int, k: int, seed: int = 0) -> Path:
    """A llama GGUF whose blk.0.ffn_up.weight is an F32 [rows, k] tensor (rows*k*4 bytes),
    written without holding it in memory."""
    rng = np.random.default_rng(seed)
    hidden = k
    small = {"token_embd.weight": rng.standard_normal((len(VOCAB), hidden)).astype(np.float32),
             "blk.0.attn_norm.weight": np.ones(hidden, np.float32),
             "output_norm.weight": np.ones(hidden, np.float32)}
    w = gguf.GGUFWriter(path, "llama")
    for key, val in (("block_count", 1), ("context_length", 256), ("embedding_length", hidden),
                     ("feed_forward_length", rows), ("attention.head_count", 4), ("attention.head_count_kv", 4)):
        w.add_uint32(f"llama.{key}", val)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", VOCAB)
    for name, x in small.items():
        w.add_tensor_info(name, x.shape, x.dtype, x.nbytes)
    w.add_tensor_info("blk.0.ffn_up.weight", (rows, k), np.dtype(np.float32), rows * k * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    w.write_padding(f, f.tell())
    for x in small.values():
        f.write(x.tobytes())
        w.write_padding(f, x.nbytes)
    # the first 16 MiB random, the rest a sparse hole of zeros: a real 1 GiB tensor
    # to every reader, without spending seconds writing it
    end = f.tell() + rows * k * 4
    chunk_rows = min(rows, max(1, (16 << 20) // (k * 4)))
    f.write(rng.standard_normal((chunk_rows, k)).astype(np.float32).tobytes())
    f.flush()
    f.truncate(end)
    w.close()
    return Path(path)
