"""Checkpoint sources: GGUF and safetensors inputs seen through GGUF names and row order."""

from __future__ import annotations

import json

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

from pti_cli.errors import PtiError
from pti_cli.sources.checkpoint import check_twins, open_checkpoint
from pti_cli.sources.hf_names import permute_qk, unpermute_qk
from pti_cli.sources.safetensors_source import pre_tokenizer_name

from source_helpers import make_gguf, make_hf_model, make_tokenizer


# --- GGUF ----------------------------------------------------------------

def test_gguf_rows_match_dequantised_reference(tmp_path):
    path = tmp_path / "m.gguf"
    ref = make_gguf(path, seed=7, types={"blk.0.ffn_up.weight": Q.Q5_1, "blk.0.ffn_gate.weight": Q.Q4_1,
                                         "blk.0.attn_output.weight": Q.Q5_0})
    ck = open_checkpoint(path)
    assert ck.kind == "gguf" and ck.arch == "llama"
    assert list(ck.tensors) == list(ref)
    rng = np.random.default_rng(1)
    for name, src in ck.tensors.items():
        assert src.shape == ref[name].shape
        n = src.shape[0]
        cuts = sorted({0, n, *rng.integers(0, n, 3).tolist()})
        parts = [src.f32_rows(a, b) for a, b in zip(cuts, cuts[1:])]
        got = np.concatenate(parts) if len(parts) > 1 else parts[0]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref[name], err_msg=name)


def test_gguf_k_quants(tmp_path):
    path = tmp_path / "k.gguf"
    ref = make_gguf(path, hidden=256, types={"blk.0.ffn_up.weight": Q.Q4_K, "blk.0.ffn_gate.weight": Q.Q6_K,
                                             "blk.0.ffn_down.weight": Q.Q5_K, "blk.0.attn_q.weight": Q.Q3_K,
                                             "blk.0.attn_output.weight": Q.Q2_K})
    ck = open_checkpoint(path)
    for name in ("blk.0.ffn_up.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight",
                 "blk.0.attn_q.weight", "blk.0.attn_output.weight"):
        src = ck.tensors[name]
        np.testing.assert_array_equal(np.concatenate([src.f32_rows(0, 3), src.f32_rows(3, src.shape[0])]), ref[name])


def test_gguf_q8_rows_are_the_stored_bits(tmp_path):
    path = tmp_path / "m.gguf"
    make_gguf(path, seed=3)
    ck = open_checkpoint(path)
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        src = ck.tensors[t.name]
        got = src.q8_rows(2, 9)
        if t.tensor_type != Q.Q8_0:
            assert got is None and src.q8_raw_rows(2, 9) is None
            continue
        raw = np.array(t.data[2:9]).reshape(7, -1, 34)
        q, d = got
        assert q.dtype == np.int8 and d.dtype == np.float16
        assert q.shape == (7, src.shape[1]) and d.shape == (7, src.shape[1] // 32)
        assert np.array_equal(d.view(np.uint8).reshape(7, -1, 2), raw[:, :, :2])
        assert np.array_equal(q.view(np.uint8).reshape(7, -1, 32), raw[:, :, 2:])
        assert np.array_equal(src.q8_raw_rows(2, 9), raw.reshape(7, -1))
        # and the bits decode to what gguf-py decodes
        np.testing.assert_array_equal(q.reshape(7, -1, 32) * d.astype(np.float32)[:, :, None],
                                      src.f32_rows(2, 9).reshape(7, -1, 32))


def test_gguf_metadata_keeps_values_and_types(tmp_path):
    path = tmp_path / "m.gguf"
    make_gguf(path, extra_kv={"llama.rope.scaling.factor": (2.5, V.FLOAT32)})
    ck = open_checkpoint(path)
    reader = gguf.GGUFReader(path)
    wanted = [k for k in reader.fields if k.startswith(("llama.", "tokenizer.")) or k == "general.name"]
    assert sorted(ck.metadata) == sorted(wanted)
    assert "general.architecture" not in ck.metadata
    for key in wanted:
        f = reader.fields[key]
        value, vtype, sub = ck.metadata[key]
        assert vtype == f.types[0]
        if vtype == V.ARRAY:
            assert sub == f.types[1] and value == list(f.contents())
        else:
            assert sub is None and value == f.contents()
    assert ck.metadata["tokenizer.ggml.tokens"][0][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert ck.metadata["llama.rope.scaling.factor"] == (2.5, V.FLOAT32, None)


def test_default_model_opens(smollm2_gguf):
    ck = open_checkpoint(smollm2_gguf)
    assert ck.arch == "llama" and len(ck.tensors) == 272
    assert ck.metadata["tokenizer.ggml.pre"][0] == "smollm"
    emb = ck.tensors["token_embd.weight"]
    assert emb.shape == (49152, 576) and emb.ggml_type == Q.Q8_0
    q = ck.tensors["blk.0.attn_q.weight"]
    assert q.shape == (576, 576) and q.f32_rows(100, 104).shape == (4, 576)


# --- llama Q/K order -----------------------------------------------------

def test_permute_formula_by_hand():
    rows = np.arange(8)
    # one head of 8 rows: first half paired with second half, interleaved
    assert permute_qk(rows, 1).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    # two heads of 4 rows each, permuted within each head
    assert permute_qk(rows, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    m = np.arange(16).reshape(8, 2)
    assert permute_qk(m, 2)[:, 0].tolist() == [0, 4, 2, 6, 8, 12, 10, 14]
    assert unpermute_qk(permute_qk(m, 2), 2).tolist() == m.tolist()


def _rope_half_split(x, pos, base):
    """Hugging Face's rotation: element i pairs with i + d/2."""
    d = x.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(theta), np.sin(theta)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def _rope_adjacent(x, pos, base):
    """llama.cpp's normal rotation: element 2i pairs with 2i + 1."""
    d = x.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(theta), np.sin(theta)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    sd = make_hf_model(folder, "llama", seed=11)
    return folder, sd


def test_llama_qk_rows_in_llama_cpp_order(tiny_llama):
    folder, sd = tiny_llama
    ck = open_checkpoint(folder)
    n_head, n_kv, hd = 4, 2, 16
    for layer in range(2):
        for proj, heads in (("q", n_head), ("k", n_kv)):
            hf = sd[f"model.layers.{layer}.self_attn.{proj}_proj.weight"]
            src = ck.tensors[f"blk.{layer}.attn_{proj}.weight"]
            full = src.f32_rows(0, src.shape[0])
            # undoing the permutation gives Hugging Face's rows back, and it is not the identity
            np.testing.assert_array_equal(unpermute_qk(full, heads), hf)
            assert not np.array_equal(full, hf)
            # row chunks that cut through heads give the same rows
            for a, b in ((0, 5), (5, 21), (21, src.shape[0]), (3, 4)):
                np.testing.assert_array_equal(src.f32_rows(a, b), full[a:b])
            # llama.cpp's adjacent-pair rotation on our rows == Hugging Face's half-split rotation
            x = np.random.default_rng(layer).standard_normal(64).astype(np.float32)
            ours = (full @ x).reshape(heads, hd)
            theirs = (hf @ x).reshape(heads, hd)
            for pos in (0, 3, 17):
                rot_ours = _rope_adjacent(ours, pos, 10000.0)
                rot_hf = _rope_half_split(theirs, pos, 10000.0)
                np.testing.assert_allclose(unpermute_qk(rot_ours.reshape(-1), heads), rot_hf.reshape(-1),
                                           rtol=1e-5, atol=1e-5)
        v = ck.tensors[f"blk.{layer}.attn_v.weight"]
        np.testing.assert_array_equal(v.f32_rows(0, v.shape[0]),
                                      sd[f"model.layers.{layer}.self_attn.v_proj.weight"])


def test_llama_names_and_metadata(tiny_llama):
    folder, sd = tiny_llama
    ck = open_checkpoint(folder)
    assert ck.kind == "safetensors" and ck.arch == "llama"
    names = set(ck.tensors)
    assert {"token_embd.weight", "output_norm.weight", "output.weight", "blk.1.ffn_down.weight",
            "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"} <= names
    assert len(names) == len(sd)
    np.testing.assert_array_equal(ck.tensors["output.weight"].f32_rows(0, 7), sd["lm_head.weight"][:7])
    np.testing.assert_array_equal(ck.tensors["blk.1.ffn_norm.weight"].f32_rows(0, 64),
                                  sd["model.layers.1.post_attention_layernorm.weight"])
    md = {k: v[0] for k, v in ck.metadata.items()}
    types = {k: v[1] for k, v in ck.metadata.items()}
    assert md["llama.block_count"] == 2 and md["llama.embedding_length"] == 64
    assert md["llama.feed_forward_length"] == 96 and md["llama.context_length"] == 256
    assert md["llama.attention.head_count"] == 4 and md["llama.attention.head_count_kv"] == 2
    assert md["llama.rope.dimension_count"] == 16 and md["llama.vocab_size"] == ck.tensors["token_embd.weight"].shape[0]
    assert md["llama.rope.freq_base"] == 10000.0 and types["llama.rope.freq_base"] == V.FLOAT32
    assert "llama.attention.key_length" not in md      # head_dim is hidden / heads
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "gpt-2"
    assert md["tokenizer.ggml.bos_token_id"] == 1 and md["tokenizer.ggml.eos_token_id"] == 2
    assert md["tokenizer.ggml.padding_token_id"] == 2 and md["tokenizer.ggml.add_bos_token"] is False
    assert "<|im_start|>" in md["tokenizer.chat_template"]
    # the vocabulary is the tokenizer's, padded to vocab_size as llama.cpp pads it
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    tokens, ttypes = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    assert len(tokens) == md["llama.vocab_size"] == len(vocab) + 4
    for text, i in vocab.items():
        assert tokens[i] == text
    assert tokens[-1] == f"[PAD{len(tokens) - 1}]" and ttypes[-1] == gguf.TokenType.UNUSED
    assert ttypes[:3] == [gguf.TokenType.CONTROL] * 3 and ttypes[10] == gguf.TokenType.NORMAL
    merges = tok["model"]["merges"]
    assert md["tokenizer.ggml.merges"] == [m if isinstance(m, str) else " ".join(m) for m in merges]


def test_tied_embeddings_have_no_output(tmp_path):
    sd = make_hf_model(tmp_path, "llama", tie=True)
    ck = open_checkpoint(tmp_path)
    assert "output.weight" not in ck.tensors
    np.testing.assert_array_equal(ck.tensors["token_embd.weight"].f32_rows(0, 5), sd["model.embed_tokens.weight"][:5])


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_is_not_permuted(tmp_path, arch):
    over = {"head_dim": 32} if arch == "qwen3" else {}
    sd = make_hf_model(tmp_path, arch, seed=5, **over)
    ck = open_checkpoint(tmp_path)
    assert ck.arch == arch
    for proj in "qkv":
        hf = sd[f"model.layers.0.self_attn.{proj}_proj.weight"]
        np.testing.assert_array_equal(ck.tensors[f"blk.0.attn_{proj}.weight"].f32_rows(0, hf.shape[0]), hf)
    if arch == "qwen2":
        b = sd["model.layers.1.self_attn.q_proj.bias"]
        np.testing.assert_array_equal(ck.tensors["blk.1.attn_q.bias"].f32_rows(0, b.shape[0]), b)
        assert f"{arch}.attention.key_length" not in ck.metadata
    else:
        n = sd["model.layers.0.self_attn.q_norm.weight"]
        np.testing.assert_array_equal(ck.tensors["blk.0.attn_q_norm.weight"].f32_rows(0, n.shape[0]), n)
        assert ck.metadata["qwen3.attention.key_length"] == (32, V.UINT32, None)
        assert ck.metadata["qwen3.attention.value_length"] == (32, V.UINT32, None)
    assert f"{arch}.rope.dimension_count" not in ck.metadata


def test_sharded_index_equals_single_file(tmp_path):
    single, sharded = tmp_path / "one", tmp_path / "many"
    make_hf_model(single, "llama", seed=2)
    make_hf_model(sharded, "llama", seed=2, shard_size="20KB")
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 2 and (sharded / "model.safetensors.index.json").is_file()
    a, b = open_checkpoint(single), open_checkpoint(sharded)
    assert len(b.files) == len(shards)
    assert set(a.tensors) == set(b.tensors)
    for name, src in a.tensors.items():
        n = src.shape[0]
        np.testing.assert_array_equal(src.f32_rows(0, n), b.tensors[name].f32_rows(0, n), err_msg=name)
    check_twins(a, b)
    # every shard's bytes are in the hash
    before = b.sha256
    last = sharded / shards[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 1
    last.write_bytes(bytes(data))
    assert open_checkpoint(sharded).sha256 != before


def test_bare_safetensors_file_with_config(tmp_path):
    sd = make_hf_model(tmp_path, "llama", seed=4)
    ck = open_checkpoint(tmp_path / "model.safetensors")
    assert ck.path.name == "model.safetensors" and ck.kind == "safetensors"
    np.testing.assert_array_equal(ck.tensors["blk.0.ffn_up.weight"].f32_rows(0, 96), sd["model.layers.0.mlp.up_proj.weight"])


@pytest.mark.parametrize("pre", ["gpt-2", "smollm", "llama-bpe", "qwen2"])
def test_pre_tokenizer_names(tmp_path, pre):
    make_tokenizer(tmp_path, pre)
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    assert pre_tokenizer_name(tok) == pre


def test_unknown_pre_tokenizer_is_an_error():
    tok = {"pre_tokenizer": {"type": "Whitespace"}}
    with pytest.raises(PtiError, match="pre-tokenizer"):
        pre_tokenizer_name(tok)


# --- twins ---------------------------------------------------------------

def test_check_twins_accepts_same_shape_different_weights(tmp_path):
    make_gguf(tmp_path / "a.gguf", seed=1)
    make_gguf(tmp_path / "b.gguf", seed=2, types={"blk.0.attn_q.weight": Q.Q8_0})
    a, b = open_checkpoint(tmp_path / "a.gguf"), open_checkpoint(tmp_path / "b.gguf")
    check_twins(a, b)
    assert a.sha256 != b.sha256


def test_check_twins_names_the_difference(tmp_path):
    make_gguf(tmp_path / "a.gguf")
    base = open_checkpoint(tmp_path / "a.gguf")
    make_gguf(tmp_path / "q.gguf", arch="qwen2")
    with pytest.raises(PtiError, match="architecture: llama vs qwen2"):
        check_twins(base, open_checkpoint(tmp_path / "q.gguf"))
    make_gguf(tmp_path / "h.gguf", n_head=8)
    with pytest.raises(PtiError, match="llama.attention.head_count: 4 vs 8"):
        check_twins(base, open_checkpoint(tmp_path / "h.gguf"))
    make_gguf(tmp_path / "r.gguf", extra_kv={"llama.rope.scaling.factor": (2.0, V.FLOAT32)})
    with pytest.raises(PtiError, match="llama.rope.scaling.factor: missing in twin A"):
        check_twins(base, open_checkpoint(tmp_path / "r.gguf"))
    other = open_checkpoint(tmp_path / "a.gguf")
    tokens = list(other.metadata["tokenizer.ggml.tokens"][0])
    tokens[7] = "changed"
    other.metadata["tokenizer.ggml.tokens"] = (tokens, V.ARRAY, V.STRING)
    with pytest.raises(PtiError, match="tokenizer.ggml.tokens: entry 7: 't4' vs 'changed'"):
        check_twins(base, other)
    other = open_checkpoint(tmp_path / "a.gguf")
    other.metadata["tokenizer.ggml.eos_token_id"] = (0, V.UINT32, None)
    with pytest.raises(PtiError, match="eos_token_id: 2 vs 0"):
        check_twins(base, other)
    other = open_checkpoint(tmp_path / "a.gguf")
    other.tensors["blk.0.ffn_up.weight"].shape = (128, 32)
    with pytest.raises(PtiError, match=r"blk.0.ffn_up.weight shape: \(128, 64\) vs \(128, 32\)"):
        check_twins(base, other)
    other = open_checkpoint(tmp_path / "a.gguf")
    del other.tensors["output_norm.weight"]
    with pytest.raises(PtiError, match="output_norm.weight is missing in twin B"):
        check_twins(base, other)


def test_llama_order_round_trips_through_transformers(smollm2_gguf, tmp_path):
    """The real SmolLM2 GGUF (written by llama.cpp's converter): transformers turns its Q/K rows
    back to Hugging Face's order; our safetensors source must give llama.cpp's rows again, bit for bit."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from source_helpers import trim_gguf
    small = tmp_path / "gguf" / "small.gguf"
    small.parent.mkdir()
    trim_gguf(smollm2_gguf, small, n_blocks=2)
    config = AutoConfig.from_pretrained(small.parent, gguf_file=small.name)
    model = AutoModelForCausalLM.from_config(config)
    state = load_gguf_checkpoint(str(small), return_tensors=True, model_to_load=model)["tensors"]
    hf = tmp_path / "hf"
    hf.mkdir()
    config.save_pretrained(hf)
    save_file({k: v.contiguous() for k, v in state.items()}, hf / "model.safetensors")
    make_tokenizer(hf)        # any tokenizer: only the weights are compared here
    a, b = open_checkpoint(small), open_checkpoint(hf)
    assert set(a.tensors) == set(b.tensors) and len(a.tensors) == 2 * 9 + 2
    for name, src in a.tensors.items():
        n = src.shape[0]
        np.testing.assert_array_equal(b.tensors[name].f32_rows(0, n), src.f32_rows(0, n), err_msg=name)
    # and transformers really holds different (Hugging Face order) rows for Q and K
    q = state["model.layers.0.self_attn.q_proj.weight"].numpy()
    assert not np.array_equal(q, a.tensors["blk.0.attn_q.weight"].f32_rows(0, 576))


def test_rope_scaling_keys():
    from pti_cli.sources.safetensors_source import arch_metadata, llama3_rope_freqs
    base = dict(num_attention_heads=4, hidden_size=64, num_hidden_layers=2, vocab_size=100,
                max_position_embeddings=512, intermediate_size=96, rms_norm_eps=1e-6)
    md = arch_metadata({**base, "rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}}, "llama")
    assert md["llama.rope.scaling.type"] == ("linear", V.STRING, None)
    assert md["llama.rope.scaling.factor"] == (2.0, V.FLOAT32, None)
    assert md["llama.rope.freq_base"] == (1e4, V.FLOAT32, None)
    md = arch_metadata({**base, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                                    "original_max_position_embeddings": 128}}, "qwen2")
    assert md["qwen2.rope.scaling.type"][0] == "yarn" and md["qwen2.rope.scaling.factor"][0] == 4.0
    assert md["qwen2.rope.scaling.original_context_length"] == (128, V.UINT32, None)
    assert md["qwen2.rope.freq_base"][0] == 1e6
    with pytest.raises(PtiError, match="rope scaling type 'dynamic'"):
        arch_metadata({**base, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "llama")
    # llama3: unchanged high frequencies, the whole factor on low ones, a monotone blend between
    cfg = dict(num_attention_heads=32, hidden_size=4096, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    f = llama3_rope_freqs(cfg)
    assert f.shape == (64,) and f[0] == 1.0 and f[-1] == 8.0
    assert np.all(np.diff(f) >= 0) and ((f > 1) & (f < 8)).any()
    wavelen = 2 * np.pi * 500000.0 ** (np.arange(0, 128, 2) / 128)
    assert np.all(f[wavelen < 2048] == 1.0) and np.all(f[wavelen > 8192] == 8.0)
    assert llama3_rope_freqs({**base, "rope_theta": 1e4}) is None


def test_check_twins_fills_keys_left_at_their_defaults(tmp_path):
    """One converter writes key_length / rope.dimension_count / vocab_size, another leaves them out."""
    make_gguf(tmp_path / "a.gguf")
    make_gguf(tmp_path / "b.gguf", extra_kv={"llama.attention.key_length": (16, V.UINT32),
                                             "llama.attention.value_length": (16, V.UINT32),
                                             "llama.rope.dimension_count": (16, V.UINT32)})
    a, b = open_checkpoint(tmp_path / "a.gguf"), open_checkpoint(tmp_path / "b.gguf")
    check_twins(a, b)
    del b.metadata["llama.vocab_size"]
    check_twins(a, b)
    make_gguf(tmp_path / "c.gguf", extra_kv={"llama.attention.key_length": (32, V.UINT32)})
    with pytest.raises(PtiError, match="llama.attention.key_length: 16 vs 32"):
        check_twins(a, open_checkpoint(tmp_path / "c.gguf"))


RSS_READER = r'''
import sys
from pti_cli.sources.checkpoint import open_checkpoint

def peak_rss():   # VmHWM belongs to this process image (ru_maxrss would carry the parent's peak over fork)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))

ck = open_checkpoint(sys.argv[1])
src = ck.tensors["token_embd.weight"]
src.f32_rows(0, 1)
base = peak_rss()
total = 0.0
for r0 in range(0, src.shape[0], 512):
    total += float(src.f32_rows(r0, min(src.shape[0], r0 + 512)).sum())
print(peak_rss() - base)
'''


@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_row_chunks_do_not_pile_up_in_rss(tmp_path, kind):
    """Reading a 256 MiB tensor in 8 MiB row chunks: peak RSS grows by far less than the tensor."""
    import subprocess
    import sys
    rows, k = 16384, 4096
    x = np.ones((rows, k), np.float32)
    if kind == "gguf":
        path = tmp_path / "big.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_block_count(1)
        w.add_embedding_length(k)
        w.add_head_count(32)
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["a", "b"])
        w.add_tensor("token_embd.weight", x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    else:
        import torch
        from safetensors.torch import save_file
        from source_helpers import hf_config
        path = tmp_path / "hf"
        make_tokenizer(path)
        hf_config("llama", rows, hidden_size=k, num_attention_heads=32, num_key_value_heads=8,
                  num_hidden_layers=1).save_pretrained(path)
        save_file({"model.embed_tokens.weight": torch.from_numpy(x)}, path / "model.safetensors")
    del x
    run = subprocess.run([sys.executable, "-c", RSS_READER, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    growth = int(run.stdout.split()[-1])
    assert growth < 128 << 20, f"peak RSS grew by {growth / 2**20:.0f} MiB reading a 256 MiB tensor"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_safetensors(tmp_path, dtype):
    import torch
    from safetensors.torch import load_file, save_file
    make_hf_model(tmp_path, "llama", seed=9)
    tensors = {k: v.to(getattr(torch, dtype)) for k, v in load_file(tmp_path / "model.safetensors").items()}
    save_file(tensors, tmp_path / "model.safetensors")
    ck = open_checkpoint(tmp_path)
    src = ck.tensors["blk.1.ffn_gate.weight"]
    assert src.ggml_type == (Q.BF16 if dtype == "bfloat16" else Q.F16)
    want = tensors["model.layers.1.mlp.gate_proj.weight"].float().numpy()
    np.testing.assert_array_equal(src.f32_rows(3, 40), want[3:40])
    k = ck.tensors["blk.0.attn_k.weight"].f32_rows(0, 32)
    np.testing.assert_array_equal(unpermute_qk(k, 2), tensors["model.layers.0.self_attn.k_proj.weight"].float().numpy())
