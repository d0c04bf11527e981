"""leantile.bench.compiled_baselines: every row's torch.compile baseline really compiles. The rows
share one code object (run_one's lambda over the row's function); before, torch._dynamo's recompile
limit (8) was hit after four rows and torch.compile silently ran eager, so suites compared later
rows with eager (the reductions suite of 2026-11-29 on an H200)."""
from __future__ import annotations

import torch

from leantile.bench import compiled_baselines


def test_twelve_rows_each_get_a_compiled_baseline():
    compiled = []
    for row in range(12):
        user = (lambda t, r=row: (t * (r + 1)).sum())  # a different function per row, as suites pass
        x = torch.randn(7, 5)

        def eager(x=x, user=user):
            return user(x)
        frames = []

        def count(gm, example_inputs):  # a backend that records each compiled graph
            frames.append(gm)
            return gm.forward
        fn = compiled_baselines(eager, backend=count)["compile"]
        assert torch.allclose(fn(), eager())
        compiled.append(len(frames))
    assert all(n >= 1 for n in compiled), compiled  # none ran eager without compiling
