"""`pti pack`: twins -> .ssq, read back by SSQFile and by gguf-py's own reader."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import gguf
import pytest
from gguf import GGMLQuantizationType as T

from pti_cli import pack as pack_mod
from pti_cli.cli import main
from pti_cli.errors import PtiError
from pti_cli.pack import pack
from pti_cli.ssq import SSQFile
from pti_cli.ssq import format as F

from ssq_helpers import gguf_tensor_f32, gguf_tensor_q8_bytes, tiny_llama, write_big_gguf


@pytest.fixture
def twins(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    wa = tiny_llama(a, seed=int.from_bytes(os.urandom(4), "little"))
    wb = tiny_llama(b, seed=int.from_bytes(os.urandom(4), "little"))
    return a, b, wa, wb


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_mode16_q8_sources_copied_bit_for_bit(twins, tmp_path):
    a, b, wa, wb = twins
    out = tmp_path / "t.ssq"
    res = pack(a, b, out, name_a="base", name_b="tuned")
    assert res.mode == 16 and not res.identical
    f = SSQFile(out)
    assert (f.mode, f.identical, f.twin_names, f.arch) == (16, False, ("base", "tuned"), "llama")
    assert f.source_sha256 == (hashlib.sha256(a.read_bytes()).hexdigest(), hashlib.sha256(b.read_bytes()).hexdigest())
    assert f.tensor_names == list(wa)
    for name, x in wa.items():
        assert f.logical_shape(name) == x.shape
        if x.ndim == 2:
            rows, k = x.shape
            assert f.raw(name).shape == (rows, F.ssq16_row_bytes(k))
            for twin, src in ((0, a), (1, b)):
                assert np.array_equal(F.pack_q8(*f.q8(name, twin)), gguf_tensor_q8_bytes(src, name)), (name, twin)
                assert np.array_equal(f.dense(name, twin), gguf_tensor_f32(src, name))
        else:
            assert np.array_equal(f.dense(name, 0), wa[name])
            assert np.array_equal(f.dense(name, 1), wb[name])
            assert not np.array_equal(f.dense(name, 0), f.dense(name, 1))


def test_gguf_reader_opens_output(twins, tmp_path):
    a, b, wa, _ = twins
    out = tmp_path / "t.ssq"
    pack(a, b, out)
    r = gguf.GGUFReader(out)                      # gguf-py's own reader, no pti code
    tensors = {t.name: t for t in r.tensors}
    assert set(tensors) == set(wa) | {n + ".twin_b" for n, x in wa.items() if x.ndim == 1}
    q = tensors["blk.0.attn_q.weight"]
    assert q.tensor_type == T.I8 and q.data.shape == (64, 2 * 68)
    assert tensors["blk.0.attn_norm.weight.twin_b"].tensor_type == T.F32
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["ssq.mode"].contents() == 16
    assert r.fields["ssq.format_version"].contents() == 1
    src = gguf.GGUFReader(a)
    for key in ("tokenizer.ggml.tokens", "llama.embedding_length", "llama.attention.head_count_kv"):
        assert r.fields[key].contents() == src.fields[key].contents()
    assert len(r.fields["ssq.source_sha256"].contents()) == 2
    # gguf-dump, the tool, opens it too
    dump = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_dump", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert "ssq.mode" in dump.stdout and "blk.0.attn_q.weight" in dump.stdout


def test_f16_and_q4_sources_quantised_like_gguf(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    wa = tiny_llama(a, seed=int.from_bytes(os.urandom(4), "little"), qtype=T.F16)
    tiny_llama(b, seed=int.from_bytes(os.urandom(4), "little"), qtype=T.Q4_1)
    out = tmp_path / "t.ssq"
    pack(a, b, out)
    f = SSQFile(out)
    for name, x in wa.items():
        if x.ndim == 2:
            for twin, src in ((0, a), (1, b)):
                ref = gguf.quants.quantize(gguf_tensor_f32(src, name), T.Q8_0)
                assert np.array_equal(F.pack_q8(*f.q8(name, twin)), ref), (name, twin)


def test_identical_twins_dedup(twins, tmp_path):
    a, b, wa, _ = twins
    two = tmp_path / "two.ssq"
    pack(a, b, two)
    a_copy = tmp_path / "a_copy.gguf"
    shutil.copyfile(a, a_copy)
    for args, name in (((a, None), "one.ssq"), ((a, a_copy), "same.ssq")):
        out = tmp_path / name
        res = pack(*args, out)
        f = SSQFile(out)
        assert res.identical and f.identical and f.mode == 8
        assert f.source_sha256 == (hashlib.sha256(a.read_bytes()).hexdigest(),) * 2
        r = gguf.GGUFReader(out)
        assert not any(t.name.endswith(".twin_b") for t in r.tensors)
        for name, x in wa.items():
            if x.ndim == 2:
                t = next(t for t in r.tensors if t.name == name)
                assert t.tensor_type == T.Q8_0
                assert np.array_equal(np.asarray(t.data), gguf_tensor_q8_bytes(a, name))
                assert np.array_equal(F.pack_q8(*f.q8(name, 1)), gguf_tensor_q8_bytes(a, name))
        ratio = out.stat().st_size / two.stat().st_size
        assert 0.4 < ratio < 0.6, ratio


def test_tied_embeddings(tmp_path):
    a = tmp_path / "a.gguf"
    tiny_llama(a, seed=1, tied=True)
    out = tmp_path / "t.ssq"
    pack(a, None, out)
    f = SSQFile(out)
    assert "output.weight" not in f.tensor_names and f.tied_embeddings
    # the tied table is the output matrix: a pass reads it whole
    embd = f.logical_shape("token_embd.weight")
    untied = tmp_path / "u.gguf"
    tiny_llama(untied, seed=1, tied=False)
    pack(untied, None, tmp_path / "u.ssq")
    g = SSQFile(tmp_path / "u.ssq")
    assert not g.tied_embeddings
    assert f.pass_bytes(1) == g.pass_bytes(1)            # tied: + embd table; untied: + output (same shape)
    assert g.pass_bytes(1) == sum(
        (g.logical_shape(n)[0] * F.q8_row_bytes(g.logical_shape(n)[1]) if g.is_matrix(n) else 4 * g.logical_shape(n)[0])
        for n in g.tensor_names if n != "token_embd.weight")
    assert embd == g.logical_shape("output.weight")


def test_existing_output_needs_force(twins, tmp_path, capsys):
    a, b, _, _ = twins
    out = tmp_path / "t.ssq"
    out.write_bytes(b"precious")
    with pytest.raises(PtiError, match="--force"):
        pack(a, b, out)
    assert out.read_bytes() == b"precious"
    with pytest.raises(SystemExit) as e:
        main(["pack", str(a), str(b), "-o", str(out), "-q"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists" in err[0] and "--force" in err[0]
    assert out.read_bytes() == b"precious"
    main(["pack", str(a), str(b), "-o", str(out), "--force", "-q"])
    assert SSQFile(out).mode == 16
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_atomic_output_on_injected_failure(twins, tmp_path, monkeypatch, exc):
    a, b, _, _ = twins
    out = tmp_path / "out" / "t.ssq"
    out.parent.mkdir()
    calls = []
    real = pack_mod._ssq16_bytes

    def failing(*args):
        calls.append(1)
        if len(calls) == 5:           # part-way through the data section
            raise exc("injected")
        return real(*args)

    monkeypatch.setattr(pack_mod, "_ssq16_bytes", failing)
    with pytest.raises(exc):
        pack(a, b, out)
    assert len(calls) == 5
    assert list(out.parent.iterdir()) == []          # no OUT, no temp file


def test_bad_output_places(twins, tmp_path, monkeypatch):
    a, b, _, _ = twins
    with pytest.raises(PtiError, match="does not exist"):
        pack(a, b, tmp_path / "no" / "such" / "t.ssq")
    with pytest.raises(PtiError, match="directory"):
        pack(a, b, tmp_path)
    with pytest.raises(PtiError, match="cannot write|not writable"):
        pack(a, b, Path("/proc/pti-test.ssq"))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1000))
    with pytest.raises(PtiError, match="free disk space"):
        pack(a, b, tmp_path / "t.ssq")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "t.ssq").exists()


def test_disk_full_while_writing(twins, tmp_path, monkeypatch):
    a, b, _, _ = twins
    out = tmp_path / "t.ssq"
    real = pack_mod.write_ssq_gguf

    def full(path, *args, **kw):
        real(path, *args, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pack_mod, "write_ssq_gguf", full)
    with pytest.raises(PtiError, match="No space left"):
        pack(a, b, out)
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.slow
def test_one_gib_tensor_under_1_5_gib_peak_rss(tmp_path):
    src = write_big_gguf(tmp_path / "big.gguf", rows=65536, k=4096)      # one F32 tensor of 1 GiB
    assert src.stat().st_size > 1 << 30
    out = tmp_path / "big.ssq"
    # VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across fork+exec,
    # so a child of a large pytest process would report the parent's peak.
    code = textwrap.dedent(f"""
        from pti_cli.pack import pack
        pack({str(src)!r}, None, {str(out)!r})
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
        print(int(hwm.split()[1]) * 1024)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    peak = int(run.stdout.split()[-1])
    assert peak < 1.5 * (1 << 30), f"peak RSS {peak / 2**30:.2f} GiB"
    f = SSQFile(out)
    assert f.logical_shape("blk.0.ffn_up.weight") == (65536, 4096)
    raw = f.raw("blk.0.ffn_up.weight")
    head = next(t for t in gguf.GGUFReader(src).tensors if t.name == "blk.0.ffn_up.weight").data[:1024]
    assert np.array_equal(raw[:1024], gguf.quants.quantize(np.asarray(head), T.Q8_0))
    assert not raw[-1].any()                                              # the zero tail


def test_raw_q8_path_and_split_path_give_the_same_file(twins, tmp_path, monkeypatch):
    """Q8_0 sources handing out their stored bytes (q8_raw_rows) and sources giving
    only ints and scales (q8_rows) pack to the same bytes, also mixed."""
    a, b, _, _ = twins
    from pti_cli.sources import checkpoint
    real_open = checkpoint.open_checkpoint
    raw_calls = []

    def opener(split: set):
        def open_(path):
            ck = real_open(path)
            for src in ck.tensors.values():
                if Path(path).name in split:
                    src.q8_raw_rows = lambda r0, r1: None          # no stored bytes on offer
                else:
                    real = src.q8_raw_rows
                    src.q8_raw_rows = lambda r0, r1, real=real: raw_calls.append(1) or real(r0, r1)
            return ck
        return open_

    outs = {}
    for split in ({"a.gguf", "b.gguf"}, set(), {"b.gguf"}):
        monkeypatch.setattr(checkpoint, "open_checkpoint", opener(split))
        for args in ((a, b), (a, None)):
            out = tmp_path / f"{len(split)}-{len(args[1:]) if args[1] else 0}.ssq"
            pack(*args, out)
            outs.setdefault(args[1] is None, []).append(out.read_bytes())
    assert raw_calls
    for files in outs.values():
        assert files[0] == files[1] == files[2]
