"""A Report as one self-contained HTML page (KaTeX, vendored, is the only file it links)."""
from __future__ import annotations

import base64
from html import escape as esc
from urllib.parse import quote

from . import bench
from .collect import Report
from .md import page_stem

KATEX = "katex"  # folder next to the pages
HIGHLIGHT_MAX = 100_000  # characters: longer sources are shown plain (pygments takes ~30 s per MB)

# Every string taken from a graph, a source or a results file goes through esc() (html.escape,
# quotes included) or, in a link, quote(); only markup built here and pygments' output (which
# escapes its input) is inserted as is.

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#111827;
 max-width:1100px;margin:0 auto;padding:1.5rem 2rem 4rem}
h1{font-size:1.7rem;margin:.2rem 0}h2{border-bottom:1px solid #e5e7eb;padding-bottom:.2rem;margin-top:2.2rem}
h3{margin:1.4rem 0 .3rem}nav a{margin-right:1rem}code{font-size:.9em;background:#f3f4f6;padding:0 .25em;border-radius:3px}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #e5e7eb;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f9fafb}td.num{text-align:right;font-variant-numeric:tabular-nums}
.src{overflow:auto;max-height:34rem;border:1px solid #e5e7eb;border-radius:6px;font-size:13px}
.src pre{margin:0;padding:.6rem .8rem}.graph{overflow:auto;border:1px solid #e5e7eb;border-radius:6px;padding:.5rem}
.math{overflow-x:auto;overflow-y:hidden;padding:.3rem 0}.lbl{color:#6b7280;font-size:.85em;text-transform:uppercase;letter-spacing:.04em}
.step{border-left:3px solid #f59e0b;padding:.1rem 0 .4rem 1rem;margin:1.2rem 0}
.ok{color:#047857;font-weight:600}.bad{color:#b91c1c;font-weight:600}.unc{color:#92400e;font-weight:600}
.note{color:#4b5563}.chart{max-width:100%}
"""

RENDER_MATH = """
document.querySelectorAll('.math').forEach(function (el) {
  try { katex.render(el.textContent, el, {displayMode: true, throwOnError: false}); } catch (e) {}
});
"""


def _math(tex: str) -> str:
    return f'<div class="math">{esc(tex)}</div>' if tex else '<p class="note">(no formula for this rule)</p>'


def _code(text: str, lang: str) -> str:
    """Highlighted with pygments (inline styles); plain <pre> without it or for long texts."""
    if len(text) > HIGHLIGHT_MAX:
        return f'<div class="src"><pre>{esc(text)}</pre></div>'
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
    except ImportError:
        return f'<div class="src"><pre>{esc(text)}</pre></div>'
    try:
        lexer = get_lexer_by_name(lang)
    except Exception:
        lexer = get_lexer_by_name("text")
    return '<div class="src">' + highlight(text, lexer, HtmlFormatter(noclasses=True, nobackground=True)) + "</div>"


def _table(head, rows, num=()) -> str:
    h = "".join(f"<th>{esc(str(c))}</th>" for c in head)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if k in num else ""}>{c}</td>' for k, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _proof_cell(p) -> str:
    if p.status == "checked":
        ax = ", ".join(p.axioms) if p.axioms else "no axioms"
        return f'<span class="ok">checked</span> <span class="note">(axioms: {esc(ax)})</span>'
    if p.status == "failed":
        return f'<span class="bad">failed</span> <span class="note">{esc(p.message)}</span>'
    return f'<span class="unc">{esc(p.words)}</span>'


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title>"
            f'<link rel="stylesheet" href="{KATEX}/katex.min.css"><style>{STYLE}</style></head>\n'
            f"<body>\n{body}\n<script src=\"{KATEX}/katex.min.js\"></script><script>{RENDER_MATH}</script>"
            "\n</body></html>\n")


def render(r: Report, chart: bytes | None) -> str:
    g = r.graph
    parts = ['<nav><a href="index.html">&larr; all reports</a></nav>',
             f"<h1>{esc(r.name)}</h1>",
             f'<p class="note">source <code>{esc(r.source)}</code> &middot; axes '
             + ", ".join(f"{esc(a)}={esc(str(s))}" for a, s in g.axes.items())
             + f" &middot; derivation shown: <code>{esc(r.chosen)}</code> ({esc(r.chosen_why)})</p>"]

    parts.append('<section id="architecture"><h2>Architecture</h2>')
    if r.arch_note:
        parts.append(f'<p class="note">{esc(r.arch_note)}</p>')
    parts.append(f'<p class="note">File <code>{esc(r.arch_label)}</code></p>' + _code(r.arch_text, r.arch_lang))
    parts.append(f'<h3>Graph</h3><p class="note">Drawn by {esc(r.graph_how)}. Boxes: node id, op, result axes; '
                 'blue = input, yellow = matmul, pink = reduction; orange outline = a node the derivation '
                 f'rewrites.</p><div class="graph">{r.graph_svg}</div></section>')

    parts.append('<section id="derivation"><h2>Derivation</h2><p>Candidates: '
                 + ", ".join(f"<code>{esc(n)}</code>" + (" (shown)" if n == r.chosen else "") for n, _ in r.candidates)
                 + ". Node ids refer to the graph above; <i>v</i><sup>(i)</sup> is the value of node %i.</p>")
    if not r.steps:
        parts.append("<p>No rule applies: the graph runs as it is (one kernel per node).</p>")
    for s in r.steps:
        where = ", ".join(f"%{esc(str(i))}" for i in s.at)
        params = "".join(f" &middot; {esc(k)}={esc(str(v))}" for k, v in sorted(s.params.items()))
        parts.append(f'<div class="step"><h3>{s.index}. <code>{esc(s.rule)}</code> at {where}{params}</h3>'
                     f"<p>Lean theorem <code>{esc(s.theorem)}</code>: {esc(s.statement)}.<br>"
                     f'<span class="note">Rewrite: {esc(s.rewrite)}.</span></p>'
                     f'<p class="lbl">before</p>{_math(s.before)}<p class="lbl">after</p>{_math(s.after)}</div>')
    parts.append("</section>")

    parts.append('<section id="proofs"><h2>Proof status</h2><p class="note">From '
                 "<code>leantile check-lean</code> (leantile.lean.theorem_status).</p>")
    rows = [(f"<code>{esc(p.theorem)}</code>", esc(", ".join(p.rules)), _proof_cell(p)) for p in r.proofs]
    parts.append(_table(("theorem", "used by", "status"), rows) if rows else "<p>No theorem is cited.</p>")
    parts.append("</section>")

    parts.append('<section id="evidence"><h2>Numeric evidence</h2>'
                 "<p class=note>interp(plan) against the unfused reference (float64 oracle) on random small sizes, "
                 "tile sizes and inputs, fixed seeds; relative error in the Frobenius norm, then what is left of it "
                 "beyond the unfused graph's own rounding in that dtype (the judged figure, against the tolerance).</p>")
    rows = [(f"<code>{esc(e.candidate)}</code>", esc(e.dtype), e.examples, f"{e.max_plain_rel_err:.2g}",
             f"{e.max_rel_err:.2g}", f"{e.tolerance:g}",
             '<span class="ok">pass</span>' if e.ok else '<span class="bad">FAIL</span>'
             + (f' <span class="note">{esc(e.error)}</span>' if e.error else "")) for e in r.evidence]
    parts.append(_table(("candidate", "dtype", "examples run", "max rel. error", "beyond the graph's own rounding",
                         "tolerance", ""), rows, num=(2, 3, 4)))
    parts.append("<h3>Sympy checks</h3>")
    rows = [(f"<code>{esc(n)}</code>", '<span class="ok">holds</span>' if ok else
             ('<span class="bad">FAILS</span>' if ok is False else "none"), esc(d)) for n, ok, d in r.sympy]
    parts.append(_table(("rule", "result", "what was checked"), rows) if rows else "<p>No rule, no check.</p>")
    parts.append("</section>")

    tiles = ", ".join(f"{k}={v}" for k, v in r.tiles.items())
    parts.append(f'<section id="kernel"><h2>Emitted TileLang</h2><p class="note">Candidate <code>{esc(r.chosen)}</code>, '
                 f"tiles {esc(tiles)}.</p>")
    parts.append(_code(r.kernel, "python") if r.kernel else f'<p class="bad">not emitted: {esc(r.kernel_error)}</p>')
    parts.append("</section>")

    parts.append('<section id="benchmarks"><h2>Benchmarks</h2>' + _bench(r, chart) + "</section>")
    return page(f"leantile report: {r.name}", "\n".join(parts))


def _bench(r: Report, chart: bytes | None) -> str:
    b = r.bench
    if not b:
        return ("<p>No benchmark for this graph in benchmarks/results"
                + (f": {esc(b.note)}" if b.note else "") + ".</p>")
    out = []
    if b.gpu_ms:
        out.append(f"<p class=note>{esc(b.device)}, <code>{esc(b.source)}</code>, candidate "
                   f"<code>{esc(b.candidate)}</code>, untuned tiles"
                   + (f", rel. error vs fp32 reference {b.rel_err:.2g}" if isinstance(b.rel_err, float) else "")
                   + ".</p>")
        base = b.gpu_ms.get("leantile")
        rows = [(f"<code>{esc(k)}</code>", f"{v:.4f}", f"{v / base:.2f}x" if base else "")
                for k, v in sorted(b.gpu_ms.items(), key=lambda kv: kv[1])]
        out.append(_table(("implementation", "GPU ms", "leantile speed-up (its ms / leantile ms)"), rows,
                          num=(1, 2)))
        if b.candidate != r.chosen:
            out.append(f"<p class=note>These untuned rows time <code>{esc(b.candidate)}</code>; the page shows "
                       f"<code>{esc(r.chosen)}</code>, the tuned sweep's pick below.</p>")
    if b.sweep:
        tiles = ", ".join(f"{k}={v}" for k, v in (b.sweep.get("tiles") or {}).items())
        out.append(f"<p>Tuned (<code>{esc(b.sweep_source)}</code>): <code>{esc(str(b.sweep.get('candidate')))}</code> "
                   f"with {esc(tiles)}: {float(b.sweep['gpu_ms']):.4f} ms.</p>")
    if chart:
        out.append(f'<img class="chart" alt="GPU time per implementation" '
                   f'src="data:image/png;base64,{base64.b64encode(chart).decode()}">')
    return "\n".join(out)


def index(entries) -> str:
    """entries: [(name, chosen, steps, proof summary, evidence ok)]"""
    rows = [(f'<a href="{esc(quote(page_stem(n)))}.html">{esc(n)}</a>', f"<code>{esc(c)}</code>", esc(str(k)), esc(p),
             '<span class="ok">pass</span>' if ok else '<span class="bad">FAIL</span>') for n, c, k, p, ok in entries]
    body = ("<h1>leantile reports</h1><p class=note>One page per architecture: its Lean source and graph, "
            "each derivation step with its theorem, proof status, numeric evidence, the emitted TileLang "
            "and benchmark results.</p>"
            + _table(("architecture", "derivation shown", "steps", "proof status", "numeric check"), rows, num=(2,)))
    return page("leantile reports", body)


def chart_for(r: Report) -> bytes | None:
    return bench.chart_png(r.bench, f"{r.name}: GPU time ({r.bench.device})") if r.bench else None
