"""The shape suite (leantile.suite, `leantile bench --suite`): its cases, the bf16 graphs, the
selections and shards, the summary, and the command's refusals, on the CPU."""
import json
import math

import pytest

from leantile import architectures, ir, reference, suite
from leantile.cli import main
from leantile.dag import build_graph_with_output
from leantile.derive import derive


@pytest.fixture(scope="module")
def built():
    return {c.name: suite.build(c) for c in suite.CASES}


def test_every_case_builds_a_valid_graph_at_its_sizes_and_dtype(built):
    names = [c.name for c in suite.CASES]
    assert len(names) == len(set(names)) and 60 <= len(names) <= 110  # a full-suite run stays within a few GPU calls
    for c in suite.CASES:
        g, base = built[c.name]
        assert ir.check(g) == [], c.name
        assert ir.parse(g.to_json()) == g  # survives its own JSON
        assert dict(g.axes) == c.sizes, c.name
        assert c.dtype in ("f16", "bf16") and {n.dtype for n in g.inputs()} == {c.dtype}, c.name
        assert g.name == c.arch and callable(base), c.name  # its architecture's eager and vendor paths
        assert c.model in (*suite.MODELS, "issue", "published")


def test_model_dimensions_are_the_published_ones():
    l8, l70, g2 = suite.MODELS["llama3_8b"], suite.MODELS["llama3_70b"], suite.MODELS["gpt2"]
    assert (l8["hidden"], l8["mlp"], l8["heads"], l8["kv_heads"], l8["d_h"]) == (4096, 14336, 32, 8, 128)
    assert (l70["hidden"], l70["mlp"], l70["heads"], l70["d_h"]) == (8192, 28672, 64, 128)
    assert (g2["hidden"], g2["mlp"], g2["heads"], g2["d_h"]) == (768, 3072, 12, 64)
    by = {c.name: c for c in suite.CASES}
    assert by["matmul_llama3_8b_qkv_m2048"].sizes == {"m": 2048, "d": 4096, "n": (32 + 2 * 8) * 128}
    ms = {c.sizes["m"] for c in suite.CASES if c.arch in ("matmul", "swiglu", "rmsnorm") and c.model != "published"}
    assert {1, 16, 128, 2048, 8192} <= ms
    att = [c.sizes for c in suite.CASES if c.arch.startswith("attention")]
    assert {512, 2048, 8192, 32768} <= {s["t_kv"] for s in att if s["t_q"] > 1}
    assert {2048, 8192, 32768} <= {s["t_kv"] for s in att if s["t_q"] == 1}
    assert {64, 128} <= {s["d_h"] for s in att}


def test_bf16_graph_has_bf16_inputs_and_casts_and_derives():
    def body(g):
        x = g.input("X", ["m", "d"])
        w = g.input("W", ["d", "n"])
        y = g.matmul(g.cast(g.exp(g.cast(x, "f32")), "f16"), w, "d", "d")
        return g.cast(y, "f16")

    g16 = build_graph_with_output("castmm", {"m": 64, "d": 128, "n": 64}, body)
    g = suite.with_dtype(g16, "bf16")
    assert g.name == g16.name and isinstance(g, ir.Graph) and ir.check(g) == []
    assert {n.dtype for n in g.inputs()} == {"bf16"}
    assert sorted(n.dtype for n in g.nodes if isinstance(n, ir.Cast)) == ["bf16", "bf16", "f32"]
    assert derive(g).kernels
    for name in ("matmul", "attention", "layernorm_linear_gelu"):
        gb = suite.with_dtype(architectures.build(name), "bf16")
        assert {n.dtype for n in gb.inputs()} == {"bf16"} and derive(gb).kernels


def test_quick_covers_every_architecture_dtype_and_the_issue_cases():
    q = suite.select(suite="quick")
    assert 20 <= len(q) <= 30 and len(q) == len(suite.QUICK)
    assert {c.arch for c in q} == set(architectures.NAMES) | set(suite.EXAMPLE_NAMES)
    assert {c.dtype for c in q} == {"f16", "bf16"}
    assert {"decode", "skinny", "large", "published"} <= {t for c in q for t in c.tags}
    s = [(c.arch, c.sizes) for c in q]
    assert ("attention", {"h": 32, "t_q": 1, "t_kv": 8192, "d_h": 128}) in s
    assert any(a == "matmul" and z["m"] <= 16 for a, z in s)
    assert any(a == "matmul" and z["d"] >= 2 ** 19 for a, z in s)
    assert ("layernorm_linear_gelu", {"m": 4096, "d": 4096, "n": 16384}) in s


def test_shards_partition_the_selection():
    for sel in suite.SELECTIONS:
        every = [c.name for c in suite.select(suite=sel)]
        for n in (1, 3, 4, 7):
            shards = [[c.name for c in suite.select(suite=sel, shard=f"{i}/{n}")] for i in range(1, n + 1)]
            flat = [x for s in shards for x in s]
            assert sorted(flat) == sorted(every) and len(flat) == len(set(flat))
            assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert {c.name for c in suite.select(suite="quick")} | {c.name for c in suite.select(suite="rest")} == \
        {c.name for c in suite.CASES}
    assert len(suite.select(suite="full", limit=5)) == 5
    assert all("decode" in c.tags for c in suite.select(tags=["decode"]))
    for bad in ("0/4", "5/4", "1", "a/b", "1/0"):
        with pytest.raises(ir.GraphError):
            suite.select(shard=bad)


def _row(name, how, lt, comp, eager, vendor=None, ok=True):
    gpu = {"leantile": lt, "compile": comp, "eager": eager, "compile_ro": float("nan")}
    if vendor is not None:
        gpu["cublas"] = vendor
    r = {"shape": {"m": 1}, "candidate": "direct", "tuned": how == "tuned", "tiles": {}, "ok": ok,
         "rel_err": 1e-3, "gpu_ms": gpu}
    return suite.suite_row(suite.Case(name, "matmul", {"m": 1}, "f16", "issue"), r)


def test_summary_numbers():
    rows = [_row("a", "default", 1.0, 2.0, 4.0, 1.0), _row("b", "default", 2.0, 1.0, 3.0),
            _row("c", "tuned", 1.0, 0.7, 1.0, 0.5), _row("d", "default", 1.0, 100.0, 1.0, ok=False),
            {**_row("e", "default", 1, 1, 1), **{"gpu_ms": None}},  # replaced below: an error row
            suite.suite_row(suite.Case("f", "matmul", {"m": 1}, "f16", "issue"), {"skipped": "needs 400 GB"})]
    rows[4] = suite.suite_row(suite.Case("e", "matmul", {"m": 1}, "f16", "issue"), {"error": "boom"})
    s = suite.summary(rows)
    # ratios vs compile of the ok rows: a 2.0, b 0.5, c 0.7 (d failed its check)
    assert math.isclose(s["geomean_vs_compile"], (2.0 * 0.5 * 0.7) ** (1 / 3))
    assert math.isclose(s["geomean_vs_compile_default"], 1.0)  # sqrt(2.0 * 0.5)
    assert math.isclose(s["geomean_vs_compile_tuned"], 0.7)
    assert math.isclose(s["geomean_vs_eager"], (4.0 * 1.5 * 1.0) ** (1 / 3))
    assert math.isclose(s["geomean_vs_vendor"], math.sqrt(1.0 * 0.5))  # b has no vendor path
    assert s["worst"] == {"case": "b", "how": "default", "vs_compile": 0.5}
    assert s["below_0.8x"] == 2 and (s["rows"], s["ok"], s["errors"], s["check_failed"], s["skipped"]) == (6, 3, 1, 1, 1)
    assert rows[0]["vendor"] == "cublas" and "compile_ro" not in rows[0]["gpu_ms"]  # NaN dropped
    md = suite.markdown(rows, {"selection": "t", "device": "X", "torch": "0", "cases": 6})
    assert "| a | issue | f16 | m=1 | default | direct |" in md and "SKIPPED: needs 400 GB" in md and "ERROR: boom" in md


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_run_suite_writes_rows_summary_and_chart_without_a_gpu(tmp_path, monkeypatch, capsys):
    """The loop, the files and the progress lines, with run_one replaced (no GPU here)."""
    import torch

    import leantile.bench
    import leantile.reference

    calls = []

    def fake_run_one(g, tuned=True, baselines_fn=None, inputs=None, **kw):
        calls.append((g.name, dict(g.axes), tuned))
        assert set(inputs) == {n.name for n in g.inputs()}
        if g.name == "matmul" and g.axes["m"] == 1:
            raise RuntimeError("no kernel today")
        return {"shape": dict(g.axes), "candidate": "direct", "tuned": tuned and g.inputs()[0].dtype == "f16",
                "tiles": {"block_m": 64}, "ok": True, "rel_err": 1e-4,
                "gpu_ms": {"leantile": 1.0, "eager": 2.0, "compile": 1.5, "compile_ro": float("nan"), "cublas": 0.9}}

    monkeypatch.setattr(leantile.bench, "run_one", fake_run_one)
    monkeypatch.setattr(leantile.reference, "random_inputs",  # full-size inputs would take the CPU 30 s
                        lambda g, seed=0, device="cpu", scale=1.0: {n.name: torch.full((1,), scale) for n in g.inputs()})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setenv("LEANTILE_TUNED_DIR", str(tmp_path / "tuned"))  # the shipped entries only

    def args(**kw):
        return {"suite": "full", "shard": None, "limit": None, "tags": None, "out": str(tmp_path),
                "time_budget": None, "precompile": False, **kw}

    assert suite.run_suite(**args(tags=["published"])) == 0
    stem = tmp_path / "suite-NVIDIA-H200-full-published"
    data = json.loads(stem.with_suffix(".json").read_text())
    by = {}
    for r in data["rows"]:
        by.setdefault(r["case"], []).append(r["how"])
    # matmul at its published shape has a shipped H200 entry: a tuned row, then the default plan's row
    assert by["matmul_published"] == ["tuned", "default"] and by["matmul_published_bf16"] == ["default"]
    assert ("matmul", {"m": 1024, "d": 4096, "n": 4096}, False) in calls
    mm = next(r for r in data["rows"] if r["case"] == "matmul_published")
    assert math.isclose(mm["input_scale"], 4096 ** -0.25)  # X W over d = 4096 has unit variance
    assert math.isclose(reference.natural_scale(architectures.build("rmsnorm", d=256)), 0.25)
    assert set(by) == {c.name for c in suite.select(tags=["published"])}
    assert math.isclose(data["summary"]["geomean_vs_compile"], 1.5) and data["summary"]["below_0.8x"] == 0
    assert stem.with_suffix(".md").read_text().count("| 1.50x |") == len(data["rows"])
    assert stem.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [json.loads(x)["case"] for x in lines] == [r["case"] for r in data["rows"]]
    # an error is one row and the others go on
    assert suite.run_suite(**args(suite="quick", shard="1/5", limit=3)) == 1
    rows = json.loads((tmp_path / "suite-NVIDIA-H200-quick-1of5-first3.json").read_text())["rows"]
    assert [r["case"] for r in rows] == [c.name for c in suite.select(suite="quick", shard="1/5")[:3]]
    assert "no kernel today" in rows[0]["error"] and all("gpu_ms" in r for r in rows[1:])
    # a case over the memory limit is skipped with its reason; a spent time budget runs nothing more
    assert suite.run_suite(**args(tags=["large"], limit=5, time_budget=1e-9)) == 0
    rows = json.loads((tmp_path / "suite-NVIDIA-H200-full-large-first5.json").read_text())["rows"]
    assert len(rows) == 5 and all("not run" in r["skipped"] for r in rows)
    big = next(c for c in suite.CASES if c.name == "attention_llama3_8b_prefill_t32768")
    assert suite.footprint(suite.build(big)[0]) > suite.MEMORY_LIMIT
    monkeypatch.setattr(suite, "CASES", [big])
    assert suite.run_suite(**args()) == 0
    rows = json.loads((tmp_path / "suite-NVIDIA-H200-full.json").read_text())["rows"]
    assert [r["case"] for r in rows] == [big.name] and "GB" in rows[0]["skipped"]


def test_suite_and_sources_together_is_one_error_line(capsys):
    assert main(["bench", "--suite", "quick", "matmul"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--suite" in err[0] and "SOURCE" in err[0]
    for argv in (["bench", "--shard", "1/4"], ["bench", "--suite", "quick", "--shard", "9/4"],
                 ["bench", "--suite", "full", "--size", "m=3"]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:")


def test_suite_without_a_gpu_says_so_at_once(capsys):
    import time

    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    t0 = time.time()
    assert main(["bench", "--suite", "quick"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPU" in err[0] and time.time() - t0 < 10


def test_a_case_is_selected_by_its_name_as_by_a_tag():
    picked = suite.select(tags=["matmul_k524288", "layernorm_linear_gelu_gpt2_m1"])
    assert sorted(c.name for c in picked) == ["layernorm_linear_gelu_gpt2_m1", "matmul_k524288"]
    assert suite.select(tags=["no_such_case_or_tag"]) == []


def test_selection_names_fit_a_file_name_and_tell_selections_apart():
    """The selection names the result files: a dozen case names as tags (the device run of
    2026-11-25 failed with 'File name too long') still give a name a file system takes, and two
    long selections that differ in one tag do not share their files."""
    names = [c.name for c in suite.CASES]
    long_a = suite.selection_name("full", "2/3", 5, names[:40])
    long_b = suite.selection_name("full", "2/3", 5, names[:39] + names[41:42])
    assert len(long_a.encode()) + len(".suite-NVIDIA-H200-.json.12345678.tmp") < 255
    assert long_a != long_b and long_a.startswith("full-2of3-") and long_a.endswith("-first5")
    assert suite.selection_name("quick", tags=["decode", "large"]) == "quick-decode-large"
