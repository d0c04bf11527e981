"""GPU checks (marker gpu; skipped without CUDA): the shipped kernel of every built-in, at
the published shapes and at small random shapes, matches the float32 reference within fp16 /
bf16 tolerances on fresh random inputs. Outputs and intermediates are NaN-filled before each
run, so an element no kernel writes fails the check. All through leantile.compile (the runtime's
one GPU path and tolerance table)."""
import pytest
from hypothesis import given, settings, strategies as st

import leantile
from leantile import architectures, ir
from leantile.derive import candidates

pytestmark = pytest.mark.gpu


def with_dtype(g: ir.Graph, dtype: str) -> ir.Graph:
    return g.model_copy(update={"nodes": tuple(
        n.model_copy(update={"dtype": dtype}) if isinstance(n, ir.Input) else n for n in g.nodes)})


@pytest.mark.parametrize("name", architectures.NAMES)
def test_shipped_kernel_at_published_shape(name):
    k = leantile.compile(architectures.build(name))  # the tuned entry where one exists
    v = k.verify(seed=11)  # every output, NaN-poisoned: unwritten elements fail
    assert v["ok"], (k.plan.candidate, v)


def small_sizes(name):
    axes = architectures.module(name).DEFAULT_SIZES
    # multiples of 8 keep rows 16-byte aligned (TMA); not multiples of the 64/128 blocks
    # (rows no multiple of 8, the element-wise copy path: test_unaligned_gpu.py)
    return st.fixed_dictionaries({a: st.sampled_from([8, 40, 136, 200] if a != "d_h" else [64, 128])
                                  for a in axes})


@pytest.mark.parametrize("name", architectures.NAMES)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_fused_candidates_at_small_random_shapes(name, dtype, data):
    """Each example checks one fused candidate (drawn), so every candidate is reached across
    examples while one run of the file stays within a few minutes of compilation."""
    g = with_dtype(architectures.build(name, **data.draw(small_sizes(name))), dtype)
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    cand = data.draw(st.sampled_from(cands), label="candidate")
    seed = data.draw(st.integers(0, 2**31 - 1))
    v = leantile.compile(g, candidate=cand).verify(seed=seed)
    assert v["ok"], (cand, v)
