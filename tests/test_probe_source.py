"""scripts/probe_source.py: each probe changes the kernel source in exactly one place, and a source without
that place is refused (so a probe never silently times the unchanged kernels)."""

from __future__ import annotations

import pytest

from script_helpers import SCRIPTS, load_script

SOURCE = (SCRIPTS.parent / "kernels" / "pti_kernel.hip").read_text()


@pytest.mark.parametrize("name", sorted(load_script("probe_source").PROBES))
def test_probe_changes_the_kernel_source_once(name):
    ps = load_script("probe_source")
    old, new = ps.PROBES[name]
    out = ps.probe_text(name, SOURCE)
    assert out != SOURCE and out.count(old) == 0
    assert len(out) == len(SOURCE) - len(old) + len(new)
    assert out.count(new) == SOURCE.count(new) + 1


def test_probe_refuses_a_source_without_its_text():
    ps = load_script("probe_source")
    with pytest.raises(SystemExit, match="expected one"):
        ps.probe_text("x_row0", SOURCE.replace(ps.PROBES["x_row0"][0], "0"))
    with pytest.raises(SystemExit, match="found 2"):
        ps.probe_text("x_row0", SOURCE + ps.PROBES["x_row0"][0])
