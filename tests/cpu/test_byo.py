"""Bring your own architecture (issue 8): three architectures that are NOT built in, added the
way a user adds one (examples/architectures/*.py + lean/LeanTile/Architectures/*.lean +
committed exports), go the whole way: property suite (interp(plan) == reference(graph) at
random small sizes and tiles, partial tiles included), lowering to CUDA for sm_90, the
`export` / `kernels` / `derive` commands on user sources, and errors that name the user's
file and line without leaving half-written outputs."""
from __future__ import annotations

import functools
import json
import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

from byo_sources import EXAMPLES, REPO, example_module
from leantile import interp, ir, reference
from leantile.cli import exported_graph, main
from leantile.derive import candidates, derive, replay
from leantile.sources import load_source

from plan_checks import check, rel_err  # noqa: F401
from profiles import examples  # noqa: E402

NAMES = list(EXAMPLES)


# -- the user's modules -------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_user_module_has_default_sizes_and_build(name):
    mod = example_module(name)
    g = mod.build()
    assert isinstance(g, ir.Graph) and g.name == name and dict(g.axes) == mod.DEFAULT_SIZES
    assert load_source(EXAMPLES[name]).to_json() == g.to_json()
    assert load_source(EXAMPLES[name], {"m": 3} if "m" in g.axes else {"h": 2} if "h" in g.axes
                       else {"rows": 3}).axes != g.axes  # --size reaches build(**sizes)


def test_published_shapes():
    assert example_module("geglu").DEFAULT_SIZES == {"m": 1024, "n": 2048, "d": 2048}
    assert example_module("attention_scaled").DEFAULT_SIZES == {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}
    assert example_module("softmax_row").DEFAULT_SIZES == {"rows": 4096, "cols": 65536}


def test_each_exercises_its_rule():
    """GeGLU: dual GEMM + gelu epilogue; scaled attention: one flash kernel with the scale
    folded into exp2 (no div left); softmax row: online stats streamed over cols."""
    from leantile.plan import Map

    plan = derive(load_source(EXAMPLES["geglu"]))
    assert [s.rule for s in plan_steps("geglu")] == ["dual_gemm", "fuse_elementwise"]
    [k] = plan.kernels
    assert "gelu_tanh" in [s.fn for s in k.epilogue if isinstance(s, Map)]

    [k] = derive(load_source(EXAMPLES["attention_scaled"])).kernels
    # exp2((x - m) c'): the scale is the exponents' one constant (online_update._exponent)
    consts = [a for s in k.body if isinstance(s, Map) and s.fn == "mul" for a in s.args if a.startswith("#")]
    assert consts and all(abs(float(c[1:]) - (1 / math.sqrt(128)) / math.log(2)) < 1e-12 for c in consts)
    assert "div" not in [s.fn for s in k.body if isinstance(s, Map)]

    # 32 row blocks leave SMs idle: the statistics are split over the row (split_row), then merged
    stats, merge, norm = derive(load_source(EXAMPLES["softmax_row"])).kernels
    assert stats.stream.axis == "cols" and {s.combine for s in stats.states} == {"max", "rescaled_sum"}
    assert stats.stream.split and merge.stream is None and norm.stream is None


def plan_steps(name):
    return exported_graph(EXAMPLES[name]).derivation


# -- property suite -------------------------------------------------------------------------

def sizes_of(name):
    axes = example_module(name).DEFAULT_SIZES
    return st.fixed_dictionaries({a: st.integers(1, 11) for a in axes})


tiles = st.fixed_dictionaries({"block_m": st.sampled_from([1, 2, 3, 4, 8]),
                               "block_n": st.sampled_from([1, 2, 3, 5, 8]),
                               "block_k": st.sampled_from([1, 2, 3, 4, 8]),
                               "block_r": st.sampled_from([1, 2, 3, 4, 8])})


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@settings(max_examples=examples(25))
@given(data=st.data())
def test_every_candidate_matches_reference(name, dtype, data):
    g = load_source(EXAMPLES[name], data.draw(sizes_of(name), label="sizes"))
    t = data.draw(tiles, label="tiles")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    for c in candidates(g):
        check(g, derive(g, c.name, t), seed, dtype)


@pytest.mark.parametrize("name,sizes,t", [
    ("geglu", dict(m=5, n=7, d=9), dict(block_m=4, block_n=4, block_k=4)),
    ("attention_scaled", dict(h=2, t_q=5, t_kv=11, d_h=3), dict(block_m=4, block_n=4)),
    ("softmax_row", dict(rows=5, cols=19), dict(block_m=4, block_n=8)),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_partial_tiles(name, sizes, t, dtype):
    """Every axis NOT a multiple of its block: the last tile of each is partial."""
    g = load_source(EXAMPLES[name], sizes)
    for c in candidates(g):
        check(g, derive(g, c.name, t), 3, dtype)


@settings(max_examples=examples(10))
@given(st.integers(1, 9), st.integers(1, 40), st.integers(0, 2**31 - 1))
def test_softmax_row_stays_finite_on_huge_logits(rows, cols, seed):
    """Logits around 1e3: naive exp overflows; the streamed online softmax does not."""
    g = load_source(EXAMPLES["softmax_row"], {"rows": rows, "cols": cols})
    inputs = {k: v.half() for k, v in reference.random_inputs(g, seed=seed, dtype="f64", scale=1000.0).items()}
    assert cols == 1 or (inputs["X"].double().exp() == float("inf")).any() or rows * cols < 4
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)["out"]
    for c in candidates(g):
        out = interp.run(derive(g, c.name, {"block_m": 2, "block_n": 8}),
                         {k: v.double() for k, v in inputs.items()}, dtype=torch.float64)["out"]
        assert torch.isfinite(out).all() and rel_err(out, ref) < 1e-9, c.name


# -- exports ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_committed_export_is_what_the_python_path_writes(name, tmp_path):
    committed = (REPO / "exports" / f"{name}.json").read_bytes()
    assert committed == exported_graph(EXAMPLES[name]).to_json().encode(), \
        f"exports/{name}.json is stale: run `make export`"
    assert main(["export", EXAMPLES[name], "--out", str(tmp_path)]) == 0
    assert (tmp_path / f"{name}.json").read_bytes() == committed
    g = ir.parse(committed)
    assert g.derivation and len(replay(g, g.derivation).kernels) >= 1


def test_export_mixes_builtins_and_sources_and_json(tmp_path):
    src = REPO / "exports" / "softmax_row.json"
    assert main(["export", "matmul", EXAMPLES["geglu"], str(src), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["geglu.json", "matmul.json", "softmax_row.json"]
    assert (tmp_path / "softmax_row.json").read_bytes() == src.read_bytes()  # derivation kept


def test_export_size_override(tmp_path):
    assert main(["export", EXAMPLES["softmax_row"], "--size", "rows=8", "cols=64", "--out", str(tmp_path)]) == 0
    assert ir.load(tmp_path / "softmax_row.json").axes == {"rows": 8, "cols": 64}


# -- lowering to CUDA (sm_90) ------------------------------------------------------------------

LOWER_SIZES = {   # GPU-sensible sizes with one partial tile each
    "geglu": dict(m=200, n=256, d=256),
    "attention_scaled": dict(h=2, t_q=256, t_kv=200, d_h=128),
    "softmax_row": dict(rows=200, cols=1000),
}
LOWER_CASES = [(a, c.name) for a in NAMES for c in candidates(load_source(EXAMPLES[a], LOWER_SIZES[a]))]


@functools.lru_cache(maxsize=None)
def _lowered(arch, cand):
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda

    plan = derive(load_source(EXAMPLES[arch], LOWER_SIZES[arch]), cand)
    mod = load_module(emit_module(plan), f"byo_{arch}_{cand}")
    return plan, {name: lower_to_cuda(f, arch="sm_90") for name, f in mod.build_kernel().items()}


@pytest.mark.parametrize("arch,cand", LOWER_CASES, ids=[f"{a}-{c}" for a, c in LOWER_CASES])
def test_every_candidate_lowers_for_sm90(arch, cand):
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")
    from leantile.lower import hopper_features
    from leantile.plan import Gemm, launches

    plan, srcs = _lowered(arch, cand)
    assert list(srcs) == [k.name for k in launches(plan)]  # a tail (Kernel.tail_of) is lowered in its launch
    for k in launches(plan):
        assert f"{k.name}_kernel" in srcs[k.name]
        if any(isinstance(s, Gemm) for s in k.statements()):
            assert hopper_features(srcs[k.name])["wgmma"], k.name


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_fused_candidates_compile_with_nvcc():
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")
    from leantile.lower import compile_cuda, nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc not found")
    for arch in NAMES:
        cand = candidates(load_source(EXAMPLES[arch], LOWER_SIZES[arch]))[0].name
        for name, cu in _lowered(arch, cand)[1].items():
            assert len(compile_cuda(cu, arch="sm_90a")) > 1000, (arch, name)


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_kernels_command_on_a_folder_of_exports(tmp_path):
    """`make kernels` runs `leantile kernels exports`: every graph in the folder, the exported
    (Lean) derivation marked in the index."""
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")

    exports = tmp_path / "exports"
    for name in ("geglu", "softmax_row"):  # attention_scaled lowers above; keep this one short
        assert main(["export", EXAMPLES[name], "--out", str(exports),
                     "--size", *[f"{k}={v}" for k, v in LOWER_SIZES[name].items()]]) == 0
    r = subprocess.run([sys.executable, "-m", "leantile", "kernels", str(exports), "--out", str(tmp_path / "k")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    index = json.loads((tmp_path / "k" / "index.json").read_text())
    assert {e["arch"] for e in index["candidates"]} == {"geglu", "softmax_row"}
    assert all(e["lowered"] for e in index["candidates"])
    assert sorted(e["arch"] for e in index["candidates"] if e["exported"]) == ["geglu", "softmax_row"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # staging folder gone


# -- errors name the user's file and line; nothing half-written ---------------------------------

def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "leantile", *args], capture_output=True, text=True, cwd=cwd)


BAD_MODULES = {
    "syntax": ("from leantile.dag import build_graph_with_output\n"
               "\n"
               "def build(**sizes:\n"
               "    pass\n", 3, "SyntaxError"),
    "raises": ("from leantile.dag import build_graph_with_output\n"
               "\n"
               "def build(**sizes):\n"
               "    n = sizes.get('n', 4)\n"
               "    raise ValueError(f'n={n} is not supported')\n", 5, "ValueError: n=4 is not supported"),
    "bad_graph": ("from leantile.dag import build_graph_with_output\n"
                  "\n"
                  "\n"
                  "def body(g):\n"
                  "    x = g.input('X', ['m', 'd'])\n"
                  "    w = g.input('W', ['d', 'n'])\n"
                  "    return g.matmul(x, w, 'k', 'd')\n"
                  "\n"
                  "\n"
                  "def build(**sizes):\n"
                  "    return build_graph_with_output('bad', {'m': 4, 'd': 4, 'n': 4}, body)\n",
                  7, "contraction axes 'k'/'d'"),
    "import_time": ("from leantile.dag import DagM\n"
                    "g = DagM('t', {'m': 2})\n"
                    "x = g.input('X', ['m', 'q'])\n", 3, "unknown axis 'q'"),
    "not_a_graph": ("def build(**sizes):\n"
                    "    return {'nodes': []}\n", None, "returned dict, expected a leantile graph"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODULES))
@pytest.mark.parametrize("command", ["kernels", "export", "derive"])
def test_user_errors_name_file_and_line_and_write_nothing(case, command, tmp_path, capsys):
    text, line, what = BAD_MODULES[case]
    user = tmp_path / "user" / "my_arch.py"
    user.parent.mkdir()
    user.write_text(text)
    out = tmp_path / "out"
    args = {"kernels": ["kernels", "matmul", f"{user}:build", "--out", str(out)],
            "export": ["export", "matmul", f"{user}:build", "--out", str(out)],
            "derive": ["derive", f"{user}:build"]}[command]
    assert main(args) == 1  # in process: an escaping exception would fail the test
    [msg] = capsys.readouterr().err.strip().splitlines()
    where = f"{user}:{line}:" if line else f"{user}"
    assert msg.startswith(f"error: {where}") and what in msg, msg
    assert not out.exists()  # not even the built-in that came first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user"]


def test_failing_kernels_leaves_previous_output_untouched(tmp_path, monkeypatch):
    """A source that fails AFTER others were emitted (here: an export whose derivation does not
    replay) leaves the output folder exactly as it was, and no staging folder behind."""
    from leantile.cli import kernels as kernels_command
    from leantile.cli.kernels import build_kernels

    monkeypatch.setattr(kernels_command, "_tilelang_available", lambda: False)  # emit only: fast
    out = tmp_path / "k"
    out.mkdir()
    (out / "keep.txt").write_text("from an earlier run")
    d = json.loads((REPO / "exports" / "softmax_row.json").read_text())
    d["derivation"][1]["at"] = d["derivation"][1]["at"][:-1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(ir.GraphError, match="bad.json: derivation"):  # refused at load, naming the file
        build_kernels([EXAMPLES["geglu"], str(bad)], out, log=lambda s: None)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "k"]
    r = _run("kernels", str(bad), "--out", str(out))
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_unknown_source_is_one_line(tmp_path, capsys):
    assert main(["kernels", "geglu", "--out", str(tmp_path / "o")]) == 1
    assert "not a built-in" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main(["export", str(tmp_path / "none.py") + ":build", "--out", str(tmp_path / "o")]) == 1
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "o").exists()
