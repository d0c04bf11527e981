"""The one accuracy check (leantile.tolerance): what it must accept and what it must refuse.
A wrong kernel must fail however small its outputs are (no absolute floor); rounding that the
unfused graph itself makes in the output's dtype must pass, also where an output cancels."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from leantile.tolerance import CAP, TOLERANCE, rel_err, tolerance


@pytest.mark.parametrize("n", [1, 7, 4096, 65536])
def test_an_all_zero_output_fails_however_small_the_outputs_are(n):
    """softmax over a long row: every element ~1/n, far below any absolute floor."""
    x = torch.randn(3, n, dtype=torch.float64)
    ref = torch.softmax(x, dim=-1)
    same = torch.softmax(x.half(), dim=-1)  # the unfused graph in f16: its rounding is forgiven
    assert rel_err(torch.zeros_like(ref).half(), ref, same) >= 1 - CAP > TOLERANCE[torch.float16]
    assert rel_err(same, ref, same) <= tolerance(torch.float16)  # the unfused graph itself passes


@given(st.integers(1, 64), st.integers(0, 2**31 - 1), st.floats(1.1, 3.0))
def test_a_scaled_output_fails(n, seed, factor):
    """A kernel off by a constant factor (a missing scale) of 10% or more fails in every dtype
    (bf16 accepts 4% plus the forgiven rounding of its 8-bit mantissa, 8 x ~0.3%)."""
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, 5, generator=gen, dtype=torch.float64) + 0.1
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        same = ref.to(dt)
        assert rel_err((ref * factor).to(dt), ref, same) > tolerance(dt), dt


def test_cancellation_in_float32_is_rounding_not_an_error():
    """x - mean(x) of a constant-ish row: the exact output is ~1e-5, f32 rounding of x is ~6e-8,
    ~1e-2 of it. Without ref_same that is 100x the f32 tolerance; with it, rounding is forgiven."""
    x = torch.full((4, 3), 1.0, dtype=torch.float64) + 1e-5 * torch.randn(4, 3, dtype=torch.float64)
    ref = x - x.mean(-1, keepdim=True)
    same = (x.float() - x.float().mean(-1, keepdim=True))
    kernel = (x.float() - x.float().sum(-1, keepdim=True) / 3)  # another order, the same rounding
    assert rel_err(kernel, ref) > TOLERANCE[torch.float32]
    assert rel_err(kernel, ref, same) <= TOLERANCE[torch.float32]
    assert rel_err(kernel * 1.5, ref, same) > TOLERANCE[torch.float32]  # a wrong one still fails


def test_a_graph_that_is_pure_noise_in_its_dtype_forgives_at_most_cap():
    """Deviations below f32 resolution: the f32 graph outputs 0; forgiving its whole error
    would let an all-zero kernel through. At most CAP of the norm is forgiven."""
    x = torch.full((4, 3), 1.0, dtype=torch.float64) + 1e-9 * torch.randn(4, 3, dtype=torch.float64)
    ref = x - x.mean(-1, keepdim=True)
    same = x.float() - x.float().mean(-1, keepdim=True)
    assert rel_err(same, ref, same) == pytest.approx(1 - CAP)


def test_non_finite_and_zero_references():
    ref = torch.randn(8, dtype=torch.float64)
    bad = ref.clone()
    bad[3] = float("nan")
    assert rel_err(bad, ref) == float("inf")
    z = torch.zeros(5, dtype=torch.float64)
    assert rel_err(z.float(), z) == 0.0
    assert rel_err(z.float() + 1e-3, z) == float("inf")
    noisy_same = ref.clone()
    noisy_same[0] = float("inf")  # a reference that overflows in the low dtype forgives nothing
    assert rel_err(ref * 1.01, ref, noisy_same) == pytest.approx(0.01, rel=1e-6)


def test_an_output_that_is_only_rounding_is_judged_against_the_graphs_own_rounding():
    """A reference exactly 0 where the graph in its own dtypes is pure rounding (shaped here as
    an f16 residual, x - f32(f16(x))): an output that rounds as the graph does, or not at all, is
    right; one off by more than NOISE times that rounding is wrong."""
    x = torch.randn(6, 5, dtype=torch.float32)
    ref = torch.zeros(6, 5, dtype=torch.float64)
    same = x - x.half().float()
    assert rel_err(same, ref, same) == 0.0
    assert rel_err(torch.zeros(6, 5), ref, same) == 0.0
    assert rel_err(same * 20, ref, same) > TOLERANCE[torch.float32]
    assert rel_err(same + 0.1, ref, same) > TOLERANCE[torch.float32]
    assert rel_err(same, ref) == float("inf")  # without the graph's own rounding: no judgement


def test_an_output_is_judged_as_precise_as_the_least_precise_value_it_comes_from():
    from leantile.dag import DagM
    from leantile.tolerance import output_tolerances
    g = DagM("p", {"m": 3, "d": 4})
    x, y = g.input("X", ["m", "d"], "bf16"), g.input("Y", ["m", "d"], "f32")
    g.output("given", x)                                         # an input is exact: its dtype's
    g.output("widened_early", g.exp(g.cast(x, "f32")))           # f32 arithmetic on exact bf16 values
    g.output("widened_late", g.cast(g.exp(x), "f32"))            # bf16 arithmetic, then widened
    g.output("f32_path", g.add(g.exp(y), g.const("1.0")))
    g.output("joined", g.add(g.exp(y), g.cast(g.mul(x, x), "f32")))  # one bf16 product in its cone
    assert output_tolerances(g.graph()) == {
        "given": TOLERANCE[torch.bfloat16], "widened_early": TOLERANCE[torch.float32],
        "widened_late": TOLERANCE[torch.bfloat16], "f32_path": TOLERANCE[torch.float32],
        "joined": TOLERANCE[torch.bfloat16]}


def test_nan_agrees_only_where_the_reference_has_nan():
    """A fully masked softmax row is NaN in the graph (0 / 0): a kernel with NaN exactly there
    is right, with NaN elsewhere or a number there is wrong; the rest is measured as usual."""
    ref = torch.randn(4, 6, dtype=torch.float64)
    ref[1] = float("nan")
    out = ref.clone().float()
    assert rel_err(out, ref) < 1e-6
    wrong = out.clone(); wrong[1] = 0.0  # a finite row where the graph says NaN
    assert rel_err(wrong, ref) == float("inf")
    extra = out.clone(); extra[2, 3] = float("nan")
    assert rel_err(extra, ref) == float("inf")
    off = out.clone(); off[0] += 1.0  # the finite part is still checked
    assert rel_err(off, ref) > TOLERANCE[torch.float32]
