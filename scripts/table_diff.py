#!/usr/bin/env python3
"""Two `pti bench --kernels` tables cell by cell (session 53: PTI_PDL=0 against PDL on, h16 against bf16 inputs,
one card against another): per (kind, matrix, rows) each table's kernel, its time, its time over the bytes' time
at that table's denominator ("over"), its % of the denominator, and B - A in us and in points.  Rows given as
--rows (default 1,8); the Hopper rows "given" are left out.
    python3 scripts/table_diff.py A.json B.json [--rows 1,8,16]"""

import argparse
import json


def cells(path: str) -> tuple[dict, dict]:
    res = json.load(open(path))
    return res, {(r["kind"], r["n"], r["k"], r["m"]): r for r in res["rows"] if "given" not in r["kernel"]}


def over(r: dict, denominator: float) -> float:
    """us above the time the cell's bytes take at the denominator (bytes = GB/s x us)."""
    return r["us"] - r["gbs"] * r["us"] / denominator * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rows", default="1,8")
    args = ap.parse_args()
    rows = {int(m) for m in args.rows.split(",")}
    (ra, a), (rb, b) = cells(args.a), cells(args.b)
    for path, res in ((args.a, ra), (args.b, rb)):
        print(f"{path}: {res['device']}, {res['act']}, denominator {res['bandwidth']['denominator'] / 1e9:.0f} GB/s")
    da, db = ra["bandwidth"]["denominator"], rb["bandwidth"]["denominator"]
    for key, x in a.items():
        y = b.get(key)
        if y is None or key[3] not in rows:
            continue
        kind, n, k, m = key
        print(f"  {kind:5} {n}x{k} M={m:<2} A {x['kernel']:<16} {x['us']:7.2f} us (+{over(x, da):.2f}) {x['pct']:5.1f}%"
              f" | B {y['kernel']:<16} {y['us']:7.2f} us (+{over(y, db):.2f}) {y['pct']:5.1f}%"
              f" | B-A {y['us'] - x['us']:+.2f} us {y['pct'] - x['pct']:+.1f}")


if __name__ == "__main__":
    main()
