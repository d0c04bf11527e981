"""The graph as readable text (`leantile show`)."""
from __future__ import annotations

from . import ir


def describe(n) -> str:
    if isinstance(n, ir.Input):
        return f"input {n.name!r} {n.dtype}"
    if isinstance(n, ir.Const):
        return f"const {n.value}"
    if isinstance(n, ir.SizeConst):
        return f"sizeConst {n.axis}"
    if isinstance(n, ir.Reduce):
        return f"red .{n.kind} %{n.x} {n.axis}"
    if isinstance(n, ir.Matmul):
        return f"matmul %{n.a} %{n.b} {n.axis_a} {n.axis_b}"
    if isinstance(n, ir.Cast):
        return f"cast %{n.x} {n.dtype}"
    return f"{n.op} " + " ".join(f"%{a}" for a in n.args())


def graph_text(g: ir.Graph) -> str:
    lines = [f"graph {g.name}  axes: " + ", ".join(f"{a}={s}" for a, s in g.axes.items())]
    for n in g.nodes:
        lines.append(f"  %{n.id:<3} = {describe(n):<36} : [{', '.join(n.axes)}]")
    for name, i in g.outputs.items():
        lines.append(f"  output {name} = %{i}")
    if g.derivation:
        lines.append("derivation:")
        for k, s in enumerate(g.derivation):
            lines.append(f"  {k + 1}. {s.rule:<18} {s.theorem:<40} at {list(s.at)} {s.params or ''}")
    return "\n".join(lines)
