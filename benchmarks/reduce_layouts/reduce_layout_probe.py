"""Which register tiles TileLang 0.1.15 can reduce (T.reduce_sum), found by lowering for sm_90 on
the CPU: "parallel" = partials accumulated by T.Parallel adds over a pipelined loop and reduced
after it (what a deferred reduction emits: emit.reductions.accumulate_partials), "gemm" = a
T.gemm accumulator (FullRow). plan.verify.reduce_layout_problem states the rule these measure.

    python3 benchmarks/reduce_layouts/reduce_layout_probe.py [OUT.json]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import tilelang.language as T
from leantile.lower import lower_to_cuda
CFG={'tirx.use_async_copy': False, 'tl.disable_warp_specialized': True}
def par(R, C, threads, dim):
    out = C if dim == 0 else R
    @T.prim_func
    def k(W: T.Tensor((1024, 1024), 'float16'), O: T.Tensor((1024,), 'float32')):
        with T.Kernel(4, threads=threads) as bx:
            Ws = T.alloc_shared((R, C), 'float16')
            P = T.alloc_fragment((R, C), 'float32')
            c = T.alloc_fragment((out,), 'float32')
            T.fill(P, 0.0); T.clear(c)
            for kk in T.Pipelined(2, num_stages=2):
                T.copy(W[kk*R:(kk+1)*R, bx*C:(bx+1)*C], Ws)
                for i, j in T.Parallel(R, C):
                    P[i, j] = P[i, j] + T.cast(Ws[i, j], 'float32')
            T.reduce_sum(P, c, dim=dim, clear=False)
            T.copy(c, O[bx*out:(bx+1)*out])
    return k
def gemm(M, N, threads, dim):
    out = N if dim == 0 else M
    @T.prim_func
    def k(A: T.Tensor((1024, 1024), 'float16'), B: T.Tensor((1024, 1024), 'float16'), O: T.Tensor((4096,), 'float32')):
        with T.Kernel(4, threads=threads) as bx:
            As = T.alloc_shared((M, 64), 'float16')
            Bs = T.alloc_shared((64, N), 'float16')
            acc = T.alloc_fragment((M, N), 'float32')
            c = T.alloc_fragment((out,), 'float32')
            T.clear(acc)
            for kk in T.Pipelined(2, num_stages=2):
                T.copy(A[0:M, kk*64:(kk+1)*64], As)
                T.copy(B[kk*64:(kk+1)*64, bx*N:(bx+1)*N], Bs)
                T.gemm(As, Bs, acc, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(acc, c, dim=dim, clear=True)
            T.copy(c, O[bx*out:(bx+1)*out])
    return k
def main(out: str) -> None:
    rows = []
    E = (16, 32, 64, 96, 128, 160, 192, 256)
    jobs = [("parallel", R, C, 128, 0) for R in E for C in E] + \
           [("gemm", M, N, 128, d) for d in (0, 1) for M in (64, 128) for N in (32, 64, 96, 128, 192, 256)] + \
           [("gemm", 128, N, 256, d) for d in (0, 1) for N in (64, 96, 128, 192)] + \
           [("parallel", R, C, t, d) for t in (256, 128) for d in (1, 0) for R in (64, 96) for C in (32, 96, 128, 160)
            if not (t == 128 and d == 0)]
    for kind, R, C, t, d in jobs:
        try:
            lower_to_cuda((par if kind == "parallel" else gemm)(R, C, t, d), arch='sm_90', pass_configs=CFG); r = 'ok'
        except Exception as e:
            r = str(e).splitlines()[-1][-100:]
        rows.append(dict(kind=kind, rows=R, cols=C, threads=t, dim=d, result=r))
        print(kind, R, C, t, d, r, flush=True)
        json.dump(rows, open(out, 'w'), indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reduce-layouts.json")
