"""Counter-based sampling: the same token whether or not a draft was proposed.

The uniform draw for generated token t of sequence s is a pure function of
(seed, s, t) (SplitMix64 of the three), never of how many tokens a pass
verified or which slot the sequence sits in.  The token is the inverse CDF of
the filtered, temperature-scaled distribution, walked in token-id order and
computed in float64 from the float32 logits row, so the same row always gives
the same token.  A draft token is accepted iff it equals that token, which
makes speculative sampling identical to plain sampling token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PtiError

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """One SplitMix64 step (Steele, Lea, Flood 2014): a strong 64-bit mixer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed: int, s: int, t: int) -> float:
    """Uniform in [0, 1) for (seed, sequence s, generated-token index t)."""
    h = splitmix64(splitmix64(splitmix64(seed & MASK64) ^ (s & MASK64)) ^ (t & MASK64))
    return (h >> 11) * (1.0 / (1 << 53))  # top 53 bits: every float64 in [0, 1) step 2^-53


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0   # 0: greedy (argmax, lowest id on ties)
    top_k: int = 0             # 0: off
    top_p: float = 1.0         # 1: off
    min_p: float = 0.0         # 0: off
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def check(self) -> "SamplingParams":
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise PtiError(f"--temp must be a finite number >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise PtiError(f"--top-k must be >= 0 (0 = off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise PtiError(f"--top-p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p <= 1.0):
            raise PtiError(f"--min-p must be in [0, 1], got {self.min_p}")
        if not (0 <= self.seed <= MASK64):
            raise PtiError(f"--seed must be in 0..2^64-1, got {self.seed}")
        return self


def filtered_probs(row: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Unnormalised float64 probabilities after temperature, top-k, top-p, min-p.

    Ties are broken by token id (lower id ranks first) so the kept set is a
    pure function of the row.
    """
    x = row.astype(np.float64) / p.temperature
    x -= x.max()
    probs = np.exp(x)
    if p.top_k and p.top_k < probs.size:
        order = np.argsort(-probs, kind="stable")  # stable: equal probs keep id order
        probs[order[p.top_k:]] = 0.0
    if p.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        sorted_p = probs[order]
        cum = np.cumsum(sorted_p) / sorted_p.sum()
        n_keep = int(np.searchsorted(cum, p.top_p, side="left")) + 1  # smallest prefix reaching top_p
        probs[order[n_keep:]] = 0.0
    if p.min_p > 0.0:
        probs[probs < p.min_p * probs.max()] = 0.0
    return probs


def sample(row: np.ndarray, p: SamplingParams, s: int, t: int) -> int:
    """The token for generated index t of sequence s from one float32 logits row."""
    if p.greedy:
        return int(np.argmax(row))
    probs = filtered_probs(row, p)
    cdf = np.cumsum(probs)  # token-id order
    u = uniform(p.seed, s, t) * cdf[-1]
    tok = int(np.searchsorted(cdf, u, side="right"))
    # u < cdf[-1] always; guard rounding anyway, and never land on a zero-probability id
    tok = min(tok, cdf.size - 1)
    while probs[tok] == 0.0:
        tok -= 1
    return tok
