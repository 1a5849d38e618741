#!/usr/bin/env python3
"""Each K-split pair (`_k2`) beside its plain variant, from session 52's stored kernel tables
(docs/bench/wg_backend/s52/call1/split_tables.tgz; the pairs and wg_call.sh's `split` step are at 402f68b):
per (kind, matrix, rows) the plain variant's time and the pair's in us, their difference, and both in % of the
denominator (a pair whose plain variant the table lacks: the pair's alone).
    python3 scripts/pair_table.py split_bf16_1.json [split_h16_1.json ...]"""

import json
import sys

for path in sys.argv[1:]:
    res = json.load(open(path))
    cells = {(r["kind"], r["n"], r["k"], r["m"], r["kernel"]): r for r in res["rows"]}
    print(f"{path}: {res['device']}, {res['act']}, denominator {res['bandwidth']['denominator'] / 1e9:.0f} GB/s")
    for (kind, n, k, m, kernel), r in cells.items():
        if not kernel.endswith("_k2"):
            continue
        p = cells.get((kind, n, k, m, kernel[:-3]))
        cell = f"{r['us']:6.2f} us {r['pct']:5.1f}%" if p is None else \
            f"{p['us']:6.2f} -> {r['us']:6.2f} us ({r['us'] - p['us']:+.2f}), {p['pct']:5.1f} -> {r['pct']:5.1f}%"
        print(f"  {kind:5} {n}x{k} M={m:<2} {kernel:<22} {cell}")
