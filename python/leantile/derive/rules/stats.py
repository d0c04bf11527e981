"""The row-statistics rules: variance_expand and stream_stats.

A GEMM whose LHS is normalised (X - mu) * r needs row sums of X over the contraction axis
before its epilogue can apply the pullouts. stream_stats accumulates them tile by tile (in the
GEMM's loop or in a statistics kernel of their own); variance_expand turns sum (x - mu)^2,
which needs mu before the row is read, into shifted sums that stream with it.
"""
from __future__ import annotations

from ... import ir
from ..context import Ctx
from ..sites import GemmSite, row_peels, row_vector
from .base import Rule, sym


def unary_chain(cx: Ctx, i: int, base: int) -> tuple[str, ...] | None:
    """The unary ops from base to node i (outermost last), or None if i is not such a chain."""
    ops = []
    while i != base:
        n = cx.node(i)
        if not isinstance(n, ir.Unary):
            return None
        ops.append(n.op)
        i = n.x
    return tuple(reversed(ops))


def row_ancestors(cx: Ctx, targets, axis: str) -> list[int]:
    """Nodes the per-row vectors depend on, down to (and including) reductions over `axis`."""
    seen, stack = set(), list(targets)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        n = cx.node(i)
        if isinstance(n, ir.Reduce) and n.axis == axis:
            continue
        if isinstance(n, ir.Input):
            continue
        stack.extend(n.args())
    return sorted(seen)


class VarianceExpand(Rule):
    name = "variance_expand"
    theorem = "LeanTile.sum_sq_sub_pivot"
    lean_file = "VarianceExpand.lean"
    pattern = "sum_k square(x_k - mu) with mu constant along k"
    rewrite = ("sums of x - p and (x - p)^2, p the row's first element, stream with the GEMM; "
               "then sum (x-p)^2 - 2 (mu-p) sum (x-p) + n (mu-p)^2 (shifted: no cancellation when |mu| >> sigma)")
    statement = "sum_k (x_k - mu)^2 = sum_k (x_k - p)^2 - 2 (mu - p) sum_k (x_k - p) + n (mu - p)^2 for every p"

    def match(self, cx: Ctx, r: ir.Reduce, base: int) -> int | None:
        """mu, when r = sum_k square(base - mu) with mu a row vector (constant along k)."""
        sq = cx.node(r.x)
        if r.kind != "sum" or not (isinstance(sq, ir.Unary) and sq.op == "square"):
            return None
        sub = cx.node(sq.x)
        if isinstance(sub, ir.Binary) and sub.op == "sub" and sub.a == base and \
                row_vector(cx, sub.b, cx.node(base).axes, r.axis):
            return sub.b
        return None

    def apply(self, choice, step):
        if hasattr(choice, "expanded"):  # a GEMM's statistics; a region's are its site's (RegionSite.expanded)
            choice.expanded.add(step.at[0])

    def region_match(self, cx: Ctx, q: int, group: set[int], inline: set[int], reads_any) -> tuple | None:
        """(q, mu, base) where reduction q of a streamed row region is sum over its axis of
        square(base - mu), base streaming with the row (it reads no member of `group`), mu a row
        vector that does (the mean of the same pass): expanded, the variance streams in the pass
        that computes the mean (a LayerNorm over (c, h, w): one statistics pass, not two). None
        where q reads no member (a plain reduction) or the form differs."""
        qn = cx.node(q)
        if not group:
            return None
        sq = cx.node(qn.x) if isinstance(qn, ir.Reduce) and qn.kind == "sum" else None
        if not (isinstance(sq, ir.Unary) and sq.op == "square" and sq.id in inline):
            return None
        sub = cx.node(sq.x)
        if not (isinstance(sub, ir.Binary) and sub.op == "sub" and sub.id in inline):
            return None
        base, mu = sub.a, sub.b
        if self.match(cx, qn, base) != mu or base in group or reads_any(base, group):
            return None
        return (q, mu, base) if mu in group or reads_any(mu, group) else None

    def formula(self, g, at, params):
        S = sym()
        (r,) = at
        red = g.node(r)
        sub = g.node(g.node(red.x).x)
        k = S.sp.Symbol(red.axis + "'")
        leaves = S.Exprs(g)
        x, mu = leaves(sub.a).subs(S.sp.Symbol(red.axis), k), leaves(sub.b)
        K = S.size(red.axis)
        p = S.sp.Symbol("p")  # the pivot: the row's first element
        before = S.Sum((x - mu) ** 2, (k, 1, K))
        after = S.Sum((x - p) ** 2, (k, 1, K)) - 2 * (mu - p) * S.Sum(x - p, (k, 1, K)) + K * (mu - p) ** 2
        pivot = S.tex(x.subs(k, 1))
        return (f"{S.out(g, r)} = {S.tex(before)}",
                f"{S.out(g, r)} = {S.tex(after)}" + r"\quad\text{(} p = %s \text{: the row's first element)}" % pivot)

    def check(self) -> bool:
        """3 terms, any pivot p: sum (x - mu)^2 = sum (x - p)^2 - 2 (mu - p) sum (x - p) + n (mu - p)^2
        (p = 0 is the unshifted expansion sum x^2 - 2 mu sum x + n mu^2)."""
        S = sym()
        xs = [S.X[0, k] for k in range(3)]
        p = S.sp.Symbol("p", real=True)
        d = S.MU[0] - p
        rhs = sum((x - p) ** 2 for x in xs) - 2 * d * sum(x - p for x in xs) + len(xs) * d ** 2
        return S.zero(sum((x - S.MU[0]) ** 2 for x in xs) - rhs)


class StreamStats(Rule):
    name = "stream_stats"
    theorem = "LeanTile.sum_split_range"
    lean_file = "StreamStats.lean"
    pattern = "row sums over the contraction axis of elementwise functions of X"
    rewrite = "accumulate them block by block while the GEMM streams the axis (or in their own kernel)"
    statement = "a sum over a range split into consecutive tiles is the sum of the tile sums"
    params = {"mode": "where the row statistics are computed"}

    def match(self, cx: Ctx, site: GemmSite) -> tuple[list[int], list[int]] | None:
        """(direct sums, expandable variances) under the site's pullout vectors: every
        reduction they need is a sum over the GEMM's contraction axis of a unary chain of its
        LHS, or a variance variance_expand turns into such sums. None (refused) otherwise."""
        anc = row_ancestors(cx, [p.vec for p in row_peels(site.peels)], site.axis)
        direct, expand = [], []
        for i in anc:
            n = cx.node(i)
            ok = True
            if isinstance(n, ir.Input) and i != site.base:
                ok = False  # a row vector reading another input: leave it to its own kernel
            elif isinstance(n, ir.Reduce):
                if n.axis == site.axis and n.kind == "sum" and unary_chain(cx, n.x, site.base) is not None:
                    direct.append(i)
                elif n.axis == site.axis and VARIANCE.match(cx, n, site.base) is not None:
                    expand.append(i)
                else:
                    ok = False
            if not ok:
                self.refuse(cx, [p.vec for p in row_peels(site.peels)], "the pulled-out row vectors need more than sums "
                            "of the GEMM's LHS over its contraction axis (another input, another axis or a max): "
                            "their own kernels compute them")
                return None
        return direct, expand

    def apply(self, choice, step):
        choice.stats = step.params["mode"]

    def formula(self, g, at, params):
        S = sym()
        sp, tex = S.sp, S.tex
        befores, afters = [], []
        j, B = sp.Symbol("j"), sp.Symbol("B")
        for r in at:
            red = g.node(r)
            sq = g.node(red.x)
            if isinstance(sq, ir.Unary) and sq.op == "square" and g.node(sq.x).op == "sub":
                # an expanded variance (variance_expand): the streamed sum is sum (x - p)^2
                k = sp.Symbol(red.axis + "'")
                body = (S.Exprs(g).leaf(g.node(sq.x).a).subs(sp.Symbol(red.axis), k) - sp.Symbol("p")) ** 2
                hi, label = S.size(red.axis), tex(S.Sum(body, (k, 1, S.size(red.axis))))
            else:
                full = S.Exprs(g, inline={r} | _chain(g, red.x))(r)
                body, (k, _, hi) = full.function, full.limits[0]
                label = S.out(g, r)
            # nested by hand: sympy would print Sum(Sum(...)) as one sum over a cramped \substack
            tiled = r"\sum_{j=0}^{%s} %s" % (tex(sp.ceiling(hi / B) - 1), tex(S.Sum(body, (k, j * B + 1, j * B + B))))
            whole = tex(S.Sum(body, (k, 1, hi)))
            befores.append(f"{label} = {whole}" if label != whole else label)
            afters.append(f"{label} = {tiled}")
        how = "in the GEMM's loop" if params.get("mode") == "fused" else "in a row-statistics kernel"
        return r" \qquad ".join(befores), r" \qquad ".join(afters) + r"\quad\text{(tiles of } B \text{, %s)}" % how

    def check(self) -> bool:
        """7 terms split into tiles of 2, 3 and 5: sums and sums of squares of the tiles add up."""
        S = sym()
        xs = S.sp.symbols("a0:7", real=True)
        for b in (2, 3, 5):
            tiles = [xs[i:i + b] for i in range(0, len(xs), b)]
            if not (S.zero(sum(sum(t) for t in tiles) - sum(xs))
                    and S.zero(sum(sum(x**2 for x in t) for t in tiles) - sum(x**2 for x in xs))):
                return False
        return True


def _chain(g, i) -> set[int]:
    """The elementwise nodes under a reduction, down to (not including) inputs and matmuls."""
    out, stack = set(), [i]
    while stack:
        n = g.node(stack.pop())
        if isinstance(n, (ir.Unary, ir.Binary, ir.Cast)) and n.id not in out:
            out.add(n.id)
            stack.extend(a for a in n.args() if isinstance(g.node(a), (ir.Unary, ir.Binary, ir.Cast)))
    return out


VARIANCE, STATS = VarianceExpand(), StreamStats()
