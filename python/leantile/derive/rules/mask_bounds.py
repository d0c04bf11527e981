"""The rule mask_bounds: key bounds computed from a mask that reads run-time data.

Document masking keeps key j for query i where j <= i and doc[i] == doc[j], the ids read at run
time. skip_masked_tiles reads bounds off comparisons of positions; an equality of ids bounds
nothing, so every key block up to the diagonal ran (FlexAttention builds a block mask from the
data instead). This rewrite adds the bounds to the graph, computed from the same mask:

    first[r] = min_j { j : keep[r, j] }   (t_kv where none)     as -max_j select(keep, -j, -t_kv)
    last[r]  = max_j { j : keep[r, j] }   (-1 where none)       as  max_j select(keep, j, -1)
    count[r] = sum_j keep[r, j]                                 (in float32: exact to 2^24)
    keep'    = static * max(keep, eq(count, last - first + 1)) * (j >= first[r]) * (j <= last[r])

static: copies of keep's factors that compare positions alone (the causal bound). keep' = keep
everywhere: a kept j lies between the first and the last kept key of its row; a row whose count
is its span keeps every key between them (a document: a run of positions), where the max is 1;
elsewhere the max is keep. So the graph computes what it did. The two new comparisons of the key
position with a value read per row become run-time bounds (KeyBound.per_row: a CTA takes the
loosest over its rows), the max an interior condition (KeyBound.flag: a block every row of the
tile keeps whole, each row's count its span, runs without the mask). The bounds are row
reductions over the keys of the mask alone: one small kernel before the attention, reading the
ids, never the scores. The mask's nodes are copied for them, once (a node the attention's score
function shares would become one of its leaves: a [t_q, t_kv] tensor in memory).

Where: a select(keep, y, -inf) that a softmax over key axis t reads (through scalings), y from a
matmul over t (attention's scores), keep a product of comparisons of which one reads an input
along t (data, not positions), and every input keep reads along at most one of its axes (ids per
position: a dense [t_q, t_kv] mask would be read twice, for little).

Lemmas: LeanTile.keep_within_bounds, keep_of_count_eq_span, keep_with_interior (lean/LeanTile/Rules/MaskBounds.lean).
"""
from __future__ import annotations

from ... import ir
from ...dag import DagM
from .base import Rule, sym
from .masks import conditions

def _ancestors(g: ir.Graph, i: int) -> set[int]:
    seen, stack = {i}, [i]
    while stack:
        for a in g.node(stack.pop()).args():
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def _is_scalar_constant(g: ir.Graph, i: int) -> bool:
    """A scalar computed from literals and sizes alone (1 / sqrt(d_h))."""
    return not g.node(i).axes and all(isinstance(g.node(a), (ir.Const, ir.SizeConst, ir.Unary, ir.Binary))
                                      for a in _ancestors(g, i))


def _masked_scores(g: ir.Graph, x: int) -> list[int]:
    """The -inf selects a max reduction's operand x is (through scalings by constants)."""
    found = []
    while True:
        n = g.node(x)
        if isinstance(n, ir.Select) and isinstance(g.node(n.b), ir.Const) and g.node(n.b).value == ir.NEG_INF:
            found.append(x)
            x = n.a
        elif isinstance(n, ir.Binary) and n.op in ("mul", "div") and _is_scalar_constant(g, n.b):
            x = n.a
        elif isinstance(n, ir.Binary) and n.op == "mul" and _is_scalar_constant(g, n.a):
            x = n.b
        else:
            return found


def sites(g: ir.Graph) -> list[tuple[int, str]]:
    """(select node, key axis) of every masked attention score whose keep reads ids per position."""
    out = []
    for r in g.nodes:
        if not (isinstance(r, ir.Reduce) and r.kind == "max"):
            continue
        t = r.axis
        for z in _masked_scores(g, r.x):
            sel = g.node(z)
            keep = g.node(sel.cond)
            factors = conditions(g, sel.cond)
            if factors is None or t not in keep.axes or (z, t) in out:
                continue
            up = _ancestors(g, sel.a)
            if not any(isinstance(g.node(a), ir.Matmul) and t in g.node(a).axes for a in up):
                continue  # not attention's scores: no key blocks to skip
            inputs = [g.node(a) for a in _ancestors(g, sel.cond) if isinstance(g.node(a), ir.Input)]
            if any(len(set(n.axes) & set(keep.axes)) > 1 for n in inputs):
                continue  # a dense mask: computing bounds from it reads it twice
            data = [f for f in factors if any(isinstance(g.node(a), ir.Input) and t in g.node(a).axes
                                              for a in _ancestors(g, f))]
            if data:
                out.append((z, t))
    return out


def _reads_input(g: ir.Graph, i: int) -> bool:
    return any(isinstance(g.node(a), ir.Input) for a in _ancestors(g, i))


def _copy(dag: DagM, g: ir.Graph, i: int, new: dict[int, int], memo: dict[int, int]) -> int:
    """Node i of g rebuilt in dag, its elementwise ancestors copied, inputs shared (new: g id ->
    dag id of the nodes already pushed)."""
    if i in memo:
        return memo[i]
    n = g.node(i)
    if isinstance(n, (ir.Input, ir.Reduce, ir.Matmul)):
        memo[i] = new[i]
        return memo[i]
    args = {a: _copy(dag, g, a, new, memo) for a in n.args()}
    dag.nodes.append(ir.with_args(n, args, id=len(dag.nodes)))
    memo[i] = len(dag.nodes) - 1
    return memo[i]


def bound_masks(g: ir.Graph) -> tuple[ir.Graph, tuple[ir.Step, ...]]:
    """(g with the bounds of each site added to its mask, one step per site); (g, ()) where none."""
    found = dict(sites(g))
    if not found:
        return g, ()
    dag = DagM(g.name, dict(g.axes))
    new: dict[int, int] = {}
    at = []
    for n in g.nodes:
        if n.id in found:
            t = found[n.id]
            keep = n.cond
            ext = str(g.axes[t])
            copy = _copy(dag, g, keep, new, {})  # the bounds' one row kernel reads it
            first = dag.neg(dag.red("max", dag.select(copy, dag.neg(dag.iota(t)), dag.const(f"-{ext}")), t))
            last = dag.red("max", dag.select(copy, dag.iota(t), dag.const("-1")), t)
            # in float32 whatever the mask's dtype: counts and positions exact to 2^24
            count = dag.red("sum", dag.cast(copy, "f32"), t)
            exact = dag.eq(count, dag.add(dag.sub(last, first), dag.const("1")))
            kpos = dag.iota(t)
            # keep is 1 on an exact row's span; the comparisons of positions alone (the causal
            # bound) are factors again, copied (keep's own nodes are its, in the max)
            bounded = dag.max(new[keep], exact)
            for f in conditions(g, keep):
                if not _reads_input(g, f):
                    bounded = dag.mul(_copy(dag, g, f, new, {}), bounded)
            bounded = dag.mul(dag.mul(bounded, dag.ge(kpos, first)), dag.le(kpos, last))
            dag.nodes.append(ir.with_args(n, new, id=len(dag.nodes), cond=bounded))
            new[n.id] = len(dag.nodes) - 1
            at.append(((first, last, new[n.id]), t))
            continue
        dag.nodes.append(ir.with_args(n, new, id=len(dag.nodes)))
        new[n.id] = len(dag.nodes) - 1
    h = ir.Graph(name=g.name, axes=g.axes, nodes=tuple(dag.nodes), outputs={o: new[i] for o, i in g.outputs.items()})
    problems = ir.check(h)
    if problems:  # a bug here, never the user's graph: it passed the same check
        raise AssertionError(f"mask_bounds made an invalid graph of {g.name!r}: {problems}")
    return h, tuple(MASK_BOUNDS.step(a, axis=t) for a, t in at)


class MaskBounds(Rule):
    name = "mask_bounds"
    theorem = "LeanTile.keep_with_interior"
    lean_file = "MaskBounds.lean"
    pattern = ("attention scores select(keep, s, -inf), keep a product of comparisons of which one reads "
               "run-time data along the keys (document ids)")
    rewrite = ("static * max(keep, count = last - first + 1) * (j >= first) * (j <= last), first, last and "
               "count the first and last key each row keeps and how many (row reductions of the mask alone): "
               "bounds skip_masked_tiles reads at run time, and rows whose blocks within them run unmasked")
    statement = ("for keep : Fin n -> Prop decidable, a kept j lies between the least and the greatest kept "
                 "index, and where the kept indices are as many as that interval holds they are all of it, so "
                 "static j and (keep j or count = span) and first <= j and j <= last is keep j (keep -> static)")
    params = {"axis": "the key axis the bounds are over"}

    def formula(self, g, at, params):
        t = params.get("axis", "j")
        return (r"\mathrm{select}(\mathit{keep}_{r,%s}, s, -\infty)" % t,
                r"\mathrm{select}(\max(\mathit{keep}_{r,%s}, [\#\mathit{keep} = \mathit{span}]) [%s \ge \min\{%s : \mathit{keep}\}] "
                r"[%s \le \max\{%s : \mathit{keep}\}], s, -\infty)" % (t, t, t, t, t))

    def check(self) -> bool:
        """Over every keep of 4 keys (16 patterns) and every static mask it implies,
        static[j] * max(keep[j], [count = last - first + 1]) * [j >= first] * [j <= last] = keep[j],
        first = min of the kept j (4 where none), last = their max (-1 where none), count their number."""
        S = sym()
        sp = S.sp
        for bits in range(16):
            keep = [(bits >> j) & 1 for j in range(4)]
            kept = [j for j in range(4) if keep[j]]
            first, last = min(kept, default=4), max(kept, default=-1)
            exact = int(len(kept) == last - first + 1)
            for extra in range(16):  # static: keep and any other keys
                static = [keep[j] | ((extra >> j) & 1) for j in range(4)]
                for j in range(4):
                    if sp.Integer(static[j] * max(keep[j], exact) * (j >= first) * (j <= last)) != keep[j]:
                        return False
        return True


MASK_BOUNDS = MaskBounds()
