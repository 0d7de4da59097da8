"""``merge``: several ranks' torch.profiler traces, each read, joined and converted, in one ``.pftrace``.

How the converted ranks are combined (groups, one clock, no id clashes, labels) is
:mod:`perfetto_graph_ann.write.merge`'s; this module runs each rank through the stages.
"""
from __future__ import annotations

import contextlib
import io
import os
from typing import Optional, Sequence

from ..annotations.model import AnnotationSet
from ..errors import InputError, PathLike
from ..util.atomic import atomic_write
from ..write.merge import MergedInput, MergeReport, RankTrace, write_merged

__all__ = ["merge", "MergeReport"]


def merge(traces: Sequence[PathLike], out: PathLike, annotations: Optional[Sequence[Optional[AnnotationSet]]] = None,
          graph_lanes: Optional[str] = None, gzip: Optional[bool] = None,
          labels: Optional[Sequence[Optional[str]]] = None, progress=None, force: bool = False) -> MergeReport:
    """Convert each rank's torch.profiler trace (joined with its annotations) and merge them into ``out``.

    ``annotations``: None, or one entry per trace (None where a rank has none).
    ``graph_lanes``: None (default) moves each rank's graphed kernels to their lanes where its
    annotations carry a field and keeps the recorded streams of a rank whose annotations carry
    none; ``"all"`` / ``"none"`` as asked, ``"all"`` refused (``LaneOptionError``, naming the
    rank's annotations) for a rank without annotated nodes, as torch 2.15 refuses it: one
    rule for every entry point (``join.lanes.decide_graph_lanes``). The rank
    is the trace's ``distributedInfo.rank``, else its position. Written atomically and,
    as by ``convert``, gzip-compressed when ``gzip`` is True or (None) the name ends in ``.gz``;
    an ``out`` that is one of the traces, or has a JSON name, raises ``OutputError``.
    ``labels``: None, or one entry per trace (None: unlabelled): a labelled trace's group is
    ``<label> (rank <r>)``, so an eager and a graphed trace of one rank can be compared;
    labelled groups keep the order of ``traces``. ``progress``: a
    :class:`~perfetto_graph_ann.util.progress.Progress` to name each rank's phases on.
    Annotations that do not belong to their rank's trace raise ``AnnotationMismatchError``
    before anything is written, unless ``force`` (see :func:`~perfetto_graph_ann.join.join`).
    """
    def phase(desc: str):
        return progress.phase(desc) if progress is not None else contextlib.nullcontext()

    from ..write.pftrace import check_protobuf_output

    check_protobuf_output(out, list(traces), "merge writes only Perfetto traces")
    if annotations is not None and len(annotations) != len(traces):
        raise ValueError(f"{len(annotations)} annotation sets for {len(traces)} traces")
    if labels is not None and len(labels) != len(traces):
        raise ValueError(f"{len(labels)} labels for {len(traces)} traces")
    ranks = [convert_rank(path, annotations[i] if annotations is not None else None, i, len(traces),
                          graph_lanes=graph_lanes, label=labels[i] if labels is not None else None,
                          progress=progress, force=force)
             for i, path in enumerate(traces)]
    with phase(f"merging and writing {os.path.basename(os.fspath(out))}"):
        with atomic_write(out, compress=gzip) as f:  # rank by rank: the merged trace is never held whole
            write_merged(ranks, f, release=True)
    ref = min((rt.base_time_ns for rt in ranks), default=0)
    return MergeReport([rt.rank for rt in ranks], {rt.rank: rt.base_time_ns - ref for rt in ranks},
                       {rt.rank: rt.layout for rt in ranks},
                       [MergedInput(rt.source or "", rt.rank, rt.label, rt.base_time_ns - ref, rt.layout) for rt in ranks])


def convert_rank(path: PathLike, annotations: Optional[AnnotationSet], index: int = 0, count: int = 1,
                 graph_lanes: Optional[str] = None, label: Optional[str] = None, progress=None,
                 force: bool = False) -> RankTrace:
    """One torch.profiler trace read, joined with ``annotations`` (None: none) and converted,
    as :func:`merge` (and ``diff``) hand it to :func:`~perfetto_graph_ann.write.merge.merge_converted`.
    ``index`` / ``count``: its position among the inputs (its rank when the trace names none;
    the progress line)."""
    def phase(desc: str):
        return progress.phase(desc) if progress is not None else contextlib.nullcontext()

    from ..join import join
    from ..read.kineto import read_trace
    from ..write.pftrace import paused_gc, write_pftrace_stream

    i, spath = index, os.fspath(path)
    # As in convert(): the cyclic GC paused while a rank is read, joined and written, and
    # its trace dropped before the GC resumes (else the first collection afterwards
    # walks every event of the dying trace).
    with paused_gc():
        with phase(f"reading {os.path.basename(spath)} ({i + 1} of {count})"):
            trace = read_trace(spath)
        try:
            info = trace.distributed_info or {}
            rank = info.get("rank", i)
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1 << 31:
                raise InputError(spath, f"distributedInfo.rank {rank!r} is not a rank (an integer 0..2^31-1)")
            with phase(f"joining and converting {os.path.basename(spath)} ({i + 1} of {count})"):
                layout = None
                if annotations is not None:
                    layout = join(trace, annotations, graph_lanes=graph_lanes, force=force)
                buf = io.BytesIO()  # the writer streams to any binary file: no temporary file to write and read back
                write_pftrace_stream(trace, buf, layout)
            base_time_ns = trace.base_time_ns
        finally:
            del trace
    return RankTrace(rank, base_time_ns, buf.getvalue(), spath, layout, label)
