"""Progress of the CLI's long phases: one tqdm line on stderr saying what runs and for how long.

Reading a large trace, the join, writing, loading into the trace processor and each SQL
module can each take seconds on a 1M-event trace, and most of them are single calls that
report nothing while they run. :class:`Progress` shows the current phase's name and the
time elapsed (refreshed by a small thread, so the clock moves while a phase blocks), only
when stderr is a terminal: piped or redirected output stays clean, and ``--quiet`` (or
``PERFETTO_GRAPH_ANN_PROGRESS=0``) turns it off. The line is removed when the command ends.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO, ContextManager, Iterator, Optional

from .. import settings

__all__ = ["phase", "Progress", "REFRESH_S", "wanted"]

REFRESH_S = 0.5


def wanted(quiet: bool = False, stream: Optional[IO[str]] = None) -> bool:
    """Whether to show progress: not quiet, not switched off, and ``stream`` (stderr) a TTY."""
    stream = stream or sys.stderr
    if quiet or not settings.switch(settings.PROGRESS):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """Named phases on one status line (a no-op when disabled).

        progress = Progress(prefix="report", enabled=wanted(args.quiet))
        with progress.phase("reading run.json"):
            ...
        progress.close()
    """

    def __init__(self, prefix: str = "", enabled: bool = True, stream: Optional[IO[str]] = None):
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._bar = None
        self._started = 0.0
        self._desc = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _open(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=None, file=self.stream, leave=False, bar_format="{desc}", dynamic_ncols=True)
        self._thread = threading.Thread(target=self._tick, name="pga-progress", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._show()

    def _show(self) -> None:
        with self._lock:
            if self._bar is None or not self._desc:
                return
            elapsed = time.monotonic() - self._started
            head = f"{self.prefix} " if self.prefix else ""
            # time first: a long description is cut at the terminal's width, never the clock
            self._bar.set_description_str(f"{head}[{elapsed:3.0f} s] {self._desc}", refresh=True)

    @contextlib.contextmanager
    def phase(self, desc: str) -> Iterator[None]:
        """Show ``desc`` (with its elapsed time) while the block runs."""
        if not self.enabled:
            yield
            return
        if self._bar is None:
            self._open()
        with self._lock:
            self._desc, self._started = desc, time.monotonic()
        self._show()
        try:
            yield
        finally:
            with self._lock:
                self._desc = ""
                if self._bar is not None:
                    self._bar.clear()  # the line is empty again: output printed next starts clean

    def close(self) -> None:
        """Remove the status line (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



def phase(progress: Optional[Progress], desc: str) -> ContextManager[None]:
    """``progress.phase(desc)``, or a block that shows nothing when there is no ``progress``:
    the one way an optional progress line names a phase."""
    return progress.phase(desc) if progress is not None else contextlib.nullcontext()
