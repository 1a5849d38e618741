"""Compute backends: `torch` (reference, CPU or any torch device), `cuda`
(kernels/ through cuda-python), `hip` (kernels/ through hip-python)."""

from __future__ import annotations

import importlib

from ..errors import PtiError
from .base import Backend

BACKENDS = ("auto", "torch", "cuda", "hip")


def _gpu_backend(name: str, device=None) -> Backend:
    module = importlib.import_module(f"pti_cli.backends.{name}")
    cls = getattr(module, "CudaBackend" if name == "cuda" else "HipBackend")
    return cls() if device is None else cls(device=device)


def load_backend(name: str = "auto", device=None) -> Backend:
    """The backend called `name`: "torch" (TorchRefBackend, float32, CPU or `device`),
    "cuda" / "hip" (the kernels backends), "auto" = cuda when torch sees a CUDA
    device and the cuda backend imports, else torch on the CPU."""
    if name == "torch":
        from .torch_ref import TorchRefBackend
        return TorchRefBackend(device)
    if name in ("cuda", "hip"):
        try:
            return _gpu_backend(name, device)
        except ImportError as e:
            raise PtiError(f"the {name} backend is not available: {e}") from None
    if name == "auto":
        import torch
        if torch.cuda.is_available():
            try:
                return _gpu_backend("cuda", device)
            except ImportError:
                pass
        from .torch_ref import TorchRefBackend
        return TorchRefBackend(device)
    raise PtiError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
