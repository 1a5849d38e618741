"""The GPU forward (pti_cli/gpu_model.py + kernels/pti_ops.hip + the kernels backend).

Checks: the fused ops against plain torch ops; GPU logits against the CPU
float32 forward of the same weights (bf16 rounding); bit-identical rows
whatever the number of sequences and rows in a pass (batch invariance, CUDA
graphs or eager); greedy outputs identical across sequences and draft-style
multi-row passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pti_cli.gpu_model import GpuModel, GpuShape, SeqRows, TorchOps, to_h16
from pti_cli.synthetic import build_weights

pytestmark = pytest.mark.gpu

CPU = torch.device("cpu")
SHAPE = GpuShape(n_layers=2, dim=512, ffn=1024, n_heads=4, n_kv_heads=1, vocab=1024)      # hd 128, G 4
SHAPE64 = GpuShape(n_layers=2, dim=256, ffn=768, n_heads=4, n_kv_heads=2, vocab=768, rope_neox=True)  # hd 64
CTX = 200


@pytest.fixture(scope="module")
def dev():
    return torch.device("cuda")


@pytest.fixture(scope="module")
def ops(dev):
    from pti_cli.gpu_ops import CudaOps
    return CudaOps(dev)


def gpu_model(shape, dev, backend, ops, twins="a", seed=3, graphs=None, max_seqs=8, max_ctx=CTX):
    w = build_weights(shape, dev, twins, seed, backend, draw_device=CPU)
    return GpuModel(shape, w, max_seqs=max_seqs, max_ctx=max_ctx, device=dev, twins=twins, ops=ops, graphs=graphs)


def cpu_model(shape, twins="a", seed=3, max_seqs=8):
    return GpuModel(shape, build_weights(shape, CPU, twins, seed), max_seqs=max_seqs, max_ctx=CTX, device=CPU,
                    twins=twins)


def prompt(n, vocab, seed):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("shape", [SHAPE, SHAPE64], ids=["hd128", "hd64"])
def test_logits_match_cpu_reference(shape, dev, backend, ops):
    """GPU (bf16 activations, kernels) vs CPU float32 forward of the same weights."""
    g, c = gpu_model(shape, dev, backend, ops), cpu_model(shape)
    p = prompt(150, shape.vocab, 1)   # crosses two attention chunks of 64
    _, lg = g.run_pass([SeqRows(0, p, 0)], want_logits=True)
    _, lc = c.run_pass([SeqRows(0, p, 0)], want_logits=True)
    assert torch.isfinite(lg[0]).all()
    for r in (0, 63, 64, 100, 149):
        assert rel_err(lg[0][r], lc[0][r]) < 3e-2, r
    # decode rows too (graph path), with the prompt in the KV cache
    nxt = int(lc[0][-1].argmax())
    _, lg2 = g.run_pass([SeqRows(0, [nxt], 150)], want_logits=True)
    _, lc2 = c.run_pass([SeqRows(0, [nxt], 150)], want_logits=True)
    assert rel_err(lg2[0][0], lc2[0][0]) < 3e-2


def test_cuda_ops_match_torch_ops(dev, backend, ops):
    """Same weights, same kernels matmuls: the fused ops vs plain torch ops on the GPU."""
    a = gpu_model(SHAPE, dev, backend, ops, graphs=False)
    b = gpu_model(SHAPE, dev, backend, TorchOps(), graphs=False)
    seqs = [SeqRows(0, prompt(90, SHAPE.vocab, 2), 0), SeqRows(1, prompt(70, SHAPE.vocab, 3), 0)]
    _, la = a.run_pass(seqs, want_logits=True)
    _, lb = b.run_pass(seqs, want_logits=True)
    for x, y in zip(la, lb):
        assert rel_err(x, y) < 1e-2
    for layer in range(SHAPE.n_layers):   # K and V written at the same places (h differs in rounding)
        for ca, cb in ((a.kcache, b.kcache), (a.vcache, b.vcache)):
            x, y = ca[layer][:2, :, :90].float(), cb[layer][:2, :, :90].float()
            assert rel_err(x, y) < 1e-2
            assert torch.equal(x[1, :, 70:] == 0, y[1, :, 70:] == 0) and bool((x[1, :, 70:] == 0).all())


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_rows_bit_identical_whatever_the_pass(graphs, dev, backend, ops):
    """A row's logits do not depend on how many sequences or rows share its pass."""
    m = gpu_model(SHAPE, dev, backend, ops, graphs=graphs)
    prompts = [prompt(70 + 3 * i, SHAPE.vocab, 10 + i) for i in range(5)]
    m.prefill([SeqRows(i, p, 0) for i, p in enumerate(prompts)], chunk_rows=64)
    toks = prompt(6, SHAPE.vocab, 99)
    # one row at a time, sequence 0 alone
    single = []
    for j, t in enumerate(toks):
        _, lg = m.run_pass([SeqRows(0, [t], 70 + j)], want_logits=True)
        single.append(lg[0][0])
    # the same six positions as one draft-style pass with four other sequences beside it
    others = [SeqRows(i, [toks[0]] * (1 + i % 3), len(prompts[i])) for i in range(1, 5)]
    _, lg = m.run_pass([others[0], SeqRows(0, toks, 70)] + others[1:], want_logits=True)
    for j in range(6):
        assert torch.equal(lg[1][j], single[j]), j
    # and inside the largest seq bucket with one row each
    _, lg = m.run_pass([SeqRows(0, [toks[0]], 70)] + [SeqRows(i, [1], len(prompts[i])) for i in range(1, 5)],
                       want_logits=True)
    assert torch.equal(lg[0][0], single[0])


def test_graph_replay_equals_eager(dev, backend, ops):
    mg = gpu_model(SHAPE, dev, backend, ops, graphs=True)
    me = gpu_model(SHAPE, dev, backend, ops, graphs=False)
    p = prompt(40, SHAPE.vocab, 5)
    for m in (mg, me):
        m.prefill([SeqRows(0, p, 0), SeqRows(1, p[::-1], 0)])
    for step in range(3):
        seqs = [SeqRows(0, [step + 1, 7], 40 + 2 * step), SeqRows(1, [3], 40 + step)]
        _, a = mg.run_pass(seqs, want_logits=True)
        _, b = me.run_pass(seqs, want_logits=True)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert mg.buckets and any(b.graph is not None for b in mg.buckets.values())


def greedy(m, slot, p, n, others=()):
    """n greedy tokens of prompt p in `slot`, others decoding beside it."""
    first = m.prefill([SeqRows(slot, p, 0)] + [SeqRows(s, q, 0) for s, q in others])
    cur, pos, out = [first[0]] + [f for f in first[1:]], [len(p)] + [len(q) for _, q in others], [first[0]]
    slots = [slot] + [s for s, _ in others]
    for _ in range(n - 1):
        ids = m.run_pass([SeqRows(s, [c], q) for s, c, q in zip(slots, cur, pos)])
        cur = [int(r[0]) for r in ids]
        pos = [q + 1 for q in pos]
        out.append(cur[0])
    return out


def test_greedy_identical_across_seqs_and_drafts(dev, backend, ops):
    m = gpu_model(SHAPE, dev, backend, ops)
    p = prompt(60, SHAPE.vocab, 21)
    plain = greedy(m, 0, p, 40)
    beside = greedy(m, 2, p, 40, others=[(0, prompt(50, SHAPE.vocab, 22)), (1, prompt(33, SHAPE.vocab, 23)),
                                         (3, prompt(64, SHAPE.vocab, 24))])
    assert beside == plain
    # verify the known continuation as drafts of 5: every row predicts the next token
    m.prefill([SeqRows(0, p, 0)])
    seq = [plain[0]]
    pos = len(p)
    for k in range(0, 35, 6):
        rows = plain[k:k + 6]
        ids = m.run_pass([SeqRows(0, rows, pos)])[0]
        assert ids.tolist() == plain[k + 1:k + 1 + len(rows)]
        seq += ids.tolist()
        pos += len(rows)
    assert seq[:36] == plain[:36]


def test_twins_ab_match_cpu(dev, backend, ops):
    g, c = gpu_model(SHAPE, dev, backend, ops, twins="ab"), cpu_model(SHAPE, twins="ab")
    seqs = [SeqRows(0, prompt(30, SHAPE.vocab, 31), 0, 0), SeqRows(1, prompt(30, SHAPE.vocab, 31), 0, 1)]
    _, lg = g.run_pass(seqs, want_logits=True)
    _, lc = c.run_pass(seqs, want_logits=True)
    for x, y in zip(lg, lc):
        assert rel_err(x, y) < 3e-2
    assert rel_err(lc[0], lc[1]) > 0.1   # the twins differ


def test_stream_read_bandwidth(dev, ops):
    from pti_cli.bench import measure_read_bandwidth
    bw = measure_read_bandwidth(dev, 1 << 30, ops)
    assert bw["stream_kernel"] > 1e11 and bw["torch_sum"] > 1e11


class _Tok:
    """The engine's tokenizer port for random-token models: no EOG, no text."""
    eog_ids: list[int] = []

    class _Dec:
        def add(self, t):
            return ""

        def flush(self):
            return ""

    def stream_decoder(self):
        return self._Dec()

    def token_text(self, t):
        return str(t)


def test_engine_on_gpu_identical_across_spec_and_seqs(dev, backend, ops):
    """The engine over the fused GPU path: greedy output identical for --spec none/lookup
    and --seqs 1/3, prompts longer than a graph bucket included; lookup accepts drafts."""
    from pti_cli.api import engine_config
    from pti_cli.engine import Engine, Request
    from pti_cli.gpu_model import EnginePort
    port = EnginePort(gpu_model(SHAPE, dev, backend, ops, max_seqs=4))
    base = prompt(12, SHAPE.vocab, 51)
    prompts = [base * 4, prompt(40, SHAPE.vocab, 52), base[:5] * 3 + prompt(7, SHAPE.vocab, 53)]
    runs, taus = {}, {}
    for spec, seqs in (("none", 1), ("lookup", 1), ("none", 3), ("lookup", 3)):
        eng = Engine(port, _Tok(), engine_config(max_tokens=60, spec=spec, seqs=seqs))
        assert eng.run_ahead == (spec == "none")   # plain decoding queues each next pass early
        eng.submit([Request(i, x) for i, x in enumerate(prompts)])
        res = eng.run()
        runs[(spec, seqs)] = [r.token_ids for r in res]
        taus[(spec, seqs)] = [r.tau for r in res]
    first = runs[("none", 1)]
    assert all(len(t) == 60 for t in first)
    assert all(v == first for v in runs.values())
    assert max(taus[("lookup", 3)]) > 1.0 and taus[("none", 1)] == [1.0] * 3


@pytest.mark.parametrize("shape", [SHAPE, SHAPE64], ids=["hd128", "hd64"])
def test_fused_attention_variants_agree(shape, dev, backend, ops):
    """RoPE + KV write + attention in one launch, attention alone in one launch, and
    partial + combine kernels: the same logits and the same KV cache."""
    seqs = [SeqRows(0, prompt(140, shape.vocab, 41), 0), SeqRows(1, prompt(9, shape.vocab, 42), 0)]
    step = [SeqRows(0, [3, 4, 5], 140), SeqRows(1, [6], 9)]
    got = []
    for fused_rope, fused_attention in ((True, True), (False, True), (False, False)):
        ops.fused_rope, ops.fused_attention = fused_rope, fused_attention
        try:
            m = gpu_model(shape, dev, backend, ops, graphs=False)
            _, a = m.run_pass(seqs, want_logits=True)
            _, b = m.run_pass(step, want_logits=True)
        finally:
            ops.fused_rope, ops.fused_attention = True, True
        got.append((a + b, m.kcache[1][:2, :, :143].clone()))
    for logits, cache in got[1:]:
        for x, y in zip(logits, got[0][0]):
            assert rel_err(x, y) < 1e-5
        assert torch.equal(cache, got[0][1])
    assert int(ops.counters.abs().sum()) == 0   # every launch leaves its counters at zero


def _tiny_file(tmp_path, seeds):
    """A packed one-block llama GGUF with a real tokenizer (head size 64, 2 query heads per KV
    head, tied output) of one or two twins (tests/source_helpers.py make_gguf)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from source_helpers import make_gguf
    from pti_cli.pack import pack
    ggufs = []
    for s in seeds:
        ggufs.append(tmp_path / f"m{s}.gguf")
        make_gguf(ggufs[-1], hidden=256, seed=s)
    out = tmp_path / "m.ssq"
    pack(ggufs[0], ggufs[1] if len(ggufs) > 1 else None, out)
    return out


def test_distinct_twins_from_a_file(dev, backend, ops, tmp_path):
    """A file with two distinct twins on the fused GPU pass: every row of a pass holding both
    twins has the bits of the same row on a model of that twin alone, and is near the CPU
    reference forward of that twin (bf16 activations)."""
    from pti_cli.backends.torch_ref import TorchRefBackend
    from pti_cli.gpu_model import EnginePort, load_ssq
    from pti_cli.model import Model
    from pti_cli.ssq.read import SSQFile

    ssq = SSQFile(_tiny_file(tmp_path, (1, 2)))
    assert not ssq.identical
    both = EnginePort(load_ssq(ssq, backend, dev, "ab", max_seqs=4, max_ctx=128, ops=ops))
    cpu = Model(ssq, TorchRefBackend(), twins="ab")
    toks = prompt(21, 40, 5)
    got = both.forward([(both.new_kv(), 1, toks), (both.new_kv(), 0, toks)])
    n = len(toks)
    rows = {1: got[:n], 0: got[n:]}
    assert rel_err(rows[0].cpu(), rows[1].cpu()) > 0.1, "the twins should differ"
    for twin in (0, 1):
        one = EnginePort(load_ssq(ssq, backend, dev, "ab"[twin], max_seqs=2, max_ctx=128, ops=ops))
        alone = one.forward([(one.new_kv(), twin, toks)])
        assert torch.equal(rows[twin], alone), f"twin {twin}: rows differ from the one-twin model"
        ref = cpu.forward([(cpu.new_kv(), twin, toks)])
        assert rel_err(rows[twin].float().cpu(), ref.float()) < 5e-2, f"twin {twin}: {rel_err(rows[twin].cpu(), ref)}"


def test_pti_takes_the_fused_gpu_path_losslessly(dev, tmp_path):
    """`Pti` (what `pti run` uses) on a GPU runs the fused pass, and its greedy output is the same
    with and without lookup drafts and with one or three sequences."""
    from pti_cli.api import Pti
    from pti_cli.engine import Request
    from pti_cli.gpu_model import EnginePort

    p = Pti(_tiny_file(tmp_path, (3,)), backend="cuda")
    assert p.fused
    ids = [3 + t for t in prompt(10, 37, 7)] * 3   # repeats: lookup finds drafts
    runs = {}
    for spec, seqs in (("none", 1), ("lookup", 1), ("lookup", 3), ("none", 3)):
        eng = p.engine(max_tokens=24, spec=spec, seqs=seqs)
        eng.submit([Request(s, ids, 0) for s in range(seqs)])
        runs[(spec, seqs)] = [r.token_ids for r in eng.run()]
    assert isinstance(p._model_port, EnginePort)
    first = runs[("none", 1)][0]
    assert len(first) > 0 and all(r == first for v in runs.values() for r in v), runs


@pytest.mark.parametrize("shape", [SHAPE, SHAPE64], ids=["hd128", "hd64"])
def test_attention_kernels_match_torch_attention(shape, dev, backend, ops):
    """The attention kernels (tensor cores on sm_80+) against plain float32 torch attention over
    the same bf16 cache and queries, per row, at chunk edges and with draft rows (causal among a
    sequence's rows): within bf16 rounding of the output."""
    m = gpu_model(shape, dev, backend, ops, graphs=False)
    gen = torch.Generator(device="cpu").manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    for cache in (m.kcache[0], m.vcache[0]):
        cache.copy_((3 * torch.randn(cache.shape, generator=gen)).to(cache.dtype))
    H, hd = shape.n_heads, shape.head_dim
    for S, P, starts in ((4, 1, (150, 63, 64, 0)), (2, 3, (62, 127))):
        pos = torch.tensor([s + j for s in starts for j in range(P)], dtype=torch.int32, device=dev)
        slot = torch.tensor([i for i in range(S) for _ in range(P)], dtype=torch.int32, device=dev)
        q = torch.randn(S * P, H * hd, generator=gen).bfloat16().to(dev)
        ops.fused_rope = False
        try:
            got = ops.attention(m, q, pos, slot, 0, S, P).float()
        finally:
            ops.fused_rope = True
        want = TorchOps().attention(m, q, pos, slot, 0, S, P).float()
        assert torch.isfinite(got).all()
        for r in range(S * P):
            assert rel_err(got[r], want[r]) < 4e-3, (S, P, r, rel_err(got[r], want[r]))



def _random_caches(m, gen):
    for cache in (m.kcache[0], m.vcache[0]):
        cache.copy_((3 * torch.randn(cache.shape, generator=gen)).to(cache.dtype))
    return m.kcache[0].clone(), m.vcache[0].clone()


@pytest.mark.parametrize("ctx, starts", [(2200, (2199, 1100, 63, 64)), (66000, (65999, 40000))],
                         ids=["35-chunks", "1032-chunks"])
def test_attention_combines_agree_over_many_chunks(ctx, starts, dev, backend, ops):
    """Long contexts, attention alone: the one-launch form (the last chunk block combines; past
    256 chunks its plain loop) gives the bits of the separate combine kernel, near float32 torch
    attention."""
    m = gpu_model(SHAPE, dev, backend, ops, graphs=False, max_seqs=len(starts), max_ctx=ctx)
    gen = torch.Generator(device="cpu").manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    _random_caches(m, gen)
    S, H, hd = len(starts), SHAPE.n_heads, SHAPE.head_dim
    pos = torch.tensor(starts, dtype=torch.int32, device=dev)
    slot = torch.arange(S, dtype=torch.int32, device=dev)
    q = torch.randn(S, H * hd, generator=gen).bfloat16().to(dev)
    got = []
    for fused in (True, False):   # one launch, or partial + combine
        ops.fused_rope, ops.fused_attention = False, fused
        try:
            got.append(ops.attention(m, q, pos, slot, 0, S, 1))
        finally:
            ops.fused_rope, ops.fused_attention = True, True
    assert torch.isfinite(got[0].float()).all() and torch.equal(got[0], got[1])
    want = TorchOps().attention(m, q, pos, slot, 0, S, 1).float()
    for r in range(S):
        assert rel_err(got[0][r].float(), want[r]) < 4e-3, (r, rel_err(got[0][r].float(), want[r]))
    assert int(ops.counters.abs().sum()) == 0


SHAPE_MHA = GpuShape(n_layers=2, dim=256, ffn=768, n_heads=4, n_kv_heads=4, vocab=768)   # hd 64, G 1


@pytest.mark.parametrize("ctx, shape", [(200, SHAPE), (700, SHAPE), (2200, SHAPE), (70000, SHAPE), (700, SHAPE_MHA)],
                         ids=["200", "700", "2200", "70000", "700-hd64-g1"])
def test_attention_clusters_give_the_counters_bits(ctx, shape, dev, backend, ops):
    """The fused RoPE + attention combining within thread-block clusters (sm_90: up to 16 blocks,
    or 3, each then taking every third chunk) gives the bits of the atomic-counter combine
    (cluster_max 0): outputs and KV cache, draft rows (two per sequence) and a padding sequence
    included.  Blocks of one chunk (200 and 700 positions in clusters of up to 16) push their
    partials into the combining blocks' shared memory (attn_rope_clp_*) or leave them in L2
    (ops.push off); blocks of several chunks keep theirs in shared memory when they fit (2, 3 and 4
    of them a block: 200 and 700 positions in clusters of 3, 2200 in clusters of 16), else L2 (2200
    in clusters of 3); 70000 positions take the slice combine's plain loop.  With one query head
    of 64 a KV head, 11 chunks push to the 4 blocks that own its 4 groups of 16 outputs.  Every
    form writes h16 rows (for an output matrix that takes them) that are to_h16 of its bf16 rows,
    bit for bit, and lays out its rows in the Hopper matmul's tiles when given them (AttnOut: two twins
    split after row 3, or one), as pti_wg_tiles would, leaving rows past a twin's last as they were.
    Near torch's RoPE + attention."""
    from wg_helpers import row_of_tiles, tile_layout
    if ops.cluster_max == 0:
        pytest.skip("thread-block clusters need sm_90")   # the counter path is then the only one
    m = gpu_model(shape, dev, backend, ops, graphs=False, max_seqs=4, max_ctx=ctx)
    gen = torch.Generator(device="cpu").manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    saved = _random_caches(m, gen)
    H, Hk, hd, P = shape.n_heads, shape.n_kv_heads, shape.head_dim, 2
    starts = (ctx - 2, ctx // 2 - 1, 63, None)   # the last sequence is padding
    pos = torch.tensor([s + j if s is not None else -1 for s in starts for j in range(P)], dtype=torch.int32, device=dev)
    slot = torch.tensor([i for i in range(len(starts)) for _ in range(P)], dtype=torch.int32, device=dev)
    qkv = torch.randn(len(starts) * P, (H + 2 * Hk) * hd, generator=gen).bfloat16().to(dev)
    got, keep, push = [], ops.cluster_max, ops.push
    W, nr, M, n_a = H * hd, 32, len(starts) * P, 3
    for cl, pushed in ((0, push), (keep, True), (keep, False), (3, push)):
        outs = []
        for h16, parts in ((False, [(0, n_a), (n_a, M)]), (True, [(0, M)])):
            m.kcache[0].copy_(saved[0])
            m.vcache[0].copy_(saved[1])
            ops.cluster_max, ops.push = cl, pushed
            tiles = [torch.full((W * nr,), -1, dtype=torch.int16, device=dev) for _ in parts]   # NaN bits
            try:
                outs.append(ops.attention(m, qkv, pos, slot, 0, len(starts), P, h16=h16, to=tiles, n_a=n_a).clone())
            finally:
                ops.cluster_max, ops.push = keep, push
            for t, (lo, hi) in zip(tiles, parts):
                want = tile_layout(outs[-1][lo:hi].view(torch.int16), nr)
                written = row_of_tiles(nr, W) < hi - lo
                assert torch.equal(t[written], want[written]) and (t[~written] == -1).all(), (cl, pushed, h16, lo)
        # the rows as the output matrix takes them when it takes h16 (AttnOut): the bf16 rows' to_h16
        assert outs[1].dtype == torch.float16
        assert torch.equal(outs[1].view(torch.int16), to_h16(outs[0]).view(torch.int16)), (cl, pushed)
        got.append((outs[0], m.kcache[0].clone(), m.vcache[0].clone()))
    from pti_cli.gpu_model import ATTN_CHUNK
    from pti_cli.gpu_ops import GROUPS, attention_cluster
    ng = next(g for g in GROUPS if g >= H // Hk)
    fit = ops._fit[f"attn_rope_{hd}_g{ng}_bf16"]   # filled by the launches above
    for cl in (keep, 3):   # those launches did take the cluster form
        assert attention_cluster(-(-(ctx + 1) // ATTN_CHUNK), Hk * len(starts) * P, cl, fit[1],
                                 ops.wide_cluster_max, fit[2])[0] > 0
    assert torch.isfinite(got[0][0].float()).all() and not torch.equal(got[0][1], saved[0])
    assert torch.equal(got[0][0][-P:], torch.zeros_like(got[0][0][-P:]))
    for other in got[1:]:
        for a, b in zip(got[0], other):
            assert torch.equal(a, b)
    m.kcache[0].copy_(saved[0])
    m.vcache[0].copy_(saved[1])
    ref = TorchOps()
    want = ref.attention(m, ref.rope_kv(m, qkv, pos, slot, 0), pos, slot, 0, len(starts), P).float()
    for r in range(len(starts) * P - P):
        assert rel_err(got[0][0][r].float(), want[r]) < 4e-3, (r, rel_err(got[0][0][r].float(), want[r]))


def test_wide_attention_grids_give_the_same_bits(dev, backend, ops):
    """Attention grids too wide for the pinned carveout launch from the module left to the
    driver's carveout (CudaOps.k_wide), through the counter form or (sm_90) clusters of blocks
    that take several chunks each: the same output bits and KV cache as a grid that fits the
    pinned module (which, on sm_90, combines within clusters)."""
    m = gpu_model(SHAPE, dev, backend, ops, graphs=False)
    gen = torch.Generator(device="cpu").manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    for cache in (m.kcache[0], m.vcache[0]):
        cache.copy_((3 * torch.randn(cache.shape, generator=gen)).to(cache.dtype))
    saved = (m.kcache[0].clone(), m.vcache[0].clone())
    S, H, Hk, hd = 3, SHAPE.n_heads, SHAPE.n_kv_heads, SHAPE.head_dim
    pos = torch.tensor([150, 64, 5], dtype=torch.int32, device=dev)
    slot = torch.arange(S, dtype=torch.int32, device=dev)
    qkv = torch.randn(S, (H + 2 * Hk) * hd, generator=gen).bfloat16().to(dev)
    name = f"attn_rope_{hd}_g4_bf16"
    assert ops.k_wide is not ops.k and ops.k.carveout is not None and ops.k_wide.carveout is None
    got, keep = [], ops.wide_cluster_max
    # every grid fits the pinned module; none fits anywhere (the counter form); wide clusters of
    # 2 blocks (3 chunks: block 0 takes two), when the GPU has clusters
    big, none = [1 << 20] * 17, [0] * 17
    forms = [((1 << 20, big, none), keep), ((0, none, none), keep)] + [((0, none, big), 2)] * (ops.cluster_max > 0)
    for fit, wide_max in forms:
        m.kcache[0].copy_(saved[0])
        m.vcache[0].copy_(saved[1])
        ops.attention(m, qkv, pos, slot, 0, S, 1)   # fills ops._fit
        ops._fit[name] = fit
        ops.wide_cluster_max = wide_max
        m.kcache[0].copy_(saved[0])
        m.vcache[0].copy_(saved[1])
        try:
            out = ops.attention(m, qkv, pos, slot, 0, S, 1).clone()
        finally:
            ops._fit.pop(name)
            ops.wide_cluster_max = keep
        got.append((out, m.kcache[0].clone(), m.vcache[0].clone()))
    assert torch.isfinite(got[0][0].float()).all() and not torch.equal(got[0][1], saved[0])
    for other in got[1:]:
        for a, b in zip(got[0], other):
            assert torch.equal(a, b)


def test_embed_and_argmax_kernels_match_torch(dev, ops):
    """The pass's first and last kernels against torch: embedding rows per twin (a token out of
    range gives a NaN row), argmax with ties across blocks and within a thread, NaN and -inf rows,
    and the device feed of the next pass (padding rows stay padding)."""
    rng = np.random.default_rng()
    ref_ops = TorchOps()
    for per_twin in (False, True):
        vocab, d, M, n_a = int(rng.integers(1000, 1100)), 4096, 7, 3
        E = torch.randn((2, vocab, d) if per_twin else (vocab, d), device=dev).bfloat16()
        tokens = torch.tensor(rng.integers(0, vocab, M), dtype=torch.int32, device=dev)
        assert torch.equal(ops.embed(E, tokens, n_a), ref_ops.embed(E, tokens, n_a))
        tokens[1] = vocab
        x = ops.embed(E, tokens, n_a)
        assert torch.isnan(x[1]).all() and not torch.isnan(x[[0, 2]]).any()
    V, M = 49152 + int(rng.integers(1, 1000)), 9
    logits = torch.randn(M, V, device=dev)
    top = logits.max() + 1
    logits[0, [5000, 6024, 7]] = top             # ties: 7 wins (an earlier block of the row)
    logits[1, [1030, 6]] = top                   # the same thread's loads
    logits[2, [45000, 40000]] = float("nan")     # NaN first, the lower index of two blocks
    logits[3] = float("-inf")
    logits[4, V - 1] = top                       # the row's last, partial block
    feed = torch.tensor([rng.integers(0, 100, M).tolist(), [5, -1, 7, 8, -1, 3, 2, 9, 11],
                         list(range(M))], dtype=torch.int32, device=dev)
    want = torch.argmax(logits, dim=-1).to(torch.int32)
    assert want[:5].tolist() == [7, 6, 40000, 0, V - 1]
    fed = feed.clone()
    assert torch.equal(ops.argmax_feed(logits, fed), want)
    assert torch.equal(fed[0], want) and torch.equal(fed[2], feed[2])
    assert fed[1].tolist() == [6, -1, 8, 9, -1, 4, 3, 10, 12]
    assert torch.equal(ops.argmax_feed(logits, None), want)


@pytest.mark.parametrize("twins", ["a", "ab"])
def test_device_fed_decode_equals_pass_by_pass(dev, backend, ops, twins):
    """decode_greedy (each pass fed its tokens by the one before, on the device, inside the
    bucket's CUDA graph) gives the tokens of pass-by-pass decoding fed from the host."""
    m = gpu_model(SHAPE, dev, backend, ops, twins=twins)
    rng = np.random.default_rng()
    seqs = [SeqRows(i, rng.integers(0, SHAPE.vocab, 20 + 7 * i).tolist(), 0, i % 2 if twins == "ab" else 0)
            for i in range(3)]
    firsts = m.prefill(seqs)
    steps = 40
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from engine_helpers import host_fed_greedy
    ref = host_fed_greedy(m, seqs, firsts, steps)
    key = m._bucket_key([SeqRows(s.slot, [0], 0, s.twin) for s in seqs])
    assert m.buckets[key].graph is not None
    got = m.decode_greedy([SeqRows(s.slot, [f], len(s.tokens), s.twin) for s, f in zip(seqs, firsts)], steps)
    assert got == ref


@pytest.mark.parametrize("twins", ["a", "ab"])
def test_first_pass_may_be_captured(dev, backend, ops, twins):
    """A model whose very first pass is a captured graph (no eager pass before it: a one-token
    prompt, as `pti run` may start) decodes what the same weights decode eagerly."""
    seqs = [SeqRows(i, [7 + 5 * i], 0, i % 2 if twins == "ab" else 0) for i in range(2)]
    outs = {}
    for graphs in (True, False):
        m = gpu_model(SHAPE, dev, backend, ops, twins=twins, graphs=graphs, max_seqs=4)
        outs[graphs] = m.decode_greedy(seqs, 12)
        key = m._bucket_key(seqs)
        assert (m.buckets[key].graph is not None) == graphs
    assert outs[True] == outs[False]


@pytest.mark.parametrize("per_twin", [False, True])
def test_embed_norm_kernel_gives_embed_then_norm_parts(dev, ops, per_twin):
    """The pass's first launch (embed_norm) against its two steps in torch: x and u (bf16 and h16)
    bit for bit, p (sums of squares, in another order) within float32 rounding, per twin, for a d
    that is not a multiple of 16; a token out of range gives a NaN row and only that row; the
    kernel's embed-only and norm-only forms give the same bits."""
    rng = np.random.default_rng()
    ref_ops = TorchOps()
    vocab, d, M, n_a = int(rng.integers(900, 1100)), 16 * int(rng.integers(20, 40)) + 7, 6, 2
    E = (torch.randn((2, vocab, d) if per_twin else (vocab, d), device=dev) * 3).bfloat16()
    g = torch.rand((2, d) if per_twin else (d,), device=dev) + 0.5
    tokens = torch.tensor(rng.integers(0, vocab, M), dtype=torch.int32, device=dev)
    tokens[4] = -3
    for dtype in (torch.bfloat16, torch.float16):
        x, u, p = ops.embed_norm(E, tokens, n_a, g, dtype)
        xr, ur, pr = ref_ops.embed_norm(E, tokens, n_a, g, dtype)
        ok = [i for i in range(M) if i != 4]
        assert u.dtype == dtype and torch.equal(x[ok], xr[ok]) and torch.equal(u[ok], ur[ok].to(dtype))
        assert p.shape == pr.shape and torch.allclose(p[ok], pr[ok], rtol=1e-5)
        assert torch.isnan(x[4]).all() and torch.isnan(p[4]).all() and not torch.isnan(x[ok]).any()
        assert torch.equal(ops.embed(E, tokens, n_a)[ok], x[ok])
        u2, p2 = ops.norm_parts(x[ok].contiguous(), g, n_a, dtype)
        assert torch.equal(u2, u[ok]) and torch.equal(p2, p[ok])


def test_argmax_writes_the_host_ring(dev, ops):
    """With a host ring the argmax kernel writes each launch's picks to ring row state[0] (pinned
    host memory, through its device address) and advances it, over more launches than rows, rows
    split over several blocks; the device picks and the feed as without, and the state's counters
    back at zero after each launch."""
    from pti_cli.gpu_model import RING
    rng = np.random.default_rng()
    M, V = 5, 3000 + int(rng.integers(0, 3000))
    host = torch.full((RING, M), -7, dtype=torch.int32, pin_memory=True)
    state = ops.argmax_state(M, V)
    for k in range(2 * RING + 1):
        logits = torch.randn(M, V, device=dev)
        logits[1, [2047, 2048]] = logits.max() + 1   # a tie across two blocks
        want = torch.argmax(logits, dim=-1).to(torch.int32)
        before = host.clone()
        feed = torch.tensor([[0] * M, [3, -1, 5, 6, 7], list(range(M))], dtype=torch.int32, device=dev)
        ids = ops.argmax_feed(logits, feed, state, host)
        torch.cuda.synchronize()
        row = k % RING
        others = [r for r in range(RING) if r != row]
        assert want[1] == 2047 and torch.equal(ids, want) and torch.equal(host[row], want.cpu()), k
        assert torch.equal(host[others], before[others])
        assert state[:2 + M].tolist() == [(k + 1) % RING] + [0] * (M + 1) and torch.equal(feed[0], want)
        assert feed[1].tolist() == [4, -1, 6, 7, 8]
    with pytest.raises(Exception, match="pinned"):
        ops.argmax_feed(torch.randn(M, V, device=dev), None, state, torch.zeros((RING, M), dtype=torch.int32))
    with pytest.raises(Exception, match="too few"):
        ops.argmax_feed(torch.randn(M + 1, V, device=dev), None, state)


@pytest.mark.parametrize("twins", ["a", "ab"])
def test_host_ring_decodes_as_the_copy(dev, backend, twins):
    """Picks the argmax kernel writes to the host ring itself give the tokens of picks copied after
    each pass (PTI_HOST_RING=0's path): device-fed decoding in graphs, host-fed multi-row passes."""
    from pti_cli.gpu_model import RING
    from pti_cli.gpu_ops import CudaOps
    rng = np.random.default_rng()
    seqs = [SeqRows(i, rng.integers(0, SHAPE.vocab, 9 + 4 * i).tolist(), 0, i % 2 if twins == "ab" else 0)
            for i in range(3)]
    outs = []
    for ring in (True, False):
        ops = CudaOps(dev)
        ops.writes_host_ring = ring
        m = gpu_model(SHAPE, dev, backend, ops, twins=twins)
        firsts = m.prefill(seqs)
        key = m._bucket_key([SeqRows(s.slot, [0], 0, s.twin) for s in seqs])
        got = m.decode_greedy([SeqRows(s.slot, [f], len(s.tokens), s.twin) for s, f in zip(seqs, firsts)], 2 * RING + 5)
        assert m.buckets[key].graph is not None and m.buckets[key].ring_direct == ring
        drafts = m.run_pass([SeqRows(s.slot, [f] + g[:3], len(s.tokens), s.twin) for s, f, g in zip(seqs, firsts, got)])
        outs.append((firsts, got, [d.tolist() for d in drafts]))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("narrow", ["auto", "1"])
@pytest.mark.parametrize("twins,n_seqs,short_two", [("a", 40, "16"), ("ab", 40, "16"), ("ab", 40, "32"),
                                                    ("ab", 24, "16"), ("a", 24, "16")])
def test_hopper_tiles_and_residual_form_in_the_pass(narrow, twins, n_seqs, short_two, dev, backend, ops, monkeypatch):
    """At 40 sequences (20 a twin), 24 of twins ab (12 a twin: WG_TWIN_MIN_ROWS) or 24 of one model, a 1024-wide
    model on the session's backend (PTI_WG_NARROW=auto: the Hopper kernels take gate/up and the head) and on one
    where they take every matrix (1: down and the attention's output in their residual form): each Hopper matmul
    but layer 0's QKV (after the embedding) reads tiles the launch before it laid out, the attention's output
    matrix those of the attention (AttnOut, PTI_ATTN_TILES=1, the default since session 37).  Under auto this
    model's QKV, O and down are narrow with a K below WG_MIN_K, so the Hopper kernels take every matrix too for
    twins at 12 rows a twin (their own form, PTI_WG_TWIN_SHORT, session 35), at 20 with PTI_WG_SHORT_TWO=32 (the
    default; 16: the policy), and for one model at 24 rows (PTI_WG_SHORT_ONE, session 37).  Logits bit-identical
    to PTI_WG_TILES=0 with PTI_WG_RESIDUAL=0 (the pti_wg_tiles launches, the policy's residual epilogue), to an
    attention that writes no tiles (PTI_ATTN_TILES=0: a pti_wg_tiles launch before the output matrix) and to a
    sequence's pass alone (one row: the policy kernels)."""
    from wg_helpers import backend_with_wgmma
    monkeypatch.setenv("PTI_WG_SHORT_TWO", short_two)
    be = backend if narrow == "auto" else backend_with_wgmma("1", "1")
    shape = GpuShape(n_layers=2, dim=1024, ffn=3072, n_heads=8, n_kv_heads=2, vocab=6144)
    m = gpu_model(shape, dev, be, ops, twins=twins, graphs=False, max_seqs=40)
    seqs = [SeqRows(i, [t], 0, i % 2 if twins == "ab" else 0) for i, t in enumerate(prompt(n_seqs, shape.vocab, 7))]
    launches = []   # (tiles given, residual form) of each Hopper launch
    real = be.launch_wg
    monkeypatch.setattr(be, "launch_wg", lambda p, x, y, glu=False, epi=None:
                        launches.append((bool(epi is not None and epi.ti), bool(epi is not None and epi.po)))
                        or real(p, x, y, glu, epi))
    keep = ops.attn_tiles
    ops.attn_tiles = True
    try:
        _, tiled = m.run_pass(seqs, want_logits=True)
    finally:
        ops.attn_tiles = keep
    if be.wgmma and narrow == "auto" and n_seqs == 40 and short_two == "16":   # gate/up in both layers and the head
        assert launches == [(True, False)] * 3
    elif be.wgmma:   # QKV, the attention's output, gate/up, down in each layer, then the head
        assert launches == [(False, False), (True, True), (True, False), (True, True),
                            (True, False), (True, True), (True, False), (True, True), (True, False)]
    if be.wgmma and launches[1][1]:   # the attention's output matrix on the Hopper kernels, given no tiles
        launches.clear()
        ops.attn_tiles = False
        try:
            _, untiled = m.run_pass(seqs, want_logits=True)
        finally:
            ops.attn_tiles = keep
        assert launches[1] == (False, True) and launches[5] == (False, True)
        assert all(torch.equal(t, q) for t, q in zip(tiled, untiled))
    launches.clear()
    monkeypatch.setenv("PTI_WG_TILES", "0")
    monkeypatch.setenv("PTI_WG_RESIDUAL", "0")
    _, plain = m.run_pass(seqs, want_logits=True)
    assert not any(t or r for t, r in launches) and (len(launches) > 0) == be.wgmma
    assert all(torch.isfinite(t).all() and torch.equal(t, q) for t, q in zip(tiled, plain))
    for i in (0, 1, n_seqs - 1):
        _, alone = m.run_pass([seqs[i]], want_logits=True)
        assert torch.equal(alone[0], tiled[i]), i


@pytest.mark.parametrize("twins,n_seqs,m2", [("a", 12, "2"), ("ab", 24, "2"), ("ab", 24, "1")])
def test_tall_class_16_row_form_in_the_pass(twins, n_seqs, m2, dev, backend, ops, monkeypatch):
    """9-16 rows (a twin) of a tall gate/up: one model at 12 sequences and twins at 12 rows a twin take the Hopper
    kernels' m2 form (sessions 32 and 34) on the 16-row tiles the attention's output matrix (policy) wrote; twins
    write the 32-row tiles of the down after it (its cluster form); PTI_WG_M2=1 keeps twins on the 32-row form
    (session 33's path).  Logits bit-identical to the policy kernels at these rows (PTI_WG_TALL_MIN_ROWS=17,
    PTI_WG_TWIN_MIN_ROWS=17) and to a sequence's pass alone (one row)."""
    monkeypatch.setenv("PTI_WG_M2", m2)
    # gate/up 18432 rows (tall); down's K 9216, whole 1024-column phases of its 8 slices and past WG_MIN_K (8704,
    # session 32's first try, is neither: down stayed on the policy and the test failed on the GPU, session 33)
    shape = GpuShape(n_layers=2, dim=1024, ffn=9216, n_heads=8, n_kv_heads=2, vocab=6144)
    m = gpu_model(shape, dev, backend, ops, twins=twins, graphs=False, max_seqs=24)
    seqs = [SeqRows(i, [t], 0, i % 2 if twins == "ab" else 0) for i, t in enumerate(prompt(n_seqs, shape.vocab, 9))]
    names = []
    real = backend.launch_wg
    monkeypatch.setattr(backend, "launch_wg", lambda *a, **k: names.append(real(*a, **k)) or names[-1])
    _, new = m.run_pass(seqs, want_logits=True)
    if backend.wgmma:   # gate/up of both layers (and, for twins, down after it in a cluster form)
        assert sum(n.endswith("_glu_m2" if twins == "a" or m2 == "2" else "_glu_m4") for n in names) == 2, names
        assert any("_c8" in n or "_c4" in n for n in names) == (twins == "ab"), names   # (twins: m2_c4, session 34)
    monkeypatch.setenv("PTI_WG_TALL_MIN_ROWS", "17")
    monkeypatch.setenv("PTI_WG_TWIN_MIN_ROWS", "17")
    names.clear()
    _, old = m.run_pass(seqs, want_logits=True)
    assert not names   # (read at each launch: every matrix on the policy kernels at 12 rows a twin)
    assert all(torch.isfinite(t).all() and torch.equal(t, q) for t, q in zip(new, old))
    for i in (0, n_seqs - 1):
        _, alone = m.run_pass([seqs[i]], want_logits=True)
        assert torch.equal(alone[0], new[i]), i
