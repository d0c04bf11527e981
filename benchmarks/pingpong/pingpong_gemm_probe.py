"""Issue 18 probe: a ping-pong GEMM + bias + gelu_tanh (CUTLASS's "pingpong" schedule) written by
hand in TileLang 0.1.15, against cuBLAS alone, addmm + gelu and TileLang's own pipelined GEMM.

The lnlg gap (benchmarks/lnlg_gap/results/lnlg-gap-h200-2026-11-27.md) is the GEMM's epilogue: with T.Pipelined's
automatic warp specialisation the epilogue runs on the warps that issue the MMAs, so the tensor
cores idle through it. Here one producer warpgroup streams A and B tiles into a ring (TMA, mbarriers)
and two consumer warpgroups each own a whole output tile, alternately: the mainloops take turns
(named barriers 8/9) so one warpgroup's epilogue runs while the other's wgmmas occupy the tensor
cores. The CTA is persistent (one per SM) and walks the output tiles in grouped order.

    python benchmarks/pingpong/pingpong_gemm_probe.py   (on a GPU; writes $OUT/pingpong.json)
    PP_SHAPES=0,1 PP_VARIANTS=pp_s4,pp_s3 python benchmarks/pingpong/pingpong_gemm_probe.py   (a subset)
    python benchmarks/pingpong/pingpong_gemm_probe.py --lower   (CPU: lower every variant to CUDA, sm_90)
"""
import json
import os
import sys

import tilelang
import tilelang.language as T

GELU_K = -2.302208198144325  # -2 * sqrt(2 / pi) * log2(e): gelu_tanh(z) = z / (1 + 2^(K (z + 0.044715 z^3)))


def pingpong_gemm(M, N, K, bm=128, bn=128, bk=64, stages=4, dtype="float16", sms=132, group=8,
                  staged_store=False, epilogue=True):
    """C = gelu_tanh(A @ B + bias), A (M, K), B (K, N); M, N, K multiples of the tiles."""
    acc = "float32"
    nk = (K + bk - 1) // bk
    tm, tn = (M + bm - 1) // bm, (N + bn - 1) // bn
    tiles = tm * tn
    grid = min(sms, tiles)
    c_regs = bm * bn // 128

    @T.macro
    def raster(tile, by, bx):
        """Grouped order: `group` rows of output tiles at a time share their B column blocks in L2."""
        gsize = group * tn
        first = (tile // gsize) * group
        rows = T.min(tm - first, group)
        by[0] = first + (tile % gsize) % rows
        bx[0] = (tile % gsize) // rows

    @T.macro
    def consumer(wg, A_s, B_s, Cf, Ds, bias, C, full, free, ntl, bid, by, bx, mine):
        if wg == 1:
            T.named_barrier_arrive(8, 256)  # warpgroup 0 takes the first turn
        # the trip count through a local: TileLang 0.1.15's simplifier, bounding it to [0, 1] here
        # (bid < grid), dropped the loop and its guard and ran one tile unconditionally (a hang)
        mine[0] = (ntl - wg + 1) // 2
        for i in T.serial(mine[0]):
            t = 2 * i + wg
            raster(bid + t * grid, by, bx)
            g0 = t * nk
            # the turn first: the two warpgroups share the ring, and a full barrier's parity tells
            # only two phases apart; once the other has issued its mainloop, this one's first
            # block is at most one phase ahead
            T.sync_threads(8 + wg, 256)  # my turn for the tensor cores
            T.mbarrier_wait_parity(full[g0 % stages], (g0 // stages) % 2)
            T.wgmma_gemm(A_s[g0 % stages, :, :], B_s[g0 % stages, :, :], Cf, clear_accum=True)
            for k in T.serial(1, nk):
                g = g0 + k
                T.mbarrier_wait_parity(full[g % stages], (g // stages) % 2)
                T.wgmma_gemm(A_s[g % stages, :, :], B_s[g % stages, :, :], Cf)
                T.wait_wgmma(1)
                T.barrier_arrive(free[(g - 1) % stages])
            if t + 1 < ntl:
                T.named_barrier_arrive(9 - wg, 256)  # the other warpgroup's turn
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(Cf, num_regs=c_regs)
            T.barrier_arrive(free[(g0 + nk - 1) % stages])
            if epilogue:
                for r, c in T.Parallel(bm, bn):
                    z = Cf[r, c] + bias[bx[0] * bn + c]
                    Cf[r, c] = z * T.fast_rcp(1.0 + T.exp2(GELU_K * (z + 0.044715 * z * z * z)))
            if staged_store:
                T.copy(Cf, Ds)
                T.copy(Ds, C[by[0] * bm, bx[0] * bn])
            else:
                T.copy(Cf, C[by[0] * bm, bx[0] * bn])

    @T.prim_func
    def kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), bias: T.Tensor((N,), dtype),
               C: T.Tensor((M, N), dtype)):
        with T.Kernel(grid, threads=384) as bid:
            A_s = T.alloc_shared((stages, bm, bk), dtype)
            B_s = T.alloc_shared((stages, bk, bn), dtype)
            C0 = T.alloc_fragment((bm, bn), acc)
            C1 = T.alloc_fragment((bm, bn), acc)
            D0 = T.alloc_shared((bm, bn), dtype)
            D1 = T.alloc_shared((bm, bn), dtype)
            by = T.alloc_local((1,), "int32")
            bx = T.alloc_local((1,), "int32")
            mine = T.alloc_local((1,), "int32")
            full = T.alloc_barrier(arrive_count=[128] * stages)
            free = T.alloc_barrier(arrive_count=[128] * stages)
            tx = T.get_thread_binding()
            ntl = (tiles - bid + grid - 1) // grid  # this CTA's output tiles
            if tx >= 256:  # producer
                T.set_max_nreg(40, 0)
                for t in T.serial(ntl):
                    raster(bid + t * grid, by, bx)
                    for k in T.serial(nk):
                        g = t * nk + k
                        s = g % stages
                        T.mbarrier_wait_parity(free[s], ((g // stages) % 2) ^ 1)
                        T.tma_copy(A[by[0] * bm:(by[0] + 1) * bm, k * bk:(k + 1) * bk], A_s[s, :, :], barrier=full[s])
                        T.tma_copy(B[k * bk:(k + 1) * bk, bx[0] * bn:(bx[0] + 1) * bn], B_s[s, :, :], barrier=full[s])
                        T.barrier_arrive(full[s])
            elif tx >= 128:
                T.set_max_nreg(232, 1)
                consumer(1, A_s, B_s, C1, D1, bias, C, full, free, ntl, bid, by, bx, mine)
            else:
                T.set_max_nreg(232, 1)
                consumer(0, A_s, B_s, C0, D0, bias, C, full, free, ntl, bid, by, bx, mine)

    return kernel


SHAPES = [(2048, 3072, 768, "bfloat16"), (1024, 4096, 1024, "float16"), (2048, 3072, 768, "float16"),
          (4096, 4096, 4096, "float16"), (4096, 11008, 4096, "float16")]
VARIANTS = {"pp_s4": dict(stages=4), "pp_s4_staged": dict(stages=4, staged_store=True), "pp_s3": dict(stages=3),
            "pp_s5": dict(stages=5), "pp_s4_bk32": dict(stages=8, bk=32)}


def lower_variants(make, variants: dict, shape: tuple, tag: str):
    """A probe's --lower: every variant's kernel (make(M, N, K, **kw)) lowered to CUDA for sm_90,
    written to /tmp/{tag}_{variant}.cu (CPU; checks that TileLang accepts the kernel)."""
    sys.path.insert(0, "python")
    from leantile.lower import lower_to_cuda
    for name, kw in variants.items():
        src = lower_to_cuda(make(*shape, **kw), "sm_90", {})
        path = f"/tmp/{tag}_{name}.cu"
        open(path, "w").write(src)
        print(name, "lowered", len(src), "chars ->", path)


def gemm_operands(M, N, K, dt):
    """Seeded A (M, K), B (K, N), bias (N) and an output C on the GPU, and the float32
    gelu_tanh(A B + bias) they should give."""
    import torch
    tdt = getattr(torch, dt)
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda", dtype=tdt) / 8
    B = torch.randn(K, N, device="cuda", dtype=tdt) / 8
    bias = torch.randn(N, device="cuda", dtype=tdt)
    C = torch.empty(M, N, device="cuda", dtype=tdt)
    ref = torch.nn.functional.gelu(A.float() @ B.float() + bias.float(), approximate="tanh")
    return A, B, bias, C, ref


def lower_all():
    lower_variants(pingpong_gemm, VARIANTS, (2048, 3072, 768), "pingpong")


def main():
    import torch
    import triton.testing as tt
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lnlg_gap"))
    from persistent_gemm_probe import make as make_plain
    out = os.environ.get("OUT", ".")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    shapes = [SHAPES[int(i)] for i in os.environ["PP_SHAPES"].split(",")] if os.environ.get("PP_SHAPES") else SHAPES
    variants = {n: VARIANTS[n] for n in os.environ["PP_VARIANTS"].split(",")} if os.environ.get("PP_VARIANTS") else VARIANTS
    for M, N, K, dt in shapes:
        A, B, bias, C, ref = gemm_operands(M, N, K, dt)
        row = {"shape": [M, N, K, dt], "gpu": torch.cuda.get_device_name(),
               "cublas_alone": tt.do_bench_cudagraph(lambda: A @ B, rep=100),
               "addmm_gelu": tt.do_bench_cudagraph(
                   lambda: torch.nn.functional.gelu(torch.addmm(bias, A, B), approximate="tanh"), rep=100)}
        for name, kw in variants.items():
            try:
                k = tilelang.compile(pingpong_gemm(M, N, K, dtype=dt, sms=sms, **kw), target="cuda")
                C.zero_()
                k(A, B, bias, C)
                torch.cuda.synchronize()
                err = ((C.float() - ref).abs().max() / ref.abs().max()).item()
                row[name] = {"ms": tt.do_bench_cudagraph(lambda: k(A, B, bias, C), rep=100), "rel_err": err}
            except Exception as e:  # a variant that fails to compile or launch is a finding, not a stop
                row[name] = "ERR " + str(e)[:300]
            print(M, N, K, dt, name, row[name], flush=True)
        for bn in (128, 256):  # TileLang's own pipelined GEMM, one tile per CTA (persistent_gemm_probe's "plain")
            k = make_plain(M, N, K, 128, bn, 64, 256, 3, dt, False)
            k(A, B, bias, C)
            torch.cuda.synchronize()
            err = ((C.float() - ref).abs().max() / ref.abs().max()).item()
            row[f"pipelined_128x{bn}_s3"] = {"ms": tt.do_bench_cudagraph(lambda: k(A, B, bias, C), rep=100), "rel_err": err}
        print(json.dumps(row), flush=True)
        rows.append(row)
        json.dump(rows, open(os.path.join(out, "pingpong.json"), "w"), indent=1)


if __name__ == "__main__":
    lower_all() if "--lower" in sys.argv else main()
