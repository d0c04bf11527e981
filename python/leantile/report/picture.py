"""The graph as an SVG picture: graphviz `dot` when it is installed, otherwise a simple
layered layout drawn here (layer = longest path from an input; order within a layer by id)."""
from __future__ import annotations

import shutil
import subprocess
from html import escape

from .. import ir
from ..show import describe

COLORS = {"input": "#dbeafe", "matmul": "#fde68a", "reduce": "#fbcfe8", "const": "#f3f4f6"}
W, H, GAP_X, GAP_Y = 150, 40, 24, 46


def _kind(n) -> str:
    if isinstance(n, ir.Input):
        return "input"
    if isinstance(n, (ir.Const, ir.SizeConst)):
        return "const"
    return n.op if n.op in ("matmul", "reduce") else "other"


def _label(n) -> tuple[str, str]:
    return f"%{n.id} {describe(n).replace('%', '')}", "[" + ", ".join(n.axes) + "]"


def dq(s: str) -> str:
    """s as a dot quoted string, taken literally: no quote ends it, no backslash escape
    (\\N, \\G, \\l) or newline is interpreted (names come from the graph file)."""
    s = "".join(c if c.isprintable() else " " for c in str(s))
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_source(g: ir.Graph, fused: set[int] = frozenset()) -> str:
    lines = [f"digraph {dq(g.name)} {{", "  rankdir=TB; node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=10];"]
    for n in g.nodes:
        a, b = _label(n)
        pen = ", penwidth=2, color=\"#b45309\"" if n.id in fused else ""
        label = dq(a)[:-1] + "\\n" + dq(b)[1:]
        lines.append(f'  n{n.id} [label={label}, fillcolor="{COLORS.get(_kind(n), "#ffffff")}"{pen}];')
        lines += [f"  n{x} -> n{n.id};" for x in n.args()]
    lines += [f"  out_{j} [label={dq(k)}, shape=plaintext]; n{i} -> out_{j};"
              for j, (k, i) in enumerate(sorted(g.outputs.items()))]
    return "\n".join(lines + ["}"]) + "\n"


def graph_svg(g: ir.Graph, fused: set[int] = frozenset()) -> tuple[str, str]:
    """(svg text, how it was drawn)."""
    dot = shutil.which("dot")
    if dot:
        try:
            p = subprocess.run([dot, "-Tsvg"], input=dot_source(g, fused), capture_output=True, text=True,
                               timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            p = None
        if p is not None and p.returncode == 0 and "<svg" in p.stdout:
            return p.stdout[p.stdout.index("<svg"):], "graphviz dot"
    return layered_svg(g, fused), "leantile's layered layout (graphviz not installed)"


def layered_svg(g: ir.Graph, fused: set[int] = frozenset()) -> str:
    layer: dict[int, int] = {}
    for n in g.nodes:  # ids are topological
        layer[n.id] = 1 + max((layer[a] for a in n.args()), default=-1)
    users = g.users()
    for n in g.nodes:  # inputs and constants sit just above their first user
        if not n.args() and users[n.id]:
            layer[n.id] = min(layer[u] for u in users[n.id]) - 1
    rows: dict[int, list[int]] = {}
    for i in sorted(layer):
        rows.setdefault(layer[i], []).append(i)
    width = max(len(r) for r in rows.values()) * (W + GAP_X) + GAP_X
    pos = {}
    for y, ids in rows.items():
        x0 = (width - len(ids) * (W + GAP_X) + GAP_X) / 2
        for k, i in enumerate(ids):
            pos[i] = (x0 + k * (W + GAP_X), GAP_Y / 2 + y * (H + GAP_Y))
    height = (max(rows) + 1) * (H + GAP_Y) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif" '
           f'font-size="11" role="img" aria-label="graph {escape(g.name)}">',
           '<defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#6b7280"/></marker></defs>']
    for n in g.nodes:
        x, y = pos[n.id]
        for a in n.args():
            ax, ay = pos[a]
            out.append(f'<path d="M{ax + W / 2:.1f},{ay + H:.1f} C{ax + W / 2:.1f},{ay + H + GAP_Y / 2:.1f} '
                       f'{x + W / 2:.1f},{y - GAP_Y / 2:.1f} {x + W / 2:.1f},{y:.1f}" fill="none" '
                       f'stroke="#9ca3af" marker-end="url(#arr)"/>')
    outs = {i: k for k, i in sorted(g.outputs.items())}
    for n in g.nodes:
        x, y = pos[n.id]
        a, b = _label(n)
        stroke = ' stroke="#b45309" stroke-width="2"' if n.id in fused else ' stroke="#6b7280"'
        out.append(f'<g><title>{escape(a)} {escape(b)}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{W}" height="{H}" rx="6" '
                   f'fill="{COLORS.get(_kind(n), "#ffffff")}"{stroke}/>'
                   f'<text x="{x + W / 2:.1f}" y="{y + 16:.1f}" text-anchor="middle">{escape(_fit(a))}</text>'
                   f'<text x="{x + W / 2:.1f}" y="{y + 31:.1f}" text-anchor="middle" fill="#4b5563">'
                   f'{escape(_fit(b))}{" &#8594; " + escape(outs[n.id]) if n.id in outs else ""}</text></g>')
    return "\n".join(out + ["</svg>"]) + "\n"


def _fit(s: str, n: int = 24) -> str:
    return s if len(s) <= n else s[:n - 1] + "\u2026"
