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
from ..read.kineto import read_trace
from ..read.model import KinetoTrace
from ..formats import is_json_name
from ..write.pftrace import ConvertConfig, WriteStats, check_protobuf_output, paused_gc, write_pftrace

if TYPE_CHECKING:
    from ..join.model import LaneLayout
    from ..util.progress import Progress

__all__ = ["ConvertConfig", "check_lane_options", "convert", "convert_file", "Converted", "join_files",
           "read_and_join", "resolve_graph_lanes", "write_joined"]


def convert(src: "PathLike | KinetoTrace", out: PathLike, config: ConvertConfig = ConvertConfig(),
            layout: Optional[LaneLayout] = None) -> WriteStats:
    """Convert ``src`` (a path, or an already read trace) to a Perfetto trace at ``out``.

    ``layout`` (from the join) moves GPU events to their lanes and adds their args.
    Bad input raises :class:`~perfetto_graph_ann.errors.TraceFormatError` before anything
    is written; a failed write leaves no file (and any previous ``out`` untouched). An ``out``
    that is the input, or has a Chrome JSON name, raises
    :class:`~perfetto_graph_ann.errors.OutputError` (as the CLI refuses them).
    """
    check_protobuf_output(out, [src.path if isinstance(src, KinetoTrace) else src],
                          "for annotated Chrome JSON use write.chrome_json.write_chrome_json")
    with paused_gc():
        trace = src if isinstance(src, KinetoTrace) else read_trace(src)
        try:
            return write_pftrace(trace, out, layout, config)
        finally:
            # Drop the trace read here while the collector is still paused: everything
            # allocated meanwhile is still in the youngest generation, so the first
            # allocation after re-enabling it would trigger a pass over the whole dying
            # trace (benchmarks/convert.py).
            del trace


def resolve_graph_lanes(requested: Optional[str], annotations: Optional[AnnotationSet], paths: Sequence[str],
                        default: str = "all", trace: Optional[str] = None) -> str:
    """The ``graph_lanes`` to join with, by the one rule (:func:`~perfetto_graph_ann.join.lanes.decide_graph_lanes`):
    ``requested``, else ``default`` where a node is annotated and ``"none"`` where none is (or
    no annotations were given: ``annotations`` None). ``"all"`` without annotated nodes is
    refused as torch 2.15 refuses it (:class:`~perfetto_graph_ann.errors.LaneOptionError`,
    exit 2), naming the files (or ``trace`` when there are none)."""
    from ..join.lanes import decide_graph_lanes

    if requested is None and default == "none":
        requested = "none"
    return decide_graph_lanes(requested, annotations if paths or annotations is None or annotations.graphs else None,
                              list(paths) or None, trace)


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


def join_files(trace: KinetoTrace, paths: Sequence[str], graph_lanes: Optional[str] = None, force: bool = False,
               default_stream: Optional[int] = None, default: str = "all",
               edge_flows: bool = False) -> Tuple["LaneLayout", AnnotationSet]:
    """Join ``trace`` with the annotations of ``paths`` (merged; each file's identity checked).

    ``graph_lanes`` None picks ``default`` where a node is annotated, else ``"none"``
    (:func:`resolve_graph_lanes`); ``default_stream`` None is torch's 7. Returns ``(layout,
    merged annotations)``; ``edge_flows``: the replays' dependency edges as flows too (see
    :func:`~perfetto_graph_ann.join.join`). Raises :class:`~perfetto_graph_ann.errors.AnnotationMismatchError`
    (exit 2, nothing written) for annotations that do not belong to the trace, unless
    ``force``, and :class:`~perfetto_graph_ann.errors.LaneOptionError` for lane options that
    cannot apply to them.
    """
    from ..annotations.files import load_annotations, merge_annotation_sets
    from ..join import join

    sets = [load_annotations(p) for p in paths]
    merged = merge_annotation_sets(sets)
    lanes = resolve_graph_lanes(graph_lanes, merged, paths, default=default, trace=trace.path)
    return join(trace, merged, graph_lanes=lanes, default_stream=7 if default_stream is None else default_stream,
                force=force, sources=sets, edge_flows=edge_flows), merged


def read_and_join(trace_path: str, paths: Sequence[str], graph_lanes: Optional[str] = None, force: bool = False,
                  progress: "Optional[Progress]" = None,
                  on_join: Optional[Callable[["LaneLayout"], Any]] = None) -> Tuple[KinetoTrace, Optional["LaneLayout"]]:
    """A torch.profiler JSON trace and its layout: joined to ``paths`` (``on_join`` is told the
    layout, e.g. to print its summary), else None. ``progress`` names the phases. Lane
    options without annotations are refused before the read (:func:`check_lane_options`)."""
    check_lane_options(trace_path, paths, graph_lanes)
    with _phase(progress, f"reading {os.path.basename(trace_path)}"):
        trace = read_trace(trace_path)
    if not paths:
        return trace, None
    with _phase(progress, "joining the GPU work to the annotations"):
        layout, _ = join_files(trace, paths, graph_lanes, force)
    if on_join is not None:
        on_join(layout)
    return trace, layout


def write_joined(trace: KinetoTrace, out: str, annotations: AnnotationSet, graph_lanes: str = "none",
                 default_stream: int = 7, force: bool = False) -> "LaneLayout":
    """Join a read trace with ``annotations`` and write it to ``out`` (Chrome JSON for a JSON
    name, else ``.pftrace``), atomically; returns the layout."""
    from ..join import join

    layout = join(trace, annotations, graph_lanes=graph_lanes, default_stream=default_stream, force=force)
    _write(trace, out, layout, ConvertConfig())
    return layout


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
    ``on_join`` is told the layout as soon as the join is done. Inputs given as the output,
    and lane options without annotations to apply to (:func:`check_lane_options`), are
    refused before anything is read. ``edge_flows``: the replays' dependency edges (recorded at
    capture) as flows between their GPU work.
    """
    from ..util.atomic import refuse_input_as_output

    refuse_input_as_output(out, [src, *annotations])
    check_lane_options(src, annotations, graph_lanes, default_stream)
    if edge_flows and not annotations:
        from ..errors import LaneOptionError

        raise LaneOptionError(src, "--edge-flows draws the dependency edges recorded in annotations: give the "
                                   "annotations (--annotations FILE, saved with sidecar version 4 or later)")
    with paused_gc():
        with _phase(progress, f"reading {os.path.basename(src)}"):
            trace = read_trace(src)
        try:
            layout = None
            if annotations:
                with _phase(progress, "joining the GPU work to the annotations"):
                    layout, _ = join_files(trace, annotations, graph_lanes, force, default_stream=default_stream,
                                           default="none" if is_json_name(out) else "all", edge_flows=edge_flows)
                if on_join is not None:
                    on_join(layout)
            with _phase(progress, f"writing {os.path.basename(out)}"):  # large traces: the writer's own bar below it
                stats = _write(trace, out, layout, config)
            return Converted(len(trace.events), layout, stats)
        finally:
            del trace  # while the collector is paused (see convert)


def _write(trace: KinetoTrace, out: str, layout: Optional["LaneLayout"], config: ConvertConfig) -> Optional[WriteStats]:
    """The writer ``out``'s name asks for: annotated Chrome JSON (returns None) or ``.pftrace``."""
    if is_json_name(out):  # any case: the .pftrace writer refuses a protobuf trace under such a name
        from ..write.chrome_json import write_chrome_json

        write_chrome_json(trace, out, layout)
        return None
    return write_pftrace(trace, out, layout, config)


def _phase(progress: "Optional[Progress]", desc: str):
    import contextlib

    return progress.phase(desc) if progress is not None else contextlib.nullcontext()
