"""The one progress bar (rich), for long commands: kernels, report, bench, tune."""
from __future__ import annotations

import sys


def progress(items, description: str):
    """Iterate items with a progress bar on stderr when it is a terminal; plainly otherwise
    (logs, CI, tests)."""
    items = list(items)
    if not sys.stderr.isatty() or len(items) < 2:
        yield from items
        return
    from rich.console import Console
    from rich.progress import track

    yield from track(items, description=description, console=Console(stderr=True), transient=True)
