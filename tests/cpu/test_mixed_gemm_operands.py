"""A GEMM's operands in one dtype, whatever the graph does before them (GPU campaign s95: RMSNorm
with a bf16 gain over an f32 input, `gamma_bf16 * (x_f32 * r)`, is a bf16 operand, and the row
scale and gain pulled out of it left the GEMM multiplying x in f32 by the bf16 weight, which
TileLang refuses on every candidate). The pullouts stop where the LHS changes dtype; the plan
verifier refuses a tensor-core GEMM of two dtypes, so every derive below checks it."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from leantile import dag, interp, ir, reference
from leantile.derive import candidates, derive
from plan_checks import rel_err
from strategies import ALL_CLASSES, _user_gemm, _user_norm_gemm, inputs_mixed, resized

# sizes where the norm's pullout options are offered (one CTA's row is past on-chip) and the
# GEMM takes tensor cores
LARGE = {"m": 130, "d": 4100, "n": 72, "k": 4100}


def _every_candidate(g: ir.Graph) -> int:
    """Derive (and so verify) every candidate; a plan the target cannot hold is refused, a plan
    the verifier refuses is a leantile bug (RuntimeError) and fails the test. Plans derived."""
    n = 0
    for c in candidates(g):
        try:
            plan = derive(g, c.name)
        except ir.GraphError:  # tiles the target cannot hold (verify.TILE_PROBLEMS)
            continue
        n += 1
        assert plan.kernels
    return n


def _mixed_rms_gemm(d: int = 300):
    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        gain = g.input("gamma", ["d"], "bf16")
        w = g.input("W", ["d", "n"], "bf16")
        return g.matmul(g.mul(gain, g.rms_norm(x, "d")), w, "d", "d")
    return dag.build_graph_with_output("mixed_rms_gemm", {"m": 7, "d": d, "n": 8}, body)


def test_a_bf16_gained_norm_of_an_f32_input_keeps_its_gemm_in_bf16():
    g = resized(_mixed_rms_gemm(), lambda a: LARGE.get(a, 8))
    assert _every_candidate(g)
    small = _mixed_rms_gemm(33)
    inputs = reference.random_inputs(small, seed=5)
    ref = reference.evaluate(small, inputs, compute_dtype=torch.float64)
    for c in candidates(small):
        out = interp.run(derive(small, c.name), inputs)
        for o in small.outputs:
            assert rel_err(out[o].double(), ref[o]) < 2e-2, c.name  # bf16 operands


def _norm_input_apart(g: ir.Graph, x_dtype: str, rest: str) -> ir.Graph:
    """g with its norm's input X in x_dtype and every other input in `rest` (a gain before the
    norm, `gamma * norm(x)`, then makes a `rest` operand of an x_dtype row); g in `rest` alone
    where the GEMM's operands would differ (validation refuses them)."""
    data = g.model_dump(mode="json", by_alias=True)
    data["derivation"] = []
    for n in data["nodes"]:
        if n["op"] == "input":
            n["dtype"] = x_dtype if n["name"] == "X" else rest
    try:
        return ir.parse(data)
    except ir.GraphError:
        return _norm_input_apart(g, rest, rest)


DTYPES = st.sampled_from(["f32", "f16", "bf16"])


@st.composite
def gained_norm_gemms(draw):
    """`gamma * norm(x)` (the gain first: the operand takes gamma's dtype) into one GEMM or a gated
    pair, x in one drawn dtype and gamma and the weights in another."""
    x_dt, dt = draw(DTYPES), draw(DTYPES)
    kind, dual = draw(st.sampled_from(["rms_norm", "layer_norm"])), draw(st.booleans())

    def body(g):
        h = g.mul(g.input("gamma", ["d"], dt), getattr(g, kind)(g.input("X", ["m", "d"], x_dt), "d"))
        a = g.matmul(h, g.input("W", ["d", "n"], dt), "d", "d")
        return g.mul(g.silu(a), g.matmul(h, g.input("U", ["d", "n"], dt), "d", "d")) if dual else a
    sizes = {a: draw(st.integers(1, 9)) for a in ("m", "d", "n")}
    g = dag.build_graph_with_output("gained_norm_gemm", sizes, body)
    return resized(g, lambda a: LARGE[a]) if draw(st.booleans()) else g


@settings(max_examples=20)
@given(gained_norm_gemms())
def test_every_candidate_of_a_gained_norm_in_another_dtype_multiplies_one_dtype(g):
    _every_candidate(g)


@settings(max_examples=25)
@given(_user_norm_gemm(ALL_CLASSES), DTYPES, DTYPES, st.booleans())
def test_every_candidate_of_a_norm_in_one_dtype_before_gemms_in_another_multiplies_one_dtype(gc, x, rest, large):
    g = _norm_input_apart(gc[0], x, rest)
    if large:
        g = resized(g, lambda a: LARGE.get(a, 8))
    _every_candidate(g)


@settings(max_examples=25)
@given(st.one_of(_user_norm_gemm(ALL_CLASSES), _user_gemm(ALL_CLASSES)), st.data(), st.booleans())
def test_every_candidate_of_mixed_dtype_user_gemms_multiplies_one_dtype(gc, data, large):
    g = inputs_mixed(gc[0], data.draw)
    if large:
        g = resized(g, lambda a: LARGE.get(a, 8))
    _every_candidate(g)
