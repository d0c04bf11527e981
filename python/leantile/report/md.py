"""A Report as Markdown (math in $$ blocks; the graph and chart as files beside it)."""
from __future__ import annotations

from .collect import Report


def _table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _proof(p) -> str:
    if p.status == "checked":
        return "checked (axioms: " + (", ".join(p.axioms) or "none") + ")"
    if p.status == "failed":
        return f"failed: {p.message}"
    return p.words


def render(r: Report, graph_file: str, chart_file: str | None) -> str:
    g = r.graph
    out = [f"# {r.name}", "",
           f"Source `{r.source}`; axes " + ", ".join(f"{a}={s}" for a, s in g.axes.items())
           + f"; derivation shown: `{r.chosen}` ({r.chosen_why}).", "",
           "## Architecture", "", f"`{r.arch_label}`", "", f"```{r.arch_lang}", r.arch_text.rstrip(), "```", "",
           f"![graph of {r.name}]({graph_file})", "", f"(drawn by {r.graph_how})", "",
           "## Derivation", "",
           "Candidates: " + ", ".join(f"`{n}`" for n, _ in r.candidates) + ". $v^{(i)}$ is the value of node %i.", ""]
    if not r.steps:
        out += ["No rule applies: the graph runs as it is.", ""]
    for s in r.steps:
        params = "".join(f", {k}={v}" for k, v in sorted(s.params.items()))
        out += [f"### {s.index}. `{s.rule}` at " + ", ".join(f"%{i}" for i in s.at) + params, "",
                f"Lean theorem `{s.theorem}`: {s.statement}. Rewrite: {s.rewrite}.", ""]
        if s.before:
            out += ["Before:", "", "$$", s.before, "$$", "", "After:", "", "$$", s.after, "$$", ""]
    out += ["## Proof status", "", "From `leantile check-lean`.", ""]
    out += [_table(("theorem", "used by", "status"),
                   [(f"`{p.theorem}`", ", ".join(p.rules), _proof(p)) for p in r.proofs]) if r.proofs
            else "No theorem is cited.", ""]
    out += ["## Numeric evidence", "", "interp(plan) vs the unfused reference on random small sizes, tiles and "
            "inputs (fixed seeds); relative error in the Frobenius norm.", "",
            _table(("candidate", "dtype", "examples run", "max rel. error", "tolerance", "result"),
                   [(f"`{e.candidate}`", e.dtype, e.examples, f"{e.max_rel_err:.2g}", f"{e.tolerance:g}",
                     "pass" if e.ok else "FAIL") for e in r.evidence]), "", "Sympy checks:", ""]
    out += [_table(("rule", "result", "what was checked"),
                   [(f"`{n}`", {True: "holds", False: "FAILS", None: "none"}[ok], d) for n, ok, d in r.sympy])
            if r.sympy else "No rule, no check.", ""]
    out += ["## Emitted TileLang", "", f"Candidate `{r.chosen}`, tiles "
            + ", ".join(f"{k}={v}" for k, v in r.tiles.items()) + ".", ""]
    out += (["```python", r.kernel.rstrip(), "```", ""] if r.kernel else [f"Not emitted: {r.kernel_error}", ""])
    out += ["## Benchmarks", ""]
    b = r.bench
    if not b:
        out += ["No results for this workload in benchmarks/results.", ""]
    if b.gpu_ms:
        base = b.gpu_ms.get("leantile")
        out += [f"{b.device}, `{b.source}`, candidate `{b.candidate}`, untuned tiles.", "",
                _table(("implementation", "GPU ms", "leantile speed-up (its ms / leantile ms)"),
                       [(f"`{k}`", f"{v:.4f}", f"{v / base:.2f}x" if base else "")
                        for k, v in sorted(b.gpu_ms.items(), key=lambda kv: kv[1])]), ""]
    if b.sweep:
        tiles = ", ".join(f"{k}={v}" for k, v in (b.sweep.get("tiles") or {}).items())
        out += [f"Tuned (`{b.sweep_source}`): `{b.sweep.get('candidate')}` with {tiles}: "
                f"{float(b.sweep['gpu_ms']):.4f} ms.", ""]
    if chart_file:
        out += [f"![GPU time per implementation]({chart_file})", ""]
    return "\n".join(out)


def index(entries) -> str:
    rows = [(f"[{n}]({n}.md)", f"`{c}`", k, p, "pass" if ok else "FAIL") for n, c, k, p, ok in entries]
    return "\n".join(["# leantile reports", "",
                      _table(("architecture", "derivation shown", "steps", "proof status", "numeric check"), rows), ""])
