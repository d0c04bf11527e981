"""Run a Plan tile by tile in torch on the CPU: the same grid, stream loop, state updates
and partial tiles the emitted kernel runs, the stream in the order its schedule runs it (FA3's
rotated loop: plan.stream_steps). Agreement with leantile.reference is what the property suite
checks. A ping-pong kernel (emit.pingpong) runs each output tile as the plain schedule does, on
one of two consumer warpgroups: tiles share nothing, so the walk over them is the grid's."""

from __future__ import annotations

import math

import torch

from . import ir, reference
from . import plan as plan_module
from .ir import ops
from .plan import (DTYPE_BYTES, Fill, Gemm, Iota, Kernel, Load, Map, Mask, Pivot, Plan, Reduce, Store, grid_walk,
                   key_block_interior, key_block_range, row_whole, running_maxes, tile_leaf_value, user_shape)
from .plan.overlap_parts import stream_steps
from .plan.storage import storage

TORCH = reference.TORCH_DTYPES


def _literal(s: str) -> float:
    return -math.inf if s == "-inf" else (math.inf if s == "inf" else float(s))


FUNCS = ops.TORCH  # every map function, from the op registry


class _Tile:
    """One grid tile of one kernel: where it starts and how much of each axis is valid."""

    def __init__(self, plan: Plan, k: Kernel, index: tuple[int, ...]):
        self.plan, self.k = plan, k
        self.start = {t.axis: i * t.block for t, i in zip(k.grid, index)}
        self.block = {t.axis: t.block for t in k.grid}
        if k.stream:
            for a in (k.stream.axis, *k.stream.aliases):
                self.block[a] = k.stream.block
                self.start[a] = 0

    def extent(self, axis: str) -> int:
        return self.block.get(axis, self.plan.axes[axis])

    def valid(self, axis: str) -> int:
        if axis in self.block:
            return max(0, min(self.block[axis], self.plan.axes[axis] - self.start[axis]))
        return self.plan.axes[axis]

    def global_index(self, gaxes, local_axes, where):
        idx = []
        for a in gaxes:
            if a in local_axes:
                s = self.start.get(a, 0)
                idx.append(slice(s, s + self.valid(a)))
            elif a in self.block and self.block[a] == 1:
                idx.append(self.start[a])
            else:
                raise ir.GraphError([f"kernel {self.k.name}: {where} drops axis {a!r}, which is not a batch axis"])
        return tuple(idx)


def run(plan: Plan, inputs: dict[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Execute the plan. With `dtype`, every buffer uses it (float64 for exactness checks);
    otherwise buffers keep their declared dtypes and accumulators are float32."""
    mem: dict[str, torch.Tensor] = {}
    gaxes = {b.name: b.axes for b in plan.globals}  # global tensors (a namespace of their own)
    places = storage(plan)  # guests in their hosts' bytes, as the emitted allocate() places them
    starts = _uniform_starts(plan, places) if dtype else None
    for b in sorted(plan.globals, key=lambda b: b.name in places):  # hosts first
        shape = tuple(plan.axes[a] for a in b.axes)
        if b.name in inputs:
            t = inputs[b.name].reshape(shape)  # a view over a merged axis (Plan.merged), else itself
            mem[b.name] = t.to(dtype) if dtype else t
        elif b.name in places:
            mem[b.name] = _guest(plan, b, places[b.name], starts, mem, shape)
        elif b.name in plan.in_place:  # written over an input (plan.storage.in_place)
            continue
        else:  # poisoned: an element no kernel writes shows up as NaN
            mem[b.name] = _host(plan, b, starts, places, shape, dtype)
    for out, inp in plan.in_place.items():
        mem[out] = mem[inp]
    poison = {p.host for p in places.values()}
    for k in plan.kernels:
        for s in k.statements():  # a host poisoned again as its first kernel starts: its guests are dead
            name = s.src if isinstance(s, Load) else s.dst if isinstance(s, Store) else None
            if name in poison:
                poison.discard(name)
                mem[name].fill_(math.nan)
        _run_kernel(plan, k, mem, gaxes, dtype)
    return {name: mem[buf].reshape(user_shape(plan, plan.global_buffer(buf))) for name, buf in plan.outputs.items()}


def _elements(plan: Plan, name: str) -> int:
    return math.prod(plan.axes[a] for a in plan.global_buffer(name).axes)


def _uniform_starts(plan: Plan, places: dict) -> dict[str, int]:
    """{guest: first element in its host's storage} where `dtype` makes every buffer one type
    (a bool mask then takes 8 bytes an element, not 1): each host's guests one after another in
    the order of their offsets, overlapping the host as on the GPU and never each other."""
    starts, end = {}, {}
    for g, p in sorted(places.items(), key=lambda gp: (gp[1].host, gp[1].offset)):
        starts[g] = end.get(p.host, 0)
        end[p.host] = starts[g] + _elements(plan, g)
    return starts


def _host(plan: Plan, b, starts: dict | None, places: dict, shape: tuple, dtype) -> torch.Tensor:
    """A new NaN buffer for b; where b hosts guests and `dtype` makes every buffer one type, the
    front of a flat one long enough for its guests (_uniform_starts)."""
    n = math.prod(shape)
    if starts is not None:
        n = max([n] + [starts[g] + _elements(plan, g) for g, p in places.items() if p.host == b.name])
    return torch.full((n,), math.nan, dtype=dtype or _dt(b.dtype))[:math.prod(shape)].view(shape)


def _guest(plan: Plan, b, place, starts: dict | None, mem: dict, shape: tuple) -> torch.Tensor:
    """Guest b (plan.storage) as a NaN view of its host's storage: the GPU's bytes where every
    buffer keeps its dtype; under one `dtype`, the host's elements from _uniform_starts'."""
    host = mem[place.host]
    n = math.prod(shape)
    if starts is None:
        nbytes = n * DTYPE_BYTES[b.dtype]
        view = host.reshape(-1).view(torch.uint8)[place.offset:place.offset + nbytes].view(_dt(b.dtype)).view(shape)
    else:  # the host's flat storage runs on past its elements (_host)
        view = torch.as_strided(host, (starts[b.name] + n,), (1,))[starts[b.name]:].view(shape)
    return view.fill_(math.nan)


def _dt(name: str) -> torch.dtype:
    return torch.float32 if name == "acc" else TORCH[name]


def _run_kernel(plan: Plan, k: Kernel, mem: dict, gaxes: dict, dtype):
    axes = {b.name: b.axes for b in k.buffers}  # on-chip buffers
    for index in grid_walk(plan, k):  # the launch's walk: a folded grid's div/mod too
        tile = _Tile(plan, k, index)
        local = {b.name: torch.zeros([tile.extent(a) for a in b.axes], dtype=dtype or _dt(b.dtype))
                 for b in k.buffers if b.scope != "global"}
        env = _Env(plan, k, tile, mem, local, axes, gaxes)
        for s in k.prologue:
            env.exec(s)
        if k.stream:
            env.running_max = running_maxes(k)
            inside = _interior_blocks(k, tile, _leaf_values(k, tile, mem, gaxes, tightest=True))
            blocks = list(_stream_blocks(plan, k, tile, _leaf_values(k, tile, mem, gaxes)))
            for j, s in stream_steps(k, blocks):  # block by block, or FA3's rotated loop (k.overlap)
                env.first_block = j == blocks[0]  # plan.Pivot: the first block this CTA streams
                for a in (k.stream.axis, *k.stream.aliases):
                    tile.start[a] = j * k.stream.block
                if getattr(s, "boundary_only", False) and inside[0] <= j < inside[1]:
                    if isinstance(s, Map) and s.fn == "select" and s.dst != s.args[1]:  # all kept: passes
                        env.exec(Map(dst=s.dst, fn="copy", args=(s.args[1],)))
                    continue  # an interior block: every row keeps every key, the mask is not evaluated
                env.exec(s)
            env.running_max = frozenset()
        else:  # no streamed axis: the body runs once per tile
            for s in k.body:
                env.exec(s)
        for s in k.epilogue:
            env.exec(s)
        if k.second_pass:  # every block of the stream again, the row's statistics final
            blocks = _stream_blocks(plan, k, tile, {})
            for j in (reversed(blocks) if plan_module.SECOND_PASS_REVERSED else blocks):
                for a in (k.stream.axis, *k.stream.aliases):
                    tile.start[a] = j * k.stream.block
                for s in k.second_pass:
                    env.exec(s)


def _interior_blocks(k: Kernel, tile: _Tile, leaves: dict[int, float]) -> tuple[int, int]:
    """[first, stop) of the stream blocks every row of this tile keeps whole (plan.key_block_interior;
    `leaves`: the run-time bounds' tightest values over the tile's rows)."""
    for b in k.stream.skip[:1]:
        tiled = next(t for t in k.grid if t.axis == b.row)
        keys = math.ceil(tile.plan.axes[k.stream.axis] / k.stream.block) * k.stream.block
        return key_block_interior(k.stream.skip, tile.start[b.row], tiled.block, k.stream.block, leaves, keys)
    return 0, 0


def _leaf_values(k: Kernel, tile: _Tile, mem: dict, gaxes: dict, tightest: bool = False) -> dict[int, float]:
    """The value of each run-time key bound's leaf at this tile's batch position (KeyBound.leaf):
    per row, the loosest of the tile's rows' bounds, or with `tightest` (the interior) the
    tightest, and 1 for a flag (KeyBound.flag) where it is 1 at every row. Keyed by the bound's
    index in the stream's bounds."""
    out = {}
    for i, b in enumerate(k.stream.skip):
        if b.flag and not tightest:  # no bound: the range never reads it
            continue
        if b.leaf is not None and b.per_row:  # the tile's rows' values
            rows = range(tile.start[b.row], tile.start[b.row] + tile.valid(b.row))

            def row_values(c):
                at = [tuple(r if a == c.row else tile.start[a] for a in gaxes[c.leaf]) for r in rows]
                return [float(mem[c.leaf][x]) for x in at]
            if b.flag:  # every row keeps each key between its pair of bounds
                lo, hi = (k.stream.skip[j] for j in b.pair)
                out[i] = float(all(row_whole(n, lo.shift + lo.scale * a, hi.shift + hi.scale * z)
                                   for n, a, z in zip(row_values(b), row_values(lo), row_values(hi))))
                continue
            keys = math.ceil(tile.plan.axes[k.stream.axis] / k.stream.block) * k.stream.block
            out[i] = tile_leaf_value(b, row_values(b), keys, tightest)
        elif b.leaf is not None:
            out[i] = float(mem[b.leaf][tuple(tile.start[a] for a in gaxes[b.leaf])])
    return out


def _stream_blocks(plan: Plan, k: Kernel, tile: _Tile, leaves: dict[int, float]) -> range:
    """The stream blocks this tile runs: all of them, or its slice of a split stream."""
    nblk = math.ceil(plan.axes[k.stream.axis] / k.stream.block)
    first, stop = 0, nblk
    for b in k.stream.skip[:1]:  # the tile's rows: the bounds' row axis (one for all)
        tiled = next(t for t in k.grid if t.axis == b.row)
        first, stop = key_block_range(k.stream.skip, tile.start[b.row], tiled.block, k.stream.block, nblk, leaves)
    if k.stream.split is None:
        return range(first, stop)
    per = math.ceil(nblk / plan.axes[k.stream.split])
    s = tile.start[k.stream.split]
    return range(max(min(s * per, nblk), first), max(min((s + 1) * per, nblk, stop), first))


class _Env:
    running_max: frozenset = frozenset()
    first_block = True

    def __init__(self, plan, k, tile, mem, local, axes, gaxes):
        self.plan, self.k, self.tile, self.mem, self.local = plan, k, tile, mem, local
        self.axes, self.gaxes = axes, gaxes  # on-chip buffers; global tensors (a separate namespace)

    def value(self, arg: str, want):
        if arg.startswith("#"):
            return torch.tensor(_literal(arg[1:]), dtype=torch.float64)
        t = self.local[arg]
        return reference.align(t, self.axes[arg], tuple(want))

    def assign(self, dst: str, val: torch.Tensor):
        t = self.local[dst]
        t.copy_(val.to(t.dtype).expand_as(t))

    def exec(self, s):
        getattr(self, "do_" + s.op)(s)

    def do_load(self, s: Load):
        src_axes, dst_axes = self.gaxes[s.src], self.axes[s.dst]
        part = self.mem[s.src][self.tile.global_index(src_axes, dst_axes, f"load {s.src}->{s.dst}")]
        kept = [a for a in src_axes if a in dst_axes]
        part = reference.align(part, tuple(kept), dst_axes)
        dst = self.local[s.dst]
        dst.zero_()  # zero-fill past the end of an axis, like a boundary-checked copy
        dst[tuple(slice(0, n) for n in part.shape)] = part.to(dst.dtype)

    def do_store(self, s: Store):
        src_axes, dst_axes = self.axes[s.src], self.gaxes[s.dst]
        idx = self.tile.global_index(dst_axes, src_axes, f"store {s.src}->{s.dst}")
        kept = tuple(a for a in dst_axes if a in src_axes)
        src = self.local[s.src][tuple(slice(0, self.tile.valid(a)) for a in src_axes)]
        target = self.mem[s.dst]
        value = reference.align(src, src_axes, kept).to(target.dtype)
        if s.accumulate:  # (the kernel's atomic add: any order of the CTAs gives this sum)
            target[idx] += value
        else:
            target[idx] = value

    def do_fill(self, s: Fill):
        self.local[s.dst].fill_(_literal(s.value))

    def do_iota(self, s: Iota):
        axes = self.axes[s.dst]
        t = self.local[s.dst]
        if s.axis not in axes:  # a batch axis of the grid: this tile's one position
            self.assign(s.dst, torch.tensor(float(self.tile.start[s.axis]), dtype=torch.float64))
            return
        n = t.shape[axes.index(s.axis)]
        pos = torch.arange(n, dtype=torch.float64) + self.tile.start.get(s.axis, 0)
        self.assign(s.dst, reference.align(pos, (s.axis,), axes))

    def do_mask(self, s: Mask):
        t, axes = self.local[s.dst], self.axes[s.dst]
        d = axes.index(s.axis)
        n = self.tile.valid(s.axis)
        t.narrow(d, n, t.shape[d] - n).fill_(_literal(s.value))

    def do_pivot(self, s: Pivot):
        if not self.first_block:  # only the first block this CTA streams sets it
            return
        axes = self.axes[s.src]
        first = self.local[s.src].select(axes.index(s.axis), 0)
        self.assign(s.dst, reference.align(first, tuple(a for a in axes if a != s.axis), self.axes[s.dst]))

    def do_map(self, s: Map):
        want = self.axes[s.dst]
        dt = self.local[s.dst].dtype
        args = [self.value(a, want).to(dt) for a in s.args]
        if s.fn != "copy":
            args = [torch.where(torch.isneginf(v), torch.zeros_like(v), v) if a in self.running_max else v
                    for a, v in zip(s.args, args)]
        if s.fn == "cast":  # a conversion: to the IR's target dtype if the plan names it, then to dst's
            (x,) = args
            self.assign(s.dst, x.to(TORCH[s.dtype]) if s.dtype else x)
            return
        self.assign(s.dst, FUNCS[s.fn](*args))

    def do_reduce(self, s: Reduce):
        axes = self.axes[s.src]
        # in the destination's dtype, as the kernel does (a float16 tile is cast to float32
        # before it is summed: summed in float16, the column sums of W lose 3 digits)
        t = self.local[s.src].to(self.local[s.dst].dtype, copy=True)
        d = axes.index(s.axis)
        n = self.tile.valid(s.axis)
        t.narrow(d, n, t.shape[d] - n).fill_(0.0 if s.kind == "sum" else -math.inf)
        r = t.sum(d) if s.kind == "sum" else t.amax(d)
        rest = tuple(a for a in axes if a != s.axis)
        r = reference.align(r, rest, self.axes[s.dst])
        if s.accumulate:
            old = self.local[s.dst]
            r = old + r if s.kind == "sum" else torch.maximum(old, r)
        self.assign(s.dst, r)

    def do_gemm(self, s: Gemm):
        acc = self.local[s.acc]
        a, b = self.local[s.a].to(acc.dtype), self.local[s.b].to(acc.dtype)
        r = reference.contract(a, self.axes[s.a], b, self.axes[s.b], s.axis_a, s.axis_b, self.axes[s.acc])
        self.assign(s.acc, r if s.clear else acc + r)
