"""Plot a search history from the DB: best-so-far time against evaluations, one line per
run, interventions marked, the roofline floor dashed. Needs matplotlib (optional)."""
from __future__ import annotations

import math
from pathlib import Path

from .db import SearchDB


def plot_history(db: SearchDB, workload: str, out: str | Path, target_ms: float | None = None,
                 measurer: str | None = None) -> Path:
    """measurer: draw only the rows of this measurer ("fake" or a GPU model): a fake run and a
    GPU run of the same workload are different histories."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    runs = sorted({r for w, r in db.runs() if w == workload})
    for run in runs:
        rows = db.rows(workload, run, measurer)
        best, xs, ys = math.inf, [], []
        for i, r in enumerate(rows):
            if r["compile_ok"] and r["verified_ok"] and r["time_ms"] is not None:
                best = min(best, r["time_ms"])
            if math.isfinite(best):
                xs.append(i + 1)
                ys.append(best)
        line, = ax.step(xs, ys, where="post", label=run)
        for ev in db.events(workload, run, measurer):
            step = ev.get("global_step")
            if step is None:
                continue
            y = next((y for x, y in zip(xs, ys) if x >= step), None)
            if y is not None:
                ax.plot([step], [y], "x" if ev["kind"] == "crossover" else "o", color=line.get_color(), ms=4)
    if target_ms:
        ax.axhline(target_ms, ls="--", color="gray", label="roofline floor")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best time so far (ms)")
    ax.set_title(workload)
    ax.legend(fontsize=7)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
