"""The `leantile` command's entry point (pyproject's console script, `python -m leantile`): the
interrupt handlers first (leantile.interrupts), then the command's modules. Kept free of
imports beyond the standard library, so that nothing slow runs before the handlers do."""
from __future__ import annotations

import sys


def main() -> None:
    from . import interrupts

    interrupts.install()
    try:
        from .cli import main as run
        code = run()
        interrupts.raise_pending()  # one received while the last import ran, after the command ended
    except BaseException as e:  # while the command's modules were still loading
        # an interrupt there may surface as another exception: Python wraps one raised inside
        # a class body's __set_name__ in a RuntimeError (seen at 0.15 s into `report`)
        if not isinstance(e, KeyboardInterrupt) and interrupts.received() is None:
            raise
        try:
            print("interrupted", file=sys.stderr)
        except OSError:
            pass
        code = interrupts.exit_code(e)
    interrupts.quiet()
    sys.exit(code)
