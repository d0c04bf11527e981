"""One test per validation error class: each is rejected with one line naming the node or field."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from leantile import architectures, ir
from profiles import examples  # noqa: E402


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
    for v in ("inf", "+inf", "-Infinity", "nan", "1_000", " 1", "0x10", "1e5\n"):  # float() takes them; the schema does not
        d["nodes"][6]["value"] = v
        assert any("node 6 (const)" in p and "not a decimal" in p for p in problems(d)), v


def test_neg_inf_const_is_the_mask_value():
    """-inf, spelled exactly so, is the one non-finite constant (masked_fill(~keep, -inf))."""
    d = doc(); d["nodes"][6]["value"] = "-inf"
    assert ir.parse(d).nodes[6].number == float("-inf")


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


# A GEMM multiplies one dtype: operands of two dtypes are refused by the IR (they used to pass
# the IR and interp and fail only in TileLang: "Mixed-dtype GEMM only supports f8f6f4").
DT = ["f16", "bf16", "f32", "f64"]


@settings(max_examples=examples(30))
@given(st.sampled_from(DT), st.sampled_from(DT), st.booleans())
def test_matmul_operand_dtypes_must_agree(da, db, cast):
    from leantile.dag import DagM
    g = DagM("mixed", {"m": 4, "k": 5, "n": 3})
    x, w = g.input("X", ["m", "k"], da), g.input("W", ["k", "n"], db)
    if cast:  # the fix the message suggests: cast one operand to the other's dtype
        w = g.cast(w, da)
    g.output("out", g.matmul(g.mul(g.const("2.0"), x), w, "k", "k"))  # 2 * x has x's dtype
    if da == db or cast:
        g.graph()
        return
    with pytest.raises(ir.GraphError) as e:
        g.graph()
    [line] = e.value.problems
    assert line.startswith("node 4 (matmul): operands have different dtypes") and da in line and db in line
    assert "cast" in line


def test_mixed_dtype_graph_file_is_refused_by_validate(tmp_path):
    from leantile.cli import main
    d = doc("matmul", m=4, d=8, n=4)
    d["nodes"][1]["dtype"] = "bf16"
    p = tmp_path / "mixed.json"
    p.write_text(json.dumps(d))
    assert main(["validate", str(p)]) == 1
    assert "operands have different dtypes, f16 (node 0) and bf16 (node 1)" in str(problems(d))


def test_constant_first_operand_keeps_the_tile_dtype_and_lowers():
    """2 * x feeding a GEMM has x's dtype: its shared tile is f16 like W's (it was f32, a mixed
    f32 x f16 GEMM that TileLang refuses)."""
    pytest.importorskip("tilelang", reason="tilelang not installed")
    from leantile.dag import DagM
    from leantile.derive import candidates, derive
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = DagM("const_first", {"m": 32, "k": 32, "n": 32})
    x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
    g.output("out", g.matmul(g.mul(g.const("2.0"), x), w, "k", "k"))
    graph = g.graph()
    for c in candidates(graph):
        plan = derive(graph, c.name)
        for k in plan.kernels:
            assert {b.dtype for b in k.buffers if b.scope == "shared"} <= {"f16"}, (c.name, k.name)
        mod = load_module(emit_module(plan), f"const_first_{c.name}")
        for name, f in mod.build_kernel().items():
            assert "__global__" in lower_to_cuda(f, arch="sm_90"), name


def test_tensors_past_32_bit_indexing_are_refused_with_the_limit_named():
    """Inputs and outputs of 2^31 elements or more (the kernels index with 32-bit integers: such
    sizes failed inside TileLang or with an OverflowError) are refused by validate; an
    intermediate that large is refused only where a plan stores it: flash attention over 2^32
    scores derives, the unfused candidate (which stores them) is refused with the reason."""
    from leantile import architectures
    from leantile.dag import build_graph_with_output
    from leantile.derive import DerivationError, candidates, derive

    with pytest.raises(ir.GraphError, match=r"input 'X': 2147483648 elements, more than the 2147483647 \(2\^31 - 1\)"):
        build_graph_with_output("big", {"m": 2 ** 16, "n": 2 ** 15}, lambda g: g.neg(g.input("X", ["m", "n"])))
    ok = build_graph_with_output("edge", {"m": 2 ** 31 - 1}, lambda g: g.neg(g.input("X", ["m"])))
    assert ok.axes["m"] == ir.MAX_TENSOR_ELEMENTS
    att = architectures.build("attention", h=1, t_q=65536, t_kv=65536, d_h=64)  # scores: 2^32 elements
    names = [c.name for c in candidates(att)]
    assert "online_exp2" in names
    assert derive(att, "online_exp2").kernels
    with pytest.raises((ir.GraphError, DerivationError), match="32-bit indexing: global .* holds 4294967296 elements"):
        derive(att, "unfused")
