"""The target of the search: the roofline floor of a workload.

floor = max(FLOPs / peak FLOP/s, minimal bytes / copy bandwidth). FLOPs: 2*M*N*K per matmul
(output elements x contraction), one per output element of an elementwise op, one per input
element of a reduction, all at the tensor-core rate (elementwise work is a rounding error
next to the GEMMs of these workloads, and a floor may be optimistic). Minimal bytes: every
graph input read once and every output written once, each in its own dtype: what any
kernel, fused or not, must move.

Ceilings: the target's (leantile.target) peak_flops, above every GEMM time measured (a floor below
every measured time keeps relative progress (prev - new) / (prev - target) positive), and its
device copy bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import ir
from ..target import DEFAULT, Target
from .space import DTYPE_BYTES


@dataclass(frozen=True)
class Ceilings:
    name: str
    flops_per_s: float
    bytes_per_s: float


def ceilings(target: Target) -> Ceilings:
    return Ceilings(f"{target.name} fp16 dense", target.peak_flops, target.dram_bps)


H200 = ceilings(DEFAULT)  # the default target's (named so by the search's callers)


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    floor_ms: float
    bound: str  # "compute" or "memory"


def _elems(g: ir.Graph, n) -> int:
    return math.prod(g.axes[a] for a in n.axes)


def workload_cost(g: ir.Graph, ceil: Ceilings = H200, dtype: str | None = None) -> Cost:
    flops = 0.0
    for n in g.nodes:
        if isinstance(n, ir.Matmul):
            flops += 2.0 * _elems(g, n) * g.axes[n.axis_a]
        elif isinstance(n, ir.Reduce):
            flops += _elems(g, g.node(n.x))
        elif isinstance(n, (ir.Unary, ir.Binary, ir.Cast)):
            flops += _elems(g, n)
    dtypes = ir.value_dtypes(g)  # an output is written in its own value's dtype
    nbytes = sum(_elems(g, n) * DTYPE_BYTES.get(dtype or n.dtype, 2) for n in g.inputs())
    nbytes += sum(_elems(g, g.node(i)) * DTYPE_BYTES.get(dtype or dtypes[i], 2) for i in g.outputs.values())
    t_c, t_m = flops / ceil.flops_per_s, nbytes / ceil.bytes_per_s
    return Cost(flops, float(nbytes), 1e3 * max(t_c, t_m), "compute" if t_c >= t_m else "memory")
