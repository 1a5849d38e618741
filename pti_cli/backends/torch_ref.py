"""The portable reference backend: float32 weights on any torch device.

Weights are dequantised to float32 at load (SSQFile.dense), so the arithmetic
is that of a float32 model holding exactly the packed weights.

Batch invariance.  A BLAS picks its kernel (and so the order of each dot
product's additions) from the call's shape: gemv for one row, other blockings
for other row counts.  Here every matmul is called with ONE shape per weight
matrix: the rows go through in tiles of `tile_rows` rows, each tile copied into
the same preallocated zero-padded input buffer and multiplied into the same
output buffer.  The library then runs the same instruction stream on the same
addresses for every tile; only the values differ, and no output row reads
another input row.  So a row's bits depend only on its values and its slot in
the tile, and tests/test_batch_invariance.py checks every slot for M = 1..64.
The thread count must stay fixed for the life of the process (it changes the
work split); the backend pins it at construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .base import Backend

TWIN_IDS = {"a": (0,), "b": (1,), "ab": (0, 1)}
TILE_ROWS = 4   # rows per matmul call; see docs/perf.md (torch backend) for the choice


def _onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def _onednn_linear_works() -> bool:
    """Whether this torch build has oneDNN's prepacked linear (the fast CPU path)."""
    try:
        w = torch.randn(8, 32)
        x = torch.randn(2, 32)
        y = _onednn_linear(x, torch.ops.mkldnn._reorder_linear_weight(w, 2))
        return torch.allclose(y, x @ w.t(), rtol=1e-4, atol=1e-4)
    except (RuntimeError, AttributeError):
        return False


@dataclass
class DenseMatrix:
    """One weight matrix [N, K] per loaded twin (one copy shared when the twins are identical):
    float32 tensors in `twins`, or on CPU only their oneDNN copies prepacked for the tile shape
    in `packed` (streams faster than a BLAS call that repacks the weights every time; the plain
    copies are then dropped, so the weights are held once)."""
    twins: dict[int, torch.Tensor]
    identical: bool
    shape: tuple[int, int]
    packed: dict[int, torch.Tensor] | None = None


class TorchRefBackend(Backend):
    name = "torch"

    def __init__(self, device: torch.device | str | None = None, tile_rows: int = TILE_ROWS,
                 threads: int | None = None):
        self.device = torch.device(device or "cpu")
        self.act_dtype = torch.float32
        self.tile_rows = tile_rows
        if threads is not None:
            torch.set_num_threads(threads)
        self.threads = torch.get_num_threads()
        self.kernel = "onednn" if self.device.type == "cpu" and _onednn_linear_works() else "mm"
        self._bufs: dict[tuple[str, int], torch.Tensor] = {}
        self._filled: dict[int, int] = {}    # K -> rows of the input buffer that may be nonzero

    # -- loading --------------------------------------------------------
    def load_matrix(self, ssq, name: str, twins: str) -> DenseMatrix:
        """Dequantised float32 copies of the twins asked for; the other twin is never read."""
        ids = TWIN_IDS[twins]
        if ssq.identical:
            w = self._to_device(ssq.dense(name, 0))
            return self._prepack(DenseMatrix({t: w for t in ids}, True, tuple(w.shape)))
        mats = {t: self._to_device(ssq.dense(name, t)) for t in ids}
        return self._prepack(DenseMatrix(mats, False, tuple(mats[ids[0]].shape)))

    def load_matrices(self, ssq, names: list[str], twins: str) -> DenseMatrix:
        """Several matrices of one K stacked by rows into one (q|k|v, gate|up): one call
        computes all their outputs side by side, columns in the order of `names`."""
        ids = TWIN_IDS[twins]
        if ssq.identical:
            w = self._to_device(np.concatenate([ssq.dense(n, 0) for n in names]))
            return self._prepack(DenseMatrix({t: w for t in ids}, True, tuple(w.shape)))
        mats = {t: self._to_device(np.concatenate([ssq.dense(n, t) for n in names])) for t in ids}
        return self._prepack(DenseMatrix(mats, False, tuple(mats[ids[0]].shape)))

    def _prepack(self, w: DenseMatrix) -> DenseMatrix:
        if self.kernel == "onednn":
            packed = {}
            for t, wt in w.twins.items():
                same = next((packed[u] for u in packed if w.twins[u] is wt), None)
                packed[t] = same if same is not None else torch.ops.mkldnn._reorder_linear_weight(wt, self.tile_rows)
            w.packed, w.twins = packed, {}
        return w

    def _to_device(self, a) -> torch.Tensor:
        return torch.from_numpy(a).to(self.device, torch.float32).contiguous()

    # -- compute --------------------------------------------------------
    def _buf(self, kind: str, n: int) -> torch.Tensor:
        buf = self._bufs.get((kind, n))
        if buf is None:
            buf = self._bufs[(kind, n)] = torch.zeros(self.tile_rows, n, device=self.device)
            if kind == "in":
                self._filled[n] = 0
        return buf

    def matmul(self, x: torch.Tensor, w: DenseMatrix, twin: int) -> torch.Tensor:
        """y = x @ W^T, computed tile by tile with one fixed call shape (batch-invariant)."""
        n, k = w.shape
        m, r = x.shape[0], self.tile_rows
        xin = self._buf("in", k)
        if torch.get_num_threads() != self.threads:   # the work split must not change
            torch.set_num_threads(self.threads)
        tiles = []
        for r0 in range(0, m, r):
            rows = min(r, m - r0)
            xin[:rows].copy_(x[r0:r0 + rows])
            if self._filled[k] > rows:       # padding rows stay zero (their values do not matter, but stay finite)
                xin[rows:self._filled[k]].zero_()
            self._filled[k] = rows
            if w.packed is not None:
                tiles.append(_onednn_linear(xin, w.packed[twin])[:rows])   # a fresh tensor each call
            else:
                yout = self._buf("out", n)
                torch.mm(xin, w.twins[twin].t(), out=yout)
                tiles.append(yout[:rows].clone())
        return tiles[0] if len(tiles) == 1 else torch.cat(tiles)

    def matmul_twins(self, xa: torch.Tensor, xb: torch.Tensor, w: DenseMatrix) -> tuple[torch.Tensor, torch.Tensor]:
        if w.identical:   # one model: both twins' rows share the tiles (still one fixed shape per call)
            y = self.matmul(torch.cat([xa, xb]), w, 0)
            return y[:xa.shape[0]], y[xa.shape[0]:]
        return self.matmul(xa, w, 0), self.matmul(xb, w, 1)
