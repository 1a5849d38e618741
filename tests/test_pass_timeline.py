"""scripts/pass_timeline.py's analysis (the trace itself needs the GPU): the time each kernel adds to a pass, its
gap before and its place after the layer's attention, on made-up events whose answer is known; and the weights'
floors printed below."""

from __future__ import annotations

import random
import types

import torch

from pti_cli.backends.repack import Packed
from script_helpers import load_script


def _events(passes: int, overlap: float, gap: float):
    """Passes of 40 us: embed 0-2, attn_rope 2-12, a matmul of 6 us starting `overlap` us before the attention ends
    (PDL), `gap` us idle, a pti_mm of 5 us, then idle to 40; in start order, as trace() gives them."""
    ev = []
    for i in range(passes):
        t0, mm = 40.0 * i, 12 - overlap
        ev += [{"name": "embed_kernel", "ts": t0, "dur": 2.0},
               {"name": "void attn_rope<128>(float*)", "ts": t0 + 2, "dur": 10.0},
               {"name": "pti_wg_bf16_f32_m4_c8", "ts": t0 + mm, "dur": 6.0},
               {"name": "pti_mm_bf16_out_t1_r1_m1_u4", "ts": t0 + mm + 6 + gap, "dur": 5.0}]
    return ev


def test_added_time_sums_to_the_pass(capsys):
    tl = load_script("pass_timeline")
    rng = random.Random()
    overlap, gap = rng.choice((0.5, 1.0, 2.0)), rng.choice((1.0, 3.0, 4.5))   # (exact in binary: the table's 2 decimals)
    tl.report(_events(6, overlap, gap), 4, 6, "a", {"qkv": 1.25, "down": 3.5})
    out = capsys.readouterr().out
    assert "4 passes, 40.0 us a pass" in out   # the first and the last dropped: whole passes only
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in out.splitlines()[2:7]}
    # added a pass (how far each moves the busy end): the attention 10, the matmul 6 less its overlap (a negative
    # gap), pti_mm its 5 and the gap before it, the embedding 2 and the idle time before it
    assert rows["attn_rope"][3] == 10.0 and rows["pti_wg_bf16_f32_m4_c8"][1:4] == [6.0, -overlap, 6.0 - overlap]
    assert rows["pti_mm"][2:4] == [gap, 5.0 + gap]
    idle = 40 - (12 - overlap + 6 + gap + 5)
    assert rows["embed"][2:4] == [idle, idle + 2.0]
    assert rows["total"][3] == 40.0   # the column sums to the pass
    places = [line.split() for line in out.splitlines() if line.startswith("    ") and line.split()[0] in ("0", "1", "2")]
    assert [(p[0], p[1]) for p in places] == [("0", "attn_rope"), ("1", "pti_wg_bf16_f32_m4_c8"), ("2", "pti_mm")]
    assert out.rstrip().endswith("a layer's weights at the read bandwidth, us: qkv 1.25, down 3.50")


def test_layer_floors_count_every_twin_plane():
    tl = load_script("pass_timeline")

    def lin(rows: int, cols: int, planes: int):
        packs = [Packed(torch.empty(rows // 16, cols // 32, 32, 16, dtype=torch.int8),
                        torch.empty(rows // 16, cols // 32, 8, dtype=torch.int32), rows, cols) for _ in range(planes)]
        return types.SimpleNamespace(w=types.SimpleNamespace(packs=packs))
    layer = types.SimpleNamespace(wqkv=lin(96, 64, 2), wo=lin(64, 64, 2), wgu=lin(256, 64, 1), wdown=lin(64, 128, 2))
    floors = tl.layer_floors(types.SimpleNamespace(w=types.SimpleNamespace(layers=[layer])), 1e9)
    # bytes a plane: int8 weights + 4-byte scales of 8 words a block (rows/16 x blocks x 8)
    plane = lambda r, c: r * c + (r // 16) * (c // 32) * 8 * 4   # noqa: E731
    assert floors == {"qkv": 2 * plane(96, 64) / 1e3, "o": 2 * plane(64, 64) / 1e3, "gate/up": plane(256, 64) / 1e3,
                      "down": 2 * plane(64, 128) / 1e3}
