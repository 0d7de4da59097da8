"""``diff``: two runs (one rank each), each read, joined and converted (or a ``.pftrace`` taken as
it is), merged as the labelled groups ``base`` and ``new`` of one trace and compared in one
engine session (:mod:`perfetto_graph_ann.query.diff`; docs/design.md, "Diff")."""
from __future__ import annotations

import contextlib
import os
from typing import Optional, Sequence, Union

from ..errors import InputError, PathLike
from ..query.diff import LABELS, DiffConfig, read_diff
from ..util.progress import phase
from ..write.perfetto.tracks import GROUP_MERGE_KEY_PREFIX

__all__ = ["diff", "DiffConfig"]

#: What the track descriptors of a merged trace's groups carry (``write.merge``); no other trace has it.
GROUP_MERGE_KEY = GROUP_MERGE_KEY_PREFIX.encode()

AnnotationsArg = Union[None, PathLike, Sequence[PathLike], "object"]


# -- inputs --------------------------------------------------------------------------------

def _annotation_set(arg: AnnotationsArg):
    """None, an AnnotationSet, or one or several sidecar / capture-record paths (merged)."""
    if arg is None:
        return None
    from ..annotations.files import load_annotation_files
    from ..annotations.model import AnnotationSet

    if isinstance(arg, AnnotationSet):
        return arg
    paths = [arg] if isinstance(arg, (str, os.PathLike)) else list(arg)
    return load_annotation_files([os.fspath(p) for p in paths]) if paths else None


def _rank_trace(path: PathLike, annotations, label: str, index: int, config: DiffConfig, progress):
    """One input as a converted trace ready to merge: JSON read, joined and converted; a
    Perfetto trace (ours, one rank, not a merge) taken as it is."""
    from ..formats import is_json_trace, is_pftrace_bytes, read_bytes
    from ..write.merge import RankTrace

    spath = os.fspath(path)
    if not os.path.exists(spath):
        raise InputError(spath, "no such file")
    if is_json_trace(spath):
        from ..pipeline.merge import convert_rank

        rt = convert_rank(spath, annotations, index, 2, graph_lanes=config.graph_lanes, label=label,
                          progress=progress, force=config.force)
    else:
        if annotations is not None:
            raise InputError(spath, "annotations only apply to a torch.profiler JSON trace; a Perfetto trace is "
                                    "compared as it is")
        data = read_bytes(spath, what="trace")
        if not data:
            from ..errors import EMPTY_FILE

            raise InputError(spath, EMPTY_FILE)
        if not is_pftrace_bytes(data):
            raise InputError(spath, "is neither a torch.profiler JSON trace nor a Perfetto trace")
        if GROUP_MERGE_KEY in data:
            raise InputError(spath, "is a merged trace (several ranks or labelled runs); diff compares one rank "
                                    "against one rank: give each run's own trace")
        rt = RankTrace(0, 0, data, spath, None, label)
    # the runs are compared replay by replay, never on one clock: no time shift between them
    rt.base_time_ns = 0
    rt.rank = 0
    return rt


# -- the diff ------------------------------------------------------------------------------

def diff(base: PathLike, new: PathLike, base_annotations: AnnotationsArg = None, new_annotations: AnnotationsArg = None,
         config: Optional[DiffConfig] = None, engine: str = "auto", progress=None):
    """Compare two runs (one rank each): a DataFrame, one row per graph (kind ``replay``,
    first, unranked) and per matched, new or vanished scope, lane, collective and kernel,
    ranked by the effect of its difference on replay time (``rank`` 1 = largest real one).

    ``base`` / ``new``: a torch.profiler JSON trace (joined with ``*_annotations``: a sidecar
    or capture record path, several, or an ``AnnotationSet``) or a Perfetto trace written by
    this package. ``df.attrs['rule']`` says when a difference is called real
    (:func:`~perfetto_graph_ann.query.diff.diff_rule`). Errors a user can cause (missing or malformed input, a merged trace,
    a run without graph replays) raise :class:`~perfetto_graph_ann.errors.InputError` naming
    the file.
    """
    from ..query.session import open_fed
    from ..write.merge import merge_converted

    config = config or DiffConfig()

    paths = [os.fspath(base), os.fspath(new)]
    anns = [_annotation_set(base_annotations), _annotation_set(new_annotations)]
    ranks = [_rank_trace(p, a, label, i, config, progress) for i, (p, a, label) in enumerate(zip(paths, anns, LABELS))]
    with phase(progress, "merging the two runs"):
        merged = merge_converted(ranks)
    del ranks
    with contextlib.ExitStack() as stack:
        with phase(progress, "loading the two runs into the trace processor"):
            session = stack.enter_context(open_fed(lambda sink: sink.write(merged), source=f"{paths[0]} + {paths[1]}",
                                                   engine=engine))
        with phase(progress, "comparing the runs (graph_ann.diff)"):
            return read_diff(session, paths, config)
