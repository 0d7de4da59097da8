"""Converted traces for the query stage: fed to a trace processor, or written for a worker.

``query/`` knows only Perfetto traces and a way to be fed bytes
(:func:`~perfetto_graph_ann.query.session.open_fed`, a task's ``converter``); reading a
torch.profiler JSON trace, joining it and converting it happens here.
"""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence

from ..query.engine.config import EngineConfig
from ..query.session import Session, open_fed, sql_arg_names
from ..read.model import KinetoTrace
from ..util.collector import paused_gc
from ..write.pftrace import ConvertConfig, write_pftrace_stream
from ..util.progress import phase
from .joined import read_and_join, trace_rank

if TYPE_CHECKING:
    from ..join.model import LaneLayout
    from ..util.progress import Progress

__all__ = ["convert_for_task", "open_converted", "open_json", "SORT_WINDOW_BYTES"]


@contextlib.contextmanager
def open_converted(trace: KinetoTrace, layout: "Optional[LaneLayout]" = None, engine: str = "auto",
                   config: Optional[EngineConfig] = None, sql_args_only: bool = False) -> Iterator[Session]:
    """A session on ``trace`` (a read :class:`~perfetto_graph_ann.read.model.KinetoTrace`)
    converted with ``layout``.

    The packets go to the engine as they are written: the engine parses while Python
    still converts, instead of a file written first and loaded after.

    ``sql_args_only``: write only the args the registered SQL packages read
    (:func:`~perfetto_graph_ann.query.session.sql_arg_names`), for a session that only
    queries their tables (``report``, ``lanes``): a smaller trace that converts and loads
    faster, same tables. Such a trace also gets sorting-window marks (see
    :func:`_convert_config`).

    The session and its errors are named after ``trace.path`` (the file the user gave), not
    the temporary placeholder file the engine is started on."""
    cfg = (config or EngineConfig()).with_engine(engine)
    convert_config = _convert_config(cfg, sql_args_only)

    def feed(sink) -> None:
        write_pftrace_stream(trace, sink, layout, convert_config)

    with open_fed(feed, trace.path, config=cfg) as session:
        yield session


#: Bytes between the sorting-window marks of a trace fed to an SQL-only session.
SORT_WINDOW_BYTES = 1 << 20


def _convert_config(config: EngineConfig, sql_args_only: bool) -> ConvertConfig:
    """How a trace for a session is written: in full, or (``sql_args_only``) with only the
    args the SQL packages read and a sorting-window mark every :data:`SORT_WINDOW_BYTES`, so
    the engine parses the stream as it comes instead of all of it once the input ends (the
    same tables; the marks only add ``metadata`` rows, which the packages do not read)."""
    if not sql_args_only:
        return ConvertConfig()
    return ConvertConfig(keep_args=sql_arg_names(config.package_dirs()), sort_window_bytes=SORT_WINDOW_BYTES)


@contextlib.contextmanager
def open_json(trace_path: str, annotations: Sequence[str] = (), graph_lanes: Optional[str] = None,
              force: bool = False, engine: str = "auto", config: Optional[EngineConfig] = None,
              sql_args_only: bool = False, progress: "Optional[Progress]" = None,
              on_join: "Optional[Callable[[LaneLayout], Any]]" = None) -> Iterator[Session]:
    """A session on the torch.profiler JSON trace at ``trace_path``, read and joined by
    :func:`~perfetto_graph_ann.pipeline.joined.read_and_join` and converted as
    :func:`open_converted` does.

    For a caller that needs only the session: the engine starts before the JSON is read, so
    its start-up overlaps the read, and the read trace is freed as soon as its packets are
    sent, while the engine still finalizes. The collector is paused throughout (reading
    and converting allocate millions of objects, see ``paused_gc``) and the trace is
    freed before it runs again.

    Args:
        trace_path: the torch.profiler JSON trace.
        annotations: annotation files to join it with (none: not joined).
        graph_lanes: ``"all"``, ``"none"`` or None (the lanes where a node is annotated).
        force: join annotations of another run.
        engine: as for :func:`~perfetto_graph_ann.query.session.open_trace`.
        config: the engine's settings.
        sql_args_only: write only the args the SQL packages read (see :func:`open_converted`).
        progress: names the phases; the last one lasts until the engine has loaded the trace.
        on_join: told the layout as soon as the join is done.

    Returns:
        A context manager giving the :class:`Session`, named after ``trace_path``.

    Raises:
        TraceFormatError: a malformed trace (naming it); the engine is stopped.
        LaneOptionError, AnnotationMismatchError: as :func:`~.joined.read_and_join`.
        EngineNotFoundError: no engine is usable.
    """
    cfg = (config or EngineConfig()).with_engine(engine)
    convert_config = _convert_config(cfg, sql_args_only)
    loading_phase = f"converting and loading {os.path.basename(trace_path)} into the trace processor"

    with contextlib.ExitStack() as loading:
        def feed(sink) -> None:
            with paused_gc():
                joined = read_and_join(trace_path, list(annotations), graph_lanes=graph_lanes, force=force,
                                       progress=progress, on_join=on_join)
                loading.enter_context(phase(progress, loading_phase))
                write_pftrace_stream(joined.trace, sink, joined.layout, convert_config)
                sink.close()
                del joined

        with open_fed(feed, trace_path, config=cfg) as session:
            loading.close()
            yield session


def convert_for_task(src: str, sidecars: List[str], graph_lanes: Optional[str], out: str) -> Dict[str, Any]:
    """A fleet task's conversion, run on the worker: the JSON trace ``src`` (joined with
    ``sidecars``) to ``out``, by :func:`~.joined.read_and_join`. Returns what was learnt on
    the way: its rank (:func:`~.joined.trace_rank`: a rank that is no rank is refused, as
    by ``merge``), base time and, when joined, the join's graphed and unmatched counts.
    ``graph_lanes`` None: the lanes where a node is annotated, else the recorded streams. A
    module-level function, so a task carrying it pickles by reference."""
    from ..write.pftrace import write_pftrace

    info: Dict[str, Any] = {}
    with paused_gc():
        joined = read_and_join(src, list(sidecars), graph_lanes=graph_lanes)
        try:
            if joined.layout is not None:
                info["join_graphed"] = joined.layout.report.graphed
                info["join_unmatched"] = joined.layout.report.unmatched
            rank = trace_rank(joined.trace)
            if rank is not None:
                info["rank"] = rank
            if joined.trace.base_time_ns:
                info["base_time_ns"] = joined.trace.base_time_ns
            write_pftrace(joined.trace, out, joined.layout)
        finally:
            del joined
    return info
