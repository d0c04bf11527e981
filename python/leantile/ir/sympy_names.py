"""Elementwise functions sympy has no closed form for that we want to print by name (silu, gelu):
the sympy column of their ops (ops.Op.sympy) and the rules' formulas (symbolic). A module of
its own, importing no other leantile module, so that ops and symbolic both read it."""
from __future__ import annotations

import sympy as sp


class Named(sp.Function):
    """An elementwise function without a sympy closed form we want to print (silu, gelu)."""

    def _latex(self, printer):
        return r"\operatorname{%s}\left(%s\right)" % (type(self).__name__, printer._print(self.args[0]))


silu = type("silu", (Named,), {})
gelu = type("gelu", (Named,), {})
