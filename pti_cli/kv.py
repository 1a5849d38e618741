"""Per-sequence KV cache with truncation to any accepted prefix.

Layout: k and v are [n_layers, capacity, n_kv_heads, head_dim].  Position p of
layer l is `k[l, p]`; the attention of a row at position p reads the prefix
`k[l, :p+1]`, a contiguous block whose strides do not depend on the capacity
(so growing the cache never changes how a row's attention is computed).

`length` counts the positions that hold valid K/V.  `Model.forward` writes a
sequence's new rows at positions length .. length+n-1 and then advances
`length` by n.  `truncate(n)` keeps the first n positions: the rest are
logically gone and the next forward overwrites them (nothing is cleared).
"""

from __future__ import annotations

import torch

from .errors import PtiError


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_length: int,
                 capacity: int = 256, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.max_length = max_length
        capacity = max(1, min(capacity, max_length))
        # zeros, not empty: positions never written stay finite (a 0 weight times NaN would be NaN)
        self.k = torch.zeros(n_layers, capacity, n_kv_heads, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    def reserve(self, n: int) -> None:
        """Make room for n positions in all (doubling, at most max_length)."""
        if n > self.max_length:
            raise PtiError(f"sequence of {n} positions exceeds the model's context of {self.max_length}")
        if n <= self.capacity:
            return
        cap = self.capacity
        while cap < n:
            cap *= 2
        cap = min(cap, self.max_length)
        k = self.k.new_zeros(self.k.shape[0], cap, *self.k.shape[2:])
        v = torch.zeros_like(k)
        k[:, :self.length] = self.k[:, :self.length]
        v[:, :self.length] = self.v[:, :self.length]
        self.k, self.v = k, v

    def truncate(self, n: int) -> None:
        """Keep the first n positions (0 <= n <= length)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a KV cache of length {self.length} to {n}")
        self.length = n
