"""Builders for the model tests: tiny random Hugging Face models packed into .ssq
files through the real `pti pack` path, and transformers models loaded with
exactly the weights an .ssq file holds (dequantised, Q/K rows back in Hugging
Face's order) as the independent reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pti_cli.sources.hf_names import hf_to_gguf_name, unpermute_qk

# Tiny shapes: every matrix's K is a multiple of 32 (Q8_0 blocks).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512)


def packed_hf_model(tmp_path: Path, arch: str, seed: int, tie: bool = False, **over) -> tuple[Path, Path]:
    """A random tiny `arch` model saved by transformers (safetensors + tokenizer) and
    packed with pti's pack; returns (hf folder, .ssq path)."""
    from pti_cli.pack import pack
    from source_helpers import make_hf_model
    folder = tmp_path / f"hf-{arch}-{seed}"
    make_hf_model(folder, arch, seed=seed, tie=tie, **{**TINY, **over})
    out = tmp_path / f"{arch}-{seed}.ssq"
    pack(folder, None, out)
    return folder, out


def hf_reference(ssq, config, twin: int = 0):
    """A transformers causal LM built from `config` holding the .ssq file's weights of
    `twin` (float32 dequantised; llama Q/K rows unpermuted back to half-split order)."""
    from transformers import AutoModelForCausalLM
    config._attn_implementation = "eager"
    with torch.device("meta"):          # no random init: every weight is assigned below
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    arch = ssq.arch
    n_layers = config.num_hidden_layers
    state = {}
    for hf_name, p in model.state_dict().items():
        name = hf_to_gguf_name(hf_name, arch, n_layers)
        if name == "output.weight" and name not in ssq.tensor_names:
            name = "token_embd.weight"          # tied embeddings
        w = ssq.dense(name, twin)
        if arch == "llama" and name.split(".")[-2] in ("attn_q", "attn_k"):
            heads = config.num_attention_heads if "attn_q" in name else config.num_key_value_heads
            w = unpermute_qk(w, heads)
        assert tuple(w.shape) == tuple(p.shape), (hf_name, w.shape, p.shape)
        state[hf_name] = torch.from_numpy(np.ascontiguousarray(w))
    model.load_state_dict(state, strict=True, assign=True)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config)   # its buffers were on meta
    return model.eval()


def hf_logits(model, tokens: list[int]) -> torch.Tensor:
    """Full-sequence logits [len(tokens), vocab] from transformers."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def assert_logits_close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-4) -> None:
    """Equal to float32 rounding: |got - want| <= rel * max|want| everywhere.

    Two float32 implementations of the same model differ only in summation order
    (BLAS blocking, attention, permuted head dims); through a few layers of dot
    products of length <= 1536 that is ~1e-6 of the logits' scale.  1e-4 leaves
    room for that and still fails on any real error (a wrong RoPE pairing, norm,
    bias or mask moves logits by a large fraction of their scale)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(want.abs().max())
    err = float((got - want).abs().max())
    assert err <= rel * scale, f"max |diff| {err:.3g} > {rel:g} x logit scale {scale:.3g}"


def packed_default_model(tmp_path_factory, smollm2_gguf) -> Path:
    """The default model (SmolLM2) packed with pti's pack, once per test session."""
    from pti_cli.pack import pack
    out = tmp_path_factory.getbasetemp() / "smollm2-default.ssq"
    if not out.exists():
        pack(Path(smollm2_gguf), None, out)
    return out


_DEFAULT_MODELS: dict = {}


def default_model(tmp_path_factory, smollm2_gguf):
    """(SSQFile, Model on the torch backend) of the packed default model, loaded once per session
    (tests only run forwards on their own KV caches, so sharing it is safe)."""
    from pti_cli.backends.torch_ref import TorchRefBackend
    from pti_cli.model import Model
    from pti_cli.ssq.read import SSQFile
    path = packed_default_model(tmp_path_factory, smollm2_gguf)
    if path not in _DEFAULT_MODELS:
        ssq = SSQFile(path)
        _DEFAULT_MODELS[path] = (ssq, Model(ssq, TorchRefBackend()))
    return _DEFAULT_MODELS[path]


def llama_config_from_gguf_keys(md: dict, vocab: int):
    """A transformers LlamaConfig from the GGUF keys themselves (not through pti's ModelConfig)."""
    from transformers import LlamaConfig
    a = "llama."
    return LlamaConfig(
        vocab_size=vocab, hidden_size=md[a + "embedding_length"], intermediate_size=md[a + "feed_forward_length"],
        num_hidden_layers=md[a + "block_count"], num_attention_heads=md[a + "attention.head_count"],
        num_key_value_heads=md[a + "attention.head_count_kv"], rms_norm_eps=md[a + "attention.layer_norm_rms_epsilon"],
        rope_theta=md[a + "rope.freq_base"], max_position_embeddings=md[a + "context_length"],
        tie_word_embeddings=True)


class ArraySSQ:
    """Just enough of SSQFile for a backend's load_matrix: identical twins, given float32 matrices."""
    identical = True

    def __init__(self, mats: dict[str, np.ndarray]):
        self.mats = mats

    def dense(self, name: str, twin: int) -> np.ndarray:
        return self.mats[name]
