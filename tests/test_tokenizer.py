"""Token ids against llama.cpp's, from fixtures made by scripts/make_tokenizer_fixtures.py.

Each fixture holds, for one GGUF vocabulary, a few hundred strings tokenized
by llama.cpp (llama-cpp-python) in all four modes (add_special x
parse_special), the BOS/EOS/EOG ids and a digest of every token's piece.  The
vocabularies are llama.cpp's own vocab-only GGUFs (committed, xz-compressed)
and the embedded default model."""

from __future__ import annotations

import hashlib
import json
import lzma
import random
from pathlib import Path

import pytest

from pti_cli.errors import PtiError
from pti_cli.tokenizer import (CONTROL, StreamDecoder, Tokenizer, byte_level_alphabet,
                               gguf_metadata)

FIXTURES = Path(__file__).parent / "fixtures" / "tokenizer"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
MODES = {"bos1_sp1": (None, True), "bos1_sp0": (None, False),
         "bos0_sp1": (False, True), "bos0_sp0": (False, False)}


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


_SOURCES: dict[str, dict] = {}   # metadata per vocab file
_METADATA: dict[str, dict] = {}  # per fixture (a file's metadata with the fixture's pre)


def source_metadata(fx: dict, tmp_dir: Path) -> dict:
    """GGUF metadata of the fixture's vocab file; checks it is the file llama.cpp read."""
    source = fx["source"]
    if source not in _SOURCES:
        if source.endswith(".xz"):
            raw = lzma.decompress((FIXTURES / source).read_bytes())
            path = tmp_dir / source[:-3]
            path.write_bytes(raw)
        else:
            from pti_cli.default_model import default_gguf
            path = default_gguf()
            assert path.name == source
            raw = path.read_bytes()
        assert hashlib.sha256(raw).hexdigest() == fx["gguf_sha256"], "not the vocab the fixture was made from"
        meta = gguf_metadata(path)
        _SOURCES[source] = {k: v for k, v in meta.items()
                            if k.startswith("tokenizer.") or k == "general.name"}
    return _SOURCES[source]


def vocab_metadata(name: str, tmp_dir: Path) -> dict:
    """The metadata llama.cpp tokenized the fixture with: some fixtures reuse a vocab
    file under another tokenizer.ggml.pre ("" = key removed) to cover that type."""
    if name not in _METADATA:
        fx = load_fixture(name)
        meta = dict(source_metadata(fx, tmp_dir))
        if fx.get("pre_override") is not None:
            meta.pop("tokenizer.ggml.pre", None)
            if fx["pre_override"]:
                meta["tokenizer.ggml.pre"] = fx["pre_override"]
        _METADATA[name] = meta
    return _METADATA[name]


_TOKENIZERS: dict[str, Tokenizer] = {}


@pytest.fixture(scope="module")
def tokenizer_for(tmp_path_factory):
    def get(name: str) -> Tokenizer:
        if name not in _TOKENIZERS:
            _TOKENIZERS[name] = Tokenizer.from_metadata(vocab_metadata(name, tmp_path_factory.mktemp(name)))
        return _TOKENIZERS[name]
    return get


def test_fixture_set_covers_the_pre_tokenizers():
    pres = {load_fixture(n)["pre"] for n in NAMES}
    assert {"smollm", "gpt-2", "llama-bpe", "qwen2", "deepseek-coder", "falcon", "mpt", None, "tekken",
            "qwen35", "gpt-4o", "dbrx", "poro-chat", "viking", "seed-coder", "bailingmoe",
            "deepseek-v3"} <= pres
    assert {"smollm2", "llama-spm", "phi-3"} <= set(NAMES) and len(NAMES) >= 19
    for n in NAMES:
        assert len(load_fixture(n)["cases"]) >= 300


@pytest.mark.parametrize("name", NAMES)
def test_ids_match_llama_cpp(name, tokenizer_for):
    fx, tok = load_fixture(name), tokenizer_for(name)
    wrong, checked = [], 0
    for case in fx["cases"]:
        for mode, (add_bos, parse_special) in MODES.items():
            got = tok.encode(case["text"], add_bos=add_bos, parse_special=parse_special)
            checked += 1
            if got != case["ids"][mode]:
                wrong.append((mode, case["text"], got, case["ids"][mode]))
    assert checked == 4 * len(fx["cases"])
    assert not wrong, f"{len(wrong)}/{checked} differ from llama.cpp, e.g. {wrong[:3]}"


@pytest.mark.parametrize("name", NAMES)
def test_special_ids_match_llama_cpp(name, tokenizer_for):
    fx, tok = load_fixture(name), tokenizer_for(name)
    assert tok.vocab_size == fx["n_vocab"]
    assert tok.bos_id == fx["bos_id"] and tok.eos_id == fx["eos_id"]
    assert tok.add_bos == fx["add_bos"] and tok.add_eos == fx["add_eos"]
    assert sorted(tok.eog_ids) == fx["eog_ids"]
    assert tok.eos_id in tok.stop_ids


@pytest.mark.parametrize("name", NAMES)
def test_every_piece_matches_llama_cpp(name, tokenizer_for):
    """Decoding: each token's bytes equal llama.cpp's token_to_piece(special=True)."""
    fx, tok = load_fixture(name), tokenizer_for(name)
    h = hashlib.sha256()
    for i in range(tok.vocab_size):
        piece = tok.piece_bytes(i)
        h.update(len(piece).to_bytes(4, "little") + piece)
    assert h.hexdigest() == fx["piece_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_decode_round_trips(name, tokenizer_for):
    fx, tok = load_fixture(name), tokenizer_for(name)
    for case in fx["cases"]:
        text = case["text"]
        ids = case["ids"]["bos0_sp0"]  # llama.cpp's ids, all of it plain text
        want = (" " + text) if tok.add_space_prefix and text else text
        assert tok.decode(ids) == want
        if tok.model_kind == "gpt2":  # byte-level BPE is lossless with special tokens too
            assert tok.decode(tok.encode(text, add_bos=False), special=True) == text


def test_decode_leaves_out_control_tokens_unless_asked(tokenizer_for):
    tok = tokenizer_for("smollm2")
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n")
    assert ids[0] == 1 and tok.types[1] == CONTROL
    assert tok.decode(ids) == "user\nHi\n"
    assert tok.decode(ids, special=True) == "<|im_start|>user\nHi<|im_end|>\n"


def test_smollm2_blank_line_before_digit(tokenizer_for):
    """The input where Hugging Face's GGUF conversion and llama.cpp part ways."""
    tok = tokenizer_for("smollm2")
    fx = {c["text"]: c["ids"] for c in load_fixture("smollm2")["cases"]}
    assert tok.encode("\n\n1", add_bos=False) == fx["\n\n1"]["bos0_sp1"]
    assert len(fx["\n\n1"]["bos0_sp1"]) == 2  # "\n\n" then "1"


@pytest.mark.slow
def test_hf_gguf_conversion_differs_on_blank_line_digit(tokenizer_for):
    """Why we build our own pipeline: transformers' GGUF tokenizer ignores
    tokenizer.ggml.pre "smollm" (digits split first), llama.cpp does not."""
    from transformers import AutoTokenizer
    from pti_cli.default_model import default_gguf
    path = default_gguf()
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    llama_cpp_ids = {c["text"]: c["ids"]["bos0_sp1"] for c in load_fixture("smollm2")["cases"]}
    tok = tokenizer_for("smollm2")
    for text in ("\n\n1", "a\n\n1", "1\n\n2"):
        theirs = hf.encode(text, add_special_tokens=False)
        assert tok.encode(text, add_bos=False) == llama_cpp_ids[text]
        assert theirs != llama_cpp_ids[text], (text, theirs)
    # where the pre-tokenizer does not matter they agree, so the difference is the pre-tokenizer
    assert hf.encode("Hello world", add_special_tokens=False) == llama_cpp_ids["Hello world"]


def test_byte_level_alphabet_matches_tokenizers():
    from tokenizers import pre_tokenizers
    table = byte_level_alphabet()
    assert sorted(table.values()) == list(range(256))
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    text = "A b\n\té€😀"
    mapped = pre.pre_tokenize_str(text)[0][0]
    assert bytes(table[c] for c in mapped) == text.encode("utf-8")


def test_stream_decoder_never_splits_a_character(tokenizer_for):
    tok = tokenizer_for("smollm2")
    rng = random.Random(7)
    text = "Emoji 😀👍🏽 and 日本語のテキスト, café, 한국어 🇫🇷 end"
    ids = tok.encode(text, add_bos=False)
    # the multi-byte chars really are split across tokens here, or this proves nothing
    assert any(tok.token_text(i).count("\ufffd") for i in ids)
    for _ in range(20):
        stream, parts, pos = StreamDecoder(tok), [], 0
        while pos < len(ids):
            step = rng.randint(1, 3)
            parts.append(stream.feed(ids[pos:pos + step]))
            pos += step
        parts.append(stream.flush())
        assert all("\ufffd" not in p for p in parts)
        assert "".join(parts) == text
    one = StreamDecoder(tok)
    pieces = [one.feed(i) for i in ids] + [one.flush()]
    assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)


def test_stream_decoder_flushes_an_incomplete_tail(tokenizer_for):
    tok = tokenizer_for("smollm2")
    ids = tok.encode("😀", add_bos=False)
    assert len(ids) > 1
    stream = StreamDecoder(tok)
    assert stream.feed(ids[:-1]) == ""
    assert stream.flush() == "\ufffd"


def test_spm_model_with_unsupported_type_is_named():
    meta = {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]}
    with pytest.raises(PtiError, match="unsupported tokenizer model 'bert'"):
        Tokenizer.from_metadata(meta)


def test_bad_tokenizer_metadata():
    with pytest.raises(PtiError, match="no tokenizer"):
        Tokenizer.from_metadata({})
    base = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
            "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "no-such-pre"}
    with pytest.raises(PtiError, match="unsupported pre-tokenizer type 'no-such-pre'"):
        Tokenizer.from_metadata(base)
    dup = dict(base, **{"tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": ["a", "b", "a"]})
    with pytest.raises(PtiError, match="duplicate token"):
        Tokenizer.from_metadata(dup)


def test_encode_rejects_lone_surrogates(tokenizer_for):
    tok = tokenizer_for("smollm2")
    with pytest.raises(PtiError, match="not valid Unicode"):
        tok.encode("a\ud800b")


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer_for):
    tok = tokenizer_for("smollm2")
    with pytest.raises(PtiError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


@pytest.mark.parametrize("name", ["smollm2", "llama-bpe", "qwen2", "deepseek-coder", "falcon"])
def test_fixtures_catch_a_wrong_pre_tokenizer(name, tokenizer_for, tmp_path):
    """The fixtures can fail: the plain GPT-2 regex in place of the file's own
    pre-tokenizer type disagrees with llama.cpp on many strings."""
    tokenizer_for(name)  # metadata cached by now
    meta = dict(_METADATA[name], **{"tokenizer.ggml.pre": "gpt-2"})
    wrong_pre = Tokenizer.from_metadata(meta)
    cases = load_fixture(name)["cases"]
    differ = sum(wrong_pre.encode(c["text"], add_bos=False) != c["ids"]["bos0_sp1"] for c in cases)
    assert differ >= 20, differ


def test_stream_decoder_across_spm_byte_tokens(tokenizer_for):
    """SPM spells characters it has no token for as <0xXX> byte tokens, one per byte."""
    tok = tokenizer_for("llama-spm")
    text = "🤖 says 👨‍👩‍👧 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"
    ids = tok.encode(text, add_bos=False, parse_special=False)
    byte_tokens = [i for i in ids if tok.tokens[i].startswith("<0x")]
    assert len(byte_tokens) >= 8
    stream = StreamDecoder(tok)
    parts = [stream.feed(i) for i in ids] + [stream.flush()]
    assert all("\ufffd" not in p for p in parts)
    assert "".join(parts) == " " + text  # SPM's leading space of the first fragment


def test_gguf_metadata_of_a_non_gguf_file(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(PtiError, match="cannot read GGUF metadata"):
        gguf_metadata(bad)
