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


RUNNER = textwrap.dedent('''
    import json, sys
    import torch
    import leantile
    from leantile import ir
    for c in json.load(open(sys.argv[1])):
        k = leantile.compile(ir.parse(c["graph"]), candidate=c["candidate"], tiles=c["tiles"], tuned=False)
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
           str(d / "runner.py"), str(d / "cases.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=560, cwd=ROOT)
    out = r.stdout + r.stderr
    ran = [line.split()[1:] for line in r.stdout.splitlines() if line.startswith("RAN ")]
    missing = [p for p in paths if not any(" ".join(words).startswith(p) for words in ran)]
    assert r.returncode == 0 and not missing, (
        f"compute-sanitizer --tool {tool}: exit {r.returncode}; cases not reached: {missing}\n{out[-8000:]}")
    summary = [line for line in out.splitlines() if "SUMMARY" in line]
    assert summary and all(" 0 error" in line or "(0 errors" in line for line in summary), "\n".join(summary) + out[-4000:]
