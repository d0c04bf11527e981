"""The grouped-query rule: pack_query_group.

Grouped-query attention (GQA, MQA) gives several query heads one K and V: Q[h_kv, g, t_q, d]
against K[h_kv, t_kv, d], the group axis g on Q alone. Tiled one query head per CTA, every head
of a group streams the same K and V blocks again. Packed, a CTA's block_m rows are the g heads
of one group (for one query: decode; with grids.PACK_QUERY_ROWS also g heads times block_m / g
query positions): each K and V block is loaded once for the whole group, and a decode step fills
the GEMM's rows with heads instead of padding. The online softmax keeps one state per row and every row of the tile reads
the same key blocks, so folding the packed tile is folding each row on its own
(LeanTile.run_packed_rows): only the layout changes.
"""
from __future__ import annotations

from .. import grids
from ..context import Ctx
from ..sites import FlashSite
from .base import Rule, sym




class PackQueryGroup(Rule):
    name = "pack_query_group"
    theorem = "LeanTile.run_packed_rows"
    lean_file = "PackRows.lean"
    pattern = "flash attention whose Q has a head axis K and V lack (grouped-query or multi-query attention)"
    rewrite = ("one CTA serves the query heads of a group: its rows are heads x query positions, each K and V "
               "block is loaded once for all of them")
    statement = ("folding a tile of rows that read the same key blocks, each row with its own online-softmax "
                 "state, gives every row the state of its own fold")
    params = {"group": "Q's axis of query heads that share one K and V"}

    def match(self, cx: Ctx, s: FlashSite) -> str | None:
        """Q's group axis, where Q has exactly one axis besides the query axis that K lacks: with
        one query (decode) wherever it sits (the heads are the rows); with more, only with
        grids.PACK_QUERY_ROWS and where it sits just before the query axis in Q, the scores and the
        output (a packed row is one dimension of each). Else None (a refusal says why, except
        where the queries fill the rows anyway)."""
        qk, pv = cx.node(s.qk), cx.node(s.pv)
        q, k = cx.node(qk.a), cx.node(qk.b)
        extra = [a for a in q.axes if a not in k.axes and a != s.row and a != s.axis and a in qk.axes]
        if not extra:
            return None
        at = [s.qk, s.pv]
        if len(extra) > 1:
            self.refuse(cx, at, f"Q has {len(extra)} head axes K lacks ({', '.join(extra)}): one is packed at most")
            return None
        g = extra[0]
        if cx.axes[s.row] == 1:
            return g
        if not grids.PACK_QUERY_ROWS:  # a choice, not a refusal: the queries of one head fill the rows
            return None
        for name, axes in (("Q", q.axes), ("the scores", qk.axes), ("the output", pv.axes)):
            i = list(axes).index(g) if g in axes else -1
            if i < 0 or i + 1 >= len(axes) or axes[i + 1] != s.row:
                self.refuse(cx, at, f"the head axis {g!r} is not just before the query axis {s.row!r} in {name} "
                            f"({list(axes)}): the heads are tiled one per CTA")
                return None
        return g

    def apply(self, choice, step):
        choice.pack = True

    def formula(self, g, at, params):
        S = sym()
        before = f"{S.out(g, at[-1])} = {S.tex(S.Exprs(g)(at[-1]))}"
        grp = S.tex_text(params.get("group", "g"))
        after = (r"\text{one CTA per K/V group: its rows are the %s heads, each row folded on its own}" % grp)
        return before, after

    def check(self) -> bool:
        """Two rows (heads of a group) with their own scores, one packed state (m, l, o) per
        row, fold two one-key tiles whose values both rows share, with any running max M of the
        second tile: each row's o / l is its own softmax-weighted values."""
        S = sym()
        sp = S.sp
        v = sp.symbols("v1:3", real=True)
        M = sp.Symbol("M", real=True)
        ok = True
        for a, b in ((S.s1, S.s2), (S.s3, S.s4)):  # row 1's and row 2's scores of keys 1, 2
            m, l, o = a, sp.Integer(1), v[0]  # after the first tile (m = its score)
            l, o = l * sp.exp(m - M) + sp.exp(b - M), o * sp.exp(m - M) + sp.exp(b - M) * v[1]
            direct = (sp.exp(a) * v[0] + sp.exp(b) * v[1]) / (sp.exp(a) + sp.exp(b))
            ok = ok and S.zero(o / l - direct)
        return ok


PACK = PackQueryGroup()
