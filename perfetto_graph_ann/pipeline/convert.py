"""One trace: read it, join it with annotations, write it (``.pftrace`` or annotated Chrome JSON).

    from perfetto_graph_ann import convert
    stats = convert("trace.json.gz", "trace.pftrace")
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple

from ..annotations.model import AnnotationSet
from ..errors import PathLike
from ..read.model import KinetoTrace
from ..formats import is_gzip_file, is_json_name
from ..util.collector import paused_gc
from ..util.progress import phase
from ..write.pftrace import ConvertConfig, WriteStats, check_protobuf_output, write_pftrace
from .joined import check_lane_options, read_and_join, read_for_writing, resolve_graph_lanes  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from ..join.model import LaneLayout
    from ..read.follow import Followed
    from ..util.progress import Progress

__all__ = ["ConvertConfig", "check_lane_options", "convert", "convert_file", "Converted", "join_files",
           "join_for_output", "read_and_join", "read_for_writing", "resolve_graph_lanes", "TWO_PASS_MIN_BYTES",
           "write_joined", "write_joined_file"]


def convert(src: "PathLike | KinetoTrace", out: PathLike, config: ConvertConfig = ConvertConfig(),
            layout: Optional[LaneLayout] = None, annotations: Sequence[PathLike] = ()) -> WriteStats:
    """Convert ``src`` to a Perfetto trace at ``out``.

    A JSON file (plain or gzip) converted without a ``layout`` is read in two passes (light
    events, then each event's JSON decoded again just before its packet: a fraction of the
    memory, the same bytes; ``config.two_pass``), also when joined with ``annotations``
    (:func:`convert_file`'s join, lanes as the CLI's default); a read trace is held in memory.

    Args:
        src: a torch.profiler JSON trace (path), or a :class:`KinetoTrace` already read.
        out: the ``.pftrace`` to write (gzip-compressed for a ``.gz`` name); written whole
            or not at all, any previous ``out`` left untouched on failure.
        config: how to write it (encoder, list args, progress; :class:`ConvertConfig`).
        layout: the join's layout (:func:`~.joined.read_and_join`), which moves GPU events
            to their lanes and adds their args and the GPU projection; None: as recorded.
        annotations: annotation files (sidecars, capture records) to join ``src`` with
            here, instead of a ``layout``: as ``convert IN OUT --annotations F``.

    Returns:
        The writer's counts (:class:`WriteStats`): every input event accounted for.

    Raises:
        TraceFormatError: an unreadable or malformed trace, before anything is written.
        AnnotationMismatchError, SidecarError: ``annotations`` of another run, or unreadable.
        ValueError: both ``annotations`` and a ``layout``.
        OutputError: an ``out`` that is the input or has a Chrome JSON name (for annotated
            Chrome JSON use ``write.chrome_json.write_chrome_json``), as the CLI refuses them.
    """
    check_protobuf_output(out, [src.path if isinstance(src, KinetoTrace) else src],
                          "for annotated Chrome JSON use write.chrome_json.write_chrome_json")
    if annotations:
        if layout is not None:
            raise ValueError("give the annotations to join or a layout already joined, not both")
        files = [os.fspath(a) for a in annotations]
        if not isinstance(src, KinetoTrace):
            stats = convert_file(os.fspath(src), os.fspath(out), files, config=config).stats
            assert stats is not None  # a .pftrace name (checked above)
            return stats
        layout = read_and_join(src, files).layout
    with paused_gc():
        trace = src if isinstance(src, KinetoTrace) else read_for_writing(src, layout is None and config.two_pass)
        try:
            return write_pftrace(trace, out, layout, config)
        finally:
            # Drop the trace read here while the collector is still paused: everything
            # allocated meanwhile is still in the youngest generation, so the first
            # allocation after re-enabling it would trigger a pass over the whole dying
            # trace (benchmarks/convert.py).
            del trace


def join_files(trace: KinetoTrace, paths: Sequence[str], graph_lanes: Optional[str] = None, force: bool = False,
               default_stream: Optional[int] = None, default: str = "all",
               edge_flows: bool = False) -> Tuple["LaneLayout", AnnotationSet]:
    """``(layout, merged annotations)`` of :func:`~.joined.read_and_join` for a read ``trace``
    and the annotation files ``paths`` (kept for callers of the earlier name)."""
    joined = read_and_join(trace, list(paths), graph_lanes=graph_lanes, force=force, default_stream=default_stream,
                           default=default, edge_flows=edge_flows)
    return joined.layout, joined.annotations


def write_joined(trace: KinetoTrace, out: str, annotations: AnnotationSet, graph_lanes: str = "none",
                 default_stream: int = 7, force: bool = False) -> "LaneLayout":
    """Join a read trace with ``annotations`` and write it to ``out`` (Chrome JSON for a JSON
    name, else ``.pftrace``, its placements then held in columns), atomically; returns the layout."""
    layout = read_and_join(trace, annotations, graph_lanes=graph_lanes, default_stream=default_stream,
                           force=force, compact=not is_json_name(out)).layout
    _write(trace, out, layout, ConvertConfig())
    return layout


#: A profile's JSON at least this large (a gzip file: 8x its size, an estimate) is read in two
#: passes by :func:`write_joined_file` (memory bounded: light events, each event read again
#: while it is written); a smaller one in memory (one read, one decode, ~5x the JSON at peak).
#: Since the first pass reads a run's usual events from their text (``read.scan.FAST_RUN``), two
#: passes are faster from a few MB on, on the H200 host that runs ``pga.export`` as on this
#: machine (0.83x in memory on the 75 MB decoder profile; 0.63x on a 15 MB trace here, the same
#: at 2 MB: BENCHMARKS.md, session 28).
TWO_PASS_MIN_BYTES = 4 << 20


def _json_bytes(src: str) -> int:
    """The size of the JSON text at ``src`` (a gzip file's estimated as 8x its size); 0 where
    it cannot be read (the reader then says why)."""
    try:
        size = os.path.getsize(src)
    except OSError:
        return 0
    return size * 8 if is_gzip_file(src) else size


def write_joined_file(src: str, out: str, ann: AnnotationSet, graph_lanes: Optional[str] = "none",
                      default_stream: int = 7, force: bool = False, label: Optional[str] = None,
                      follow: "Optional[Followed]" = None) -> "LaneLayout":
    """The profile's Chrome JSON at ``src`` joined with ``ann`` and written to ``out``, with the
    cyclic collector paused (the caller's heap is not walked for each of the reader's, the
    join's and the writer's allocations). A ``.pftrace`` of a profile of
    :data:`TWO_PASS_MIN_BYTES` or more reads ``src`` in two passes
    (:func:`~.joined.read_for_writing`: light events for the join, each event read
    again while it is written, a graph replay's kernels framed from their text), anything else
    in memory. ``label``: what errors call the trace (a temporary file's name means nothing to
    the caller), else ``src``. ``export``, ``trace_handler`` and the background worker read
    torch's JSON through it. ``follow``: ``src`` read as torch writes it (:mod:`~..read.follow`;
    a ``.pftrace`` then in two passes whatever its size: its size is not known yet)."""
    return _joined_file(src, out, ann, graph_lanes, default_stream, force, label, follow, write=True)


def join_for_output(src: str, out: str, ann: AnnotationSet, graph_lanes: Optional[str] = "none",
                    default_stream: int = 7, force: bool = False, label: Optional[str] = None) -> "LaneLayout":
    """The layout :func:`write_joined_file` returns for the same arguments, read and joined the
    same way, with nothing written: ``export`` joins in its own process (for the layout it
    returns) while a worker writes ``out``."""
    return _joined_file(src, out, ann, graph_lanes, default_stream, force, label, None, write=False)


def _joined_file(src: str, out: str, ann: AnnotationSet, graph_lanes: Optional[str], default_stream: int,
                 force: bool, label: Optional[str], follow: "Optional[Followed]", write: bool) -> "LaneLayout":
    from ..errors import TraceFormatError

    with paused_gc():
        try:
            two_pass = not is_json_name(out) and (follow is not None or _json_bytes(src) >= TWO_PASS_MIN_BYTES)
            trace = read_for_writing(src, two_pass, join=True, follow=follow)
        except TraceFormatError as e:
            raise TraceFormatError(label or src, e.problem) from None
        if label is not None:
            trace.path = label  # what the join's refusals call it
        try:
            if not write:
                return read_and_join(trace, ann, graph_lanes=graph_lanes, default_stream=default_stream, force=force,
                                     compact=not is_json_name(out)).layout
            return write_joined(trace, out, ann, graph_lanes, default_stream, force)
        except TraceFormatError as e:  # the second pass's (the file changed meanwhile)
            raise TraceFormatError(label or src, e.problem) from None
        finally:
            del trace  # freed while the collector is paused

@dataclasses.dataclass
class Converted:
    """What :func:`convert_file` did: the number of events read, the layout (None: not
    joined) and the writer's counts (None for Chrome JSON)."""

    events: int
    layout: Optional["LaneLayout"]
    stats: Optional[WriteStats]

    @property
    def chrome_json(self) -> bool:
        return self.stats is None


def convert_file(src: str, out: str, annotations: Sequence[str] = (), graph_lanes: Optional[str] = None,
                 default_stream: Optional[int] = None, force: bool = False, config: ConvertConfig = ConvertConfig(),
                 progress: "Optional[Progress]" = None,
                 on_join: Optional[Callable[["LaneLayout"], Any]] = None, edge_flows: bool = False) -> Converted:
    """The ``convert`` command: read ``src``, join it with the ``annotations`` files (if any),
    write ``out``: annotated Chrome JSON for a JSON name, else ``.pftrace``.

    ``graph_lanes`` None: torch's default for torch's format (``"none"`` for Chrome JSON),
    our lanes (``"all"``) for Perfetto's, ``"none"`` where no node is annotated.
    ``on_join`` is told the layout as soon as the join is done. A ``.pftrace`` output is
    read in two passes where it applies (``config.two_pass``; the join runs on the light
    events: :func:`read_for_writing`), Chrome JSON in memory. Inputs given as the output,
    and lane options without annotations to apply to (:func:`check_lane_options`), are
    refused before anything is read. ``edge_flows``: the replays' dependency edges (recorded at
    capture) as flows between their GPU work.
    """
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(out, [src, *annotations])
    if edge_flows and not annotations:
        from ..errors import LaneOptionError

        raise LaneOptionError(src, "--edge-flows draws the dependency edges recorded in annotations: give the "
                                   "annotations (--annotations FILE, saved with sidecar version 4 or later)")
    with paused_gc():
        source: "str | KinetoTrace" = src
        if not is_json_name(out) and config.two_pass:  # the writer reads it again; the join reads the light events
            if annotations:  # refused before anything is read, as read_and_join does
                check_lane_options(src, list(annotations), graph_lanes, default_stream)
            with phase(progress, f"reading {os.path.basename(src)}"):
                source = read_for_writing(src, True, join=bool(annotations))
        joined = read_and_join(source, list(annotations), graph_lanes=graph_lanes, default_stream=default_stream,
                               force=force, default="none" if is_json_name(out) else "all", progress=progress,
                               on_join=on_join, edge_flows=edge_flows)
        try:
            with phase(progress, f"writing {os.path.basename(out)}"):  # large traces: the writer's own bar below it
                stats = _write(joined.trace, out, joined.layout, config)
            return Converted(stats.events if stats is not None else len(joined.trace.events), joined.layout, stats)
        finally:
            del joined  # while the collector is paused (see convert)


def _write(trace: KinetoTrace, out: str, layout: Optional["LaneLayout"], config: ConvertConfig) -> Optional[WriteStats]:
    """The writer ``out``'s name asks for: annotated Chrome JSON (returns None) or ``.pftrace``."""
    if is_json_name(out):  # any case: the .pftrace writer refuses a protobuf trace under such a name
        from ..write.chrome_json import write_chrome_json

        write_chrome_json(trace, out, layout)
        return None
    return write_pftrace(trace, out, layout, config)
