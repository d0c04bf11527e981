"""`leantile bench --suite train` (issue 50) on the CPU at small sizes: every case builds, its
PyTorch version computes the graph (the eager step's gradients equal leantile's within the dtype's
tolerance), leantile's gradients equal the float32 reference's, and the suite writes its JSON and
table. The GPU run times them (torch.compile, SDPA backward, peak memory)."""
from __future__ import annotations

import json

import torch

from leantile import train_bench as TB
from leantile.tolerance import TOLERANCE, rel_err


def _small(name, shape):
    """Odd small sizes: rows 5, features 37, heads' width 8."""
    out = {a: (5 if v > 64 else v) for a, v in shape.items()}
    if "d_h" in out:
        out["d_h"] = 8
    if name in ("log_softmax", "cross_entropy", "layernorm_affine", "rmsnorm_gain"):
        out["d"] = 37
    return out


def test_every_case_trains_and_its_pytorch_version_agrees():
    for case in TB.cases(_small):
        row = TB.run_case(case, device="cpu", timer=lambda step: 0.0)
        assert row["ok"], (case.name, row["grad_rel_err"])
        # the eager version's gradients (its own step) equal leantile's: the baseline is the same math
        t = TB.leaves(case, "cpu", seed=0)
        gen = torch.Generator().manual_seed(1)
        outs = TB._outputs(case.eager(t)[0]())
        cts = [torch.randn(o.shape, generator=gen).to(o.dtype) for o in outs]
        TB.step_of(case.eager(t)[0], t, cts)()
        want = TB.reference_gradients(case, t, cts)
        for n, g in want.items():
            assert rel_err(t[n].grad.double(), g.double()) <= TOLERANCE[t[n].dtype], (case.name, n)


def test_the_suite_writes_its_rows(tmp_path):
    assert TB.run_train_suite(out=str(tmp_path), tags=["rows"], sizes_of=_small, device="cpu") == 0
    (path,) = tmp_path.glob("train-suite-cpu-*.json")
    d = json.loads(path.read_text())
    assert [r["case"] for r in d["rows"]] == ["layernorm_affine", "rmsnorm_gain", "log_softmax", "cross_entropy"]
    assert d["summary"]["ok"] == 4 and all("leantile" in r["ms"] for r in d["rows"])
    assert "| cross_entropy |" in path.with_suffix(".md").read_text()


def test_a_time_budget_starts_no_case_after_it(tmp_path):
    """--time-budget (the suites' option, the train suite's too): the first case runs, the ones
    after a spent budget are rows saying so, and the files are written."""
    assert TB.run_train_suite(out=str(tmp_path), tags=["rows"], sizes_of=_small, device="cpu", time_budget=1e-9) == 0
    (path,) = tmp_path.glob("train-suite-cpu-*.json")
    rows = json.loads(path.read_text())["rows"]
    assert "ms" in rows[0] and len(rows) == 4
    assert all(r["error"].startswith("not run: --time-budget") for r in rows[1:])


def test_selection_by_tag_and_name():
    all_cases = TB.cases(_small)
    assert {c.name for c in TB.select(all_cases, tags=["attention"])} == {
        "attention", "causal_attention", "sliding_window_attention", "gqa_attention"}
    assert [c.name for c in TB.select(all_cases, tags=["matmul"])] == ["matmul"]
    assert len(TB.select(all_cases, limit=3)) == 3


def _graph_tensors(fn, seen=None) -> list:
    """Tensors with an autograd graph that the callable `fn` holds in its closure (through nested
    closures, and the values of dicts and tuples there)."""
    seen = set() if seen is None else seen
    out = []
    stack = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if c.cell_contents is not None]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            out += [x] if x.grad_fn is not None else []
        elif isinstance(x, dict):
            stack += list(x.values())
        elif isinstance(x, (tuple, list)):
            stack += list(x)
        elif callable(x) and getattr(x, "__closure__", None):
            out += _graph_tensors(x, seen)
    return out


def test_no_contender_keeps_an_autograd_graph_between_steps():
    """A contender built from inputs that need a gradient holds no tensor with a graph: one would
    keep those inputs' gradient accumulators alive, made on the default stream, and every
    contender's CUDA-graph capture of a training step failed (gqa_attention's row: NaN GPU time,
    2026-11-30: its SDPA paths repeated K and V and viewed Q once, outside the step)."""
    for case in TB.cases(_small):
        t = TB.leaves(case, "cpu", seed=0)
        eager, vendor = case.eager(t)
        for name, fn in {"eager": eager, **vendor}.items():
            assert not _graph_tensors(fn), (case.name, name)
