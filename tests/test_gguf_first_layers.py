"""scripts/gguf_first_layers.py: the GGUF of a model's first N layers keeps every metadata key
(block_count set to N) and the non-layer tensors and layers below N byte for byte, in their types."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from script_helpers import load_script


def _script():
    return load_script("gguf_first_layers")


def _model(path: Path, layers: int, rng) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_embedding_length(64)
    w.add_token_list([f"t{i}" for i in range(40)])
    w.add_token_scores([float(i) for i in range(40)])
    w.add_chat_template("{{ messages }}")
    w.add_tensor("token_embd.weight", gguf.quants.quantize(rng.standard_normal((40, 64)).astype(np.float32), Q.Q8_0),
                 raw_dtype=Q.Q8_0)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", rng.standard_normal(64).astype(np.float32))
        w.add_tensor(f"blk.{i}.ffn_up.weight", gguf.quants.quantize(rng.standard_normal((96, 64)).astype(np.float32), Q.Q4_1),
                     raw_dtype=Q.Q4_1)
    w.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("keep", [1, 2])
def test_first_layers_keeps_what_it_should(tmp_path, keep):
    rng = np.random.default_rng()
    src, dst = tmp_path / "m.gguf", tmp_path / "first.gguf"
    _model(src, 3, rng)
    _script().main(str(src), str(dst), keep)
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    assert b.fields["llama.block_count"].contents() == keep
    names = {f for f in a.fields if not f.startswith("GGUF.")}
    assert names == {f for f in b.fields if not f.startswith("GGUF.")}
    for f in names - {"llama.block_count"}:
        assert a.fields[f].contents() == b.fields[f].contents(), f
    want = [t for t in a.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < keep]
    assert [t.name for t in b.tensors] == [t.name for t in want]
    for t, u in zip(want, b.tensors):
        assert t.tensor_type == u.tensor_type and np.array_equal(np.asarray(t.data), np.asarray(u.data)), t.name
    assert len(b.tensors) == 2 + 2 * keep   # the embedding and the final norm, two tensors a layer


def _two_layers(src: Path, dst: Path) -> None:
    """src (a one-layer GGUF) with its layer 0 also as layer 1 and block_count 2."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), "llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, 2 if f.name == "llama.block_count" else f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    for t in r.tensors:
        if t.name.startswith("blk.0."):
            w.add_tensor("blk.1." + t.name[6:], t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_first_layers_is_loadable_by_pti(tmp_path):
    """The output is a model pti packs: a two-layer llama GGUF (the test model's layer twice) cut to its
    first layer packs, and the .ssq is the one-layer model's (one layer, the same config and tensors)."""
    from source_helpers import make_gguf

    from pti_cli.pack import pack
    from pti_cli.ssq.read import SSQFile
    make_gguf(tmp_path / "one.gguf")
    _two_layers(tmp_path / "one.gguf", tmp_path / "two.gguf")
    pack(tmp_path / "two.gguf", None, tmp_path / "two.ssq")
    assert SSQFile(tmp_path / "two.ssq").metadata["llama.block_count"] == 2
    _script().main(str(tmp_path / "two.gguf"), str(tmp_path / "first.gguf"), 1)
    pack(tmp_path / "first.gguf", None, tmp_path / "first.ssq")
    pack(tmp_path / "one.gguf", None, tmp_path / "one.ssq")
    first, one = SSQFile(tmp_path / "first.ssq"), SSQFile(tmp_path / "one.ssq")
    assert first.metadata["llama.block_count"] == 1
    assert sorted(first.tensor_names) == sorted(one.tensor_names)
    for name in one.tensor_names:
        assert np.array_equal(first.dense(name, 0), one.dense(name, 0)), name
