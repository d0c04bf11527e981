"""leantile.plan.shared: the plan lists the shared-memory windows of a kernel's unaligned copies
(issue 48, step 2); the emitter prints exactly the listed ones (it refuses, as an internal error,
to allocate a window the plan does not list), and plan.verify.shared_bytes counts the list
(tests/cpu/test_lower.py checks that count against TileLang's own allocation)."""
import pytest

from leantile.plan import shared
from leantile.derive import candidates, derive
from leantile.emit import emit_module
from leantile.emit.common import EmitError
from leantile.sources import load_source
from strategies import inputs_in


def _softmax_rows(cols: int, dtype: str = "f16"):
    g = load_source("examples/architectures/softmax_row.py:build", {"rows": 70, "cols": cols})  # f16 rows
    g = inputs_in(g, dtype, only="f16") if dtype != "f16" else g
    return derive(g, next(c.name for c in candidates(g) if c.name.endswith("_split")))


def _row_kernel(plan):
    """The softmax's normalize kernel: no stream, its whole row on chip, read and written."""
    return next(k for k in plan.kernels if not k.stream and any(s.op == "store" for s in k.statements())
                and len(plan.global_buffer(next(s.dst for s in k.statements() if s.op == "store")).axes) == 2)


@pytest.mark.parametrize("dtype,cols,granule", [("f16", 50257, 8), ("bf16", 1001, 8), ("f32", 1001, 4), ("f32", 50257, 4)])
def test_unaligned_rows_list_a_window_per_copy(dtype, cols, granule):
    plan = _softmax_rows(cols, dtype)
    k = _row_kernel(plan)
    wins = shared.windows(plan, k)
    assert {w.store for w in wins} == {False, True}  # its row read and its row written
    assert all(w.granule == granule for w in wins)   # elements per 16 bytes
    # the module allocates the windows the plan lists, kernel by kernel, and no other
    assert sum(len(shared.windows(plan, kk)) for kk in plan.kernels) == emit_module(plan).count("# window (emit.unaligned)")


def test_aligned_rows_list_none():
    plan = _softmax_rows(50264)  # 100528 bytes: whole granules
    assert all(shared.windows(plan, k) == () for k in plan.kernels)
    assert "# window (emit.unaligned)" not in emit_module(plan)


def test_the_emitter_allocates_only_the_listed_windows(monkeypatch):
    plan = _softmax_rows(50257)
    import leantile.emit.kernel as kernel
    monkeypatch.setattr(kernel, "windows", lambda plan, k: ())  # a plan that listed none
    with pytest.raises(EmitError, match="internal error: kernel .* the writer made windows"):
        emit_module(plan)


def test_window_width_covers_every_start_in_a_granule():
    for v in (4, 8):
        for extent in (1, 7, 8, 9, 50257):
            w = shared.window_width(extent, v)
            assert w % v == 0
            # a run of `extent` starting at offset o in its first granule ends inside the window
            assert all(o + extent <= w for o in range(v))


def _kernels_with(plan, role):
    return [(k, t) for k in plan.kernels for t in shared.temps(plan, k) if t.role == role]


def _allocated(src: str) -> int:
    """Shared temps the emitted module allocates (emit.kernel.write's comments)."""
    return src.count("# layout bridge") + src.count("# transposing bridge")


def test_each_role_is_listed_where_the_emitter_needs_it():
    from leantile import architectures
    import loss_graphs
    from strategies import inputs_in
    from soundness_graphs import CLASSES
    # a loss reduced to one value: each thread's partial over a shared copy of the operand
    ce = loss_graphs.build("cross_entropy", {"b": 300, "c": 70})
    plans = [derive(ce, c.name) for c in candidates(ce)]
    assert any(_kernels_with(p, "partials") for p in plans)
    for p in plans:
        for k, t in _kernels_with(p, "partials"):
            assert t.axes == ("__lanes",) and any(m.role == "mirror" for m in shared.temps(p, k))
    # a norm's statistics read beside the GEMM's register layout: mirrors, in the epilogue's phase
    lnlg = architectures.build("layernorm_linear_gelu")
    p = derive(lnlg, "stats_fused+colsum_streamed")
    assert {t.buffer for _, t in _kernels_with(p, "mirror")} >= {"div_5", "rsqrt_13"}
    assert all(t.epilogue for _, t in _kernels_with(p, "mirror"))
    # a swapped GEMM's (column, row) tile stored through a (row, column) one
    p = derive(inputs_in(CLASSES[1](), "f16", only="f32"), "prenorm")
    assert _kernels_with(p, "transposing")
    for plan in [*plans, derive(lnlg, "stats_fused+colsum_streamed"), p]:
        assert sum(len(shared.temps(plan, k)) for k in plan.kernels) == _allocated(emit_module(plan))


def test_a_pingpong_kernel_lists_each_warpgroups_staging_beside_the_ring():
    from leantile import architectures
    from emitted_digest import PINGPONG
    p = derive(architectures.build("matmul"), "direct", PINGPONG)
    [k] = [k for k in p.kernels if k.pingpong]
    staged = [t for t in shared.temps(p, k) if t.role == "staging"]
    stores = [s for s in k.epilogue if s.op == "store"]
    assert len(staged) == 2 * len(stores) > 0  # one per consumer warpgroup
    assert not any(t.epilogue for t in staged)  # the epilogue runs under the other's mainloop
    assert len(staged) == _allocated(emit_module(p))


def test_the_emitter_allocates_only_the_listed_temps(monkeypatch):
    import leantile.emit.kernel as kernel
    import loss_graphs
    g = loss_graphs.build("cross_entropy", {"b": 300, "c": 70})
    plan = next(p for p in (derive(g, c.name) for c in candidates(g)) if _kernels_with(p, "partials"))
    monkeypatch.setattr(kernel, "temps", lambda plan, k: ())  # a plan that listed none
    with pytest.raises(EmitError, match="internal error: kernel .* the writer made shared temps"):
        emit_module(plan)
