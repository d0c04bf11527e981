"""Probe behind issue 18's skinny-GEMM item: a GEMM with few rows (m <= 16: decode-time
projections) computed as C^T = W^T X^T ("swap AB"), so the wgmma's 64-row M side runs over the
weight's columns n and its narrow N side (8 or 16) over the tokens, against the emitted form
(64-row tiles over m, 63 of 64 rows padding at m = 1, the tensor cores doing 4x-64x the needed
work). Each variant is one split-K slice kernel writing float32 partials (the split-sum that
follows is the same for both forms and timed once), checked against torch and timed with
do_bench_cudagraph beside cuBLAS (torch.matmul) in one process.

    python benchmarks/swap_ab/swap_ab_probe.py      (on a GPU; writes $OUT/swap-ab-probe.json)
"""
import itertools
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import tilelang
import tilelang.language as T

SHAPES = [(1, 4096, 6144), (16, 4096, 6144), (1, 4096, 14336), (16, 4096, 14336), (16, 14336, 4096),
          (1, 8192, 10240), (16, 8192, 28672)]


def gemm(m, k, n, bm, bn, bk, stages, splits, swap, threads=128):
    per = -(-(-(-k // bk)) // splits)  # k blocks per slice
    blocks = -(-k // bk)

    @T.prim_func
    def main(X: T.Tensor((m, k), "float16"), W: T.Tensor((k, n), "float16"),
             P: T.Tensor((splits, m, n), "float32")):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm), splits, threads=threads) as (bx, by, bz):
            X_s = T.alloc_shared((bm, bk), "float16")
            W_s = T.alloc_shared((bk, bn), "float16")
            if swap:
                acc = T.alloc_fragment((bn, bm), "float32")
            else:
                acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for ks in T.Pipelined(T.max(T.min(per, blocks - bz * per), 0), num_stages=stages):
                T.copy(X[by * bm:(by + 1) * bm, (bz * per + ks) * bk:(bz * per + ks + 1) * bk], X_s)
                T.copy(W[(bz * per + ks) * bk:(bz * per + ks + 1) * bk, bx * bn:(bx + 1) * bn], W_s)
                if swap:
                    T.gemm(W_s, X_s, acc, transpose_A=True, transpose_B=True)
                else:
                    T.gemm(X_s, W_s, acc)
            if swap:
                for i, j in T.Parallel(bm, bn):
                    if by * bm + i < m and bx * bn + j < n:
                        P[bz, by * bm + i, bx * bn + j] = acc[j, i]
            else:
                for i, j in T.Parallel(bm, bn):
                    if by * bm + i < m and bx * bn + j < n:
                        P[bz, by * bm + i, bx * bn + j] = acc[i, j]
    return main


def variants(m, k, n):
    out = []
    for splits in (1, 2, 4, 8):
        out.append(dict(bm=64, bn=256, bk=64, stages=3, splits=splits, swap=0))
    for bm, bn, stages, splits in itertools.product((8, 16) if m <= 8 else (16,),
                                                    (64, 128), (4, 8), (1, 2, 4)):
        out.append(dict(bm=bm, bn=bn, bk=64, stages=stages, splits=splits, swap=1))
    return out


def main():
    import torch
    import triton.testing as tt
    jobs = [(s, v) for s in SHAPES for v in variants(*s)]

    def make(job):
        (m, k, n), v = job
        try:
            return job, tilelang.compile(gemm(m, k, n, **v), out_idx=None, target="cuda")
        except Exception as e:
            return job, e
    with ThreadPoolExecutor(16) as pool:
        compiled = list(pool.map(make, jobs))
    rows = []
    out = os.environ.get("OUT", ".")
    for (m, k, n) in SHAPES:
        torch.manual_seed(0)
        X = torch.randn(m, k, device="cuda", dtype=torch.float16) * k ** -0.25
        W = torch.randn(k, n, device="cuda", dtype=torch.float16) * k ** -0.25
        ref = (X.float() @ W.float())
        cublas = tt.do_bench_cudagraph(lambda: X @ W)
        row = {"shape": [m, k, n], "cublas_ms": cublas, "variants": []}
        for (shape, v), kern in compiled:
            if shape != (m, k, n):
                continue
            if isinstance(kern, Exception):
                row["variants"].append({**v, "error": str(kern)[-300:]})
                continue
            P = torch.full((v["splits"], m, n), float("nan"), device="cuda")
            kern(X, W, P)
            err = ((P.sum(0) - ref).norm() / ref.norm()).item()
            ms = tt.do_bench_cudagraph(lambda: kern(X, W, P))
            row["variants"].append({**v, "ms": ms, "rel_err": err})
        best = sorted((x for x in row["variants"] if "ms" in x and x["rel_err"] < 1e-3), key=lambda x: x["ms"])
        print(f"{m}x{k}x{n} cublas {cublas:.4f}", flush=True)
        for x in best[:6] + [x for x in row["variants"] if not x.get("swap") and "ms" in x]:
            print("   ", {a: x[a] for a in ("bm", "bn", "stages", "splits", "swap")}, f"{x['ms']:.4f} err {x['rel_err']:.1e}")
        bad = [x for x in row["variants"] if "error" in x or x.get("rel_err", 0) >= 1e-3]
        print("    failed/wrong:", len(bad), [(x.get("bm"), x.get("bn"), x.get("error", x.get("rel_err")))
                                              for x in bad][:3], flush=True)
        rows.append(row)
        with open(os.path.join(out, "swap-ab-probe.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--lower":  # check here (no GPU): lower and nvcc one of each form
        sys.path.insert(0, "python")
        from leantile.lower import compile_cuda, lower_to_cuda
        for v in variants(1, 4096, 6144)[::5]:
            src = lower_to_cuda(gemm(1, 4096, 6144, **v))
            compile_cuda(src)
            print(v, "wgmma" if "wgmma" in src else "no wgmma", "tma" if "tma_load" in src else "no tma")
    else:
        main()
