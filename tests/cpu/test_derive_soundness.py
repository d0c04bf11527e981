"""Issue 13, derive side: graphs users build that the built-ins do not (an intermediate of a
fused region as an output, a weight used twice, clashing axis names, decode attention, ...).
For each class, EVERY candidate derive offers equals leantile.reference in float64 through
interp, or the rule does not match there (the unfused fallback remains), and every graph
has at least one candidate."""
from pathlib import Path

import pytest
import torch
from hypothesis import event, given

from leantile import architectures, interp, ir, reference
from leantile.dag import build_graph, build_graph_with_output
from leantile.derive import candidates, derive, replay
from leantile.plan import Load, Store
from leantile.plan.verify import verify
from leantile.target import DEFAULT
from plan_checks import rel_err
from strategies import issue46_graphs

SIZES = {"m": 5, "k": 7, "n": 6, "j": 4}


def _check_all(g, tiles_list=({"block_m": 2, "block_n": 4, "block_k": 3, "block_r": 2}, None)):
    """Every candidate, default and small tiles, against the float64 reference. Returns the
    candidate names."""
    cands = candidates(g)
    assert cands, "every graph gets a candidate"
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in cands:
        for tiles in tiles_list:
            plan = derive(g, c.name, tiles)
            out = interp.run(plan, inputs, dtype=torch.float64)
            for name in g.outputs:
                assert torch.isfinite(out[name]).all(), f"{c.name} {tiles}: {name} not written everywhere"
                err = rel_err(out[name].double(), ref[name])
                assert err < 1e-9, f"{c.name} {tiles}: output {name}: relative error {err:.3g}"
    return [c.name for c in cands]


# 1. layer_norm(X) W used twice with the same W: the column sums of W once per weight -------
def test_1_layernorm_then_same_weight_twice():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        ln = g.layer_norm(x, "k")
        g.output("a", g.matmul(ln, w, "k", "k"))
        g.output("b", g.matmul(ln, w, "k", "k"))
    names = _check_all(build_graph("ln_ww", SIZES, body))
    assert any("colsum_streamed" in n for n in names)  # the rule still applies, soundly


def test_1_layernorm_same_weight_dual_with_epilogue():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        ln = g.layer_norm(x, "k")
        return g.mul(g.matmul(ln, w, "k", "k"), g.silu(g.matmul(ln, w, "k", "k")))
    _check_all(build_graph_with_output("ln_ww_epi", SIZES, body))


# 2. a row softmax of scaled scores whose max / shifted / exp are also outputs -----------------
@pytest.mark.parametrize("also", ["max", "shifted", "exp", "sum", "scaled"])
def test_2_scaled_softmax_with_intermediate_outputs(also):
    def body(g):
        x = g.input("X", ["m", "n"])
        z = g.mul(x, g.const(0.5))
        mx = g.red("max", z, "n")
        sh = g.sub(z, mx)
        e = g.exp(sh)
        s = g.red("sum", e, "n")
        g.output("y", g.div(e, s))
        g.output("extra", {"max": mx, "shifted": sh, "exp": e, "sum": s, "scaled": z}[also])
    _check_all(build_graph(f"sm_{also}", SIZES, body))


def test_2_scaled_softmax_alone_still_fuses():
    def body(g):
        x = g.input("X", ["m", "n"])
        return g.softmax(g.mul(x, g.const(0.5)), "n")
    names = _check_all(build_graph_with_output("sm_scaled", SIZES, body))
    assert "online_row" in names


# 3. a fused GEMM kernel and the unfused kernel of the same matmul ------------------------------
def test_3_scaled_scores_softmax_with_scores_output():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        z = g.mul(g.matmul(x, w, "k", "k"), g.const(0.5))
        g.output("scores", z)
        g.output("p", g.softmax(z, "n"))
    _check_all(build_graph("sm_gemm", SIZES, body))


def test_3_gemm_epilogue_read_by_a_softmax():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        mm = g.matmul(x, w, "k", "k")
        g.output("act", g.silu(mm))
        g.output("p", g.softmax(g.mul(mm, g.const(2.0)), "n"))
    _check_all(build_graph("sm_gemm2", SIZES, body))


# 4. B's free axis has the name of A's contracted axis ------------------------------------------
def test_4_matmul_b_free_axis_named_like_a_contracted_axis():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["j", "k"])
        return g.matmul(x, w, "k", "j")
    _check_all(build_graph_with_output("clash", {"m": 5, "k": 4, "j": 4}, body))


def test_4_clash_with_epilogue_and_norm():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["j", "k"])
        return g.silu(g.matmul(g.rms_norm(x, "k"), w, "k", "j"))
    _check_all(build_graph_with_output("clash_norm", {"m": 5, "k": 4, "j": 4}, body))


def test_4_renaming_keeps_plans_of_graphs_without_a_clash_and_refuses_an_unrenamable_one():
    from leantile.ir.axis_names import unclash
    g = architectures.build("attention")
    assert unclash(g) is g
    plan = derive(build_graph_with_output("clash", {"m": 5, "k": 4, "j": 4}, lambda g: g.matmul(
        g.input("X", ["m", "k"]), g.input("W", ["j", "k"]), "k", "j")))
    assert plan.global_buffer("X").axes == ("m", "k_1") and plan.axes["k_1"] == 4

    def body(g):  # X's k is contracted and is also the output's k (through the add): one axis
        x = g.input("X", ["m", "k"])
        return g.add(g.matmul(x, g.input("W", ["j", "k"]), "k", "j"), x)
    # the IR refuses it (ir.check), so every graph the IR accepts can be derived
    with pytest.raises(ir.GraphError, match="node 2 \\(matmul\\): axis 'k' is contracted and also kept"):
        build_graph_with_output("clash2", {"m": 5, "k": 4, "j": 4}, body)


@pytest.mark.parametrize("also", ["max", "exp", "sum", "scores"])
def test_2_scaled_attention_with_intermediate_outputs(also):
    def body(g):
        q = g.input("Q", ["h", "s", "d"])
        k = g.input("K", ["h", "t", "d"])
        v = g.input("V", ["h", "t", "e"])
        z = g.mul(g.matmul(q, k, "d", "d"), g.const(0.25))
        mx = g.red("max", z, "t")
        e = g.exp(g.sub(z, mx))
        sm = g.red("sum", e, "t")
        g.output("o", g.matmul(g.div(e, sm), v, "t", "t"))
        g.output("extra", {"max": mx, "exp": e, "sum": sm, "scores": z}[also])
    _check_all(build_graph(f"att_{also}", {"h": 2, "s": 3, "d": 4, "t": 9, "e": 5}, body))


# 6. decode attention: one query per head, Q[h, d] --------------------------------------------
def test_6_decode_attention():
    def body(g):
        q = g.input("Q", ["h", "d"])
        k = g.input("K", ["h", "t", "d"])
        v = g.input("V", ["h", "t", "e"])
        s = g.matmul(q, k, "d", "d")
        return g.matmul(g.softmax(g.mul(s, g.const(0.25)), "t"), v, "t", "t")
    _check_all(build_graph_with_output("decode", {"h": 3, "d": 4, "t": 9, "e": 5}, body))


# 7. a norm centred on a constant under a pulled-out scale ---------------------------------
def test_7_norm_centred_on_a_constant():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        c = g.const(0.25)
        var = g.mean_along(g.square(g.sub(x, c)), "k")
        r = g.rsqrt(g.add(var, g.const(1e-5)))
        return g.matmul(g.mul(x, r), w, "k", "k")
    _check_all(build_graph_with_output("centred_const", SIZES, body))


# 9. a dual GEMM whose second weight depends on the first product -----------------------------
def test_9_dependent_dual_gemm():
    def body(g):
        x = g.input("X", ["m", "k"])
        w = g.input("W", ["k", "n"])
        a = g.matmul(x, w, "k", "k")  # [m, n]
        w2 = g.mul(g.red("sum", a, "m"), g.input("V", ["k", "n"]))  # [k, n], depends on a
        return g.add(a, g.matmul(x, w2, "k", "k"))
    _check_all(build_graph_with_output("dep_dual", SIZES, body))


# 10. a const node as a graph output ----------------------------------------------------------
def test_10_const_output():
    def body(g):
        x = g.input("X", ["m", "k"])
        g.output("y", g.exp(x))
        g.output("c", g.const(1.5))
        g.output("size", g.size_const("k"))
    _check_all(build_graph("const_out", SIZES, body))


def test_10_input_as_output_and_const_only():
    def body(g):
        x = g.input("X", ["m", "k"])
        g.output("same", x)
        g.output("c", g.add(g.const(1.5), g.const(2.0)))
    _check_all(build_graph("in_out", SIZES, body))


# -- the plan verifier --------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]
EXPORTS = sorted((REPO / "exports").glob("*.json"))


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_every_candidate_of_every_export_verifies(path):
    g = ir.load(path)
    for c in candidates(g):
        assert verify(derive(g, c.name), g) == []
        # 16 x 32 tiles need few threads: 8 warps cannot share them (TileLang: no warp partition)
        assert verify(derive(g, c.name, {"block_m": 16, "block_n": 32, "block_k": 8, "threads": 32}), g) == []
    assert verify(replay(g, g.derivation), g) == []


def _plan(name="layernorm_linear_gelu", cand="stats_separate+colsum_precomputed"):
    g = architectures.build(name, m=64, d=32, n=48)
    return g, derive(g, cand)


def _edit(plan, kernel: int, **fields):
    ks = list(plan.kernels)
    ks[kernel] = ks[kernel].model_copy(update=fields)
    return plan.model_copy(update={"kernels": tuple(ks)})


def test_verify_duplicate_kernel_names():
    g, p = _plan()
    bad = _edit(p, 1, name=p.kernels[0].name)
    assert any(f"two kernels named {p.kernels[0].name!r}" in x for x in verify(bad, g))


def test_verify_read_before_write():
    g, p = _plan()
    gk = p.kernels[-1]
    assert isinstance(gk.body[0], Load)
    bad = _edit(p, len(p.kernels) - 1, body=gk.body[1:])  # drop the load of the LHS tile
    probs = verify(bad, g)
    assert any(f"reads {gk.body[0].dst!r} before anything writes it" in x for x in probs), probs


def test_verify_output_unwritten_and_written_twice():
    g, p = _plan()
    gk = p.kernels[-1]
    out_buf = p.outputs["out"]
    no_store = _edit(p, len(p.kernels) - 1,
                     epilogue=tuple(s for s in gk.epilogue if not (isinstance(s, Store) and s.dst == out_buf)))
    assert any(f"no kernel stores its buffer {out_buf!r}" in x for x in verify(no_store, g))
    twice = p.model_copy(update={"kernels": (*p.kernels, gk.model_copy(update={"name": "again"}))})
    assert any(f"global {out_buf} is stored by 2 kernels" in x for x in verify(twice, g))


def test_verify_global_read_before_any_kernel_writes_it():
    g, p = _plan()
    assert len(p.kernels) == 3  # row stats, column sums, the GEMM reading both
    bad = p.model_copy(update={"kernels": tuple(reversed(p.kernels))})
    probs = verify(bad, g)
    assert any("before any kernel stores it" in x for x in probs), probs


def test_verify_buffer_axes_are_plan_axes():
    g, p = _plan()
    k = p.kernels[0]
    b = k.buffers[0]
    bufs = (b.model_copy(update={"axes": (*b.axes[:-1], "zz")}), *k.buffers[1:])
    probs = verify(_edit(p, 0, buffers=bufs), g)
    assert any(f"buffer {b.name} has axis 'zz'" in x for x in probs), probs


def test_verify_shared_memory_limit():
    g, p = _plan("matmul", None)
    assert verify(p, g) == []
    big = {"block_m": 1024, "block_n": 1024, "block_k": 256}
    with pytest.raises(ir.GraphError) as e:
        derive(g, None, big)
    msg = str(e.value)
    assert "shared memory" in msg and "gemm_" in msg and str(DEFAULT.smem_per_cta) in msg
    # a flash kernel of a head dimension of 1024 is 256 KiB of Q tile alone: not offered, the
    # row softmax is, and every candidate still equals the reference
    att = architectures.build("attention", h=2, t_q=3, t_kv=5, d_h=1024)
    names = _check_all(att, (None,))
    assert "online" not in names and "online_row" in names


def test_derive_refuses_a_plan_that_fails_verification(monkeypatch):
    """A bug in a kernel builder (here: the unfused kernels' stores dropped) is a RuntimeError
    naming the problem, never a plan that leaves an output unwritten."""
    from leantile.derive import kernels as K
    real = K.node_kernel

    def no_store(*a, **kw):
        k = real(*a, **kw)
        return k.model_copy(update={"body": tuple(s for s in k.body if not isinstance(s, Store)),
                                    "epilogue": tuple(s for s in k.epilogue if not isinstance(s, Store))})
    monkeypatch.setattr(K, "node_kernel", no_store)
    g = architectures.build("rmsnorm", m=8, d=16, n=8)
    with pytest.raises(RuntimeError, match="fails verification: .*no kernel stores|before any kernel stores"):
        derive(g, "unfused")


def test_pipelined_tiles_count_once_per_stage():
    """A tile the stream body loads is multi-buffered (`stages` copies): swiglu at 128x256x64
    with 3 stages allocates (16 + 32 + 32 KiB) x 3 = 240 KiB (TileLang: 245760 bytes), over the
    227 KiB an H100/H200 CTA may use, so derive refuses it instead of emitting a kernel that
    cannot launch; 2 stages fit."""
    g = architectures.build("swiglu")
    with pytest.raises(ir.GraphError, match="245760 bytes"):
        derive(g, "fused", {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 3})
    assert verify(derive(g, "fused", {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 2}), g) == []
    # attention with d_h 512 over 8 queries, at the default tiles and at the tiles its shape takes
    # (64 rows, one stage): Q 64 KiB + (K + V) 256 KiB: the flash kernel cannot launch, the row
    # softmax remains (and the refusal says why). d_h 256 fits at its shape's tiles (one stage:
    # 160 KiB; tests/cpu/test_large_heads.py)
    from leantile.derive import refusals
    att = architectures.build("attention", h=2, t_q=8, t_kv=8, d_h=512)
    assert "online" not in [c.name for c in candidates(att)]
    assert any("327680 bytes" in line for line in refusals(att))


# 12. issue 46: a scaled GEMM into a GEMM, a norm into GEMMs of different weights, f64 ----------
@given(issue46_graphs())
def test_issue46_generated_graphs_every_candidate_equals_reference(gc):
    """Generated graphs of issue 46's classes (17: X W scaled by a constant or per-row input, or
    centred, into a second GEMM, the scaled product maybe an output or the chain unused; 18: a
    norm's rows into GEMMs of different weights; 19: f64 inputs): every candidate derives, at the
    default and at small tiles, and equals the float64 reference. Where a class's rewrite can
    apply it is offered (else the test would not reach the path that crashed)."""
    g, classes = gc
    for c in sorted(classes):
        event(f"class {c}")
    cands = candidates(g)
    rules = [[s.rule for s in c.steps] for c in cands]
    if 17 in classes:  # the second GEMM pulls the scale out of its LHS
        assert any({"scale_pullout", "mean_pullout"} & set(r) for r in rules), [c.name for c in cands]
    if 18 in classes:  # some candidate computes the shared statistics in two sites' kernels
        assert any(sum(s.rule == "stream_stats" and s.params.get("mode") == "separate" for s in c.steps) >= 2
                   for c in cands), [c.name for c in cands]
    _check_all(g)


# 11. a norm -> GEMM whose rows are longer than one streamed block of the row statistics ------
@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_11_norm_statistics_over_several_streamed_blocks(norm):
    """Over 8192 columns (two rows no longer fit on chip) the row-statistics kernel streams the
    row in blocks of 1024 (shape rule): 8300 columns are eight whole blocks and a partial one, so
    the accumulated (and, for layer_norm, pivot-shifted) sums cross block boundaries and mask
    the padding; every candidate stays exact. (Rows that fit take one block: test_11_... below.)"""
    def body(g):
        x = g.input("X", ["m", "k"])
        return g.matmul(getattr(g, norm)(x, "k"), g.input("W", ["k", "n"]), "k", "k")
    g = build_graph_with_output(f"{norm}_long", {"m": 3, "k": 8300, "n": 6}, body)
    names = _check_all(g)
    assert any("stats_separate" in n for n in names)


@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_11_norm_statistics_of_a_row_on_chip(norm):
    """A row that fits on chip is one block of the row-statistics kernel, padded: 1100 columns
    in a block of 2048, the padding masked out of the sums."""
    def body(g):
        x = g.input("X", ["m", "k"])
        return g.matmul(getattr(g, norm)(x, "k"), g.input("W", ["k", "n"]), "k", "k")
    names = _check_all(build_graph_with_output(f"{norm}_row", {"m": 5, "k": 1100, "n": 6}, body))
    assert any("stats_separate" in n for n in names)
