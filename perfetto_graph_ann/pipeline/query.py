"""Converted traces for the query stage: fed to a trace processor, or written for a worker.

``query/`` knows only Perfetto traces and a way to be fed bytes
(:func:`~perfetto_graph_ann.query.session.open_fed`, a task's ``converter``); reading a
torch.profiler JSON trace, joining it and converting it happens here.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from ..query.engine.config import EngineConfig
from ..query.session import Session, open_fed, sql_arg_names
from ..read.model import KinetoTrace
from ..write.pftrace import ConvertConfig, write_pftrace_stream

if TYPE_CHECKING:
    from ..join.model import LaneLayout


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
    faster, same tables.

    The session and its errors are named after ``trace.path`` (the file the user gave), not
    the temporary placeholder file the engine is started on."""
    cfg = (config or EngineConfig()).with_engine(engine)
    convert_config = ConvertConfig(keep_args=sql_arg_names(cfg.package_dirs())) if sql_args_only else ConvertConfig()

    def feed(sink) -> None:
        write_pftrace_stream(trace, sink, layout, convert_config)

    with open_fed(feed, trace.path, config=cfg) as session:
        yield session


def convert_for_task(src: str, sidecars: List[str], graph_lanes: str, out: str) -> Dict[str, Any]:
    """A fleet task's conversion, run on the worker: the JSON trace ``src`` (joined with
    ``sidecars``) to ``out``. Returns what was learnt on the way: its rank
    (``distributedInfo.rank``), base time and, when joined, the join's graphed and unmatched
    counts. A module-level function, so a task carrying it pickles by reference."""
    from ..read.kineto import read_trace
    from ..write.pftrace import paused_gc, write_pftrace

    info: Dict[str, Any] = {}
    with paused_gc():
        trace = read_trace(src)
        try:
            layout = None
            if sidecars:
                from ..annotations.files import load_annotation_files
                from ..join.join import join

                layout = join(trace, load_annotation_files(sidecars), graph_lanes=graph_lanes)
                info["join_graphed"] = layout.report.graphed
                info["join_unmatched"] = layout.report.unmatched
            rank = (trace.distributed_info or {}).get("rank")
            if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
                info["rank"] = rank
            if trace.base_time_ns:
                info["base_time_ns"] = trace.base_time_ns
            write_pftrace(trace, out, layout)
        finally:
            del trace
    return info
