"""Which elements of the s26 campaign's failing score GEMM (gemm_3: decode attention, one query
row, t_kv = d_h = 8192, split over d_h in 2, a SIMT consumer of a warp-specialised TMA ring) are
wrong, run after run, and does the fault follow warp specialisation or TMA (pass configs)?
Compares each run with the float64 product of the same f16 inputs (the campaign's draw and a
N(0, 1) draw). Prints one line per config, draw and run. GPU.

    python3 benchmarks/stage_release_fence/gemm3_race_probe.py [FAILURE_INDEX] [CUDA_SOURCE_OUT]

Run at 032c61e (before the fence) it gave results/gemm3-race-h200-2026-11-28.log: 950-2060 of
16384 partial scores wrong per run, different every run, under the default and `no_tma` configs
(TileLang keeps TMA there); exact and identical over runs with warp specialisation off.
Since leantile.codegen_repair fences every stage release, the default config is exact too.
"""
import json, sys, math
from pathlib import Path
sys.path[:0] = ["python", "benchmarks", "tests"]
import torch, tilelang
from gpu_fuzz_parts.judge import _inputs
from leantile import ir
from leantile.derive import derive
from leantile.emit import emit_module
from leantile.runtime import emitted_module
from leantile.codegen_repair import MARKER_FLAG, install
install()
dev = torch.device("cuda")
f = json.loads(Path("benchmarks/results/gpu-fuzz-h200-2026-11-28-s26.json").read_text())["failures"][int(sys.argv[1]) if len(sys.argv) > 1 else 0]
g = ir.parse(f["graph"])
plan = derive(g, f["candidate"])
module = emitted_module(emit_module(plan))
params = {k["name"]: k["params"] for k in module.KERNELS}["gemm_3"]
print("params", params)
inputs = _inputs(g, f["seed"], f["scale"], dev, torch)
H, T_, D = inputs["K"].shape
S = [gl for gl in module.GLOBALS if gl["name"] == "matmul_3_partial"][0]["shape"][0]
print("split", S, "shape K", tuple(inputs["K"].shape))


def ref_of(Q, K):
    per = math.ceil(math.ceil(D / 64) / S) * 64
    return torch.stack([torch.einsum("hd,htd->ht", Q.double()[:, z*per:(z+1)*per], K.double()[:, :, z*per:(z+1)*per]) for z in range(S)])


configs = {"default": None, "no_ws": {"tl.disable_warp_specialized": True}, "no_tma": {"tl.disable_tma_lower": True},
           "no_ws_no_tma": {"tl.disable_warp_specialized": True, "tl.disable_tma_lower": True}}
funcs = module.build_kernel(pdl=False)
draws = {"campaign": (inputs["Q"], inputs["K"])}
gen = torch.Generator(device=dev).manual_seed(7)
draws["unit"] = ((torch.randn(inputs["Q"].shape, generator=gen, device=dev)).half(), (torch.randn(inputs["K"].shape, generator=gen, device=dev)).half())
for name, pc in configs.items():
    try:
        k = tilelang.compile(funcs["gemm_3"], target="cuda", compile_flags=[MARKER_FLAG], pass_configs=pc)
    except Exception as e:  # noqa: BLE001  (a config TileLang refuses is a line of the report)
        print(name, "compile failed", str(e).splitlines()[-1][:200]); continue
    for dname, (Q, K) in draws.items():
        ref = ref_of(Q, K)
        prev = None
        for r in range(4):
            out = torch.full((S, H, T_), float("nan"), device=dev)
            args = {"Q": Q, "K": K, "matmul_3_partial": out}
            k(*[args[p] for p in params]); torch.cuda.synchronize()
            o = out.double()
            err = (o - ref).abs()
            tol = 1e-4 * ref.abs().max().item() + 1e-6
            bad = (err > tol) | o.isnan()
            idx = bad.nonzero()
            rel = ((o - ref).norm() / ref.norm()).item()
            same = None if prev is None else bool(torch.equal(prev, out))
            line = f"{name:14s} {dname:8s} run {r}: rel {rel:.3g} bad {int(bad.sum())}/{bad.numel()} same_as_prev {same}"
            if len(idx):
                t = idx[:, 2]
                line += (f" | split {sorted(set(idx[:,0].tolist()))[:4]} bx {sorted(set((t // 128).tolist()))[:12]}"
                         f" lane {sorted(set((t % 128).tolist()))[:12]} max err {err.max().item():.3g} ref max {ref.abs().max().item():.3g}")
                e0 = idx[0].tolist()
                line += f" first {e0} got {o[tuple(e0)].item():.5g} want {ref[tuple(e0)].item():.5g}"
            print(line, flush=True)
            prev = out
    if name == "default" and len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(k.get_kernel_source())
