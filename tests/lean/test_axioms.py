"""`leantile check-lean` accepts a theorem only when it rests on Lean's standard axioms.

`#print axioms` output is recorded here as text and fed to the pure-Python parser and verdict
(python/leantile/lean.py); nothing in this file needs a Lean toolchain. A theorem is "checked"
only when every axiom it prints is one of `propext`, `Classical.choice`, `Quot.sound`; any other
(`sorryAx`, a user `axiom`, `Lean.ofReduceBool` from `native_decide`) fails it, and the message
names that axiom.
"""

from pathlib import Path

import pytest

from leantile import lean as LT

REPO = Path(__file__).resolve().parents[2]

# What `lake env lean` printed for a scratch file of `#print axioms` lines (Lean 4 wording),
# one theorem per case; `LeanTile.wrapped` shows a list Lean's formatter broke over two lines.
RECORDED = """\
'LeanTile.std' depends on axioms: [propext, Classical.choice, Quot.sound]
'LeanTile.pure' does not depend on any axioms
'LeanTile.some_std' depends on axioms: [propext]
'LeanTile.sorried' depends on axioms: [propext, sorryAx, Classical.choice, Quot.sound]
'LeanTile.cheat' depends on axioms: [propext, LeanTile.my_axiom, Quot.sound]
'LeanTile.native' depends on axioms: [propext, Lean.ofReduceBool]
'LeanTile.both' depends on axioms: [sorryAx, LeanTile.my_axiom]
'LeanTile.wrapped' depends on axioms: [propext,
  Classical.choice,
  LeanTile.another_axiom]
"""

THEOREMS = {name: f"LeanTile.{name}" for name in
            ("std", "pure", "some_std", "sorried", "cheat", "native", "both", "wrapped", "absent")}


def _verdicts():
    return {s.label: s for s in LT.verdicts_from_axioms_output(RECORDED, THEOREMS)}


def test_allowed_axioms_are_exactly_the_standard_three():
    assert set(LT.ALLOWED_AXIOMS) == {"propext", "Classical.choice", "Quot.sound"}


def test_parser_reads_every_recorded_line():
    parsed = LT.parse_axioms_output(RECORDED)
    assert parsed["LeanTile.std"] == ["propext", "Classical.choice", "Quot.sound"]
    assert parsed["LeanTile.pure"] == []
    assert parsed["LeanTile.cheat"] == ["propext", "LeanTile.my_axiom", "Quot.sound"]
    assert parsed["LeanTile.wrapped"] == ["propext", "Classical.choice", "LeanTile.another_axiom"]
    assert "LeanTile.absent" not in parsed


@pytest.mark.parametrize("label", ["std", "pure", "some_std"])
def test_standard_axioms_only_is_checked(label):
    v = _verdicts()[label]
    assert v.status == "checked", v
    assert v.message == ""
    assert not LT.disallowed_axioms(v.axioms)


@pytest.mark.parametrize("label,named", [
    ("sorried", ["sorryAx"]),
    ("cheat", ["LeanTile.my_axiom"]),
    ("native", ["Lean.ofReduceBool"]),
    ("both", ["sorryAx", "LeanTile.my_axiom"]),
    ("wrapped", ["LeanTile.another_axiom"]),
])
def test_any_other_axiom_fails_and_is_named(label, named):
    v = _verdicts()[label]
    assert v.status == "failed", v
    for ax in named:
        assert ax in v.message, v.message
    for ok in LT.ALLOWED_AXIOMS:  # the standard ones are not blamed
        assert f"axiom {ok}" not in v.message and f"axioms {ok}" not in v.message
    assert LT.disallowed_axioms(v.axioms) == named


def test_sorry_message_says_a_sorry_is_left():
    assert "sorry" in _verdicts()["sorried"].message


def test_a_theorem_the_output_does_not_mention_fails():
    v = _verdicts()["absent"]
    assert v.status == "failed" and v.axioms == []


def test_axioms_message_is_empty_for_the_standard_axioms():
    assert LT.axioms_message(["propext", "Classical.choice", "Quot.sound"]) == ""
    assert LT.axioms_message([]) == ""
    msg = LT.axioms_message(["propext", "LeanTile.my_axiom"])
    assert msg.startswith("depends on axiom LeanTile.my_axiom")


# -- the same through theorem_status, with a fake `lake` that prints a user axiom ----------

@pytest.fixture
def fake_lake(tmp_path):
    from conftest import fake_lake_project
    return fake_lake_project(tmp_path, {"mean_pullout": "'{name}' depends on axioms: [propext, LeanTile.cheat, Quot.sound]",
                                       "dual_gemm_shared_lhs": "'{name}' depends on axioms: [propext, Lean.ofReduceBool]"})


def test_fake_lake_user_axiom_fails_the_theorem(fake_lake):
    lake, proj = fake_lake
    statuses = {s.theorem: s for s in LT.theorem_status(proj, lake=lake, use_leanclient=False)}
    cheat = statuses["LeanTile.mean_pullout"]
    assert cheat.status == "failed" and "LeanTile.cheat" in cheat.message
    native = statuses["LeanTile.dual_gemm_shared_lhs"]
    assert native.status == "failed" and "Lean.ofReduceBool" in native.message
    ok = statuses["LeanTile.softmax_shift_invariant"]
    assert ok.status == "checked"
    assert all(s.status == "checked" for t, s in statuses.items()
               if t not in ("LeanTile.mean_pullout", "LeanTile.dual_gemm_shared_lhs"))


def test_fake_lake_cli_exits_nonzero_on_a_user_axiom(fake_lake, monkeypatch, capsys):
    lake, proj = fake_lake
    real = LT.theorem_status
    monkeypatch.setattr(LT, "theorem_status",
                        lambda root=None, **kw: real(proj, lake=lake, use_leanclient=False, **kw))
    assert LT.check_lean_main([]) == 1
    out = capsys.readouterr().out
    assert "LeanTile.cheat" in out and "failed" in out
