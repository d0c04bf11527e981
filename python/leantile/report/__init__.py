"""Proof-checked derivation reports: `leantile report [SOURCE ...] [--format html|md]`.

collect.py gathers what a page shows (formulas.py, picture.py, evidence.py, bench.py);
html.py and md.py render it; build.py writes the pages, the index and the KaTeX assets.
Nothing is imported here eagerly: the CLI registers `report` without importing torch.
"""


def __getattr__(name):
    if name == "write_reports":
        from .build import write_reports

        return write_reports
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
