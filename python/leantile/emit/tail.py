"""A kernel's tail (plan.Kernel.tail_of, plan.passes.last_arrival): the combine of a split
reduction run inside the slices' launch by the last slice of each tile to finish (a mixin of
emit.kernel._KernelWriter).

Each CTA, after its own statements, counts itself in at its tile's arrival counter: thread 0
adds 1 with acquire-release order at device scope (TileLang's AtomicAddRet: a
cuda::atomic_ref fetch_add), after a barrier that orders the CTA's stores before it; the release
publishes them, and the CTA that reads splits - 1 back is the last: its acquire, passed to its
other threads by the next barrier, makes every other slice's stores visible to its loads. That
CTA runs the tail's statements for its tile (the same statements the combine kernel ran, so
the same values, in slice order) and sets the counter back to 0 for the next launch.

The counters are one int32 per tile of the tail's grid, at most one per position of its axes
(any tile parameters). The module keeps them zeroed per device and stream (allocate(),
'arrivals' globals): each launch leaves them at 0, and launches on one stream do not overlap.
"""
from __future__ import annotations

import math

from ..plan import Kernel, Plan
from .common import _size


def arrivals_name(plan: Plan, k: Kernel) -> str:
    """The module's global of the arrival counters of launch k (a kernel with a tail)."""
    taken = {b.name for b in plan.globals}
    name = f"{k.name}_arrivals"
    while name in taken:
        name += "_"
    return name


def arrivals_count(plan: Plan, tail: Kernel) -> int:
    """Counters a tail needs at any tile parameters: one per position of its grid axes."""
    return math.prod(plan.axes[t.axis] for t in tail.grid)


# the generated module's helper that keeps them (emit.tilelang: allocate() calls it)
ARRIVALS_SOURCE = [
    "_ARRIVALS = {}  # (global, device, stream) -> its counters: zero, and every launch leaves them so",
    "",
    "",
    "def arrivals(g, device):",
    '    """The arrival counters of a launch with a tail (emit.tail), one set per device and stream:',
    '    launches on one stream run one after the other, and each leaves them at 0 for the next."""',
    "    import torch",
    "    dev = torch.device(device)",
    "    if dev.type == 'cuda' and dev.index is None:",
    "        dev = torch.device('cuda', torch.cuda.current_device())",
    "    stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == 'cuda' else 0",
    "    key = (g['name'], str(dev), stream)",
    "    if key not in _ARRIVALS:",
    "        _ARRIVALS[key] = torch.zeros(g['shape'], dtype=torch.int32, device=dev)",
    "    return _ARRIVALS[key]",
    "",
    "",
]


class TailWriter:
    def counter_params(self) -> list[str]:
        """The prim_func parameter of the arrival counters (a launch with a tail), else none."""
        if not self.tail:
            return []
        return [f"{self.counter_name}: T.Tensor(({arrivals_count(self.plan, self.tail)},), 'int32')"]

    def write_tail(self, d: int):
        """The arrival and, for the last slice of the tile, the tail's statements; returns the
        tail's writer (its allocations and factory lines join the launch's)."""
        tail, split = self.tail, self.k.stream.split
        child = type(self)(self.plan, tail, within=self)  # (its lanes are this launch's threads: reductions.lanes)
        child.grid_var = {t.axis: self.grid_var[t.axis] for t in tail.grid}  # the same tile
        child.lines = self.lines
        child.full_row, child.has_gemm = tail.warp_policy == "full_row", False
        tx, arrived = self.fresh("tx"), self.fresh("arrived")
        counter = self.fresh(arrivals_name(self.plan, self.k))
        self.counter_name = counter
        index = None
        for t in tail.grid:  # the tile's place among the tail's tiles, the last axis fastest
            count = f"T.ceildiv({_size(t.axis)}, {self.extent(t.axis)})" if t.block > 1 else _size(t.axis)
            index = self.grid_var[t.axis] if index is None else f"({index}) * {count} + {self.grid_var[t.axis]}"
        index = index or "0"  # a tail over no grid axis: one tile
        self.extra_allocs.append(f"{arrived} = T.alloc_shared((1,), 'int32')  # this CTA's place among its tile's slices")
        self.emit(f"# tail ({tail.name}): {tail.role}; run by the last of this tile's {split} slices to finish", d)
        self.emit(f"{tx} = T.get_thread_binding()", d)
        self.emit("T.sync_threads()  # every store of this CTA issued before its arrival", d)
        self.emit(f"if {tx} == 0:", d)
        self.emit(f"{arrived}[0] = T.atomic_add({counter}[{index}], 1, memory_order='acq_rel', return_prev=True)", d + 1)
        self.emit("T.sync_threads()", d)
        self.emit(f"if {arrived}[0] == {_size(split)} - 1:  # every other slice of this tile has stored", d)
        child.write_plain(d + 1)
        self.emit(f"if {tx} == 0:", d + 1)
        self.emit(f"{counter}[{index}] = 0  # for the next launch", d + 2)
        self.pads |= child.pads  # the tail's factory lines are the launch's
        self.pre += child.pre
        return child


__all__ = ["ARRIVALS_SOURCE", "TailWriter", "arrivals_count", "arrivals_name"]
