"""GPU checks (marker gpu; skipped without CUDA) of generated graphs in f16 and bf16: the
structures users build (several outputs, an intermediate of the fused region as an output, a
computed LHS `0.5 * X`, a reused weight, renamed and clashing contraction axes, casts in the
epilogue, constant outputs, dependent GEMMs, norms into one or two GEMMs, attention with
computed operands and masks, softmax with its statistics as outputs) at sizes of several
tiles, partial ones and size-1 axes. Few rows give GEMM kernels their swapped accumulator
(plan.passes.swap_operands), a layout the CPU interpreter cannot see: only values computed on
the GPU tell a wrong transpose. Every fused candidate of each graph, through leantile.compile's
verify (outputs NaN-poisoned, fresh random inputs, the dtype's tolerance).

    pytest -m gpu tests/gpu/test_generated_half_gpu.py   (on the device)
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from leantile.derive import candidates, derive

from gpu_checks import verify_all
import strategies
from strategies import ALL_CLASSES, inputs_in, inputs_mixed, resized, structured_graphs

pytestmark = pytest.mark.gpu

# rows of a decode step (1..16: the swapped tiles) and of a prefill; other axes over one or
# several 64/128 tiles, none a multiple of a tile; 77 makes a last axis whose rows are no
# multiple of 16 bytes in any dtype (emit.unaligned's windows: GPT-2's vocabulary is such a row)
ROWS = (1, 3, 16, 40, 136)
OTHER = (1, 24, 77, 200)
ROW_AXES = ("m", "t_q")
# each family of generated graphs drawn on its own (one_of would let the shrinker favour one)
FAMILIES = {
    "gemm": strategies._user_gemm(ALL_CLASSES).map(lambda gc: gc[0]),
    "norm_gemm": strategies._user_norm_gemm(ALL_CLASSES).map(lambda gc: gc[0]),
    "softmax": strategies._user_softmax(ALL_CLASSES).map(lambda gc: gc[0]),
    "attention": strategies._user_attention(ALL_CLASSES).map(lambda gc: gc[0]),
    "structured": structured_graphs(),
}
EXAMPLES = 12  # per family
# LEANTILE_GPU_FAMILIES=softmax,gemm runs those families only (one device call compiles a
# family's kernels in a few minutes; all five together run past a call's 10 minutes)
ONLY = [f for f in os.environ.get("LEANTILE_GPU_FAMILIES", "").split(",") if f]


@st.composite
def half_graphs(draw, family):
    g = draw(family)
    pick = draw(st.randoms(use_true_random=False))  # sizes spread over the table, not shrunk to its first
    g = resized(g, lambda a: pick.choice(ROWS if a in ROW_AXES else OTHER))
    return inputs_in(g, draw(st.sampled_from(["f16", "bf16"])), only="f32")


@st.composite
def mixed_graphs(draw, family):
    """The same families, each input in a drawn dtype (f32, f16, bf16): float32 outputs beside
    16-bit ones, written in their own dtypes and judged at their own tolerances."""
    g = draw(half_graphs(family))
    return inputs_mixed(g, draw)


def _drawn(make=None) -> list:
    """The distinct graphs of EXAMPLES derandomized draws of each family (hypothesis repeats an
    example where it varies bytes no draw reads): drawn first, so that every (graph, candidate)
    compiles in one pool (gpu_checks.verify_all) rather than a few at a time."""
    graphs: dict[str, object] = {}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    def draw(g):
        graphs.setdefault(g.model_dump_json(), g)
    unknown = set(ONLY) - set(FAMILIES)
    assert not unknown, f"LEANTILE_GPU_FAMILIES names no family: {sorted(unknown)}; families: {sorted(FAMILIES)}"
    for name, family in FAMILIES.items():
        if not ONLY or name in ONLY:
            given((make or half_graphs)(family))(draw)()
    return list(graphs.values())


def test_every_candidate_of_generated_half_graphs_is_exact():
    graphs = _drawn()
    jobs = [(g, c.name) for g in graphs for c in candidates(g) if c.name != "unfused"]
    swapped = sum(bool(k.swapped) for g, c in jobs for k in derive(g, c).kernels)
    if not ONLY:  # the whole sweep reached swapped kernels
        assert len(graphs) >= 12 and swapped >= 5, (len(graphs), swapped)
    assert verify_all(jobs) == []


def test_every_candidate_of_generated_mixed_dtype_graphs_is_exact():
    graphs = _drawn(mixed_graphs)
    mixed = sum(len({n.dtype for n in g.inputs()}) > 1 for g in graphs)
    jobs = [(g, c.name) for g in graphs for c in candidates(g)]
    if not ONLY:
        assert len(graphs) >= 12 and mixed >= 3, (len(graphs), mixed)
    assert verify_all(jobs) == []
