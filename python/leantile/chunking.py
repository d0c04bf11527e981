"""Chunked execution: a graph run in slices of one of its axes, so that what the plan keeps over
that axis exists a slice at a time (issue 50: an LM head's [tokens, vocabulary] logits, 2 GiB at
8192 x 128256 in bf16, and their gradient, never whole in memory).

A graph can be chunked along axis `a` where every value is one of
  - free: it does not depend on any value over `a` (weights, constants, sizes);
  - row: computed slice by slice along `a` (each element reads only its own positions of `a`:
    elementwise ops, reductions and contractions over other axes; `iota(a)` reads the chunk's
    offset, an extra scalar input);
  - sum: linear in sums over `a` (a sum over `a`, a contraction over `a`, then only additions of
    such values, products and quotients by free ones, casts): the whole graph's value is the sum
    of the chunks' values.
An output that is a row value is the chunks' outputs concatenated along `a`; a sum output is their
sum, accumulated in float32 and rounded to the output's dtype once, or, asked (`in_place`: a sum
whose float32 copy would outweigh the chunks, an LM head's dW), added by each chunk into the
output itself (the chunk graph reads the sum so far as an input and outputs it plus its own part,
which the kernels write over that input: leantile.plan's in-place outputs); a free one is any chunk's. A
reduction over `a` other than a sum (a max), or a sum value used non-linearly (a log of a loss),
makes the graph unchunkable along `a`: `classify` names the node.

This is the distributivity of a finite sum over a partition of its index set (Finset.sum_union
for disjoint slices) applied node by node: nothing here is a rewrite the kernels prove; each chunk
runs the graph's own derived plan, at the chunk's size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import ir

FREE, ROW, SUM = "free", "row", "sum"
# elementwise ops linear in one argument when the other is free (a * c, a / c) or in both (a + b)
_SCALING = ("mul", "div")
_ADDITIVE = ("add", "sub")
_LINEAR_UNARY = ("neg",)


def classify(g: ir.Graph, axis: str) -> tuple[dict[int, str], str | None]:
    """({node id: free | row | sum}, None), or (partial, why not) naming the first node that
    cannot be chunked along `axis`."""
    kind: dict[int, str] = {}

    def no(n, why: str):
        return kind, f"node {n.id} ({n.op}): {why}"

    for n in g.nodes:
        args = [kind[a] for a in n.args()]
        if isinstance(n, ir.Input):
            kind[n.id] = ROW if axis in n.axes else FREE
        elif isinstance(n, (ir.Const, ir.SizeConst)):
            kind[n.id] = FREE
        elif isinstance(n, ir.Iota):
            kind[n.id] = ROW if n.axis == axis else FREE
        elif isinstance(n, ir.Reduce):
            (x,) = args
            if x == FREE:
                kind[n.id] = FREE
            elif n.axis == axis and x == ROW:
                if n.kind != "sum":
                    return no(n, f"a {n.kind} over {axis} (only sums over the chunked axis add up)")
                kind[n.id] = SUM
            elif x == SUM and n.kind != "sum":
                return no(n, f"a {n.kind} of a sum over {axis}")
            else:
                kind[n.id] = x
        elif isinstance(n, ir.Matmul):
            a, b = args
            if (n.axis_a == axis) != (n.axis_b == axis) and ROW in args:
                return no(n, f"a contraction pairs {axis} with another axis (one side would not be sliced)")
            if SUM in args:
                if FREE not in args:
                    return no(n, f"a product of a sum over {axis} with a value over it")
                kind[n.id] = SUM
            elif n.axis_a == axis and a == ROW and b == ROW:
                kind[n.id] = SUM  # a contraction over the chunked axis: a sum of the chunks' products
            else:
                kind[n.id] = ROW if ROW in args else FREE
        elif SUM in args:  # elementwise on a sum: linear only
            others = [k for k in args if k != SUM]
            linear = (isinstance(n, ir.Cast) or (isinstance(n, ir.Unary) and n.op in _LINEAR_UNARY)
                      or (isinstance(n, ir.Binary) and n.op in _ADDITIVE and not others)
                      or (isinstance(n, ir.Binary) and n.op in _SCALING and others == [FREE]
                          and (n.op == "mul" or args[0] == SUM)))
            if not linear:
                return no(n, f"not linear in a sum over {axis} (the chunks' values would not add up)")
            kind[n.id] = SUM
        else:
            kind[n.id] = ROW if ROW in args else FREE
    return kind, None


@dataclass(frozen=True)
class Chunks:
    """How a graph runs in chunks of `axis`: `graph` is the graph at `size` of the axis (its size
    constant the whole axis's, its iota offset by the scalar input `offset`, if any). `inputs`:
    each input's position of the axis (None: passed whole); `outputs`: (how, position) per output,
    how in "row" (concatenated along the axis at that position), "sum" (added up), "free" (any
    chunk's); `cast`: the dtype a sum output is rounded to, where the chunk graph outputs it
    before that rounding; `into`: {sum output: the chunk graph's input of the sum so far}, for
    the sums each chunk adds into the output itself (chunk's in_place)."""
    axis: str
    total: int
    size: int
    graph: ir.Graph
    offset: str | None
    inputs: dict[str, int | None]
    outputs: dict[str, tuple[str, int | None]]
    cast: dict[str, str]
    into: dict[str, str] = field(default_factory=dict)

    def starts(self) -> list[int]:
        return list(range(0, self.total, self.size))

    def at(self, size: int) -> ir.Graph:
        """The chunk graph at another size of the axis (the last, shorter chunk)."""
        return self.graph.model_copy(update={"axes": {**self.graph.axes, self.axis: size}})

    def graphs(self) -> dict[int, ir.Graph]:
        """{chunk size: its graph}: one per size the chunks take (a shorter last one apart)."""
        return {s: self.at(s) for s in sorted({min(self.size, self.total - s) for s in self.starts()})}


OFFSET = "chunk_offset"  # the scalar input holding a chunk's first index along the axis


def chunk(g: ir.Graph, axis: str, size: int, in_place=()) -> Chunks:
    """g in chunks of `size` along `axis`; ir.GraphError naming the node where it cannot be. The
    sum outputs named in `in_place` (those a sum runs over without a final rounding) are added
    into by each chunk (Chunks.into); the others summed in float32."""
    if axis not in g.axes:
        raise ir.GraphError([f"{g.name}: chunk along {axis!r}: no such axis (axes: {', '.join(g.axes)})"])
    if not 1 <= size <= g.axes[axis]:
        raise ir.GraphError([f"{g.name}: chunk size {size} along {axis!r}: outside 1..{g.axes[axis]}"])
    kind, why = classify(g, axis)
    if why:
        raise ir.GraphError([f"{g.name}: cannot run in chunks along {axis!r}: {why}"])
    total = g.axes[axis]
    names = {n.name for n in g.inputs()}
    offset = None
    if any(isinstance(n, ir.Iota) and n.axis == axis for n in g.nodes):
        offset = OFFSET
        while offset in names:
            offset += "_"
    nodes: list = []
    new: dict[int, int] = {}

    def add(node) -> int:
        nodes.append(node.model_copy(update={"id": len(nodes)}))
        return len(nodes) - 1

    off_id = add(ir.Input(id=0, op="input", name=offset, dtype="f32", axes=())) if offset else None
    for n in g.nodes:
        if isinstance(n, ir.SizeConst) and n.axis == axis:  # the whole axis's size, in every chunk
            new[n.id] = add(ir.Const(id=0, op="const", value=str(total), axes=()))
        elif isinstance(n, ir.Iota) and n.axis == axis:  # positions of the whole axis
            at = add(n)
            new[n.id] = add(ir.Binary(id=0, op="add", a=at, b=off_id, axes=n.axes))
        else:
            new[n.id] = add(ir.with_args(n, new))
    outputs, how, cast, into = {}, {}, {}, {}
    taken = names | {offset}
    dtypes = ir.value_dtypes(g)
    for o, i in g.outputs.items():
        n = g.nodes[i]
        if kind[i] == SUM and isinstance(n, ir.Cast):  # summed before its rounding
            outputs[o], cast[o] = new[n.x], n.dtype
        elif kind[i] == SUM and o in in_place:  # the sum so far, read as an input, plus this chunk's
            into[o] = f"{o}_sum"
            while into[o] in taken:
                into[o] += "_"
            taken.add(into[o])
            so_far = add(ir.Input(id=0, op="input", name=into[o], dtype=dtypes[i], axes=n.axes))
            outputs[o] = add(ir.Binary(id=0, op="add", a=so_far, b=new[i], axes=n.axes))
        else:
            outputs[o] = new[i]
        how[o] = (kind[i], n.axes.index(axis) if kind[i] == ROW else None)
    graph = g.model_copy(update={"nodes": tuple(nodes), "outputs": outputs, "derivation": (),
                                 "axes": {**g.axes, axis: size}})
    problems = ir.check(graph)
    if problems:  # a rewrite that broke the graph is this module's fault, not the user's
        raise AssertionError(f"chunk graph of {g.name} along {axis}: {problems[:3]}")
    inputs = {n.name: (n.axes.index(axis) if axis in n.axes else None) for n in g.inputs()}
    return Chunks(axis, total, size, graph, offset, inputs, how, cast, into)


def even_size(total: int, most: int, multiple: int = 16) -> int:
    """A chunk size of at most `most` elements: total / n for the fewest chunks n where that is
    exact and a multiple of `multiple` (no shorter last chunk: one compiled plan), else the
    largest multiple of `multiple` within `most` (a last chunk shorter)."""
    most = max(1, min(most, total))
    least = math.ceil(total / most)
    for n in range(least, 2 * least + 1):
        if total % n == 0 and (total // n) % multiple == 0:
            return total // n
    return max(multiple, most // multiple * multiple) if most >= multiple else most
