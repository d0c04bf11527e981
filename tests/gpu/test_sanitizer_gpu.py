"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over one small plan of every
emitter path (marker gpu; skipped without CUDA or without compute-sanitizer, which ships beside
nvcc in the CUDA toolkit). The plans are compiled here first (TileLang's disk cache); one python
process per tool then compiles them again (cache hits) and launches each once, under the
sanitizer, its outputs and intermediates torch.empty (initcheck sees a read of anything no
kernel wrote), the caching allocator off (memcheck sees every tensor's own bounds). A tool's
run passes when the sanitizer reports no error and every case ran.

tests/emitter_paths.py's PATHS names the path each case is there for and how to tell that its plan
takes it (checked on the CPU by tests/cpu/test_emitter_paths.py, and here before the tools run).

    pytest -m gpu tests/gpu/test_sanitizer_gpu.py                  (on the device; ~1-3 min a tool)
    pytest -m gpu tests/gpu/test_sanitizer_gpu.py -k memcheck      (one tool)
    LEANTILE_SANITIZER_PATHS="gemm ping-pong,attention overlap" pytest ...   (some paths)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emitter_paths import PATHS, ROOT, Case

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


ONLY = [p.strip() for p in os.environ.get("LEANTILE_SANITIZER_PATHS", "").split(",") if p.strip()]


def _cases() -> list[Case]:
    unknown = set(ONLY) - {c.path for c in PATHS}
    assert not unknown, f"LEANTILE_SANITIZER_PATHS names no path: {sorted(unknown)}; paths: {[c.path for c in PATHS]}"
    return [c for c in PATHS if not ONLY or c.path in ONLY]


def _sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not found and d and Path(d, "bin", "compute-sanitizer").exists():
            found = str(Path(d, "bin", "compute-sanitizer"))
    return found


# initcheck does not count a TMA bulk store (cp.async.bulk.tensor, the async proxy) as writing
# global memory: a kernel reading what another stored through TMA is reported uninitialized
# (measured on the H100: split-k's partials, 20480 reports with TMA stores, 0 with TMA lowering off,
# the same output, and every partial written: NaN-poisoned, none left). So initcheck runs the
# plans with TMA lowering off (`no-tma`: the same plan, plain stores), and
# test_every_buffer_is_written_on_every_emitter_path checks the TMA build itself: every
# intermediate and output starts NaN and none is left.
RUNNER = textwrap.dedent('''
    import json, sys
    import torch
    import leantile
    from leantile import ir
    from leantile.emit import load_module
    no_tma = sys.argv[2:] == ["no-tma"]
    for c in json.load(open(sys.argv[1])):
        k = leantile.compile(ir.parse(c["graph"]), candidate=c["candidate"], tiles=c["tiles"], tuned=False)
        if no_tma:
            m = load_module(k.source, "no_tma")
            for kk in k.plan.kernels:
                m.PASS_CONFIGS[kk.name] = {**(m.PASS_CONFIGS.get(kk.name) or {}), "tl.disable_tma_lower": True}
            m.run(m.compile_kernels(target="cuda"), m.allocate(k.random_inputs(seed=0), device="cuda", fill=None))
        else:
            outs = k.run(k.random_inputs(seed=0))  # torch.empty outputs and intermediates
        torch.cuda.synchronize()
        print("RAN", c["path"], k.plan.candidate, [kk.name for kk in k.plan.kernels], flush=True)
''')


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every case compiled here (nvcc; the tools' processes then hit TileLang's disk cache), its
    plan checked for its path; the spec file the tools' processes read."""
    import leantile

    cases = _cases()

    def make(c):
        g = c.graph()
        k = leantile.compile(g, candidate=c.candidate, tiles=c.tiles, tuned=False)
        assert c.takes(k.plan), c.path
        return {"path": c.path, "graph": g.to_json(), "candidate": c.candidate, "tiles": c.tiles}
    with ThreadPoolExecutor(8) as pool:
        specs = list(pool.map(make, cases))
    d = tmp_path_factory.mktemp("sanitizer")
    (d / "cases.json").write_text(json.dumps(specs))
    (d / "runner.py").write_text(RUNNER)
    return d, [c.path for c in cases]


@pytest.mark.gpu
@pytest.mark.parametrize("tool", TOOLS)
def test_no_sanitizer_errors_on_any_emitter_path(tool, compiled):
    exe = _sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    d, paths = compiled
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [exe, "--tool", tool, "--error-exitcode", "99", "--print-limit", "30", sys.executable,
           str(d / "runner.py"), str(d / "cases.json"), *(["no-tma"] if tool == "initcheck" else [])]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=560, cwd=ROOT)
    out = r.stdout + r.stderr
    ran = [line.split()[1:] for line in r.stdout.splitlines() if line.startswith("RAN ")]
    missing = [p for p in paths if not any(" ".join(words).startswith(p) for words in ran)]
    assert r.returncode == 0 and not missing, (
        f"compute-sanitizer --tool {tool}: exit {r.returncode}; cases not reached: {missing}\n{out[-8000:]}")
    summary = [line for line in out.splitlines() if "SUMMARY" in line]
    assert summary and all(" 0 error" in line or "(0 errors" in line for line in summary), "\n".join(summary) + out[-4000:]


@pytest.mark.gpu
def test_every_buffer_is_written_on_every_emitter_path(compiled):
    """initcheck's part for the TMA build (see RUNNER): every intermediate and output of each
    case's plan, allocated NaN, holds no NaN after the launches (the inputs are finite)."""
    import torch
    import leantile
    from leantile import ir

    d, _ = compiled
    unwritten = []
    for c in json.loads((d / "cases.json").read_text()):
        k = leantile.compile(ir.parse(c["graph"]), candidate=c["candidate"], tiles=c["tiles"], tuned=False)
        m = k._c.module
        inputs = k.random_inputs(seed=0)
        tensors = m.allocate(inputs, device=k.device, fill=float("nan"))
        m.run(k._c.launchers, tensors)
        torch.cuda.synchronize()
        unwritten += [f"{c['path']}: {name} ({int(t.isnan().sum())} of {t.numel()} NaN)"
                      for name, t in tensors.items() if name not in inputs and bool(t.isnan().any())]
    assert not unwritten, unwritten
