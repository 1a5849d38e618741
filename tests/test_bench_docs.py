"""The committed H200 bench results (docs/bench/*.json) are self-consistent and
docs/bench/README.md quotes exactly their numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pti_cli.bench import markdown_table

BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"
RUNS = sorted(BENCH.glob("bench_*.json"))


def test_there_are_committed_runs():
    assert [p.name for p in RUNS] == ["bench_8b.json", "bench_8b_lookup.json"]


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_json_arithmetic(path):
    d = json.loads(path.read_text())
    assert d["device"].startswith("NVIDIA") and d["command"].startswith("pti bench --synthetic 8b")
    bw = d["bandwidth"]["best"]
    assert bw == max(d["bandwidth"]["torch_sum"], d["bandwidth"]["stream_kernel"])
    base = next(r["tok_s"] for r in d["rows"] if r["seqs"] == 1 and r["spec"] == "none" and r["twins"] == "a")
    for r in d["rows"]:
        tokens_per_pass = r["tokens"] / r["passes"]
        assert math.isclose(r["ceiling_tok_s"], bw / r["bytes_per_pass"] * tokens_per_pass, rel_tol=1e-9)
        assert math.isclose(r["pct_ceiling"], 100 * r["tok_s"] / r["ceiling_tok_s"], rel_tol=1e-9)
        assert math.isclose(r["tok_s"], r["tokens"] / r["seconds"], rel_tol=1e-9)
        assert math.isclose(r["speedup"], r["tok_s"] / base, rel_tol=1e-9)
        assert r["repeats_identical"] and (r["label"] == "replay") == (r["spec"] != "none")
    assert not d["notes"] or all("replay" in n for n in d["notes"])   # no greedy mismatch noted


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_readme_quotes_the_json(path):
    readme = (BENCH / "README.md").read_text()
    assert markdown_table(json.loads(path.read_text())) in readme
