"""One graph, analysed once per derivation: who uses each node, the names of the plan's
global buffers, and memoised facts (scalar values, dtypes) the matchers and kernel builders
ask for many times. Every walk here is iterative and linear: a 100k-node chain must neither
take quadratic time nor hit the recursion limit.

Names. A plan's global buffers share one namespace with the graph's own names: an input
keeps its name, a computed node is `<op>_<id>` (`matmul_3`, `red_max_4`), a precomputed
column sum is `colsum_<weight>`. A user may name an input `matmul_3`; then node 3's buffer
gets a trailing `_` (`matmul_3_`), and so on until it is fresh, so no internal name ever
equals a user's (inputs and outputs) and no two buffers share a name. Kernel-local buffers
are these global names plus a fixed suffix (`X_shared`, `matmul_3_frag`), and
`KernelBuilder.buf` refuses, as a bug, a name that would stand for two different buffers.
"""
from __future__ import annotations

import gc
import struct
from contextlib import contextmanager
from dataclasses import dataclass

from .. import ir
from ..ir import ops
from ..target import DEFAULT, Target
from ..ir.axis_names import unclash

_SCALAR_FNS = ops.SCALAR  # constant folding, from the op registry
# value dtypes whose range is narrower than the accumulator's (float32): f16's largest is 65504
NARROW_RANGE = frozenset({"f16"})


def internal_name(n) -> str:
    """The name a computed node's buffer would have if no user name were in the way."""
    return f"red_{n.kind}_{n.id}" if isinstance(n, ir.Reduce) else f"{n.op}_{n.id}"


class Names:
    """The global namespace of a graph's plans (see the module docstring)."""

    def __init__(self, g: ir.Graph):
        self.user = frozenset({n.name for n in g.nodes if isinstance(n, ir.Input)} | set(g.outputs))
        self.taken = set(self.user)
        self._value: list[str] = []
        for n in g.nodes:
            if isinstance(n, ir.Input):
                self._value.append(n.name)
                continue
            name = internal_name(n)
            while name in self.user:  # base names end in a digit: '_' suffixes never meet another node's
                name += "_"
            if name in self.taken:
                raise RuntimeError(f"leantile bug: two nodes of graph {g.name!r} got the buffer name {name!r}")
            self.taken.add(name)
            self._value.append(name)
        self._extra: dict[tuple, str] = {}

    def value(self, i: int) -> str:
        """The global (and register) name of node i's value."""
        return self._value[i]

    def extra(self, key: tuple, base: str) -> str:
        """A global buffer that is no graph node (a precomputed column sum), named once per key."""
        if key not in self._extra:
            name = base
            while name in self.taken:
                name += "_"
            self.taken.add(name)
            self._extra[key] = name
        return self._extra[key]


@dataclass(frozen=True)
class Refusal:
    """A rule that does not fire where its pattern almost matches (a side condition of its
    lemma fails, or its kernel cannot run on the target): shown by `derive --all-candidates`."""
    rule: str
    at: tuple[int, ...]
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} at {list(self.at)}: {self.reason}"


class Ctx:
    """A graph with its users, names and memoised scalar values and dtypes."""

    def refuse(self, rule: str, at, reason: str) -> None:
        self.refused.append(Refusal(rule, tuple(at), reason))

    def __init__(self, g: ir.Graph, target: Target = DEFAULT):
        g = unclash(g)  # one name, one axis in every kernel (axis_names.py); most graphs: g itself
        self.g = g
        self.target = target  # the GPU the plan is for: its SMs and shared memory decide tiles and splits
        self.nodes = g.nodes
        self.axes = g.axes
        self.outputs = g.outputs
        self.users: list[list[int]] = [[] for _ in g.nodes]
        self.refused: list[Refusal] = []  # filled by the matchers (sites.analyse) and the engine
        self._literal: dict[int, str] = {}  # constants and sizes, as plan literals '#<decimal>'
        self._unheld: dict[int, bool] = {}  # carries_unheld_constant, every node's
        for n in g.nodes:
            for a in n.args():
                self.users[a].append(n.id)
            if n.op == "const":
                self._literal[n.id] = "#" + n.value
            elif n.op == "sizeConst":
                self._literal[n.id] = f"#{g.axes[n.axis]}"
        self.names = Names(g)
        self._const: dict[int, float | None] = {}
        self._dtypes: list[str] = []  # per node, filled on first use (dtype_of)
        self._dtype_set: frozenset[str] | None = None  # their set (dtypes)
        self._statistic: list[bool] = []  # per node, filled on first use (is_statistic)
        self._output_ids = frozenset(g.outputs.values())

    def node(self, i: int):
        return self.nodes[i]

    def value(self, i: int) -> str:
        return self.names.value(i)

    def gained(self, w: int) -> str:
        """The global buffer of weight w with its rows scaled by a gain (gain_fold)."""
        return self.names.extra(("gained", w), f"{self.value(w)}_gained")

    def colsum(self, w: int) -> str:
        """The global buffer of weight w's precomputed column sums."""
        return self.names.extra(("colsum", w), f"colsum_{self.value(w)}")

    def const_value(self, i: int) -> float | None:
        """The value of a scalar built from constants and axis sizes only, else None."""
        memo, stack = self._const, [i]
        while stack:
            j = stack[-1]
            if j in memo:
                stack.pop()
                continue
            n = self.nodes[j]
            if isinstance(n, ir.Const):
                memo[j] = n.number
            elif isinstance(n, ir.SizeConst):
                memo[j] = float(self.axes[n.axis])
            elif n.axes or not isinstance(n, (ir.Unary, ir.Binary, ir.Select)) or n.op not in _SCALAR_FNS:
                memo[j] = None
            else:
                todo = [a for a in n.args() if a not in memo]
                if todo:
                    stack.extend(todo)
                    continue
                vals = [memo[a] for a in n.args()]
                try:
                    memo[j] = None if None in vals else float(_SCALAR_FNS[n.op](*vals))
                except (ValueError, ZeroDivisionError, OverflowError):
                    memo[j] = None
            stack.pop()
        return memo[i]

    def dtype_of(self, i: int) -> str:
        """The dtype a value has on the GPU (ir.value_dtype: its cast or input, else its first
        non-constant argument's, else f32)."""
        if not self._dtypes:
            self._dtypes = ir.value_dtypes(self.g)
        return self._dtypes[i]

    def dtypes(self) -> frozenset[str]:
        """The dtypes of the graph's values (what its tiles may hold: shape_tiles.default_tiles)."""
        if self._dtype_set is None:
            if not self._dtypes:
                self._dtypes = ir.value_dtypes(self.g)
            self._dtype_set = frozenset(self._dtypes)
        return self._dtype_set

    def is_statistic(self, i: int) -> bool:
        """A reduction, or an elementwise value over the same axes as a statistic it reads (the
        mean from a sum, 1 / sqrt(var + eps)): a per-row statistic, stored in float32 when it
        crosses kernels (an f16 mean of 1000 is off by up to 0.25, which x - mean turns into a
        LayerNorm error of 10%)."""
        memo = self._statistic
        for j in range(len(memo), i + 1):  # ids are topological: fill in order, no recursion
            n = self.nodes[j]
            memo.append(isinstance(n, ir.Reduce) or (
                not isinstance(n, (ir.Matmul, ir.Input)) and
                any(memo[a] and set(self.nodes[a].axes) == set(n.axes) for a in n.args())))
        return memo[i]

    def stored_dtype(self, i: int) -> str:
        """The dtype of node i's global buffer where it crosses kernels: an input's or an output's
        own (ir.value_dtype: what the user passes and gets back); float32 ("acc") for a statistic
        (is_statistic) and for an f16 value the graph does not round (rounds_to_own_dtype); else
        its value's dtype (bf16 has float32's range: rounding it is the graph's own noise, half
        the traffic).

        Why: f16 overflows past 65504 where float32 (the fused kernels' registers, the
        reference verify judges against) does not. Stored in f16, the `unfused` softplus
        log(1 + exp(x)) kept exp(x) = inf for x > 11.1 and returned inf where the graph's value
        (about x) is an ordinary f16; a GEMM's output scaled back into range by another kernel,
        x^4 normalised by a norm kernel, likewise."""
        if isinstance(self.nodes[i], ir.Input) or i in self._output_ids:
            return self.dtype_of(i)
        return self.internal_dtype(i)

    def internal_dtype(self, i: int) -> str:
        """The dtype node i's global would have were it no graph output: what kernels that read
        it need (an output of a narrower dtype gets a float32 copy for them: derive.wide_outputs)."""
        dt = self.dtype_of(i)
        if self.is_statistic(i) or (dt in NARROW_RANGE and not self.rounds_to_own_dtype(i)):
            return "acc"
        if dt == "bf16" and not self.rounds_to_own_dtype(i) and self.carries_unheld_constant(i):
            return "acc"
        return dt

    def carries_unheld_constant(self, i: int) -> bool:
        """Node i's value is elementwise in a large finite constant bf16 cannot hold (|c| >= 256,
        _large_unheld): a mask's fill -30000 (stored as -29952), -1e9 selected or added
        ((1 - keep) * -1e9), and what is computed from them elementwise. (A scale such as
        1 / sqrt(d_h) rounds its product by a relative 2^-9 like any value: the graph's own noise.) A wholly masked row's exp(s - M), M the row maximum of the exact value (a
        forward's saved statistic, float32), was then exp(48) = 7e20, or inf, where the graph's value
        is 1: no rounding noise but a wrong gradient (gpu_fuzz --device cpu, seed 7: the unfused
        attention backward in bf16, rel err 7e20). Stored in float32 the constant stays exact."""
        if not self._unheld:  # one pass in id order (a node's arguments come before it): no recursion
            for n in self.nodes:
                self._unheld[n.id] = isinstance(n, (ir.Unary, ir.Binary, ir.Select)) and any(
                    self._unheld[a] if self.literal(a) is None else _large_unheld(self.const_value(a))
                    for a in n.args())
        return self._unheld[i]

    def rounds_to_own_dtype(self, i: int) -> bool:
        """Every candidate rounds node i's value to its dtype: a cast (the user's rounding), or an
        operand of a matmul (the tensor cores take 16-bit operands: a fused kernel rounds it into
        shared memory too, and a float32 operand would make the GEMM a TF32 one)."""
        return isinstance(self.nodes[i], ir.Cast) or any(isinstance(self.nodes[u], ir.Matmul) for u in self.users[i])

    def literal(self, i: int) -> str | None:
        """'#<value>' for a constant, an axis size or a scalar computed from those alone
        (neg(c), 1 / sqrt(d): folded, inlined, never loaded nor given a kernel), else None."""
        lit = self._literal.get(i)
        if lit is None and not self.nodes[i].axes and isinstance(self.nodes[i], (ir.Unary, ir.Binary, ir.Select)):
            v = self.const_value(i)
            if v is not None and v == v and abs(v) != float("inf"):
                lit = self._literal[i] = "#" + repr(v)
        return lit


@contextmanager
def gc_paused():
    """Building a plan allocates ~10 frozen, acyclic pydantic objects per node; the cyclic
    collector finds nothing among them, yet its passes over them took 2/3 of the time of
    deriving a 100k-node chain. Pause it for the duration (restored on exit)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _bf16_holds(v: float) -> bool:
    """Whether bfloat16 holds v exactly: a float32 whose low 16 bits are zero (inf included)."""
    try:
        f = struct.pack("<f", v)
    except OverflowError:  # past float32's range
        return False
    return struct.unpack("<f", f)[0] == v and not struct.unpack("<I", f)[0] & 0xFFFF


def _large_unheld(v: float) -> bool:
    """A constant whose bf16 rounding errs by at least 0.5 (|v| >= 256, not held): in an exponent,
    a factor e^0.5 or more, no noise (Ctx.carries_unheld_constant)."""
    return abs(v) >= 256 and not _bf16_holds(v)
