"""Regenerate tests/fixtures/tokenizer/*.json: token ids made by llama.cpp.

llama.cpp is the reference tokenizer for GGUF files.  This script runs in its
own environment with llama-cpp-python (which builds llama.cpp; CI never needs it)
and gguf-py:

    python3 -m venv /work/venv-llama
    /work/venv-llama/bin/pip install llama-cpp-python numpy gguf
    /work/venv-llama/bin/python scripts/make_tokenizer_fixtures.py --regen \
        --default-model /path/to/SmolLM2-135M-Instruct.Q4_1.gguf

--regen remakes every committed fixture from the source it records.  Or name
vocabularies: NAME=PATH, a GGUF file (optionally .xz-compressed); NAME=PATH@PRE
uses that file's vocabulary with tokenizer.ggml.pre set to PRE ("@" alone: key
removed, llama.cpp's "default"), to cover pre-tokenizer types that have no
vocab file here.  --out DIR writes elsewhere (default tests/fixtures/tokenizer).

The vocab-only `ggml-vocab-*.gguf` files ship with llama.cpp's sources
(vendor/llama.cpp/models/ in the llama-cpp-python sdist); the ones used are
committed xz-compressed next to the fixtures.  For every vocab the script
tokenizes the same few hundred generated strings in all four modes
(add_special x parse_special) and writes NAME.json with the ids, the
BOS/EOS/EOG ids and a digest of every token's piece, so tests/test_tokenizer.py
can compare without llama.cpp.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import lzma
import random
import sys
import tempfile
from pathlib import Path

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world",
         "tokenizer", "llama", "Python", "function", "return", "value", "speculative",
         "decoding", "twin", "sequence", "A", "I", "ZZZ", "camelCase", "snake_case",
         "HTTPServer", "iPhone", "e-mail", "re-entry", "naïve", "café", "Zürich", "São",
         "Ελληνικά", "Русский", "日本語", "中文", "한국어", "עברית", "العربية", "हिन्दी", "ไทย"]
NUMBERS = ["0", "1", "7", "42", "123", "1234", "12345", "123456789", "3.14", "3.14159265",
           "-1", "+5", "1e10", "0x1F", "1,000", "1.000.000", "2026-11-29", "12:34:56", "v2.0.1",
           "٣", "½", "²", "Ⅻ", "１２３"]
PUNCT = [".", ",", "!", "?", "...", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "<", ">",
         "/", "\\", "|", "-", "--", "—", "_", "*", "**", "#", "@", "$", "%", "^", "&", "=", "+",
         "~", "`", "«", "»", "“", "”", "…", "€", "£", "©", "→", "∑", "√"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n", "\n ",
          "\u00a0", "\u3000", "\u2009", " \t "]
EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧", "🇫🇷", "🚀", "❤️", "✓", "🤖"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'RE", "'LL"]
COMMON_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>",
                   "<|begin_of_text|>", "<|eot_id|>", "<|end|>", "<|user|>"]

FIXED = [
    "", " ", "  ", "\n", "\n\n", "\t", "Hello world", " Hello world", "Hello  world", "hello\n",
    "\n\n1", "\n\n12", "a\n\n1", "x\n\n1.", "\n1", " 1", "  1", "1\n\n2", "3.14", "3.14159265358979",
    "1234567890123", "11111111111111111111", "-42", "1,000,000", "$1,234.56", "100%", "0x1F",
    "version 2.0.1", "2026-11-29T22:45:00Z",
    "it's", "they're", "we've", "I'm", "you'll", "he'd", "don't", "IT'S", "They'RE", "rock'n'roll",
    "'s", " 's", "''", "' '",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "<html><body class=\"x\">hi</body></html>", "SELECT * FROM t WHERE id = 1;",
    "print(\"hello\")", '{"key": [1, 2, 3], "ok": true}', "a->b => c != d <= e", "x**2 + y//3",
    "a  b", "a   b", "a \t b", "   \n   ", "line1\r\nline2", "\u00a0nbsp", "trailing   ",
    "\t\tindent", "    four", "\n\n\n\n", " " * 40, "\n" * 10, "\t \n \t",
    "héllo wörld", "naïve café", "Ελληνικά γράμματα", "Русский текст", "日本語のテキスト",
    "中文文本测试", "한국어 텍스트", "עברית", "العربية", "हिन्दी", "ไทย", "😀", "👍🏽", "👨‍👩‍👧",
    "🇫🇷🇩🇪", "∑∫√π", "e\u0301", "ﬁ", "ＡＢＣ１２３", "Ⅻ", "½ ² ٣", "I❤️NY", "🤖🤖🤖",
    "<|im_start|>", "<|im_start|>user\nHi<|im_end|>\n", "<|endoftext|>", "<s>", "</s>",
    "<|begin_of_text|>", "<|eot_id|>", "<unk>", "text<|im_end|>more", "<|im_", "<<|im_start|>>",
    " <|im_end|> ", "<|im_start|><|im_start|>", "<|endoftext|>\n\n1",
    "The quick brown fox jumps over the lazy dog. " * 6,
    ("Speculative decoding lets a cheap draft propose several tokens that the full model "
     "verifies in one pass; when the draft is right, the pass emits more than one token, "
     "and when it is wrong nothing changes: the output is identical, token for token.\n\n"
     "1. Read the weights once.\n2. Serve every sequence.\n3. Count passes, not tokens."),
]


def vocab_specials(llm) -> list[str]:
    """Texts of this vocab's control and user-defined tokens (a deterministic sample)."""
    import llama_cpp
    vocab = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    found = []
    for i in range(n):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        if attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED):
            found.append(llama_cpp.llama_vocab_get_text(vocab, i).decode("utf-8", "replace"))
    rng = random.Random(1234)
    return found if len(found) <= 24 else found[:8] + rng.sample(found[8:], 16)


def generated_strings(specials: list[str], count: int = 240, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pools = [WORDS, NUMBERS, PUNCT, SPACES, EMOJI, CONTRACTIONS, specials + COMMON_SPECIALS]
    weights = [10, 4, 4, 6, 1, 1, 1]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 14)):
            pool = rng.choices(pools, weights)[0]
            parts.append(rng.choice(pool))
            if pool is WORDS and rng.random() < 0.6:
                parts.append(" ")
        out.append("".join(parts))
    for _ in range(count // 8):  # random characters from common blocks
        blocks = [(0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x4E00, 0x4FFF),
                  (0x3040, 0x30FF), (0xAC00, 0xAD00), (0x1F600, 0x1F64F)]
        out.append("".join(chr(rng.randint(*rng.choice(blocks))) for _ in range(rng.randint(1, 20))))
    return out


def piece_digest(llm) -> tuple[str, list[int]]:
    """sha256 over every token's piece (special=True), and the EOG ids."""
    import llama_cpp
    vocab = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    h = hashlib.sha256()
    buf = ctypes.create_string_buffer(1024)
    eog = []
    for i in range(n):
        k = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        piece = buf.raw[:k]
        h.update(len(piece).to_bytes(4, "little") + piece)
        if llama_cpp.llama_vocab_is_eog(vocab, i):
            eog.append(i)
    return h.hexdigest(), eog


def with_pre(src: str, dest: str, pre: str) -> None:
    """Copy GGUF src to dest with tokenizer.ggml.pre replaced (or removed when pre is "")."""
    import gguf
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dest, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "tokenizer.ggml.pre"):
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), field.types[0], sub)
    if pre:
        writer.add_key_value("tokenizer.ggml.pre", pre, gguf.GGUFValueType.STRING)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def make_fixture(name: str, path: Path, pre: str | None = None) -> dict:
    import llama_cpp
    raw = path.read_bytes()
    if path.suffix == ".xz":
        raw = lzma.decompress(raw)
    with tempfile.NamedTemporaryFile(suffix=".gguf") as tmp, \
            tempfile.NamedTemporaryFile(suffix=".gguf") as renamed:
        tmp.write(raw)
        tmp.flush()
        model_path = tmp.name
        if pre is not None:
            with_pre(tmp.name, renamed.name, pre)
            model_path = renamed.name
        llm = llama_cpp.Llama(model_path, vocab_only=True, verbose=False)
        vocab = llm._model.vocab
        texts = FIXED + generated_strings(vocab_specials(llm))
        cases = []
        for text in texts:
            ids = {}
            for add_special in (True, False):
                for parse_special in (True, False):
                    key = f"bos{int(add_special)}_sp{int(parse_special)}"
                    ids[key] = llm.tokenize(text.encode("utf-8"), add_bos=add_special,
                                            special=parse_special)
            cases.append({"text": text, "ids": ids})
        digest, eog = piece_digest(llm)
        meta = llm.metadata
        fixture = {
            "name": name,
            "source": path.name,
            "gguf_sha256": hashlib.sha256(raw).hexdigest(),
            "pre_override": pre,
            "tokenizer_model": meta.get("tokenizer.ggml.model"),
            "pre": meta.get("tokenizer.ggml.pre"),
            "llama_cpp_python": llama_cpp.__version__,
            "n_vocab": llama_cpp.llama_vocab_n_tokens(vocab),
            "bos_id": llama_cpp.llama_vocab_bos(vocab),
            "eos_id": llama_cpp.llama_vocab_eos(vocab),
            "eot_id": llama_cpp.llama_vocab_eot(vocab),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "eog_ids": eog,
            "piece_sha256": digest,
            "cases": cases,
        }
        llm.close()
    return fixture


def write_fixture(fixture: dict, dest: Path) -> None:
    fixture = dict(fixture)
    cases = fixture.pop("cases")
    head = json.dumps(fixture, ensure_ascii=False, indent=1)[:-2]  # one case per line below
    body = ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)
    dest.write_text(f'{head},\n "cases": [\n{body}\n]}}\n', encoding="utf-8")
    n = sum(len(c["ids"]) for c in cases)
    print(f"{dest}: {len(cases)} strings, {n} encodings, pre={fixture['pre']}")


def committed_jobs(fixtures: Path, default_model: Path | None) -> list[tuple[str, Path, str | None]]:
    jobs = []
    for path in sorted(fixtures.glob("*.json")):
        fx = json.loads(path.read_text(encoding="utf-8"))
        if fx["source"].endswith(".xz"):
            source = fixtures / fx["source"]
        elif default_model is not None and default_model.name == fx["source"]:
            source = default_model
        else:
            sys.exit(f"{path.name}: pass --default-model PATH to {fx['source']}")
        jobs.append((fx["name"], source, fx.get("pre_override")))
    return jobs


def main(argv: list[str]) -> None:
    fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tokenizer"
    out_dir, default_model, regen, jobs = fixtures, None, False, []
    args = iter(argv)
    for arg in args:
        if arg == "--out":
            out_dir = Path(next(args))
        elif arg == "--default-model":
            default_model = Path(next(args))
        elif arg == "--regen":
            regen = True
        elif "=" in arg:
            name, _, path = arg.partition("=")
            path, at, pre = path.partition("@")
            jobs.append((name, Path(path), pre if at else None))
        else:
            sys.exit(__doc__)
    if regen:
        jobs += committed_jobs(fixtures, default_model)
    if not jobs:
        sys.exit(__doc__)
    for name, path, pre in jobs:
        write_fixture(make_fixture(name, path, pre), out_dir / f"{name}.json")


if __name__ == "__main__":
    main(sys.argv[1:])
