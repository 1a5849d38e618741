"""Every bad input of issue 2 through the CLI (`pti pack`): exit code 2, one line on
stderr naming the problem, no traceback, nothing left behind."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys

import pytest
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

from pti_cli.cli import main

from source_helpers import field_offset, kv_index, make_gguf, make_hf_model

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def fails_cleanly(capsys, tmp_path, inputs, match, out_dir=None, extra=()):
    """Run `pti pack inputs -o OUT`; check exit 2, one stderr line containing match, no new files."""
    out_dir = out_dir or tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    before = listing(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["pack", *map(str, inputs), "-o", str(out_dir / "twin.ssq"), "-q", *extra])
    cap = capsys.readouterr()
    assert e.value.code == 2, cap.err
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    assert lines[0].startswith("pti: error: ") and "Traceback" not in cap.err
    assert match in lines[0], lines[0]
    assert listing(tmp_path) == before
    return lines[0]


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.gguf"
    make_gguf(path, seed=1)
    return path


def patched(tmp_path, src, name, offset, data: bytes):
    raw = bytearray(src.read_bytes())
    raw[offset:offset + len(data)] = data
    path = tmp_path / name
    path.write_bytes(bytes(raw))
    return path


# --- files that are not what they claim ----------------------------------

def test_missing_file(capsys, tmp_path, good):
    fails_cleanly(capsys, tmp_path, [tmp_path / "nope.gguf"], "nope.gguf: no such file")
    fails_cleanly(capsys, tmp_path, [good, tmp_path / "nope.gguf"], "nope.gguf: no such file")


def test_not_a_model_file(capsys, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model\n")
    fails_cleanly(capsys, tmp_path, [text], "not a GGUF or safetensors file")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    fails_cleanly(capsys, tmp_path, [empty], "not a GGUF or safetensors file")


def test_truncated_gguf(capsys, tmp_path, good):
    raw = good.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(raw[:-100])
    fails_cleanly(capsys, tmp_path, [cut], "truncated: tensor 'output_norm.weight' data ends at ")
    fails_cleanly(capsys, tmp_path, [cut], f"beyond file size {len(raw) - 100}")
    cut.write_bytes(raw[:40])
    fails_cleanly(capsys, tmp_path, [cut], "truncated: ")
    cut.write_bytes(raw[:6])
    fails_cleanly(capsys, tmp_path, [cut], "truncated: version")


def test_corrupt_header_counts_and_lengths(capsys, tmp_path, good):
    i = kv_index(good, "tokenizer.ggml.tokens")
    off = field_offset(good, "tokenizer.ggml.tokens", 4)        # the array count
    bad = patched(tmp_path, good, "count.gguf", off, struct.pack("<Q", 2**62))
    fails_cleanly(capsys, tmp_path, [bad],
                  f"corrupt GGUF header: kv {i} 'tokenizer.ggml.tokens' array count 4611686018427387904 exceeds file size")
    off = field_offset(good, "general.architecture", 0)          # the first key's length
    bad = patched(tmp_path, good, "keylen.gguf", off, struct.pack("<Q", 2**40))
    fails_cleanly(capsys, tmp_path, [bad], "kv 0 key length 1099511627776 exceeds")
    off = field_offset(good, "tokenizer.chat_template", 3)       # the string value's length
    bad = patched(tmp_path, good, "strlen.gguf", off, struct.pack("<Q", 10**9))
    fails_cleanly(capsys, tmp_path, [bad], "'tokenizer.chat_template' length 1000000000 exceeds file size")
    bad = patched(tmp_path, good, "tensors.gguf", 8, struct.pack("<Q", 2**50))
    fails_cleanly(capsys, tmp_path, [bad], "tensor count 1125899906842624 exceeds")
    bad = patched(tmp_path, good, "kvs.gguf", 16, struct.pack("<Q", 2**33))
    fails_cleanly(capsys, tmp_path, [bad], "kv count 8589934592 exceeds")
    bad = patched(tmp_path, good, "version.gguf", 4, struct.pack("<I", 7))
    fails_cleanly(capsys, tmp_path, [bad], "unsupported GGUF version 7")
    off = field_offset(good, "llama.block_count", 2)             # the value type
    bad = patched(tmp_path, good, "vtype.gguf", off, struct.pack("<I", 99))
    fails_cleanly(capsys, tmp_path, [bad], "'llama.block_count' has unknown value type 99")


def test_corrupt_tensor_infos(capsys, tmp_path, good):
    name = "blk.0.attn_q.weight"
    bad = patched(tmp_path, good, "ndims.gguf", field_offset(good, name, 2), struct.pack("<I", 9))
    fails_cleanly(capsys, tmp_path, [bad], f"'{name}' n_dims 9 not in 1..4")
    bad = patched(tmp_path, good, "dim.gguf", field_offset(good, name, 3), struct.pack("<Q", 2**60))
    fails_cleanly(capsys, tmp_path, [bad], f"'{name}' dim 0 = {2**60} is out of range")
    bad = patched(tmp_path, good, "type.gguf", field_offset(good, name, 4), struct.pack("<I", 99))
    fails_cleanly(capsys, tmp_path, [bad], f"'{name}' has unknown ggml type 99")
    bad = patched(tmp_path, good, "offset.gguf", field_offset(good, name, 5), struct.pack("<Q", 2**40))
    fails_cleanly(capsys, tmp_path, [bad], f"tensor '{name}' offset 1099511627776")
    # a Q8_0 tensor whose row length is no multiple of 32
    bad = patched(tmp_path, good, "block.gguf", field_offset(good, "token_embd.weight", 3), struct.pack("<Q", 33))
    fails_cleanly(capsys, tmp_path, [bad], "row length 33 is not a multiple of the Q8_0 block size 32")


def test_bad_alignment_key(capsys, tmp_path):
    path = tmp_path / "align.gguf"
    make_gguf(path, extra_kv={"general.alignment": (3, V.UINT32)})
    fails_cleanly(capsys, tmp_path, [path], "'general.alignment' value 3 is not a power of two")


# --- twins that do not match ---------------------------------------------

def test_architecture_mismatch(capsys, tmp_path, good):
    other = tmp_path / "qwen.gguf"
    make_gguf(other, arch="qwen2")
    fails_cleanly(capsys, tmp_path, [good, other], "twins differ in architecture: llama vs qwen2")


def test_hyper_parameter_mismatch(capsys, tmp_path, good):
    other = tmp_path / "heads.gguf"
    make_gguf(other, n_head=8)
    fails_cleanly(capsys, tmp_path, [good, other], "hyper-parameter llama.attention.head_count: 4 vs 8")


def test_shape_mismatch(capsys, tmp_path, good):
    other = tmp_path / "shape.gguf"
    make_gguf(other, shape_over={"blk.0.ffn_gate.weight": (256, 64)})
    fails_cleanly(capsys, tmp_path, [good, other], "tensor blk.0.ffn_gate.weight shape: (128, 64) vs (256, 64)")


def test_vocabulary_mismatch(capsys, tmp_path, good):
    other = tmp_path / "vocab.gguf"
    make_gguf(other, token_prefix="u")
    fails_cleanly(capsys, tmp_path, [good, other], "vocabulary tokenizer.ggml.tokens: entry 3: 't0' vs 'u0'")


def test_safetensors_vocabulary_mismatch(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_hf_model(a, "llama", seed=1)
    make_hf_model(b, "llama", seed=2)
    tok = json.loads((b / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    first = next(k for k, v in vocab.items() if v == 100)
    vocab["zz-renamed"] = vocab.pop(first)
    (b / "tokenizer.json").write_text(json.dumps(tok))
    fails_cleanly(capsys, tmp_path, [a, b], f"tokenizer.ggml.tokens: entry 100: {first!r} vs 'zz-renamed'")


# --- unsupported ---------------------------------------------------------

def test_unsupported_tensor_type(capsys, tmp_path):
    path = tmp_path / "int.gguf"
    make_gguf(path, types={"blk.0.ffn_up.weight": Q.I32})
    fails_cleanly(capsys, tmp_path, [path], "tensor blk.0.ffn_up.weight has unsupported type I32")


def test_unsupported_architecture(capsys, tmp_path):
    path = tmp_path / "phi.gguf"
    make_gguf(path, arch="phi3")
    fails_cleanly(capsys, tmp_path, [path], "unsupported architecture 'phi3'")
    folder = tmp_path / "hf"
    make_hf_model(folder, "llama")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(cfg))
    fails_cleanly(capsys, tmp_path, [folder], "unsupported architecture 'gpt2'")


# --- safetensors ---------------------------------------------------------

@pytest.fixture
def hf(tmp_path):
    folder = tmp_path / "hf"
    make_hf_model(folder, "llama")
    return folder


def test_bad_safetensors(capsys, tmp_path, hf):
    st = hf / "model.safetensors"
    raw = st.read_bytes()
    st.write_bytes(raw[:-50])
    fails_cleanly(capsys, tmp_path, [hf], "truncated: ")
    st.write_bytes(struct.pack("<Q", 2**60) + raw[8:])
    fails_cleanly(capsys, tmp_path, [hf], f"corrupt safetensors header: length {2**60} exceeds file size")
    st.write_bytes(raw[:8] + b"[" + raw[9:])
    fails_cleanly(capsys, tmp_path, [hf], "corrupt safetensors header: not valid JSON")
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    key = next(k for k in header if k != "__metadata__")
    header[key]["data_offsets"][1] += 4
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    st.write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + n:])
    fails_cleanly(capsys, tmp_path, [hf], f"tensor {key!r} offsets")


def test_bare_safetensors_needs_config(capsys, tmp_path, hf):
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(hf / "model.safetensors", lone / "weights.safetensors")
    fails_cleanly(capsys, tmp_path, [lone / "weights.safetensors"], "needs a config.json beside it")
    fails_cleanly(capsys, tmp_path, [lone], "no config.json")


def test_bad_config_and_dtype(capsys, tmp_path, hf):
    (hf / "config.json").write_text("{not json")
    fails_cleanly(capsys, tmp_path, [hf], "config.json is not valid JSON")
    ints = tmp_path / "ints"
    make_hf_model(ints, "llama")
    import torch
    from safetensors.torch import load_file, save_file
    tensors = load_file(ints / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.int32)
    save_file(tensors, ints / "model.safetensors")
    fails_cleanly(capsys, tmp_path, [ints], "tensor model.norm.weight has unsupported type I32")


# --- output side ---------------------------------------------------------

def test_unwritable_output(capsys, tmp_path, good):
    before = listing(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["pack", str(good), "-o", str(tmp_path / "no" / "such" / "dir" / "x.ssq"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "does not exist" in err[0]
    (tmp_path / "adir.ssq").mkdir()
    with pytest.raises(SystemExit) as e:
        main(["pack", str(good), "-o", str(tmp_path / "adir.ssq"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "is a directory" in err[0]
    assert listing(tmp_path) == sorted(before + ["adir.ssq"])


def test_disk_full_before_writing(capsys, tmp_path, good, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    fails_cleanly(capsys, tmp_path, [good], "not enough free disk space")


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))


def test_disk_full_while_writing_real_process(tmp_path, good):
    """The real `pti` entry point with file writes capped at 20 kB: the write itself fails."""
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", "from pti_cli.cli import main; main()", "pack", str(good),
                        "-o", str(out / "twin.ssq"), "-q"],
                       capture_output=True, text=True, preexec_fn=_limit_file_size, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pti: error: ") and "File too large" in lines[0], r.stderr
    assert os.listdir(out) == []


def test_bad_input_real_process(tmp_path):
    """The installed console script, for one bad header: one line, exit 2."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2**62) + b"\0" * 20)
    pti = shutil.which("pti") or os.path.join(os.path.dirname(sys.executable), "pti")
    r = subprocess.run([pti, "pack", str(bad), "-o", str(tmp_path / "x.ssq")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "kv count 4611686018427387904 exceeds" in r.stderr, r.stderr
    assert not (tmp_path / "x.ssq").exists()


def test_sharded_index_names_a_missing_tensor(capsys, tmp_path):
    folder = tmp_path / "sharded"
    make_hf_model(folder, "llama", shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = sorted(set(index["weight_map"].values()))[0]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    fails_cleanly(capsys, tmp_path, [folder], "tensor model.layers.9.mlp.up_proj.weight is listed in")
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-99-of-99.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    fails_cleanly(capsys, tmp_path, [folder], "model-99-of-99.safetensors: shard listed in model.safetensors.index.json is missing")
