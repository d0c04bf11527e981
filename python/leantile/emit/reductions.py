"""The reductions and the contractions that are no tensor-core tile of a kernel's statements
(a mixin of emit.kernel._KernelWriter): T.reduce_sum / T.reduce_max over a fragment, a two-level
reduction to one value, and a SIMT loop for a contraction that is not a 2-D MMA tile."""
from __future__ import annotations

from ..plan import FIXED, Gemm, Reduce, pooled_in_registers, pooled_reduce
from .common import EmitError, _ident, _size


class ReductionWriter:
    """The reduce and SIMT-contraction statements; the writer's helpers (extent, ref, loop_header,
    index, ...) come from emit.kernel._KernelWriter."""

    def do_reduce(self, s: Reduce, depth: int):
        src, dst = self.local[s.src], self.local[s.dst]
        if s.axis not in src.axes:
            raise EmitError(f"kernel {self.k.name}: reduce over {s.axis!r}, not an axis of {s.src}")
        rest = tuple(a for a in src.axes if a != s.axis)
        if rest != dst.axes:
            raise EmitError(f"kernel {self.k.name}: reduce {s.src}{src.axes} over {s.axis} into "
                            f"{s.dst}{dst.axes}: axes differ (a transposed reduction is not emitted)")
        if not dst.axes and s.deferred:  # into a scalar, past the stream: add each block elementwise
            self.accumulate_partials(s, self.can_be_partial(s.axis), depth)
            return
        if not dst.axes:
            self.reduce_serial(s, depth)
            return
        dims = self.dims(src.axes)
        if pooled_reduce(self.plan, self.k, s):
            self.pool_reduce(s, depth)
            return
        if (s.axis,) not in dims:
            raise EmitError(f"kernel {self.k.name}: reduce over {s.axis!r}, a packed row axis of {s.src}")
        dim = dims.index((s.axis,))
        fn = "T.reduce_sum" if s.kind == "sum" else "T.reduce_max"
        ident = self.identity(s)
        clear = "False" if s.accumulate else "True"
        partial = self.can_be_partial(s.axis)
        if self.masked.get((s.src, s.axis)) in (("-inf",) if s.kind == "max" else ("0", "0.0")):
            partial = False  # a Mask already set the padded positions to the identity
        if s.deferred:
            self.accumulate_partials(s, partial, depth)
            return
        needs_copy = src.scope != "fragment" or self.tl_dtype(src) != self.tl_dtype(dst)
        what = f"{s.dst} {'max' if s.kind == 'max' else '+'}= {s.kind}({s.src} over {s.axis})" if s.accumulate \
            else f"{s.dst} = {s.kind}({s.src} over {s.axis})"
        self.fam[s.dst] = "G" if self.fam.get(s.src) == "G" else "R"
        plain = f"{fn}({self.lname[s.src]}, {self.lname[s.dst]}, dim={dim}, clear={clear})  # {what}"
        tmp = self.fresh(f"{s.src}_{'masked' if partial else 'frag'}") if partial or needs_copy else None
        if tmp:
            self.temps.append((tmp, src.axes, "fragment", self.dtype_expr(dst)))

        def reduce(masked: bool, d: int):  # through the temporary, or straight from the operand
            if masked or needs_copy:
                self.reduce_via_temp(s, tmp, fn, dim, clear, ident, masked, what, d)
            else:
                self.emit(plain, d)
        if not partial:
            reduce(False, depth)
            return
        # only a partial last tile needs the masked operand; of a stream, only its last block
        last = self.partial_guard(s.axis)
        self.emit(f"if {self.pad_flag(s.axis)}:", depth)
        if last:
            self.emit(f"if {last}:  # the last {s.axis} block, the partial one", depth + 1)
            reduce(True, depth + 2)
            self.emit("else:", depth + 1)
            reduce(False, depth + 2)
        else:
            reduce(True, depth + 1)
        self.emit("else:", depth)
        reduce(False, depth + 1)

    def pool_reduce(self, s: Reduce, depth: int):
        """fuse_pool_epilogue: a reduction over the inner axis p of a packed column dimension
        (n, p) that holds every p: each value combines its P products, read from a shared copy
        of the tile (a GEMM accumulator's register layout spreads one n's p over threads), or
        from registers where each thread holds its pair (pool_in_registers)."""
        src, dst = self.local[s.src], self.local[s.dst]
        if pooled_in_registers(self.plan, self.k, s):
            self.pool_in_registers(s, depth)
            return
        view = self.to_shared(s.src, depth)
        self.fam[s.dst] = "R"
        loop = self.loop_header(dst.axes, depth)
        terms = []
        for p in range(self.plan.axes[s.axis]):
            val = self.ref(s.src, src.axes, {**loop, s.axis: str(p)}, view)
            terms.append(f"T.cast({val}, {self.dtype_expr(dst)})" if self.tl_dtype(src) != self.tl_dtype(dst) else val)
        here = self.ref(s.dst, dst.axes, loop)
        if s.accumulate:
            terms.insert(0, here)
        val = terms[0]
        for t in terms[1:]:
            val = f"{val} + {t}" if s.kind == "sum" else f"T.max({val}, {t})"
        self.emit(f"{here} = {val}  # {s.kind} over the {len(terms) - s.accumulate} {s.axis} of the tile", depth + 1)

    def pool_in_registers(self, s: Reduce, depth: int):
        """plan.pooled_in_registers: each thread combines the pair it holds, in place. One read
        of the accumulator at (n, p) inside a loop over p (TileLang takes one access pattern per
        fragment in a T.Parallel: acc[i, 2j] beside acc[i, 2j + 1] is refused); the first term
        taken as is, as pool_reduce's t0 op t1 (an identity first would turn max(NaN, NaN) into -inf)."""
        src, dst = self.local[s.src], self.local[s.dst]
        self.fam[s.dst] = "R"
        loop = self.loop_header(dst.axes, depth)
        p = self.fresh("pool_p")
        here = self.ref(s.dst, dst.axes, loop)
        val = self.ref(s.src, src.axes, {**loop, s.axis: p})
        if self.tl_dtype(src) != self.tl_dtype(dst):
            val = f"T.cast({val}, {self.dtype_expr(dst)})"
        both = f"{here} + {val}" if s.kind == "sum" else f"T.max({here}, {val})"
        self.emit(f"{here} = {self.identity(s)}  # written before the loop reads it (the p = 0 term replaces it)"
                  if not s.accumulate else f"# {s.dst} {s.kind}= its {self.plan.axes[s.axis]} {s.axis} values", depth + 1)
        self.emit(f"for {p} in T.serial({self.plan.axes[s.axis]}):  # {s.kind} over the pair this thread holds", depth + 1)
        self.emit(f"{here} = {both}" if s.accumulate else f"{here} = T.if_then_else({p} == 0, {val}, {both})", depth + 2)

    def identity(self, s: Reduce) -> str:
        return "0.0" if s.kind == "sum" else f"-T.infinity({self.dtype_expr(self.local[s.dst])})"

    def start_partials(self, depth: int):
        """Before the stream: a tile of partials per deferred reduction of the body
        (Reduce.deferred, plan.passes.defer_reductions), filled with the reduction's identity."""
        self.partials = {}
        for s in self.k.body:
            if isinstance(s, Reduce) and s.deferred:
                name = self.fresh(f"{s.dst}_partials")
                self.partials[s.dst] = name
                self.temps.append((name, self.local[s.src].axes, "fragment", self.dtype_expr(self.local[s.dst])))
                self.emit(f"T.fill({name}, {self.identity(s)})  # {s.dst}'s {s.kind} over {s.axis}, "
                          "block by block, reduced after the stream", depth)

    def accumulate_partials(self, s: Reduce, partial: bool, depth: int):
        """A deferred reduction in the stream body: the block added elementwise into its tile of
        partials (positions past the axis's end add the identity); no cross-thread step."""
        src, tile = self.local[s.src], self.partials[s.dst]

        def add(masked: bool, d: int):
            loop = self.loop_header(src.axes, d)
            val = self.ref(s.src, src.axes, loop)
            if self.tl_dtype(src) != self.tl_dtype(self.local[s.dst]):
                val = f"T.cast({val}, {self.dtype_expr(self.local[s.dst])})"
            if masked:
                val = f"T.if_then_else({self.start(s.axis)} + {loop[s.axis]} < {_size(s.axis)}, {val}, {self.identity(s)})"
            p = f"{tile}[{self.index(src.axes, loop)}]"
            self.emit(f"{p} = {p} + {val}" if s.kind == "sum" else f"{p} = T.max({p}, {val})", d + 1)
        self.emit(f"# {s.dst}'s partials {'+' if s.kind == 'sum' else 'max'}= {s.src} (reduced over {s.axis} "
                  "after the stream)", depth)
        if not partial:
            add(False, depth)
            return
        self.emit(f"if {self.pad_flag(s.axis)}:", depth)
        self.emit(f"if {self.partial_guard(s.axis)}:  # the last {s.axis} block, the partial one", depth + 1)
        add(True, depth + 2)
        self.emit("else:", depth + 1)
        add(False, depth + 2)
        self.emit("else:", depth)
        add(False, depth + 1)

    def finish_partials(self, depth: int):
        """After the stream: each deferred reduction's tile of partials reduced into its total."""
        for s in self.k.body:
            if isinstance(s, Reduce) and s.deferred and not self.local[s.dst].axes:
                # into a scalar: the partials tile reduced once, as reduce_serial reduces a tile
                src = self.local[s.src]
                name = self.partials[s.dst]
                # the partials tile is a fragment (start_partials), whatever the operand's scope (a
                # weight tile in shared memory: a GEMV's column sum into a scalar)
                self.local[name] = src.model_copy(update={"name": name, "dtype": self.local[s.dst].dtype,
                                                          "scope": "fragment"})
                self.lname[name] = name
                self.reduce_serial(s.model_copy(update={"src": name, "accumulate": True, "deferred": False}), depth,
                                   partials=True)
            elif isinstance(s, Reduce) and s.deferred:
                dim = self.dims(self.local[s.src].axes).index((s.axis,))
                fn = "T.reduce_sum" if s.kind == "sum" else "T.reduce_max"
                self.fam[s.dst] = "R"
                self.emit(f"{fn}({self.partials[s.dst]}, {self.lname[s.dst]}, dim={dim}, clear=False)  "
                          f"# {s.dst} {'+' if s.kind == 'sum' else 'max'}= {s.kind}(partials over {s.axis})", depth)

    def to_shared(self, name: str, depth: int) -> str:
        """A shared-memory view of an on-chip buffer (itself if already shared), for loops
        that read it at indices other threads own."""
        b = self.local[name]
        if b.scope == "shared":
            return self.lname[name]
        if name not in self.mirrors:
            m = self.fresh(f"{name}_smem")
            self.mirrors[name] = m
            self.temps.append((m, b.axes, "shared", self.dtype_expr(b)))
            self.made("mirror", name)
        self.emit(f"T.copy({self.lname[name]}, {self.mirrors[name]})", depth)
        return self.mirrors[name]

    def lanes(self) -> str:
        """The threads the kernel launches with, as the factory spells them: the tile parameter
        `threads`, or the kernel's own where its grid fixes them (emit.kernel.write); a tail runs
        on its launch's (emit.tail). reduce_serial gives each of them a lane: with lanes for 128
        threads in a launch of 256 (a split reduction's combine), TileLang synchronised only the
        first 128 after the shared copy the lanes read, and the lanes read the other threads'
        values before they were written (a huber loss over 2^20 came back 33% off on the H200)."""
        if self.within is not None:
            return self.within.lanes()
        return str(self.k.threads) if any(g.param == FIXED for g in self.k.grid) else "threads"

    def reduce_serial(self, s: Reduce, depth: int, partials: bool = False):
        """A reduction to a single value, in two levels over a shared copy of the operand: each
        of the kernel's threads sums a strided slice into a shared partial, then one thread sums
        the partials (a one-thread loop over 8192 values cost about 25 us of a 80 us MSE)."""
        src, dst = self.local[s.src], self.local[s.dst]
        if len(src.axes) != 1:
            raise EmitError(f"kernel {self.k.name}: reduce {s.src}{src.axes} to a scalar over several axes")
        dt = self.dtype_expr(dst)
        ident = self.identity(s)
        self.emit(f"# {s.dst} {'(' + s.kind + ')= ' if s.accumulate else '= '}{s.kind}({s.src} over {s.axis})", depth)
        view = self.to_shared(s.src, depth)
        lanes = self.lanes()
        part = self.fresh(f"{_ident(s.dst)}_partial")
        self.temps.append((part, ("__lanes",), "shared", dt))
        self.made("partials", s.dst)
        ext = self.extent(s.axis)
        self.emit(f"for t in T.Parallel({lanes}):", depth)
        self.emit(f"{part}[t] = {ident}", depth + 1)
        self.emit(f"for kk in T.serial(T.ceildiv({ext}, {lanes})):", depth + 1)
        idx = f"kk * {lanes} + t"
        val = f"{view}[{idx}]"
        if self.tl_dtype(src) != self.tl_dtype(dst):
            val = f"T.cast({val}, {dt})"
        if self.can_be_partial(s.axis) and not partials:  # (a deferred tile's partials are masked as added)
            val = f"T.if_then_else({self.start(s.axis) or '0'} + {idx} < {_size(s.axis)}, {val}, {ident})"
        val = f"T.if_then_else({idx} < {ext}, {val}, {ident})"
        p = f"{part}[t]"
        self.emit(f"{p} = {p} + {val}" if s.kind == "sum" else f"{p} = T.max({p}, {val})", depth + 2)
        # then the lanes' partials reduced across the threads (shuffles: a one-thread loop over
        # 256 partials was a dependent chain of 256 adds in every CTA of a split loss)
        lane = self.fresh(f"{_ident(s.dst)}_lanes")
        self.temps.append((lane, ("__one", "__lanes"), "fragment", dt))
        self.emit(f"for z, t in T.Parallel(1, {lanes}):", depth)
        self.emit(f"{lane}[z, t] = {part}[t]", depth + 1)
        fn = "T.reduce_sum" if s.kind == "sum" else "T.reduce_max"
        self.emit(f"{fn}({lane}, {self.lname[s.dst]}, dim=1, clear={not s.accumulate})", depth)

    def gemm_simt(self, s: Gemm, depth: int):
        """A contraction that is not a 2-D tile GEMM (vectors, scalars): per output element,
        a serial loop over the contracted axis, operands read from shared memory."""
        a, b, c = self.local[s.a], self.local[s.b], self.local[s.acc]
        self.fam[s.acc] = "S"
        if s.clear:
            self.emit(f"T.clear({self.lname[s.acc]})", depth)
        self.emit(f"# {s.acc} {'=' if s.clear else '+='} {s.a} . {s.b} over {s.axis_a} (not a 2-D tile GEMM: SIMT)", depth)
        va, vb = self.to_shared(s.a, depth), self.to_shared(s.b, depth)
        loop = self.loop_header(c.axes, depth)
        la, lb = {**loop, s.axis_a: "kk"}, {**loop, s.axis_b: "kk"}
        ra, rb = self.ref(s.a, a.axes, la, va), self.ref(s.b, b.axes, lb, vb)
        dt = self.dtype_expr(c)
        if self.tl_dtype(a) != self.tl_dtype(c):
            ra = f"T.cast({ra}, {dt})"
        if self.tl_dtype(b) != self.tl_dtype(c):
            rb = f"T.cast({rb}, {dt})"
        self.emit(f"for kk in T.serial({self.extent(s.axis_a)}):", depth + 1)
        r = self.ref(s.acc, c.axes, loop)
        self.emit(f"{r} = T.ieee_fmaf({ra}, {rb}, {r})", depth + 2)  # one FMA a step, as ops' fma

    def reduce_via_temp(self, s: Reduce, tmp: str, fn, dim, clear, ident, masked: bool, what, depth):
        """The reduction of a copy of the operand in the fragment `tmp`: an operand in shared
        memory or of another dtype goes to a fragment first; `masked`, its positions past the
        axis's end are the reduction's identity."""
        src, dst = self.local[s.src], self.local[s.dst]
        self.emit(f"# {what}{f' ignoring {s.axis} past its end' if masked else ''}", depth)
        loop = self.loop_header(src.axes, depth)
        val = self.ref(s.src, src.axes, loop)
        if self.tl_dtype(src) != self.tl_dtype(dst):
            val = f"T.cast({val}, {self.dtype_expr(dst)})"
        if masked:
            val = f"T.if_then_else({self.start(s.axis)} + {loop[s.axis]} < {_size(s.axis)}, {val}, {ident})"
        self.emit(f"{tmp}[{self.index(src.axes, loop)}] = {val}", depth + 1)
        self.emit(f"{fn}({tmp}, {self.lname[s.dst]}, dim={dim}, clear={clear})", depth)
