"""The rule fuse_row_epilogue: reductions over a GEMM's column axis that one output tile holds
whole (a GroupNorm of a projection's 128 channels per group, a LayerNorm over a narrow output),
and what follows them, in the GEMM's epilogue.

Why: unfused, the GEMM stores its float32 product for a row kernel to read back (issue 49:
GroupNorm after a GEMM, 128 x 512 x 8 x 128, two kernels and 0.8 MiB against torch.compile's
0.3). A tile whose column block covers the whole axis already holds every value each row's
reductions read.

How: the GEMM's column tile is fixed to the axis's padded extent (rules.base.padded: a power
of two, 16..MAX_COLUMNS; positions past the end are masked out of the reductions), the
reductions run over the accumulator's rows (T.reduce_sum / T.reduce_max over its column
dimension, as a flash kernel reduces its scores), and only what the graph needs is stored.
Never split over k (a slice holds a partial product, not the values the norm reads).
Lemma (LeanTile.row_epilogue_eval, Rules/RowEpilogue.lean): a reduction along an axis at an
output position reads the reduced tensor only along that axis through the position, so two
tensors that agree there (the graph's product and the CTA's tile) reduce alike, and so does any
elementwise function of such reductions and of the tile.
"""
from __future__ import annotations

from ... import ir
from ..context import Ctx
from .base import Rule, padded, sym

# the widest column tile (the GEMM's block_n the search tries up to): an accumulator of
# 128 x 256 float32 is 128 registers a thread at 256 threads, the epilogue's temporaries more
MAX_COLUMNS = 256
MIN_COLUMNS = 16  # the narrowest tensor-core tile TileLang's GEMMs take along n


class RowEpilogue(Rule):
    name = "fuse_row_epilogue"
    theorem = "LeanTile.row_epilogue_eval"
    lean_file = "RowEpilogue.lean"
    pattern = "a sum or max over a GEMM's column axis (from the weight alone, at most 256 positions), and what reads it"
    rewrite = "one column tile holds the whole axis; the reductions and what follows them in the GEMM's epilogue"
    statement = ("a reduction along an axis reads the reduced tensor only along that axis through the output "
                 "position, so a tile holding every position of it reduces it alone, and elementwise maps of "
                 "such reductions and the tile are the graph's")

    def match(self, cx: Ctx, matmuls: list[int], epilogue: list[int], walk) -> tuple[int, ...]:
        """The reductions over the GEMM's column axis whose operand the epilogue computes and
        the elementwise nodes after them (rules.gemm.EPILOGUE's walk, again after each round of
        reductions; `walk` is its match), in id order; () with the refusal recorded where a side
        condition fails.
        Side conditions: one matmul; its column axis (the last output axis, the weight's alone)
        of MIN_COLUMNS..MAX_COLUMNS padded positions. Reductions of fused values over other axes
        stay the region rules' (they read what the GEMM stores)."""
        if len(matmuls) != 1:
            return ()
        mm = cx.node(matmuls[0])
        x = cx.node(mm.a)
        n = mm.axes[-1] if mm.axes else None
        have = {mm.id, *epilogue}
        reduces = sorted({u for i in have for u in cx.users[i] if isinstance(cx.node(u), ir.Reduce)})
        if not reduces or n is None:
            return ()
        if not any(cx.node(r).axis == n for r in reduces):
            return ()  # reductions over the rows or a batch axis: the region rules' (a column sum)
        if n in x.axes or n == mm.axis_b:
            self.refuse(cx, [mm.id, reduces[0]], f"the product's last axis {n} is not its weight's alone "
                        "(no column tile holds it)")
            return ()
        cols = padded(cx.axes[n])
        if not MIN_COLUMNS <= cols <= MAX_COLUMNS:
            self.refuse(cx, [mm.id, reduces[0]], f"{n} has {cx.axes[n]} positions: one column tile holds "
                        f"{MIN_COLUMNS}..{MAX_COLUMNS}")
            return ()
        fused: list[int] = []
        while True:
            new = sorted({u for i in have for u in cx.users[i] if u not in have
                          and isinstance(cx.node(u), ir.Reduce) and cx.node(u).axis == n})
            if not new:
                break
            have.update(new)
            fused += new
            after = [i for i in walk(cx, [mm.id, *sorted(have - {mm.id})]) if i not in have]
            have.update(after)
            fused += after
        return tuple(sorted(fused))

    def apply(self, choice, step):
        choice.rows = tuple(step.at)
        choice.epilogue = sorted({*choice.epilogue, *step.at})

    def formula(self, g, at, params):
        S = sym()
        r = next(i for i in at if isinstance(g.node(i), ir.Reduce))
        last = max(at)
        before = f"{S.out(g, r)} = {S.tex(S.Exprs(g, inline=set())(r))}"
        after = f"{S.out(g, last)} = {S.tex(S.Exprs(g, inline=set(at))(last))}"
        return before, after + r"\quad\text{(in the GEMM's epilogue: every %s of a row in one tile)}" % S.tex(
            S.sp.Symbol(g.node(r).axis))

    def check(self) -> bool:
        """A LayerNorm over the columns of X W equals the one the epilogue computes from a column
        tile padded past the axis's end (the padded products are 0: the weight's zero-filled
        loads), its reductions masked to the real columns; unmasked, the padding would shift the
        mean and the variance (so the check fails without the mask)."""
        S = sym()
        sp = S.sp
        prod = S.X * S.W
        rows, cols = prod.shape

        def norm(row, keep):
            n = sum(keep)
            mu = sum(v * k for v, k in zip(row, keep)) / n
            var = sum((v - mu) ** 2 * k for v, k in zip(row, keep)) / n
            return [(v - mu) / sp.sqrt(var + 1) for v in row]
        for i in range(rows):
            row = [prod[i, j] for j in range(cols)]
            whole = norm(row, [1] * cols)
            tile = norm(row + [0], [1] * cols + [0])[:cols]  # one padded column, masked
            if any(not S.zero(a - b) for a, b in zip(tile, whole)):
                return False
        unmasked = norm([prod[0, j] for j in range(cols)] + [0], [1] * (cols + 1))[:cols]
        return not S.zero(unmasked[0] - norm([prod[0, j] for j in range(cols)], [1] * cols)[0])

ROWS = RowEpilogue()
