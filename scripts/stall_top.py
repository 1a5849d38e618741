#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's source page (`ncu --import R.ncu-rep --page source --csv
--print-source sass > K_sass.csv`, as scripts/ncu_stalls.sh writes): the split of stall samples by reason and
the instructions holding the most samples, each with its main reason.  Runs on the CPU.
    python3 scripts/stall_top.py K_sass.csv [--top 12]"""

import argparse
import csv


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv, newline="")))
    start = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    head, data = rows[start], rows[start + 1:]
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(number(r[col["Warp Stall Sampling (All Samples)"]]) for r in data) or 1.0
    print(f"{int(total)} samples over {len(data)} instructions")
    split = {h: sum(number(r[col[h]]) for r in data) for h in reasons}
    print("  " + ", ".join(f"{h[6:]} {100 * v / total:.1f}%" for h, v in sorted(split.items(), key=lambda x: -x[1]) if v))
    for r in sorted(data, key=lambda r: -number(r[col["Warp Stall Sampling (All Samples)"]]))[:args.top]:
        main_reason = max(reasons, key=lambda h: number(r[col[h]]))
        share = 100 * number(r[col["Warp Stall Sampling (All Samples)"]]) / total
        print(f"  {share:5.1f}%  {main_reason[6:]:16} {r[col['Source']].strip()}")


if __name__ == "__main__":
    main()
