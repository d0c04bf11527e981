"""The op registry (leantile.ir.ops) is the one table of elementwise ops: every table derived from
it covers every op, each interpretation of an op agrees with the others on random values, and
the Lean IR and the independent test evaluator name every op."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, strategies as st

from leantile import dag, ir, reference
from leantile.ir import ops, symbolic
from leantile.emit.common import SPELLING
from leantile.interp import FUNCS

import evaluator

ROOT = Path(__file__).resolve().parents[2]
IR_OPS = [o for o in ops.ROWS if o.ir]
# a point inside every op's domain (log, sqrt, rsqrt need positives)
POSITIVE = {"log", "sqrt", "rsqrt", "recip"}


def test_every_derived_table_covers_every_op():
    names = {o.name for o in IR_OPS}
    assert set(ir.UNARY_OPS) | set(ir.BINARY_OPS) | {"select"} == names
    assert set(reference.UNARY) | set(reference.BINARY) | {"select"} == names
    assert set(symbolic.UNARY) | set(symbolic.BINARY) | {"select"} == names
    assert {o.name for o in ops.ROWS} <= set(SPELLING) and {o.name for o in ops.ROWS} <= set(FUNCS)
    assert set(evaluator._UNARY) | set(evaluator._BINARY) | {"select"} == names
    for name in (*ir.UNARY_OPS, *ir.BINARY_OPS, "select", "iota"):
        assert callable(getattr(dag.DagM, name)), name


def test_the_lean_ir_names_every_op():
    text = (ROOT / "lean" / "LeanTile" / "IR.lean").read_text()
    sem = (ROOT / "lean" / "LeanTile" / "Semantics.lean").read_text()
    for o in IR_OPS:
        kind, ctor = o.lean.split(".")
        if kind == "Op":
            assert re.search(rf"\|\s*{ctor}\b", text), f"IR.lean: Op.{ctor} missing"
        else:
            assert re.search(rf"\|\s*\.{ctor}\s*=>\s*\"{o.name}\"", text), f"IR.lean: {o.lean} -> {o.name!r} missing"
            assert re.search(rf"\|\s*\.{ctor}\b", sem), f"Semantics.lean: no meaning for {o.lean}"
    assert re.search(r"\|\s*iota\b", text)


@pytest.mark.parametrize("op", [o.name for o in ops.ROWS], ids=[o.name for o in ops.ROWS])
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=3, max_size=3))
def test_torch_scalar_and_sympy_forms_agree(op, xs):
    o = ops.BY_NAME[op]
    args = [abs(x) + 0.25 if op in POSITIVE or (op == "div" and i == 1) else x for i, x in enumerate(xs[:o.arity])]
    want = o.scalar(*args)
    got = o.torch(*[torch.tensor(a, dtype=torch.float64) for a in args]).item()
    assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12)
    import sympy as sp
    sym = o.sympy(*[sp.Float(a, 30) for a in args])
    if not sym.free_symbols and not isinstance(sym, sp.Function):
        assert math.isclose(float(sym), want, rel_tol=1e-9, abs_tol=1e-12)


def test_comparisons_give_one_and_zero_in_the_operands_dtype():
    a, b = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16), torch.tensor([2.0, 2.0, 2.0], dtype=torch.float16)
    assert ops.TORCH["lt"](a, b).tolist() == [1.0, 0.0, 0.0] and ops.TORCH["lt"](a, b).dtype == torch.float16
    assert ops.TORCH["eq"](a, b).tolist() == [0.0, 1.0, 0.0]
    assert ops.TORCH["ge"](a, b).tolist() == [0.0, 1.0, 1.0]


def test_select_and_iota_broadcast_by_name():
    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        v = g.input("V", ["m"], "f32")
        return g.select(g.lt(g.iota("d"), v), x, g.const(-1.0))
    gr = dag.build_graph_with_output("sel", {"m": 3, "d": 4}, body)
    assert gr.nodes[-1].axes == ("m", "d")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = reference.evaluate(gr, {"X": x, "V": torch.tensor([0.0, 2.0, 4.0])})["out"]
    assert out.tolist() == [[-1, -1, -1, -1], [4, 5, -1, -1], [8, 9, 10, 11]]


def test_a_bad_iota_axis_or_select_operand_is_one_clear_error():
    g = dag.DagM("bad", {"m": 3})
    with pytest.raises(ir.GraphError, match="iota.*unknown axis 'q'"):
        g.iota("q")
    with pytest.raises(ir.GraphError, match="not a node"):
        g.select(0, 1, 2)


class _T:
    """TileLang's intrinsics as the spellings use them, in numpy float32: enough to evaluate a
    spelling on the CPU (T.fast_rcp is rcp.approx, within 1 ulp of 1 / x; numpy rounds exactly)."""
    import numpy as _np
    f = _np.float32
    exp, exp2, log, sqrt, tanh, abs = _np.exp, _np.exp2, _np.log, _np.sqrt, _np.tanh, _np.abs
    erf = staticmethod(_np.vectorize(math.erf, otypes=[_np.float32]))
    max, min = _np.maximum, _np.minimum

    @staticmethod
    def rsqrt(x):
        return _T.f(1) / _T._np.sqrt(x)

    @staticmethod
    def fast_rcp(x):
        return _T.f(1) / x

    @staticmethod
    def if_then_else(c, a, b):
        return _T._np.where(c, a, b)

    @staticmethod
    def cast(x, dtype):
        return _T._np.asarray(x, dtype=_T._np.float32)


SPELLING_POINTS = [-300.0, -90.0, -20.0, -4.5, -1.0, -0.3, -1e-3, 0.0, 1e-3, 0.3, 1.0, 4.5, 20.0, 90.0, 300.0]


@pytest.mark.parametrize("op", ops.UNARY, ids=ops.UNARY)
def test_the_tilelang_spelling_computes_the_op(op):
    """Every unary op's kernel spelling, evaluated in float32, matches its scalar meaning
    (float64) from -300 to 300: a wrong constant in a rewritten spelling (gelu_tanh as
    x / (1 + 2^(-c z)), c = 2 sqrt(2/pi) log2 e) fails here, as do overflow paths that give NaN."""
    import numpy as np
    o = ops.BY_NAME[op]
    xs = [abs(x) + 0.25 if op in POSITIVE else x for x in SPELLING_POINTS]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        got = eval(o.tilelang.format("x"), {"T": _T, "x": np.asarray(xs, dtype=np.float32)})
    got = np.broadcast_to(np.asarray(got, dtype=np.float64), (len(xs),))
    for x, g in zip(xs, got):
        try:
            want = o.scalar(x)
        except OverflowError:  # exp of 300: float32 and float64 both overflow to inf
            want = math.inf
        if math.isinf(want) or abs(want) > 3e38:
            assert g == math.inf or g > 3e38, (op, x, g, want)
        else:
            assert math.isclose(g, want, rel_tol=2e-6, abs_tol=1e-30 + 1e-7 * min(abs(x), 1)), (op, x, g, want)
