"""Children that tests interrupt get SIGINT as from an interactive shell, however pytest started.

A process started with SIGINT ignored (a background job of a non-interactive shell: ``pytest &``
in a script, some CI runners) passes the ignore on to every child it starts, and Python keeps it
(no ``KeyboardInterrupt``): a test that sends SIGINT to a child then fails on unchanged code.
(``timeout CMD`` hides this: it catches SIGINT itself, so its child starts with the default.)
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


@contextlib.contextmanager
def sigint_as_in_a_shell() -> Iterator[None]:
    """Children started inside the block start with SIGINT at its default (so a Python child
    turns it into ``KeyboardInterrupt``), even where this process ignores SIGINT: for the
    block, this process takes Python's own handler, which a child does not inherit."""
    if (signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
