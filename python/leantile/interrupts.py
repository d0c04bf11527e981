"""Ctrl-C and SIGTERM at any moment of a command: the line "interrupted" and exit status 130
(SIGINT) or 143 (SIGTERM), never a traceback or an "internal error".

`leantile.entry.main` installs the handlers before the command's modules are imported (an
interrupt in the first ~0.6 s, while pydantic or numpy load, printed a traceback), and
`leantile.cli.main` asks `received()` where an interrupt surfaced as another exception (a
process pool broken by its children's SIGINT, an import that wrapped it). SIGTERM raises
`Terminated`, a KeyboardInterrupt, so that every cleanup a Ctrl-C runs (stages removed, the
search's best points saved) runs for it too. This module imports nothing heavy."""
from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading

EXIT_SIGINT, EXIT_SIGTERM = 130, 143
_received: int | None = None  # the signal that interrupted this process, once one has
_pending: int | None = None  # a signal received inside an import and not raised yet
_delivered = False  # an interrupt has been raised in this command


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, a job scheduler), handled as Ctrl-C is."""


def _importing(frame) -> bool:
    """Whether the interrupted frame runs inside an import (the import machinery on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _raise(signum):
    global _delivered
    _delivered = True
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _on_signal(signum, frame):
    global _received, _pending
    if _delivered and _pending is None:
        # already raised once (the command is ending interrupted): a second signal, or the
        # timer's re-delivery of one that raise_pending raised meanwhile, raised again inside
        # the exit's own handler printed a traceback (test_interrupts saw `validate` print
        # "interrupted" then a Traceback of Terminated)
        return
    _received = signum
    if _importing(frame):
        # Raised inside an import, the interrupt can surface in Python code a C++ extension
        # calls while it initialises (torch's, through pybind11), which then aborts the process
        # ("terminate called after throwing ... KeyboardInterrupt", exit -6; make test saw it once,
        # `report` interrupted 0.9 s in, in `import torch`). Delivered again a moment later
        # instead, until the import is done: an import ends in seconds. A command that ends
        # first still ends interrupted (handling(), pending()).
        _pending = signum
        t = threading.Timer(0.05, _thread.interrupt_main, args=(signum,))
        t.daemon = True
        t.start()
        return
    _pending = None
    _raise(signum)


def _unraisable(info) -> None:
    """An interrupt raised where Python cannot propagate it (a __del__, a weakref callback: the
    handler runs in whatever frame is executing) would print "Exception ignored ... Traceback"
    and be lost, the command running on: it is delivered again to the main thread instead."""
    if isinstance(info.exc_value, KeyboardInterrupt) or (info.exc_type and issubclass(info.exc_type, KeyboardInterrupt)):
        # from another thread, a moment later: the main thread takes it at its next check once
        # out of this hook (delivered now, in the main thread, it would be raised inside the hook
        # and lost again); the raise was lost, so it counts as not delivered
        global _delivered
        _delivered = False
        t = threading.Timer(0.05, _thread.interrupt_main, args=(_received or signal.SIGINT,))
        t.daemon = True
        t.start()
        return
    _previous_unraisable(info)


_previous_unraisable = sys.unraisablehook


def install() -> None:
    """Route SIGINT and SIGTERM through _on_signal (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    sys.unraisablehook = _unraisable


def quiet() -> None:
    """The command is over: a late signal ends nothing half-done, so it raises nothing either
    (raised during the interpreter's shutdown it printed a traceback)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def handling():
    """install() for the block (a command run by leantile.cli.main), the caller's handlers and
    a clear record put back after it: a test or script that runs several commands in one
    process keeps its own handling, and one command's interrupt is not the next one's."""
    global _received, _delivered
    _received, _delivered = None, False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    old_hook = sys.unraisablehook
    install()
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h if h is not None else signal.SIG_DFL)
        sys.unraisablehook = old_hook
    raise_pending()


def received() -> int | None:
    return _received


def raise_pending() -> None:
    """Raise the interrupt received inside an import and not delivered yet (the command ended
    first): it still ends the command as interrupted."""
    global _pending
    if _pending is not None:
        signum, _pending = _pending, None
        _raise(signum)


def exit_code(e: BaseException | None = None) -> int:
    """143 for SIGTERM (or a Terminated), else 130."""
    return EXIT_SIGTERM if isinstance(e, Terminated) or _received == signal.SIGTERM else EXIT_SIGINT
