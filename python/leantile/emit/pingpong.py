"""CUTLASS's ping-pong schedule for a GEMM with an elementwise epilogue (Kernel.pingpong; a mixin
of emit.kernel._KernelWriter).

With T.Pipelined's automatic warp specialisation a GEMM's epilogue runs on the warps that issue
its MMAs, so the tensor cores idle through it; at short contractions (GPT-2's c_fc, k = 768) the
epilogue is a fifth of the kernel. Here the kernel is persistent: one CTA per SM walks the output
tiles in groups of GROUP row tiles (their B column blocks stay in L2). A producer warpgroup loads
each tile's A and B blocks by TMA into a ring of `stages` shared buffers, guarded by full/free
mbarriers; two consumer warpgroups take the CTA's tiles alternately, each a whole tile on its own
accumulator, and take turns at the tensor cores (named barriers TURN): one's epilogue runs while
the other's mainloop issues.

Values are the plain loop's, statement for statement (the same prologue, the blocks accumulated
in the same order, the same epilogue): interp runs each tile so (tiles share nothing). A ring buffer goes back to
the producer only after the wgmma reading it has completed (T.wait_wgmma). The turn comes before
a consumer's first wait on a full barrier: the consumers share the ring, and a barrier's parity
tells only two phases apart; once the other has issued its mainloop, this one's first block is
at most one phase ahead. Measured: benchmarks/pingpong/pingpong_gemm_probe.py.
"""
from __future__ import annotations

from ..plan.passes import PINGPONG_BLOCK_M, PINGPONG_MAX_TILE, PINGPONG_THREADS, pingpong_parts
from .common import _size
from .overlap import PRODUCER_THREADS

PRODUCER_REGS, CONSUMER_REGS = 40, 232  # setmaxnreg: 2 x 128 x 232 + 128 x 40 <= 64 Ki registers
TURN = (8, 9)  # named barriers of the turns; TileLang's own partial syncs use ids below 8
GROUP = 8  # output row tiles walked together


class PingPongWriter:
    """write_pingpong: the persistent producer/consumer kernel in place of the plain one."""

    def write_pingpong(self, d: int):
        k, parts = self.k, pingpong_parts(self.plan, self.k)
        st = k.stream
        a_ring, b_ring = parts.load_a.dst, parts.load_b.dst
        self.ring, self.ring_size = {a_ring, b_ring}, "stages"
        rows, cols = parts.rows, parts.cols
        ext_r, ext_c, ext_k = self.extent(rows), self.extent(cols), self.extent(st.axis)
        self.pre.append(f"if {ext_r} != {PINGPONG_BLOCK_M} or threads != {PINGPONG_THREADS} or {ext_r} * {ext_c} > {PINGPONG_MAX_TILE}:")
        self.pre.append(f"    raise ValueError(f'the ping-pong schedule needs {PINGPONG_BLOCK_M} rows, threads={PINGPONG_THREADS} "
                        f"and a tile of at most {PINGPONG_MAX_TILE} elements; got {{{ext_r}}} x {{{ext_c}}} on {{threads}} threads')")
        n = {x: self.fresh(f"pp_{x}") for x in ("tm", "tn", "tiles", "ctas", "nk")}
        self.pre += [f"{n['tm']} = ({_size(rows)} + {ext_r} - 1) // {ext_r}  # {rows} tiles",
                     f"{n['tn']} = ({_size(cols)} + {ext_c} - 1) // {ext_c}  # {cols} tiles",
                     f"{n['tiles']} = {n['tm']} * {n['tn']}",
                     f"{n['ctas']} = min({n['tiles']}, sms)  # persistent: one CTA per SM of the GPU",
                     f"{n['nk']} = ({_size(st.axis)} + {ext_k} - 1) // {ext_k}  # {st.axis} blocks per tile"]
        self.pp_ctas = n["ctas"]  # the launch's CTA count (emit.kernel.write)
        cta, tx, ntl = self.cta_var, self.fresh("tx"), self.fresh("pp_ntl")
        t, i = self.fresh("pp_t"), self.fresh("pp_i")
        mine, slot, g, g0 = self.fresh("pp_mine"), self.fresh("slot"), self.fresh("g"), self.fresh("g0")
        full, free = self.fresh("full"), self.fresh("free")
        self.extra_allocs += [f"{full} = T.alloc_barrier(arrive_count=[{PRODUCER_THREADS}] * stages)",
                              f"{free} = T.alloc_barrier(arrive_count=[threads // 2] * stages)",
                              f"{mine} = T.alloc_local((1,), 'int32')"]
        for a in (rows, cols):
            self.grid_var[a] = self.fresh(f"pp_{a}")

        def coords(tile: str, depth: int):
            """The grid indices of output tile number `tile`: groups of GROUP row tiles, down
            the rows first."""
            r, first, nrows = self.fresh("pp_r"), self.fresh("pp_first"), self.fresh("pp_rows")
            span = f"{GROUP} * {n['tn']}"
            self.emit(f"{r} = {tile}", depth)
            self.emit(f"{first} = {r} // ({span}) * {GROUP}", depth)
            self.emit(f"{nrows} = T.min({n['tm']} - {first}, {GROUP})", depth)
            self.emit(f"{self.grid_var[rows]} = {first} + {r} % ({span}) % {nrows}", depth)
            self.emit(f"{self.grid_var[cols]} = {r} % ({span}) // {nrows}", depth)

        self.emit(f"{tx} = T.get_thread_binding()", d)
        self.emit(f"{ntl} = ({n['tiles']} - {cta} + {n['ctas']} - 1) // {n['ctas']}  # this CTA's tiles", d)
        self.emit(f"if {tx} >= threads:  # the producer warpgroup: A and B blocks into the ring", d)
        e = d + 1
        self.emit(f"T.set_max_nreg({PRODUCER_REGS}, 0)", e)
        self.emit(f"for {t} in T.serial({ntl}):", e)
        coords(f"{cta} + {t} * {n['ctas']}", e + 1)
        self.emit(f"for k in T.serial({n['nk']}):", e + 1)
        f = e + 2
        self.emit(f"{g} = {t} * {n['nk']} + k", f)
        self.emit(f"{slot} = {g} % stages", f)
        self.emit(f"T.mbarrier_wait_parity({free}[{slot}], (({g} // stages) % 2) ^ 1)", f)
        for load in (parts.load_a, parts.load_b):
            src = self.gslice(self.plan.global_buffer(load.src), self.local[load.dst].axes, f"load {load.src}->{load.dst}")
            self.emit(f"T.tma_copy({src}, {self.ring_slice(load.dst, slot)}, barrier={full}[{slot}])", f)
        self.emit(f"T.barrier_arrive({full}[{slot}])", f)
        own = dict(self.lname)
        twin = {b: (v if b in self.ring else self.fresh(f"{v}_1")) for b, v in own.items()}
        self.twins = {own[b]: twin[b] for b in own if b not in self.ring}
        acc = parts.gemm.acc
        regs = f"({ext_r} * {ext_c}) // 128"
        kw = self.gemm_kw(parts.gemm)
        for wg, names in ((1, twin), (0, own)):
            self.emit(f"elif {tx} >= threads // 2:  # consumer warpgroup 1: the CTA's tiles 1, 3, 5, ..." if wg else
                      "else:  # consumer warpgroup 0: the CTA's tiles 0, 2, 4, ...", d)
            self.lname = names
            self.emit(f"T.set_max_nreg({CONSUMER_REGS}, 1)", e)
            if wg == 1:
                self.emit(f"T.named_barrier_arrive({TURN[0]}, threads)  # warpgroup 0 takes the first turn", e)
            # the trip count through a local: TileLang 0.1.15's simplifier, bounding it to [0, 1],
            # dropped such a loop with its guard and ran one tile unconditionally (a hang)
            self.emit(f"{mine}[0] = ({ntl} - {wg} + 1) // 2", e)
            self.emit(f"for {i} in T.serial({mine}[0]):", e)
            f = e + 1
            self.emit(f"{t} = 2 * {i} + {wg}", f)
            coords(f"{cta} + {t} * {n['ctas']}", f)
            if k.prologue:
                self.emit("# prologue: once per tile", f)
                self.stmts(k.prologue, f)
            self.emit(f"T.sync_threads({TURN[0]} + {wg}, threads)  # this warpgroup's turn at the tensor cores", f)
            self.emit(f"{g0} = {t} * {n['nk']}", f)
            a0, b0 = self.ring_slice(a_ring, f"{g0} % stages"), self.ring_slice(b_ring, f"{g0} % stages")
            self.emit(f"T.mbarrier_wait_parity({full}[{g0} % stages], ({g0} // stages) % 2)", f)
            self.emit(f"T.wgmma_gemm({a0}, {b0}, {self.lname[acc]}{kw})  # {acc} += {parts.gemm.a} . {parts.gemm.b}", f)
            self.emit(f"for k in T.serial(1, {n['nk']}):", f)
            self.emit(f"{g} = {g0} + k", f + 1)
            self.emit(f"T.mbarrier_wait_parity({full}[{g} % stages], ({g} // stages) % 2)", f + 1)
            self.emit(f"T.wgmma_gemm({self.ring_slice(a_ring, f'{g} % stages')}, {self.ring_slice(b_ring, f'{g} % stages')}, "
                      f"{self.lname[acc]}{kw})", f + 1)
            self.emit("T.wait_wgmma(1)  # the block before is read: back to the producer", f + 1)
            self.emit(f"T.barrier_arrive({free}[({g} - 1) % stages])", f + 1)
            self.emit(f"if {t} + 1 < {ntl}:", f)
            self.emit(f"T.named_barrier_arrive({TURN[1]} - {wg}, threads)  # the other warpgroup's turn", f + 1)
            self.emit("T.wait_wgmma(0)", f)
            self.emit(f"T.warpgroup_fence_operand({self.lname[acc]}, num_regs={regs})", f)
            self.emit(f"T.barrier_arrive({free}[({g0} + {n['nk']} - 1) % stages])", f)
            if k.epilogue:
                self.emit("# epilogue, under the other warpgroup's mainloop", f)
                self.stmts(k.epilogue, f)
        self.lname = own
