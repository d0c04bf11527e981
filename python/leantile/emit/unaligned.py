"""Copies between a register tile and a global tensor whose rows are not 16-byte aligned (a
mixin of emit.kernel._KernelWriter): a softmax over GPT-2's 50257-wide vocabulary, a norm over an
odd width.

Why: where a row's length in bytes is no multiple of 16, TileLang's T.copy cannot prove any
vector of the tile aligned and falls back to one 2-byte load or store per element, each with its
own bounds test (seen in the lowered CUDA). On the H200 a softmax over 2048 x 50257 rows ran
0.3985 ms against 0.2239 ms over 50264 aligned columns
(benchmarks/unaligned_rows/results/softmax-unaligned-2048x50257-h200-2026-11-26.json).

How: the tile's elements of one row are a contiguous run of the flat tensor. A window load
reads, per tile row, the whole 16-byte granules that cover that run (aligned vector loads into a
shared "window"), then each element is read from the window at its row's offset within the first
granule. A window store writes the tile into the window at that offset, then writes back the
granules: a granule the run covers whole is one vector store, the two end granules are written
element by element, so nothing outside the tile is written. Values are exactly T.copy's: an
element past the tensor's end is read as 0, none is written.

Reading the whole granules of a run also reads up to 15 bytes either side of it. They belong to
the same tensor (the neighbouring row; the data pointer is 16-byte aligned: TileLang's vector
copies assume it already), except in the tensor's last granule where its length is no multiple of
16 bytes: that granule is read element by element, up to the last element, so nothing past the
tensor is read (compute-sanitizer memcheck flagged the whole-granule read of a 3 x 1001 f16
tensor's tail: 10 bytes past a 6006-byte allocation; tests/gpu/test_sanitizer_gpu.py). A granule
that starts past the last element is not read."""
from __future__ import annotations

import math

from ..plan import Buffer, Load, Store
from ..plan.shared import VECTOR_BYTES, window_granule
from .common import _global_dtype, _size


class UnalignedWriter:
    """Window loads and stores; the writer's helpers come from emit.kernel._KernelWriter. Which
    copies take a window, and the list of them, are the plan's (plan.shared.window_granule,
    plan.shared.windows); write() checks that it allocated exactly the listed ones."""

    def window_granule(self, g: Buffer, local: Buffer) -> int | None:
        """plan.shared.window_granule of this kernel."""
        return window_granule(self.plan, self.k, g, local)

    def _window_geometry(self, g: Buffer, v: int):
        """A new window for a copy with g: (row axis, column axis, flat start of tile row i as a
        function of i's name, row extent, column extent, window width name, the tile's first row
        and column, the window's name, g's flat view's name)."""
        rows, cols = g.axes[-2:]
        sizes = [self.plan.axes[a] for a in g.axes]
        lead = []
        for n, a in enumerate(g.axes[:-2]):
            idx = self.kvar if a in self.streamed else self.grid_var[a]
            lead.append(f"({idx}) * {math.prod(sizes[n + 1:])}")
        r0, c0 = self.start(rows) or "0", self.start(cols) or "0"
        lead_s = " + ".join(lead) + " + " if lead else ""

        def base(i: str) -> str:
            return f"({lead_s}({r0} + {i}) * {_size(cols)} + {c0})"
        re, ce = self.extent(rows), self.extent(cols)
        width = self.fresh("window_cols")
        self.pre.append(f"{width} = ({ce} + {2 * v - 2}) // {v} * {v}  # whole {v}-element granules under a row "
                        f"of the tile (emit.unaligned)")
        return rows, cols, base, re, ce, width, r0, c0, self._window_temp(g, rows, cols, width, v), self._flat(g, v)

    def _window_temp(self, g: Buffer, rows: str, cols: str, width: str, v: int) -> str:
        """A shared window (allocated by write(), which checks it against the plan's list,
        plan.shared.windows; plan.verify.shared_bytes counts that list, each window in the phase
        that uses it: the stream's or the epilogue's)."""
        name = self.fresh(f"{g.name}_window")
        self.windows.append((name, (rows, cols), _global_dtype(self.plan, g), width, v, self.epilogue_temps is None, g.name))
        return name

    def _flat(self, g: Buffer, v: int) -> str:
        """The name of g's 1-D view, declared once by write(), its extent rounded up to whole
        granules: the last granule is read whole (see the module docstring), and TileLang
        would otherwise guard, and so split, every vector that might cross the extent."""
        if g.name not in self.flat_views:
            total = math.prod(self.plan.axes[a] for a in g.axes)
            self.flat_views[g.name] = (self.fresh(f"{self.gname[g.name]}_flat"), -(-total // v) * v,
                                       _global_dtype(self.plan, g))
        return self.flat_views[g.name][0]

    def _granule_loop(self, re: str, width: str, v: int, depth: int) -> tuple[str, str, str, int]:
        """A loop of the CTA's threads over (tile row, granule) pairs: (item, row, granule names,
        depth of the loop body)."""
        thr = self.lanes()  # (emit.reductions)
        tx, it, item = self.fresh("tx"), self.fresh("it"), self.fresh("item")
        row, q = self.fresh("wr"), self.fresh("wq")
        nq = f"({width} // {v})"
        self.emit(f"{tx} = T.get_thread_binding()", depth)
        self.emit(f"for {it} in T.unroll(T.ceildiv({re} * {nq}, {thr})):  # unrolled: every load in flight at once", depth)
        self.emit(f"{item} = {it} * {thr} + {tx}", depth + 1)
        self.emit(f"{row} = {item} // {nq}", depth + 1)
        self.emit(f"{q} = {item} % {nq}", depth + 1)
        return item, row, q, depth + 1

    def window_load(self, s: Load, g: Buffer, v: int, depth: int):
        b = self.local[s.dst]
        rows, cols, base, re, ce, width, r0, c0, win, flat = self._window_geometry(g, v)
        total = math.prod(self.plan.axes[a] for a in g.axes)
        whole = total // v  # granules wholly inside the tensor
        self.emit(f"# {s.src}'s rows are not {VECTOR_BYTES}-byte aligned: whole granules into a window, "
                  "then shifted into place (emit.unaligned)", depth)
        item, row, q, d = self._granule_loop(re, width, v, depth)
        gr = self.fresh("granule")
        self.emit(f"{gr} = {base(row)} // {v} + {q}  # the granule's index in the flat tensor", d)
        # the test in whole granules (no element index in it), so that TileLang keeps one
        # vector load under it: `gr * v < total` it could not prove uniform over the vector
        self.emit(f"if {item} < {re} * ({width} // {v}) and {gr} < {whole}:", d)
        vv = self.fresh("v")
        self.emit(f"for {vv} in T.vectorized({v}):", d + 1)
        self.emit(f"{win}[{row}, {q} * {v} + {vv}] = {flat}[{gr} * {v} + {vv}]", d + 2)
        if total % v:  # the tensor's last granule, partly past its end: its elements one by one
            self.emit(f"if {item} < {re} * ({width} // {v}) and {gr} == {whole}:", d)
            self.emit(f"for {vv} in T.serial({total % v}):", d + 1)
            self.emit(f"{win}[{row}, {q} * {v} + {vv}] = {flat}[{gr} * {v} + {vv}]", d + 2)
        loop = self.loop_header(b.axes, depth)
        i, j = loop[rows], loop[cols]
        inside = f"{r0} + {i} < {_size(rows)} and {c0} + {j} < {_size(cols)}"
        val = f"T.cast({win}[{i}, {base(i)} % {v} + {j}], {self.dtype_expr(b)})"
        self.emit(f"{self.ref(s.dst, b.axes, loop)} = T.if_then_else({inside}, {val}, 0)", depth + 1)

    def window_store(self, s: Store, g: Buffer, v: int, depth: int):
        b = self.local[s.src]
        rows, cols, base, re, ce, width, r0, c0, win, flat = self._window_geometry(g, v)
        gdt = _global_dtype(self.plan, g)
        self.emit(f"# {s.dst}'s rows are not {VECTOR_BYTES}-byte aligned: shifted into a window, then whole "
                  "granules out, the two ends element by element (emit.unaligned)", depth)
        loop = self.loop_header(b.axes, depth)
        i, j = loop[rows], loop[cols]
        self.emit(f"{win}[{i}, {base(i)} % {v} + {j}] = T.cast({self.ref(s.src, b.axes, loop)}, {gdt})", depth + 1)
        item, row, q, d = self._granule_loop(re, width, v, depth)
        lo, hi, gr = self.fresh("run_lo"), self.fresh("run_hi"), self.fresh("granule")
        self.emit(f"{lo} = {base(row)}  # the tile row's run of the flat tensor: [{lo}, {hi})", d)
        self.emit(f"{hi} = {lo} + T.min({ce}, {_size(cols)} - ({c0}))", d)
        self.emit(f"{gr} = {lo} // {v} * {v} + {q} * {v}", d)
        self.emit(f"if {item} < {re} * ({width} // {v}) and {r0} + {row} < {_size(rows)}:", d)
        self.emit(f"if {gr} >= {lo} and {gr} + {v} <= {hi}:", d + 1)
        vv = self.fresh("v")
        self.emit(f"for {vv} in T.vectorized({v}):", d + 2)
        self.emit(f"{flat}[{gr} + {vv}] = {win}[{row}, {q} * {v} + {vv}]", d + 3)
        self.emit("else:", d + 1)
        self.emit(f"for {vv} in T.serial({v}):", d + 2)
        self.emit(f"if {gr} + {vv} >= {lo} and {gr} + {vv} < {hi}:", d + 3)
        self.emit(f"{flat}[{gr} + {vv}] = {win}[{row}, {q} * {v} + {vv}]", d + 4)
