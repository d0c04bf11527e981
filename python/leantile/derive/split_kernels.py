"""The kernels of the split rules (rules/split.py): the sliced kernel is the GEMM or flash
kernel with its stream split over a batch axis of slices (kernels.gemm_kernel and
kernels.flash_kernel with `split`); the combine kernels here add or merge the slices in slice
order (deterministic: no atomics), then do what the unsplit kernel's epilogue did.

    split_k:  P[s, m, n] (float32)          -> C = sum_s P[s] (in order), epilogue, store
    split_kv: O_s[.., t_q, d, s] = o_s / l_s,  -> O = sum_s w_s O_s / sum_s w_s,
              M_s = c m_s, L_s = l_s                 w_s = L_s exp(M_s - max_s M_s)
              (= exp(lse_s - max lse), lse_s = c m_s + log l_s, never formed: see split_flash)
    split_row: M_s[.., s] = c m_s, L_s[.., s] = l_s -> M = max_s M_s, L = sum_s L_s exp(M_s - M)
               (the normalising kernel then reads M and L as the unsplit statistics kernel's)
    split_reduction: R_s[.., s] per reduction of a streamed row kernel -> R = sum_s R_s or
               max_s R_s (an online sum as split_row's L), then the row kernel's epilogue
               (region_kernels.region_kernel, parts "slice" and "combine")
"""
from __future__ import annotations

import math

from .. import ir
from ..plan import FIXED, Buffer, Fill, Kernel, Load, Map, Reduce, Store, Stream
from .context import Ctx
from .score_maps import node_map
from .kernels import (GemmChoice, KernelBuilder, OnlineChoice, _operand, flash_kernel, gemm_kernel,
                      softmax_row_kernels)
from .grids import tiled_grid
from .region_kernels import MAP_TILE, map_grid, partial_name, region_kernel
from .rules.split import value_columns
from .rules.regions import RegionSite
from .sites import FlashSite, SoftmaxSite

SPLIT_WHY = "float32: the partial results of a split reduction, combined in slice order"


def split_axis(cx: Ctx, node: int, axes: dict) -> str:
    """A fresh plan axis for the slices of node's split (no graph axis has its name)."""
    name = f"split_{node}"
    while name in cx.axes or name in axes:
        name += "_"
    return name


COMBINE_MIN = 256  # elements per CTA of a combine kernel, at least (one per thread)


def combine_grid(cx: Ctx, axes) -> list:
    """The combine's own tiles: a map kernel's (region_kernels.map_grid) with about two CTAs
    per SM, each adding the slices of COMBINE_MIN..MAP_TILE outputs. The GEMM's output tiles
    would leave it as idle as the unsplit GEMM: at 256 x 524288 x 256 they made 4 CTAs, each
    reading 64 slices of 128 x 128 float32."""
    total = math.prod(cx.axes[a] for a in axes)
    per = min(MAP_TILE, max(COMBINE_MIN, 1 << max(0, (total // (2 * cx.target.sms)).bit_length() - 1)))
    return map_grid(cx, list(axes), per)


def split_gemm(cx: Ctx, c: GemmChoice, tiles: dict, stores: list[int], axes: dict):
    """(sliced kernel, combine kernel, partial buffer) of a split_k GEMM site; adds the slice
    axis to `axes` (the plan's)."""
    mm = cx.node(c.site.matmuls[0])
    sa = split_axis(cx, mm.id, axes)
    axes[sa] = c.split
    sliced = gemm_kernel(cx, c, tiles, [], split=sa)
    partial = cx.names.extra(("partial", mm.id), f"{cx.value(mm.id)}_partial")
    buf = Buffer(name=partial, axes=(sa, *mm.axes), scope="global", dtype="acc", why=SPLIT_WHY)
    kb = KernelBuilder(cx.names.user, f"split_sum_{mm.id}",
                       f"split-K combine: the {axes[sa]} partials of {cx.value(mm.id)} added in order"
                       + (", fused epilogue" if c.epilogue else ""),
                       combine_grid(cx, mm.axes), Stream(axis=sa, block=1, stages=1), tiles["threads"])
    acc = kb.buf(cx.value(mm.id), mm.axes, "fragment", "acc", mm.id, key=("value", mm.id))
    part = kb.buf(f"{partial}_frag", mm.axes, "fragment", "acc", key=("partial", mm.id))
    kb.prologue.append(Fill(dst=acc, value="0"))
    kb.body += [Load(src=partial, dst=part), Map(dst=acc, fn="add", args=(acc, part))]
    have = {mm.id: acc}
    for i in c.epilogue:  # fuse_elementwise, as gemm_kernel's epilogue
        n = cx.node(i)
        args = tuple(_operand(cx, a, kb, have) for a in n.args())
        have[i] = kb.buf(cx.value(i), n.axes, "fragment", "acc", i, key=("value", i))
        kb.epilogue.append(node_map(n, have[i], args))
    kb.epilogue += [Store(src=have[i], dst=cx.value(i)) for i in stores]
    return sliced, kb.build(), buf


def split_flash(cx: Ctx, c: OnlineChoice, tiles: dict, axes: dict) -> tuple[Kernel, Kernel, list[Buffer]]:
    """(sliced kernel, combine kernel, [partial o / l, partial c m, partial l]) of a split_kv
    attention site. The combine weighs slice i by l_i exp(c m_i - max c m), which is
    exp(lse_i - max lse) (SplitKV.lean's merge_lse) without forming lse = c m + log l in float32:
    at scores of 2^22, log l is rounded to units of 0.5 when added to c m (the weights were
    then 60% off: tests/cpu/test_softmax_large_scores.py)."""
    s: FlashSite = c.site
    pv, mx = cx.node(s.pv), cx.node(s.softmax.mx)
    sa = split_axis(cx, s.pv, axes)
    axes[sa] = c.split
    sliced = flash_kernel(cx, s, c.exp2, tiles, split=sa, skip=c.skip, pack=c.pack)
    o_name = cx.names.extra(("partial", s.pv), f"{cx.value(s.pv)}_partial")
    m_name = cx.names.extra(("max", s.pv), f"{cx.value(s.pv)}_max")
    l_name = cx.names.extra(("sum", s.pv), f"{cx.value(s.pv)}_sum")
    bufs = [Buffer(name=o_name, axes=(*pv.axes, sa), scope="global", dtype="acc", why=SPLIT_WHY),
            Buffer(name=m_name, axes=(*mx.axes, sa), scope="global", dtype="acc", why=SPLIT_WHY),
            Buffer(name=l_name, axes=(*mx.axes, sa), scope="global", dtype="acc", why=SPLIT_WHY)]
    d, = value_columns(cx, s)  # rules.split offers the split only with one
    kb = KernelBuilder(cx.names.user, f"split_merge_{s.pv}",
                       f"split-KV combine: the {axes[sa]} slices' o / l weighed by l exp(c m - max c m)",
                       tiled_grid([a for a in pv.axes if a != d], {}, tiles), None, 128)
    ms = kb.buf(f"{m_name}_frag", (sa,), "fragment", "acc", key=("max",))
    w = kb.buf(f"{l_name}_frag", (sa,), "fragment", "acc", key=("weight",))
    op = kb.buf(f"{o_name}_frag", (d, sa), "fragment", "acc", key=("o",))
    top = kb.buf("max_of_slices", (), "fragment", "acc", key=("top",))
    total = kb.buf("weight_sum", (), "fragment", "acc", key=("sum",))
    out = kb.buf(cx.value(s.pv), (d,), "fragment", "acc", s.pv, key=("value", s.pv))
    kb.body = [Load(src=m_name, dst=ms), Load(src=l_name, dst=w), Load(src=o_name, dst=op),
               Reduce(dst=top, src=ms, kind="max", axis=sa),
               Map(dst=ms, fn="sub", args=(ms, top)), Map(dst=ms, fn="exp", args=(ms,)),
               Map(dst=w, fn="mul", args=(w, ms)),  # a slice with no keys: l = 0, c m = -inf
               Reduce(dst=total, src=w, kind="sum", axis=sa),
               Map(dst=op, fn="mul", args=(op, w)),
               Reduce(dst=out, src=op, kind="sum", axis=sa),
               Map(dst=out, fn="div", args=(out, total)),
               Store(src=out, dst=cx.value(s.pv))]
    merge = kb.build()
    # TileLang 0.1.15 finds no layout for the (d, split) fragment reduced over the split where its
    # values outnumber the threads and are no multiple of them ("no available layout found", seen
    # at 48 x 4 and 31 x 16 on 128 threads): such tiles do not fit, as tiles too big for shared
    # memory do not (the candidate is refused at them; other threads or another split may fit)
    threads = merge.threads if any(gr.param == FIXED for gr in merge.grid) else tiles.get("threads", merge.threads)
    n = cx.axes[d] * c.split
    if n > threads and n % threads:
        raise ir.GraphError([f"graph {cx.g.name!r}: the split-KV combine holds {d} x {c.split} = {n} values on "
                             f"{threads} threads, no multiple of them: TileLang 0.1.15 has no layout for it"])
    return sliced, merge, bufs


def split_row(cx: Ctx, c: OnlineChoice, tiles: dict, axes: dict) -> tuple[Kernel, Kernel, Kernel, list[Buffer]]:
    """(sliced statistics kernel, merge kernel, normalising kernel, [partial max, partial sum])
    of a split_row softmax site."""
    s: SoftmaxSite = c.site
    mx = cx.node(s.mx)
    sa = split_axis(cx, s.div, axes)
    axes[sa] = c.split
    sliced, norm = softmax_row_kernels(cx, s, c.exp2, tiles, split=sa)
    m_name = cx.names.extra(("partial", s.mx), f"{cx.value(s.mx)}_partial")
    l_name = cx.names.extra(("partial", s.sm), f"{cx.value(s.sm)}_partial")
    bufs = [Buffer(name=m_name, axes=(*mx.axes, sa), scope="global", dtype="acc", why=SPLIT_WHY),
            Buffer(name=l_name, axes=(*mx.axes, sa), scope="global", dtype="acc", why=SPLIT_WHY)]
    rows = list(mx.axes)
    kb = KernelBuilder(cx.names.user, f"split_row_merge_{s.div}",
                       f"split softmax row combine: the {axes[sa]} slices' max and sum of exp merged",
                       tiled_grid(rows, {rows[-1]: "block_m"} if rows else {}, tiles), None, tiles["threads"])
    mp = kb.buf(f"{m_name}_frag", (*rows, sa), "fragment", "acc", key=("partial", s.mx))
    lp = kb.buf(f"{l_name}_frag", (*rows, sa), "fragment", "acc", key=("partial", s.sm))
    m = kb.buf(cx.value(s.mx), tuple(rows), "fragment", "acc", s.mx, key=("value", s.mx))
    l = kb.buf(cx.value(s.sm), tuple(rows), "fragment", "acc", s.sm, key=("value", s.sm))
    kb.body = [Load(src=m_name, dst=mp), Load(src=l_name, dst=lp),
               Reduce(dst=m, src=mp, kind="max", axis=sa),
               Map(dst=mp, fn="sub", args=(mp, m)), Map(dst=mp, fn="exp", args=(mp,)),
               Map(dst=lp, fn="mul", args=(lp, mp)),
               Reduce(dst=l, src=lp, kind="sum", axis=sa),
               Store(src=m, dst=cx.value(s.mx)), Store(src=l, dst=cx.value(s.sm))]
    return sliced, kb.build(), norm, bufs


def split_region(cx: Ctx, site: RegionSite, splits: int, tiles: dict, stores: set[int],
                 axes: dict) -> tuple[Kernel, Kernel, list[Buffer]]:
    """(sliced row kernel, combine kernel, [a partial buffer per reduction]) of a streamed
    region site split over `splits` slices (split_reduction); adds the slice axis to `axes`."""
    sa = split_axis(cx, site.members[0], axes)
    axes[sa] = splits
    sliced = region_kernel(cx, site, tiles, set(), split=sa, part="slice", splits=splits)
    combine = region_kernel(cx, site, tiles, stores, split=sa, part="combine", splits=splits)
    # every reduction of a region is a member (inlined nodes are elementwise): one partial each, an
    # expanded variance three (its pivot and pivoted sums)
    variances = {e[0] for e in site.expanded}
    bufs = [Buffer(name=partial_name(cx, i, part), axes=(*cx.node(i).axes, sa), scope="global", dtype="acc",
                   why=SPLIT_WHY)
            for i in site.members if isinstance(cx.node(i), ir.Reduce)
            for part in (("p", "s1", "s2") if i in variances else ("",))]
    return sliced, combine, bufs
