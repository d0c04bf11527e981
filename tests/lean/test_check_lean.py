"""`leantile check-lean` (python/leantile/lean.py).

* Without `lake` (this machine): every theorem is reported "unchecked", never proven.
* The checked/failed bookkeeping is exercised with a FAKE `lake` script that prints
  canned `#print axioms` output; that tests the Python logic only, not the proofs.
* With a real `lake` on PATH the real check runs; otherwise those tests are skipped.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from leantile import lean as LT

REPO = Path(__file__).resolve().parents[2]
HAVE_LAKE = shutil.which("lake") is not None
needs_lake = pytest.mark.skipif(not HAVE_LAKE, reason="no Lean toolchain here: `lake` is not on PATH")


# -- unchecked path (no toolchain) -----------------------------------------------------

def test_no_lake_means_unchecked(monkeypatch):
    monkeypatch.setattr(LT.shutil, "which", lambda name: None)
    statuses = LT.theorem_status(REPO)
    assert statuses and all(s.status == "unchecked" for s in statuses)
    assert all("lake" in s.message for s in statuses)
    assert {s.theorem for s in statuses} == set(LT.theorems_to_check().values())
    assert not any(s.axioms for s in statuses)


def test_cli_unchecked_exit_codes(monkeypatch, capsys):
    monkeypatch.setattr(LT.shutil, "which", lambda name: None)
    assert LT.check_lean_main([]) == 0
    out = capsys.readouterr().out
    assert "unchecked" in out and "proven" not in out and "checked " not in out.replace("unchecked", "")
    assert LT.check_lean_main(["--require-checked"]) == 1
    capsys.readouterr()
    assert LT.check_lean_main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["status"] for d in data} == {"unchecked"}
    assert {d["theorem"] for d in data} >= set(LT.cited_theorems().values())


def test_cited_theorems_are_the_rules():
    from leantile.derive.rules import RULES
    assert LT.cited_theorems() == {r.name: r.theorem for r in RULES}
    checked = LT.theorems_to_check()
    assert "LeanTile.tiled_attention_eq_softmax" in checked.values()
    assert len(set(checked.values())) == len(checked)


def test_lean_module_does_not_import_leanclient_eagerly():
    code = "import sys, leantile.lean; print('leanclient' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_parse_axioms_output():
    text = ("'LeanTile.a' depends on axioms: [propext, Classical.choice, Quot.sound]\n"
            "'LeanTile.b' does not depend on any axioms\n"
            "'LeanTile.c' depends on axioms: [propext, sorryAx]\n")
    assert LT.parse_axioms_output(text) == {
        "LeanTile.a": ["propext", "Classical.choice", "Quot.sound"],
        "LeanTile.b": [],
        "LeanTile.c": ["propext", "sorryAx"],
    }


def test_write_axioms_file(tmp_path):
    p = tmp_path / "Ax.lean"
    assert LT.check_lean_main(["--write-axioms-file", str(p)]) == 0
    text = p.read_text()
    assert text.startswith("import LeanTile\n")
    for thm in LT.theorems_to_check().values():
        assert f"#print axioms {thm}\n" in text


# -- checked / failed bookkeeping with a fake lake (logic only, no Lean) ------------------

@pytest.fixture
def fake_lake(tmp_path):
    from conftest import fake_lake_project
    return fake_lake_project(tmp_path, {"mean_pullout": "'{name}' depends on axioms: [propext, sorryAx]",
                                       "scale_pullout": "{file}:3:15: error: unknown constant '{name}'"})


def test_fake_lake_checked_and_failed_paths(fake_lake):
    lake, proj = fake_lake
    statuses = {s.theorem: s for s in LT.theorem_status(proj, lake=lake, use_leanclient=False)}
    ok = statuses["LeanTile.softmax_shift_invariant"]
    assert ok.status == "checked" and "Quot.sound" in ok.axioms
    sorry = statuses["LeanTile.mean_pullout"]
    assert sorry.status == "failed" and "sorryAx" in sorry.message
    missing = statuses["LeanTile.scale_pullout"]
    assert missing.status == "failed" and "unknown constant" in missing.message
    assert not (proj / LT.SCRATCH).exists()


def test_fake_lake_cli_exit_code(fake_lake, monkeypatch, capsys):
    lake, proj = fake_lake
    real = LT.theorem_status
    monkeypatch.setattr(LT, "theorem_status",
                        lambda root=None, **kw: real(proj, lake=lake, use_leanclient=False, **kw))
    assert LT.check_lean_main([]) == 1
    out = capsys.readouterr().out
    assert "failed" in out and "sorryAx" in out and "checked" in out


# -- the real thing, where a toolchain exists ---------------------------------------------

@needs_lake
def test_real_lake_every_theorem_checked_without_sorry():
    statuses = LT.theorem_status(REPO)
    bad = [f"{s.theorem}: {s.status} {s.message}" for s in statuses if s.status != "checked"]
    assert not bad, "\n".join(bad)
    assert all("sorryAx" not in s.axioms for s in statuses)


@needs_lake
def test_real_lake_cli_require_checked():
    assert LT.check_lean_main(["--require-checked", "--no-build"]) == 0
