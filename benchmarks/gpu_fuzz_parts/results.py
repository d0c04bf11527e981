"""The results file (counts per family, one record per failure, the graphs run; rewritten
atomically after every graph and resumable) and the per-family table printed at the end."""
from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path


def code_fingerprint(package: Path) -> str:
    """sha256 (first 16 hex digits) of the compiler's code: every .py under the package, by
    relative path and syntax tree, comments and docstrings left out (a comment that now cites
    another evidence file does not start a new version; any change to what runs does). A
    campaign's plans count towards one code version only where this matches, so --resume refuses
    a file written by other code (the .cleanhead copies sent to the GPU machine have no .git: the
    source itself is the version). The tree is written out by _tree_text, the same under every
    Python since 3.9 (ast.dump's own text changed in 3.13)."""
    h = hashlib.sha256()
    for f in sorted(package.rglob("*.py")):
        tree = ast.parse(f.read_bytes(), filename=str(f))
        h.update(f.relative_to(package).as_posix().encode() + b"\0" + _tree_text(tree).encode() + b"\0")
    return h.hexdigest()[:16]


def _tree_text(node) -> str:
    """A node's type and fields, recursively, without positions, docstrings, None or empty
    lists (fields a newer Python added, such as type_params, are empty in this code), f-string
    pieces as 3.11 parses them."""
    if isinstance(node, list):
        return "[" + ",".join(_tree_text(x) for x in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = {name: getattr(node, name, None) for name in node._fields}
    body = fields.get("body")
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
            isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        fields["body"] = body[1:]  # the docstring
    if isinstance(node, ast.JoinedStr):  # f-string pieces: 3.12 parses an empty one after a format spec
        fields["values"] = _merged_pieces(node.values)
    text = [f"{name}={_tree_text(value)}" for name, value in fields.items() if value is not None and value != []]
    return f"{type(node).__name__}({','.join(text)})"


def _merged_pieces(values: list) -> list:
    """An f-string's pieces with empty text dropped and adjacent text joined."""
    out: list = []
    for v in values:
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            if not v.value:
                continue
            if out and isinstance(out[-1], ast.Constant) and isinstance(out[-1].value, str):
                out[-1] = ast.Constant(value=out[-1].value + v.value)
                continue
        out.append(v)
    return out


def slug(gpu: str) -> str:
    m = re.search(r"\b([a-z]\d{2,4}[a-z]?)\b", gpu.lower())
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"


class Results:
    def __init__(self, path: Path, meta: dict, old: dict | None):
        self.path, self.meta = path, meta
        keep = old or {}
        self.counts = dict(keep.get("counts_by_family", {}))
        self.failures = list(keep.get("failures", []))
        self.runs = list(keep.get("graphs_run", []))
        self.done = set(keep.get("done", []))
        self.largest = int(keep.get("largest_axis", 0))
        self.sessions = list(keep.get("sessions", []))
        self.refusals = list(keep.get("refusals", []))[:200]

    def family(self, name):
        return self.counts.setdefault(name, {"graphs": 0, "plans": 0, "ok": 0, "mismatch": 0, "crash": 0,
                                             "unjudged": 0, "skipped": 0, "refused": 0, "largest_axis": 0,
                                             "graphs_axis_ge_65536": 0, "large_draws": 0, "huge_draws": 0})

    def add_graph(self, job, statuses: dict, info: dict):
        fam = self.family(job["family"])
        g_axes = job["sizes"]
        big = max(g_axes.values()) if g_axes else 0
        fam["graphs"] += 1
        fam["largest_axis"] = max(fam["largest_axis"], big)
        fam["graphs_axis_ge_65536"] += big >= 65536
        fam["refused"] += len(job["refused"])
        fam["crash"] += len(job["crashed"])
        fam["plans"] += len(job["crashed"])
        fam["large_draws"] += info.get("draws", {}).get("large") == "judged"
        fam["huge_draws"] = fam.get("huge_draws", 0) + (info.get("draws", {}).get("huge") == "judged")
        for st in statuses.values():
            fam["plans"] += st in ("ok", "mismatch", "crash", "unjudged")
            fam[st] = fam.get(st, 0) + 1
        self.largest = max(self.largest, big)
        self.done.add(job["key"])
        self.runs.append({"key": job["key"], "family": job["family"], "name": job["name"], "dtype": job["dtype"],
                          "sizes": g_axes, "plans": {str(k): v for k, v in statuses.items()},
                          "refused": [r["candidate"] for r in job["refused"]],
                          "draws": info.get("draws", {}), "error": info.get("error")})
        for r in job["refused"][:2]:
            if len(self.refusals) < 200:
                self.refusals.append({"family": job["family"], "name": job["name"], "sizes": g_axes, **r})

    def failure(self, job, plan: dict, f: dict):
        self.failures.append({"family": job["family"], "graph_name": job["name"], "dtype": job["dtype"],
                              "sizes": job["sizes"], "candidate": plan.get("candidate"),
                              "default": plan.get("default"), "plan_candidate": plan.get("plan_candidate"),
                              "tiles": plan.get("tiles"), **f, "graph": json.loads(job["graph"]),
                              # a backward's forward and saved names: the replay computes its saved inputs
                              "extra": job.get("extra") or {}})

    def totals(self) -> dict:
        t = {k: 0 for k in ("graphs", "plans", "ok", "mismatch", "crash", "unjudged", "skipped", "refused", "large_draws",
                            "huge_draws", "graphs_axis_ge_65536")}
        for c in self.counts.values():
            for k in t:
                t[k] += c.get(k, 0)
        return t

    def write(self, elapsed: float, final: bool = False):
        from leantile.files import write_atomic

        t = self.totals()
        doc = {**self.meta, "graphs": t["graphs"], "plans": t["plans"], "mismatch": t["mismatch"], "crash": t["crash"],
               "largest_axis": self.largest, "ok": t["ok"], "unjudged": t["unjudged"], "skipped": t["skipped"],
               "refused": t["refused"], "large_draws": t["large_draws"], "huge_draws": t["huge_draws"], "graphs_axis_ge_65536": t["graphs_axis_ge_65536"],
               "elapsed_s": round(elapsed, 1), "complete": final,
               "sessions": self.sessions + [{"date": self.meta["date"], "seed": self.meta["seed"], "elapsed_s": round(elapsed, 1)}],
               "counts_by_family": self.counts, "failures": self.failures, "refusals": self.refusals,
               "graphs_run": self.runs, "done": sorted(self.done)}
        write_atomic(self.path, json.dumps(doc, indent=1, default=str) + "\n")


def table(counts: dict) -> str:
    cols = ("graphs", "plans", "ok", "mismatch", "crash", "unjudged", "skipped", "refused", "large_draws", "huge_draws", "largest_axis")
    rows = [["family", *cols]]
    tot = {c: 0 for c in cols}
    for name in sorted(counts):
        c = counts[name]
        rows.append([name, *(str(c.get(k, 0)) for k in cols)])
        for k in cols:
            tot[k] = max(tot[k], c.get(k, 0)) if k == "largest_axis" else tot[k] + c.get(k, 0)
    rows.append(["total", *(str(tot[k]) for k in cols)])
    w = [max(len(r[i]) for r in rows) for i in range(len(cols) + 1)]
    return "\n".join("  ".join(x.rjust(w[i]) if i else x.ljust(w[i]) for i, x in enumerate(r)) for r in rows)
