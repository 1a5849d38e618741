"""The engine: sequences, passes, drafts, acceptance, stops, scheduling.

One pass = one `Model.forward(batch)` call.  Each pass gives every active
sequence its pending positions: the tokens not yet in its KV cache (the whole
prompt on its first pass, else the last emitted token) followed by its draft.
The row of the last known token and the draft rows are then walked in order:
the target token for each is sampled (counter-based, `sampling.py`), emitted,
and the walk continues only while the draft token equals the target.  So each
pass emits 1 + (accepted draft tokens) per sequence, and the output is the
one plain decoding would give.  The KV cache is then truncated to the accepted
prefix (all known tokens but the newest, which is fed next pass).
A sequence's first pass is its whole prompt and no draft (the model prefills
it with one attention call per prompt, the same in every configuration); only
the rows that pick tokens get logits (`forward(batch, logit_tail)`).

Counting (documented in docs/perf.md): a sequence's `passes` are the forwards
that served it, its first (prefill) pass included; that pass emits its first
token.  Its `tokens` are all the tokens it generated, a final EOS/EOG or the
token completing a stop string included.  tau = tokens / passes, so with
--spec none tau is exactly 1.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch

from .drafts import DraftSizer, LookupIndex, propose
from .errors import PtiError
from .sampling import SamplingParams, sample

SPECS = ("none", "lookup")
MAX_DRAFT = 16


@dataclass
class EngineConfig:
    max_tokens: int = 256
    spec: str = "lookup"
    draft: int = 8              # K: the longest draft
    seqs: int = 1               # sequences served at once
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stops: tuple[str, ...] = ()
    row_quantum: int = 1        # the backend computes rows in tiles of this many: drafts fill tiles, never open one

    def check(self) -> "EngineConfig":
        if self.spec not in SPECS:
            raise PtiError(f"--spec must be one of {', '.join(SPECS)}, got {self.spec!r}")
        if not 1 <= self.draft <= MAX_DRAFT:
            raise PtiError(f"--draft must be in 1..{MAX_DRAFT}, got {self.draft}")
        if self.seqs < 1:
            raise PtiError(f"--seqs must be >= 1, got {self.seqs}")
        if self.max_tokens < 1:
            raise PtiError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if any(s == "" for s in self.stops):
            raise PtiError("--stop strings must not be empty")
        self.sampling.check()
        return self


@dataclass
class Request:
    s: int                      # input index: keys the sampling, orders the results
    prompt_ids: list[int]
    twin: int = 0


@dataclass
class Sequence:
    req: Request
    kv: Any
    tokens: list[int]           # prompt + generated; all but the last are in the KV cache between passes
    decoder: Any                # UTF-8-safe incremental detokeniser
    index: LookupIndex | None
    sizer: DraftSizer | None
    out_ids: list[int] = field(default_factory=list)
    text: str = ""
    streamed: int = 0           # chars of text already handed to a viewer
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    finish: str | None = None   # eos | stop | length | context
    t0: float = 0.0
    t1: float = 0.0


@dataclass
class Result:
    s: int
    text: str
    token_ids: list[int]
    tokens: list[str]
    prompt_tokens: int
    passes: int
    tau: float
    seconds: float
    drafted: int
    accepted: int
    finish: str
    twin: int

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


class Engine:
    """Runs requests through a Model, `cfg.seqs` at a time.

    `model`: `forward(batch, logit_tail) -> float32 logits [sum(logit_tail), vocab]`
    (the last logit_tail[i] rows of each batch item, in batch order; a forward
    without that parameter returns all rows and the engine picks), `new_kv()`,
    `context_length`; optionally `forward_ids(batch, logit_tail)`, the greedy token of
    each of those rows (argmax, lowest id on ties), which greedy sampling then uses
    instead of moving logits to the host, and which may take `run_ahead=True` (plain
    decoding: the engine will feed each sequence its pick next).  `tokenizer`: `eog_ids`, `stream_decoder()`,
    `token_text(id)`.
    """

    def __init__(self, model, tokenizer, cfg: EngineConfig):
        self.model = model
        # a model whose forward takes logit_tail computes logits only for the rows that pick tokens
        self.tail_logits = "logit_tail" in inspect.signature(model.forward).parameters
        # greedy sampling on a model that returns its pass's own greedy picks (`forward_ids`, same
        # arguments as forward): token ids come back instead of logits rows
        self.greedy_ids = cfg.sampling.greedy and hasattr(model, "forward_ids")
        # plain greedy decoding feeds each sequence its pick: a model that can queue that pass
        # before its picks are read (`run_ahead`) keeps the GPU busy while the host works
        self.run_ahead = (self.greedy_ids and cfg.spec == "none"
                          and "run_ahead" in inspect.signature(model.forward_ids).parameters)
        self.tok = tokenizer
        self.cfg = cfg.check()
        self.n_ctx = int(model.context_length)
        self.eog = frozenset(tokenizer.eog_ids)
        self.passes = 0          # forwards this engine made
        self.queue: deque[Request] = deque()
        self.active: list[Sequence] = []
        self.done: dict[int, Result] = {}

    # -- scheduling -----------------------------------------------------
    def submit(self, requests: Iterable[Request]) -> None:
        for r in requests:
            if not r.prompt_ids:
                raise PtiError(f"prompt {r.s + 1} is empty")
            if len(r.prompt_ids) >= self.n_ctx:
                raise PtiError(f"prompt {r.s + 1} has {len(r.prompt_ids)} tokens; the model's context is "
                               f"{self.n_ctx} (room for at least one new token is needed)")
            self.queue.append(r)

    def run(self, on_pass: Callable[[list[Sequence]], None] | None = None) -> list[Result]:
        """Run every submitted request to the end; results in input order."""
        while self.queue or self.active:
            touched = self.step()
            if on_pass:
                on_pass(touched)
        return [self.done[s] for s in sorted(self.done)]

    def _start(self, r: Request) -> Sequence:
        lookup = self.cfg.spec == "lookup"
        seq = Sequence(r, self.model.new_kv(), list(r.prompt_ids), self.tok.stream_decoder(),
                       LookupIndex() if lookup else None, DraftSizer(self.cfg.draft) if lookup else None,
                       t0=time.perf_counter())
        if seq.index is not None:
            seq.index.extend(r.prompt_ids)
        return seq

    # -- one pass -------------------------------------------------------
    def step(self) -> list[Sequence]:
        """One pass over every active sequence (starting queued ones first)."""
        while self.queue and len(self.active) < self.cfg.seqs:
            self.active.append(self._start(self.queue.popleft()))
        seqs = list(self.active)
        drafts = [self._draft(seq) for seq in seqs]
        draft_cap = getattr(self.model, "draft_cap", None)   # a model whose extra rows stop being free past a size
        if draft_cap is not None:
            cap = draft_cap(len(seqs))
            drafts = [d[:cap] for d in drafts]
        drafts = self._fit_to_tiles(seqs, drafts)
        batch = [(seq.kv, seq.req.twin, seq.tokens[seq.kv.length:] + draft) for seq, draft in zip(seqs, drafts)]
        # the rows that pick tokens: each sequence's last known token's and its draft's
        tails = [len(d) + 1 for d in drafts]
        if self.greedy_ids:   # the pass's own greedy picks: one small device-to-host copy
            ahead = {"run_ahead": True} if self.run_ahead else {}
            picked = self.model.forward_ids(batch, logit_tail=tails, **ahead)
        else:
            picked = self._picked_logits(batch, tails)
        self.passes += 1
        at = 0
        for seq, draft in zip(seqs, drafts):
            self._verify(seq, picked[at:at + len(draft) + 1], draft)
            at += len(draft) + 1
            if seq.finish:
                self._finish(seq)
        return seqs

    def _picked_logits(self, batch: list, tails: list[int]) -> np.ndarray:
        """float32 logits of the rows that pick tokens (the last tails[i] of item i), on the host:
        one device-to-host copy per pass."""
        if self.tail_logits:
            logits = self.model.forward(batch, logit_tail=tails)
        else:
            logits = self.model.forward(batch)
            ends = np.cumsum([len(t) for _, _, t in batch])
            rows = [r for end, n in zip(ends, tails) for r in range(end - n, end)]
            logits = logits[torch.tensor(rows, device=logits.device)]
        return logits.float().cpu().numpy()

    def _draft(self, seq: Sequence) -> list[int]:
        if seq.index is None or seq.kv.length == 0:   # a prefill pass is the prompt alone
            return []
        room = min(self.cfg.max_tokens - len(seq.out_ids) - 1, self.n_ctx - len(seq.tokens))
        return propose(seq.index, seq.sizer, room)

    def _fit_to_tiles(self, seqs: list[Sequence], drafts: list[list[int]]) -> list[list[int]]:
        """Trim drafts (longest first) so they only fill the last tile the pass needs anyway.

        A draft never changes the output, so trimming one changes only speed; on a
        backend that computes rows in tiles of q, a draft row that opens a new tile
        costs a whole tile (a full read of the weights on the CPU reference)."""
        q = self.cfg.row_quantum
        if q <= 1 or not any(drafts):
            return drafts
        base = sum(len(seq.tokens) - seq.kv.length for seq in seqs)
        room = -(-base // q) * q - base
        lens = [len(d) for d in drafts]
        while sum(lens) > room:
            i = max(range(len(lens)), key=lambda j: lens[j])
            lens[i] -= 1
        return [d[:n] for d, n in zip(drafts, lens)]

    def _verify(self, seq: Sequence, rows: np.ndarray, draft: list[int]) -> None:
        seq.passes += 1
        accepted = 0
        for j in range(len(draft) + 1):
            tok = int(rows[j]) if self.greedy_ids else sample(rows[j], self.cfg.sampling, seq.req.s, len(seq.out_ids))
            self._emit(seq, tok)
            if seq.finish or j == len(draft) or draft[j] != tok:
                break
            accepted += 1
        seq.drafted += len(draft)
        seq.accepted += accepted
        if seq.sizer is not None:
            seq.sizer.update(len(draft), accepted)
        if not seq.finish:
            seq.kv.truncate(len(seq.tokens) - 1)

    def _emit(self, seq: Sequence, tok: int) -> None:
        seq.out_ids.append(tok)
        seq.tokens.append(tok)
        if seq.index is not None:
            seq.index.append(tok)
        if tok in self.eog:
            seq.text += seq.decoder.flush()
            seq.finish = "eos"
            return
        before = len(seq.text)
        seq.text += seq.decoder.add(tok)
        if self.cfg.stops and len(seq.text) > before:
            self._check_stops(seq, before)
        if seq.finish:
            return
        if len(seq.out_ids) >= self.cfg.max_tokens:
            seq.finish = "length"
        elif len(seq.tokens) >= self.n_ctx:
            seq.finish = "context"
        if seq.finish:
            seq.text += seq.decoder.flush()
            if self.cfg.stops:  # the flushed tail may complete a stop string
                self._check_stops(seq, before)

    def _check_stops(self, seq: Sequence, before: int) -> None:
        """Cut the text before the earliest stop string that the new text completed."""
        longest = max(len(s) for s in self.cfg.stops)
        start = max(0, before - longest + 1)
        hits = [i for i in (seq.text.find(s, start) for s in self.cfg.stops) if i >= 0]
        if hits:
            seq.text = seq.text[:min(hits)]
            seq.finish = "stop"

    def holdback(self, seq: Sequence) -> int:
        """Chars at the end of an unfinished text that could start a stop string: not shown yet."""
        if seq.finish or not self.cfg.stops:
            return 0
        best = 0
        for s in self.cfg.stops:
            for k in range(min(len(s) - 1, len(seq.text)), best, -1):
                if seq.text.endswith(s[:k]):
                    best = k
                    break
        return best

    def new_text(self, seq: Sequence) -> str:
        """Text of `seq` that is final and not yet handed out (advances the cursor)."""
        end = len(seq.text) - self.holdback(seq)
        piece = seq.text[seq.streamed:end]
        seq.streamed = max(seq.streamed, end)
        return piece

    def _finish(self, seq: Sequence) -> None:
        seq.t1 = time.perf_counter()
        self.active.remove(seq)
        self.done[seq.req.s] = Result(
            s=seq.req.s, text=seq.text, token_ids=list(seq.out_ids),
            tokens=[self.tok.token_text(t) for t in seq.out_ids],
            prompt_tokens=len(seq.req.prompt_ids), passes=seq.passes,
            tau=len(seq.out_ids) / seq.passes, seconds=seq.t1 - seq.t0,
            drafted=seq.drafted, accepted=seq.accepted, finish=seq.finish, twin=seq.req.twin)
