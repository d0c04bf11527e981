"""Each architecture carries its own torch baselines (`baselines(t)` in its module: the
built-ins and the examples); leantile bench uses them only for the graph the module builds.
The eager baseline must compute what the graph computes: a baseline of other math would make
every speed ratio in the bench tables meaningless."""
from pathlib import Path

import pytest
import torch

from leantile import architectures, reference
from leantile.bench import baselines
from leantile.dag import DagM
from leantile.sources import load_source
from leantile.tolerance import rel_err, tolerance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "architectures").glob("*.py"))
SMALL = {"h": 2, "t_q": 5, "t_kv": 7, "d_h": 8, "m": 3, "n": 6, "d": 5, "rows": 3, "cols": 9}


def _small(mod):
    return {a: SMALL.get(a, 4) for a in mod.DEFAULT_SIZES}


@pytest.mark.parametrize("source", list(architectures.NAMES) + [f"{p}:build" for p in EXAMPLES],
                         ids=lambda s: Path(s.split(":")[0]).stem)
def test_each_architecture_baseline_computes_its_graph(source):
    name = Path(source.split(":")[0]).stem
    mod = architectures.module(name) if name in architectures.NAMES else None
    sizes = _small(mod) if mod else None
    g = load_source(source, sizes) if mod else None
    if g is None:  # an example: its own DEFAULT_SIZES, shrunk
        import importlib.util
        spec = importlib.util.spec_from_file_location("ex_" + name, source.split(":")[0])
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        g = load_source(source, _small(m))
    t = reference.random_inputs(g, seed=2)
    eager, vendor = baselines(g, t, source)
    out = next(iter(g.outputs))
    assert eager.__module__ != "leantile.bench", f"{name}: fell back to the reference, no baseline of its own"
    want = reference.evaluate(g, t, compute_dtype=torch.float32)[out]
    same = reference.evaluate(g, t, check=False)[out]
    got = eager()
    assert got.shape == want.shape, name
    assert rel_err(got, want, same) <= tolerance(got.dtype), name


def test_a_graph_named_like_an_example_gets_its_own_reference():
    g = DagM("geglu", {"m": 3, "d": 4, "n": 5})  # the example's name, other math
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W_gate", ["d", "n"], "f32")
    g.output("out", g.exp(g.matmul(x, w, "d", "d")))
    g = g.graph()
    t = reference.random_inputs(g, seed=1)
    eager, vendor = baselines(g, t)
    assert vendor == {} and torch.allclose(eager(), torch.exp(t["X"] @ t["W_gate"]), rtol=1e-5)


def test_a_user_module_with_baselines_is_used_for_its_own_graph(tmp_path):
    src = tmp_path / "mine.py"
    src.write_text(
        "from leantile.dag import build_graph_with_output\n"
        "DEFAULT_SIZES = {'m': 4, 'n': 3}\n"
        "def body(g):\n"
        "    return g.exp(g.input('X', ['m', 'n'], 'f32'))\n"
        "def build(**s):\n"
        "    return build_graph_with_output('mine', {**DEFAULT_SIZES, **s}, body)\n"
        "def baselines(t):\n"
        "    import torch\n"
        "    return (lambda: torch.exp(t['X'])), {'vendor_exp': lambda: t['X'].exp()}\n")
    g = load_source(f"{src}:build")
    t = reference.random_inputs(g, seed=0)
    eager, vendor = baselines(g, t, f"{src}:build")
    assert set(vendor) == {"vendor_exp"} and torch.equal(eager(), torch.exp(t["X"]))
    other = load_source(f"{src}:build", {"m": 5})  # the module builds it at these sizes too
    assert set(baselines(other, reference.random_inputs(other, seed=0), f"{src}:build")[1]) == {"vendor_exp"}
