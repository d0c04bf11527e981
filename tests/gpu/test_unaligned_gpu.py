"""GPU checks (marker gpu; skipped without CUDA) of tensors whose rows are no multiple of 8
elements, so no row after the first starts on a 16-byte boundary (GPT-2's vocabulary of 50257,
an odd hidden size, a head dimension of 36). TileLang gives up TMA and vector loads for such
tensors and copies element by element (lowered here: no tl::tma_load, no warp specialisation),
a path the other GPU tests, at multiples of 8, never take. Every fused candidate of every
built-in, the shipped default among them, and the streamed softmax row must stay exact there:
leantile.compile's verify, outputs NaN-poisoned, fresh random inputs.

    pytest -m gpu tests/gpu/test_unaligned_gpu.py   (on the device)
"""
import pytest

import leantile
from leantile import architectures
from leantile.derive import candidates
from leantile.sources import load_source

from gpu_checks import verify_all

pytestmark = pytest.mark.gpu

# every axis odd or no multiple of 8 (d_h = 36: 72-byte rows), none a multiple of a tile
ODD = {"m": 41, "d": 137, "n": 201, "h": 3, "t_q": 73, "t_kv": 201, "d_h": 36, "h_kv": 2, "g": 3}
SOFTMAX = "examples/architectures/softmax_row.py:build"


@pytest.mark.parametrize("name", architectures.NAMES)
def test_every_candidate_is_exact_on_unaligned_rows(name):
    sizes = {a: ODD[a] for a in architectures.module(name).DEFAULT_SIZES}
    g = architectures.build(name, **sizes)
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    assert cands
    assert verify_all([(g, c) for c in cands]) == []
    assert leantile.compile(g).verify(seed=6)["ok"]  # the default plan, at the shape's tiles


@pytest.mark.parametrize("rows,cols", [(70, 50257), (3, 20001), (130, 1001)])
def test_softmax_rows_are_exact_unaligned(rows, cols):
    """A vocabulary's softmax (streamed rows, split where few) and a short one (on chip)."""
    g = load_source(SOFTMAX, {"rows": rows, "cols": cols})
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    assert verify_all([(g, c) for c in cands]) == []
