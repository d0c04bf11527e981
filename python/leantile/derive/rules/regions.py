"""Generic fusion of what no pattern rule claims: elementwise regions and reductions with their
prologue and epilogue (rules fuse_elementwise and fuse_reduction).

After the pattern sites (attention, long softmax rows, GEMMs with their pullouts and epilogues)
every other computed node is *residual*. A residual elementwise node is inlined (recomputed in
registers by every kernel that needs it) unless it must live in global memory: it is a graph
output or a kernel outside the residual set reads it. What is left is a few kernels:

  - a row kernel per group of reductions over one axis d with the same kept (row) axes: it
    loads its leaves, computes the reductions' elementwise prologues, the reductions, and the
    epilogue nodes over the row axes (and, with the row on chip, over the row and d: the
    normalising epilogue of a norm, a softmax, a log-softmax), in one kernel;
      on_chip:  the whole of d sits in registers (its padded size times the row block is at
                most ON_CHIP elements, for two rows), so reductions may read earlier reductions (LayerNorm's
                variance of x - mean, softmax's sum of exp(x - max)) and the epilogue may be
                over (rows, d);
      streamed: d is streamed block by block; only reductions whose prologue reads no other
                reduction of the group share the pass, and the epilogue is over the rows only;
  - a map kernel per remaining materialised elementwise node: its inlined cone in one loop.

Lemmas: LeanTile.fuse_elementwise_eval (a region evaluated pointwise equals its nodes evaluated
in order) and LeanTile.fuse_reduction_eval (a reduction of a mapped tensor is the fused loop;
reductions of one input over one axis share a pass), lean/LeanTile/Rules/FuseElementwise.lean
and FuseReduction.lean.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ... import ir
from ..context import Ctx
from ..sites import ELEMENTWISE
from .base import Option, Rule, sym
from .row_tiles import COLUMN_ON_CHIP_MIN, column_layout, row_block, streamed_ctas

REGION = ELEMENTWISE  # what a region computes in registers
# A kernel's inlined cone is cut (its largest parts materialised, each a kernel of its own) past
# these: TileLang's lowering grows faster than linearly with the global tensors one function
# reads (an elementwise sum of 16 inputs lowered in 3 s and 0.9 GiB, of 32 in 10 s, of 100 in
# 80 s and 3.9 GiB) and with its statements (500 chained ops: 11 s). docs/ir.md, Limits.
MAX_REGION_INPUTS = 16
MAX_REGION_OPS = 128
# the map kernels, latest first, a materialised elementwise node may join as a sibling
# (RegionAnalysis._map_groups): derive stays linear in the graph (a 10000-node chain cut into 79
# map kernels tried each against each before)
MAP_SIBLINGS_SEEN = 8


@dataclass
class RegionSite:
    """One fused kernel over residual nodes. `members` are the nodes it must produce (the
    reductions and the materialised nodes it owns), in id order; inlined nodes they read are
    computed on the way. For a row kernel, `axis` is the reduced axis, `axes` the axes of the
    reductions' inputs (rows and axis) and `mode` on_chip or streamed; a map kernel has mode map."""
    members: list[int]
    mode: str
    axes: tuple[str, ...]
    axis: str | None = None
    inlined: set[int] = field(default_factory=set)
    # streamed: rescaled sums l = sum exp(s - m) of a max m of the same pass (online_sum),
    # as (m, sub, exp, l)
    online: tuple[tuple[int, int, int, int], ...] = ()
    # on chip: more axes reduced in the same kernel (statistics over (h, w) of an InstanceNorm,
    # over (c_group, h, w) of a GroupNorm: reduce w, then h, all in registers)
    extra: tuple[str, ...] = ()
    # exp(s - m) of a max m of s over the row, computed as exp2((s - m) log2 e) (exp_to_exp2;
    # shifted_exps), with the online sums' rescale exp(m_old - m_new) alike
    exp2: tuple[int, ...] = ()
    # streamed: variances sum (x - mu)^2 of a mean mu of the same pass, as (q, mu, x), computed from
    # pivoted sums (variance_expand, stats.VarianceExpand.region_match)
    expanded: tuple[tuple[int, int, int], ...] = ()

    @property
    def reduced(self) -> tuple[str, ...]:
        return (self.axis, *self.extra) if self.axis else ()

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(a for a in self.axes if a not in self.reduced)


class RegionAnalysis:
    """Which residual nodes are inlined, which are materialised, and the region sites."""

    def __init__(self, cx: Ctx, claimed: set[int], recomputed: set[int] = frozenset()):
        """`recomputed`: nodes their kernels outside the regions compute again (a GEMM epilogue's
        coordinate masks): those users do not make them stored."""
        self.cx = cx
        outs = set(cx.outputs.values())
        self.residual = {n.id for n in cx.nodes if isinstance(n, (*REGION, ir.Reduce)) and n.id not in claimed
                         and not cx.literal(n.id)}
        self.materialised = {i for i in self.residual if isinstance(cx.node(i), REGION) and (
            i in outs or (i not in recomputed and any(u not in self.residual for u in cx.users[i])))}
        self.inline = {i for i in self.residual if isinstance(cx.node(i), REGION) and i not in self.materialised}
        self.formed: list[tuple[frozenset, frozenset]] = []  # the sites formed so far: (members, axes)
        self.site_of: dict[int, int] = {}  # member -> its formed site
        self._column: bool | None = None  # the forming group's layout (_same_layout), None: any
        self._cut_large_cones()

    def _cut_large_cones(self) -> None:
        """Bound what one kernel computes: where a node's inlined cone (itself and the inlined
        nodes it reads, through inlined nodes) reads more than MAX_REGION_INPUTS values from
        global memory or holds more than MAX_REGION_OPS nodes, its inlined arguments are
        materialised instead (each within the bounds: they were checked first, in id order).
        A cone is a set of node ids, so a value read twice counts once."""
        cx = self.cx
        cone: dict[int, tuple[frozenset, frozenset]] = {}  # inline node -> (its nodes, the values it loads)
        for i in sorted(self.residual):
            nodes, loads = {i}, set()
            for a in cx.node(i).args():
                if cx.literal(a):
                    continue
                if a in self.inline:
                    nodes |= cone[a][0]
                    loads |= cone[a][1]
                else:
                    loads.add(a)
            if len(loads) > MAX_REGION_INPUTS or len(nodes) > MAX_REGION_OPS:
                cut = {a for a in cx.node(i).args() if a in self.inline}
                self.inline -= cut
                self.materialised |= cut
                nodes = {i}
                loads = {a for a in cx.node(i).args() if not cx.literal(a)}
            if i in self.inline:
                cone[i] = (frozenset(nodes), frozenset(loads))

    def _fits(self, i: int, axes: set[str]) -> bool:
        return set(self.cx.node(i).axes) <= axes

    def _past_inline(self, starts, group: set[int], axes: set[str]):
        """The nodes reached from `starts` through the inlined nodes a kernel over `axes` computes
        on the way (walked without recursion): each neither a member of `group` nor a literal, the
        values such a kernel reads from global memory."""
        cx, stack, seen = self.cx, list(starts), set()
        while stack:
            j = stack.pop()
            if j in seen or j in group or cx.literal(j):
                continue
            seen.add(j)
            if j in self.inline and self._fits(j, axes):
                stack.extend(cx.node(j).args())
            else:
                yield j

    def _available(self, i: int, group: set[int], axes: set[str]) -> bool:
        """Whether node i can be had in a kernel whose members are `group`: a literal, a
        member, an inlined node whose own arguments are available, or a value some kernel
        computes before this one (it reads no member)."""
        return not (group and any(self._reads_any(j, group) for j in self._past_inline([i], group, axes)))

    def _reads_any(self, i: int, group: set[int]) -> bool:
        """Whether node i reads a member of `group`, directly or not."""
        lo = min(group)
        seen, stack = set(), [i]
        while stack:
            n = stack.pop()
            for a in self.cx.node(n).args():
                if a in group:
                    return True
                if a > lo and a not in seen:
                    seen.add(a)
                    stack.append(a)
        return False

    def _external_reads(self, group: set[int], allowed: set[str]) -> set[int]:
        """The values a kernel of members `group` reads from global memory: its members' arguments,
        through the inlined nodes it computes on the way, that are neither members nor literals."""
        return set(self._past_inline([a for m in group for a in self.cx.node(m).args()], group, allowed))

    def _joins(self, j: int, group: set[int], allowed: set[str]) -> bool:
        """Add j to `group` unless the kernel would then wait on itself: a value it reads depends
        on one of its members, directly or through the kernels of the sites already formed (each
        computes its members at once, so it depends on everything it reads). A norm's centred rows
        joining the region that reads the norm's 1/rms, computed by a map kernel from those rows,
        made such a cycle; so did a row region whose sum reads a second region that reads a third
        that reads the first (backward graphs, issue 50). Returns whether j joined."""
        new = group | {j}
        if self._reaches(self._external_reads(new, allowed), new):
            return False
        group.add(j)
        return True

    def _reaches(self, reads: set[int], group: set[int]) -> bool:
        """Whether any of `reads` depends on a member of `group`: through the graph, a formed
        site's member standing for everything that site's kernel reads."""
        cx = self.cx
        stack, seen, sites_seen = list(reads), set(), set()
        while stack:
            x = stack.pop()
            if x in group:
                return True
            if x in seen or cx.literal(x):  # (no pruning by id: a formed site of low ids may read high ones)
                continue
            seen.add(x)
            k = self.site_of.get(x)
            if k is not None:
                if k not in sites_seen:
                    sites_seen.add(k)
                    stack.extend(self._external_reads(self.formed[k][0], self.formed[k][1]))
            else:
                stack.extend(cx.node(x).args())
        return False

    def _grow(self, group: set[int], mode: str, rows: set[str], allowed: set[str], taken: set[int],
              reduced: set[str], two_pass: bool = False):
        """Add to `group` the users (direct or through inlined nodes) it can compute, in id
        order (every argument of a node is decided before it): reductions over the same axis
        with the same rows (on chip only: streamed, their input would need the row twice) and
        materialised epilogue nodes; the inlined nodes between are computed on the way.
        Streamed with `two_pass`, epilogue nodes over the row itself join too: the kernel
        streams the row a second time for them (plan.Kernel.second_pass)."""
        cx = self.cx
        frontier = sorted({u for m in group for u in cx.users[m]})
        seen = set(frontier)
        while frontier:
            u = heapq.heappop(frontier)
            if u not in self.residual or u in taken or u in group:
                continue
            un = cx.node(u)
            if isinstance(un, ir.Reduce):
                ok = (mode == "on_chip" or self.online_sum(u, group) is not None) and un.axis in reduced \
                    and rows <= set(un.axes) and set(cx.node(un.x).axes) <= allowed and self._same_layout(un)
            else:  # streamed: an inlined node over the row and d is passed through (an online
                # sum's exp(s - m)), never a member: members there are over the rows only
                ok = set(un.axes) <= allowed and (mode == "on_chip" or set(un.axes) <= rows or u in self.inline
                                                  or two_pass)
            if not ok or not all(self._available(a, group, allowed) for a in un.args()):
                continue
            if u in self.materialised and (mode == "on_chip" or set(un.axes) <= rows or two_pass) \
                    or isinstance(un, ir.Reduce):
                if not self._joins(u, group, allowed):
                    continue
            for w in cx.users[u]:
                if w not in seen:
                    seen.add(w)
                    heapq.heappush(frontier, w)

    def _absorb_producers(self, group: set[int], allowed: set[str], taken: set[int]):
        """On chip: a materialised node the group's reductions read (through inlined nodes),
        over the row's axes and computable here, joins as a member (computed in registers and
        stored by this kernel, not by a map kernel of its own before it): the residual stream
        h = x + r, an output, and RMSNorm(h) are one kernel that reads x and r once."""
        cx = self.cx
        stack = [a for m in group for a in cx.node(m).args()]
        seen: set[int] = set()
        while stack:
            j = stack.pop()
            if j in seen or j in group or cx.literal(j):
                continue
            seen.add(j)
            if j in self.inline and self._fits(j, allowed):
                stack.extend(cx.node(j).args())
            elif (j in self.materialised and j not in taken and self._fits(j, allowed)
                  and all(self._available(a, group, allowed) for a in cx.node(j).args())
                  and self._joins(j, group, allowed)):
                stack.extend(cx.node(j).args())

    def _more_axes(self, r: int, rows: set[str], allowed: set[str], taken: set[int]) -> list[str]:
        """Row axes that a later reduction reduces, reached from reduction r through residual
        nodes over the row and through those reductions: sum over h of (sum over w of x)
        reduces (h, w) (statistics of an InstanceNorm), sum over c of that (c, h, w) (a
        LayerNorm over channels and positions, a GroupNorm's group), in id order."""
        cx, out = self.cx, []
        frontier = sorted(set(cx.users[r]))
        seen = set(frontier)
        while frontier:
            u = heapq.heappop(frontier)
            un = cx.node(u)
            if u not in self.residual or u in taken or not set(un.axes) <= allowed:
                continue
            if isinstance(un, ir.Reduce):
                if un.axis not in rows:
                    continue
                if un.axis not in out:  # and on through it: sum_c sum_h sum_w x reduces (c, h, w)
                    out.append(un.axis)
            for w in cx.users[u]:
                if w not in seen:
                    seen.add(w)
                    heapq.heappush(frontier, w)
        return out

    def _fills_gpu(self, src_axes, axis: str) -> bool:
        """Whether a streamed row kernel over `axis` has half a wave of CTAs or more: then
        split_reduction leaves it whole (rules/split._splits), and it may stream its rows twice
        (a second pass for the epilogue over the row) rather than leave that to a map kernel
        that reads the rows again from DRAM. Fewer rows are split over CTAs instead."""
        rows = [a for a in src_axes if a != axis]
        return bool(rows) and 2 * streamed_ctas(self.cx, rows, axis, column_layout(src_axes, axis)) > self.cx.target.sms

    def online_sum(self, l: int, group: set[int]):
        """(m, sub, exp, l) when reduction l is sum over d of exp(s - m), m a max over d of the
        group, s reading no member, sub and exp inlined: a streamed pass keeps l rescaled by
        exp(m_old - m_new) as m grows (LeanTile.online_softmax_fold). Else None."""
        cx = self.cx
        ln = cx.node(l)
        e = cx.node(ln.x) if isinstance(ln, ir.Reduce) and ln.kind == "sum" else None
        if not (isinstance(e, ir.Unary) and e.op == "exp" and e.id in self.inline):
            return None
        z = cx.node(e.x)
        if not (isinstance(z, ir.Binary) and z.op == "sub" and z.id in self.inline and z.b in group):
            return None
        m = cx.node(z.b)
        if not (isinstance(m, ir.Reduce) and m.kind == "max" and m.axis == ln.axis and set(m.axes) == set(ln.axes)):
            return None
        if self._reads_any(z.a, group) or z.a in group:
            return None
        return (m.id, z.id, e.id, l)

    def _merge(self, group: set[int], rows: set[str], allowed: set[str], taken: set[int], reduced: set[str],
               streamed: bool = False):
        """Reductions over the same axis and rows that read no member and that no member
        reads share the kernel's pass (sum x and sum x^2; a max and a sum of one row); streamed,
        so does a variance of a member mean (variance_expand: from pivoted sums)."""
        cx = self.cx
        for q in sorted(self.residual):
            qn = cx.node(q)
            if q in group or q in taken or not isinstance(qn, ir.Reduce) or qn.axis not in reduced \
                    or not rows <= set(qn.axes) or not set(cx.node(qn.x).axes) <= allowed or not self._same_layout(qn):
                continue
            if not self._reads_any(q, group) and not any(self._reads_any(m, {q}) for m in group) \
                    and self._available(qn.x, group, allowed):
                self._joins(q, group, allowed)
            elif streamed and self._expanded(q, group) and not any(self._reads_any(m, {q}) for m in group):
                self._joins(q, group, allowed)

    def _same_layout(self, r) -> bool:
        """Whether reduction r reads its source in the layout (column_layout) of the group's first, where
        both are loaded: a loaded row [n, c] and column [c, n] reduced over c had no layout (s63)."""
        return self._column is None or r.x in self.inline or column_layout(self.cx.node(r.x).axes, r.axis) == self._column

    def _expanded(self, q: int, group: set[int]):
        from .stats import VARIANCE
        return VARIANCE.region_match(self.cx, q, group - {q}, self.inline, self._reads_any)

    def sites(self) -> list[RegionSite]:
        cx = self.cx
        taken: set[int] = set()
        out: list[RegionSite] = []
        for r in sorted(self.residual):
            n = cx.node(r)
            if not isinstance(n, ir.Reduce) or r in taken:
                continue
            src_axes = cx.node(n.x).axes
            rows = set(n.axes)
            block = row_block(cx, src_axes, n.axis)
            # a column reduction held whole on chip at a few columns a CTA reads a few bytes of every row
            narrow = column_layout(src_axes, n.axis) and (block or 0) < COLUMN_ON_CHIP_MIN
            mode = "on_chip" if block and not narrow else "streamed"
            allowed = rows | {n.axis}
            reduced = {n.axis}
            if mode == "on_chip":  # later reductions over other axes of the row join while it fits
                for b in self._more_axes(r, rows, allowed, taken):
                    if row_block(cx, src_axes, (n.axis, *(reduced - {n.axis}), b)):
                        reduced.add(b)
                        rows = rows - {b}
            group = {r}
            self._column = None if n.x in self.inline else column_layout(src_axes, n.axis)  # (_same_layout)
            two_pass = mode == "streamed" and self._fills_gpu(src_axes, n.axis)
            while True:  # take in the independent reductions of the same rows, grow, again
                size = len(group)
                self._merge(group, rows, allowed, taken, reduced, mode == "streamed")
                self._grow(group, mode, rows, allowed, taken, reduced, two_pass)
                if mode == "on_chip":
                    self._absorb_producers(group, allowed, taken)
                if len(group) == size:
                    break
            taken |= group
            for m in group:  # formed: _reaches stands it for its reads from now on
                self.site_of[m] = len(self.formed)
            self.formed.append((frozenset(group), frozenset(allowed)))
            online = tuple(o for o in (self.online_sum(q, group) for q in sorted(group)) if o) \
                if mode == "streamed" else ()
            extra = tuple(a for a in src_axes if a in reduced and a != n.axis)
            expanded = tuple(e for e in (self._expanded(q, group) for q in sorted(group)) if e) \
                if mode == "streamed" else ()
            out.append(RegionSite(sorted(group), mode, tuple(src_axes), n.axis, self.inline, online, extra,
                                  shifted_exps(cx, group, self.inline, n.axis), expanded))
        out += [RegionSite(sorted(group), "map", cx.node(min(group)).axes, None, self.inline)
                for group in self._map_groups(taken)]
        out.sort(key=lambda s: s.members[0])
        return out

    def _cone_size(self, i: int, axes: set[str]) -> int:
        """Node i and the inlined nodes a kernel over `axes` computes for it (an upper bound where
        they are shared: each counted once here)."""
        cx, stack, seen = self.cx, [i], set()
        while stack:
            j = stack.pop()
            if j in seen or cx.literal(j):
                continue
            seen.add(j)
            if j == i or (j in self.inline and self._fits(j, axes)):
                stack.extend(cx.node(j).args())
        return sum(1 for j in seen if j == i or j in self.inline)

    def _map_groups(self, taken: set[int]) -> list[set[int]]:
        """The materialised elementwise nodes no row kernel computes, a map kernel each, but
        siblings: nodes over the same axes that read a value in common share one kernel, which
        reads it once (the gradients of an elementwise op's operands, dG and dU of SwiGLU, both
        read the output's cotangent and the gate: two kernels read them twice, 0.163 ms of SwiGLU's
        training step on the H200). A sibling reads no member (a chain cut by the region bounds
        stays cut) and joins where the kernel stays within those bounds and would not wait on
        itself (_reaches)."""
        cx = self.cx
        groups: list[tuple[set[int], set[int], int]] = []  # (members, their global reads, formed index)
        ops: dict[int, int] = {}  # a group's formed index -> the nodes its kernel computes
        for i in sorted(self.materialised - taken):
            axes = cx.node(i).axes
            reads = self._external_reads({i}, set(axes))
            own = self._cone_size(i, set(axes))
            for members, common, k in reversed(groups[-MAP_SIBLINGS_SEEN:]):  # siblings are near in id order
                if cx.node(min(members)).axes != axes or not reads & common or self._reads_any(i, members):
                    continue
                new = members | {i}
                union = self._external_reads(new, set(axes))
                if len(union) > MAX_REGION_INPUTS or ops[k] + own > MAX_REGION_OPS or self._reaches(union, new):
                    continue
                members.add(i)
                common |= reads
                break
            else:
                k = len(self.formed)
                groups.append(({i}, set(reads), k))
                self.formed.append((frozenset(), frozenset(axes)))
                members, ops[k] = groups[-1][0], 0
            ops[k] += own
            self.site_of[i] = k  # formed: _reaches stands it for its reads from now on
            self.formed[k] = (frozenset(members), frozenset(axes))
        return [members for members, _, _ in groups]


def shifted_exps(cx: Ctx, group: set[int], inline: set[int], axis: str) -> tuple[int, ...]:
    """The exps a row kernel computes as exp2((s - m) log2 e) (exp_to_exp2, as softmax rows and
    attention do): exp(s - m) with m = max of s over the kernel's axis, m a member and the exp read
    by a member (the sum of a log-sum-exp: log-softmax, cross-entropy) or one itself. Why: the
    precise expf holds its range reduction in registers (a log-softmax row kernel over 2048 x 32000
    f16: 61 registers against 40 with exp2f, ptxas -v, nvcc 13; at 61 four CTAs of 256 threads fit
    an SM, at 40 six, and the loads in flight set this kernel's speed: the same kernel written by
    hand with exp2 ran 0.1221 ms against the emitted 0.1275 on an H200,
    benchmarks/second_pass/VERDICT.md). Only shifted exps: s - m <= 0, so exp2's argument is
    rounded where the result is largest, exp2(x log2 e) = exp x to a few float32 units there
    (an unshifted exp(x) of x near 88 would be 100 units off), and the kernel's -ftz
    (plan.passes.flush_subnormals) flushes only terms below 2^-126 of a sum whose largest is 1.
    Not in float64 rows (no ftz there, and nothing to gain)."""
    out = []
    for i in sorted(inline | group):
        e = cx.node(i)
        if not (isinstance(e, ir.Unary) and e.op == "exp") or cx.dtype_of(i) == "f64":
            continue
        z = cx.node(e.x)
        if not (isinstance(z, ir.Binary) and z.op == "sub" and z.b in group):
            continue
        m = cx.node(z.b)
        if not (isinstance(m, ir.Reduce) and m.kind == "max" and m.axis == axis and m.x == z.a):
            continue
        if i in group or group.intersection(cx.users[i]):
            out.append(i)
    return tuple(out)


class FuseReduction(Rule):
    name = "fuse_reduction"
    theorem = "LeanTile.fuse_reduction_eval"
    lean_file = "FuseReduction.lean"
    pattern = "reductions over one axis with their elementwise prologue and epilogue"
    rewrite = "one kernel per row block: the prologue in registers, the reductions, the epilogue"
    statement = "a reduction of a mapped tensor equals the fused loop; reductions of one input share a pass"
    params = {"mode": "where the reduced axis lives (on_chip: the whole row in registers; streamed: block by block)"}

    def formula(self, g, at, params):
        S = sym()
        before = r" \qquad ".join(f"{S.out(g, i)} = {S.tex(S.Exprs(g, inline={i})(i))}" for i in sorted(at))
        after = r" \qquad ".join(f"{S.out(g, i)} = {S.tex(S.Exprs(g, inline=set(at))(i))}" for i in sorted(at))
        return before, after + r"\quad\text{(one kernel, %s)}" % S.tex_text(params.get("mode", ""))

    def check(self) -> bool:
        """sum_k f(x_k) and sum_k g(x_k) accumulated in one loop equal the two sums."""
        S = sym()
        xs = [S.s1, S.s2, S.s3]
        f, gg = (lambda x: S.sp.exp(x)), (lambda x: x ** 2)
        a = b = 0
        for x in xs:
            a, b = a + f(x), b + gg(x)
        return S.zero(a - sum(map(f, xs))) and S.zero(b - sum(map(gg, xs)))


class OnlineSum(Rule):
    name = "online_sum"
    theorem = "LeanTile.online_softmax_fold"
    lean_file = "OnlineSoftmax.lean"
    pattern = "sum_d exp(s - max_d s) in a pass that streams d"
    rewrite = "keep the running max m and l = sum exp(s - m), rescaling l by exp(m_old - m_new) per block"
    statement = "folding the tiles with the rescaled state gives sum exp(s - m) for the final m (any running m)"

    def formula(self, g, at, params):
        S = sym()
        m, _, _, l = at
        before = f"{S.out(g, l)} = {S.tex(S.Exprs(g, inline=set(at[1:]))(l))}"
        after = (r"m \leftarrow \max(m, \max_{block} s),\ %s \leftarrow %s\, e^{m_{old} - m} + "
                 r"\sum_{block} e^{s - m}" % (S.out(g, l), S.out(g, l)))
        return before, after

    def check(self) -> bool:
        """l e^{m1 - m2} + sum_block e^{s - m2} equals sum e^{s - m2} over both blocks, l = sum e^{s - m1}."""
        S = sym()
        exp, m1, m2 = S.sp.exp, S.v1, S.v2
        l1 = exp(S.s1 - m1) + exp(S.s2 - m1)
        return S.zero(S.sp.simplify(l1 * exp(m1 - m2) + exp(S.s3 - m2) - sum(exp(x - m2) for x in (S.s1, S.s2, S.s3))))


FUSE_REDUCTION, ONLINE_SUM = FuseReduction(), OnlineSum()


def region_options(sites: list[RegionSite]) -> list[list[Option]]:
    """One option per region site: its one fused kernel (the unfused candidate is the other),
    with its shifted exps as exp2 (always: the same value in fewer registers)."""
    from .gemm import EPILOGUE
    from .softmax import EXP2
    from .stats import VARIANCE
    out = []
    for s in sites:
        if s.mode == "map":
            step = EPILOGUE.step(s.members)
            steps = (step,)
        else:
            step = FUSE_REDUCTION.step(s.members, mode=s.mode)
            steps = (step, *(ONLINE_SUM.step(o) for o in s.online), *(VARIANCE.step([e[0]]) for e in s.expanded),
                     *([EXP2.step(s.exp2)] if s.exp2 else []))
        out.append([Option("", steps, s, step.rule, tuple(s.members))])
    return out
