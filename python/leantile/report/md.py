"""A Report as Markdown (math in $$ blocks; the graph and chart as files beside it).

Every string taken from a graph, a source or a results file is written through code() (an
inline code span whose fence no backtick in it can close), text() (backslash-escaped: no
HTML tag, link or emphasis can start inside it; _table escapes |), fence() (a code block no line
of it can close) or, in a link target, quote()."""
from __future__ import annotations

import re
from urllib.parse import quote

from .collect import Report

INDEX = "index"  # index.html / index.md list every report in the folder


def page_stem(name: str) -> str:
    """The file stem of a graph's pages: its name, except for a graph named `index`, whose
    pages would be the index itself (`index.page.html`; no identifier holds a dot, so this
    stem can be no other graph's)."""
    return f"{name}.page" if name == INDEX else name

_SPECIAL = re.compile(r"([\\`*_\[\]<>&$~#!])")  # | is escaped by _table


def text(s) -> str:
    """Plain text on one line, Markdown and HTML characters escaped."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(s).split()))


def code(s) -> str:
    """An inline code span showing s literally (on one line)."""
    s = " ".join(str(s).split())
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    tick = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{tick}{pad}{s}{pad}{tick}"


def fence(body: str, lang: str = "") -> list[str]:
    """A fenced code block for body: the fence is longer than any backtick run in it."""
    run = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    tick = "`" * (run + 1)
    return [f"{tick}{re.sub(r'[^A-Za-z0-9_+-]', '', lang)}", body.rstrip(), tick]


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
    out = [f"# {text(r.name)}", "",
           f"Source {code(r.source)}; axes " + ", ".join(f"{text(a)}={text(s)}" for a, s in g.axes.items())
           + f"; derivation shown: {code(r.chosen)} ({text(r.chosen_why)}).", "",
           "## Architecture", ""]
    if r.arch_note:
        out += [text(r.arch_note), ""]
    out += [code(r.arch_label), "", *fence(r.arch_text, r.arch_lang), "",
            f"![graph of {text(r.name)}]({quote(graph_file)})", "", f"(drawn by {text(r.graph_how)})", "",
            "## Derivation", "",
            "Candidates: " + ", ".join(code(n) for n, _ in r.candidates) + ". $v^{(i)}$ is the value of node %i.", ""]
    if not r.steps:
        out += ["No rule applies: the graph runs as it is.", ""]
    for s in r.steps:
        params = "".join(f", {text(k)}={text(v)}" for k, v in sorted(s.params.items()))
        out += [f"### {s.index}. {code(s.rule)} at " + ", ".join(f"%{i}" for i in s.at) + params, "",
                f"Lean theorem {code(s.theorem)}: {s.statement}. Rewrite: {s.rewrite}.", ""]
        if s.before:
            out += ["Before:", "", "$$", s.before, "$$", "", "After:", "", "$$", s.after, "$$", ""]
    out += ["## Proof status", "", "From `leantile check-lean`.", ""]
    out += [_table(("theorem", "used by", "status"),
                   [(code(p.theorem), text(", ".join(p.rules)), text(_proof(p))) for p in r.proofs]) if r.proofs
            else "No theorem is cited.", ""]
    out += ["## Numeric evidence", "", "interp(plan) vs the unfused reference on random small sizes, tiles and "
            "inputs (fixed seeds); relative error in the Frobenius norm, then what is left of it beyond the "
            "unfused graph's own rounding in that dtype (the judged figure, against the tolerance).", "",
            _table(("candidate", "dtype", "examples run", "max rel. error", "beyond the graph's own rounding",
                    "tolerance", "result"),
                   [(code(e.candidate), e.dtype, e.examples, f"{e.max_plain_rel_err:.2g}", f"{e.max_rel_err:.2g}",
                     f"{e.tolerance:g}",
                     "pass" if e.ok else "FAIL" + (f": {text(e.error)}" if e.error else "")) for e in r.evidence]),
            "", "Sympy checks:", ""]
    out += [_table(("rule", "result", "what was checked"),
                   [(code(n), {True: "holds", False: "FAILS", None: "none"}[ok], text(d)) for n, ok, d in r.sympy])
            if r.sympy else "No rule, no check.", ""]
    out += ["## Emitted TileLang", "", f"Candidate {code(r.chosen)}, tiles "
            + text(", ".join(f"{k}={v}" for k, v in r.tiles.items())) + ".", ""]
    out += ([*fence(r.kernel, "python"), ""] if r.kernel else [f"Not emitted: {text(r.kernel_error)}", ""])
    out += ["## Benchmarks", ""]
    b = r.bench
    if not b:
        out += ["No benchmark for this graph in benchmarks/results" + (f": {text(b.note)}" if b.note else "") + ".", ""]
    if b.gpu_ms:
        base = b.gpu_ms.get("leantile")
        out += [f"{text(b.device)}, {code(b.source)}, candidate {code(b.candidate)}, untuned tiles.", "",
                _table(("implementation", "GPU ms", "leantile speed-up (its ms / leantile ms)"),
                       [(code(k), f"{v:.4f}", f"{v / base:.2f}x" if base else "")
                        for k, v in sorted(b.gpu_ms.items(), key=lambda kv: kv[1])]), ""]
    if b.sweep:
        tiles = ", ".join(f"{k}={v}" for k, v in (b.sweep.get("tiles") or {}).items())
        out += [f"Tuned ({code(b.sweep_source)}): {code(b.sweep.get('candidate'))} with {text(tiles)}: "
                f"{float(b.sweep['gpu_ms']):.4f} ms.", ""]
    if chart_file:
        out += [f"![GPU time per implementation]({quote(chart_file)})", ""]
    return "\n".join(out)


def index(entries) -> str:
    rows = [(f"[{text(n)}]({quote(page_stem(n))}.md)", code(c), k, text(p), "pass" if ok else "FAIL") for n, c, k, p, ok in entries]
    return "\n".join(["# leantile reports", "",
                      _table(("architecture", "derivation shown", "steps", "proof status", "numeric check"), rows), ""])
