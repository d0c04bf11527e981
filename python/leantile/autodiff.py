"""Reverse mode on the graph IR: `vjp(graph)` is the backward of a graph as another `ir.Graph`.

The backward graph reads the forward's inputs it needs (same names), the values the forward saved
(`save`: forward nodes the backward receives as inputs instead of recomputing them) and one
cotangent per forward output; it writes one gradient per input. Every rule, plan pass, verifier,
interpreter, emitter and search applies to it unchanged: it is an ordinary graph.

Each op's vector-Jacobian product is the op registry's `vjp` column (leantile.ir.ops); the
structural ones are here: a sum's cotangent is its result's, broadcast along the summed axis; a
max's goes to the positions equal to the max, split evenly between ties (torch's amax); a
broadcast operand's is summed over the axes it was broadcast along; a contraction's are the two
contractions of the cotangent with the other operand (dA = dY Bᵀ, dB = Aᵀ dY, batch axes kept).

Cotangents are kept broadcast where the math is: a gradient may lack axes of its input (it is
constant along them) and may list them in another order; `Gradient.axes` says which, and
`Gradient.like_input` (torch) expands and permutes it to the input's shape for free (a view).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from . import ir
from .dag import DagM
from .ir import ops
from .ir.axis_names import unclash


@dataclass(frozen=True)
class Gradient:
    output: str                # the backward graph's output that holds it
    axes: tuple[str, ...]      # its axes: a subset of the input's, in the backward's order

    def like_input(self, t, input_axes: tuple[str, ...], sizes: dict[str, int]):
        """t (a torch tensor over self.axes) as a tensor of the input's shape: the missing axes
        broadcast (stride 0), the rest permuted into the input's order. Views only."""
        for a in input_axes:
            if a not in self.axes:
                t = t.unsqueeze(-1)
        have = list(self.axes) + [a for a in input_axes if a not in self.axes]
        t = t.permute([have.index(a) for a in input_axes])
        return t.expand([sizes[a] for a in input_axes])


@dataclass(frozen=True)
class Backward:
    graph: ir.Graph | None       # None: no output depends differentiably on wrt (all gradients zero)
    grads: dict[str, Gradient]   # forward input name -> its gradient (absent: none flows, zero)
    cotangents: dict[str, str]   # forward output name -> the backward input of its cotangent
    saved: dict[str, int]        # backward input name -> the forward node whose value it receives


class _Names:
    """Fresh identifiers beside the graph's own names."""

    def __init__(self, taken):
        self.taken = set(taken)

    def fresh(self, want: str) -> str:
        want = want[:ir.MAX_NAME - 4]
        name, k = want, 1
        while name in self.taken:
            name, k = f"{want}_{k}", k + 1
        self.taken.add(name)
        return name


def default_saved(g: ir.Graph) -> frozenset[int]:
    """What the forward saves for the backward by default: its GEMM products no larger than the
    graph's inputs together (an MLP's X W, which an activation's derivative reads: recomputed, each
    would be one more GEMM in the backward, half again its FLOPs), never a product larger than that
    (attention's scores Q K^T, [t, t] per head: recomputed from the saved nothing, as flash
    attention does). vjp keeps those the backward reads. Also a log-sum-exp row and a softmax or
    log-softmax that is an output (below). Everything else is recomputed from the inputs:
    elementwise values and row statistics cost one read of what the backward reads anyway."""
    budget = sum(math.prod(g.shape(n.id)) for n in g.inputs())
    scores = attention_scores(g)
    gemms = {n.id for n in g.nodes if isinstance(n, ir.Matmul) and math.prod(g.shape(n.id)) <= budget
             and n.id not in scores}
    # a log-sum-exp row (a cross-entropy's, a logsumexp's: one value a row) and a softmax or
    # log-softmax the graph outputs anyway: their closed-form cotangents (back_row) then need no
    # row statistics again. Recomputed, the cross-entropy backward streamed its 8192 x 32000 logits
    # twice (max and sum, then the gradient): 0.90 ms a training step against torch.compile's 0.68
    # on an H200; with the row's lse saved it reads them once
    outs = set(g.outputs.values())
    rows = {r for r, (form, _, _) in row_forms(g).items() if form == "logsumexp" or r in outs}
    # attention's output P V (the graph's output: handed over, nothing stored): the backward's row
    # term is then rowsum(dO O) (back_row), not a pass over the keys with dP = dO V^T per block;
    # and its softmax's max and sum (two float32 a query row, which the flash forward holds at its
    # end): the backward's P is exp(z - max) / sum tile by tile, no statistics pass over the keys
    attention = {i for row in attention_rows(g).values() for i in row}
    return frozenset(gemms | rows | attention)


def attention_rows(g: ir.Graph) -> dict[int, tuple[int, int, int]]:
    """{softmax row P: (the product P V over the row's axis, the row's max, its sum)} for each
    softmax row (row_forms) that a matmul contracts over its axis as its first operand: attention.
    The backward reads the output O = P V for its row term (D = rowsum(dO O), back_row)."""
    users, out = g.users(), {}
    for r, (form, z, u) in row_forms(g).items():
        pv = [v for v in users[r] if isinstance(g.nodes[v], ir.Matmul) and g.nodes[v].a == r and g.nodes[v].axis_a == u]
        if form == "softmax" and len(pv) == 1:
            sm = g.nodes[r].b
            mx = g.nodes[g.nodes[g.nodes[r].a].x].b  # exp(z - max) / sum: the sub's max
            out[r] = (pv[0], mx, sm)
    return out


def attention_scores(g: ir.Graph) -> set[int]:
    """The products that are attention's scores: a matmul under an attention row (attention_rows)
    over one of its axes (through elementwise nodes: a scale, a mask). Never saved, at any size:
    the backward's flash_backward kernels recompute them tile by tile, and a saved [t_q, t_kv]
    product would be the memory the flash backward exists to avoid (at test sizes it is smaller
    than the inputs, and saving it there alone would test another backward than the one that
    runs at scale)."""
    forms, out = row_forms(g), set()
    for r in attention_rows(g):
        _, z, u = forms[r]
        stack = [z]
        while stack:
            n = g.nodes[stack.pop()]
            if isinstance(n, ir.Matmul) and u in n.axes:
                out.add(n.id)
            elif isinstance(n, (ir.Unary, ir.Binary, ir.Select, ir.Cast)):
                stack += list(n.args())
    return out


def forward_saving(g: ir.Graph, bw: Backward) -> ir.Graph:
    """g with the values bw reads of it (bw.saved) as extra outputs, under the names of bw's inputs
    that receive them: run this forward, hand those outputs to the backward. A value the backward
    reads wider than g has it (attention's row statistics, in float32: _Reverse._wide) is output
    through a cast to that dtype."""
    if not bw.saved:
        return g
    dtypes, wanted = ir.value_dtypes(g), {n.name: n.dtype for n in bw.graph.inputs()}
    nodes, outputs = list(g.nodes), dict(g.outputs)
    for name, i in bw.saved.items():
        if wanted.get(name, dtypes[i]) != dtypes[i]:
            nodes.append(ir.Cast(id=len(nodes), op="cast", x=i, dtype=wanted[name], axes=g.nodes[i].axes))
            i = len(nodes) - 1
        outputs[name] = i
    return g.model_copy(update={"nodes": tuple(nodes), "outputs": outputs, "derivation": ()})




def training_forward(g: ir.Graph) -> tuple[ir.Graph | None, dict[str, int]]:
    """(the forward that also stores what the backward reads of g under default_saved beyond g's own
    outputs, those values {backward input name: forward node}); (None, {}) where the backward reads
    nothing of it, or only its outputs (a log-softmax's): the inference forward serves training
    too. leantile.torch.op compiles it beside the inference forward; leantile.precompile compiles
    it ahead."""
    save = default_saved(g)
    bw = vjp(g, save=save) if save else None
    if bw is None or not bw.saved:
        return None, {}
    outs = set(g.outputs.values())
    extra = {k: v for k, v in bw.saved.items() if v not in outs}  # an output is handed over as it is
    return (forward_saving(g, dataclasses.replace(bw, saved=extra)) if extra else None), extra


def needs_gradient(g: ir.Graph, wrt) -> set[int]:
    """Nodes whose value depends on an input in `wrt` (through an op with a gradient)."""
    need: set[int] = set()
    for n in g.nodes:
        if isinstance(n, ir.Input):
            if n.name in wrt:
                need.add(n.id)
        elif isinstance(n, ir.Select):
            if n.a in need or n.b in need:
                need.add(n.id)
        elif isinstance(n, ir.Binary) and n.op in ops.COMPARISONS:
            continue
        elif any(a in need for a in n.args()):
            need.add(n.id)
    return need


def vjp(g: ir.Graph, wrt=None, save=None) -> Backward:
    """The backward of g with respect to the inputs named in `wrt` (all of them by default),
    reading those of the forward nodes in `save` (default: default_saved) it needs as inputs.
    Raises ir.GraphError where `wrt` names no input."""
    wrt = {n.name for n in g.inputs()} if wrt is None else set(wrt)
    unknown = wrt - {n.name for n in g.inputs()}
    if unknown:
        raise ir.GraphError([f"{g.name}: vjp wrt {sorted(unknown)}: not inputs of the graph"])
    save = default_saved(g) if save is None else frozenset(save)
    # contractions whose axis name is also a free axis of the other operand, renamed apart first
    # (positions keep their order: the tensors are the same): the backward joins the cotangents
    # of both sides by name, which would tie the two axes together
    apart = unclash(g)
    bw = _Reverse(apart, wrt, save).run()
    if apart is g or bw.graph is None:
        return bw
    own = {}  # each input's renamed axis -> its own name
    for n, m in zip(g.inputs(), apart.inputs()):
        own[n.name] = dict(zip(m.axes, n.axes))
    grads = {k: Gradient(v.output, tuple(own[k][a] for a in v.axes)) for k, v in bw.grads.items()}
    return Backward(bw.graph, grads, bw.cotangents, bw.saved)


def _op(g: ir.Graph, i: int, cls, op: str | None = None, kind: str | None = None):
    """Node i if it is a `cls` node (of op `op`, of reduction kind `kind`), else None."""
    n = g.nodes[i]
    if not isinstance(n, cls) or (op is not None and n.op != op) or (kind is not None and n.kind != kind):
        return None
    return n


def row_forms(g: ir.Graph) -> dict[int, tuple]:
    """{root: (form, z, axis)} for each softmax, log-softmax and log-sum-exp over an
    axis of z written with its max shift (as dag's softmax and users write them):
        softmax      e / sum_u e,              e = exp(z - max_u z)
        log_softmax  (z - m) - log sum_u exp(z - m)
        logsumexp    log sum_u exp(z - m) + m
    whose inner nodes (the max, the shift, the exponentials, their sum, its log) nothing else reads
    and no output is. Their cotangents are the closed forms (`_Reverse.back_row`), with no gradient
    through the max (the shift cancels: LeanTile.softmax_shift_invariant)."""
    users, outs = g.users(), set(g.outputs.values())
    out = {}

    def only(i: int, readers: set[int]) -> bool:
        return i not in outs and set(users[i]) <= readers

    def shifted(sub_id: int):
        """(z, m, axis) where sub_id = z - max_u z."""
        s = _op(g, sub_id, ir.Binary, "sub")
        m = s and _op(g, s.b, ir.Reduce, kind="max")
        return (s.a, m.id, m.axis) if m and m.x == s.a else None

    def sum_exp(l_id: int):
        """(sub, exp, axis) where l_id = sum_u exp(sub)."""
        l = _op(g, l_id, ir.Reduce, kind="sum")
        e = l and _op(g, l.x, ir.Unary, "exp")
        return (e.x, e.id, l.axis) if e else None

    for n in g.nodes:
        if isinstance(n, ir.Binary) and n.op == "div":  # softmax
            se = sum_exp(n.b)
            if se and se[1] == n.a and (sh := shifted(se[0])) and sh[2] == se[2]:
                z, m, u = sh
                if only(n.a, {n.b, n.id}) and only(n.b, {n.id}) and only(se[0], {n.a}) and only(m, {se[0]}):
                    out[n.id] = ("softmax", z, u)
        elif isinstance(n, ir.Binary) and n.op in ("sub", "add"):
            for lg_id, other in ((n.b, n.a), (n.a, n.b)) if n.op == "add" else ((n.b, n.a),):
                lg = _op(g, lg_id, ir.Unary, "log")
                se = lg and sum_exp(lg.x)
                sh = se and shifted(se[0])
                if not (sh and sh[2] == se[2]):
                    continue
                z, m, u = sh
                # the shift the root subtracts from: the exponent's own node, or another z - m
                same = other == se[0] or (shifted(other) or (None,) * 3)[:2] == (z, m)
                if n.op == "sub" and same and only(se[0], {se[1], n.id}) and only(other, {se[1], n.id}) \
                        and only(se[1], {lg.x}) and only(lg.x, {lg.id}) and only(lg.id, {n.id}) \
                        and only(m, {se[0], other}):
                    out[n.id] = ("log_softmax", z, u)
                elif n.op == "add" and other == m and only(se[0], {se[1]}) and only(se[1], {lg.x}) \
                        and only(lg.x, {lg.id}) and only(lg.id, {n.id}) and only(m, {se[0], n.id}):
                    out[n.id] = ("logsumexp", z, u)
    return out


class _Reverse:
    def __init__(self, g: ir.Graph, wrt: set[str], save: frozenset[int]):
        self.g, self.wrt, self.save = g, wrt, save
        self.dtypes = ir.value_dtypes(g)
        self.b = DagM(g.name[:ir.MAX_NAME - 4] + "_vjp", g.axes)
        self.names = _Names([n.name for n in g.inputs()] + list(g.outputs))
        self.copied: dict[int, int] = {}
        self.saved: dict[str, int] = {}
        self.ct: dict[int, list[int]] = {}
        self.totals: dict[int, int] = {}  # a forward node's cotangent, once its users are all walked
        self._dtypes: list[str] = []
        self._attention = attention_rows(g)
        self._users = g.users()
        # attention's row statistics, read by the backward in float32 where the graph is 16-bit (a
        # max rounded to f16 shifts every P of its row by up to 1%: exp(its rounding error));
        # forward_saving outputs them through a cast
        self._wide = {x for _, mx, sm in self._attention.values() for x in (mx, sm)}

    # -- the forward's values, in the backward graph --------------------------------------------
    def fwd(self, i: int) -> int:
        """Forward node i in the backward graph: an input, a saved value, or recomputed."""
        if i in self.copied:
            return self.copied[i]
        n = self.g.nodes[i]
        b = self.b
        if i in self.save and not isinstance(n, (ir.Const, ir.SizeConst, ir.Iota, ir.Input)):
            name = self.names.fresh(f"saved_{i}")
            self.saved[name] = i
            wide = i in self._wide and self.dtypes[i] in ir.HALF_DTYPES
            out = b.input(name, n.axes, "f32" if wide else self.dtypes[i])
        elif isinstance(n, ir.Input):
            out = b.input(n.name, n.axes, n.dtype)
        elif isinstance(n, ir.Const):
            out = b.const(n.value)
        elif isinstance(n, ir.SizeConst):
            out = b.size_const(n.axis)
        elif isinstance(n, ir.Iota):
            out = b.iota(n.axis)
        elif isinstance(n, ir.Unary):
            out = b._unary(n.op, self.fwd(n.x))
        elif isinstance(n, ir.Cast):
            out = b.cast(self.fwd(n.x), n.dtype)
        elif isinstance(n, ir.Binary):
            out = b._binary(n.op, self.fwd(n.a), self.fwd(n.b))
        elif isinstance(n, ir.Select):
            out = b.select(self.fwd(n.cond), self.fwd(n.a), self.fwd(n.b))
        elif isinstance(n, ir.Reduce):
            out = b.red(n.kind, self.fwd(n.x), n.axis)
        elif isinstance(n, ir.Matmul):
            out = b.matmul(self.fwd(n.a), self.fwd(n.b), n.axis_a, n.axis_b)
        else:  # unreachable: the IR has no other node
            raise ir.GraphError([f"node {i} ({n.op}): vjp has no rule for it (a bug in leantile.autodiff)"])
        self.copied[i] = out
        return out

    # -- cotangents ------------------------------------------------------------------------------
    def axes(self, j: int) -> tuple[str, ...]:
        return self.b.nodes[j].axes

    def give(self, i: int, contribution: int | None, over: tuple[str, ...] = ()) -> None:
        """Add a cotangent contribution to forward node i. The contribution is over the axes
        `over` (the result's of the op that produced it; it may lack some, being constant along
        them) and its own: i's cotangent is its sum over the axes i lacks, a missing one counted
        by its length (the sum of a constant). Cast to i's dtype, as autograd hands a gradient
        in its value's dtype (a GEMM's operands must agree)."""
        if contribution is None or i not in self.need:
            return
        b = self.b
        target = self.g.nodes[i].axes
        for a in dict.fromkeys(tuple(over) + self.axes(contribution)):
            if a in target:
                continue
            if a in self.axes(contribution):
                contribution = b.red("sum", contribution, a)
            else:
                contribution = b.mul(contribution, b.size_const(a))
        if self.b_dtype(contribution) != self.dtypes[i]:
            contribution = b.cast(contribution, self.dtypes[i])
        self.ct.setdefault(i, []).append(contribution)

    def total(self, i: int) -> int:
        """i's cotangent: its contributions summed, one over i's axes in i's order first (a sum
        takes its first operand's order)."""
        target = self.g.nodes[i].axes
        parts = sorted(self.ct[i], key=lambda p: self.axes(p) != target)
        out = parts[0]
        for p in parts[1:]:
            out = self.b.add(out, p)
        return out

    def full(self, j: int, axes: tuple[str, ...]) -> int:
        """Cotangent j broadcast to all of `axes` (it may lack some: constant along them)."""
        for a in axes:
            if a not in self.axes(j):
                j = self.b.add(j, self.b.mul(self.b.iota(a), self.b.const("0.0")))
        return j

    def in_order(self, j: int, axes: tuple[str, ...]) -> int:
        """j with its axes in the order they have in `axes` (an input's): a gradient is stored in
        its input's layout. Permuted it is a strided store (the cross-entropy backward's gradient of
        X [m, d] came out [d, m], the one-hot's order: 6.6 ms where torch.compile takes 0.68 on an
        H200) and a permuted view for the caller. The IR has no transpose: a zero over the axes
        in order, plus j, has that order (a sum takes its first operand's); 0 + x is x."""
        have = self.axes(j)
        if have == tuple(a for a in axes if a in have):
            return j
        b, zero = self.b, None
        for a in axes:
            if a in have:
                z = b.mul(b.iota(a), b.const("0.0"))
                zero = z if zero is None else b.add(zero, z)
        return b.add(zero, j)

    def rename(self, j: int, old: str, new: str) -> int:
        """j's axis `old` called `new` (same size): j contracted with the identity [old, new]. The
        IR has no rename; a contraction whose two axes have different names needs one."""
        b = self.b
        eye = b.cast(b.eq(b.iota(old), b.iota(new)), self.b_dtype(j))
        return b.matmul(j, eye, old, old)

    def b_dtype(self, j: int) -> str:
        """The dtype backward node j has (ir.value_dtype), extended as nodes are added."""
        while len(self._dtypes) < len(self.b.nodes):
            self._dtypes.append(ir.value_dtype(self.b.nodes[len(self._dtypes)], self._dtypes, self.b.nodes))
        return self._dtypes[j]

    # -- the walk --------------------------------------------------------------------------------
    def run(self) -> Backward:
        g, b = self.g, self.b
        self.need = needs_gradient(g, self.wrt)
        self.rows = {r: f for r, f in row_forms(g).items() if f[1] in self.need}
        cotangents: dict[str, str] = {}
        for out, i in g.outputs.items():
            if i in self.need:
                name = self.names.fresh(f"d_{out}")
                cotangents[out] = name
                self.ct.setdefault(i, []).append(b.input(name, g.nodes[i].axes, self.dtypes[i]))
        for n in reversed(g.nodes):
            if n.id in self.ct and not isinstance(n, ir.Input):
                self.totals[n.id] = self.total(n.id)
                self.back(n, self.totals[n.id])
        grads: dict[str, Gradient] = {}
        for n in g.inputs():
            if n.id in self.ct and n.name in self.wrt:
                j = self.in_order(self.total(n.id), n.axes)
                if self.b_dtype(j) != n.dtype:
                    j = b.cast(j, n.dtype)
                name = self.names.fresh(f"d_{n.name}")
                b.output(name, j)
                grads[n.name] = Gradient(name, self.axes(j))
        if not grads:  # every path from wrt to an output passes a comparison or a select's condition
            return Backward(None, {}, {}, {})
        graph = _pruned(b.graph())
        # only what the backward reads: a saved value an op's VJP was handed but did not use (add's
        # result) is pruned with its input, and the forward need not store it
        read = {n.name for n in graph.inputs()}
        return Backward(graph, grads, cotangents, {k: v for k, v in self.saved.items() if k in read})

    def back(self, n, dy: int) -> None:
        b = self.b
        if n.id in self.rows:
            self.back_row(n, dy, *self.rows[n.id])
        elif isinstance(n, (ir.Unary, ir.Binary, ir.Select)):
            args = n.args()
            contributions = ops.BY_NAME[n.op].vjp(b, tuple(self.fwd(a) for a in args), self.fwd(n.id), dy)
            for a, c in zip(args, contributions):
                self.give(a, c, n.axes)
        elif isinstance(n, ir.Cast):
            self.give(n.x, dy)  # give casts it back to the source's dtype
        elif isinstance(n, ir.Reduce) and n.kind == "sum":
            self.give(n.x, dy)
        elif isinstance(n, ir.Reduce):  # max: the positions equal to it, ties sharing evenly
            hit = b.eq(self.fwd(n.x), self.fwd(n.id))
            self.give(n.x, b.mul(hit, b.div(dy, b.red("sum", hit, n.axis))))
        elif isinstance(n, ir.Matmul):
            self.back_matmul(n, self.full(dy, n.axes))

    def back_row(self, n, dy: int, form: str, z: int, u: str) -> None:
        """The closed-form cotangents of row_forms, over the axis u of z (dy may lack u: constant
        along it, its sum then u's length times it):
            softmax p:      dz = p (dy - sum_u dy p)
            log_softmax y:  dz = dy - exp(y) sum_u dy
            logsumexp r:    dz = dy exp(z - r)."""
        b = self.b
        y = self.fwd(n.id)

        def total(t: int) -> int:
            return b.red("sum", t, u) if u in self.axes(t) else b.mul(t, b.size_const(u))
        pv = self._saved_attention_output(n)
        if form == "softmax" and pv is not None:
            # attention whose output O = P V the forward hands over: sum_u dy P, dy = dO V^T, is
            # sum over the value axes of dO O (LeanTile.attention_row_term, Rules/FlashBackward.lean:
            # the two sums commute); FlashAttention's D. The backward then reads two [t_q, d]
            # tensors for it instead of a pass over the keys (flash_backward's statistics kernel
            # computed dP = dO V^T again for it: 0.09 of the 0.32 ms backward of 16 x 2048^2 x 128)
            o = self.g.nodes[pv]
            d_o = self.totals[pv]
            t = b.mul(d_o, self.fwd(pv))
            for a in o.axes:
                if a not in self.g.nodes[n.id].axes and a in self.axes(t):
                    t = b.red("sum", t, a)
            c = b.mul(y, b.sub(dy, t))
        elif form == "softmax":
            c = b.mul(y, b.sub(dy, total(b.mul(dy, y))))
        elif form == "log_softmax":
            c = b.sub(dy, b.mul(b.exp(y), total(dy)))
        else:
            c = b.mul(dy, b.exp(b.sub(self.fwd(z), y)))
        self.give(z, c, self.g.nodes[z].axes)

    def _saved_attention_output(self, n) -> int | None:
        """The product O = P V where softmax row n is attention (attention_rows), P's only reader,
        its value saved and its cotangent known; else None."""
        found = self._attention.get(n.id)
        if found is None or found[0] not in self.save or found[0] not in self.totals:
            return None
        return found[0] if self._users[n.id] == [found[0]] else None

    def back_matmul(self, n, dy: int) -> None:
        """Y = A ·(axis_a, axis_b) B with batch axes shared: dA = Σ over Y's axes from B of dY B,
        dB = Σ over Y's axes from A of A dY, each a contraction over the first such axis and sums
        over the rest (or a broadcast product when there is none). dY's dtype is Y's (give)."""
        g = self.g
        A, B = g.nodes[n.a], g.nodes[n.b]
        ka, kb = n.axis_a, n.axis_b
        a_free = [x for x in A.axes if x != ka]
        b_rest = [x for x in B.axes if x != kb and x not in a_free]
        a_only = [x for x in a_free if x not in B.axes]
        if n.a in self.need:  # dA over B's contraction axis, renamed after: A's name for it is in no other
            t = self._side(dy, self.fwd(n.b), b_rest, first=True, want=A.axes if ka == kb else ())
            self.give(n.a, t if ka == kb else self.rename(t, kb, ka))
        if n.b in self.need:  # dB: A renamed before (dY may carry a free axis of B named like A's)
            a = self.fwd(n.a) if ka == kb else self.rename(self.fwd(n.a), ka, kb)
            self.give(n.b, self._side(dy, a, a_only, first=False, want=B.axes))

    def _side(self, dy: int, other: int, over: list[str], first: bool, want: tuple[str, ...] = ()) -> int:
        """Σ over `over` (Y's axes the gradient's operand lacks) of dY times the other operand: a
        contraction over the longest, sums over the rest, a broadcast product where there is none.
        The contraction's operands go in the order whose product has its axes in `want`'s order
        (the operand's own) where one does: attention's dK = dSᵀ Q as matmul(dS, Q) over the
        queries is [h, t_kv, d_h], K's layout; matmul(Q, dS) was [h, d_h, t_kv], which in_order then
        turned back by a zero-add (the GEMM's output stored transposed, and no attention-backward
        site could see the product)."""
        b = self.b
        if not over:
            return b.mul(dy, other)
        # the contraction takes the longest axis, the sums the others: the product before the sums
        # holds the others as batch axes (GQA's dK = sum over the group and the queries of dS Q:
        # contracting the group of 4 first held [h_kv, t_q, d_h, t_kv], 2^31 values at t = 2048)
        e = max(over, key=lambda a: self.g.axes[a])
        pairs = [(dy, other), (other, dy)] if first else [(other, dy), (dy, other)]

        def ordered(x: int, y: int) -> bool:
            got = tuple(a for a in ir.matmul_axes(self.axes(x), self.axes(y), e, e) if a not in over)
            return got == tuple(a for a in want if a in got)
        x, y = next((p for p in pairs if ordered(*p)), pairs[0])
        t = b.matmul(x, y, e, e)
        for x in over:
            if x != e:
                t = b.red("sum", t, x)
        return t


def _pruned(g: ir.Graph) -> ir.Graph:
    """g without the nodes no output reads (the backward copies operands its VJPs may not use),
    renumbered in order."""
    live: set[int] = set()
    stack = list(g.outputs.values())
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(g.nodes[i].args())
    new = {}
    nodes = []
    for n in g.nodes:
        if n.id not in live:
            continue
        nodes.append(ir.with_args(n, new, id=len(nodes)))
        new[n.id] = len(nodes) - 1
    out = ir.Graph(name=g.name, axes=g.axes, nodes=tuple(nodes), outputs={k: new[v] for k, v in g.outputs.items()})
    problems = ir.check(out)
    if problems:
        raise ir.GraphError([f"{g.name}: the backward graph is malformed (a bug in leantile.autodiff): {problems[0]}"])
    return out
