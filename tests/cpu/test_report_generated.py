"""Issue 13: `leantile report` renders every graph derive accepts, not only the built-ins.
Generated graphs (what users build: scaled softmax with its statistics as outputs, computed
Q/K/V, decode, norms into one or two GEMMs, casts, constants as outputs, renamed axes) are
written as JSON and reported in Markdown; the page names the graph and every candidate."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leantile.derive import candidates
from leantile.report.build import write_reports

from strategies import random_graphs, structured_graphs, user_graphs  # noqa: E402
from profiles import examples  # noqa: E402

GRAPHS = st.one_of(user_graphs().map(lambda gc: gc[0]), structured_graphs(), random_graphs(max_ops=5))


@settings(max_examples=examples(20), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(GRAPHS)
def test_report_renders_generated_graphs(g):
    names = [c.name for c in candidates(g)]
    assert names, g.name
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"{g.name}.json"
        src.write_text(g.to_json())
        out = Path(d) / "reports"
        files = write_reports([str(src)], out, formats=("md",), examples=1)
        page = out / f"{g.name}.md"
        assert page.is_file() and page in [Path(f) for f in files], files
        text = page.read_text()
        assert g.name in text
        for n in names:  # every candidate derive offers is on the page
            assert n in text, (n, g.name)
