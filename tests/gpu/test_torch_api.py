"""leantile.compile and leantile.torch on the device (marker gpu): the docs/pytorch.md example
runs and matches the reference, two leantile ops inside torch.compile(fullgraph=True) (inductor)
and inside a captured CUDA graph equal the eager result, and a second process compiles from
TileLang's disk cache faster than the first."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import leantile
import leantile.torch as lt
from leantile import architectures, reference
from leantile.runtime import TOLERANCE, rel_err

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_docs_pytorch_example_runs():
    text = (REPO / "docs" / "pytorch.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/pytorch.md", "exec"), {})


def test_attention_kernel_called_like_a_function():
    k = leantile.compile("attention")
    t = reference.random_inputs(k.graph, seed=3, device="cuda")
    out = k(t["Q"], t["K"], t["V"])
    ref = reference.evaluate(k.graph, t, compute_dtype=torch.float32)["out"]
    assert out.dtype == torch.float16 and rel_err(out, ref) <= TOLERANCE[torch.float16]
    with pytest.raises(leantile.GraphError, match="'Q'.*device"):
        k(t["Q"].cpu(), t["K"], t["V"])


def test_two_ops_in_torch_compile_fullgraph_and_cuda_graphs():
    sw = leantile.compile("swiglu", sizes={"m": 256, "d": 512, "n": 384})
    mm = leantile.compile("matmul", sizes={"m": 256, "d": 384, "n": 512})
    f, g = lt.op(sw), lt.op(mm)
    ts = reference.random_inputs(sw.graph, seed=1, device="cuda", scale=0.3)
    tm = reference.random_inputs(mm.graph, seed=2, device="cuda", scale=0.3)
    names = [n.name for n in mm.graph.inputs()]

    def model(x):
        h = f(x, ts["W_gate"], ts["W_up"])
        return torch.relu(g(h, tm[names[1]])) + x

    x = ts["X"]
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)  # inductor; a graph break raises
    assert rel_err(compiled(x), eager) < 1e-3
    static = x.clone()
    model(static)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(static)
    static.copy_(x * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, model(x * 0.5)) < 1e-3


def test_second_process_compiles_from_the_disk_cache(tmp_path):
    """Two fresh processes share an empty TileLang cache directory: the first compiles with
    nvcc, the second loads every kernel from disk (no "begins to compile" line) and is faster."""
    code = textwrap.dedent("""
        import json, sys, time
        t0 = time.perf_counter()
        import torch, leantile
        t1 = time.perf_counter()
        k = leantile.compile("rmsnorm", sizes={"m": 300, "d": 520, "n": 260})
        t2 = time.perf_counter()
        print(json.dumps({"import_s": t1 - t0, "compile_s": t2 - t1, "kernels": len(k.plan.kernels)}))
    """)
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "cache"), "TILELANG_LOG_LEVEL": "INFO"}
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append((json.loads(p.stdout.strip().splitlines()[-1]), p.stdout + p.stderr))
    print("compile cache:", [r for r, _ in runs])
    assert "begins to compile" in runs[0][1]
    assert "begins to compile" not in runs[1][1], "the second process compiled again"
    assert runs[1][0]["compile_s"] < runs[0][0]["compile_s"]
