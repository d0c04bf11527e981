"""GEMM epilogues that read the tile's coordinates (issue 49: "a GEMM epilogue that reads an iota
(upper-triangular product) does not fuse: 2 kernels"): a mask made of iotas and constants joins
the epilogue (fuse_elementwise: LeanTile.fuse_elementwise_eval covers iota), recomputed in every
kernel that needs it and never stored by the GEMM (two GEMM sites sharing one mask would
otherwise both write it). Every candidate equals the graph in float64 through the interpreter,
at sizes that do not divide the tiles, and the kernels of every GEMM path lower."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import dag, interp, reference
from leantile.derive import candidates, derive
from plan_checks import rel_err


def _masked_gemms(sizes, band: bool = False, second: str | None = None):
    """select(n >= m [and n - m < 3], X W, 0); `second`: "shared_lhs" (X V, a dual GEMM) or
    "other_lhs" (Y V: a second GEMM site) under the same mask."""
    def body(g):
        x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
        im, i_n = g.iota("m"), g.iota("n")
        keep = g.ge(i_n, im)
        if band:
            keep = g.mul(keep, g.lt(g.sub(i_n, im), g.const("3")))
        g.output("y", g.select(keep, g.matmul(x, w, "k", "k"), g.const("0")))
        if second:
            lhs = x if second == "shared_lhs" else g.input("Y", ["m", "k"])
            g.output("z", g.select(keep, g.matmul(lhs, g.input("V", ["k", "n"]), "k", "k"), g.const("-1")))
    return dag.build_graph("masked_gemm", sizes, body)


def _exact(g, seed=1):
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)
        for o in g.outputs:
            assert rel_err(out[o].double(), ref[o]) < 1e-12, (c.name, o)


def test_a_triu_product_is_one_kernel():
    g = _masked_gemms({"m": 37, "k": 19, "n": 41})
    plan = derive(g)
    assert [k.name for k in plan.kernels] == ["gemm_5"], [k.name for k in plan.kernels]
    assert not any(b.node is not None and b.node < 5 and b.scope == "global" and b.name not in ("X", "W")
                   for b in plan.globals)  # the mask is never a global tensor


@pytest.mark.parametrize("second", [None, "shared_lhs", "other_lhs"])
@pytest.mark.parametrize("band", [False, True])
def test_masked_gemms_are_exact_and_store_the_mask_nowhere(second, band):
    g = _masked_gemms({"m": 37, "k": 19, "n": 41}, band, second)
    plan = derive(g)
    assert all(k.name.startswith(("gemm", "split")) for k in plan.kernels), [k.name for k in plan.kernels]
    _exact(g)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(m=st.integers(1, 140), k=st.integers(1, 70), n=st.integers(1, 140), band=st.booleans(),
       second=st.sampled_from([None, "shared_lhs", "other_lhs"]), seed=st.integers(0, 2**16))
def test_masked_gemm_random_shapes(m, k, n, band, second, seed):
    _exact(_masked_gemms({"m": m, "k": k, "n": n}, band, second), seed)


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_masked_epilogues_lower_on_every_gemm_path():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from emitter_paths import PINGPONG_TILES
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    cases = [(_masked_gemms({"m": 300, "k": 200, "n": 260}), None, lambda k: True),  # plain, partial tiles
             (_masked_gemms({"m": 8, "k": 4096, "n": 256}), None, lambda k: k.swapped and k.stream.split),
             (_masked_gemms({"m": 256, "k": 512, "n": 256}), PINGPONG_TILES, lambda k: k.pingpong),
             (_masked_gemms({"m": 64, "k": 256, "n": 256}, True, "shared_lhs"), None, lambda k: "_" in k.name[5:]),
             *((input_epilogue({"m": 300, "k": 200, "n": 260}, form), None, lambda k: True)
               for form in ("onehot", "lengths", "scaled"))]
    for g, tiles, path in cases:
        plan = derive(g, None, tiles)
        assert path(plan.kernels[0]), [k.name for k in plan.kernels]  # the GEMM path the case is for
        mod = load_module(emit_module(plan), "masked_gemm")
        for name, f in mod.build_kernel().items():
            assert "__global__" in lower_to_cuda(f, arch="sm_90"), name


def mask_shared(sizes, dtype: str = "f32"):
    """triu(x W), and row sums of the mask and of the masked product: one mask, a GEMM epilogue
    and a row kernel reading it."""
    def body(g):
        x, w = g.input("X", ["m", "k"], dtype), g.input("W", ["k", "n"], dtype)
        keep = g.ge(g.iota("n"), g.iota("m"))
        y = g.select(keep, g.matmul(x, w, "k", "k"), g.const("0"))
        g.output("y", y)
        g.output("kept", g.red("sum", keep, "n"))
        g.output("ysum", g.red("sum", g.mul(y, keep), "n"))
    return dag.build_graph("mask_shared", sizes, body)


def test_a_mask_a_reduction_reads_too_is_computed_by_the_row_kernel_not_by_unfused_kernels():
    """The GEMM recomputes its mask; a row kernel that reduces the same mask computes it too (it
    is not claimed by the GEMM: engine._claimed), so no unfused iota or compare kernel remains.
    n = 300: no column tile holds the row (at 41 the GEMM's epilogue sums it too: fuse_row_epilogue,
    one kernel, test_row_epilogue)."""
    g = mask_shared({"m": 37, "k": 19, "n": 300})
    names = [k.name.split("_")[0] for k in derive(g).kernels]
    assert sorted(names) == ["gemm", "row"], names
    _exact(g)


# --- epilogues that read what inputs alone compute (rules.gemm.tile_computable) -------------------
def input_epilogue(sizes, form: str):
    """A GEMM whose epilogue reads a value made of inputs, coordinates and constants, no product:
    "onehot": the backward of a loss reduced to a scalar, (d_out / m) X W - (d_out / m) [n == label[m]]
    (its one-hot built (n, m) as cross-entropy's vjp builds it, the product (m, n));
    "lengths": X W kept where n < len[m] (padding from a lengths input), else -1;
    "scaled": X W * (s * b[n] + 1), a scalar and a vector input combined before the product reads them."""
    def body(g):
        x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
        y = g.matmul(x, w, "k", "k")
        if form == "onehot":
            scale = g.div(g.input("d_out", []), g.size_const("m"))
            hot = g.mul(g.neg(scale), g.eq(g.iota("n"), g.input("label", ["m"], "f32")))
            g.output("y", g.add(g.mul(scale, y), hot))
        elif form == "lengths":
            keep = g.lt(g.iota("n"), g.input("len", ["m"], "f32"))
            g.output("y", g.select(keep, y, g.const("-1")))
        else:
            g.output("y", g.mul(y, g.add(g.mul(g.input("s", []), g.input("b", ["n"])), g.const("1"))))
    return dag.build_graph(f"input_epilogue_{form}", sizes, body)


def _integer_inputs(g, seed):
    """Random inputs, the labels and lengths integers in [0, n] (a one-hot that hits, a length
    that cuts the row: fresh random floats would never equal a column index)."""
    inputs = reference.random_inputs(g, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    for name in ("label", "len"):
        if name in inputs:
            inputs[name] = torch.randint(0, g.axes["n"] + 1, inputs[name].shape, generator=gen).to(inputs[name].dtype)
    return inputs


def _exact_inputs(g, seed=1):
    inputs = _integer_inputs(g, seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)
        for o in g.outputs:
            assert rel_err(out[o].double(), ref[o]) < 1e-12, (c.name, o)


@pytest.mark.parametrize("form", ["onehot", "lengths", "scaled"])
def test_an_epilogue_computes_what_inputs_alone_make_and_stores_none_of_it(form):
    g = input_epilogue({"m": 37, "k": 19, "n": 41}, form)
    plan = derive(g)
    assert [k.name.split("_")[0] for k in plan.kernels] == ["gemm"], [k.name for k in plan.kernels]
    stored = {b.name for b in plan.globals if b.scope == "global"} - {n.name for n in g.inputs()}
    assert stored == {plan.outputs["y"]}, stored  # the output alone: nothing of the cone
    _exact_inputs(g)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(m=st.integers(1, 140), k=st.integers(1, 70), n=st.integers(1, 140),
       form=st.sampled_from(["onehot", "lengths", "scaled"]), seed=st.integers(0, 2**16))
def test_input_epilogues_random_shapes(m, k, n, form, seed):
    _exact_inputs(input_epilogue({"m": m, "k": k, "n": n}, form), seed)


def test_the_lm_head_backward_scales_and_subtracts_the_one_hot_in_its_gemm():
    """Cross-entropy's gradient through the LM head, (d_out / m) exp(H W - lse) - (d_out / m) onehot,
    is the first GEMM's epilogue: three GEMM kernels (logits, dW, dH), no elementwise kernel and
    no exp(H W - lse) in memory (it was a [tokens, vocabulary] round trip twice over)."""
    from leantile import autodiff
    from leantile.train_bench import cases
    head = next(c for c in cases(lambda name, shape: {"m": 45, "k": 24, "d": 77} if name == "lm_head_ce" else shape) if c.name == "lm_head_ce")
    bwd = autodiff.vjp(head.graph).graph
    plan = derive(bwd)
    assert [k.name.split("_")[0] for k in plan.kernels] == ["gemm"] * 3, [k.name for k in plan.kernels]
    assert not [b.name for b in plan.globals if b.name.startswith("exp")]
