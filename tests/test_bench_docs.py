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
CARDS = sorted((BENCH / "cards").glob("bench_*.json"))   # the same code on another card (docs/bench/README.md)
REPEATS = sorted((BENCH / "repeats").glob("bench_*.json"))   # the committed run's code again, in a later call
README = Path(__file__).resolve().parents[1] / "README.md"


def test_there_are_committed_runs():
    assert [p.name for p in RUNS] == ["bench_8b.json", "bench_8b_lookup.json"]


def test_card_runs_are_quoted():
    """Both READMEs quote the other card's 16-sequence range as its files have it."""
    assert CARDS
    tok16 = []
    for p in CARDS:
        d = json.loads(p.read_text())
        assert d["command"].startswith("pti bench --synthetic 8b") and d["date"].startswith("2026-")
        tok16.append(next(r["tok_s"] for r in d["rows"] if r["seqs"] == 16))
    quoted = f"{round(min(tok16))}-{round(max(tok16))} tok/s"
    bench_readme = (BENCH / "README.md").read_text()
    assert "`cards/`" in bench_readme and quoted in bench_readme and quoted in README.read_text()


def test_repeat_runs_are_quoted():
    """Both READMEs quote the repeats' one- and 16-sequence ranges as their files have them."""
    assert REPEATS
    rows = [json.loads(p.read_text())["rows"] for p in REPEATS]
    for seqs, fmt in ((1, "{:.1f}"), (16, "{:.0f}")):
        tok = [next(r["tok_s"] for r in rs if r["seqs"] == seqs) for rs in rows]
        quoted = f"{fmt.format(min(tok))}-{fmt.format(max(tok))} tok/s"
        for text in ((BENCH / "README.md").read_text(), README.read_text()):
            assert quoted in " ".join(text.split()), (seqs, quoted)


@pytest.mark.parametrize("path", RUNS + CARDS + REPEATS, ids=[p.stem for p in RUNS + CARDS + REPEATS])
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


def test_main_readme_quotes_the_8b_run():
    """The README's GPU table is exactly the committed run's table."""
    d = json.loads((BENCH / "bench_8b.json").read_text())
    assert markdown_table(d) in README.read_text()


H100 = BENCH / "h100"   # session 43: the code of its day on an H100, where no H200 was lent


def test_main_readme_quotes_the_h100_run():
    """The README's H100 decoding table is exactly its committed run's table."""
    runs = sorted(H100.glob("bench_8b_*.json"))
    assert runs
    d = json.loads(runs[-1].read_text())
    assert d["device"].startswith("NVIDIA H100") and d["command"].startswith("pti bench --synthetic 8b")
    assert markdown_table(d) in README.read_text()


def test_main_readme_kernel_targets_match_the_kernel_json():
    """The README's two tables of issue 4's targets are those of the latest bf16 kernel table of each card."""
    from pti_cli.bench_kernels import markdown_targets, target_cells
    h200 = [json.loads(p.read_text()) for p in sorted(BENCH.glob("kernels_h200_*.json"))]
    h100 = [json.loads(p.read_text()) for p in sorted(H100.glob("kernels_*.json"))]
    readme = README.read_text()
    for d in ([r for r in h200 if r.get("act", "bf16") == "bf16"][-1], h100[-1]):
        cells = target_cells(d)
        assert len(cells) == 32 and markdown_targets(cells) in readme


def _kernel_range(d: dict, m: int = 1) -> tuple[float, float]:
    """The best variant per matrix and kind at m rows: lowest and highest % of the read bandwidth."""
    best: dict[tuple, float] = {}
    for r in d["rows"]:
        if r["m"] == m:
            key = (r["kind"], r["n"], r["k"])
            best[key] = max(best.get(key, 0.0), r["pct"])
    return min(best.values()), max(best.values())


@pytest.mark.parametrize("act", ["bf16", "f16"])
def test_main_readme_kernel_range_matches_the_kernel_json(act):
    """The README's kernel ranges at one row, of the latest kernel table of each activation type
    (`pti bench --kernels --kernel-act`; tables before the option were bf16)."""
    runs = [json.loads(p.read_text()) for p in sorted(BENCH.glob("kernels_h200_*.json"))]
    d = [r for r in runs if r.get("act", "bf16") == act][-1]   # the latest run
    lo, hi = _kernel_range(d)
    text = " ".join(README.read_text().split())
    tail = "" if act == "bf16" else " with f16 activations"
    assert f"{lo:.1f}% to {hi:.1f}% of the read bandwidth at one row{tail}" in text


def test_main_readme_row_ratios_match_the_f16_kernel_json():
    """The README's t(32 rows) / t(1 row) and t(64) / t(1) ranges: the policy's rows (not the extra
    variants a table also times) of the latest f16 kernel table."""
    runs = [json.loads(p.read_text()) for p in sorted(BENCH.glob("kernels_h200_*.json"))]
    d = [r for r in runs if r.get("act", "bf16") == "f16"][-1]
    ratio = {32: [], 64: []}
    for r in d["rows"]:
        if r["m"] in ratio:   # only the policy's rows time 32 and 64 rows in pti bench --kernels
            ratio[r["m"]].append(r["vs_m1"])
    assert all(len(v) == 8 for v in ratio.values())   # 4 matrices x (Q8, SSQ16)
    text = " ".join(README.read_text().split())
    lo32, hi32, lo64, hi64 = min(ratio[32]), max(ratio[32]), min(ratio[64]), max(ratio[64])
    assert f"takes {lo32:.2f}-{hi32:.2f} and {lo64:.2f}-{hi64:.2f} times its one-row time" in text


def test_main_readme_bandwidth_math_quotes_the_8b_run():
    """The README's worked example (bytes per pass, bandwidth, ceiling) is the committed run's."""
    d = json.loads((BENCH / "bench_8b.json").read_text())
    one = next(r for r in d["rows"] if r["seqs"] == 1 and r["twins"] == "a")
    text = " ".join(README.read_text().split())
    assert (f"reads {one['bytes_per_pass'] / 1e9:.2f} GB per pass; at the {d['bandwidth']['best'] / 1e9:.0f} GB/s"
            in text)
    assert f"at most {one['ceiling_tok_s']:.0f} passes per second" in text


def test_run_script_names_existing_variants():
    """docs/bench/run_h200.sh's kernel table names only variants the kernel source has (a removed
    variant made the table of session 11's run fail at once)."""
    import re
    from pti_cli.backends.cuda import all_variants
    script = (BENCH / "run_h200.sh").read_text()
    lists = re.findall(r"--kernel-variants\s+(\S+)", script)
    assert lists
    for names in lists:
        for v in names.split(","):
            assert v == "default" or v in all_variants(), v


def test_device_call_script_names_existing_variants():
    """docs/bench/wg_call.sh names only kernel variants the host can launch (all_variants), so a device call does not
    stop at a removed one."""
    import re
    from pti_cli.backends.cuda import all_variants
    script = (BENCH / "wg_call.sh").read_text()
    names = {m.group(0) for m in re.finditer(r"\bt[12]_r\d_m\d_u\d(?:_p1)?(?:_i1)?(?!\w)", script)}
    assert "t1_r1_m1_u4_p1" in names
    assert sorted(names - set(all_variants())) == []
