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
from leantile.runtime import choose_plan

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


SCHEDULE_SIZES = [{"h": 4, "t_q": 2049, "t_kv": 2049, "d_h": 128}, {"h": 2, "t_q": 4096, "t_kv": 4096, "d_h": 64},
                  {"h": 3, "t_q": 1500, "t_kv": 1500, "d_h": 128}]


@pytest.mark.parametrize("sizes", SCHEDULE_SIZES, ids=lambda s: str(s["t_q"]))
def test_document_masking_under_other_schedules_is_exact(sizes):
    """Document masking under FA3's schedule (overlap=1: the ids loaded in the softmax part, on
    boundary blocks alone; the default plan does not take it until this passes on a GPU) and
    under the plain loop at 2 and 3 stages (TileLang's producer warpgroup, which since the per-row
    bounds became let-bound expressions computes them too). The three schedules compile at once
    (one at a time, nine kernels ran past a 210 s call: g59)."""
    mod = variants.module("document_attention")
    g = mod.build(**sizes)
    plan, _ = choose_plan(g)
    schedules = [{**plan.tiles, "stages": 1, "overlap": 1}, {**plan.tiles, "stages": 2}, {**plan.tiles, "stages": 3}]
    with ThreadPoolExecutor(3) as pool:  # one flash kernel each, not split over the keys
        kernels = list(pool.map(lambda tiles: leantile.compile(g, candidate="online_exp2+split", tiles=tiles), schedules))
    assert kernels[0].plan.kernels[-1].overlap
    t = mod.prepare_inputs(reference.random_inputs(g, seed=5, device="cuda", scale=reference.natural_scale(g)))
    for tiles, k in zip(schedules, kernels):
        v = k.verify(t)
        assert v["ok"], (sizes, tiles, v["rel_err"], v["tolerance"])
