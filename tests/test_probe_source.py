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


def test_cta_timeline_summary_of_known_stamps():
    """scripts/cta_timeline.py's medians on stamps laid out by hand: launches 5 us apart, each CTA entering 1 us
    before its wait returns, finishing 4 us after it, the launch's CTAs finishing 0.3 us apart."""
    import numpy as np
    ct = load_script("cta_timeline")
    launches, grid, rng = 12, 4, np.random.default_rng()
    base = int(rng.integers(10**9, 10**12))   # a fresh origin each run: only differences may matter
    t = np.zeros((launches * grid, ct.FIELDS), dtype=np.int64)
    for L in range(launches):
        for c in range(grid):
            w = base + L * 5000
            t[L * grid + c] = [w - 1000, w, w + 3500, w + 4000 + 100 * c, c, 7 + L]
    s = ct.summary({"t": t, "grid": grid, "name": "pti_mm_f16_out_t1_r1_m1_u4_p1", "replay_us": 5.0,
                    "nbytes": 9e6}, 4.5e12)
    assert s["kernel"] == "t1_r1_m1_u4_p1" and s["launches"] == launches and s["mixed"] == 0
    assert abs(s["period"] - 5.0) < 1e-6 and abs(s["pre"] - 1.0) < 1e-6 and abs(s["spread"]) < 1e-6
    assert abs(s["lag"] - (5.0 - 4.3)) < 1e-6 and abs(s["tail"] - 0.3) < 1e-6   # next wait after the last finish
    assert abs(s["work"][1] - 4.15) < 1e-6 and abs(s["loop"] - 3.5) < 1e-6 and abs(s["ideal"] - 2.0) < 1e-6
    t[5, 5] += 1   # one CTA of launch 1 with another launch's weights
    assert ct.summary({"t": t, "grid": grid, "name": "pti_mm_f16_out_x_y_z", "replay_us": 5.0, "nbytes": 9e6},
                      4.5e12)["mixed"] == 1


def test_sass_mix_counts_the_loads_before_the_wait():
    """scripts/sass_mix.py --wait: the loads a kernel can issue before an ACQBULK (griddepcontrol.wait), and among
    them those that are not weight-shaped (a cached 16-byte load: activations read too early); None without a wait."""
    sm = load_script("sass_mix")
    sass = """.text.k:
        /*0000*/                   PREEXIT ;
        /*0010*/                   LDG.E.NA.128 R16, desc[UR6][R12.64] ;
        /*0020*/               @P3 LDG.E.128.CONSTANT R20, desc[UR6][R14.64] ;
        /*0030*/                   LDG.E R4, desc[UR6][R14.64] ;
        /*0040*/                   ACQBULK ;
        /*0050*/                   LDG.E.128.CONSTANT R24, desc[UR6][R14.64+0x10] ;
.text.j:
        /*0000*/                   LDG.E.128.CONSTANT R24, desc[UR6][R14.64] ;
        /*0010*/                   EXIT ;
"""
    funcs, labels = sm.functions(sass)
    assert len(sm.loads_before_wait(funcs["k"], labels["k"])) == 3
    assert len(sm.early_activation_loads(funcs["k"], labels["k"])) == 1
    assert sm.loads_before_wait(funcs["j"], labels["j"]) is None


def test_early_activation_loads_flags_all_but_weight_shaped_loads():
    """scripts/sass_mix.early_activation_loads (check_kernels' guard): on every path from the entry up to a wait,
    only weight streams (.NA. 16-byte) and 4-byte scale loads pass; cached 16-byte, 2-byte, cp.async and TMA
    loads are flagged.  Kernel m waits first in a branch (the inv CTAs' way), so its main path's activation
    load lies after a wait by address but before any on its path."""
    sm = load_script("sass_mix")
    sass = """.text.k:
        /*0000*/                   LDG.E.NA.128.CONSTANT R16, desc[UR6][R12.64] ;
        /*0010*/                   LDG.E.NA.128 R16, desc[UR6][R12.64+0x10] ;
        /*0020*/               @P3 LDG.E.128.CONSTANT R20, desc[UR6][R14.64] ;
        /*0030*/                   LDG.E.CONSTANT R4, desc[UR6][R14.64] ;
        /*0040*/                   LDG.E R5, desc[UR6][R14.64+0x4] ;
        /*0050*/                   LDG.E.U16 R6, desc[UR6][R14.64] ;
        /*0060*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR6][R14.64] ;
        /*0064*/                   LDGDEPBAR ;
        /*0068*/                   UTMALDG.2D [UR8], [UR4] ;
        /*0070*/                   LDG.E.128 R8, desc[UR6][R14.64] ;
        /*0080*/                   ACQBULK ;
        /*0090*/                   LDG.E.128.CONSTANT R24, desc[UR6][R14.64+0x10] ;
.text.j:
        /*0000*/                   LDG.E.128.CONSTANT R24, desc[UR6][R14.64] ;
        /*0010*/                   EXIT ;
.text.m:
        /*0000*/                   ISETP.GE.AND P0, PT, R0, R1, PT ;
        /*0010*/               @P0 BRA `(.L_x_7) ;
        /*0020*/                   ACQBULK ;
        /*0030*/                   LDG.E.128.CONSTANT R24, desc[UR6][R14.64] ;
        /*0040*/                   EXIT ;
.L_x_7:
        /*0050*/                   LDG.E.NA.128.CONSTANT R16, desc[UR6][R12.64] ;
        /*0060*/                   LDG.E.128.CONSTANT R20, desc[UR6][R14.64] ;
        /*0070*/                   ACQBULK ;
        /*0080*/                   LDG.E.128.CONSTANT R28, desc[UR6][R14.64+0x10] ;
        /*0090*/                   BRA `(.L_x_7) ;
"""
    funcs, labels = sm.functions(sass)
    flagged = {name: sm.early_activation_loads(ins, labels[name]) for name, ins in funcs.items()}
    assert [t.split()[1 if t.startswith("@") else 0] for t in flagged["k"]] == \
        ["LDG.E.128.CONSTANT", "LDG.E.U16", "LDGSTS.E.BYPASS.128", "UTMALDG.2D", "LDG.E.128"]
    assert flagged["j"] == []   # no wait at all: not a dependent launch's kernel
    assert flagged["m"] == ["LDG.E.128.CONSTANT R20, desc[UR6][R14.64]"]


def test_pre2_probe_requests_the_second_step_early_and_never_twice():
    """pre2: B's weights before the wait (after A's), B's activations after it, and neither loaded again by the
    peeled first pass or the two-steps-left branch when that branch is the first (i == 0)."""
    ps = load_script("probe_source")
    out = ps.probe_text("pre2", SOURCE)
    wait = out.index("    pti_pdl_wait();\n    if (PF == 2) {")
    early_a = out.index("pti_load_w_step<0, NTW, RG, MT, U, true>(A, p);")
    early_b = out.index("pti_load_w_step<1, NTW, RG, MT, U, true>(B, p);")
    assert early_a < early_b < wait
    assert out.index("pti_load_x_step<1>(B, p);") > wait
    peel = out[out.index("if (nsteps > 2) {"):out.index("#pragma unroll 1", wait)]
    assert "(B, p)" not in peel and peel.count("pti_compute_step<TIN>") == 2 and "i = 2;" in peel
    assert "if (i > 0) pti_load_step<1, XF>(B, p);" in out
    assert out.count("pti_load_step<1, XF>(B, p);") == SOURCE.count("pti_load_step<1, XF>(B, p);")
