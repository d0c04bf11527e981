"""Issue 18 probe: is a persistent GEMM (TileLang T.Persistent, one CTA per SM looping over
output tiles) with the lnlg epilogue (bias + gelu_tanh) faster than one tile per CTA at short-k
shapes (GPT-2 c_fc m2048, the published lnlg)? Beside cuBLAS alone and addmm + gelu. Hand-written
TileLang, not leantile plans: the question is what TileLang can reach, before building it.

    python benchmarks/lnlg_gap/persistent_gemm_probe.py   (on a GPU; writes $OUT/persist.json)"""
import json
import os

import torch
import triton.testing as tt
import tilelang
import tilelang.language as T

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def make(M, N, K, bm, bn, bk, threads, stages, dtype, persistent, group=8):
    """The GEMM + bias + gelu_tanh kernel: one output tile per CTA, or one CTA per SM over all."""
    acc = "float32"

    @T.macro
    def tile(A, B, bias, C, A_s, B_s, C_l, C_s, by, bx):  # one output tile: the mainloop, the epilogue
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[k * bk, bx * bn], B_s)
            T.gemm(A_s, B_s, C_l)
        for i, j in T.Parallel(bm, bn):
            z = C_l[i, j] + bias[bx * bn + j]
            C_l[i, j] = z * T.fast_rcp(1.0 + T.exp2(-2.302208198144325 * (z + 0.044715 * z * z * z)))
        T.copy(C_l, C_s)
        T.copy(C_s, C[by * bm, bx * bn])

    @T.prim_func
    def plain(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), bias: T.Tensor((N,), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s, B_s = T.alloc_shared((bm, bk), dtype), T.alloc_shared((bk, bn), dtype)
            C_l, C_s = T.alloc_fragment((bm, bn), acc), T.alloc_shared((bm, bn), dtype)
            T.use_swizzle(10)
            tile(A, B, bias, C, A_s, B_s, C_l, C_s, by, bx)

    @T.prim_func
    def pers(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), bias: T.Tensor((N,), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(SMS, threads=threads) as (bid):
            A_s, B_s = T.alloc_shared((bm, bk), dtype), T.alloc_shared((bk, bn), dtype)
            C_l, C_s = T.alloc_fragment((bm, bn), acc), T.alloc_shared((bm, bn), dtype)
            for by, bx in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], SMS, bid, group):
                tile(A, B, bias, C, A_s, B_s, C_l, C_s, by, bx)
    return tilelang.compile(pers if persistent else plain, target="cuda")


def main():
    out = []
    cases = [(2048, 3072, 768, "bfloat16"), (1024, 4096, 1024, "float16"), (2048, 3072, 768, "float16")]
    variants = [(128, 128, 64, 256, 3), (128, 128, 64, 256, 4), (128, 256, 64, 256, 3), (128, 192, 64, 256, 3)]
    for M, N, K, dt in cases:
        tdt = getattr(torch, dt)
        A = torch.randn(M, K, device="cuda", dtype=tdt) / 8; B = torch.randn(K, N, device="cuda", dtype=tdt) / 8
        bias = torch.randn(N, device="cuda", dtype=tdt); C = torch.empty(M, N, device="cuda", dtype=tdt)
        ref = torch.nn.functional.gelu((A.float() @ B.float()) + bias.float(), approximate="tanh")
        row = {"shape": [M, N, K, dt], "cublas": tt.do_bench_cudagraph(lambda: A @ B, rep=100),
               "cublas_addmm_gelu": tt.do_bench_cudagraph(lambda: torch.nn.functional.gelu(torch.addmm(bias, A, B), approximate="tanh"), rep=100)}
        for v in variants:
            for p in (False, True):
                name = f"{'pers' if p else 'plain'}_{v[0]}x{v[1]}x{v[2]}_t{v[3]}_s{v[4]}"
                try:
                    k = make(M, N, K, *v, dt, p)
                    k(A, B, bias, C); torch.cuda.synchronize()
                    err = ((C.float() - ref).abs().max() / ref.abs().max()).item()
                    row[name] = (tt.do_bench_cudagraph(lambda: k(A, B, bias, C), rep=100), err)
                except Exception as e:
                    row[name] = str(e)[:200]
                print(name, row[name], flush=True)
        print(row, flush=True)
        out.append(row)
        json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "persist.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
