"""`leantile report`: every built-in's page renders, has each section, words its proof status
honestly, is byte-identical when rendered twice, and references no asset over the network."""
from html.parser import HTMLParser

import pytest

from leantile import architectures, symbolic
from leantile.cli import main
from leantile.derive import RULES
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
    assert {r.name for r in RULES} <= set(symbolic.CHECKS)
    assert all(ok for _, ok, _ in symbolic.run(r.name for r in RULES))
    seen = set()
    for name in architectures.NAMES:
        g = architectures.build(name)
        for c in candidates(g):
            for s in c.steps:
                before, after = step_formulas(g, s)
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
