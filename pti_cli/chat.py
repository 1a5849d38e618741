"""Chat templates from the model file, rendered in jinja2's sandbox.

A template is code shipped inside a downloaded file, so it runs only in
`ImmutableSandboxedEnvironment`: no attribute access to Python internals, no
mutation of the objects we pass in.  Any template error is a PtiError."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from .errors import PtiError

TEMPLATE_KEY = "tokenizer.chat_template"


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) in (2, 3) and type(value[1]).__name__ == "GGUFValueType":
        return value[0]
    return value


def chat_template(meta: dict[str, Any]) -> str | None:
    template = _plain(meta.get(TEMPLATE_KEY))
    return template if isinstance(template, str) and template.strip() else None


def has_chat_template(meta: dict[str, Any]) -> bool:
    return chat_template(meta) is not None


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # templates expect plain JSON (jinja's own tojson HTML-escapes <, >, &, ')
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _Sandbox(ImmutableSandboxedEnvironment):
    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # jinja's default hands back an Undefined that prints as ""; a template
        # reaching for Python internals is refused outright instead.
        raise SecurityError(f"access to attribute {attribute!r} of a "
                            f"{type(obj).__name__!r} object is unsafe")


def _environment() -> ImmutableSandboxedEnvironment:
    # the settings templates are written for (those of transformers' apply_chat_template)
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, autoescape=False,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def check_messages(messages: Any) -> list[dict[str, str]]:
    """Messages as a list of {"role", "content"} string dicts, or PtiError."""
    if not isinstance(messages, list) or not messages:
        raise PtiError("messages must be a non-empty list of {\"role\": ..., \"content\": ...} objects")
    out = []
    for n, m in enumerate(messages, 1):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise PtiError(f"message {n} must be an object with string \"role\" and \"content\"")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def render_chat(template: str, messages: list[dict[str, str]], bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, **extra: Any) -> str:
    """The prompt text the template makes of messages."""
    messages = check_messages(messages)
    try:
        compiled = _environment().from_string(template)
        return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token=bos_token, eos_token=eos_token, **extra)
    except _TemplateRaised as e:
        raise PtiError(f"the chat template refused the messages: {e}") from None
    except SecurityError as e:
        raise PtiError(f"the chat template tried an unsafe operation: {e}") from None
    except jinja2.TemplateError as e:
        raise PtiError(f"chat template error: {type(e).__name__}: {e}") from None
    except Exception as e:  # anything else the template's code trips on
        raise PtiError(f"chat template failed: {type(e).__name__}: {e}") from None


def apply_chat_template(meta: dict[str, Any], messages: list[dict[str, str]], tokenizer=None,
                        add_generation_prompt: bool = True) -> str:
    """Render the model file's own template; bos/eos texts come from its tokenizer.

    When the tokenizer adds BOS itself (tokenizer.ggml.add_bos_token), a BOS text
    the template wrote at the start is dropped, as llama.cpp does, so encoding
    the result with add_bos=None gives one BOS, not two."""
    template = chat_template(meta)
    if template is None:
        raise PtiError("this model has no chat template; use --raw")
    bos = eos = ""
    if tokenizer is not None:
        bos = tokenizer.tokens[tokenizer.bos_id] if tokenizer.bos_id is not None else ""
        eos = tokenizer.tokens[tokenizer.eos_id] if tokenizer.eos_id is not None else ""
    text = render_chat(template, messages, bos_token=bos, eos_token=eos,
                       add_generation_prompt=add_generation_prompt)
    if tokenizer is not None and tokenizer.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]
    return text
