"""Read and join: the one function every entry point calls to turn a torch.profiler trace and
its annotations into a :class:`~perfetto_graph_ann.join.model.LaneLayout`.

:func:`read_and_join` is used by ``convert`` (:func:`.convert.convert_file`), ``report`` /
``sql`` (:func:`.query.open_json`), ``lanes``, ``merge`` and ``diff`` (:func:`.merge.convert_rank`),
the fleet's workers (:func:`.query.convert_for_task`) and the live-profiler paths
(``export``, ``trace_handler``: :func:`.convert.write_joined`). The ``graph_lanes`` rule is
:func:`~perfetto_graph_ann.join.lanes.decide_graph_lanes`, reached only through
:func:`resolve_graph_lanes` (and, for direct callers of ``join``, through ``join`` itself);
the rank of a trace is :func:`trace_rank`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from ..annotations.model import AnnotationSet
from ..errors import InputError, PathLike
from ..read import kineto
from ..read.model import KinetoTrace
from ..util.progress import phase

if TYPE_CHECKING:
    from ..join.model import LaneLayout
    from ..read.follow import Followed
    from ..util.progress import Progress

__all__ = ["Joined", "check_lane_options", "read_and_join", "read_for_writing", "resolve_graph_lanes",
           "trace_rank"]

#: The largest rank a trace may name (``distributedInfo.rank`` is an int32 in Kineto).
MAX_RANK = (1 << 31) - 1


@dataclasses.dataclass
class Joined:
    """What :func:`read_and_join` gives: the read trace, its layout (None: not joined) and the
    annotations it was joined with (merged when several files were given; None: none)."""

    trace: KinetoTrace
    layout: Optional["LaneLayout"]
    annotations: Optional[AnnotationSet]


def read_for_writing(src: PathLike, two_pass: bool, join: bool = False,
                     follow: "Optional[Followed]" = None) -> KinetoTrace:
    """The trace at ``src`` as the ``.pftrace`` writer reads it: with ``two_pass``, scanned
    (:func:`~..read.scan.scan_trace`: light events, read again while writing) where that
    applies (a JSON file, plain or gzip), else read whole (a pipe, anything the scan is unsure
    of, and every error: :func:`~..read.kineto.read_trace`). ``join``: the light events keep
    what the join reads too (it runs on them before the writer). ``follow``: the file read as
    its writer writes it (:mod:`~..read.follow`); the whole-file read, where it comes to that,
    waits for the writer and reads the finished file. ``convert`` and ``merge`` read through it."""
    if two_pass:
        from ..read.scan import scan_trace

        scanned = scan_trace(os.fspath(src), join, follow)
        if scanned is not None:
            return scanned
    if follow is not None:
        src = follow.wait()
    return kineto.read_trace(src)


def read_and_join(trace: Union[PathLike, KinetoTrace],
                  annotations: Union[Sequence[PathLike], AnnotationSet, None] = None, *,
                  graph_lanes: Optional[str] = None, default_stream: Optional[int] = None, force: bool = False,
                  default: str = "all", projection: bool = True, progress: "Optional[Progress]" = None,
                  suffix: str = "", on_join: "Optional[Callable[[LaneLayout], Any]]" = None,
                  edge_flows: bool = False, compact: Optional[bool] = None) -> Joined:
    """Read ``trace`` (a path; an already read trace is used as it is) and join it with
    ``annotations``.

    Args:
        trace: a torch.profiler JSON trace (path), or a :class:`KinetoTrace` already read.
        annotations: annotation files (sidecars or capture records; merged, each file's
            identity checked against the trace), an :class:`AnnotationSet`, or None. No
            files, or None: no join (files, even none, have the lane options checked first).
        graph_lanes: ``"all"``, ``"none"`` or None (``default`` where a node is annotated,
            else ``"none"``): :func:`resolve_graph_lanes`.
        default_stream: the lane of graphed kernels without one under ``"all"``; None is
            torch's 7 (``join.DEFAULT_GRAPH_LANE``).
        force: join annotations whose identity does not match the trace.
        default: what None means where a node is annotated (``"none"`` for Chrome JSON output).
        projection: add the replay and scope ranges the Perfetto writer draws under each
            GPU (``LaneLayout.ranges``; see :func:`~perfetto_graph_ann.join.join`).
        progress: names the phases (reading, joining) on the CLI's status line.
        suffix: appended to each phase's name (e.g. ``" (2 of 4)"``).
        on_join: told the layout as soon as the join is done (e.g. to print its summary).
        edge_flows: the replays' dependency edges (recorded at capture, sidecar version 4)
            as flows between their GPU work (see :func:`~perfetto_graph_ann.join.join`).
        compact: the placements held in columns (:class:`~perfetto_graph_ann.join.model.CompactPlacements`,
            read-only but through ``mutable_placement``), as the ``.pftrace`` writer reads them
            fastest; None: where the trace was read in two passes (it is written from its offsets).

    Returns:
        :class:`Joined`: the trace, its layout (None without annotations) and the annotations.

    Raises:
        LaneOptionError: lane options that cannot apply (``"all"`` without an annotated node,
            ``default_stream`` without annotations or on an annotated lane); where
            ``annotations`` are files (or none), before the trace is read.
        AnnotationMismatchError: annotations of another run, unless ``force``.
        TraceFormatError, SidecarError: an unreadable trace or annotation file.
    """
    files = (None if annotations is None or isinstance(annotations, AnnotationSet)
             else [os.fspath(p) for p in annotations])
    path = trace.path if isinstance(trace, KinetoTrace) else os.fspath(trace)
    if files is not None:
        check_lane_options(path, files, graph_lanes, default_stream)
    if not isinstance(trace, KinetoTrace):
        with phase(progress, f"reading {os.path.basename(path)}{suffix}"):
            trace = kineto.read_trace(path)
    if annotations is None or files == []:
        return Joined(trace, None, None)
    from ..join import join
    from ..join.model import DEFAULT_GRAPH_LANE

    with phase(progress, f"joining the GPU work to the annotations{suffix}"):
        sources = None
        if files is not None:
            from ..annotations.files import load_annotations, merge_annotation_sets

            sources = [load_annotations(p) for p in files]
            annotations = merge_annotation_sets(sources)
        lanes = resolve_graph_lanes(graph_lanes, annotations, files or (), default=default, trace=path)
        stream = DEFAULT_GRAPH_LANE if default_stream is None else default_stream
        if compact is None:  # a trace read in two passes (read.scan) is written from its offsets: compact too
            compact = getattr(trace, "source", None) is not None
        layout = join(trace, annotations, graph_lanes=lanes, default_stream=stream, force=force, sources=sources,
                      projection=projection, edge_flows=edge_flows, compact=compact,
                      made=getattr(trace, "made", None))  # made while a followed file was written
    if on_join is not None:
        on_join(layout)
    return Joined(trace, layout, annotations)


def resolve_graph_lanes(requested: Optional[str], annotations: Optional[AnnotationSet], paths: Sequence[str] = (),
                        default: str = "all", trace: Optional[str] = None) -> str:
    """The ``graph_lanes`` to join with, by the one rule (:func:`~perfetto_graph_ann.join.lanes.decide_graph_lanes`):
    ``requested``, else ``default`` where a node is annotated and ``"none"`` where none is (or
    no annotations were given: ``annotations`` None). ``"all"`` without annotated nodes is
    refused as torch 2.15 refuses it (:class:`~perfetto_graph_ann.errors.LaneOptionError`,
    exit 2), naming the files ``paths`` (else the annotations' source, else ``trace``)."""
    from ..join.lanes import decide_graph_lanes

    if requested is None and default == "none":
        requested = "none"
    return decide_graph_lanes(requested, annotations, list(paths) or None, trace)


def check_lane_options(trace: str, paths: Sequence[str], graph_lanes: Optional[str],
                       default_stream: Optional[int] = None) -> None:
    """Refuse, before anything is read, lane options that cannot apply because no annotation
    file was given: ``--graph-lanes all`` (nothing to move kernels by; torch 2.15 refuses it
    too) and ``--default-stream`` (only the join places kernels). With annotations the join
    decides (:func:`~perfetto_graph_ann.join.lanes.decide_graph_lanes`, ``check_default_stream``)."""
    from ..join.lanes import check_default_stream, decide_graph_lanes

    if paths:
        if default_stream is not None:
            check_default_stream(default_stream, None, None, trace)  # a lane id at all; its lane is checked by the join
        return
    decide_graph_lanes(graph_lanes, None, None, trace)
    if default_stream is not None:
        from ..errors import LaneOptionError

        raise LaneOptionError(trace, f"--default-stream {default_stream} applies only to a join: give the "
                                     "annotations (--annotations FILE) whose unlaned kernels it places")


def trace_rank(trace: KinetoTrace) -> Optional[int]:
    """The trace's ``distributedInfo.rank``; None where it names none.

    Raises:
        InputError: a rank that is no integer in 0..2^31-1 (naming the trace file).
    """
    info = trace.distributed_info or {}
    if "rank" not in info:
        return None
    rank = info["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_RANK:
        raise InputError(trace.path, f"distributedInfo.rank {rank!r} is not a rank (an integer 0..2^31-1)")
    return rank
