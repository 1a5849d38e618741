"""Batch invariance: a row's logits never depend on how many rows share the pass
or where the row sits among them (torch.equal, not allclose).

1. The backend's matmul at the default model's real shapes, every M in 1..64
   and every row position, against the row computed alone.
2. The full forward of a tiny random model, every M in 1..64, sequences of
   different cache lengths mixed in one pass, against each row computed in a
   pass of its own.
3. The same on the real default model for a subset of M.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from model_helpers import ArraySSQ, packed_hf_model
from pti_cli.backends.torch_ref import TorchRefBackend
from pti_cli.model import Model
from pti_cli.ssq.read import SSQFile

# SmolLM2-135M: hidden 576, ffn 1536, 9 heads / 3 KV heads of 64, vocab 49152
REAL_SHAPES = {"attn_q": (576, 576), "attn_k": (192, 576), "ffn_up": (1536, 576), "ffn_down": (576, 1536),
               "output": (49152, 576)}


@pytest.mark.parametrize("kernel", ["default", "mm"])
def test_matmul_rows_bit_identical_for_every_m_and_position(kernel):
    """kernel "mm": the torch.mm fallback (other devices, torch builds without oneDNN)."""
    rng = np.random.default_rng()
    shapes = {n: s for n, s in REAL_SHAPES.items() if kernel == "default" or n != "output"}
    mats = {n: (rng.standard_normal(s) * 0.05).astype(np.float32) for n, s in shapes.items()}
    be = TorchRefBackend()
    if kernel == "mm":
        be.kernel = "mm"
    ssq = ArraySSQ(mats)
    for name, (n, k) in shapes.items():
        w = be.load_matrix(ssq, name, "a")
        pool = torch.from_numpy(rng.standard_normal((64, k)).astype(np.float32))
        alone = torch.cat([be.matmul(pool[i:i + 1], w, 0) for i in range(64)])
        for m in range(1, 65):
            pick = torch.from_numpy(rng.permutation(64)[:m])   # row pick[j] sits at position j
            got = be.matmul(pool[pick], w, 0)
            bad = [j for j in range(m) if not torch.equal(got[j], alone[pick[j]])]
            assert not bad, f"{name} {n}x{k}: M={m}, rows at positions {bad} differ from the row alone"
        # and the values are the product (so equality is not of garbage)
        np.testing.assert_allclose(alone.double(), pool.double() @ torch.from_numpy(mats[name]).double().t(),
                                   rtol=1e-4, atol=1e-4)


def _prefilled(model, lengths, rng):
    """One KV cache per length, each prefilled in a pass of its own."""
    kvs = []
    for n in lengths:
        kv = model.new_kv(capacity=16)
        model.forward([(kv, 0, [rng.randrange(model.cfg.vocab) for _ in range(n)])])
        kvs.append(kv)
    return kvs


def _alone(model, kvs, conts):
    """Each sequence's continuation fed one token per pass: every row computed in a pass of M = 1."""
    out = []
    for kv, cont in zip(kvs, conts):
        kv = copy.deepcopy(kv)
        out.append(torch.cat([model.forward([(kv, 0, [t])]) for t in cont]))
    return out


def _check_pass(model, kvs, conts, alone, m, rng):
    """A pass of m rows: sequences in random order, each with a random number of rows."""
    counts = [0] * len(kvs)
    for _ in range(m):
        counts[rng.choice([i for i in range(len(kvs)) if counts[i] < len(conts[i])])] += 1
    order = [i for i in rng.sample(range(len(kvs)), len(kvs)) if counts[i]]
    batch = [(copy.deepcopy(kvs[i]), 0, conts[i][:counts[i]]) for i in order]
    got = model.forward(batch)
    assert got.shape[0] == m
    r = 0
    for i in order:
        for j in range(counts[i]):
            assert torch.equal(got[r], alone[i][j]), \
                f"M={m}: sequence {i} row {j} (pass position {r}) differs from the row computed alone"
            r += 1


def test_forward_rows_bit_identical_tiny_model(tmp_path):
    rng = random.Random()
    _, path = packed_hf_model(tmp_path, "llama", rng.randrange(1 << 30))
    model = Model(SSQFile(path), TorchRefBackend())
    kvs = _prefilled(model, [1, 7, 23, 40], rng)          # caches grow past 16 during the test
    conts = [[rng.randrange(model.cfg.vocab) for _ in range(16)] for _ in kvs]   # 64 rows in all
    alone = _alone(model, kvs, conts)
    for m in range(1, 65):
        _check_pass(model, kvs, conts, alone, m, rng)


def test_prefill_bits_independent_of_the_pass(tmp_path):
    """A prompt's first pass (one causal attention over its rows) gives the same bits alone
    or beside other prefills and continuations: what makes --seqs lossless at the prefill."""
    rng = random.Random()
    _, path = packed_hf_model(tmp_path, "qwen3", rng.randrange(1 << 30))
    model = Model(SSQFile(path), TorchRefBackend())
    prompt = [rng.randrange(model.cfg.vocab) for _ in range(rng.randint(20, 40))]
    alone = model.forward([(model.new_kv(), 0, prompt)])
    others = _prefilled(model, [5, 17], rng)
    for _ in range(3):
        batch = [(copy.deepcopy(kv), 0, [rng.randrange(model.cfg.vocab) for _ in range(rng.randint(1, 6))])
                 for kv in others]
        batch.append((model.new_kv(), 0, [rng.randrange(model.cfg.vocab) for _ in range(rng.randint(2, 30))]))
        at = rng.randrange(len(batch) + 1)
        batch.insert(at, (model.new_kv(), 0, prompt))
        tails = [rng.randint(1, len(t)) for _, _, t in batch]
        tails[at] = len(prompt)
        got = model.forward(batch, logit_tail=tails)
        r = sum(tails[:at])
        assert torch.equal(got[r:r + len(prompt)], alone)


@pytest.fixture(scope="module")
def smollm2_model(tmp_path_factory, smollm2_gguf):
    from model_helpers import default_model
    return default_model(tmp_path_factory, smollm2_gguf)[1]


def test_forward_rows_bit_identical_default_model(smollm2_model):
    model = smollm2_model
    rng = random.Random()
    kvs = _prefilled(model, [3, 12, 30], rng)
    conts = [[rng.randrange(model.cfg.vocab) for _ in range(20)] for _ in kvs]
    alone = _alone(model, kvs, conts)
    for m in (1, 2, 5, 9, 16, 33, 60):
        _check_pass(model, kvs, conts, alone, m, rng)
