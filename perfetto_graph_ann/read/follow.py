"""A trace read while its writer still writes it (issue 33: export at torch's pace).

torch's ``export_chrome_trace`` holds the interpreter lock while Kineto writes the JSON (to
``<path>.tmp``, renamed to ``<path>`` when whole, on torch 2.13 here), so nothing of the
calling process can run meanwhile; another process can read the file as it grows. A
:class:`Followed` is that file as the first pass's reader sees it: ``read(n)`` gives at least
``min(n, SOON)`` bytes once they are written (fewer only at the end; a reader asking for large
blocks gets what is written as it comes, so little is left to read when the writer is done),
and the end comes only when the writer has said it finished (``finished``: the writing
process's word, never a guess from a pause).

The file read must be the one finished: when the writer names the finished file, the file
descriptor read so far must be that file (same device and inode); if not (the writer wrote
elsewhere and copied), :class:`Moved` tells the reader to read the finished file from the
start. :class:`Abandoned`: the writer failed or went away; nothing is to be written.

While the reader waits for the writer, ``ahead`` (the conversion worker's
:class:`~..join.ahead.JoinAhead`) does the join's per-replay work on the events read so far, one
small step at a time, each followed by a look at the file.
"""
from __future__ import annotations

import io
import os
from typing import Any, Callable, List, Optional, Sequence

__all__ = ["Abandoned", "Followed", "Moved", "POLL_S", "SOON"]

#: How long a read at the written end waits for the writer's word before looking again (s).
POLL_S = 0.002
#: A read returns once it has this many bytes (or all it asked for, or the end): the streaming
#: reader asks for 1 MB blocks, and waiting for a whole one left up to 2 MB to decode after torch
#: finished (BENCHMARKS.md, session 40).
SOON = 256 << 10


class Abandoned(Exception):
    """The writer failed or is gone: the file will never be whole."""


class Moved(Exception):
    """The finished file is not the file read so far: read the finished one from its start."""


class Followed:
    """The file at the first of ``names`` to exist, read as it grows.

    ``finished(timeout)`` waits at most ``timeout`` seconds for the writer's word: None while
    it is still writing, the finished file's path once it is done; it raises
    :class:`Abandoned` when the writer failed. Only ``read``, ``seek`` and ``close`` are
    offered: what the streaming reader (``read.kineto._stream_trace``) uses.
    """

    def __init__(self, names: Sequence[str], finished: Callable[[float], Optional[str]], ahead: Any = None) -> None:
        self.names = tuple(names)
        self._finished = finished
        #: the events the reader has decoded so far (``read.kineto._stream_trace`` appends them)
        self.events: List[Any] = []
        #: work to do whenever all that is written has been read: ``ahead.idle(events)`` does one
        #: small step and says whether it did one (``join.ahead.JoinAhead``); ``ahead.made`` goes
        #: with the trace read (``read.scan.ScannedTrace.made``); ``ahead.release()`` at the end
        self.ahead = ahead
        self._file: Optional[io.FileIO] = None
        self.final: Optional[str] = None  #: the finished file's path, once the writer is done
        self.final_stat: Optional[os.stat_result] = None  #: its stat, taken as the writer finished

    def _open(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                self._file = open(name, "rb", buffering=0)
                return
            except FileNotFoundError:
                continue

    def _done(self, final: str) -> None:
        """The writer's word came: the file read so far must be ``final``."""
        st = os.stat(final)  # an OSError: the finished file is not there, which the reader reports
        self.final, self.final_stat = final, st  # the word comes once: kept for wait(), moved or not
        if self._file is None:
            self._open((final,))
        else:
            own = os.fstat(self._file.fileno())
            if (own.st_dev, own.st_ino) != (st.st_dev, st.st_ino):
                raise Moved(final)

    def wait(self) -> str:
        """Wait for the writer to finish (its word asked for only if it has not come yet); the
        finished file's path."""
        while self.final is None:
            final = self._finished(1.0)
            if final is not None:
                self.final, self.final_stat = final, os.stat(final)
        return self.final

    def read(self, n: int = -1) -> bytes:
        whole = n is None or n < 0  # the rest of the file, up to the writer's word
        if whole:
            n = 1 << 62
        parts = []
        want = n
        enough = 0 if whole else n - min(n, SOON)  # return once want is down to this
        while want > enough:
            if self._file is None and self.final is None:
                self._open(self.names)
            got = self._file.read(min(want, 1 << 24)) if self._file is not None else b""
            if got:
                parts.append(got)
                want -= len(got)
                continue
            if self.final is not None:
                break  # the finished file's end
            if self.ahead is not None and self.ahead.idle(self.events):
                continue  # a step done while the writer writes: look for more before waiting
            final = self._finished(POLL_S)
            if final is not None:
                self._done(final)
        return b"".join(parts)

    def hand_over(self) -> None:
        """The read is done: let go of the events read (the trace holds them, and the writer
        drops them once its plan is made) and of what the idle work kept to make its next steps
        (``ahead.release()``; what it made goes with the trace)."""
        self.events = []
        if self.ahead is not None:
            self.ahead.release()

    def seek(self, pos: int, whence: int = 0) -> int:
        if self._file is None:
            if (pos, whence) != (0, 0):
                raise OSError("seek in a file not written yet")
            return 0
        return self._file.seek(pos, whence)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "Followed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
