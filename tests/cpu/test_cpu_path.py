"""leantile.compile(device="cpu"): by default the graph's float reference (fast: the interpreter
took 255 s per call at docs/pytorch.md's sizes), interpret=True the plan itself, and a run whose
memory would pass the limit refused, with one GraphError, before anything is allocated."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import leantile
import leantile.torch as lt
from leantile import interp, reference, runtime
from leantile.dag import DagM
from leantile.runtime import TOLERANCE, rel_err
from strategies import user_graphs
from profiles import examples  # noqa: E402


def _gated_mlp(m=2048, d=1024, f=2816):
    """docs/pytorch.md's example graph, at its sizes by default."""
    g = DagM("gated_mlp", {"m": m, "d": d, "f": f})
    x = g.input("X", ["m", "d"], "f16")
    w_gate, w_up = g.input("W_gate", ["d", "f"], "f16"), g.input("W_up", ["d", "f"], "f16")
    g.output("out", g.mul(g.silu(g.matmul(x, w_gate, "d", "d")), g.matmul(x, w_up, "d", "d")))
    return g


def _no_interpreter(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("the plan interpreter ran")
    monkeypatch.setattr(interp, "run", refuse)


def _spy_interpreter(monkeypatch) -> list:
    calls, run = [], interp.run

    def spy(plan, inputs, *a, **kw):
        calls.append(plan)
        return run(plan, inputs, *a, **kw)
    monkeypatch.setattr(interp, "run", spy)
    return calls


def test_cpu_default_at_the_docs_sizes_runs_the_reference_and_equals_torch(monkeypatch):
    """docs/pytorch.md's gated MLP at its own sizes: the default CPU kernel runs the graph's
    reference (never the interpreter, whose einsum per tile step took 255 s here) and returns
    what torch computes, in the output's dtype and shape."""
    _no_interpreter(monkeypatch)
    k = leantile.compile(_gated_mlp(), device="cpu")
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(2048, 1024, generator=gen).half()
    W_gate = (torch.randn(1024, 2816, generator=gen) / 32).half()
    W_up = (torch.randn(1024, 2816, generator=gen) / 32).half()
    y = k(X, W_gate, W_up)
    assert y.dtype == torch.float16 and y.shape == (2048, 2816) and y.is_contiguous()
    want = torch.nn.functional.silu(X.float() @ W_gate.float()) * (X.float() @ W_up.float())
    assert rel_err(y, want) <= TOLERANCE[torch.float16]
    assert not k.interpret and "on cpu (reference)" in repr(k)


def test_interpret_true_runs_the_plan_and_the_default_does_not(monkeypatch):
    calls = _spy_interpreter(monkeypatch)
    g = _gated_mlp(m=5, d=7, f=9)
    t = reference.random_inputs(g.graph(), seed=1)
    k = leantile.compile(g, device="cpu", interpret=True)
    assert k.interpret and "on cpu (interpreter)" in repr(k)
    y = k(**t)
    assert calls == [k.plan]  # the derived plan itself, once
    ref = reference.evaluate(k.graph, t, compute_dtype=torch.float32)["out"]
    assert y.dtype == torch.float16 and rel_err(y, ref) <= TOLERANCE[torch.float16]
    assert k.verify(seed=2)["ok"] and len(calls) == 2
    d = leantile.compile(g, device="cpu")
    assert rel_err(d(**t), ref) <= TOLERANCE[torch.float16] and d.verify(seed=2)["ok"]
    assert len(calls) == 2  # the default never reached the interpreter
    with pytest.raises(leantile.GraphError, match="interpret= is a str"):
        leantile.compile(g, device="cpu", interpret="yes")


def test_the_default_returns_fresh_outputs_of_the_specs():
    """An output that is an input, and two outputs of one node: new tensors each (the kernels'
    outputs never share storage with an input or with each other)."""
    g = DagM("alias", {"m": 4, "t": 8})
    x = g.input("X", ["m", "t"], "f32")
    g.output("same", x)
    e = g.exp(x)
    g.output("a", e)
    g.output("b", e)
    k = leantile.compile(g, device="cpu")
    X = torch.randn(4, 8)
    out = k(X)
    ptrs = {n: t.data_ptr() for n, t in out.items()}
    assert len(set(ptrs.values()) | {X.data_ptr()}) == 4, ptrs
    assert torch.equal(out["same"], X) and torch.equal(out["a"], torch.exp(X)) and torch.equal(out["a"], out["b"])


@settings(max_examples=examples(10), deadline=None)
@given(gc=user_graphs(), seed=st.integers(0, 2**16))
def test_the_default_and_the_interpreter_agree_on_generated_graphs(gc, seed):
    """What users build: the default's outputs have the interpreter's dtypes and shapes (the
    kernel's output_specs) and its values within the output dtype's tolerance."""
    g, _ = gc
    k = leantile.compile(g, device="cpu")
    ki = leantile.compile(g, device="cpu", interpret=True)
    t = reference.random_inputs(g, seed=seed)
    out, want = k.run(k.bind((), t)), ki.run(ki.bind((), t))
    ref = reference.evaluate(g, t, compute_dtype=torch.float32)
    same = reference.evaluate(g, t, check=False)
    for o, spec in k.output_specs.items():
        assert (tuple(out[o].shape), out[o].dtype) == spec == (tuple(want[o].shape), want[o].dtype), o
        fin = torch.isfinite(ref[o])
        assert torch.equal(torch.isfinite(out[o]), fin), o
        assert rel_err(out[o][fin], ref[o][fin], same[o][fin]) <= TOLERANCE[out[o].dtype], o


def test_torch_op_and_module_on_both_cpu_paths(monkeypatch):
    calls = _spy_interpreter(monkeypatch)
    g = _gated_mlp(m=5, d=7, f=9)
    k, ki = leantile.compile(g, device="cpu"), leantile.compile(g, device="cpu", interpret=True)
    assert lt.op(k) is not lt.op(ki)  # one source and device, two paths: two ops
    t = reference.random_inputs(k.graph, seed=3)
    args = (t["X"], t["W_gate"], t["W_up"])
    assert not calls and rel_err(lt.op(ki)(*args), lt.op(k)(*args)) <= TOLERANCE[torch.float16]
    assert len(calls) == 1
    m = lt.Module(g, device="cpu", interpret=True)
    assert m.kernel.interpret and m(t["X"]).shape == (5, 9) and len(calls) == 2


def _no_allocation(monkeypatch):
    """Every way a CPU run allocates its tensors (inputs drawn, the reference, the interpreter)
    made to fail the test."""
    def refuse(*a, **kw):
        raise AssertionError("allocated before the memory check")
    for mod, name in ((interp, "run"), (reference, "evaluate"), (reference, "random_inputs"), (torch, "randn")):
        monkeypatch.setattr(mod, name, refuse)


@pytest.mark.parametrize("interpret", [False, True])
def test_a_run_past_the_limit_is_one_graph_error_before_allocating(monkeypatch, interpret):
    g = _gated_mlp(m=5, d=7, f=9)
    k = leantile.compile(g, device="cpu", interpret=interpret)
    t = reference.random_inputs(k.graph, seed=1)
    need, largest, _ = k.cpu_bytes()
    assert need > 0 and largest
    monkeypatch.setattr(runtime, "MAX_CPU_BYTES", need - 1)
    assert runtime.cpu_memory_limit() == need - 1
    _no_allocation(monkeypatch)
    for call, verify in ((lambda: k(**t), False), (lambda: k.run(t), False), (k.verify, True), (lambda: k.verify(t), True)):
        with pytest.raises(leantile.GraphError) as e:
            call()
        assert len(e.value.problems) == 1, e.value.problems
        msg = e.value.problems[0]
        _, largest, size = k.cpu_bytes(verify)
        assert f"on the CPU ({'the plan interpreter' if interpret else 'the graph' + chr(39) + 's reference'})" in msg, msg
        assert f"limit of {need - 1} bytes" in msg and f"largest tensor is {largest} ({size} bytes)" in msg, msg


@pytest.mark.parametrize("interpret", [False, True])
def test_verify_at_sizes_that_would_not_fit_is_refused_at_the_default_limit(monkeypatch, interpret):
    """swiglu at 2^15 on every axis: 2 GiB inputs, 4 GiB float32 values; verify would need tens of
    GiB (before, it drew its inputs first: past 5 GiB, or a torch RuntimeError)."""
    k = leantile.compile("swiglu", sizes={"m": 2**15, "d": 2**15, "n": 2**15}, device="cpu", interpret=interpret)
    _no_allocation(monkeypatch)
    assert runtime.cpu_memory_limit() <= runtime.MAX_CPU_BYTES == 8 << 30
    with pytest.raises(leantile.GraphError) as e:
        k.verify()
    (msg,) = e.value.problems
    assert "GiB, past the limit of" in msg and "the largest tensor is" in msg, msg
    need, largest, size = k.cpu_bytes(verify=True)
    assert need > 8 << 30 and size >= 2 << 30 and largest in msg


def test_the_reference_peak_follows_its_frees():
    """reference.peak_bytes: a chain of n exps holds one value, its argument and a copy of it at
    once, whatever n (evaluate frees each value after its last reader); an output is kept."""
    for n in (1, 3, 8):
        g = DagM("chain", {"m": 4, "t": 8})
        x = g.input("X", ["m", "t"], "f32")
        for _ in range(n):
            x = g.exp(x)
        g.output("y", x)
        peak, (size, node) = reference.peak_bytes(g.graph(), lambda i: torch.float32)
        assert peak == 3 * 4 * 8 * 4 and size == 4 * 8 * 4, (n, peak)
