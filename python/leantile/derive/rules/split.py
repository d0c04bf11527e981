"""The split rules: split_k (a contraction over k split across CTAs), split_kv
(flash-decoding: an attention's t_kv split across CTAs), split_row (a long softmax row's
statistics) and split_reduction (a fused row kernel's streamed reductions: a loss summed into a
scalar), and when they are offered.

Both fill a GPU that the output tiles alone leave idle: a GEMM with m = 16 has 32 output tiles
for 132 SMs, one query of attention has one tile per head. Each CTA runs one slice of the
streamed axis (plan.Stream.split); a second kernel combines the slices in a fixed order, so
the result is deterministic (no atomics).

  split_k:  sum_k a b = sum over slices s of (sum over k in slice s of a b); the partial sums
            are float32, combined left to right (LeanTile.split_k_eval, from sum_split_range).
  split_kv: each slice folds its own online-softmax state (m, l, o); the combine merges the
            states, a merge that gives the state of the concatenated keys and is associative, so
            o / l is softmax(s) v for any split (LeanTile.split_kv_eval). A slice stores o / l, c m
            and l; the combine weighs slice s by l_s exp(c m_s - max c m), which is exp(lse_s - M)
            for lse_s = c m_s + log l_s and a reference M (LeanTile.split_kv_lse_eval holds for any M).

The number of slices is a parameter of the step (`splits`): chosen here from the shape at the
default tiles, so a derivation replays the same plan at any tiles (a slice is a range of stream
blocks computed from the block the kernel runs with; see plan.Stream.split).
"""
from __future__ import annotations

import math

from ... import ir
from ..context import Ctx
from ..grids import flash_grid
from ..sites import FlashSite, GemmSite, SoftmaxSite
from .base import Option, Rule, sym
from .regions import RegionSite
from .row_tiles import column_layout, streamed_ctas, streamed_rows

# The target's SMs (Target.sms: H100 SXM and H200, 132). A grid of fewer
# CTAs than this leaves SMs idle; splitting aims at one wave of CTAs (a GEMM over k, attention over
# the keys: both measured) or two (a softmax row's statistics).
MAX_SPLITS = 64
# a slice keeps at least this many stream blocks (fewer: the combine and the pipeline's fill
# cost more than the parallelism gives)
MIN_K_BLOCKS = 8
MIN_KV_BLOCKS = 2
MIN_ROW_BLOCKS = 4
# a reduction's slices may be more: its partials are one float32 per row and slice, and a
# reduction into a scalar (a loss) has one CTA to fill the GPU with (256 slices of 4 blocks
# of 1024: 2^20 elements at 4096 per CTA; issue 49 asks for no single CTA past 8192)
MAX_REDUCTION_SPLITS = 256
# waves of CTAs a split streamed ROW reduction fills (a column one keeps 2): its CTAs hold one
# 2 x 1024 block in flight each, and two waves left the loads too few to cover DRAM's latency.
# H200, the suite's norms over merged axes (benchmarks/split_reduction/waves_probe.py): LayerNorm over
# (c, h, w) 16 x 64 x 256 x 256 0.1493 / 0.1202 / 0.1185 ms at 2 / 4 / 8 waves (torch.compile 0.124),
# GroupNorm 0.1449 / 0.1136 at 2 / 8 (0.157); the column sums of a bias's gradient 0.0342 / 0.0355
ROW_REDUCTION_WAVES = 8


def _splits(ctas: int, blocks: int, min_blocks: int, sms: int, waves: int = 2,
            cap: int = MAX_SPLITS) -> int | None:
    """Slices for a grid of `ctas` CTAs streaming `blocks` blocks each: about `waves` * sms CTAs
    in all, each slice at least min_blocks long; None: no split. A grid of half a wave or more is
    not split: GPT-2's c_proj GEMM 2048 x 3072 x 768 (96 CTAs) ran 0.034 ms split against
    cuBLAS's 0.017 (benchmarks/split_k_waves/results/suite-rest-2of3-2026-11-25-prenorm.md). A power of two: the combine
    reduces over the slices with a butterfly, which TileLang builds for powers of two only
    (a slice left empty by the rounding adds nothing: zero sums, or l = 0 and c m = -inf)."""
    if 2 * ctas > sms or blocks < 2 * min_blocks:  # half a wave or more: the combine costs more
        return None
    want = min(math.ceil(waves * sms / ctas), blocks // min_blocks, cap)
    return 1 << (want.bit_length() - 1) if want >= 2 else None


def value_columns(cx: Ctx, s: FlashSite) -> list[str]:
    """The axes of attention's output that come from V alone (d_h)."""
    qk, pv = cx.node(s.qk), cx.node(s.pv)
    return [a for a in pv.axes if a in cx.node(pv.b).axes and a not in qk.axes]


class _Split(Rule):
    """What the split rules share: the number of slices is their one decision."""

    def apply(self, choice, step):
        choice.split = step.params["splits"]

    def at(self, s) -> tuple[int, ...]:
        """The nodes a split step of site s cites."""
        raise NotImplementedError

    def options(self, s, splits: int, unsplit: list[Option]) -> list[Option]:
        """Each unsplit option of s, with the split as its last step (named `<label>_split`, or
        `split` where the option has no label: a region's one kernel)."""
        step = self.step(list(self.at(s)), splits=splits)
        return [Option(f"{o.label}_split" if o.label else "split", (*o.steps, step), s, self.name, self.at(s))
                for o in unsplit]


class SplitK(_Split):
    name = "split_k"
    theorem = "LeanTile.split_k_eval"
    lean_file = "SplitK.lean"
    pattern = "a matmul whose output tiles leave SMs idle while its contraction axis is long"
    rewrite = ("each CTA sums one slice of k into a float32 partial; a second kernel adds the partials "
               "in slice order and applies the epilogue")
    statement = ("a sum over k < K equals the left-to-right sum over slices s < S of the sums over the "
                 "slice's k (the last slice may be partial)")
    params = {"splits": "the number of slices of the contraction axis"}

    def splits(self, cx: Ctx, s: GemmSite, tiles: dict) -> int | None:
        """Slices for a plain GEMM site (one matmul, no pulled-out statistics), or None: judged
        at `tiles` (the shape's: a skinny GEMM's 64 x 256), as many as fill one wave of CTAs
        there. On an H200 one wave won wherever it was measured: m = 16 x 4096 x 14336 ran 2
        slices (112 CTAs) in 0.0326 ms and 4 in 0.0384 (benchmarks/split_k_waves/results/suite-skinny-2026-11-25-*.md);
        128 x 4096 x 4096 at 128 x 128 x 4 stages 4 slices (128 CTAs) 0.0141 ms, 8 0.0212
        (cuBLAS 0.013); rmsnorm 128 x 4096 x 6144 2 slices (96 CTAs) 0.0250 ms, 4 0.0297
        (issue16-m128-max*-probe-2026-11-25.json)."""
        if len(s.matmuls) != 1 or s.peels:
            return None
        mm = cx.node(s.matmuls[0])
        base = cx.node(s.base)
        m_axis = next((a for a in reversed(base.axes) if a != s.axis and a in mm.axes
                       and a not in cx.node(mm.b).axes), None)
        n_axis = next((a for a in reversed(mm.axes) if a not in base.axes), None)
        ctas = 1
        for a in mm.axes:
            block = tiles["block_m"] if a == m_axis else tiles["block_n"] if a == n_axis else 1
            ctas *= math.ceil(cx.axes[a] / block)
        return _splits(ctas, math.ceil(cx.axes[s.axis] / tiles["block_k"]), MIN_K_BLOCKS, cx.target.sms, waves=1)

    def option(self, cx: Ctx, s: GemmSite, splits: int, tail: tuple, label: str = "split_k") -> Option:
        step = self.step(s.matmuls, splits=splits)
        return Option(label, (step, *tail), s, self.name, tuple(s.matmuls))

    def more(self, cx: Ctx, s: GemmSite, splits: int, tiles: dict) -> int | None:
        """Twice `splits` (two waves of CTAs) where the contraction is long enough, or None: the
        cost model weighs the partial sums against the parallelism. At 256 x 524288 x 256 (4 MB
        of partials against 537 MB of operands) two waves at 128 x 256 tiles ran 0.146 ms
        (1.05x cuBLAS); at 128 x 4096 x 4096 (the partials half the weight's bytes) one wave
        0.0141 ms, two 0.0193."""
        blocks = math.ceil(cx.axes[s.axis] / tiles["block_k"])
        return 2 * splits if 2 * splits <= min(blocks // MIN_K_BLOCKS, MAX_SPLITS) else None

    def formula(self, g, at, params):
        S = sym()
        n = g.node(at[0])
        k = S.sp.Symbol(n.axis_a)
        before = f"{S.out(g, n.id)} = {S.tex(S.Exprs(g)(n.id))}"
        after = (r"%s = \sum_{s=0}^{%d} \sum_{%s \in \text{slice}_s} (\ldots)\quad\text{(%d slices, added in order)}"
                 % (S.out(g, n.id), int(params.get("splits", 2)) - 1, S.tex(k), int(params.get("splits", 2))))
        return before, after

    def check(self) -> bool:
        """A dot product over 5 terms equals its slices of 2, 2 and 1 added in order."""
        S = sym()
        a = S.sp.symbols("a0:5", real=True)
        b = S.sp.symbols("b0:5", real=True)
        whole = sum(x * y for x, y in zip(a, b))
        parts = [sum(a[k] * b[k] for k in range(lo, min(lo + 2, 5))) for lo in (0, 2, 4)]
        return S.zero(whole - ((parts[0] + parts[1]) + parts[2]))


class SplitKV(_Split):
    name = "split_kv"
    theorem = "LeanTile.split_kv_eval"
    lean_file = "SplitKV.lean"
    pattern = "online-softmax attention whose query tiles leave SMs idle (decode: one query)"
    rewrite = ("each CTA folds the online-softmax state of one slice of t_kv and stores o / l and its "
               "log-sum-exp; a combine kernel merges the slices' states in order")
    statement = ("merging online-softmax states gives the state of the concatenated keys and is associative, "
                 "so for any split of the keys the merged o / l is softmax(s) v")
    params = {"splits": "the number of slices of the key axis"}

    def splits(self, cx: Ctx, s: FlashSite, tiles: dict) -> int | None:
        if len(value_columns(cx, s)) != 1:  # the combine keeps one value axis on chip
            return None
        ctas = math.prod(math.ceil(cx.axes[t.axis] / t.block) for t in flash_grid(cx, s, tiles, bool(s.group))[0])
        # one wave of CTAs, as for split_k: H100, one query against 128-wide heads
        # (benchmarks/decode_split_kv/results/split-probe-decode-h100-2026-11-26-max*.json), 2 / 4 / 8 slices:
        # h32 t2048 0.0159 / 0.0119 / 0.0160 ms (cuDNN 0.0107), h32 t8192 0.0538 / 0.0498 /
        # 0.0533, h32 t32768 0.1923 / 0.1789 / 0.1806, h64 t8192 0.0932 / 0.0957 (4); GPT-2
        # h12 t2048 keeps its 8 (0.0074; 4: 0.0090). Two waves had 8, 8, 8, 4 and 8 slices.
        return _splits(ctas, math.ceil(cx.axes[s.axis] / tiles["block_n"]), MIN_KV_BLOCKS, cx.target.sms, waves=1)

    def at(self, s: FlashSite) -> tuple[int, ...]:
        return (s.qk, s.pv)

    def formula(self, g, at, params):
        S = sym()
        before = f"{S.out(g, at[1])} = {S.tex(S.Exprs(g)(at[1]))}"
        after = (r"(m, l, o) = \mathrm{merge}_{s=0}^{%d}\,\mathrm{fold}(\text{slice}_s),\quad %s = o / l"
                 % (int(params.get("splits", 2)) - 1, S.out(g, at[1])))
        return before, after

    def check(self) -> bool:
        """Softmax-weighted values of 3 keys from two slices' (lse, o / l) equal the direct form."""
        S = sym()
        sp = S.sp
        s = (S.s1, S.s2, S.s3)
        v = sp.symbols("v1:4", real=True)
        direct = sum(sp.exp(a) * b for a, b in zip(s, v)) / sum(sp.exp(a) for a in s)
        slices = [(0, 2), (2, 3)]
        lse = [sp.log(sum(sp.exp(s[i]) for i in range(lo, hi))) for lo, hi in slices]
        o = [sum(sp.exp(s[i]) * v[i] for i in range(lo, hi)) / sum(sp.exp(s[i]) for i in range(lo, hi))
             for lo, hi in slices]
        merged = sum(sp.exp(x) * y for x, y in zip(lse, o)) / sum(sp.exp(x) for x in lse)
        return S.zero(sp.simplify(merged - direct))


class SplitRow(_Split):
    name = "split_row"
    theorem = "LeanTile.split_row_stats"
    lean_file = "SplitKV.lean"
    pattern = "a streamed softmax row whose row blocks leave SMs idle (a few long rows)"
    rewrite = ("each CTA folds the running max and sum of exp of one slice of the row; a combine kernel "
               "merges the slices' (m, l) in order; the normalising kernel is unchanged")
    statement = ("merging the slices' online-softmax states gives l = sum exp(s - m) over the whole row for "
                 "the merged m, for any split of the row")
    params = {"splits": "the number of slices of the row"}

    def splits(self, cx: Ctx, s: SoftmaxSite, tiles: dict) -> int | None:
        rows = [a for a in cx.node(s.src).axes if a != s.axis]
        ctas = 1
        for a in rows:
            ctas *= math.ceil(cx.axes[a] / tiles["block_m"]) if a == rows[-1] else cx.axes[a]
        return _splits(ctas, math.ceil(cx.axes[s.axis] / tiles["block_n"]), MIN_ROW_BLOCKS, cx.target.sms)

    def at(self, s: SoftmaxSite) -> tuple[int, ...]:
        return (s.mx, s.sm)

    def formula(self, g, at, params):
        S = sym()
        mx, sm = at
        before = f"({S.out(g, mx)}, {S.out(g, sm)})"
        after = (r"m = \max_{s} m_s,\quad l = \sum_{s=0}^{%d} l_s\, e^{m_s - m}\quad\text{(each slice folded online)}"
                 % (int(params.get("splits", 2)) - 1))
        return before, after

    def check(self) -> bool:
        """The sum of exp of 3 scores from two slices' (m, l), merged, equals the direct sum
        shifted by the merged max."""
        S = sym()
        sp = S.sp
        s = (S.s1, S.s2, S.s3)
        m1, m2 = sp.symbols("m1 m2", real=True)  # any shifts of the slices (the running maxima)
        l1 = sp.exp(s[0] - m1) + sp.exp(s[1] - m1)
        l2 = sp.exp(s[2] - m2)
        m = sp.Max(m1, m2)
        merged = l1 * sp.exp(m1 - m) + l2 * sp.exp(m2 - m)
        return S.zero(sp.powsimp(sp.expand(merged - sum(sp.exp(x - m) for x in s)), combine="exp"))


class SplitReduction(_Split):
    name = "split_reduction"
    theorem = "LeanTile.split_reduction_eval"
    lean_file = "SplitReduction.lean"
    pattern = ("a fused row kernel streaming a long axis on too few CTAs to fill the GPU (a loss reduced "
               "to a scalar, a few long rows)")
    rewrite = ("each CTA folds one slice of the axis into float32 partials of the kernel's reductions; a "
               "combine kernel reduces the slices in order (sums added, maxima taken, online sums rescaled "
               "to the largest maximum) and runs the row epilogue")
    statement = ("a sum (a max) over the axis equals the sum (the max) over slices of the slices' sums (maxima), "
                 "for any slicing of the axis, empty slices included; online sums merge as split_row's states")
    params = {"splits": "the number of slices of the streamed axis"}

    def splits(self, cx: Ctx, s: RegionSite, tiles: dict | None = None) -> int | None:
        """Slices for a streamed region site (region_kernels.stream_tiles' grid), or None: about
        two waves of CTAs, each slice at least MIN_ROW_BLOCKS blocks long."""
        if s.mode != "streamed" or any(s.axis in cx.node(i).axes for i in s.members
                                           if not isinstance(cx.node(i), ir.Reduce)):
            return None  # (a member over the streamed axis would have no part to compute it in)
        rows, column = list(s.rows), column_layout(s.axes, s.axis)
        _, d = streamed_rows(cx, rows, s.axis, column=column)
        return _splits(streamed_ctas(cx, rows, s.axis, column), math.ceil(cx.axes[s.axis] / d), MIN_ROW_BLOCKS,
                       cx.target.sms, waves=2 if column else ROW_REDUCTION_WAVES, cap=MAX_REDUCTION_SPLITS)

    def at(self, s: RegionSite) -> tuple[int, ...]:
        return tuple(s.members)

    def formula(self, g, at, params):
        S = sym()
        n = next((g.node(i) for i in at if isinstance(g.node(i), ir.Reduce)), g.node(at[0]))
        before = f"{S.out(g, n.id)} = {S.tex(S.Exprs(g)(n.id))}"
        after = (r"%s = \bigoplus_{s=0}^{%d} \bigoplus_{i \in \text{slice}_s} (\ldots)\quad"
                 r"\text{(%d slices, combined in order)}" % (S.out(g, n.id), int(params.get("splits", 2)) - 1,
                                                              int(params.get("splits", 2))))
        return before, after

    def check(self) -> bool:
        """A sum and a max of 5 terms equal the sum and the max of their slices of 2, 2, 1 and an
        empty one (0 and -inf), combined in order."""
        S = sym()
        sp = S.sp
        x = sp.symbols("x0:5", real=True)
        slices = [x[0:2], x[2:4], x[4:5], ()]
        sums = [sum(t, sp.Integer(0)) for t in slices]
        maxes = [sp.Max(*t) if t else -sp.oo for t in slices]
        total = sp.Integer(0)
        for v in sums:
            total = total + v
        top = -sp.oo
        for v in maxes:
            top = sp.Max(top, v)
        return S.zero(total - sum(x)) and sp.simplify(top - sp.Max(*x)) == 0


SPLIT_K, SPLIT_KV, SPLIT_ROW, SPLIT_REDUCTION = SplitK(), SplitKV(), SplitRow(), SplitReduction()
