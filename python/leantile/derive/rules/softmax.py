"""The softmax rules: softmax_shift, online_softmax, exp_to_exp2, and where they apply.

A softmax row exp(z - max z) / sum exp(z - max z) is a site of all three: the shift justifies
a running maximum in place of the row's, the online softmax streams the row in blocks (with
the P V product when the row feeds one: flash attention), exp_to_exp2 is the optional exp2
spelling. `match` finds the rows and attention patterns; every side condition that keeps a
row from being streamed is a refusal naming the node at fault.
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ..context import Ctx
from ..sites import ELEMENTWISE, FlashSite, SoftmaxSite, depends_on
from .base import Option, Rule, sym
from .group import PACK
from .masks import SKIP, describe


class SoftmaxShift(Rule):
    name = "softmax_shift"
    theorem = "LeanTile.softmax_shift_invariant"
    lean_file = "SoftmaxShift.lean"
    pattern = "exp(s - max s) / sum exp(s - max s)"
    rewrite = "any running shift m may replace max s"
    statement = "softmax(s - c) = softmax(s) for every constant c"

    def formula(self, g, at, params):
        S = sym()
        sp = S.sp
        mx, sub = at
        qk, ax = g.node(mx).x, g.node(mx).axis
        t, m = sp.Symbol(ax), sp.Symbol("m")
        e = S.Exprs(g, inline={mx, sub}, names={qk: "s"})
        shifted = e(sub)
        k = e.fresh(ax)
        s = S.Exprs(g, names={qk: "s"}).leaf(qk)
        before = sp.exp(shifted) / S.Sum(sp.exp(shifted.subs(t, k)), (k, 1, S.size(ax)))
        after = sp.exp(s - m) / S.Sum(sp.exp(s.subs(t, k) - m), (k, 1, S.size(ax)))
        return S.tex(before), S.tex(after) + r"\quad\text{for any shift } m"

    def check(self) -> bool:
        """softmax of 3 scores is unchanged by a symbolic shift c."""
        S = sym()
        c = S.sp.Symbol("c", real=True)
        e = [S.sp.exp(s) for s in (S.s1, S.s2, S.s3)]
        sh = [S.sp.exp(s - c) for s in (S.s1, S.s2, S.s3)]
        return all(S.zero(a / sum(e) - b / sum(sh)) for a, b in zip(e, sh))


class OnlineSoftmax(Rule):
    name = "online_softmax"
    theorem = "LeanTile.online_softmax_ratio"
    lean_file = "OnlineSoftmax.lean"
    pattern = "matmul(Q,K) -> softmax over t -> matmul(P,V) over t"
    rewrite = "stream t in blocks with state (m, l, o), rescaling l and o by exp(m_old - m_new)"
    statement = ("folding (m, l, o) over any list of tiles from any m0 ends with o / l = sum exp(s) v / sum exp(s), "
                 "the softmax-weighted sum of v (online_softmax_fold gives l and o themselves)")
    params = {"axis": "the axis this softmax normalises over"}

    # -- where it applies
    def match(self, cx: Ctx) -> tuple[list[FlashSite], list[SoftmaxSite]]:
        """(attention sites, lone softmax rows): every softmax row whose intermediates nobody
        else reads, and those rows that feed a P V product over the softmax axis."""
        rows = self._rows(cx)
        flash = self._flash(cx, rows)
        claimed = {i for s in flash for i in s.nodes}
        return flash, [s for s in rows if not set(s.nodes) & claimed]

    def _rows(self, cx: Ctx) -> list[SoftmaxSite]:
        us = cx.users
        out = []
        for div in cx.nodes:
            if not (isinstance(div, ir.Binary) and div.op == "div"):
                continue
            e, sm = cx.node(div.a), cx.node(div.b)
            if not (isinstance(e, ir.Unary) and e.op == "exp" and isinstance(sm, ir.Reduce)
                    and sm.kind == "sum" and sm.x == e.id):
                continue
            sub = cx.node(e.x)
            if not (isinstance(sub, ir.Binary) and sub.op == "sub"):
                continue
            z, mx = cx.node(sub.a), cx.node(sub.b)
            if not (isinstance(mx, ir.Reduce) and mx.kind == "max" and mx.x == z.id and mx.axis == sm.axis):
                continue
            # the max and the sum may also be output through a cast (a training forward hands them
            # to attention's backward: autodiff.forward_saving); the flash kernel stores them
            inner = {z.id: {mx.id, sub.id}, mx.id: {sub.id, *output_casts(cx, mx.id)}, sub.id: {e.id},
                     e.id: {sm.id, div.id}, sm.id: {div.id, *output_casts(cx, sm.id)}}
            leaks = [i for i, allowed in inner.items() if set(us[i]) != allowed]
            if leaks:  # an intermediate is used elsewhere: it must be materialised
                self.refuse(cx, [mx.id, sub.id, e.id, sm.id, div.id],
                            f"node {leaks[0]} ({cx.node(leaks[0]).op}) is also read outside the softmax: the row "
                            "is computed node by node")
                continue
            src, scale_node, c = z.id, None, 1.0
            sc = _scaled(cx, z)
            if sc and set(us[sc[0]]) == {z.id}:
                src, scale_node, c = sc
            out.append(SoftmaxSite(mx.id, sub.id, e.id, sm.id, div.id, sm.axis, src, scale_node, c))
        return out

    def _flash(self, cx: Ctx, softmaxes: list[SoftmaxSite]) -> list[FlashSite]:
        us = cx.users
        out = []
        for s in softmaxes:
            t = s.axis
            pvs = us[s.div]
            if len(pvs) != 1:
                continue
            pv = cx.node(pvs[0])
            if not (isinstance(pv, ir.Matmul) and pv.a == s.div and pv.axis_a == t):
                continue
            found = _score_function(cx, s.src, t)
            if found is None:
                continue
            if isinstance(found, str):
                self.refuse(cx, [s.src, s.div, pv.id], f"flash attention: {found}; the softmax row is streamed on its own")
                continue
            qk, score, leaves = cx.node(found[0]), found[1], found[2]
            q, k = cx.node(qk.a), cx.node(qk.b)
            if t in q.axes or t not in k.axes:  # the streamed axis must come from K (one softmax row per query)
                self.refuse(cx, [qk.id, s.div, pv.id], f"flash attention: the softmax axis {t!r} is not "
                            "K's alone; the softmax row is streamed on its own")
                continue
            if not any(a in q.axes and a not in k.axes for a in qk.axes):
                self.refuse(cx, [qk.id, s.div, pv.id], "flash attention: Q has no query axis to tile "
                            "(decode, one query): the softmax row is streamed on its own")
                continue
            row = [a for a in qk.axes if a in q.axes and a not in k.axes][-1]  # the query axis tiled
            site = FlashSite(qk.id, s, pv.id, score, leaves, row)
            skip = SKIP.match(cx, site, row)
            if skip:
                site = dataclasses.replace(site, skip_at=skip[0], bounds=skip[1], exact=skip[2])
            group = PACK.match(cx, site)
            out.append(dataclasses.replace(site, group=group) if group else site)
        return out

    def formula(self, g, at, params):
        S = sym()
        sp, tex, IndexedBase = S.sp, S.tex, S.IndexedBase
        if not (isinstance(g.node(at[-1]), ir.Matmul) and len(at) >= 6):
            return self._row_formula(g, at, params)
        mx, sub, exp, sm, div, pv = at[-6:]  # after the scores' matmul and any elementwise nodes on the scores
        qk = g.node(mx).x  # the scores s
        axis = params.get("axis") or g.node(sm).axis
        before = S.Exprs(g, inline={mx, sub, exp, sm, div, pv}, names={qk: "s"})(pv)
        t, j, B = sp.Symbol(axis), sp.Symbol("j"), sp.Symbol("B")
        s = S.Exprs(g, names={qk: "s"}).leaf(qk)
        v = S.Exprs(g).leaf(g.node(pv).b)
        m, l, o = (IndexedBase(x) for x in ("m", "l", "o"))
        block = (t, B * (j - 1) + 1, B * j)  # tile j = 1..J
        lines = [
            r"%s = \max\left(%s,\ \max_{%s=%s}^{%s} %s\right)" % (
                tex(m[j]), tex(m[j - 1]), tex(t), tex(block[1]), tex(block[2]), tex(s)),
            sp.Eq(l[j], sp.exp(m[j - 1] - m[j]) * l[j - 1] + S.Sum(sp.exp(s - m[j]), block)),
            sp.Eq(o[j], sp.exp(m[j - 1] - m[j]) * o[j - 1] + S.Sum(sp.exp(s - m[j]) * v, block)),
        ]
        after = r" \\ ".join(tex(x) for x in lines)
        after += r" \\ %s = o_{J} / l_{J},\quad m_{0} = -\infty,\ l_{0} = o_{0} = 0,\ J = \lceil %s / B \rceil" % (
            S.out(g, pv), tex(S.size(axis)))
        return f"{S.out(g, pv)} = {tex(before)}", r"\begin{gathered}" + after + r"\end{gathered}"

    def _row_formula(self, g, at, params):
        """A softmax row on its own (no P V): the running (m, l) over tiles, then exp(s - m) / l."""
        S = sym()
        sp, tex, IndexedBase = S.sp, S.tex, S.IndexedBase
        mx, sub, exp, sm, div = at[-5:]
        z = g.node(mx).x
        axis = params.get("axis") or g.node(sm).axis
        before = S.Exprs(g, inline={mx, sub, exp, sm, div}, names={z: "s"})(div)
        t, j, B = sp.Symbol(axis), sp.Symbol("j"), sp.Symbol("B")
        s = S.Exprs(g, names={z: "s"}).leaf(z)
        m, l = IndexedBase("m"), IndexedBase("l")
        block = (t, B * (j - 1) + 1, B * j)
        lines = [r"%s = \max\left(%s,\ \max_{%s=%s}^{%s} %s\right)" % (
                     tex(m[j]), tex(m[j - 1]), tex(t), tex(block[1]), tex(block[2]), tex(s)),
                 tex(sp.Eq(l[j], sp.exp(m[j - 1] - m[j]) * l[j - 1] + S.Sum(sp.exp(s - m[j]), block)))]
        J = sp.Symbol("J")
        after = r" \\ ".join(lines) + r" \\ %s = %s,\quad m_{0} = -\infty,\ l_{0} = 0,\ J = \lceil %s / B \rceil" % (
            S.out(g, div), tex(sp.exp(s - m[J]) / l[J]), tex(S.size(axis)))
        return f"{S.out(g, div)} = {tex(before)}", r"\begin{gathered}" + after + r"\end{gathered}"

    def check(self) -> bool:
        """2 tiles of 2 scores, symbolic running maxima: folded o / l equals the softmax-weighted sum."""
        S = sym()
        sp = S.sp
        m0, m1, m2 = sp.symbols("m0 m1 m2", real=True)
        l, o, m_prev = 0, 0, m0
        for (sa, va), (sb, vb), m_new in (((S.s1, S.v1), (S.s2, S.v2), m1), ((S.s3, S.v3), (S.s4, S.v4), m2)):
            alpha = sp.exp(m_prev - m_new)
            l = l * alpha + sp.exp(sa - m_new) + sp.exp(sb - m_new)
            o = o * alpha + sp.exp(sa - m_new) * va + sp.exp(sb - m_new) * vb
            m_prev = m_new
        scores, values = (S.s1, S.s2, S.s3, S.s4), (S.v1, S.v2, S.v3, S.v4)
        full = sum(sp.exp(s) * v for s, v in zip(scores, values)) / sum(sp.exp(s) for s in scores)
        return S.zero(sp.powsimp(sp.expand(o / l - full), combine="exp")) and \
            S.zero(l - sum(sp.exp(s - m2) for s in scores))


class ExpToExp2(Rule):
    name = "exp_to_exp2"
    theorem = "LeanTile.exp_eq_exp2_mul_log2e"
    lean_file = "ExpToExp2.lean"
    pattern = "exp(x) inside a fused kernel"
    rewrite = "exp2(x * log2 e), folding log2 e into the multiply-add before it"
    statement = "exp x = 2 ^ (x * log2 e)"

    def apply(self, choice, step):
        # an online softmax site (kernels.OnlineChoice) computes its exps as exp2 or not; a region
        # kernel (engine.RegionChoice, a tuple) the shifted exps the step names (shifted_exps)
        choice.exp2 = tuple(step.at) if isinstance(choice.exp2, tuple) else True

    def formula(self, g, at, params):
        S = sym()
        (e,) = at
        x = S.Exprs(g).leaf(g.node(e).x)
        log2e = S.sp.Symbol(r"\log_{2} e")
        # function notation: x is too large to read as a superscript
        return (r"\exp\left(%s\right)" % S.tex(x),
                r"\operatorname{exp2}\left(%s\right)" % S.tex(S.sp.Mul(x, log2e, evaluate=False)))

    def check(self) -> bool:
        """exp(x) - 2^(x / log 2) simplifies to 0."""
        sp = sym().sp
        x = sp.Symbol("x", real=True)
        return sp.simplify(sp.exp(x) - 2 ** (x / sp.log(2))) == 0


SHIFT, ONLINE, EXP2 = SoftmaxShift(), OnlineSoftmax(), ExpToExp2()


def output_casts(cx: Ctx, i: int) -> list[int]:
    """The casts of node i that are graph outputs and nothing reads: how a training forward outputs
    a softmax's max and sum for attention's backward (autodiff.forward_saving)."""
    outs = set(cx.g.outputs.values())
    return [u for u in cx.users[i] if isinstance(cx.node(u), ir.Cast) and u in outs and not cx.users[u]]


def _scaled(cx: Ctx, z) -> tuple[int, int | None, float] | None:
    """(src, scale node, c) when z = src * c or src / c with c a positive constant: the scale
    folds into the exponent (c > 0 keeps the row maximum where it is)."""
    if isinstance(z, ir.Binary) and z.op in ("mul", "div") and z.axes == cx.node(z.a).axes:
        c = cx.const_value(z.b)
        if c is not None and c > 0:
            return z.a, z.id, (c if z.op == "mul" else 1.0 / c)
    return None


def _score_function(cx: Ctx, z: int, t: str) -> tuple[int, tuple[int, ...], tuple[int, ...]] | str | None:
    """The scores' matmul under the softmax input z, with the elementwise nodes between them (a
    mask, a bias, a scale): (matmul, score nodes, leaves they load), a refusal, or None where z
    does not come from a matmul over t's keys. The score function is every elementwise node
    z depends on whose users are all inside it: those a kernel elsewhere also reads, and
    everything not elementwise, are leaves, loaded from device memory. The scores' matmul must
    be a leaf read by nothing else, no other leaf may depend on it (it exists only in the flash
    kernel's registers), and nothing may have an axis the scores lack."""
    n = cx.node(z)
    if isinstance(n, ir.Matmul):
        return (z, (), ()) if t in n.axes else None
    if not isinstance(n, ELEMENTWISE):
        return None
    region, stack = {z}, [z]
    while stack:  # the elementwise closure under z
        for a in cx.node(stack.pop()).args():
            if a not in region and isinstance(cx.node(a), ELEMENTWISE) and cx.literal(a) is None:
                region.add(a)
                stack.append(a)
    closure = set(region)
    changed = True
    while changed:  # a node read outside the function is computed elsewhere: a leaf (and so,
        changed = False  # then, whatever only it read); users come after a node: go downwards
        for i in sorted(region - {z}, reverse=True):
            if any(u not in region for u in cx.users[i]):
                region.discard(i)
                changed = True
    leaves = sorted({a for i in region for a in cx.node(i).args()
                     if a not in region and cx.literal(a) is None})
    qks = [a for a in leaves if isinstance(cx.node(a), ir.Matmul) and t in cx.node(a).axes]
    if not qks:
        pruned = sorted(closure - region)
        under = [a for i in closure for a in cx.node(i).args() if a not in closure and isinstance(cx.node(a), ir.Matmul)
                 and t in cx.node(a).axes]
        if not under or not pruned:
            return None
        p = pruned[-1]
        return (f"node {p} ({cx.node(p).op}) between the scores (node {under[0]}) and the softmax is also read "
                "outside the score function")
    if len(qks) != 1:
        return f"the scores under node {z} come from {len(qks)} matmuls over {t!r}"
    qk = qks[0]
    axes = set(cx.node(qk).axes)
    if set(cx.node(z).axes) != axes:
        return f"node {z} ({cx.node(z).op}) has axes {list(cx.node(z).axes)}, the scores {sorted(axes)}"
    if any(u not in region for u in cx.users[qk]):
        return f"the scores (node {qk}) are also read outside the score function"
    for i in (*sorted(region), *leaves):
        if not set(cx.node(i).axes) <= axes:
            return f"node {i} ({cx.node(i).op}) has an axis the scores lack ({list(cx.node(i).axes)})"
    for a in leaves:
        if a != qk and depends_on(cx, a, qk):
            return f"node {a} ({cx.node(a).op}) depends on the scores and is read outside the score function"
    return qk, tuple(sorted(region)), tuple(a for a in leaves if a != qk)


def online_options(s: FlashSite | SoftmaxSite, label: str) -> list[Option]:
    """A streamed softmax site: with exp2 (first, the default) or with exp."""
    sm = s.softmax if isinstance(s, FlashSite) else s
    base = (SHIFT.step([sm.mx, sm.sub]), ONLINE.step(s.nodes, axis=s.axis))
    if isinstance(s, FlashSite) and s.bounds:  # always: skipping masked blocks only saves work
        base += (SKIP.step(s.skip_at, bounds=describe(s.bounds, s.axis)),)
    if isinstance(s, FlashSite) and s.group:  # always: a group's heads share each K and V block load
        base += (PACK.step((s.qk, s.pv), group=s.group),)
    return [Option(f"{label}_exp2", (*base, EXP2.step([sm.exp])), s, ONLINE.name, s.nodes),
            Option(label, base, s, ONLINE.name, s.nodes)]
