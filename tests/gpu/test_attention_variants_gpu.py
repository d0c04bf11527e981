"""GPU checks (marker gpu; skipped without CUDA) of issue 51's attention variants at sizes that
divide no tile (leantile.architectures.variants): every fused candidate, compiled and run on
the variant's own inputs (document ids packed in documents of random lengths, ALiBi's slopes),
against the float32 reference, outputs NaN-poisoned first. Document masking's per-row run-time
bounds (mask_bounds) decide which key blocks each CTA streams: a bound one block too tight
drops kept keys, which this check sees.

    pytest -m gpu tests/gpu/test_attention_variants_gpu.py   (on the device)
"""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import leantile
from leantile import reference
from leantile.architectures import variants
from leantile.derive import candidates

pytestmark = pytest.mark.gpu

ODD = {"h": 3, "t_q": 1000, "t_kv": 1000, "d_h": 72, "d_qk": 96, "d_v": 40}
CASES = [(name, ODD) for name in variants.NAMES] + [
    ("document_attention", {**ODD, "t_q": 2049, "t_kv": 2049, "d_h": 128}),  # a partial last tile, long documents
]


@pytest.mark.parametrize("name,sizes", CASES, ids=lambda x: x if isinstance(x, str) else str(x.get("t_q")))
def test_every_candidate_of_each_variant_is_exact(name, sizes):
    mod = variants.module(name)
    g = mod.build(**{a: sizes[a] for a in mod.DEFAULT_SIZES})
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    with ThreadPoolExecutor(8) as pool:
        kernels = list(pool.map(lambda c: leantile.compile(g, candidate=c), cands))
    t = reference.random_inputs(g, seed=4, device="cuda", scale=reference.natural_scale(g))
    t = mod.prepare_inputs(t) if hasattr(mod, "prepare_inputs") else t
    for c, k in zip(cands, kernels):
        v = k.verify(t)
        assert v["ok"], (name, c, v["rel_err"], v["tolerance"])
    assert torch.isfinite(leantile.compile(g).run(t)[next(iter(g.outputs))]).all()
