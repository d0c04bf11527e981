"""The GEMM-site rules dual_gemm and fuse_elementwise, and the GEMM sites with their options.

A GEMM site is one matmul, or two of the same (peeled) LHS over the same axis (dual_gemm),
with the pullouts of its LHS (pullout.py), the row statistics they need (stats.py) and the
elementwise epilogue computable from its tiles (fuse_elementwise). Each option of a site is
one choice of where statistics and column sums are computed; its steps say it all (the
engine builds the kernel choice from them, rule by rule).
"""
from __future__ import annotations

import heapq
import itertools

from ... import ir
from ..context import Ctx
from ..sites import ELEMENTWISE, GemmSite, depends_on, row_peels
from .base import Option, Rule, sym
from .pool import POOL
from .row_epilogue import ROWS
from .pullout import GAIN, MEAN, SCALE, peel_lhs
from .stats import STATS, VARIANCE


class DualGemm(Rule):
    name = "dual_gemm"
    theorem = "LeanTile.dual_gemm_shared_lhs"
    lean_file = "DualGemm.lean"
    pattern = "two matmuls of the same LHS over the same axis"
    rewrite = "one loop loads the LHS tile once and feeds both products"
    statement = "the fused loop over k computes both contractions at once"

    def pairs(self, cx: Ctx, first: int, second: int) -> bool:
        """Whether matmul `second` may share `first`'s loop: one loop computes both products,
        so both operands must be ready before it (the second must not read the first)."""
        if depends_on(cx, second, first):
            self.refuse(cx, [first, second], f"matmul {second} reads matmul {first} (its weight depends on "
                        "the first product): two loops")
            return False
        return True

    def apply(self, choice, step):
        choice.dual = True

    def formula(self, g, at, params):
        S = sym()
        e = S.Exprs(g, inline=set(at))
        before = r" \qquad ".join(f"{S.out(g, i)} = {S.tex(e(i))}" for i in at)
        a, b = (g.node(i) for i in at)
        k = S.sp.Symbol(a.axis_a + "'")
        leaves = S.Exprs(g)
        x = leaves(a.a).subs(S.sp.Symbol(a.axis_a), k)
        w1, w2 = (leaves(n.b).subs(S.sp.Symbol(n.axis_b), k) for n in (a, b))
        after = r"\left(%s, %s\right) = \sum_{%s=1}^{%s} %s \left(%s, %s\right)" % (
            S.out(g, a.id), S.out(g, b.id), S.tex(k), S.tex(S.size(a.axis_a)), S.tex(x), S.tex(w1), S.tex(w2))
        return before, after + r"\quad\text{(one loop, one load of } %s\text{)}" % S.tex(x)

    def check(self) -> bool:
        """One loop over k accumulating X W and X U gives both products."""
        S = sym()
        U = S.sp.Matrix(3, 2, lambda k, j: S.sp.Symbol(f"u{k}{j}", real=True))
        a, b = S.sp.zeros(2, 2), S.sp.zeros(2, 2)
        for k in range(3):
            a += S.X[:, k] * S.W[k, :]
            b += S.X[:, k] * U[k, :]
        return (a - S.X * S.W).expand() == S.sp.zeros(2, 2) and (b - S.X * U).expand() == S.sp.zeros(2, 2)


class FuseElementwise(Rule):
    name = "fuse_elementwise"
    theorem = "LeanTile.fuse_elementwise_eval"
    lean_file = "FuseElementwise.lean"
    pattern = "elementwise nodes whose inputs are already in registers"
    rewrite = "evaluate them in the producing kernel's epilogue, no global intermediate"
    statement = "evaluating a composition of elementwise maps pointwise equals composing the evaluated maps"

    def match(self, cx: Ctx, matmuls: list[int]) -> list[int]:
        """Elementwise nodes computable from the matmul tiles, constants, small inputs, what the
        tile computes from its coordinates, constants and inputs alone (tile_computable: a triu
        mask, a one-hot of labels, a loss's d_out / m) and the products of GEMMs before it
        (earlier_product), in id order. Only users of what is already
        fused can join, so the walk follows users (a heap keeps id order) instead of scanning every
        later node: linear in what it visits."""
        out_axes = set(cx.node(matmuls[0]).axes)
        have = set(matmuls)
        fused = []
        free: dict[int, bool] = {}
        heap = sorted({u for m in matmuls for u in cx.users[m]})
        queued = set(heap)
        while heap:
            n = cx.node(heapq.heappop(heap))
            if n.id in have or not isinstance(n, ELEMENTWISE) or not set(n.axes) <= out_axes:
                continue
            ok = True
            cones = []
            for a in n.args():
                if a in have or cx.literal(a):
                    continue
                if tile_computable(cx, a, out_axes, free):  # (an input over output axes: an empty cone, a load)
                    cones.append(a)
                    continue
                if earlier_product(cx, a, matmuls, out_axes):
                    continue
                ok = False
            if ok and any(a in have for a in n.args()):
                for c in cones:  # recomputed here from coordinates and inputs, in id order before n
                    cone = [j for j in _cone(cx, c) if j not in have]
                    have.update(cone)
                    fused.extend(cone)
                have.add(n.id)
                fused.append(n.id)
                for u in cx.users[n.id]:
                    if u not in queued:
                        queued.add(u)
                        heapq.heappush(heap, u)
        return sorted(fused)

    def apply(self, choice, step):
        choice.epilogue = list(step.at)

    def formula(self, g, at, params):
        S = sym()
        last = max(at)
        before = r" \qquad ".join(f"{S.out(g, i)} = {S.tex(S.Exprs(g, inline={i})(i))}" for i in sorted(at))
        after = f"{S.out(g, last)} = {S.tex(S.Exprs(g, inline=set(at))(last))}"
        return before, after + r"\quad\text{(one epilogue, no global intermediate)}"

    def check(self) -> bool:
        """silu(3x) evaluated as one composed map equals composing the maps."""
        S = sym()
        x = S.sp.Symbol("x", real=True)
        silu = S.sp.Lambda(x, x / (1 + S.sp.exp(-x)))
        triple = S.sp.Lambda(x, 3 * x)
        return S.zero(silu(triple(x)) - (x / (1 + S.sp.exp(-x))).subs(x, 3 * x))


def earlier_product(cx: Ctx, i: int, matmuls: list[int], out_axes: set) -> bool:
    """Whether node i is another GEMM's product over the output's axes, computed before this
    site's (a lower id: it never reads them). Its own kernel stores it, and this epilogue loads
    its tile: the gradient of an input two GEMMs read, dX = dG W_g^T + dU W_u^T, or a sum of
    products x W + h U, adds in the second GEMM's epilogue instead of a kernel of its own (on the
    H200 that add over 4096 x 4096 was 0.117 ms of SwiGLU's training step; torch.compile's
    cuBLAS accumulates into the first product likewise). Only the later site fuses it: two sites
    never claim one node."""
    n = cx.node(i)
    return isinstance(n, ir.Matmul) and i < min(matmuls) and set(n.axes) <= out_axes


def tile_computable(cx: Ctx, i: int, out_axes: set, memo: dict[int, bool]) -> bool:
    """Whether an epilogue computes node i from its tile's coordinates, constants and inputs over
    output axes alone: an iota over an output axis, or an elementwise node over output axes whose
    arguments are such nodes, constants or such inputs (positions compared: a triu or band mask;
    a one-hot of labels, iota(d) == label[m]; a loss's scale d_out / m). The backward of a loss
    reduced to a scalar is made of them: unfused, cross-entropy's gradient stopped at
    exp(logits - lse) and a kernel of its own loaded that back to scale it and subtract the
    one-hot (two round trips of [tokens, vocabulary] for the LM head). Not a graph output (an
    epilogue does not store it: another kernel that reads it computes it again, assemble.py)."""
    if i in memo:
        return memo[i]
    n = cx.node(i)
    if isinstance(n, ir.Input):
        memo[i] = set(n.axes) <= out_axes
    elif cx.literal(i) or i in cx.g.outputs.values() or not isinstance(n, ELEMENTWISE) or not set(n.axes) <= out_axes:
        memo[i] = bool(cx.literal(i))
    elif isinstance(n, ir.Iota):
        memo[i] = True
    else:
        memo[i] = all(cx.literal(a) or tile_computable(cx, a, out_axes, memo) for a in n.args())
    return memo[i]


def _cone(cx: Ctx, i: int) -> list[int]:
    """The computed nodes i is made of (i included; no constants nor inputs), in id order."""
    seen, stack = set(), [i]
    while stack:
        j = stack.pop()
        if j not in seen and not cx.literal(j) and not isinstance(cx.node(j), ir.Input):
            seen.add(j)
            stack += list(cx.node(j).args())
    return sorted(seen)


def coordinate_nodes(cx: Ctx, epilogue: list[int], matmuls: list[int]) -> set[int]:
    """The nodes of a GEMM epilogue that read no matmul (their cone is coordinates, constants and inputs):
    recomputed in every kernel that needs them, never stored by the GEMM."""
    reads = set(matmuls)
    for i in sorted(epilogue):
        if any(a in reads for a in cx.node(i).args()):
            reads.add(i)
    return set(epilogue) - reads


def left_to_reader(cx: Ctx, epilogue: list[int], matmuls: list[int], claimed: set[int],
                   coordinates: frozenset[int] = frozenset()) -> set[int]:
    """Epilogue nodes the GEMM should not compute: a node that is no graph output, read by one
    node outside the epilogue (a reduction or an elementwise node no pattern claimed: a region
    kernel's) and made only of this GEMM's products, inputs, constants and `coordinates` (what
    the tile computes from coordinates and inputs alone: any reader computes them too), where
    each product it reads is stored anyway (an output, or read outside the epilogue by another
    node). Stored by the GEMM it costs a store there and a load in its reader; left residual, its
    reader computes it from the product and inputs it loads (RMSNorm's backward stored dY W^T and
    (dY W^T) X from one GEMM, and its row kernel loaded both and X: the second is one multiply
    there; cross-entropy's picked logit, sum(logits * onehot), had its [tokens, vocabulary]
    product stored for the row kernel that sums it)."""
    outs, inside = set(cx.outputs.values()), set(epilogue)
    mms = set(matmuls)
    left = set()
    for i in epilogue:
        users = cx.users[i]
        if i in outs or len(users) != 1 or users[0] in inside or users[0] in claimed:
            continue
        if not isinstance(cx.node(users[0]), (ir.Reduce, *ELEMENTWISE)):
            continue
        args = [a for a in cx.node(i).args() if not cx.literal(a)]
        if not any(a in mms for a in args) or \
                not all(a in mms or a in coordinates or isinstance(cx.node(a), ir.Input) for a in args):
            continue
        if all(a in outs or any(u != i and u not in inside for u in cx.users[a]) for a in args if a in mms):
            left.add(i)
    return left


DUAL, EPILOGUE = DualGemm(), FuseElementwise()
# left_to_reader applied (a switch for measuring it against the epilogue that stores them)
LEAVE_TO_READERS = True


def gemm_sites(cx: Ctx, claimed: set[int], peel: bool = True) -> list[GemmSite]:
    """Every matmul not in `claimed` (attention), grouped by shared peeled LHS (dual_gemm),
    with the statistics its pullouts need and its epilogue. Without `peel` every GEMM reads
    its LHS as the graph computes it (a norm before it is then a region of its own)."""
    groups: dict[tuple, GemmSite] = {}
    for mm in cx.nodes:
        if not isinstance(mm, ir.Matmul) or mm.id in claimed:
            continue
        base, peels = peel_lhs(cx, mm) if peel else (mm.a, [])
        key = (base, mm.axis_a, tuple(peels), mm.axes)
        first = groups.get(key)
        if first is not None and len(first.matmuls) == 1 and DUAL.pairs(cx, first.matmuls[0], mm.id):
            first.matmuls.append(mm.id)
        else:
            groups[key if first is None else key + (mm.id,)] = GemmSite([mm.id], base, mm.axis_a, peels)
    sites = list(groups.values())
    for s in sites:
        st = STATS.match(cx, s) if row_peels(s.peels) else None
        if st:
            s.stat_reduces, s.expandable = st
        s.epilogue = EPILOGUE.match(cx, s.matmuls)
        s.coordinates = frozenset(coordinate_nodes(cx, s.epilogue, s.matmuls))
        r = POOL.match(cx, s.matmuls, s.epilogue)
        s.pool = () if r is None else (r, *EPILOGUE.match(cx, [r]))  # the pool, then its own epilogue
        if not s.pool:  # (one matmul only: ROWS.match)
            s.rows = ROWS.match(cx, s.matmuls, s.epilogue, EPILOGUE.match)
        if LEAVE_TO_READERS and not s.pool and not s.rows:
            left = left_to_reader(cx, s.epilogue, s.matmuls, claimed, s.coordinates)
            if left:  # and the coordinate nodes only they read (their readers compute them)
                kept = [i for i in s.epilogue if i not in left]
                needed = set(kept) - s.coordinates
                for i in sorted(kept, reverse=True):
                    if i in needed:
                        needed.update(cx.node(i).args())
                s.epilogue = [i for i in kept if i in needed]
                s.coordinates = frozenset(s.coordinates & needed)
    return sites


def gemm_options(s: GemmSite) -> list[Option]:
    """The ways to fuse one GEMM site, best guess first."""
    mean = any(p.kind == "mean" for p in s.peels)
    stats_ok = bool(s.stat_reduces or s.expandable)
    stat_modes = ["separate", "fused"] if stats_ok else [None]
    if mean:
        # fused first (one kernel); a separate statistics kernel storing mu and the scale is
        # the alternative, which lifts the row reductions out of the GEMM's mainloop
        stat_modes = ["fused", "separate"] if stats_ok else [None]
    col_modes = ["streamed", "precomputed"] if mean else [None]
    # a gain applied to the LHS's tile each k step (one kernel), after the options that fold it into
    # the weight (a map kernel first; measured so far): not with a mean pullout (its column sums are
    # the gained weight's)
    gain_modes = [None, "operand"] if any(p.kind == "gain" for p in s.peels) and not mean else [None]
    out = []
    for gain, stats, col in itertools.product(gain_modes, stat_modes, col_modes):
        steps = [SCALE.step([p.node, *s.matmuls]) if p.kind == "scale" else GAIN.step([p.node, *s.matmuls], into=gain)
                 if p.kind == "gain" else MEAN.step([p.node, *s.matmuls], colsum=col) for p in s.peels]
        if stats:
            steps += [VARIANCE.step([r]) for r in s.expandable]
            steps.append(STATS.step([*s.stat_reduces, *s.expandable], mode=stats))
        if len(s.matmuls) == 2:
            steps.append(DUAL.step(s.matmuls))
        if s.epilogue:
            steps.append(EPILOGUE.step(s.epilogue))
        label = "+".join(x for x in (f"stats_{stats}" if stats else "", f"colsum_{col}" if col else "",
                                     f"gain_{gain}" if gain else "") if x)
        if s.rows:  # normalised in the epilogue (the region rules leave the rows to it: engine._claimed)
            out.append(Option("+".join(x for x in (label, "rows") if x), (*steps, ROWS.step(s.rows)), s,
                              ROWS.name, (s.matmuls[0], s.rows[0])))
        elif s.pool:  # pooled in the epilogue (the region rules then leave the pool to it: engine._claimed)
            out.append(Option("+".join(x for x in (label, "pool") if x), (*steps, POOL.step(s.pool)), s,
                              POOL.name, (s.matmuls[0], s.pool[0])))
        else:
            out.append(Option(label, tuple(steps), s, steps[0].rule, tuple(s.matmuls)))
    return out
