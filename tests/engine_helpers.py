"""Builders for the engine tests: a toy model whose logits are a pure function
of the tokens in its KV cache (so a wrong KV truncation changes the output),
a toy tokenizer, and independent reference decoders."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from pti_cli.sampling import SamplingParams, sample

VOCAB = 40
EOS = 0


class ToyKV:
    def __init__(self):
        self.toks: list[int] = []

    @property
    def length(self) -> int:
        return len(self.toks)

    def truncate(self, n: int) -> None:
        assert 0 <= n <= len(self.toks)
        del self.toks[n:]


def toy_logits(context: list[int], twin: int, eos_after: int | None = None) -> np.ndarray:
    """Next-token logits after `context`: copies what followed the latest earlier
    occurrence of the last two tokens (repetitive, so lookup drafts get accepted),
    plus hash noise so that plain guesses fail often enough."""
    h = hashlib.blake2b(repr((context[-6:], len(context), twin)).encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(h, "little"))
    row = rng.standard_normal(VOCAB).astype(np.float32)
    row[EOS] = -5.0
    if len(context) >= 3:
        key = context[-2:]
        for p in range(len(context) - 2, 1, -1):
            if context[p - 2:p] == key:
                row[context[p]] += 3.0
                break
    if eos_after is not None and len(context) >= eos_after:
        row[EOS] = 10.0
    return row


class ToyModel:
    def __init__(self, context_length: int = 512, eos_after: int | None = None):
        self.context_length = context_length
        self.eos_after = eos_after
        self.passes = 0
        self.rows_per_pass: list[int] = []

    def new_kv(self) -> ToyKV:
        return ToyKV()

    def forward(self, batch, logit_tail=None) -> torch.Tensor:
        """Like Model.forward: logits of the last logit_tail[i] rows of each item (None: all)."""
        self.passes += 1
        rows, fed = [], 0
        tails = logit_tail if logit_tail is not None else [len(t) for _, _, t in batch]
        for (kv, twin, tokens), tail in zip(batch, tails, strict=True):
            assert tokens, "a sequence with no pending positions"
            assert 0 <= tail <= len(tokens)
            for j, t in enumerate(tokens):
                kv.toks.append(t)
                assert kv.length <= self.context_length
                if j >= len(tokens) - tail:
                    rows.append(toy_logits(kv.toks, twin, self.eos_after))
            fed += len(tokens)
        self.rows_per_pass.append(fed)
        return torch.from_numpy(np.stack(rows))


class ToyDecoder:
    def __init__(self, tok):
        self.tok = tok

    def add(self, t: int) -> str:
        return self.tok.token_text(t)

    def flush(self) -> str:
        return ""


class ToyTokenizer:
    eog_ids = {EOS}

    def token_text(self, t: int) -> str:
        return "<eos>" if t == EOS else "abcdefghijklmnopqrstuvwxyz0123456789 .,;"[t]

    def stream_decoder(self) -> ToyDecoder:
        return ToyDecoder(self)


def toy_reference(prompt: list[int], max_tokens: int, params: SamplingParams, s: int, twin: int = 0,
                  eos_after: int | None = None, n_ctx: int = 512) -> list[int]:
    """Plain decoding straight from toy_logits: no engine, no KV cache."""
    ctx, out = list(prompt), []
    while len(out) < max_tokens and len(ctx) < n_ctx + 1:
        tok = sample(toy_logits(ctx, twin, eos_after), params, s, len(out))
        out.append(tok)
        ctx.append(tok)
        if tok == EOS or len(ctx) >= n_ctx:
            break
    return out


# --- real tiny models ---------------------------------------------------------

def tiny_ssq(folder, arch: str = "llama", seed: int = 0):
    """A random tiny Hugging Face model of `arch` (tests/source_helpers.py), packed with pti pack."""
    from pathlib import Path

    from pti_cli.pack import pack
    from source_helpers import make_hf_model
    folder = Path(folder)
    make_hf_model(folder / "hf", arch=arch, seed=seed)
    out = folder / f"{arch}.ssq"
    pack(folder / "hf", None, out, force=True)
    return out


class IdsTokenizer:
    """Engine port for raw-id runs: EOG ids from the model file, text = ids."""

    def __init__(self, eog_ids):
        self.eog_ids = set(eog_ids)

    def token_text(self, t: int) -> str:
        return f"<{t}>"

    def stream_decoder(self):
        return ToyDecoder(self)


def real_model(ssq_path, twins: str = "a"):
    from pti_cli.backends import load_backend
    from pti_cli.model import Model
    from pti_cli.ssq.read import SSQFile
    return Model(SSQFile(ssq_path), load_backend("torch"), twins=twins)


def host_fed_greedy(model, seqs, firsts: list[int], steps: int) -> list[list[int]]:
    """`steps` picks per sequence of a GpuModel by passes fed from the host one at a time
    (`run_pass`, each waited for): the reference for the device-fed `decode_greedy`.  seqs: the
    prefilled SeqRows (their tokens the prompts), firsts: the prefill's picks."""
    from pti_cli.gpu_model import SeqRows
    out, cur = [[] for _ in seqs], list(firsts)
    for k in range(steps):
        ids = model.run_pass([SeqRows(s.slot, [c], len(s.tokens) + k, s.twin) for s, c in zip(seqs, cur)])
        cur = [int(r[0]) for r in ids]
        for o, c in zip(out, cur):
            o.append(c)
    return out
