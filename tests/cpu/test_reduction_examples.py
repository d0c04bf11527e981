"""examples/reductions.py (issue 49's forms): at small sizes that divide no tile, every candidate
derive offers equals the graph in float64 (through the interpreter), and the PyTorch a user
writes for the case equals the graph too, so the suite's torch.compile baseline computes what
leantile's kernels are measured computing."""
from __future__ import annotations

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import torch

from leantile import interp, reference
from leantile.derive import candidates, derive
from plan_checks import rel_err

ROOT = Path(__file__).resolve().parents[2]
_spec = spec_from_file_location("leantile_reduction_examples", ROOT / "examples" / "reductions.py")
R = module_from_spec(_spec)
_spec.loader.exec_module(R)
CASES = R.cases()
SMALL = {"m": 5, "d": 37, "b": 6, "k": 9, "g": 3, "cg": 4, "n": 3, "c": 5, "h": 4, "w": 7, "pool": 3}


def _small(name):
    return R.graph(name, **{a: SMALL[a] for a in CASES[name].axes})


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_candidate_equals_the_graph(name):
    g = _small(name)
    inputs = reference.random_inputs(g, seed=2)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)
        for o in g.outputs:
            assert rel_err(out[o].double(), ref[o]) < 1e-9, (name, c.name, o)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_pytorch_baseline_computes_the_graph(name):
    g = _small(name)
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    got = CASES[name].torch({k: v.double() for k, v in inputs.items()})
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(g.outputs)
    for o, t in zip(g.outputs, got):  # outputs in the order the graph names them
        assert tuple(t.shape) == tuple(ref[o].shape), (name, o)
        assert rel_err(t, ref[o]) < 1e-9, (name, o, float(rel_err(t, ref[o])))


def test_the_benchmark_shapes_derive():
    """Every case derives at its benchmark shape (what the GPU suite compiles)."""
    for name in CASES:
        g = R.graph(name)
        assert candidates(g), name
