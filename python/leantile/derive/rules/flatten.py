"""The rule flatten_reduction: nested reductions of one kind over axes that lie next to each
other in every tensor that has any of them are ONE reduction over their product.

LayerNorm over (c, h, w) of x[n, c, h, w], written as a user writes it, is sum_c sum_h sum_w
twice (the mean, then the variance): six reductions, each a kernel, where the data allows one
statistics pass per reduced row of c h w elements. Where c, h, w are adjacent, in that order, in
every tensor that has any of them, the graph is the same computation over x[n, c_h_w] (a view of
the same memory: row-major, the three axes are one), and the chains are single reductions over
c_h_w: a long row the region rules stream and split over CTAs like any other (issue 49).

`flattenings(g)` finds the merges, `flatten(g)` returns the merged graph and the steps that
record them; the plan derived from it carries `Plan.merged` (merged axis -> its parts), by which
the interpreter and the emitted module view the user's tensors (plan.unmerged_shape). Nothing
is merged across a matmul, an iota or a partial reduction of the group (a tensor with some of
the axes and not others): those index the parts one by one.

Lemma: LeanTile.sum_fin_prod (lean/LeanTile/Rules/FlattenReduction.lean): a sum over Fin (a b)
is the nested sum over Fin a and Fin b through finProdFinEquiv (row-major), and max alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ... import ir
from .base import Rule, sym
from .mask_bounds import bound_masks

KINDS = ("sum", "max", "min")  # associative and commutative: a nested reduction is one over the pairs


@dataclass(frozen=True)
class Merge:
    """Axes `parts` (adjacent, in this order, wherever they occur) merged into `axis`; `chains`
    are the reductions over them, each innermost first (node ids of the graph it was found in)."""
    parts: tuple[str, ...]
    axis: str
    chains: tuple[tuple[int, ...], ...]


def _summed_axis(n) -> str | None:
    """The axis node n sums over: a reduction's, or a matmul's contraction where both operands
    name it alike (a matmul sums the products over it: GQA's dK, sum over t_q, then over g)."""
    if isinstance(n, ir.Reduce):
        return n.axis
    return n.axis_a if isinstance(n, ir.Matmul) and n.axis_a == n.axis_b else None


# A matmul's contraction followed by sums over axes adjacent to it in both operands (GQA's backward:
# dK = sum over g of dS^T Q over t_q) is one contraction over the merged axis: the group-sum kernel
# goes and the dK/dV kernel streams the group's query rows itself, but its grid loses the group's
# CTAs (4 KV heads x 2048 keys: 128 CTAs of 64 keys where the split form runs 256 of 128). Off until
# a GPU says which wins: benchmarks/flash_backward/probe.py --merge-contractions times it (tests run it on).
MERGE_CONTRACTIONS = False


def _chains(g: ir.Graph, users: dict[int, list[int]]) -> list[tuple[int, ...]]:
    """Maximal runs r1, ..., rk (k >= 2) of reductions of one kind, each r(i+1) reducing r(i), which
    nothing else reads (no other node, and it is no graph output). r1 may be a matmul (a sum over
    its contraction) followed by sums."""
    outputs = set(g.outputs.values())
    out = []
    for n in g.nodes:
        if isinstance(n, ir.Matmul) and _summed_axis(n) and MERGE_CONTRACTIONS:
            run = [n.id]
            while len(users[run[-1]]) == 1 and run[-1] not in outputs:
                nxt = g.node(users[run[-1]][0])
                if not (isinstance(nxt, ir.Reduce) and nxt.kind == "sum" and nxt.x == run[-1]):
                    break
                run.append(nxt.id)
            if len(run) > 1:
                out.append(tuple(run))
            continue
        if not (isinstance(n, ir.Reduce) and n.kind in KINDS):
            continue
        below = g.node(n.x)
        if isinstance(below, ir.Reduce) and below.kind == n.kind and users[below.id] == [n.id] \
                and below.id not in outputs:
            continue  # not the innermost of its run
        run = [n.id]
        while True:
            u = users[run[-1]]
            nxt = g.node(u[0]) if len(u) == 1 and run[-1] not in outputs else None
            if not (isinstance(nxt, ir.Reduce) and nxt.kind == n.kind and nxt.x == run[-1]):
                break
            run.append(nxt.id)
        if len(run) > 1:
            out.append(tuple(run))
    return out


def _adjacent(axes: tuple[str, ...], parts: set[str]) -> tuple[str, ...] | None:
    """The axes of `parts` in `axes`, where they are all there and next to each other; None else."""
    at = [i for i, a in enumerate(axes) if a in parts]
    if len(at) != len(parts) or at[-1] - at[0] != len(at) - 1:
        return None
    return tuple(axes[at[0]:at[-1] + 1])


def _merge_for(g: ir.Graph, chains: list[tuple[int, ...]], run: tuple[int, ...], p: int) -> Merge | None:
    """The merge of the axes the first p reductions of `run` reduce, where every node of g allows it.
    A run from a matmul's contraction needs the parts adjacent in both operands; other matmuls may
    then hold them as free axes (GQA's backward: Q K^T over the group's query rows), never contract
    or batch over them."""
    parts_set = {_summed_axis(g.node(i)) for i in run[:p]}
    if len(parts_set) != p:
        return None
    first = g.node(run[0])
    matmul_run = isinstance(first, ir.Matmul)
    parts = _adjacent(g.node(first.a if matmul_run else first.x).axes, parts_set)
    if parts is None or (matmul_run and _adjacent(g.node(first.b).axes, parts_set) != parts):
        return None
    # every run whose first reductions reduce exactly these axes is merged too; their inner
    # results (which have some of the axes, not all) disappear
    covered, inner = [], set()
    for c in chains:
        if len(c) >= p and {_summed_axis(g.node(i)) for i in c[:p]} == parts_set:
            covered.append(c[:p])
            inner |= set(c[:p - 1])
    if not _nodes_allow(g, parts, inner, {c[-1] for c in covered}, free_matmuls=matmul_run):
        return None
    return Merge(parts, _merged_name(g, parts), tuple(covered))


def _nodes_allow(g: ir.Graph, parts: tuple[str, ...], inner=frozenset(), merged_reductions=frozenset(),
                 free_matmuls: bool = True) -> bool:
    """Whether every node of g but `inner` (a merged run's inner results) allows viewing `parts`
    as one axis: no position along a part (iota), no reduction over one but the merged runs' last
    (`merged_reductions`), no matmul contracting or batching over one (with free_matmuls False,
    none holding one at all: flatten_reduction's runs of reductions), and every tensor with any
    part holds all of them, adjacent, in this order."""
    parts_set = set(parts)
    if _product(g, parts) > ir.MAX_AXIS_SIZE:
        return False
    for n in g.nodes:
        if n.id in inner:
            continue
        if isinstance(n, ir.Iota) and n.axis in parts_set:
            return False
        if isinstance(n, ir.Reduce) and n.axis in parts_set and n.id not in merged_reductions:
            return False
        if isinstance(n, ir.Matmul) and parts_set & ({n.axis_a, n.axis_b} | (
                _batch_axes(g, n) if free_matmuls else set(g.node(n.a).axes) | set(g.node(n.b).axes))):
            return False
        if parts_set & set(n.axes or ()) and _adjacent(n.axes, parts_set) != parts:
            return False
    return True


def _merged_name(g: ir.Graph, parts: tuple[str, ...]) -> str:
    """The merged axis's name: its parts joined, made unique among g's axes."""
    name, j = "_".join(parts)[:ir.MAX_NAME], 1
    while name in g.axes:
        name, j = f"{'_'.join(parts)[:ir.MAX_NAME - 4]}_{j}", j + 1
    return name


def find_merge(g: ir.Graph) -> Merge | None:
    """One merge g allows (the longest run's longest prefix first), or None."""
    users = g.users()
    chains = _chains(g, users)
    for run in sorted(chains, key=len, reverse=True):
        for p in range(len(run), 1, -1):
            m = _merge_for(g, chains, run, p)
            if m is not None:
                return m
    return None


def _batch_axes(g: ir.Graph, n: ir.Matmul) -> set[str]:
    """The axes both operands of matmul n have besides the contraction (heads of attention)."""
    return (set(g.node(n.a).axes) - {n.axis_a}) & (set(g.node(n.b).axes) - {n.axis_b})


def find_free_merge(g: ir.Graph) -> tuple[Merge, int] | None:
    """(a merge, the matmul it was found at) of two or more axes that one operand of a plain
    matmul (no batch axis) holds next to each other besides the contraction, which its output
    holds next to each other too (activations X[b, t, k] as GEMM rows b t, a weight W[k, h, d_h]
    as columns h d_h) and which every node of g allows viewing as one (_nodes_allow); None."""
    for n in g.nodes:
        if not isinstance(n, ir.Matmul) or _batch_axes(g, n):
            continue
        for op, c in ((g.node(n.a), n.axis_a), (g.node(n.b), n.axis_b)):
            axes = tuple(op.axes)
            runs = [axes[:axes.index(c)], axes[axes.index(c) + 1:]] if c in axes else [axes]
            for run in runs:
                for size in range(len(run), 1, -1):
                    for i in range(len(run) - size + 1):
                        parts = run[i:i + size]
                        if _adjacent(n.axes, set(parts)) == parts and _nodes_allow(g, parts):
                            return Merge(parts, _merged_name(g, parts), ()), n.id
    return None


def _merged_axes(axes: tuple[str, ...], m: Merge) -> tuple[str, ...]:
    if not set(m.parts) & set(axes):
        return tuple(axes)
    i = axes.index(m.parts[0])
    return (*axes[:i], m.axis, *axes[i + len(m.parts):])


def apply_merge(g: ir.Graph, m: Merge) -> ir.Graph:
    """g over the merged axis: each covered run's last reduction reduces the merged axis of the run's
    source, its inner reductions are gone, every other node's axes are merged; ids renumbered."""
    inner = {i for c in m.chains for i in c[:-1]}
    last = {c[-1]: c[0] for c in m.chains}  # the run's last reduction -> its first (whose x is the source)
    new_id: dict[int, int] = {}
    nodes = []
    for n in g.nodes:
        if n.id in inner:
            continue
        new_id[n.id] = len(nodes)
        upd = {"id": len(nodes)}
        if n.axes is not None:
            upd["axes"] = _merged_axes(tuple(n.axes), m)
        if n.id in last and isinstance(g.node(last[n.id]), ir.Matmul):  # the run's sums: one contraction
            mm = g.node(last[n.id])
            nodes.append(ir.Matmul(id=len(nodes), op="matmul", a=new_id[mm.a], b=new_id[mm.b], axis_a=m.axis,
                                   axis_b=m.axis, axes=upd["axes"]))
            continue
        if n.id in last:
            upd.update(x=new_id[g.node(last[n.id]).x], axis=m.axis)
            nodes.append(n.model_copy(update=upd))
        else:
            nodes.append(ir.with_args(n, new_id, **upd))
    axes = {**g.axes, m.axis: _product(g, m.parts)}
    return ir.Graph(name=g.name, axes=axes, nodes=tuple(nodes),
                    outputs={o: new_id[i] for o, i in g.outputs.items()})


def _product(g: ir.Graph, parts) -> int:
    return math.prod(g.axes[a] for a in parts)


class FlattenReduction(Rule):
    name = "flatten_reduction"
    theorem = "LeanTile.sum_fin_prod"
    lean_file = "FlattenReduction.lean"
    pattern = "reduce(reduce(x, a2), a1) of one kind (sum, max, min), a1 a2 adjacent wherever they occur"
    rewrite = "one reduction over the merged axis a1_a2 of a row-major view of x (a1 a2 elements a row)"
    statement = ("sum over Fin (m n) of f equals the sum over Fin m of the sum over Fin n of f at "
                 "the row-major index (finProdFinEquiv); max alike")
    params = {"axes": "the merged axes, comma separated, outermost first", "axis": "the merged axis's name"}

    def steps(self, merges: list[Merge]) -> tuple[ir.Step, ...]:
        """One step per merge, at the runs' reductions (ids of the graph the merge was found in)."""
        return tuple(self.step(sorted(i for c in m.chains for i in c), axes=",".join(m.parts), axis=m.axis)
                     for m in merges)

    def formula(self, g, at, params):
        parts = params["axes"].split(",")
        inner = "".join(rf"\sum_{{{a}}}" for a in parts)
        return inner + " x", rf"\sum_{{{params['axis']}}} x|_{{{','.join(parts)} \to {params['axis']}}}"

    def check(self) -> bool:
        """sum over 2 x 3 symbols nested equals the sum over their 6 row-major positions."""
        S = sym()
        sp = S.sp
        xs = sp.symbols("x0:6", real=True)
        nested = sum(sum(xs[i * 3 + j] for j in range(3)) for i in range(2))
        return S.zero(nested - sum(xs))


FLATTEN = FlattenReduction()


class MergeGemmAxes(Rule):
    name = "merge_gemm_axes"
    theorem = "LeanTile.matmul_rows_reindex"
    lean_file = "FlattenReduction.lean"
    pattern = ("a plain matmul (no batch axis) whose rows or columns span adjacent axes a1 a2 of one "
               "operand, which no node reduces, contracts, batches over or indexes apart")
    rewrite = "one GEMM over the merged axis a1_a2 of a row-major view: its tiles span both parts"
    statement = ("a matmul's value at the row-major index of (i, j) is the matmul of the operand viewed "
                 "at that index: its free axes are pointwise (finProdFinEquiv reindexes them)")
    params = {"axes": "the merged axes, comma separated, outermost first", "axis": "the merged axis's name"}

    def formula(self, g, at, params):
        parts = params["axes"].split(",")
        return rf"C_{{\ldots,{','.join(parts)}}}", rf"C_{{\ldots,{params['axis']}}}\;(\text{{row-major view}})"

    def check(self) -> bool:
        """X[b, t, k] W[k, n] at (b, t) equals (X viewed as [b t, k]) W at row t + 3 b: 2 x 3 rows,
        k = 2, n = 2 (the row-major reindex the view makes)."""
        S = sym()
        sp = S.sp
        x = [[[sp.Symbol(f"x{b}{t}{k}", real=True) for k in range(2)] for t in range(3)] for b in range(2)]
        w = sp.Matrix(2, 2, sp.symbols("w0:4", real=True))
        flat = sp.Matrix(6, 2, lambda r, k: x[r // 3][r % 3][k]) * w
        return all(S.zero(flat[t + 3 * b, c] - sum(x[b][t][k] * w[k, c] for k in range(2)))
                   for b in range(2) for t in range(3) for c in range(2))


MERGE_AXES = MergeGemmAxes()


def flatten(g: ir.Graph) -> tuple[ir.Graph, tuple[ir.Step, ...], dict[str, tuple[str, ...]]]:
    """(g with every merge it allows applied, the steps recording them, merged axis -> its
    parts); (g, (), {}) where none applies. A merged axis's parts are original axes of g (a merge
    of a merged axis is written out in its parts)."""
    steps, merged, h = [], {}, g
    while True:
        m, at = find_merge(h), None
        if m is None:
            found = find_free_merge(h)
            if found is None:
                break
            m, at = found
        parts = tuple(p for a in m.parts for p in merged.pop(a, (a,)))
        steps += FLATTEN.steps([m]) if at is None else [MERGE_AXES.step([at], axes=",".join(m.parts), axis=m.axis)]
        merged[m.axis] = parts
        h = apply_merge(h, m)
    # then the other rewrite of the graph itself: bounds computed from a data mask (its steps
    # name nodes of the graph it returns, as a merge's later steps do)
    h, bounds = bound_masks(h)
    return h, tuple(steps) + bounds, merged
