"""An independent float64 evaluator of a leantile graph, written from docs/ir.md alone.

It shares no code with leantile.reference (no align, no contract, no op tables): every op
is spelled here again with numpy einsum over named axes, so a bug in the oracle cannot hide
the same bug in a plan. A value is a pair (numpy float64 array, tuple of axis names).

Casts: a cast rounds to its target dtype (docs/ir.md: the user's rounding, which every plan
and interp(dtype=float64) make too; f16/bf16/f32 modelled with torch `.to(dtype).double()`).
"""
from __future__ import annotations

import math
import string

import numpy as np
import torch

from leantile import ir

_ROUND = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


_UNARY = {
    "exp": np.exp, "exp2": np.exp2, "neg": np.negative, "square": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "recip": lambda x: 1.0 / x, "silu": _silu, "gelu_tanh": _gelu_tanh,
    "log": np.log, "tanh": np.tanh, "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "sigmoid": lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)), "abs": np.abs,
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
           "min": np.minimum, "lt": lambda a, b: (a < b) * 1.0, "le": lambda a, b: (a <= b) * 1.0,
           "eq": lambda a, b: (a == b) * 1.0, "ge": lambda a, b: (a >= b) * 1.0, "gt": lambda a, b: (a > b) * 1.0}


def _letters(*axis_lists):
    """One einsum letter per distinct axis name, in order of first appearance."""
    table = {}
    for axes in axis_lists:
        for a in axes:
            if a not in table:
                table[a] = string.ascii_letters[len(table)]
    return table


def _expand(x, have, want):
    """x over `have` as an array over `want` (broadcast by name: size-1 dims for missing axes)."""
    L = _letters(want, have)
    out = np.einsum(f"{''.join(L[a] for a in have)}->{''.join(L[a] for a in want if a in have)}", x)
    shape = []
    it = iter(out.shape)
    for a in want:
        shape.append(next(it) if a in have else 1)
    return out.reshape(shape)


def _binary_axes(ax_a, ax_b):
    return tuple(ax_a) + tuple(a for a in ax_b if a not in ax_a)


def _matmul(x, ax_a, y, ax_b, axis_a, axis_b):
    """Contract axis_a of a with axis_b of b; other shared names are batch axes. The result keeps
    a's free axes, then b's axes that are neither contracted nor shared with a's free axes
    (b may have a free axis named like a's contracted one: matmul(X[m,k], W[j,k], "k", "j") is [m, k])."""
    free_a = tuple(a for a in ax_a if a != axis_a)
    free_b = tuple(b for b in ax_b if b != axis_b and b not in free_a)
    out_axes = free_a + free_b
    table = _letters(free_a, [b for b in ax_b if b != axis_b])
    k = next(c for c in string.ascii_letters if c not in table.values())
    sa = "".join(k if a == axis_a else table[a] for a in ax_a)
    sb = "".join(k if b == axis_b else table[b] for b in ax_b)
    return np.einsum(f"{sa},{sb}->{''.join(table[a] for a in out_axes)}", x, y), out_axes


def evaluate(g: ir.Graph, inputs: dict) -> dict[str, torch.Tensor]:
    """Every output of g as a float64 torch tensor over the output node's axes."""
    vals: dict[int, tuple[np.ndarray, tuple]] = {}
    with np.errstate(all="ignore"):
        for n in g.nodes:
            vals[n.id] = _node(g, n, vals, inputs)
    out = {}
    for name, i in g.outputs.items():
        v, axes = vals[i]
        assert axes == tuple(g.node(i).axes), f"evaluator: node {i} axes {axes} != {g.node(i).axes}"
        out[name] = torch.from_numpy(np.array(v, dtype=np.float64))
    return out


def _node(g, n, vals, inputs):
    op = n.op
    if op == "input":
        t = inputs[n.name]
        return np.asarray(t.detach().to(torch.float64).cpu().numpy(), dtype=np.float64), tuple(n.axes)
    if op == "const":
        return np.array(float(n.value)), ()
    if op == "sizeConst":
        return np.array(float(g.axes[n.axis])), ()
    if op in _UNARY:
        x, ax = vals[n.x]
        return _UNARY[op](x), ax
    if op == "cast":
        x, ax = vals[n.x]
        return torch.from_numpy(np.array(x)).to(_ROUND[n.dtype]).double().numpy(), ax
    if op in _BINARY:
        (x, ax_a), (y, ax_b) = vals[n.a], vals[n.b]
        want = _binary_axes(ax_a, ax_b)
        return _BINARY[op](_expand(x, ax_a, want), _expand(y, ax_b, want)), want
    if op == "select":  # a where cond != 0, else b
        (c, ax_c), (x, ax_a), (y, ax_b) = vals[n.cond], vals[n.a], vals[n.b]
        want = _binary_axes(_binary_axes(ax_a, ax_b), ax_c)
        return np.where(_expand(c, ax_c, want) != 0, _expand(x, ax_a, want), _expand(y, ax_b, want)), want
    if op == "iota":
        return np.arange(g.axes[n.axis], dtype=np.float64), (n.axis,)
    if op == "reduce":
        x, ax = vals[n.x]
        d = ax.index(n.axis)
        r = x.sum(axis=d) if n.kind == "sum" else x.max(axis=d)
        return r, tuple(a for a in ax if a != n.axis)
    if op == "matmul":
        (x, ax_a), (y, ax_b) = vals[n.a], vals[n.b]
        return _matmul(x, ax_a, y, ax_b, n.axis_a, n.axis_b)
    raise ValueError(f"evaluator: node {n.id}: unknown op {op!r}")


def random_inputs(g: ir.Graph, seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Fresh float64 normal inputs (never zeros), drawn without leantile.reference."""
    gen = torch.Generator().manual_seed(seed)
    return {n.name: torch.randn([g.axes[a] for a in n.axes], generator=gen, dtype=torch.float64) * scale
            for n in g.inputs()}


def rel_err(out: torch.Tensor, ref: torch.Tensor, ref_same: torch.Tensor | None = None) -> float:
    """The one error definition (leantile.tolerance): the metric is shared, the evaluator that
    computes `ref` is not."""
    from leantile.tolerance import rel_err as one

    return one(out, ref, ref_same)
