"""The latest benchmark rows for one workload from benchmarks/results/*.json, and a bar chart.

Files are read in name order (they carry their date); for each kind the last file that has
the workload wins: untuned rows (`rows`: gpu_ms per implementation) and sweeps (`best`)."""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Bench:
    source: str = ""
    device: str = ""
    candidate: str = ""
    rel_err: float | None = None
    gpu_ms: dict[str, float] = field(default_factory=dict)  # implementation -> ms
    sweep_source: str = ""
    sweep: dict | None = None  # best tuned: candidate, tiles, gpu_ms

    def __bool__(self) -> bool:
        return bool(self.gpu_ms or self.sweep)


def _load(p: Path):
    try:
        return json.loads(p.read_text().replace("NaN", "null"))
    except (OSError, ValueError):
        return None


def latest(results_dir: Path, arch: str) -> Bench:
    b = Bench()
    for p in sorted(Path(results_dir).glob("*.json")):
        data = _load(p)
        if not isinstance(data, dict):
            continue
        for row in data.get("rows") or []:
            if isinstance(row, dict) and row.get("arch") == arch and isinstance(row.get("gpu_ms"), dict):
                ms = {k: float(v) for k, v in row["gpu_ms"].items()
                      if isinstance(v, (int, float)) and math.isfinite(v)}
                b.source, b.device, b.candidate, b.rel_err, b.gpu_ms = (
                    p.name, str(data.get("device", "")), str(row.get("candidate", "")), row.get("rel_err"), ms)
        best = (data.get("best") or {}).get(arch) if isinstance(data.get("best"), dict) else None
        if isinstance(best, dict) and isinstance(best.get("gpu_ms"), (int, float)):
            b.sweep, b.sweep_source = best, p.name
            b.device = b.device or str(data.get("device", ""))
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
