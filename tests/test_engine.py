"""Engine logic on a toy model whose logits depend on every token in its KV
cache: identity with plain decoding, pass counting, KV truncation, stops,
scheduling.  Real-model identity tests are in test_run_cli.py."""

from __future__ import annotations

import random

import pytest

from engine_helpers import EOS, ToyModel, ToyTokenizer, toy_reference
from pti_cli.engine import Engine, EngineConfig, Request
from pti_cli.errors import PtiError
from pti_cli.sampling import SamplingParams, sample

GREEDY = SamplingParams()
SAMPLED = SamplingParams(temperature=0.8, top_k=20, top_p=0.95, seed=1234)


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        motif = [rng.randrange(1, 40) for _ in range(rng.randint(3, 8))]
        out.append((motif * 4)[: rng.randint(5, 30)] + [rng.randrange(1, 40) for _ in range(rng.randint(0, 6))])
    return out


def run(ps, model=None, **cfg):
    model = model or ToyModel()
    eng = Engine(model, ToyTokenizer(), EngineConfig(**cfg))
    eng.submit(Request(s, p) for s, p in enumerate(ps))
    checked = []

    def check_kv(seqs):  # between passes: the KV cache holds exactly the known tokens but the newest
        for seq in seqs:
            if not seq.finish:
                assert seq.kv.toks == seq.tokens[:-1]
                checked.append(1)
    res = eng.run(on_pass=check_kv)
    assert model.passes == eng.passes  # one forward per pass
    return res, eng, model, checked


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_identity_across_spec_k_and_seqs(params):
    ps = prompts(5)
    want = [toy_reference(p, 40, params, s) for s, p in enumerate(ps)]
    for spec, k, seqs in [("none", 8, 1), ("none", 8, 3), ("lookup", 1, 1), ("lookup", 2, 2),
                          ("lookup", 5, 5), ("lookup", 8, 1), ("lookup", 11, 4), ("lookup", 16, 2)]:
        res, eng, model, checked = run(ps, spec=spec, draft=k, seqs=seqs, max_tokens=40, sampling=params)
        assert [r.token_ids for r in res] == want, (spec, k, seqs)
        assert checked
        if spec == "lookup":
            assert sum(r.accepted for r in res) > 0
            assert max(model.rows_per_pass) > 1


def test_tau_is_exactly_one_without_drafts():
    res, eng, model, _ = run(prompts(3), spec="none", max_tokens=25, seqs=2)
    for r in res:
        assert r.tau == 1.0 and r.passes == len(r.token_ids) and r.drafted == 0
    assert sum(r.passes for r in res) == sum(len(r.token_ids) for r in res)


def test_lookup_passes_fewer_than_tokens():
    res, eng, model, _ = run(prompts(3), spec="lookup", max_tokens=60)
    for r in res:
        assert r.passes < len(r.token_ids) and r.tau == len(r.token_ids) / r.passes
    assert eng.passes == sum(r.passes for r in res)  # seqs=1: one sequence per pass


def test_scheduling_n_at_a_time_results_in_input_order():
    ps = prompts(7, seed=3)
    model = ToyModel()
    res, eng, _, _ = run(ps, model=model, spec="none", seqs=3, max_tokens=12)
    assert [r.s for r in res] == list(range(7))
    assert [r.token_ids for r in res] == [toy_reference(p, 12, GREEDY, s) for s, p in enumerate(ps)]
    # spec none, 3 slots: after the prefills a pass has at most 3 rows
    assert max(n for n in model.rows_per_pass if n <= 3) == 3
    assert eng.passes < sum(r.passes for r in res)


def test_eos_stops_and_is_counted():
    ps = prompts(2)
    res, _, _, _ = run(ps, model=ToyModel(eos_after=30), spec="lookup", max_tokens=100)
    for s, r in enumerate(res):
        assert r.finish == "eos" and r.token_ids[-1] == EOS
        assert r.token_ids == toy_reference(ps[s], 100, GREEDY, s, eos_after=30)
        assert "<eos>" not in r.text


def test_max_tokens_and_context_end():
    ps = prompts(2)
    res, _, _, _ = run(ps, spec="lookup", max_tokens=7, draft=16)
    assert all(len(r.token_ids) == 7 and r.finish == "length" for r in res)
    model = ToyModel(context_length=40)
    res, _, _, _ = run(ps, model=model, spec="lookup", max_tokens=100, draft=16)
    for s, r in enumerate(res):
        assert r.finish == "context" and r.prompt_tokens + len(r.token_ids) == 40
        assert r.token_ids == toy_reference(ps[s], 100, GREEDY, s, n_ctx=40)


def test_stop_strings_across_tokens_and_drafts():
    ps = prompts(4, seed=5)
    free, _, _, _ = run(ps, spec="none", max_tokens=60)
    for s, r in enumerate(free):
        full = r.text
        stop = full[20:23]  # three chars, three tokens: spans token (and draft) boundaries
        want = full[:full.find(stop)]
        for spec, k in [("none", 8), ("lookup", 3), ("lookup", 16)]:
            res, eng, _, _ = run([ps[s]], spec=spec, draft=k, max_tokens=60, stops=(stop, "never"))
            assert res[0].text == want and res[0].finish == "stop", (s, spec, k)
            assert len(res[0].token_ids) == full.find(stop) + 3  # up to the token completing it


def test_streaming_holds_back_a_possible_stop_prefix():
    ps = prompts(1, seed=9)
    free, _, _, _ = run(ps, spec="none", max_tokens=40)
    stop = free[0].text[30:33]
    eng = Engine(ToyModel(), ToyTokenizer(), EngineConfig(spec="lookup", max_tokens=40, stops=(stop,)))
    eng.submit([Request(0, ps[0])])
    shown = ""
    while eng.queue or eng.active:
        for seq in eng.step():
            shown += eng.new_text(seq)
            assert stop not in shown
    assert shown == free[0].text[:free[0].text.find(stop)]


def test_bad_config_and_prompts():
    for bad in [dict(spec="medusa"), dict(draft=0), dict(draft=17), dict(seqs=0), dict(max_tokens=0),
                dict(stops=("",)), dict(sampling=SamplingParams(top_p=2.0))]:
        with pytest.raises(PtiError):
            Engine(ToyModel(), ToyTokenizer(), EngineConfig(**bad))
    eng = Engine(ToyModel(context_length=10), ToyTokenizer(), EngineConfig())
    with pytest.raises(PtiError, match="context"):
        eng.submit([Request(0, list(range(1, 11)))])
    with pytest.raises(PtiError, match="empty"):
        eng.submit([Request(0, [])])


def test_drafts_trimmed_to_fill_tiles_stay_lossless():
    ps = prompts(5, seed=11)
    want = [toy_reference(p, 40, GREEDY, s) for s, p in enumerate(ps)]
    for seqs in (1, 3):
        model = ToyModel()
        eng = Engine(model, ToyTokenizer(), EngineConfig(spec="lookup", draft=16, seqs=seqs, max_tokens=40,
                                                         row_quantum=8))
        eng.submit(Request(s, p) for s, p in enumerate(ps))
        forward, passes = model.forward, []

        def watched(batch, logit_tail=None):  # rows of the pass vs the rows it needed without drafts
            base = sum(len(seq.tokens) - seq.kv.length for seq in eng.active)
            passes.append((base, sum(len(t) for _, _, t in batch)))
            return forward(batch, logit_tail)
        model.forward = watched
        res = eng.run()
        assert [r.token_ids for r in res] == want
        assert sum(r.accepted for r in res) > 0
        assert all(rows <= -(-base // 8) * 8 for base, rows in passes), passes
        assert any(rows > base for base, rows in passes)


def test_prefill_pass_has_no_draft_and_rows_are_picked_without_logit_tail():
    """The first pass of each sequence is its prompt alone (the model prefills it the same way in
    every configuration); a model whose forward lacks logit_tail still gets the right rows picked."""
    ps = prompts(4, seed=5)
    want = [toy_reference(p, 30, GREEDY, s) for s, p in enumerate(ps)]
    model = ToyModel()
    firsts = []
    forward = model.forward

    def all_rows(batch):              # no logit_tail parameter: the engine picks the rows
        firsts.extend(len(t) for kv, _, t in batch if kv.length == 0)
        return forward(batch)
    model.forward = all_rows
    eng = Engine(model, ToyTokenizer(), EngineConfig(spec="lookup", draft=8, seqs=2, max_tokens=30))
    eng.submit(Request(s, p) for s, p in enumerate(ps))
    res = eng.run()
    assert [r.token_ids for r in res] == want
    assert sum(r.accepted for r in res) > 0
    assert sorted(firsts) == sorted(len(p) for p in ps)


# --- the engine on real (tiny, random) models ---------------------------------

@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def tiny_model(request, tmp_path_factory):
    from engine_helpers import real_model, tiny_ssq
    path = tiny_ssq(tmp_path_factory.mktemp(request.param), request.param, seed=7)
    return real_model(path)


def run_real(model, ps, **cfg):
    from engine_helpers import IdsTokenizer
    before = model.passes
    eng = Engine(model, IdsTokenizer({2}), EngineConfig(**cfg))
    eng.submit(Request(s, p) for s, p in enumerate(ps))
    res = eng.run()
    assert model.passes - before == eng.passes  # one forward per pass
    return res


def plain_reference(model, prompt, n, params, s, eog=frozenset({2})):
    """Plain decoding with the Model alone: one token per forward, no engine."""
    kv, ctx, out = model.new_kv(), list(prompt), []
    logits = model.forward([(kv, 0, ctx)])[-1]
    while True:
        tok = sample(logits.numpy(), params, s, len(out))
        out.append(tok)
        if tok in eog or len(out) == n:
            return out
        logits = model.forward([(kv, 0, [tok])])[-1]


# K in 1..16 and --seqs 1..5, spread over the architectures to keep the suite fast
COMBOS = {"llama": [("lookup", 1, 2), ("lookup", 16, 5), ("lookup", 8, 1)],
          "qwen2": [("lookup", 3, 4), ("lookup", 12, 1)],
          "qwen3": [("lookup", 5, 3), ("lookup", 16, 1)]}


def test_real_models_identity_across_spec_k_seqs(tiny_model):
    arch = tiny_model.cfg.arch
    rng = random.Random(5)
    ps = [[rng.randrange(3, 250) for _ in range(rng.randint(4, 20))] for _ in range(4)]
    for params in (GREEDY, SAMPLED):
        want = [plain_reference(tiny_model, p, 16, params, s) for s, p in enumerate(ps)]
        combos = [("none", 8, 1), ("none", 8, 4)] + COMBOS[arch] if params is GREEDY else [("lookup", 8, 3)]
        for spec, k, seqs in combos:
            res = run_real(tiny_model, ps, spec=spec, draft=k, seqs=seqs, max_tokens=16, sampling=params)
            assert [r.token_ids for r in res] == want, (params, spec, k, seqs)
            if spec == "none":
                assert all(r.tau == 1.0 for r in res)
            elif params is GREEDY:
                assert sum(r.accepted for r in res) > 0  # random models repeat: drafts do get verified


def test_drafts_cut_to_the_model_draft_cap_stay_lossless():
    """A model that says how long a draft is worth verifying (the GPU port: drafts shrink as
    sequences grow) gets no longer drafts, and the output does not change."""
    ps = prompts(6, seed=17)
    want = [toy_reference(p, 40, GREEDY, s) for s, p in enumerate(ps)]
    for seqs in (1, 2, 4):
        feeds = {}
        for capped in (False, True):
            model = ToyModel()
            if capped:
                model.draft_cap = lambda n: max(0, 4 // n - 1)
            eng = Engine(model, ToyTokenizer(), EngineConfig(spec="lookup", draft=16, seqs=seqs, max_tokens=40))
            eng.submit(Request(s, p) for s, p in enumerate(ps))
            forward, seen = model.forward, []

            def watched(batch, logit_tail=None, forward=forward, seen=seen):   # decode feeds, sequences
                seen.append((max((len(t) for kv, _, t in batch if kv.length), default=0), len(batch)))
                return forward(batch, logit_tail)
            model.forward = watched
            res = eng.run()
            assert [r.token_ids for r in res] == want
            feeds[capped] = seen
        assert all(rows <= max(1, 4 // n) for rows, n in feeds[True]), (seqs, feeds[True])
        assert any(rows > max(1, 4 // n) for rows, n in feeds[False]), seqs   # the cap did bind
