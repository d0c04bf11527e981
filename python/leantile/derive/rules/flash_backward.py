"""The rule flash_backward: attention's backward without its [queries, keys] matrices in memory.

Reverse mode (leantile.autodiff) writes attention's backward as the math says: the scores S =
Q K^T and their softmax P recomputed, dP = dO V^T, the row term D = sum_t dP P, dS = P (dP - D)
(then the score function's own cotangent: a scale, a mask's select), and dQ = dS K, dK = dS^T Q,
dV = P^T dO. Planned node by node that stores S, P, dP and dS in float32, [heads, t_q, t_kv]
each (gigabytes at 4096 tokens), over seven kernels.

The rule runs it in kernels that hold every [t_q, t_kv] value on chip, one tile at a time:
- statistics, where the forward's softmax max and sum are not read as saved values
  (saved_rows: exp(z - M) / L), one CTA per query tile streaming the keys: the running max m
  and sum l (online_softmax's state), and, where D is sum_t dP P rather than the forward's
  rowsum(dO O), D folded as the softmax-weighted sum of dP, rescaled as o is (D is
  online_softmax_ratio's o / l with dP for the values);
- dQ, one CTA per query tile streaming the keys: P = exp(c (s - m)) / l from the stored m and l,
  dP, dS, and dQ += dS K block by block;
- dK and dV, one CTA per key tile streaming the queries: the same tile transposed (keys as its
  rows), dV += P^T dO and dK += dS^T Q.
Each contraction over a streamed axis is a sum over its blocks (LeanTile.flash_backward_blocks);
P from the stored statistics is the softmax (LeanTile.softmax_eq_exp_div_sum); the recomputed
values are the graph's at every position (the score function is elementwise: fuse_elementwise).
Deterministic by default: dQ has a kernel of its own (option dq="atomic" adds it from the dK/dV
kernel as FlashAttention-2 does, one fewer pass over the keys: measured slower on an H200).
"""
from __future__ import annotations

import dataclasses
import math

from ... import ir
from ...plan import KeyBound
from ..context import Ctx
from ..sites import ELEMENTWISE, FlashBackwardSite, FlashSite, SoftmaxSite, depends_on
from .base import Option, Rule, sym
from .masks import SKIP, describe
from .softmax import EXP2, SHIFT, _scaled


def _mul_of(cx: Ctx, i: int, x: int) -> int | None:
    """The other operand of node i where i is mul(x, other) or mul(other, x), else None."""
    n = cx.node(i)
    if isinstance(n, ir.Binary) and n.op == "mul":
        if n.a == x:
            return n.b
        if n.b == x:
            return n.a
    return None


class FlashBackward(Rule):
    name = "flash_backward"
    theorem = "LeanTile.flash_backward_blocks"
    lean_file = "FlashBackward.lean"
    pattern = ("softmax(f(Q K^T)) recomputed; dP = dO V^T; D = sum_t dP P; dS = f'(P (dP - D)); "
               "dQ = dS K, dK = dS^T Q, dV = P^T dO")
    rewrite = ("a dQ kernel per query tile streaming the keys, a dK/dV kernel per key tile streaming the queries "
               "(P, dP and dS recomputed on each tile, never stored), from the forward's max and sum, or after a "
               "statistics kernel streaming the keys for them (and D, folded online, where the output is not read)")
    params = {"axis": "the softmax's axis (the keys)",
              "dq": "'atomic': dQ added into float32 sums by the dK/dV kernel's CTAs (else a dQ kernel of its own)"}
    statement = ("each product over a streamed axis is the sum of its blocks' products, in any order of blocks; "
                 "exp(c (s - m)) / l with the row's max m and sum l is the softmax; D = sum_t dP P is the online "
                 "fold's o / l with dP for the values")

    # -- where it applies
    def match(self, cx: Ctx, rows: list[SoftmaxSite]) -> list[FlashBackwardSite]:
        """The attention backward sites around the softmax rows `rows` (ONLINE's), and around the
        softmaxes computed from saved statistics (saved_rows)."""
        out = []
        for s, saved in [*((r, False) for r in rows), *((r, True) for r in saved_rows(cx))]:
            site = self._site(cx, s, saved)
            if isinstance(site, str):
                self.refuse(cx, [s.div], f"attention backward: {site}; computed node by node")
            elif site is not None:
                out.append(site)
        return out

    def _site(self, cx: Ctx, s: SoftmaxSite, saved: bool = False) -> FlashBackwardSite | str | None:
        us, t, P = cx.users, s.axis, s.div
        soft = [i for i in s.nodes if not (saved and i in (s.mx, s.sm))]  # (saved: the max and sum are leaves)
        tile_axes = cx.node(P).axes
        found = None
        for u in us[P]:  # dS0 = P (dP - D), dP a product over the values' axis
            other = _mul_of(cx, u, P)
            diff = cx.node(other) if other is not None else None
            if isinstance(diff, ir.Binary) and diff.op == "sub" and isinstance(cx.node(diff.a), ir.Matmul) \
                    and cx.node(diff.a).axes == tile_axes and len(us[diff.id]) == 1:
                found = (u, diff, diff.a, diff.b)
        if found is None:
            return None
        ds0, diff, dp, dsum = found  # (dS0 = P (dP - D): diff's one reader)
        D = cx.node(dsum)
        prod = D.x if isinstance(D, ir.Reduce) and D.kind == "sum" and D.axis == t else None
        if prod is not None and _mul_of(cx, prod, P) == dp and us[prod] == [dsum]:
            # D = sum_t dP P, computed here (the statistics kernel folds it online)
            if us[dsum] != [diff.id] or set(us[dp]) != {prod, diff.id}:
                return "D or dP is read elsewhere"
        elif t not in D.axes and set(D.axes) <= set(tile_axes) and not any(
                x < dsum and depends_on(cx, dsum, x) for x in (dp, P)):
            prod = None  # D read as it is (rowsum(dO O) from the forward's output: autodiff.back_row)
            if set(us[dp]) != {diff.id}:
                return f"dP (node {dp}) is read elsewhere"
        else:
            return None
        dpn = cx.node(dp)
        dO, V = cx.node(dpn.a), cx.node(dpn.b)
        if t in dO.axes or t not in V.axes or dpn.axis_a in tile_axes:
            return "dP is no product dO V^T over the values' axis"
        # the score function's cotangent: single-user elementwise nodes of the tile's axes from dS0
        ds, chain = ds0, []
        while len(us[ds]) == 1 and isinstance(cx.node(us[ds][0]), ELEMENTWISE) \
                and cx.node(us[ds][0]).axes == tile_axes:
            ds = us[ds][0]
            chain.append(ds)
        # the forward's score function, from the softmax's raw scores down to Q K^T, and what the
        # cotangent's chain reads beside it (a mask's positions, a soft-capping's tanh)
        tile = {*soft, diff.id, ds0, dp, *chain, *((prod, dsum) if prod is not None else ())}
        qk, leaves = None, ({dsum} if prod is None else set()) | ({s.mx, s.sm} if saved else set())
        stack = [s.src, *(a for i in chain for a in cx.node(i).args())]
        while stack:
            i = stack.pop()
            if i in tile or cx.literal(i) is not None:
                continue
            n = cx.node(i)
            if isinstance(n, ir.Matmul) and t in n.axes and n.axes == tile_axes:
                if qk is not None and qk != i:
                    return "the scores come from two matmuls"
                qk = i
                tile.add(i)
            elif isinstance(n, ELEMENTWISE) and set(n.axes) <= set(tile_axes):
                tile.add(i)
                stack += list(n.args())
            else:
                leaves.add(i)
        if qk is None:
            return None
        q, k = cx.node(cx.node(qk).a), cx.node(cx.node(qk).b)
        # the query axis: Q's last own axis (a GQA group's heads come before it: batch axes)
        row = next((a for a in reversed(tile_axes) if a in q.axes and a not in k.axes and a != t), None)
        if t in q.axes or t not in k.axes or row is None or row not in dO.axes:
            return "the scores are no Q K^T with the keys from K"
        for i in leaves:
            if not set(cx.node(i).axes) <= set(tile_axes):
                return f"node {i} ({cx.node(i).op}) has an axis the scores lack"
            if any(x < i and depends_on(cx, i, x) for x in (qk, P, dp)):
                return f"node {i} ({cx.node(i).op}) depends on the scores and is read outside the tile"
        # the products that read the tile: dQ = dS K, dK = dS^T Q, dV = P^T dO
        dq = dk = dv = None
        for u in us[ds]:
            m = cx.node(u)
            if isinstance(m, ir.Matmul) and m.a == ds and m.b == k.id and m.axis_a == t:
                dq = u
            elif isinstance(m, ir.Matmul) and m.a == ds and m.b == q.id and m.axis_a == row:
                dk = u
            else:
                return f"dS (node {ds}) is read by node {u} ({m.op}), no product dS K or dS^T Q"
        for u in us[P]:
            m = cx.node(u)
            if isinstance(m, ir.Matmul) and m.a == P and m.b == dO.id and m.axis_a == row:
                dv = u
            elif u not in (prod, ds0):
                return f"P (node {P}) is read by node {u} ({m.op}) outside the backward"
        if dq is None and dk is None:
            return None
        products = {x for x in (dq, dk, dv) if x is not None}
        outs = set(cx.g.outputs.values())
        for i in tile:
            if i in outs or any(u not in tile and u not in products for u in us[i]):
                return f"node {i} ({cx.node(i).op}) of the score tile is read outside it"
        site = FlashBackwardSite(qk, s, dp, prod, dsum, diff.id, ds0, ds, tuple(sorted(tile)),
                                 tuple(sorted(leaves)), row, dq, dk, dv, saved_stats=saved,
                                 no_atomic_dq=atomic_dq_refusal(cx, cx.node(qk)))
        if site.no_atomic_dq and dq is not None and (dk is not None or dv is not None):
            self.refuse(cx, [site.qk, dq], f"flash_backward (dq=atomic): {site.no_atomic_dq}")
        return self._skip(cx, site, chain)

    def _skip(self, cx: Ctx, site: FlashBackwardSite, chain: list[int]) -> FlashBackwardSite:
        """The site with skip_masked_tiles' bounds where the forward's scores are masked (as the
        forward's flash site reads them) and dS is zero wherever they are: the cotangent's chain
        ends in selects with 0 of every masked select's condition (reverse mode's cotangent of
        select(keep, s, -inf)). A skipped block then adds 0 to D and to every product."""
        sm = site.softmax
        core = {site.qk, *sm.nodes, site.dp, site.prod, site.dsum, site.diff, site.ds0, *chain} - {None}
        score = tuple(i for i in site.tile if i not in core and (i == sm.src or depends_on(cx, sm.src, i)))
        found = SKIP.match(cx, FlashSite(site.qk, sm, -1, score, site.leaves, site.row), site.row)
        if not found:
            return site
        at, bounds, exact = found
        conds = {cx.node(i).cond for i in at if isinstance(cx.node(i), ir.Select)}
        zeroed = set()
        for at_, i in reversed(list(enumerate(chain))):  # the chain's last nodes: selects of 0, and scalings after them
            n = cx.node(i)
            if isinstance(n, ir.Select) and cx.literal(n.b) is not None and float(cx.literal(n.b)[1:]) == 0.0:
                zeroed.add(n.cond)
            elif not (at_ and _keeps_zero(cx, n, chain[at_ - 1])):
                break
        if not conds <= zeroed:
            self.refuse(cx, [site.softmax.div], "attention backward: the cotangent of the scores is not zeroed where "
                        "the mask drops a key: every key block runs")
            return site
        # the cotangent's selects of an exact mask's keep are exact too: on a block every row keeps
        # whole they pass dS through, as the forward's select passes the scores
        exact_conds = {cx.node(i).cond for i in exact}
        exact = (*exact, *(i for i in chain if isinstance(cx.node(i), ir.Select) and cx.node(i).cond in exact_conds))
        return dataclasses.replace(site, skip_at=at, bounds=bounds, exact=tuple(sorted(exact)))

    def options(self, s: FlashBackwardSite) -> list[Option]:
        """exp2 first (the default), as the forward's options; masked key blocks skipped where the
        site has bounds (always: it only saves work). Second, where the dK/dV kernel runs and dQ is
        wanted, dQ added atomically from it (FlashAttention-2's: one pass over the keys fewer, dQ's
        sums in no fixed order; not the default until measured)."""
        skip = (SKIP.step(s.skip_at, bounds=describe(s.bounds, s.axis)),) if s.bounds else ()

        # (the forward's max read as it is: no running shift to justify, softmax_shift cites nothing)
        shift = () if s.saved_stats else (SHIFT.step([s.softmax.mx, s.softmax.sub]),)

        def steps(**params):
            return (*shift, self.step(s.nodes, axis=s.axis, **params), *skip)
        exp2 = (EXP2.step([s.softmax.exp]),)
        atomic = [Option("flash_backward_exp2_atomic_dq", (*steps(dq="atomic"), *exp2), s, self.name, s.nodes)] \
            if s.dq is not None and (s.dk is not None or s.dv is not None) and not s.no_atomic_dq else []
        return [Option("flash_backward_exp2", (*steps(), *exp2), s, self.name, s.nodes), *atomic,
                Option("flash_backward", steps(), s, self.name, s.nodes)]

    def apply(self, choice, step):
        """dq="atomic": dQ added from the dK/dV kernel (flash_backward_kernels.FlashBackwardChoice)."""
        choice.atomic_dq = step.params.get("dq") == "atomic"

    def formula(self, g, at, params):
        S = sym()
        t = params.get("axis", "t")
        before = r"dQ = dS\,K,\ dK = dS^{\top} Q,\ dV = P^{\top} dO,\quad dS = P \odot (dP - D),\ " \
                 r"D = \textstyle\sum_{%s} dP \odot P" % S.tex_text(t)
        after = (r"\text{per block } j:\ P_j = e^{c (s_j - m)} / l,\ dQ \mathrel{+}= dS_j K_j,\ "
                 r"dK_j \mathrel{+}= dS_{\cdot j}^{\top} Q,\ dV_j \mathrel{+}= P_{\cdot j}^{\top} dO;\ "
                 r"D = o / l \text{ of the online fold with } v = dP")
        return before, after

    def check(self) -> bool:
        """For 2 queries, 3 keys and 2 value columns (symbols), D folded online over the key blocks
        [k0] then [k1, k2] (the running max rescaling it as o) equals sum_t dP P, and dQ summed over
        the two blocks equals dS K over all keys, with P from the stored max and sum."""
        sp = sym().sp
        s = sp.Matrix(2, 3, lambda i, j: sp.Symbol(f"s{i}{j}", real=True))
        dp = sp.Matrix(2, 3, lambda i, j: sp.Symbol(f"p{i}{j}", real=True))
        K = sp.Matrix(3, 2, lambda j, d: sp.Symbol(f"k{j}{d}", real=True))
        for i in range(2):
            m = [sp.Symbol(f"m{i}a", real=True), sp.Symbol(f"m{i}b", real=True)]  # any running maxima
            l = sp.exp(s[i, 0] - m[0])
            d = sp.exp(s[i, 0] - m[0]) * dp[i, 0]
            l = l * sp.exp(m[0] - m[1]) + sum(sp.exp(s[i, j] - m[1]) for j in (1, 2))
            d = d * sp.exp(m[0] - m[1]) + sum(sp.exp(s[i, j] - m[1]) * dp[i, j] for j in (1, 2))
            total = sum(sp.exp(s[i, j]) for j in range(3))
            P = [sp.exp(s[i, j]) / total for j in range(3)]
            D = sum(dp[i, j] * P[j] for j in range(3))
            if sp.simplify(d / l - D) != 0:
                return False
            Pm = [sp.exp(s[i, j] - m[1]) / l for j in range(3)]  # from the stored max and sum
            if any(sp.simplify(a - b) != 0 for a, b in zip(Pm, P)):
                return False
            dS = [P[j] * (dp[i, j] - D) for j in range(3)]
            for c in range(2):
                blocks = dS[0] * K[0, c] + (dS[1] * K[1, c] + dS[2] * K[2, c])
                if sp.expand(blocks - sum(dS[j] * K[j, c] for j in range(3))) != 0:
                    return False
        return True


FLASH_BWD = FlashBackward()


def saved_rows(cx: Ctx) -> list[SoftmaxSite]:
    """Softmaxes from saved statistics, exp(z - M) / L with M and L row vectors computed elsewhere
    (the forward's max and sum, read by the backward: autodiff.default_saved), as SoftmaxSites
    whose mx and sm are those vectors; z's constant scale peeled as ONLINE's rows peel it."""
    us, out = cx.users, []
    for n in cx.nodes:
        if not (isinstance(n, ir.Binary) and n.op == "div"):
            continue
        e, L = cx.node(n.a), cx.node(n.b)
        sub = cx.node(e.x) if isinstance(e, ir.Unary) and e.op == "exp" else None
        if not (isinstance(sub, ir.Binary) and sub.op == "sub") or us[e.id] != [n.id] or us[sub.id] != [e.id]:
            continue
        z, M = cx.node(sub.a), cx.node(sub.b)
        gone = [a for a in n.axes if a not in M.axes]
        if len(gone) != 1 or M.axes != L.axes or tuple(a for a in n.axes if a != gone[0]) != M.axes \
                or z.axes != n.axes or any(isinstance(x, ir.Reduce) for x in (M, L)):
            continue  # (a max and a sum reduced here: ONLINE's row)
        src, scale_node, c = z.id, None, 1.0
        sc = _scaled(cx, z)
        if sc and us[z.id] == [sub.id]:
            src, scale_node, c = sc
        out.append(SoftmaxSite(M.id, sub.id, e.id, L.id, n.id, gone[0], src, scale_node, c))
    return out


def atomic_dq_refusal(cx: Ctx, qk) -> str | None:
    """Why the dK/dV kernel cannot add dQ = dS K atomically, or None. Its K tile is then a GEMM
    operand twice: K Q^T reads it with the head dim contracted, dS K with the keys contracted, and
    TileLang 0.1.15 gives the two uses different shared-memory layouts it cannot reconcile for
    16-bit rows of 32 + 64 n bytes (d_h 16, 48, 80, 112, ... at 128-key tiles: "Get different
    layout for K_shared"; CPU lowering of every d_h from 8 to 176 and float32: no other width;
    GPU campaign seed 121 hit d_h 16)."""
    k = cx.node(qk.b)
    d = cx.g.axes[qk.axis_b]
    if cx.dtype_of(k.id) in ("f16", "bf16") and (2 * d) % 64 == 32:
        return (f"K's rows of {2 * d} bytes ({qk.axis_b} = {d}) take two shared-memory layouts TileLang "
                "cannot reconcile (K Q^T and dS K): dQ by its own kernel")
    return None


def _keeps_zero(cx: Ctx, n, x: int) -> bool:
    """Node n of the cotangent's chain maps a zero x to exactly zero whatever else it reads: x
    times a finite literal, x over a finite nonzero literal, -x, a cast of x. A score scaled
    after its mask (q k^T / sqrt(d_h), then the mask: the forward's select is the chain's first
    node, its division's cotangent the last) keeps dS zero where the mask drops a key; a factor
    read from the scores (tanh's 1 - y^2) does not, if a masked score is NaN (0 NaN = NaN)."""
    def finite(a, nonzero=False):
        lit = cx.literal(a)
        return lit is not None and math.isfinite(float(lit[1:])) and (not nonzero or float(lit[1:]) != 0.0)
    if isinstance(n, ir.Binary) and n.op == "mul":
        return (n.a == x and finite(n.b)) or (n.b == x and finite(n.a))
    if isinstance(n, ir.Binary) and n.op == "div":
        return n.a == x and finite(n.b, nonzero=True)
    return (isinstance(n, ir.Unary) and n.op == "neg" and n.x == x) or (isinstance(n, ir.Cast) and n.x == x)


def transposed_bounds(bounds: tuple, key: str) -> tuple[KeyBound, ...]:
    """Bounds on the query given the key (the dK/dV kernel's stream of queries, a key tile its
    rows) from bounds on the key given the query: key <= q + o is q >= key - o, key <= -q + o is
    q <= o - key, and the lo sides alike. A bound of the key alone (coef 0) or read at run time
    is left out: skipping fewer blocks is always right."""
    out = []
    for b in bounds:
        if b.leaf is not None or b.coef == 0:
            continue
        side = b.side if b.coef == -1 else ("lo" if b.side == "hi" else "hi")
        out.append(KeyBound(side=side, row=key, coef=b.coef, offset=b.offset if b.coef == -1 else -b.offset))
    return tuple(out)
