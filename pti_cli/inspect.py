"""`pti inspect FILE.ssq [--json]`: metadata, twins, tensors and bytes per pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .ssq import SSQFile

SHORT_ARRAY = 8       # arrays longer than this are summarised (token lists, merges)


def _short(value: Any) -> Any:
    if isinstance(value, list) and len(value) > SHORT_ARRAY:
        return f"[{len(value)} items]"
    return value


def summary(f: SSQFile) -> dict[str, Any]:
    """Everything inspect shows, as plain JSON-able data."""
    kinds = f.metadata.get("ssq.source_kinds", ["?", "?"])
    return {
        "path": str(f.path),
        "file_size": f.file_size(),
        "arch": f.arch,
        "mode": f.mode,
        "identical": f.identical,
        "tied_embeddings": f.tied_embeddings,
        "twins": [{"twin": t, "name": f.twin_names[i], "sha256": f.source_sha256[i], "source": kinds[i]}
                  for i, t in enumerate("AB")],
        "pass_bytes": {"one_twin": f.pass_bytes(1), "both_twins": f.pass_bytes(2)},
        "metadata": {k: _short(v) for k, v in f.metadata.items()},
        "tensors": [{"name": n, "shape": list(f.logical_shape(n)), "storage": f.storage(n),
                     "bytes": f.stored_bytes(n)} for n in f.tensor_names],
    }


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def inspect_cli(path: Path, *, json_out: bool = False) -> None:
    f = SSQFile(path)
    s = summary(f)
    if json_out:
        print(json.dumps(s, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    console = Console()
    head = Table(title=f"{s['path']}", show_header=False)
    head.add_row("architecture", s["arch"])
    head.add_row("mode", f"{s['mode']} ({'identical twins, plain Q8_0' if s['identical'] else 'two twins, SSQ16 blocks'})")
    head.add_row("tied embeddings", str(s["tied_embeddings"]))
    head.add_row("tensors", str(len(s["tensors"])))
    head.add_row("file size", f"{s['file_size']:,} bytes ({_gb(s['file_size'])})")
    head.add_row("bytes per pass, one twin", f"{s['pass_bytes']['one_twin']:,} ({_gb(s['pass_bytes']['one_twin'])})")
    head.add_row("bytes per pass, both twins", f"{s['pass_bytes']['both_twins']:,} ({_gb(s['pass_bytes']['both_twins'])})")
    console.print(head)

    twins = Table(title="twins")
    for col in ("twin", "name", "source", "sha256 (first 16)"):
        twins.add_column(col)
    for t in s["twins"]:
        twins.add_row(t["twin"], t["name"], t["source"], t["sha256"][:16])
    console.print(twins)

    meta = Table(title="metadata")
    meta.add_column("key")
    meta.add_column("value", overflow="fold")
    for k, v in s["metadata"].items():
        if not k.startswith("ssq.tensor_") and k != "ssq.source_sha256":
            text = str(v).replace("\n", "\\n")
            meta.add_row(k, text if len(text) <= 160 else text[:157] + "...")
    console.print(meta)

    tensors = Table(title="tensors")
    for col, just in (("name", "left"), ("logical shape", "right"), ("storage", "left"), ("bytes", "right")):
        tensors.add_column(col, justify=just)
    for t in s["tensors"]:
        tensors.add_row(t["name"], " x ".join(map(str, t["shape"])), t["storage"], f"{t['bytes']:,}")
    console.print(tensors)
