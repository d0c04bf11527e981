"""Every output has its value's dtype (ir.value_dtype, the IR's one rule, docs/ir.md) in the plan,
the emitted module, the interpreter and the reference, and is judged at that dtype's tolerance.

The class of bug: outputs were written in the graph's first input dtype, so a user's
`cast(y, f32)` or the f32 path of a mixed graph came back in f16 and was judged at f16's
tolerance, 200 times looser than float32's; and the reference in the graph's own dtype (the
rounding verify forgives) widened `x - 0.25` on an f16 x to float32 where the IR keeps f16."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from leantile import ir, reference, runtime
from leantile.dag import DagM
from leantile.derive import candidates
from leantile.reference import TORCH_DTYPES
from strategies import inputs_mixed, random_graphs, user_graphs
from profiles import examples  # noqa: E402


def _mixed_graph():
    g = DagM("mixed", {"m": 5, "d": 7})
    x, y = g.input("X", ["m", "d"], "f16"), g.input("Y", ["m", "d"], "f32")
    g.output("half", g.mul(x, g.const("2.0")))           # a constant never widens x: f16
    g.output("wide", g.exp(y))                          # the f32 input's own path: f32
    g.output("cast", g.cast(g.mul(x, x), "f32"))        # the user asks for f32
    g.output("first", g.add(g.exp(y), x))               # mixed: the first non-constant operand's, f32
    g.output("stat", g.red("sum", x, "d"))              # a reduction keeps x's dtype, as torch's does
    return g.graph()


def test_mixed_graph_outputs_come_back_in_their_own_dtypes():
    want = {"half": torch.float16, "wide": torch.float32, "cast": torch.float32, "first": torch.float32,
            "stat": torch.float16}
    g = _mixed_graph()
    inputs = reference.random_inputs(g, seed=5)
    assert {o: t.dtype for o, t in reference.evaluate(g, inputs).items()} == want
    for c in candidates(g):
        k = runtime.compile(g, candidate=c.name, device="cpu", interpret=True)
        assert {o: spec[1] for o, spec in k.output_specs.items()} == want, c.name
        outs = k.run(inputs)
        assert {o: t.dtype for o, t in outs.items()} == want, c.name
        v = k.verify(inputs)
        # judged as precise as the least precise value each is computed from: exp(Y) and
        # exp(Y) + X are float32 arithmetic, `cast` is f16 arithmetic widened
        assert v["tolerance"] == {"half": 2e-2, "wide": 1e-4, "cast": 2e-2, "first": 1e-4, "stat": 2e-2}
        assert v["ok"], (c.name, v)
        # the f32 outputs hold float32 digits, not f16's: an f16 rounding of exp(Y) is 100x the error
        ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
        assert runtime.rel_err(outs["wide"], ref["wide"]) < 1e-6


def test_the_reference_keeps_a_constant_from_widening_its_operand():
    g = DagM("c", {"m": 3, "d": 4})
    x = g.input("X", ["m", "d"], "f16")
    c = g.sub(x, g.const("0.25"))
    g.output("centred", c)
    g.output("scaled", g.mul(g.size_const("d"), c))     # constant first: still f16
    g.output("masked", g.select(g.lt(g.iota("d"), g.const("2")), x, g.const("0")))
    g = g.graph()
    x = torch.randn(3, 4).half()
    out = reference.evaluate(g, {"X": x})
    assert all(t.dtype == torch.float16 for t in out.values()), {o: t.dtype for o, t in out.items()}
    assert torch.equal(out["centred"], x - 0.25)  # torch's own `x - 0.25` on an f16 x
    assert torch.equal(out["masked"][:, 2:], torch.zeros(3, 2, dtype=torch.float16))


@settings(max_examples=examples(100), deadline=None)
@given(st.one_of(random_graphs(max_ops=6), user_graphs().map(lambda gc: gc[0])), st.data())
def test_generated_mixed_graphs_write_each_output_in_its_value_dtype(g, data):
    """Generated graphs (casts, reductions, masks, GEMMs, norms, softmax statistics as outputs)
    with each input in a drawn dtype: every candidate's plan, module and run give each output its
    value's dtype, and it passes verify at that dtype's tolerance against the float32 reference."""
    g = inputs_mixed(g, data.draw)
    want = {o: TORCH_DTYPES[d] for o, d in ir.output_dtypes(g).items()}
    inputs = reference.random_inputs(g, seed=data.draw(st.integers(0, 99)), scale=reference.natural_scale(g))
    assert {o: t.dtype for o, t in reference.evaluate(g, inputs).items()} == want
    for c in candidates(g):
        k = runtime.compile(g, candidate=c.name, device="cpu", interpret=True)
        plan_dtypes = {o: {b.name: b.dtype for b in k.plan.globals}[buf] for o, buf in k.plan.outputs.items()}
        assert {o: TORCH_DTYPES[d] for o, d in plan_dtypes.items()} == want, c.name
        assert {o: spec[1] for o, spec in k.output_specs.items()} == want, c.name
        v = k.verify(inputs)
        assert v["ok"], (c.name, {o: str(t) for o, t in want.items()}, v)


def test_tf32_keeps_the_top_19_bits_as_the_tensor_cores_read_them():
    from leantile.reference import to_tf32
    x = torch.randn(4096) * torch.logspace(-20, 20, 4096)
    t = to_tf32(x)
    assert torch.equal(to_tf32(t), t)  # idempotent: TF32 values are float32 values
    assert bool(((t - x).abs() <= x.abs() * 2 ** -10).all()) and bool((t.abs() <= x.abs()).all())  # toward zero
    assert bool(((t.view(torch.int32) & 0x1FFF) == 0).all())
    exact = torch.tensor([1.0, -2.5, 0.0, 1024.0, 1.0 + 2 ** -10])  # 10 mantissa bits: kept
    assert torch.equal(to_tf32(exact), exact)
    assert to_tf32(torch.tensor([1.0 + 2 ** -11])).item() == 1.0


def test_the_unfused_graph_in_tf32_rounds_only_float32_contractions():
    g = DagM("t", {"m": 6, "k": 40, "n": 5})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32")
    h, v = g.input("H", ["m", "k"], "f16"), g.input("V", ["k", "n"], "f16")
    g.output("wide", g.matmul(x, w, "k", "k"))
    g.output("half", g.matmul(h, v, "k", "k"))
    g.output("map", g.exp(x))
    g = g.graph()
    inputs = reference.random_inputs(g, seed=2)
    plain, tf32 = reference.evaluate(g, inputs), reference.evaluate(g, inputs, tf32=True)
    assert torch.equal(plain["half"], tf32["half"]) and torch.equal(plain["map"], tf32["map"])
    err = runtime.rel_err(tf32["wide"], plain["wide"].double())
    assert 1e-5 < err < 2e-3  # TF32's 10-bit mantissa: ~1e-3, not float32's 1e-7


def test_a_row_of_one_element_is_not_centred_by_a_pulled_out_mean():
    """LayerNorm over one element: X - mean is exactly 0, so the output is exactly 0 (+ bias).
    matmul(X, W) - mean colsum(W) is the difference of two rounded products, a residue where the
    GPU's TF32 rounds one (an output of norm 0 judged relative to nothing: inf). Refused at size
    1 when the mean is a statistic over the axis; a constant centre keeps its pullout."""
    from leantile import architectures
    one = architectures.build("layernorm_linear_gelu", m=8, d=1, n=16)
    assert not any(st.rule == "mean_pullout" for c in candidates(one) for st in c.steps)
    wider = architectures.build("layernorm_linear_gelu", m=8, d=2, n=16)
    assert any(st.rule == "mean_pullout" for c in candidates(wider) for st in c.steps)
    g = DagM("centred", {"m": 4, "d": 1, "n": 3})
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32")
    g.output("out", g.matmul(g.sub(x, g.const("2.0")), w, "d", "d"))
    assert any(st.rule == "mean_pullout" for c in candidates(g.graph()) for st in c.steps)
    for c in candidates(one):
        v = runtime.compile(one, candidate=c.name, device="cpu", interpret=True).verify()
        assert v["ok"], (c.name, v)
