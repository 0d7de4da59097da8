"""``merge``: several ranks' torch.profiler traces, each read, joined and converted, in one ``.pftrace``.

How the converted ranks are combined (groups, one clock, no id clashes, labels) is
:mod:`perfetto_graph_ann.write.merge`'s; this module runs each rank through the stages.
"""
from __future__ import annotations

import io
import os
from typing import Optional, Sequence

from ..annotations.model import AnnotationSet
from ..errors import PathLike
from ..util.atomic import atomic_write
from ..util.progress import phase
from ..write.merge import MergedInput, MergeReport, RankTrace, write_merged
from .joined import read_and_join, read_for_writing, trace_rank

__all__ = ["merge", "MergeReport"]


def merge(traces: Sequence[PathLike], out: PathLike, annotations: Optional[Sequence[Optional[AnnotationSet]]] = None,
          graph_lanes: Optional[str] = None, gzip: Optional[bool] = None,
          labels: Optional[Sequence[Optional[str]]] = None, progress=None, force: bool = False,
          two_pass: bool = True) -> MergeReport:
    """Convert each rank's torch.profiler trace (joined with its annotations) and merge them into ``out``.

    Each rank is read and joined by :func:`~.joined.read_and_join` (:func:`convert_rank`);
    how the converted ranks are combined is :func:`~perfetto_graph_ann.write.merge.merge_converted`'s.

    Args:
        traces: the ranks' torch.profiler JSON traces.
        out: the ``.pftrace`` to write, atomically; gzip-compressed when ``gzip`` is True or
            (None) its name ends in ``.gz``.
        annotations: None, or one entry per trace (None where a rank has none).
        graph_lanes: None (default) moves each rank's graphed kernels to their lanes where
            its annotations carry a field and keeps the recorded streams of a rank whose
            annotations carry none; ``"all"`` / ``"none"`` as asked (the one rule:
            ``join.lanes.decide_graph_lanes``).
        gzip: see ``out``.
        labels: None, or one entry per trace (None: unlabelled): a labelled trace's group is
            ``<label> (rank <r>)``, so an eager and a graphed trace of one rank can be
            compared; labelled groups keep the order of ``traces``.
        progress: a :class:`~perfetto_graph_ann.util.progress.Progress` to name each rank's
            phases on.
        force: join annotations that do not belong to their rank's trace.
        two_pass: read each rank in two passes where that applies (a file, plain or gzip:
            light events, each decoded again for its packet; the same bytes), as ``convert``
            does; False: every event of a rank held while it is converted.

    Returns:
        The :class:`MergeReport`: ranks, their clock offsets and layouts.

    Raises:
        OutputError: an ``out`` that is one of the traces, or has a JSON name.
        InputError: a trace whose ``distributedInfo.rank`` is no rank (the rank is that,
            else the trace's position).
        LaneOptionError: ``graph_lanes="all"`` for a rank without annotated nodes (as torch
            2.15 refuses it), naming the rank's annotations.
        AnnotationMismatchError: annotations that do not belong to their rank's trace,
            before anything is written, unless ``force``.
        ValueError: ``annotations`` or ``labels`` not one per trace.
    """
    from ..write.pftrace import check_protobuf_output

    check_protobuf_output(out, list(traces), "merge writes only Perfetto traces")
    if annotations is not None and len(annotations) != len(traces):
        raise ValueError(f"{len(annotations)} annotation sets for {len(traces)} traces")
    if labels is not None and len(labels) != len(traces):
        raise ValueError(f"{len(labels)} labels for {len(traces)} traces")
    ranks = [convert_rank(path, annotations[i] if annotations is not None else None, i, len(traces),
                          graph_lanes=graph_lanes, label=labels[i] if labels is not None else None,
                          progress=progress, force=force, two_pass=two_pass)
             for i, path in enumerate(traces)]
    with phase(progress, f"merging and writing {os.path.basename(os.fspath(out))}"):
        with atomic_write(out, compress=gzip) as f:  # rank by rank: the merged trace is never held whole
            write_merged(ranks, f, release=True)
    ref = min((rt.base_time_ns for rt in ranks), default=0)
    return MergeReport([rt.rank for rt in ranks], {rt.rank: rt.base_time_ns - ref for rt in ranks},
                       {rt.rank: rt.layout for rt in ranks},
                       [MergedInput(rt.source or "", rt.rank, rt.label, rt.base_time_ns - ref, rt.layout) for rt in ranks])


def convert_rank(path: PathLike, annotations: Optional[AnnotationSet], index: int = 0, count: int = 1,
                 graph_lanes: Optional[str] = None, label: Optional[str] = None, progress=None,
                 force: bool = False, named_rank_only: bool = False, two_pass: bool = True) -> RankTrace:
    """One torch.profiler trace read, joined with ``annotations`` (None: none) and converted,
    as :func:`merge` (and ``diff``) hand it to :func:`~perfetto_graph_ann.write.merge.merge_converted`.
    ``index`` / ``count``: its position among the inputs (its rank when the trace names none,
    unless ``named_rank_only``: then None; the progress line). ``two_pass``: read as
    ``convert`` reads (:func:`~..read.scan.scan_trace`) where that applies."""
    from ..util.collector import paused_gc
    from ..write.pftrace import write_pftrace_stream

    # As in convert(): the cyclic GC paused while a rank is read, joined and written, and
    # its trace dropped before the GC resumes (else the first collection afterwards
    # walks every event of the dying trace).
    name, of = os.path.basename(os.fspath(path)), f" ({index + 1} of {count})"
    with paused_gc():
        if two_pass:  # light events (with what the join reads), each decoded again for its packet
            with phase(progress, f"reading {name}{of}"):
                trace = read_for_writing(path, True, join=annotations is not None)
        else:
            trace = read_and_join(path, progress=progress, suffix=of).trace
        try:
            rank = trace_rank(trace)
            with phase(progress, f"joining and converting {name}{of}"):
                layout = read_and_join(trace, annotations, graph_lanes=graph_lanes, force=force).layout
                buf = io.BytesIO()  # the writer streams to any binary file: no temporary file to write and read back
                write_pftrace_stream(trace, buf, layout)
            base_time_ns = trace.base_time_ns
        finally:
            del trace
    if rank is None and not named_rank_only:
        rank = index
    return RankTrace(rank, base_time_ns,  # type: ignore[arg-type]
                     buf.getvalue(), os.fspath(path), layout, label)
