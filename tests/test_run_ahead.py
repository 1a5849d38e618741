"""Passes fed on the device (`GpuModel.start_next`, `decode_greedy`, `EnginePort` run-ahead):
the same tokens as pass-by-pass decoding, with the next pass queued before the host reads
the picks; a queued pass the engine does not ask for is dropped without changing anything.
On the CPU path (torch ops, no graphs): the logic the GPU path shares."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pti_cli import bench
from pti_cli.errors import PtiError
from pti_cli.gpu_model import RING, EnginePort, SeqRows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import IdsTokenizer, host_fed_greedy  # noqa: E402

CPU = torch.device("cpu")


def _prefilled(twins: str, lengths: list[int], max_ctx: int = 48):
    m = bench.build_model("tiny", CPU, twins, max_seqs=4, max_ctx=max_ctx, seed=int(np.random.default_rng().integers(1 << 30)))
    rng = np.random.default_rng()
    prompts = [rng.integers(1, m.shape.vocab, n).tolist() for n in lengths]
    seqs = [SeqRows(i, p, 0, i % 2 if twins == "ab" else 0) for i, p in enumerate(prompts)]
    return m, seqs, m.prefill(seqs)


@pytest.mark.parametrize("twins", ["a", "ab"])
def test_decode_greedy_equals_pass_by_pass(twins):
    lengths = [7, 12, 9]
    m, seqs, firsts = _prefilled(twins, lengths)
    steps = 10
    ref = host_fed_greedy(m, seqs, firsts, steps)
    before = m.passes
    got = m.decode_greedy([SeqRows(s.slot, [f], len(s.tokens), s.twin) for s, f in zip(seqs, firsts)], steps)
    assert got == ref and m.passes - before == steps
    # the bucket's device inputs now hold the pass after the last: picks at the next positions,
    # and padding rows (3 sequences in a bucket of 4 with one twin) still padding rows
    b = m.buckets[m._bucket_key([SeqRows(s.slot, [0], 0, s.twin) for s in seqs])]
    pos, toks = b.inp[1].tolist(), b.inp[0].tolist()
    pad = [i for i, p in enumerate(pos) if p < 0]
    assert len(pad) == (1 if twins == "a" else 0)
    assert sorted(p for p in pos if p >= 0) == sorted(n + steps for n in lengths)
    assert sorted(t for i, t in enumerate(toks) if i not in pad) == sorted(o[-1] for o in ref)
    with pytest.raises(PtiError, match="context"):
        m.decode_greedy([SeqRows(0, [1], 40, 0)], 9)
    with pytest.raises(PtiError, match="one token"):
        m.decode_greedy([SeqRows(0, [1, 2], 20, 0)], 2)


def test_a_pass_read_too_late_is_refused():
    m, seqs, firsts = _prefilled("a", [5])
    p = m.start([SeqRows(0, [firsts[0]], 5, 0)])
    later = [m.start_next(p)]
    for _ in range(RING - 1):
        later.append(m.start_next(later[-1]))
    with pytest.raises(PtiError, match="later passes"):
        p.ids()
    assert len(later[-1].ids()[0]) == 1
    assert m.start_next(p) is None   # not the bucket's last pass: its successor's inputs are gone


class NoRunAhead:
    """The same port, without `run_ahead`: every pass launched when the engine asks."""

    def __init__(self, port):
        self.port, self.context_length = port, port.context_length

    def forward(self, batch, logit_tail=None):
        return self.port.forward(batch, logit_tail)

    def forward_ids(self, batch, logit_tail=None):
        return self.port.forward_ids(batch, logit_tail)

    def new_kv(self):
        return self.port.new_kv()


def test_engine_run_ahead_same_tokens(monkeypatch):
    """Four requests, two at a time, one ending at the context's end: the engine with run-ahead
    gives the tokens it gives without, consumes queued passes, and drops the ones a change of
    sequences makes useless (its pass count stays the engine's)."""
    from pti_cli.api import engine_config
    from pti_cli.engine import Engine, Request
    m, _, _ = _prefilled("a", [1], max_ctx=24)
    rng = np.random.default_rng()
    prompts = [rng.integers(1, m.shape.vocab, n).tolist() for n in (10, 16, 5, 12)]
    outs, starts, n_starts = {}, [], {}
    real_start = m.start
    monkeypatch.setattr(m, "start", lambda seqs: starts.append(len(seqs)) or real_start(seqs))
    for how in ("plain", "ahead"):
        before = m.passes
        port = EnginePort(m)
        eng = Engine(port if how == "ahead" else NoRunAhead(port), IdsTokenizer([]),
                     engine_config(max_tokens=12, spec="none", seqs=2))
        assert eng.run_ahead == (how == "ahead")
        starts.clear()
        eng.submit([Request(i, p) for i, p in enumerate(prompts)])
        res = eng.run()
        outs[how] = [r.token_ids for r in res]
        assert port.passes == eng.passes
        fed = m.passes - before - len(starts)   # passes launched from the device feed
        if how == "ahead":   # most passes came from the feed; a change of sequences drops one
            consumed = eng.passes - len(starts)
            assert consumed >= eng.passes // 2 and 2 <= port.dropped <= 4
            assert fed == consumed + port.dropped + (port._ahead is not None)
        else:
            assert port.dropped == 0 and fed == 0
    assert outs["ahead"] == outs["plain"]
    assert [len(o) for o in outs["plain"]] == [12, 24 - 16, 12, 12]
