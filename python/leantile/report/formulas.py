"""Each derivation step's expression before and after, built with sympy from the rule and
the nodes it matched, printed as LaTeX.

Graph values become index expressions: an input X[m, d] is X_{m,d}; a reduction or a
contraction over axis d is a Sum over a fresh index d' running to the axis size D.
Nodes outside a step's match stay named leaves (v^{(12)}, the value of node 12), so each formula shows what the
rule touches and no more.
"""
from __future__ import annotations

import sympy as sp

from .. import ir

IndexedBase, Sum = sp.IndexedBase, sp.Sum


class RowMax(sp.Function):
    """max over one index, printed as \\max_{i} (...)."""

    def _latex(self, printer):
        body, idx = self.args
        return r"\max_{%s} \left(%s\right)" % (printer._print(idx), printer._print(body))


class Named(sp.Function):
    """An elementwise function without a sympy closed form we want to print (silu, gelu)."""

    def _latex(self, printer):
        return r"\operatorname{%s}\left(%s\right)" % (type(self).__name__, printer._print(self.args[0]))


silu = type("silu", (Named,), {})
gelu = type("gelu", (Named,), {})


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


UNARY = {"exp": sp.exp, "exp2": lambda x: 2**x, "neg": lambda x: -x, "square": lambda x: x**2,
         "sqrt": sp.sqrt, "rsqrt": lambda x: 1 / sp.sqrt(x), "recip": lambda x: 1 / x,
         "silu": silu, "gelu_tanh": gelu}
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "max": sp.Max}


def tex(e) -> str:
    return e if isinstance(e, str) else sp.latex(e)


def _out(g, i):
    return tex(Exprs(g).leaf(i))


def step_formulas(g: ir.Graph, step: ir.Step) -> tuple[str, str]:
    """(before, after) LaTeX for one derivation step."""
    fn = FORMULAS.get(step.rule)
    if fn is None:
        return "", ""
    try:
        return fn(g, tuple(step.at), dict(step.params))
    except Exception:  # a site this printer does not know the shape of: the page says "no formula"
        return "", ""


def _softmax_shift(g, at, params):
    mx, sub = at
    qk, ax = g.node(mx).x, g.node(mx).axis
    t, m = sp.Symbol(ax), sp.Symbol("m")
    e = Exprs(g, inline={mx, sub}, names={qk: "s"})
    shifted = e(sub)
    k = e.fresh(ax)
    s = Exprs(g, names={qk: "s"}).leaf(qk)
    before = sp.exp(shifted) / Sum(sp.exp(shifted.subs(t, k)), (k, 1, size(ax)))
    after = sp.exp(s - m) / Sum(sp.exp(s.subs(t, k) - m), (k, 1, size(ax)))
    return tex(before), tex(after) + r"\quad\text{for any shift } m"


def _online_softmax(g, at, params):
    mx, sub, exp, sm, div, pv = at[-6:]  # after the scores' matmul and any elementwise nodes on the scores
    qk = g.node(mx).x  # the scores s
    axis = params.get("axis") or g.node(sm).axis
    before = Exprs(g, inline={mx, sub, exp, sm, div, pv}, names={qk: "s"})(pv)
    t, j, B = sp.Symbol(axis), sp.Symbol("j"), sp.Symbol("B")
    s = Exprs(g, names={qk: "s"}).leaf(qk)
    v = Exprs(g).leaf(g.node(pv).b)
    m, l, o = (IndexedBase(x) for x in ("m", "l", "o"))
    block = (t, B * (j - 1) + 1, B * j)  # tile j = 1..J
    lines = [
        r"%s = \max\left(%s,\ \max_{%s=%s}^{%s} %s\right)" % (
            tex(m[j]), tex(m[j - 1]), tex(t), tex(block[1]), tex(block[2]), tex(s)),
        sp.Eq(l[j], sp.exp(m[j - 1] - m[j]) * l[j - 1] + Sum(sp.exp(s - m[j]), block)),
        sp.Eq(o[j], sp.exp(m[j - 1] - m[j]) * o[j - 1] + Sum(sp.exp(s - m[j]) * v, block)),
    ]
    after = r" \\ ".join(tex(x) for x in lines)
    after += r" \\ %s = o_{J} / l_{J},\quad m_{0} = -\infty,\ l_{0} = o_{0} = 0,\ J = \lceil %s / B \rceil" % (
        _out(g, pv), tex(size(axis)))
    return f"{_out(g, pv)} = {tex(before)}", r"\begin{gathered}" + after + r"\end{gathered}"


def _exp_to_exp2(g, at, params):
    (e,) = at
    x = Exprs(g).leaf(g.node(e).x)
    log2e = sp.Symbol(r"\log_{2} e")
    # function notation: x is too large to read as a superscript
    return (r"\exp\left(%s\right)" % tex(x),
            r"\operatorname{exp2}\left(%s\right)" % tex(sp.Mul(x, log2e, evaluate=False)))


def _peel(g, at):
    node, *mms = at
    peel = g.node(node)
    mm = g.node(mms[0])
    k = sp.Symbol(mm.axis_a + "'")
    leaves = Exprs(g)
    x, vec = leaves(peel.a).subs(sp.Symbol(mm.axis_a), k), leaves(peel.b)
    ws = [leaves(g.node(i).b).subs(sp.Symbol(g.node(i).axis_b), k) for i in mms]
    return mms, k, size(mm.axis_a), x, vec, ws


def _scale_pullout(g, at, params):
    mms, k, K, x, s, ws = _peel(g, at)
    before = [Sum(s * x * w, (k, 1, K)) for w in ws]
    after = [sp.Mul(s, Sum(x * w, (k, 1, K)), evaluate=False) for w in ws]
    return _pairs(g, mms, before), _pairs(g, mms, after)


def _mean_pullout(g, at, params):
    mms, k, K, x, mu, ws = _peel(g, at)
    before = [Sum((x - mu) * w, (k, 1, K)) for w in ws]
    after = [Sum(x * w, (k, 1, K)) - mu * Sum(w, (k, 1, K)) for w in ws]
    return _pairs(g, mms, before), _pairs(g, mms, after)


def _pairs(g, mms, exprs):
    return r" \qquad ".join(f"{_out(g, i)} = {tex(e)}" for i, e in zip(mms, exprs))


def _variance_expand(g, at, params):
    (r,) = at
    red = g.node(r)
    sub = g.node(g.node(red.x).x)
    k = sp.Symbol(red.axis + "'")
    leaves = Exprs(g)
    x, mu = leaves(sub.a).subs(sp.Symbol(red.axis), k), leaves(sub.b)
    K = size(red.axis)
    p = sp.Symbol("p")  # the pivot: the row's first element
    before = Sum((x - mu) ** 2, (k, 1, K))
    after = Sum((x - p) ** 2, (k, 1, K)) - 2 * (mu - p) * Sum(x - p, (k, 1, K)) + K * (mu - p) ** 2
    pivot = tex(x.subs(k, 1))
    return (f"{_out(g, r)} = {tex(before)}",
            f"{_out(g, r)} = {tex(after)}" + r"\quad\text{(} p = %s \text{: the row's first element)}" % pivot)


def _stream_stats(g, at, params):
    befores, afters = [], []
    j, B = sp.Symbol("j"), sp.Symbol("B")
    for r in at:
        red = g.node(r)
        sq = g.node(red.x)
        if isinstance(sq, ir.Unary) and sq.op == "square" and g.node(sq.x).op == "sub":
            # an expanded variance (variance_expand): the streamed sum is sum (x - p)^2
            k = sp.Symbol(red.axis + "'")
            body = (Exprs(g).leaf(g.node(sq.x).a).subs(sp.Symbol(red.axis), k) - sp.Symbol("p")) ** 2
            hi, label = size(red.axis), tex(Sum(body, (k, 1, size(red.axis))))
        else:
            full = Exprs(g, inline={r} | _chain(g, red.x))(r)
            body, (k, _, hi) = full.function, full.limits[0]
            label = _out(g, r)
        # nested by hand: sympy would print Sum(Sum(...)) as one sum over a cramped \substack
        tiled = r"\sum_{j=0}^{%s} %s" % (tex(sp.ceiling(hi / B) - 1), tex(Sum(body, (k, j * B + 1, j * B + B))))
        befores.append(f"{label} = {tex(Sum(body, (k, 1, hi)))}" if label != tex(Sum(body, (k, 1, hi)))
                       else label)
        afters.append(f"{label} = {tex(tiled)}")
    how = "in the GEMM's loop" if params.get("mode") == "fused" else "in a row-statistics kernel"
    return r" \qquad ".join(befores), r" \qquad ".join(afters) + r"\quad\text{(tiles of } B \text{, %s)}" % how


def _chain(g, i) -> set[int]:
    """The elementwise nodes under a reduction, down to (not including) inputs and matmuls."""
    out, stack = set(), [i]
    while stack:
        n = g.node(stack.pop())
        if isinstance(n, (ir.Unary, ir.Binary, ir.Cast)) and n.id not in out:
            out.add(n.id)
            stack.extend(a for a in n.args() if isinstance(g.node(a), (ir.Unary, ir.Binary, ir.Cast)))
    return out


def _dual_gemm(g, at, params):
    e = Exprs(g, inline=set(at))
    before = r" \qquad ".join(f"{_out(g, i)} = {tex(e(i))}" for i in at)
    a, b = (g.node(i) for i in at)
    k = sp.Symbol(a.axis_a + "'")
    leaves = Exprs(g)
    x = leaves(a.a).subs(sp.Symbol(a.axis_a), k)
    w1, w2 = (leaves(n.b).subs(sp.Symbol(n.axis_b), k) for n in (a, b))
    after = r"\left(%s, %s\right) = \sum_{%s=1}^{%s} %s \left(%s, %s\right)" % (
        _out(g, a.id), _out(g, b.id), tex(k), tex(size(a.axis_a)), tex(x), tex(w1), tex(w2))
    return before, after + r"\quad\text{(one loop, one load of } %s\text{)}" % tex(x)


def _fuse_elementwise(g, at, params):
    last = max(at)
    before = r" \qquad ".join(f"{_out(g, i)} = {tex(Exprs(g, inline={i})(i))}" for i in sorted(at))
    after = f"{_out(g, last)} = {tex(Exprs(g, inline=set(at))(last))}"
    return before, after + r"\quad\text{(one epilogue, no global intermediate)}"


FORMULAS = {
    "softmax_shift": _softmax_shift, "online_softmax": _online_softmax, "exp_to_exp2": _exp_to_exp2,
    "scale_pullout": _scale_pullout, "mean_pullout": _mean_pullout,
    "variance_expand": _variance_expand, "stream_stats": _stream_stats,
    "dual_gemm": _dual_gemm, "fuse_elementwise": _fuse_elementwise,
}
