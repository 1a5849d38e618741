"""Reading prompts: `-p TEXT` (repeatable), `--file prompts.jsonl|.txt`, or `-` (stdin).

* `.jsonl`: one JSON object per line, `{"prompt": "..."}` or
  `{"messages": [{"role": "...", "content": "..."}, ...]}`; blank lines are skipped.
* `.txt` (or any other suffix): one prompt per line; blank lines are skipped.
* `-`: the whole of stdin is one prompt.

Every problem is a PtiError naming the source and line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import PtiError


@dataclass
class Prompt:
    where: str                               # "-p #1", "prompts.jsonl line 3", "stdin": for errors
    text: str | None = None                  # a plain prompt
    messages: list[dict[str, str]] | None = None   # a chat conversation


def _check_text(text: str, where: str) -> str:
    try:
        text.encode("utf-8")  # argv with invalid bytes arrives as lone surrogates
    except UnicodeEncodeError:
        raise PtiError(f"{where}: prompt is not valid UTF-8") from None
    if not text.strip():
        raise PtiError(f"{where}: empty prompt")
    return text


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PtiError(f"{where}: not valid UTF-8") from None


def _messages(value, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise PtiError(f"{where}: \"messages\" must be a non-empty list")
    out = []
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise PtiError(f"{where}: message {i + 1} must be an object with string \"role\" and \"content\"")
        try:
            m["content"].encode("utf-8")
        except UnicodeEncodeError:
            raise PtiError(f"{where}: message {i + 1} is not valid UTF-8") from None
        out.append({"role": m["role"], "content": m["content"]})
    return out


def parse_jsonl_line(line: str, where: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise PtiError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise PtiError(f"{where}: expected a JSON object with \"prompt\" or \"messages\"")
    if "prompt" in obj and "messages" in obj:
        raise PtiError(f"{where}: give \"prompt\" or \"messages\", not both")
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise PtiError(f"{where}: \"prompt\" must be a string")
        return Prompt(where, text=_check_text(obj["prompt"], where))
    if "messages" in obj:
        return Prompt(where, messages=_messages(obj["messages"], where))
    raise PtiError(f"{where}: expected a JSON object with \"prompt\" or \"messages\"")


def read_file(path: Path) -> list[Prompt]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PtiError(f"prompts file not found: {path}") from None
    except IsADirectoryError:
        raise PtiError(f"prompts file is a directory: {path}") from None
    except OSError as e:
        raise PtiError(f"cannot read prompts file {path}: {e.strerror}") from None
    jsonl = path.suffix.lower() == ".jsonl"
    prompts = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        where = f"{path.name} line {i}"
        line = _decode(raw, where).rstrip("\r")
        if not line.strip():
            continue
        prompts.append(parse_jsonl_line(line, where) if jsonl else Prompt(where, text=_check_text(line, where)))
    if not prompts:
        raise PtiError(f"{path.name}: no prompts in file")
    return prompts


def read_stdin(stream=None) -> list[Prompt]:
    stream = stream if stream is not None else sys.stdin.buffer
    return [Prompt("stdin", text=_check_text(_decode(stream.read(), "stdin"), "stdin"))]


def gather(texts: list[str] | None, file: Path | None, stdin: bool) -> list[Prompt]:
    """Exactly one prompt source, as the CLI gives it."""
    given = sum([bool(texts), file is not None, stdin])
    if given == 0:
        raise PtiError("no prompt: give -p PROMPT, --file prompts.jsonl|.txt, or - for stdin")
    if given > 1:
        raise PtiError("give only one prompt source: -p, --file or - (stdin)")
    if texts:
        return [Prompt(f"-p #{i}", text=_check_text(t, f"-p #{i}")) for i, t in enumerate(texts, start=1)]
    if file is not None:
        return read_file(Path(file))
    return read_stdin()
