"""plan.passes.last_arrival: a split reduction's combine run by the last slice of each tile to
finish, inside the slices' launch (Kernel.tail_of), instead of as a launch of its own.

A split row kernel (derive.split_kernels.split_region) streams one slice of a long axis per CTA
and stores each reduction's partial; its combine kernel reduces a tile's partials over the slices
and runs the row epilogue. Launched apart, the combine is one more launch and a wait for the whole
grid (the losses to a scalar over 128 x 4096 of examples/reductions.py run 2.5 us in two).
With the tail (where the tile parameter asks: it did not pay on the H200, see last_arrival),
each slice CTA counts itself in at its tile's arrival counter after its stores
(an atomic add, acquire-release at device scope), and the CTA that counts last, having seen every
other slice's stores, combines them: in slice order, as the combine kernel did (deterministic),
and resets the counter for the next launch (emit.tail).

Where it applies (tail_fits): the kernel after a split stream whose grid is the slice kernel's
without the slice axis (the same tiles: a tile's slices are the CTAs that differ only in it), which
reads what that kernel wrote only within its own tile (globals over its grid axes and the slice
axis: its partials) and writes nothing that kernel reads or writes. The values are those of the
two launches, which the interpreter still runs one after the other."""
from __future__ import annotations

from . import Kernel, Load, Plan, Store
from ..tiles import schedule_of


def _grid_key(k: Kernel, without: str | None = None) -> list[tuple]:
    return [(t.axis, t.block, t.param, t.divisor) for t in k.grid if t.axis != without]


def _written(k: Kernel) -> set[str]:
    return {s.dst for s in k.statements() if isinstance(s, Store)}


def _read(k: Kernel) -> set[str]:
    return {s.src for s in k.statements() if isinstance(s, Load)}


def tail_fits(plan: Plan, before: Kernel, k: Kernel) -> str | None:
    """Why kernel k cannot run as the tail of `before` (the kernel launched before it), or None
    where it can: before streams a split axis (one slice per CTA), k's grid is before's without
    it, k streams nothing, reads before's outputs only within its tile and writes none of
    before's buffers."""
    st = before.stream
    if st is None or st.split is None:
        return "the kernel before it streams no split axis"
    if before.tail_of is not None or k.stream is not None:
        return "not a split kernel followed by a combine"
    if before.overlap or before.pingpong or k.overlap or k.pingpong:
        return "a warp-specialised kernel"
    slice_tile = [t for t in before.grid if t.axis == st.split]
    if len(slice_tile) != 1 or slice_tile[0].block != 1:
        return f"the slice axis {st.split} is not a grid axis of block 1"
    if _grid_key(before, st.split) != _grid_key(k):
        return "its tiles are not the slice kernel's"
    own = {t.axis for t in k.grid} | {st.split}
    wrote = _written(before)
    for name in _read(k) & wrote:
        if not set(plan.global_buffer(name).axes) <= own:
            return f"it reads {name} of other tiles"
    # the arrival orders plain stores and loads (the generic proxy): a TMA store (staged) may still
    # be in flight at the barrier, and a load into shared memory may be a TMA or cp.async read,
    # which the acquire does not order
    if any(isinstance(s, Store) and s.staged for s in before.statements()):
        return "the slice kernel stores through shared memory (TMA)"
    shared = {b.name for b in k.buffers if b.scope == "shared"}
    if any(isinstance(s, Load) and s.src in wrote and s.dst in shared for s in k.statements()):
        return "it loads the slices' partials into shared memory"
    if _written(k) & (wrote | _read(before)):
        return "it writes a buffer the slice kernel reads or writes"
    return None


def last_arrival(plan: Plan) -> Plan:
    """Kernel.tail_of on each kernel that fits (tail_fits) as the tail of the launch before it,
    where the tile parameter `last_arrival` is 1. Off by default: measured on an H200
    (benchmarks/last_arrival/probe.py, results/last-arrival-h200-2026-11-30.json), the one launch
    ran 0.87x-0.94x the two for the losses over 128 x 4096 (0.0029 against 0.0025-0.0027 ms: the
    dependent launch already hides the combine's launch, and the arrival adds an atomic round
    trip to every slice) and 0.99x-1.00x for the norms and column sums at the suite's sizes."""
    if schedule_of(plan.tiles or {}).last_arrival != 1:
        return plan
    kernels = list(plan.kernels)
    for j in range(1, len(kernels)):
        if kernels[j].tail_of is None and tail_fits(plan, kernels[j - 1], kernels[j]) is None:
            kernels[j] = kernels[j].model_copy(update={"tail_of": kernels[j - 1].name})
    return plan.model_copy(update={"kernels": tuple(kernels)})


__all__ = ["last_arrival", "tail_fits"]
