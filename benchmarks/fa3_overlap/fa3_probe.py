"""Probe for issue 18: does FA3's intra-warpgroup overlap pay in TileLang 0.1.15 on Hopper?

A hand-written attention kernel (not emitted by leantile) with one producer warpgroup issuing
TMA loads of K and V into a ring of `stages` buffers, and two consumer warpgroups whose loop is
rotated as in FlashAttention-3: the QK^T of key block j and the P V of block j-1 are issued
asynchronously (T.wgmma_gemm) before the softmax of block j runs, so the softmax's exp2 on the
CUDA cores overlaps the tensor cores' P V. Buffers are released to the producer only after the
wgmma that reads them has completed (T.wait_wgmma): the automatic warp specialisation of
T.Pipelined releases right after the issue, which is a race for an asynchronous wgmma.

    python benchmarks/fa3_overlap/fa3_probe.py   (on a GPU; writes $OUT/fa3-probe.json)

Each variant is checked against float32 SDPA first; times are do_bench_cudagraph medians against
the shipped leantile default and cuDNN SDPA in the same process.
"""
import json
import os
import sys

import tilelang
import tilelang.language as T

LOG2E = 1.4426950408889634


def fa3_attention(h, t_q, t_kv, d, block_m=128, block_n=128, stages=2, pingpong=False, dtype="float16"):
    """softmax(Q K^T) V over (h, t, d) tensors; the scale is the caller's (leantile's graph has none)."""
    accum = "float32"
    nkv = (t_kv + block_n - 1) // block_n
    pad = t_kv % block_n != 0
    threads = 384  # warpgroups 0-1 consume, warpgroup 2 loads
    s_regs, acc_regs = block_m * block_n // 256, block_m * d // 256  # per consumer thread

    @T.macro
    def my_turn(wg):
        """Ping-pong (FA3): a warpgroup issues its GEMMs only after the other has issued its own,
        so one's softmax runs while the other's GEMMs occupy the tensor cores."""
        if pingpong:
            T.sync_threads(8 + wg, 256)

    @T.macro
    def your_turn(wg):
        if pingpong:
            T.named_barrier_arrive(9 - wg, 256)

    @T.macro
    def softmax(S, m, m_prev, m_neg, r, l, lsum, j):
        """S becomes exp2 of the scores of key block j against the running max; l and r updated."""
        for i in T.Parallel(block_m):
            m_prev[i] = m[i]
        if pad:
            for i, c in T.Parallel(block_m, block_n):
                S[i, c] = T.if_then_else(j * block_n + c < t_kv, S[i, c], -T.infinity(accum))
        T.reduce_max(S, m, dim=1, clear=False)
        for i in T.Parallel(block_m):
            m_neg[i] = T.if_then_else(m[i] == -T.infinity(accum), T.cast(0, accum), m[i]) * (-LOG2E)
            r[i] = T.exp2(m_prev[i] * LOG2E + m_neg[i])
        for i, c in T.Parallel(block_m, block_n):
            S[i, c] = T.exp2(S[i, c] * LOG2E + m_neg[i])
        T.reduce_sum(S, lsum, dim=1)
        for i in T.Parallel(block_m):
            l[i] = l[i] * r[i] + lsum[i]

    @T.prim_func
    def kernel(Q: T.Tensor((h, t_q, d), dtype), K: T.Tensor((h, t_kv, d), dtype),
               V: T.Tensor((h, t_kv, d), dtype), O: T.Tensor((h, t_q, d), dtype)):
        with T.Kernel(T.ceildiv(t_q, block_m), h, threads=threads) as (bx, by):
            Q_s = T.alloc_shared((block_m, d), dtype)
            K_s = T.alloc_shared((stages, block_n, d), dtype)
            V_s = T.alloc_shared((stages, block_n, d), dtype)
            O_s = Q_s  # Q is dead after the last QK^T: its buffer stages the output
            S = T.alloc_fragment((block_m, block_n), accum)
            P = T.alloc_fragment((block_m, block_n), dtype)
            acc = T.alloc_fragment((block_m, d), accum)
            m = T.alloc_fragment((block_m,), accum)
            m_prev = T.alloc_fragment((block_m,), accum)
            m_neg = T.alloc_fragment((block_m,), accum)
            r = T.alloc_fragment((block_m,), accum)
            l = T.alloc_fragment((block_m,), accum)
            lsum = T.alloc_fragment((block_m,), accum)
            q_full = T.alloc_barrier(arrive_count=128)
            k_full = T.alloc_barrier(arrive_count=[128] * stages)
            v_full = T.alloc_barrier(arrive_count=[128] * stages)
            k_free = T.alloc_barrier(arrive_count=[256] * stages)
            v_free = T.alloc_barrier(arrive_count=[256] * stages)
            tx = T.get_thread_binding()
            if tx >= 256:  # producer
                T.set_max_nreg(24, 0)
                T.tma_copy(Q[by, bx * block_m:(bx + 1) * block_m, :], Q_s, barrier=q_full)
                T.barrier_arrive(q_full)
                for j in T.serial(nkv):
                    s = j % stages
                    T.mbarrier_wait_parity(k_free[s], ((j // stages) % 2) ^ 1)
                    T.tma_copy(K[by, j * block_n:(j + 1) * block_n, :], K_s[s, :, :], barrier=k_full[s])
                    T.barrier_arrive(k_full[s])
                    T.mbarrier_wait_parity(v_free[s], ((j // stages) % 2) ^ 1)
                    T.tma_copy(V[by, j * block_n:(j + 1) * block_n, :], V_s[s, :, :], barrier=v_full[s])
                    T.barrier_arrive(v_full[s])
            else:  # consumers
                T.set_max_nreg(240, 1)
                T.fill(m, -T.infinity(accum))
                T.clear(l)
                T.clear(acc)
                T.mbarrier_wait_parity(q_full, 0)
                wg = tx // 128
                if pingpong and wg == 1:
                    T.named_barrier_arrive(8, 256)  # warpgroup 0 goes first
                # block 0: its QK^T alone (nothing to overlap yet)
                T.mbarrier_wait_parity(k_full[0], 0)
                my_turn(wg)
                T.wgmma_gemm(Q_s, K_s[0, :, :], S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                your_turn(wg)
                T.wait_wgmma(0)
                T.warpgroup_fence_operand(S, num_regs=s_regs)
                T.barrier_arrive(k_free[0])
                softmax(S, m, m_prev, m_neg, r, l, lsum, 0)
                T.copy(S, P)
                # steady state, peeled so that every wgmma is unconditional: ptxas serialises
                # wgmma whose outstanding count depends on a branch (C7514)
                for j in T.serial(1, nkv):
                    s = j % stages
                    sp = (j + stages - 1) % stages
                    T.mbarrier_wait_parity(k_full[s], (j // stages) % 2)
                    my_turn(wg)
                    T.wgmma_gemm(Q_s, K_s[s, :, :], S, transpose_B=True, clear_accum=True,
                                 policy=T.GemmWarpPolicy.FullRow)
                    T.mbarrier_wait_parity(v_full[sp], ((j - 1) // stages) % 2)
                    T.wgmma_gemm(P, V_s[sp, :, :], acc, policy=T.GemmWarpPolicy.FullRow)
                    your_turn(wg)
                    T.wait_wgmma(1)
                    T.warpgroup_fence_operand(S, num_regs=s_regs)
                    T.barrier_arrive(k_free[s])
                    softmax(S, m, m_prev, m_neg, r, l, lsum, j)
                    T.wait_wgmma(0)
                    T.warpgroup_fence_operand(acc, num_regs=acc_regs)
                    T.warpgroup_fence_operand(P, num_regs=s_regs // 2)
                    T.barrier_arrive(v_free[sp])
                    for i, c in T.Parallel(block_m, d):
                        acc[i, c] = acc[i, c] * r[i]
                    T.copy(S, P)
                # the last block's P V
                sl = (nkv - 1) % stages
                T.mbarrier_wait_parity(v_full[sl], ((nkv - 1) // stages) % 2)
                my_turn(wg)
                T.wgmma_gemm(P, V_s[sl, :, :], acc, policy=T.GemmWarpPolicy.FullRow)
                if pingpong and wg == 0:  # warpgroup 1's last turn; no arrival is left pending
                    T.named_barrier_arrive(9, 256)
                T.wait_wgmma(0)
                T.warpgroup_fence_operand(acc, num_regs=acc_regs)
                T.barrier_arrive(v_free[sl])
                for i, c in T.Parallel(block_m, d):
                    acc[i, c] = acc[i, c] / l[i]
                T.copy(acc, O_s)
                T.copy(O_s, O[by, bx * block_m:(bx + 1) * block_m, :])

    return kernel


SHAPES = [  # (name, h, t_q, t_kv, d)
    ("published_h16_t4096_d128", 16, 4096, 4096, 128),
    ("llama3_8b_h32_t2048_d128", 32, 2048, 2048, 128),
    ("h32_t1000_d128_partial", 32, 1000, 1000, 128),
    ("gpt2_h12_t2048_d64", 12, 2048, 2048, 64),
]
VARIANTS = {"bn128_s2": dict(block_n=128, stages=2), "bn128_s2_pp": dict(block_n=128, stages=2, pingpong=True),
            "bn176_s2_pp": dict(block_n=176, stages=2, pingpong=True), "bn64_s4_pp": dict(block_n=64, stages=4, pingpong=True),
            "bn128_s3_pp": dict(block_n=128, stages=3, pingpong=True)}


def main():
    import torch
    import torch.nn.functional as F
    import triton.testing as tt
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, "python")
    from leantile.runtime import compile as compile_kernel

    out = os.environ.get("OUT", ".")
    rows = []
    for name, h, tq, tkv, d in SHAPES:
        torch.manual_seed(0)
        q, k, v = (torch.randn(h, t, d, device="cuda", dtype=torch.float16) for t in (tq, tkv, tkv))
        ref = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None], scale=1.0)[0]
        row = {"case": name, "h": h, "t_q": tq, "t_kv": tkv, "d": d}

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0)
        try:
            row["cudnn_ms"] = tt.do_bench_cudagraph(sdpa, rep=100, return_mode="median")
        except Exception as e:
            row["cudnn_ms"] = "ERR " + str(e)[:100]
        try:
            lk = compile_kernel("attention", sizes={"h": h, "t_q": tq, "t_kv": tkv, "d_h": d}, tuned=False)
            fn = lambda: lk(q, k, v)  # noqa: E731
            row["leantile_err"] = (fn().float() - ref).abs().max().item()
            row["leantile_ms"] = tt.do_bench_cudagraph(fn, rep=100, return_mode="median")
            row["leantile_tiles"] = lk.plan.tiles
        except Exception as e:
            row["leantile_ms"] = "ERR " + str(e)[:200]
        for vname, kw in VARIANTS.items():
            try:
                kern = tilelang.compile(fa3_attention(h, tq, tkv, d, **kw), target="cuda")
                o = torch.full_like(q, float("nan"))
                kern(q, k, v, o)
                torch.cuda.synchronize()
                err = (o.float() - ref).abs().max().item()
                row[vname + "_err"] = err
                if not err < 2e-2:
                    row[vname + "_ms"] = "WRONG"
                    continue
                row[vname + "_ms"] = tt.do_bench_cudagraph(lambda: kern(q, k, v, o), rep=100, return_mode="median")
            except Exception as e:
                row[vname + "_ms"] = "ERR " + str(e)[:300]
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(os.path.join(out, "fa3-probe.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
