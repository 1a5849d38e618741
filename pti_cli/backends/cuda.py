"""The kernels backend on NVIDIA GPUs: kernels/pti_kernel.hip through cuda-python.

The source is compiled by NVRTC to a CUBIN for the device (compile.py, cached),
loaded once into torch's CUDA context when the backend is made (so before any
CUDA-graph capture), and launched with cuLaunchKernel on the stream torch is
using at that moment, with torch tensors' device pointers: a pass made of these
launches can be captured in a CUDA graph.

Kernel choice depends on M (the activation rows) and on the matrix's width class
(row groups per SM: wider matrices take variants of fewer registers, more CTAs per SM);
every variant computes each output element in the same order
(kernels/pti_kernel.hip, top comment), so results are batch-invariant: a row's
bits never depend on M.  More than 64 rows go in chunks of 64.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..errors import PtiError
from .base import Backend
from .repack import RING_GROUPS, Packed, interleave_glu_rows, repack_q8, repack_ssq16, ring_pack

MAX_ROWS = 64          # rows per launch (8 tiles of 8)
THREADS = 256
TWIN_IDS = {"a": (0,), "b": (1,), "ab": (0, 1)}

# (twins, max rows) -> kernel suffixes "t{twins}_r{row groups per CTA}_m{row tiles}_u{blocks per step}"
# (kernels/pti_kernel.hip) by the matrix's width in row groups of 16 per SM, chosen from `pti bench
# --kernels` and pass A/B runs (docs/perf.md): "n" (narrow, e.g. 4096 rows on an H200) below
# WIDTHS["w"] row groups per SM, "w" (wide, e.g. 6144 rows: fewer registers, 3 CTAs per SM) from
# there, "x" (extra wide, e.g. 28672 rows and the output head: 4 or 5 CTAs per SM) from WIDTHS["x"];
# an entry without "x" uses "w" there.  Twins with
# more than 8 rows go as two one-twin launches (measured faster): the same bytes, the same per-row
# arithmetic.
TC_VARIANTS = {
    1: ((8, {"n": "t1_r1_m1_u4_p1", "w": "t1_r1_m1_u4", "x": "t1_r1_m1_u2"}),
        (16, {"n": "t1_r1_m2_u2_p1", "w": "t1_r1_m2_u1_p1", "x": "t1_r1_m2_u1"}),
        (32, {"n": "t1_r1_m4_u2", "w": "t1_r1_m4_u1"}),
        (64, {"n": "t1_r1_m8_u1", "w": "t1_r1_m8_u1"})),
    2: ((8, {"n": "t2_r1_m1_u2_p1", "w": "t2_r1_m1_u2"}),),
}
WIDTHS = {"w": 2.5, "x": 8.0}
# Entries of TC_VARIANTS that differ for the kernels reading bf16 activations (converted to f16 in the main loop,
# more instructions a step than f16 or h16 inputs), as (twins, row limit, width class): on an H100 the wide class's
# 1-8 rows of one model ran 9.2 us on t1_r1_m1_u2_p1 against u4's 10.0 with bf16 inputs, and both 9.7 with h16
# inputs (the form a bf16 model runs; docs/perf.md, session 45).
TC_BF16_VARIANTS = {(1, 8, "w"): "t1_r1_m1_u2_p1"}
# The "_p2" variant requests a warp's first 16 blocks before the wait: all of a row group of K <= P2_MAX_K, and
# it holds up to 8 activation rows of that K in shared memory.  Past it the rest of K goes one block at a time.
P2_VARIANT = "t1_r1_m1_u16_p2"
P2_MAX_K = 16 * 8 * 32
# Loaded and benchmarkable, but not in the policy above ("_p1" in the policy: the software-pipelined
# main loop, kernels/pti_kernel.hip PF = 1, measured in docs/perf.md, kernels v10).
EXTRA_VARIANTS = ("t1_r2_m1_u4", "t2_r2_m1_u2", "t1_r2_m2_u4", "t1_r2_m4_u2", "t1_r2_m8_u1", "t1_r1_m2_u6",
                  "t1_r1_m2_u8", "t1_r1_m4_u4", "t2_r1_m2_u4", "t1_r1_m1_u8", "t2_r1_m1_u2_p1", "t1_r1_m2_u3",
                  "t1_r1_m2_u4", "t1_r2_m1_u2_p1", "t1_r2_m1_u4_p1", P2_VARIANT)
TWIN_KERNEL_MAX_ROWS = 8
# The policy's one-twin variants of two or more row tiles (more than 8 rows) also exist in the inv
# CTAs' form, named with "_i1" (kernels/pti_kernel.hip PtiArgs, Epilogue below).
INV_VARIANTS = tuple(dict.fromkeys(v for lim, names in TC_VARIANTS[1] if lim > 8 for v in names.values()))
ACT_TAGS = {torch.bfloat16: "bf16", torch.float16: "f16"}
# the tensor-core kernels' input/output forms in their names: pti_mm_{tag}_{variant}
MM_TAGS = ("bf16_f32", "bf16_out", "bf16_glu", "f16_f32", "f16_out", "f16_glu")

# The Hopper kernels (kernels/pti_kernel.hip, pti_wg_mm; sm_90a, unless PTI_WGMMA=0): 17-64 rows of tall
# matrices (width class "x": an 8B model's gate/up and head), bf16 or f16 (h16) inputs, from a second copy
# of the matrix in the ring layout (repack.ring_pack, Packed.ring), with the policy kernels' bits
# (docs/perf.md, session 27: gate/up x1.30 and x1.84 of one row's time at 32 and 64 rows, the policy's
# x1.94 and x3.36).  The copy doubles those matrices' memory: it is made only while RING_RESERVE of
# the card's memory stays free.  By width class, then rows: (max rows, name suffix, tiles of 8 rows, blocks
# a phase, ring slots, CTAs a unit C, fixup form G), as pti_kernel.hip's PTI_WG_ALL lines.  At 9-16 rows of
# one model the narrower classes stay on the policy and the tall one takes m2 (WG_TALL_MIN_ROWS, session 32);
# two twins take m2 there too (session 34).
# The narrower classes take the cluster forms (C > 1), where they are faster (WG_MIN_K below;
# PTI_WG_NARROW, wg_setting).  Their matmul alone times as scripts/wgmma_probe.py's same forms since
# session 29; their call pays one launch more (pti_wg_tiles), 2-4 us (docs/perf.md, session 29).
WG_VARIANTS = {"x": ((16, "m2", 2, 4, 3, 1, 0), (32, "m4", 4, 4, 3, 1, 0), (64, "m8", 8, 2, 4, 1, 0)),
               "w": ((32, "m4_c4", 4, 4, 3, 4, 0), (64, "m8_c8", 8, 2, 4, 8, 0)),
               "n": ((32, "m4_c8", 4, 2, 4, 8, 0), (64, "m8_c8", 8, 2, 4, 8, 0))}
# The fixup form (G = 1): m8_c8's CTAs without a cluster, the unit's last CTA adding the 8 slices' sums from
# global memory in slice order.  A cluster of 8 must sit in one GPC, so the H200 holds 30 of them at two CTAs
# a SM, and a 64-row launch of 32 units (4096 rows) ran in two waves (docs/perf.md, session 31).
# PTI_WG_FIX=1 gives the narrow class's 64-row entry to it (wg_variants): up to 41 units, about one wave of
# CTAs; the wide class has more units than one wave holds either way.
WG_FIX = (64, "m8_g8", 8, 2, 4, 8, 1)
# The rest form (PTI_WG_REST, session 39): a 64-row launch of one twin of the narrow class whose units outnumber the
# clusters of 8 the card holds at once (a 4096-row matrix's 32 units against 30 clusters: session 31's second wave)
# runs as two launches.  The first takes as many units as clusters fit (m8_c8); the second, the units left over, in
# m8_c8's loop without a cluster whose 8 CTAs a unit share the epilogue through L2 (G = 2), in the CTA slots the
# clusters leave free, alongside them.  Same bits: each unit's 8 slices added in slice order either way.  On the H200
# (30 clusters + 2 units): 4096x14336 at 64 rows on tiles given 37.8 -> 27.4 us, 4096x4096 15.3 -> 13.0; one model
# +4.1% at 48 sequences and +4.0% at 64 (docs/perf.md, session 39).
# The same split at 17-32 rows (PTI_WG_REST32, session 40): m4_c8 fits three CTAs a SM, and its 32 clusters land
# unevenly (16 SMs with three CTAs, 8 with none: session 39's probe).  Split, both launches ask for WG_SMEM_TWO so
# that no SM takes a third CTA: 30 clusters, and 2 units in m4_d8 in the 24 slots left.  On the H200 (tiles given,
# Q8, 32 rows): down 25.9 -> 22.2 us (x1.74 -> x1.48), O 10.4 -> 10.5 (hence PTI_WG_REST32=2: the long K only).
# By cluster form: its rest form's entry, as WG_VARIANTS'.
WG_RESTS = {"m8_c8": (64, "m8_d8", 8, 2, 4, 8, 2), "m4_c8": (32, "m4_d8", 4, 2, 4, 8, 2)}
# Two twins at 9-16 rows a twin of the narrow class (down): clusters of 4 (two slices a CTA, 16 tile rows) at three
# CTAs a SM (PB 2), so that a 4096-row matrix's 64 clusters (32 units a twin) fit one wave, where m4_c8's 64
# clusters of 8 ran in 1.4 waves (the card holds 92 clusters of 4 at three CTAs a SM, 45 of 8: docs/perf.md,
# sessions 32 and 34).  Down at 16 rows a twin 44.2 -> 42.9 us, twins ab +2.7% / +3.0% at 24 / 32 sequences
# (session 34).  A 32-row form of the same kind (m4_c4_b2) was 15% slower than m4_c8 at 17-32 rows and was
# removed.  The wide class (QKV) takes it only under PTI_WG_TWIN_FORMS=2, for A/B runs.  ncu showed its clusters
# landing unevenly (some SMs with no CTA, others with three: session 34, item 3), hence m2_c2 under
# PTI_WG_TWIN_FORMS=3, for A/B runs: clusters of 2 whose shared memory holds them to one CTA a SM (64 clusters of
# a 4096-row matrix's two twins over 128 SMs).  Entries as WG_VARIANTS'.
WG_TWIN_FORM = (16, "m2_c4", 2, 2, 4, 4, 0)
WG_TWIN_FORM_C2 = (16, "m2_c2", 2, 4, 4, 2, 0)
# By PTI_WG_TWIN_FORMS: each width class's two-twin form (wg_twin_forms)
WG_TWIN_SETTINGS = {"0": {}, "1": {"n": WG_TWIN_FORM}, "2": {"n": WG_TWIN_FORM, "w": WG_TWIN_FORM},
                    "3": {"n": WG_TWIN_FORM_C2}}
WG_TWIN_VARIANTS = {cls: tuple(dict.fromkeys(f[cls] for f in WG_TWIN_SETTINGS.values() if cls in f)) for cls in ("n", "w")}


def wg_twin_forms() -> dict:
    """PTI_WG_TWIN_FORMS, the form two twins of each width class take at 9-16 rows a twin (WG_TWIN_SETTINGS):
    "1" (the default) m2_c4 for the narrow class, "2" for the wide one too, "3" m2_c2 for the narrow one, "0" none
    (the classes' own forms, as in session 33)."""
    v = os.environ.get("PTI_WG_TWIN_FORMS", "1")
    if v not in WG_TWIN_SETTINGS:
        raise PtiError(f"PTI_WG_TWIN_FORMS must be 0, 1, 2 or 3, not {v!r}")
    return WG_TWIN_SETTINGS[v]


def wg_rest_setting() -> dict[str, int]:
    """The cluster forms whose launches the rest form splits (WG_RESTS, CudaBackend.wg_rest_units), each with the
    fewest K it splits: PTI_WG_REST (default 1) m8_c8 (33-64 rows; 0: one launch, two waves, session 38's path, for
    A/B runs); PTI_WG_REST32 (default 0 until the model is measured) m4_c8 (17-32 rows) too, 1 on any K, 2 only on
    the narrow class's long K (WG_MIN_K: an 8B model's down, not its O)."""
    v, v32 = os.environ.get("PTI_WG_REST", "1"), os.environ.get("PTI_WG_REST32", "0")
    if v not in ("0", "1"):
        raise PtiError(f"PTI_WG_REST must be 0 or 1, not {v!r}")
    if v32 not in ("0", "1", "2"):
        raise PtiError(f"PTI_WG_REST32 must be 0, 1 or 2, not {v32!r}")
    forms = {"m8_c8": 0} if v == "1" else {}
    if v32 != "0":
        forms["m4_c8"] = WG_MIN_K["n"] if v32 == "2" else 0
    return forms


def wg_split_slack_setting() -> int:
    """PTI_WG_SPLIT_SLACK (default 0; session 41): how many clusters fewer than the card holds at once (at the split's
    shared memory) a split launch's clusters take; their units go to the rest launch too, where they must fit the
    free slots.  On an H100 (session 41) one model at 24 sequences was 7% slower with PTI_WG_REST32=2 though the
    table was level: in the pass each down took 10 us more.  The card holds exactly 30 clusters of 8 at two CTAs a
    SM (its GPCs of 8 and 18 SMs), so a placement short of perfect, as the launch before drains, leaves the last
    cluster a second round; 28 clusters leave room for two misplaced ones.  At 2 the pass took back 6.6 of the
    10 us, still 2.5% slower than one launch, and at 64 rows level: for A/B runs."""
    v = os.environ.get("PTI_WG_SPLIT_SLACK", "0")
    if v not in ("0", "1", "2", "3", "4"):
        raise PtiError(f"PTI_WG_SPLIT_SLACK must be 0-4, not {v!r}")
    return int(v)


def env_switch(var: str, default: str = "1") -> bool:
    """An on/off setting for A/B runs: 1 on, 0 off, unset the default."""
    v = os.environ.get(var) or default
    if v not in ("0", "1"):
        raise PtiError(f"{var} must be 0 or 1, not {v!r}")
    return v == "1"


# The cluster forms whose two-twin launches PTI_WG_REST_TWINS splits one a twin.  On the H200 (session 40, tiles
# given): down (4096x14336) in SSQ16 at 64 rows a twin 60.8 -> 55.6 us (x2.08 -> x1.89).  At 32 rows (m4_c8, with
# PTI_WG_REST32) down was 43.5 -> 43.9 and O 16.6 -> 21.3: two launches of half the work do not fill the card.
WG_TWINS_APART = ("m8_c8",)


def wg_rest_twins_setting() -> bool:
    """PTI_WG_REST_TWINS (default 0; session 40): a launch of two twins of a form of WG_TWINS_APART whose one-twin
    launches the rest form splits goes as one launch a twin, each split (a 4096-row matrix's 64 clusters of 8 at
    33-64 rows a twin run in three rounds of the 30 the card holds; two split launches take two)."""
    return env_switch("PTI_WG_REST_TWINS", "0")


def wg_rest_form(name: str) -> str | None:
    """The cluster form (a WG_RESTS key) of Hopper kernel `name`, where it has a rest form; else None."""
    return next((f for f in WG_RESTS if name.endswith("_" + f)), None)


def wg_rest_name(name: str) -> str | None:
    """The rest form's kernel for the units a launch of cluster form `name` leaves over (WG_RESTS): the same inputs
    and outputs; None for a form without one."""
    form = wg_rest_form(name)
    return name[:-len(form)] + WG_RESTS[form][1] if form else None


def wg_x_first() -> bool:
    """PTI_WG_X_FIRST (default 1): the Hopper kernels' residual form reads all of a thread's x values before
    its first store (bit 2 of PtiWgArgs.h16); 0: each just before its own stores, as before session 32."""
    v = os.environ.get("PTI_WG_X_FIRST", "1")
    if v not in ("0", "1"):
        raise PtiError(f"PTI_WG_X_FIRST must be 0 or 1, not {v!r}")
    return v == "1"


def wg_variants() -> dict:
    """WG_VARIANTS, with the fixup form for 33-64 rows of the narrow class under PTI_WG_FIX=1, and without the
    tall class's 16-row form under PTI_WG_M2=0 (its 9-16 rows then take the 32-row form, for A/B runs;
    PTI_WG_M2=1 keeps it from two twins, as in session 33: wg_kernel)."""
    v, m2 = os.environ.get("PTI_WG_FIX", "0"), os.environ.get("PTI_WG_M2", "2")
    if v not in ("0", "1") or m2 not in ("0", "1", "2"):
        raise PtiError(f"PTI_WG_FIX must be 0 or 1 and PTI_WG_M2 0, 1 or 2, not {v!r} and {m2!r}")
    table = dict(WG_VARIANTS)
    if m2 == "0":
        table["x"] = tuple(e for e in table["x"] if e[1] != "m2")
    if v == "1":
        table["n"] = table["n"][:1] + (WG_FIX,)
    return table


WG_MIN_ROWS = 17
# The tall class (gate/up, the head) from 9 rows of one model (its m2 form): at 16 rows the policy took 41.6 us
# on 28672x4096 where the Hopper m4 form took 37.9 at 32 (docs/perf.md, sessions 31-32).  PTI_WG_TALL_MIN_ROWS
# for A/B runs (17: session 31's).
WG_TALL_MIN_ROWS = 9
# A launch of two twins takes them from 9 rows a twin (past TWIN_KERNEL_MAX_ROWS, where the policy makes two
# one-twin launches): +3.6% at 24 and 32 sequences of twins ab (docs/perf.md, session 30, item 3).
WG_TWIN_MIN_ROWS = 9
RING_RESERVE = 0.25   # of the card's memory, left free by the ring copies (the KV cache, the pass's buffers)


def ring_fits(free: int, total: int, nbytes: int) -> bool:
    """Whether a ring copy of a matrix of nbytes fits: ring_pack's peak (the copy and a temporary)
    leaves RING_RESERVE of the card's `total` bytes of its `free` ones."""
    return free - 2 * nbytes >= RING_RESERVE * total


WG_OUTS = ("f32", "out", "glu")   # float32 outputs, 16-bit ones, silu(gate) * up


def wg_name(code: str, out: str, suffix: str) -> str:
    """A Hopper kernel's name (pti_kernel.hip PTI_WG_ALL): bf16 inputs, or f16 for the f16 and h16 codes."""
    return f"pti_wg_{'bf16' if code == 'bf16' else 'f16'}_{out}_{suffix}"


WG_NARROW = {"0": ("x",), "w": ("x", "w"), "1": ("x", "w", "n"), "auto": ("x", "w", "n")}
# With PTI_WG_NARROW=auto, the fewest K by width class at which the Hopper kernels take a matrix (none: 0).
# scripts/wg_gap.py and `pti bench --kernels` on the H200 (docs/perf.md, session 29): the cluster forms' call
# costs 2-4 us more than their matmul alone (the pti_wg_tiles launch), which the narrow class pays back for
# one model only on a long K (4096x14336: 28.6 / 43.1 against the policy's 30.5 / 47.0 us at 32 / 64 rows;
# 4096x4096: 12.4 / 17.9 against 10.6 / 15.6).  The wide class (6144x4096) takes them from 17 rows: 0.9 us
# slower than the policy at 32 rows alone, but the model ran faster with them (session 29, item 3).
WG_MIN_K = {"n": 8192}
# Two twins of a narrow matrix below WG_MIN_K (an 8B model's O, 4096x4096) take their two-twin form at 9-16 rows
# a twin (wg_twin_forms), one launch where the policy makes one a twin: twins ab +0.8% / +1.4% at 24 / 32
# sequences, its pti_wg_tiles launch included (PTI_WG_TWIN_SHORT 0 and 1 alternated; docs/perf.md, session 35).
# Such a matrix gets its ring copy with two twins where they have that form, or with one (the limits below).
# PTI_WG_TWIN_SHORT=0: not (session 34's path), for A/B runs.
WG_SHORT_ONE_MAX_ROWS = 32
# One twin of such a matrix takes the Hopper kernels at WG_MIN_ROWS to WG_SHORT_ONE_MAX_ROWS rows: its
# activations come in tiles from the attention (PTI_ATTN_TILES), so the Hopper call costs no pti_wg_tiles launch:
# one model +5.1% / +2.6% at 24 / 32 sequences (PTI_WG_SHORT_ONE 0 and 32 alternated), while at 64 rows that form
# lost 0.6% (PTI_WG_NARROW=1 against auto; docs/perf.md, session 37).  PTI_WG_SHORT_ONE: that most (0: never).


WG_SHORT_TWO_MAX_ROWS = 32
# Two twins of such a matrix past their own form's 16 rows a twin: the class's own forms up to this many rows a
# twin, one launch on the attention's tiles where the policy makes one a twin: twins ab +2.7% / +3.2% at 40 / 64
# sequences (PTI_WG_SHORT_TWO 16 and 32 alternated; docs/perf.md, session 37).  16: none past their own form.


def rows_setting(var: str, default: int) -> int:
    """A row count from the environment (0 to MAX_ROWS), for A/B runs; a clear error otherwise."""
    v = os.environ.get(var, str(default))
    if not v.isdigit() or int(v) > MAX_ROWS:
        raise PtiError(f"{var} must be a row count from 0 to {MAX_ROWS}, not {v!r}")
    return int(v)


def wg_short_one() -> int:
    """PTI_WG_SHORT_ONE (default WG_SHORT_ONE_MAX_ROWS): the most rows at which one twin of a narrow matrix below
    WG_MIN_K takes the Hopper kernels; 0: never (session 36's path), for A/B runs."""
    return rows_setting("PTI_WG_SHORT_ONE", WG_SHORT_ONE_MAX_ROWS)


def wg_short_two() -> int:
    """PTI_WG_SHORT_TWO (default WG_SHORT_TWO_MAX_ROWS): the most rows a twin at which two twins of a narrow
    matrix below WG_MIN_K take the Hopper kernels, where they take it at all (their own form, twin_short_form);
    16: only in that form (the path before session 37), for A/B runs."""
    return rows_setting("PTI_WG_SHORT_TWO", WG_SHORT_TWO_MAX_ROWS)


def wg_twin_short() -> bool:
    """PTI_WG_TWIN_SHORT (default 1): two twins of a narrow matrix below WG_MIN_K take their two-twin form."""
    v = os.environ.get("PTI_WG_TWIN_SHORT", "1")
    if v not in ("0", "1"):
        raise PtiError(f"PTI_WG_TWIN_SHORT must be 0 or 1, not {v!r}")
    return v == "1"


def wg_setting() -> str:
    """PTI_WG_NARROW: "0" the Hopper kernels for the tall matrices only, "w" the wide ones' cluster forms
    too (an 8B model's QKV), "1" the narrow ones' as well, each at every K and 17-64 rows (A/B runs and
    the tests); "auto" (the default) every class, the narrow one only on a long K (WG_MIN_K)."""
    v = os.environ.get("PTI_WG_NARROW", "auto")
    if v not in WG_NARROW:
        raise PtiError(f"PTI_WG_NARROW must be 0, w, 1 or auto, not {v!r}")
    return v


def wg_classes_wanted() -> tuple[str, ...]:
    """The width classes the Hopper kernels are loaded for (WG_VARIANTS, wg_setting).  `bench --synthetic
    8b`, one call, 0 / w / 1: 9201 / 9493 / 9475 tok/s at 64 sequences of one model, 7693 / 7818 / 7807
    of twins ab (docs/perf.md, session 28, before session 29's faster cluster forms)."""
    return WG_NARROW[wg_setting()]


def wg_min_k_wanted() -> dict | None:
    """WG_MIN_K with PTI_WG_NARROW=auto; None: every K."""
    return WG_MIN_K if wg_setting() == "auto" else None


def wg_smem(mt: int, pb: int, slots: int, c: int = 1) -> int:
    """pti_wg_mm's dynamic shared memory: the slots' barriers, the slots (a phase's weights, scales and
    activation tiles), the running sums (C = 1) or the parked sums of the CTA's 8 / C slices."""
    nr = 8 * mt
    return 128 + slots * pb * (RING_GROUPS * 544 + nr * 64) + (1 if c == 1 else 8 // c) * (nr // 2) * 256 * 4


# Shared memory that holds a Hopper kernel to two CTAs a SM (m8's).  The card does not spread a grid evenly: 224
# CTAs of m2 (28672x4096 at 16 rows), three a SM, took 43.7 us; two a SM, 33.5 (-23%); yet 384 or 1002 CTAs
# (49152 and 128256 rows) were faster at three (52.5 / 56.6 us, 138.4 / 142.1: docs/perf.md, session 33).  So a
# launch takes it only when its CTAs run in as many waves of two as of three (wg_launch_smem): one wave of two
# (224), or two twins' 448 CTAs of gate/up, two waves either way (75.8 -> 66.9 us at 16 rows a twin against the
# 32-row form; session 34).
WG_SMEM_TWO = wg_smem(8, 2, 4)


@dataclass
class KernelMatrix:
    """One weight matrix in the kernels' layout: one Packed per loaded twin."""
    packs: list[Packed]
    plane: dict[int, int]          # twin id (0 = A, 1 = B) -> index into packs
    rows: int
    cols: int
    identical: bool                # one model serves both twins
    extra: dict = field(default_factory=dict)
    glu: bool = False              # gate/up rows interleaved; the kernels return silu(gate) * up [M, rows / 2]

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.packs)

    @property
    def h16(self) -> bool:
        """Read by the h16 kernels: f16 inputs holding a bf16 model's activations (repack.py)."""
        return self.packs[0].code == "h16"


@functools.lru_cache(maxsize=8)
def _overrides(spec: str) -> dict[str, str]:
    """PTI_VARIANTS ("1:16:w=t1_r1_m2_u4;1:8:n=t1_r1_m1_u8") -> {"1:16:w": "t1_r1_m2_u4", ...}."""
    out = {}
    for item in filter(None, spec.split(";")):
        key, _, name = item.partition("=")
        if name not in all_variants() or len(key.split(":")) != 3 or key.split(":")[2] not in ("n", "w", "x"):
            raise PtiError(f"PTI_VARIANTS: {item!r} is not TWINS:ROWS:n|w|x=VARIANT with a variant of {all_variants()}")
        out[key] = name
    return out


def width_class(groups_per_sm: float) -> str:
    """"n", "w" or "x" (TC_VARIANTS) for a matrix of that many row groups of 16 per SM."""
    return "x" if groups_per_sm >= WIDTHS["x"] else "w" if groups_per_sm >= WIDTHS["w"] else "n"


def p2_wanted() -> bool:
    """PTI_P2=1: one twin's 1-8 rows of a matrix of K <= P2_MAX_K on P2_VARIANT (A/B runs only: slower than the
    policy on an H100, 67-82% of the bandwidth at one row against 87-99.5%, docs/perf.md session 57)."""
    v = os.environ.get("PTI_P2", "0")
    if v not in ("0", "1"):
        raise PtiError(f"PTI_P2 must be 0 or 1, not {v!r}")
    return v == "1"


def variant_for(twins: int, m: int, width: str = "n", act: str = "f16", k: int = 0) -> str:
    """The variant for m rows of a matrix of width class `width` ("n", "w", "x": width_class) and k columns
    (0: not known) whose kernels read `act` activations ("bf16" or "f16", as ACT_TAGS; h16 inputs are f16).
    PTI_VARIANTS overrides entries of TC_VARIANTS for A/B runs (`scripts/pass_ab.py
    TREE,PTI_VARIANTS=...`): "1:16:w=t1_r1_m2_u4;1:8:n=t1_r1_m1_u8" (twins:row limit:width=variant);
    every variant gives the same bits, so this changes only speed."""
    over = _overrides(os.environ.get("PTI_VARIANTS", ""))
    for limit, names in TC_VARIANTS[twins]:
        if m <= limit:
            default = names.get(width) or names["w"]
            if act == "bf16":
                default = TC_BF16_VARIANTS.get((twins, limit, width), default)
            if twins == 1 and limit == 8 and 0 < k <= P2_MAX_K and p2_wanted():
                default = P2_VARIANT
            return over.get(f"{twins}:{limit}:{width}", default)
    raise AssertionError(m)


def all_variants() -> list[str]:
    return sorted({v for vs in TC_VARIANTS.values() for _, names in vs for v in names.values()}
                  | set(TC_BF16_VARIANTS.values()) | set(EXTRA_VARIANTS))


def missing_kernel(name: str) -> str:
    """The error for a launch of a kernel the module does not have (session 52: a variant chosen with PTI_VARIANTS
    for one twin's 16 rows, whose residual launch writes the next matrix's tiles and so takes the "_i1" form)."""
    if name.endswith("_i1"):
        return (f"{name[:-3]} has no inv CTAs' form (\"_i1\"), which this launch needs (one twin's 9-{MAX_ROWS} rows "
                f"in one launch); PTI_VARIANTS can choose one of {', '.join(INV_VARIANTS)} there")
    return f"{name}: no such kernel in this card's module (PTI_VARIANTS?)"


def split_variant(name: str) -> dict[str, int]:
    """'t1_r2_m4_u2' -> {'t': 1, 'r': 2, 'm': 4, 'u': 2, 'p': 0, 'i': 0}; 't1_r1_m1_u4_p1' -> ... 'p': 1
    (p: the pipelined main loop; i: the inv CTAs' form; 0 when absent)."""
    return {"p": 0, "i": 0, **{p[0]: int(p[1:]) for p in name.split("_")}}


# the tensor-core kernels' dynamic shared memory (pti_finish): the cross-warp reduction (16 KB), each
# row's inv (512 B), the residual's new values (up to 16 slots x 512 B)
SMEM_BYTES = 16384 + 512 + 16 * 512
# "_p2" variants (kernels/pti_kernel.hip PF = 2) also hold up to 8 activation rows of K <= 4096 in shared memory,
# each padded by 64 bytes (PTI_XS_ROW_MAX); two such CTAs fit an SM only with the whole carveout for shared memory
XS_BYTES = 8 * (4096 * 2 + 64)


@dataclass
class Epilogue:
    """The RMSNorm split around the matmuls (kernels/pti_kernel.hip, PtiArgs), per twin of the
    launch: `pin` (the input rows' partial sums of x^2: scale each row's sums by its inv) or `inv`
    (the rows' inv itself, `row_inv`), or `uo`, `po`, `g` (the outputs are added into the float32
    residual rows passed as outputs; the next norm's u and partial sums are written).  Per-twin
    tensors are row-aligned with the rows.  Both `pin` and `inv`: the launch's first CTAs compute
    the rows' inv into `inv`, the others read them there (a row still pending: they sum them all
    themselves; `no_inv_ctas`, for tests: only that).  `invo` (a residual epilogue):
    the next matmul's inv, set pending by this launch (kernels/pti_kernel.hip, PtiArgs).  `sum_inv`
    (the Hopper kernels only): `pin` and `inv`, the rows' inv summed into `inv` by the launch that lays
    out the activations (pti_wg_tiles), before the matmul, whatever `inv` held.  `to` (a residual
    epilogue): u also in the Hopper kernels' tile layout of `tnr` rows, one tensor a twin, for the
    matmul after it; `ti` (the Hopper kernels): those tiles, so no pti_wg_tiles launch, with `pin` and
    `inv` (slots the residual launch set pending), summed by the matmul's own inv CTAs."""
    ng: int
    eps: float = 0.0
    pin: list = field(default_factory=list)
    inv: list = field(default_factory=list)    # or each row's inv (KernelBackend.row_inv)
    uo: list = field(default_factory=list)
    po: list = field(default_factory=list)
    g: list = field(default_factory=list)
    invo: list = field(default_factory=list)
    no_inv_ctas: bool = False
    h16: bool = False   # the norm parts (uo) or silu(gate) * up come out as h16, for an h16 matrix after it
    sum_inv: bool = False
    to: list = field(default_factory=list)
    tnr: int = 0
    ti: list = field(default_factory=list)

    def rows(self, lo: int, hi: int) -> "Epilogue":
        """Rows lo:hi's epilogue (a launch's chunk); the tiles (`to`, `ti`) only whole, in one chunk."""
        if (self.to or self.ti) and (lo or any(t.shape[0] > hi for t in self.pin + self.inv + self.uo)):
            raise PtiError(f"the Hopper kernels' tiles take at most {MAX_ROWS} rows, in one launch")
        cut = lambda ts: [t[lo:hi] for t in ts]   # noqa: E731
        return replace(self, pin=cut(self.pin), inv=cut(self.inv), uo=cut(self.uo), po=cut(self.po), g=list(self.g),
                       invo=cut(self.invo))

    def twin(self, i: int) -> "Epilogue":
        """The epilogue of the launch's i-th twin alone."""
        one = lambda ts: ts[i:i + 1]   # noqa: E731
        return replace(self, pin=one(self.pin), inv=one(self.inv), uo=one(self.uo), po=one(self.po), g=one(self.g),
                       invo=one(self.invo), to=one(self.to), ti=one(self.ti))

    def inv_only(self) -> bool:
        """Whether the epilogue only scales each row by its given inv."""
        return bool(self.inv) and not (self.pin or self.uo or self.po or self.invo)

    def wg_ok(self) -> bool:
        """Whether the Hopper kernels take it: each row scaled by its inv, given or summed (sum_inv, or the
        inv CTAs' form with the tiles given), the plain matmul on tiles given (`pti bench --kernels`), or the
        residual form (uo, po and g; launch_wg checks the rest)."""
        if self.uo or self.po or self.invo:
            return bool(self.uo and self.po and self.g) and not (self.pin or self.inv or self.sum_inv)
        if self.sum_inv:
            return bool(self.pin and self.inv)
        if self.ti:
            return bool(self.pin and self.inv) or not (self.pin or self.inv)
        return self.inv_only()

    def to_ok(self, width: int, rows: int) -> bool:
        """Whether `to` can take `rows` rows of `width` columns: 16, 32 or 64 tile rows (tnr: the Hopper forms'
        8 MT), at least `rows`, whole 256-column blocks (pti_wg_tile_at), one contiguous 16-bit [width * tnr]
        tensor a twin."""
        return (self.tnr in (16, 32, 64) and rows <= self.tnr and width % 256 == 0
                and all(t.dtype.itemsize == 2 and t.is_contiguous() and t.numel() == width * self.tnr for t in self.to))

    def inv_form(self) -> bool:
        """Whether the launch takes the kernels' inv CTAs' form ("_i1": inv slots to fill or set pending)."""
        return bool(self.invo) or bool(self.pin and self.inv)

    def inv_ctas(self) -> int:
        """CTAs the launch adds in front of the matmul's to compute the rows' inv (8 rows each)."""
        if not (self.pin and self.inv) or self.no_inv_ctas:
            return 0
        return -(-sum(t.shape[0] for t in self.pin) // 8)

    def args(self, bf16_out: bool = False) -> tuple[tuple, tuple]:
        """The kernels' epilogue arguments; bf16_out: an h16 matrix's launch, whose plain outputs are
        bf16 (PtiArgs.h16, bit 1; bit 0 is self.h16)."""
        def two(ts):
            return tuple(t.data_ptr() for t in ts) + (0,) * (2 - len(ts))
        vals = (two(self.pin) + (self.ng, float(self.eps)) + two(self.inv) + two(self.uo) + two(self.po)
                + two(self.g) + two(self.invo) + (self.inv_ctas(), int(self.h16) | 2 * int(bf16_out))
                + two(self.to) + (self.tnr,))
        return vals, ((ctypes.c_void_p,) * 2 + (ctypes.c_int, ctypes.c_float) + (ctypes.c_void_p,) * 10
                      + (ctypes.c_int,) * 2 + (ctypes.c_void_p,) * 2 + (ctypes.c_int,))


class KernelBackend(Backend):
    """What the CUDA and HIP backends share: loading, checks, chunking, launch arguments."""

    kind = "?"

    def __init__(self, device=None, act_dtype: torch.dtype = torch.bfloat16, generic: bool = False):
        if not torch.cuda.is_available():
            raise PtiError(f"the {self.kind} backend needs a GPU and none is visible to torch")
        if act_dtype not in ACT_TAGS:
            raise PtiError(f"the {self.kind} backend takes bf16 or f16 activations, not {act_dtype}")
        self.device = torch.device(device or "cuda")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.act_dtype = act_dtype
        self.generic = generic
        self.pdl = False   # programmatic dependent launch (set by the CUDA backend on sm_90+; PTI_PDL=0: off)
        self.wgmma = False   # the Hopper kernels are loaded (CUDA backend on sm_90 unless PTI_WGMMA=0)
        self.wg_classes = ("x",)   # the width classes they take (WG_VARIANTS, wg_classes_wanted)
        self.wg_min_k: dict | None = None   # the fewest K by class (WG_MIN_K, wg_min_k_wanted); None: any
        self._tiles: dict[int, torch.Tensor] = {}   # their activation tiles by blocks a row (launch_wg): kept
                                                     # for good, since captured graphs hold their address
        self.wg_table = WG_VARIANTS   # their forms (wg_variants: PTI_WG_FIX)
        self._fix: dict[tuple, tuple] = {}   # the fixup forms' sums and counts by (units, rows, G) (_wg_fixup), as _tiles
        self.wg_a_sm: dict[str, int] = {}   # a Hopper kernel's CTAs a SM at its own shared memory
        # at a split launch's shared memory (wg_split_smem): the clusters a cluster form the rest form splits holds at
        # once (cuOccupancyMaxActiveClusters: a cluster sits in one GPC, so fewer than the SMs say), a rest form's CTAs a SM
        self.wg_split_resident: dict[str, int] = {}
        self.wg_split_a_sm: dict[str, int] = {}
        self.wg_rest: dict[str, int] = {}   # the cluster forms the rest form splits (wg_rest_setting, read at load)
        self.wg_rest_twins = False   # two twins' launches that it splits go one a twin (wg_rest_twins_setting)
        self.wg_split_slack = 0   # the clusters a split leaves out of those the card holds (wg_split_slack_setting)
        self.sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.funcs: dict[str, object] = {}
        self.smem: dict[str, int] = {}       # dynamic shared memory per kernel
        self.smem_two: dict[str, int] = {}   # a Hopper kernel's that holds it to two CTAs a SM (wg_launch_smem)
        self.ctas_a_sm: dict[str, int] = {}   # those kernels' CTAs a SM at their own shared memory
        self._load_module()

    # -- loading weights ---------------------------------------------------
    def load_matrix(self, ssq, name: str, twins: str) -> KernelMatrix:
        """A matrix of an SSQFile, repacked on the device; only the twins asked for are kept."""
        rows, cols = ssq.logical_shape(name)
        ids = TWIN_IDS[twins]
        if ssq.identical or ssq.mode != 16:
            q, d = ssq.q8(name, 0)
            pack = repack_q8(self._dev(q, torch.int8), self._dev(d, torch.float16), cols, self.code())
            return KernelMatrix([self.with_ring(pack)], {0: 0, 1: 0}, rows, cols, True)
        raw = self._dev(ssq.raw(name), torch.uint8)
        packs = [self.with_ring(p, len(ids)) for p in repack_ssq16(raw, cols, twins, self.code())]
        return KernelMatrix(packs, {t: i for i, t in enumerate(ids)}, rows, cols, False)

    def glu_ok(self, rows: int) -> bool:
        """Whether a fused gate/up matrix of `rows` rows can take the silu(gate) * up epilogue."""
        return not self.generic and self.kind == "cuda" and rows % 16 == 0 and self.act_dtype == torch.bfloat16

    def code(self, h16: bool = False) -> str:
        """The weights' encoding (repack.CODES) for this backend's activations, or for h16 inputs."""
        if h16 and not self.h16_ok():
            raise PtiError(f"the {self.kind} backend has no h16 kernels (CUDA tensor-core kernels, bf16 activations)")
        return "h16" if h16 else "bf16" if self.act_dtype == torch.bfloat16 else "f16"

    def h16_ok(self) -> bool:
        """Whether a bf16 model's matmuls may take h16 inputs (kernels/pti_kernel.hip, pti_bf16_to_h16)."""
        return self.epilogue_ok() and self.act_dtype == torch.bfloat16

    def weight_from_q8(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], cols: int | None = None,
                       glu: bool = False, h16: bool = False) -> KernelMatrix:
        """One or two (int8 [N, K or nb*32], float16 [N, nb]) Q8_0 matrices (twins A, B) on any
        device; `cols` is the logical K when the int8 rows are padded to whole blocks.
        glu: the rows are [gate F | up F] and matmuls return silu(gate) * up [M, F] (bf16, or h16
        with h16).  h16: the matmuls take h16 inputs (f16 tensors; pti_bf16_to_h16)."""
        rows, cols = pairs[0][0].shape[0], cols or pairs[0][0].shape[1]
        if glu and not self.glu_ok(rows):
            raise PtiError(f"the {self.kind} backend cannot fuse SiLU into a {rows}-row gate/up matrix")
        packs = []
        for q, d in pairs:
            if glu:
                q, d = interleave_glu_rows(q), interleave_glu_rows(d)
            q = q.to(self.device)
            if q.shape[1] % 32:
                q = torch.nn.functional.pad(q, (0, 32 - q.shape[1] % 32))
            pack = repack_q8(q.contiguous(), d.to(self.device, torch.float16).contiguous(), cols, self.code(h16))
            packs.append(self.with_ring(pack, len(pairs)))
        plane = {0: 0, 1: 0} if len(packs) == 1 else {0: 0, 1: 1}
        return KernelMatrix(packs, plane, rows, cols, len(packs) == 1, glu=glu)

    def short_k(self, p: Packed) -> bool:
        """Whether p's K is below its width class's WG_MIN_K (PTI_WG_NARROW=auto)."""
        return self.wg_min_k is not None and p.cols < self.wg_min_k.get(width_class(p.rows / 16 / self.sm_count), 0)

    def twin_short_form(self, p: Packed) -> tuple | None:
        """The two-twin form (wg_twin_forms) that two twins of p take although its K is short (WG_MIN_K), or None
        (no such form for its class, or PTI_WG_TWIN_SHORT=0)."""
        return wg_twin_forms().get(width_class(p.rows / 16 / self.sm_count)) if wg_twin_short() else None

    def wg_eligible(self, p: Packed, twins: int = 1) -> bool:
        """Whether the Hopper kernels can take p (one of `twins` twins of a matrix): a matrix of a width class
        they serve (wg_classes), whole units of row groups, K in whole phases of every slice (bf16 inputs,
        or f16 and h16: their f16 forms) and in whole blocks: pti_wg_tiles copies every row's nb blocks
        whole, so past a ragged K it would read the next row's values (or past the end), where a NaN or inf
        times the padding's zero weights is NaN (session 28: 1024x1000 with PTI_WG_NARROW=1); and K long
        enough for its class (WG_MIN_K), so that no ring copy is made for a matrix the policy is faster on,
        unless two twins take it in their own form (twin_short_form) or one twin at a few rows (wg_short_one)."""
        g, nb = p.q.shape[:2]
        cls = width_class(p.rows / 16 / self.sm_count)
        short_ok = (twins == 2 and self.twin_short_form(p) is not None) or (twins == 1 and wg_short_one() >= WG_MIN_ROWS)
        return (self.wgmma and cls in self.wg_classes and g % RING_GROUPS == 0 and nb % 32 == 0
                and p.cols == 32 * nb and (not self.short_k(p) or short_ok))

    def with_ring(self, p: Packed, twins: int = 1) -> Packed:
        """p (one of `twins` twins of a matrix), with its ring-layout copy for the Hopper kernels when they are
        loaded, can take it, and the copy fits (ring_fits: free memory, torch's cached blocks included).  The
        copy doubles the matrix's memory; a matrix without one takes the policy kernels, with the same bits."""
        p.twins = twins
        if p.ring is None and self.wg_eligible(p, twins):
            free, total = torch.cuda.mem_get_info(self.device)
            cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
            if ring_fits(free + cached, total, p.nbytes):
                p.ring = ring_pack(p)
        return p

    def wg_kernel(self, m: int, out: torch.dtype, glu: bool = False, code: str = "bf16",
                  rows: int | None = None, twins: int = 1) -> tuple[str, int, int, int]:
        """The Hopper kernel for m rows (a twin) of `twins` twins of a matrix of `rows` rows (wg_variants by its
        width class; None: a tall one) and that encoding (repack.CODES: bf16 inputs, or f16 for f16 and h16)
        writing `out` (float32, or 16-bit), or silu(gate) * up (glu); its activation rows (8 MT), CTAs a unit
        and whether they are the fixup form's (1) or a cluster.  Two twins take the 16-row form (m2) too: their
        gate/up's 448 CTAs run two waves at two CTAs a SM as at three (wg_launch_smem), 75.8 -> 66.9 us at 16 rows
        a twin against the 32-row form, and twins ab gained 4-5% at 24 and 32 sequences (docs/perf.md, session
        34; PTI_WG_M2=1 keeps two twins on the 32-row form, session 33's path, for A/B runs).  Two twins of the
        narrow class take their own 16-row form first (clusters of 4: wg_twin_forms)."""
        cls = "x" if rows is None else width_class(rows / 16 / self.sm_count)
        m2_ok = twins == 1 or os.environ.get("PTI_WG_M2", "2") == "2"
        forms, own = self.wg_table[cls], wg_twin_forms().get(cls) if twins == 2 else None
        if own:   # two twins' own form first (WG_TWIN_SETTINGS)
            forms = (own,) + forms
        _, suffix, mt, _, _, c, fix = next(v for v in forms if m <= v[0] and (m2_ok or v[1] != "m2"))
        return wg_name(code, "glu" if glu else "f32" if out == torch.float32 else "out", suffix), 8 * mt, c, fix

    def wg_rest_units(self, name: str, units: int, twins: int, n_inv: int, k: int) -> int:
        """How many of a launch's `units` go to the rest form's second launch (WG_RESTS): those past the clusters the
        card holds at once at the split's shared memory (wg_split_smem), where their CTAs fit the slots the clusters
        leave free; 0: one launch.  Only one twin without inv CTAs (whole clusters of their own), of a cluster form
        the backend splits (wg_rest_setting, read when the kernels load) at this K; PTI_WG_SPLIT_SLACK clusters fewer
        than the card holds (wg_split_slack_setting).  (Past the free slots, and with
        the inv CTAs in the clusters' launch, QKV's 48 units at 64 rows were slower: 18.8 -> 20.8 us, session 40.)"""
        form, rest = wg_rest_form(name), wg_rest_name(name)
        if not (form in self.wg_rest and twins == 1 and n_inv == 0 and k >= self.wg_rest[form]
                and rest in self.wg_split_a_sm):
            return 0
        fit, c = self.wg_split_resident.get(name, 0) - self.wg_split_slack, WG_RESTS[form][5]
        free = self.wg_split_a_sm[rest] * self.sm_count - c * fit
        return units - fit if 0 < fit < units and c * (units - fit) <= free else 0

    def wg_twins_apart(self, name: str, units: int, twins: int, n_inv: int, k: int) -> bool:
        """Whether a launch of `twins` twins of form `name` goes as one launch a twin, each split by the rest form
        (PTI_WG_REST_TWINS=1, read when the kernels load; n_inv: each launch's inv CTAs): only the forms of
        WG_TWINS_APART."""
        return (self.wg_rest_twins and twins == 2 and wg_rest_form(name) in WG_TWINS_APART
                and self.wg_rest_units(name, units, 1, n_inv, k) > 0)

    @staticmethod
    def wg_split_smem(smem: int) -> int:
        """A split launch's dynamic shared memory (both parts): at least WG_SMEM_TWO, so that no SM takes a third CTA
        (m4_c8's 32 clusters at three a SM: 16 SMs with three, 8 with none, session 39) and the units left over
        take the slots the clusters leave at two a SM."""
        return max(smem, WG_SMEM_TWO)

    def wg_launch_smem(self, name: str, ctas: int) -> int:
        """The dynamic shared memory of a launch of `ctas` CTAs of Hopper kernel `name`: a form without clusters
        that fits three CTAs a SM (m2) gets WG_SMEM_TWO when its grid runs in as many waves at two CTAs a SM as
        at its own occupancy (one wave of 224 or two of 448 CTAs, not 384 or 1002 on 132 SMs), so that the CTAs
        spread over the SMs (PTI_WG_SPREAD=0: never; 1: session 33's rule, one wave of two only; for A/B runs)."""
        v = os.environ.get("PTI_WG_SPREAD", "2")
        if v not in ("0", "1", "2"):
            raise PtiError(f"PTI_WG_SPREAD must be 0, 1 or 2, not {v!r}")
        if name not in self.smem_two or v == "0":
            return self.smem[name]
        waves = lambda a_sm: -(-ctas // (a_sm * self.sm_count))
        same = ctas <= 2 * self.sm_count if v == "1" else waves(2) == waves(self.ctas_a_sm[name])
        return self.smem_two[name] if same else self.smem[name]

    def wg_ready(self, packs: list[Packed], m: int, epi: Epilogue | None = None) -> bool:
        """Whether m rows through these packs (with that epilogue) go to the Hopper kernels: each row scaled
        by its inv, given or summed, or the residual form (Epilogue.wg_ok; PTI_WG_RESIDUAL=0: not that one,
        for A/B runs) of a matrix in whole 128-row units.  A matrix below its class's WG_MIN_K: one model's
        (Packed.twins 1) up to wg_short_one rows, two twins' in their own form (up to wg_short_two rows a twin
        past it), and not one twin's rows of a two-twin matrix (matmul_epi's two launches past
        TWIN_KERNEL_MAX_ROWS rows a twin: not measured)."""
        if epi is not None and epi.po and os.environ.get("PTI_WG_RESIDUAL", "1") == "0":
            return False
        # the fewest rows (of the launch's largest twin): WG_TWIN_MIN_ROWS for two twins (PTI_WG_TWIN_MIN_ROWS, A/B),
        # WG_TALL_MIN_ROWS for one of the tall class (PTI_WG_TALL_MIN_ROWS), else WG_MIN_ROWS
        if len(packs) == 2:
            least = int(os.environ.get("PTI_WG_TWIN_MIN_ROWS", WG_TWIN_MIN_ROWS))
        elif width_class(packs[0].rows / 16 / self.sm_count) == "x":
            least = int(os.environ.get("PTI_WG_TALL_MIN_ROWS", WG_TALL_MIN_ROWS))
        else:
            least = WG_MIN_ROWS
        if any(self.short_k(p) for p in packs):
            if len(packs) == 1:
                most = wg_short_one() if packs[0].twins == 1 else 0
            else:
                own = self.twin_short_form(packs[0])
                most = max(own[0], wg_short_two()) if own else 0
            if m > most:
                return False
        return (least <= m <= MAX_ROWS and all(p.ring is not None for p in packs)
                and (epi is None or (epi.wg_ok() and not (epi.po and packs[0].rows % 128))))

    def _dev(self, a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.dtype(str(dtype).split(".")[1])).copy())
        return t.to(self.device)

    # -- compute -------------------------------------------------------------
    def matmul(self, x: torch.Tensor, w: KernelMatrix, twin: int, out_dtype: torch.dtype | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """y[M, N] = x @ W_twin^T; y has x's dtype unless out_dtype is float32 (or is `out`)."""
        y = self._out(x, w, out_dtype, out)
        if x.shape[0]:
            self._run([w.packs[w.plane[twin]]], [x], [y], w.glu)
        return y

    def matmul_twins(self, xa: torch.Tensor, xb: torch.Tensor, w: KernelMatrix,
                     out_dtype: torch.dtype | None = None,
                     outs: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Twin A's rows xa and twin B's rows xb in one read of both twins' weights."""
        oa, ob = outs or (None, None)
        m = max(xa.shape[0], xb.shape[0])
        if xb.shape[0] == 0 or xa.shape[0] == 0 or len(w.packs) == 1 or \
                (m > TWIN_KERNEL_MAX_ROWS and not self.wg_ready(w.packs, m)):
            # one twin's rows only, or one model: per-twin calls read only what they need
            # (for one model, concatenating the rows would save a read but break `outs`)
            if len(w.packs) == 1 and xa.shape[0] and xb.shape[0] and outs is None:
                y = self.matmul(torch.cat([xa, xb]), w, 0, out_dtype)   # one pass over the one model
                return y[: xa.shape[0]], y[xa.shape[0]:]
            return self.matmul(xa, w, 0, out_dtype, oa), self.matmul(xb, w, 1, out_dtype, ob)
        ya, yb = self._out(xa, w, out_dtype, oa), self._out(xb, w, out_dtype, ob)
        self._run([w.packs[w.plane[0]], w.packs[w.plane[1]]], [xa, xb], [ya, yb], w.glu)
        return ya, yb

    def _out(self, x: torch.Tensor, w: KernelMatrix, out_dtype, out: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != w.cols:
            raise PtiError(f"matmul: activations {tuple(x.shape)} do not match a {w.rows}x{w.cols} matrix")
        if x.dtype != self.in_dtype(w) or x.device != self.device:
            raise PtiError(f"matmul: activations must be {self.in_dtype(w)} on {self.device}, got {x.dtype} on {x.device}")
        n = w.rows // 2 if w.glu else w.rows
        # an h16 matrix gives bf16 (the model's activations) or float32; a gate/up gives the activations'
        # type, or h16 (float16) for an h16 matrix after it (Epilogue.h16)
        dtypes = (self.act_dtype, torch.float16) if w.glu else (self.act_dtype, torch.float32)
        if out is not None:
            if out.shape != (x.shape[0], n) or not out.is_contiguous() or out.dtype not in dtypes:
                raise PtiError(f"matmul: out must be a contiguous [{x.shape[0]}, {n}] tensor of {' or '.join(map(str, dtypes))}")
            return out
        if out_dtype not in (None,) + dtypes:
            raise PtiError(f"matmul: output dtype must be {' or '.join(map(str, dtypes))}, not {out_dtype}")
        return torch.empty(x.shape[0], n, dtype=out_dtype or dtypes[0], device=self.device)

    def in_dtype(self, w: KernelMatrix) -> torch.dtype:
        """What w's matmuls take: the backend's activations, or f16 (h16) for an h16 matrix."""
        return torch.float16 if w.h16 else self.act_dtype

    def _run(self, packs: list[Packed], xs: list[torch.Tensor], ys: list[torch.Tensor], glu: bool = False,
             epi: Epilogue | None = None) -> None:
        if len({y.dtype for y in ys}) > 1:
            raise PtiError("matmul_twins: both outputs must have one dtype")
        xs = [x if x.stride(1) == 1 else x.contiguous() for x in xs]
        if len({x.stride(0) for x in xs if x.shape[0] > 1}) > 1:   # the kernel takes one row stride
            xs = [x.contiguous() for x in xs]
        total = max(x.shape[0] for x in xs)
        for m0 in range(0, total, MAX_ROWS):   # same per-row math in every chunk
            xc = [x[m0:m0 + MAX_ROWS] for x in xs]
            yc = [y[m0:m0 + MAX_ROWS] for y in ys]
            ec = epi.rows(m0, m0 + MAX_ROWS) if epi is not None else None
            if self.wg_ready(packs, max(x.shape[0] for x in xc), ec):
                self.launch_wg(packs, xc, yc, glu, ec)
                continue
            if ec is not None and (ec.sum_inv or ec.ti):   # the policy's inv CTAs would trust its slots: sum them here
                for pin, iv, x in zip(ec.pin, ec.inv, xc):
                    if x.shape[0]:
                        self.row_inv(pin, x.shape[1], ec.eps, out=iv)
                ec = replace(ec, pin=[], sum_inv=False, ti=[])
            self.launch(packs, xc, yc, self.kernel_name(len(packs), max(x.shape[0] for x in xc), xs[0].dtype,
                                                          ys[0].dtype, rows=packs[0].rows, glu=glu, cols=packs[0].cols,
                                                          inv_form=ec is not None and ec.inv_form()), ec)

    def kernel_name(self, twins: int, m: int, act: torch.dtype, out: torch.dtype, variant: str | None = None,
                    rows: int = 0, glu: bool = False, inv_form: bool = False, cols: int = 0) -> str:
        """The kernel for m activation rows of a matrix of `rows` rows (0: unknown, few) and `cols` columns
        (0: unknown); inv_form: its "_i1" instantiation (Epilogue.inv_form)."""
        tag = ACT_TAGS[act] + ("_glu" if glu else "_f32" if out == torch.float32 else "_out")
        if self.generic:
            return f"pti_mmg_{tag}_t{twins}"
        v = variant or variant_for(twins, m, width_class(rows / 16 / self.sm_count), ACT_TAGS[act], cols)
        return f"pti_mm_{tag}_{v}" + ("_i1" if inv_form else "")

    def inv_form_ok(self, m: int, w: "KernelMatrix", out: torch.dtype, glu: bool = False) -> bool:
        """Whether one twin's m rows through w go in one launch of a kernel that has the inv CTAs'
        form (more than 8 rows, at most MAX_ROWS, the policy's variant; not the HIP kernels, nor the
        Hopper kernels, which take the rows' inv given)."""
        return (self.epilogue_ok() and 8 < m <= MAX_ROWS and not self.wg_ready(w.packs, m)
                and self.kernel_name(1, m, self.in_dtype(w), out, rows=w.rows, glu=glu, inv_form=True) in self.funcs)

    def launch_args(self, name: str, packs: list[Packed], xs: list[torch.Tensor], ys: list[torch.Tensor],
                    epi: Epilogue | None = None):
        """(grid, argument values, ctypes types) of one kernel launch.  One twin may have no rows, not
        both; the tensor-core kernels read row 0 of each twin's activations unconditionally, so a twin
        without rows is given the other twin's pointer."""
        if not any(x.shape[0] for x in xs):
            raise PtiError(f"{name}: a launch needs at least one activation row")
        some = next(x for x in xs if x.shape[0]).data_ptr()
        xp = [x.data_ptr() if x.shape[0] else some for x in xs] + [0]   # (an empty tensor's pointer is 0)
        p0 = packs[0]
        g, nb = p0.q.shape[:2]
        rg = 1 if name.startswith("pti_mmg") else split_variant(name.split("_", 4)[4])["r"]
        ms = [x.shape[0] for x in xs] + [0]
        ldx = next((x.stride(0) for x in xs if x.shape[0] > 1), p0.cols)
        vec_ok = int(p0.cols % 8 == 0 and ldx % 8 == 0 and all(x.data_ptr() % 16 == 0 for x in xs))
        def ptr(t):
            return t.data_ptr() if t is not None else 0
        pb = packs[1] if len(packs) > 1 else None
        vals = (ptr(p0.q), ptr(p0.s), ptr(pb.q if pb else None), ptr(pb.s if pb else None),
                xp[0], xp[1], ptr(ys[0]), ptr(ys[1] if len(ys) > 1 else None),
                ms[0], ms[1], p0.rows, p0.cols, nb, ldx, p0.rows // 2 if "_glu_" in name else p0.rows, vec_ok)
        types = (ctypes.c_void_p,) * 8 + (ctypes.c_int,) * 8
        extra = 0
        if name.startswith("pti_mm_"):   # the tensor-core kernels' epilogue arguments
            if "_glu_" in name and (ys[0].dtype == torch.float16) != bool(epi is not None and epi.h16):
                raise PtiError(f"{name}: silu(gate) * up comes out as h16 (float16) exactly when the epilogue says h16")
            ev, et = (epi or Epilogue(0)).args(bf16_out=p0.code == "h16")
            vals, types = vals + ev, types + et
            extra = epi.inv_ctas() if epi is not None else 0   # in front of the matmul's CTAs
            if epi is not None and epi.inv_form() != name.endswith("_i1"):
                raise PtiError(f"{name}: the inv CTAs' form and the kernel do not match")
            if epi is not None and epi.po and "_f32_" not in name:   # the kernels add only float32 rows
                raise PtiError(f"{name}: a residual epilogue needs float32 outputs")
            if epi is not None and epi.to and not (epi.po and epi.to_ok(p0.rows, max(ms))):   # u in the tiles too
                raise PtiError(f"{name}: tiles of u need a residual epilogue, 256-column blocks and "
                               f"[{p0.rows} x 16, 32 or 64] 16-bit tensors")
        elif epi is not None:
            raise PtiError(f"{name} has no norm epilogue")
        return g // rg + extra, vals, types

    # -- per platform ----------------------------------------------------------
    def _load_module(self) -> None:
        raise NotImplementedError

    def launch_wg(self, packs: list[Packed], xs: list[torch.Tensor], ys: list[torch.Tensor], glu: bool = False,
                  epi: Epilogue | None = None) -> str:
        """17-64 rows of one twin or both through the Hopper kernels: the rows into the tile layout
        (pti_wg_tiles), then pti_wg_mm on the packs' ring copies, with silu(gate) * up (glu) and each
        row scaled by its inv (an Epilogue.inv_only); returns the matmul kernel's name."""
        raise PtiError(f"the {self.kind} backend has no Hopper kernels")

    def launch(self, packs, xs, ys, name: str, epi: Epilogue | None = None) -> None:
        raise NotImplementedError

    def kernel(self, name: str):
        """The loaded matmul kernel `name`; a PtiError where the module lacks it (the policy's kernels all exist, a
        PTI_VARIANTS choice may lack a form)."""
        f = self.funcs.get(name)
        if f is None:
            raise PtiError(missing_kernel(name))
        return f

    def row_inv(self, p: torch.Tensor, cols: int, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
        """Each row's inv = rsqrt(sum(p row) / cols + eps) (kernels/pti_kernel.hip pti_row_inv, the sum
        order of the scaled epilogue), for launches of many rows; into `out` when given."""
        raise NotImplementedError

    def epilogue_ok(self) -> bool:
        """Whether the matmuls take the norm epilogues (the tensor-core kernels)."""
        return not self.generic and self.kind == "cuda"

    def matmul_epi(self, twins: list[int], xs: list[torch.Tensor], w: KernelMatrix, ys: list[torch.Tensor],
                   epi: Epilogue) -> None:
        """ys[i] = xs[i] @ W_twins[i]^T with a norm epilogue (Epilogue), one twin or both in one read;
        ys are the outputs, or the float32 residual rows for a residual epilogue."""
        if not self.epilogue_ok():
            raise PtiError(f"the {self.kind} backend's kernels have no norm epilogue")
        for x, y in zip(xs, ys):
            if x.shape[0] != y.shape[0] or x.shape[1] != w.cols or not y.is_contiguous() or x.dtype != self.in_dtype(w):
                raise PtiError(f"matmul_epi: rows {tuple(x.shape)} -> {tuple(y.shape)} do not fit a {w.rows}x{w.cols} matrix")
        m = max(x.shape[0] for x in xs)
        if len(twins) == 2 and m > TWIN_KERNEL_MAX_ROWS and not self.wg_ready([w.packs[w.plane[t]] for t in twins], m, epi):
            # as matmul_twins: two one-twin launches
            for i in range(2):
                self.matmul_epi([twins[i]], [xs[i]], w, [ys[i]], epi.twin(i))
            return
        self._run([w.packs[w.plane[t]] for t in twins], xs, ys, w.glu, epi)


def launch_kernel(driver, f, grid: tuple, block: tuple, smem: int, stream: int, args, pdl: bool, what: str,
                  cluster: int = 0) -> None:
    """cuLaunchKernelEx on `stream` (launch_config)."""
    _cu(driver.cuLaunchKernelEx(launch_config(driver, grid, block, smem, stream, pdl, cluster), f, args, 0), what)


def launch_config(driver, grid: tuple, block: tuple, smem: int, stream: int, pdl: bool, cluster: int = 0):
    """A launch's CUlaunchConfig.  pdl: programmatic stream serialisation: the kernel may start before
    the previous one in the stream ends (it calls griddepcontrol.wait before touching that kernel's
    outputs; every kernel of kernels/ does).  cluster > 0: thread-block clusters of (cluster, 1, 1)
    (sm_90+; the grid's x must be a multiple)."""
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = tuple(grid) + (1,) * (3 - len(grid))
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = tuple(block) + (1,) * (3 - len(block))
    cfg.sharedMemBytes = smem
    cfg.hStream = driver.CUstream(stream)
    attrs = []
    if pdl:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    if cluster:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        attrs.append(attr)
    if attrs:
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
    return cfg


# The matmul kernels' preferred shared-memory carveout, in percent of the most an SM has (228 KB on
# the H200; 44% is about 100 KB, up to four CTAs of 25 KB); the rest of the SM's 256 KB is L1.
# Measured on the H200 (docs/perf.md, session 11): 36 and 28 were 7% and 22% slower at one
# sequence, 58 slower at 16 and 32.  Left to the driver, the matmuls seem to run in whatever
# configuration the kernel before them left: after an attention kernel that wanted 219 KB (tried
# and dropped) a 16-row pass took 4.8 ms instead of 3.3; with the attention kernel as it is,
# pinning makes 16 rows 1.3% faster and 32 rows 2.5%.
MM_CARVEOUT = 44


def mm_carveout() -> int | None:
    """MM_CARVEOUT, or PTI_CARVEOUT_MM (0-100; `driver`: leave it to the driver) for A/B runs."""
    v = os.environ.get("PTI_CARVEOUT_MM", "")
    if not v:
        return MM_CARVEOUT
    if v == "driver":
        return None
    if not v.isdigit() or int(v) > 100:
        raise PtiError(f"PTI_CARVEOUT_MM must be 0-100 or driver, not {v!r}")
    return int(v)


def mm_smem() -> int:
    """PTI_MM_SMEM: bytes of shared memory the policy kernels ask at least (0, the default: their own)."""
    v = os.environ.get("PTI_MM_SMEM", "0")
    if not v.isdigit() or int(v) > 200 * 1024:
        raise PtiError(f"PTI_MM_SMEM must be a number of bytes up to {200 * 1024}, not {v!r}")
    return int(v)


def set_carveout(driver, f, percent: int, what: str) -> None:
    """Ask for `percent` of the SM's shared memory when function f runs (the rest is L1)."""
    _cu(driver.cuFuncSetAttribute(f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                  percent), f"carveout of {what}")


def _cu(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise PtiError(f"CUDA: {what} failed: {err}")
    return rest[0] if len(rest) == 1 else (rest or None)


class CudaBackend(KernelBackend):
    name = "cuda"
    kind = "cuda"

    def _load_module(self) -> None:
        try:
            from cuda.bindings import driver
        except ImportError:
            raise PtiError("the cuda backend needs cuda-python: pip install 'cuda-bindings>=13.0' "
                           "'nvidia-cuda-nvrtc>=13.0'") from None
        from .compile import cached_binary, device_arch, hopper_wanted

        self._drv = driver
        major, minor = torch.cuda.get_device_capability(self.device)
        self.arch = device_arch(major, minor, hopper=hopper_wanted())
        if major < 8 and not self.generic:
            self.generic = True      # no bf16 MMA before sm_80: the portable kernel
        torch.cuda.init()
        with torch.cuda.device(self.device):
            torch.empty(1, device=self.device)   # torch's primary context is current from here on
            _cu(driver.cuInit(0), "cuInit")
            self.compiled = cached_binary("cuda", self.arch)
            self.module = _cu(driver.cuModuleLoadData(self.compiled.binary), "cuModuleLoadData")
            names = ["pti_stream_read", "pti_row_inv_rows"] + [f"pti_mmg_{ACT_TAGS[a]}_{o}_t{t}" for t in (1, 2) for a in ACT_TAGS
                                           for o in ("f32", "out")]
            if not self.generic:
                names += [f"pti_mm_{ACT_TAGS[a]}_{o}_{v}" for a in ACT_TAGS for o in ("f32", "out")
                          for v in all_variants()]
                names += [f"pti_mm_{a}_glu_{v}" for a in ("bf16", "f16") for v in all_variants()]
                names += [f"pti_mm_{t}_{v}_i1" for t in MM_TAGS for v in INV_VARIANTS]
            carveout = mm_carveout()
            for n in names:
                f = self.funcs[n] = _cu(driver.cuModuleGetFunction(self.module, n.encode()), f"cuModuleGetFunction {n}")
                if carveout is not None:
                    set_carveout(driver, f, carveout, n)
                if n.startswith("pti_mm_"):
                    # PTI_MM_SMEM (bytes, A/B runs only, session 33): ask more to hold the policy kernels to fewer CTAs a SM
                    self.smem[n] = max(SMEM_BYTES, mm_smem()) + (XS_BYTES if "_p2" in n else 0)
                    if "_p2" in n:
                        set_carveout(driver, f, 100, n)
                    if self.smem[n] > 48 * 1024:
                        _cu(driver.cuFuncSetAttribute(f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      self.smem[n]), f"shared memory of {n}")
                    if _cu(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, THREADS, SMEM_BYTES),
                           f"occupancy {n}") < 1:
                        raise PtiError(f"kernel {n} cannot run on {torch.cuda.get_device_name(self.device)}")
            if self.arch == "sm_90a" and not self.generic and self.act_dtype == torch.bfloat16:
                self._load_wg(driver)
        # programmatic dependent launch (sm_90+): a kernel may start while the previous one ends
        self.pdl = major >= 9 and os.environ.get("PTI_PDL", "1") != "0"

    def _load_wg(self, driver) -> None:
        """The Hopper kernels (WG_VARIANTS), kept apart from self.funcs: they want most of the SM's
        shared memory (two CTAs of about 100 KB), not the matmuls' pinned carveout.  The tall matrices' forms
        first, then (PTI_WG_NARROW) the cluster forms; a class whose kernels do not fit two CTAs a SM (a
        card with less shared memory) is left to the policy kernels."""
        self.wg_funcs = {"pti_wg_tiles": _cu(driver.cuModuleGetFunction(self.module, b"pti_wg_tiles"), "pti_wg_tiles")}
        classes, self.wg_min_k, self.wg_table = wg_classes_wanted(), wg_min_k_wanted(), wg_variants()
        self.wg_rest, self.wg_rest_twins = wg_rest_setting(), wg_rest_twins_setting()
        self.wg_split_slack = wg_split_slack_setting()
        for cls in classes:
            rest = tuple(WG_RESTS[f] for f in self.wg_rest) if cls == "n" else ()
            for _, suffix, mt, pb, slots, c, fix in self.wg_table[cls] + WG_TWIN_VARIANTS.get(cls, ()) + rest:
                for n in (wg_name(t, o, suffix) for t in ("bf16", "f16") for o in WG_OUTS):
                    if n in self.wg_funcs:   # (a form two classes share)
                        continue
                    f = self.wg_funcs[n] = _cu(driver.cuModuleGetFunction(self.module, n.encode()), f"cuModuleGetFunction {n}")
                    self.smem[n] = wg_smem(mt, pb, slots, c)
                    _cu(driver.cuFuncSetAttribute(f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                  max(self.smem[n], WG_SMEM_TWO)), f"shared memory of {n}")
                    set_carveout(driver, f, 100, n)
                    occupancy = lambda b: _cu(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, THREADS, b), f"occupancy {n}")
                    ctas_a_sm = self.wg_a_sm[n] = occupancy(self.smem[n])
                    if suffix in self.wg_rest:   # a cluster form the rest form splits
                        cfg = launch_config(driver, (8 * c,), (THREADS,), self.wg_split_smem(self.smem[n]), 0, False, c)
                        self.wg_split_resident[n] = _cu(driver.cuOccupancyMaxActiveClusters(f, cfg), f"resident clusters {n}")
                    if fix == 2:   # a rest form
                        self.wg_split_a_sm[n] = occupancy(self.wg_split_smem(self.smem[n]))
                    if ctas_a_sm < (1 if suffix == WG_TWIN_FORM_C2[1] else 2):   # (m2_c2: one a SM by design)
                        return
                    # (not a cluster form: m4_c8 fits 45 clusters of 8 at three CTAs a SM, 30 at two, session 32;
                    # held to two, down's 32 units at 32 rows ran in two waves, 26.4 -> 31.3 us, session 33)
                    if c == 1 and ctas_a_sm > 2 and occupancy(WG_SMEM_TWO) == 2:
                        self.smem_two[n] = WG_SMEM_TWO
                        self.ctas_a_sm[n] = ctas_a_sm
            self.wgmma = True
            self.wg_classes = classes[:classes.index(cls) + 1]

    def launch_wg(self, packs: list[Packed], xs: list[torch.Tensor], ys: list[torch.Tensor], glu: bool = False,
                  epi: Epilogue | None = None) -> str:
        return self._launch_wg(packs, xs, ys, glu, epi)

    def _launch_wg(self, packs: list[Packed], xs: list[torch.Tensor], ys: list[torch.Tensor], glu: bool,
                   epi: Epilogue | None, form_rows: int = 0) -> str:
        """launch_wg's body, which calls itself for one launch a twin (wg_twins_apart), each in the form of the
        two twins' rows (form_rows: given tiles are laid out for it; 28 rows alone would take m4_c8, beside 33
        m8_c8): a call of launch_wg is one matmul however many launches it takes."""
        if epi is not None and not epi.wg_ok():
            raise PtiError("the Hopper kernels' epilogue takes only each row's inv, given or summed")
        if glu and (ys[0].dtype == torch.float16) != bool(epi is not None and epi.h16):   # as launch_args
            raise PtiError("silu(gate) * up comes out as h16 (float16) exactly when the epilogue says h16")
        live = [i for i, x in enumerate(xs) if x.shape[0]]   # a twin may have no rows
        given = bool(epi is not None and epi.ti)   # the tiles, written by the residual launch before
        invs = list(epi.inv) if epi is not None and epi.inv else [None] * len(xs)
        pins = list(epi.pin) if epi is not None and epi.pin and (epi.sum_inv or given) else [None] * len(xs)
        tis = list(epi.ti) if given else [None] * len(xs)
        packs, xs, ys = [packs[i] for i in live], [xs[i] for i in live], [ys[i] for i in live]
        invs, pins, tis = [invs[i] for i in live], [pins[i] for i in live], [tis[i] for i in live]
        rp = [p.ring for p in packs]
        m_form = max(form_rows, *(x.shape[0] for x in xs))
        name, nr, c, fix = self.wg_kernel(m_form, ys[0].dtype, glu, rp[0].code, rp[0].rows, len(xs))
        g, nb = rp[0].q.shape[:2]
        # the scaled form's inv summed by the matmul's first CTAs (whole clusters), on given tiles
        has_inv = given and not epi.no_inv_ctas and pins[0] is not None
        n_inv = -(-max(x.shape[0] for x in xs) // 8 // c) * c if has_inv else 0
        if self.wg_twins_apart(name, g // RING_GROUPS, len(xs), n_inv, 32 * nb):
            for t in range(2):   # one launch a twin (both live here), the other given no rows
                part = self._launch_wg(packs, [x if i == t else x[:0] for i, x in enumerate(xs)], ys, glu, epi, m_form)
                assert part == name, (part, name)   # (one twin's form of these rows is the two twins')
            return name
        if len({x.stride(0) for x in xs}) > 1 or any(x.stride(0) % 2 or x.data_ptr() % 4 for x in xs):
            xs = [x.contiguous() for x in xs]   # pti_wg_tiles: one row stride, 4-byte words
        per = nb * nr * 32   # a twin's tiles, bf16
        if any(t is not None and (t.dtype != xs[0].dtype or not t.is_contiguous() or t.numel() != per) for t in tis):
            raise PtiError(f"{name}: the given tiles must be contiguous [{per}] tensors of the activations' dtype")
        if any(t is not None and (t.dtype != torch.float32 or t.stride(1) != 1 or t.stride(0) != epi.ng) for t in pins):
            raise PtiError("the partial sums must be float32 rows of ng values")
        two = (lambda t: (t[0], t[-1]))   # twin B's argument: its own, or twin A's (grid.y = 1)
        stream = torch.cuda.current_stream(self.device).cuda_stream   # read now: capture uses a side stream
        ma, mb = two([x.shape[0] for x in xs])
        pa, pb = two([0 if t is None else t.data_ptr() for t in pins])
        if given:
            tiles = tis
        else:
            if nb not in self._tiles:   # room for two twins of MAX_ROWS
                self._tiles[nb] = torch.empty(2 * nb * MAX_ROWS * 32, dtype=torch.bfloat16, device=self.device)
            tiles = [self._tiles[nb][i * per:(i + 1) * per] for i in range(len(xs))]
            self._launch_tiles(xs, tiles, nb, nr, pins, invs, epi, stream)
            pa = pb = 0
        ta, tb = two([t.data_ptr() for t in tiles])
        (qa, qb), (sa, sb), (ya, yb) = two([p.q.data_ptr() for p in rp]), two([p.s.data_ptr() for p in rp]), \
            two([y.data_ptr() for y in ys])
        ia, ib = two([0 if v is None else v.data_ptr() for v in invs])
        h16 = int(epi is not None and epi.h16) | 2 * int(rp[0].code == "h16") | 4 * wg_x_first()   # as Epilogue.args
        units = g // RING_GROUPS
        rest = self.wg_rest_units(name, units, len(xs), n_inv, 32 * nb)
        # (name, first unit, units, G, h16's split bits: 8 the clusters' launch, 16 the rest after it)
        parts = [(name, 0, units - rest, fix, 8 if rest else 0)]
        if rest:
            parts.append((wg_rest_name(name), units - rest, rest, WG_RESTS[wg_rest_form(name)][6], 16))
        outs = self._wg_outs(epi, live, rp[0].rows, glu, ys, max(ma, mb))
        for part, unit0, n_units, g_form, split in parts:
            ctas = n_units * c + (n_inv if unit0 == 0 else 0)
            smem = self.wg_split_smem(self.smem[part]) if rest else self.wg_launch_smem(part, ctas * len(xs))
            launch_kernel(self._drv, self.wg_funcs[part], (ctas, len(xs)), (THREADS,), smem,
                          stream, ((qa, sa, qb, sb, ta, tb, ya, yb, ia, ib, ma, mb, rp[0].rows, nb, ys[0].stride(0), h16 | split,
                                    pa, pb, epi.ng if pa else 0, float(epi.eps) if pa else 0.0, n_inv if unit0 == 0 else 0)
                                   + outs + self._wg_fixup(units, nr, len(xs), g_form) + (unit0,),
                                   (ctypes.c_void_p,) * 10 + (ctypes.c_int,) * 6 + (ctypes.c_void_p,) * 2
                                   + (ctypes.c_int, ctypes.c_float, ctypes.c_int) + (ctypes.c_void_p,) * 10 + (ctypes.c_int,)
                                   + (ctypes.c_void_p,) * 4 + (ctypes.c_int,)),
                          self.pdl, f"launch {part}", cluster=c if c > 1 and not g_form else 0)
        return name

    def _wg_fixup(self, units: int, nr: int, twins: int, fix: int) -> tuple:
        """The fixup form's arguments (PtiWgArgs.fixp, fixc, per twin): room for each CTA's slice sums
        ([unit][8 slices][nr / 2 elements][THREADS]) and each unit's count (G = 2: two, in and out), zero (the
        kernel sets them back after each launch).  Kept per shape and form, for every later launch and graph;
        launches of one backend are ordered on its stream, so they can share them."""
        if not fix:
            return (0,) * 4
        per, counts = units * 8 * (nr // 2) * THREADS, units * fix
        if (units, nr, fix) not in self._fix:
            self._fix[(units, nr, fix)] = (torch.empty(2 * per, dtype=torch.float32, device=self.device),
                                           torch.zeros(2 * counts, dtype=torch.int32, device=self.device))
        fp, fc = self._fix[(units, nr, fix)]
        return (fp.data_ptr(), fp.data_ptr() + 4 * per * (twins - 1), fc.data_ptr(), fc.data_ptr() + 4 * counts * (twins - 1))

    @staticmethod
    def _wg_outs(epi: Epilogue | None, live: list[int], rows: int, glu: bool, ys: list[torch.Tensor], m: int) -> tuple:
        """pti_wg_mm's residual form's arguments (uo, po, g, invo, per twin) and its tile outputs (to, tnr):
        u of the residual form, or silu(gate) * up, also in the tile layout of tnr rows for the Hopper matmul
        after it (Epilogue.to), which need not be this launch's own (a gate/up in the m2 form, 16 rows, before
        a down in the 32-row form): the kernel places each of its m rows by tnr (pti_wg_tile_at)."""
        def two(ts):
            ts = [ts[i] for i in live] if ts else []
            return (ts[0].data_ptr(), ts[-1].data_ptr()) if ts else (0, 0)
        if epi is None:
            return (0,) * 10 + (0,)
        if epi.po:
            if ys[0].dtype != torch.float32 or rows % 128 or any(
                    t.dtype != torch.float32 or t.shape != (rows,) or not t.is_contiguous() for t in epi.g):
                raise PtiError("the Hopper kernels' residual form needs float32 rows, whole 128-row units and "
                               "float32 norm weights of one value a column")
        width = rows // 2 if glu else rows
        if epi.to and not ((epi.po or glu) and epi.to_ok(width, m)):
            raise PtiError(f"the Hopper kernels write tiles of at least {m} rows (16, 32 or 64: [width x rows] 16-bit "
                           "tensors) only from silu(gate) * up or the residual form, of 256-column blocks")
        return two(epi.uo) + two(epi.po) + two(epi.g) + two(epi.invo) + two(epi.to) + (epi.tnr if epi.to else 0,)

    def _launch_tiles(self, xs, tiles, nb: int, nr: int, pins: list, invs: list, epi: Epilogue | None, stream) -> None:
        """pti_wg_tiles: the rows xs into the tile layout; with partial sums (sum_inv), also each row's inv
        into its slot, 8 rows a CTA past the tiles' (as row_inv), for the matmul's epilogue."""
        two = (lambda t: (t[0], t[-1]))
        xa, xb = two([x.data_ptr() for x in xs])
        ta, tb = two([t.data_ptr() for t in tiles])
        ma, mb = two([x.shape[0] for x in xs])
        pa, pb = two([0 if t is None else t.data_ptr() for t in pins])
        inv_ctas = -(-max(ma, mb) // 8) if pins[0] is not None else 0
        launch_kernel(self._drv, self.wg_funcs["pti_wg_tiles"], (-(-nb * nr * 32 // 8 // THREADS) + inv_ctas, len(xs)),
                      (THREADS,), 0, stream,
                      ((xa, xb, ta, tb, ma, mb, nb, xs[0].stride(0), nr, pa, pb, epi.ng if inv_ctas else 0,
                        xs[0].shape[1], float(epi.eps) if inv_ctas else 0.0, *two([0 if v is None else v.data_ptr() for v in invs])),
                       (ctypes.c_void_p,) * 4 + (ctypes.c_int,) * 5 + (ctypes.c_void_p,) * 2 + (ctypes.c_int,) * 2
                       + (ctypes.c_float,) + (ctypes.c_void_p,) * 2), self.pdl, "launch pti_wg_tiles")

    def launch(self, packs, xs, ys, name: str, epi: Epilogue | None = None) -> None:
        f = self.kernel(name)
        grid, vals, types = self.launch_args(name, packs, xs, ys, epi)
        stream = torch.cuda.current_stream(self.device).cuda_stream   # read now: capture uses a side stream
        launch_kernel(self._drv, f, (grid,), (THREADS,), self.smem.get(name, 0), stream,
                      (vals, types), self.pdl, f"launch {name}")

    def row_inv(self, p: torch.Tensor, cols: int, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
        rows, ng = p.shape
        if p.dtype != torch.float32 or not p.is_contiguous():
            raise PtiError("row_inv: the partial sums must be a contiguous float32 [rows, groups] tensor")
        if out is not None and (out.dtype != torch.float32 or out.shape != (rows,) or not out.is_contiguous()):
            raise PtiError("row_inv: out must be a contiguous float32 vector of one value a row")
        inv = torch.empty(rows, dtype=torch.float32, device=self.device) if out is None else out
        stream = torch.cuda.current_stream(self.device).cuda_stream
        launch_kernel(self._drv, self.funcs["pti_row_inv_rows"], (-(-rows // 8),), (THREADS,), 0, stream,
                      ((p.data_ptr(), rows, ng, cols, float(eps), inv.data_ptr()),
                       (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p)),
                      self.pdl, "launch pti_row_inv_rows")
        return inv

    def stream_read(self, buf: torch.Tensor, blocks: int) -> torch.Tensor:
        """Launch the streaming-read kernel over `buf` (the benchmark's denominator)."""
        out = torch.empty(blocks * THREADS, dtype=torch.int32, device=self.device)
        n16 = buf.numel() * buf.element_size() // 16
        stream = torch.cuda.current_stream(self.device).cuda_stream
        _cu(self._drv.cuLaunchKernel(self.funcs["pti_stream_read"], blocks, 1, 1, THREADS, 1, 1, 0,
                                     self._drv.CUstream(stream),
                                     ((buf.data_ptr(), n16, out.data_ptr()),
                                      (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p)), 0),
            "launch pti_stream_read")
        return out
