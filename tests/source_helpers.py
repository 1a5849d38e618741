"""Builders for tiny checkpoints: a BPE tokenizer, Hugging Face folders (transformers,
random init), and small GGUF files written with gguf-py's GGUFWriter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
TEXT = ("The quick brown fox jumps over the lazy dog. 12345 apples and 678 pears.\n"
        "Twins share one read of memory; the draft is checked by the verifier.\n") * 20


def make_tokenizer(folder: Path, pre: str = "gpt-2", vocab: int = 300) -> int:
    """Train a small byte-level BPE tokenizer into folder; returns its vocabulary size.

    pre: "gpt-2" (ByteLevel), "smollm" (Digits + ByteLevel) or "llama-bpe" (Llama 3 Split + ByteLevel).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from pti_cli.sources.safetensors_source import SPLIT_PATTERNS
    tok = Tokenizer(models.BPE())
    if pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
    else:
        pattern = next(p for p, name in SPLIT_PATTERNS.items() if name == pre)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE}))
    return tok.get_vocab_size()


def hf_config(arch: str, vocab_size: int, tie: bool = False, **over):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[arch]
    kw = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    kw.update(over)
    return cls(**kw)


def make_hf_model(folder: Path, arch: str = "llama", seed: int = 0, tie: bool = False,
                  shard_size: str | None = None, pre: str = "gpt-2", extra_vocab: int = 4, **over) -> dict:
    """A random tiny model saved with save_pretrained (safetensors) plus a tokenizer.

    Returns the state dict as float32 numpy arrays (Hugging Face names and row order).
    """
    import torch
    from transformers import AutoModelForCausalLM
    n_tok = make_tokenizer(folder, pre)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(arch, n_tok + extra_vocab, tie, **over))
    with torch.no_grad():          # norms are ones at init: make them distinct so order errors show
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p))
    kw = {"max_shard_size": shard_size} if shard_size else {}
    model.save_pretrained(folder, **kw)
    return {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}


# --- GGUF ----------------------------------------------------------------

def gguf_tokenizer_keys(w: gguf.GGUFWriter, n_vocab: int, prefix: str = "t") -> None:
    tokens = SPECIALS + [f"{prefix}{i}" for i in range(n_vocab - len(SPECIALS))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (n_vocab - len(SPECIALS)))
    w.add_token_merges(["t 1", "t 2"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)


def make_gguf(path: Path, arch: str = "llama", n_vocab: int = 40, hidden: int = 64, seed: int = 0,
              types: dict | None = None, n_head: int = 4, extra_kv: dict | None = None,
              shape_over: dict | None = None, token_prefix: str = "t") -> dict:
    """A one-block GGUF with the given tensor types; returns {name: float32 reference}.

    types maps tensor name -> storage type (defaults below); the reference is what
    gguf.quants.dequantize gives back for the stored bytes.
    """
    rng = np.random.default_rng(seed)
    ff = 2 * hidden
    shapes = {
        "token_embd.weight": (n_vocab, hidden),
        "blk.0.attn_norm.weight": (hidden,),
        "blk.0.attn_q.weight": (hidden, hidden),
        "blk.0.attn_k.weight": (hidden // 2, hidden),
        "blk.0.attn_v.weight": (hidden // 2, hidden),
        "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.ffn_norm.weight": (hidden,),
        "blk.0.ffn_gate.weight": (ff, hidden),
        "blk.0.ffn_up.weight": (ff, hidden),
        "blk.0.ffn_down.weight": (hidden, ff),
        "output_norm.weight": (hidden,),
    }
    default = {"token_embd.weight": Q.Q8_0, "blk.0.attn_q.weight": Q.F16, "blk.0.attn_k.weight": Q.Q4_0,
               "blk.0.attn_v.weight": Q.Q8_0, "blk.0.ffn_down.weight": Q.BF16}
    default.update(types or {})
    shapes.update(shape_over or {})
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny test model")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head // 2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    for key, (val, vtype) in (extra_kv or {}).items():
        w.add_key_value(key, val, vtype)
    gguf_tokenizer_keys(w, n_vocab, token_prefix)
    ref = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape).astype(np.float32)
        qtype = Q.F32 if len(shape) == 1 else default.get(name, Q.F32)
        if qtype in (Q.I8, Q.I16, Q.I32, Q.I64, Q.F64):   # storage types pti does not read
            data = x.astype({Q.I8: np.int8, Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64, Q.F64: np.float64}[qtype])
            w.add_tensor(name, data)
            continue
        if qtype == Q.F32:
            data = x
        elif qtype == Q.F16:
            data = x.astype(np.float16)
        elif qtype in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K):
            # gguf-py cannot quantise K-quants: random bytes (what they decode to is the reference)
            data = rng.integers(0, 0x7c, gguf.quants.quant_shape_to_byte_shape(shape, qtype), dtype=np.uint8)
        else:
            data = gguf.quants.quantize(x, qtype)
        w.add_tensor(name, data, raw_dtype=qtype if qtype not in (Q.F32, Q.F16) else None)
        ref[name] = np.asarray(gguf.quants.dequantize(data, qtype), np.float32).reshape(shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ref


def field_offset(path: Path, key: str, part: int) -> int:
    """File offset of part `part` of a GGUF key/value field or tensor-info field (gguf-py's parts)."""
    reader = gguf.GGUFReader(path)
    field = reader.fields.get(key) or next(t.field for t in reader.tensors if t.name == key)
    return field.offset + sum(int(p.nbytes) for p in field.parts[:part])


def kv_index(path: Path, key: str) -> int:
    """Position of a key among the file's key/value pairs (GGUF.* pseudo-fields excluded)."""
    keys = [k for k in gguf.GGUFReader(path).fields if not k.startswith("GGUF.")]
    return keys.index(key)


def trim_gguf(src: Path, dst: Path, n_blocks: int = 1) -> None:
    """Copy a llama GGUF keeping only its first n_blocks blocks (raw tensor bytes, all metadata)."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        value = n_blocks if key == f"{arch}.block_count" else field.contents()
        sub = field.types[1] if vtype == V.ARRAY else None
        w.add_key_value(key, value, vtype, sub)
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk" and int(parts[1]) >= n_blocks:
            continue
        raw = Q(t.tensor_type)
        w.add_tensor(t.name, np.array(t.data), raw_shape=t.data.shape,
                     raw_dtype=raw if raw not in (Q.F32, Q.F16) else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
