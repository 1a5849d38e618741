"""Random-weight models built directly on the device, so speed runs need no download.

`--synthetic 1b|8b|32b` gives the Llama body of those sizes with a 49152-token
vocabulary.  Weights are Q8_0-like (int8 values, one f16 scale per 32) and,
for `twins="ab"`, two distinct twins as an SSQ16 file would hold them.  On the
GPU the matrices go to the kernels backend in its own layout; on the CPU they
are dequantised to float32 (the torch path), so the 8b does not fit a 24 GiB
machine and is refused before anything is allocated.

Random weights make random text: never report tau from these models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .errors import PtiError
from .gpu_model import GpuShape, LayerWeights, Weights, h16_io, h16_roles, make_linear

QBLOCK = 32
Q8_BYTES_PER_BLOCK = 34      # f16 scale + 32 int8
SSQ16_BYTES_PER_BLOCK = 68   # two f16 scales + 32 uint16 words


SIZES: dict[str, GpuShape] = {
    # `tiny` is for tests and CPU smoke runs; the others are the shapes.
    "tiny": GpuShape(n_layers=2, dim=256, ffn=512, n_heads=4, n_kv_heads=2, vocab=512),
    "1b": GpuShape(n_layers=16, dim=2048, ffn=8192, n_heads=32, n_kv_heads=8, vocab=49152),
    "8b": GpuShape(n_layers=32, dim=4096, ffn=14336, n_heads=32, n_kv_heads=8, vocab=49152),
    "32b": GpuShape(n_layers=64, dim=5120, ffn=27648, n_heads=40, n_kv_heads=8, vocab=49152),
}


def shape_for(size: str) -> GpuShape:
    if size not in SIZES:
        raise PtiError(f"unknown synthetic size {size!r}: choose one of {', '.join(SIZES)}")
    return replace(SIZES[size])


def matrix_shapes(shape: GpuShape) -> list[tuple[str, int, int]]:
    """(name, rows N, K) of every matrix a pass reads, fused as the GPU model runs them."""
    hd, out = shape.head_dim, []
    for i in range(shape.n_layers):
        out += [
            (f"blk.{i}.attn_qkv", (shape.n_heads + 2 * shape.n_kv_heads) * hd, shape.dim),
            (f"blk.{i}.attn_output", shape.dim, shape.n_heads * hd),
            (f"blk.{i}.ffn_gate_up", 2 * shape.ffn, shape.dim),
            (f"blk.{i}.ffn_down", shape.dim, shape.ffn),
        ]
    out.append(("output", shape.vocab, shape.dim))
    return out


def n_params(shape: GpuShape) -> int:
    """Parameters of one twin (embedding, matrices, norms)."""
    mats = sum(n * k for _, n, k in matrix_shapes(shape))
    norms = shape.dim * (2 * shape.n_layers + 1)
    return shape.vocab * shape.dim + mats + norms


def q8_matrix_bytes(shape: GpuShape, twins: str) -> int:
    """Storage bytes of every matrix a pass reads, as the file stores them (embedding excluded)."""
    per_block = SSQ16_BYTES_PER_BLOCK if twins == "ab" else Q8_BYTES_PER_BLOCK
    return sum(n * ((k + QBLOCK - 1) // QBLOCK) * per_block for _, n, k in matrix_shapes(shape))


def estimate_bytes(shape: GpuShape, device: torch.device, twins: str, kv_bytes: int) -> int:
    """Memory the model needs on `device`, counted before allocating anything."""
    n_twins = 2 if twins == "ab" else 1
    mats = sum(n * k for _, n, k in matrix_shapes(shape))
    if device.type == "cpu":  # float32 dense per twin, plus the int8 draw of the largest matrix
        weights = n_twins * mats * 4 + max(n * k for _, n, k in matrix_shapes(shape)) * 6
        embed = shape.vocab * shape.dim * 4
    else:
        weights = q8_matrix_bytes(shape, twins)
        embed = shape.vocab * shape.dim * 2
    return weights + embed + kv_bytes + (1 << 28)  # 256 MiB for activations and workspace


def device_free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil
    return int(psutil.virtual_memory().available)


def check_fits(shape: GpuShape, size: str, device: torch.device, twins: str, kv_bytes: int) -> None:
    need, free = estimate_bytes(shape, device, twins, kv_bytes), device_free_bytes(device)
    if need > free:
        dtype = "float32" if device.type == "cpu" else "Q8"
        raise PtiError(
            f"synthetic {size} ({dtype}, twins {twins}) needs {need / 2**30:.1f} GiB but "
            f"{device.type} has {free / 2**30:.1f} GiB free: use a smaller --synthetic size"
        )


def random_q8(n: int, k: int, gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values [n, k] and f16 scales [n, ceil(k/32)] of a random Q8_0 matrix.

    Scales are drawn around 1/(127 sqrt(k)) so activations keep their size through
    the layers; int8 -128 never occurs in Q8_0 (the quantiser's range is +-127).
    """
    nb = (k + QBLOCK - 1) // QBLOCK
    qs = torch.randint(-127, 128, (n, k), generator=gen, device=device, dtype=torch.int8)
    base = 1.7 / (127.0 * k ** 0.5)
    scales = (base * (0.5 + torch.rand((n, nb), generator=gen, device=device))).to(torch.float16)
    return qs, scales


def build_weights(shape: GpuShape, device: torch.device, twins: str, seed: int, backend=None,
                  draw_device: torch.device | None = None) -> Weights:
    """Every weight of a random model, on `device`, for twins 'a' (Q8) or 'ab' (distinct twins).
    draw_device: where the random numbers are drawn (the CPU gives the same weights on any device)."""
    if twins not in ("a", "b", "ab"):
        raise PtiError(f"--twins must be a, b or ab, not {twins!r}")
    draw_device = draw_device or device
    gen = torch.Generator(device=draw_device)
    gen.manual_seed(seed)
    act = torch.float32 if device.type == "cpu" else torch.bfloat16

    roles = h16_roles(backend, shape) if backend is not None else frozenset()

    def mat(n: int, k: int, out_f32: bool = False, glu: bool = False, h16: tuple[bool, bool] = (False, False)):
        pairs = [random_q8(n, k, gen, draw_device) for _ in range(2 if twins == "ab" else 1)]
        if draw_device != device:
            pairs = [(q.to(device), s.to(device)) for q, s in pairs]
        return make_linear(pairs, device, backend, out_f32, glu, h16)

    def norm():
        return (1.0 + 0.1 * torch.randn(shape.dim, generator=gen, device=draw_device)).float().to(device)

    embed = (0.5 * torch.randn((shape.vocab, shape.dim), generator=gen, device=draw_device)).to(act).to(device)
    hd, layers = shape.head_dim, []
    for i in range(shape.n_layers):
        io = h16_io(roles, i, shape.n_layers)
        layers.append(LayerWeights(
            attn_norm=norm(),
            wqkv=mat((shape.n_heads + 2 * shape.n_kv_heads) * hd, shape.dim, h16=io["qkv"]),
            wo=mat(shape.dim, shape.n_heads * hd, h16=io["wo"]),
            ffn_norm=norm(),
            wgu=mat(2 * shape.ffn, shape.dim, glu=True, h16=io["gu"]),
            wdown=mat(shape.dim, shape.ffn, h16=io["down"]),
        ))
    return Weights(embed=embed, layers=layers, out_norm=norm(),
                   output=mat(shape.vocab, shape.dim, out_f32=True, h16=h16_io(roles, 0, 1)["head"]), h16=roles)
