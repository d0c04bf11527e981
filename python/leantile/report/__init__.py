"""Proof-checked derivation reports: `leantile report [SOURCE ...] [--format html|md]`.

collect.py gathers what a page shows (formulas.py, picture.py, evidence.py, bench.py);
html.py and md.py render it; build.py writes the pages, the index and the KaTeX assets.
"""
from .build import write_reports  # noqa: F401
