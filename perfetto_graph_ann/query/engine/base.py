"""The one interface both engines implement: load a trace, run SQL, stop cleanly.

An engine owns one trace processor process holding one trace. Every failure becomes a
:class:`~perfetto_graph_ann.errors.GraphAnnError` whose message starts with the trace path:
a SQL error (:class:`QueryError`, engine still usable), a timeout
(:class:`QueryTimeoutError`, engine stopped), the process dying (:class:`EngineError`), or a
trace the engine cannot read (:class:`InputError`).
"""
from __future__ import annotations

import abc
import contextlib
import functools
import http.client
import os
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable, Iterator, Optional

from google.protobuf.message import DecodeError
from perfetto.common.exceptions import PerfettoException

from ...errors import EMPTY_FILE, EngineError, InputError, QueryError, QueryTimeoutError
from .sql_errors import sql_error_line
from .config import EngineConfig, check_seconds
from .process import describe_exit

if TYPE_CHECKING:  # imported on first use: perfetto.trace_processor imports pandas (~0.4 s)
    from perfetto.common.query_result_iterator import QueryResultIterator
    from perfetto.trace_processor.protos import ProtoFactory

__all__ = ["Engine", "protos", "read_tail"]

# Errors that mean the engine went away or the connection to it broke (ValueError /
# DecodeError: a reply stream that is no longer well-formed).
_TRANSPORT_ERRORS = (OSError, EOFError, http.client.HTTPException, PerfettoException, ValueError, DecodeError)


@functools.lru_cache(maxsize=1)
def protos() -> ProtoFactory:
    """perfetto's message classes for the trace processor protocol (built once)."""
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    return ProtoFactory(PlatformDelegate())


class Engine(abc.ABC):
    """A running trace processor with one trace loaded."""

    #: "native" or "portable".
    kind: str = ""

    def __init__(self, trace_path: Path, config: EngineConfig):
        self.trace_path = Path(trace_path)
        self.config = config
        self.version = ""
        self._backend = None
        self._lock = threading.Lock()
        self._stopped_because: Optional[str] = None

    # -- what each engine provides -------------------------------------------------------
    @property
    @abc.abstractmethod
    def pid(self) -> Optional[int]:
        """The engine process id (``None`` once stopped)."""

    @abc.abstractmethod
    def _returncode(self) -> Optional[int]:
        """The process exit status, or ``None`` while it runs."""

    @abc.abstractmethod
    def _stderr_tail(self) -> str:
        """The last lines the engine wrote to stderr (for error messages)."""

    @abc.abstractmethod
    def _set_deadline(self, deadline: Optional[float]) -> None:
        """Make reads from the engine fail with TimeoutError after ``deadline`` (monotonic)."""

    @abc.abstractmethod
    def _kill(self) -> None:
        """Kill the engine process tree and release its resources (idempotent)."""

    # -- shared behaviour ------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._stopped_because is None and self._returncode() is None

    def close(self) -> None:
        """Stop the engine; safe to call more than once."""
        if self._stopped_because is None:
            self._stopped_because = "it was closed"
        self._kill()

    def query(self, sql: str, timeout_s: Optional[float] = None) -> QueryResultIterator:
        """Run ``sql`` (one or more statements; the last one's rows are returned)."""
        if timeout_s is None:
            timeout_s = self.config.query_timeout_s
        check_seconds("timeout_s", timeout_s)
        with self._lock, self._guard("query", timeout_s, sql):
            result = self._backend.execute_query(sql)
        if result.error:
            raise QueryError(f"{self.trace_path}: SQL error: {sql_error_line(result.error, sql)}")
        from perfetto.common.query_result_iterator import QueryResultIterator

        return QueryResultIterator(result.column_names, result.batch)

    def load(self) -> None:
        """Send the trace file in chunks, then finalize it; with ``config.check_complete``
        (the default), refuse a trace that did not load whole (:mod:`.complete`)."""
        from .complete import TraceScan, check_loaded, check_scan

        scan = TraceScan() if self.config.check_complete else None
        with _open_trace(self.trace_path) as f:
            chunks = iter(lambda: f.read(self.config.chunk_bytes), b"")
            self.load_chunks(scan.watch(chunks) if scan is not None else chunks)
        if scan is not None:
            check_loaded(self, check_scan(self.trace_path, scan))

    def load_chunks(self, chunks: Iterable[bytes]) -> None:
        """Send ``chunks`` (the trace's bytes, in order, as they become available) to the
        engine, then finalize the trace; errors name :attr:`trace_path`."""
        path = self.trace_path
        with self._lock, self._guard("trace load", self.config.load_timeout_s):
            sent = 0
            for chunk in chunks:
                if not chunk:
                    continue
                sent += len(chunk)
                result = self._backend.parse(chunk)
                if result.error:
                    raise InputError(path, f"the trace processor cannot read this trace: {result.error.strip()}")
            if sent == 0:
                raise InputError(path, EMPTY_FILE)
            result = self._backend.notify_eof()
            error = getattr(result, "error", "")
            if error:
                raise InputError(path, f"the trace processor cannot read this trace: {error.strip()}")

    @contextlib.contextmanager
    def _guard(self, what: str, timeout_s: Optional[float], sql: Optional[str] = None) -> Iterator[None]:
        """Turn timeouts, engine death and interrupts into clear errors; stop on any of them."""
        if self._stopped_because is not None:
            raise EngineError(
                f"{self.trace_path}: the {self.kind} trace processor is stopped ({self._stopped_because}); "
                "open the trace again"
            )
        deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        self._set_deadline(deadline)
        try:
            yield
        except TimeoutError as e:  # socket.timeout is TimeoutError since 3.10
            self._stop(f"the {what} ran past its {timeout_s:g} s timeout")
            raise QueryTimeoutError(
                f"{self.trace_path}: the {what} ran past its {timeout_s:g} s timeout; the {self.kind} "
                f"trace processor was stopped" + (f"\nSQL: {_clip(sql)}" if sql else "")
            ) from e
        except KeyboardInterrupt:
            self._stop("interrupted")
            raise
        except _TRANSPORT_ERRORS as e:
            self._wait_exit()
            status = describe_exit(self._returncode())
            tail = self._stderr_tail()
            self._stop(f"it died during a {what}")
            raise EngineError(
                f"{self.trace_path}: the {self.kind} trace processor died during the {what} ({status}): "
                f"{e}" + (f"\nengine stderr:\n{tail}" if tail else "")
            ) from e
        finally:
            if self._stopped_because is None:
                self._set_deadline(None)

    def _wait_exit(self, seconds: float = 2.0) -> None:
        end = time.monotonic() + seconds
        while self._returncode() is None and time.monotonic() < end:
            time.sleep(0.02)

    def _stop(self, why: str) -> None:
        self._stopped_because = why
        self._kill()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _clip(sql: Optional[str], limit: int = 300) -> str:
    sql = " ".join((sql or "").split())
    return sql if len(sql) <= limit else sql[: limit - 3] + "..."


@contextlib.contextmanager
def _open_trace(path: Path) -> Iterator[IO[bytes]]:
    try:
        f = open(path, "rb")
    except FileNotFoundError as e:
        raise InputError(path, "no such file") from e
    except IsADirectoryError as e:
        raise InputError(path, "is a directory, not a trace file") from e
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from e
    with f:
        yield f


def read_tail(f: Optional[IO[bytes]], limit: int = 4000) -> str:
    """The last ``limit`` bytes of a temporary stderr file, as text (without emscripten noise)."""
    if f is None or f.closed:
        return ""
    try:
        f.flush()
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        text = f.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip() and "unsupported syscall" not in ln]
    return "\n".join(lines[-30:])
