"""The kernel of a region site (rules/regions.py): a map kernel (one loop over the root's
tiles) or a row kernel (reductions over one axis with prologue and epilogue, the row on chip
or streamed). Statements are built in node id order (ids are topological) without recursion,
so a 10^5-node elementwise chain is one kernel built in linear time.

Registers: a value's fragment is handed to a later value of the same axes once its last
reader in the kernel has run (and it has been stored if it must be), so a chain of
elementwise ops over a row keeps one or two row tiles live, not one per op.
"""
from __future__ import annotations

import math

from .. import ir
from ..plan import DTYPE_BYTES, FIXED, Fill, Iota, Load, Map, Pivot, Reduce, State, Store
from .context import Ctx
from .grids import grid_tile
from .kernels import KernelBuilder, _load, _stream_of
from .score_maps import node_map, reaches_comparison
from .rules.base import padded
from .rules.regions import RegionSite
from .rules.row_tiles import (column_layout, outer_row_block, row_block, row_threads, streamed_rows, two_pass_block,
                              two_pass_rows, warp_rows)


def _args(cx: Ctx, site: RegionSite, i: int) -> tuple[int, ...]:
    """What computing node i reads in the site's kernel: its arguments, or for an expanded
    variance (RegionSite.expanded) the row it streams and the mean it is shifted by."""
    for q, mu, base in site.expanded:
        if q == i:
            return (base, mu)
    return cx.node(i).args()


def _plan_order(cx: Ctx, site: RegionSite) -> list[int]:
    """Every node the kernel computes (members and the inlined nodes they read), in id order."""
    inline = site.inlined
    need, stack = set(site.members), list(site.members)
    while stack:
        j = stack.pop()
        for a in _args(cx, site, j):
            if a not in need and a in inline and not cx.literal(a):
                need.add(a)
                stack.append(a)
    return sorted(need)


MAP_TILE = 8192  # elements per CTA of a map kernel
MAP_THREADS = 256  # its threads (benchmarks/row_tiles/probe.py's map_tile= and map_threads= vary both)
LOG2E = 1.4426950408889634


def exp_of(site: RegionSite, dst: str, x: str) -> list[Map]:
    """dst = exp(x): as exp2(x log2 e) in a site whose shifted exps are exp2 (shifted_exps: the
    rescales of its online sums and the merge of its slices' sums are shifted the same way,
    exp(m_old - m_new) <= 1), else exp."""
    if site.exp2:
        return [Map(dst=dst, fn="mul", args=(x, f"#{LOG2E!r}")), Map(dst=dst, fn="exp2", args=(dst,))]
    return [Map(dst=dst, fn="exp", args=(x,))]


def map_grid(cx: Ctx, axes, elems: int | None = None) -> list:
    """The tiles of a map kernel, fixed from the shape: the last axis in blocks of up to 1024
    (long contiguous rows: coalesced loads and stores) and `elems`, the one before it filling
    `elems` elements, every other axis a batch axis. Measured on an H200 for SiLU over 8192 x 8192 f16
    at 256 threads (benchmarks/fusion/fusion_tiles_probe.py): 8 x 1024 0.0707 ms, 32 x 256 0.0711 ms, 128 x 128 0.0746 ms (the GEMM's
    default tiles, which map kernels used before); elementwise kernels are not searched."""
    elems = elems or MAP_TILE
    grid = [grid_tile(a, 1, None) for a in axes]
    if axes:
        last = min(1024, padded(cx.axes[axes[-1]]), elems)
        grid[-1] = grid_tile(axes[-1], last, FIXED)
        if len(axes) > 1:
            grid[-2] = grid_tile(axes[-2], min(padded(cx.axes[axes[-2]]), max(1, elems // last)), FIXED)
    return grid


def gain_fold_kernel(cx: Ctx, w: int, gain: int, axis: str, name: str):
    """gain_fold: the map kernel writing `name` = weight w with each row along the contraction
    `axis` scaled by the gain (g W, in the weight's dtype), read by the GEMM in place of w."""
    wn = cx.node(w)
    kb = KernelBuilder(cx.names.user, f"gain_fold_{cx.value(w)}",
                       f"{cx.value(w)}'s rows along {axis} scaled by the gain {cx.value(gain)} (gain_fold)",
                       map_grid(cx, wn.axes), None, 256)
    wf = kb.buf(f"{cx.value(w)}_frag", wn.axes, "fragment", "acc", w, key=("frag", w))
    gf = kb.buf(f"{cx.value(gain)}_frag", cx.node(gain).axes, "fragment", "acc", gain, key=("frag", gain))
    kb.body += [_load(cx.value(w), wf), _load(cx.value(gain), gf), Map(dst=wf, fn="mul", args=(wf, gf)),
                Store(src=wf, dst=name)]
    return kb.build()


def second_pass_members(cx: Ctx, site: RegionSite) -> list[int]:
    """The members of a streamed site over its streamed axis (not reductions): the row's own
    epilogue, computed in a second pass over the row (plan.Kernel.second_pass)."""
    if site.mode != "streamed":
        return []
    return [i for i in site.members if not isinstance(cx.node(i), ir.Reduce) and site.axis in cx.node(i).axes]


def stream_tiles(cx: Ctx, site: RegionSite, tiles: dict, whole: bool = True):
    """Grid and stream of a streamed row kernel, fixed from the shape (rules.row_tiles.streamed_rows;
    two_pass_rows where the kernel streams its rows twice; warp_rows where it streams them once,
    `whole`: not a split's slice, whose blocks split_reduction counts at streamed_rows' block)."""
    rows, column = list(site.rows), column_layout(site.axes, site.axis)
    block, d = streamed_rows(cx, rows, site.axis, MAP_TILE, column)
    streamed = [i for i in region_loads(cx, site) if site.axis in cx.node(i).axes]
    if second_pass_members(cx, site):  # the bytes per element of what it streams (its second pass reads them again)
        block = two_pass_rows(cx, rows, site.axis, column, sum(DTYPE_BYTES[cx.stored_dtype(i)] for i in streamed))
        d = two_pass_block(cx, site.axis, d, column)
    elif whole and not column:
        block, d = warp_rows(cx, rows, site.axis, MAP_TILE, {DTYPE_BYTES[cx.stored_dtype(i)] for i in streamed}) \
            or (block, d)
    grid = [grid_tile(a, block, FIXED) if a == rows[-1] else grid_tile(a, 1, None) for a in rows]
    return grid, _stream_of(site.axis, d, tiles["stages"], FIXED, ())


def _row_divisor(cx: Ctx, n, args, site: RegionSite) -> bool:
    """A division by a computed value over fewer axes (a row's sum): multiplying by its
    reciprocal, computed once per row, replaces a division per element (within a rounding of
    the quotient: the tolerance of every dtype covers it), unless a comparison reads the quotient
    in the kernel (score_maps.reaches_comparison: an ulp there flips a mask, no rounding)."""
    return (not args[1].startswith("#") and set(cx.node(n.b).axes) < set(n.axes)
            and not reaches_comparison(cx, n.id, set(site.members) | site.inlined))


def region_loads(cx: Ctx, site: RegionSite) -> set[int]:
    """The nodes the site's kernel reads from global memory: the arguments of what it computes
    that it does not compute itself (constants are literals)."""
    order = _plan_order(cx, site)
    computed = set(order)
    return {a for i in order for a in _args(cx, site, i) if a not in computed and not cx.literal(a)}


def partial_name(cx: Ctx, i: int, part: str = "") -> str:
    """The global buffer of reduction i's per-slice partials (split_reduction); of an expanded
    variance, one per `part`: its pivot p and its sums of x - p and (x - p)^2."""
    return cx.names.extra(("partial", i, part), f"{cx.value(i)}_partial{'_' + part if part else ''}")


def region_kernel(cx: Ctx, site: RegionSite, tiles: dict, stores: set[int], split: str | None = None,
                  part: str = "whole", splits: int = 0):
    """The site's kernel, storing the nodes in `stores`. A streamed site split over `split` (a
    batch axis of slices, split_reduction) has two parts: "slice", one slice of the stream per
    CTA storing each reduction's state to its partial buffer (partial_name: the rows and the
    slice), and "combine", which reduces the partials over the slices (an online sum rescaled to
    the largest maximum, as split_row's merge) and runs the row epilogue, storing `stores`."""
    order = _plan_order(cx, site)
    computed = set(order)
    reductions = sum(isinstance(cx.node(i), ir.Reduce) for i in order)
    combine = part == "combine"
    if combine:
        rows = list(site.rows)
        block, _ = streamed_rows(cx, rows, site.axis, MAP_TILE, column_layout(site.axes, site.axis))
        grid = [grid_tile(a, block, FIXED) if a == rows[-1] else grid_tile(a, 1, None) for a in rows]
        name, stream = f"split_reduction_combine_{site.members[0]}", None
        role = f"split reduction combine: the {split} slices' partials of {reductions} reductions, then the row epilogue"
    elif site.mode == "map":
        grid = map_grid(cx, site.axes)
        name, role, stream = f"fused_{site.members[-1]}", f"fused elementwise region of {len(order)} ops", None
    elif site.mode == "on_chip":
        rows = list(site.rows)
        block = row_block(cx, site.axes, site.reduced)
        outer = outer_row_block(cx, site.axes, site.reduced, block) or (None, 1)
        grid = [grid_tile(a, block, FIXED) if rows and a == rows[-1] else grid_tile(a, outer[1], FIXED)
                if a == outer[0] else
                grid_tile(a, max(2, padded(cx.axes[a])), FIXED) if a in site.reduced else grid_tile(a, 1, None)
                for a in site.axes]
        name = f"row_{site.members[0]}"
        role = f"row kernel over {', '.join(site.reduced)} (whole row on chip): {len(order)} ops, {reductions} reductions"
        stream = None
    else:
        grid, stream = stream_tiles(cx, site, tiles, whole=not split)
        name = f"row_{site.members[0]}"
        role = f"row kernel streaming {site.axis}: {reductions} reductions in one pass, row epilogue"
        if split:
            grid = [grid_tile(split, 1, None), *grid]
            stream = stream.model_copy(update={"split": split})
            role = f"slice of a split row kernel streaming {site.axis}: {reductions} reductions' partials"
    threads = 128 if combine else row_threads(cx, site.axes, site.reduced) if site.mode == "on_chip" else \
        MAP_THREADS if site.mode == "map" else tiles["threads"]
    kb = KernelBuilder(cx.names.user, name, role, grid, stream, threads)
    streamed = site.mode == "streamed" and not combine
    sliced = part == "slice"
    post = set()  # streamed: what needs a finished reduction runs after the stream (epilogue)
    variances = {q: (mu, base) for q, mu, base in site.expanded}  # variance_expand: pivoted sums
    chain = {i for o in site.online for i in o[1:3]}  # exp(s - m) of an online sum: per block, running m
    online_max = {o[0] for o in site.online}
    rescaled = {o[3]: o[0] for o in site.online}
    alphas: dict[int, str] = {}
    if site.mode == "streamed":
        for i in order:
            if i not in chain and (isinstance(cx.node(i), ir.Reduce) or any(a in post for a in cx.node(i).args())):
                post.add(i)
    # split: what each part computes. The slice: the reductions and what they read; the
    # combine: the reductions (from their partials) and the epilogue with what it reads.
    keep = set(order)
    second = [] if sliced or combine else second_pass_members(cx, site)
    if second:  # the stream and its epilogue compute what the other members need; the rest, the second pass
        keep = set()
        stack = [i for i in site.members if i not in second]
        while stack:
            j = stack.pop()
            if j in computed and j not in keep:
                keep.add(j)
                stack += _args(cx, site, j)
        kb.role += f", then the row again for {len(second)} epilogue values over it"
    if sliced or combine:
        reds = {i for i in order if isinstance(cx.node(i), ir.Reduce)}
        keep = reds | (set() if sliced else post)
        stack = [a for r in (reds if sliced else post - reds) for a in _args(cx, site, r)
                 if not (sliced and r in variances and a == variances[r][0])]  # a slice's variance needs no mean
        while stack:
            j = stack.pop()
            if j in computed and j not in keep:
                keep.add(j)
                stack += _args(cx, site, j)

    # remaining readers of each value inside the kernel: a fragment is free after its last one
    readers: dict[int, int] = {}
    for i in sorted(keep):
        for a in set(_args(cx, site, i)):
            readers[a] = readers.get(a, 0) + 1
    have: dict[int, str] = {}
    home: dict[int, list] = {}  # the statement list that wrote each value
    loads: set[int] = set()
    free: dict[tuple, list[str]] = {}  # (axes, id of the statement list) -> fragments free for reuse
    body = kb.body
    tail = kb.epilogue if streamed else kb.body

    def phase(i: int) -> list:
        """Streamed: a reduction and what reads one run after the stream (the reduction's own
        accumulate is in the body); everything else once per block."""
        if isinstance(cx.node(i), ir.Reduce):
            return body
        return tail if i in post else body

    def operand(a: int, where: list) -> str:
        lit = cx.literal(a)
        if lit:
            return lit
        if a in have:
            return have[a]
        n = cx.node(a)
        dst = kb.buf(f"{cx.value(a)}_frag", n.axes, "fragment", "acc", a, key=("frag", a))
        # streamed: a tile of the streamed axis per block, anything else once before the stream
        home[a] = where if not streamed else body if site.axis in n.axes else kb.prologue
        home[a].append(_load(cx.value(a), dst))
        loads.add(a)
        have[a] = dst
        return dst

    def release(a: int, where: list):
        readers[a] -= 1
        # only within the list that wrote it: a body buffer reused by the epilogue, or one the
        # prologue wrote reused by the body (which runs once per streamed block), would be wrong
        if readers[a] == 0 and (a in computed or a in loads) and a not in site.members and home.get(a) is where:
            free.setdefault((cx.node(a).axes, id(where)), []).append(have[a])

    recips: dict[int, str] = {}
    pivots: dict[int, tuple[str, str, str]] = {}  # expanded variance -> its (p, sum (x - p), sum (x - p)^2)
    slice_max: dict[int, str] = {}  # combine: an online max's partials, which its sums are rescaled by
    for i in order:
        n = cx.node(i)
        if i not in keep:
            continue  # the slice stops at the reductions' states; the combine has no stream axis
        where = phase(i)
        if combine and i in variances:
            have[i] = _combine_variance(cx, kb, site, i, split, splits, operand(variances[i][0], body), body)
            home[i] = body
            if i in stores:
                body.append(Store(src=have[i], dst=cx.value(i)))
            continue
        if i in variances:  # pivoted sums per block; the variance after the stream (or in the combine)
            mu, base = variances[i]
            x = operand(base, body)
            pivoted = _pivoted_sums(cx, kb, site, i, base, x, pivots)
            if not sliced:
                have[i] = _expanded_variance(cx, kb, i, pivoted, operand(mu, tail), tail)
                home[i] = tail
                if i in stores:
                    tail.append(Store(src=have[i], dst=cx.value(i)))
            for a in set(_args(cx, site, i)):
                if a in readers and (a != mu or not sliced):
                    release(a, body if a == base else tail)
            continue
        if combine and isinstance(n, ir.Reduce):
            have[i] = _combine_partials(cx, kb, site, i, split, rescaled.get(i), slice_max, have)
            home[i] = body
            if i in stores:
                body.append(Store(src=have[i], dst=cx.value(i)))
            continue
        args = [operand(a, where) for a in n.args()]
        key = (n.axes, id(where))
        if isinstance(n, ir.Reduce):
            dst = kb.buf(cx.value(i), n.axes, "fragment", "acc", i, key=("value", i))
            if streamed:
                init = "0" if n.kind == "sum" else "-inf"
                kb.prologue.append(Fill(dst=dst, value=init))
                kb.states.append(State(buffer=dst, init=init, combine="rescaled_sum" if i in rescaled else n.kind))
            if i in online_max:  # keep the previous max: the sums over it are rescaled by exp(m_old - m)
                prev = kb.buf(f"{dst}_prev", n.axes, "fragment", "acc", key=("prev", i))
                where.append(Map(dst=prev, fn="copy", args=(dst,)))
            if i in rescaled:
                where.append(Map(dst=dst, fn="mul", args=(dst, alphas[rescaled[i]])))
            where.append(Reduce(dst=dst, src=args[0], kind=n.kind, axis=n.axis, accumulate=streamed))
            if i in online_max:
                alpha = alphas[i] = kb.buf(f"rescale_{dst}", n.axes, "fragment", "acc", key=("rescale", i))
                where += [Map(dst=alpha, fn="sub", args=(prev, dst)), *exp_of(site, alpha, alpha)]
        else:
            for a in set(n.args()):  # an argument read for the last time may hold the result (in place)
                if a in readers:
                    release(a, where)
            reuse = free.get(key)
            dst = reuse.pop() if reuse else kb.buf(cx.value(i), n.axes, "fragment", "acc", i, key=("value", i))
            if isinstance(n, ir.Iota):
                where.append(Iota(dst=dst, axis=n.axis))
            elif n.op == "div" and _row_divisor(cx, n, args, site):  # x / s[row]: one reciprocal per row
                where.append(Map(dst=dst, fn="mul", args=(args[0], _reciprocal(cx, kb, n.b, args[1], recips, where))))
            elif i in site.exp2:  # exp(s - m) as exp2((s - m) log2 e) (shifted_exps)
                where += exp_of(site, dst, args[0])
            else:  # a cast rounds to its dtype here, as a store of it would (node_map)
                where.append(node_map(n, dst, tuple(args)))
        have[i] = dst
        home[i] = where
        if isinstance(n, ir.Reduce):
            for a in set(n.args()):
                if a in readers:
                    release(a, where)
        if i in stores and not sliced:
            (tail if streamed else where).append(Store(src=dst, dst=cx.value(i)))
        if readers.get(i, 0) == 0 and i not in site.members:
            free.setdefault(key, []).append(dst)
    if second:
        _second_pass(cx, kb, site, computed, second, have, stores, recips)
    if sliced:  # a slice past the end (at other blocks) keeps its states' initial values: 0, -inf
        kb.epilogue = [Store(src=have[i], dst=partial_name(cx, i)) for i in order
                       if isinstance(cx.node(i), ir.Reduce) and i not in variances]
        for i, (p, s1, s2) in pivots.items():  # a variance's slice: its pivot and pivoted sums
            kb.epilogue += [Store(src=b, dst=partial_name(cx, i, part)) for b, part in ((p, "p"), (s1, "s1"), (s2, "s2"))]
    return kb.build()


def _reciprocal(cx: Ctx, kb: KernelBuilder, b: int, value: str, recips: dict[int, str], where: list) -> str:
    """The buffer of 1 / value (node b's, over the rows), computed once, into `where`."""
    r = recips.get(b)
    if r is None:
        r = recips[b] = kb.buf(f"{cx.value(b)}_recip", cx.node(b).axes, "fragment", "acc", key=("recip", b))
        where.append(Map(dst=r, fn="recip", args=(value,)))
    return r


def _second_pass(cx: Ctx, kb: KernelBuilder, site: RegionSite, computed: set[int], second: list[int],
                 have: dict[int, str], stores: set[int], recips: dict[int, str]) -> None:
    """Kernel.second_pass: the members over the streamed axis, per block again, with the row's
    statistics final. A value over the streamed axis is computed afresh from this block's loads
    (the stream's own tiles held a running max); one over the rows only is the stream's or the
    epilogue's, or computed in the epilogue now (log l of log-softmax, read only here)."""
    need, stack = set(), list(second)
    while stack:
        j = stack.pop()
        if j in need or j not in computed or cx.literal(j):
            continue
        n = cx.node(j)
        if isinstance(n, ir.Reduce) or (j in have and site.axis not in n.axes):
            continue  # a finished reduction, or a row value the kernel already holds
        need.add(j)
        stack += n.args()
    fresh: dict[int, str] = {}

    def operand(a: int, where: list) -> str:
        lit = cx.literal(a)
        if lit:
            return lit
        if a in fresh:
            return fresh[a]
        n = cx.node(a)
        if a in have and site.axis not in n.axes:
            return have[a]
        # a tile of this block (the stream's fragments are free again: the same registers)
        dst = kb.buf(f"{cx.value(a)}_frag", n.axes, "fragment", "acc", a, key=("frag", a))
        (kb.second_pass if site.axis in n.axes else kb.epilogue).append(_load(cx.value(a), dst))
        fresh[a] = dst
        return dst

    for i in sorted(need):
        n = cx.node(i)
        where = kb.second_pass if site.axis in n.axes else kb.epilogue
        args = [operand(a, where) for a in n.args()]
        dst = kb.buf(cx.value(i), n.axes, "fragment", "acc", i, key=("value", i))
        if isinstance(n, ir.Iota):
            where.append(Iota(dst=dst, axis=n.axis))
        elif n.op == "div" and _row_divisor(cx, n, args, site):  # x / s[row]: one reciprocal per row, once
            where.append(Map(dst=dst, fn="mul", args=(args[0], _reciprocal(cx, kb, n.b, args[1], recips, kb.epilogue))))
        elif i in site.exp2:
            where += exp_of(site, dst, args[0])
        else:
            where.append(node_map(n, dst, tuple(args)))
        fresh[i] = dst
        if i in stores:
            where.append(Store(src=dst, dst=cx.value(i)))


def _pivoted_sums(cx: Ctx, kb: KernelBuilder, site: RegionSite, i: int, base: int, x: str,
                  pivots: dict[int, tuple[str, str, str]]) -> tuple[str, str, str]:
    """Expanded variance i's per-block work: p, the first element of the stretch of the row this
    CTA streams (plan.Pivot), and the sums of x - p and (x - p)^2 accumulated. Shifted by a value
    of the row, every term is of the size of the variance (unshifted, sum x^2 - n mu^2 cancels
    catastrophically where |mu| >> sigma: derive.kernels._row_program)."""
    n, v = cx.node(i), cx.value(i)
    p = kb.buf(f"{v}_pivot", n.axes, "fragment", "acc", key=("pivot", i))
    kb.prologue.append(Fill(dst=p, value="0"))  # an empty slice keeps 0 (its sums are 0 too)
    sums = []
    for k in (1, 2):
        acc = kb.buf(f"{v}_s{k}", n.axes, "fragment", "acc", key=(f"s{k}", i))
        kb.prologue.append(Fill(dst=acc, value="0"))
        kb.states.append(State(buffer=acc, init="0", combine="sum"))
        sums.append(acc)
    d = kb.buf(f"{v}_shifted", cx.node(base).axes, "fragment", "acc", key=("shifted", i))
    kb.body += [Pivot(dst=p, src=x, axis=site.axis), Map(dst=d, fn="sub", args=(x, p)),
                Reduce(dst=sums[0], src=d, kind="sum", axis=site.axis, accumulate=True),
                Map(dst=d, fn="square", args=(d,)),
                Reduce(dst=sums[1], src=d, kind="sum", axis=site.axis, accumulate=True)]
    pivots[i] = (p, *sums)
    return pivots[i]


def _shifted_variance(kb: KernelBuilder, v: str, axes, key, p: str, s1: str, s2: str, mu: str, count: str,
                      where: list) -> None:
    """v = sum (x - mu)^2 = s2 - 2 (mu - p) s1 + count (mu - p)^2 (LeanTile.sum_sq_sub_pivot)."""
    dm = kb.buf(f"{v}_shift", axes, "fragment", "acc", key=("shift", key))
    t = kb.buf(f"{v}_tmp", axes, "fragment", "acc", key=("tmp", key))
    where += [Map(dst=dm, fn="sub", args=(mu, p)), Map(dst=t, fn="mul", args=(dm, count)),
              Map(dst=t, fn="fma", args=(s1, "#-2.0", t)), Map(dst=v, fn="fma", args=(dm, t, s2))]


def _expanded_variance(cx: Ctx, kb: KernelBuilder, i: int, pivoted, mu: str, where: list) -> str:
    """Expanded variance i after the stream, from its pivoted sums over the whole row."""
    n = cx.node(i)
    v = kb.buf(cx.value(i), n.axes, "fragment", "acc", i, key=("value", i))
    _shifted_variance(kb, v, n.axes, i, *pivoted, mu, f"#{cx.axes[cx.node(i).axis]}", where)
    return v


def _combine_variance(cx: Ctx, kb: KernelBuilder, site: RegionSite, i: int, split: str, splits: int, mu: str,
                      where: list) -> str:
    """Expanded variance i of a split region: each slice's pivoted sums shifted to the mean over
    the slice's own elements, min(max(n - s S, 0), S) for slice s of S elements (a slice past the
    end: 0, and its sums 0), added over the slices."""
    n = cx.node(i)
    rows, v = tuple(n.axes), cx.value(i)
    parts = []
    for part in ("p", "s1", "s2"):
        b = kb.buf(f"{partial_name(cx, i, part)}_frag", (*rows, split), "fragment", "acc", key=("partial", i, part))
        where.append(Load(src=partial_name(cx, i, part), dst=b))
        parts.append(b)
    # elements a slice streams (the last fewer): its blocks as the slice kernel walks them
    # (stream_tiles' block; interp._stream_blocks, emit.streams: ceil(blocks / splits) a slice)
    total = cx.axes[site.axis]
    block = streamed_rows(cx, list(site.rows), site.axis, MAP_TILE, column_layout(site.axes, site.axis))[1]
    per = math.ceil(math.ceil(total / block) / splits) * block
    count = kb.buf(f"{v}_count", (split,), "fragment", "acc", key=("count", i))
    where += [Iota(dst=count, axis=split), Map(dst=count, fn="fma", args=(count, f"#{-per}", f"#{total}")),
              Map(dst=count, fn="max", args=(count, "#0")), Map(dst=count, fn="min", args=(count, f"#{per}"))]
    term = kb.buf(f"{v}_terms", (*rows, split), "fragment", "acc", key=("terms", i))
    _shifted_variance(kb, term, (*rows, split), ("slices", i), *parts, mu, count, where)
    dst = kb.buf(v, rows, "fragment", "acc", i, key=("value", i))
    where.append(Reduce(dst=dst, src=term, kind="sum", axis=split))
    return dst


def _combine_partials(cx: Ctx, kb: KernelBuilder, site: RegionSite, i: int, split: str, rescaled_by: int | None,
                      slice_max: dict[int, str], have: dict[int, str]) -> str:
    """Reduction i of a split region, from its slices' partials: a sum added, a max taken; an
    online sum l_s (relative to its slice's max m_s) weighed by exp(m_s - m) for the merged m
    (split_row's merge: a slice with no elements has m_s = -inf, l_s = 0 and weighs nothing)."""
    n = cx.node(i)
    rows = tuple(n.axes)
    part = kb.buf(f"{partial_name(cx, i)}_frag", (*rows, split), "fragment", "acc", key=("partial", i))
    dst = kb.buf(cx.value(i), rows, "fragment", "acc", i, key=("value", i))
    kb.body.append(Load(src=partial_name(cx, i), dst=part))
    if rescaled_by is not None:
        w = kb.buf(f"{partial_name(cx, i)}_weight", (*rows, split), "fragment", "acc", key=("weight", i))
        kb.body += [Map(dst=w, fn="sub", args=(slice_max[rescaled_by], have[rescaled_by])),
                    *exp_of(site, w, w), Map(dst=part, fn="mul", args=(part, w))]
    kb.body.append(Reduce(dst=dst, src=part, kind=n.kind, axis=split))
    slice_max[i] = part
    return dst
