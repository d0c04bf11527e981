"""Small plans of every emitter path, each named by the path it takes and with a check that its
plan still takes it: the cases tests/gpu/test_sanitizer_gpu.py runs under compute-sanitizer;
tests/cpu/test_emitter_paths.py checks on the CPU that every case still takes its path."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from leantile import architectures, ir
from leantile.derive.shape_tiles import PINGPONG_TILES
from leantile.plan import Gemm, Reduce, pooled_in_registers
from leantile.plan import row_bytes
from leantile.sources import load_source

from loss_graphs import cross_entropy

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = "examples/architectures/softmax_row.py:build"


@dataclass(frozen=True)
class Case:
    path: str  # the emitter path, as the test ids name it
    graph: Callable[[], ir.Graph]
    takes: Callable  # plan -> bool: the plan takes the path
    candidate: str | None = None  # None: the default plan (the cost model's pick)
    tiles: dict | None = None

    def plan(self):
        """The plan leantile.compile(graph, candidate=, tiles=, tuned=False) runs."""
        from leantile.runtime import choose_plan
        return choose_plan(self.graph(), self.candidate, self.tiles, tuned=False)[0]


def _squares_into_a_scalar(n: int):
    def build():
        from leantile.dag import build_graph_with_output
        return build_graph_with_output("sum_sq", {"n": n}, lambda g: g.red("sum", g.square(g.input("X", ["n"], "f16")), "n"))
    return build


def _softmax(rows, cols):
    return lambda: load_source(str(ROOT / SOFTMAX), {"rows": rows, "cols": cols})


def _arch(name, **sizes):
    return lambda: architectures.build(name, **sizes)


def _backward(name, output_only=False, **sizes):
    """The backward of a built-in; output_only: the forward hands over its output alone (the
    softmax's statistics recomputed by a statistics kernel)."""
    from leantile.autodiff import vjp

    def graph():
        g = architectures.build(name, **sizes)
        return vjp(g, save=frozenset({g.outputs["out"]}) if output_only else None).graph
    return graph


def _mma(k) -> bool:
    return any(isinstance(s, Gemm) and s.mma for s in k.statements())


def _pairs_in_registers(plan) -> bool:
    return any(pooled_in_registers(plan, k, s) for k in plan.kernels for s in k.epilogue if isinstance(s, Reduce))


def _any(pred):
    return lambda plan: any(pred(k) for k in plan.kernels)


PATHS = [
    Case("row on chip", _softmax(64, 1000), _any(lambda k: k.name.startswith("row") and k.stream is None)),
    Case("row streamed", _softmax(64, 4000), _any(lambda k: k.stream and k.stream.axis == "cols" and not k.stream.split),
         candidate="online_row_exp2"),
    Case("row split", _softmax(2, 20000), _any(lambda k: k.stream and k.stream.split and not _mma(k))),
    Case("unaligned rows", _softmax(3, 1001), lambda p: any(row_bytes(p, b) % 16 for b in p.globals)),
    Case("long axis into a 0-d output", lambda: cross_entropy(16500, 3),
         _any(lambda k: not k.grid and k.stream is not None), candidate="fused"),
    Case("split reduction into a 0-d output", lambda: cross_entropy(16500, 3),
         lambda p: any(k.stream and k.stream.split and k.name.startswith("row") for k in p.kernels)
         and any(not k.grid and k.stream is None for k in p.kernels)),
    # plan.passes.last_arrival: the combine run by the last slice of each tile (emit.tail), and
    # the same combine launched apart (the tile parameter off)
    Case("split combine as the slices' tail", lambda: cross_entropy(16500, 3), _any(lambda k: k.tail_of is not None),
         tiles={"last_arrival": 1}),
    Case("split combine launched apart", lambda: cross_entropy(16500, 3),
         _any(lambda k: not k.grid and k.stream is None and k.tail_of is None)),
    # a combine over more slices than its nominal 128 threads, launched on 256: its lanes are the
    # launch's threads (emit.reductions.lanes; with 128 lanes TileLang synchronised half the CTA
    # before they read the other half's values: a huber loss over 2^20 was 33% off)
    Case("split combine over 256 slices", _squares_into_a_scalar(1 << 20),
         lambda p: any(not k.grid and k.stream is None for k in p.kernels) and max(p.axes.values()) >= 1 << 20
         and any(a.startswith("split_") and v >= 256 for a, v in p.axes.items())),
    Case("unfused maps and reductions", _softmax(16, 300),
         lambda p: {k.name.split("_")[0] for k in p.kernels} >= {"map", "reduce"}, candidate="unfused"),
    Case("gemm plain", _arch("matmul", m=256, d=512, n=256),
         _any(lambda k: _mma(k) and not (k.pingpong or k.swapped or (k.stream and k.stream.split)))),
    Case("gemm ping-pong", _arch("matmul", m=256, d=512, n=256), _any(lambda k: k.pingpong),
         candidate="direct", tiles=PINGPONG_TILES),
    Case("gemm swapped split-k", _arch("matmul", m=8, d=4096, n=256),
         _any(lambda k: k.swapped and k.stream and k.stream.split)),
    Case("gemm unaligned", _arch("matmul", m=40, d=137, n=201), lambda p: any(row_bytes(p, b) % 16 for b in p.globals)),
    Case("norm row stats + gemm", _arch("rmsnorm", m=64, d=512, n=256), _any(lambda k: k.name.startswith("row_stats")),
         candidate="stats_separate"),
    Case("norm colsum + gemm", _arch("layernorm_linear_gelu", m=64, d=256, n=256), _any(lambda k: k.name.startswith("colsum")),
         candidate="stats_fused+colsum_precomputed"),
    Case("prenorm row + gemm", _arch("layernorm_linear_gelu", m=64, d=256, n=256),
         lambda p: [k.name.split("_")[0] for k in p.kernels] == ["row", "gemm"], candidate="prenorm"),
    Case("dual gemm", _arch("swiglu", m=64, d=256, n=256), _any(lambda k: sum(isinstance(s, Gemm) for s in k.statements()) == 2)),
    Case("attention flash", _arch("attention", h=2, t_q=64, t_kv=300, d_h=64),
         _any(lambda k: k.name.startswith("flash") and not k.overlap and not k.stream.split)),
    Case("attention overlap", _arch("attention", h=1, t_q=128, t_kv=640, d_h=64), _any(lambda k: k.overlap),
         candidate="online_exp2", tiles={"overlap": 1, "block_m": 128, "threads": 256}),
    Case("attention causal skip overlap", _arch("causal_attention", h=2, t_q=256, t_kv=1300, d_h=64),
         _any(lambda k: k.overlap and k.stream.skip), candidate="online_exp2"),
    Case("split-kv decode", _arch("attention", h=8, t_q=1, t_kv=8192, d_h=64),
         _any(lambda k: k.name.startswith("flash") and k.stream.split)),
    Case("gqa decode heads as rows", _arch("gqa_attention", h_kv=2, g=4, t_q=1, t_kv=2048, d_h=64),
         _any(lambda k: k.name.startswith("flash") and any(t.axis == "g" and t.block > 1 for t in k.grid)),
         candidate="online_exp2"),
    # the weight read through its 2-D view, the pool reduced from a shared copy (fuse_pool_epilogue);
    # n = 45 leaves a partial column tile
    Case("gemm pooled epilogue", lambda: _pooled(b=70, k=96, n=45, p=4),
         lambda plan: _any(lambda k: bool(k.packed) and _mma(k))(plan) and not _pairs_in_registers(plan)),
    # a pool of 2: each thread's column pair combined in registers (plan.pooled_in_registers), no shared copy
    Case("gemm pooled pairs in registers", lambda: _pooled(b=70, k=96, n=45, p=2), lambda plan: _pairs_in_registers(plan)),
    # a streamed row kernel that streams its rows again for an epilogue over them (Kernel.second_pass)
    Case("row streamed twice", lambda: _log_softmax(m=300, d=9001), _any(lambda k: bool(k.second_pass))),
    # a reduction over the outer axis (a norm's gain gradient): 128 contiguous columns a CTA, the
    # rows streamed and split over CTAs (rules.regions.column_layout); 9001 rows, 300 columns
    Case("column reduction streamed and split", lambda: _gain_gradient(m=9001, d=300),
         _any(lambda k: k.stream is not None and k.stream.axis == "m" and bool(k.stream.split))),
    # a LayerNorm over (c, h, w) merged into one axis (flatten_reduction), its variance from sums
    # pivoted on each slice's first element (variance_expand in a split streamed region); 3 rows of
    # 5 x 33 x 129 (no multiple of the 1024 block)
    Case("norm over merged axes with a pivoted variance split", lambda: _chw_norm(n=3, c=5, h=33, w=129),
         _any(lambda k: k.stream is not None and bool(k.stream.split) and any(s.op == "pivot" for s in k.body))),
    # a GroupNorm in the GEMM's epilogue (fuse_row_epilogue): the column tile the whole group, mean
    # and variance reduced over the accumulator's rows; 100 channels (a partial, masked tile), 70 rows
    Case("gemm normalised in its epilogue", lambda: _normed(b=70, k=96, g=3, c=100),
         _any(lambda k: _mma(k) and any(s.op == "reduce" for s in k.epilogue))),
    # attention's backward (flash_backward): dQ and dK/dV kernels reading the forward's statistics,
    # the causal mask's blocks skipped in both streams (the dK/dV kernel's stream of queries, its
    # tile transposed); 300 queries
    Case("attention backward", _backward("causal_attention", h=2, t_q=300, t_kv=300, d_h=64),
         _any(lambda k: k.name.startswith("flash_bwd_dkdv") and bool(k.stream.skip))),
    # the same with dQ added atomically from the dK/dV kernel into float32 sums (plan.Store.accumulate)
    Case("attention backward atomic dQ", _backward("causal_attention", True, h=2, t_q=300, t_kv=300, d_h=64),
         _any(lambda k: any(s.op == "store" and s.accumulate for s in k.statements())),
         candidate="flash_backward_exp2_atomic_dq"),
    # the pooled GEMM's weight copied by TMA through its merged view, warp specialised (n = 128)
    Case("gemm pooled through its merged view with TMA", lambda: _pooled(b=256, k=512, n=128, p=2),
         lambda plan: _pairs_in_registers(plan) and _merged_tma(plan)),
]


def _gain_gradient(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        x, dy = g.input("X", ["m", "d"], "f16"), g.input("dY", ["m", "d"], "f16")
        return g.red("sum", g.mul(dy, g.mul(x, g.input("r", ["m"], "f32"))), "m")
    return build_graph_with_output("gain_gradient", sizes, body)


def _chw_norm(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        x = g.input("X", ["n", "c", "h", "w"], "f16")

        def total(t):
            return g.red("sum", g.red("sum", g.red("sum", t, "w"), "h"), "c")
        count = g.mul(g.mul(g.size_const("c"), g.size_const("h")), g.size_const("w"))
        xc = g.sub(x, g.div(total(x), count))
        return g.mul(xc, g.rsqrt(g.add(g.div(total(g.square(xc)), count), g.const("1e-05"))))
    return build_graph_with_output("chw_norm", sizes, body)


def _merged_tma(plan) -> bool:
    from leantile.emit.common import _loaded_without_tma, pass_configs
    return all(not _loaded_without_tma(plan, k) for k in plan.kernels) and not pass_configs(plan)


def _log_softmax(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        x = g.input("X", ["m", "d"], "f16")
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    return build_graph_with_output("log_softmax", sizes, body)


def _pooled(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        y = g.matmul(g.input("X", ["b", "k"], "f16"), g.input("W", ["k", "n", "p"], "f16"), "k", "k")
        return g.div(g.red("sum", y, "p"), g.size_const("p"))
    return build_graph_with_output("avg_pool", sizes, body)


def _normed(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        y = g.matmul(g.input("X", ["b", "k"], "f16"), g.input("W", ["k", "g", "c"], "f16"), "k", "k")
        return g.add(g.mul(g.layer_norm(y, "c"), g.input("gamma", ["g", "c"], "f16")), g.input("beta", ["g", "c"], "f16"))
    return build_graph_with_output("gemm_groupnorm", sizes, body)
