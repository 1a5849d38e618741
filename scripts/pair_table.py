#!/usr/bin/env python3
"""Each K-split pair (`_k2`) beside its plain variant, from session 52's stored kernel tables
(docs/bench/wg_backend/s52/call1/split_tables.tgz; the pairs and wg_call.sh's `split` step are at 402f68b):
% of the denominator per (kind, matrix, rows), and the pair's points over the plain variant.
    python3 scripts/pair_table.py split_bf16_1.json [split_h16_1.json ...]"""

import json
import sys

for path in sys.argv[1:]:
    res = json.load(open(path))
    pct = {(r["kind"], r["n"], r["k"], r["m"], r["kernel"]): r["pct"] for r in res["rows"]}
    print(f"{path}: {res['device']}, {res['act']}, denominator {res['bandwidth']['denominator'] / 1e9:.0f} GB/s")
    for (kind, n, k, m, kernel), p in pct.items():
        if kernel.endswith("_k2"):
            plain = pct.get((kind, n, k, m, kernel[:-3]))
            gain = "" if plain is None else f"{plain:5.1f}  {p - plain:+5.1f}"
            print(f"  {kind:5} {n}x{k} M={m:<2} {kernel:<22} {p:5.1f}  {gain}")
