"""N-gram lookup drafts over a sequence's own prompt and output.

`LookupIndex` keeps, for every n-gram size n in 1..MAX_N, the most recent
position whose following token is known, updated once per appended token
(no rescans).  A draft is the continuation of the longest n-gram (n = MAX_N
down to 1) that matches the sequence's current suffix, most recent occurrence
first.  Drafts are only guesses: the engine verifies each token against its
own sampled target, so a draft never changes the output.

Draft length: at most K; at most the continuation the match has; shorter for
short (1-gram) matches, which predict less; and shrunk while recent drafts of
this sequence have been rejected (`DraftSizer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_N = 4


class LookupIndex:
    """Incremental n-gram -> latest continuation position index over one token list."""

    def __init__(self, max_n: int = MAX_N):
        self.max_n = max_n
        self.tokens: list[int] = []
        # maps[n-1][ngram] = p: tokens[p-n:p] == ngram and tokens[p] exists (latest such p)
        self.maps: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n)]

    def extend(self, toks) -> None:
        for t in toks:
            self.append(t)

    def append(self, tok: int) -> None:
        toks = self.tokens
        toks.append(int(tok))
        p = len(toks) - 1  # the new token's position: it continues every n-gram ending at p-1
        for n in range(1, min(self.max_n, p) + 1):
            self.maps[n - 1][tuple(toks[p - n:p])] = p

    def lookup(self, k: int) -> tuple[list[int], int]:
        """(continuation of up to k tokens, n of the match) for the current suffix; ([], 0) if none."""
        toks = self.tokens
        L = len(toks)
        for n in range(min(self.max_n, L), 0, -1):
            p = self.maps[n - 1].get(tuple(toks[L - n:]))
            if p is not None:
                return toks[p:p + k], n
        return [], 0


@dataclass
class DraftSizer:
    """Per-sequence draft cap: grows after fully accepted drafts, shrinks after rejections."""
    k: int
    cap: int = field(default=0)

    def __post_init__(self):
        self.cap = self.cap or self.k

    def size(self, n_match: int, available: int) -> int:
        # a 1-gram match is a weak predictor: draft at most 2 tokens from it
        by_match = self.k if n_match >= 2 else min(self.k, 2)
        return max(0, min(self.cap, by_match, available))

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted == drafted:
            self.cap = min(self.k, self.cap * 2)
        else:
            self.cap = max(1, accepted + 1)


def propose(index: LookupIndex, sizer: DraftSizer, limit: int) -> list[int]:
    """The draft for a sequence: at most `limit` tokens (room left in context / max-tokens)."""
    if limit <= 0:
        return []
    cont, n = index.lookup(min(sizer.k, limit))
    return cont[:sizer.size(n, min(len(cont), limit))]
