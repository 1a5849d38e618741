"""The Hopper kernels' launches as CudaBackend.launch_wg plans them, on the CPU: which kernels, grids, shared
memory, clusters, first units and split bits a call gives, under the rest form's settings (docs/perf.md,
sessions 39-40).  The CUDA driver's launch call is recorded instead of made (no GPU here); every other part is
the backend's own code, launch_config's structs included.  The GPU tests check the bits of the same paths."""

from __future__ import annotations

import types

import pytest
import torch

from pti_cli.backends.cuda import (WG_SMEM_TWO, WG_VARIANTS, CudaBackend, Epilogue, wg_rest_setting,
                                   wg_rest_twins_setting, wg_smem, wg_split_slack_setting)
from pti_cli.backends.repack import Packed
from pti_cli.errors import PtiError

# launch_wg's kernel arguments: positions in its value tuple
MA, MB, H16, N_INV, UNIT0 = 10, 11, 15, 20, -1


class RecordingDriver:
    """cuda.bindings' driver with cuLaunchKernelEx recorded instead of made: (kernel, config, argument values)."""

    def __init__(self):
        from cuda.bindings import driver
        self.real, self.launches = driver, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def cuLaunchKernelEx(self, cfg, f, args, extra):
        self.launches.append((f, cfg, args[0]))
        return (self.real.CUresult.CUDA_SUCCESS,)


def backend(monkeypatch, **env) -> CudaBackend:
    """A CudaBackend with the fields launch_wg reads, as an H200 loads them (session 39: 132 SMs, 30 clusters of 8
    at two CTAs a SM), under the given PTI_WG_* settings; launches recorded."""
    for k, v in env.items():
        monkeypatch.setenv(f"PTI_WG_{k}", v)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    be = object.__new__(CudaBackend)
    be.device, be.sm_count, be.pdl, be._drv = torch.device("cpu"), 132, True, RecordingDriver()
    be.wg_table, be._tiles, be._fix, be.smem_two, be.ctas_a_sm = WG_VARIANTS, {}, {}, {}, {}
    be.wg_rest, be.wg_rest_twins = wg_rest_setting(), wg_rest_twins_setting()
    be.wg_split_slack = wg_split_slack_setting()
    be.wg_funcs, be.smem, be.wg_split_resident, be.wg_split_a_sm = {"pti_wg_tiles": "pti_wg_tiles"}, {}, {}, {}
    forms = [v for vs in WG_VARIANTS.values() for v in vs] + [(0, "m8_d8", 8, 2, 4, 8, 2), (0, "m4_d8", 4, 2, 4, 8, 2)]
    for _, suffix, mt, pb, slots, c, fix in forms:
        for t in ("bf16", "f16"):
            for o in ("f32", "out", "glu"):
                n = f"pti_wg_{t}_{o}_{suffix}"
                be.wg_funcs[n], be.smem[n] = n, wg_smem(mt, pb, slots, c)
                if suffix in be.wg_rest:
                    be.wg_split_resident[n] = 30
                if fix == 2:
                    be.wg_split_a_sm[n] = 2
    return be


def weight(n: int, k: int, twins: int) -> list[Packed]:
    """A matrix of n rows and K = k in the ring layout's shapes (its values are never read here)."""
    nb = k // 32

    def pack():
        return Packed(torch.empty(n // 16, nb, 32, 16, dtype=torch.int8), torch.empty(n // 16, nb, 8, dtype=torch.int32), n, k)
    packs = [pack() for _ in range(twins)]
    for p in packs:
        p.ring = pack()
    return packs


def plan(be: CudaBackend, n: int, k: int, rows: list[int], epi=None) -> list[tuple]:
    """One launch_wg call's matmul launches: (kernel suffix, grid x, grid y, shared memory, cluster, split bits,
    first unit, inv CTAs, rows of twin A, rows of twin B); the pti_wg_tiles launches left out."""
    packs = weight(n, k, len(rows))
    xs = [torch.empty(r, k, dtype=torch.bfloat16) for r in rows]
    ys = [torch.empty(r, n, dtype=torch.float32) for r in rows]
    be._drv.launches.clear()
    be.launch_wg(packs, xs, ys, False, epi)
    out = []
    for f, cfg, vals in be._drv.launches:
        if f == "pti_wg_tiles":
            continue
        cluster = next((a.value.clusterDim.x for a in cfg.attrs[:cfg.numAttrs]
                        if a.id == be._drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), 0)
        out.append((f.rsplit("_", 2)[-2] + "_" + f.rsplit("_", 1)[-1], cfg.gridDimX, cfg.gridDimY, cfg.sharedMemBytes,
                    cluster, vals[H16] & 24, vals[UNIT0], vals[N_INV], vals[MA], vals[MB]))
    return out


def given(n_rows: int, k: int, nr: int, twins: int = 1, pins: bool = False):
    """An epilogue with the tiles given (nr tile rows), and with pins the scaled form's partial sums and inv slots."""
    tiles = [torch.empty(k // 32 * nr * 32, dtype=torch.bfloat16) for _ in range(twins)]
    if not pins:
        return Epilogue(0, ti=tiles)
    return Epilogue(k // 16, 1e-5, pin=[torch.empty(n_rows, k // 16) for _ in range(twins)],
                    inv=[torch.empty(n_rows) for _ in range(twins)], ti=tiles)


def test_default_split_at_64_rows_only(monkeypatch):
    """The defaults: a 64-row launch of 4096 rows as 30 clusters of m8_c8 and 2 units of m8_d8 beside them, both at
    m8's own shared memory (WG_SMEM_TWO); 32 rows one launch of m4_c8 at its own (three CTAs a SM)."""
    be = backend(monkeypatch)
    own4 = wg_smem(4, 2, 4, 8)
    assert own4 < WG_SMEM_TWO
    assert plan(be, 4096, 2048, [64]) == [("m8_c8", 240, 1, WG_SMEM_TWO, 8, 8, 0, 0, 64, 64),
                                          ("m8_d8", 16, 1, WG_SMEM_TWO, 0, 16, 30, 0, 64, 64)]
    assert plan(be, 4096, 2048, [32]) == [("m4_c8", 256, 1, own4, 8, 0, 0, 0, 32, 32)]
    # two twins: one launch of both (grid y 2), two waves
    assert plan(be, 4096, 2048, [64, 60]) == [("m8_c8", 256, 2, WG_SMEM_TWO, 8, 0, 0, 0, 64, 60)]


@pytest.mark.parametrize("value", ["1", "2"])
def test_rest32_holds_m4_c8_to_two_ctas_a_sm(monkeypatch, value):
    """PTI_WG_REST32: 17-32 rows of 4096 as 30 clusters of m4_c8 and 2 units of m4_d8, both asking WG_SMEM_TWO
    (no SM takes a third CTA); with 2 only on the narrow class's long K (down, 14336; not O, 4096)."""
    be = backend(monkeypatch, REST32=value)
    split = [("m4_c8", 240, 1, WG_SMEM_TWO, 8, 8, 0, 0, 20, 20), ("m4_d8", 16, 1, WG_SMEM_TWO, 0, 16, 30, 0, 20, 20)]
    assert plan(be, 4096, 14336, [20], given(20, 14336, 32)) == split
    short = plan(be, 4096, 4096, [20], given(20, 4096, 32))
    assert short == (split if value == "1" else [("m4_c8", 256, 1, wg_smem(4, 2, 4, 8), 8, 0, 0, 0, 20, 20)])


@pytest.mark.parametrize("slack", [1, 2])
def test_split_slack_leaves_clusters_to_the_rest(monkeypatch, slack):
    """PTI_WG_SPLIT_SLACK: the split's clusters are that many fewer than the card holds (30), their units in the rest
    launch, which starts at the first unit past them; at 64 rows (m8_c8) and, with REST32, at 17-32 (m4_c8)."""
    be = backend(monkeypatch, REST32="2", SPLIT_SLACK=str(slack))
    fit = 30 - slack
    assert plan(be, 4096, 2048, [64]) == [("m8_c8", 8 * fit, 1, WG_SMEM_TWO, 8, 8, 0, 0, 64, 64),
                                          ("m8_d8", 8 * (32 - fit), 1, WG_SMEM_TWO, 0, 16, fit, 0, 64, 64)]
    assert plan(be, 4096, 14336, [24], given(24, 14336, 32)) == [
        ("m4_c8", 8 * fit, 1, WG_SMEM_TWO, 8, 8, 0, 0, 24, 24), ("m4_d8", 8 * (32 - fit), 1, WG_SMEM_TWO, 0, 16, fit, 0, 24, 24)]


def test_split_slack_setting_errors(monkeypatch):
    """A bad PTI_WG_SPLIT_SLACK is a PtiError naming the setting; the units left over must still fit the free
    slots, or the launch is not split."""
    for bad in ("5", "-1", "x", "1.5"):
        monkeypatch.setenv("PTI_WG_SPLIT_SLACK", bad)
        with pytest.raises(PtiError, match="PTI_WG_SPLIT_SLACK"):
            wg_split_slack_setting()
    be = backend(monkeypatch, SPLIT_SLACK="4")   # 26 clusters: 6 units, 48 CTAs in 264 - 208 = 56 free slots
    assert [p[0] for p in plan(be, 4096, 2048, [64])] == ["m8_c8", "m8_d8"]
    be.wg_split_a_sm = {k: 1 for k in be.wg_split_a_sm}   # one CTA a SM: no free slot (132 - 208), one launch
    assert [p[0] for p in plan(be, 4096, 2048, [64])] == ["m8_c8"]


def test_rest_twins_one_split_launch_a_twin_in_the_two_twins_form(monkeypatch):
    """PTI_WG_REST_TWINS: two twins of 36 and 31 rows as one split launch a twin, both in the 64-row form the
    given tiles are laid out for (31 rows alone would take m4_c8), each with its own rows; off, one launch; at
    17-32 rows a twin never (WG_TWINS_APART: m8_c8 only)."""
    be = backend(monkeypatch, REST_TWINS="1", REST32="1")
    # at 17-32 rows a twin (m4_c8, not in WG_TWINS_APART) one launch of both, unsplit
    assert plan(be, 4096, 2048, [32, 27], given(0, 2048, 32, twins=2)) == [
        ("m4_c8", 256, 2, wg_smem(4, 2, 4, 8), 8, 0, 0, 0, 32, 27)]
    got = plan(be, 4096, 2048, [36, 31], given(0, 2048, 64, twins=2))
    assert got == [("m8_c8", 240, 1, WG_SMEM_TWO, 8, 8, 0, 0, 36, 36), ("m8_d8", 16, 1, WG_SMEM_TWO, 0, 16, 30, 0, 36, 36),
                   ("m8_c8", 240, 1, WG_SMEM_TWO, 8, 8, 0, 0, 31, 31), ("m8_d8", 16, 1, WG_SMEM_TWO, 0, 16, 30, 0, 31, 31)]
    with pytest.raises(PtiError, match="given tiles"):   # (why the two twins' form is kept: 64-row tiles, not 32)
        be._launch_wg(weight(4096, 2048, 1), [torch.empty(31, 2048, dtype=torch.bfloat16)],
                      [torch.empty(31, 4096)], False, given(0, 2048, 64))
    monkeypatch.setenv("PTI_WG_REST_TWINS", "0")
    be.wg_rest_twins = wg_rest_twins_setting()
    assert plan(be, 4096, 2048, [36, 31], given(0, 2048, 64, twins=2)) == [
        ("m8_c8", 256, 2, WG_SMEM_TWO, 8, 0, 0, 0, 36, 31)]


def test_qkv_and_inv_ctas_keep_one_launch(monkeypatch):
    """QKV's 6144 rows (48 units) at 64 rows: the 18 units past the 30 clusters do not fit the 24 free slots, so one
    launch of 48 clusters (49 with the scaled form's inv cluster), under every setting."""
    be = backend(monkeypatch, REST32="1", REST_TWINS="1")
    assert plan(be, 6144, 4096, [64], given(64, 4096, 64)) == [("m8_c8", 384, 1, WG_SMEM_TWO, 8, 0, 0, 0, 64, 64)]
    assert plan(be, 6144, 4096, [64], given(64, 4096, 64, pins=True)) == [
        ("m8_c8", 392, 1, WG_SMEM_TWO, 8, 0, 0, 8, 64, 64)]
    assert plan(be, 4096, 2048, [64], given(64, 2048, 64, pins=True)) == [   # inv CTAs: no split either
        ("m8_c8", 264, 1, WG_SMEM_TWO, 8, 0, 0, 8, 64, 64)]


def test_the_tiles_launch_comes_first_when_not_given(monkeypatch):
    """Without given tiles a pti_wg_tiles launch lays out the rows first; the split launches follow it, each of
    one twin's alone with REST_TWINS (its own tiles launch before each pair)."""
    be = backend(monkeypatch, REST_TWINS="1")
    packs = weight(4096, 2048, 2)
    xs = [torch.empty(r, 2048, dtype=torch.bfloat16) for r in (64, 40)]
    ys = [torch.empty(r, 4096) for r in (64, 40)]
    be.launch_wg(packs, xs, ys)
    names = [f.rsplit("_", 2)[-2] + "_" + f.rsplit("_", 1)[-1] if f != "pti_wg_tiles" else f for f, _, _ in be._drv.launches]
    assert names == ["pti_wg_tiles", "m8_c8", "m8_d8"] * 2
    assert [cfg.gridDimY for _, cfg, _ in be._drv.launches] == [1] * 6


def test_a_missing_kernel_form_is_a_clear_error(monkeypatch):
    """A launch of a kernel the module lacks is a PtiError that names what to choose, not a KeyError (session 52: a
    PTI_VARIANTS variant for one twin's 16 rows, whose residual launch took the "_i1" form it does not have); a kernel
    the module has launches."""
    from pti_cli.backends.cuda import INV_VARIANTS, SMEM_BYTES
    be = backend(monkeypatch)
    have = f"pti_mm_bf16_f32_{INV_VARIANTS[0]}_i1"
    be.funcs, be.smem = {have: have}, {have: SMEM_BYTES}
    p = weight(1024, 4096, 1)[0]
    x, y = torch.empty(16, 4096, dtype=torch.bfloat16), torch.empty(16, 1024, dtype=torch.float32)
    inv = Epilogue(ng=256, pin=[torch.empty(16, 256)], inv=[torch.empty(16)])
    with pytest.raises(PtiError, match=f"t1_r1_m2_u4 has no inv CTAs' form.*{INV_VARIANTS[0]}"):
        be.launch([p], [x], [y], "pti_mm_bf16_f32_t1_r1_m2_u4_i1", inv)
    with pytest.raises(PtiError, match="no such kernel"):
        be.launch([p], [x], [y], "pti_mm_bf16_f32_t1_r1_m2_u4")
    assert be._drv.launches == []
    be.launch([p], [x], [y], have, inv)
    assert [f for f, _, _ in be._drv.launches] == [have]
