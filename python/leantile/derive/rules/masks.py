"""The mask rule: skip_masked_tiles, and the key bounds it reads off a mask.

Attention under a mask (causal, a sliding window, an offset causal for t_q != t_kv) writes
select(keep, s, -inf) with keep a product of comparisons of positions (iota). A block of keys
that no query row of a CTA's tile keeps holds only -inf scores: it adds exp(-inf - m) = 0 to the
sums and does not raise the max, so the stream can skip it (LeanTile.fold_skip_masked). The
rule reads each comparison as a bound on the key, key <= coef * row + offset or key >= ...,
with coef in {-1, 0, 1} and whole offsets; a comparison of another form bounds nothing (the
mask is still applied to every block that runs: skipping fewer blocks is always right).
Only -inf fills: with a finite fill a masked key still weighs exp(fill - m), and a row whose
keys are all masked averages every value (the graph says so), so no block may be skipped.
"""
from __future__ import annotations

import math

from ... import ir
from ... import plan as ir_plan
from ...plan import KeyBound
from ..context import Ctx
from ..sites import FlashSite
from .base import Rule, sym

_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

# Key blocks that every row of a CTA's tile keeps whole run without the mask (a select whose
# keep is exactly its bounds, and the positions and comparisons only it reads, run on boundary
# blocks alone: Map.boundary_only). Off, the mask runs on every block that runs:
# benchmarks/mask_interior/mask_interior.py times both in one process.
UNMASK_INTERIOR = True


def _affine(cx: Ctx, i: int, key: str, row: str, leaves: frozenset = frozenset()) -> tuple | None:
    """(a, b, c, r, leaf) with node i = a * key position + b * row position + c + r * leaf, leaf
    one of `leaves` (a value the kernel reads per CTA: padding lengths) or None, else None."""
    lit = cx.literal(i)
    if lit is not None:
        v = float(lit[1:])
        return (0.0, 0.0, v, 0.0, None) if math.isfinite(v) else None
    if i in leaves:
        return (0.0, 0.0, 0.0, 1.0, i)
    n = cx.node(i)
    if isinstance(n, ir.Iota):
        return (1.0, 0.0, 0.0, 0.0, None) if n.axis == key else (0.0, 1.0, 0.0, 0.0, None) if n.axis == row else None
    if isinstance(n, ir.Unary) and n.op == "neg":
        x = _affine(cx, n.x, key, row, leaves)
        return None if x is None else (*(-v for v in x[:4]), x[4])
    if isinstance(n, ir.Binary) and n.op in ("add", "sub", "mul"):
        a, b = _affine(cx, n.a, key, row, leaves), _affine(cx, n.b, key, row, leaves)
        if a is None or b is None:
            return None
        if n.op in ("add", "sub"):
            if a[4] is not None and b[4] is not None and a[4] != b[4]:
                return None  # two run-time values: not one bound
            sign = 1.0 if n.op == "add" else -1.0
            return (*(x + sign * y for x, y in zip(a[:4], b[:4])), a[4] if a[4] is not None else b[4])
        if a[:2] == (0.0, 0.0) and a[4] is None:  # a constant times an affine form
            return (*(a[2] * y for y in b[:4]), b[4])
        if b[:2] == (0.0, 0.0) and b[4] is None:
            return (*(b[2] * x for x in a[:4]), a[4])
    return None


def _bound(cx: Ctx, n, key: str, row: str, leaves: frozenset = frozenset(),
           row_leaves: frozenset = frozenset()) -> tuple[KeyBound, bool] | None:
    """(the bound comparison n (1 where it holds) puts on the key, whether n keeps exactly the
    keys within it), or None. A leaf of `row_leaves` is read per query row (KeyBound.per_row):
    it bounds the key alone (coef 0). A bound of positions is exact; one read at run time is
    where it has no margin and n is no strict comparison (floor(v) bounds key < v one key
    loosely where v is whole): only an exact one may leave a block unmasked."""
    if not (isinstance(n, ir.Binary) and n.op in _FLIP):
        return None
    a, b = _affine(cx, n.a, key, row, leaves), _affine(cx, n.b, key, row, leaves)
    if a is None or b is None or (a[4] is not None and b[4] is not None and a[4] != b[4]):
        return None
    ak, aq, c, r = (x - y for x, y in zip(a[:4], b[:4]))  # ak key + aq row + c + r leaf  (op)  0
    leaf = a[4] if a[4] is not None else b[4]
    if ak == 0 or aq / abs(ak) not in (-1.0, 0.0, 1.0):
        return None
    op = n.op if ak > 0 else _FLIP[n.op]
    coef = int(-aq / ak)  # key (op) coef * row + e, e = -(c + r leaf) / ak
    side = "hi" if op in ("le", "lt") else "lo"
    if leaf is not None and r != 0:  # read at run time, one key wider: plan.KeyBound.leaf
        if leaf in row_leaves and coef != 0:
            return None  # a per-row value beside the row's position: not one bound a tile can take
        # the margin of one key covers the kernel's float arithmetic: shift + scale * leaf rounded
        # twice can land past an integer the exact value does not reach. With scale +-1 and a whole
        # shift it is one rounding, monotone: floor (hi) and ceil (lo) of it are never tighter than
        # the exact value's, so no margin (a strict comparison then bounds one key loosely)
        exact = abs(r / ak) == 1.0 and float(c / ak).is_integer() and abs(c / ak) < 2 ** 24
        margin = 0 if exact else 1
        return KeyBound(side=side, row=row, coef=coef, offset=margin if side == "hi" else -margin,
                        leaf=cx.value(leaf), shift=-c / ak + 0.0, scale=-r / ak + 0.0,  # no -0.0
                        per_row=leaf in row_leaves), exact and op in ("le", "ge")
    e = -c / ak
    if op == "le":
        return KeyBound(side="hi", row=row, coef=coef, offset=math.floor(e)), True
    if op == "lt":
        return KeyBound(side="hi", row=row, coef=coef, offset=math.ceil(e) - 1), True
    if op == "ge":
        return KeyBound(side="lo", row=row, coef=coef, offset=math.ceil(e)), True
    return KeyBound(side="lo", row=row, coef=coef, offset=math.floor(e) + 1), True


def _batch_axes(cx: Ctx, s: FlashSite, row: str) -> list[str]:
    """The scores' axes the flash grid indexes one position per CTA whatever the tiles: not the
    key axis, not the query axis, not a head axis of Q alone (pack_query_group may tile it)."""
    q, k = cx.node(cx.node(s.qk).a), cx.node(cx.node(s.qk).b)
    return [a for a in cx.node(s.qk).axes if a not in (s.axis, row) and not (a in q.axes and a not in k.axes)]


# comparisons (1 where they hold, else 0): an equality bounds no key but is a factor of keep
# (document masking: eq(doc[query], doc[key]) beside the causal bound)
_CONDITIONS = frozenset({*_FLIP, "eq"})


def factors(src, i: int) -> list[int]:
    """The factors of the product node i is (i itself where it is no product)."""
    n = src.node(i)
    if isinstance(n, ir.Binary) and n.op == "mul":
        return factors(src, n.a) + factors(src, n.b)
    return [i]


def conditions(src, i: int) -> list[int] | None:
    """The comparisons whose product node i is (each 0 or 1: the product keeps where all do), or
    None where i is no such product; `src` reads nodes (`.node(i)`: a Ctx or an ir.Graph)."""
    n = src.node(i)
    if isinstance(n, ir.Binary) and n.op in _CONDITIONS:
        return [i]
    if isinstance(n, ir.Binary) and n.op == "mul":
        a, b = conditions(src, n.a), conditions(src, n.b)
        return None if a is None or b is None else a + b
    return None


def _interior_flag_form(cx: Ctx, n) -> bool:
    """max(keep, eq(count, hi - lo + 1)), keep a product of comparisons (0 or 1, never NaN)."""
    if not (isinstance(n, ir.Binary) and n.op == "max" and conditions(cx, n.a) is not None):
        return False
    e = cx.node(n.b)
    if not (isinstance(e, ir.Binary) and e.op == "eq"):
        return False
    span = cx.node(e.b)
    one = cx.literal(span.b) if isinstance(span, ir.Binary) else None
    return (span.op == "add" and one is not None and float(one[1:]) == 1.0
            and isinstance(cx.node(span.a), ir.Binary) and cx.node(span.a).op == "sub")


def _interior_flag(cx: Ctx, n, key: str, row: str, row_leaves: frozenset, bounds: list[KeyBound],
                   exact: list[int]) -> KeyBound | None:
    """max(x, eq(count, hi - lo + 1)) (mask_bounds' form), count a value read per query row and
    lo, hi the values of two per-row bounds among bounds[j] for j in `exact` (the same keep's
    exact bounds: key >= lo, key <= hi): the factor is 1 on a row whose count is its span,
    whatever x is. A condition for the interior (KeyBound.flag), no bound; None for anything else."""
    if not _interior_flag_form(cx, n) or cx.node(n.b).a not in row_leaves:
        return None
    e = cx.node(n.b)
    diff = cx.node(cx.node(e.b).a)
    pair = []
    for side, i in (("lo", diff.b), ("hi", diff.a)):
        f = _affine(cx, i, key, row, row_leaves)
        at = [j for j in exact if f is not None and f[:2] == (0.0, 0.0) and bounds[j].per_row
              and bounds[j].side == side and bounds[j].offset == 0 and bounds[j].leaf == cx.value(f[4])
              and (bounds[j].shift, bounds[j].scale) == (f[2], f[3])]
        if not at:
            return None
        pair.append(at[0])
    return KeyBound(side="lo", row=row, coef=0, offset=0, leaf=cx.value(e.a), per_row=True, flag=True,
                    pair=tuple(pair))


class SkipMaskedTiles(Rule):
    name = "skip_masked_tiles"
    theorem = "LeanTile.fold_skip_masked"
    lean_file = "MaskSkip.lean"
    pattern = "flash attention over select(keep, s, -inf), keep a product of comparisons of key and query positions"
    rewrite = ("stream only the key blocks some query row of the CTA's tile keeps; evaluate the mask only on "
               "boundary blocks, where some row drops a key (a block every row keeps whole runs unmasked)")
    statement = ("a tile whose keys are all masked leaves the online-softmax state unchanged, so folding only the "
                 "other tiles gives o / l = the softmax over the kept keys; on a tile whose keys are all kept the "
                 "mask keeps every score, so the tile folds as it is")
    params = {"bounds": "the key bounds read off the mask, e.g. 't_kv <= t_q + 0'"}

    def match(self, cx: Ctx, s: FlashSite, row: str) -> tuple[tuple[int, ...], tuple[KeyBound, ...], tuple[int, ...]] | None:
        """(the select and comparison nodes, the key bounds, the selects whose keep is exactly
        a product of bounds) where the site's scores are select(keep, y, -inf), possibly
        nested, and some comparison bounds the key. An exact select is true on every key of a
        block that every row of the tile keeps by the bounds: such a block runs without it."""
        z, at, bounds, exact = s.softmax.src, [], [], []
        # a value read per CTA (padding lengths): a leaf along none of the axes a CTA's tile spans
        spans = {s.axis, row, *cx.node(s.qk).axes} - set(_batch_axes(cx, s, row))
        leaves = frozenset(i for i in s.leaves if not set(cx.node(i).axes) & spans)
        # a value per query row (mask_bounds' first and last kept key): the tile takes its loosest
        row_leaves = frozenset(i for i in s.leaves if set(cx.node(i).axes) & spans == {row})
        while z in s.score:
            n = cx.node(z)
            if not (isinstance(n, ir.Select) and cx.literal(n.b) == f"#{ir.NEG_INF}"):
                break
            at.append(z)
            whole = True  # every factor of keep is a bound or 1 where a flag is: keep is exactly the bounds
            exact_bounds, rest = [], []
            parts = factors(cx, n.cond)
            # a factor that may be infinite or NaN makes the product NaN where a comparison is 0, and
            # select keeps NaN (c != 0): only comparisons (0 or 1) and mask_bounds' max of them bound
            if not all(conditions(cx, c) is not None or _interior_flag_form(cx, cx.node(c)) for c in parts):
                parts = [n.cond]
            for c in parts:
                found = _bound(cx, cx.node(c), s.axis, row, leaves | row_leaves, row_leaves)
                if found is None:
                    rest.append(c)
                    continue
                at.append(c)
                bounds.append(found[0])
                # a run-time bound with a margin may keep a key the mask drops: masked everywhere
                whole = whole and found[1]
                if found[1]:
                    exact_bounds.append(len(bounds) - 1)
            for c in rest:  # a flag's pair is among this keep's exact bounds
                flag = _interior_flag(cx, cx.node(c), s.axis, row, row_leaves, bounds, exact_bounds)
                if flag is not None:
                    at.append(c)
                    bounds.append(flag)
                whole = whole and flag is not None
            if whole and UNMASK_INTERIOR:
                exact.append(z)
            z = n.a
        if not bounds:
            return None
        return tuple(sorted(at)), tuple(bounds), tuple(sorted(exact))

    def apply(self, choice, step):
        choice.skip = True

    def formula(self, g, at, params):
        S = sym()
        z = max(at)
        before = f"{S.out(g, z)} = {S.tex(S.Exprs(g)(z))}"
        bounds = [r"\text{%s}" % S.tex_text(b) for b in str(params.get("bounds", "")).split("; ") if b]
        after = r"\text{stream only the key blocks some query row keeps: } " + r",\ ".join(bounds)
        return before, after

    def check(self) -> bool:
        """o / l over 3 keys with the third masked (weight exp(-inf) = 0) equals o / l over the
        first two: a masked key, and so a wholly masked tile, changes nothing; and with every
        key kept, the masked sums are the unmasked ones (an interior tile runs without the mask)."""
        S = sym()
        sp = S.sp
        v = sp.symbols("v1:4", real=True)
        s = (S.s1, S.s2, S.s3)

        def ratio(keep):
            return sum(k * sp.exp(a) * b for k, a, b in zip(keep, s, v)) / sum(k * sp.exp(a) for k, a in zip(keep, s))
        kept = sum(sp.exp(a) * b for a, b in zip(s[:2], v[:2])) / sum(sp.exp(a) for a in s[:2])
        plain = sum(sp.exp(a) * b for a, b in zip(s, v)) / sum(sp.exp(a) for a in s)
        return S.zero(ratio((1, 1, 0)) - kept) and S.zero(ratio((1, 1, 1)) - plain)


def boundary_closure(prologue: list, body: list, buffers: dict | None = None) -> list:
    """body with boundary_only spread from the masks' selects to what only they need: a Map or
    Iota whose value is read, after it is written, only by boundary-only statements (a select
    through its keep, args[0]: its args[1] passes through on interior blocks) is not computed
    on interior blocks either (the positions and comparisons of a causal mask), nor is a Load
    into a register tile among `buffers` (the kernel's, by name: document ids along the keys, a
    synchronous load on every block otherwise; a shared tile's copy stays with the producer)."""
    fragments = {n for n, b in (buffers or {}).items() if b.scope == "fragment"}
    from ...plan import statement_effects
    body = list(body)
    outside = {r for s in prologue for r in statement_effects(s)[0]}  # (the epilogue reads o and l alone)
    changed = True
    while changed:
        changed = False
        for i, s in enumerate(body):
            if not (isinstance(s, (ir_plan.Map, ir_plan.Iota)) or (isinstance(s, ir_plan.Load) and s.dst in fragments)) \
                    or s.boundary_only or s.dst in outside:
                continue
            readers = [(j, t) for j, t in enumerate(body) if s.dst in statement_effects(t)[0]]
            writers = [j for j, t in enumerate(body) if s.dst in statement_effects(t)[1]]
            if readers and writers == [i] and all(j > i and ir_plan.boundary_read(t, s.dst) for j, t in readers):
                body[i] = s.model_copy(update={"boundary_only": True})
                changed = True
    return body


def describe(bounds: tuple[KeyBound, ...], key: str) -> str:
    """'t_kv <= t_q + 0; t_kv >= t_q - 3': the step's `bounds` parameter."""
    def one(b: KeyBound) -> str:
        if b.flag:  # no bound: the interior needs every row's count to be its span
            lo, hi = (bounds[j].leaf for j in b.pair)
            return f"unmasked where {b.leaf}[{b.row}] = span({lo}, {hi})"
        rhs = {1: f"{b.row} ", -1: f"-{b.row} ", 0: ""}[b.coef]
        off = f"{'+' if b.offset >= 0 else '-'} {abs(b.offset)}" if b.coef or b.leaf else str(b.offset)
        if b.leaf:  # read at run time (per row: the tile's loosest)
            at = f"[{b.row}]" if b.per_row else ""
            rhs += f"{'floor' if b.side == 'hi' else 'ceil'}({b.shift:g} + {b.scale:g} * {b.leaf}{at}) "
        return f"{key} {'<=' if b.side == 'hi' else '>='} {rhs}{off}"
    text = "; ".join(one(b) for b in bounds)
    if len(text) <= STEP_PARAM_CHARS:
        return text
    # a step's string parameter has at most 64 characters (ir.Step): the static bounds, then a count
    static = [one(b) for b in bounds if b.leaf is None]
    return "; ".join([*static, f"{len(bounds) - len(static)} read at run time"])[:STEP_PARAM_CHARS]


STEP_PARAM_CHARS = 64


SKIP = SkipMaskedTiles()
