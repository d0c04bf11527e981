"""GPU checks (marker gpu; skipped without CUDA): the shipped kernel of every built-in, at
the published shapes and at small random shapes, matches the float32 reference within fp16 /
bf16 tolerances on fresh random inputs. Outputs and intermediates are NaN-filled before each
run, so an element no kernel writes fails the check."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import architectures, ir, reference
from leantile.derive import candidates, derive

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-2, "bf16": 4e-2}


def with_dtype(g: ir.Graph, dtype: str) -> ir.Graph:
    return g.model_copy(update={"nodes": tuple(
        n.model_copy(update={"dtype": dtype}) if isinstance(n, ir.Input) else n for n in g.nodes)})


def run_plan(plan, g, seed, tmp_path):
    from leantile.bench import load_emitted
    mod = load_emitted(plan, tmp_path)
    kernels = mod.compile_kernels(target="cuda")
    inputs = {k: v.cuda() for k, v in reference.random_inputs(g, seed=seed).items()}
    bufs = mod.allocate(inputs)  # NaN-filled
    for spec in mod.KERNELS:
        kernels[spec["name"]](*[bufs[p] for p in spec["params"]])
    torch.cuda.synchronize()
    out = bufs[mod.OUTPUTS["out"]].float()
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)["out"]
    return out, ref


def rel_err(out, ref):
    return ((out - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("name", architectures.NAMES)
def test_shipped_kernel_at_published_shape(name, tmp_path):
    from leantile.bench import plan_for
    g = architectures.build(name)
    plan, _ = plan_for(g)
    out, ref = run_plan(plan, g, seed=11, tmp_path=tmp_path)
    assert torch.isfinite(out).all(), "unwritten (NaN) or overflowed elements"
    assert rel_err(out, ref) < TOL["f16"]


def small_sizes(name):
    axes = architectures.module(name).DEFAULT_SIZES
    # multiples of 8 keep rows 16-byte aligned (TMA); not multiples of the 64/128 blocks
    return st.fixed_dictionaries({a: st.sampled_from([8, 40, 136, 200] if a != "d_h" else [64, 128])
                                  for a in axes})


@pytest.mark.parametrize("name", architectures.NAMES)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_fused_candidates_at_small_random_shapes(name, dtype, data, tmp_path_factory):
    """Each example checks one fused candidate (drawn), so every candidate is reached across
    examples while one run of the file stays within a few minutes of compilation."""
    g = with_dtype(architectures.build(name, **data.draw(small_sizes(name))), dtype)
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    cand = data.draw(st.sampled_from(cands), label="candidate")
    seed = data.draw(st.integers(0, 2**31 - 1))
    out, ref = run_plan(derive(g, cand), g, seed, tmp_path_factory.mktemp(cand.replace("+", "_")))
    assert torch.isfinite(out).all(), f"{cand}: unwritten or non-finite elements"
    assert rel_err(out, ref) < TOL[dtype], cand
