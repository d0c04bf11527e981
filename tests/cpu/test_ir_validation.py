"""One test per validation error class: each is rejected with one line naming the node or field."""
import json

import pytest

from leantile import architectures, ir


def doc(name="rmsnorm", **sizes):
    return json.loads(architectures.build(name, **sizes).to_json())


def problems(d):
    with pytest.raises(ir.GraphError) as e:
        ir.parse(d)
    return e.value.problems


def test_valid_builtins_parse():
    for name in architectures.NAMES:
        g = ir.parse(doc(name, **{k: 3 for k in architectures.module(name).DEFAULT_SIZES}))
        assert g.name == name


def test_not_json():
    assert "not JSON" in problems("{oops")[0]


def test_wrong_schema():
    d = doc(); d["schema"] = "leantile/v0"
    assert problems(d) == ["field 'schema': expected 'leantile/v1', got 'leantile/v0'"]


def test_unknown_op_names_node():
    d = doc(); d["nodes"][2]["op"] = "cube"
    [p] = problems(d)
    assert p.startswith("node 2") and "op" in p


def test_missing_field_names_node_and_field():
    d = doc(); del d["nodes"][10]["axis_b"]
    [p] = problems(d)
    assert p.startswith("node 10 (matmul)") and "axis_b" in p


def test_non_dense_ids():
    d = doc(); d["nodes"][3]["id"] = 7
    assert "nodes[3]: field 'id' is 7, expected 3" in problems(d)[0]


def test_cycle_or_forward_reference():
    d = doc(); d["nodes"][2]["x"] = 5
    assert any("node 2 (square)" in p and "not an earlier node" in p for p in problems(d))


def test_dangling_id():
    d = doc(); d["nodes"][2]["x"] = 99
    assert any("node 2 (square)" in p and "dangling" in p for p in problems(d))


def test_unknown_axis():
    d = doc(); d["nodes"][0]["axes"] = ["m", "q"]
    assert any("node 0 (input)" in p and "'q'" in p for p in problems(d))


def test_axes_inconsistent_with_op():
    d = doc(); d["nodes"][3]["axes"] = ["m", "d"]
    assert any("node 3 (reduce)" in p and "field 'axes'" in p for p in problems(d))


def test_reduce_over_missing_axis():
    d = doc(); d["nodes"][3]["axis"] = "n"; d["nodes"][3]["axes"] = ["m", "d"]
    assert any("node 3 (reduce)" in p and "'n'" in p for p in problems(d))


def test_matmul_contraction_axis_missing():
    d = doc(); d["nodes"][10]["axis_b"] = "m"
    assert any("node 10 (matmul)" in p and "axis_b" in p for p in problems(d))


def test_matmul_contraction_sizes_differ():
    d = doc("matmul", m=4, d=5, n=6)
    d["nodes"][2]["axis_b"] = "n"; d["nodes"][2]["axes"] = ["m", "d"]
    assert any("node 2 (matmul)" in p and "differ in size" in p for p in problems(d))


@pytest.mark.parametrize("size", [0, -3, 1 << 40])
def test_bad_sizes(size):
    d = doc(); d["axes"]["d"] = size
    assert any("field 'axes.d'" in p for p in problems(d))


def test_unknown_dtype():
    d = doc(); d["nodes"][0]["dtype"] = "f8"
    assert any("node 0 (input): field 'dtype'" in p for p in problems(d))


def test_nonfinite_const():
    d = doc(); d["nodes"][6]["value"] = "1e999"
    assert any("node 6 (const)" in p and "not finite" in p for p in problems(d))
    for v in ("inf", "nan", "1_000", " 1", "0x10", "1e5\n"):  # float() takes them; the schema does not
        d["nodes"][6]["value"] = v
        assert any("node 6 (const)" in p and "not a decimal" in p for p in problems(d)), v


def test_dangling_output():
    d = doc(); d["outputs"]["out"] = 50
    assert any("output 'out'" in p for p in problems(d))


def test_duplicate_input_names():
    d = doc(); d["nodes"][1]["name"] = "X"
    assert any("input 'X'" in p and "more than once" in p for p in problems(d))


def test_extra_field_rejected():
    d = doc(); d["nodes"][2]["colour"] = "red"
    assert any(p.startswith("node 2") and "colour" in p for p in problems(d))


def test_builder_rejects_unknown_axis():
    from leantile.dag import DagM
    g = DagM("t", {"m": 2})
    with pytest.raises(ir.GraphError, match="unknown axis 'q'"):
        g.input("X", ["m", "q"])
