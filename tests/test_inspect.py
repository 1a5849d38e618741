"""`pti inspect` and SSQFile validation; the real SmolLM2 GGUF packed and inspected."""

from __future__ import annotations

import json
import shutil

import numpy as np
import gguf
import pytest
from gguf import GGMLQuantizationType as T

from pti_cli.cli import main
from pti_cli.errors import PtiError
from pti_cli.inspect import summary
from pti_cli.pack import pack
from pti_cli.ssq import SSQFile
from pti_cli.ssq import format as F

from ssq_helpers import tiny_llama


@pytest.fixture(scope="module")
def smollm2_ssq(smollm2_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp("smol") / "smollm2.ssq"
    main(["pack", "-o", str(out), "-q"])          # no A: the embedded default model
    return out


def test_smollm2_packed_and_inspected(smollm2_gguf, smollm2_ssq):
    src = gguf.GGUFReader(smollm2_gguf)
    src_t = {t.name: t for t in src.tensors}
    types = {t.tensor_type for t in src.tensors}
    assert T.Q4_1 in types and T.Q8_0 in types and T.F32 in types
    f = SSQFile(smollm2_ssq)
    s = json.loads(json.dumps(summary(f)))          # what `pti inspect --json` prints
    assert s["arch"] == "llama" and s["mode"] == 8 and s["identical"] and s["tied_embeddings"]
    assert s["file_size"] == smollm2_ssq.stat().st_size
    assert [t["name"] for t in s["tensors"]] == [t.name for t in src.tensors]
    by_name = {t["name"]: t for t in s["tensors"]}
    # every tensor: logical shape as in the source, bytes as stored
    for t in src.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        assert tuple(by_name[t.name]["shape"]) == shape
        assert by_name[t.name]["storage"] == ("Q8_0" if len(shape) == 2 else "F32")
        rows_k = shape if len(shape) == 2 else None
        assert by_name[t.name]["bytes"] == (rows_k[0] * F.q8_row_bytes(rows_k[1]) if rows_k else 4 * shape[0])
    # the Q8_0 embedding copied bit for bit; a Q4_1 matrix quantised as gguf-py does
    assert np.array_equal(f.raw("token_embd.weight"), np.asarray(src_t["token_embd.weight"].data))
    down = src_t["blk.3.ffn_down.weight"]
    ref = gguf.quants.quantize(gguf.quants.dequantize(down.data, T.Q4_1), T.Q8_0)
    assert np.array_equal(f.raw("blk.3.ffn_down.weight"), ref)
    assert np.array_equal(f.dense("blk.0.attn_norm.weight", 1), np.asarray(src_t["blk.0.attn_norm.weight"].data))
    # bytes per pass: every matrix in Q8_0 (the tied table counted whole: it is the output
    # matrix) plus the vectors; an identical file serves both twins from one copy
    expect = sum(int(t.n_elements) // 32 * 34 if len(t.shape) == 2 else 4 * int(t.n_elements) for t in src.tensors)
    assert s["pass_bytes"] == {"one_twin": expect, "both_twins": expect}
    # metadata: twin A's architecture and tokenizer keys
    assert s["metadata"]["llama.block_count"] == 30
    assert f.metadata["tokenizer.ggml.tokens"] == src.fields["tokenizer.ggml.tokens"].contents()
    assert f.metadata["tokenizer.chat_template"] == src.fields["tokenizer.chat_template"].contents()


def test_inspect_tables(smollm2_ssq, capsys):
    main(["inspect", str(smollm2_ssq)])
    out = capsys.readouterr().out
    for needle in ("architecture", "llama", "bytes per pass", "blk.29.ffn_down.weight", "576 x 1536", "Q8_0",
                   "SmolLM2-135M-Instruct"):
        assert needle in out, needle


def test_inspect_mode16_pass_bytes(tmp_path, capsys):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    wa = tiny_llama(a, seed=3)
    tiny_llama(b, seed=4)
    out = tmp_path / "t.ssq"
    pack(a, b, out)
    main(["inspect", str(out), "--json"])
    s = json.loads(capsys.readouterr().out)
    mats = sum(x.shape[0] * F.q8_row_bytes(x.shape[1]) for n, x in wa.items() if x.ndim == 2 and n != "token_embd.weight")
    vecs = sum(4 * x.size for x in wa.values() if x.ndim == 1)
    assert s["pass_bytes"] == {"one_twin": mats + vecs, "both_twins": 2 * (mats + vecs)}
    assert s["mode"] == 16 and not s["identical"]
    assert [t["twin"] for t in s["twins"]] == ["A", "B"] and s["twins"][1]["name"] == "b"
    storages = {t["name"]: t["storage"] for t in s["tensors"]}
    assert storages["blk.0.attn_q.weight"] == "SSQ16" and storages["blk.0.attn_norm.weight"] == "F32 x2"


def _rewrite(src, dst, *, drop_key=None, set_kv=None, drop_tensor=None, extra_tensor=None):
    """Copy an .ssq file through gguf-py, changing one thing."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key == drop_key:
            continue
        if set_kv and key == set_kv[0]:
            w.add_key_value(key, set_kv[1], set_kv[2])
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    for t in r.tensors:
        if t.name == drop_tensor:
            continue
        data = np.asarray(t.data)
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type if t.tensor_type == T.Q8_0 else None)
    if extra_tensor:
        w.add_tensor(extra_tensor, np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@pytest.fixture(scope="module")
def small_ssq(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    a, b = d / "a.gguf", d / "b.gguf"
    tiny_llama(a, seed=5)
    tiny_llama(b, seed=6)
    pack(a, b, d / "t.ssq")
    return d / "t.ssq"


def test_rewrite_unchanged_is_valid(small_ssq, tmp_path):
    f = SSQFile(_rewrite(small_ssq, tmp_path / "same.ssq"))
    g = SSQFile(small_ssq)
    for name in g.tensor_names:
        assert np.array_equal(f.raw(name), g.raw(name))


@pytest.mark.parametrize("change, message", [
    (dict(drop_key="ssq.mode"), "missing key ssq.mode"),
    (dict(set_kv=("ssq.mode", 12, gguf.GGUFValueType.UINT32)), "ssq.mode is 12"),
    (dict(set_kv=("ssq.format_version", 99, gguf.GGUFValueType.UINT32)), "format_version 99"),
    (dict(set_kv=("ssq.identical", True, gguf.GGUFValueType.BOOL)), "contradicts"),
    (dict(set_kv=("ssq.tensor_shapes", ["1,2"], gguf.GGUFValueType.ARRAY)), "differ in length"),
    (dict(drop_tensor="blk.1.ffn_down.weight"), "blk.1.ffn_down.weight is missing"),
    (dict(drop_tensor="output_norm.weight.twin_b"), "output_norm.weight.twin_b is missing"),
    (dict(extra_tensor="stray.weight"), "stray.weight is not listed"),
])
def test_inconsistent_files_rejected(small_ssq, tmp_path, change, message):
    bad = _rewrite(small_ssq, tmp_path / "bad.ssq", **change)
    with pytest.raises(PtiError, match=message):
        SSQFile(bad)


def test_wrong_storage_shape_rejected(small_ssq, tmp_path):
    names = list(SSQFile(small_ssq).tensor_names)
    shapes = list(SSQFile(small_ssq).metadata["ssq.tensor_shapes"])
    i = names.index("blk.0.attn_q.weight")
    shapes[i] = "64,65"                                     # 3 blocks per row, not the 2 stored
    bad = _rewrite(small_ssq, tmp_path / "bad.ssq",
                   set_kv=("ssq.tensor_shapes", shapes, gguf.GGUFValueType.ARRAY))
    with pytest.raises(PtiError, match="blk.0.attn_q.weight is I8"):
        SSQFile(bad)


def test_not_ssq_and_truncated(small_ssq, tmp_path, capsys):
    a = tmp_path / "plain.gguf"
    tiny_llama(a, seed=7)
    with pytest.raises(PtiError, match="not an .ssq file"):
        SSQFile(a)
    cut = tmp_path / "cut.ssq"
    cut.write_bytes(small_ssq.read_bytes()[: small_ssq.stat().st_size // 2])
    with pytest.raises(SystemExit) as e:
        main(["inspect", str(cut)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cut.ssq" in err[0]
    with pytest.raises(PtiError, match="no such file"):
        SSQFile(tmp_path / "missing.ssq")
