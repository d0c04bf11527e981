"""FlashAttention-3's schedule for an online-softmax stream (Kernel.overlap; a mixin of
emit.kernel._KernelWriter).

The kernel gets a third warpgroup, the producer: it loads each K and V block by TMA into a ring
of `stages` + 1 shared buffers (it runs `stages` blocks ahead, as the plain loop's producer does),
guarded by full/free mbarriers. The two consumer warpgroups (64 query
rows each) run the stream rotated: in step k they issue Q K_k^T and P_{k-1} V_{k-1} as
asynchronous wgmma, run the softmax of block k on the CUDA cores while P V runs, then rescale O
and write P_k. They also take turns at issuing (ping-pong, two named barriers), so one
warpgroup's softmax overlaps the other's GEMMs.

The values are the plain loop's, statement for statement: O gets +P_{k-1}V_{k-1} and then *r_k,
the order the plain loop applies them in (plan.overlap_parts checks that the moved
statements commute). A buffer goes back to the producer only after the wgmma reading it has
completed (T.wait_wgmma): TileLang's automatic warp specialisation of T.Pipelined releases it
right after the issue, which races with an asynchronous wgmma. Every wgmma is unconditional:
ptxas serialises wgmma whose number in flight depends on a branch (warning C7514).
"""
from __future__ import annotations

from ..plan import running_maxes
from ..plan.overlap_parts import overlap_parts
from ..plan.passes import OVERLAP_BLOCK_M, OVERLAP_THREADS
from .common import _size

PRODUCER_THREADS = 128
PRODUCER_REGS, CONSUMER_REGS = 24, 240  # setmaxnreg: the producer only issues TMA
TURN_BARRIERS = (8, 9)  # named barriers of the ping-pong; TileLang's own use ids below 8
PROLOGUE_BARRIER = 10  # the consumers, once the prologue has run


class OverlapWriter:
    """write_overlapped: the producer branch and the rotated consumer loop, in place of the
    prologue, the pipelined stream and the epilogue of the plain kernel."""

    def ring_slice(self, name: str, slot: str) -> str:
        return f"{self.lname[name]}[{slot}, :, :]"

    def regs(self, name: str, half: bool = False) -> str:
        """Registers per consumer thread of a 2-D accumulator fragment (both warpgroups share it)."""
        dims = " * ".join(self.dim_extent(d) for d in self.dims(self.local[name].axes))
        return f"({dims}) // threads{' // 2' if half else ''}"

    def wgmma(self, s, b_ref: str, depth: int):
        kw = self.gemm_kw(s) + (", clear_accum=True" if s.clear else "")
        self.emit(f"T.wgmma_gemm({self.lname[s.a]}, {b_ref}, {self.lname[s.acc]}{kw})  "
                  f"# {s.acc} {'=' if s.clear else '+='} {s.a} . {s.b}, asynchronous", depth)

    def write_overlapped(self, d: int):
        k, parts = self.k, overlap_parts(self.k)
        st = k.stream
        self.ring = {parts.load_k.dst, parts.load_v.dst}
        rows = next(t.param for t in k.grid if t.param == "block_m")
        self.pre.append(f"if {rows} != {OVERLAP_BLOCK_M} or threads != {OVERLAP_THREADS}:  # two warpgroups of 64 rows")
        self.pre.append(f"    raise ValueError(f'the overlapped schedule needs {rows}={OVERLAP_BLOCK_M}, "
                        f"threads={OVERLAP_THREADS}; got {{{rows}}}, {{threads}}')")
        tx, wg, ring = self.fresh("tx"), self.fresh("wg"), self.fresh("ring")
        self.ring_size = ring
        self.pre.append(f"{ring} = stages + 1  # K and V blocks in shared memory: the producer runs `stages` ahead")
        slot, prev, last = self.fresh("slot"), self.fresh("prev"), self.fresh("last")
        bars = {n: self.fresh(n) for n in ("k_full", "k_free", "v_full", "v_free")}
        for n, b in bars.items():  # full: the producer's 128 threads arrive; free: the consumers'
            count = PRODUCER_THREADS if n.endswith("full") else "threads"
            self.extra_allocs.append(f"{b} = T.alloc_barrier(arrive_count=[{count}] * {ring})")
        # the key blocks: all of them, or under key bounds (a mask) the range some row may keep;
        # `k` counts the blocks streamed (ring slots and barrier phases), block(k) is the key block
        nblk = f"T.ceildiv({_size(st.axis)}, {self.extent(st.axis)})"
        count, first = self.fresh("kv_count"), None
        if st.skip:
            lo, stop = self.key_range(st, nblk, depth=d)
            first = self.fresh("kv_first")
            self.emit(f"{first} = {lo}  # the key blocks before it and after {count} more are masked", d)
            self.emit(f"{count} = T.max({stop} - {first}, 0)", d)
            self.emit_interior(st, nblk, d)
        else:
            self.pre.append(f"{count} = ({_size(st.axis)} + {self.extent(st.axis)} - 1) // "
                            f"{self.extent(st.axis)}  # {st.axis} blocks")

        def block(i: str) -> str:
            return f"({first} + {i})" if first else i

        self.emit(f"{tx} = T.get_thread_binding()", d)
        self.emit(f"if {tx} >= threads:  # the producer warpgroup: K and V blocks into the ring", d)
        e = d + 1
        self.emit(f"T.set_max_nreg({PRODUCER_REGS}, 0)", e)
        self.emit(f"for k in T.serial({count}):", e)
        self.emit(f"{slot} = k % {ring}", e + 1)
        self.kvar = block("k")
        for load, full, free in ((parts.load_k, "k_full", "k_free"), (parts.load_v, "v_full", "v_free")):
            g = self.plan.global_buffer(load.src)
            src = self.gslice(g, self.local[load.dst].axes, f"load {load.src}->{load.dst}")
            self.emit(f"T.mbarrier_wait_parity({bars[free]}[{slot}], ((k // {ring}) % 2) ^ 1)", e + 1)
            self.emit(f"T.tma_copy({src}, {self.ring_slice(load.dst, slot)}, barrier={bars[full]}[{slot}])", e + 1)
            self.emit(f"T.barrier_arrive({bars[full]}[{slot}])", e + 1)
        self.emit("else:  # two consumer warpgroups, 64 query rows each", d)
        self.emit(f"T.set_max_nreg({CONSUMER_REGS}, 1)", e)
        if k.prologue:
            self.emit("# prologue: once per tile", e)
            self.stmts(k.prologue, e)
        t0, t1 = TURN_BARRIERS
        self.emit(f"T.sync_threads({PROLOGUE_BARRIER}, threads)  # the prologue's shared writes (Q) before any wgmma", e)
        self.emit(f"{wg} = {tx} // 128", e)
        if first:  # a query tile whose every key is masked streams nothing (as the plain loop)
            self.emit(f"if {count} > 0:", e)
            e += 1
        self.emit(f"if {wg} == 1:", e)
        self.emit(f"T.named_barrier_arrive({t0}, threads)  # warpgroup 0 issues first", e + 1)
        s_regs, o_regs = self.regs(parts.gemm_s.acc), self.regs(parts.gemm_o.acc)
        p_regs = self.regs(parts.gemm_o.a, half=True)
        masked = dict(self.masked)

        def issue_s(slot_expr, phase, depth):
            self.emit(f"T.mbarrier_wait_parity({bars['k_full']}[{slot_expr}], {phase})", depth)
            self.emit(f"T.sync_threads({t0} + {wg}, threads)  # this warpgroup's turn at the tensor cores", depth)
            self.wgmma(parts.gemm_s, self.ring_slice(parts.load_k.dst, slot_expr), depth)

        def softmax(slot_expr, depth):
            self.emit(f"T.warpgroup_fence_operand({self.lname[parts.gemm_s.acc]}, num_regs={s_regs})", depth)
            self.emit(f"T.barrier_arrive({bars['k_free']}[{slot_expr}])", depth)
            self.masked = dict(masked)
            self.stmts(parts.softmax, depth)

        def finish_o(slot_expr, depth):
            self.emit("T.wait_wgmma(0)", depth)
            self.emit(f"T.warpgroup_fence_operand({self.lname[parts.gemm_o.acc]}, num_regs={o_regs})", depth)
            self.emit(f"T.warpgroup_fence_operand({self.lname[parts.gemm_o.a]}, num_regs={p_regs})", depth)
            self.emit(f"T.barrier_arrive({bars['v_free']}[{slot_expr}])", depth)

        self.running_max = running_maxes(k)  # read as 0 while -inf, as in the plain stream body
        self.emit("# the first key block: its Q K^T alone", e)
        self.kvar = block("0")
        issue_s("0", "0", e)
        self.emit(f"T.named_barrier_arrive({t1} - {wg}, threads)", e)
        self.emit("T.wait_wgmma(0)", e)
        softmax("0", e)
        self.stmts(parts.moved, e)
        self.emit("# the next ones: Q K_k^T and P_(k-1) V_(k-1) in flight while the softmax of block k runs", e)
        self.emit(f"for k in T.serial(1, {count}):", e)
        f = e + 1
        self.kvar = block("k")
        self.emit(f"{slot} = k % {ring}", f)
        self.emit(f"{prev} = (k + {ring} - 1) % {ring}", f)
        issue_s(slot, f"(k // {ring}) % 2", f)
        self.emit(f"T.mbarrier_wait_parity({bars['v_full']}[{prev}], ((k - 1) // {ring}) % 2)", f)
        self.wgmma(parts.gemm_o, self.ring_slice(parts.load_v.dst, prev), f)
        self.emit(f"T.named_barrier_arrive({t1} - {wg}, threads)  # the other warpgroup's turn", f)
        self.emit("T.wait_wgmma(1)  # Q K_k^T done; P V may still run", f)
        softmax(slot, f)
        finish_o(prev, f)
        self.stmts(parts.moved, f)
        self.emit("# the last block's P V", e)
        self.emit(f"{last} = ({count} - 1) % {ring}", e)
        self.emit(f"T.mbarrier_wait_parity({bars['v_full']}[{last}], (({count} - 1) // {ring}) % 2)", e)
        self.emit(f"T.sync_threads({t0} + {wg}, threads)", e)
        self.wgmma(parts.gemm_o, self.ring_slice(parts.load_v.dst, last), e)
        self.emit(f"if {wg} == 0:  # warpgroup 1's last turn (none is left pending)", e)
        self.emit(f"T.named_barrier_arrive({t1}, threads)", e + 1)
        finish_o(last, e)
        self.running_max, self.kvar, self.interior = frozenset(), "k", None
        e = d + 1
        self.epilogue_temps = len(self.temps)
        if k.epilogue:
            self.emit("# epilogue", e)
            self.stmts(k.epilogue, e)
