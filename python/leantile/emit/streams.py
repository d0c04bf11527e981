"""The stream of a kernel (a mixin of emit.kernel._KernelWriter): the plain pipelined loop over
the stream's blocks (T.Pipelined: TileLang's own producer), the key blocks a mask's bounds leave
(key_range, emit_interior), and statements that run on some blocks only: boundary-only mask
statements, the masks of a partial last block (partial_guard), and a pivot taken on the CTA's
first block (do_pivot: a row's first element, through shared memory from a register tile)."""
from __future__ import annotations

from .. import plan as plan_module
from ..plan import WHOLE_LIMIT, Iota, Load, Map, Pivot, Plan, row_bytes, running_maxes
from ..plan.verify import DTYPE_BYTES, extent
from .common import EmitError, _size, pass_configs
from ..plan.shared import one_block_stream

# the most stages TileLang's cp.async software pipeline lowers over a run-time trip count, where
# the stream's shared loads are one run of statements (one cp.async group per block; see
# dynamic_stage_cap)
CP_ASYNC_DYNAMIC_STAGES = 2


def cp_async_pipeline(plan: Plan, k) -> bool:
    """Whether TileLang 0.1.15 may pipeline k's stream with its cp.async software pipeline (not TMA
    and warp specialisation): no tile the stream loads into shared memory surely goes through TMA
    (`_surely_tma`), or warp specialisation is off for the kernel; and cp.async is on. Over a trip
    count known only at run time (a split-K slice, a key-block range) that pipeline drains in a
    loop of `num_stages - 1` iterations waiting on `cp_async_wait<num_stages - 2 - i>`, a count
    its codegen needs as a constant: with 3 stages or more lowering fails ("Downcast from tirx.Sub
    to ir.IntImm failed": f32 split-K GEMMs over k = 1025, issue 46). With 2 the drain is one
    wait<0>. (A constant trip count unrolls the drain: any stage count lowers.)"""
    if k.stream is None or getattr(k, "overlap", None) or getattr(k, "pingpong", None):
        return False
    cfg = pass_configs(plan).get(k.name, {})
    if cfg.get("tirx.use_async_copy") is False:
        return False
    local = {b.name: b for b in k.buffers if b.scope == "shared"}
    loads = [(plan.global_buffer(s.src), local[s.dst]) for s in k.body if isinstance(s, Load) and s.dst in local]
    loads = [(g, b) for g, b in loads if g.axes]
    if not loads:
        return False
    return bool(cfg.get("tl.disable_warp_specialized")) or not any(_surely_tma(plan, k, g, b) for g, b in loads)


def dynamic_stage_cap(plan: Plan, k) -> int:
    """The stages a cp.async pipeline over a run-time trip count lowers with: 2 where the body's
    shared loads are one run of statements (a GEMM slice's A and B), 1 where they are several
    (flash attention's K, then V after the softmax): TileLang then waits on a count that depends
    on the loop variable ("Downcast from tirx.Sub to ir.IntImm failed" at 2 stages too: gpu-fuzz
    2026-11-28, f32 attention with a per-head length mask at d_h = 1; f16 causal attention at
    d_h = 100 alike; upstream: tile-ai/TileOPs#1852). Also 1 where one of them reads rows of
    fewer than 16 bytes a 2-D tile (copies narrower than cp.async's widest: the dK/dV kernel of a
    bf16 attention backward at d_h = 4, CPU lowering campaign s104)."""
    shared = {b.name for b in k.buffers if b.scope == "shared"}
    runs, inside, narrow = 0, False, False
    for s in k.body:
        load = isinstance(s, Load) and s.dst in shared
        runs += load and not inside
        inside = load
        if load:
            g = plan.global_buffer(s.src)
            narrow |= len(g.axes) >= 2 and row_bytes(plan, g) < 16
    return CP_ASYNC_DYNAMIC_STAGES if runs <= 1 and not narrow else 1


def _surely_tma(plan: Plan, k, g, b) -> bool:
    """A load of global g into shared tile b that TileLang makes a TMA copy: g's rows are whole
    16-byte granules and b's last axis is g's contiguous one, at least 16 bytes of it a row (a tile
    that takes one element of g's last axis, e.g. a (k, j) tile of a (k, j, m) tensor, is not)."""
    return (row_bytes(plan, g) % 16 == 0 and bool(b.axes) and b.axes[-1] == g.axes[-1]
            and extent(plan, k, b.axes[-1]) * DTYPE_BYTES.get(g.dtype, 4) >= 16)


class StreamWriter:
    """The stream loop and its block ranges; the writer's helpers come from emit.kernel._KernelWriter."""

    def key_range(self, st, nblk: str, whole: bool = False, depth: int | None = None) -> tuple[str, str]:
        """(first, stop) key blocks under st.skip, as plan.key_block_range computes them; with
        `whole`, those every row keeps whole (plan.key_block_interior; stop None: no bound). A
        bound read per row (KeyBound.per_row) first emits, at `depth`, the loop that takes the
        loosest of the tile's rows (plan.tile_leaf_value)."""
        first, stop, ext = "0", (None if whole else nblk), self.extent(st.axis)
        flags = []
        for b in st.skip:
            if b.flag:  # no bound: the interior needs it 1 at every row of the tile
                if whole:
                    flags.append(self.runtime_offset(b, nblk, depth, tightest=True))
                continue
            lo_row = self.start(b.row) or "0"
            # a batch row axis (one query, its heads packed instead): one position per CTA
            hi_row = lo_row if self.block.get(b.row) == 1 else f"({lo_row} + {self.extent(b.row)} - 1)"
            # the row that gives the loosest bound (or, `whole`, the tightest)
            far = (b.side == "hi") != whole
            row = {1: hi_row if far else lo_row, -1: f"-{lo_row if far else hi_row}", 0: "0"}
            key = f"{b.offset} + {row[b.coef]}" if b.coef else str(b.offset)
            if b.leaf is not None:
                key = f"{self.runtime_offset(b, nblk, depth, tightest=whole)} + {key}"
            if b.side == "hi":
                s = f"T.max({key} + 1, 0) // {ext}" if whole else f"(T.max({key} + 1, 0) + {ext} - 1) // {ext}"
                stop = s if stop is None else f"T.min({stop}, {s})"
            else:
                s = f"(T.max({key}, 0) + {ext} - 1) // {ext}" if whole else f"T.max({key}, 0) // {ext}"
                first = f"T.max({first}, {s})"
        if flags:  # some row not exact: no block is interior
            whole_rows = " and ".join(f"{f} == 1.0" for f in flags)
            stop = f"T.if_then_else({whole_rows}, {stop or nblk}, 0)"
        return first, stop

    def emit_interior(self, st, nblk: str, depth: int):
        """Names for the key blocks every row keeps whole (self.interior), where boundary-only
        mask statements need them: outside that range a block is a boundary block."""
        if any(getattr(x, "boundary_only", False) for x in self.k.body):
            inner = self.key_range(st, nblk, whole=True, depth=depth)
            names = (self.fresh("kv_inner_first"), self.fresh("kv_inner_stop") if inner[1] else None)
            self.emit(f"{names[0]} = {inner[0]}  # from here to kv_inner_stop every row keeps every key", depth)
            if names[1]:
                self.emit(f"{names[1]} = {inner[1]}", depth)
            self.interior = names

    def runtime_offset(self, b, nblk: str, depth: int | None = None, tightest: bool = False) -> str:
        """plan.runtime_offset spelled for the kernel: the leaf at this CTA's batch position,
        clamped in float, then rounded; a NaN leaf (it masks every key) gives plan.runtime_offset's
        no-bound value, tested here: max and min propagate NaN (leantile.codegen_nan). `tightest`:
        the interior's (plan.key_block_interior): the tightest of the rows, a NaN row none; a flag
        (KeyBound.flag): 1.0 where the leaf is 1 at every row of the tile, else 0.0.

        Per row (KeyBound.per_row), emitted at `depth`: each lane reads every 32nd row of the tile
        and a warp's shuffles take the loosest clamped value (a few independent loads; one thread
        reading all 128 rows waited on each in turn), rounded once (floor and ceil are monotone).
        It is one let-bound expression (the rows' terms listed when the factory runs, for its
        block), not a variable the loop fills: TileLang 0.1.15 warp-specialises no pipelined loop
        whose trip count or loads read a T.alloc_var or T.alloc_local buffer (its producer needs
        them), and a let it recomputes in the producer warpgroup (every warp gets the same lanes'
        rows, so every warp the same value)."""
        row0 = self.start(b.row) or "0"
        lane = "r * 32 + T.get_lane_idx()"  # per row: each lane of a warp reads every 32nd row

        def read(c):
            g = self.plan.global_buffer(c.leaf)
            at = ", ".join(f"{row0} + {lane}" if c.per_row and a == c.row else self.grid_var[a] for a in g.axes) or "0"
            return f"T.cast({self.gname[g.name]}[{at}], 'float32')"
        leaf = read(b)
        v = f"{b.shift!r} + {b.scale!r} * {leaf}"
        top = f"T.cast({nblk} * {self.extent(self.k.stream.axis)} + 2, 'float32')"
        v = f"T.max(T.min({v}, {top}), -2.0)"
        none = top if (b.side == 'hi') != tightest else '-2.0'
        v = f"T.if_then_else({leaf} == {leaf}, {v}, {none})"
        if b.flag:  # plan.row_whole: the pair's unrounded values whole and small, the count their span
            lo, hi = (self.k.stream.skip[j] for j in b.pair)
            ends = [f"({c.shift!r} + {c.scale!r} * {read(c)})" for c in (lo, hi)]
            whole = " and ".join(f"T.floor({e}) == {e} and T.abs({e}) < {WHOLE_LIMIT!r}" for e in ends)
            v = f"T.if_then_else({whole} and {leaf} == {ends[1]} - {ends[0]} + 1.0, 1.0, 0.0)"
        if b.per_row:
            if depth is None:
                raise EmitError(f"kernel {self.k.name}: a key bound read per row outside the stream's setup")
            var = self.fresh("rows_whole" if b.flag else "rows_bound")
            side = "min" if b.flag else "max" if (b.side == "hi") != tightest else "min"
            what = "1 where every row's is" if b.flag else "the tightest" if tightest else "the loosest"
            rows = "1" if self.block.get(b.row) == 1 else self.extent(b.row)
            init = "1.0" if b.flag else "-2.0" if side == "max" else top
            terms = (f"[T.if_then_else({lane} < {rows} and {row0} + {lane} < {_size(b.row)}, {v}, {init}) "
                     f"for r in range(({rows} + 31) // 32)]")
            self.emit(f"{var} = T.warp_reduce_{side}(reduce(T.{side}, {terms}, {init}))  "
                      f"# every lane: {what} of the tile's rows ({b.leaf}, 32 rows at a time)", depth)
            v = var
        if b.flag:
            return v
        return f"T.cast(T.{'floor' if b.side == 'hi' else 'ceil'}({v}), 'int32')"

    def interior_test(self) -> str:
        """The condition that the current key block is interior (every row keeps it whole)."""
        if self.interior is None:
            raise EmitError(f"kernel {self.k.name}: boundary-only statements outside a stream with key bounds")
        first, stop = self.interior
        return f"{self.kvar} >= {first}" + (f" and {self.kvar} < {stop}" if stop else "")

    def boundary_maps(self, group: list[Map | Iota], depth: int):
        """A run of mask statements (Map.boundary_only) on boundary key blocks only: a uniform
        branch per block, so the pipelined loop keeps one body; an interior block passes each
        select's value through."""
        self.emit(f"if not ({self.interior_test()}):  # a boundary block: some row may drop a key", depth)
        self.maps(group, depth + 1)
        through = [Map(dst=m.dst, fn="copy", args=(m.args[1],)) for m in group
                   if isinstance(m, Map) and m.fn == "select" and m.dst != m.args[1]]
        if through:
            self.emit("else:  # every row keeps every key of the block", depth)
            self.maps(through, depth + 1)

    def write_plain(self, d: int):
        """Prologue, pipelined stream (T.Pipelined: TileLang's own producer) or body, epilogue."""
        k = self.k
        if k.prologue:
            self.emit("# prologue: once per tile", d)
            self.stmts(k.prologue, d)
        self.start_partials(d)
        if k.stream:
            st = k.stream
            stages = "stages" if "stages" in (self.plan.tiles or {}) and self.plan.tiles["stages"] == st.stages else str(st.stages)
            if (st.skip or st.split) and cp_async_pipeline(self.plan, k):  # a run-time trip count
                stages = f"min({stages}, {dynamic_stage_cap(self.plan, k)})"
            self.emit(f"# body: once per {self.extent(st.axis)}-block of {st.axis}", d)
            nblk = f"T.ceildiv({_size(st.axis)}, {self.extent(st.axis)})"
            if st.skip:  # the key blocks some row of this tile may keep (plan.key_block_range)
                first, stop = self.key_range(st, nblk, depth=d)
                if st.split:
                    ext, n = self.extent(st.axis), _size(st.split)
                    per = self.fresh("split_per")
                    self.pre.append(f"{per} = (({_size(st.axis)} + {ext} - 1) // {ext} + {n} - 1) // {n}  "
                                    f"# {st.axis} blocks per slice")
                    s0 = f"{self.grid_var[st.split]} * {per}"
                    first, stop = f"T.max({s0}, {first})", f"T.min({s0} + {per}, {stop})"
                kv_first = self.fresh("kv_first")
                self.emit(f"{kv_first} = {first}  # the key blocks before it and after stop are masked", d)
                self.emit_interior(st, nblk, d)
                self.kvar, self.kfirst = f"({kv_first} + ks)", "ks == 0"
                self.emit(f"for ks in T.Pipelined(T.max({stop} - {kv_first}, 0), num_stages={stages}):", d)
            elif st.split:  # this CTA's slice of the stream (plan.Stream.split)
                # blocks per slice, computed in Python from the block the factory is given: a
                # division in the loop bound by a slice count that is no power of two is refused
                # by TileLang's loop analysis
                ext, n = self.extent(st.axis), _size(st.split)
                blocks, per = self.fresh("split_blocks"), self.fresh("split_per")
                self.pre += [f"{blocks} = ({_size(st.axis)} + {ext} - 1) // {ext}",
                             f"{per} = ({blocks} + {n} - 1) // {n}  # {st.axis} blocks per slice"]
                first = f"{self.grid_var[st.split]} * {per}"
                self.kvar, self.kfirst = f"({first} + ks)", "ks == 0"
                self.emit(f"for ks in T.Pipelined(T.max(T.min({per}, {blocks} - {first}), 0), num_stages={stages}):", d)
            else:
                if one_block_stream(self.plan, k):
                    # one block (a row on chip): a plain loop, no producer and pipeline to set up
                    # (H200, a row-statistics kernel over 1024 x 1024: 0.0047 ms pipelined, 0.0017
                    # as this loop: benchmarks/norm_gemm/results/kernel-times-norm-gemm-h200-2026-11-26-row-stats*.json)
                    self.emit(f"for k in T.serial(1):  # the one {st.axis} block", d)
                else:
                    self.emit(f"for k in T.Pipelined({nblk}, num_stages={stages}):", d)
            self.running_max = running_maxes(k)  # read as 0 while -inf (plan.running_maxes)
            self.stmts(k.body, d + 1)
            self.running_max, self.kvar, self.kfirst = frozenset(), "k", "k == 0"
            if not k.body:
                self.emit("pass", d + 1)
            self.finish_partials(d)
        elif k.body:
            self.emit("# body", d)
            self.stmts(k.body, d)
        self.epilogue_temps = len(self.temps)  # the temps after it live once the stream is done
        if k.epilogue:
            self.emit("# epilogue", d)
            self.stmts(k.epilogue, d)
        if k.second_pass:  # plan.Kernel.second_pass: the stream again, the row's statistics final
            st = k.stream
            stages = "stages" if "stages" in (self.plan.tiles or {}) and self.plan.tiles["stages"] == st.stages else str(st.stages)
            nblk = f"T.ceildiv({_size(st.axis)}, {self.extent(st.axis)})"
            self.emit(f"# second pass: once per {self.extent(st.axis)}-block of {st.axis} again"
                      + (", last block first (plan.SECOND_PASS_REVERSED)" if plan_module.SECOND_PASS_REVERSED else ""), d)
            self.emit(f"for k2 in T.Pipelined({nblk}, num_stages={stages}):", d)
            self.kvar = f"({nblk} - 1 - k2)" if plan_module.SECOND_PASS_REVERSED else "k2"
            self.stmts(k.second_pass, d + 1)
            self.kvar = "k"

    def partial_guard(self, axis: str) -> str | None:
        """The run-time test 'this block is the axis's last' where the axis is streamed, None
        elsewhere: only the last block of a stream can be partial, so the masks of a partial
        last block (Mask, a reduction's masked operand) run there alone, a uniform branch per
        block (a 192-key attention tile over 4096 keys masked every block before)."""
        if axis not in self.streamed:
            return None
        return f"{self.kvar} == T.ceildiv({_size(axis)}, {self.extent(axis)}) - 1"

    def do_pivot(self, s: Pivot, depth: int):
        """dst = src at position 0 of the streamed axis, on the first block the CTA streams (k == 0;
        ks == 0 of a slice); a select rather than a branch, so the pipelined loop keeps one body."""
        src, dst = self.local[s.src], self.local[s.dst]
        if src.scope == "fragment":
            return self.pivot_from_fragment(s, src, dst, depth)
        loop = self.loop_header(dst.axes, depth)
        first = self.ref(s.src, src.axes, {**loop, s.axis: "0"})
        if self.tl_dtype(src) != self.tl_dtype(dst):
            first = f"T.cast({first}, {self.dtype_expr(dst)})"
        here = self.ref(s.dst, dst.axes, loop)
        self.emit(f"{here} = T.if_then_else({self.kfirst}, {first}, {here})  # pivot: the first {s.axis} this CTA streams",
                  depth + 1)

    def pivot_from_fragment(self, s: Pivot, src, dst, depth: int):
        """The pivot from a register tile: element [row, 0] lives in one thread's registers, and read
        by the threads of the row's pivot it made TileLang lay the whole tile out for that read (a
        LayerNorm over 16 x 4M ran 74 ms where 0.14 was expected, H200, 2026-11-29). On the CTA's
        first block only, the owning threads write column 0 to a small shared stage; the pivot reads it."""
        stage = self.fresh(f"{self.lname[s.dst]}_stage")
        shape = self.shape(dst.axes).rstrip(",") if dst.axes else "1"
        self.extra_allocs.append(f"{stage} = T.alloc_shared(({shape},), {self.dtype_expr(dst)})")
        self.emit(f"if {self.kfirst}:  # pivot: the first {s.axis} this CTA streams, through shared memory", depth)
        loop = self.loop_header(src.axes, depth + 1)
        self.emit(f"if {loop[s.axis]} == 0:", depth + 2)
        value = self.ref(s.src, src.axes, loop)
        if self.tl_dtype(src) != self.tl_dtype(dst):
            value = f"T.cast({value}, {self.dtype_expr(dst)})"
        self.emit(f"{stage}[{self.index(dst.axes, loop) if dst.axes else '0'}] = {value}", depth + 3)
        loop = self.loop_header(dst.axes, depth + 1)
        self.emit(f"{self.ref(s.dst, dst.axes, loop)} = {stage}[{self.index(dst.axes, loop) if dst.axes else '0'}]",
                  depth + 2)
