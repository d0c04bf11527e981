"""Static checks of the Lean tier that need no toolchain: names, fields, pins, sorries.

These read the Lean sources as text. They do NOT show that anything type-checks;
`test_check_lean.py` does that where `lake` exists.
"""

import re
from pathlib import Path

import pytest

from leantile import ir
from leantile import lean as LT

REPO = Path(__file__).resolve().parents[2]
LEAN = REPO / "lean"


def _lean_sources():
    return sorted(LEAN.rglob("*.lean"))


def _strip_comments(text: str) -> str:
    text = re.sub(r"/-.*?-/", "", text, flags=re.S)
    return "\n".join(line.split("--")[0] for line in text.splitlines())


@pytest.mark.parametrize("theorem", sorted(set(LT.theorems_to_check().values())))
def test_cited_theorem_is_stated_in_its_rule_file(theorem):
    assert theorem.startswith("LeanTile."), theorem
    short = theorem[len("LeanTile."):]
    f = LT.theorem_files().get(theorem)
    assert f is not None, f"{theorem} has no Lean file (its rule's lean_file, or lean.EXTRA_FILES)"
    text = _strip_comments((REPO / f).read_text())
    assert re.search(r"^namespace LeanTile\s*$", text, flags=re.M)
    assert re.search(rf"^theorem {re.escape(short)}\b", text, flags=re.M), f"{f} does not state {short}"


def test_every_rule_has_its_own_file():
    for rule, thm in LT.cited_theorems().items():
        f = REPO / LT.theorem_files()[thm]
        assert f.is_file(), f
        assert f.parent == LEAN / "LeanTile" / "Rules"


def test_rules_module_imports_every_rule_file():
    text = (LEAN / "LeanTile" / "Rules.lean").read_text()
    for f in sorted((LEAN / "LeanTile" / "Rules").glob("*.lean")):
        assert f"import LeanTile.Rules.{f.stem}" in text, f.stem
    root = (LEAN / "LeanTile.lean").read_text()
    for m in ("IR", "DagM", "Architectures", "Derivation", "Export", "Semantics", "Rules"):
        assert f"import LeanTile.{m}\n" in root + "\n", m


def test_lean_rule_table_matches_python():
    text = (LEAN / "LeanTile" / "Derivation.lean").read_text()
    pairs = dict(re.findall(r'\("(\w+)",\s*"(LeanTile\.\w+)"\)', text))
    assert pairs == LT.cited_theorems(), "lean/LeanTile/Derivation.lean ruleTheorems vs the Python rule table"


def test_no_sorry_or_admit_left_unlisted():
    """Any `sorry` in lean/ must be listed in docs/lean.md (the goal is none)."""
    docs = (REPO / "docs" / "lean.md").read_text()
    found = []
    for p in _lean_sources():
        code = _strip_comments(p.read_text())
        for m in re.finditer(r"\b(sorry|admit)\b", code):
            found.append(str(p.relative_to(REPO)))
    for f in found:
        assert f in docs, f"{f} has a sorry not listed in docs/lean.md"
    assert "sorry" in docs.lower()  # the docs say where sorries stand (none)


def test_no_axioms_declared():
    for p in _lean_sources():
        code = _strip_comments(p.read_text())
        assert not re.search(r"^\s*axiom\s", code, flags=re.M), p


def test_toolchain_and_mathlib_pin_agree():
    toolchain = (REPO / "lean-toolchain").read_text().strip()
    m = re.fullmatch(r"leanprover/lean4:(v\d+\.\d+\.\d+(?:-rc\d+)?)", toolchain)
    assert m, toolchain
    lakefile = (REPO / "lakefile.lean").read_text()
    tag = re.search(r'require "leanprover-community" / "mathlib" @ git "([^"]+)"', lakefile)
    assert tag and tag.group(1) == m.group(1)
    assert 'srcDir := "lean"' in lakefile and "leantile-export" in lakefile and "root := `Main" in lakefile


_LEAN_OP_TO_MODEL = {
    "input": ir.Input, "const": ir.Const, "sizeConst": ir.SizeConst, "iota": ir.Iota,
    "unary": ir.Unary, "cast": ir.Cast, "binary": ir.Binary, "select": ir.Select,
    "reduce": ir.Reduce, "matmul": ir.Matmul,
}


def _export_fields():
    text = (LEAN / "LeanTile" / "Export.lean").read_text()
    block = text.split("def opFields", 1)[1].split("\ndef ", 1)[0]
    arms = re.split(r"\n  \| \.", block)[1:]
    out = {}
    for arm in arms:
        ctor = arm.split()[0]
        out[ctor] = set(re.findall(r'\("(\w+)",', arm))
    return text, out


def test_exporter_writes_the_pydantic_node_fields():
    text, fields = _export_fields()
    assert set(fields) == set(_LEAN_OP_TO_MODEL)
    for ctor, model in _LEAN_OP_TO_MODEL.items():
        expected = set(model.model_fields) - {"id", "axes"}
        assert fields[ctor] == expected, f"{ctor}: Lean writes {sorted(fields[ctor])}, ir.py has {sorted(expected)}"
    node = text.split("def nodeJ", 1)[1].split("\ndef ", 1)[0]
    assert set(re.findall(r'\("(\w+)",', node)) == {"id", "axes"}


def test_exporter_writes_the_graph_and_step_fields():
    text = (LEAN / "LeanTile" / "Export.lean").read_text()
    graph = text.split("def graphJ", 1)[1].split("\ndef ", 1)[0]
    keys = set(re.findall(r'\("(\w+)",', graph))
    py = {f.alias or n for n, f in ir.Graph.model_fields.items()}
    assert keys == py
    step = text.split("def stepJ", 1)[1].split("\ndef ", 1)[0]
    assert set(re.findall(r'\("(\w+)",', step)) == set(ir.Step.model_fields)
    assert 'render (graphJ g steps) ++ "\\n"' in text


def test_lean_op_names_match_python():
    text = (LEAN / "LeanTile" / "IR.lean").read_text()
    un = re.findall(r'\| \.\w+ => "(\w+)"', text.split("def UnOp.name", 1)[1].split("\ndef ", 1)[0])
    assert tuple(un) == ir.UNARY_OPS
    bi = re.findall(r'\| \.\w+ => "(\w+)"', text.split("def BinOp.name", 1)[1].split("\ndef ", 1)[0])
    assert tuple(bi) == ir.BINARY_OPS
    dt = re.findall(r'\| \.\w+ => "(\w+)"', text.split("def Dtype.name", 1)[1].split("\ndef ", 1)[0])
    assert tuple(dt) == ir.DTYPES


def test_derivations_are_plain_data_for_every_builtin():
    from byo_sources import EXAMPLES
    from leantile import architectures as A

    text = (LEAN / "LeanTile" / "Derivation.lean").read_text()
    for name in list(A.NAMES) + list(EXAMPLES):
        assert re.search(rf'\| "{name}" => \w+Derivation', text), name


def _lean_derivations():
    text = (LEAN / "LeanTile" / "Derivation.lean").read_text()
    out = {}
    for m in re.finditer(r"^def (\w+)Derivation : List Step :=(.*?)(?=^def |^/--|^end )", text,
                         flags=re.M | re.S):
        out[m.group(1)] = _strip_comments(m.group(2)).strip()
    return out


@pytest.mark.parametrize("arch", ["attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp",
                                  "layernorm_linear_gelu", "geglu", "attention_scaled", "softmax_row"])
def test_lean_derivation_matches_the_python_engine(arch):
    """Derivation.lean holds plain data copied from the Python engine with
    `lean_derivation_def`; the two must not drift (an empty list must be empty in both)."""
    lean_name = "".join(w[:1].upper() + w[1:] for w in arch.split("_"))
    lean_name = lean_name[:1].lower() + lean_name[1:]
    body = _lean_derivations()[lean_name]
    from byo_sources import EXAMPLES
    from leantile.cli import exported_graph
    expected = LT.lean_derivation_def(arch, exported_graph(EXAMPLES.get(arch, arch)).derivation)
    got = f"def {lean_name}Derivation : List Step :=\n  {body}" if body != "[]" else \
        f"def {lean_name}Derivation : List Step := []"
    norm = lambda s: " ".join(s.split())
    assert norm(got) == norm(expected)


def test_lean_step_literal_round_trip_shape():
    lit = LT.lean_step_literal({"rule": "r", "theorem": "LeanTile.t", "at": (1, 2),
                                "params": {"axis": "t_kv", "n": 3}})
    assert lit == ('{ rule := "r", thm := "LeanTile.t", sites := [1, 2], '
                   'params := [("axis", .str "t_kv"), ("n", .nat 3)] }')
    with pytest.raises(ValueError):
        LT.lean_step_literal({"rule": "r", "theorem": "t", "params": {"n": -1}})


def test_exporter_refuses_the_names_the_validator_refuses():
    """Export.lean's isIdent is ir.IDENTIFIER ([A-Za-z_][A-Za-z0-9_]*, at most ir.MAX_NAME) and
    Main.lean refuses a graph with any other name before writing anything."""
    text = (LEAN / "LeanTile" / "Export.lean").read_text()
    body = text.split("def isIdent", 1)[1].split("\ndef ", 1)[0]
    assert "c.isAlpha || c == '_'" in body and "d.isAlphanum || d == '_'" in body
    assert f"s.length ≤ {ir.MAX_NAME}" in body and ir.IDENTIFIER == r"^[A-Za-z_][A-Za-z0-9_]*$"
    names = text.split("def graphNames", 1)[1].split("\ndef ", 1)[0]
    assert all(x in names for x in ("g.name", "g.axes", "g.outputs", ".input name"))
    main = (LEAN / "Main.lean").read_text()
    assert "Export.badNames g" in main and main.index("Export.badNames") < main.index("IO.FS.writeFile")


def test_companion_citations_are_stated_in_rule_files():
    """Derivation.lean's `stepCitations` (not exported) name theorems that exist: the
    companions of the cited ones (scale_pullout_right and online_softmax_ratio are cited)."""
    text = (LEAN / "LeanTile" / "Derivation.lean").read_text()
    block = text.split("def stepCitations", 1)[1].split("\ndef ", 1)[0]
    cited = re.findall(r'thm := "LeanTile\.(\w+)"', block)
    assert set(cited) >= {"scale_pullout", "online_softmax_fold"}
    rules = "\n".join(_strip_comments(p.read_text()) for p in (LEAN / "LeanTile" / "Rules").glob("*.lean"))
    for short in cited:
        assert re.search(rf"^theorem {re.escape(short)}\b", rules, flags=re.M), short


def test_masked_semantics_reads_the_python_mask_constant():
    """Semantics.lean's masked semantics turns exactly the constant the Python IR allows as the
    mask value (ir.NEG_INF) into `masked`, and `exp` of it is 0."""
    text = _strip_comments((LEAN / "LeanTile" / "Semantics.lean").read_text())
    assert re.search(r"^inductive MVal where", text, flags=re.M)
    assert re.search(r"^\s*\| masked\s*$", text, flags=re.M)
    body = text.split("def constM", 1)[1].split("\ndef ", 1)[0]
    assert f'if v = "{ir.NEG_INF}" then .masked' in body
    limit = text.split("def UnOp.maskedLimit", 1)[1].split("\ndef ", 1)[0]
    assert "| .exp => .val 0" in limit and "| .exp2 => .val 0" in limit
    ev = text.split("def evalOpM", 1)[1].split("\ndef ", 1)[0]
    assert "| .const v => fun _ => constM env v" in ev
    assert re.search(r"^def Graph\.evalM\b", text, flags=re.M)


def test_mask_and_split_theorems_are_stated_over_the_masked_semantics():
    """The graph-level mask theorem reads its scores from `Graph.evalNodesM`, and the split-KV
    combine weighs slices by exp(lse - M) in the masked semantics (an empty slice's lse is
    `masked`); both are companions of the rules' cited theorems."""
    rules = LEAN / "LeanTile" / "Rules"
    mask = _strip_comments((rules / "MaskSkip.lean").read_text())
    assert "getValM (g.evalNodesM env) s (Function.update ι a j)" in mask
    assert re.search(r"^theorem fold_skip_masked_graph\b", mask, flags=re.M)
    assert re.search(r"^theorem graph_masked_block_nil\b", mask, flags=re.M)
    split = _strip_comments((rules / "SplitKV.lean").read_text())
    assert "def lseWeight (M : ℝ) (lse : MVal) : ℝ := (BinOp.evalM .sub lse (.val M)).expM" in split
    assert re.search(r"^theorem split_kv_lse_combine\b", split, flags=re.M)
    assert re.search(r"^theorem combine_empty_slice\b", split, flags=re.M)
    deriv = (LEAN / "LeanTile" / "Derivation.lean").read_text()
    block = deriv.split("def stepCitations", 1)[1].split("\ndef ", 1)[0]
    cited = dict(re.findall(r'rule := "(\w+)",.*?thm := "LeanTile\.(\w+)"', block, flags=re.S))
    assert cited.get("split_kv") == "split_kv_lse_combine"
    assert cited.get("skip_masked_tiles") == "fold_skip_masked_graph"
    for short in ("split_kv_lse_combine", "fold_skip_masked_graph", "evalM_eq_eval", "masked_score_node"):
        assert f"LeanTile.{short}" in LT.theorems_to_check().values(), short


def test_every_vjp_of_the_registry_has_its_derivative_theorem():
    """lean/LeanTile/Vjp.lean states vjp_<ctor> for every unary op's VJP and vjp_<ctor>_left /
    _right for every binary op with a gradient (issue 50); comparisons have none to state."""
    from leantile.ir import ops
    text = _strip_comments((LEAN / "LeanTile" / "Vjp.lean").read_text())
    for o in ops.ROWS:
        if not o.ir or o.arity == 3 or o.name in ops.COMPARISONS:
            continue
        ctor = o.lean.split(".")[1]
        names = [f"vjp_{ctor}"] if o.arity == 1 else [f"vjp_{ctor}_left", f"vjp_{ctor}_right"]
        for name in names:
            assert re.search(rf"^theorem {name}\b", text, flags=re.M), name
    for name in ("vjp_sum_adjoint", "vjp_contract_left", "vjp_contract_right", "vjp_broadcast_adjoint",
                 "vjp_softmax_row", "vjp_log_softmax_row"):
        assert re.search(rf"^theorem {name}\b", text, flags=re.M), name
