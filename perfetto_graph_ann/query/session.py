"""``open_trace``: one trace in a trace processor, with the ``graph_ann`` SQL package.

    with open_trace("run.pftrace") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT * FROM ...").df()

The engine is picked by :mod:`.engine.resolve` (``"auto"``: a local native shell, else the
portable WebAssembly engine, else the ``perfetto`` download).
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import FrozenSet, Iterator, List, Optional, Tuple, Union

from perfetto.common.query_result_iterator import QueryResultIterator

from .engine import Engine, EngineConfig, start_engine

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

    ``engine``: ``"auto"``, ``"native"`` or ``"portable"`` (overrides ``config.engine``
    unless it is ``"auto"`` and a config is given). Raises
    :class:`~perfetto_graph_ann.errors.InputError` for a missing or unreadable trace and
    :class:`~perfetto_graph_ann.errors.EngineNotFoundError` (listing what was tried and
    how to fix each) when no engine is usable.
    """
    config = (config or EngineConfig()).with_engine(engine)
    return Session(Path(path), start_engine(path, config))


@contextlib.contextmanager
def open_converted(trace, layout=None, engine: str = "auto",
                   config: Optional[EngineConfig] = None, sql_args_only: bool = False) -> Iterator[Session]:
    """A session on ``trace`` (a read :class:`~perfetto_graph_ann.read.model.KinetoTrace`)
    converted with ``layout`` to a temporary .pftrace, removed when the session closes.

    ``sql_args_only``: write only the args the registered SQL packages read
    (:func:`sql_arg_names`), for a session that only queries their tables (``report``,
    ``lanes``): a smaller trace that converts and loads faster, same tables.

    The session and its errors are named after ``trace.path`` (the file the user gave), not
    the temporary file."""
    from ..errors import GraphAnnError
    from ..write.convert import ConvertConfig, convert

    cfg = (config or EngineConfig()).with_engine(engine)
    convert_config = ConvertConfig(keep_args=sql_arg_names(cfg.package_dirs())) if sql_args_only else ConvertConfig()
    with tempfile.TemporaryDirectory(prefix="pga-session-") as tmp:
        path = os.path.join(tmp, "trace.pftrace")
        convert(trace, path, convert_config, layout=layout)
        source = os.fspath(trace.path) if trace.path else None
        try:
            with open_trace(path, engine=engine, config=config) as session:
                if source:
                    session.path = Path(source)
                yield session
        except GraphAnnError as e:
            if source:
                _rename_file_in_error(e, path, source)
            raise


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
