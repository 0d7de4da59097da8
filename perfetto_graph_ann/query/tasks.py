"""One trace, one engine, some SQL: the unit of work ``query_many`` and ``fleet_report``
hand to a worker (a local thread, a ``concurrent.futures`` executor, or a Ray task).

:func:`run_trace_task` runs on the worker. It makes the trace (and its sidecars) readable
there: by path (shared storage), or from bytes the driver sent along (Ray's object store)
when the worker cannot see the path; converts a Chrome JSON trace to ``.pftrace`` when
asked or when it has annotations (the join needs them); starts its own engine; runs each
named query; stops the engine and removes everything it wrote. It never raises: a failure
comes back as a :class:`TaskFailure` that names the trace, because exceptions with
custom constructors (ours) do not survive pickling between processes intact.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ..errors import GraphAnnError, InputError
from ..formats import is_json_name
from .engine.config import EngineConfig

__all__ = ["Converter", "FileInput", "NotVisible", "Outcome", "raise_failure", "run_trace_task", "TaskFailure",
           "TaskResult", "to_arrow", "to_frame", "TraceTask"]

#: ``converter(src, sidecars, graph_lanes, out) -> info``: see :class:`TraceTask`.
Converter = Callable[[str, List[str], str, str], Dict[str, Any]]


@dataclasses.dataclass
class FileInput:
    """A file the worker must read: its path on the driver, its size there, and (when the
    driver shipped it) its bytes: ``bytes``, or a Ray ``ObjectRef`` resolved by Ray."""

    path: str
    size: int
    data: Any = None

    @classmethod
    def of(cls, path: "str | os.PathLike[str]") -> "FileInput":
        path = os.fspath(path)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1  # missing on the driver: the worker's open() reports it, naming the path
        return cls(path, size)

    def visible(self) -> bool:
        """Whether this machine sees the driver's file at the same path (same size)."""
        if self.data is not None or self.size < 0:  # missing on the driver too: the engine says so
            return True
        try:
            return os.path.getsize(self.path) == self.size
        except OSError:
            return False


@dataclasses.dataclass
class TraceTask:
    """Everything a worker needs for one trace.

    ``queries``: name -> SQL (several statements allowed; the last one's rows are kept).
    ``convert``: turn a Chrome JSON trace into ``.pftrace`` first even without annotations
    (a trace with annotations is always converted: the join runs in the converter).
    ``arrow``: return pyarrow Tables (when pyarrow is importable and the frame converts
    losslessly), else pandas DataFrames. ``converter``: what turns a JSON trace into
    ``.pftrace`` on the worker, ``converter(src, sidecars, graph_lanes, out)`` returning
    what it learnt (rank, base time, join counts); a module-level function (pickled by
    reference), given by the pipeline (``pipeline.query.convert_for_task``).
    """

    index: int
    trace: FileInput
    queries: Dict[str, str]
    config: EngineConfig
    annotations: Tuple[FileInput, ...] = ()
    convert: bool = False
    #: None: the lanes where a node is annotated, else the recorded streams (the converter's join decides)
    graph_lanes: Optional[str] = None
    arrow: bool = False
    converter: Optional[Converter] = None


@dataclasses.dataclass
class TaskResult:
    """The tables of one trace (name -> pyarrow Table or DataFrame) and what the worker
    learnt about the trace: ``rank`` (``distributedInfo.rank`` of a converted JSON trace),
    ``base_time_ns`` (its ``baseTimeNanoseconds``), ``host`` (where it ran)."""

    index: int
    tables: Dict[str, Any]
    info: Dict[str, Any]


@dataclasses.dataclass
class TaskFailure:
    """A task that failed: the error's class (module, name), its message (starting with
    the trace path) and, for errors that are not ours, the worker's traceback."""

    index: int
    path: str
    module: str
    name: str
    message: str
    problem: Optional[str] = None
    remote_traceback: Optional[str] = None


@dataclasses.dataclass
class NotVisible:
    """The worker cannot see these files at their driver paths: send their bytes instead."""

    index: int
    paths: List[str]


Outcome = Union[TaskResult, TaskFailure, NotVisible]


def run_trace_task(task: TraceTask, tracker: Any = None) -> Outcome:
    """Run ``task`` here; never raises (see the module docstring).

    ``tracker`` (local threads only) is told about the engine so that a failure elsewhere
    in the batch can stop it: an object with ``add(engine)`` / ``discard(engine)`` that
    raises ``concurrent.futures.CancelledError`` from ``add`` once the batch is cancelled.
    """
    missing = [f.path for f in (task.trace, *task.annotations) if not f.visible()]
    if missing:
        return NotVisible(task.index, missing)
    tmp = None
    try:
        shipped = any(f.data is not None for f in (task.trace, *task.annotations))
        if shipped or _needs_convert(task):
            tmp = tempfile.mkdtemp(prefix="pga-task-")
        return _run(task, tmp, tracker)
    except BaseException as e:  # noqa: BLE001 - everything becomes a named failure
        import concurrent.futures as cf

        if isinstance(e, (KeyboardInterrupt, SystemExit, cf.CancelledError)):
            raise
        return _failure(task, e, tmp)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _needs_convert(task: TraceTask) -> bool:
    return is_json_name(task.trace.path) and (task.convert or bool(task.annotations))


def _materialize(f: FileInput, tmp: Optional[str], sub: str) -> str:
    """A local path holding ``f``: its own path, or its shipped bytes written under ``tmp``
    with the same file name (formats are told apart by name)."""
    if f.data is None:
        return f.path
    folder = os.path.join(tmp, sub)  # type: ignore[arg-type]
    os.makedirs(folder, exist_ok=True)
    local = os.path.join(folder, os.path.basename(f.path) or "trace")
    data = f.data
    if not isinstance(data, (bytes, bytearray, memoryview)):  # a Ray ObjectRef passed nested
        import ray

        data = ray.get(data)
    from ..util.atomic import atomic_write_bytes

    atomic_write_bytes(local, bytes(data), compress=False)
    return local


def _run(task: TraceTask, tmp: Optional[str], tracker: Any) -> TaskResult:
    from .engine import create_engine, prepare_engine
    from .session import exact_frame

    renames: List[Tuple[str, str]] = []
    trace_path = _materialize(task.trace, tmp, "trace")
    if trace_path != task.trace.path:
        renames.append((trace_path, task.trace.path))
    sidecars = []
    for i, f in enumerate(task.annotations):
        local = _materialize(f, tmp, f"annotations{i}")
        if local != f.path:
            renames.append((local, f.path))
        sidecars.append(local)
    info: Dict[str, Any] = {"host": _hostname()}
    try:
        load_path = trace_path
        if _needs_convert(task):
            if task.converter is None:
                raise InputError(task.trace.path, "a JSON trace needs converting here (it has annotations, or convert "
                                                  "was asked), and this task has no converter: run it through "
                                                  "perfetto_graph_ann.query_many / fleet_report")
            load_path = os.path.join(tmp, "trace.pftrace")  # type: ignore[arg-type]
            info.update(task.converter(trace_path, sidecars, task.graph_lanes, load_path))
            renames.append((load_path, task.trace.path))
        choice = _cached_choice(task.config)
        engine = create_engine(load_path, task.config, choice=choice)
        try:
            if tracker is not None:
                tracker.add(engine)
            prepare_engine(engine)
            info["engine"] = engine.kind
            tables = {}
            for name, sql in task.queries.items():
                frame = exact_frame(engine.query(sql).as_pandas_dataframe())
                tables[name] = to_arrow(frame) if task.arrow else frame
        finally:
            engine.close()
            if tracker is not None:
                tracker.discard(engine)
    except GraphAnnError as e:
        from .session import _rename_file_in_error

        for old, new in renames:
            _rename_file_in_error(e, old, new)
        raise
    return TaskResult(task.index, tables, info)


_CHOICES: Dict[Tuple, Any] = {}


def _cached_choice(config: EngineConfig):
    """The engine ``config`` resolves to on this machine, resolved once per process (a
    worker runs many tasks; resolving runs ``node --version`` and looks through PATH)."""
    from .engine.resolve import choose_engine

    key = (config.engine, str(config.shell_path), str(config.node_path), str(config.ui_dir), config.allow_download)
    choice = _CHOICES.get(key)
    if choice is None:
        from ..errors import EngineNotFoundError

        try:
            choice = choose_engine(config)
        except EngineNotFoundError as e:
            raise EngineNotFoundError(f"on {_hostname()}: {e}") from None
        _CHOICES[key] = choice
    return choice


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _failure(task: TraceTask, e: BaseException, tmp: Optional[str]) -> TaskFailure:
    path = task.trace.path
    message = str(e)
    if tmp:
        message = message.replace(os.path.join(tmp, "trace.pftrace"), path)
    if not message.startswith(path):
        message = f"{path}: {message}"
    ours = isinstance(e, GraphAnnError)
    return TaskFailure(
        task.index, path, type(e).__module__, type(e).__name__, message,
        problem=getattr(e, "problem", None) if ours else None,
        remote_traceback=None if ours else "".join(traceback.format_exception(type(e), e, e.__traceback__)),
    )


def raise_failure(f: TaskFailure) -> None:
    """Raise ``f`` on the driver: our error classes again (same class, same message, the
    trace's path); anything else as a ``RuntimeError`` naming the trace, with the worker's
    traceback."""
    import importlib

    from ..errors import PathError

    cls: Any = None
    try:
        cls = getattr(importlib.import_module(f.module), f.name)
    except (ImportError, AttributeError):
        pass
    if isinstance(cls, type) and issubclass(cls, GraphAnnError):
        err = cls.__new__(cls)
        Exception.__init__(err, f.message)
        if issubclass(cls, PathError):
            err.path = f.path
            err.problem = f.problem or f.message[len(f.path) + 2:]
        raise err
    raise RuntimeError(f"{f.message} ({f.module}.{f.name} on the worker)\n{f.remote_traceback or ''}".rstrip())


# ---- Arrow transport -----------------------------------------------------------------------------
def to_arrow(frame):
    """``frame`` as a pyarrow Table when that round-trips exactly (pandas metadata keeps
    the dtypes, e.g. nullable ``Int64``), else ``frame`` itself: SQLite columns may mix
    types (an argument that is an int on one row and a string on another), which Arrow
    cannot hold in one column."""
    try:
        import pyarrow as pa
    except ImportError:
        return frame
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        return frame


def to_frame(table):
    """A DataFrame from what :func:`to_arrow` returned."""
    if hasattr(table, "to_pandas"):
        return table.to_pandas()
    return table
