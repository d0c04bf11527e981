"""`leantile report`: every built-in's page renders, has each section, words its proof status
honestly, is byte-identical when rendered twice, and references no asset over the network."""
import json
from html.parser import HTMLParser

import pytest

from leantile import architectures
from leantile.architectures import variants
from leantile.derive.rules.flatten import flatten
from leantile.autodiff import vjp
from leantile.cli import main
from leantile.derive import RULES
from leantile.derive.rules import run_sympy_checks, sympy_checks
from leantile.lean import TheoremStatus, theorem_status
from leantile.report import write_reports
from leantile.report.formulas import step_formulas
from leantile.derive import candidates

SECTIONS = ("architecture", "derivation", "proofs", "evidence", "kernel", "benchmarks")


class Page(HTMLParser):
    """Section ids, asset URLs, the visible text and the text of the proof-status section."""

    def __init__(self):
        super().__init__()
        self.ids, self.urls, self.text, self.proof_text = [], [], [], []
        self.section = None
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id")
            self.ids.append(self.section)
        if tag in ("script", "style"):
            self.skip += 1
        for k in ("src", "href"):
            if a.get(k):
                self.urls.append(a[k])

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None
        if tag in ("script", "style"):
            self.skip -= 1

    def handle_data(self, data):
        if self.skip:
            return
        self.text.append(data)
        if self.section == "proofs":
            self.proof_text.append(data)


def parse(path) -> Page:
    p = Page()
    p.feed(path.read_text())
    return p


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    write_reports(architectures.NAMES, out, examples=2)
    return out


@pytest.mark.parametrize("name", architectures.NAMES)
def test_every_section_is_there(reports, name):
    page = parse(reports / f"{name}.html")
    assert [s for s in page.ids if s in SECTIONS] == list(SECTIONS)
    text = " ".join(page.text)
    assert "lean/LeanTile/Architectures/" in text  # the Lean source is shown
    assert "float64" in text and "float32" in text and "examples run" in text
    md = (reports / f"{name}.md").read_text()
    for heading in ("## Architecture", "## Derivation", "## Proof status", "## Numeric evidence",
                    "## Emitted TileLang", "## Benchmarks"):
        assert heading in md
    assert (reports / f"{name}.graph.svg").read_text().lstrip().startswith("<svg")


@pytest.mark.parametrize("name", architectures.NAMES)
def test_no_network_assets(reports, name):
    for page in (reports / f"{name}.html", reports / "index.html"):
        urls = parse(page).urls
        assert not [u for u in urls if u.startswith(("http:", "https:", "//"))]
        for u in urls:
            if not u.startswith(("data:", "#")):
                assert (page.parent / u).is_file(), u  # every linked file is there
    assert (reports / "katex" / "fonts" / "KaTeX_Main-Regular.woff2").is_file()
    assert "http" not in (reports / "katex" / "katex.min.css").read_text()


def test_proof_status_wording_without_toolchain(reports):
    statuses = theorem_status()
    if any(s.status != "unchecked" for s in statuses):
        pytest.skip("a Lean toolchain is present")
    for name in architectures.NAMES:
        proof = " ".join(parse(reports / f"{name}.html").proof_text)
        if candidates(architectures.build(name))[0].steps:
            assert "unchecked (no Lean toolchain)" in proof
        assert "checked" not in proof.replace("unchecked", "").replace("check-lean", "")


def test_proof_status_wording_checked_and_failed(tmp_path):
    """Fake statuses: checked shows its axioms, failed its message, never confused."""
    fake = [TheoremStatus(r.name, r.theorem, "checked" if i % 2 else "failed",
                          axioms=["propext", "Quot.sound"] if i % 2 else [],
                          message="" if i % 2 else "type mismatch here") for i, r in enumerate(RULES)]
    write_reports(["swiglu"], tmp_path, formats=("html",), examples=1, statuses=fake)
    proof = " ".join(parse(tmp_path / "swiglu.html").proof_text)
    by_rule = {s.label: s for s in fake}
    for rule in ("dual_gemm", "fuse_elementwise"):
        s = by_rule[rule]
        assert s.theorem in proof
        if s.status == "checked":
            assert "propext" in proof
        else:
            assert "failed" in proof and "type mismatch here" in proof
    assert "unchecked" not in proof


def test_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        write_reports(["attention", "rmsnorm"], out, examples=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_every_rule_has_a_formula_and_a_sympy_check():
    assert set(sympy_checks()) == {r.name for r in RULES}
    assert all(ok for _, ok, _ in run_sympy_checks(r.name for r in RULES))
    from leantile.dag import build_graph_with_output
    seen = set()
    graphs = [architectures.build(name) for name in architectures.NAMES]
    graphs.append(build_graph_with_output("ln", {"m": 3, "d": 5}, lambda g: g.layer_norm(g.input("X", ["m", "d"]), "d")))

    def log_softmax(g):  # a row too long for the chip: streamed, its sum rescaled (online_sum)
        x = g.input("X", ["m", "d"])
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    graphs.append(build_graph_with_output("lsm", {"m": 2, "d": 20000}, log_softmax))
    graphs += [architectures.build("matmul", m=16, d=4096, n=4096),  # split_k
               architectures.build("attention", h=8, t_q=1, t_kv=4096),  # split_kv
               architectures.build("gqa_attention", t_q=1),  # pack_query_group (decode)
               build_graph_with_output("vocab", {"m": 4, "v": 50000},  # split_row
                                       lambda g: g.softmax(g.input("X", ["m", "v"]), "v")),
               build_graph_with_output("maxpool", {"b": 8, "k": 16, "n": 8, "p": 4},  # fuse_pool_epilogue
                                       lambda g: g.red("max", g.matmul(g.input("X", ["b", "k"]),
                                                                       g.input("W", ["k", "n", "p"]), "k", "k"), "p")),
               build_graph_with_output("groupnorm", {"b": 8, "k": 16, "g": 2, "c": 24},  # fuse_row_epilogue
                                       lambda g: g.layer_norm(g.matmul(g.input("X", ["b", "k"]),
                                                                       g.input("W", ["k", "g", "c"]), "k", "k"), "c")),
               build_graph_with_output("chw", {"n": 2, "c": 3, "h": 4, "w": 5},  # flatten_reduction
                                       lambda g: g.red("sum", g.red("sum", g.input("X", ["n", "c", "h", "w"]), "w"), "h")),
               build_graph_with_output("gainfold", {"m": 8, "k": 16, "n": 8},  # gain_fold
                                       lambda g: g.matmul(g.mul(g.rms_norm(g.input("X", ["m", "k"]), "k"), g.input("G", ["k"])),
                                                          g.input("W", ["k", "n"]), "k", "k")),
               vjp(architectures.build("causal_attention", h=2, t_q=40, t_kv=40, d_h=16)).graph,  # flash_backward
               build_graph_with_output("activations", {"b": 3, "t": 5, "k": 16, "n": 8},  # merge_gemm_axes
                                       lambda g: g.matmul(g.input("X", ["b", "t", "k"]), g.input("W", ["k", "n"]), "k", "k")),
               variants.module("document_attention").build(h=1, t_q=6, t_kv=6, d_h=4)]  # mask_bounds
    for g in graphs:
        name = g.name
        for c in candidates(g):
            for s in c.steps:  # after the graph's rewrites the steps name nodes of the rewritten graph
                before, after = step_formulas(g if s.rule == "flatten_reduction" else flatten(g)[0], s)
                assert before and after and before != after, (name, s.rule)
                seen.add(s.rule)
    assert seen == {r.name for r in RULES}


def test_cli_writes_index(tmp_path, capsys):
    assert main(["report", "matmul", "--format", "md", "--out", str(tmp_path), "--examples", "1"]) == 0
    assert (tmp_path / "matmul.md").is_file() and (tmp_path / "index.md").is_file()
    assert not (tmp_path / "index.html").exists()
    assert main(["report", "no_such_arch", "--out", str(tmp_path)]) == 1
    assert "no_such_arch" in capsys.readouterr().err


def test_index_lists_every_report_in_the_folder(tmp_path):
    """Two runs into one folder: the index links both runs' pages; a page deleted by hand
    drops out of the index of its format at the next run."""
    def linked(fmt):
        text = (tmp_path / f"index.{fmt}").read_text()
        return {n for n in ("matmul", "swiglu", "geglu") if (f'href="{n}.html"' if fmt == "html" else f"]({n}.md)") in text}

    write_reports(["matmul"], tmp_path, examples=1)
    write_reports(["swiglu"], tmp_path, examples=1)
    assert linked("html") == linked("md") == {"matmul", "swiglu"}
    (tmp_path / "matmul.md").unlink()
    write_reports(["swiglu"], tmp_path, examples=1)
    assert linked("html") == {"matmul", "swiglu"} and linked("md") == {"swiglu"}


# -- reports keyed by the graph's content, never its name alone -------------------------------

def _matmul_named_attention():
    from leantile.dag import build_graph_with_output
    from leantile.architectures import matmul

    return build_graph_with_output("attention", {"m": 8, "d": 8, "n": 8}, matmul.body)


def test_a_graph_named_like_a_builtin_gets_neither_its_lean_source_nor_its_benchmarks(tmp_path):
    src = tmp_path / "attention.json"
    src.write_text(_matmul_named_attention().to_json())
    write_reports([str(src)], tmp_path / "r", examples=1)
    page = parse(tmp_path / "r" / "attention.html")
    text = " ".join(page.text)
    assert "Attention.lean" not in text and "def body" not in text and "No Lean source" in text
    assert "No benchmark for this graph" in text and "eager" not in text
    assert "tiled_attention_eq_softmax" not in " ".join(page.proof_text)  # the built-in's end-to-end lemma
    md = (tmp_path / "r" / "attention.md").read_text()
    assert "Attention.lean" not in md and "No benchmark for this graph" in md


def test_the_builtin_still_gets_its_lean_source_and_benchmarks(reports):
    page = parse(reports / "attention.html")
    text = " ".join(page.text)
    assert "lean/LeanTile/Architectures/Attention.lean" in text and "No Lean source" not in text
    assert "eager" in text and "No benchmark" not in text
    assert "tiled_attention_eq_softmax" in " ".join(page.proof_text)


def test_bench_rows_match_by_digest_or_by_the_builtin_at_the_rows_shape(tmp_path):
    from leantile.report.bench import graph_digest, latest

    real = architectures.build("matmul", m=8, d=8, n=8)
    fake = real.model_copy(update={"outputs": {"y": 2}})  # same name, other content
    default = architectures.build("matmul")

    def rows(*rs):
        (tmp_path / "r.json").write_text(json.dumps({"device": "GPU", "rows": list(rs)}))
        return tmp_path

    row = {"arch": "matmul", "candidate": "direct", "gpu_ms": {"leantile": 1.0}}
    assert latest(rows(row), real)  # no digest, no shape: the built-in at the graph's own sizes
    assert not latest(rows(row), fake) and "another graph" in latest(rows(row), fake).note
    assert latest(rows({**row, "graph_digest": graph_digest(fake)}), fake)
    assert not latest(rows({**row, "graph_digest": graph_digest(real)}), fake)
    at_default = {**row, "shape": dict(default.axes)}
    assert latest(rows(at_default), default) and not latest(rows(at_default), real)
    assert not latest(rows({**row, "gpu_ms": {"leantile": -5.0}}), real)  # impossible times are not shown
    assert graph_digest(real) == graph_digest(real.with_derivation(candidates(real)[0].steps))


@pytest.mark.parametrize("other", [{"rows": 4096, "cols": 65536}, {"rows": "x"}, {"rows": {"a": 1}}, {"rows": None},
                                   {"rows": [1, "x", None]}, [1, 2], 7])
def test_other_scripts_json_beside_bench_rows_is_skipped(tmp_path, other):
    """benchmarks/results holds probes' JSON too (a row count under "rows"): the report reads
    the bench rows beside it and skips the rest, never crashes on it."""
    from leantile.report.bench import latest

    g = architectures.build("matmul", m=8, d=8, n=8)
    (tmp_path / "a-probe.json").write_text(json.dumps(other))
    (tmp_path / "b-bench.json").write_text(json.dumps(
        {"rows": [{"arch": "matmul", "candidate": "direct", "gpu_ms": {"leantile": 1.0}}]}))
    assert latest(tmp_path, g)


# -- odd graphs: one clean page, quickly --------------------------------------------------------

def _graph_file(tmp_path, name, axes, body):
    from leantile.dag import build_graph_with_output

    p = tmp_path / f"{name}.json"
    p.write_text(build_graph_with_output(name, axes, body).to_json())
    return str(p)


def test_odd_graphs_get_a_report(tmp_path, capsys):
    import time

    def many_ones(g):
        return g.exp(g.input("X", [f"a{i}" for i in range(40)]))

    def wide(g):  # 30 axes of size 2: 2**30 elements at full size (validate's cap is 2^31 - 1), shrunk for the examples
        return g.neg(g.input("X", [f"a{i}" for i in range(30)]))

    def const_out(g):
        g.input("X", ["m"])
        return g.const("2.5")

    sources = [_graph_file(tmp_path, "ones", {f"a{i}": 1 for i in range(40)}, many_ones),
               _graph_file(tmp_path, "wide", {f"a{i}": 2 for i in range(30)}, wide),
               _graph_file(tmp_path, "single", {"m": 4}, lambda g: g.input("X", ["m"])),
               _graph_file(tmp_path, "const_out", {"m": 4}, const_out)]
    t0 = time.perf_counter()
    assert main(["report", *sources, "--out", str(tmp_path / "r"), "--examples", "1"]) == 0, capsys.readouterr().err
    assert time.perf_counter() - t0 < 60
    for name in ("ones", "wide", "single", "const_out"):
        assert SECTIONS[-1] in parse(tmp_path / "r" / f"{name}.html").ids


def test_long_sources_are_not_highlighted():
    """pygments took 14 s of the 24 s report of a 1000-node chain (its 1 MB kernel module)."""
    import time

    from leantile.report import html

    text = "x = 1  # a line of a long generated module\n" * 30_000
    t0 = time.perf_counter()
    out = html._code(text, "python")
    assert time.perf_counter() - t0 < 1.0 and out.startswith('<div class="src"><pre>')


def test_example_sizes_stay_small_and_keep_size_one_axes():
    import random

    from leantile.dag import build_graph_with_output
    from leantile.report.evidence import MAX_ELEMENTS, small_sizes

    g = build_graph_with_output("w", {**{f"a{i}": 2 for i in range(18)}, "one": 1, "big": 4096},
                                lambda g: g.neg(g.input("X", [*(f"a{i}" for i in range(18)), "one", "big"])))
    sizes = small_sizes(g, random.Random(0))
    n = 1
    for v in sizes.values():
        n *= v
    assert n <= MAX_ELEMENTS and sizes["one"] == 1 and all(1 <= v <= 9 for v in sizes.values())


# -- names from the graph are data, never markup ------------------------------------------------

EVIL = "</script><script>alert(1)</script>"


def test_names_are_escaped_in_html_svg_and_markdown(tmp_path, monkeypatch):
    """An output name the IR would refuse, forced past validation (model_copy)."""
    import re

    from leantile.report import build

    g = architectures.build("matmul", m=4, d=4, n=4)
    g = g.model_copy(update={"outputs": {EVIL: 2}})
    monkeypatch.setattr(build, "load_source", lambda s, sizes=None: g)
    write_reports(["x"], tmp_path, examples=1)
    for f in ("matmul.html", "matmul.graph.svg", "index.html"):
        assert "<script>alert" not in (tmp_path / f).read_text(), f
    assert "&lt;script&gt;alert(1)" in (tmp_path / "matmul.html").read_text()  # shown, as text
    md = (tmp_path / "matmul.md").read_text()
    outside_code = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", md, flags=re.S | re.M)
    assert "<script>" not in outside_code


def test_markdown_and_dot_helpers_take_names_literally():
    from leantile.report.md import code, fence, text
    from leantile.report.picture import dq

    assert code("a`b") == "``a`b``" and code("`x") == "`` `x ``"
    assert fence("x\n```\ny", "python")[0] == "````python"
    assert text("<b>[x](javascript:1)</b>") == "\\<b\\>\\[x\\](javascript:1)\\</b\\>"
    assert dq('a"b\\N\nc') == '"a\\"b\\\\N c"'


def test_a_graph_named_index_does_not_replace_the_index(tmp_path):
    """index.html / index.md list the reports; a graph named `index` gets its own pages
    (index.page.*) and the index links to them."""
    g = architectures.build("matmul", m=8, d=16, n=8).model_copy(update={"name": "index"})
    src, other = tmp_path / "index.json", tmp_path / "mm.json"
    src.write_text(g.to_json())
    other.write_text(g.model_copy(update={"name": "mm"}).to_json())
    out = tmp_path / "out"
    assert main(["report", str(src), str(other), "--out", str(out), "--examples", "1"]) == 0
    assert "leantile reports" in (out / "index.html").read_text()
    assert "leantile reports" in (out / "index.md").read_text()
    page = (out / "index.page.html").read_text()
    assert "index" in page and "leantile reports" not in page
    assert 'href="index.page.html"' in (out / "index.html").read_text()
    assert "(index.page.md)" in (out / "index.md").read_text()


@pytest.mark.parametrize("name", architectures.NAMES)
def test_report_shows_the_plan_compile_runs(name):
    """report, kernels and leantile.compile agree on which candidate ships (issue 14): the
    report's choice is the tuned lookup's, which is what runtime.choose_plan runs on that GPU."""
    from leantile.report import bench as rbench
    from leantile.report.collect import choose
    from leantile.runtime import choose_plan
    from leantile.tuned import tuned_entries

    g = architectures.build(name)
    chosen, tiles, why = choose(g, rbench.Bench())
    found = tuned_entries(g.name, dict(g.axes), g.inputs()[0].dtype)
    if not found:
        assert "no tuned entry" in why
        return
    gpu = found[0][0]["gpu"]
    plan, how = choose_plan(g, gpu=gpu)
    assert how == "tuned" and plan.candidate == chosen.name and gpu in why
    assert all(plan.tiles[k] == v for k, v in tiles.items())


USER_LAYERNORM = '''from leantile import dag


def _normalise(g, x):  # a helper: the report shows it too
    xc = g.sub(x, g.mean_along(x, "d"))
    return g.div(xc, g.sqrt(g.add(g.mean_along(g.mul(xc, xc), "d"), g.const(1e-5))))


def build(m=300, d=257):
    return dag.build_graph_with_output("user_layernorm", {"m": m, "d": d},
                                       lambda g: _normalise(g, g.input("X", ["m", "d"])))
'''


def test_a_user_graph_with_fuse_reduction_renders(tmp_path):
    """A user's Python source whose graph derives through fuse_reduction: every \\text{...} of
    the formulas is escaped (the mode on_chip printed raw red LaTeX), the whole file is shown
    (build() alone hid its helper), and the evidence table gives the plain error beside the one
    judged (labelled "max rel. error", it showed 0.0 where the plain error was 2.9e-4)."""
    import re

    from leantile.report.collect import arch_source
    from leantile.report.formulas import step_formulas
    from leantile.sources import load_source

    src = tmp_path / "user_layernorm.py"
    src.write_text(USER_LAYERNORM)
    spec = f"{src}:build"
    g = load_source(spec, {})
    from leantile.derive import candidates
    steps = [s for c in candidates(g) for s in c.steps]
    assert any(s.rule == "fuse_reduction" for s in steps)
    for s in steps:
        for tex in step_formulas(g, s):
            for body in re.findall(r"\\text\{((?:[^{}]|\{[^{}]*\})*)\}", tex):
                assert not re.search(r"(?<!\\)[_^%&#$]", body), (s.rule, body)
    assert "_normalise" in arch_source(spec, g, tmp_path)[2]
    write_reports([spec], tmp_path / "r", formats=("html", "md"), examples=1)
    md = (tmp_path / "r" / "user_layernorm.md").read_text()
    assert "beyond the graph's own rounding" in md and "def _normalise" in md
    assert r"on\_chip" in md or r"streamed" in md
