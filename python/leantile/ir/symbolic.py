"""sympy for the rules: index expressions of graph values (each rule's `formula` prints its
step's before and after with them) and the small symbolic instances each rule's `check`
proves its identity on (exactly, no toolchain needed: they complement the Lean proofs).

Graph values become index expressions: an input X[m, d] is X_{m,d}; a reduction or a
contraction over axis d is a Sum over a fresh index d' running to the axis size D.
Nodes outside a step's match stay named leaves (v^{(12)}, the value of node 12), so each
formula shows what the rule touches and no more.
"""
from __future__ import annotations

import sympy as sp

from .. import ir
from . import ops
from .sympy_names import Named, gelu, silu  # noqa: F401  (symbolic.silu: the ops' sympy column)

IndexedBase, Sum = sp.IndexedBase, sp.Sum

# characters TeX (and KaTeX, which draws the report) reads as commands inside \text{...}
_TEXT_SPECIALS = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "^": r"\^{}", "&": r"\&",
                  "%": r"\%", "$": r"\$", "#": r"\#", "~": r"\textasciitilde{}"}


def tex_text(s: object) -> str:
    """s escaped for \text{...}: a parameter's or axis's name (on_chip, h_kv) would otherwise be
    a subscript, an error KaTeX draws as raw red LaTeX."""
    return "".join(_TEXT_SPECIALS.get(c, c) for c in str(s))


class RowMax(sp.Function):
    """max over one index, printed as \\max_{i} (...)."""

    def _latex(self, printer):
        body, idx = self.args
        return r"\max_{%s} \left(%s\right)" % (printer._print(idx), printer._print(body))




def size(axis: str) -> sp.Symbol:
    """The size of an axis: d -> D, t_kv -> T_kv."""
    return sp.Symbol(axis[0].upper() + axis[1:])


class Exprs:
    """Node id -> sympy expression, inlining only `inline` and naming everything else."""

    def __init__(self, g: ir.Graph, inline=(), names: dict | None = None):
        self.g, self.inline, self.names = g, set(inline), dict(names or {})
        self.primes: dict[str, int] = {}

    def fresh(self, axis: str) -> sp.Symbol:
        self.primes[axis] = self.primes.get(axis, 0) + 1
        return sp.Symbol(axis + "'" * self.primes[axis])

    def leaf(self, i: int):
        n = self.g.node(i)
        label = self.names.get(i) or (n.name if isinstance(n, ir.Input) else f"v^{{({i})}}")
        if not n.axes:
            return sp.Symbol(label)
        return IndexedBase(label)[tuple(sp.Symbol(a) for a in n.axes)]

    def __call__(self, i: int):
        n = self.g.node(i)
        if isinstance(n, ir.Const):
            return sp.Float(n.value, 3) if n.value not in ("-inf", "inf") else sp.oo
        if isinstance(n, ir.SizeConst):
            return size(n.axis)
        if isinstance(n, ir.Input) or i not in self.inline:
            return self.leaf(i)
        if isinstance(n, ir.Cast):
            return self(n.x)
        if isinstance(n, ir.Unary):
            return UNARY[n.op](self(n.x))
        if isinstance(n, ir.Binary):
            return BINARY[n.op](self(n.a), self(n.b))
        if isinstance(n, ir.Select):
            return ops.sympy_form("select")(self(n.cond), self(n.a), self(n.b))
        if isinstance(n, ir.Iota):
            return sp.Symbol(n.axis)
        if isinstance(n, ir.Reduce):
            k = self.fresh(n.axis)
            body = self(n.x).subs(sp.Symbol(n.axis), k)
            return Sum(body, (k, 1, size(n.axis))) if n.kind == "sum" else RowMax(body, k)
        if isinstance(n, ir.Matmul):
            k = self.fresh(n.axis_a)
            a = self(n.a).subs(sp.Symbol(n.axis_a), k)
            b = self(n.b).subs(sp.Symbol(n.axis_b), k)
            return Sum(a * b, (k, 1, size(n.axis_a)))
        raise ValueError(f"node {i}: no formula for op {n.op}")


UNARY = {n: ops.sympy_form(n) for n in ops.UNARY}
BINARY = {n: ops.sympy_form(n) for n in ops.BINARY}


def tex(e) -> str:
    return e if isinstance(e, str) else sp.latex(e)


def out(g, i):
    return tex(Exprs(g).leaf(i))


# -- the symbolic instances the checks unroll
s1, s2, s3, s4 = sp.symbols("s1:5", real=True)
v1, v2, v3, v4 = sp.symbols("v1:5", real=True)
X = sp.Matrix(2, 3, lambda i, k: sp.Symbol(f"x{i}{k}", real=True))
W = sp.Matrix(3, 2, lambda k, j: sp.Symbol(f"w{k}{j}", real=True))
R = sp.Matrix([sp.Symbol("r0", positive=True), sp.Symbol("r1", positive=True)])
MU = sp.Matrix([sp.Symbol("mu0", real=True), sp.Symbol("mu1", real=True)])


def zero(expr) -> bool:
    return sp.simplify(sp.expand(expr)) == 0

