"""Issue 4's target table from `pti bench --kernels` rows (pti_cli.bench_kernels.target_cells): which row counts,
which rows a target takes, and the thresholds' edges."""

from __future__ import annotations

import random

from pti_cli.bench_kernels import MS, SHAPES, markdown_targets, print_targets, target_cells


def row(kind, n, k, m, kernel, pct, vs_m1):
    return {"kind": kind, "n": n, "k": k, "m": m, "kernel": kernel, "us": 1.0, "gbs": 1.0, "pct": pct, "vs_m1": vs_m1}


def random_table(rng):
    """A table like the default call's: every shape, kind and row count, "given" rows beside the Hopper ones."""
    rows = []
    for n, k in SHAPES:
        for kind in ("q8", "ssq16"):
            for m in MS:
                rows.append(row(kind, n, k, m, "t1_r1_m1_u4", rng.uniform(40, 100), rng.uniform(1, 3)))
                if m > 16:
                    rows.append(row(kind, n, k, m, "wg_m4_c8 given", rng.uniform(40, 100), rng.uniform(1, 3)))
    return {"rows": rows}


def test_cells_follow_the_issue_on_random_tables():
    rng = random.Random()
    for _ in range(20):
        res = random_table(rng)
        cells = {(c["kind"], c["n"], c["k"], c["target"]): c for c in target_cells(res)}
        assert len(cells) == 2 * len(SHAPES) * 4
        for n, k in SHAPES:
            for kind in ("q8", "ssq16"):
                def counted(m):   # the last row of that cell: the "given" one where there is one
                    return [r for r in res["rows"] if (r["kind"], r["n"], r["k"], r["m"]) == (kind, n, k, m)][-1]
                low = min(counted(m)["pct"] for m in (1, 2, 4, 8))
                assert cells[(kind, n, k, "1-8 rows")]["value"] == low
                assert cells[(kind, n, k, "1-8 rows")]["met"] == (low >= 90)
                assert cells[(kind, n, k, "16 rows")]["met"] == (counted(16)["pct"] >= 80)
                assert cells[(kind, n, k, "32 rows")]["value"] == counted(32)["vs_m1"]
                assert cells[(kind, n, k, "32 rows")]["met"] == (counted(32)["vs_m1"] <= 1.5)
                assert cells[(kind, n, k, "64 rows")]["met"] == (counted(64)["vs_m1"] <= 2.0)


def test_edges_and_the_given_row():
    rows = [row("q8", 64, 32, m, "k", 90.0 if m != 4 else 89.99, 1.0) for m in (1, 2, 4, 8)]
    rows += [row("q8", 64, 32, 16, "k", 80.0, 1.1), row("q8", 64, 32, 32, "k", 1.0, 1.5),
             row("q8", 64, 32, 64, "wg given", 1.0, 2.0), row("q8", 64, 32, 64, "wg", 1.0, 9.0)]
    got = {c["target"]: c["met"] for c in target_cells({"rows": rows})}
    # 89.99% at 4 rows fails the 1-8 row target; the others sit exactly at their goals; at 64 rows the
    # given row counts even where the plain call's row comes after it
    assert got == {"1-8 rows": False, "16 rows": True, "32 rows": True, "64 rows": True}
    md = markdown_targets(target_cells({"rows": rows}))
    assert "| q8 | 64x32 | 89.99% | **80.00%** | **x1.50** | **x2.00** |" in md and md.endswith("Met (bold): 3 of 4.")
    rows[-2]["vs_m1"] = 2.01
    assert {c["target"]: c["met"] for c in target_cells({"rows": rows})}["64 rows"] is False


def test_a_target_without_its_rows_is_left_out(capsys):
    res = {"rows": [row("ssq16", 64, 32, m, "k", 95.0, 1.0) for m in (1, 2, 8, 16)]}   # no 4, 32 or 64 rows
    cells = target_cells(res)
    assert [c["target"] for c in cells] == ["16 rows"]
    print_targets(cells)
    out = capsys.readouterr().out
    assert "95.00% *" in out and "met: 1 of 1" in out


def test_a_timed_replay_reads_enough_that_its_start_is_small():
    """bench_shape's R: every copy at least twice (the L2 never holds a copy's second read) and at least REPLAY_BYTES
    of weights a replay, so the replay's fixed start (a few us) is under 1% of each launch at the card's bandwidth."""
    from pti_cli.bench_kernels import REPLAY_BYTES, WORKING_SET, replay_launches
    rng = random.Random()
    for _ in range(200):
        nbytes = rng.randint(1 << 20, 1 << 30)
        copies = max(2, -(-WORKING_SET // nbytes))
        r = replay_launches(nbytes, copies)
        assert r >= 2 * copies and r * nbytes >= REPLAY_BYTES and r >= 20
        assert r == 20 or (r - 1) * nbytes < REPLAY_BYTES or r == 2 * copies   # no more than it needs
    # the smallest matrix of the table (Q8 4096x4096, 17.8 MB): over 100 launches, ~0.6 ms at 3 TB/s
    assert replay_launches(4096 * 4096 + 4096 * 128 * 2, 15) > 100
