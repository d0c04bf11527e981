"""The latest benchmark rows for one graph from benchmarks/results/*.json, and a bar chart.

Files are read in name order (they carry their date); for each kind the last file that has
the workload wins: untuned rows (`rows`: gpu_ms per implementation) and sweeps (`best`).

Rows are keyed by the graph's CONTENT, never its name alone: a row is this graph's when it
records a `graph_digest` equal to graph_digest(g); a row with no digest (rows are keyed by
`arch`, the graph's name) counts only when the graph is the reference graph of that name (the
built-in rebuilt at the row's shape when it records one, else at the graph's own sizes; for a
name that is not built in, the committed exports/<name>.json). A user graph that only shares
a name gets no benchmark, and Bench.note says why."""
from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .. import architectures, ir
from ..files import UnsafePath, under


def graph_digest(g: ir.Graph) -> str:
    """sha256 of the graph's canonical JSON without its derivation: what the graph computes."""
    data = g.model_dump(mode="json", by_alias=True)
    data.pop("derivation", None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def builtin_at(name: str, sizes: dict) -> ir.Graph | None:
    """The built-in `name` rebuilt at these axis sizes; None when there is no such built-in or
    it does not take these sizes (then no graph is "the same" as it)."""
    if name not in architectures.NAMES:
        return None
    try:
        return architectures.build(name, **dict(sizes))
    except Exception:  # unknown axis, a size the builder refuses: not the built-in
        return None


def committed_export(name: str, root: Path | None) -> ir.Graph | None:
    """exports/<name>.json of the repository (a Lean or `leantile export` graph), if valid."""
    if root is None:
        return None
    try:
        return ir.load(under(Path(root) / "exports", f"{name}.json"))
    except (ir.GraphError, UnsafePath, OSError, ValueError):
        return None


def is_reference(g: ir.Graph, root: Path | None, sizes: dict | None = None, any_sizes: bool = False) -> bool:
    """Whether g IS the reference graph of its name: the built-in at `sizes` (default: g's
    own), or, for a name that is not built in, the committed export (at its own sizes; at
    g's when any_sizes: a Lean source describes the graph at every size)."""
    want = graph_digest(g)
    if g.name in architectures.NAMES:
        ref = builtin_at(g.name, g.axes if sizes is None else sizes)
        return ref is not None and graph_digest(ref) == want
    ref = committed_export(g.name, root)
    if ref is None:
        return False
    if any_sizes and set(ref.axes) == set(g.axes):
        ref = ref.model_copy(update={"axes": dict(g.axes)})
    return graph_digest(ref) == want


@dataclass
class Bench:
    source: str = ""
    device: str = ""
    candidate: str = ""
    rel_err: float | None = None
    gpu_ms: dict[str, float] = field(default_factory=dict)  # implementation -> ms
    sweep_source: str = ""
    sweep: dict | None = None  # best tuned: candidate, tiles, gpu_ms
    note: str = ""  # why rows named like this graph were not shown (they time another graph)

    def __bool__(self) -> bool:
        return bool(self.gpu_ms or self.sweep)


def _load(p: Path):
    from ..files import NotReadable, load_json, read_capped

    try:
        return load_json(read_capped(p, 64 << 20, "results file").decode().replace("NaN", "null"))
    except (NotReadable, ValueError):
        return None


def _shape(row: dict) -> dict | None:
    """The axis sizes a row records, if any (`shape`, as tuned entries write it, or `axes`)."""
    for key in ("shape", "axes", "sizes"):
        v = row.get(key)
        if isinstance(v, dict) and v and all(isinstance(k, str) and type(x) is int for k, x in v.items()):
            return v
    return None


class _Matcher:
    """Whether a row names this graph's content (cached per recorded shape)."""

    def __init__(self, g: ir.Graph, root: Path | None):
        self.g, self.root, self.digest, self.cache = g, root, graph_digest(g), {}

    def __call__(self, row: dict) -> bool:
        if isinstance(row.get("graph_digest"), str):
            return row["graph_digest"] == self.digest
        shape = _shape(row)
        key = json.dumps(shape, sort_keys=True)
        if key not in self.cache:
            self.cache[key] = is_reference(self.g, self.root, shape)
        return self.cache[key]


def latest(results_dir: Path, g: ir.Graph, root: Path | None = None) -> Bench:
    """The latest rows for graph g (keyed by content, see the module docstring). root: the
    repository, for exports/<name>.json of names that are not built in."""
    b, arch, same, other = Bench(), g.name, _Matcher(g, root), set()
    for p in sorted(Path(results_dir).glob("*.json")):
        data = _load(p)
        if not isinstance(data, dict):
            continue
        rows = data.get("rows")
        if not isinstance(rows, list):  # another script's JSON (a probe's "rows": 4096): no bench rows
            continue
        for row in rows:
            if isinstance(row, dict) and row.get("arch") == arch and isinstance(row.get("gpu_ms"), dict):
                if not same(row):
                    other.add(p.name)
                    continue
                ms = {str(k): float(v) for k, v in row["gpu_ms"].items()
                      if type(v) in (int, float) and math.isfinite(v) and v > 0}
                rel = row.get("rel_err")
                b.source, b.device, b.candidate, b.gpu_ms = (
                    p.name, str(data.get("device", "")), str(row.get("candidate", "")), ms)
                b.rel_err = float(rel) if type(rel) in (int, float) and math.isfinite(rel) else None
        best = (data.get("best") or {}).get(arch) if isinstance(data.get("best"), dict) else None
        if isinstance(best, dict) and type(best.get("gpu_ms")) in (int, float) \
                and math.isfinite(best["gpu_ms"]) and best["gpu_ms"] > 0:
            if not same(best):
                other.add(p.name)
                continue
            tiles = best.get("tiles")
            b.sweep = {**best, "tiles": tiles if isinstance(tiles, dict) else {}}
            b.sweep_source = p.name
            b.device = b.device or str(data.get("device", ""))
    if other and not b:
        b.note = (f"rows named {arch!r} in {', '.join(sorted(other))} time another graph of that name "
                  "(not this graph's content), so they are not shown")
    return b


def bars(b: Bench) -> list[tuple[str, float]]:
    """(label, ms) for the chart: every implementation, plus leantile tuned when swept."""
    out = [("leantile (untuned)" if k == "leantile" and b.sweep else k, v) for k, v in b.gpu_ms.items()]
    out.sort(key=lambda kv: kv[1])
    if b.sweep:
        out.append(("leantile (tuned)", float(b.sweep["gpu_ms"])))
        out.sort(key=lambda kv: kv[1])
    return out


def chart_png(b: Bench, title: str) -> bytes | None:
    """A horizontal bar chart of GPU time; None without matplotlib. Deterministic bytes."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    data = bars(b)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(data) + 1.0), dpi=100)
    labels, ms = zip(*data)
    colors = ["#b45309" if l.startswith("leantile") else "#9ca3af" for l in labels]
    ax.barh(range(len(ms)), ms, color=colors)
    ax.set_yticks(range(len(ms)), labels)
    ax.invert_yaxis()
    for i, v in enumerate(ms):
        ax.text(v, i, f" {v:.4f}", va="center", fontsize=8)
    ax.set_xlabel("GPU time, ms (lower is better)")
    ax.set_xlim(0, max(ms) * 1.25)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
