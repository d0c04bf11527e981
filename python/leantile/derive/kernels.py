"""Kernel builders: from a matched, derived site to plan.Kernel statements.

Buffer names follow the graph (`matmul_10`, `red_max_4`, `X_shared`) so the emitted
TileLang reads like a hand-written kernel. Tile sizes come from `tiles`
(block_m, block_n, block_k, block_r, stages, threads), never from the derivation.

block_r is the kept-axis block of a standalone reduction kernel (the row statistics of a
norm computed before its GEMM, the column sums of a weight): such a kernel has only
(axis / block) CTAs, so it needs a block of its own, smaller than the GEMM's block_m, to
fill the GPU (at block_m=128 and m=1024 it ran on 8 of the H200's 132 SMs). Its default,
128, is block_m's default: default plans keep the row blocks they were measured with (a
column-sum kernel used block_n before).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from .. import ir
from ..plan import FIXED, Buffer, Fill, Gemm, Iota, Kernel, Load, Map, Pivot, Reduce, State, Store, Stream, Tile
from .context import Ctx
from .gain_operand import gained_lhs, weight_source
from .grids import flash_grid, grid_tile, tiled_grid
from .online_update import online_update
from .rules.masks import boundary_closure
from .rules.base import padded
from .rules.row_tiles import row_block, row_threads, streamed_rows
from .rules.stats import VARIANCE, row_ancestors, unary_chain
from .rules.softmax import output_casts
from .score_maps import node_map, score_map
from .sites import FlashSite, GemmSite, SoftmaxSite, row_peels


DEFAULT_TILES = {"block_m": 128, "block_n": 128, "block_k": 64, "block_r": 128, "stages": 2, "threads": 256,
                 "swizzle": 10}
# The shape's own defaults (a large GEMM, few rows, a split): derive/shape_tiles.py.


class KernelBuilder:
    """Accumulates buffers and statements of one kernel. (A plain class: a 10^5-node chain
    builds 10^5 of them.)"""

    def __init__(self, user: frozenset[str], name: str, role: str, grid: list[Tile],
                 stream: Stream | None = None, threads: int = 256):
        self.user = user  # the graph's own names (inputs, outputs): never a local buffer's
        self.name, self.role, self.grid, self.stream, self.threads = name, role, grid, stream, threads
        self.buffers: dict[str, Buffer] = {}
        self.states: list[State] = []
        self.prologue: list = []
        self.body: list = []
        self.epilogue: list = []
        self.second_pass: list = []  # Kernel.second_pass (a streamed row kernel's epilogue over the row)
        self._batch = {t.axis for t in grid if t.block == 1}  # indexed by the grid: not on chip
        self._keys: dict[tuple, str] = {}  # what a buffer holds -> its name
        self.packed: tuple[str, ...] = ()  # Kernel.packed

    def buf(self, name, axes, scope, dtype, node=None, *, key: tuple) -> str:
        """The on-chip buffer that holds `key` (("tile", node), ("value", node), ("colsum", w),
        ...), declared on first use; returns its name. The name is `name` (built from graph
        names: `X_shared`, `matmul_3`) unless a user's name or another buffer of this kernel
        has it, then `name_`, `name__`, ...: users may name inputs like our buffers, and two
        buffers never share a name. The same key with other axes, scope, dtype or node is a
        bug (one buffer cannot hold both), never a silent alias."""
        axes = tuple(a for a in axes if a not in self._batch) if self._batch and scope != "global" else tuple(axes)
        given = self._keys.get(key)
        if given is not None:
            old = self.buffers[given]
            if (old.axes, old.scope, old.dtype, old.node) != (axes, scope, dtype, node):
                raise RuntimeError(f"leantile bug: kernel {self.name}: buffer {given!r} ({key}) would hold "
                                   f"{scope} {list(axes)} {dtype} (node {node}) and {old.scope} "
                                   f"{list(old.axes)} {old.dtype} (node {old.node})")
            return given
        given = name
        while given in self.user or given in self.buffers:
            given += "_"
        self._keys[key] = given
        self.buffers[given] = _buffer(given, axes, scope, dtype, node)
        return given

    def build(self) -> Kernel:
        return Kernel(name=self.name, role=self.role, grid=tuple(self.grid), stream=self.stream,
                      buffers=tuple(self.buffers.values()), states=tuple(self.states),
                      prologue=tuple(self.prologue), body=tuple(self.body), epilogue=tuple(self.epilogue),
                      second_pass=tuple(self.second_pass), threads=self.threads, packed=self.packed)


# Plan objects are frozen: one object serves every kernel that has the same one (the tiles
# of a grid, an input's fragment and its load in each of 10^5 unfused kernels).
@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)
def _buffer(name: str, axes: tuple, scope: str, dtype: str, node: int | None) -> Buffer:
    return Buffer(name=name, axes=axes, scope=scope, dtype=dtype, node=node)


@functools.lru_cache(maxsize=4096)
def _load(src: str, dst: str) -> Load:
    return Load(src=src, dst=dst)


def _stream(axis: str, param: str, tiles: dict, aliases=()) -> Stream:
    return _stream_of(axis, tiles[param], tiles["stages"], param, tuple(sorted(set(aliases) - {axis})))


def _split(st: Stream, split: str | None) -> Stream:
    return st.model_copy(update={"split": split}) if split else st


@functools.lru_cache(maxsize=4096)
def _stream_of(axis: str, block: int, stages: int, param: str, aliases: tuple) -> Stream:
    return Stream(axis=axis, block=block, stages=stages, param=param, aliases=aliases)


def _operand(g, i, kb: KernelBuilder, have: dict[int, str]) -> str:
    """Register name of node i in this kernel: a literal, a value already here, or a load."""
    lit = g.literal(i)
    if lit:
        return lit
    if i in have:
        return have[i]
    n = g.node(i)
    src = g.value(i)
    dst = kb.buf(f"{src}_frag", n.axes, "fragment", "acc", i, key=("frag", i))
    (kb.epilogue if kb.stream else kb.body).append(_load(src, dst))
    have[i] = dst
    return dst


# ---------------------------------------------------------------------------- online softmax
# the per-block state update and the exponent forms: derive/online_update.py


def _score_statements(g: Ctx, kb: KernelBuilder, s: FlashSite, S: str) -> list:
    """The score function (a mask, a bias) on each block of scores S, in registers, ending in
    S itself. Every intermediate has the scores' tile shape, so that the emitter evaluates the
    whole function in one loop over the tile (a smaller one would be a loop, and a layout, of
    its own); a leaf is loaded per block where it runs along the streamed axis, else once."""
    have = {s.qk: S}
    body: list = []
    for i in s.leaves:
        n = g.node(i)
        # a leaf with some packed row axes but not all is read at a row index the packed loop
        # computes (position = row % block): from shared memory, where any thread may read any element
        part = kb.packed and 0 < len(set(kb.packed) & set(n.axes)) < len(kb.packed)
        dst = kb.buf(f"{g.value(i)}_frag", n.axes, "shared" if part else "fragment", "acc", i, key=("frag", i))
        (body if s.axis in n.axes else kb.prologue).append(Load(src=g.value(i), dst=dst))
        have[i] = dst
    tile = g.node(s.qk).axes
    for i in s.score:
        n = g.node(i)
        dst = S if i == s.softmax.src else kb.buf(g.value(i), tile, "fragment", "acc", i, key=("value", i))
        if isinstance(n, ir.Iota):
            body.append(Iota(dst=dst, axis=n.axis))
        else:
            args = tuple(g.literal(a) or have[a] for a in n.args())
            body.append(score_map(g, i, dst, args, s.score, boundary_only=not isinstance(n, ir.Cast)
                                  and i in s.exact and bool(kb.stream.skip)))
        have[i] = dst
    return body


def flash_kernel(g: Ctx, s: FlashSite, exp2: bool, tiles: dict, split: str | None = None,
                 skip: bool = False, pack: bool = False) -> Kernel:
    """Online-softmax attention; with `split` (split_kv: a batch axis of slices), one slice of
    t per CTA, storing its o / l and log-sum-exp (derive.split_kernels merges the slices); with
    `skip` (skip_masked_tiles), only the key blocks the site's mask bounds may keep; with `pack`
    (pack_query_group), the query heads of a group in one CTA (flash_grid)."""
    sm = s.softmax
    qk, pv = g.node(s.qk), g.node(s.pv)
    q, k, v = g.node(qk.a), g.node(qk.b), g.node(pv.b)
    t = s.axis
    scaled = f" (scale {sm.scale:.6g} folded into the exponent)" if sm.scale_node is not None else ""
    if s.score:
        scaled += f" (score function of {len(s.score)} ops on each tile)"
    grid, packed = flash_grid(g, s, tiles, pack)
    kb = KernelBuilder(g.names.user, f"flash_{pv.id}",
                       f"online-softmax attention: softmax(Q K^T) V, t streamed{scaled}",
                       ([grid_tile(split, 1, None)] if split else []) + grid,
                       _split(_stream(t, "block_n", tiles, [pv.axis_b]), split), tiles["threads"])
    kb.packed = packed
    if pack and s.group:
        kb.role += f", the {s.group} heads of a K/V group in one CTA" + (" (packed rows)" if packed else "")
    if skip:
        kb.stream = kb.stream.model_copy(update={"skip": s.bounds})
        kb.role += ", masked key blocks skipped"
    dq = g.dtype_of(q.id)
    Qs = kb.buf(f"{g.value(q.id)}_shared", q.axes, "shared", dq, q.id, key=("tile", q.id))
    Ks = kb.buf(f"{g.value(k.id)}_shared", k.axes, "shared", g.dtype_of(k.id), k.id, key=("tile", k.id))
    Vs = kb.buf(f"{g.value(v.id)}_shared", v.axes, "shared", g.dtype_of(v.id), v.id, key=("tile", v.id))
    S = kb.buf(g.value(s.qk), qk.axes, "fragment", "acc", s.qk, key=("value", s.qk))
    P = kb.buf(g.value(sm.exp), qk.axes, "fragment", "acc", sm.exp, key=("value", sm.exp))
    # P feeds the second GEMM from registers where its operand is 16-bit (the FA2/FA3 layout trick);
    # a float32 (TF32) operand has no register layout TileLang 0.1.15 can match to the score tile's
    # ("Layout infer conflict between exp and exp_cast" at every head dim >= 16): it goes through
    # shared memory, as any GEMM operand does
    Ph = kb.buf(f"{g.value(sm.exp)}_cast", qk.axes, "shared" if dq in ("f32", "f64") else "fragment", dq,
                sm.exp, key=("cast", sm.exp))
    o = kb.buf(g.value(s.pv), pv.axes, "fragment", "acc", s.pv, key=("value", s.pv))
    kb.prologue = [Load(src=g.value(q.id), dst=Qs)]
    # P and l relative to the exact m (online_update._exponent): a split slice's lse = c m + log l
    # is weighed against the other slices' too
    update, m, l, alpha = online_update(g, kb, sm, S, P, exp2, g.node(sm.mx).axes)
    kb.states.append(State(buffer=o, init="0", combine="rescaled_sum"))
    kb.prologue.append(Fill(dst=o, value="0"))
    kb.body = [Load(src=g.value(k.id), dst=Ks),
               Gemm(a=Qs, b=Ks, acc=S, axis_a=qk.axis_a, axis_b=qk.axis_b, clear=True),
               *_score_statements(g, kb, s, S),
               *update,
               Map(dst=o, fn="mul", args=(o, alpha)),
               Map(dst=Ph, fn="copy", args=(P,)),
               Load(src=g.value(v.id), dst=Vs),
               Gemm(a=Ph, b=Vs, acc=o, axis_a=t, axis_b=pv.axis_b)]
    if skip:  # the mask's positions and comparisons run where its selects do: on boundary blocks
        kb.body = boundary_closure(kb.prologue, kb.body, kb.buffers)
    if not split:
        kb.epilogue = [Map(dst=o, fn="div", args=(o, l)), Store(src=o, dst=g.value(s.pv))]
        mx_out, sm_out = stats_outputs(g, s)  # a training forward's: the backward reads them
        if mx_out or sm_out:
            kb.role += "; stores the softmax's max and sum"
            if sm.scale != 1.0:  # the graph's max is of the scaled scores: c m
                kb.epilogue.append(Map(dst=m, fn="mul", args=(m, f"#{repr(sm.scale)}")))
            kb.epilogue += [*(Store(src=m, dst=g.value(i)) for i in mx_out), *(Store(src=l, dst=g.value(i)) for i in sm_out)]
        return kb.build()
    # a slice: o / l, c m and l (a slice past the end at other tiles has l = 0, m = -inf: its
    # o / max(l, tiny) = 0 weighs nothing in the combine, split_kernels.split_flash)
    kb.role = f"slice of split-KV attention (t streamed{scaled}): o / l, the max and the sum of exp"
    safe = kb.buf(f"{l}_safe", g.node(sm.mx).axes, "fragment", "acc", key=("safe", sm.sm))
    kb.epilogue = [Map(dst=safe, fn="max", args=(l, "#1e-30")),
                   Map(dst=o, fn="div", args=(o, safe)),
                   Store(src=o, dst=g.names.extra(("partial", s.pv), f"{g.value(s.pv)}_partial")),
                   *([Map(dst=m, fn="mul", args=(m, f"#{repr(sm.scale)}"))] if sm.scale != 1.0 else []),
                   Store(src=m, dst=g.names.extra(("max", s.pv), f"{g.value(s.pv)}_max")),
                   Store(src=l, dst=g.names.extra(("sum", s.pv), f"{g.value(s.pv)}_sum"))]
    return kb.build()


def stats_outputs(g: Ctx, s: FlashSite) -> tuple[list[int], list[int]]:
    """The outputs (or casts of them that are) of attention site s's softmax max and sum: a
    training forward's (rules.softmax.output_casts)."""
    out = set(g.g.outputs.values())
    return tuple([*output_casts(g, i), *([i] if i in out else [])] for i in (s.softmax.mx, s.softmax.sm))


def softmax_row_kernels(g: Ctx, sm: SoftmaxSite, exp2: bool, tiles: dict,
                        split: str | None = None) -> tuple[Kernel, Kernel]:
    """A softmax whose row is too long for registers: kernel 1 streams the row once keeping
    (m, l) online and stores them; kernel 2 writes exp(c (x - m)) / l tile by tile. With
    `split` (split_row: a batch axis of slices) kernel 1 folds one slice of the row per CTA and
    stores that slice's (c m, l) (derive.split_kernels merges them)."""
    x, t = g.node(sm.src), sm.axis
    rows = [a for a in x.axes if a != t]
    row_axes = g.node(sm.mx).axes
    kb = KernelBuilder(g.names.user, f"softmax_stats_{sm.div}", f"online row max and sum of exp over {t} (one pass)",
                       ([grid_tile(split, 1, None)] if split else [])
                       + tiled_grid(rows, {rows[-1]: "block_m"} if rows else {}, tiles),
                       _split(_stream(t, "block_n", tiles), split), tiles["threads"])
    xt = kb.buf(f"{g.value(sm.src)}_frag", x.axes, "fragment", "acc", sm.src, key=("frag", sm.src))
    P = kb.buf(g.value(sm.exp), x.axes, "fragment", "acc", sm.exp, key=("value", sm.exp))
    update, m, l, _ = online_update(g, kb, sm, xt, P, exp2, row_axes)
    kb.body = [Load(src=g.value(sm.src), dst=xt), *update]
    # m is the max of the raw scores; the max node's buffer holds its true value max(c x) = c m
    # (c > 0): it may be a graph output, and the normalising kernel reads it as such
    true_max = [Map(dst=m, fn="mul", args=(m, f"#{repr(sm.scale)}"))] if sm.scale != 1.0 else []
    if split:  # a slice past the end (at other blocks) keeps m = -inf, l = 0: it weighs nothing
        kb.role = f"slice of a split softmax row ({t} streamed): the slice's max and sum of exp"
        kb.epilogue = [*true_max, Store(src=m, dst=g.names.extra(("partial", sm.mx), f"{g.value(sm.mx)}_partial")),
                       Store(src=l, dst=g.names.extra(("partial", sm.sm), f"{g.value(sm.sm)}_partial"))]
    else:
        kb.epilogue = [*true_max, Store(src=m, dst=g.value(sm.mx)), Store(src=l, dst=g.value(sm.sm))]
    stats = kb.build()

    ax = list(g.node(sm.div).axes)
    tiled = dict(zip(ax[-2:], ["block_m", "block_n"][-len(ax[-2:]):]))
    nb = KernelBuilder(g.names.user, f"softmax_normalize_{sm.div}", f"exp(x - m) / l, tile by tile over {t}",
                       tiled_grid(ax, tiled, tiles), None, tiles["threads"])
    have: dict[int, str] = {}
    xf, mf, lf = (_operand(g, i, nb, have) for i in (sm.src, sm.mx, sm.sm))
    p = nb.buf(g.value(sm.exp), g.node(sm.exp).axes, "fragment", "acc", sm.exp, key=("value", sm.exp))
    out = nb.buf(g.value(sm.div), g.node(sm.div).axes, "fragment", "acc", sm.div, key=("value", sm.div))
    # mf = c m is stored rounded, and round(c x) at the row's max equals it: c x - mf is exact
    # there (0), as x - m is in the stats kernel (see online_update._exponent). mul_rn: nvcc would
    # contract c x - mf into one FMA, exp(c x - round(c m)) != 1 at the max (13% at c m of 4e6)
    if sm.scale != 1.0:
        nb.body.append(Map(dst=p, fn="mul_rn", args=(xf, f"#{repr(sm.scale)}")))
    nb.body.append(Map(dst=p, fn="sub", args=(p if sm.scale != 1.0 else xf, mf)))
    if exp2:
        nb.body.append(Map(dst=p, fn="mul", args=(p, f"#{repr(1.0 / math.log(2.0))}")))
    nb.body.append(Map(dst=p, fn="exp2" if exp2 else "exp", args=(p,)))
    # one reciprocal per row, not a division per element (as region_kernels does for x / s[row]):
    # the normalising pass streams the whole tensor, and an IEEE division is a dozen instructions
    linv = nb.buf(f"{lf}_recip", row_axes, "fragment", "acc", key=("recip", sm.sm))
    nb.body += [Map(dst=linv, fn="recip", args=(lf,)), Map(dst=out, fn="mul", args=(p, linv)),
                Store(src=out, dst=g.value(sm.div))]
    return stats, nb.build()


# ---------------------------------------------------------------------------- GEMM family
@dataclass
class GemmChoice:
    """What the derivation steps decided for one GemmSite (each rule's `apply` sets its part)."""
    site: GemmSite
    dual: bool = False
    scale: bool = False
    mean: bool = False
    colsum: str | None = None  # "streamed" | "precomputed" (mean pullout)
    stats: str | None = None  # "fused" | "separate"
    expanded: set[int] = field(default_factory=set)
    epilogue: list[int] = field(default_factory=list)
    split: int = 0  # split_k: slices of the contraction (0: one CTA runs all of k)
    pool: int | None = None  # fuse_pool_epilogue: the reduce over the weight's last axis, in the epilogue
    rows: tuple[int, ...] = ()  # fuse_row_epilogue: reductions over the whole column axis, in the epilogue
    gain_into: str = "weight"  # gain_fold: "weight" (a map kernel scales W's rows) or "operand" (the LHS tile, each k step)


@dataclass
class OnlineChoice:
    """What the derivation steps decided for one streamed softmax site (FlashSite or SoftmaxSite)."""
    site: FlashSite | SoftmaxSite
    exp2: bool = False
    split: int = 0  # split_kv: slices of the key axis (0: one CTA runs all of t)
    skip: bool = False  # skip_masked_tiles: stream only the key blocks the mask may keep
    pack: bool = False  # pack_query_group: the query heads of a K/V group in one CTA


def _row_program(g: Ctx, c: GemmChoice, kb: KernelBuilder, x_tile: str, into: list, have: dict):
    """Row statistics: in-loop accumulation (into `kb.body`) and the epilogue statements (into
    `into`) that compute every per-row vector the pullouts need from those sums.

    An expanded variance sum_k (x - mu)^2 is computed from sums shifted by a per-row pivot p,
    the row's first element (variance_expand, LeanTile.sum_sq_sub_pivot):
        sum (x - mu)^2 = sum (x - p)^2 - 2 (mu - p) sum (x - p) + n (mu - p)^2.
    Unshifted, sum x^2 - 2 mu sum x + n mu^2 cancels catastrophically when |mu| >> sigma
    (float32, mu = 1000: 4.5e-2 relative error, mu = 3000: NaN rows); shifted, every term is of
    the size of the variance. sum x, which the mean needs too, is sum (x - p) + n p. (Streaming
    sum x and deriving sum (x - p) = sum x - n p instead ran the fused LayerNorm -> GEMM kernel
    34% slower on an H100: 0.1017 against 0.0782 ms.) The pivot is taken from the first
    streamed tile (plan.Pivot), which the body loads anyway."""
    s = c.site
    base = g.node(s.base)
    rows = tuple(a for a in base.axes if a != s.axis)
    stat_bufs: dict[tuple, str] = {}
    n_k = g.axes[s.axis]

    def accumulator(name: str, key: tuple) -> str:
        acc = kb.buf(name, rows, "fragment", "acc", key=key)
        kb.prologue.append(Fill(dst=acc, value="0"))
        kb.states.append(State(buffer=acc, init="0", combine="sum"))
        return acc

    def stat(chain: tuple[str, ...]) -> str:
        if chain in stat_bufs:
            return stat_bufs[chain]
        name = "sum_" + "_".join((*chain[::-1], g.value(s.base)))
        acc = accumulator(name, ("stat", chain))
        src = x_tile
        if chain:
            src = kb.buf(f"{name}_terms", base.axes, "fragment", "acc", key=("terms", chain))
            kb.body.append(Map(dst=src, fn=chain[0], args=(x_tile,)))
            for op in chain[1:]:
                kb.body.append(Map(dst=src, fn=op, args=(src,)))
        kb.body.append(Reduce(dst=acc, src=src, kind="sum", axis=s.axis, accumulate=True))
        stat_bufs[chain] = acc
        return acc

    ancestors = row_ancestors(g, [p.vec for p in row_peels(s.peels)], s.axis)
    pivoted = None  # (p, sum (x - p), sum (x - p)^2) once an expanded variance needs them
    if any(i in c.expanded and i not in have for i in ancestors):
        x = g.value(s.base)
        p = kb.buf(f"pivot_{x}", rows, "fragment", "acc", key=("pivot",))
        kb.prologue.append(Fill(dst=p, value="0"))  # set on the first block; cleared so no path reads garbage
        d = kb.buf(f"{x}_shifted", base.axes, "fragment", "acc", key=("shifted",))
        s1, s2 = accumulator(f"sum_{x}_shifted", ("shifted_sum", 1)), accumulator(f"sum_sq_{x}_shifted",
                                                                                     ("shifted_sum", 2))
        kb.body += [Pivot(dst=p, src=x_tile, axis=s.axis),  # the row's first element, from the first tile
                    Map(dst=d, fn="sub", args=(x_tile, p)),
                    Reduce(dst=s1, src=d, kind="sum", axis=s.axis, accumulate=True),
                    Map(dst=d, fn="square", args=(d,)),
                    Reduce(dst=s2, src=d, kind="sum", axis=s.axis, accumulate=True)]
        total = kb.buf(f"sum_{x}", rows, "fragment", "acc", key=("stat", ()))
        into.append(Map(dst=total, fn="fma", args=(p, f"#{n_k}", s1)))  # sum x = sum (x - p) + n p
        stat_bufs[()] = total
        pivoted = (p, s1, s2)

    for i in ancestors:
        n = g.node(i)
        if i in have or g.literal(i) or isinstance(n, ir.Input):
            continue
        if isinstance(n, ir.Reduce) and i in c.expanded:
            p, s1, s2 = pivoted
            mu_node = VARIANCE.match(g, n, s.base)
            mu = g.literal(mu_node) or have[mu_node]
            v = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
            dm = kb.buf(f"{v}_shift", n.axes, "fragment", "acc", key=("shift", i))
            t = kb.buf(f"{v}_tmp", n.axes, "fragment", "acc", key=("tmp", i))
            into += [Map(dst=dm, fn="sub", args=(mu, p)),  # mu - p
                     Map(dst=t, fn="mul", args=(dm, f"#{n_k}")),  # n (mu - p)
                     Map(dst=t, fn="fma", args=(s1, "#-2.0", t)),  # n (mu - p) - 2 sum (x - p)
                     Map(dst=v, fn="fma", args=(dm, t, s2))]  # + sum (x - p)^2
            have[i] = v
        elif isinstance(n, ir.Reduce):
            have[i] = stat(unary_chain(g, n.x, s.base))
        else:
            v = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
            into.append(node_map(n, v, tuple(g.literal(a) or have[a] for a in n.args())))
            have[i] = v


def row_stats_kernel(g: Ctx, c: GemmChoice, tiles: dict, skip=()) -> tuple[Kernel, list[int]]:
    """Its own kernel: stream the contraction axis once, store the per-row vectors. Tiles fixed
    from the shape as a row kernel's (the whole row on chip where two rows fit, else streamed
    in blocks of up to 1024). H200, rmsnorm's 1024 x 4096: the GEMM's block_k on block_r = 128
    rows (8 CTAs) 0.0171 ms, whole rows 0.0030 (benchmarks/norm_gemm/results/kernel-times-norm-gemm-h200-2026-11-26*).
    Vectors in `skip` are not stored: another site's statistics kernel already stores them."""
    s = c.site
    base = g.node(s.base)
    rows = [a for a in base.axes if a != s.axis]
    block, threads = row_block(g, base.axes, s.axis), row_threads(g, base.axes, s.axis)
    if block:  # two rows fit on chip: the whole row in one step, as an on-chip row kernel's
        d, stages = padded(g.axes[s.axis]), 1
    else:
        (block, d), stages, threads = streamed_rows(g, rows, s.axis), tiles["stages"], tiles["threads"]
    kb = KernelBuilder(g.names.user, f"row_stats_{s.matmuls[0]}",
                       "per-row statistics of the GEMM's LHS, stored for its epilogue",
                       [grid_tile(a, block, FIXED) if a == rows[-1] else grid_tile(a, 1, None) for a in rows],
                       _stream_of(s.axis, d, stages, FIXED, ()), threads)
    x = kb.buf(f"{g.value(s.base)}_shared", base.axes, "shared", g.dtype_of(s.base), s.base, key=("tile", s.base))
    kb.body.append(Load(src=g.value(s.base), dst=x))
    have: dict[int, str] = {}
    _row_program(g, c, kb, x, kb.epilogue, have)
    stored = []
    for p in s.peels:
        if p.vec in have and p.vec not in stored and p.vec not in skip:
            kb.epilogue.append(Store(src=have[p.vec], dst=g.value(p.vec)))
            stored.append(p.vec)
    return kb.build(), stored


def colsum_kernel(g: Ctx, w: int, axis: str, tiles: dict, src: str | None = None) -> Kernel:
    """Column sums of weight w over `axis` (of `src`, w with a gain folded in, where given)."""
    wn = g.node(w)
    cols = [a for a in wn.axes if a != axis]
    name = g.colsum(w)  # the global it writes; the kernel and its accumulator are named after it
    kb = KernelBuilder(g.names.user, name, f"column sums of {g.value(w)} over {axis} (mean pullout)",
                       tiled_grid(cols, {cols[-1]: "block_r"} if cols else {}, tiles),
                       _stream(axis, "block_k", tiles), tiles["threads"])
    t = kb.buf(f"{g.value(w)}_shared", wn.axes, "shared", g.dtype_of(w), w, key=("tile", w))
    acc = kb.buf(name, cols, "fragment", "acc", key=("colsum", w))
    kb.prologue.append(Fill(dst=acc, value="0"))
    kb.body += [Load(src=src or g.value(w), dst=t), Reduce(dst=acc, src=t, kind="sum", axis=axis, accumulate=True)]
    kb.epilogue.append(Store(src=acc, dst=name))
    return kb.build()


def gemm_kernel(g: Ctx, c: GemmChoice, tiles: dict, stores: list[int], split: str | None = None) -> Kernel:
    """The GEMM of site c.site with its fused statistics and epilogue; with `split` (split_k:
    a batch axis of slices), one slice of k per CTA, stored as a float32 partial and nothing
    more (derive.split_kernels adds the slices and runs the epilogue)."""
    s = c.site
    mms = [g.node(i) for i in s.matmuls]
    base = g.node(s.base)
    out_axes = mms[0].axes
    m_axis = next((a for a in reversed(base.axes) if a != s.axis and a in out_axes
                   and all(a not in g.node(mm.b).axes for mm in mms)), None)
    n_axis = next((a for a in reversed(out_axes) if a not in base.axes), None)
    tiled = {a: p for a, p in ((m_axis, "block_m"), (n_axis, "block_n")) if a}
    what = "dual GEMM" if len(mms) == 2 else "GEMM"
    grid, packed, placed = tiled_grid(out_axes, tiled, tiles), (), ""  # placed: a pool or norm
    if c.pool is not None and not split:  # fuse_pool_epilogue: (n, p) one column tile of block_n
        p = g.node(c.pool).axis
        q, P = out_axes[-2], g.axes[p]
        if tiles["block_n"] % P or tiles["block_n"] < 2 * P:  # n keeps a tile of two or more positions
            raise ir.GraphError([f"{g.g.name}: block_n={tiles['block_n']} cannot hold two positions of {q} with "
                                 f"all {P} of {p} (fuse_pool_epilogue): choose a multiple of {2 * P}"])
        grid = [grid_tile(p, P, FIXED)] + [grid_tile(q, tiles["block_n"] // P, "block_n", P) if t.axis == q else t
                                           for t in grid if t.axis != p]
        packed, placed = (q, p), f", pooled over {p} in the epilogue"
    if c.rows and not split:  # fuse_row_epilogue: one column tile holds every position of n
        grid = [grid_tile(n_axis, padded(g.axes[n_axis]), FIXED) if t.axis == n_axis else t for t in grid]
        placed = f", reduced over {n_axis} in the epilogue"
    kb = KernelBuilder(g.names.user, f"gemm_{'_'.join(map(str, s.matmuls))}",
                       f"{what} over {s.axis}" + (" with pulled-out row scale" if c.scale else "")
                       + (" and mean" if c.mean else "") + (", fused epilogue" if c.epilogue else "") + placed,
                       ([grid_tile(split, 1, None)] if split else []) + grid,
                       _split(_stream(s.axis, "block_k", tiles, [mm.axis_b for mm in mms]), split), tiles["threads"])
    kb.packed = packed
    if split:
        kb.role = f"slice of a split-K {what} over {s.axis}: float32 partial sums"
    xs = kb.buf(f"{g.value(s.base)}_shared", base.axes, "shared", g.dtype_of(s.base), s.base, key=("tile", s.base))
    kb.body.append(Load(src=g.value(s.base), dst=xs))
    lhs = gained_lhs(g, c, kb, xs)  # xs, or its tile times the gain's k slice (gain_fold into the operand)
    have: dict[int, str] = {}
    accs, colsums = [], {}  # colsums: weight -> its column sums here (one per weight, even if used twice)
    for mm in mms:
        w = g.node(mm.b)
        ws = kb.buf(f"{g.value(w.id)}_shared", w.axes, "shared", g.dtype_of(w.id), w.id, key=("tile", w.id))
        acc = kb.buf(g.value(mm.id), mm.axes, "fragment", "acc", mm.id, key=("value", mm.id))
        kb.prologue.append(Fill(dst=acc, value="0"))
        kb.states.append(State(buffer=acc, init="0", combine="sum"))
        kb.body += [Load(src=weight_source(g, c, w.id), dst=ws),
                    Gemm(a=lhs, b=ws, acc=acc, axis_a=mm.axis_a, axis_b=mm.axis_b)]
        if c.mean and c.colsum == "streamed" and w.id not in colsums:
            cs = colsums[w.id] = kb.buf(g.colsum(w.id), [a for a in w.axes if a != mm.axis_b], "fragment", "acc",
                                        key=("colsum", w.id))
            kb.prologue.append(Fill(dst=cs, value="0"))
            kb.states.append(State(buffer=cs, init="0", combine="sum"))
            kb.body.append(Reduce(dst=cs, src=ws, kind="sum", axis=mm.axis_b, accumulate=True))
        accs.append((mm, w, acc))
    if split:
        (mm, _, acc), = accs
        kb.epilogue.append(Store(src=acc, dst=g.names.extra(("partial", mm.id), f"{g.value(mm.id)}_partial")))
        return kb.build()
    epi: list = []
    if c.stats == "fused":
        _row_program(g, c, kb, xs, epi, have)
    kb.epilogue += epi
    for mm, w, acc in accs:  # undo the peels, innermost (closest to the base) first (a gain is in the weight)
        for p in reversed(row_peels(s.peels)):
            vec = _operand(g, p.vec, kb, have)
            if p.kind == "mean":
                if w.id not in colsums:  # precomputed: loaded once per weight
                    colsums[w.id] = kb.buf(f"{g.colsum(w.id)}_frag", [a for a in w.axes if a != mm.axis_b],
                                           "fragment", "acc", key=("colsum", w.id))
                    kb.epilogue.append(Load(src=g.colsum(w.id), dst=colsums[w.id]))
                cs = colsums[w.id]
                t = kb.buf(f"{acc}_mean", mm.axes, "fragment", "acc", key=("mean", mm.id))
                kb.epilogue += [Map(dst=t, fn="mul", args=(vec, cs)), Map(dst=acc, fn="sub", args=(acc, t))]
            else:
                kb.epilogue.append(Map(dst=acc, fn="mul", args=(acc, vec)))
        have[mm.id] = acc
    for i in c.epilogue:  # fuse_elementwise (and the reductions of fuse_pool_epilogue, fuse_row_epilogue)
        n = g.node(i)
        if isinstance(n, ir.Reduce):  # every position of the pooled or normalised axis is in this tile
            dst = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
            kb.epilogue.append(Reduce(dst=dst, src=have[n.x], kind=n.kind, axis=n.axis))
            have[i] = dst
            continue
        args = tuple(_operand(g, a, kb, have) for a in n.args())
        dst = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
        kb.epilogue.append(node_map(n, dst, args))
        have[i] = dst
    for i in stores:
        kb.epilogue.append(Store(src=have[i], dst=g.value(i)))
    return kb.build()


# ---------------------------------------------------------------------------- fallback
def node_kernel(g: Ctx, i: int, tiles: dict) -> Kernel:
    """The unfused kernel of one node, reading and writing global tensors."""
    n = g.node(i)
    if n.op == "matmul":
        return gemm_kernel(g, GemmChoice(GemmSite([i], n.a, n.axis_a, [])), tiles, [i])
    ax = list(n.axes)
    if n.op == "reduce":  # one tiled row axis: the fragment is block_m x block_k
        tiled = {ax[-1]: "block_m"} if ax else {}
        x = g.node(n.x)
        # a window of block_k along a short outer axis may reach past 2^31 elements from X's start
        # (c = 1 over 8192 x 8192: TileLang refuses the literal; GPU campaign s64): there the axis
        # streams in one block of its padded size (elsewhere block_k: a 96 x 4 tile has no layout)
        size, stride = g.axes[n.axis], math.prod(g.axes[a] for a in x.axes[x.axes.index(n.axis) + 1:])
        stream = _stream(n.axis, "block_k", tiles) if size >= tiles["block_k"] or \
            tiles["block_k"] * stride <= ir.MAX_TENSOR_ELEMENTS else \
            _stream_of(n.axis, 1 << max(0, size - 1).bit_length(), tiles["stages"], FIXED, ())
        kb = KernelBuilder(g.names.user, f"reduce_{i}", f"{n.kind} of {g.value(n.x)} over {n.axis}",
                           tiled_grid(ax, tiled, tiles), stream, tiles["threads"])
        t = kb.buf(f"{g.value(n.x)}_frag", x.axes, "fragment", "acc", n.x, key=("frag", n.x))
        acc = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
        init = "0" if n.kind == "sum" else "-inf"
        kb.prologue.append(Fill(dst=acc, value=init))
        kb.states.append(State(buffer=acc, init=init, combine=n.kind))
        kb.body += [Load(src=g.value(n.x), dst=t),
                    Reduce(dst=acc, src=t, kind=n.kind, axis=n.axis, accumulate=True)]
        kb.epilogue.append(Store(src=acc, dst=g.value(i)))
        return kb.build()
    tiled = dict(zip(ax[-2:], ["block_m", "block_n"][-len(ax[-2:]):])) if ax else {}
    kb = KernelBuilder(g.names.user, f"map_{i}", f"elementwise {n.op}", tiled_grid(ax, tiled, tiles), None, tiles["threads"])
    if n.op == "iota":  # positions, computed in registers
        dst = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
        kb.body += [Iota(dst=dst, axis=n.axis), Store(src=dst, dst=g.value(i))]
        return kb.build()
    have: dict[int, str] = {}
    lit = g.literal(i)
    args = (lit,) if lit else tuple(_operand(g, a, kb, have) for a in n.args())  # a constant output
    dst = kb.buf(g.value(i), n.axes, "fragment", "acc", i, key=("value", i))
    # a cast rounds in registers (node_map), not only where a store in its dtype would: a
    # statistic's cast is stored wide (Ctx.stored_dtype)
    kb.body += [Map(dst=dst, fn="copy", args=args) if lit else node_map(n, dst, args), Store(src=dst, dst=g.value(i))]
    return kb.build()
