"""`pti pack`: twins -> .ssq, read back by SSQFile and by gguf-py's own reader."""

from __future__ import annotations

import errno
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


@pytest.mark.parametrize("where", ["_interleave", "_ssq16_bytes"])
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_atomic_output_on_injected_failure(twins, tmp_path, monkeypatch, exc, where):
    """A failure part-way through the data section leaves nothing behind, on the
    direct file path (_interleave) and through the sources (_ssq16_bytes)."""
    a, b, _, _ = twins
    out = tmp_path / "out" / "t.ssq"
    out.parent.mkdir()
    calls = []
    real = getattr(pack_mod, where)

    def failing(*args):
        calls.append(1)
        if len(calls) == 5:           # part-way through the data section
            raise exc("injected")
        return real(*args)

    monkeypatch.setattr(pack_mod, where, failing)
    monkeypatch.setattr(pack_mod, "ROW_CHUNK_WEIGHTS", 256)     # several chunks per tensor: worker threads
    if where == "_ssq16_bytes":
        monkeypatch.setattr(pack_mod, "_file_span", lambda src, nbytes: None)
    with pytest.raises(exc):
        pack(a, b, out)
    assert 5 <= len(calls) <= 5 + 2 * 2 + 2          # no new chunk starts after the failure (a few in flight)
    assert list(out.parent.iterdir()) == []          # no OUT, no temp file
    # an existing OUT replaced with --force is left whole (its cache was dropped, not its bytes)
    out.write_bytes(b"old contents" * 1000)
    calls.clear()
    with pytest.raises(exc):
        pack(a, b, out, force=True)
    assert out.read_bytes() == b"old contents" * 1000 and _leftovers(out.parent) == []


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


def test_file_raw_and_split_paths_give_the_same_file(twins, tmp_path, monkeypatch):
    """Q8_0 sources read straight from their files (q8_file_span), handing out their
    stored bytes (q8_raw_rows) or only ints and scales (q8_rows) pack to the same
    bytes, also mixed, in both modes."""
    a, b, _, _ = twins
    from pti_cli.sources import checkpoint
    real_open = checkpoint.open_checkpoint
    calls = {"span": 0, "raw": 0}

    def opener(how: dict):
        def open_(path):
            ck = real_open(path)
            kind = how[Path(path).name]
            for src in ck.tensors.values():
                real_span, real_raw = src.q8_file_span, src.q8_raw_rows
                src.q8_file_span = (lambda real=real_span: calls.__setitem__("span", calls["span"] + 1) or real()) \
                    if kind == "span" else (lambda: None)
                src.q8_raw_rows = (lambda r0, r1, real=real_raw: calls.__setitem__("raw", calls["raw"] + 1) or real(r0, r1)) \
                    if kind == "raw" else (lambda r0, r1: None)
            return ck
        return open_

    monkeypatch.setattr(pack_mod, "ROW_CHUNK_WEIGHTS", 96)      # many row chunks per tensor, several in flight
    outs = {}
    for how in ({"a.gguf": "span", "b.gguf": "span"}, {"a.gguf": "raw", "b.gguf": "raw"},
                {"a.gguf": "split", "b.gguf": "split"}, {"a.gguf": "span", "b.gguf": "split"},
                {"a.gguf": "raw", "b.gguf": "span"}):
        monkeypatch.setattr(checkpoint, "open_checkpoint", opener(how))
        for args in ((a, b), (a, None)):
            out = tmp_path / f"{len(outs.get(args[1] is None, []))}-{args[1] is None}.ssq"
            pack(*args, out)
            outs.setdefault(args[1] is None, []).append(out.read_bytes())
    assert calls["span"] and calls["raw"]
    for files in outs.values():
        assert all(f == files[0] for f in files[1:])
    f = SSQFile(tmp_path / "0-False.ssq")          # and the common bytes are right
    for name in f.tensor_names:
        if f.is_matrix(name):
            assert np.array_equal(F.pack_q8(*f.q8(name, 1)), gguf_tensor_q8_bytes(b, name))


def _crossing_copy_file_range(real, fail_after: int):
    """os.copy_file_range that copies at most 100 bytes per call, then refuses
    (EXDEV, as between file systems) from its fail_after-th call on."""
    calls = []

    def copy(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        if len(calls) > fail_after:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst, min(count, 100), offset_src, offset_dst)
    return copy, calls


def test_kernel_copy_and_user_space_fallback_give_the_same_file(twins, tmp_path, monkeypatch):
    """Mode 8 of Q8_0 files: copy_file_range, the user-space copy it falls back to
    (refused at once, refused part-way through a tensor, or absent) and the row
    path through the source all write the same bytes; other errors propagate."""
    from pti_cli.ssq import write as write_mod
    a, _, wa, _ = twins
    real = os.copy_file_range
    used = []
    monkeypatch.setattr(write_mod.os, "copy_file_range", lambda *args: used.append(1) or real(*args))
    pack(a, None, tmp_path / "kernel.ssq")
    assert len(used) >= sum(x.ndim == 2 for x in wa.values())      # one call or more per matrix
    outs = {"kernel": (tmp_path / "kernel.ssq").read_bytes()}
    for name, fail_after in (("refused", 0), ("part-way", 3)):
        copy, calls = _crossing_copy_file_range(real, fail_after)
        monkeypatch.setattr(write_mod.os, "copy_file_range", copy)
        pack(a, None, tmp_path / f"{name}.ssq")
        assert len(calls) > fail_after
        outs[name] = (tmp_path / f"{name}.ssq").read_bytes()
    monkeypatch.delattr(write_mod.os, "copy_file_range")
    pack(a, None, tmp_path / "absent.ssq")
    outs["absent"] = (tmp_path / "absent.ssq").read_bytes()
    monkeypatch.setattr(pack_mod, "_file_span", lambda src, nbytes: None)
    pack(a, None, tmp_path / "rows.ssq")
    outs["rows"] = (tmp_path / "rows.ssq").read_bytes()
    assert all(v == outs["rows"] for v in outs.values()), [k for k, v in outs.items() if v != outs["rows"]]
    r = gguf.GGUFReader(tmp_path / "part-way.ssq")
    for t in r.tensors:
        if t.name in wa and wa[t.name].ndim == 2:
            assert np.array_equal(np.asarray(t.data), gguf_tensor_q8_bytes(a, t.name)), t.name


def test_kernel_copy_error_other_than_refusal_fails_cleanly(twins, tmp_path, monkeypatch):
    """copy_file_range failing for a real reason (disk full) is not retried in user
    space: the clear error, and nothing left behind."""
    from pti_cli.ssq import write as write_mod
    a, _, _, _ = twins

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(write_mod.os, "copy_file_range", no_space, raising=False)
    monkeypatch.setattr(write_mod.os, "preadv", lambda *args: pytest.fail("fell back to user space"))
    out = tmp_path / "t.ssq"
    with pytest.raises(PtiError, match="No space left"):
        pack(a, None, out)
    assert not out.exists() and _leftovers(tmp_path) == []


def test_source_file_shrinking_while_packing(twins, tmp_path, monkeypatch):
    """A source whose file ends early under the direct reads (changed on disk while
    packing) gives the clear error and no output, in both modes."""
    from pti_cli.ssq import write as write_mod
    a, b, _, _ = twins
    for args in ((a, b), (a, None)):
        real_preadv, calls = os.preadv, []

        def short(fd, buffers, offset):
            calls.append(1)
            return 0 if len(calls) > 2 else real_preadv(fd, buffers, offset)
        monkeypatch.setattr(write_mod.os, "preadv", short)
        monkeypatch.setattr(write_mod.os, "copy_file_range", lambda *x: 0, raising=False)   # EOF at once too
        out = tmp_path / "t.ssq"
        with pytest.raises(PtiError, match="file ended at byte .* while packing"):
            pack(*args, out)
        assert not out.exists() and _leftovers(tmp_path) == []
        monkeypatch.undo()


def test_source_hasher_windows_and_files(tmp_path, monkeypatch):
    """SourceHasher (mapped windows) gives hashlib's digest of the files in order, for
    sizes around the window; a stopped or failing hasher never returns a digest."""
    import mmap
    from pti_cli.sources import hashing
    w = mmap.ALLOCATIONGRANULARITY
    monkeypatch.setattr(hashing, "HASH_WINDOW", w)
    rng = np.random.default_rng()
    files = []
    for i, n in enumerate((0, 1, w - 1, w, w + 1, 3 * w + 5)):
        p = tmp_path / f"f{i}"
        p.write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        files.append(p)
    for group in ([f] for f in files):
        h = hashing.SourceHasher(group)
        h.start()
        assert h.result() == hashlib.sha256(group[0].read_bytes()).hexdigest()
    h = hashing.SourceHasher(files)
    h.start()
    assert h.result() == hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    h = hashing.SourceHasher(files)
    h.stop()
    h.start()
    with pytest.raises(OSError):
        h.result()
    h = hashing.SourceHasher([tmp_path / "missing"])
    h.start()
    with pytest.raises(OSError):
        h.result()
    # a file that shrank after its size was read: mmap refuses the window, a clear OSError
    real_fstat = os.fstat
    monkeypatch.setattr(hashing.os, "fstat", lambda fd: os.stat_result((0,) * 6 + (real_fstat(fd).st_size + w,) + (0,) * 3))
    h = hashing.SourceHasher([files[-1]])
    h.start()
    with pytest.raises(OSError, match="changed while being hashed"):
        h.result()


def test_start_hashes_only_for_single_new_files(twins, tmp_path):
    from pti_cli.sources.hashing import start_hashes
    a, b, _, _ = twins
    hs = start_hashes(a, None, tmp_path, tmp_path / "missing", Path(str(a)), b)
    assert [h is not None for h in hs] == [True, False, False, False, False, True]
    assert hs[0].result() == hashlib.sha256(a.read_bytes()).hexdigest()
    assert hs[-1].result() == hashlib.sha256(b.read_bytes()).hexdigest()


def test_early_hashers_for_other_files_are_not_trusted(twins, tmp_path):
    """pack() uses the hashers the CLI started early only when they hash exactly the
    checkpoint's files: swapped ones are replaced, and the recorded sha256s stay right."""
    from pti_cli.sources.hashing import start_hashes
    a, b, _, _ = twins
    want = (hashlib.sha256(a.read_bytes()).hexdigest(), hashlib.sha256(b.read_bytes()).hexdigest())
    for hashers in (start_hashes(a, b), start_hashes(b, a), start_hashes(None, b), [None, None]):
        out = tmp_path / "t.ssq"
        pack(a, b, out, force=True, hashers=hashers)
        assert SSQFile(out).source_sha256 == want
    early = start_hashes(a, b)
    pack(a, None, out, force=True, hashers=early)          # no B: its early hasher is stopped
    assert SSQFile(out).source_sha256 == (want[0],) * 2
    early[1].join(timeout=10)
    assert not early[1].is_alive()


def test_replacing_out_by_exchange_or_rename_gives_the_same_file(twins, tmp_path, monkeypatch):
    """--force replaces OUT by renameat2(RENAME_EXCHANGE) and removes the old file, or,
    where that is missing, by a plain rename: the same bytes, nothing left behind,
    and an OUT held open elsewhere keeps its old bytes (it was replaced, not rewritten)."""
    from pti_cli.ssq import write as write_mod
    a, b, _, _ = twins
    out = tmp_path / "t.ssq"
    pack(a, b, out)
    fresh = out.read_bytes()
    swaps = []
    real = write_mod.exchange
    monkeypatch.setattr(write_mod, "exchange", lambda tmp, o: swaps.append(real(tmp, o)) or swaps[-1])
    for exchange_missing in (False, True):
        if exchange_missing:
            monkeypatch.setattr(write_mod, "_RENAMEAT2", None)
        out.write_bytes(b"old contents" * 100000)
        with open(out, "rb") as held:
            pack(a, b, out, force=True)
            assert held.read() == b"old contents" * 100000
        assert out.read_bytes() == fresh and _leftovers(tmp_path) == []
    assert swaps == [True, False]


def test_old_pages_freed_just_ahead_of_the_writes(tmp_path, monkeypatch):
    """OldPages drops the replaced OUT's page cache in steps that stay FREE_AHEAD
    ahead of the bytes written, never touching its contents; a missing file is a no-op."""
    from pti_cli.ssq import write as write_mod
    old = tmp_path / "old.ssq"
    old.write_bytes(b"x" * 1000)
    calls = []
    monkeypatch.setattr(write_mod.os, "posix_fadvise", lambda fd, off, n, advice: calls.append((off, n, advice)))
    pages = write_mod.OldPages(old)
    step, ahead = write_mod.FREE_STEP, write_mod.FREE_AHEAD
    pages.advance(1)
    assert calls == [(0, ahead + 1, os.POSIX_FADV_DONTNEED)]
    pages.advance(step // 2)                     # less than a step more: no call
    assert len(calls) == 1
    pages.advance(step)
    assert calls[-1] == (ahead + 1, step + step // 2, os.POSIX_FADV_DONTNEED)
    assert sum(n for _, n, _ in calls) == pages.written + ahead
    pages.close()
    pages.close()
    assert old.read_bytes() == b"x" * 1000
    gone = write_mod.OldPages(tmp_path / "missing.ssq")
    gone.advance(1 << 30)
    gone.close()
    assert len(calls) == 2
