"""``open_trace``: one trace in a trace processor, with the ``graph_ann`` SQL package.

    with open_trace("run.pftrace") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT * FROM ...").df()

The engine is picked by :mod:`.engine.resolve` (``"auto"``: a local native shell, else the
portable WebAssembly engine, else the ``perfetto`` download).
"""
from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, FrozenSet, Iterator, List, Optional, Tuple, Union

from .engine import Choice, Engine, EngineConfig, choose_engine, create_engine, start_engine

if TYPE_CHECKING:
    from perfetto.common.query_result_iterator import QueryResultIterator

__all__ = ["exact_frame", "FEED_CHUNK_BYTES", "open_fed", "open_trace", "PathArg", "QueryResult", "Session",
           "sql_arg_names"]

PathArg = Union[str, "os.PathLike[str]"]


def exact_frame(cells):
    """``cells.infer_objects()`` for a DataFrame of a query's cells (object columns), except
    that a column of integers with NULLs becomes nullable ``Int64``: inferred, it would be
    float64, which rounds integers above 2**53 (ids, absolute ns) and prints ids as ``12.0``."""
    import pandas as pd

    frame = cells.infer_objects()
    for i, dtype in enumerate(frame.dtypes):
        if dtype != "float64" or cells.dtypes.iloc[i] != object:
            continue
        values = cells.iloc[:, i].tolist()
        present = [v for v in values if v is not None]
        if len(present) < len(values) and present and all(type(v) is int for v in present):
            frame.isetitem(i, pd.array(values, dtype="Int64"))
    return frame


class QueryResult:
    """The rows of one query, kept in memory: iterate rows, or take a DataFrame.

    Rows are perfetto's ``Row`` objects (columns as attributes), as
    ``TraceProcessor.query`` gives them; :meth:`df` is ``as_pandas_dataframe()`` with
    column dtypes inferred (int64 / float64 / object; see :func:`exact_frame`).
    """

    def __init__(self, it: QueryResultIterator):
        self._it = it
        self.columns: List[str] = list(it.column_names)
        self._rows: Optional[List] = None

    @property
    def rows(self) -> List:
        """The rows as perfetto ``Row`` objects."""
        if self._rows is None:
            self._rows = list(self._it)
        return self._rows

    def df(self):
        """The rows as a new pandas DataFrame (integers kept exact: :func:`exact_frame`)."""
        return exact_frame(self._it.as_pandas_dataframe())

    def tuples(self) -> List[Tuple]:
        """The rows as plain tuples, in column order."""
        return [tuple(getattr(r, n) for n in self.columns) for r in self.rows]

    def __iter__(self) -> Iterator:
        return iter(self.rows)

    def __len__(self) -> int:
        return self._it.row_count

    def __repr__(self) -> str:
        return f"QueryResult({len(self)} rows x {len(self.columns)} columns)"


class Session:
    """A loaded trace: run SQL with :meth:`query`; close (or use ``with``) to stop the engine."""

    def __init__(self, path: Path, engine: Engine):
        self.path = path
        self.engine = engine

    @property
    def engine_kind(self) -> str:
        """``"native"`` or ``"portable"``."""
        return self.engine.kind

    @property
    def version(self) -> str:
        """The trace processor's version string."""
        return self.engine.version

    def query(self, sql: str, timeout_s: Optional[float] = None) -> QueryResult:
        """Run ``sql`` (several statements allowed; the last one's rows are returned).

        Raises :class:`~perfetto_graph_ann.errors.QueryError` with the engine's error text,
        :class:`~perfetto_graph_ann.errors.QueryTimeoutError` past ``timeout_s`` (the
        engine is then stopped), :class:`~perfetto_graph_ann.errors.EngineError` if the
        engine died.
        """
        return QueryResult(self.engine.query(sql, timeout_s))

    def query_df(self, sql: str, timeout_s: Optional[float] = None):
        """``query(sql).df()``."""
        return self.query(sql, timeout_s).df()

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self.engine.alive else "closed"
        return f"<Session {self.path} {self.engine.kind} {state}>"


def open_trace(path: PathArg, engine: str = "auto", config: Optional[EngineConfig] = None) -> Session:
    """Load the trace at ``path`` into a trace processor with our SQL packages registered.

    Args:
        path: a Perfetto trace (ours or any), or a torch.profiler / Chrome JSON trace.
        engine: ``"auto"``, ``"native"`` or ``"portable"`` (overrides ``config.engine``
            unless it is ``"auto"`` and a config is given).
        config: the engine's settings (:class:`EngineConfig`).

    Returns:
        A :class:`Session` (``session.query(sql).df()``; a context manager that stops the
        engine).

    Raises:
        InputError: a missing or unreadable trace.
        IncompleteTraceError: a trace that did not load whole (``config.check_complete``).
        EngineNotFoundError: no engine is usable (listing what was tried and how to fix each).
    """
    config = (config or EngineConfig()).with_engine(engine)
    return Session(Path(path), start_engine(path, config))


@contextlib.contextmanager
def open_fed(feed: Callable[[IO[bytes]], Any], source: Optional[PathArg] = None, engine: str = "auto",
             config: Optional[EngineConfig] = None) -> Iterator[Session]:
    """A session on the trace ``feed`` writes: ``feed(sink)`` writes a Perfetto trace's bytes
    to the binary stream ``sink`` (e.g. a converter; see ``pipeline.query.open_converted``).

    The engine starts in the background while ``feed`` runs (:class:`_Starting`: its
    start-up overlaps whatever ``feed`` does before its first byte; a missing engine is said
    before ``feed`` runs). The bytes go to the engine as they are written (:class:`_Feeder`):
    the engine parses while Python still writes, instead of a file written first and loaded
    after. A failing ``feed`` stops the engine and its error is raised.

    The session and its errors are named after ``source`` (the file the user gave), not
    the temporary placeholder file the engine is started on."""
    from ..errors import EngineNotFoundError, GraphAnnError

    cfg = (config or EngineConfig()).with_engine(engine)
    with tempfile.TemporaryDirectory(prefix="pga-session-") as tmp:
        # the engine is started on a file name (an empty placeholder); the bytes come from the feeder
        fd, path = tempfile.mkstemp(prefix="trace-", suffix=".pftrace", dir=tmp)
        os.close(fd)
        source = os.fspath(source) if source else None
        try:
            try:
                choice = choose_engine(cfg)
            except EngineNotFoundError as e:  # named after the placeholder, as create_engine does; renamed below
                raise EngineNotFoundError(f"{path}: {e}") from None
            starting = _Starting(path, cfg, choice)
            try:
                with _Feeder(starting, FEED_CHUNK_BYTES) as feeder:
                    feed(feeder)
                eng = starting.result()
            except BaseException:
                starting.close()
                raise
            with Session(Path(path), eng) as session:
                if source:
                    session.path = Path(source)
                yield session
        except GraphAnnError as e:
            if source:
                _rename_file_in_error(e, path, source)
            raise


#: Bytes per piece sent to the engine while converting: small enough that the engine starts
#: parsing early, large enough that the per-call cost does not count.
FEED_CHUNK_BYTES = 2 << 20


class _Starting:
    """An engine being started (and its SQL packages registered) in a background thread.

    :meth:`result` waits for it and returns it, or raises why it could not start;
    :meth:`close` waits and stops it (idempotent). :meth:`started` wraps an engine that
    is already running.
    """

    def __init__(self, path: Optional[PathArg], config: Optional[EngineConfig], choice: Optional[Choice]) -> None:
        self._engine: Optional[Engine] = None
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if path is not None:
            self._thread = threading.Thread(target=self._start, args=(path, config, choice),
                                            name="pga-engine-start", daemon=True)
            self._thread.start()

    @classmethod
    def started(cls, engine: Engine) -> "_Starting":
        ready = cls(None, None, None)
        ready._engine = engine
        return ready

    def _start(self, path: PathArg, config: EngineConfig, choice: Choice) -> None:
        try:
            eng = create_engine(path, config, choice)
            try:
                if eng.kind == "portable":
                    eng.register_sql_packages()
            except BaseException:
                eng.close()
                raise
            self._engine = eng
        except BaseException as e:  # handed to whoever waits for the engine
            self._error = e

    def result(self) -> Engine:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._engine is not None
        return self._engine

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self._engine is not None:
            self._engine.close()


class _Feeder:
    """A binary sink whose bytes an engine loads in a background thread, piece by piece.

    ``write`` collects the writer's batches into pieces of ``chunk_bytes`` and queues them;
    the thread, started by the first write, waits for the engine (it may still be starting,
    :class:`_Starting`) and hands them to :meth:`Engine.load_chunks` (which waits on the
    engine's socket, so the GIL is free for the writer). ``close`` sends the
    rest and ends the input: the engine finalizes while the writer frees what it no longer
    needs. Leaving the ``with`` block closes, waits for the load to finish and raises its
    error, if any. A failed load stops taking pieces, so the writer never blocks on a full
    queue; a failed write stops the engine (a partial trace is not worth finalizing).
    """

    def __init__(self, engine: "Engine | _Starting", chunk_bytes: int) -> None:
        self._engine = engine if isinstance(engine, _Starting) else _Starting.started(engine)
        self.chunk_bytes = chunk_bytes
        self._parts: List[bytes] = []
        self._size = 0
        self._queue: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=4)
        self._error: Optional[BaseException] = None
        self._ended = False  # the end marker was taken from the queue
        self._closed = False  # the end marker was queued
        self._thread: Optional[threading.Thread] = None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._load, name="pga-feed", daemon=True)
            self._thread.start()

    def _pieces(self) -> Iterator[bytes]:
        while True:
            piece = self._queue.get()
            if piece is None:
                self._ended = True
                return
            yield piece

    def _load(self) -> None:
        try:
            self._engine.result().load_chunks(self._pieces())
        except BaseException as e:  # handed to the writer's thread
            self._error = e
            while not self._ended:  # drain, so the writer is never blocked
                self._ended = self._queue.get() is None

    def write(self, data: bytes) -> int:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ValueError("write to a closed feed")
        self._start()
        self._parts.append(data)
        self._size += len(data)
        if self._size >= self.chunk_bytes:
            buf = b"".join(self._parts)
            self._parts = []
            self._size = 0
            # one write may be a whole trace (diff's merged runs): the engine takes at most
            # 64 MiB a call, so a large buffer goes in pieces of chunk_bytes
            step = self.chunk_bytes
            if len(buf) < 2 * step:
                self._queue.put(buf)
            else:
                view = memoryview(buf)
                for i in range(0, len(buf), step):
                    self._queue.put(bytes(view[i:i + step]))
        return len(data)

    def close(self) -> None:
        """Send the rest and end the input (idempotent); the load goes on in the thread."""
        if self._closed:
            return
        self._start()
        if self._parts:
            self._queue.put(b"".join(self._parts))
        self._parts = []
        self._closed = True
        self._queue.put(None)

    def __enter__(self) -> "_Feeder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._engine.close()
            if self._thread is None:  # nothing was sent: no load to wait for
                return
            self._parts = []
        self.close()
        assert self._thread is not None
        self._thread.join()
        if exc_type is None and self._error is not None:
            raise self._error


#: An arg key in SQL text: 'debug.<name>' (our traces) or 'args.<name>' (Chrome JSON).
_SQL_ARG_KEY = re.compile(r"'(?:debug|args)\.([^'\[]+)'")


def sql_arg_names(package_dirs: List[Path]) -> FrozenSet[str]:
    """Every arg name the SQL modules under ``package_dirs`` read (``EXTRACT_ARG(..., 'debug.X')``,
    ``key = 'args.X'``): the args a trace needs for those modules' tables."""
    names = set()
    for folder in package_dirs:
        for sql in sorted(Path(folder).rglob("*.sql")):
            names.update(_SQL_ARG_KEY.findall(sql.read_text(encoding="utf-8")))
    return frozenset(names)


def _rename_file_in_error(error: Exception, old: str, new: str) -> None:
    """Make ``error`` (raised about file ``old``) name ``new`` instead, in place."""
    from ..errors import PathError

    error.args = tuple(a.replace(old, new) if isinstance(a, str) else a for a in error.args)
    if isinstance(error, PathError) and error.path == old:
        error.path = new
