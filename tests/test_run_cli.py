"""`pti run` through the CLI entry point: bad input (one stderr line, exit 2),
and real-model runs: greedy and sampled identity across --spec, --draft and
--seqs, tau, one forward per pass, stop strings, lookup acceptance on the
default model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pti_cli.cli import main


def pti(argv, capfd, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        import io
        import sys

        class _In:
            buffer = io.BytesIO(stdin)
        monkeypatch.setattr(sys, "stdin", _In())
    with pytest.raises(SystemExit) as e:
        main(argv)
        raise SystemExit(0)
    out, err = capfd.readouterr()
    return e.value.code, out, err


def assert_bad(argv, capfd, match: str, **kw):
    code, out, err = pti(argv, capfd, **kw)
    assert code == 2, (argv, code, out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pti: error:"), err
    assert match in lines[0], (match, lines[0])


# --- bad input that needs no model ----------------------------------------

@pytest.mark.parametrize("argv,match", [
    (["run", "-p", ""], "empty prompt"),
    (["run", "-p", "   "], "empty prompt"),
    (["run", "-p", "hi", "--seqs", "0"], "--seqs"),
    (["run", "-p", "hi", "--draft", "0"], "--draft"),
    (["run", "-p", "hi", "--draft", "17"], "--draft"),
    (["run", "-p", "hi", "--spec", "medusa"], "--spec"),
    (["run", "-p", "hi", "--twins", "c"], "--twins"),
    (["run", "-p", "hi", "--backend", "tpu"], "--backend"),
    (["run", "-p", "hi", "--temp", "-1"], "--temp"),
    (["run", "-p", "hi", "--top-p", "0"], "--top-p"),
    (["run", "-p", "hi", "--max-tokens", "0"], "--max-tokens"),
    (["run", "-p", "hi", "--stop", ""], "--stop"),
    (["run", "-p", "hi", "--seqs", "two"], "--seqs"),
    (["run", "-p", "hi", "--bogus"], "--bogus"),
    (["run"], "no prompt"),
    (["run", "-p", "hi", "--file", "x.txt"], "only one prompt source"),
    (["run", "-p", "hi", "--file", "/nonexistent/p.jsonl"], "only one prompt source"),
    (["run", "--file", "/nonexistent/p.jsonl"], "not found"),
    (["run", "/nonexistent/model.ssq", "-p", "hi"], "no such file"),
])
def test_bad_options_and_prompts(argv, match, capfd):
    assert_bad(argv, capfd, match)


def test_non_utf8_prompt_argument(capfd):
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")  # how Python hands over invalid argv bytes
    assert_bad(["run", "-p", bad], capfd, "UTF-8")


def test_non_utf8_and_empty_stdin(capfd, monkeypatch):
    assert_bad(["run", "-"], capfd, "stdin: not valid UTF-8", stdin=b"\xff\xfe hi", monkeypatch=monkeypatch)
    assert_bad(["run", "-"], capfd, "stdin: empty prompt", stdin=b"\n  \n", monkeypatch=monkeypatch)


@pytest.mark.parametrize("name,content,match", [
    ("p.jsonl", b'{"prompt": "ok"}\n{"prompt": "two"\n', "p.jsonl line 2: not valid JSON"),
    ("p.jsonl", b'{"prompt": "ok"}\n\n[1, 2]\n', "p.jsonl line 3: expected a JSON object"),
    ("p.jsonl", b'{"text": "ok"}\n', "p.jsonl line 1: expected a JSON object with"),
    ("p.jsonl", b'{"prompt": 5}\n', 'p.jsonl line 1: "prompt" must be a string'),
    ("p.jsonl", b'{"prompt": ""}\n', "p.jsonl line 1: empty prompt"),
    ("p.jsonl", b'{"messages": []}\n', 'p.jsonl line 1: "messages" must be'),
    ("p.jsonl", b'{"messages": [{"role": "user"}]}\n', "p.jsonl line 1: message 1"),
    ("p.jsonl", b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n', "p.jsonl line 2: not valid UTF-8"),
    ("p.txt", b"one\ntwo \xff\n", "p.txt line 2: not valid UTF-8"),
    ("p.txt", b"\n\n  \n", "no prompts"),
])
def test_malformed_prompt_files_name_the_line(name, content, match, tmp_path, capfd):
    f = tmp_path / name
    f.write_bytes(content)
    assert_bad(["run", "--file", str(f)], capfd, match)


def test_corrupt_and_truncated_ssq(tmp_path, capfd):
    junk = tmp_path / "junk.ssq"
    junk.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    assert_bad(["run", str(junk), "-p", "hi"], capfd, "junk.ssq")
    empty = tmp_path / "empty.ssq"
    empty.write_bytes(b"")
    assert_bad(["run", str(empty), "-p", "hi"], capfd, "empty.ssq")
    assert_bad(["run", str(tmp_path), "-p", "hi"], capfd, "directory")


# --- real models through the CLI and the API ----------------------------------

def run_json(argv, capfd) -> list[dict]:
    code, out, err = pti(argv + ["--json"], capfd)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from engine_helpers import tiny_ssq
    return tiny_ssq(tmp_path_factory.mktemp("tiny"), "llama", seed=3)


@pytest.fixture(scope="module")
def tiny_prompts(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("p") / "prompts.txt"
    f.write_text("The quick brown fox jumps over the lazy dog.\nTwins share one read of memory.\n"
                 "12345 apples and 678 pears.\nthe draft is checked by the verifier\n")
    return f


def test_cli_identity_across_spec_draft_seqs(tiny, tiny_prompts, capfd):
    base = ["run", str(tiny), "--file", str(tiny_prompts), "-n", "20", "--raw"]
    ref = run_json(base + ["--spec", "none"], capfd)
    assert len(ref) == 4 and all(r["tau"] == 1.0 and r["passes"] == len(r["token_ids"]) for r in ref)
    for extra in (["--draft", "1", "--seqs", "2"], ["--draft", "16", "--seqs", "5"], ["--draft", "7"],
                  ["--spec", "none", "--seqs", "3"]):
        got = run_json(base + extra, capfd)
        # --seqs 5 with 4 prompts: the fifth sequence is prompt 1 again (greedy: the same output)
        want = [ref[g["prompt"]] for g in got]
        assert [g["prompt"] for g in got] == [i % 4 for i in range(max(4, len(got)))]
        assert [g["token_ids"] for g in got] == [r["token_ids"] for r in want], extra
        assert [g["text"] for g in got] == [r["text"] for r in want]
    samp = ["--temp", "0.9", "--top-k", "40", "--top-p", "0.95", "--seed", "77"]
    s_none = run_json(base + samp + ["--spec", "none"], capfd)
    s_look = run_json(base + samp + ["--draft", "5", "--seqs", "3"], capfd)
    assert [g["token_ids"] for g in s_look] == [r["token_ids"] for r in s_none]
    assert [g["token_ids"] for g in s_none] != [r["token_ids"] for r in ref]  # sampling did sample


def test_cli_single_sequence_streams_the_json_text(tiny, capfd):
    argv = ["run", str(tiny), "-p", "Twins share one read of memory.", "-n", "16", "--raw"]
    code, out, err = pti(argv + ["--stats"], capfd)
    assert code == 0 and err.startswith("tokens ")
    [r] = run_json(argv, capfd)
    assert out == r["text"] + "\n"


def test_repeated_prompt_copies_are_their_own_sequences(tiny):
    from engine_helpers import real_model
    from test_engine import plain_reference
    from pti_cli.api import Pti
    from pti_cli.sampling import SamplingParams
    p = Pti(tiny)
    params = SamplingParams(temperature=1.0, seed=5)
    res = p.generate(["the draft is checked"], seqs=3, max_tokens=12, chat=False, temperature=1.0, seed=5)
    assert [r.s for r in res] == [0, 1, 2]
    ids = p.encode("the draft is checked", chat=False)
    model = real_model(tiny)
    for r in res:
        assert r.token_ids == plain_reference(model, ids, 12, params, r.s, p.tokenizer.eog_ids)
    assert len({tuple(r.token_ids) for r in res}) > 1


def test_twins_ab_serves_base_and_tuned_in_one_pass(tmp_path, capfd):
    from source_helpers import make_hf_model
    from pti_cli.pack import pack
    make_hf_model(tmp_path / "a", seed=1)
    make_hf_model(tmp_path / "b", seed=2)
    ssq = tmp_path / "ab.ssq"
    pack(tmp_path / "a", tmp_path / "b", ssq)
    base = ["run", str(ssq), "-p", "The quick brown fox", "-n", "12", "--raw"]
    a = run_json(base + ["--twins", "a"], capfd)[0]
    b = run_json(base + ["--twins", "b"], capfd)[0]
    ab = run_json(base + ["--twins", "ab", "--seqs", "4"], capfd)
    assert a["token_ids"] != b["token_ids"]
    assert [x["twin"] for x in ab] == ["a", "b", "a", "b"]
    assert all(x["token_ids"] == (a if x["twin"] == "a" else b)["token_ids"] for x in ab)


def test_context_end_and_too_long_prompt(tiny, capfd):
    from pti_cli.api import Pti
    p = Pti(tiny)
    n_ctx = p.config.context_length
    words = "fox dog memory twins read verifier " * 200
    ids = p.encode(words, chat=False)
    assert len(ids) > n_ctx
    f_long = Path(str(tiny) + ".long.txt")
    f_long.write_text(words + "\n")
    assert_bad(["run", str(tiny), "--file", str(f_long), "--raw"], capfd, "context")
    # a prompt that leaves 10 positions: generation stops cleanly at the context end
    cut = p.tokenizer.decode(ids[: n_ctx - 40])
    short = p.encode(cut, chat=False)
    room = n_ctx - len(short)
    f = Path(str(tiny) + ".ctx.txt")
    f.write_text(cut.replace("\n", " ") + "\n")
    code, out, err = pti(["run", str(tiny), "--file", str(f), "--raw", "-n", "200", "--json"], capfd)
    assert code == 0
    r = json.loads(out)
    if r["finish"] != "eos":
        assert r["finish"] == "context" and r["prompt_tokens"] + len(r["token_ids"]) == n_ctx
        assert "context end" in err
    assert len(r["token_ids"]) <= room


def test_messages_need_chat(tiny, tmp_path, capfd):
    f = tmp_path / "m.jsonl"
    f.write_text('{"messages": [{"role": "user", "content": "the quick brown fox"}]}\n')
    out = run_json(["run", str(tiny), "--file", str(f), "-n", "4", "--chat"], capfd)
    assert len(out) == 1 and out[0]["prompt_tokens"] > 4
    assert_bad(["run", str(tiny), "--file", str(f), "--raw"], capfd, "m.jsonl line 1")


# --- the default model ---------------------------------------------------------

@pytest.fixture(scope="module")
def default_model(tmp_path_factory):
    """`pti run` with no model: the embedded model packed once into the (test) cache."""
    import os
    from pti_cli.api import Pti, default_ssq
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("PTI_CACHE_DIR")
    os.environ["PTI_CACHE_DIR"] = str(cache)
    try:
        path = default_ssq()
        assert path.parent == cache and default_ssq() == path  # packed once, then reused
        yield Pti()
    finally:
        if old is None:
            os.environ.pop("PTI_CACHE_DIR")
        else:
            os.environ["PTI_CACHE_DIR"] = old


GROUNDED = ("Fix the bug in this Python function and return the corrected function.\n\n"
            "def average(numbers):\n    total = 0\n    for n in numbers:\n        total = total + n\n"
            "    return total / len(number)\n")


@pytest.fixture(scope="module")
def grounded_none(default_model):
    return default_model.generate(GROUNDED, max_tokens=40, spec="none")[0]


def test_default_model_lookup_accepts_and_is_lossless(default_model, grounded_none):
    none = grounded_none
    look = default_model.generate(GROUNDED, max_tokens=40, spec="lookup", draft=8)[0]
    assert look.token_ids == none.token_ids and look.text == none.text
    assert none.tau == 1.0 and none.passes == len(none.token_ids)
    assert look.accepted > 0 and look.passes < none.passes
    assert "def average(numbers)" in look.text  # the model really copies its input


def test_default_model_stop_string_spanning_tokens(default_model, grounded_none):
    tokens = grounded_none.tokens
    # a stop string made of the end of one token and the start of the next
    i = next(j for j in range(3, len(tokens) - 1) if len(tokens[j]) >= 2 and len(tokens[j + 1]) >= 2)
    stop = tokens[i][-2:] + tokens[i + 1][:2]
    want = grounded_none.text[:grounded_none.text.find(stop)]
    r = default_model.generate(GROUNDED, max_tokens=40, spec="lookup", stops=[stop, "zzzq"])[0]
    assert r.finish == "stop" and r.text == want, stop
    assert "".join(default_model.stream(GROUNDED, max_tokens=40, spec="none", stops=[stop])) == want


def test_default_model_streaming_is_utf8_safe(default_model):
    prompt = "Japanese: \u304a\u306f\u3088\u3046\u3054\u3056\u3044\u307e\u3059\u3002 Chinese: \u65e9\u4e0a\u597d\u3002 Korean:"
    eng = default_model.engine(max_tokens=24, spec="lookup")
    eng.submit(default_model.requests([prompt], chat=False))
    pieces = []
    while eng.queue or eng.active:
        pieces += [eng.new_text(seq) for seq in eng.step()]
    [r] = eng.done.values()
    tok = default_model.tokenizer
    whole = tok.decode(r.token_ids)                      # decoded at once: no split characters
    naive = "".join(tok.token_text(t) for t in r.token_ids if t not in tok.eog_ids)
    assert "".join(pieces) == whole == r.text
    assert any(ord(c) > 0x2FF for c in whole)
    assert naive != whole  # some tokens hold parts of a character: a per-token decode would break them


def test_default_model_cli_no_model_argument(default_model, capfd):
    code, out, err = pti(["run", "-p", "Say hello.", "-n", "6", "--stats", "--spec", "none"], capfd)
    assert code == 0 and out.strip()
    assert err.startswith("tokens ") and "tau 1.000" in err
