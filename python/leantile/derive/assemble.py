"""Assembling a plan from a candidate's picked options (derive.engine): the fused kernels of
each site, the unfused kernels of everything else some kernel or output needs, the global
buffers between them (each in the dtype Ctx.stored_dtype gives, with the reason where wider),
in dependency order."""
from __future__ import annotations

from ..plan import Buffer, Plan
from . import kernels as K
from .context import Ctx
from .gain_operand import weight_gain
from .region_kernels import gain_fold_kernel, region_kernel, region_loads
from .rules.regions import RegionSite
from .flash_backward_kernels import flash_backward
from .sites import FlashBackwardSite, FlashSite, SoftmaxSite, row_peels
from .split_kernels import split_flash, split_gemm, split_region, split_row
from .wide_outputs import wide_copies


def assemble(cx: Ctx, picked: list, tiles: dict, name: str) -> Plan:
    """Kernels for the fused groups, unfused kernels for everything else, in dependency order."""
    g, us = cx.g, cx.users
    # node id (or, for tensors that are no graph node such as a precomputed colsum, the
    # global buffer name) -> kernel that writes it to global memory
    produced: dict[int | str, str] = {}
    kernels, needs = {}, {}  # kernel name -> Kernel, and -> nodes it reads from global

    def add(kern, reads, writes):
        if kern.name in kernels:
            raise RuntimeError(f"leantile bug: two kernels named {kern.name!r} in one plan")
        kernels[kern.name] = kern
        needs[kern.name] = set(reads)
        for i in writes:
            produced[i] = kern.name

    outs = set(g.outputs.values())
    extra_globals = []
    axes = dict(g.axes)  # and the slice axes of split kernels
    region_sites: list[RegionSite] = []
    region_splits: dict[int, int] = {}  # a split region's first member -> its slices (split_reduction)
    for c in picked:
        s = c.site
        if isinstance(s, FlashBackwardSite):
            parts, bufs = flash_backward(cx, c, tiles)
            for kern, reads, writes in parts:
                add(kern, reads, writes)
            extra_globals += bufs
        elif isinstance(s, FlashSite) and c.split:
            qk, pv = cx.node(s.qk), cx.node(s.pv)
            sliced, merge, bufs = split_flash(cx, c, tiles, axes)
            add(sliced, [qk.a, qk.b, pv.b, *s.leaves], [b.name for b in bufs])
            add(merge, [b.name for b in bufs], [s.pv])
            extra_globals += bufs
        elif isinstance(s, FlashSite):
            qk, pv = cx.node(s.qk), cx.node(s.pv)
            mx_out, sm_out = K.stats_outputs(cx, s)
            add(K.flash_kernel(cx, s, c.exp2, tiles, skip=c.skip, pack=c.pack), [qk.a, qk.b, pv.b, *s.leaves],
                [s.pv, *mx_out, *sm_out])
        elif isinstance(s, SoftmaxSite) and c.split:
            sliced, merge, norm, bufs = split_row(cx, c, tiles, axes)
            add(sliced, [s.src], [b.name for b in bufs])
            add(merge, [b.name for b in bufs], [s.mx, s.sm])
            add(norm, [s.src, s.mx, s.sm], [s.div])
            extra_globals += bufs
        elif isinstance(s, SoftmaxSite):
            stats, norm = K.softmax_row_kernels(cx, s, c.exp2, tiles)
            add(stats, [s.src], [s.mx, s.sm])
            add(norm, [s.src, s.mx, s.sm], [s.div])
        elif isinstance(s, RegionSite):  # c.site as its steps decided (engine.decide: its exp2 exps)
            region_sites.append(s)
            if c.split:
                region_splits[s.members[0]] = c.split
    # A softmax kernel reads its raw scores past the scale it folds in: a GEMM that computes
    # them must store them too, though its only user (the scale) is fused in its epilogue.
    # So must one whose output a region kernel reads (a softmax row on chip, a norm after it).
    # So must one whose product or epilogue value another GEMM reads past its pulled-out scale
    # (X W * r feeding a second GEMM reads X W, not the scaled product it has no graph edge to).
    region_reads = {s.members[0]: region_loads(cx, s) for s in region_sites}
    gemms = [c for c in picked if isinstance(c, K.GemmChoice)]
    gemm_reads = [_gemm_reads(cx, c) for c in gemms]
    read = {i for r in needs.values() for i in r}.union(*region_reads.values())
    # the scaled product X W * r no kernel reads (the second GEMM reads X W): not stored
    unread = _unread_peels(cx, gemms, outs | read.union(*gemm_reads))
    peeled = {(m, p.node) for c in gemms for m in c.site.matmuls for p in c.site.peels}
    # What each GEMM site stores, the last site first: a site reads only what earlier ones compute.
    # A site none of whose values is read (a dead chain of the graph) gets no kernel, and its reads
    # ask nothing of the others.
    site_stores: dict[int, list[int]] = {}
    for j in reversed(range(len(gemms))):
        inside = set(gemms[j].site.matmuls) | set(gemms[j].epilogue)
        stores = [i for i in sorted(inside - gemms[j].site.coordinates) if i in outs or i in read or any(
            u not in inside and u not in unread and (u, i) not in peeled for u in us[i])]
        if stores:
            site_stores[j] = stores
            read |= gemm_reads[j]
    for j, (c, reads) in enumerate(zip(gemms, gemm_reads)):
        if j not in site_stores:
            continue
        s, stores = c.site, site_stores[j]
        if c.stats == "separate":
            # two GEMMs of one norm's rows (different weights: two sites) need the same statistics:
            # the first site's kernel stores them, the second's reads them (a global has one writer)
            sk, stored = K.row_stats_kernel(cx, c, tiles, skip=produced.keys())
            if stored:
                add(sk, [s.base], stored)
        gain = weight_gain(c)
        for m in s.matmuls if gain else ():  # gain_fold: the weight's rows scaled once, before the GEMM
            w = cx.node(m).b
            gained = cx.gained(w)
            reads.add(gained)
            if gained not in produced:
                add(gain_fold_kernel(cx, w, gain.vec, cx.node(m).axis_b, gained), [w, gain.vec], [gained])
                extra_globals.append(Buffer(name=gained, axes=cx.node(w).axes, scope="global", dtype=cx.dtype_of(w),
                                            why=None))
        if c.mean and c.colsum == "precomputed":
            for m in s.matmuls:
                w = cx.node(m).b
                colsum = cx.colsum(w)
                reads.add(colsum)
                if colsum in produced:  # both matmuls of a dual GEMM (or two sites) use this weight
                    continue
                src = cx.gained(w) if gain else None  # the column sums of the weight the GEMM reads
                add(K.colsum_kernel(cx, w, cx.node(m).axis_b, tiles, src), [src or w], [colsum])
                cols = tuple(a for a in cx.node(w).axes if a != cx.node(m).axis_b)
                extra_globals.append(Buffer(name=colsum, axes=cols, scope="global", dtype="acc",
                                            why="float32: a weight's column sums (mean pullout), a statistic"))
        if c.split:
            sliced, combine, buf = split_gemm(cx, c, tiles, stores, axes)
            add(sliced, reads, [buf.name])
            add(combine, {buf.name} | reads - {s.base} - {cx.node(m).b for m in s.matmuls}, stores)
            extra_globals.append(buf)
            continue
        gk = K.gemm_kernel(cx, c, tiles, stores)
        deps = set(reads) | ({s.base} if c.stats else set())
        add(gk, deps, stores)

    # Region kernels: each stores the members an output or another kernel reads.
    read_anywhere = set(outs) | read
    in_regions = {i for s in region_sites for i in s.members}
    for inl in {id(s.inlined): s.inlined for s in region_sites}.values():  # most sites share one set
        in_regions |= inl
    read_anywhere |= {i for s in region_sites for i in s.members if any(u not in in_regions for u in us[i])}
    for s in region_sites:
        stores = {i for i in s.members if i in read_anywhere}
        if s.members[0] in region_splits:
            sliced, combine, bufs = split_region(cx, s, region_splits[s.members[0]], tiles, stores, axes)
            add(sliced, region_reads[s.members[0]], [b.name for b in bufs])
            add(combine, {b.name for b in bufs} | region_reads[s.members[0]], sorted(stores))
            extra_globals += bufs
            continue
        add(region_kernel(cx, s, tiles, stores), region_reads[s.members[0]], sorted(stores))

    # Unfused kernels for every node some kernel or output needs and nobody produces.
    wanted = outs | {i for r in needs.values() for i in r if isinstance(i, int)}
    for n in reversed(g.nodes):
        i = n.id
        if i not in wanted or i in produced or n.op == "input" or (cx.literal(i) and i not in outs):
            continue  # constants are inlined as literals, except where they are an output
        kern = K.node_kernel(cx, i, tiles)
        reads = [a for a in n.args() if not cx.literal(a)]
        add(kern, reads, [i])
        wanted.update(reads)
    deps = {k: sorted({produced[r] for r in reads if r in produced and produced[r] != k}) for k, reads in needs.items()}
    ordered = [kernels[k] for k in _static_order(deps)]
    globals_ = [Buffer(name=n.name, axes=n.axes, scope="global", dtype=n.dtype, node=n.id) for n in g.inputs()]
    globals_ += [_intermediate(cx, i) for i in sorted(i for i in produced if isinstance(i, int))]
    ordered, wide = wide_copies(cx, ordered, globals_)  # narrow outputs other kernels read: a float32 twin
    globals_ += extra_globals + wide
    names = [b.name for b in globals_]
    if len(set(names)) != len(names):
        raise RuntimeError(f"leantile bug: two global buffers share a name in plan {g.name}/{name}")
    return Plan(graph=g.name, candidate=name, axes=axes, globals=tuple(globals_),
                outputs={o: cx.value(i) for o, i in g.outputs.items()},
                kernels=tuple(ordered), tiles=tiles)


WIDE_WHY = "float32: a row statistic (a reduction, or computed from one over its axes: mean, 1/sqrt(var+eps)); " \
    "rounded to the input dtype it would cost the normalised values that read it their low digits"


RANGE_WHY = "float32: an f16 value the graph does not round to f16 (no cast, no GEMM operand); " \
    "stored in f16 it would be inf past 65504 where its value and the output are finite (exp(x), x > 11.1)"


def _intermediate(cx: Ctx, i: int) -> Buffer:
    """The global buffer of node i, in Ctx.stored_dtype: a graph output in its value's dtype (the
    IR's one rule, ir.value_dtype: a cast to f32 is an f32 output, whatever the inputs), an
    intermediate that crosses kernels in its value's dtype too (half the traffic of float32 for
    an f16 graph), except a statistic and an f16 value the graph does not round, kept in float32
    with the reason recorded (`leantile derive` prints it)."""
    n, dt = cx.node(i), cx.stored_dtype(i)
    why = None if dt == cx.dtype_of(i) else WIDE_WHY if cx.is_statistic(i) else RANGE_WHY
    return Buffer(name=cx.value(i), axes=n.axes, scope="global", dtype=dt, node=i, why=why)


def _gemm_reads(cx: Ctx, c: K.GemmChoice) -> set[int]:
    """The graph nodes GEMM choice c's kernels read from global memory: its (peeled) LHS, its
    weights, its epilogue's other operands, and the pulled-out vectors it does not compute."""
    s = c.site
    inside = set(s.matmuls) | set(c.epilogue)
    reads = {s.base} | {cx.node(m).b for m in s.matmuls}
    reads |= {p.vec for p in s.peels if p.kind == "gain" and not cx.literal(p.vec)}  # gain_fold_kernel's or the GEMM's
    reads |= {a for i in c.epilogue for a in cx.node(i).args() if a not in inside and not cx.literal(a)}
    if c.stats != "fused":  # separate: its statistics kernel stores them for the GEMM to read
        reads |= {p.vec for p in row_peels(s.peels) if not cx.literal(p.vec)}
    return reads


def _unread_peels(cx: Ctx, gemms: list, keep: set) -> set[int]:
    """The nodes a pullout moves out of a GEMM's LHS (mul(X, s), sub(X, mu)) that no kernel
    reads: none of `keep` (outputs, what kernels read), every user a GEMM that pulls it out or
    another such node. No kernel computes them, unless an epilogue holds them in registers."""
    pulled: dict[int, set[int]] = {}  # peel node -> the matmuls whose LHS chain it is in
    for c in gemms:
        for p in c.site.peels:
            pulled.setdefault(p.node, set()).update(c.site.matmuls)
    out: set[int] = set()
    for i in sorted(pulled, reverse=True):  # ids are topological: a node's users come first
        if i not in keep and all(u in out or u in pulled[i] for u in cx.users[i]):
            out.add(i)
    return out


def _static_order(deps: dict[str, list[str]]) -> list[str]:
    """graphlib.TopologicalSorter(deps).static_order(), the same order, in a third of its time
    (it matters for a 100k-kernel plan): nodes in insertion order, ready ones batch by batch."""
    npred: dict[str, int] = {}
    succ: dict[str, list[str]] = {}
    for node, preds in deps.items():
        npred[node] = npred.get(node, 0) + len(preds)
        succ.setdefault(node, [])
        for p in preds:
            npred.setdefault(p, 0)
            succ.setdefault(p, []).append(node)
    ready = [n for n, c in npred.items() if c == 0]
    out: list[str] = []
    while ready:
        out += ready
        nxt = []
        for n in ready:
            for s in succ[n]:
                npred[s] -= 1
                if npred[s] == 0:
                    nxt.append(s)
        ready = nxt
    if len(out) != len(npred):
        raise RuntimeError("leantile bug: the kernels of a plan depend on each other in a cycle")
    return out
