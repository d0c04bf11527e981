"""The target of the search: the roofline floor of a workload.

floor = max(FLOPs / peak FLOP/s, minimal bytes / copy bandwidth). FLOPs: 2*M*N*K per matmul
(output elements x contraction), one per output element of an elementwise op, one per input
element of a reduction, all at the tensor-core rate (elementwise work is a rounding error
next to the GEMMs of these workloads, and a floor may be optimistic). Minimal bytes: every
graph input read once and every output written once, each in its own dtype: what any
kernel, fused or not, must move.

Ceilings (measured by the maintainers on an H200, 2026-11): cuBLAS fp16 8192^3 reaches 669 TFLOP/s and 691 TFLOP/s was seen
on 1024x4096x4096, so the default peak is 790 TFLOP/s: a floor below every measured time
keeps relative progress (prev - new) / (prev - target) positive. Copy: 4.2 TB/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import ir
from .space import DTYPE_BYTES


@dataclass(frozen=True)
class Ceilings:
    name: str
    flops_per_s: float
    bytes_per_s: float


H200 = Ceilings("H200 fp16 dense", 790e12, 4.2e12)
H200_CUBLAS = Ceilings("H200 cuBLAS-measured", 669e12, 4.2e12)


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
