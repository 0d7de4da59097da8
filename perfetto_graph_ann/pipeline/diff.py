"""``diff``: two runs (one rank each), each read, joined and converted (or a ``.pftrace`` taken as
it is), merged as the labelled groups ``base`` and ``new`` of one trace and compared in one
engine session (:mod:`perfetto_graph_ann.query.diff`; docs/design.md, "Diff").

Two fleets of ranks (a folder, a glob or a list of traces per side) are compared rank by
rank: each trace is converted and loaded alone, reduced to the few rows ``graph_ann.diff``
lists, and dropped before the next (one rank's events held at a time); the pairs of ranks of
one rank number are compared as one-rank diffs and combined by
:mod:`perfetto_graph_ann.query.diff_fleet`."""
from __future__ import annotations

import contextlib
import os
import glob as _glob
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..errors import InputError, PathLike
from ..query.diff import LABELS, DiffConfig, read_diff
from ..util.progress import phase
from ..write.perfetto.tracks import GROUP_MERGE_KEY_PREFIX

__all__ = ["diff", "diff_fleet", "fleet_traces", "DiffConfig"]

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


def _rank_trace(path: PathLike, annotations, label: str, index: int, config: DiffConfig, progress,
                keep_rank: bool = False, count: int = 2):
    """One input as a converted trace ready to merge: JSON read, joined and converted; a
    Perfetto trace (ours, one rank, not a merge) taken as it is. ``keep_rank``: its rank is
    the JSON's ``distributedInfo.rank``, None where it names none (a ``.pftrace``: None);
    else 0 on one clock (one rank against one rank)."""
    from ..formats import is_json_trace, is_pftrace_bytes, read_bytes
    from ..write.merge import RankTrace

    spath = os.fspath(path)
    if not os.path.exists(spath):
        raise InputError(spath, "no such file")
    if is_json_trace(spath):
        from ..pipeline.merge import convert_rank

        rt = convert_rank(spath, annotations, index, count, graph_lanes=config.graph_lanes, label=label,
                          progress=progress, force=config.force, named_rank_only=keep_rank)
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
        rt = RankTrace(None if keep_rank else 0, 0, data, spath, None, label)  # type: ignore[arg-type]
    if keep_rank:
        return rt
    # the runs are compared replay by replay, never on one clock: no time shift between them
    rt.base_time_ns = 0
    rt.rank = 0
    return rt


# -- the diff ------------------------------------------------------------------------------

FleetArg = Union[PathLike, Sequence[PathLike]]


def diff(base: FleetArg, new: FleetArg, base_annotations: AnnotationsArg = None, new_annotations: AnnotationsArg = None,
         config: Optional[DiffConfig] = None, engine: str = "auto", progress=None, *, common_ranks: bool = False,
         find_sidecars: bool = True, by_rank: bool = False):
    """Compare two runs (one rank each): a DataFrame, one row per graph (kind ``replay``,
    first, unranked) and per matched, new or vanished scope, lane, collective and kernel,
    ranked by the effect of its difference on replay time (``rank`` 1 = largest real one).

    When ``base`` or ``new`` is a folder, a glob or a list of traces, the two fleets of ranks
    are compared instead (:func:`diff_fleet`, which ``common_ranks``, ``find_sidecars`` and
    ``by_rank`` are for).

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
    if is_fleet(base) or is_fleet(new):
        if base_annotations is not None or new_annotations is not None:
            raise InputError(_first(base), "annotations are given per fleet by the sidecars beside its JSON traces "
                                           "(<stem>.annotations.json, .pga, .capture.json), not as arguments")
        fleet, ranks = diff_fleet(base, new, config, engine, progress, common_ranks=common_ranks,
                                  find_sidecars=find_sidecars)
        return ranks if by_rank else fleet

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


# -- two fleets ----------------------------------------------------------------------------

_GLOB_CHARS = re.compile(r"[*?[]")


def _first(arg: FleetArg) -> str:
    return os.fspath(arg) if isinstance(arg, (str, os.PathLike)) else (os.fspath(list(arg)[0]) if arg else "")


def is_fleet(arg: FleetArg) -> bool:
    """Whether a side of ``diff`` names a fleet: a folder, a glob (that names no file) or a list."""
    if not isinstance(arg, (str, os.PathLike)):
        return True
    p = os.fspath(arg)
    return os.path.isdir(p) or (not os.path.exists(p) and bool(_GLOB_CHARS.search(p)))


def fleet_traces(arg: FleetArg) -> List[Path]:
    """The traces of one side: folders searched as ``fleet`` does, globs expanded (sorted).

    Raises:
        InputError: a glob that matches nothing, a missing file, a folder without traces.
    """
    from ..query.fleet import find_traces

    items = [arg] if isinstance(arg, (str, os.PathLike)) else list(arg)
    expanded: List[str] = []
    for item in items:
        p = os.fspath(item)
        if not os.path.exists(p) and _GLOB_CHARS.search(p):
            hits = sorted(_glob.glob(p))
            if not hits:
                raise InputError(p, "matches no file")
            expanded.extend(hits)
        else:
            expanded.append(p)
    if not expanded:
        raise InputError("", "no traces given")
    return find_traces(expanded)


def _rank_rows(path: Path, count: int, index: int, config: DiffConfig, engine: str, progress, find_sidecars: bool,
               label: str = "base"):
    """(rank, replays, items) of one trace of a fleet: converted (a JSON trace, joined with the
    sidecar beside it) or taken as it is (a ``.pftrace``), loaded alone, reduced to the rows of
    ``graph_ann_diff_replay`` / ``graph_ann_diff_item``."""
    from ..query.fleet import find_sidecar, name_rank
    from ..query.session import open_fed

    spath = os.fspath(path)
    side = find_sidecar(path) if find_sidecars else None
    annotations = _annotation_set(side) if side is not None else None
    rt = _rank_trace(spath, annotations, "fleet", index, config, progress, keep_rank=True, count=count)
    rank = rt.rank if rt.rank is not None else name_rank(path)
    if rank is None:
        raise InputError(spath, "names no rank (no distributedInfo.rank, no 'rank<N>' in its file name): the ranks "
                                "of two fleets are matched by rank")
    data, rt = rt.pftrace, None
    with phase(progress, f"{label} fleet: loading and querying {path.name} ({index + 1} of {count})"):
        with open_fed(lambda sink: sink.write(data), source=spath, engine=engine) as session:
            session.query("INCLUDE PERFETTO MODULE graph_ann.diff;")
            replays = session.query_df("SELECT * FROM graph_ann_diff_replay")
            items = session.query_df("SELECT * FROM graph_ann_diff_item")
    if replays.empty:
        raise InputError(spath, "has no CUDA graph replays to compare (graph launches with GPU work)")
    for c in ("kind", "name"):  # held until its pair is read: a third less memory than strings
        items[c] = items[c].astype("category")
    return rank, replays, items


def _fleet_side(traces: List[Path], label: str, config: DiffConfig, engine: str, progress, find_sidecars: bool,
                paired: Optional[Dict[int, Tuple[str, object, object]]] = None):
    """rank -> (trace, replays, items) of one fleet; with ``paired`` (the base fleet's), each
    rank is compared with its base rank as soon as it is read, and both rows dropped: rank ->
    (trace, the one-rank diff, None).

    Raises:
        InputError: two traces of one rank, naming both.
    """
    import pandas as pd

    from ..query.diff import compare

    out: Dict[int, Tuple[str, object, object]] = {}
    for i, path in enumerate(traces):
        rank, replays, items = _rank_rows(path, len(traces), i, config, engine, progress, find_sidecars, label)
        if rank in out:
            raise InputError(os.fspath(path), f"is rank {rank} of the {label} fleet, like {out[rank][0]}: give each "
                                              "rank's trace once")
        if paired is not None and rank in paired:
            bpath, rb, ib = paired[rank]
            paired[rank] = (bpath, None, None)
            replays = compare(pd.concat([rb.assign(run="base"), replays.assign(run="new")], ignore_index=True),
                              pd.concat([ib.assign(run="base"), items.assign(run="new")], ignore_index=True), config)
            items = None
        out[rank] = (os.fspath(path), replays, items)
    return out


def _ranks_text(side: Dict[int, Tuple[str, object, object]], ranks) -> str:
    return ", ".join(f"{r} ({side[r][0]})" for r in sorted(ranks))


def diff_fleet(base: FleetArg, new: FleetArg, config: Optional[DiffConfig] = None, engine: str = "auto",
               progress=None, *, common_ranks: bool = False, find_sidecars: bool = True):
    """Compare two fleets of ranks, rank by rank (rank ``r`` of ``base`` with rank ``r`` of ``new``).

    Args:
        base: the reference fleet: a folder of traces, a glob, or a list of traces (and folders).
        new: the fleet to compare with it, likewise.
        config: the one-rank diff's :class:`DiffConfig`, applied to each pair of ranks.
        engine: the trace processor engine (``auto``, ``native``, ``portable``).
        progress: a :class:`~perfetto_graph_ann.util.progress.Progress`.
        common_ranks: compare only the ranks both fleets have (else they must have the same).
        find_sidecars: join each JSON trace with the sidecar beside it (``<stem>.annotations.json``,
            ``.pga``, ``.capture.json``).

    Returns:
        (fleet frame, by-rank frame) of :func:`~perfetto_graph_ann.query.diff_fleet.compare_fleet`.

    Raises:
        InputError: a missing or malformed trace, a trace naming no rank (no
            ``distributedInfo.rank``, no ``rank<N>`` in its file name), two traces of one rank,
            fleets with different ranks (unless ``common_ranks``; naming the files of the
            ranks one fleet lacks), no common rank, a trace without graph replays.
    """
    from ..query.diff_fleet import compare_fleet

    config = config or DiffConfig()
    base_paths, new_paths = fleet_traces(base), fleet_traces(new)
    # the base fleet's rows are held; each new rank is compared with its base rank when read
    b = _fleet_side(base_paths, "base", config, engine, progress, find_sidecars)
    n = _fleet_side(new_paths, "new", config, engine, progress, find_sidecars, paired=b)
    only_b, only_n = sorted(set(b) - set(n)), sorted(set(n) - set(b))
    if (only_b or only_n) and not common_ranks:
        parts = ([f"ranks only in the base fleet: {_ranks_text(b, only_b)}"] if only_b else []) + \
                ([f"ranks only in the new fleet: {_ranks_text(n, only_n)}"] if only_n else [])
        raise InputError(_first(base), "the two fleets have different ranks; " + "; ".join(parts)
                         + " (--common-ranks / common_ranks=True compares the ranks both have)")
    common = sorted(set(b) & set(n))
    if not common:
        raise InputError(_first(base), f"the two fleets have no rank in common (base {sorted(b)}, new {sorted(n)})")
    fleet, by_rank = compare_fleet({r: n[r][1] for r in common}, config)
    for df in (fleet, by_rank):
        df.attrs["ranks"] = common
        df.attrs["base"] = [b[r][0] for r in common]
        df.attrs["new"] = [n[r][0] for r in common]
    return fleet, by_rank
