"""Issue 13, stable statistics: a LayerNorm whose input has a large mean (X = mu + N(0, 1),
as some channels of real activations have) stays as accurate through every fused candidate
as torch's own LayerNorm. The expanded variance is computed from sums shifted by a per-row
pivot (LeanTile.sum_sq_sub_pivot); unshifted, sum x^2 - 2 mu sum x + n mu^2 cancels (relative
error 4.5e-2 at mu = 1000 and NaN rows at mu = 3000, float32).

Sizes do not divide the tiles (d = 100 against block_k 64 and 24), so the pivot and the
shifted sums see partial tiles; one case has a single row element (d = 1, variance 0)."""

import pytest
import torch

from leantile import architectures, interp, reference
from leantile.dag import build_graph_with_output
from leantile.derive import candidates, derive
from leantile.plan import Buffer, Pivot, Store
from leantile.plan_verify import verify
from plan_checks import rel_err

TILES = (None, {"block_m": 8, "block_n": 16, "block_k": 24, "block_r": 8})
# the fused candidates may lose what the mean pullout X W - mu colsum(W) cancels (about 4x
# torch's error in float32 at these means), never more than the bound
BOUND = 10.0


def _inputs(g, mu: float, dtype: torch.dtype, seed: int):
    inputs = {k: v.double() for k, v in reference.random_inputs(g, seed=seed, dtype="f64").items()}
    inputs["X"] = inputs["X"] + mu
    return {k: v.to(dtype) for k, v in inputs.items()}


def _torch(inputs, dtype):
    x = inputs["X"].to(dtype)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)
    z = y @ inputs["W"].to(dtype) + inputs["b"].to(dtype)
    return torch.nn.functional.gelu(z.float(), approximate="tanh")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("mu", [1000.0, 3000.0])
def test_layernorm_candidates_stay_within_10x_of_torch(mu, dtype):
    g = architectures.build("layernorm_linear_gelu", m=20, d=100, n=24)
    out = next(iter(g.outputs))
    for seed in (0, 1):
        inputs = _inputs(g, mu, dtype, seed)
        ref = reference.evaluate(g, {k: v.double() for k, v in inputs.items()}, compute_dtype=torch.float64,
                                 check=False)[out]
        yardstick = rel_err(_torch(inputs, dtype).double(), ref)
        for c in candidates(g):
            for tiles in TILES:
                # float32: every buffer float32; float16: the plan's own dtypes (f32 accumulators)
                got = interp.run(derive(g, c.name, tiles), inputs, dtype=torch.float32 if dtype == torch.float32
                                 else None)[out]
                assert torch.isfinite(got).all(), f"{c.name} {tiles}: NaN or inf at mu={mu}"
                err = rel_err(got.double(), ref)
                assert err <= BOUND * yardstick, \
                    f"{c.name} {tiles}, mu={mu}: {err:.2e} against torch's {yardstick:.2e}"


def _variance_graph(d: int, centre: str | None):
    """sum_d (X - mu)^2 (mu the row mean, or a constant) scaling a GEMM: the expanded
    variance alone, with no eps or rsqrt around it."""
    def body(g):
        x = g.input("X", ["m", "d"], dtype="f32")
        w = g.input("W", ["d", "n"], dtype="f32")
        mu = g.mean_along(x, "d") if centre is None else g.const(centre)
        var = g.red("sum", g.square(g.sub(x, mu)), "d")
        return g.matmul(g.mul(g.sub(x, mu), var), w, "d", "d")
    return build_graph_with_output("variance", {"m": 6, "d": d, "n": 5}, body)


@pytest.mark.parametrize("d", [1, 7, 100])
@pytest.mark.parametrize("centre", [None, "2500.0"])
def test_expanded_variance_equals_reference_and_is_stable(d, centre):
    """float64: exact (1e-9) for every candidate; float32 at mu = 3000: the variance terms
    are of the size of the variance, so the error stays near float32's epsilon."""
    g = _variance_graph(d, centre)
    cands = candidates(g)
    expanded = [c for c in cands if any(st.rule == "variance_expand" for st in c.steps)]
    if d == 1 and centre is None:  # x - mean over one element is exactly 0: no mean pullout there
        assert not any(st.rule == "mean_pullout" for c in cands for st in c.steps), [c.name for c in cands]
        return
    assert expanded, [c.name for c in cands]
    out = next(iter(g.outputs))
    inputs = _inputs(g, 3000.0, torch.float64, seed=5)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64, check=False)[out]
    for c in expanded:
        for tiles in TILES:
            plan = derive(g, c.name, tiles)
            assert any(isinstance(s, Pivot) for k in plan.kernels for s in k.body), \
                "the expanded variance takes its pivot"
            exact = interp.run(plan, inputs, dtype=torch.float64)[out]
            assert rel_err(exact, ref) < 1e-9
            low = interp.run(plan, {k: v.float() for k, v in inputs.items()}, dtype=torch.float32)[out]
            assert torch.isfinite(low).all()
            assert rel_err(low.double(), ref) < 1e-3, f"{c.name} {tiles}: {rel_err(low.double(), ref):.2e}"


def test_verify_misplaced_or_misshapen_pivot():
    g = architectures.build("layernorm_linear_gelu", m=16, d=32, n=16)
    plan = derive(g, "stats_separate+colsum_precomputed")
    assert verify(plan, g) == []
    j = next(j for j, k in enumerate(plan.kernels) if any(isinstance(s, Pivot) for s in k.body))
    kern = plan.kernels[j]
    pivot = next(s for s in kern.body if isinstance(s, Pivot))

    def with_kernel(**fields):
        kernels = list(plan.kernels)
        kernels[j] = kern.model_copy(update=fields)
        return plan.model_copy(update={"kernels": tuple(kernels)})
    wrong_axis = tuple(s.model_copy(update={"axis": "m"}) if s is pivot else s for s in kern.body)
    in_prologue = (*kern.prologue, pivot)  # outside the stream: no first block to take it from
    for bad in (with_kernel(body=wrong_axis), with_kernel(prologue=in_prologue)):
        assert any("a pivot is taken in the stream body" in p for p in verify(bad, g))


def test_pivot_is_the_first_element_of_the_row_in_interp():
    """The pivot is the row's first element whatever the tiles (a later tile does not move
    it): read back through a kernel that stores it."""
    g = architectures.build("layernorm_linear_gelu", m=5, d=13, n=3)
    for tiles in ({"block_k": 4, "block_r": 2}, {"block_k": 64}):
        plan = derive(g, "stats_separate+colsum_precomputed", tiles)
        j = next(j for j, k in enumerate(plan.kernels) if any(isinstance(s, Pivot) for s in k.body))
        kern = plan.kernels[j]
        pivot = next(s for s in kern.body if isinstance(s, Pivot))
        probe = Buffer(name="probe", axes=("m",), scope="global", dtype="acc")
        kernels = list(plan.kernels)
        kernels[j] = kern.model_copy(update={"epilogue": (*kern.epilogue, Store(src=pivot.dst, dst="probe"))})
        plan = plan.model_copy(update={"kernels": tuple(kernels), "globals": (*plan.globals, probe),
                                       "outputs": {**plan.outputs, "probe": "probe"}})
        inputs = reference.random_inputs(g, seed=2)
        got = interp.run(plan, inputs, dtype=torch.float64)["probe"]
        assert torch.equal(got, inputs["X"][:, 0].double())


def test_interp_sums_a_half_precision_tile_in_the_accumulator_dtype():
    """A Reduce of a float16 shared tile into a float32 accumulator sums in float32, as the
    emitted kernel does (it casts before T.reduce_sum): the column means of a float16 W, whose
    sums (4e6) overflow float16 while the means (1000) are f16 outputs (the IR's dtype)."""
    def body(g):
        w = g.input("W", ["k", "n"])
        return g.mean_along(w, "k")
    g = build_graph_with_output("colmean", {"k": 4096, "n": 3}, body)
    w = (torch.rand(4096, 3, dtype=torch.float64) + 1000.0).half()
    plan = derive(g, None)
    got = interp.run(plan, {"W": w})[next(iter(g.outputs))]
    assert got.dtype == torch.float16
    exact = w.double().mean(0)
    assert ((got.double() - exact).abs() / exact).max() < 2 ** -11, "summed in float16 it overflows to inf"
