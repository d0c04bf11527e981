"""Issue 51's attention variants (leantile.architectures.variants): each module's torch baseline
computes its graph (speed ratios of other math would mean nothing), `--suite attention-variants`
selects them and no other selection does, each fuses to one flash kernel at its suite shape, and
the two plan properties the variants need: document masking skips the key blocks its causal
factor rules out (an equality of run-time ids beside it used to hide the bound), and ALiBi's
slope, read once per CTA, leaves FlashAttention-3's schedule to the default plan."""
import pytest
import torch

import evaluator as ev
from leantile import interp, reference, suite
from leantile.architectures import variants
from leantile.bench import baselines
from leantile.derive import candidates, derive
from leantile.runtime import choose_plan
from leantile.tolerance import TOLERANCE, rel_err, tolerance

SMALL = {"h": 2, "t_q": 9, "t_kv": 11, "d_h": 8, "d_qk": 12, "d_v": 8}


def _graph(name, **sizes):
    mod = variants.module(name)
    return mod, mod.build(**{a: sizes.get(a, SMALL[a]) for a in mod.DEFAULT_SIZES})


def _inputs(mod, g, seed):
    t = reference.random_inputs(g, seed=seed, scale=3.0)
    return mod.prepare_inputs(t) if hasattr(mod, "prepare_inputs") else t


@pytest.mark.parametrize("name", variants.NAMES)
def test_each_variant_baseline_computes_its_graph(name):
    mod, g = _graph(name)
    t = _inputs(mod, g, seed=3)
    eager, vendor = baselines(g, t, variants.source(name))
    assert eager.__module__ != "leantile.bench", f"{name}: no baseline of its own"
    out = next(iter(g.outputs))
    want = reference.evaluate(g, t, compute_dtype=torch.float32)[out]
    same = reference.evaluate(g, t, check=False)[out]
    got = eager()
    assert got.shape == want.shape and torch.isfinite(want).all()
    assert rel_err(got, want, same) <= tolerance(got.dtype), name
    assert "flex_attention" in vendor  # the yardstick of issue 51


def test_document_ids_are_ordered_documents_of_the_asked_count():
    from leantile.architectures.variants.document_attention import document_ids
    for n, docs in ((4096, 5), (7, 3), (1, 5), (2, 5)):
        ids = document_ids(n, docs, seed=n)
        assert ids.shape == (n,) and ids[0] == 0 and bool((ids.diff() >= 0).all()) and bool((ids.diff() <= 1).all())
        assert int(ids[-1]) + 1 == min(docs, n)


def test_the_variants_suite_selects_the_variants_and_no_other_selection_does():
    cases = suite.select(suite="attention-variants")
    assert {c.arch for c in cases} >= set(variants.NAMES) and all("variants" in c.tags for c in cases)
    assert not {c.name for c in cases} & {c.name for c in suite.select(suite="full")}
    assert [c.name for c in suite.select(suite="attention-variants", tags=["mla_attention_t4096"])] == \
        ["mla_attention_t4096"]


@pytest.mark.parametrize("case", suite.select(suite="attention-variants"), ids=lambda c: c.name)
def test_each_variant_case_fuses_to_one_flash_kernel_at_its_shape(case):
    g, _ = suite.build(case)
    plan, how = choose_plan(g)
    assert how == "default" and [k.name.split("_")[0] for k in plan.kernels] == ["flash"], plan.candidate
    assert all(k.stream.skip for k in plan.kernels), "every variant is causal: its key blocks past the query skip"


def test_document_masking_skips_the_causal_half_and_masks_the_rest():
    """keep = (key <= query) * eq(doc[query], doc[key]): the causal factor bounds the keys (blocks
    past the diagonal never run), the equality is evaluated on every block that runs; every
    candidate at tiles that do not divide the axes equals the float64 evaluator."""
    mod, g = _graph("document_attention", t_q=13, t_kv=13)
    plan = derive(g, "online_exp2", {"block_m": 4, "block_n": 3})
    (k,) = plan.kernels
    assert [(b.side, b.coef, b.offset) for b in k.stream.skip] == [("hi", 1, 0)]
    assert not any(getattr(s, "boundary_only", False) for s in k.body), "the ids' equality is no bound"
    for seed in (0, 1):
        inputs = {n: t.double() for n, t in _inputs(mod, g, seed).items()}
        ref = ev.evaluate(g, inputs)["out"]
        for c in candidates(g):
            for tiles in (None, {"block_m": 4, "block_n": 3}, {"block_m": 1, "block_n": 2}):
                out = interp.run(derive(g, c.name, tiles), inputs, dtype=torch.float64)["out"]
                assert ev.rel_err(out, ref) <= TOLERANCE[torch.float64], (c.name, tiles)


def test_alibi_slope_read_once_per_cta_keeps_the_overlapped_schedule():
    """A leaf along no key axis (the slope per head) adds no tile per key block: the default plan
    at a long causal shape takes FA3's schedule, as causal attention does; a bias along the keys
    still does not."""
    _, g = _graph("alibi_attention", h=16, t_q=4096, t_kv=4096, d_h=128)
    plan, _ = choose_plan(g)
    assert plan.tiles.get("overlap") == 1 and all(k.overlap for k in plan.kernels)
    _, doc = _graph("document_attention", h=16, t_q=4096, t_kv=4096, d_h=128)
    assert "overlap" not in choose_plan(doc)[0].tiles  # doc_kv: a tile per key block
