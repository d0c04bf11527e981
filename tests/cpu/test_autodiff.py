"""Reverse mode (issue 50): the backward graph leantile.autodiff.vjp writes computes the gradients
torch's autograd computes through the forward's float64 reference (tests/grad_oracle.py), for every
op of the registry, every built-in, every example and the generated families; the backward is an
ordinary graph (JSON round trip, derived, interpreted); leantile.torch ops train (eager and under
torch.compile) and lt.Module parameters take an optimizer's step."""
from __future__ import annotations

import math
import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, reject, settings, strategies as st

from leantile import architectures, interp, ir, reference
from leantile.autodiff import vjp
from leantile.dag import DagM, build_graph_with_output
from leantile.derive import candidates, derive
from leantile.runtime import choose_plan
from leantile.ir import ops

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import grad_oracle  # noqa: E402
import soundness_graphs  # noqa: E402
import strategies  # noqa: E402
from profiles import examples  # noqa: E402

POSITIVE = {"log", "sqrt", "rsqrt", "recip"}  # defined (and differentiable) on positives only


def _example(which: str):
    spec = spec_from_file_location(f"leantile_{which}_examples_ad", ROOT / "examples" / f"{which}.py")
    m = module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _f64(g: ir.Graph) -> ir.Graph:
    """g on float64 inputs, or the example rejected where a cast to f32 feeds a GEMM beside an f64
    operand (no f64 twin of that graph)."""
    try:
        return strategies.inputs_in(g, "f64")
    except ir.GraphError:
        reject()


def _assert_agrees(g: ir.Graph, seed: int = 0, wrt=None):
    bad = grad_oracle.problems(g, seed, wrt)
    assert not bad, bad
    _assert_in_input_order(g, wrt)


def _assert_in_input_order(g: ir.Graph, wrt=None):
    """Every gradient is stored in its input's layout (its axes in the input's order): permuted,
    its kernel stores with a stride (the cross-entropy backward's [d, m] gradient of X [m, d]: 10x
    torch.compile's time on an H200) and the caller gets a permuted view."""
    bw = vjp(g, wrt=wrt)
    axes = {n.name: n.axes for n in g.inputs()}
    for name, gr in bw.grads.items():
        assert gr.axes == tuple(a for a in axes[name] if a in gr.axes), (name, gr.axes, axes[name])


def test_every_op_of_a_graph_has_a_vjp():
    assert [o.name for o in ops.ROWS if o.ir and o.vjp is None] == []


def _op_graph(op: str, same: bool, sizes: dict) -> ir.Graph:
    """y = op(x) or op(x, z) (z [j] broadcast against x [i, j], or x itself: ties), select(c, x, z)."""
    def body(g):
        x = g.input("X", ["i", "j"], "f64")
        if op in POSITIVE:
            x = g.add(g.abs(x), g.const("0.5"))
        if ops.BY_NAME[op].arity == 1:
            return g._unary(op, x)
        z = x if same else g.input("Z", ["j"], "f64")
        if op == "select":
            return g.select(g.gt(g.input("C", ["i"], "f64"), g.const("0.0")), x, z)
        return g._binary(op, x, z)
    return build_graph_with_output(f"op_{op}", sizes, body)


@pytest.mark.parametrize("op", [o.name for o in ops.ROWS if o.ir])
@settings(max_examples=examples(6), deadline=None)
@given(same=st.booleans(), i=st.integers(1, 5), j=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_each_op_vjp_equals_torch_autograd(op, same, i, j, seed):
    """Broadcast operands (summed over the broadcast axis), ties (max(x, x) splits evenly, as
    torch's maximum does), abs at 0 (gradient 0), comparisons (no gradient)."""
    g = _op_graph(op, same and ops.BY_NAME[op].arity > 1, {"i": i, "j": j})
    _assert_agrees(g, seed)


def test_abs_at_zero_and_max_ties_follow_torch():
    g = build_graph_with_output("ties", {"i": 4}, lambda g: g.add(
        g.abs(g.mul(g.input("X", ["i"], "f64"), g.const("0.0"))),
        g.max(g.input("Y", ["i"], "f64"), g.input("Y2", ["i"], "f64"))))
    x = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    inputs = {"X": x, "Y": x.clone(), "Y2": x.clone()}  # Y == Y2 everywhere: every position a tie
    cts = {"out": torch.arange(1, 5, dtype=torch.float64)}
    got = grad_oracle.leantile_grads(g, inputs, cts)
    assert torch.equal(got["X"], torch.zeros(4, dtype=torch.float64))  # |0 x|' = 0
    assert torch.equal(got["Y"], cts["out"] / 2) and torch.equal(got["Y2"], cts["out"] / 2)


def test_a_max_reduction_shares_its_gradient_between_tied_maxima():
    g = build_graph_with_output("amax", {"i": 2, "j": 3}, lambda g: g.red("max", g.input("X", ["i", "j"], "f64"), "j"))
    x = torch.tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 3.0]], dtype=torch.float64)
    got = grad_oracle.leantile_grads(g, {"X": x}, {"out": torch.tensor([2.0, 3.0], dtype=torch.float64)})
    assert torch.equal(got["X"], torch.tensor([[0.0, 1.0, 1.0], [3.0, 0.0, 0.0]], dtype=torch.float64))


ODD = {"m": 5, "d": 7, "n": 3, "h": 2, "t_q": 5, "t_kv": 6, "d_h": 4, "h_kv": 1, "g": 3, "k": 9, "f": 5}


@pytest.mark.parametrize("name", architectures.NAMES)
def test_every_builtin_differentiates(name):
    sizes = {a: ODD.get(a, min(v, 6)) for a, v in architectures.module(name).DEFAULT_SIZES.items()}
    g = strategies.inputs_in(architectures.build(name, **sizes), "f64")
    _assert_agrees(g, seed=1)
    _assert_agrees(g, seed=2, wrt=[g.inputs()[-1].name])  # one input alone: the others' chains pruned


SMALL = {"m": 5, "d": 37, "b": 6, "k": 9, "g": 3, "cg": 4, "n": 3, "c": 5, "h": 4, "w": 7, "pool": 3}


def test_every_example_differentiates():
    """examples/fusion.py (norms, activations, losses) and examples/reductions.py (issue 49's forms)."""
    fusion, reductions = _example("fusion"), _example("reductions")
    graphs = [fusion.graph(n, **{a: SMALL.get(a, 4) for a in fusion.CASES[n][1]}) for n in fusion.CASES]
    graphs += [reductions.graph(n, **{a: SMALL.get(a, 4) for a in c.axes}) for n, c in reductions.cases().items()]
    for g in graphs:
        g = strategies.inputs_in(g, "f64")
        labels = [n.name for n in g.inputs() if n.name in ("label", "T", "target", "labels")]
        _assert_agrees(g, seed=3, wrt=[n.name for n in g.inputs() if n.name not in labels] or None)


@pytest.mark.parametrize("make", [soundness_graphs.layer_norm_weight_twice, soundness_graphs.scaled_softmax_stats_out,
                                  soundness_graphs.renamed_contraction, soundness_graphs.const_output,
                                  soundness_graphs.split_softmax_row_stats_out, soundness_graphs.norm_rows_two_weights,
                                  soundness_graphs.dependent_dual_gemm, soundness_graphs.attention_computed_q])
def test_hand_built_structures_differentiate(make):
    """Several outputs (each with its cotangent), a renamed contraction (an identity contraction
    renames the gradient's axis), a weight read twice, a constant output."""
    _assert_agrees(strategies.inputs_in(make(), "f64"), seed=4)


_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


@settings(max_examples=examples(40, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(g=strategies.random_graphs(dtypes=("f64",)), seed=st.integers(0, 2 ** 16))
def test_random_graphs_differentiate(g, seed):
    _assert_agrees(g, seed)


@settings(max_examples=examples(25, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(gc=strategies.user_graphs(), seed=st.integers(0, 2 ** 16))
def test_user_graphs_differentiate(gc, seed):
    """Attention (masks, biases, GQA, decode), softmax rows, norms into GEMMs, GEMM epilogues and
    chains as users write them (issue 13's classes), in float64."""
    _assert_agrees(_f64(gc[0]), seed)


@settings(max_examples=examples(12, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(g=strategies.structured_graphs(), seed=st.integers(0, 2 ** 16))
def test_structured_graphs_differentiate(g, seed):
    _assert_agrees(_f64(g), seed)


# -- the backward is an ordinary graph --------------------------------------------------------------

@pytest.mark.parametrize("name", architectures.NAMES)
def test_backward_graphs_round_trip_derive_and_interpret(name):
    """JSON round trip; the default plan of the backward, run by the plan interpreter in float64,
    equals the backward's reference: every derive rule applies to it unchanged."""
    sizes = {a: ODD.get(a, min(v, 6)) for a, v in architectures.module(name).DEFAULT_SIZES.items()}
    bw = vjp(architectures.build(name, **sizes)).graph
    assert ir.Graph.model_validate_json(bw.to_json()) == bw
    inputs = reference.random_inputs(bw, seed=5)
    want = reference.evaluate(bw, inputs, compute_dtype=torch.float64)
    got = interp.run(choose_plan(bw)[0], inputs, dtype=torch.float64)  # the plan leantile.compile ships
    for o in bw.outputs:
        err = (got[o].double() - want[o]).abs().max().item() / (1 + want[o].abs().max().item())
        assert err < 1e-9, (name, o, err)


@settings(max_examples=examples(8, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(gc=strategies.user_graphs(), seed=st.integers(0, 2 ** 16))
def test_generated_backwards_derive_and_interpret(gc, seed):
    """The backward of a generated user graph derives (the plan leantile.compile ships: the first
    candidate that fits, a candidate over the shared memory refused cleanly) and the plan, run by
    the interpreter in float64, equals the backward graph's reference."""
    bw = vjp(_f64(gc[0])).graph
    if bw is None:
        return
    inputs = reference.random_inputs(bw, seed=seed)
    want = reference.evaluate(bw, inputs, compute_dtype=torch.float64)
    got = interp.run(choose_plan(bw)[0], inputs, dtype=torch.float64)  # the plan leantile.compile ships
    for o in bw.outputs:
        finite = torch.isfinite(want[o])
        err = (got[o].double() - want[o]).abs()[finite]
        assert not err.numel() or err.max().item() <= 1e-9 * (1 + want[o][finite].abs().max().item()), (bw.name, o)


def test_saved_values_replace_their_recomputation():
    """vjp(save=...): the norm's 1/rms and the GEMM's product come from the forward (its extra
    outputs, forward_saving) instead of being recomputed; the gradients are the same."""
    from leantile.autodiff import forward_saving
    g = strategies.inputs_in(_norm_mlp(), "f64")
    keep = {n.id for n in g.nodes if isinstance(n, (ir.Unary, ir.Matmul)) and n.op in ("rsqrt", "matmul")}
    bw = vjp(g, save=keep)
    assert sorted(bw.saved.values()) == sorted(keep)
    assert not any(isinstance(n, ir.Matmul) and n.axes == ("m", "n") for n in bw.graph.nodes)  # X W not redone
    inputs, cts = grad_oracle.random_values(g, 11)
    fwd = reference.evaluate(forward_saving(g, bw), inputs, compute_dtype=torch.float64, check=False)
    feed = {**inputs, **{name: fwd[name] for name in bw.saved}, **{bw.cotangents[o]: cts[o] for o in cts}}
    got = reference.evaluate(bw.graph, {n.name: feed[n.name] for n in bw.graph.inputs()}, compute_dtype=torch.float64)
    want = grad_oracle.oracle(g, inputs, cts)
    for name, gr in bw.grads.items():
        mine = gr.like_input(got[gr.output], next(n.axes for n in g.inputs() if n.name == name), g.axes)
        assert torch.allclose(mine, want[name], rtol=1e-9, atol=1e-12), name


@settings(max_examples=examples(6, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(bw=strategies.backward_graphs())
def test_every_candidate_of_a_backward_equals_its_reference(bw):
    """The derive soundness property over backward graphs: every candidate derive offers, at the
    default tiles and at small ones that divide nothing, run by the interpreter in float64, equals
    the backward graph's reference."""
    inputs = reference.random_inputs(bw, seed=4)
    want = reference.evaluate(bw, inputs, compute_dtype=torch.float64)
    for c in candidates(bw):
        for tiles in (None, {"block_m": 2, "block_n": 4, "block_k": 3, "block_r": 2}):
            got = interp.run(derive(bw, c.name, tiles), inputs, dtype=torch.float64)
            for o in bw.outputs:
                finite = torch.isfinite(want[o])
                err = (got[o].double() - want[o]).abs()[finite]
                scale = 1 + (want[o][finite].abs().max().item() if finite.any() else 0)
                assert not err.numel() or err.max().item() <= 1e-9 * scale, (bw.name, c.name, tiles, o)


def test_a_broadcast_operands_gradient_contracts_its_longest_axis():
    """GQA's dK sums dS Q over the group and the queries: contracting the queries (2048) and
    summing the group (4) after holds [h_kv, g, d_h, t_kv]; the other order held [h_kv, t_q, d_h,
    t_kv], 2^31 values, past 32-bit indexing (the backward at the training shape had no plan). No
    value of the backward is larger than the forward's largest."""
    g = architectures.build("gqa_attention", h_kv=4, g=4, t_q=2048, t_kv=2048, d_h=128)
    bw = vjp(g).graph
    largest = max(math.prod(g.shape(n.id)) for n in g.nodes)
    assert max(math.prod(bw.shape(n.id)) for n in bw.nodes) <= largest
    assert candidates(bw)


@pytest.mark.parametrize("form", ["softmax", "log_softmax", "logsumexp"])
def test_row_forms_take_their_closed_form_cotangents(form):
    """softmax, log-softmax and log-sum-exp over a row (with their max shift) get dz = p (dy - sum
    dy p), dy - exp(y) sum dy, dy exp(z - r): nothing flows through the max (no tie mask), and the
    result equals torch's autograd (which differentiates through the max: the shift cancels)."""
    from leantile.autodiff import row_forms

    def body(g):
        z = g.mul(g.input("X", ["m", "d"], "f64"), g.const("0.5"))
        if form == "softmax":
            return g.softmax(z, "d")
        m = g.red("max", z, "d")
        lse = g.log(g.red("sum", g.exp(g.sub(z, m)), "d"))
        return g.sub(g.sub(z, m), lse) if form == "log_softmax" else g.add(lse, m)
    g = build_graph_with_output(form, {"m": 3, "d": 9}, body)
    assert [f[0] for f in row_forms(g).values()] == [form]
    bw = vjp(g).graph
    assert not any(n.op == "eq" for n in bw.nodes)
    _assert_agrees(g, seed=12)


def test_a_row_form_whose_inner_value_is_read_elsewhere_takes_the_general_path():
    """The max of a softmax also an output: the form is not taken (its max has a reader of its own)."""
    from leantile.autodiff import row_forms
    g = soundness_graphs.scaled_softmax_stats_out()
    assert row_forms(g) == {}
    _assert_agrees(strategies.inputs_in(g, "f64"), seed=13)


def test_the_forward_saves_its_gemm_products_never_attention_scores():
    """default_saved: an MLP's products (an activation's derivative reads them) come from the
    forward, so the backward of SwiGLU is the four GEMMs of dX and dW, none recomputed; attention's
    scores at a training shape ([h, t, t], larger than its inputs) are recomputed."""
    from leantile.autodiff import default_saved
    sw = architectures.build("swiglu", m=256, d=128, n=384)
    bw = vjp(sw)
    assert sorted(bw.saved.values()) == sorted(n.id for n in sw.nodes if isinstance(n, ir.Matmul))
    assert sum(isinstance(n, ir.Matmul) for n in bw.graph.nodes) == 4
    att = architectures.build("causal_attention", h=2, t_q=512, t_kv=512, d_h=64)
    scores = next(n.id for n in att.nodes if isinstance(n, ir.Matmul))
    # (the backward reads the output O = P V for its row term rowsum(dO O), handed over, and the
    # softmax's max and sum, two values a query row: never the scores)
    assert scores not in default_saved(att) and att.outputs["out"] in vjp(att).saved.values()
    assert all(len(att.nodes[i].axes) < 3 or i == att.outputs["out"] for i in vjp(att).saved.values())
    mm = architectures.build("matmul", m=64, d=32, n=48)
    assert vjp(mm).saved == {}  # a plain product's gradient reads the operands only
    lin = DagM("linear_bias", {"m": 8, "d": 4, "n": 6})
    lin.output("out", lin.add(lin.matmul(lin.input("X", ["m", "d"], "f32"), lin.input("W", ["d", "n"], "f32"),
                                         "d", "d"), lin.input("b", ["n"], "f32")))
    assert vjp(lin.graph()).saved == {}  # add's VJP is handed the product but reads nothing of it
    from leantile.precompile import training_graphs  # what a training run compiles ahead
    fwd, train, back = training_graphs(sw)
    assert fwd == sw and set(train.outputs) == set(sw.outputs) | set(bw.saved) and back == bw.graph
    # attention: its training forward stores the softmax's max and sum beside the output
    assert [g.name for g in training_graphs(att)] == ["causal_attention", "causal_attention", "causal_attention_vjp"]


def test_a_cross_entropy_backward_reads_the_saved_log_sum_exp_once():
    """The forward saves a log-sum-exp row (one value a row): the cross-entropy backward is one
    elementwise pass over the logits, no row statistics again (it streamed the logits twice,
    0.90 ms against torch.compile's 0.68 on an H200). A log-softmax saves its output, which the
    caller has anyway: no training forward; lt.op's gradient equals torch's."""
    import leantile
    import leantile.torch as lt
    from leantile.autodiff import training_forward
    from leantile.train_bench import cases
    ce = next(c for c in cases(lambda name, shape: {a: min(v, 37) for a, v in shape.items()})
              if c.name == "cross_entropy").graph
    bw = vjp(ce, wrt=["X"])
    assert bw.saved and not any(isinstance(n, ir.Reduce) and n.axis == "d" for n in bw.graph.nodes)
    assert all(not any(s.op == "reduce" for s in k.statements()) for k in derive(bw.graph).kernels)
    _assert_agrees(strategies.inputs_in(ce, "f64"), seed=5, wrt=["X"])

    def log_softmax(g):
        x = g.input("X", ["m", "d"], "f32")
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    g = build_graph_with_output("log_softmax", {"m": 5, "d": 37}, log_softmax)
    assert list(vjp(g).saved.values()) == [g.outputs["out"]]  # the backward reads the output
    assert training_forward(g) == (None, {})  # which the inference forward hands over already
    f = lt.op(leantile.compile(g, device="cpu"))
    assert not isinstance(f, lt.TrainingOp)
    x = torch.randn(5, 37, requires_grad=True)
    w = torch.randn(5, 37)
    (f(x) * w).sum().backward()
    ref = x.detach().double().requires_grad_()
    (torch.log_softmax(ref, -1) * w.double()).sum().backward()
    assert torch.allclose(x.grad.double(), ref.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("interpret", [True, False])
def test_an_op_never_returns_an_input_or_one_tensor_twice(interpret):
    """h = x + r: each input's gradient IS the cotangent (the backward's outputs are its input's
    buffer, twice). A custom op may return neither an input nor one tensor twice (torch.library
    refused it on the GPU: examples/train_lm.py, 2026-11-29); the op copies such outputs."""
    import leantile
    import leantile.torch as lt

    def body(g):
        x, r = g.input("X", ["m", "d"], "f32"), g.input("R", ["m", "d"], "f32")
        g.output("h", g.add(x, r))
        g.output("same", x)  # an output that is an input
    g = DagM("residual", {"m": 5, "d": 7})
    body(g)
    f = lt.op(leantile.compile(g.graph(), device="cpu", interpret=interpret))
    x, r = torch.randn(5, 7, requires_grad=True), torch.randn(5, 7, requires_grad=True)
    h, same = f(x, r)
    assert torch.equal(same, x) and same.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    (h.sum() + 2 * same.sum()).backward()
    assert torch.equal(x.grad, torch.full((5, 7), 3.0)) and torch.equal(r.grad, torch.ones(5, 7))


def test_a_training_op_runs_the_inference_kernel_without_autograd():
    """lt.op of a graph whose backward reads saved products: under torch.no_grad (or with no input
    needing a gradient) the inference kernel runs; under autograd the training forward (the same
    outputs, and the saved products for the backward); the gradients equal torch's."""
    import leantile
    import leantile.torch as lt
    g = strategies.inputs_in(architectures.build("swiglu", m=37, d=24, n=40), "f32")
    f = lt.op(leantile.compile(g, device="cpu"))
    assert isinstance(f, lt.TrainingOp)
    gen = torch.Generator().manual_seed(14)
    ts = [torch.randn(g.shape(n.id), generator=gen) * 0.3 for n in g.inputs()]
    calls = []
    for which in ("inference", "training"):
        orig = getattr(f, which)
        setattr(f, which, lambda *a, orig=orig, which=which: calls.append(which) or orig(*a))
    with torch.no_grad():
        plain = f(*[t.clone().requires_grad_() for t in ts])
    leaves = [t.clone().requires_grad_() for t in ts]
    out = f(*leaves)
    assert calls == ["inference", "training"] and torch.allclose(out, plain)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        out.square().sum().backward()
    # the two saved GEMM products (37 x 40, as the output) take no cotangent: no zeros of their size
    # made for them (autograd materializes them unless told not to: 86 MiB each at SwiGLU's 4096 x 11008)
    made = [e.input_shapes for e in prof.events() if e.name in ("aten::zero_", "aten::zeros")]
    assert not any([37, 40] in shapes for shapes in made), made
    ref = [t.double().requires_grad_() for t in ts]
    (torch.nn.functional.silu(ref[0] @ ref[1]) * (ref[0] @ ref[2])).square().sum().backward()
    for a, b in zip(leaves, ref):
        assert torch.allclose(a.grad.double(), b.grad, rtol=1e-4, atol=1e-5)
    compiled = [t.clone().requires_grad_() for t in ts]
    torch.compile(lambda *a: f(*a).square().sum(), fullgraph=True, backend="aot_eager")(*compiled).backward()
    for a, b in zip(compiled, leaves):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-6)


@settings(max_examples=examples(8, deep=True), deadline=None, suppress_health_check=_SUPPRESS)
@given(g=strategies.differentiable_graphs(), seed=st.integers(0, 2 ** 16), some=st.booleans())
def test_ops_of_generated_graphs_train_as_the_oracle_says(g, seed, some):
    """The torch layer over generated graphs (several outputs, casts, masks, saved GEMM products,
    a TrainingOp or not): lt.op's gradients, through autograd with every output's cotangent, equal
    the oracle's in float64 (the CPU reference path), for all inputs or for some of them."""
    import leantile
    import leantile.torch as lt
    g = _f64(g)
    f = lt.op(leantile.compile(g, device="cpu"))
    inputs, cts = grad_oracle.random_values(g, seed)
    names = [n.name for n in g.inputs()]
    wanted = set(names[::2]) if some else set(names)
    leaves = {k: v.clone().requires_grad_(k in wanted) for k, v in inputs.items()}
    outs = f(*[leaves[n] for n in names])
    outs = outs if isinstance(outs, tuple) else (outs,)
    live = [(o, t) for o, t in zip(g.outputs, outs) if t.requires_grad]
    if not live:
        return
    torch.autograd.backward([t for _, t in live], [cts[o] for o, _ in live])
    want = grad_oracle.oracle(g, inputs, cts)
    for n in wanted:
        got = leaves[n].grad
        if want[n] is None:
            assert got is None or not got.abs().gt(0).any(), n
            continue
        finite = torch.isfinite(want[n])
        assert got is not None, n
        err = (got - want[n]).abs()[finite]
        scale = 1 + want[n][finite].abs().max().item() if finite.any() else 1
        assert not err.numel() or err.max().item() <= grad_oracle.tolerance(g) * scale, (g.name, n)
    for n in set(names) - wanted:
        assert leaves[n].grad is None


def test_module_parameters_start_as_their_use_says():
    """A norm's gain starts at 1, a bias at 0, a projection N(0, 1/fan_in): from what the graph does
    with each (a gain drawn N(0, 1/d) would start the layer near zero)."""
    import leantile.torch as lt
    g = DagM("init", {"m": 5, "d": 64, "n": 32})
    x, gamma, w, b = (g.input("X", ["m", "d"], "f32"), g.input("gamma", ["d"], "f32"),
                      g.input("W", ["d", "n"], "f32"), g.input("b", ["n"], "f32"))
    g.output("out", g.add(g.matmul(g.mul(g.rms_norm(x, "d"), gamma), w, "d", "d"), b))
    m = lt.Module(g.graph(), weights=["gamma", "W", "b"], device="cpu")
    assert torch.equal(m.gamma.data, torch.ones(64)) and torch.equal(m.b.data, torch.zeros(32))
    assert 0.05 < m.W.data.std().item() < 0.25  # 1 / sqrt(64) = 0.125


def test_backward_names_stay_apart_from_the_forwards():
    """An input already named like a cotangent (d_out) or a gradient (d_X) keeps its name."""
    g = DagM("clash", {"m": 3, "n": 2})
    x, d = g.input("X", ["m", "n"], "f64"), g.input("d_out", ["m", "n"], "f64")
    g.output("out", g.mul(x, d))
    g.output("d_X", g.exp(x))
    bw = vjp(g.graph())
    inputs = [n.name for n in bw.graph.inputs()]
    assert len(inputs) == len(set(inputs)) and {"X", "d_out"} <= set(inputs)
    assert set(bw.cotangents.values()).isdisjoint({"X", "d_out", "d_X"})
    assert {gr.output for gr in bw.grads.values()}.isdisjoint({"X", "d_out", "d_X"})
    _assert_agrees(g.graph(), seed=6)


def test_a_contraction_whose_other_operand_reuses_the_contracted_name():
    """A[m, k] contracted over k with B[j, k] over j: B's free axis k is another k than A's. dB
    renames A's k to j before its contraction with dY[m, k]."""
    g = DagM("alias", {"m": 3, "k": 4, "j": 4})
    a, b = g.input("A", ["m", "k"], "f64"), g.input("B", ["j", "k"], "f64")
    g.output("out", g.matmul(a, b, "k", "j"))
    _assert_agrees(g.graph(), seed=7)


def test_refusals_name_the_input():
    ok = soundness_graphs.renamed_contraction()
    with pytest.raises(ir.GraphError, match="not inputs"):
        vjp(ok, wrt=["Q"])
    flat = DagM("flat", {"m": 3})
    flat.output("out", flat.lt(flat.input("X", ["m"], "f64"), flat.const("0.0")))
    bw = vjp(flat.graph())  # only a comparison between X and the output: every gradient is zero
    assert bw.graph is None and bw.grads == {}


# -- PyTorch: autograd, torch.compile, optimizers ------------------------------------------------------

def _norm_mlp() -> ir.Graph:
    g = DagM("norm_mlp_train", {"m": 5, "d": 7, "n": 3})
    x, w, gain = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32"), g.input("gamma", ["d"], "f32")
    g.output("out", g.gelu_tanh(g.matmul(g.mul(g.rms_norm(x, "d"), gain), w, "d", "d")))
    return g.graph()


def _torch_norm_mlp(x, w, gain):
    h = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * gain
    return torch.nn.functional.gelu(h @ w, approximate="tanh")


@pytest.mark.parametrize("interpret", [False, True])
def test_an_op_trains_through_autograd(interpret):
    import leantile
    import leantile.torch as lt
    f = lt.op(leantile.compile(_norm_mlp(), device="cpu", interpret=interpret))
    gen = torch.Generator().manual_seed(7)
    ts = [torch.randn(s, generator=gen) for s in ((5, 7), (7, 3), (7,))]
    mine = [t.clone().requires_grad_() for t in ts]
    f(*mine).square().sum().backward()
    ref = [t.double().requires_grad_() for t in ts]
    _torch_norm_mlp(*ref).square().sum().backward()
    for a, b in zip(mine, ref):
        assert (a.grad.double() - b.grad).abs().max() <= 1e-4 * (1 + b.grad.abs().max())
    only_w = [ts[0], ts[1].clone().requires_grad_(), ts[2]]  # one input needs a gradient: the others get none
    f(*only_w).sum().backward()
    assert only_w[1].grad is not None and only_w[0].grad is None


def test_eager_calls_bypass_the_dispatcher_and_train_the_same(monkeypatch):
    """In eager mode an op calls its function and its autograd formula directly (torch.py _Op: the
    custom op's dispatcher layers were most of a training step's host time, g42): the gradients
    equal those through the custom op itself, and with every custom op made to raise a training
    step, its backward op and an inference call still run."""
    import leantile
    import leantile.torch as lt
    f = lt.op(leantile.compile(_norm_mlp(), device="cpu"))
    gen = torch.Generator().manual_seed(11)
    ts = [torch.randn(s, generator=gen) for s in ((5, 7), (7, 3), (7,))]
    through = [t.clone().requires_grad_() for t in ts]
    forward = f.training if isinstance(f, lt.TrainingOp) else f
    out = forward.custom(*through)  # the dispatcher's path: the custom op and its registered autograd
    (out[0] if isinstance(out, tuple) else out).square().sum().backward()
    for o in list(lt._OPS.values()):
        for inner in (o, getattr(o, "inference", None), getattr(o, "training", None)):
            if isinstance(inner, lt._Op):
                monkeypatch.setattr(inner, "custom", lambda *a: pytest.fail("the dispatcher in eager mode"))
    eager = [t.clone().requires_grad_() for t in ts]
    f(*eager).square().sum().backward()
    for a, b in zip(eager, through):
        assert torch.equal(a.grad, b.grad)
    with torch.no_grad():
        assert torch.equal(f(*ts), (out[0] if isinstance(out, tuple) else out).detach())


def test_an_op_trains_under_torch_compile_fullgraph():
    import leantile
    import leantile.torch as lt
    f = lt.op(leantile.compile(_norm_mlp(), device="cpu"))
    gen = torch.Generator().manual_seed(8)
    ts = [torch.randn(s, generator=gen) for s in ((5, 7), (7, 3), (7,))]
    eager = [t.clone().requires_grad_() for t in ts]
    f(*eager).square().sum().backward()
    compiled = [t.clone().requires_grad_() for t in ts]
    torch.compile(lambda *a: f(*a).square().sum(), fullgraph=True, backend="aot_eager")(*compiled).backward()
    for a, b in zip(compiled, eager):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-6)


def test_module_parameters_take_optimizer_steps():
    """lt.Module's parameters under Adam follow the same model written in PyTorch step for step."""
    import leantile.torch as lt
    torch.manual_seed(9)  # the Module's initial weights
    m = lt.Module(_norm_mlp(), weights=["W", "gamma"], device="cpu")
    assert all(p.requires_grad for p in m.parameters())
    twin = [m.W.detach().clone().requires_grad_(), m.gamma.detach().clone().requires_grad_()]
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(5, 7, generator=gen)
    target = torch.randn(5, 3, generator=gen)
    opt, opt_twin = torch.optim.Adam(m.parameters(), lr=0.05), torch.optim.Adam(twin, lr=0.05)
    losses, twin_losses = [], []
    for _ in range(30):
        for o, model, out in ((opt, lambda: m(x), losses), (opt_twin, lambda: _torch_norm_mlp(x, *twin), twin_losses)):
            o.zero_grad()
            loss = (model() - target).square().mean()
            loss.backward()
            o.step()
            out.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses
    assert max(abs(a - b) for a, b in zip(losses, twin_losses)) <= 1e-4 * losses[0], (losses, twin_losses)


def test_a_backward_judged_on_its_forwards_saved_values():
    """Attention's backward reads the forward's O and its rows' max and sum: drawn at random they
    are no training step's (P overflows: d_Q judged wrong, every plan alike), computed by the
    forward (reference.saved_from_forward) the plan is judged right."""
    import leantile
    from leantile.reference import saved_from_forward
    fwd = architectures.build("attention", h=2, t_q=37, t_kv=45, d_h=16)
    back = vjp(fwd)
    assert back.saved
    k = leantile.compile(back.graph, device="cpu", interpret=True)
    drawn = k.random_inputs(0)
    inputs = saved_from_forward(fwd, back, drawn)
    assert any(not torch.equal(inputs[n], drawn[n]) for n in back.saved)
    v = k.verify(inputs)
    assert v["ok"], v
