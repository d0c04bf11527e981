"""Each derivation step's expression before and after, as LaTeX: the step's rule prints it
(`Rule.formula`, with the index expressions of leantile.ir.symbolic)."""
from __future__ import annotations

from .. import ir
from ..derive.rules import BY_NAME


def step_formulas(g: ir.Graph, step: ir.Step) -> tuple[str, str]:
    """(before, after) LaTeX for one derivation step; ("", "") where none can be printed."""
    r = BY_NAME.get(step.rule)
    if r is None:
        return "", ""
    try:
        return r.formula(g, tuple(step.at), dict(step.params))
    except Exception:  # a site this printer does not know the shape of: the page says "no formula"
        return "", ""
