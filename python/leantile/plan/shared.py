"""The shared-memory temporaries a kernel's plan implies beyond its own buffers (issue 48, step
2: the plan lists them, the emitter allocates what is listed, plan.verify sums the list).

Two lists, each temporary in the phase that uses it (beside the stream's buffers, or the
epilogue's, which reuses the pipelined memory once the stream is done):
- `windows`: the windows of copies between a register tile and a global tensor whose rows are no
  whole 16-byte granules (emit.unaligned says why and how they are used); which copy takes one
  (`window_granule`) and how wide it is (`window_width`).
- `temps`: the other shared tiles the emitter needs: a shared mirror of an on-chip buffer (a
  reduction's result read beside a GEMM's register layout, where TileLang's layout inference
  finds no layout for the two in one loop; the operand of a SIMT contraction or of a reduction
  to one value, read at indices other threads own), a serial reduction's per-thread partials, a
  store's staging tile (Store.staged, a packed tile's rows by head) and a swapped tile's
  transposing one. `_Walk` decides them in the order the emitter prints the statements (the
  layout family of a buffer, "G" for a GEMM's register layout or "R" for a reduction's, follows
  that order), for each schedule: plain, FA3's overlap (its softmax and moved statements twice),
  ping-pong (prologue and epilogue once per consumer warpgroup).
The emitter allocates what these list and refuses, as an internal error, anything else;
plan.verify.shared_bytes sums them. The same walk tells which register tiles a T.reduce_sum /
T.reduce_max reads and in which layout (`reductions`): plan.verify.reduce_layout_problem refuses
tiles whose layout TileLang cannot reduce."""
from __future__ import annotations

from typing import NamedTuple

from . import (DTYPE_BYTES, FIXED, Buffer, Gemm, Iota, Kernel, Load, Map, Plan, Reduce, Store, map_runs, on_chip_dims, pooled_in_registers, pooled_reduce,
                   row_bytes, swapped_layout)
from .overlap_parts import overlap_parts

VECTOR_BYTES = 16  # one LDG.128 / STG.128


class Window(NamedTuple):
    """A shared window of one copy: the global it copies, the on-chip tile, whether it is a
    store, its granule (elements per 16 bytes), and whether it lives in the epilogue's phase
    (after the stream: it reuses the pipelined memory) rather than beside the stream's buffers."""
    buffer: str
    local: str
    store: bool
    granule: int
    epilogue: bool


def window_width(extent: int, v: int) -> int:
    """Columns of a window over a run of `extent` elements that may start anywhere in a granule
    of v: the granules such a run can touch, whole (the emitted factory computes the same from
    its block size; plan.verify.shared_bytes calls this)."""
    return (extent + 2 * v - 2) // v * v


def one_block_stream(plan: Plan, k: Kernel) -> bool:
    """Whether k's stream is one block over its whole axis (a row on chip: a plain loop, no
    pipeline), where a body load may take a window."""
    st = k.stream
    return st is not None and st.param == FIXED and st.block >= plan.axes.get(st.axis, 0)


def window_granule(plan: Plan, k: Kernel, g: Buffer, local: Buffer) -> int | None:
    """Elements per granule where the copy between global g and on-chip tile `local` of kernel k
    takes the window path, else None: a register tile of g's last two axes (rows, then the row's
    contiguous axis) whose row length in bytes is no multiple of 16, every other axis of g a
    batch index, in a kernel of the plain schedule."""
    if k.overlap or local.scope != "fragment" or len(g.axes) < 2:
        return None
    if tuple(local.axes) != tuple(g.axes[-2:]) or any(len(d) > 1 for d in on_chip_dims(k, tuple(local.axes))):
        return None
    if swapped_layout(k, local.axes):
        return None
    if k.stream and not one_block_stream(plan, k) and local.name in {x.dst for x in k.body if isinstance(x, Load)}:
        # a load of the stream's body stays a T.copy: measured slower through a window
        # (fill, two barriers per block, 96 registers instead of 72; H100, the statistics
        # kernel of a softmax over 2048 x 50257: 0.1026 ms as T.copy, 0.2012 through windows)
        return None
    block = {gr.axis: gr.block for gr in k.grid}
    if k.stream:
        block.update({a: k.stream.block for a in (k.stream.axis, *k.stream.aliases)})
    for a in g.axes[:-2]:  # batch axes: one position per CTA (or per stream step)
        if block.get(a) != 1:
            return None
    nbytes = DTYPE_BYTES.get(g.dtype)
    if nbytes is None or nbytes > VECTOR_BYTES:
        return None
    if row_bytes(plan, g) % VECTOR_BYTES == 0:
        return None
    return VECTOR_BYTES // nbytes


def windows(plan: Plan, k: Kernel) -> tuple[Window, ...]:
    """The windows kernel k's copies take, in statement order (prologue, body, epilogue): one per
    Load or Store whose copy takes the window path. A ping-pong kernel's epilogue runs under the
    other warpgroup's mainloop: its windows live beside the ring, as the stream's do."""
    local = {b.name: b for b in k.buffers if b.scope != "global"}
    names = {b.name for b in plan.globals}
    out = []
    for part, stmts in (("prologue", k.prologue), ("body", k.body), ("epilogue", k.epilogue),
                        ("second_pass", k.second_pass)):
        for s in stmts:
            if not isinstance(s, (Load, Store)) or (isinstance(s, Store) and s.accumulate):
                continue  # (an accumulating store is an atomic add from the registers: no window)
            gname, lname = (s.src, s.dst) if isinstance(s, Load) else (s.dst, s.src)
            if gname not in names or lname not in local:
                continue  # a plan still being built
            v = window_granule(plan, k, plan.global_buffer(gname), local[lname])
            if v:
                out.append(Window(gname, lname, isinstance(s, Store), v,
                                  part in ("epilogue", "second_pass") and not k.pingpong))
    return tuple(out)


class Temp(NamedTuple):
    """A shared tile the emitter adds to a kernel: its role ("mirror", "partials", "staging",
    "transposing"), the on-chip buffer it serves (partials: the reduction's result), its axes
    (("__lanes",): one element per thread), its plan dtype, and whether it lives in the
    epilogue's phase."""
    role: str
    buffer: str
    axes: tuple[str, ...]
    dtype: str
    epilogue: bool


class Reduced(NamedTuple):
    """A register tile a T.reduce_sum / T.reduce_max of kernel k reads: the reduction's result,
    the tile's axes, the axis reduced, and how its layout comes about: "gemm" (a GEMM
    accumulator's register layout, or a tile computed elementwise from one), "partials" (a
    deferred reduction's partials, accumulated by elementwise loops over the stream and reduced
    after it) or "elementwise" (any other tile, reduced where it is computed)."""
    dst: str
    axes: tuple[str, ...]
    axis: str
    layout: str


def reductions(plan: Plan, k: Kernel) -> tuple[Reduced, ...]:
    """The register tiles kernel k's T.reduce_* statements read, in the order the emitter prints
    them (a reduction to one value is a serial loop over shared memory: not listed)."""
    walk = _Walk(plan, k, stores=False)
    walk.run()
    return tuple(walk.reduced)


def temps(plan: Plan, k: Kernel) -> tuple[Temp, ...]:
    """The shared tiles of kernel k beyond its buffers and windows, in the order the emitter
    meets them (see the module docstring). A kernel of a plan still being built (derive's fit
    test of one kernel, before its globals exist) has none."""
    names = {b.name for b in plan.globals}
    if any(s.src not in names if isinstance(s, Load) else s.dst not in names
           for s in k.statements() if isinstance(s, (Load, Store))):
        return ()
    return _Walk(plan, k).run()


class _Walk:
    """The emitter's walk over a kernel's statements without the printing: the layout families
    and the temporaries they imply (emit.kernel's maps and do_store, emit.reductions' do_reduce,
    reduce_serial, to_shared and gemm_simt print what this decides)."""

    def __init__(self, plan: Plan, k: Kernel, stores: bool = True):
        self.plan, self.k, self.stores = plan, k, stores
        self.local = {b.name: b for b in k.buffers if b.scope != "global"}
        self.has_gemm = any(isinstance(s, Gemm) for s in k.statements())
        self.fam: dict[str, str] = {}
        self.mirrored: set[str] = set()
        self.out: list[Temp] = []
        self.reduced: list[Reduced] = []
        self.epilogue = False

    def run(self) -> tuple[Temp, ...]:
        k = self.k
        if k.overlap:  # emit.overlap: the first key block, then the rotated loop, then the last P V
            parts = overlap_parts(k)
            self.stmts(k.prologue)
            self.fam[parts.gemm_s.acc] = "G"
            self.stmts(parts.softmax)
            self.stmts(parts.moved)
            self.fam[parts.gemm_s.acc] = self.fam[parts.gemm_o.acc] = "G"
            self.stmts(parts.softmax)
            self.stmts(parts.moved)
            self.epilogue = True
            self.stmts(k.epilogue)
        elif k.pingpong:  # emit.pingpong: each consumer warpgroup prints the prologue and epilogue
            self.fam[next(s for s in k.body if isinstance(s, Gemm)).acc] = "G"
            for _ in range(2):
                self.stmts(k.prologue)
                self.stmts(k.epilogue)
        else:
            self.stmts(k.prologue)
            self.stmts(k.body)
            if k.stream:  # the deferred reductions' partials reduced after the stream
                for s in k.body:
                    if isinstance(s, Reduce) and s.deferred and not self.local[s.dst].axes:
                        # into a scalar: the partials tile through a shared copy, as reduce() below
                        self.add("mirror", f"{s.dst}_partials", self.local[s.src].axes, self.local[s.dst].dtype)
                        self.add("partials", s.dst, ("__lanes",), self.local[s.dst].dtype)
                    elif isinstance(s, Reduce) and s.deferred:
                        self.fam[s.dst] = "R"
                        self.reduced.append(Reduced(s.dst, self.local[s.src].axes, s.axis, "partials"))
            self.epilogue = True
            self.stmts(k.epilogue)
            self.stmts(k.second_pass)  # after the epilogue, in its phase (emit.streams.write_plain)
        return tuple(self.out)

    def add(self, role: str, buffer: str, axes: tuple[str, ...], dtype: str) -> None:
        self.out.append(Temp(role, buffer, tuple(axes), dtype, self.epilogue))

    def mirror(self, name: str) -> None:
        """A shared copy of on-chip buffer `name` (one per buffer; a shared buffer is its own)."""
        b = self.local[name]
        if b.scope != "shared" and name not in self.mirrored:
            self.mirrored.add(name)
            self.add("mirror", name, b.axes, b.dtype)

    def stmts(self, stmts) -> None:
        for i, stop in map_runs(stmts, lambda name: self.local[name].axes):
            s = stmts[i]
            if isinstance(s, (Map, Iota)):
                group = list(stmts[i:stop])
                self.maps(group)
                if s.boundary_only:  # emit.streams.boundary_maps: the interior passes each select's value through
                    through = [Map(dst=m.dst, fn="copy", args=(m.args[1],)) for m in group
                               if isinstance(m, Map) and m.fn == "select" and m.dst != m.args[1]]
                    if through:
                        self.maps(through)
            elif isinstance(s, Store):
                if self.stores:
                    self.store(s)
            elif isinstance(s, Reduce):
                self.reduce(s)
            elif isinstance(s, Gemm):
                if s.mma:
                    self.fam[s.acc] = "G"
                else:  # a SIMT contraction reads its operands from shared memory
                    self.fam[s.acc] = "S"
                    self.mirror(s.a)
                    self.mirror(s.b)

    def maps(self, group) -> None:
        """A loop mixing the GEMM's register layout with a reduction's finds no layout in
        TileLang: the reduction-family operands are read through shared mirrors there."""
        dsts = {s.dst for s in group}
        args = {a for s in group if isinstance(s, Map) for a in s.args if not a.startswith("#")}
        names = dsts | args
        if self.has_gemm and any(self.fam.get(n) == "G" for n in names):
            for n in sorted(names - dsts):
                if self.fam.get(n) == "R" and self.local[n].scope == "fragment":
                    self.mirror(n)
            for d in dsts:
                self.fam[d] = "G"
        else:
            for s in group:
                if isinstance(s, Map) and any(self.fam.get(a) == "R" for a in s.args):
                    self.fam[s.dst] = "R"

    def reduce(self, s: Reduce) -> None:
        dst = self.local[s.dst]
        if not dst.axes and s.deferred:  # added elementwise into a tile of partials (registers)
            return
        if pooled_reduce(self.plan, self.k, s):  # emit.reductions.pool_reduce
            if not pooled_in_registers(self.plan, self.k, s):
                self.mirror(s.src)
            self.fam[s.dst] = "R"
            return
        if not dst.axes:  # to one value: each thread a strided slice of a shared copy, then one thread
            self.mirror(s.src)
            self.add("partials", s.dst, ("__lanes",), dst.dtype)
        elif not s.deferred:
            gemm = self.fam.get(s.src) == "G"  # a masked or cast copy of the operand keeps its layout
            self.fam[s.dst] = "G" if gemm else "R"
            self.reduced.append(Reduced(s.dst, self.local[s.src].axes, s.axis, "gemm" if gemm else "elementwise"))

    def store(self, s: Store) -> None:
        b, g = self.local[s.src], self.plan.global_buffer(s.dst)
        if (s.accumulate and not s.staged) or window_granule(self.plan, self.k, g, b):  # (an atomic add: from the registers)
            return
        if swapped_layout(self.k, b.axes):  # (column, row) on chip: through a (row, column) tile
            self.add("transposing", s.src, b.axes, g.dtype)
        elif s.staged or any(len(d) > 1 for d in on_chip_dims(self.k, tuple(b.axes))):
            self.add("staging", s.src, b.axes, g.dtype)
