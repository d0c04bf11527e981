"""Probe behind issue 18's rows item: a softmax over long rows (4096 x 65536 f16) in ONE kernel
against the shipped two-kernel plans (stats, then normalise: three passes over the row), torch
eager and torch.compile, GPU time (do_bench_cudagraph) in one process.

One kernel per row block, two loops over the row:
  reread: the second loop reads the row again from global memory (L2, which the first loop
          just filled: the rows in flight are a few tens of MB);
  cache:  the first loop also keeps the row in shared memory (input dtype), the second reads it
          there (one DRAM read; 128 KB of shared memory per row: one CTA per SM).

    python benchmarks/row_single_pass/row_single_pass_probe.py      (on a GPU; writes $OUT/row-single-pass.json)
"""
import json
import os
import sys

import torch
import tilelang
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax_kernel(rows, cols, bm, bn, threads, stages, cache):
    nblk = (cols + bn - 1) // bn

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float16"), Y: T.Tensor((rows, cols), "float16")):
        with T.Kernel(T.ceildiv(rows, bm), threads=threads) as bx:
            if cache:
                X_cache = T.alloc_shared((bm, nblk * bn), "float16")
            xf = T.alloc_fragment((bm, bn), "float32")
            e = T.alloc_fragment((bm, bn), "float32")
            yo = T.alloc_fragment((bm, bn), "float16")
            m = T.alloc_fragment((bm,), "float32")
            mp = T.alloc_fragment((bm,), "float32")
            ms = T.alloc_fragment((bm,), "float32")
            r = T.alloc_fragment((bm,), "float32")
            l = T.alloc_fragment((bm,), "float32")
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            for k in T.Pipelined(nblk, num_stages=stages):
                if cache:
                    T.copy(X[bx * bm:(bx + 1) * bm, k * bn:(k + 1) * bn], X_cache[0:bm, k * bn:(k + 1) * bn])
                    T.copy(X_cache[0:bm, k * bn:(k + 1) * bn], xf)
                else:
                    T.copy(X[bx * bm:(bx + 1) * bm, k * bn:(k + 1) * bn], xf)
                for i in T.Parallel(bm):
                    mp[i] = m[i]
                T.reduce_max(xf, m, dim=1, clear=False)
                for i in T.Parallel(bm):
                    ms[i] = m[i] * (-LOG2E)
                    r[i] = T.exp2(mp[i] * LOG2E + ms[i])
                for i, j in T.Parallel(bm, bn):
                    e[i, j] = T.exp2(xf[i, j] * LOG2E + ms[i])
                for i in T.Parallel(bm):
                    l[i] = l[i] * r[i]
                T.reduce_sum(e, l, dim=1, clear=False)
            for i in T.Parallel(bm):
                ms[i] = m[i] * (-LOG2E)
                r[i] = 1.0 / l[i]
            for k in T.Pipelined(nblk, num_stages=stages):
                if cache:
                    T.copy(X_cache[0:bm, k * bn:(k + 1) * bn], xf)
                else:
                    T.copy(X[bx * bm:(bx + 1) * bm, k * bn:(k + 1) * bn], xf)
                for i, j in T.Parallel(bm, bn):
                    yo[i, j] = T.exp2(xf[i, j] * LOG2E + ms[i]) * r[i]
                T.copy(yo, Y[bx * bm:(bx + 1) * bm, k * bn:(k + 1) * bn])

    return main


def main():
    import triton.testing as tt

    out = {}
    rows, cols = (int(a) for a in (sys.argv[1:3] if len(sys.argv) > 2 else (4096, 65536)))
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 3
    ref = torch.softmax(x.float(), -1)
    ms = lambda f: tt.do_bench_cudagraph(f, rep=100, return_mode="median")
    eager = lambda: torch.softmax(x, -1)
    comp = torch.compile(lambda: torch.softmax(x.float(), -1).to(torch.float16))
    comp()
    out["torch_eager"] = ms(eager)
    out["torch_compile"] = ms(comp)
    print("eager", round(out["torch_eager"], 4), "compile", round(out["torch_compile"], 4), flush=True)
    try:
        sys.path.insert(0, "python")
        from leantile.runtime import Kernel
        from leantile.sources import load_source
        from leantile.derive import derive
        g = load_source("examples/architectures/softmax_row.py:build", {"rows": rows, "cols": cols})
        for cand in ("online_row_split", "online_row_exp2"):
            k = Kernel(g, derive(g, cand), "probe", torch.device("cuda", 0))
            out[f"leantile_{cand}"] = k.benchmark({"X": x})
            print("leantile", cand, round(out[f"leantile_{cand}"], 4), flush=True)
    except Exception as e:  # the probe's own kernels still run
        print("leantile ERR", str(e)[:300], flush=True)
    configs = [(2, 4096, 256, 2, False), (2, 4096, 512, 2, False), (4, 4096, 512, 2, False),
               (2, 8192, 512, 2, False), (1, 8192, 256, 2, False), (4, 2048, 256, 3, False),
               (2, 2048, 256, 3, False), (1, 4096, 256, 1, True), (1, 4096, 256, 2, True),
               (1, 8192, 512, 1, True), (1, 2048, 256, 2, True)]
    from concurrent.futures import ThreadPoolExecutor

    def build(cfg):  # nvcc runs in a subprocess: compile the configurations side by side
        try:
            return tilelang.compile(softmax_kernel(rows, cols, *cfg), out_idx=[1])
        except Exception as e:
            return e
    with ThreadPoolExecutor(6) as pool:
        built = list(pool.map(build, configs))
    for (bm, bn, th, st, cache), kern in zip(configs, built):
        name = f"{'cache' if cache else 'reread'} bm={bm} bn={bn} threads={th} stages={st}"
        try:
            if isinstance(kern, Exception):
                raise kern
            y = kern(x)
            err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            t = ms(lambda: kern(x))
        except Exception as e:
            print(name, "ERR", str(e)[:300], flush=True)
            continue
        out[name] = {"ms": t, "rel_err": err}
        print(name, round(t, 4), f"err {err:.1e}", flush=True)
    path = os.path.join(os.environ.get("OUT", "."), "row-single-pass.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows, "cols": cols, "ms": out}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
