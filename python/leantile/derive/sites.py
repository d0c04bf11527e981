"""Pattern matching: where in a graph each rule can fire (its sites).

A site is a plain record of node ids by role. Matchers only read the graph (through a
`Ctx`: users and scalar values computed once); `analyse` finds every site in one linear
pass per pattern, and the engine turns chosen sites into derivation steps.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .. import ir
from .context import Ctx

ELEMENTWISE = (ir.Unary, ir.Binary, ir.Cast)


def is_leaf_value(n) -> bool:
    return isinstance(n, (ir.Const, ir.SizeConst))


@dataclass(frozen=True)
class SoftmaxSite:
    """exp(z - max_t z) / sum_t exp(z - max_t z), z = src or src scaled by a constant c > 0."""
    mx: int
    sub: int
    exp: int
    sm: int
    div: int
    axis: str
    src: int  # the raw scores the kernel reads
    scale_node: int | None = None  # mul(src, c) or div(src, c) folded into the exponent
    scale: float = 1.0

    @property
    def nodes(self) -> tuple[int, ...]:
        head = (self.scale_node,) if self.scale_node is not None else ()
        return (*head, self.mx, self.sub, self.exp, self.sm, self.div)


def _scaled(g: Ctx, z) -> tuple[int, int | None, float] | None:
    """(src, scale node, c) when z = src * c or src / c with c a positive constant."""
    if isinstance(z, ir.Binary) and z.op in ("mul", "div") and z.axes == g.node(z.a).axes:
        c = g.const_value(z.b)
        if c is not None and c > 0:
            return z.a, z.id, (c if z.op == "mul" else 1.0 / c)
    return None


def find_softmax(g: Ctx) -> list[SoftmaxSite]:
    us = g.users
    out = []
    for div in g.nodes:
        if not (isinstance(div, ir.Binary) and div.op == "div"):
            continue
        e, sm = g.node(div.a), g.node(div.b)
        if not (isinstance(e, ir.Unary) and e.op == "exp" and isinstance(sm, ir.Reduce)
                and sm.kind == "sum" and sm.x == e.id):
            continue
        sub = g.node(e.x)
        if not (isinstance(sub, ir.Binary) and sub.op == "sub"):
            continue
        z, mx = g.node(sub.a), g.node(sub.b)
        if not (isinstance(mx, ir.Reduce) and mx.kind == "max" and mx.x == z.id and mx.axis == sm.axis):
            continue
        inner = {z.id: {mx.id, sub.id}, mx.id: {sub.id}, sub.id: {e.id}, e.id: {sm.id, div.id}, sm.id: {div.id}}
        leaks = [i for i, allowed in inner.items() if set(us[i]) != allowed]
        if leaks:  # an intermediate is used elsewhere: it must be materialised
            g.refuse("online_softmax", [mx.id, sub.id, e.id, sm.id, div.id],
                     f"node {leaks[0]} ({g.node(leaks[0]).op}) is also read outside the softmax: the row "
                     "is computed node by node")
            continue
        src, scale_node, c = z.id, None, 1.0
        sc = _scaled(g, z)
        if sc and set(us[sc[0]]) == {z.id}:
            src, scale_node, c = sc
        out.append(SoftmaxSite(mx.id, sub.id, e.id, sm.id, div.id, sm.axis, src, scale_node, c))
    return out


@dataclass(frozen=True)
class FlashSite:
    """O = matmul(softmax_t(matmul(Q, K) [* c]), V) over t."""
    qk: int
    softmax: SoftmaxSite
    pv: int

    @property
    def axis(self) -> str:
        return self.softmax.axis

    @property
    def nodes(self) -> tuple[int, ...]:
        return (self.qk, *self.softmax.nodes, self.pv)


def find_flash(g: Ctx, softmaxes: list[SoftmaxSite]) -> list[FlashSite]:
    us = g.users
    out = []
    for s in softmaxes:
        qk, t = g.node(s.src), s.axis
        pvs = us[s.div]
        if len(pvs) != 1 or not isinstance(qk, ir.Matmul):
            continue
        pv = g.node(pvs[0])
        if not (isinstance(pv, ir.Matmul) and pv.a == s.div and pv.axis_a == t):
            continue
        q, k = g.node(qk.a), g.node(qk.b)
        if t in q.axes or t not in k.axes:  # the streamed axis must come from K (one softmax row per query)
            g.refuse("online_softmax", [qk.id, s.div, pv.id], f"flash attention: the softmax axis {t!r} is not "
                     "K's alone; the softmax row is streamed on its own")
            continue
        if not any(a in q.axes and a not in k.axes for a in qk.axes):
            g.refuse("online_softmax", [qk.id, s.div, pv.id], "flash attention: Q has no query axis to tile "
                     "(decode, one query): the softmax row is streamed on its own")
            continue
        out.append(FlashSite(qk.id, s, pv.id))
    return out


@dataclass(frozen=True)
class Peel:
    kind: str  # "scale" (mul by s) or "mean" (sub mu)
    node: int  # the mul / sub node
    vec: int  # the per-row vector s or mu


@dataclass
class GemmSite:
    """One or two matmuls of the same (peeled) LHS over the same axis, with the
    per-row pullouts, row statistics and elementwise epilogue that can fuse with them."""
    matmuls: list[int]
    base: int  # LHS after peeling the pullouts
    axis: str  # contraction axis of the LHS
    peels: list[Peel]
    stat_reduces: list[int] = field(default_factory=list)  # row sums the pullout vectors need
    expandable: list[int] = field(default_factory=list)  # sum((x - mu)^2) reduces
    epilogue: list[int] = field(default_factory=list)


def _row_vector(g, i, base_axes, axis) -> bool:
    ax = g.node(i).axes
    return axis not in ax and all(a in base_axes for a in ax)


def peel_lhs(g: Ctx, mm: ir.Matmul) -> tuple[int, list[Peel]]:
    """Walk from the matmul's LHS through mul-by-row-vector and sub-row-vector nodes."""
    node, peels = g.node(mm.a), []
    while isinstance(node, ir.Binary) and node.op in ("mul", "sub") and mm.axis_a in node.axes:
        a, b = g.node(node.a), g.node(node.b)
        if node.op == "mul" and mm.axis_a in a.axes and _row_vector(g, b.id, a.axes, mm.axis_a):
            peels.append(Peel("scale", node.id, b.id))
            node = a
        elif node.op == "sub" and mm.axis_a in a.axes and _row_vector(g, b.id, a.axes, mm.axis_a):
            peels.append(Peel("mean", node.id, b.id))
            node = a
        else:
            break
    return node.id, peels


def unary_chain(g: Ctx, i: int, base: int) -> tuple[str, ...] | None:
    """The unary ops from base to node i (outermost last), or None if i is not such a chain."""
    ops = []
    while i != base:
        n = g.node(i)
        if not isinstance(n, ir.Unary):
            return None
        ops.append(n.op)
        i = n.x
    return tuple(reversed(ops))


def row_ancestors(g: Ctx, targets, axis: str) -> list[int]:
    """Nodes the per-row vectors depend on, down to (and including) reductions over `axis`."""
    seen, stack = set(), list(targets)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        n = g.node(i)
        if isinstance(n, ir.Reduce) and n.axis == axis:
            continue
        if isinstance(n, ir.Input):
            continue
        stack.extend(n.args())
    return sorted(seen)


def expandable_variance(g: Ctx, r: ir.Reduce, base: int) -> int | None:
    """If r = sum_k square(base - mu) with mu a row vector, return mu."""
    sq = g.node(r.x)
    if r.kind != "sum" or not (isinstance(sq, ir.Unary) and sq.op == "square"):
        return None
    sub = g.node(sq.x)
    if isinstance(sub, ir.Binary) and sub.op == "sub" and sub.a == base and \
            _row_vector(g, sub.b, g.node(base).axes, r.axis):
        return sub.b
    return None


def stats_of(g: Ctx, site: GemmSite):
    """Split the reductions under the pullout vectors into direct stats (sum of a unary
    chain of the base) and expandable variances. None if something else is needed."""
    anc = row_ancestors(g, [p.vec for p in site.peels], site.axis)
    direct, expand = [], []
    for i in anc:
        n = g.node(i)
        if isinstance(n, ir.Input) and i != site.base:
            return None  # a row vector reading another input: leave it to its own kernel
        if isinstance(n, ir.Reduce):
            if n.axis != site.axis:
                return None
            if n.kind == "sum" and unary_chain(g, n.x, site.base) is not None:
                direct.append(i)
            elif expandable_variance(g, n, site.base) is not None:
                expand.append(i)
            else:
                return None
    return direct, expand


def epilogue_nodes(g: Ctx, matmuls: list[int]) -> list[int]:
    """Elementwise nodes computable from the matmul tiles, constants and small inputs, in id
    order. Only users of what is already fused can join, so the walk follows users (a heap
    keeps id order) instead of scanning every later node: linear in what it visits."""
    out_axes = set(g.node(matmuls[0]).axes)
    have = set(matmuls)
    fused = []
    heap = sorted({u for m in matmuls for u in g.users[m]})
    queued = set(heap)
    while heap:
        n = g.node(heapq.heappop(heap))
        if n.id in have or not isinstance(n, ELEMENTWISE) or not set(n.axes) <= out_axes:
            continue
        ok = True
        for a in n.args():
            an = g.node(a)
            if a in have or is_leaf_value(an) or (isinstance(an, ir.Input) and set(an.axes) <= out_axes):
                continue
            ok = False
        if ok and any(a in have for a in n.args()):
            have.add(n.id)
            fused.append(n.id)
            for u in g.users[n.id]:
                if u not in queued:
                    queued.add(u)
                    heapq.heappush(heap, u)
    return fused


def depends_on(g: Ctx, i: int, j: int) -> bool:
    """Whether node i reads node j, directly or not (j < i). Ids are topological, so the
    walk stops below j: it visits only what lies between the two nodes."""
    seen, stack = set(), [i]
    while stack:
        n = stack.pop()
        for a in g.node(n).args():
            if a == j:
                return True
            if a > j and a not in seen:
                seen.add(a)
                stack.append(a)
    return False


def find_gemms(g: Ctx, claimed: set[int]) -> list[GemmSite]:
    groups: dict[tuple, GemmSite] = {}
    for mm in g.nodes:
        if not isinstance(mm, ir.Matmul) or mm.id in claimed:
            continue
        base, peels = peel_lhs(g, mm)
        key = (base, mm.axis_a, tuple(peels), mm.axes)
        # dual_gemm (one loop computes both products) needs both operands ready before the
        # loop: the second product must not read the first (a weight computed from it)
        if key in groups and len(groups[key].matmuls) == 1 and not depends_on(g, mm.id, groups[key].matmuls[0]):
            groups[key].matmuls.append(mm.id)
        else:
            if key in groups and len(groups[key].matmuls) == 1:
                g.refuse("dual_gemm", [groups[key].matmuls[0], mm.id], f"matmul {mm.id} reads matmul "
                         f"{groups[key].matmuls[0]} (its weight depends on the first product): two loops")
            groups[key if key not in groups else key + (mm.id,)] = GemmSite([mm.id], base, mm.axis_a, peels)
    sites = list(groups.values())
    for s in sites:
        st = stats_of(g, s) if s.peels else None
        if st:
            s.stat_reduces, s.expandable = st
        elif s.peels:
            g.refuse("stream_stats", [p.vec for p in s.peels], "the pulled-out row vectors need more than sums "
                     "of the GEMM's LHS over its contraction axis (another input, another axis or a max): "
                     "their own kernels compute them")
        s.epilogue = epilogue_nodes(g, s.matmuls)
    return sites


@dataclass
class Sites:
    """Every site of a graph: attention patterns, lone softmax rows, GEMM groups."""
    flash: list[FlashSite]
    rows: list[SoftmaxSite]
    gemms: list[GemmSite]  # every matmul group, fused or not


def analyse(g: Ctx) -> Sites:
    softmaxes = find_softmax(g)
    flash = find_flash(g, softmaxes)
    claimed = {i for s in flash for i in s.nodes}
    rows = [s for s in softmaxes if not set(s.nodes) & claimed]
    return Sites(flash, rows, find_gemms(g, claimed))
