"""Chat templates: rendered from the model file in jinja2's immutable sandbox."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pti_cli.chat import apply_chat_template, has_chat_template, render_chat
from pti_cli.errors import PtiError
from pti_cli.tokenizer import Tokenizer, gguf_metadata

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@pytest.fixture(scope="module")
def smollm2_meta(smollm2_gguf):
    meta = gguf_metadata(smollm2_gguf)
    return {k: v for k, v in meta.items() if k.startswith("tokenizer.") or k == "general.name"}


def chatml(*turns: tuple[str, str], generation_prompt: bool = True) -> str:
    """ChatML as SmolLM2's template writes it: one <|im_start|>role\\ncontent<|im_end|>\\n per turn."""
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


def test_has_chat_template(smollm2_meta):
    assert has_chat_template(smollm2_meta)
    assert not has_chat_template({})
    assert not has_chat_template({"tokenizer.chat_template": "  \n"})


def test_smollm2_adds_its_default_system_turn(smollm2_meta):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    text = apply_chat_template(smollm2_meta, msgs)
    assert text == chatml(("system", SYSTEM), ("user", "What is 2+2?"))


def test_smollm2_keeps_a_given_system_turn_and_history(smollm2_meta):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye\n\n1"}]
    assert apply_chat_template(smollm2_meta, msgs) == chatml(
        ("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye\n\n1"))
    assert apply_chat_template(smollm2_meta, msgs, add_generation_prompt=False) == chatml(
        ("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye\n\n1"),
        generation_prompt=False)


def test_rendered_prompt_tokenizes_with_control_tokens(smollm2_meta):
    tok = Tokenizer.from_metadata(smollm2_meta)
    text = apply_chat_template(smollm2_meta, [{"role": "user", "content": "Hi"}], tokenizer=tok)
    ids = tok.encode(text)
    im_start, im_end = tok.tokens.index("<|im_start|>"), tok.tokens.index("<|im_end|>")
    assert ids[0] == im_start and ids.count(im_start) == 3 and ids.count(im_end) == 2
    assert im_end in tok.stop_ids
    assert tok.decode(ids, special=True) == text


def test_template_bos_is_not_doubled_when_the_tokenizer_adds_one():
    meta = {"tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}<{{ m.content }}>{% endfor %}"}
    msgs = [{"role": "user", "content": "hi"}]
    adds = SimpleNamespace(tokens=["<s>", "</s>"], bos_id=0, eos_id=1, add_bos=True)
    keeps = SimpleNamespace(tokens=["<s>", "</s>"], bos_id=0, eos_id=1, add_bos=False)
    assert apply_chat_template(meta, msgs, tokenizer=adds) == "<hi>"
    assert apply_chat_template(meta, msgs, tokenizer=keeps) == "<s><hi>"


def test_bos_eos_and_helpers_reach_the_template():
    template = ("{{ bos_token }}{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}"
                "[{{ m.role }}]{{ m.content | tojson }}{% endfor %}{{ eos_token }}"
                "{% if add_generation_prompt %}>{% endif %}")
    msgs = [{"role": "user", "content": "a<b & \"c\" é"}, {"role": "skip", "content": "x"}]
    assert render_chat(template, msgs, bos_token="<s>", eos_token="</s>") == \
        '<s>[user]"a<b & \\"c\\" é"</s>>'


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__ }}",
    "{{ raise_exception.__globals__ }}",
    "{% set _ = messages.append({'role': 'x', 'content': 'y'}) %}",
    "{% set _ = messages[0].update({'role': 'x'}) %}",
    "{% for i in range(10**9) %}{% endfor %}",
])
def test_sandbox_blocks_unsafe_templates(template):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(PtiError) as err:
        render_chat(template, msgs)
    assert "\n" not in str(err.value)
    assert msgs == [{"role": "user", "content": "hi"}]


def test_template_errors_are_pti_errors():
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(PtiError, match="refused the messages: only user and assistant"):
        render_chat("{{ raise_exception('only user and assistant roles') }}", msgs)
    with pytest.raises(PtiError, match="chat template error"):
        render_chat("{% for m in messages %}", msgs)
    with pytest.raises(PtiError, match="chat template"):
        render_chat("{{ messages[5].content.upper() }}", msgs)
    with pytest.raises(PtiError, match="no chat template"):
        apply_chat_template({}, msgs)


@pytest.mark.parametrize("messages", [[], "hi", [{"role": "user"}], [{"role": 1, "content": "x"}],
                                      [["user", "hi"]]])
def test_bad_messages(messages):
    with pytest.raises(PtiError, match="message"):
        render_chat("{{ messages }}", messages)
