"""Stored intermediates never overflow where the graph's value and the output are representable
(issue 46).

The class of bug: an intermediate that crosses kernels was stored in its value's dtype, f16 for
an f16 graph, so the `unfused` candidate of softplus, log(1 + exp(x)), stored exp(x) as inf for
x > 11.1 where the float32 value (what verify judges against) is finite, and the output (about x)
is too; the fused candidate kept exp(x) in float32 registers and was right. Now an f16
intermediate is stored in float32 unless the graph itself rounds it to f16 in every candidate (a
cast, a GEMM's operand: tensor cores take 16-bit operands). verify's default inputs (standard
deviation natural_scale, |x| < 4) never reached that range: `verify(scale=...)` draws larger ones,
and the property below does, over generated graphs."""
from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from leantile import ir, reference, runtime
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.reference import TORCH_DTYPES
from leantile.tolerance import output_tolerances, rel_err, tolerance
from strategies import inputs_in, random_graphs
from profiles import examples  # noqa: E402

F16_MAX = torch.finfo(torch.float16).max


def _softplus(m: int, d: int) -> ir.Graph:
    g = DagM("softplus", {"m": m, "d": d})
    x = g.input("X", ["m", "d"], "f16")
    g.output("y", g.log(g.add(g.const("1.0"), g.exp(x))))
    return g.graph()


def _scaled_scores(m: int, k: int, n: int) -> ir.Graph:
    """A GEMM whose output exceeds f16 (sum of k products of about 400), scaled back into range
    by another kernel where it is not fused."""
    g = DagM("scaled_scores", {"m": m, "k": k, "n": n})
    x, w = g.input("X", ["m", "k"], "f16"), g.input("W", ["k", "n"], "f16")
    g.output("y", g.mul(g.matmul(x, w, "k", "k"), g.const("0.0009765625")))
    return g.graph()


def _plan_dtypes(plan) -> dict[str, str]:
    return {b.name: b.dtype for b in plan.globals}


@pytest.mark.parametrize("m,d", [(1, 130), (67, 5), (3, 1)])
def test_softplus_is_finite_where_exp_overflows_f16_in_every_candidate(m, d):
    g = _softplus(m, d)
    gen = torch.Generator().manual_seed(m * d)
    x = torch.rand(m, d, generator=gen, dtype=torch.float64) * 9.0 + 11.2  # exp(x) > 65504 everywhere
    inputs = {"X": x.half()}
    exact = torch.log1p(torch.exp(inputs["X"].double()))
    assert bool((torch.exp(inputs["X"].float()) > F16_MAX).all()) and bool((exact < F16_MAX).all())
    names = [c.name for c in candidates(g)]
    assert "unfused" in names, names
    for name in names:
        k = runtime.compile(g, candidate=name, device="cpu", interpret=True)
        out = k(inputs["X"])
        assert out.dtype == torch.float16 and bool(torch.isfinite(out).all()), name
        assert runtime.rel_err(out, exact) <= tolerance(torch.float16), name
        v = k.verify(inputs)
        assert v["ok"], (name, v)


def test_the_unfused_plan_stores_exp_wide_and_says_why():
    plan = derive(_softplus(5, 7), "unfused")
    dt = _plan_dtypes(plan)
    assert dt["X"] == "f16" and dt[plan.outputs["y"]] == "f16"  # inputs and outputs as declared
    wide = [b for b in plan.globals if b.name not in ("X", plan.outputs["y"])]
    assert wide and all(b.dtype == "acc" and b.why for b in wide), wide


def test_a_gemm_output_scaled_into_range_by_another_kernel():
    g = _scaled_scores(m=33, k=200, n=17)
    gen = torch.Generator().manual_seed(46)
    inputs = {n: (torch.rand(g.shape(i), generator=gen, dtype=torch.float64) * 2 + 19).half()
              for n, i in (("X", 0), ("W", 1))}
    s = inputs["X"].float() @ inputs["W"].float()
    assert bool((s > F16_MAX).all()) and bool((s / 1024 < F16_MAX).all())
    for c in candidates(g):
        v = runtime.compile(g, candidate=c.name, device="cpu", interpret=True).verify(inputs)
        assert v["ok"], (c.name, v)


def test_the_graph_rounds_a_gemm_operand_and_a_cast_so_they_stay_16_bit():
    """Where every candidate rounds to f16 anyway (a GEMM reads 16-bit operands, a cast is the
    user's rounding), the intermediate keeps its dtype: float32 there would double its traffic
    (and turn the GEMM into a TF32 one) for nothing."""
    g = DagM("mlp", {"m": 9, "d": 24, "f": 40})
    x, w1, w2 = (g.input(n, a, "f16") for n, a in (("X", ["m", "d"]), ("W1", ["d", "f"]), ("W2", ["f", "d"])))
    h = g.silu(g.matmul(x, w1, "d", "d"))
    c = g.cast(g.exp(g.neg(x)), "f16")
    g.output("y", g.matmul(h, w2, "f", "f"))
    g.output("z", g.add(c, x))
    g = g.graph()
    plan = derive(g, "unfused")
    dt = {b.node: b.dtype for b in plan.globals if b.node is not None}
    assert dt[h] == "f16" and dt[c] == "f16"
    assert dt[g.nodes[h].x] == "acc" and dt[g.nodes[c].x] == "acc"  # the matmul before silu, exp(-x)


def test_verify_scale_draws_large_magnitudes():
    g = _softplus(37, 130)
    k = runtime.compile(g, candidate="unfused", device="cpu", interpret=True)
    small, large = k.random_inputs(seed=1), k.random_inputs(seed=1, scale=8.0)
    assert float(small["X"].abs().max()) < 11.1 < float(large["X"].abs().max())  # the default never overflows exp
    assert k.verify(seed=1, scale=8.0)["ok"]


def _fits(g: ir.Graph, inputs: dict) -> bool:
    """The graph's value (float32, as verify judges) is finite at every node, and representable
    where the graph itself rounds it in every candidate: its outputs, its casts, the operands
    of its GEMMs. Elsewhere only an intermediate's storage could overflow."""
    every = {f"v{n.id}": n.id for n in g.nodes if not isinstance(n, (ir.Const, ir.SizeConst))}
    vals = reference.evaluate(g.model_copy(update={"outputs": every}), inputs,
                              compute_dtype=torch.float32, check=False)
    dtypes = ir.value_dtypes(g)
    rounded = reference.plan_rounded(g)
    for name, i in every.items():
        v = vals[name]
        if not bool(torch.isfinite(v).all()):
            return False
        if i in rounded and v.numel() and float(v.abs().max()) > torch.finfo(TORCH_DTYPES[dtypes[i]]).max:
            return False
    return True


GROW = ("exp", "pow4", "scaled", "gemm")  # past f16's 65504 at |x| > 11.1, 16, 16, ~10 (k = 9)
SHRINK = ("log1p_exp_neg", "log_abs", "rms_norm", "layer_norm", "softmax", "scale_down", "recip")


@st.composite
def ranged_graphs(draw):
    """A generated graph (strategies.random_graphs, f16 inputs) extended by what users build
    around a value too large for f16: it grows past 65504 from an input or from the generated
    graph's output (exp, x^4, a scale, a GEMM of scaled rows), then shrinks back into range
    (log(1 + exp(-|.|)), log |.|, a norm, softmax, a scale, 1 / (1 + |.|)). The grown value is
    an intermediate; the generated output stays one, or becomes an intermediate too."""
    g = draw(random_graphs(max_ops=4))
    d = DagM("ranged", g.axes)
    d.nodes, d.outputs = list(g.nodes), dict(g.outputs)
    x, w = 0, 1  # random_graphs' inputs X [i, k] and W [k, j]
    a = draw(st.sampled_from([x, g.outputs["out"]]))
    if draw(st.booleans()) and a != x:
        del d.outputs["out"]
        d.outputs.pop("aux", None)
    grow = draw(st.sampled_from(GROW))
    if grow == "exp":
        big = d.exp(a)
    elif grow == "pow4":
        big = d.square(d.square(a))
    elif grow == "scaled":
        big = d.mul(a, d.const("4096.0"))
    else:
        big = d.matmul(d.mul(x, d.const("64.0")), w, "k", "k")
    shrink = draw(st.sampled_from(SHRINK))
    axes = d.nodes[big].axes
    if shrink in ("rms_norm", "layer_norm", "softmax") and axes:
        y = getattr(d, shrink)(big, draw(st.sampled_from(axes)))
    elif shrink == "log1p_exp_neg":
        y = d.log(d.add(d.const("1.0"), d.exp(d.neg(d.abs(big)))))  # log(1 + exp(-|v|)): in (0, log 2]
        y = d.add(y, d.mul(big, d.const("0.0001")))
    elif shrink == "scale_down":
        y = d.mul(big, d.const("0.000244140625"))
    elif shrink == "recip":
        y = d.recip(d.add(d.abs(big), d.const("1.0")))
    else:
        y = d.log(d.add(d.abs(big), d.const("0.5")))
    d.output("y", y)
    return inputs_in(d.graph(), "f16")


@settings(max_examples=examples(60), deadline=None)
@given(ranged_graphs(), st.integers(0, 99), st.sampled_from([4.0, 8.0]))
def test_generated_f16_graphs_at_large_magnitudes_pass_verify(g, seed, scale):
    """Inputs of standard deviation 4 or 8 (|x| up to ~25): where the graph's value fits (_fits),
    every candidate passes verify at its outputs' tolerances, however its kernels split it."""
    k0 = runtime.compile(g, candidate=candidates(g)[0].name, device="cpu", interpret=True)
    assume(_fits(g, k0.random_inputs(seed=seed, scale=scale)))
    for c in candidates(g):
        k = runtime.compile(g, candidate=c.name, device="cpu", interpret=True)
        v = k.verify(seed=seed, scale=scale)
        assert v["tolerance"] == output_tolerances(g)
        assert v["ok"], (c.name, v)


def test_verify_judges_a_graph_whose_own_dtypes_overflow_inside():
    """f16 attention scores past 65504: the graph in its own dtypes is inf there (its softmax
    NaN), which says nothing of the kernels (they hold scores in float32), so the rounding
    forgiven is the graph's in float32 rounded where plans round (reference.plan_rounded), and
    an output those inputs cannot judge is called ill-conditioned, never wrong. Before, every
    candidate, the unfused one included, was reported a mismatch at such draws (GPU campaign:
    0.021 .. 0.027 against 0.02)."""
    from leantile import architectures

    g = architectures.build("attention", h=2, t_q=9, t_kv=40, d_h=16)
    k = runtime.compile(g, candidate="unfused", device="cpu", interpret=True)
    inputs = k.random_inputs(seed=3, scale=90.0)
    scores = torch.einsum("hqd,hkd->hqk", inputs["Q"].float(), inputs["K"].float())
    assert float(scores.abs().max()) > 65504  # the own-dtype scores overflow
    own = reference.evaluate(g, inputs, check=False)
    assert not bool(torch.isfinite(next(iter(own.values()))).all())
    v = k.judge(inputs, k.run(inputs, fill=float("nan")))
    assert v["ok"] or set(o for o in k.output_names if v["rel_err"][o] > v["tolerance"][o]) <= set(v["ill_conditioned"]), v
    ref, same = k.references(inputs)
    assert all(bool(torch.isfinite(same[o]).all()) for o in same)  # the noise model is finite


def test_the_graph_in_its_own_dtypes_is_never_judged_wrong():
    """A kernel that returns exactly what the unfused graph computes in its own dtypes is right
    by the graph's semantics: the judge calls it ok, or the output ill-conditioned at those
    inputs, never wrong. (x + 256) - 256 in bf16 rounds x to units of 2: the graph misses the
    float32 reference by about its whole norm, which no tolerance forgives, and moving x one
    bf16 unit moves nothing (the perturbation test alone did not see it)."""
    from leantile import dag

    def body(b):
        x = b.input("X", ["m", "n"], "bf16")
        return b.sub(b.add(x, b.const(65536.0)), b.const(65536.0))

    g = dag.build_graph_with_output("shifted_bf16", {"m": 7, "n": 33}, body)
    k = runtime.compile(g, candidate="unfused", device="cpu", interpret=True)
    inputs = k.random_inputs(seed=2)
    ref, same = k.references(inputs)
    v = k.judge(inputs, dict(same), refs=(ref, same))
    assert v["plain_rel_err"]["out"] > 0.9  # the graph's own rounding: far past any tolerance
    assert v["ok"] or "out" in v["ill_conditioned"], v
    fused = runtime.compile(g, device="cpu", interpret=True)  # one fused kernel: float32 registers, x exactly
    assert fused.plan.candidate != "unfused" and fused.verify(inputs)["rel_err"]["out"] == 0.0


def test_float32_gemm_graphs_are_judged_at_the_tf32_unit_on_the_gpu():
    """f32 GEMM operands run on TF32 tensor cores on the GPU: attention scores of 2^31 then pick
    among keys TF32 cannot tell apart, and every candidate, the unfused one included, missed the
    float64 reference by 10% at the GPU campaign's huge draw (2026-11-28). ill_conditioned moves
    f32 inputs by TF32's unit there (2^-10 of the value), so such an output is one these inputs
    cannot judge; at natural inputs, and on the CPU (float32 products), nothing changes."""
    g = DagM("proj_attention", {"h": 8, "t_q": 64, "t_kv": 256, "d_h": 16})
    q, k, v = (g.input(n, ["h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    g.output("out", g.matmul(g.softmax(g.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv"))
    kern = runtime.compile(g.graph(), candidate="unfused", device="cpu", interpret=True)
    natural, huge = kern.random_inputs(seed=5), kern.random_inputs(seed=5, scale=2.0 ** 14)
    assert kern.ill_conditioned(natural) == [] and kern.ill_conditioned(huge) == []
    kern.device = torch.device("cuda")  # its judgement as the GPU's kernel (no GPU needed: references run here)
    assert kern.ill_conditioned(natural) == [] and kern.ill_conditioned(huge) == ["out"]


@pytest.mark.parametrize("form,fill", [("select", "-30000"), ("select", "-1e9"), ("additive", "-1e9")])
def test_a_bf16_masked_score_keeps_its_fill_exact_for_the_backward(form, fill):
    """A bf16 graph's masked scores, select(keep, s, fill) or s + (1 - keep) fill: bf16 does not
    hold -30000 (-29952) or -1e9. The backward's exp(s - M), M the forward's row maximum of the
    exact value (float32), was exp(48) = 7e20 or inf on a wholly masked row in the unfused plan,
    which stored the masked scores in bf16 (gpu_fuzz --device cpu seed 7: d_V rel err 7e20).
    Ctx.carries_unheld_constant stores every value elementwise in such a constant in float32.
    Row 0 wholly masked: every candidate is finite and equals the float64 evaluation (the select),
    or the flash candidate's float32 registers (the additive form: s - 1e9 in float32 drops s,
    float64 keeps it; no float32 plan can equal float64 there)."""
    from leantile import interp
    from leantile.autodiff import vjp

    g = DagM("masked_bf16", {"h": 2, "t_q": 5, "t_kv": 7, "d_h": 8})
    q, k, v = (g.input(n, ["h", t, "d_h"], "bf16") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.matmul(q, k, "d_h", "d_h")
    keep = g.le(g.iota("t_kv"), g.sub(g.iota("t_q"), g.const("1")))  # query 0 keeps no key
    z = g.select(keep, s, g.const(fill)) if form == "select" else g.add(s, g.mul(g.sub(g.const("1"), keep), g.const(fill)))
    g.output("out", g.matmul(g.softmax(z, "t_kv"), v, "t_kv", "t_kv"))
    fwd = g.graph()
    bw = vjp(fwd, wrt=["Q", "K", "V"])
    gen = torch.Generator().manual_seed(4)
    inputs = {n.name: torch.randn(bw.graph.shape(n.id), generator=gen).to(TORCH_DTYPES[n.dtype])
              for n in bw.graph.inputs()}
    inputs = reference.saved_from_forward(fwd, bw, inputs)
    unfused = derive(bw.graph, "unfused")
    scores = [b for b in unfused.globals if b.node is not None and bw.graph.nodes[b.node].axes == ("h", "t_q", "t_kv")
              and isinstance(bw.graph.nodes[b.node], (ir.Select, ir.Binary)) and b.name not in bw.graph.outputs]
    fills = [n.id for n in bw.graph.nodes if isinstance(n, ir.Const) and n.value == fill]
    assert fills and scores and not [b.name for b in scores if b.dtype == "bf16"
                                     and any(f in bw.graph.nodes[b.node].args() for f in fills)], unfused.globals
    if form == "select":
        want = reference.evaluate(bw.graph, {n: t.double() for n, t in inputs.items()}, compute_dtype=torch.float64,
                                  check=False)
    else:
        want = interp.run(derive(bw.graph, "flash_backward_exp2"), inputs)
    for c in candidates(bw.graph):
        got = interp.run(derive(bw.graph, c.name), inputs)
        for o in bw.graph.outputs:
            assert torch.isfinite(got[o]).all(), (c.name, o)
            err = rel_err(got[o].double(), want[o].double().reshape(got[o].shape))
            assert err <= tolerance(torch.bfloat16), (c.name, o, err)


def test_a_bf16_value_scaled_by_a_small_constant_stays_bf16():
    """Ctx.carries_unheld_constant widens what a large constant bf16 misses by 0.5 or more (a
    mask's fill): a product with 1 / sqrt(128) rounds by a relative 2^-9 like any value, and the
    unfused plan keeps it bf16 (half the traffic); the same value plus (1 - keep) * -30000 is float32."""
    for fill, widened in ((None, False), ("-30000", True)):
        g = DagM("scaled_bf16", {"m": 6, "k": 5, "n": 7})
        x, w = g.input("X", ["m", "k"], "bf16"), g.input("W", ["k", "n"], "bf16")
        y = g.mul(g.matmul(x, w, "k", "k"), g.const("0.08838834764831845"))
        if fill:
            y = g.add(y, g.mul(g.sub(g.const("1"), g.le(g.iota("n"), g.iota("m"))), g.const(fill)))
        g.output("out", g.red("sum", g.exp(g.sub(y, g.red("max", y, "n"))), "n"))
        plan = derive(g.graph(), "unfused")
        scaled = [b for b in plan.globals if b.node == y]
        assert scaled and (scaled[0].dtype != "bf16") == widened, (fill, plan.globals)
