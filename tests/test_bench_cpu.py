"""`pti bench` on a tiny synthetic model on the CPU: it runs, and its arithmetic
(bytes per pass, ceiling, % of ceiling, speedup) matches an independent count;
the GPU forward's logic (torch ops, KV slots, multi-row passes) matches a plain
full-attention reference."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pti_cli import bench
from pti_cli.errors import PtiError
from pti_cli.gpu_model import DenseLinear, GpuModel, SeqRows
from pti_cli.synthetic import SIZES, build_weights, check_fits, estimate_bytes, shape_for

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def result():
    return bench.bench_synthetic("tiny", [1, 3], ["none"], ["a", "ab"], device=CPU, prompt_len=20, gen=6,
                                 repeats=1, bw_bytes=32 << 20)


def test_rows_and_counts(result):
    assert [(r.seqs, r.twins) for r in result.rows] == [(1, "a"), (3, "a"), (1, "ab"), (3, "ab")]
    for r in result.rows:
        assert r.tokens == r.seqs * 6 and r.passes == 6 and r.tau == 1.0
        assert r.tok_s > 0 and r.prefill_tok_s > 0 and r.repeats_identical
        assert math.isclose(r.tok_s, r.tokens / r.seconds)
    assert result.rows[0].speedup == 1.0
    assert math.isclose(result.rows[1].speedup, result.rows[1].tok_s / result.rows[0].tok_s)
    assert not result.notes   # sequence 0 decoded the same tokens at --seqs 3


def test_prefill_is_repeated_and_its_median_kept(monkeypatch):
    """The prefill, like the decode, runs once untimed and `repeats` times timed, its median kept; a
    repeat whose first picks differ makes the row's repeats_identical false."""
    model = bench.build_model("tiny", CPU, "a", 2, 27)
    durations = iter([9.0, 1.0, 5.0, 2.0])   # the warm-up's 9 s is left out: median of 1, 5, 2
    clock = {"t": 0.0}
    calls = []
    real = model.prefill

    def timed_prefill(seqs, *a, **k):
        calls.append(len(seqs))
        out = real(seqs, *a, **k)
        clock["t"] += next(durations)
        return out
    monkeypatch.setattr(model, "prefill", timed_prefill)

    def tick():   # every reading a microsecond on, so the decode's times are not zero
        clock["t"] += 1e-6
        return clock["t"]
    monkeypatch.setattr(bench.time, "perf_counter", tick)
    r = bench.run_setting(model, bench.Setting(2), 20, 6, 3, 1e9)
    assert calls == [2, 2, 2, 2] and r.repeats_identical
    assert math.isclose(r.prefill_tok_s, 2 * 20 / 2.0, rel_tol=1e-5)
    picks = iter([[1, 2], [1, 2], [1, 3]])
    monkeypatch.setattr(model, "prefill", lambda seqs, *a, **k: (real(seqs, *a, **k), next(picks))[1])
    assert not bench.run_setting(model, bench.Setting(2), 20, 6, 2, 1e9).repeats_identical


def independent_bytes(model: GpuModel, seqs: int, context: float) -> float:
    """Count from the tensors themselves: weights, norms, KV rows, and every matmul's input and output
    recorded during a real pass (plus the embedding rows and the logits)."""
    w = model.w
    norms = sum(t.numel() * 4 for t in [w.out_norm] + [v for lw in w.layers for v in (lw.attn_norm, lw.ffn_norm)])
    kv_pos = sum(model.kcache[i][0, :, 0].numel() * 2 * 4 for i in range(model.shape.n_layers))
    seen, weight = [], []
    orig = DenseLinear.__call__

    def spy(self, x, n_a):   # a twin's weights are read when it has rows
        y = orig(self, x, n_a)
        seen.append(x.numel() * x.element_size() + y.numel() * y.element_size())
        used = self.mats[:1] if len(self.mats) == 1 else [t for t, n in zip(self.mats, (n_a, x.shape[0] - n_a)) if n]
        weight.append(sum(t.numel() * t.element_size() for t in used))
        return y
    DenseLinear.__call__ = spy
    batch = [SeqRows(i, [1], 5, i % 2 if model.twins == "ab" else 0) for i in range(seqs)]
    try:
        model.run_pass(batch)
    finally:
        DenseLinear.__call__ = orig
    rows = seqs  # run_pass pads to a power-of-two bucket: count only the real rows' share
    _, n_seqs, per_seq = model._bucket_key(batch)
    M = n_seqs * per_seq
    acts = sum(seen) * rows / M + rows * model.shape.dim * 4   # + the embedding rows
    return sum(weight) + norms + kv_pos * (seqs * context + rows) + acts


@pytest.mark.parametrize("twins", ["a", "ab"])
def test_bytes_per_pass_and_ceiling(result, twins):
    model = bench.build_model("tiny", CPU, twins, 4, 40)
    for r in (x for x in result.rows if x.twins == twins):
        want = independent_bytes(model, r.seqs, 20 + 6 / 2)
        assert math.isclose(r.bytes_per_pass, want, rel_tol=1e-9), (r.seqs, r.bytes_per_pass, want)
        assert math.isclose(r.ceiling_tok_s, result.bandwidth["best"] / want * r.seqs, rel_tol=1e-9)
        assert math.isclose(r.pct_ceiling, 100 * r.tok_s / r.ceiling_tok_s)
    two = 2 if twins == "ab" else 1   # distinct twins: both twins' matrices are loaded
    shape = shape_for("tiny")
    hd = shape.head_dim
    n_weights = shape.n_layers * (shape.dim * (shape.n_heads + 2 * shape.n_kv_heads) * hd
                                  + shape.dim * shape.n_heads * hd + 3 * shape.dim * shape.ffn) + shape.vocab * shape.dim
    assert model.w.matrix_bytes() == two * n_weights * 4
    assert model.w.ring_bytes() == 0   # the torch path: no Hopper kernels, no second copies


def test_ring_bytes_count_the_second_copies():
    """Weights.ring_bytes: the bytes of every Packed.ring of the kernel matrices, and nothing else."""
    from types import SimpleNamespace

    from pti_cli.backends.repack import repack_q8, ring_pack
    model = bench.build_model("tiny", CPU, "a", 1, 8)
    w = model.w
    gen = torch.Generator().manual_seed(7)

    def kernel_matrix(n, k, rings):
        packs = [repack_q8(torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8),
                           torch.rand(n, k // 32, generator=gen).half(), k) for _ in range(2)]
        for p in packs[:rings]:
            p.ring = ring_pack(p)
        return SimpleNamespace(w=SimpleNamespace(packs=packs), nbytes=sum(p.nbytes for p in packs))

    w.output, w.layers[0].wgu = kernel_matrix(256, 1024, 2), kernel_matrix(128, 1024, 1)
    want = 2 * (256 * 1024 + 256 * 32 * 2) + (128 * 1024 + 128 * 32 * 2)   # int8 values + f16 scales
    assert w.ring_bytes() == want


def test_json_and_plot(result, tmp_path):
    d = result.to_json()
    text = json.dumps(d)
    back = json.loads(text)
    assert back["rows"][0]["ceiling_tok_s"] == result.rows[0].ceiling_tok_s
    assert back["bandwidth"]["best"] >= back["bandwidth"]["torch_sum"]
    out = tmp_path / "p.png"
    wrote = bench.write_plot(result, out)
    try:
        import matplotlib  # noqa: F401
        assert wrote and out.stat().st_size > 1000
    except ImportError:
        assert not wrote and not out.exists()


def reference_logits(model: GpuModel, tokens: list[int]) -> torch.Tensor:
    """Plain float32 llama forward with full causal attention, no cache, no slots."""
    sh, w = model.shape, model.w
    H, Hk, hd = sh.n_heads, sh.n_kv_heads, sh.head_dim
    T = len(tokens)
    x = w.embed[torch.tensor(tokens)].double()

    def norm(v, g):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + sh.eps) * g.double()

    inv = 1.0 / (sh.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]

    def rope(v):  # adjacent pairs (llama GGUF)
        a, b = v[..., 0::2], v[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for lw in w.layers:
        h = norm(x, lw.attn_norm)
        qkv = h @ lw.wqkv.mats[0].double().T
        q = rope(qkv[:, :H * hd].view(T, H, hd))
        k = rope(qkv[:, H * hd:(H + Hk) * hd].view(T, Hk, hd))
        v = qkv[:, (H + Hk) * hd:].view(T, Hk, hd)
        k, v = k.repeat_interleave(H // Hk, 1), v.repeat_interleave(H // Hk, 1)
        s = torch.einsum("thd,uhd->htu", q, k) / math.sqrt(hd)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
        o = torch.einsum("htu,uhd->thd", a, v).reshape(T, H * hd)
        x = x + o @ lw.wo.mats[0].double().T
        h = norm(x, lw.ffn_norm)
        gu = h @ lw.wgu.mats[0].double().T
        x = x + (torch.nn.functional.silu(gu[:, :sh.ffn]) * gu[:, sh.ffn:]) @ lw.wdown.mats[0].double().T
    return norm(x, w.out_norm) @ w.output.mats[0].double().T


def test_model_matches_full_attention_reference():
    shape = shape_for("tiny")
    m = GpuModel(shape, build_weights(shape, CPU, "a", 5), max_seqs=4, max_ctx=80, device=CPU)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, shape.vocab, 50).tolist(), rng.integers(0, shape.vocab, 37).tolist()
    # prefill in uneven chunks, two sequences in different slots, then a 4-row draft-style pass
    m.prefill([SeqRows(2, a[:45], 0), SeqRows(0, b[:30], 0)], chunk_rows=14)
    _, lg = m.run_pass([SeqRows(0, b[30:], 30), SeqRows(2, a[45:], 45)], want_logits=True)
    ref_a, ref_b = reference_logits(m, a), reference_logits(m, b)
    assert torch.allclose(lg[0].double(), ref_b[30:], rtol=1e-4, atol=1e-4)
    assert torch.allclose(lg[1].double(), ref_a[45:], rtol=1e-4, atol=1e-4)
    # a rejected draft: overwrite positions 46.. with other tokens, then the true ones again
    m.run_pass([SeqRows(2, [7, 8, 9], 46)])
    _, lg = m.run_pass([SeqRows(2, a[46:], 46)], want_logits=True)
    assert torch.allclose(lg[0].double(), ref_a[46:], rtol=1e-4, atol=1e-4)


def test_refusals(monkeypatch):
    big = estimate_bytes(SIZES["8b"], CPU, "a", 0)
    assert big > 24 * 2**30   # 8b in float32 never fits this 24 GiB machine
    monkeypatch.setattr("pti_cli.synthetic.device_free_bytes", lambda d: 1 << 20)
    with pytest.raises(PtiError, match="needs .* GiB"):
        check_fits(SIZES["tiny"], "tiny", CPU, "a", 0)
    with pytest.raises(PtiError, match="unknown synthetic size"):
        shape_for("3b")
    with pytest.raises(PtiError, match="accept-trace"):
        bench.bench_synthetic("tiny", [1], ["lookup"], ["a"], device=CPU)


def run_cli(*args):
    return subprocess.run([sys.executable, "-c", "from pti_cli.cli import main; main()", "bench", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli(tmp_path):
    out = tmp_path / "b.json"
    p = run_cli("--synthetic", "tiny", "--device", "cpu", "--seqs", "1,2", "--prompt-len", "8", "--gen", "3",
                "--repeats", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert [r["seqs"] for r in d["rows"]] == [1, 2] and d["command"].startswith("pti bench")
    assert "ceiling" in p.stdout
    for bad in (["--synthetic", "tiny", "--seqs", "0"], ["--synthetic", "huge"], ["--synthetic", "tiny", "--twins", "c"],
                ["--seqs", "1"], ["--kernels", "--kernel-act", "int4"], ["--kernels"]):   # (no GPU here)
        p = run_cli(*bad)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("pti: error:"), (bad, p.stderr)


def test_replay_trace(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"source": "test", "sequences": [[[4, 3], [2, 1], [5, 5]]]}))
    tr = bench.load_trace(trace)
    res = bench.bench_synthetic("tiny", [1], ["none", "lookup"], ["a"], device=CPU, prompt_len=10, gen=9,
                                repeats=0, trace=tr, bw_bytes=16 << 20)
    spec = next(r for r in res.rows if r.spec == "lookup")
    assert spec.label == "replay" and spec.tokens == 9 and spec.passes == 3   # 3 + 1 + 5
    assert spec.tau == 3.0
    assert not res.notes      # replayed rows give the same greedy tokens as plain decoding
    trace.write_text(json.dumps({"sequences": [[[1, 2]]]}))
    with pytest.raises(PtiError, match="no valid"):
        bench.load_trace(trace)


@pytest.fixture(scope="module")
def default_pti():
    from pti_cli.api import Pti
    return Pti(None, backend="torch")


def test_default_model_through_engine_port(default_pti):
    """The fused-path model loaded from the default .ssq matches the reference Model, and the
    engine runs on it (greedy output the same with and without lookup drafts)."""
    from pti_cli.api import engine_config
    from pti_cli.engine import Engine, Request
    from pti_cli.gpu_model import EnginePort, load_ssq
    pti = default_pti
    port = EnginePort(load_ssq(pti.ssq, None, CPU, "a", max_seqs=3, max_ctx=256))
    ids = pti.encode("Repeat after me: one two three, one two three, one two three.")
    ref = pti.model.forward([(pti.model.new_kv(), 0, ids)])
    got = port.forward([(port.new_kv(), 0, ids)])
    assert got.shape == ref.shape and torch.allclose(got, ref, rtol=1e-4, atol=1e-3)
    outs = {}
    for spec in ("none", "lookup"):
        eng = Engine(port, pti._tok_port, engine_config(max_tokens=10, spec=spec, seqs=2))
        eng.submit([Request(0, ids), Request(1, ids[:9])])
        outs[spec] = [r.token_ids for r in eng.run()]
    assert outs["none"] == outs["lookup"]


def test_fused_path_serves_distinct_twins_from_a_file(tmp_path):
    """load_ssq of a file with two distinct twins (per-twin norms and embeddings, twin matmuls):
    each twin's rows match the reference Model of that twin, in a pass alone and in a pass
    holding both twins."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ssq_helpers import tiny_llama
    from pti_cli.backends.torch_ref import TorchRefBackend
    from pti_cli.gpu_model import EnginePort, load_ssq
    from pti_cli.model import Model
    from pti_cli.pack import pack
    from pti_cli.ssq.read import SSQFile
    a, b, out = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "t.ssq"
    tiny_llama(a, seed=1)
    tiny_llama(b, seed=2)
    pack(a, b, out)
    ssq = SSQFile(out)
    port = EnginePort(load_ssq(ssq, None, CPU, "ab", max_seqs=4, max_ctx=64))
    ref = Model(ssq, TorchRefBackend(), twins="ab")
    toks = np.random.default_rng(4).integers(0, 96, 11).tolist()
    alone = {}
    for twin in (0, 1):
        got = port.forward([(port.new_kv(), twin, toks)])
        want = ref.forward([(ref.new_kv(), twin, toks)])
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), twin
        alone[twin] = got
    assert not torch.allclose(alone[0], alone[1], rtol=1e-2, atol=1e-2)   # the twins differ
    both = port.forward([(port.new_kv(), 1, toks), (port.new_kv(), 0, toks)])
    n = len(toks)
    assert torch.allclose(both[:n], alone[1], rtol=1e-5, atol=1e-5)
    assert torch.allclose(both[n:], alone[0], rtol=1e-5, atol=1e-5)


def test_drafts_shrink_as_sequences_grow():
    """The rows per sequence a pass may verify keep the pass, padded to its graph bucket, within
    the measured free rows (FREE_ROWS); the replay never verifies more."""
    from pti_cli.gpu_model import FREE_ROWS, SEQ_BUCKETS, rows_per_seq_cap
    assert [rows_per_seq_cap(n) for n in (1, 2, 3, 4, 5, 8, 9, 64)] == [8, 4, 2, 2, 1, 1, 1, 1]
    for n in range(1, 65):
        bucket = next(b for b in SEQ_BUCKETS if b >= n)
        assert rows_per_seq_cap(n) == 1 or bucket * rows_per_seq_cap(n) <= FREE_ROWS


def test_replay_cuts_rows_to_the_cap(tmp_path, monkeypatch):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"source": "test", "sequences": [[[9, 7], [6, 6]], [[8, 2]]]}))
    tr = bench.load_trace(trace)
    seen = []
    run_pass = bench.GpuModel.run_pass

    def watched(self, seqs, *a, **k):
        seen.append(max(len(s.tokens) for s in seqs))
        return run_pass(self, seqs, *a, **k)
    monkeypatch.setattr(bench.GpuModel, "run_pass", watched)
    res = bench.bench_synthetic("tiny", [2], ["lookup"], ["a"], device=CPU, prompt_len=10, gen=12,
                                repeats=0, trace=tr, bw_bytes=16 << 20)
    replay = next(r for r in res.rows if r.spec == "lookup")
    assert not res.notes and max(seen[-replay.passes:]) == 4   # 2 sequences: 4 rows each at most


def test_greedy_engine_takes_the_passes_own_picks(default_pti, monkeypatch):
    """With greedy sampling the engine takes the fused pass's own argmax ids (`forward_ids`: one
    small device-to-host copy, no logits), and its output is the one it gives from logits rows;
    sampling at a temperature still goes through the logits."""
    from pti_cli.api import engine_config
    from pti_cli.engine import Engine, Request
    from pti_cli.gpu_model import EnginePort, load_ssq
    from pti_cli.sampling import SamplingParams
    pti = default_pti
    ids = pti.encode("Count: one, two, three, four, five, one, two, three, four, five, one, two")

    class LogitsOnly:   # the same port without forward_ids
        def __init__(self, port):
            self.port, self.context_length = port, port.context_length

        def forward(self, batch, logit_tail=None):
            return self.port.forward(batch, logit_tail)

        def new_kv(self):
            return self.port.new_kv()

        def draft_cap(self, n):
            return self.port.draft_cap(n)

    outs, calls = {}, {}

    def counted(port, name):
        real = getattr(port, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(port, name, call)
    for how in ("ids", "logits"):
        port = EnginePort(load_ssq(pti.ssq, None, CPU, "a", max_seqs=3, max_ctx=256))
        calls.update(forward=0, forward_ids=0)
        counted(port, "forward")
        counted(port, "forward_ids")
        eng = Engine(port if how == "ids" else LogitsOnly(port), pti._tok_port,
                     engine_config(max_tokens=12, spec="lookup", seqs=2))
        assert eng.greedy_ids == (how == "ids")
        eng.submit([Request(0, ids), Request(1, ids[:7])])
        outs[how] = [r.token_ids for r in eng.run()]
        if how == "ids":
            assert calls["forward"] == 0 and calls["forward_ids"] == eng.passes > 0
        else:
            assert calls["forward_ids"] == 0 and calls["forward"] == eng.passes
    assert outs["ids"] == outs["logits"] and all(len(o) == 12 for o in outs["ids"])
    port = EnginePort(load_ssq(pti.ssq, None, CPU, "a", max_seqs=3, max_ctx=256))
    cfg = engine_config(max_tokens=4, spec="none", seqs=1)
    cfg.sampling = SamplingParams(temperature=0.8, seed=3)
    assert not Engine(port, pti._tok_port, cfg).greedy_ids


def test_eager_passes_bound_the_attention_to_the_rows_positions():
    """An eager pass tells the attention how far its rows reach (their last position + 1), so the
    GPU attention launches only those KV chunks; outside a pass (and in captured ones) the bound
    is None: the whole context."""
    from pti_cli.gpu_model import TorchOps

    class Recording(TorchOps):
        def __init__(self):
            self.seen: list[tuple[int | None, int]] = []

        def attention(self, m, q, pos, slot, layer, S, P, h16=False, **tiles):
            if layer == 0:
                self.seen.append((m.attn_bound, int(pos.max())))
            return super().attention(m, q, pos, slot, layer, S, P, h16, **tiles)

    from pti_cli.gpu_model import GpuShape
    shape = GpuShape(n_layers=1, dim=64, ffn=128, n_heads=2, n_kv_heads=1, vocab=96)
    ops = Recording()
    m = GpuModel(shape, build_weights(shape, CPU, "a", 7), max_seqs=3, max_ctx=300, device=CPU, ops=ops)
    rng = np.random.default_rng()
    a, b = rng.integers(0, 96, 150).tolist(), rng.integers(0, 96, 9).tolist()
    m.prefill([SeqRows(0, a, 0), SeqRows(1, b, 0)], chunk_rows=128)
    m.run_pass([SeqRows(0, [1, 2, 3], 150), SeqRows(2, [4], 0)])
    m.decode_greedy([SeqRows(1, [5], 9)], 2)
    assert ops.seen[:3] == [(64, 63), (128, 127), (150, 149)]   # prefill chunks of 64 rows per sequence
    assert ops.seen[3] == (153, 152)                             # a draft-style pass: positions 150..152
    assert ops.seen[4:] == [(10, 9), (11, 10)]                   # device-fed passes, eager on the CPU
    assert m.attn_bound is None
