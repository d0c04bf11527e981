"""leantile.plan_shared: the plan lists the shared-memory windows of a kernel's unaligned copies
(issue 48, step 2); the emitter prints exactly the listed ones (it refuses, as an internal error,
to allocate a window the plan does not list), and plan_verify.shared_bytes counts the list
(tests/cpu/test_lower.py checks that count against TileLang's own allocation)."""
import pytest

from leantile import plan_shared
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
    wins = plan_shared.windows(plan, k)
    assert {w.store for w in wins} == {False, True}  # its row read and its row written
    assert all(w.granule == granule for w in wins)   # elements per 16 bytes
    # the module allocates the windows the plan lists, kernel by kernel, and no other
    assert sum(len(plan_shared.windows(plan, kk)) for kk in plan.kernels) == emit_module(plan).count("# window (emit.unaligned)")


def test_aligned_rows_list_none():
    plan = _softmax_rows(50264)  # 100528 bytes: whole granules
    assert all(plan_shared.windows(plan, k) == () for k in plan.kernels)
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
            w = plan_shared.window_width(extent, v)
            assert w % v == 0
            # a run of `extent` starting at offset o in its first granule ends inside the window
            assert all(o + extent <= w for o in range(v))
