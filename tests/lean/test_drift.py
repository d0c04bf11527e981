"""Lean DSL vs Python builders: the two cannot drift silently.

Reads the `let x ← op args` lines of lean/LeanTile/Architectures/*.lean (and the
subdags in lean/LeanTile/DagM.lean), replays them on the Python builder, and compares
the result with the Python built-ins byte for byte. Runs without a Lean toolchain.
"""

import re

import pytest

import lean_dsl as L
from byo_sources import EXAMPLES
from leantile import architectures as A
from leantile.dag import DagM
from leantile.sources import load_source


def test_every_architecture_has_a_lean_file():
    """Built-ins and user architectures (examples/architectures/) alike."""
    assert set(L.architecture_defs()) == set(A.NAMES) | set(EXAMPLES)


@pytest.mark.parametrize("name", list(A.NAMES) + list(EXAMPLES))
def test_lean_architecture_builds_the_python_graph(name):
    lean_graph = L.build_from_lean(name)
    py_graph = load_source(EXAMPLES.get(name, name))
    lean_seq = [n.model_dump(mode="json") for n in lean_graph.nodes]
    py_seq = [n.model_dump(mode="json") for n in py_graph.nodes]
    for i, (a, b) in enumerate(zip(lean_seq, py_seq)):
        assert a == b, f"{name}: node {i} differs: Lean {a} vs Python {b}"
    assert len(lean_seq) == len(py_seq), f"{name}: Lean has {len(lean_seq)} nodes, Python {len(py_seq)}"
    assert lean_graph.to_json() == py_graph.to_json()


@pytest.mark.parametrize("lean_name,py_name", sorted(L.SUBDAGS.items()))
def test_lean_subdag_matches_python_subdag(lean_name, py_name):
    subdags = L.subdag_defs()
    assert lean_name in subdags, f"{lean_name} not found in {L.DAGM_FILE}"

    def fresh():
        g = DagM("t", {"m": 3, "d": 5})
        return g, g.input("X", ["m", "d"])

    g1, x1 = fresh()
    out1 = L.Interpreter(g1, subdags).run(subdags[lean_name], [x1, "d"])
    g2, x2 = fresh()
    out2 = getattr(g2, py_name)(x2, "d")
    assert out1 == out2
    assert [n.model_dump() for n in g1.nodes] == [n.model_dump() for n in g2.nodes]


def test_every_mapped_builder_is_defined_in_dagm():
    text = L.DAGM_FILE.read_text()
    defined = set(re.findall(r"^def (\w+)", text, flags=re.M))
    missing = (set(L.PRIMITIVES) | set(L.SUBDAGS)) - defined
    assert not missing, f"DagM.lean lacks {sorted(missing)}"
    for py in list(L.PRIMITIVES.values()) + list(L.SUBDAGS.values()):
        assert hasattr(DagM, py), f"Python DagM lacks {py}"


def _lean_table(text: str, name: str) -> list[str]:
    block = text.split(f"def {name} ", 1)[1].split("\ndef ", 1)[0]
    return re.findall(r'\("(\w+)",\s*\w+Graph\)', block)


def test_builtins_table_lists_every_architecture():
    text = (L.LEAN / "LeanTile" / "Architectures.lean").read_text()
    assert _lean_table(text, "builtins") == list(A.NAMES)
    assert _lean_table(text, "userArchitectures") == list(EXAMPLES)
    assert "def exportedArchitectures" in text and "builtins ++ userArchitectures" in text


def test_exporter_names_the_lean_file_of_each_architecture():
    """Main.lean prints `error: <file>: <arch>: ...`; the file must be the one defining it."""
    text = (L.LEAN / "LeanTile" / "Architectures.lean").read_text()
    block = text.split("def architectureFiles", 1)[1].split("\ndef ", 1)[0]
    files = dict(re.findall(r'\("(\w+)",\s*"([^"]+)"\)', block))
    assert set(files) == set(A.NAMES) | set(EXAMPLES)
    for name, f in files.items():
        path = L.REPO / f
        assert path.is_file(), f
        assert any(b.graph == name for b in L.parse_file(path).values()), (name, f)
    main = (L.LEAN / "Main.lean").read_text()
    assert "for entry in exportedArchitectures do" in main and "architectureFiles" in main
    assert "IO.FS.rename tmp path" in main  # written under a temporary name, renamed into place


def _lean_graph(tmp_path, monkeypatch, name: str, axes: str, body: str):
    """Write <Name>.lean holding one graph definition (axes in Lean syntax, body the do-block
    lines, line 3 onwards) and return its parsed body, the reader rooted at tmp_path."""
    p = tmp_path / f"{name.capitalize()}.lean"
    p.write_text(f'def {name}Graph : Except String Graph :=\n  buildGraphWithOutput "{name}" {axes} do\n' + body)
    monkeypatch.setattr(L, "REPO", tmp_path)
    return L.parse_file(p)[f"{name}Graph"]


def test_lean_builder_error_names_file_and_line(tmp_path, monkeypatch):
    """Without a toolchain the reader replays a Lean architecture on the Python builder; a
    builder refusal (here: an axis the graph does not have) names the .lean file and line."""
    body = _lean_graph(tmp_path, monkeypatch, "broken", '[("m", 2), ("d", 3)]',
                       '    let x ← input "X" ["m", "d"]\n    let s ← red .sum x "k"\n    pure s\n')
    with pytest.raises(L.DslError, match=r"Broken\.lean:4: .*axis 'k'"):
        L.Interpreter(DagM("broken", body.axes), {}).run(body, [])


def test_reader_detects_a_reordered_subdag(tmp_path, monkeypatch):
    """A Lean softmax with exp and sub swapped must not replay to the Python graph."""
    src = L.DAGM_FILE.read_text().replace(
        "  let c ← sub x m\n  let e ← exp c\n", "  let c0 ← exp x\n  let e ← sub c0 m\n")
    assert src != L.DAGM_FILE.read_text()
    p = tmp_path / "DagM.lean"
    p.write_text(src)
    monkeypatch.setattr(L, "REPO", tmp_path)
    subdags = {k: v for k, v in L.parse_file(p).items() if k in L.SUBDAGS}
    g1 = DagM("t", {"m": 3, "d": 5})
    L.Interpreter(g1, subdags).run(subdags["softmaxSubdag"], [g1.input("X", ["m", "d"]), "d"])
    g2 = DagM("t", {"m": 3, "d": 5})
    g2.softmax(g2.input("X", ["m", "d"]), "d")
    assert [n.model_dump() for n in g1.nodes] != [n.model_dump() for n in g2.nodes]


def test_reader_refuses_lines_outside_the_subset(tmp_path, monkeypatch):
    body = _lean_graph(tmp_path, monkeypatch, "bad", '[("m", 2)]',
                       '    let x ← input "X" ["m"]\n    let y ← exp (x)\n    pure y\n')
    with pytest.raises(L.DslError):
        L.Interpreter(DagM("bad", {"m": 2}), {}).run(body, [])


def test_lean_builders_for_the_new_ops_replay_to_the_python_graph(tmp_path, monkeypatch):
    """Every builder added with the op registry (log, tanh, erf, sigmoid, abs, min, the
    comparisons, select, iota), written in the Lean DSL, replays to the graph the Python
    builder makes; select broadcasts a's axes, then b's, then cond's."""
    body = _lean_graph(tmp_path, monkeypatch, "newops", '[("m", 2), ("d", 3)]',
                       '    let x ← input "X" ["m", "d"]\n'
                       '    let y ← input "Y" ["d"]\n'
                       '    let i ← iota "d"\n'
                       '    let a ← log x\n'
                       '    let b ← tanh a\n'
                       '    let c ← erf b\n'
                       '    let s ← sigmoid c\n'
                       '    let v ← absVal s\n'
                       '    let mn ← minimum v y\n'
                       '    let l1 ← lt x y\n'
                       '    let l2 ← le x i\n'
                       '    let l3 ← eq y i\n'
                       '    let l4 ← ge i x\n'
                       '    let l5 ← gt mn x\n'
                       '    let s1 ← select l1 mn i\n'
                       '    let s2 ← select y i x\n'
                       '    let t ← add s1 s2\n'
                       '    let u ← add l2 l3\n'
                       '    let w ← add l4 l5\n'
                       '    let z ← add t u\n'
                       '    let out ← add z w\n'
                       '    pure out\n')
    g1 = DagM("newops", body.axes)
    out1 = L.Interpreter(g1, {}).run(body, [])
    g2 = DagM("newops", {"m": 2, "d": 3})
    x, y, i = g2.input("X", ["m", "d"]), g2.input("Y", ["d"]), g2.iota("d")
    v = g2.abs(g2.sigmoid(g2.erf(g2.tanh(g2.log(x)))))
    mn = g2.min(v, y)
    l1, l2, l3, l4, l5 = g2.lt(x, y), g2.le(x, i), g2.eq(y, i), g2.ge(i, x), g2.gt(mn, x)
    s1, s2 = g2.select(l1, mn, i), g2.select(y, i, x)
    t, u, w = g2.add(s1, s2), g2.add(l2, l3), g2.add(l4, l5)
    out2 = g2.add(g2.add(t, u), w)
    assert out1 == out2
    assert [n.model_dump() for n in g1.nodes] == [n.model_dump() for n in g2.nodes]
    assert g2.nodes[s2].axes == ("d", "m")  # a's axes (d), then b's (m); cond adds none
    assert g2.nodes[i].axes == ("d",)
