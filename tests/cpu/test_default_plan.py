"""One notion of the default plan: where nothing is asked and no tuned entry applies,
`leantile derive` shows, `leantile kernels` marks ("default" in its index) and leantile.compile
runs the same plan, tuned.shipped_plan's (the cost model's first candidate at the shape's tiles).
Before, derive showed the first candidate offered, or an export's carried derivation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from leantile import ir
from leantile.cli import kernels as kernels_command
from leantile.cli.kernels import build_kernels
from leantile.cli import main
from leantile.tuned import shipped_plan
from leantile.derive import candidates
from leantile.runtime import choose_plan

REPO = Path(__file__).resolve().parents[2]
EXPORTS = sorted((REPO / "exports").glob("*.json"))


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_derive_and_compile_show_one_default_plan(path, capsys):
    g = ir.parse(path.read_text())
    plan, how = shipped_plan(g, tuned=False)
    assert how == "default"
    assert choose_plan(g, tuned=False) == (plan, "default")
    assert main(["derive", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["candidate"], shown["tiles"]) == (plan.candidate, dict(plan.tiles))


def test_the_default_differs_from_the_first_candidate_somewhere():
    """The property above is not the old behaviour restated: for some export the cost model's
    pick is not the first candidate offered (derive's old default)."""
    picks = [(candidates(g)[0].name, shipped_plan(g, tuned=False)[0].candidate)
             for g in (ir.parse(p.read_text()) for p in EXPORTS)]
    assert any(first != pick for first, pick in picks), picks


def test_kernels_marks_the_default_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels_command, "_tilelang_available", lambda: False)  # emit only: fast
    paths = [str(p) for p in EXPORTS[:4]]
    index = build_kernels(paths, tmp_path / "k", log=lambda s: None)
    for p in paths:
        g = ir.parse(Path(p).read_text())
        marked = [e["candidate"] for e in index["candidates"] if e["arch"] == g.name and e["default"]]
        assert marked == [shipped_plan(g, tuned=False)[0].candidate], (g.name, marked)


@pytest.mark.parametrize("name", ["layernorm_chw", "groupnorm", "batchnorm_train"])
def test_derive_shows_every_candidate_of_a_norm_over_several_axes(name, tmp_path, capsys):
    """`leantile derive` offers and replays the candidates leantile.compile does where
    flatten_reduction merges a norm's reduced axes first (before 2026-11-30 it listed the unmerged
    graph's candidates and failed on the default, 'no candidate split', for every such norm)."""
    from importlib.util import module_from_spec, spec_from_file_location
    spec = spec_from_file_location("leantile_reductions_examples", REPO / "examples" / "reductions.py")
    m = module_from_spec(spec)
    spec.loader.exec_module(m)
    g = m.graph(name, n=2, c=8, h=32, w=64, g=2)  # long rows, few: split over the merged axis
    path = tmp_path / f"{name}.json"
    path.write_text(g.to_json())
    assert main(["derive", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["candidate"] == shipped_plan(g, tuned=False)[0].candidate
    offered = [c.name for c in candidates(g)]
    assert len(offered) > 1
    for name in offered:
        assert main(["derive", str(path), "--candidate", name, "--all-candidates"]) == 0
        out = capsys.readouterr().out
        assert f"derivation ({name}" in out
        assert name == "unfused" or "1. flatten_reduction" in out  # the merged graph's derivation
