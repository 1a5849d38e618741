"""ModelConfig: the hyper-parameters of a llama / qwen2 / qwen3 model, read from
the GGUF metadata an .ssq file carries (keys `{arch}.*`, as llama.cpp writes them)
and from which tensors exist (biases, q/k norms, output matrix)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import PtiError

ARCHS = ("llama", "qwen2", "qwen3")


@dataclass
class ModelConfig:
    arch: str
    n_layers: int
    hidden: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    context_length: int
    rms_eps: float
    rope_theta: float
    rope_neox: bool            # qwen: half-split pairs; llama GGUF (Q/K rows permuted): adjacent pairs
    rope_linear_factor: float = 1.0   # linear rope scaling: positions are divided by it
    rope_freq_factors: bool = False   # llama3 scaling: tensor `rope_freqs.weight` divides each frequency
    tied_embeddings: bool = False     # no output.weight: the token embedding is the output matrix
    qkv_bias: bool = False            # qwen2
    qk_norm: bool = False             # qwen3

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @classmethod
    def from_ssq(cls, ssq: Any) -> "ModelConfig":
        return cls.from_metadata(ssq.metadata, {n: ssq.logical_shape(n) for n in ssq.tensor_names})

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> "ModelConfig":
        """meta: GGUF key -> value; shapes: tensor name -> logical shape (rows, K) / (n,)."""
        arch = meta.get("general.architecture")
        if arch not in ARCHS:
            raise PtiError(f"unsupported architecture: {arch} (pti runs {', '.join(ARCHS)})")

        def key(name: str, default: Any = None, kind: type = int) -> Any:
            value = meta.get(f"{arch}.{name}", default)
            if value is None:
                raise PtiError(f"model metadata lacks {arch}.{name}")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise PtiError(f"model metadata {arch}.{name} must be one integer, got {value!r}")
            if kind is float and not isinstance(value, (int, float)):
                raise PtiError(f"model metadata {arch}.{name} must be a number, got {value!r}")
            return kind(value)

        if "token_embd.weight" not in shapes:
            raise PtiError("model has no token_embd.weight tensor")
        hidden = key("embedding_length")
        n_heads = key("attention.head_count")
        head_dim = key("attention.key_length", hidden // max(n_heads, 1))
        if key("attention.value_length", head_dim) != head_dim:
            raise PtiError("models whose value heads differ in size from key heads are not supported")
        if key("rope.dimension_count", head_dim) != head_dim:
            raise PtiError("partial rotary embeddings (rope.dimension_count != head size) are not supported")
        vocab = shapes["token_embd.weight"][0]
        cfg = cls(
            arch=arch, n_layers=key("block_count"), hidden=hidden, ffn=key("feed_forward_length"),
            n_heads=n_heads, n_kv_heads=key("attention.head_count_kv", n_heads), head_dim=head_dim,
            vocab=vocab, context_length=key("context_length"),
            rms_eps=key("attention.layer_norm_rms_epsilon", kind=float),
            rope_theta=key("rope.freq_base", 10000.0, float), rope_neox=arch != "llama",
            rope_freq_factors="rope_freqs.weight" in shapes,
            tied_embeddings="output.weight" not in shapes,
            qkv_bias="blk.0.attn_q.bias" in shapes, qk_norm="blk.0.attn_q_norm.weight" in shapes)
        scaling = meta.get(f"{arch}.rope.scaling.type", "none")
        if scaling == "linear":
            cfg.rope_linear_factor = key("rope.scaling.factor", kind=float)
        elif scaling not in ("none", ""):
            # yarn / longrope change every position's rotation; running without them would be wrong
            raise PtiError(f"rope scaling type {scaling!r} is not supported (pti runs none, linear, llama3)")
        cfg.check(shapes)
        return cfg

    def check(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Every tensor the forward needs exists with the shape the numbers imply."""
        if min(self.n_layers, self.hidden, self.ffn, self.n_heads, self.n_kv_heads, self.head_dim,
               self.context_length) < 1:
            raise PtiError("model metadata has a zero or negative size")
        if self.n_heads % self.n_kv_heads:
            raise PtiError(f"{self.n_heads} query heads are not a multiple of {self.n_kv_heads} KV heads")
        if self.head_dim % 2:
            raise PtiError(f"head size {self.head_dim} is odd; rotary embeddings need pairs")
        h, q, kv, f = self.hidden, self.q_dim, self.kv_dim, self.ffn
        want = {"token_embd.weight": (self.vocab, h), "output_norm.weight": (h,)}
        if not self.tied_embeddings:
            want["output.weight"] = (self.vocab, h)
        if self.rope_freq_factors:
            want["rope_freqs.weight"] = (self.head_dim // 2,)
        for i in range(self.n_layers):
            b = f"blk.{i}."
            want.update({b + "attn_norm.weight": (h,), b + "attn_q.weight": (q, h), b + "attn_k.weight": (kv, h),
                         b + "attn_v.weight": (kv, h), b + "attn_output.weight": (h, q),
                         b + "ffn_norm.weight": (h,), b + "ffn_gate.weight": (f, h), b + "ffn_up.weight": (f, h),
                         b + "ffn_down.weight": (h, f)})
            if self.qkv_bias:
                want.update({b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)})
            if self.qk_norm:
                want.update({b + "attn_q_norm.weight": (self.head_dim,), b + "attn_k_norm.weight": (self.head_dim,)})
        for name, shape in want.items():
            got = shapes.get(name)
            if got is None:
                raise PtiError(f"{self.arch} model lacks tensor {name}")
            if tuple(got) != shape:
                raise PtiError(f"tensor {name} has shape {tuple(got)}, expected {shape}")
