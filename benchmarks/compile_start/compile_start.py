"""Where the time of leantile.compile goes in a fresh process whose kernels are in TileLang's
disk cache (run twice; the second run is the cached one). Prints one JSON line per step.

    python benchmarks/compile_start/compile_start.py [SOURCE] [--sizes k=v ...]
"""
import json
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

t_torch = time.perf_counter()
import leantile  # noqa: E402
from leantile import runtime  # noqa: E402

t_leantile = time.perf_counter()
import tilelang  # noqa: E402,F401

t_tilelang = time.perf_counter()
src = sys.argv[1] if len(sys.argv) > 1 else "rmsnorm"
g = runtime._graph(src, None)
t_graph = time.perf_counter()
plan, how = runtime.choose_plan(g, gpu=torch.cuda.get_device_name())
t_plan = time.perf_counter()
source = runtime.emit_module(plan)
t_emit = time.perf_counter()
mod = runtime.load_module(source, "probe")
funcs = mod.build_kernel()
t_parse = time.perf_counter()
kernels = {n: tilelang.compile(f, target="cuda") for n, f in funcs.items()}
t_compile = time.perf_counter()
k = leantile.compile(g)
t_kernel = time.perf_counter()
print(json.dumps({"source": src, "kernels": len(funcs), "import_torch_s": t_torch - t0,
                  "import_leantile_s": t_leantile - t_torch, "import_tilelang_s": t_tilelang - t_leantile,
                  "load_graph_s": t_graph - t_tilelang, "choose_plan_s": t_plan - t_graph,
                  "emit_s": t_emit - t_plan, "tvmscript_parse_s": t_parse - t_emit,
                  "tilelang_compile_or_cache_s": t_compile - t_parse,
                  "leantile_compile_again_s": t_kernel - t_compile}))
