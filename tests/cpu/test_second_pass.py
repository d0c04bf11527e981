"""A streamed row kernel whose epilogue runs over the row itself (log-softmax's x - m - log l)
streams the row twice in ONE kernel (plan.Kernel.second_pass, issue 49): the statistics never
leave the chip and the second read of a row mostly hits L2, where a map kernel read it again
from DRAM. Offered where the rows fill the GPU (fewer rows split the stream over CTAs instead);
every candidate of generated graphs equals the graph in float64 (through the interpreter); the
kernels lower for sm_90."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import dag, interp, reference
from leantile.derive import candidates, derive
from leantile.derive.rules import row_tiles
from plan_checks import rel_err
from reduction_strategies import row_epilogue_graphs


def _log_softmax(m: int, d: int, dtype: str = "f16"):
    def body(g):
        x = g.input("X", ["m", "d"], dtype)
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    return dag.build_graph_with_output("log_softmax", {"m": m, "d": d}, body)


def test_log_softmax_over_long_rows_is_one_kernel_that_streams_the_row_twice():
    plan = derive(_log_softmax(2048, 32000))
    k, = plan.kernels
    assert k.stream and k.stream.axis == "d" and k.second_pass
    assert [b.name for b in plan.globals] == ["X", plan.outputs["out"]]  # no statistic stored
    # two rows of 32000 per CTA (128 KB of its f16 input: rules.row_tiles.TWO_PASS_BYTES, measured)
    assert {t.axis: t.block for t in k.grid}["m"] == 2
    # the statistics only in the first pass; the second reads X again and stores the output
    assert any(s.op == "reduce" for s in k.body) and not any(s.op == "reduce" for s in k.second_pass)
    assert [s.op for s in k.second_pass if s.op in ("load", "store")] == ["load", "store"]


def test_rows_of_a_vocabulary_stream_long_blocks():
    """rules.row_tiles.two_pass_block: a two-pass kernel over rows of LONG_ROW or more streams
    blocks of LONG_ROW_BLOCK (the LM head's row kernel twice as fast on an H200, g41); shorter
    rows keep STREAM_BLOCK, as a one-pass kernel over long rows does."""
    def block(g):
        k, = [k for k in derive(g).kernels if k.stream and k.stream.axis == "d"]
        return k.stream.block, bool(k.second_pass)
    assert block(_log_softmax(300, 128256, "bf16")) == (row_tiles.LONG_ROW_BLOCK, True)
    assert block(_log_softmax(300, 32000)) == (row_tiles.STREAM_BLOCK, True)

    def lse(g):  # one pass: the row statistic alone
        x = g.input("X", ["m", "d"], "f32")
        return g.log(g.red("sum", g.exp(x), "d"))
    assert block(dag.build_graph_with_output("lse", {"m": 300, "d": 128256}, lse)) == (row_tiles.STREAM_BLOCK, False)


def test_few_long_rows_are_split_over_ctas_not_streamed_twice():
    g = _log_softmax(4, 200_000)
    assert "split" in [c.name for c in candidates(g)]
    assert not any(k.second_pass for c in candidates(g) for k in derive(g, c.name).kernels)


def test_the_second_pass_visits_the_last_block_first_in_the_interpreter_and_the_kernel(monkeypatch):
    """plan.SECOND_PASS_REVERSED: the blocks the first pass read last are still in L2. The
    interpreter runs the order the emitter prints, and the order changes no value."""
    from leantile import plan as plan_module
    from leantile.emit import emit_module
    monkeypatch.setattr(row_tiles, "ON_CHIP", 1024)  # rows of 2500 stream in 3 blocks (as below)
    g = _log_softmax(200, 2500, "f32")
    plan = derive(g)
    k, = [k for k in plan.kernels if k.second_pass]
    second_loads = {s.dst for s in k.second_pass if s.op == "load"}
    inputs = reference.random_inputs(g, seed=3)
    outs, sources, orders = {}, {}, {}
    real_exec = interp._Env.exec
    for reversed_ in (True, False):
        monkeypatch.setattr(plan_module, "SECOND_PASS_REVERSED", reversed_)
        seen = []

        def exec_(env, s, seen=seen):  # the stream block of every load of X
            if s.op == "load" and s.dst in second_loads:
                seen.append(env.tile.start[k.stream.axis])
            real_exec(env, s)
        monkeypatch.setattr(interp._Env, "exec", exec_)
        outs[reversed_] = interp.run(plan, inputs, dtype=torch.float64)["out"]
        sources[reversed_], orders[reversed_] = emit_module(plan), seen
    blocks = sorted(set(orders[False]))  # a tile's loads: the first pass's blocks, then the second's
    n = len(blocks)
    assert n > 1 and orders[False][:2 * n] == blocks + blocks
    assert orders[True][:2 * n] == blocks + blocks[::-1]
    assert "- 1 - k2)" in sources[True] and "- 1 - k2)" not in sources[False]
    assert torch.equal(outs[True], outs[False])
    assert rel_err(outs[True], reference.evaluate(g, inputs, compute_dtype=torch.float64)["out"]) < 1e-9


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("d", [32000, 50257, 9000, 128256])
def test_second_pass_kernels_lower_for_sm_90(d):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(_log_softmax(1000, d, "bf16"))
    assert any(k.second_pass for k in plan.kernels)
    mod = load_module(emit_module(plan), f"second_pass_{d}")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90")
        assert "__global__" in cu and f"{name}_kernel" in cu


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(g=row_epilogue_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_a_row_epilogue_graph_is_the_graph(g, seed, monkeypatch_on_chip):
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    names = [c.name for c in candidates(g)]
    for name in names:
        out = interp.run(derive(g, name), inputs, dtype=torch.float64)
        for o in g.outputs:
            err = rel_err(out[o].double(), ref[o])
            assert err < 1e-9, f"{name}: output {o}: relative error {err:.3g}"


@pytest.fixture(scope="module")
def monkeypatch_on_chip():
    """(Last in this module: module-scoped, as hypothesis asks.) Rows past 512 elements stream (at the shipped 16384, 8192: too long for the interpreter
    here); the stream block stays min(1024, the row) below 2000, so 1025..1999 take 2 blocks, and
    rows of 2000..3000 take the long block of two_pass_block (here 2048: 1 or 2 blocks)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(row_tiles, "ON_CHIP", 1024)
    mp.setattr(row_tiles, "LONG_ROW", 2000)  # and rows of 2000 .. 3000 take two_pass_block's longer block:
    mp.setattr(row_tiles, "LONG_ROW_BLOCK", 2048)  # one or two, the last partial
    yield
    mp.undo()


def test_the_generated_graphs_take_the_second_pass(monkeypatch_on_chip):
    """The generator draws what the test is for: at its sizes the fused plan streams twice."""
    g = _log_softmax(200, 1999, "f32")
    assert any(k.second_pass for k in derive(g).kernels)
    k, = [k for k in derive(_log_softmax(200, 2600, "f32")).kernels if k.second_pass]
    assert k.stream.block == 2048
