"""Compute backends: `torch` (reference, CPU or any torch device), `cuda`
(kernels/ through cuda-python), `hip` (kernels/ through hip-python)."""
