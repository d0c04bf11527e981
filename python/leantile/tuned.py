"""The best configuration found by `leantile search`, per workload and GPU.

benchmarks/tuned/<arch>.json (schema "leantile-tuned/v1"):
    {"schema": ..., "arch": "attention", "entries": [
        {"arch", "shape": {axis: size}, "dtype": "f16", "gpu": "NVIDIA H200",
         "candidate": "online_exp2", "tiles": {"block_m": 128, ...}, "time_ms": 0.24, ...}]}
One entry per (shape, dtype, gpu); a new search result for the same key replaces it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA = "leantile-tuned/v1"


def tuned_dir() -> Path:
    env = os.environ.get("LEANTILE_TUNED_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "benchmarks" / "tuned"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema": SCHEMA, "entries": []}
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        return {"schema": SCHEMA, "entries": []}
    return data


def _key(e: dict) -> tuple[str, str, str]:
    """What one entry is for: (shape, dtype, gpu)."""
    return json.dumps(e.get("shape"), sort_keys=True), str(e.get("dtype")), str(e.get("gpu"))


def save_tuned(entry: dict, root: str | Path | None = None) -> Path:
    """Insert or replace the entry for its (shape, dtype, gpu) in <root>/<arch>.json, atomically."""
    from .files import write_atomic

    path = Path(root or tuned_dir()) / f"{entry['arch']}.json"
    entries = [e for e in _read(path)["entries"] if _key(e) != _key(entry)] + [entry]
    entries.sort(key=_key)
    write_atomic(path, json.dumps({"schema": SCHEMA, "arch": entry["arch"], "entries": entries},
                                  indent=1, sort_keys=True) + "\n")
    return path


def save_if_faster(entry: dict, root: str | Path | None = None, replace: bool = False) -> tuple[Path | None, dict | None]:
    """Save entry unless the stored one for its (shape, dtype, gpu) is faster (a short or
    interrupted search must not replace what a longer one found); `replace` saves anyway.
    Returns (the file written, or None; the faster entry kept, or None)."""
    path = Path(root or tuned_dir()) / f"{entry['arch']}.json"
    stored = next((e for e in _read(path)["entries"] if _key(e) == _key(entry)), None)
    if not replace and stored is not None and stored.get("time_ms", float("inf")) < entry["time_ms"]:
        return None, stored
    return save_tuned(entry, root), None


def load_tuned(arch: str, shape: dict, dtype: str = "f16", gpu: str | None = None,
               root: str | Path | None = None) -> tuple[str, dict] | None:
    """(candidate, tiles) of the best entry for this shape and dtype, or None.

    gpu: a name or part of one ("H200"), case-insensitive; None takes any real GPU (entries
    from `--fake` searches, gpu "fake", are used only when asked for by name)."""
    path = Path(root or tuned_dir()) / f"{arch}.json"
    if not path.exists():
        return None
    want = {k: int(v) for k, v in shape.items()}
    found = []
    for e in _read(path)["entries"]:
        if e.get("shape") != want or e.get("dtype") != dtype:
            continue
        name = str(e.get("gpu", ""))
        if gpu is None and name == "fake":
            continue
        if gpu is not None and gpu.lower() not in name.lower():
            continue
        found.append(e)
    if not found:
        return None
    best = min(found, key=lambda e: e.get("time_ms", float("inf")))
    return best["candidate"], dict(best["tiles"])
