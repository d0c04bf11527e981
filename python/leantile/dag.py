"""Python mirror of the Lean `DagM` builder.

Every builder call appends exactly the nodes its Lean namesake appends, in the same
order, so both sides number nodes identically and write byte-identical JSON.
`tests/lean/test_drift.py` reads the Lean architecture files and holds this promise.

    def body(g: DagM):
        x = g.input("X", ["m", "d"])
        w = g.input("W", ["d", "n"])
        return g.matmul(g.rms_norm(x, "d"), w, "d", "d")

    graph = build_graph_with_output("rmsnorm", {"m": 1024, "d": 4096, "n": 4096}, body)
"""

from __future__ import annotations

from typing import Callable, Iterable

from . import ir
from .ir import ops


def _decimal(v) -> str:
    """Canonical decimal string of a constant (what Lean's architecture files write too)."""
    if isinstance(v, str):
        float(v)  # raises on junk
        return v
    return repr(float(v))


class DagM:
    """A graph under construction. Methods return node ids (plain ints)."""

    def __init__(self, name: str, axes: dict[str, int]):
        self.name = name
        self.axes = dict(axes)
        self.nodes: list = []
        self.outputs: dict[str, int] = {}

    # -- internals -------------------------------------------------------------
    def _axes_of(self, i: int) -> tuple[str, ...]:
        if not isinstance(i, int) or not 0 <= i < len(self.nodes):
            raise ir.GraphError([f"builder: {i!r} is not a node of graph {self.name!r} so far"])
        return self.nodes[i].axes

    def _push(self, cls, **fields) -> int:
        i = len(self.nodes)
        try:
            self.nodes.append(cls(id=i, **fields))
        except Exception as e:  # pydantic error on a bad literal
            raise ir.GraphError([f"builder: node {i} ({fields.get('op')}): {e}"]) from None
        return i

    # -- leaves ----------------------------------------------------------------
    def input(self, name: str, axes: Iterable[str], dtype: str = "f16") -> int:
        axes = tuple(axes)
        for a in axes:
            if a not in self.axes:
                raise ir.GraphError([f"builder: input {name!r} names unknown axis {a!r}"])
        return self._push(ir.Input, op="input", name=name, axes=axes, dtype=dtype)

    def const(self, value) -> int:
        return self._push(ir.Const, op="const", value=_decimal(value), axes=())

    eps_const = const  # Lean: epsConst

    def size_const(self, axis: str) -> int:
        return self._push(ir.SizeConst, op="sizeConst", axis=axis, axes=())

    # -- elementwise -------------------------------------------------------------
    def _unary(self, op: str, x: int) -> int:
        return self._push(ir.Unary, op=op, x=x, axes=self._axes_of(x))

    # one method per unary op of the registry (leantile.ir.ops): g.exp(x), g.erf(x), g.sigmoid(x), ...

    def cast(self, x: int, dtype: str) -> int:
        return self._push(ir.Cast, op="cast", x=x, dtype=dtype, axes=self._axes_of(x))

    def _binary(self, op: str, a: int, b: int) -> int:
        return self._push(ir.Binary, op=op, a=a, b=b,
                          axes=ir.binary_axes(self._axes_of(a), self._axes_of(b)))

    # one method per binary op of the registry: g.add(a, b), g.min(a, b), g.lt(a, b), ...

    def select(self, cond: int, a: int, b: int) -> int:
        """a where cond != 0, else b (torch.where(cond != 0, a, b)), broadcasting by name."""
        return self._push(ir.Select, op="select", cond=cond, a=a, b=b,
                          axes=ir.select_axes(self._axes_of(cond), self._axes_of(a), self._axes_of(b)))

    def iota(self, axis: str) -> int:
        """The position along `axis`, 0 .. n-1 (float32): for masks, clamps and one-hot labels."""
        if axis not in self.axes:
            raise ir.GraphError([f"builder: node {len(self.nodes)} (iota): unknown axis {axis!r}"])
        return self._push(ir.Iota, op="iota", axis=axis, axes=(axis,))

    # -- contractions ------------------------------------------------------------
    def red(self, kind: str, x: int, axis: str) -> int:
        ax = self._axes_of(x)
        if axis not in ax:
            raise ir.GraphError([f"builder: node {len(self.nodes)} (reduce): axis {axis!r} not in node {x} {list(ax)}"])
        return self._push(ir.Reduce, op="reduce", kind=kind, x=x, axis=axis,
                          axes=tuple(a for a in ax if a != axis))

    def matmul(self, a: int, b: int, axis_a: str, axis_b: str) -> int:
        pa, pb = self._axes_of(a), self._axes_of(b)
        if axis_a not in pa or axis_b not in pb:
            raise ir.GraphError([f"builder: node {len(self.nodes)} (matmul): contraction axes "
                                 f"{axis_a!r}/{axis_b!r} not in {list(pa)}/{list(pb)}"])
        return self._push(ir.Matmul, op="matmul", a=a, b=b, axis_a=axis_a, axis_b=axis_b,
                          axes=ir.matmul_axes(pa, pb, axis_a, axis_b))

    # -- subdags (Lean: softmaxSubdag, meanAlongSubdag, rmsNormSubdag, layerNormSubdag)
    def softmax(self, x: int, axis: str) -> int:
        m = self.red("max", x, axis)
        e = self.exp(self.sub(x, m))
        return self.div(e, self.red("sum", e, axis))

    def mean_along(self, x: int, axis: str) -> int:
        s = self.red("sum", x, axis)
        return self.div(s, self.size_const(axis))

    def rms_norm(self, x: int, axis: str, eps="1e-05") -> int:
        ms = self.mean_along(self.square(x), axis)
        r = self.rsqrt(self.add(ms, self.eps_const(eps)))
        return self.mul(x, r)

    def layer_norm(self, x: int, axis: str, eps="1e-05") -> int:
        c = self.sub(x, self.mean_along(x, axis))
        var = self.mean_along(self.square(c), axis)
        r = self.rsqrt(self.add(var, self.eps_const(eps)))
        return self.mul(c, r)

    # -- outputs -------------------------------------------------------------------
    def output(self, name: str, x: int) -> int:
        self._axes_of(x)
        self.outputs[name] = x
        return x

    def graph(self) -> ir.Graph:
        g = ir.Graph(name=self.name, axes=self.axes, nodes=tuple(self.nodes), outputs=self.outputs)
        problems = ir.check(g)
        if problems:
            raise ir.GraphError(problems)
        return g


def _method(op: str, arity: int):
    if arity == 1:
        def unary(self, x: int) -> int:
            return self._unary(op, x)
        unary.__doc__ = f"{op}(x), elementwise."
        return unary

    def binary(self, a: int, b: int) -> int:
        return self._binary(op, a, b)
    binary.__doc__ = f"{op}(a, b), elementwise, broadcasting by axis name" + \
        (" (1 where it holds, else 0)." if op in ops.COMPARISONS else ".")
    return binary


for _op in (*ops.UNARY, *ops.BINARY):
    setattr(DagM, _op, _method(_op, ops.BY_NAME[_op].arity))


def build_graph(name: str, axes: dict[str, int], body: Callable[[DagM], object]) -> ir.Graph:
    """Run `body` on a fresh builder; body declares its outputs with g.output."""
    g = DagM(name, axes)
    body(g)
    return g.graph()


def build_graph_with_output(name: str, axes: dict[str, int], body: Callable[[DagM], int],
                            output: str = "out") -> ir.Graph:
    """Lean's buildGraphWithOutput: the node body returns is the graph's output `out`."""
    g = DagM(name, axes)
    g.output(output, body(g))
    return g.graph()
