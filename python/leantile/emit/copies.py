"""Copies between global memory and a kernel's on-chip tiles (a mixin of emit.kernel._KernelWriter):
loads, stores (through a shared staging tile where plan.passes.store_staging asks; an accumulating
store as TileLang's atomic add, one TMA reduce-add of a staged tile), and the rectangles of a tile
whose rows are packed query heads."""
from __future__ import annotations

import itertools

from ..plan import Buffer, Load, Store
from .common import _global_dtype, _ident


class CopyWriter:
    """do_load and do_store; the writer's helpers (gslice, window_*, dims, fresh, emit) come from
    emit.kernel._KernelWriter."""

    def do_load(self, s: Load, depth: int):
        b = self.local[s.dst]
        g = self.plan.global_buffer(s.src)
        v = self.window_granule(g, b)
        if v:
            self.window_load(s, g, v, depth)
            return
        parts = self.packed_parts(g, b.axes, self.lname[s.dst], f"load {s.src}->{s.dst}")
        for src, dst in parts:  # a head's rows of a swizzled tile are no TMA box: plain copies
            self.emit(f"T.copy({src}, {dst}{', disable_tma=True' if len(parts) > 1 else ''})", depth)

    def packed_parts(self, g: Buffer, local_axes: tuple[str, ...], local: str, where: str) -> list[tuple[str, str]]:
        """[(global region, on-chip region)] a copy between global g and an on-chip buffer
        moves: one pair, or where the buffer has the kernel's packed row axes, one pair per
        position of the outer packed axes (a query head of the group: its rows of the packed
        dimension are one rectangle of g)."""
        dims = self.dims(local_axes)
        packed = next((d for d in dims if len(d) > 1), None)
        if packed is None:
            return [(self.gslice(g, local_axes, where), local)]
        merged = self.merged_slice(g, local_axes, packed, where)
        if merged:  # a tile of the outer packed axis with all of the inner ones: one rectangle
            return [(merged, local)]
        outer, inner = packed[:-1], packed[-1]
        counts = [self.block[a] for a in outer]  # whole axes of fixed extent (derive.kernels.flash_grid)
        out = []
        for pos in itertools.product(*map(range, counts)):
            n = 0
            for a, p, c in zip(outer, pos, counts):
                n = n * c + p
            fixed = {a: p for a, p in zip(outer, pos)}
            rows = self.extent(inner)
            region = ", ".join(f"{n} * {rows}:{n + 1} * {rows}" if d == packed else ":" for d in dims)
            out.append((self.gslice(g, local_axes, where, fixed), f"{local}[{region}]"))
        return out

    def do_store(self, s: Store, depth: int):
        b = self.local[s.src]
        g = self.plan.global_buffer(s.dst)
        src = self.lname[s.src]
        if s.accumulate:  # other CTAs add into the same positions (plan.Store.accumulate)
            dst = self.gslice(g, b.axes, f"store {s.src}->{s.dst}")
            if s.staged:  # one TMA reduce-add of the tile from shared memory (plan.passes.store_staging)
                staged = self.fresh(f"{_ident(s.dst)}_add_shared")
                self.temps.append((staged, b.axes, "shared", _global_dtype(self.plan, g)))
                self.made("staging", s.src)
                self.emit(f"T.copy({src}, {staged})", depth)
                self.emit(f"T.atomic_add({dst}, {staged}, annotations={{'use_tma': True}})", depth)
            else:  # each thread its own elements (vectorised atomics)
                self.emit(f"T.atomic_add({dst}, {src})", depth)
            return
        packed = any(len(d) > 1 for d in self.dims(b.axes))
        v = self.window_granule(g, b)
        if v:
            self.window_store(s, g, v, depth)
            return
        if self.is_swapped(s.src):  # (column, row) on chip: transposed into a (row, column) shared tile
            staged = self.fresh(f"{_ident(s.dst)}_out_shared")
            self.temps.append((staged, b.axes, "shared_plain", _global_dtype(self.plan, g)))
            self.made("transposing", s.src)
            rows, cols = (self.extent(a) for a in b.axes)
            self.emit(f"for i, j in T.Parallel({rows}, {cols}):  # {s.src} is kept transposed (swap_operands)", depth)
            self.emit(f"{staged}[i, j] = T.cast({src}[j, i], {_global_dtype(self.plan, g)})", depth + 1)
            self.emit(f"T.copy({staged}, {self.gslice(g, b.axes, f'store {s.src}->{s.dst}')})", depth)
            return
        if s.staged or packed:  # through shared memory (plan.passes.store_staging; a packed tile's rows by head)
            staged = self.fresh(f"{_ident(s.dst)}_out_shared")
            self.temps.append((staged, b.axes, "shared", _global_dtype(self.plan, g)))
            self.made("staging", s.src)
            self.emit(f"T.copy({src}, {staged})", depth)
            src = staged
        if packed:
            for gsrc, part in self.packed_parts(g, b.axes, src, f"store {s.src}->{s.dst}"):
                self.emit(f"T.copy({part}, {gsrc}, disable_tma=True)", depth)
            return
        self.emit(f"T.copy({src}, {self.gslice(g, b.axes, f'store {s.src}->{s.dst}')})", depth)
