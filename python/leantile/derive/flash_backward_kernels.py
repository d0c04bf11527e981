"""The kernels of flash_backward (rules/flash_backward.py): statistics, dQ, dK/dV.

Every [t_q, t_kv] value lives on chip, one tile at a time; what crosses kernels is one float32
per query row: the scores' max (raw, before the scale: P = exp(c (s - m)) / l is then exact near
the max, as online_update's exponent is; the forward's c m divided by c where it is saved), the
softmax's sum l, and D (rowsum(dO O) where the forward hands its output over, a row kernel of its
own; else folded by the statistics kernel). The statistics kernel runs only where the forward's
max and sum are not read (site.saved_stats). The dK/dV kernel holds its tiles transposed, keys as
rows: a buffer's axes name its layout, every statement broadcasts by name.

Positions past the end of the streamed axis (zero-filled loads) get P = 0 and dS = 0 before
they reach a product (a Mask), so a padded key or query adds nothing to dQ, dK or dV whatever
the score function makes of a zero score.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..plan import Buffer, Fill, Gemm, Kernel, Load, Map, Mask, Reduce, State, Store
from .context import Ctx
from .grids import grid_tile
from .kernels import KernelBuilder, _stream
from .online_update import _exponent, online_update
from .rules.masks import boundary_closure
from .rules.flash_backward import transposed_bounds
from .score_maps import score_map
from .sites import FlashBackwardSite

# The tiles: a CTA's rows (query rows, or keys in the dK/dV kernel) are block_m, a streamed block
# block_n, on `threads`; the shape's defaults are shape_tiles.FLASH_BACKWARD_TILES.


def _grid(batch: tuple[str, ...], rows: str, tiles: dict) -> list:
    """One CTA per batch position (heads) and block_m rows of `rows`."""
    return [grid_tile(a, 1, None) for a in batch] + [grid_tile(rows, tiles["block_m"], "block_m")]


def _other_axes(s: FlashBackwardSite, cx: Ctx) -> tuple[str, ...]:
    """The batch axes of the score tile (heads, a GQA group's heads): one per CTA."""
    return tuple(a for a in cx.node(s.softmax.div).axes if a not in (s.row, s.axis))


def _pre_nodes(cx: Ctx, s: FlashBackwardSite) -> list[int]:
    """The tile's nodes computed from the scores before the softmax: the score function and the
    positions and values the cotangent's chain reads (a mask), in id order."""
    sm = s.softmax
    core = {s.qk, *sm.nodes, s.dp, s.prod, s.dsum, s.diff, s.ds0} - {None}
    chain = _chain(cx, s)
    return [i for i in s.tile if i not in core and i not in chain]


def _chain(cx: Ctx, s: FlashBackwardSite) -> list[int]:
    """dS0's single-user path to dS (the score function's cotangent), in order."""
    out, i = [], s.ds0
    while i != s.ds:
        i = cx.users[i][0]
        out.append(i)
    return out


def _needed_by(cx: Ctx, pre: list[int], root: int) -> list[int]:
    """The nodes of `pre` that root depends on (root too if it is one)."""
    want, out = {root}, []
    for i in reversed(pre):
        if i in want:
            out.append(i)
            want.update(cx.node(i).args())
    return out[::-1]


class _Tile:
    """One kernel's score tile: its axes (in the kernel's layout), the values held, the leaves
    loaded, and the statements that compute graph nodes on it."""

    def __init__(self, cx: Ctx, kb: KernelBuilder, axes: tuple[str, ...], stream_axis: str, boundary=()):
        self.cx, self.kb, self.axes, self.stream_axis = cx, kb, axes, stream_axis
        self.have: dict[int, str] = {}
        self.boundary = frozenset(boundary)  # the exact selects: boundary blocks only

    def value(self, i: int) -> str:
        return self.kb.buf(self.cx.value(i), self.axes, "fragment", "acc", i, key=("value", i))

    def arg(self, a: int, into: list) -> str:
        lit = self.cx.literal(a)
        if lit:
            return lit
        if a in self.have:
            return self.have[a]
        n = self.cx.node(a)  # a leaf: loaded per block (into the body) if it runs along the stream, else once
        dst = self.kb.buf(f"{self.cx.value(a)}_shared", n.axes, "shared", "acc", a, key=("leaf", a))
        (into if self.stream_axis in n.axes else self.kb.prologue).append(Load(src=self.cx.value(a), dst=dst))
        if self.stream_axis not in n.axes:
            self.have[a] = dst  # a per-block leaf is loaded again by each kernel part that reads it
        return dst

    def compute(self, nodes, into: list) -> None:
        for i in nodes:
            n = self.cx.node(i)
            args = tuple(self.arg(a, into) for a in n.args())
            st_ = score_map(self.cx, i, self.value(i), args, nodes)
            into.append(st_.model_copy(update={"boundary_only": True}) if i in self.boundary else st_)
            self.have[i] = self.value(i)


def _common(cx: Ctx, s: FlashBackwardSite, kb: KernelBuilder, tile: _Tile, transposed: bool):
    """Q, K, V, dO's shared tiles, and the scores' GEMM statement (S, or S^T keys first)."""
    qk, dp = cx.node(s.qk), cx.node(s.dp)
    q, k, v, do = (cx.node(i) for i in (qk.a, qk.b, dp.b, dp.a))
    sh = {x.id: kb.buf(f"{cx.value(x.id)}_shared", x.axes, "shared", cx.dtype_of(x.id), x.id, key=("tile", x.id))
          for x in (q, k, v, do)}
    S = tile.value(s.qk)
    gemm = Gemm(a=sh[k.id], b=sh[q.id], acc=S, axis_a=qk.axis_b, axis_b=qk.axis_a, clear=True) if transposed else \
        Gemm(a=sh[q.id], b=sh[k.id], acc=S, axis_a=qk.axis_a, axis_b=qk.axis_b, clear=True)
    tile.have[s.qk] = S
    return q, k, v, do, sh, gemm


def _skipping(kb: KernelBuilder, bounds: tuple) -> None:
    """skip_masked_tiles: the stream runs only the blocks some row of the CTA's tile keeps."""
    if bounds:
        kb.stream = kb.stream.model_copy(update={"skip": tuple(bounds)})
        kb.role += ", masked blocks skipped"


def stats_kernel(cx: Ctx, s: FlashBackwardSite, exp2: bool, tiles: dict, m_raw: str, skip: bool = False,
                 dq_acc: str | None = None) -> Kernel:
    """Per query tile, streaming the keys: the softmax's running max (raw) and sum, and, where the
    site computes D = sum_t dP P (no output handed over: site.prod), D as the softmax-weighted sum
    of dP, rescaled with the sum (online_softmax_ratio with dP for v)."""
    sm, t = s.softmax, s.axis
    batch = _other_axes(s, cx)
    what = "the softmax's max and sum" + (" and D = sum dP P" if s.prod is not None else "")
    kb = KernelBuilder(cx.names.user, f"flash_bwd_stats_{sm.sm}", f"attention backward, statistics: {what}, {t} streamed",
                       _grid(batch, s.row, tiles), _stream(t, "block_n", tiles), tiles["threads"])
    _skipping(kb, s.bounds if skip else ())
    tile = _Tile(cx, kb, cx.node(sm.div).axes, t, s.exact if skip else ())
    q, k, v, do, sh, gemm_s = _common(cx, s, kb, tile, transposed=False)
    kb.prologue = [Load(src=cx.value(q.id), dst=sh[q.id])]
    body = [Load(src=cx.value(k.id), dst=sh[k.id]), gemm_s]
    tile.compute(_needed_by(cx, _pre_nodes(cx, s), sm.src), body)
    src = tile.have[sm.src]
    P = tile.value(sm.exp)
    update, m, l, alpha = online_update(cx, kb, sm, src, P, exp2, cx.node(sm.mx).axes)
    kb.body = boundary_closure(kb.prologue, body + update, kb.buffers)
    kb.epilogue = [Store(src=m, dst=m_raw), Store(src=l, dst=cx.value(sm.sm))]
    if dq_acc is not None:  # the dK/dV kernel adds into it: zeros first, over this CTA's query rows
        zero = kb.buf(f"{dq_acc}_zero", cx.node(s.dq).axes, "fragment", "acc", key=("zero", s.dq))
        kb.epilogue += [Fill(dst=zero, value="0"), Store(src=zero, dst=dq_acc)]
    if s.prod is None:
        return kb.build()
    d = kb.buf(cx.value(s.dsum), cx.node(s.dsum).axes, "fragment", "acc", s.dsum, key=("value", s.dsum))
    dP = tile.value(s.dp)
    kb.states.append(State(buffer=d, init="0", combine="rescaled_sum"))
    kb.prologue += [Load(src=cx.value(do.id), dst=sh[do.id]), Fill(dst=d, value="0")]
    prod = kb.buf("weighted_dP", tile.axes, "fragment", "acc", key=("weighted",))  # exp(c (s - m)) dP
    kb.body += [
        Load(src=cx.value(v.id), dst=sh[v.id]),
        Gemm(a=sh[do.id], b=sh[v.id], acc=dP, axis_a=cx.node(s.dp).axis_a, axis_b=cx.node(s.dp).axis_b, clear=True),
        Map(dst=prod, fn="mul", args=(P, dP)),
        Map(dst=d, fn="mul", args=(d, alpha)),
        Reduce(dst=d, src=prod, kind="sum", axis=t, accumulate=True)]
    kb.body = boundary_closure(kb.prologue, kb.body, kb.buffers)
    kb.epilogue = [Map(dst=d, fn="div", args=(d, l)), *kb.epilogue, Store(src=d, dst=cx.value(s.dsum))]
    return kb.build()


def _backward_tile(cx: Ctx, s: FlashBackwardSite, kb: KernelBuilder, tile: _Tile, exp2: bool, rows: dict,
                   sh: dict, do, v, stream: str, load_v: bool = True) -> tuple[list, str, str]:
    """The body's statements after the scores' GEMM: the score function, P from the stored
    statistics (`rows`: on-chip buffers of the raw max, 1 / l and D), dP (V loaded per block where
    `load_v`: the dK/dV kernel's V is its CTA's own), dS through the cotangent's chain, P and dS
    zeroed past the stream's end. Returns (statements, P, dS)."""
    sm = s.softmax
    body: list = []
    tile.compute(_pre_nodes(cx, s), body)
    P = tile.value(sm.div)
    body += _exponent(sm, P, tile.have[sm.src], rows["max"], exp2)
    body.append(Map(dst=P, fn="mul", args=(P, rows["inv_sum"])))
    padded = cx.axes[stream] % kb.stream.block != 0
    if padded:
        body.append(Mask(dst=P, axis=stream, value="0"))
    tile.have[sm.div] = P
    dP = tile.value(s.dp)
    dpn = cx.node(s.dp)
    # dP (or dP^T, keys first, in the dK/dV kernel): the product's operands in the tile's order
    keys_first = tile.axes.index(s.axis) < tile.axes.index(s.row)
    gemm = Gemm(a=sh[v.id], b=sh[do.id], acc=dP, axis_a=dpn.axis_b, axis_b=dpn.axis_a, clear=True) if keys_first \
        else Gemm(a=sh[do.id], b=sh[v.id], acc=dP, axis_a=dpn.axis_a, axis_b=dpn.axis_b, clear=True)
    body += [*([Load(src=cx.value(v.id), dst=sh[v.id])] if load_v else []), gemm]
    tile.have[s.dp] = dP
    tile.have[s.dsum] = rows["D"]
    tile.compute([s.diff, s.ds0, *_chain(cx, s)], body)
    dS = tile.have[s.ds]
    if padded:
        body.append(Mask(dst=dS, axis=stream, value="0"))
    return body, P, dS


def _operand(cx: Ctx, kb: KernelBuilder, src: str, axes, i: int, dt: str) -> tuple[list, str]:
    """A 16-bit copy of tile value `src` as a GEMM's A operand: in registers (the FA2 layout trick),
    through shared memory for a 32-bit graph (TileLang has no register layout for TF32 A)."""
    scope = "shared" if dt in ("f32", "f64") else "fragment"
    dst = kb.buf(f"{src}_cast", axes, scope, dt, i, key=("cast", i))
    return [Map(dst=dst, fn="copy", args=(src,))], dst


def dq_kernel(cx: Ctx, s: FlashBackwardSite, exp2: bool, tiles: dict, m_raw: str, skip: bool = False) -> Kernel:
    """Per query tile, streaming the keys: dQ += dS K."""
    sm, t = s.softmax, s.axis
    batch = _other_axes(s, cx)
    kb = KernelBuilder(cx.names.user, f"flash_bwd_dq_{s.dq}",
                       f"attention backward, dQ = dS K: P and dS recomputed per key block, {t} streamed",
                       _grid(batch, s.row, tiles), _stream(t, "block_n", tiles), tiles["threads"])
    _skipping(kb, s.bounds if skip else ())
    tile = _Tile(cx, kb, cx.node(sm.div).axes, t, s.exact if skip else ())
    q, k, v, do, sh, gemm_s = _common(cx, s, kb, tile, transposed=False)
    rows = _row_loads(cx, s, kb, m_raw, cx.node(s.dsum).axes, "fragment", kb.prologue)
    kb.prologue[:0] = [Load(src=cx.value(q.id), dst=sh[q.id]), Load(src=cx.value(do.id), dst=sh[do.id])]
    rest, P, dS = _backward_tile(cx, s, kb, tile, exp2, rows, sh, do, v, t)
    cast, dSh = _operand(cx, kb, dS, tile.axes, s.ds, cx.dtype_of(q.id))
    acc = kb.buf(cx.value(s.dq), cx.node(s.dq).axes, "fragment", "acc", s.dq, key=("value", s.dq))
    kb.states.append(State(buffer=acc, init="0", combine="sum"))
    kb.prologue.append(Fill(dst=acc, value="0"))
    dqn = cx.node(s.dq)
    kb.body = boundary_closure(kb.prologue, [Load(src=cx.value(k.id), dst=sh[k.id]), gemm_s, *rest, *cast,
                                             Gemm(a=dSh, b=sh[k.id], acc=acc, axis_a=dqn.axis_a, axis_b=dqn.axis_b)],
                                 kb.buffers)
    kb.epilogue = [Store(src=acc, dst=cx.value(s.dq))]
    return kb.build()


def _row_loads(cx: Ctx, s: FlashBackwardSite, kb: KernelBuilder, m_raw: str, axes, scope: str, into: list) -> dict:
    """The stored row statistics loaded (raw max, sum, D) and 1 / sum, into `into`. The forward's
    max (saved_stats) is of the scaled scores, c m: divided by c here, once a row."""
    sm = s.softmax
    m = kb.buf(f"{m_raw}_rows", axes, scope, "acc", key=("rows", "max"))
    l = kb.buf(f"{cx.value(sm.sm)}_rows", axes, scope, "acc", sm.sm, key=("rows", "sum"))
    inv = kb.buf("inv_sum", axes, scope, "acc", key=("rows", "inv"))
    D = kb.buf(f"{cx.value(s.dsum)}_rows", axes, scope, "acc", s.dsum, key=("rows", "D"))
    into += [Load(src=m_raw, dst=m), Load(src=cx.value(sm.sm), dst=l), Load(src=cx.value(s.dsum), dst=D),
             Map(dst=inv, fn="div", args=("#1.0", l))]
    if s.saved_stats and sm.scale != 1.0:  # into a buffer of its own: in the dK/dV kernel's pipelined
        # body a loaded buffer written again is two writers of one stage (TileLang refuses: GPU campaign s79)
        raw, m = m, kb.buf(f"{m_raw}_rows_unscaled", axes, scope, "acc", key=("rows", "max_unscaled"))
        into.append(Map(dst=m, fn="mul", args=(raw, f"#{repr(1.0 / sm.scale)}")))
    return {"max": m, "inv_sum": inv, "D": D}


def dkdv_kernel(cx: Ctx, s: FlashBackwardSite, exp2: bool, tiles: dict, m_raw: str, skip: bool = False,
                dq_acc: str | None = None) -> Kernel:
    """Per key tile, streaming the queries, the tile transposed (keys as rows): dV += P^T dO,
    dK += dS^T Q; with `dq_acc`, each block's dS K added into that float32 global too."""
    t, row = s.axis, s.row
    batch = _other_axes(s, cx)
    made = " and ".join(x for x, i in (("dK = dS^T Q", s.dk), ("dV = P^T dO", s.dv)) if i is not None) or "dQ"
    kb = KernelBuilder(cx.names.user, f"flash_bwd_dkdv_{next(i for i in (s.dk, s.dv, s.dq) if i is not None)}",
                       f"attention backward, {made}: the tile keys first, {row} streamed",
                       _grid(batch, t, tiles), _stream(row, "block_n", tiles), tiles["threads"])
    bounds = transposed_bounds(s.bounds, t) if skip else ()
    _skipping(kb, bounds)
    # a select is exact here only where no bound was left out of the transpose
    tile = _Tile(cx, kb, (*batch, t, row), row, s.exact if bounds and len(bounds) == len(s.bounds) else ())
    q, k, v, do, sh, gemm_s = _common(cx, s, kb, tile, transposed=True)
    kb.prologue = [Load(src=cx.value(k.id), dst=sh[k.id]), Load(src=cx.value(v.id), dst=sh[v.id])]
    loads: list = []
    rows = _row_loads(cx, s, kb, m_raw, cx.node(s.dsum).axes, "shared", loads)
    rest, P, dS = _backward_tile(cx, s, kb, tile, exp2, rows, sh, do, v, row, load_v=False)
    dt = cx.dtype_of(q.id)
    body = [Load(src=cx.value(q.id), dst=sh[q.id]), Load(src=cx.value(do.id), dst=sh[do.id]), *loads, gemm_s, *rest]
    if dq_acc is not None and cx.axes[t] % tiles["block_m"]:
        # dS K sums over this CTA's keys: its rows past the end of t (K zero-filled, but dS there is
        # exp(c (0 - m)) (dP - D), inf where c m < -88: NaN through inf * 0) zeroed first
        body.append(Mask(dst=dS, axis=t, value="0"))
    stores = []
    if s.dv is not None:
        castP, Ph = _operand(cx, kb, P, tile.axes, s.softmax.div, dt)
        dv = kb.buf(cx.value(s.dv), cx.node(s.dv).axes, "fragment", "acc", s.dv, key=("value", s.dv))
        kb.states.append(State(buffer=dv, init="0", combine="sum"))
        kb.prologue.append(Fill(dst=dv, value="0"))
        # after P is final and before dP's GEMM reuses nothing of it: right after P's mask
        at = next(j for j, x in enumerate(body) if isinstance(x, Gemm) and x.acc == tile.have[s.dp])
        body[at:at] = [*castP, Gemm(a=Ph, b=sh[do.id], acc=dv, axis_a=row, axis_b=cx.node(s.dv).axis_b)]
        stores.append(Store(src=dv, dst=cx.value(s.dv)))
    if s.dk is not None:
        castS, dSh = _operand(cx, kb, dS, tile.axes, s.ds, dt)
        dk = kb.buf(cx.value(s.dk), cx.node(s.dk).axes, "fragment", "acc", s.dk, key=("value", s.dk))
        kb.states.append(State(buffer=dk, init="0", combine="sum"))
        kb.prologue.append(Fill(dst=dk, value="0"))
        body += [*castS, Gemm(a=dSh, b=sh[q.id], acc=dk, axis_a=row, axis_b=cx.node(s.dk).axis_b)]
        stores.append(Store(src=dk, dst=cx.value(s.dk)))
    if dq_acc is not None:  # dQ's block from this key tile, added into dq_acc: dS (queries first) K
        dqn = cx.node(s.dq)
        castS, dSh = _operand(cx, kb, dS, tile.axes, s.ds, dt)
        dS_sh = kb.buf(f"{dS}_shared", tile.axes, "shared", dt, s.ds, key=("shared", s.ds))  # (transposed: A from shared)
        part = kb.buf(f"{cx.value(s.dq)}_block", dqn.axes, "fragment", "acc", key=("dq_block",))
        body += [*([] if s.dk is not None else castS), Map(dst=dS_sh, fn="copy", args=(dSh,)),
                 Gemm(a=dS_sh, b=sh[k.id], acc=part, axis_a=dqn.axis_a, axis_b=dqn.axis_b, clear=True),
                 Store(src=part, dst=dq_acc, accumulate=True)]
        kb.role += ", dQ added into " + dq_acc
    kb.body = boundary_closure(kb.prologue, body, kb.buffers)
    kb.epilogue = stores
    return kb.build()


def dq_zero_kernel(cx: Ctx, s: FlashBackwardSite, tiles: dict, dq_acc: str) -> Kernel:
    """dQ's float32 sums (dq_acc) set to zero before the dK/dV kernel adds into them, where no
    statistics kernel runs to do it (the forward's statistics saved), one tile of query rows a CTA."""
    dqn = cx.node(s.dq)
    batch = tuple(a for a in dqn.axes if a not in (s.row,) and a in _other_axes(s, cx))
    kb = KernelBuilder(cx.names.user, f"flash_bwd_dq_zero_{s.dq}", "attention backward: dQ's float32 sums zeroed",
                       _grid(batch, s.row, tiles), None, tiles["threads"])
    zero = kb.buf(f"{dq_acc}_zero", dqn.axes, "fragment", "acc", key=("zero", s.dq))
    kb.body = [Fill(dst=zero, value="0"), Store(src=zero, dst=dq_acc)]
    return kb.build()


def dq_cast_kernel(cx: Ctx, s: FlashBackwardSite, tiles: dict, dq_acc: str) -> Kernel:
    """dQ from its float32 sums (dq_acc) in the output's dtype, one tile of query rows a CTA."""
    dqn = cx.node(s.dq)
    batch = tuple(a for a in dqn.axes if a not in (s.row,) and a in _other_axes(s, cx))
    kb = KernelBuilder(cx.names.user, f"flash_bwd_dq_out_{s.dq}", "attention backward: dQ from its float32 sums",
                       _grid(batch, s.row, tiles), None, tiles["threads"])
    frag = kb.buf(f"{dq_acc}_frag", dqn.axes, "fragment", "acc", s.dq, key=("value", s.dq))
    kb.body = [Load(src=dq_acc, dst=frag), Store(src=frag, dst=cx.value(s.dq))]
    return kb.build()


@dataclass
class FlashBackwardChoice:
    """What the derivation steps decided for a flash_backward site (derive.engine.decide)."""
    site: FlashBackwardSite
    exp2: bool = False  # exp_to_exp2
    skip: bool = False  # skip_masked_tiles
    atomic_dq: bool = False  # flash_backward's dq="atomic": dQ added from the dK/dV kernel
    split: int = 0  # (never split nor packed: the fields every streamed softmax choice has)
    pack: bool = False


def atomic_dq_applies(s: FlashBackwardSite) -> bool:
    """dQ can be added from the dK/dV kernel: it runs (dK or dV wanted) and dQ is wanted (its
    sums zeroed first by the statistics kernel, or where the forward's statistics are saved by a
    kernel of their own: dq_zero_kernel)."""
    return s.dq is not None and (s.dk is not None or s.dv is not None)


def flash_backward(cx: Ctx, c: FlashBackwardChoice, tiles: dict) -> tuple[list, list[Buffer]]:
    """[(kernel, nodes or buffers it reads, nodes or buffers it writes)] in launch order, and the
    global buffers that are no graph node (the raw running max; dQ's float32 sums where the dK/dV
    kernel adds them: the statistics kernel stores them zero first, a last kernel casts them)."""
    s, exp2, skip = c.site, c.exp2, c.skip
    sm = s.softmax
    qk, dp = cx.node(s.qk), cx.node(s.dp)
    for a in dict.fromkeys((qk.axis_b, dp.axis_b)):
        if cx.axes[a] > 1 and cx.axes[a] % 2:
            # the dQ and dK/dV kernels' SIMT products over an odd head dim have no TileLang 0.1.15
            # layout ("no available layout found": GPU campaign s76 at d_h = 5; lowered on the CPU,
            # 3, 5, 7, 9 and 33 fail, 1 and every even head dim tried lower): such a site keeps the
            # generic backward (refused by the engine, as a kernel too big for shared memory is)
            raise ir.GraphError([f"graph {cx.g.name!r}: flash_backward: head dim {a} = {cx.axes[a]} is odd: "
                                 "TileLang 0.1.15 has no layout for its dQ and dK/dV products"])
    inputs = [qk.a, qk.b, dp.a, dp.b, *s.leaves]
    out, bufs, dq_acc = [], [], None
    if c.atomic_dq and atomic_dq_applies(s):
        dq_acc = cx.names.extra(("dq_acc", s.dq), f"{cx.value(s.dq)}_acc")
        bufs.append(Buffer(name=dq_acc, axes=cx.node(s.dq).axes, scope="global", dtype="acc",
                           why="float32: dQ's sums, added into by the dK/dV kernel's CTAs"))
    if s.saved_stats:  # the forward's max (c m) and sum are leaves: no statistics kernel
        m_name = cx.value(sm.mx)
        if dq_acc is not None:  # (what the statistics kernel would zero: a kernel of its own)
            out.append((dq_zero_kernel(cx, s, tiles, dq_acc), [], [dq_acc]))
    else:
        m_name = cx.names.extra(("raw_max", sm.mx), f"{cx.value(sm.mx)}_raw")
        bufs.append(Buffer(name=m_name, axes=cx.node(sm.mx).axes, scope="global", dtype="acc",
                           why="float32: the scores' row max before the scale, for P = exp(c (s - m)) / l in the "
                               "backward's kernels"))
        writes = [m_name, sm.sm, *([s.dsum] if s.prod is not None else []), *([dq_acc] if dq_acc else [])]
        out.append((stats_kernel(cx, s, exp2, tiles, m_name, skip, dq_acc), inputs, writes))
        inputs = inputs + [m_name, sm.sm, s.dsum]  # (D computed elsewhere where it is a leaf: inputs has it)
    if s.dq is not None and dq_acc is None:
        out.append((dq_kernel(cx, s, exp2, tiles, m_name, skip), inputs, [s.dq]))
    if s.dk is not None or s.dv is not None:
        out.append((dkdv_kernel(cx, s, exp2, tiles, m_name, skip, dq_acc), inputs,
                    [i for i in (s.dk, s.dv, dq_acc) if i is not None]))
    if dq_acc is not None:
        out.append((dq_cast_kernel(cx, s, tiles, dq_acc), [dq_acc], [s.dq]))
    return out, bufs
