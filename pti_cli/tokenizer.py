"""The model's tokenizer, built from its GGUF `tokenizer.*` keys.

llama.cpp is the reference for GGUF files: ids must equal what it produces.
Hugging Face's GGUF conversion does not (it ignores `tokenizer.ggml.pre`, so
for SmolLM2 "\\n\\n1" becomes three tokens instead of llama.cpp's two), so we
assemble a `tokenizers` pipeline ourselves:

  BPE  (`tokenizer.ggml.model == "gpt2"`): the pre-tokenizer regexes llama.cpp
       lists for the `tokenizer.ggml.pre` type, applied one after the other as
       `Split(..., "isolated")` (llama.cpp keeps matched and unmatched pieces),
       then `ByteLevel(use_regex=False)`; a BPE model from tokens + merges.
  SPM  (`tokenizer.ggml.model == "llama"`): spaces become U+2581 with a
       leading one per text fragment; llama.cpp merges the adjacent pair whose
       joined text is the highest-scoring token, which is BPE with merges
       ranked by that score; unknown characters fall back to <0xXX> tokens.

Control tokens (token_type CONTROL / UNKNOWN) are special added tokens, only
matched when parse_special is on; USER_DEFINED tokens are always matched.
"""

from __future__ import annotations

import codecs
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers

from .errors import PtiError

# gguf.TokenType values (kept here so the module reads without gguf-py).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# --- llama.cpp's pre-tokenizer regexes (src/llama-vocab.cpp, llm_tokenizer_bpe) ---
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]
_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTIONS + "?"
          r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTIONS + "?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_DEEPSEEK3 = [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
              r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
              r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]

PRE_REGEXES: dict[str, list[str]] = {
    "default": _DEFAULT,
    "llama3": [_LLAMA3], "dbrx": [_LLAMA3], "smaug": [_LLAMA3], "chatglm4": [_LLAMA3],
    "smollm": [r"\p{N}", _GPT2],  # also starcoder, refact, command-r, codeshell, exaone, minerva
    "gpt2": [_GPT2],
    "qwen2": [_QWEN2],
    "qwen35": [_QWEN35],
    "tekken": [_TEKKEN],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "gpt4o": [_GPT4O],
    "seed-coder": [_SEED_CODER],
    "bailingmoe": [_BAILINGMOE],
    "deepseek3": _DEEPSEEK3,
    "poro": [r" ?[^(\s|.,!?…。，、।۔،)]+"],
    "viking": [r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
}

# tokenizer.ggml.pre value -> (regex family, add_bos default, ignore_merges)
_PRE_TYPES: dict[str, tuple[str, bool, bool]] = {"default": ("default", False, False)}
for _names, _family, _bos, _ignore in [
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"),
     "llama3", True, True),
    (("dbrx",), "dbrx", False, False), (("smaug-bpe",), "smaug", False, False),
    (("glm4", "chatglm-bpe"), "chatglm4", False, False),
    (("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"),
     "smollm", False, False),
    (("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "roberta-bpe",
      "jina-v1-en", "jina-v2-code"), "gpt2", False, False),
    (("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "kormo", "f2llmv2",
      "solar-open", "grok-2"), "qwen2", False, False),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), "gpt4o", False, False),
    (("seed-coder",), "seed-coder", False, False),
    (("bailingmoe", "bailingmoe2", "llada-moe"), "bailingmoe", False, False),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), "deepseek3", False, False),
    (("qwen35",), "qwen35", False, False),
    (("tekken",), "tekken", True, True),
    (("falcon",), "falcon", False, False),
    (("deepseek-coder",), "deepseek-coder", False, False),
    (("poro-chat", "bloom", "gpt3-finnish"), "poro", False, False),
    (("viking",), "viking", False, False),
]:
    for _name in _names:
        _PRE_TYPES[_name] = (_family, _bos, _ignore)

# Token texts llama.cpp treats as end of generation (besides eos/eot/eom ids).
EOG_TEXTS = frozenset([
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
])
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
              "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>")
# Fill-in-the-middle markers llama.cpp finds by text when the keys are absent; they
# become control tokens, and pad/rep/sep also end generation.
_FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>",
            "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>",
            "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>",
            "\u2581<MID>", "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
_FIM_KEYS = {"pre": ("fim_pre", "prefix"), "suf": ("fim_suf", "suffix"), "mid": ("fim_mid", "middle"),
             "pad": ("fim_pad",), "rep": ("fim_rep",), "sep": ("fim_sep",)}


def gguf_metadata(path: str | Path) -> dict[str, Any]:
    """A GGUF file's key/value metadata as plain Python values (gguf-py reads it)."""
    from gguf import GGUFReader
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # gguf-py raises assorted errors on bad files
        raise PtiError(f"cannot read GGUF metadata from {path}: {e}") from None
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.")}


def _plain(value: Any) -> Any:
    """Accept Checkpoint-style (value, type, item_type) tuples as well as plain values."""
    if isinstance(value, tuple) and len(value) in (2, 3) and type(value[1]).__name__ == "GGUFValueType":
        return value[0]
    return value


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, char -> byte: printable Latin-1 bytes stand for
    themselves, the other 68 bytes for chars from U+0100 on, in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in keep}
    spare = 0x100
    for b in range(256):
        if b not in keep:
            table[chr(spare)] = b
            spare += 1
    return table


@dataclass(frozen=True)
class _Vocab:
    model: str                 # "gpt2" | "llama"
    pre: str                   # tokenizer.ggml.pre as written ("" when absent)
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    merges: list[str] | None


def _read_vocab(meta: dict[str, Any]) -> _Vocab:
    model = _plain(meta.get("tokenizer.ggml.model"))
    if model is None:
        raise PtiError("the model file has no tokenizer (tokenizer.ggml.model is missing)")
    if model not in ("gpt2", "llama"):
        raise PtiError(f"unsupported tokenizer model {model!r} (supported: gpt2 BPE, llama SPM)")
    tokens = _plain(meta.get("tokenizer.ggml.tokens"))
    if not tokens:
        raise PtiError("the model file has no tokenizer.ggml.tokens")
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    types = _plain(meta.get("tokenizer.ggml.token_type")) or [NORMAL] * len(tokens)
    if len(types) < len(tokens):
        raise PtiError("tokenizer.ggml.token_type is shorter than tokenizer.ggml.tokens")
    scores = _plain(meta.get("tokenizer.ggml.scores"))
    merges = _plain(meta.get("tokenizer.ggml.merges"))
    if model == "gpt2" and merges is None:
        raise PtiError("BPE tokenizer without tokenizer.ggml.merges")
    return _Vocab(model, _plain(meta.get("tokenizer.ggml.pre")) or "", list(tokens),
                  [int(t) for t in types[:len(tokens)]],
                  [float(s) for s in scores] if scores is not None else None,
                  list(merges) if merges is not None else None)


def _split_merge(merge: str) -> tuple[str, str] | None:
    pos = merge.find(" ", 1)  # as llama.cpp: the first space after the first char
    return (merge[:pos], merge[pos + 1:]) if pos > 0 else None


def _bpe_pipeline(v: _Vocab, vocab: dict[str, int], ignore_merges: bool) -> HFTokenizer:
    family = _PRE_TYPES[v.pre][0] if v.pre else "default"
    merges = []
    for m in v.merges:
        pair = _split_merge(m)
        # tokenizers needs both halves and their join in the vocabulary; llama.cpp
        # would merge then fall back to bytes, which no real vocab relies on.
        if pair and pair[0] in vocab and pair[1] in vocab and pair[0] + pair[1] in vocab:
            merges.append(pair)
    tk = HFTokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(rx), behavior="isolated") for rx in PRE_REGEXES[family]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def _spm_merges(v: _Vocab, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of every token into two tokens, ranked by the joined token's score.

    llama.cpp's SPM loop merges the adjacent pair whose joined text is the
    highest-scoring token; BPE over these ranked merges takes the same steps."""
    ranked = []
    for text, tid in vocab.items():
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in vocab and right in vocab:
                ranked.append((-v.scores[tid], tid, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def _spm_pipeline(v: _Vocab, vocab: dict[str, int], add_space_prefix: bool) -> HFTokenizer:
    if v.scores is None:
        raise PtiError("SPM tokenizer without tokenizer.ggml.scores")
    tk = HFTokenizer(models.BPE(vocab, _spm_merges(v, vocab), byte_fallback=True))
    steps = [normalizers.Prepend("▁")] if add_space_prefix else []
    tk.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse()])
    return tk


class Tokenizer:
    """Text <-> token ids exactly as llama.cpp does it for the same GGUF keys."""

    def __init__(self, v: _Vocab, meta: dict[str, Any]):
        get = lambda key, default=None: _plain(meta.get(key, default))  # noqa: E731
        self.model_kind, self.pre = v.model, v.pre
        self.tokens, self.types = v.tokens, v.types
        self.vocab_size = len(v.tokens)
        vocab: dict[str, int] = {}
        for i, t in enumerate(v.tokens):
            if vocab.setdefault(t, i) != i:
                raise PtiError(f"duplicate token {t!r} in the vocabulary (ids {vocab[t]} and {i})")

        if v.model == "gpt2":
            if v.pre and v.pre not in _PRE_TYPES:
                raise PtiError(f"unsupported pre-tokenizer type {v.pre!r} (tokenizer.ggml.pre)")
            _, add_bos_default, ignore_merges = _PRE_TYPES[v.pre] if v.pre else _PRE_TYPES["default"]
            bos_default, eos_default = 11, 11
            self.add_space_prefix = False
            self._tk = _bpe_pipeline(v, vocab, ignore_merges)
        else:
            add_bos_default, bos_default, eos_default = True, 1, 2
            self.add_space_prefix = bool(get("tokenizer.ggml.add_space_prefix", True))
            self._tk = _spm_pipeline(v, vocab, self.add_space_prefix)

        def special_id(key: str, default: int | None) -> int | None:
            value = get(key)
            if value is not None and 0 <= int(value) < self.vocab_size:
                return int(value)
            return default if default is not None and default < self.vocab_size else None

        self.bos_id = special_id("tokenizer.ggml.bos_token_id", bos_default)
        self.eos_id = special_id("tokenizer.ggml.eos_token_id", eos_default)
        self.eot_id = special_id("tokenizer.ggml.eot_token_id", None)
        self.eom_id = special_id("tokenizer.ggml.eom_token_id", None)
        types = list(v.types)
        found_by_text = []
        if self.eot_id is None:
            self.eot_id = next((vocab[t] for t in _EOT_TEXTS if t in vocab), None)
            found_by_text.append(self.eot_id)
        if self.eom_id is None and "<|eom_id|>" in vocab:
            self.eom_id = vocab["<|eom_id|>"]
            found_by_text.append(self.eom_id)
        fim = {}
        for kind, keys in _FIM_KEYS.items():
            fim[kind] = next((i for k in keys
                              if (i := special_id(f"tokenizer.ggml.{k}_token_id", None)) is not None), None)
            if fim[kind] is None:
                fim[kind] = next((vocab[t] for t in _FIM_TEXTS[kind] if t in vocab), None)
                found_by_text.append(fim[kind])
        self.fim_ids = fim
        self.add_bos = bool(get("tokenizer.ggml.add_bos_token", add_bos_default))
        self.add_eos = bool(get("tokenizer.ggml.add_eos_token", False))
        if self.add_bos and self.bos_id is None:
            raise PtiError("tokenizer.ggml.add_bos_token is true but there is no BOS token")

        # llama.cpp makes control-looking texts control tokens and stops on them;
        # gpt-oss's message markers are always rendered (user-defined).
        by_text = {i for t, i in vocab.items() if t in EOG_TEXTS}
        for i in by_text | {i for i in found_by_text if i is not None}:
            types[i] = CONTROL
        for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            if t in vocab:
                types[vocab[t]] = USER_DEFINED
        self.types = types
        ends = {i for i in (self.eos_id, self.eot_id, self.eom_id, fim["pad"], fim["rep"], fim["sep"])
                if i is not None}
        self.eog_ids = frozenset(by_text | ends)

        self._add_special_tokens(types, model_name=str(get("general.name", "")).lower())
        self._lock = threading.Lock()
        self._piece_bytes: list[bytes] | None = None

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> "Tokenizer":
        return cls(_read_vocab(meta), meta)

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        return cls.from_metadata(gguf_metadata(path))

    def _add_special_tokens(self, types: list[int], model_name: str) -> None:
        special, user = [], []
        for text, t in zip(self.tokens, types):
            if t in (CONTROL, UNKNOWN, USER_DEFINED):
                tok = AddedToken(text, special=t != USER_DEFINED, normalized=False)
                (user if t == USER_DEFINED else special).append(tok)
        if special:
            self._tk.add_special_tokens(special)
        if user:
            self._tk.add_tokens(user)
        # Phi-3: llama.cpp drops ASCII whitespace after its special tokens (not after
        # <unk>, <s>, <|endoftext|>).  tokenizers' rstrip would also eat Unicode
        # spaces, so the text is stripped here, before tokenizers sees it.
        self._rstrip = {True: None, False: None}
        if "phi-3" in model_name or "phi3" in model_name:
            keep = {"<unk>", "<s>", "<|endoftext|>"}
            strip = [(text, t) for text, t in zip(self.tokens, types)
                     if t in (CONTROL, UNKNOWN, USER_DEFINED) and text not in keep]
            for parse_special in (True, False):
                texts = sorted((x for x, t in strip if parse_special or t == USER_DEFINED),
                               key=len, reverse=True)
                if texts:
                    alt = "|".join(re.escape(x) for x in texts)
                    self._rstrip[parse_special] = re.compile(f"({alt})[ \t\n\v\f\r]+")

    # --- encoding ---------------------------------------------------------------
    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]:
        """Token ids of text.

        add_bos: None = as the model says (llama.cpp's add_special: BOS when
        tokenizer.ggml.add_bos_token, EOS when add_eos_token); True/False forces BOS.
        parse_special: match control-token texts like "<|im_start|>" as those tokens."""
        if not isinstance(text, str):
            raise PtiError("text to tokenize must be a str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates, e.g. from a JSON "\ud800"
            raise PtiError(f"text is not valid Unicode (character {e.start}: "
                           f"{text[e.start]!r})") from None
        ids: list[int] = []
        if self._rstrip[parse_special] is not None:
            text = self._rstrip[parse_special].sub(r"\1", text)
        if text:
            with self._lock:  # encode_special_tokens is tokenizer-wide state
                self._tk.encode_special_tokens = not parse_special
                ids = self._tk.encode(text, add_special_tokens=False).ids
        with_bos = self.add_bos if add_bos is None else add_bos
        if with_bos:
            if self.bos_id is None:
                raise PtiError("this model has no BOS token")
            ids = [self.bos_id] + ids
        if add_bos is None and self.add_eos and self.eos_id is not None:
            ids = ids + [self.eos_id]
        return ids

    # --- decoding ---------------------------------------------------------------
    def piece_bytes(self, token_id: int) -> bytes:
        """The bytes token_id stands for (control tokens: their text)."""
        if self._piece_bytes is None:
            self._piece_bytes = self._build_piece_bytes()
        return self._piece_bytes[token_id]

    def _build_piece_bytes(self) -> list[bytes]:
        # Not the pipeline's decoder: tokenizers runs user-defined tokens' text
        # (e.g. deepseek-coder's "ö") through ByteLevel too and garbles it, and
        # streaming needs bytes per token anyway.
        pieces = []
        if self.model_kind == "gpt2":
            table = byte_level_alphabet()
            # a char outside the byte alphabet (some vocabs hold a few unreachable ones)
            # is kept as its text; llama.cpp writes "[UNK_BYTE_0x...]" there instead
            normal = lambda text: b"".join(  # noqa: E731
                bytes([table[c]]) if c in table else c.encode("utf-8") for c in text)
        else:
            normal = lambda text: text.replace("\u2581", " ").encode("utf-8")  # noqa: E731
        # as llama.cpp's token_to_piece: special kinds verbatim, normal decoded,
        # byte tokens <0xXX> one byte, anything else (unused, undefined) nothing.
        for text, t in zip(self.tokens, self.types):
            if t in (CONTROL, USER_DEFINED, UNKNOWN):
                pieces.append(text.encode("utf-8"))
            elif t == NORMAL:
                pieces.append(normal(text))
            elif t == BYTE and len(text) == 6 and text.startswith("<0x"):
                pieces.append(bytes([int(text[3:5], 16)]))
            else:
                pieces.append(b"")
        return pieces

    def is_control(self, token_id: int) -> bool:
        return self.types[token_id] in (CONTROL, UNKNOWN)

    def decode_bytes(self, ids: Iterable[int], special: bool = False) -> bytes:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise PtiError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
            if special or not self.is_control(i):
                out.append(self.piece_bytes(i))
        return b"".join(out)

    def decode(self, ids: Iterable[int], special: bool = False) -> str:
        """Text of ids; control tokens are left out unless special (as llama.cpp's token_to_piece)."""
        return self.decode_bytes(ids, special).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """One token's text for display (may hold a partial UTF-8 character as U+FFFD)."""
        return self.piece_bytes(token_id).decode("utf-8", errors="replace")

    @property
    def stop_ids(self) -> frozenset[int]:
        return self.eog_ids


class StreamDecoder:
    """Turns ids into text as they come, never splitting a multi-byte UTF-8 character.

    feed() returns only complete characters; bytes of a character that a later
    token completes wait inside; flush() returns what is left (an incomplete
    tail becomes U+FFFD).  The concatenated output equals tokenizer.decode(all ids)."""

    def __init__(self, tokenizer: Tokenizer, special: bool = False):
        self.tokenizer, self.special = tokenizer, special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: int | Iterable[int]) -> str:
        if isinstance(ids, int):
            ids = [ids]
        return self._utf8.decode(self.tokenizer.decode_bytes(ids, self.special))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)
