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
