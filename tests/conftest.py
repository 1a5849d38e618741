"""Shared test fixtures.  Area-specific builders live in tests/<area>_helpers.py."""

from __future__ import annotations

import os

import pytest

# Fixed thread count: the CPU reference path's batch invariance depends on it.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The embedded default model's GGUF (installed by `make install`)."""
    from pti_cli.default_model import default_gguf
    return default_gguf()
