"""scripts/probe_source.py: each probe changes the kernel source in exactly one place, and a source without
that place is refused (so a probe never silently times the unchanged kernels)."""

from __future__ import annotations

import pytest

from script_helpers import SCRIPTS, load_script

SOURCE = (SCRIPTS.parent / "kernels" / "pti_kernel.hip").read_text()


@pytest.mark.parametrize("name", sorted(load_script("probe_source").PROBES))
def test_probe_changes_the_kernel_source_once(name):
    ps = load_script("probe_source")
    out = ps.probe_text(name, SOURCE)
    assert out != SOURCE and ps.PROBES[name]
    assert len(out) == len(SOURCE) + sum(len(new) - len(old) for old, new in ps.PROBES[name])
    for old, new in ps.PROBES[name]:
        assert SOURCE.count(old) == 1 and new in out


def test_trace_probe_stamps_each_cta_four_times():
    """The trace probe's stamps: entry, wait return, loop end, finish, written with the CTA's SM and block (the six
    words a CTA scripts/cta_timeline.py reads)."""
    ps = load_script("probe_source")
    out = ps.probe_text("trace", SOURCE)
    assert out.count("pti_now()") == 4 + 1   # four stamps and the definition
    assert "t[4] = pti_smid()" in out and "t[5] = (unsigned long long)a.q[0]" in out
    assert load_script("cta_timeline").TRACE_MAX == ps.TRACE_MAX and load_script("cta_timeline").FIELDS == 6
    assert "griddepcontrol.wait" in ps.probe_text("nowait", SOURCE)   # the other kernels keep their waits
    assert ps.probe_text("nowait", SOURCE).count("pti_pdl_wait();") == SOURCE.count("pti_pdl_wait();") - 1


def test_probe_refuses_a_source_without_its_text():
    ps = load_script("probe_source")
    old = ps.PROBES["x_row0"][0][0]
    with pytest.raises(SystemExit, match="expected one"):
        ps.probe_text("x_row0", SOURCE.replace(old, "0"))
    with pytest.raises(SystemExit, match="found 2"):
        ps.probe_text("x_row0", SOURCE + old)
