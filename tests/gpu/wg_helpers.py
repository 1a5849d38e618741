"""What the Hopper kernels' GPU tests share: the tile layout of their activations, built in torch."""

from __future__ import annotations

import torch


def tile_layout(t: torch.Tensor, nr: int) -> torch.Tensor:
    """[m, K] -> the tiles of nr rows (kernels/pti_kernel.hip pti_wg_tiles), rows m.. zero: tile j holds
    block b = (j mod nb / 8) 8 + j div (nb / 8); in it, column 16 h + 8 j' + 2 w + e of row 8 q + i is
    element 256 q + 64 w + 8 i + 4 h + 2 j' + e."""
    m, k = t.shape
    nb = k // 32
    full = torch.zeros(nr, k, dtype=t.dtype, device=t.device)
    full[:m] = t
    j = torch.arange(nb, device=t.device)
    blocks = full.view(nr, nb, 32)[:, (j % (nb // 8)) * 8 + j // (nb // 8)]   # [row, tile, column]
    return blocks.reshape(nr // 8, 8, nb, 2, 2, 4, 2).permute(2, 0, 5, 1, 3, 4, 6).reshape(-1)


def row_of_tiles(nr: int, k: int, device="cuda") -> torch.Tensor:
    """Each tile element's row (tile_layout of the row numbers)."""
    return tile_layout(torch.arange(nr, device=device).view(nr, 1).expand(nr, k), nr)


def backend_with_wgmma(flag: str, narrow: str = "0", fix: str = "0", rest: str = "0", rest32: str = "0",
                       rest_twins: str = "0", split_slack: str = "0"):
    """A CUDA backend built with PTI_WGMMA=flag, PTI_WG_NARROW=narrow, PTI_WG_FIX=fix and the rest form's settings
    (PTI_WG_REST=rest, PTI_WG_REST32=rest32, PTI_WG_REST_TWINS=rest_twins, PTI_WG_SPLIT_SLACK=split_slack), whatever
    the session's environment says."""
    import os
    from pti_cli.backends.cuda import CudaBackend
    want = {"PTI_WGMMA": flag, "PTI_WG_NARROW": narrow, "PTI_WG_FIX": fix, "PTI_WG_REST": rest, "PTI_WG_REST32": rest32,
            "PTI_WG_REST_TWINS": rest_twins, "PTI_WG_SPLIT_SLACK": split_slack}
    old = {k: os.environ.get(k) for k in want}
    os.environ.update(want)
    try:
        return CudaBackend()
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
