"""The rule fuse_pool_epilogue: a reduction over a split axis of a GEMM's output (max or average
pooling written as y[b, n, p] = X W, W [k, n, p] or nn.Linear's [n, p, k], then max or mean over p)
in the GEMM's epilogue.

Why: unfused, the GEMM tiles its columns along p (the last axis of its weight, 2 positions
padded to a 128-column tile: the tensor cores did 64x the work) and stores y for a second
kernel to reduce (H200, 128 x 512 x 128 x 2: 0.0095 ms against torch.compile's 0.0042).

How: the weight's axes (n, p) are one column dimension of the GEMM's tiles (Kernel.packed; the
weight is read through its 2-D view [k, n * p] or [n * p, k], one rectangle per k step),
a tile holds every p of block_n / P positions of n, so each pooled value is reduced where its
P products are, in the epilogue (a pool of 2 over tensor cores from the pair each thread
holds in registers, plan.pooled_in_registers; larger pools through a shared copy of the
accumulator: emit.reductions.pool_reduce), and only the pooled result is stored.
Lemma (LeanTile.pool_epilogue_eval, Rules/PoolEpilogue.lean): a reduction along an axis reads
the reduced tensor only at the positions that differ from the output position along that axis,
which one tile holds; and the 2-D view's column n * P + p is (n, p).
"""
from __future__ import annotations

from ... import ir
from ..context import Ctx
from .base import Rule, sym

# pools of 2..POOL_MAX positions: a 64-column tile (the narrowest block_n the shape's defaults
# give) still holds two of them, so n keeps a tile of its own (a block of 1 would
# make it a batch axis, off chip); powers of two divide every block_n the search tries
POOL_MAX = 32


class PoolEpilogue(Rule):
    name = "fuse_pool_epilogue"
    theorem = "LeanTile.pool_epilogue_eval"
    lean_file = "PoolEpilogue.lean"
    pattern = "a sum or max over the product's innermost axis, split from a weight axis, of a GEMM or its epilogue"
    rewrite = "the weight's (n, p) as one column tile, the pool reduced in the GEMM's epilogue"
    statement = ("a reduction along an axis reads the reduced tensor only along that axis, so a tile "
                 "holding every position of it reduces it alone; column n P + p of the 2-D view is (n, p)")

    def match(self, cx: Ctx, matmuls: list[int], epilogue: list[int]) -> int | None:
        """The reduce a GEMM epilogue pools (rules.gemm.gemm_sites adds the elementwise nodes
        over its result), or None with the refusal recorded. Side conditions: one matmul whose
        weight has axes (n, p) consecutively, as its output ends with them, p of 2..POOL_MAX
        positions (a power of two), reduced by exactly one node, and nothing before the reduce needed outside the kernel (stored, it would be a
        packed tile of its own)."""
        if len(matmuls) != 1:
            return None
        mm = cx.node(matmuls[0])
        w, x = cx.node(mm.b), cx.node(mm.a)
        inside = {mm.id, *epilogue}
        reduces = sorted({u for i in inside for u in cx.users[i] if isinstance(cx.node(u), ir.Reduce)})
        if not reduces:
            return None
        r = cx.node(reduces[0])
        p = r.axis
        if len(mm.axes) < 2 or mm.axes[-1] != p or p not in w.axes or w.axes.index(p) == 0:
            return None  # not a pool of the product's innermost axis from the weight: nothing to say
        q = mm.axes[-2]
        P = cx.axes[p]
        why = None
        at = w.axes.index(p)
        if w.axes[at - 1] != q or q in x.axes or p in x.axes or mm.axis_b in (q, p):
            why = f"the weight's axes ({q}, {p}) are not consecutive in it, as in the output, of the weight alone"
        elif not (2 <= P <= POOL_MAX and P & (P - 1) == 0):
            why = f"{p} has {P} positions: a pooled tile takes 2..{POOL_MAX}, a power of two"
        elif len(reduces) > 1:
            why = f"{len(reduces)} reductions read the product: one pools in the epilogue"
        else:
            outs = set(cx.g.outputs.values())
            needed = [i for i in sorted(inside) if i in outs or any(u not in inside and u != r.id for u in cx.users[i])]
            if needed:
                why = (f"{cx.value(needed[0])} is needed outside the GEMM (an output or another kernel's input): "
                       "stored, it would be a pooled tile of its own")
        if why:
            self.refuse(cx, [mm.id, r.id], why)
            return None
        return r.id

    def apply(self, choice, step):
        choice.pool = step.at[0]
        choice.epilogue = sorted({*choice.epilogue, *step.at})

    def formula(self, g, at, params):
        S = sym()
        r = g.node(at[0])
        before = f"{S.out(g, r.id)} = {S.tex(S.Exprs(g, inline=set())(r.id))}"
        after = f"{S.out(g, r.id)} = {S.tex(S.Exprs(g, inline={r.x})(r.id))}"
        return before, after + r"\quad\text{(reduced in the GEMM's epilogue: every %s of a tile on chip)}" % S.tex(
            S.sp.Symbol(r.axis))

    def check(self) -> bool:
        """max and sum over p of (X W)[n, p] from the tile of columns n P + p of the 2-D view W
        [k, n P + p] equal the reductions of the 3-D product."""
        S = sym()
        sp = S.sp
        K, N, P = 2, 2, 2
        X = sp.Matrix(1, K, lambda i, k: sp.Symbol(f"x{k}", real=True))
        W3 = {(k, n, p): sp.Symbol(f"w{k}{n}{p}", real=True) for k in range(K) for n in range(N) for p in range(P)}
        W2 = sp.Matrix(K, N * P, lambda k, c: W3[(k, c // P, c % P)])
        tile = X * W2  # the GEMM on the 2-D view, one row of columns n P + p
        for n in range(N):
            y = [sum(X[0, k] * W3[(k, n, p)] for k in range(K)) for p in range(P)]
            got = [tile[0, n * P + p] for p in range(P)]
            if not S.zero(sum(got) - sum(y)) or not S.zero(sp.Max(*got) - sp.Max(*y)):
                return False
        return True


POOL = PoolEpilogue()
