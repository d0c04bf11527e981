"""Issue 51's attention variants (leantile.architectures.variants): each module's torch baseline
computes its graph (speed ratios of other math would mean nothing), `--suite attention-variants`
selects them and no other selection does, each fuses to one flash kernel at its suite shape, and
the two plan properties the variants need: document masking skips the key blocks its causal
factor rules out (an equality of run-time ids beside it used to hide the bound), and ALiBi's
slope, read once per CTA, leaves FlashAttention-3's schedule to the default plan."""
import pytest
import torch
from hypothesis import event, given, strategies as st

import evaluator as ev
from leantile import interp, reference, suite
from leantile.architectures import variants
from leantile.autodiff import vjp
from leantile.bench import baselines
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.runtime import choose_plan
from leantile.tolerance import TOLERANCE, rel_err, tolerance
from strategies import inputs_in, masked_attention_graphs

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
    """One flash kernel, its key blocks past the query skipped (every variant is causal); document
    masking also has the kernels of its run-time bounds before it (mask_bounds: a row reduction of
    the mask, split over the keys where the rows alone leave the GPU idle)."""
    g, _ = suite.build(case)
    plan, how = choose_plan(g)
    kinds = [k.name.split("_")[0] for k in plan.kernels]
    assert how == "default" and kinds[-1] == "flash" and kinds.count("flash") == 1, (plan.candidate, kinds)
    assert kinds[:-1] == ([] if case.arch != "document_attention" else ["row", "split"][:len(kinds) - 1]), kinds
    assert plan.kernels[-1].stream.skip


def test_document_masking_streams_only_its_documents_blocks():
    """keep = (key <= query) * eq(doc[query], doc[key]): the causal bound, and the first and last
    key each row keeps (mask_bounds) read per row at run time: a tile streams the key blocks from
    its first row's document start to its diagonal. Every candidate at tiles that do not divide the
    axes equals the float64 evaluator."""
    from leantile.interp import _interior_blocks, _stream_blocks, _Tile, _leaf_values

    mod, g = _graph("document_attention", t_q=40, t_kv=40)
    plan = derive(g, "online_exp2", {"block_m": 4, "block_n": 3})
    k = plan.kernels[-1]
    assert [(b.side, b.coef, b.per_row, b.flag) for b in k.stream.skip] == \
        [("hi", 1, False, False), ("lo", 0, True, False), ("hi", 0, True, False), ("lo", 0, True, True)]
    assert k.stream.skip[3].pair == (1, 2)
    assert "mask_bounds" in [s.rule for s in candidates(g)[0].steps]
    # the mask's statements (ids' equality, positions, bounds) run on boundary blocks alone
    masking = [s for s in k.body if s.op == "iota" or (s.op == "map" and s.fn in ("select", "eq", "le", "ge"))]
    assert len(masking) >= 8 and all(s.boundary_only for s in masking), masking
    inputs = {n: t.double() for n, t in _inputs(mod, g, 0).items()}
    ids = inputs["doc_q"].tolist()
    keep = [[j <= i and ids[i] == ids[j] for j in range(40)] for i in range(40)]
    first = torch.tensor([float(row.index(True)) for row in keep], dtype=torch.float64)
    last = torch.tensor([float(39 - row[::-1].index(True)) for row in keep], dtype=torch.float64)
    count = torch.tensor([float(sum(row)) for row in keep], dtype=torch.float64)
    mem = {b.leaf: ((first if b.side == "lo" else last) - b.shift) / b.scale for b in k.stream.skip
           if b.per_row and not b.flag}
    mem[k.stream.skip[3].leaf] = count
    gaxes = {b.name: b.axes for b in plan.globals}
    for row_tile in range(10):  # each tile of 4 rows: from its first row's document start to its last row
        tile = _Tile(plan, k, (row_tile, 0) if k.grid[0].axis == "t_q" else (0, row_tile))
        blocks = _stream_blocks(plan, k, tile, _leaf_values(k, tile, mem, gaxes))
        start = ids.index(ids[4 * row_tile])
        assert list(blocks) == list(range(start // 3, (4 * row_tile + 3) // 3 + 1)), (row_tile, ids)
        # unmasked: exactly the blocks every row of the tile keeps whole (documents are intervals)
        first_b, stop_b = _interior_blocks(k, tile, _leaf_values(k, tile, mem, gaxes, tightest=True))
        whole = [j for j in range(14) if all(keep[r][x] for r in range(4 * row_tile, 4 * row_tile + 4)
                                             for x in range(3 * j, 3 * j + 3))]
        assert list(range(first_b, stop_b)) == whole, (row_tile, ids, first_b, stop_b)
    # a row that is no interval (its count below its span) unmasks nothing in its tile
    broken = count.clone()
    broken[5] -= 1
    tile = _Tile(plan, k, (1, 0) if k.grid[0].axis == "t_q" else (0, 1))
    first_b, stop_b = _interior_blocks(k, tile, _leaf_values(k, tile, {**mem, k.stream.skip[3].leaf: broken},
                                                             gaxes, tightest=True))
    assert first_b >= stop_b
    # a flag whose pair is not the row's lo and hi bounds is refused by plan.verify
    from leantile.plan.verify import verify
    assert not verify(plan, g)
    skip = list(k.stream.skip)
    skip[3] = skip[3].model_copy(update={"pair": (0, 2)})  # the causal bound as its lo side
    bad = k.model_copy(update={"stream": k.stream.model_copy(update={"skip": tuple(skip)})})
    bad_plan = plan.model_copy(update={"kernels": (*plan.kernels[:-1], bad)})
    assert any("interior flag" in p for p in verify(bad_plan, g))
    for seed in (0, 1):
        inputs = {n: t.double() for n, t in _inputs(mod, g, seed).items()}
        ref = ev.evaluate(g, inputs)["out"]
        for c in candidates(g):
            for tiles in (None, {"block_m": 4, "block_n": 3}, {"block_m": 1, "block_n": 2}, {"block_m": 8, "block_n": 16}):
                out = interp.run(derive(g, c.name, tiles), inputs, dtype=torch.float64)["out"]
                assert ev.rel_err(out, ref) <= TOLERANCE[torch.float64], (c.name, tiles)


def test_document_masking_under_the_overlapped_schedule_computes_its_graph():
    """The ids along the keys are read by the mask alone, which runs on boundary blocks alone (the
    ids' load too): FA3's cut of the body keeps them in its softmax part (overlap=1). The default
    plan does not take it yet: not run on a GPU (benchmarks/device_calls/README.md). At 300 rows of
    4 documents (non-dividing 32-key blocks, first / last / count read per row) the overlapped plan
    equals the float64 evaluator, its interior blocks unmasked."""
    _, big = _graph("document_attention", h=16, t_q=4096, t_kv=4096, d_h=128)
    plan, _ = choose_plan(big)
    loads = [s for s in plan.kernels[-1].body if s.op == "load" and s.src == "doc_kv"]
    assert loads and all(s.boundary_only for s in loads)
    mod, g = _graph("document_attention", h=2, t_q=300, t_kv=300, d_h=32)
    tiles = {"block_m": 128, "block_n": 32, "threads": 256, "overlap": 1}
    plan = derive(g, "online_exp2", tiles)
    assert plan.kernels[-1].overlap
    for seed in (0, 1):
        inputs = {n: t.double() for n, t in _inputs(mod, g, seed).items()}
        ref = ev.evaluate(g, inputs)["out"]
        out = interp.run(plan, inputs, dtype=torch.float64)["out"]
        assert ev.rel_err(out, ref) <= TOLERANCE[torch.float64], seed


@pytest.mark.parametrize("tiles", [None, {"block_m": 64, "block_n": 128, "stages": 2, "threads": 128, "overlap": 0}],
                         ids=["default", "m64_stages2"])
def test_document_masking_flash_loop_is_warp_specialised(tiles):
    """The per-row bounds (first, last, count of each row's kept keys) set the loop's trip count
    and its first key block: TileLang 0.1.15 gives the loop a producer warpgroup only if they are
    let-bound expressions, not variables a loop fills (g57: no producer, 364 bytes of spills, 0.55x
    FlexAttention). The flash kernel lowers with TMA loads in a producer warpgroup."""
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import hopper_features, lower_to_cuda

    _, g = _graph("document_attention", h=16, t_q=4096, t_kv=4096, d_h=128)
    plan = choose_plan(g)[0] if tiles is None else derive(g, "online_exp2", tiles)
    k = plan.kernels[-1]
    assert any(b.per_row for b in k.stream.skip) and not k.overlap, plan.tiles
    mod = load_module(emit_module(plan), f"doc_ws_{plan.tiles['block_m']}_{plan.tiles.get('stages')}")
    f = hopper_features(lower_to_cuda(mod.build_kernel()[k.name], arch="sm_90"))
    assert f["warp_specialized"] and f["tma"], f


def test_alibi_slope_read_once_per_cta_keeps_the_overlapped_schedule():
    """A leaf along no key axis (the slope per head) adds no tile per key block: the default plan
    at a long causal shape takes FA3's schedule, as causal attention does."""
    _, g = _graph("alibi_attention", h=16, t_q=4096, t_kv=4096, d_h=128)
    plan, _ = choose_plan(g)
    assert plan.tiles.get("overlap") == 1 and all(k.overlap for k in plan.kernels)


@given(masked_attention_graphs(), st.integers(0, 2**31 - 1))
def test_mask_bounds_rewrite_computes_what_the_graph_computes(gc, seed):
    """The graph mask_bounds returns (the bounds added to every data mask) evaluates to the graph's
    own outputs, wholly masked rows (NaN) included; where it fires, the attention's keep gains the
    two comparisons skip_masked_tiles reads per row."""
    from leantile.derive.rules.mask_bounds import bound_masks, sites
    g, _ = gc
    h, steps = bound_masks(g)
    assert len(steps) == len(sites(g))
    event(f"mask_bounds fired: {bool(steps)}")
    inputs = ev.random_inputs(g, seed)
    want, got = ev.evaluate(g, inputs), ev.evaluate(h, inputs)
    for name in want:
        assert torch.equal(want[name].isnan(), got[name].isnan())
        assert torch.allclose(want[name].nan_to_num(), got[name].nan_to_num(), rtol=0, atol=0), name


def test_mask_bounds_leaves_masks_of_positions_and_dense_masks_alone():
    """Causal and window masks bound the keys by formula already; a dense [t_q, t_kv] mask input
    would be read twice for its bounds: neither is rewritten."""
    from leantile.architectures import build
    from leantile.derive.rules.mask_bounds import sites
    assert not sites(build("causal_attention", h=1, t_q=5, t_kv=5, d_h=4))
    assert not sites(build("sliding_window_attention", h=1, t_q=5, t_kv=5, d_h=4))
    g = DagM("dense", {"h": 1, "t_q": 5, "t_kv": 6, "d_h": 4})
    q, k, v = (g.input(n, ["h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    keep = g.mul(g.le(g.iota("t_kv"), g.iota("t_q")), g.gt(g.input("M", ["t_q", "t_kv"], "f32"), g.const("0")))
    g.output("out", g.matmul(g.softmax(g.select(keep, g.matmul(q, k, "d_h", "d_h"), g.const("-inf")), "t_kv"), v,
                             "t_kv", "t_kv"))
    assert not sites(g.graph())



@pytest.mark.parametrize("name", variants.NAMES)
def test_each_variant_trains_through_flash_backward(name):
    """Each variant's backward with respect to Q, K and V (lt.op asks for the inputs that need a
    gradient; ALiBi's slopes are constants) takes flash_backward, skipping the causal key blocks
    but soft-capping's (g61: without the skip the three ran 0.42x-0.68x FlexAttention's training
    step, the whole square of blocks where the forward ran a triangle), and every candidate at dividing
    and non-dividing tiles equals the float64 evaluation of the backward graph on the variant's own
    inputs (document ids, slopes) and the statistics its forward saves."""
    mod, g = _graph(name, t_q=9, t_kv=11)
    g = inputs_in(g, "f64")
    bw = vjp(g, wrt=["Q", "K", "V"])
    assert candidates(bw.graph)[0].name.startswith("flash_backward")
    # the causal key blocks skipped in both kernels: the scores' scale comes after the mask in the
    # cotangent's chain (a division by a literal keeps dS zero where the mask drops a key); soft-
    # capping's tanh' factor would turn a NaN score under the mask into a NaN dS: every block runs
    streams = [k.stream for k in derive(bw.graph).kernels if k.stream and k.name.startswith("flash_bwd")]
    assert len(streams) == 2 and all(bool(st.skip) == (name != "softcap_attention") for st in streams), name
    t = {n: x.double() for n, x in _inputs(mod, g, seed=5).items()}
    inputs = {**t, **{n.name: torch.randn(bw.graph.shape(n.id), dtype=torch.float64,
                                          generator=torch.Generator().manual_seed(7))
                      for n in bw.graph.inputs() if n.name not in t}}
    inputs = reference.saved_from_forward(g, bw, inputs)
    want = reference.evaluate(bw.graph, inputs, compute_dtype=torch.float64)
    for c in candidates(bw.graph):
        for tiles in (None, {"block_m": 2, "block_n": 4}, {"block_m": 3, "block_n": 2}):
            got = interp.run(derive(bw.graph, c.name, tiles), inputs, dtype=torch.float64)
            for o in bw.graph.outputs:
                assert torch.isfinite(want[o]).all() and ev.rel_err(got[o], want[o]) <= 1e-9, (c.name, tiles, o)


def _literal_divisions(plan) -> list:
    return [s for k in plan.kernels for part in (k.prologue, k.body, k.epilogue) for s in part
            if s.op == "map" and s.fn == "div" and str(s.args[1]).startswith("#")]


def _threshold_attention():
    """Causal attention whose scores' quotient s / 49 is also compared (keep where s / 49 >= 1)."""
    g = DagM("threshold_attention", {"h": 2, "t_q": 9, "t_kv": 11, "d_h": 8})
    q, k, v = (g.input(n, ["h", t, "d_h"], "f64") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.const("49"))
    keep = g.mul(g.ge(s, g.const("1")), g.le(g.iota("t_kv"), g.iota("t_q")))
    g.output("out", g.matmul(g.softmax(g.select(keep, s, g.const("-inf")), "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def test_a_score_divided_by_a_constant_is_multiplied_by_its_reciprocal_unless_compared():
    """derive.score_maps: s / sqrt(d_h) in ALiBi's score function (an IEEE division per score
    beside the exp2) is s * (1 / sqrt(d_h)) in the forward's and the backward's flash kernels;
    where a comparison reads the quotient (a threshold on the scores) it stays a division in both:
    at s = 49, 49 * fl(1 / 49) < 1 = 49 / 49 in float64, so the reciprocal would drop the key that
    the graph keeps. Every candidate equals the float64 evaluator there."""
    _, g = _graph("alibi_attention", t_q=9, t_kv=11)
    g = inputs_in(g, "f64")
    fwd = derive(g, "online_exp2")
    bw = vjp(g, wrt=["Q", "K", "V"]).graph
    scale = 1.0 / (SMALL["d_h"] ** 0.5)
    for plan in (fwd, derive(bw, candidates(bw)[0].name)):
        assert not _literal_divisions(plan), plan.candidate
        muls = [s for k in plan.kernels for s in k.body if s.op == "map" and s.fn == "mul"]
        assert any(abs(float(str(a)[1:]) - scale) < 1e-15 for s in muls for a in s.args if str(a).startswith("#")), \
            plan.candidate
    t = _threshold_attention()
    bwt = vjp(t, wrt=["Q", "K", "V"]).graph
    assert _literal_divisions(derive(t, "online_exp2")) and _literal_divisions(derive(bwt, candidates(bwt)[0].name))
    inputs = {n: torch.round(x.double()) for n, x in reference.random_inputs(t, seed=3, scale=3.0).items()}
    inputs["Q"][0, 4], inputs["K"][0, 2] = 0.0, 0.0
    inputs["Q"][0, 4, 0], inputs["K"][0, 2, 0] = 7.0, 7.0  # s[0, 4, 2] = 49 exactly, the row's largest
    want = ev.evaluate(t, inputs)["out"]
    for cand in candidates(t):
        got = interp.run(derive(t, cand.name, {"block_m": 4, "block_n": 3}), inputs, dtype=torch.float64)["out"]
        assert torch.equal(torch.isnan(got), torch.isnan(want)), cand.name
        assert ev.rel_err(torch.nan_to_num(got), torch.nan_to_num(want)) <= TOLERANCE[torch.float64], cand.name


def test_bench_prepares_the_inputs_its_architecture_module_means():
    """`leantile bench module.py:build` and the suite draw random inputs, then the module's own
    prepare_inputs (document ids in order, ALiBi's positive slopes); a graph of the same name and
    other math keeps its draw."""
    from leantile.bench import prepared
    mod, g = _graph("document_attention")
    t = reference.random_inputs(g, seed=1)
    got = prepared(g, t, variants.source("document_attention"))
    assert bool((got["doc_kv"].diff() >= 0).all()) and torch.equal(got["doc_q"], got["doc_kv"][:g.axes["t_q"]])
    other = DagM("document_attention", {"t_q": 3, "t_kv": 3})
    other.output("out", other.add(other.input("doc_q", ["t_q"], "f32"), other.input("doc_kv", ["t_kv"], "f32")))
    other = other.graph()
    t = reference.random_inputs(other, seed=1)
    assert prepared(other, t, variants.source("document_attention")) is t
