"""One kernel of a plan as a TileLang prim_func factory (`_KernelWriter`); the statement
translation follows leantile.interp exactly (see leantile.emit.tilelang)."""
from __future__ import annotations

import math

from ..plan import (FIXED, Buffer, Fill, Gemm, Iota, Kernel, Load, Map, Mask, Plan, Store, map_runs,
                    on_chip_dims, swapped_layout)
from ..ir import ops
from ..plan.shared import temps, windows
from .grid import GridWriter
from .overlap import PRODUCER_THREADS, OverlapWriter
from .pingpong import PingPongWriter
from .reductions import ReductionWriter
from .streams import StreamWriter
from .tail import TailWriter
from .unaligned import UnalignedWriter
from .copies import CopyWriter
from .common import (SPELLING, LOOP_VARS, RESERVED, TL_DTYPES, TUNABLE, EmitError, _atomic,
                     _global_dtype, _ident, _size, merged_axes, tile_param_of)

class _KernelWriter(CopyWriter, ReductionWriter, StreamWriter, OverlapWriter, PingPongWriter, UnalignedWriter, GridWriter, TailWriter):
    running_max: frozenset = frozenset()
    kvar = "k"  # the index of the current stream block (of a split stream: slice start + ks)
    kfirst = "k == 0"  # the test "this is the first block the CTA streams" (of a split stream: ks == 0)

    def __init__(self, plan: Plan, k: Kernel, within: "_KernelWriter | None" = None):
        self.plan, self.k = plan, k
        # plan.Kernel.tail_of: the kernel run inside this one's launch (emit.tail), or the launch
        # this writer writes a tail into (`within`: its names, globals and grid indices shared)
        self.tail, self.within = None if within else next((t for t in plan.kernels if t.tail_of == k.name), None), within
        self.lines: list[str] = []
        self.params = tile_param_of(plan, k)
        self.block = {g.axis: g.block for g in k.grid}
        self.divisor = {g.axis: g.divisor for g in k.grid if g.divisor > 1}  # packed rows: block_m // heads
        # the streamed axis and its aliases (B's name of a contraction axis) are one axis of the
        # plan: same block, same tile parameter, same position k (interp._Tile does the same)
        self.streamed = (k.stream.axis, *k.stream.aliases) if k.stream else ()
        for a in self.streamed:
            self.block[a] = k.stream.block
            if k.stream.axis in self.params:
                self.params.setdefault(a, self.params[k.stream.axis])
        # globals this kernel touches, in plan order: the prim_func parameters
        stmts = (*k.statements(), *(self.tail.statements() if self.tail else ()))
        used = {s.src for s in stmts if isinstance(s, Load)} | {s.dst for s in stmts if isinstance(s, Store)}
        self.globals = [b for b in plan.globals if b.name in used]
        self.reads = [b.name for b in self.globals if any(isinstance(s, Load) and s.src == b.name for s in stmts)]
        self.writes = [b.name for b in self.globals if any(isinstance(s, Store) and s.dst == b.name for s in stmts)]
        taken = within.taken if within else \
            set(RESERVED) | {_size(a) for a in plan.axes} | {f"pad_{_ident(a)}" for a in plan.axes}
        self.gname: dict[str, str] = dict(within.gname) if within else {}
        for b in self.globals:
            if b.name in self.gname:
                continue
            n = _ident(b.name)
            while n in taken:
                n += "_g"
            taken.add(n)
            self.gname[b.name] = n
        self.lname: dict[str, str] = {}
        self.local = {b.name: b for b in k.buffers if b.scope != "global"}
        for b in self.local.values():
            n = _ident(b.name)
            suffix = "_frag" if b.scope == "fragment" else "_smem"
            while n in taken:
                n += suffix
            taken.add(n)
            self.lname[b.name] = n
        self.taken = taken
        self.temps: list[tuple[str, tuple[str, ...], str, str]] = []  # (name, axes, scope, dtype expr)
        # (role, buffer, in the epilogue) of each shared temp made: write() checks them against the
        # plan's list (plan.shared.temps)
        self.shared_made: list[tuple[str, str, bool]] = []
        # (name, (row axis, column axis), dtype expr, width name, granule, before the epilogue,
        # global name) of emit.unaligned's windows
        self.windows: list[tuple[str, tuple[str, str], str, str, int, bool, str]] = []
        self.flat_views: dict[str, tuple[str, int, str]] = {}  # global -> its 1-D view (emit.unaligned)
        self.merged_views: dict[str, tuple[str, list[str], str]] = {}  # global -> its packed-axes view (merged_slice)
        self.epilogue_temps: int | None = None  # temps[epilogue_temps:] are the epilogue's (write)
        self.pads: set[str] = set()  # axes whose partial-tile flag the factory computes
        self.fam: dict[str, str] = {}  # layout family per fragment, see maps()
        self.masked: dict[tuple[str, str], str] = {}  # (buffer, axis) -> value a Mask left past the end
        self.mirrors: dict[str, str] = {}
        self.pre: list[str] = []  # Python lines of the factory, before the prim_func
        self.interior: tuple[str, str | None] | None = None  # names of the whole-kept key blocks' range
        # shared buffers with a leading ring dimension, the factory's name for its extent (emit.overlap, pingpong)
        self.ring, self.ring_size = set(), ""
        self.extra_allocs: list[str] = []  # mbarriers (Kernel.overlap)
        self.partials: dict[str, str] = {}  # deferred reduction's dst -> its tile of partials
        # emit.pingpong: on-chip name -> consumer warpgroup 1's copy; the persistent launch's one index
        self.twins, self.cta_var = {}, self.fresh("pp_cta")

    # -- helpers -------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        n = _ident(base)
        while n in self.taken:
            n += "_"
        self.taken.add(n)
        return n

    def extent(self, axis: str) -> str:
        """Python expression for the on-chip extent of an axis."""
        if axis in self.block and (self.block[axis] > 1 or axis in self.streamed):
            if axis in self.params and axis in self.divisor:
                return f"({self.params[axis]} // {self.divisor[axis]})"
            return self.params.get(axis, str(self.block[axis]))
        if axis in self.block:
            raise EmitError(f"kernel {self.k.name}: batch axis {axis!r} (block 1) in an on-chip buffer")
        return _size(axis)

    def start(self, axis: str) -> str | None:
        """Python expression for where the current tile starts along an axis (None: 0)."""
        if axis in self.streamed:
            return f"{self.kvar} * {self.extent(axis)}"
        if axis in self.grid_var:
            return f"{self.grid_var[axis]} * {self.extent(axis)}" if self.block[axis] > 1 else self.grid_var[axis]
        return None

    def can_be_partial(self, axis: str) -> bool:
        return axis in self.block and self.block[axis] > 1

    def pad_flag(self, axis: str) -> str:
        self.pads.add(axis)
        return f"pad_{_ident(axis)}"

    def dtype_expr(self, b: Buffer) -> str:
        return "accum_dtype" if b.dtype == "acc" else repr(TL_DTYPES[b.dtype])

    def tl_dtype(self, b: Buffer) -> str:
        return "float32" if b.dtype == "acc" else TL_DTYPES[b.dtype]

    def emit(self, line: str, depth: int):
        self.lines.append("    " * depth + line)

    def gslice(self, g: Buffer, local_axes: tuple[str, ...], where: str, fixed: dict | None = None) -> str:
        """The region of global g an on-chip tile with local_axes covers; `fixed`: axes of the
        tile at one position (a packed head: packed_parts), indexed, not sliced."""
        fixed = fixed or {}
        idx = [self.gindex(a, local_axes, fixed, where) for a in g.axes]
        kept = [a for a in g.axes if a in local_axes]
        if tuple(kept) != tuple(local_axes):
            raise EmitError(f"kernel {self.k.name}: {where}: on-chip axes {local_axes} are not the global "
                            f"axes {g.axes} in order (a transposing copy is not emitted)")
        return f"{self.gname[g.name]}[{', '.join(idx) or '0'}]"  # a 0-D tensor is passed as shape (1,)

    def gindex(self, a: str, local_axes: tuple[str, ...], fixed: dict, where: str) -> str:
        """The index or slice of a global's axis a in a copy with an on-chip tile (gslice)."""
        if a in fixed:
            st = self.start(a)
            return f"{st} + {fixed[a]}" if st else str(fixed[a])
        if a in local_axes:
            v = self.kvar if a in self.streamed else self.grid_var.get(a)
            if v is None:
                return ":"
            e = self.extent(a)
            return f"{v} * {e}:({v} + 1) * {e}"
        if a in self.streamed and self.block[a] == 1:  # one stream step per index (a split's combine)
            return self.kvar
        if a in self.block and self.block[a] == 1:
            return self.grid_var[a]
        raise EmitError(f"kernel {self.k.name}: {where} drops axis {a!r}, which is not a batch axis")

    def merged_slice(self, g: Buffer, local_axes: tuple[str, ...], packed: tuple[str, ...], where: str) -> str | None:
        """The region of g's view with the packed axes as ONE axis (T.Tensor over g's data,
        declared by write()) that a tile with `local_axes` covers, where common.merged_axes says
        the tile is one rectangle of that view (fuse_pool_epilogue's (n, p): a tile of n, every
        p). None elsewhere."""
        if merged_axes(self.plan, self.k, g, local_axes) != packed:
            return None
        n = len(packed)
        at = next(i for i in range(len(g.axes) - n + 1) if tuple(g.axes[i:i + n]) == packed)
        if g.name not in self.merged_views:
            shape = [_size(a) for a in g.axes[:at]] + [" * ".join(_size(a) for a in packed)] + \
                [_size(a) for a in g.axes[at + n:]]
            self.merged_views[g.name] = (self.fresh(f"{self.gname[g.name]}_merged"), shape,
                                         _global_dtype(self.plan, g))
        inner = " * ".join(self.extent(a) for a in packed[1:])
        v, e = self.grid_var[packed[0]], self.extent(packed[0])
        idx = [self.gindex(a, local_axes, {}, where) for a in g.axes[:at]] + \
            [f"{v} * {e} * {inner}:({v} + 1) * {e} * {inner}"] + \
            [self.gindex(a, local_axes, {}, where) for a in g.axes[at + n:]]
        return f"{self.merged_views[g.name][0]}[{', '.join(idx)}]"

    def dims(self, axes: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
        """The dimensions of an on-chip buffer with these axes (packed row axes are one)."""
        return on_chip_dims(self.k, tuple(axes))

    def dim_extent(self, dim: tuple[str, ...]) -> str:
        return " * ".join(self.extent(a) for a in dim)

    def shape(self, axes: tuple[str, ...]) -> str:
        """Tuple body for an on-chip buffer's shape; a 0-D value is a 1-element buffer; the
        pseudo-axis __lanes is one element per thread (reduce_serial's partials)."""
        if not axes:
            return "1,"
        if axes == ("__lanes",):
            return f"{self.lanes()},"
        if axes == ("__one", "__lanes"):  # the same, as one row (a T.reduce_sum operand)
            return f"1, {self.lanes()}"
        dims = self.dims(axes)
        return ", ".join(self.dim_extent(d) for d in dims) + ("," if len(dims) == 1 else "")

    def index(self, axes: tuple[str, ...], loop: dict[str, str]) -> str:
        """The index of an on-chip buffer with these axes at the loop's positions: a packed
        dimension is the loop's own variable where the loop runs over it, else row-major over
        its axes' positions."""
        out = []
        for d in self.dims(axes):
            if len(d) == 1:
                out.append(loop[d[0]])
            elif "|".join(d) in loop:
                out.append(loop["|".join(d)])
            else:
                e = loop[d[0]]
                for a in d[1:]:
                    e = f"({e}) * {self.extent(a)} + {loop[a]}"
                out.append(e)
        return ", ".join(out) or "0"

    def ref(self, name: str, axes: tuple[str, ...], loop: dict[str, str], pyname: str | None = None) -> str:
        b = self.local[name]
        missing = [a for a in b.axes if a not in loop]
        if missing:
            raise EmitError(f"kernel {self.k.name}: {name} has axes {missing} the loop does not cover")
        return f"{pyname or self.lname[name]}[{self.index(b.axes, loop)}]"

    def literal(self, s: str, dtype: str) -> str:
        v = s[1:] if s.startswith("#") else s
        if v in ("-inf", "inf"):
            return ("-" if v[0] == "-" else "") + f"T.infinity({dtype})"
        f = float(v)
        if math.isinf(f):
            return ("-" if f < 0 else "") + f"T.infinity({dtype})"
        return repr(f)

    def loop_header(self, axes: tuple[str, ...], depth: int) -> dict[str, str]:
        if not axes:  # a 0-D value: one element, one iteration
            self.emit("for i in T.Parallel(1):", depth)
            return {}
        dims = self.dims(axes)
        vars_ = LOOP_VARS[:len(dims)]
        ext = ", ".join(self.dim_extent(d) for d in dims)
        self.emit(f"for {', '.join(vars_)} in T.Parallel({ext}):", depth)
        loop = {}
        for d, v in zip(dims, vars_):
            if len(d) == 1:
                loop[d[0]] = v
                continue
            loop["|".join(d)] = v  # a packed dimension: each axis's position, row-major
            for n, a in enumerate(d):
                inner = " * ".join(self.extent(x) for x in d[n + 1:])
                pos = f"{v} // ({inner})" if inner else v
                loop[a] = f"({pos} % {self.extent(a)})" if n else f"({pos})"
        return loop

    # -- statements ----------------------------------------------------------------
    def stmts(self, stmts, depth: int):
        loaded: dict[str, str] = {}  # on-chip buffer -> the global tile it holds unchanged
        for i, stop in map_runs(stmts, lambda name: self.local[name].axes):
            s = stmts[i]
            if isinstance(s, (Map, Iota)):  # one loop over the tile for a run of maps of its shape
                group = list(stmts[i:stop])
                for m in group:
                    loaded.pop(m.dst, None)
                    self.masked = {key: v for key, v in self.masked.items() if key[0] != m.dst}
                if s.boundary_only:
                    self.boundary_maps(group, depth)
                else:
                    self.maps(group, depth)
                continue
            if isinstance(s, Load) and loaded.get(s.dst) == s.src:  # plan.passes.drop_repeated_loads removes these
                raise EmitError(f"kernel {self.k.name}: {s.dst} is loaded from {s.src} twice in a row (the plan "
                                "passes were not run)")
            written = s.acc if isinstance(s, Gemm) else (None if isinstance(s, Store) else s.dst)
            loaded.pop(written, None)
            self.masked = {key: v for key, v in self.masked.items() if key[0] != written}
            if isinstance(s, Mask):
                self.masked[(s.dst, s.axis)] = s.value
            if isinstance(s, Load):
                loaded[s.dst] = s.src
                if s.boundary_only:  # a register tile only the mask reads: boundary blocks alone
                    self.emit(f"if not ({self.interior_test()}):  # a boundary block: some row may drop a key", depth)
                    self.do_load(s, depth + 1)
                    continue
            getattr(self, "do_" + s.op)(s, depth)

    def made(self, role: str, buffer: str) -> None:
        """Record a shared temp the writer allocates (checked against plan.shared.temps)."""
        self.shared_made.append((role, buffer, self.epilogue_temps is not None))

    def do_fill(self, s: Fill, depth: int):
        b = self.local[s.dst]
        v = self.literal(s.value, self.dtype_expr(b))
        if v == "0.0":
            self.emit(f"T.clear({self.lname[s.dst]})", depth)
        else:
            self.emit(f"T.fill({self.lname[s.dst]}, {v})", depth)

    def iota_line(self, s: Iota, loop: dict[str, str]) -> str:
        b = self.local[s.dst]
        start = self.start(s.axis)
        pos = loop[s.axis] if s.axis in b.axes else "0"  # not on chip: a batch axis, the grid's position
        pos = f"{start} + {pos}" if start else pos
        return f"{self.ref(s.dst, b.axes, loop)} = T.cast({pos}, {self.dtype_expr(b)})  # iota over {s.axis}"

    def do_mask(self, s: Mask, depth: int):
        b = self.local[s.dst]
        if not self.can_be_partial(s.axis):
            self.emit(f"# mask {s.dst} past the end of {s.axis}: {s.axis} is never partial here", depth)
            return
        flag = self.pad_flag(s.axis)
        self.emit(f"if {flag}:  # positions of {s.dst} past the end of {s.axis} := {s.value}", depth)
        depth += 1
        last = self.partial_guard(s.axis)
        if last:
            self.emit(f"if {last}:  # the last {s.axis} block, the partial one", depth)
            depth += 1
        loop = self.loop_header(b.axes, depth)
        ref = self.ref(s.dst, b.axes, loop)
        self.emit(f"{ref} = T.if_then_else({self.start(s.axis)} + {loop[s.axis]} < {_size(s.axis)}, {ref}, "
                  f"{self.literal(s.value, self.dtype_expr(b))})", depth + 1)

    def maps(self, group: list[Map | Iota], depth: int):
        axes = self.local[group[0].dst].axes
        # Layout families: fragments derived from a GEMM accumulator ("G") have the GEMM's
        # register layout; row/column vectors reduced from other tiles ("R") have the
        # layout of that reduction. A loop mixing them makes layout inference fail ("no
        # available layout found"), so R operands go through a shared-memory mirror there.
        dsts = {s.dst for s in group}
        names = dsts | {a for s in group for a in _args(s) if not a.startswith("#")}
        mirror: dict[str, str] = {}
        if self.has_gemm and any(self.fam.get(n) == "G" for n in names):
            for n in sorted(names - dsts):
                if self.fam.get(n) == "R" and self.local[n].scope == "fragment":
                    if n not in self.mirrors:
                        m = self.fresh(f"{n}_smem")
                        self.mirrors[n] = m
                        self.temps.append((m, self.local[n].axes, "shared", self.dtype_expr(self.local[n])))
                        self.made("mirror", n)
                    mirror[n] = self.mirrors[n]
                    self.emit(f"T.copy({self.lname[n]}, {mirror[n]})  # {n}: reduction layout -> shared, "
                              "for use beside the GEMM layout", depth)
            for d in dsts:
                self.fam[d] = "G"
        else:
            for s in group:
                if any(self.fam.get(a) == "R" for a in _args(s)):
                    self.fam[s.dst] = "R"
        loop = self.loop_header(axes, depth)
        for s in group:
            if isinstance(s, Iota):
                self.emit(self.iota_line(s, loop), depth + 1)
                continue
            dst = self.local[s.dst]
            dt = self.tl_dtype(dst)
            vals = []
            for a in s.args:
                if a.startswith("#"):
                    vals.append(self.literal(a, self.dtype_expr(dst)))
                    continue
                r = self.ref(a, axes, loop)
                if a in mirror:
                    r = self.ref(a, axes, loop, mirror[a])
                if self.tl_dtype(self.local[a]) != dt:  # interp converts args to the dst dtype first
                    r = f"T.cast({r}, {self.dtype_expr(dst)})"
                if a in self.running_max and s.fn != "copy":  # FlashAttention's guard: m = -inf reads as 0
                    r = (f"T.if_then_else({r} == -T.infinity({self.dtype_expr(dst)}), "
                         f"T.cast(0, {self.dtype_expr(dst)}), {r})")
                vals.append(r)
            if s.fn == "cast" and len(vals) == 1:  # a conversion: the assignment converts to dst's dtype
                v = vals[0]
                if s.dtype and TL_DTYPES[s.dtype] != dt:  # round through the IR's target dtype first
                    v = f"T.cast(T.cast({v}, {TL_DTYPES[s.dtype]!r}), {self.dtype_expr(dst)})"
                expr = v
            elif s.fn in SPELLING and ops.BY_NAME[s.fn].arity == len(vals):
                if len(vals) > 1 or s.fn in ops.REPEATS_ARG:
                    vals = [v if _atomic(v) else f"({v})" for v in vals]
                expr = SPELLING[s.fn].format(*vals)
                if s.fn in ops.COMPARISONS or s.fn == "select":  # if_then_else's branches: dst's dtype
                    expr = f"T.cast({expr}, {self.dtype_expr(dst)})"
            else:
                raise EmitError(f"kernel {self.k.name}: map fn {s.fn!r} with {len(vals)} args is not supported")
            self.emit(f"{self.ref(s.dst, axes, loop)} = {expr}", depth + 1)

    def do_gemm(self, s: Gemm, depth: int):
        if not s.mma:  # plan.passes.gemm_engine: not an MMA tile shape
            self.gemm_simt(s, depth)
            return
        if s.clear:
            self.emit(f"T.clear({self.lname[s.acc]})", depth)
        op = "=" if s.clear else "+="
        if self.is_swapped(s.acc):  # Kernel.swapped: acc^T += b^T a^T, the weight's columns on the MMA's M side
            self.emit(f"T.gemm({self.lname[s.b]}, {self.lname[s.a]}, {self.lname[s.acc]}{self.gemm_kw(s)})"
                      f"  # {s.acc}^T {op} {s.b}^T . {s.a}^T over {s.axis_a} (swapped)", depth)
            return
        self.emit(f"T.gemm({self.lname[s.a]}, {self.lname[s.b]}, {self.lname[s.acc]}{self.gemm_kw(s)})"
                  f"  # {s.acc} {op} {s.a} . {s.b} over {s.axis_a}", depth)

    def is_swapped(self, name: str) -> bool:
        """Whether on-chip buffer `name` is laid out (column, row) (Kernel.swapped)."""
        return swapped_layout(self.k, self.local[name].axes)

    def gemm_kw(self, s: Gemm) -> str:
        """The keyword arguments of a tensor-core GEMM: operand layouts and warp policy. Swapped,
        b is the MMA's A operand (M = its columns) and a its B operand (N = a's rows)."""
        self.fam[s.acc] = "G"
        if self.is_swapped(s.acc):
            kw = ", transpose_A=True" if self.local[s.b].axes.index(s.axis_b) == 0 else ""  # b stored (k, n)
            kw += ", transpose_B=True" if self.local[s.a].axes.index(s.axis_a) == 1 else ""  # a stored (m, k)
            return kw
        # by on-chip dimension: a packed (n, p) column dimension is one (fuse_pool_epilogue)
        kw = ", transpose_A=True" if self.dims(self.local[s.a].axes).index((s.axis_a,)) == 0 else ""  # a stored (k, m)
        kw += ", transpose_B=True" if self.dims(self.local[s.b].axes).index((s.axis_b,)) == 1 else ""  # b stored (n, k)
        return kw + (", policy=T.GemmWarpPolicy.FullRow" if self.full_row else "")

    # -- the whole kernel ----------------------------------------------------------
    def write(self) -> list[str]:
        k = self.k
        # grid: last plan axis fastest (blockIdx.x); more than 3 flattened into bz, all into bx where y or z
        # would pass CUDA's 65535 (emit.grid)
        rev = list(reversed(k.grid))
        counts, flat, flat_var = self.lay_out_grid(rev)
        self.full_row = k.warp_policy == "full_row"  # plan.passes.warp_policy
        self.has_gemm = any(isinstance(s, Gemm) for s in k.statements())
        body: list[str] = []
        self.lines = body
        d = 3
        if k.wait_previous:  # plan.passes.dependent_launch; build_kernel's `pdl` is off below sm_90
            self.emit("if pdl:", d)
            self.emit("T.pdl_sync()  # first: wait for the kernel before this one to finish", d + 1)
        if k.launch_next:  # at the start: after the stream it was slower on 7 of 9 plans (docs/tilelang-notes.md)
            self.emit("if pdl:", d)
            self.emit("T.pdl_trigger()  # the next kernel may launch now (it waits for this one to finish)", d + 1)
        if k.swizzle and not k.pingpong:  # panels of neighbouring tiles share operands in L2 (plan.passes.swizzle)
            self.params["swizzle"] = "swizzle"
            self.emit("T.use_swizzle(panel_size=max(swizzle, 1), enable=swizzle > 0)", d)
        if flat and not k.pingpong:
            self.emit_grid_indices(flat, flat_var, d)
        self.grid_guard(rev)
        bound = dict(self.grid_var)  # the launch's own index names
        if k.heavy_first:  # plan.passes.heavy_first: the last tiles of the axis, the longest, launch first
            a = k.heavy_first
            v = self.fresh(f"{bound[a]}_heavy_first")
            self.emit(f"{v} = T.ceildiv({_size(a)}, {self.extent(a)}) - 1 - {bound[a]}  "
                      f"# {a} tiles in reverse: the longest streams first, the short ones fill the last wave", d)
            self.grid_var[a] = v
        # FA3's schedule (Kernel.overlap, emit.overlap), the ping-pong GEMM (emit.pingpong) or the plain one
        (self.write_overlapped if k.overlap else self.write_pingpong if k.pingpong else self.write_plain)(d)
        child = self.write_tail(d) if self.tail else None  # emit.tail: the combine by the last slice

        out: list[str] = []
        # a kernel whose blocks derive fixed from the shape (an on-chip row) fixes its threads too
        fixed = any(g.param == FIXED for g in k.grid)
        used_params = sorted(set(self.params.values()) | set(child.params.values() if child else ()) |
                             ({"stages"} if k.stream else set()) |
                             (set() if fixed else {"threads"}),
                             key=lambda p: TUNABLE.index(p) if p in TUNABLE else 99)
        t = self.plan.tiles or {}
        # pdl: a dependent launch; sms: the GPU's SM count, one persistent CTA each (build_kernel asks the GPU)
        defaults = [f"{p}={t.get(p, k.threads if p == 'threads' else 2)}" for p in used_params] + \
            ["pdl=True"] * bool(k.wait_previous or k.launch_next) + ["sms=SMS"] * bool(k.pingpong)
        out.append(f"def {_ident(k.name)}({''.join(d + ', ' for d in defaults)}**_unused):")
        out.append(f'    """{k.role}"""')
        for a in sorted(self.pads, key=list(self.plan.axes).index):
            out.append(f"    pad_{_ident(a)} = {_size(a)} % {self.extent(a)} != 0  # last {a} tile is partial")
        out += [f"    {line}" for line in self.pre]
        if self.pads or self.pre:
            out.append("")
        sig = ", ".join([f"{self.gname[b.name]}: T.Tensor(({', '.join(_size(a) for a in b.axes) or '1'}{',' if len(b.axes) <= 1 else ''}), "
                         f"{_global_dtype(self.plan, b)})" for b in self.globals] + self.counter_params())
        out.append("    @T.prim_func")
        out.append(f"    def {_ident(k.name)}({sig}):")
        grid_desc = ", ".join(f"{v}: {a}{' tile' if self.block[a] > 1 else ''}" for a, v in bound.items())
        threads = "threads" if "threads" in used_params else str(k.threads)
        vars_ = [bound[g.axis] for g in rev[:len(rev) - len(flat)]][:3] + ([flat_var] if flat else [])
        if not vars_:  # a single tile (the output is a scalar)
            counts, vars_ = ["1"], ["bx"]
        as_ = vars_[0] if len(vars_) == 1 else f"({', '.join(vars_)})"
        if k.overlap or k.pingpong:  # the producer warpgroup comes on top of the consumers' threads
            threads = f"{threads} + {PRODUCER_THREADS}"
        if k.pingpong:  # persistent: one index, the tiles are walked inside (emit.pingpong)
            counts, as_, grid_desc = [self.pp_ctas], self.cta_var, f"{self.cta_var}: persistent CTA"
        out.append(f"        with T.Kernel({', '.join(counts)}, threads={threads}) as {as_}:  # {grid_desc}")
        out += self.allocations()
        if child:
            out += child.allocations()
        out.append("")
        out.extend(body)
        out.append("")
        out.append(f"    return {_ident(k.name)}")
        return out

    def allocations(self) -> list[str]:
        """The T.alloc_* lines of the kernel's on-chip buffers and temps (checked against the
        plan's lists of them: plan.shared)."""
        k, out = self.k, []
        for b in k.buffers:
            if b.scope == "global":
                continue
            shape = (f"{self.ring_size}, " if b.name in self.ring else "") + self.shape(b.axes)
            alloc = "T.alloc_shared" if b.scope == "shared" else "T.alloc_fragment"
            node = f"  # node {b.node}" if b.node is not None else ""
            out.append(f"            {self.lname[b.name]} = {alloc}(({shape}), {self.dtype_expr(b)}){node}")
            if self.lname[b.name] in self.twins:  # consumer warpgroup 1's own (emit.pingpong)
                out.append(f"            {self.twins[self.lname[b.name]]} = {alloc}(({shape}), {self.dtype_expr(b)})")
        for name, axes, scope, dt in self.temps:
            shape = self.shape(axes)
            if scope == "shared_plain":  # the logical (row, column) order, also in a swapped kernel
                out.append(f"            {name} = T.alloc_shared(({', '.join(map(self.extent, axes))}), {dt})"
                           "  # transposing bridge")
            elif scope == "shared":
                out.append(f"            {name} = T.alloc_shared(({shape}), {dt})  # layout bridge")
            else:
                out.append(f"            {name} = T.alloc_fragment(({shape}), {dt})  # reduction operand")
        listed = [(w.buffer, w.granule, w.epilogue) for w in windows(self.plan, k)]
        made = [(g, v, not in_stream) for _, _, _, _, v, in_stream, g in self.windows]
        if made != listed:  # the plan lists the windows (plan.shared.windows); the writer only prints them
            raise EmitError(f"internal error: kernel {k.name}: the writer made windows {made}, the plan lists {listed}")
        listed = sorted((t.role, t.buffer, t.epilogue) for t in temps(self.plan, k))
        if sorted(self.shared_made) != listed:  # and the other shared temps (plan.shared.temps)
            raise EmitError(f"internal error: kernel {k.name}: the writer made shared temps {sorted(self.shared_made)}, "
                            f"the plan lists {listed}")
        for name, (rows, _), dt, width, *_ in self.windows:
            out.append(f"            {name} = T.alloc_shared(({self.extent(rows)}, {width}), {dt})  # window (emit.unaligned)")
        for g, (name, extent, dt) in self.flat_views.items():  # emit.unaligned: whole granules
            out.append(f"            {name} = T.Tensor(({extent},), {dt}, {self.gname[g]}.data)")
        for g, (name, shape, dt) in self.merged_views.items():  # merged_slice: the packed axes as one
            out.append(f"            {name} = T.Tensor(({', '.join(shape)},), {dt}, {self.gname[g]}.data)")
        out += [f"            {line}" for line in self.extra_allocs]
        return out


def _args(s: Map | Iota) -> tuple[str, ...]:
    return s.args if isinstance(s, Map) else ()
