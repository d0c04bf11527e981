"""THE op registry: one row per elementwise function, with every interpretation of it next to
it (as JAX registers a primitive's rules beside it). Every table about elementwise ops is
derived from ROWS: the IR's op names (ir.UNARY_OPS, ...), the builder methods (dag.DagM), the
torch reference, the CPU interpreter, the constant folder, the sympy forms and the TileLang
spellings. A new op is one row here plus its Lean case (lean/LeanTile/IR.lean, Semantics.lean,
DagM.lean); tests/cpu/test_ops.py checks that every derived table covers every row and that the
Lean files name every op.

Columns:
  name      the JSON spelling ("gelu_tanh")
  arity     1 (unary), 2 (binary, broadcasting by axis name), 3 (select)
  torch     the reference on torch tensors (already promoted to one dtype)
  scalar    the same on Python floats (folding constant subexpressions)
  sympy     the same on sympy expressions (formulas and the rules' exact checks)
  tilelang  the TileLang spelling, a format string over the argument expressions
  lean      the Lean constructor (UnOp.x / BinOp.x / Op.x), checked against lean/LeanTile/IR.lean
  ir        False for plan-only functions (copy, fma) that no graph node has
  vjp       the vector-Jacobian product, written with a graph builder b (leantile.dag.DagM):
            vjp(b, args, y, dy) -> one cotangent id (or None: no gradient) per argument, where
            args are the argument ids, y the result's and dy the result's cotangent (autodiff.vjp);
            None for ops no graph differentiates through (plan-only)

Comparisons give 1 where they hold and 0 elsewhere, in the dtype of their operands; `select
(cond, a, b)` is a where cond != 0, else b (torch.where).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable



def _fused_multiply_add(a, b, c):
    """a * b + c rounded once, in the dtype of the tensors (float64 carries the exact product of
    two float32 or narrower values; float64 operands are rounded twice: no wider type)."""
    dt = next(x.dtype for x in (a, b, c) if hasattr(x, "dtype"))
    wide = [x.double() if hasattr(x, "dtype") else x for x in (a, b, c)]
    return (wide[0] * wide[1] + wide[2]).to(dt)


def _t(path: str) -> Callable:
    """torch.<path>, resolved on the first call (importing leantile must not import torch) and
    kept: later calls are a plain call, which torch.compile traces without a graph break."""
    fn = None

    def call(*args):
        nonlocal fn
        if fn is None:
            import torch
            fn = torch
            for part in path.split("."):
                fn = getattr(fn, part)
        return fn(*args)
    call.__name__ = f"torch.{path}"
    return call


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    torch: Callable
    scalar: Callable
    sympy: Callable
    tilelang: str
    lean: str | None
    ir: bool = True
    doc: str = ""
    vjp: Callable | None = None


def _sp():
    import sympy
    return sympy


def _named(name: str):
    """A sympy function printed by name (silu, gelu): no closed form worth printing."""
    def make(x):
        from . import sympy_names  # sympy on first use: importing ops stays quick
        return getattr(sympy_names, name)(x)
    return make


def _gelu_tanh_t(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())


def _gelu_tanh_s(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _cmp(fn):
    """A comparison on tensors: 1 where it holds, else 0, in the operands' dtype."""
    return lambda a, b: fn(a, b).to(a.dtype)


def _piecewise(rel):
    return lambda a, b: _sp().Piecewise((1, rel(a, b)), (0, True))


def _cmp_tl(op: str) -> str:
    # T.if_then_else needs both branches in the loop's dtype: the writer casts the result
    return "T.if_then_else({0} %s {1}, 1.0, 0.0)" % op


# -- vector-Jacobian products (the vjp column) ---------------------------------------------------
# Each takes a graph builder b, the argument ids, the result's id y and its cotangent's id dy and
# returns one cotangent id per argument (None: no gradient flows there). Ties follow torch's
# autograd: maximum/minimum split the gradient evenly between equal operands (derivatives.yaml),
# abs has gradient 0 at 0 (sgn). The identities are lean/LeanTile/Vjp.lean's.
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh_vjp(b, args, y, dy):
    x, = args
    c = _SQRT_2_OVER_PI
    x2 = b.mul(x, x)
    t = b.tanh(b.mul(b.mul(x, b.add(b.mul(x2, b.const("0.044715")), b.const("1.0"))), b.const(repr(c))))
    one = b.const("1.0")
    left = b.mul(b.const("0.5"), b.add(one, t))
    du = b.mul(b.const(repr(c)), b.add(one, b.mul(x2, b.const(repr(3 * 0.044715)))))
    right = b.mul(b.mul(b.mul(b.const("0.5"), x), b.sub(one, b.mul(t, t))), du)
    return (b.mul(dy, b.add(left, right)),)


def _silu_vjp(b, args, y, dy):
    x, = args
    s = b.sigmoid(x)
    one = b.const("1.0")
    return (b.mul(dy, b.mul(s, b.add(one, b.mul(x, b.sub(one, s))))),)


def _tie_weight(b, wins, a, c):
    """1 where `wins(a, c)` holds, 1/2 where a == c, else 0: torch's maximum/minimum gradient."""
    return b.add(wins(a, c), b.mul(b.eq(a, c), b.const("0.5")))


def _extremum_vjp(wins, loses):
    def vjp(b, args, y, dy):
        a, c = args
        return (b.mul(dy, _tie_weight(b, getattr(b, wins), a, c)),
                b.mul(dy, _tie_weight(b, getattr(b, loses), a, c)))
    return vjp


def _no_gradient(b, args, y, dy):
    return tuple(None for _ in args)


_VJPS: dict[str, Callable] = {
    "exp": lambda b, a, y, dy: (b.mul(dy, y),),
    "exp2": lambda b, a, y, dy: (b.mul(dy, b.mul(y, b.const(repr(math.log(2.0))))),),
    "neg": lambda b, a, y, dy: (b.neg(dy),),
    "square": lambda b, a, y, dy: (b.mul(dy, b.mul(a[0], b.const("2.0"))),),
    "sqrt": lambda b, a, y, dy: (b.div(dy, b.mul(y, b.const("2.0"))),),
    # d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
    "rsqrt": lambda b, a, y, dy: (b.mul(dy, b.mul(b.mul(y, b.mul(y, y)), b.const("-0.5"))),),
    "recip": lambda b, a, y, dy: (b.neg(b.mul(dy, b.mul(y, y))),),
    "silu": _silu_vjp,
    "gelu_tanh": _gelu_tanh_vjp,
    "log": lambda b, a, y, dy: (b.div(dy, a[0]),),
    "tanh": lambda b, a, y, dy: (b.mul(dy, b.sub(b.const("1.0"), b.mul(y, y))),),
    "erf": lambda b, a, y, dy: (b.mul(dy, b.mul(b.exp(b.neg(b.mul(a[0], a[0]))),
                                                b.const(repr(2.0 / math.sqrt(math.pi))))),),
    "sigmoid": lambda b, a, y, dy: (b.mul(dy, b.mul(y, b.sub(b.const("1.0"), y))),),
    "abs": lambda b, a, y, dy: (b.mul(dy, b.sub(b.gt(a[0], b.const("0.0")), b.lt(a[0], b.const("0.0")))),),
    "add": lambda b, a, y, dy: (dy, dy),
    "sub": lambda b, a, y, dy: (dy, b.neg(dy)),
    "mul": lambda b, a, y, dy: (b.mul(dy, a[1]), b.mul(dy, a[0])),
    # d/db a/b = -a/b^2, written as torch writes it (-grad * a / (b * b))
    "div": lambda b, a, y, dy: (b.div(dy, a[1]), b.neg(b.div(b.mul(dy, a[0]), b.mul(a[1], a[1])))),
    "max": _extremum_vjp("gt", "lt"),
    "min": _extremum_vjp("lt", "gt"),
    "lt": _no_gradient, "le": _no_gradient, "eq": _no_gradient, "ge": _no_gradient, "gt": _no_gradient,
    # the condition is a 0/1 mask: no gradient; each branch gets dy where it was chosen
    "select": lambda b, a, y, dy: (None, b.select(a[0], dy, b.const("0.0")), b.select(a[0], b.const("0.0"), dy)),
}


ROWS: tuple[Op, ...] = (
    # unary
    Op("exp", 1, _t("exp"), math.exp, lambda x: _sp().exp(x), "T.exp({0})", "UnOp.exp"),
    Op("exp2", 1, _t("exp2"), lambda x: 2.0 ** x, lambda x: 2 ** x, "T.exp2({0})", "UnOp.exp2"),
    Op("neg", 1, _t("neg"), lambda x: -x, lambda x: -x, "-({0})", "UnOp.neg"),
    Op("square", 1, _t("square"), lambda x: x * x, lambda x: x ** 2, "{0} * {0}", "UnOp.square"),
    Op("sqrt", 1, _t("sqrt"), math.sqrt, lambda x: _sp().sqrt(x), "T.sqrt({0})", "UnOp.sqrt"),
    Op("rsqrt", 1, _t("rsqrt"), lambda x: 1 / math.sqrt(x), lambda x: 1 / _sp().sqrt(x), "T.rsqrt({0})",
       "UnOp.rsqrt"),
    Op("recip", 1, _t("reciprocal"), lambda x: 1 / x, lambda x: 1 / x, "1.0 / ({0})", "UnOp.recip"),
    # The logistic activations are spelled x / (1 + 2^(-c x)) with the hardware's exp2 and
    # reciprocal (T.fast_rcp: rcp.approx.ftz.f32, 1 ulp; a kernel's maps compute in the float32
    # accumulator dtype): an IEEE division or tanhf cost a short-k GEMM's epilogue as much as a
    # fifth of its k-loop. H200, X W (1024 x 1024 x 4096) + b 0.0153 ms, gelu_tanh of it with
    # tanhf 0.0185, silu of X W with a division 0.0222 (benchmarks/epilogue/results/epilogue-h200-2026-11-26.json).
    # gelu_tanh: 0.5 (1 + tanh z) = 1 / (1 + e^(-2z)), so c = 2 sqrt(2 / pi) log2(e).
    Op("silu", 1, _t("nn.functional.silu"), lambda x: x / (1 + math.exp(-x)), _named("silu"),
       "{0} * T.fast_rcp(1.0 + T.exp2(-1.4426950408889634 * {0}))", "UnOp.silu"),
    Op("gelu_tanh", 1, _gelu_tanh_t, _gelu_tanh_s, _named("gelu"),
       "{0} * T.fast_rcp(1.0 + T.exp2(-2.302208198144325 * ({0} + 0.044715 * {0} * {0} * {0})))", "UnOp.geluTanh"),
    Op("log", 1, _t("log"), math.log, lambda x: _sp().log(x), "T.log({0})", "UnOp.log"),
    Op("tanh", 1, _t("tanh"), math.tanh, lambda x: _sp().tanh(x), "T.tanh({0})", "UnOp.tanh"),
    Op("erf", 1, _t("erf"), math.erf, lambda x: _sp().erf(x), "T.erf({0})", "UnOp.erf"),
    Op("sigmoid", 1, _t("sigmoid"), lambda x: 1 / (1 + math.exp(-x)), lambda x: 1 / (1 + _sp().exp(-x)),
       "T.fast_rcp(1.0 + T.exp2(-1.4426950408889634 * {0}))", "UnOp.sigmoid"),
    Op("abs", 1, _t("abs"), abs, lambda x: _sp().Abs(x), "T.abs({0})", "UnOp.abs"),
    # binary (broadcast by axis name)
    Op("add", 2, _t("add"), lambda a, b: a + b, lambda a, b: a + b, "{0} + {1}", "BinOp.add"),
    Op("sub", 2, _t("sub"), lambda a, b: a - b, lambda a, b: a - b, "{0} - {1}", "BinOp.sub"),
    Op("mul", 2, _t("mul"), lambda a, b: a * b, lambda a, b: a * b, "{0} * {1}", "BinOp.mul"),
    Op("div", 2, _t("div"), lambda a, b: a / b, lambda a, b: a / b, "{0} / {1}", "BinOp.div"),
    Op("max", 2, _t("maximum"), max, lambda a, b: _sp().Max(a, b), "T.max({0}, {1})", "BinOp.max"),
    Op("min", 2, _t("minimum"), min, lambda a, b: _sp().Min(a, b), "T.min({0}, {1})", "BinOp.min"),
    Op("lt", 2, _cmp(_t("lt")), lambda a, b: float(a < b), _piecewise(lambda a, b: a < b), _cmp_tl("<"),
       "BinOp.lt"),
    Op("le", 2, _cmp(_t("le")), lambda a, b: float(a <= b), _piecewise(lambda a, b: a <= b), _cmp_tl("<="),
       "BinOp.le"),
    Op("eq", 2, _cmp(_t("eq")), lambda a, b: float(a == b), _piecewise(lambda a, b: _sp().Eq(a, b)),
       _cmp_tl("=="), "BinOp.eq"),
    Op("ge", 2, _cmp(_t("ge")), lambda a, b: float(a >= b), _piecewise(lambda a, b: a >= b), _cmp_tl(">="),
       "BinOp.ge"),
    Op("gt", 2, _cmp(_t("gt")), lambda a, b: float(a > b), _piecewise(lambda a, b: a > b), _cmp_tl(">"),
       "BinOp.gt"),
    # ternary
    Op("select", 3, lambda c, a, b: _t("where")(c != 0, a, b), lambda c, a, b: a if c != 0 else b,
       lambda c, a, b: _sp().Piecewise((a, _sp().Ne(c, 0)), (b, True)),
       "T.if_then_else({0} != 0, {1}, {2})", "Op.select"),
    # plan-only: what derive writes into kernels besides the IR's ops
    Op("copy", 1, lambda x: x, lambda x: x, lambda x: x, "{0}", None, ir=False),
    # a product rounded to its dtype whatever the compiler's flags (__fmul_rn / __dmul_rn is never
    # contracted into a following add, as nvcc may contract a plain one): a product that must be
    # ONE rounded value in two places (flash's M = round(m c'), the normaliser's c x at the max)
    Op("mul_rn", 2, _t("mul"), lambda a, b: a * b, lambda a, b: a * b, "T.ieee_mul({0}, {1})", None, ir=False),
    # a * b + c rounded once, spelled as the IEEE intrinsic (__fmaf_rn / __fma_rn: fused whatever
    # nvcc's flags, emit.common.nvcc_flags); the torch column rounds once too (the product of two
    # float32 values is exact in float64): the interpreter runs what the kernel runs
    Op("fma", 3, _fused_multiply_add, lambda a, b, c: a * b + c, lambda a, b, c: a * b + c,
       "T.ieee_fmaf({0}, {1}, {2})", None, ir=False),
)

ROWS = tuple(replace(o, vjp=_VJPS.get(o.name)) for o in ROWS)  # the vjp column, from the table above
BY_NAME: dict[str, Op] = {o.name: o for o in ROWS}
UNARY = tuple(o.name for o in ROWS if o.ir and o.arity == 1)
BINARY = tuple(o.name for o in ROWS if o.ir and o.arity == 2)
COMPARISONS = ("lt", "le", "eq", "ge", "gt")
TORCH = {o.name: o.torch for o in ROWS}
SCALAR = {o.name: o.scalar for o in ROWS if o.ir}
TILELANG = {o.name: o.tilelang for o in ROWS}
# which functions' TileLang spelling repeats its argument (a compound argument is parenthesised)
REPEATS_ARG = frozenset(o.name for o in ROWS if o.tilelang.count("{0}") > 1)


def sympy_form(name: str):
    return BY_NAME[name].sympy
