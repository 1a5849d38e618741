"""The interface every backend implements.

A backend owns the weight matrices of a model in its own layout and computes
y = x W^T for them.  Contract, which lossless speculation relies on:

* Batch invariance: the bits of an output row depend only on that input row
  and the weights, never on how many rows share the call or where the row
  sits among them.
* A backend asked for one twin of an SSQ16 file loads only that twin's half.

Optional, looked up with getattr by `Model`:

* `load_matrices(ssq, names, twins)`: several matrices of one K stacked by rows
  into one matrix (q|k|v, gate|up), so one matmul computes their outputs side
  by side in the order of `names`.  Without it the model calls load_matrix per name.
* `tile_rows` (int): rows per kernel call (TorchRefBackend); a pass of up to
  that many rows costs one read of the weights, so drafts can be sized to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch


class Backend(ABC):
    name: str = "?"
    device: torch.device
    act_dtype: torch.dtype  # activations' dtype: float32 on the CPU reference, bf16 on GPUs

    @abstractmethod
    def load_matrix(self, ssq: Any, name: str, twins: str) -> Any:
        """Load matrix `name` of an SSQFile for twins 'a', 'b' or 'ab'."""

    @abstractmethod
    def matmul(self, x: torch.Tensor, w: Any, twin: int) -> torch.Tensor:
        """y[M, N] = x[M, K] @ W_twin^T (twin 0 = A, 1 = B), batch-invariant."""

    def matmul_twins(self, xa: torch.Tensor, xb: torch.Tensor, w: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Both twins in one read of the weights when the backend can (SSQ16)."""
        return self.matmul(xa, w, 0), self.matmul(xb, w, 1)
