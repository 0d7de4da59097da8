"""GPU projection: graph replays and scope instances as time ranges on the GPU timeline.

For every joined replay, one range from its first GPU start to its last GPU end; for every
scope instance (see :mod:`..annotations.scope_instances`) in every replay, one range from the
earliest start to the latest end of the GPU work captured inside it, across all lanes.
Only events the join matched to a node count toward a scope, whichever strategy matched
them; a replay whose graph the join could not tell is left out (no guessed name).

Ambiguous matches (the structural join's equal-signature nodes) are trusted only as far
as they cannot change a range: if every node the event could be has the same enclosing
instances, it counts; otherwise the instances that differ between the candidates are
not drawn for that replay (the two-branch block's identical GEMMs: ``left_projection``
and ``right_projection`` are left out, ``combine`` is drawn). A match that is ambiguous
because two graphs fit equally drops the whole replay's projection; so does a replay whose
every match is ambiguous when the set has several graphs (the join folds a tie between
graphs into the matches' ambiguity, so the graph itself may be a guess).

Replays that overlap on one GPU: membership comes from correlation ids, never from time, so
each range covers its own replay's work only; each scope range names the range it is drawn
inside (:attr:`GpuRange.parent`) so the writer never nests it in another replay's scope. A
replay not wholly in the trace (cut by the profiling window) or without its launch (so
without a number) is left out; ``JoinReport.unprojected_replays`` counts what was left out.
"""
from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .. import settings
from ..annotations.model import GPU_WORK_NODE_TYPES, AnnotationSet
from ..annotations.scope_instances import graph_scopes, path_of, scope_label
from .match import Match, signature
from .model import JoinReport
from .replays import Replay

__all__ = ["busy_ns", "GpuRange", "Pieces", "project", "REASON_GRAPH_GUESS", "REASON_NO_LAUNCH", "REASON_PARTIAL",
           "REASON_SCOPE_GUESS", "replay_ranges", "REPLAY", "REPLAY_CATEGORY", "REPLAYS_TRACK", "SCOPE",
           "SCOPE_CATEGORY", "SCOPES_TRACK"]

try:  # the projection's per-event loop and busy_ns in C (_rows.c, built by hatch_build.py): the same ranges
    from ._rows import busy_ns as _compiled_busy_ns, collect_work as _compiled_collect_work
except ImportError:
    _compiled_collect_work = _compiled_busy_ns = None
#: (:func:`_collect_work`'s loop, :func:`busy_ns`) in C, or None where they are not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loops then)
LOOPS = None if settings.switch(settings.PURE_PYTHON) or _compiled_collect_work is None else (
    _compiled_collect_work, _compiled_busy_ns)

_end = itemgetter(1)

REPLAY = "replay"
SCOPE = "scope"
#: track name of the replays under each GPU
REPLAYS_TRACK = "graph replays"
SCOPES_TRACK = "scopes"
#: Kineto-style categories of the written slices (the SQL package selects them by these)
REPLAY_CATEGORY = "graph_replay"
SCOPE_CATEGORY = "gpu_scope"


class GpuRange(NamedTuple):
    """One slice the Perfetto writer adds under ``GPU <device>``.

    ``track`` is the track name (``graph replays`` or ``scopes``); ``launch`` is the trace
    index of the replay's CPU launch (a flow starts there), replays only. Ranges come in
    replay order, each replay's scopes parents first: the writer keeps that order for ranges
    with equal start and end, so a parent encloses its child.
    """

    kind: str
    device: int
    track: str
    ts: int
    dur: int
    name: str
    args: Mapping[str, Any]
    launch: Optional[int] = None
    #: index in the projection's list of the range this one is drawn inside: a scope's nearest
    #: drawn enclosing scope of the same replay; None for replays and outermost scopes, which
    #: the writer never draws inside another range (concurrent replays overlap in time)
    parent: Optional[int] = None

    @property
    def category(self) -> str:
        return REPLAY_CATEGORY if self.kind == REPLAY else SCOPE_CATEGORY


def busy_ns(intervals: List[Tuple[int, int]]) -> int:
    """Length of the union of ``(start, end)`` intervals, given sorted by start."""
    if LOOPS is not None:
        got = LOOPS[1](intervals)
        if got is not None:  # else not a list of int pairs within int64: the loop below
            return got
    total = 0
    cur_s = cur_e = None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _uncertain(events: Sequence[Any], matches: Mapping[int, Match], per_node: Mapping[int, Tuple[int, ...]],
               groups: Mapping[Tuple, List[int]]) -> Optional[set]:
    """Instances an ambiguous match could put a kernel in or out of; None when a match is
    ambiguous between graphs (its node's signature is unique within the graph)."""
    out: set = set()
    for e in events:
        m = matches.get(e.index)
        if m is None or not m.ambiguous:
            continue
        cands = groups.get(signature(m.node, False), ())
        if len(cands) <= 1:
            return None
        chains = [set(per_node.get(k, ())) for k in cands]
        out |= set.union(*chains) - set.intersection(*chains)
    return out


class _GraphInfo(NamedTuple):
    """What :func:`project` needs of one graph, computed once per graph."""

    per_node: Dict[int, Tuple[int, ...]]  #: node key -> instance ids around it
    groups: Dict[Tuple, List[int]]  #: loose signature -> node keys (for ambiguous matches)
    #: instance id -> (depth, id, label, path, module class or None); sorts parents first
    labels: Dict[int, Tuple[int, int, str, str, Optional[str]]]
    ancestors: Dict[int, Tuple[int, ...]]  #: instance id -> enclosing instance ids, innermost first
    gpu_nodes: frozenset  #: keys of the graph's GPU-work nodes: what a whole replay runs


def _graph_info(g: Any) -> _GraphInfo:
    instances, per_node = graph_scopes(g)
    groups: Dict[Tuple, List[int]] = {}
    for n in g.nodes:
        if n.type in GPU_WORK_NODE_TYPES:
            groups.setdefault(signature(n, False), []).append(n.key)
    labels = {}
    ancestors = {}
    for iid in instances:
        chain = path_of(instances, iid)
        names = [scope_label(s.fields) for s in chain]
        cls = chain[-1].fields.get("module_class")
        labels[iid] = (len(chain) - 1, iid, names[-1], " / ".join(names), cls if isinstance(cls, str) else None)
        ancestors[iid] = tuple(s.id for s in reversed(chain[:-1]))
    gpu_nodes = frozenset(k for keys in groups.values() for k in keys)
    return _GraphInfo(per_node, groups, labels, ancestors, gpu_nodes)


#: Why a replay the join labelled has no ranges (``JoinReport.unprojected_replays`` keys).
REASON_PARTIAL = ("not all of its graph's GPU work is in the trace or matched (a replay cut by the profiling "
                  "window): its span is not known")
REASON_NO_LAUNCH = ("its graph launch is not in the trace (launched before the profiling window): its number "
                    "among the graph's replays is not known")
REASON_GRAPH_GUESS = "the join could not tell which of several graphs replayed"
#: Why scope instances of a drawn replay are left out (``JoinReport.unprojected_scopes`` keys).
REASON_SCOPE_GUESS = "identical kernels of different scopes could not be told apart"


def project(replays: Sequence[Replay], matches: Mapping[int, Match], replay_graph: Mapping[int, Optional[int]],
            replay_index: Mapping[int, int], annotations: AnnotationSet,
            report: Optional[JoinReport] = None,
            replay_candidates: Optional[Mapping[int, Sequence[int]]] = None,
            made: Optional[Callable[..., Optional["Pieces"]]] = None) -> List[GpuRange]:
    """Replay and scope ranges of every joined replay, in replay order.

    A replay is drawn only when every GPU-work node of its graph was matched to one of its
    events: a replay cut by the profiling window (or with nodes no strategy matched) has no
    known span, and its scopes may miss kernels, so it gets no range at all. Which events
    belong to a replay is never a question of time: they share their graph launch's
    correlation (:func:`..replays.find_replays`), so replays that overlap on the GPU, and
    eager work between their kernels, do not mix. ``report``: what was left out and why
    (``unprojected_replays``, ``unprojected_scopes``).

    Replay args: graph id, replay, kernel count, busy ns, launch latency ns (the span is
    the slice's duration, the graph's name its name, the device its track's). Scope args:
    graph id and replay (only where the replay is not implied, see
    :func:`_drop_implied_replay`), scope path (nested scopes only: at the top level it is
    the name), kernel count, busy ns. ``busy ns`` only where it differs from the span (a
    single kernel's scope: never). Few on purpose: there is one scope slice per scope and
    replay.

    ``replay_candidates``: replay correlation -> the graphs a replay may be, where the join
    could not tell which. Such a replay is drawn, when whole, as one slice named by its
    candidates (``A | B``, arg ``graph candidates``; no graph id or replay number) and
    without scopes: its span is known, its graph is not.

    ``made(replay, graph id, its number, several_graphs)``: a replay's :func:`replay_ranges`
    made before the trace was whole (:mod:`.ahead`), or None; used as made here.
    """
    graphs = {g.exec_id: g for g in annotations.graphs}
    several_graphs = len(graphs) > 1
    cache: Dict[int, _GraphInfo] = {}
    out: List[GpuRange] = []
    skipped: Dict[str, int] = {}
    skipped_scopes: Dict[str, int] = {}
    for r in replays:
        gid = replay_graph.get(r.correlation)
        g = graphs.get(gid) if gid is not None else None
        if g is None:
            cands = (replay_candidates or {}).get(r.correlation)
            if cands:
                _project_candidates(r, [graphs[c] for c in cands], cache, out, skipped)
            continue
        if r.correlation not in replay_index:  # numbered only with its launch (see join)
            _count(skipped, REASON_NO_LAUNCH)
            continue
        idx = replay_index[r.correlation]
        got = made(r, gid, idx, several_graphs) if made is not None else None
        if got is None:
            info = cache.get(gid)
            if info is None:
                info = cache[gid] = g.derived(_graph_info)
            got = replay_ranges(r, g, idx, info, matches, several_graphs)
        why, pieces, scope_skips = got
        if why is not None:
            if why:
                _count(skipped, why)
            continue
        base = len(out)
        for piece in pieces:
            if piece[8] is not None:
                piece = piece[:8] + (piece[8] + base,)
            out.append(_as_range(GpuRange, piece))
        for why, n in scope_skips.items():
            skipped_scopes[why] = skipped_scopes.get(why, 0) + n
    _drop_implied_replay(out)
    if report is not None:
        report.unprojected_replays = skipped
        report.unprojected_scopes = skipped_scopes
    return out


def _count(counts: Dict[str, int], why: str) -> None:
    counts[why] = counts.get(why, 0) + 1


#: A replay's part of the projection (:func:`replay_ranges`): why it is not drawn (None: drawn;
#: "": nothing to draw, no reason counted), its ranges as :class:`GpuRange` fields whose
#: ``parent`` counts from the replay's own first range, and its scopes left out by reason.
Pieces = Tuple[Optional[str], List[Tuple], Dict[str, int]]
_as_range = tuple.__new__  # a GpuRange from its nine fields, without the keyword parsing


def replay_ranges(r: Replay, g: Any, idx: int, info: _GraphInfo, matches: Mapping[int, Match],
                  several_graphs: bool) -> Pieces:
    """One joined replay's ranges (:func:`project`'s work on it): the replay's own range, then its
    scopes', parents first; what matters of the rest of the trace is its number ``idx`` among
    its graph's replays and whether the set has ``several_graphs``."""
    timed = [e for e in r.events if e.ts_ns is not None]  # sorted by start (find_replays)
    if not timed:
        return "", [], {}
    work = _collect_work(timed, matches, info.per_node)
    why = _why_not_drawn(r, timed, work, info, matches, several_graphs)
    if why is not None:
        return why, [], {}
    device = r.device if r.device is not None else 0
    pieces = [_replay_range(r, g, g.exec_id, idx, device, work.intervals)]
    skips: Dict[str, int] = {}
    _scope_ranges(work.per_scope, info, g.exec_id, idx, device, work.uncertain, pieces, skips)
    return None, pieces, skips


class _ReplayWork:
    """One replay's timed GPU work, as :func:`_collect_work` gathers it: every interval in
    start order, the intervals of each scope instance, and what the matches say."""

    __slots__ = ("intervals", "per_scope", "ambiguous", "seen", "matched", "uncertain")

    def __init__(self) -> None:
        self.intervals: List[Tuple[int, int]] = []
        self.per_scope: Dict[int, List[Tuple[int, int]]] = {}  # scope instance id -> intervals
        self.ambiguous: List[Any] = []  # events whose match was a guess
        self.seen: set = set()  # node keys matched
        self.matched = 0
        self.uncertain: Any = ()  # scope instances a guess may have mislabelled (set by _why_not_drawn)


def _collect_work(timed: Sequence[Any], matches: Mapping[int, Match],
                  per_node: Mapping[Any, Tuple[int, ...]]) -> _ReplayWork:
    """Phase 1 of a replay: one pass over its timed events (the hot loop of the projection)."""
    work = _ReplayWork()
    if LOOPS is not None and type(timed) is list and type(matches) is dict and type(per_node) is dict:
        work.matched = LOOPS[0](timed, matches, per_node, (work.intervals, work.per_scope, work.ambiguous, work.seen))
        return work
    add_iv = work.intervals.append
    acc = work.per_scope
    get_acc = acc.get
    get_iids = per_node.get
    get_match = matches.get
    seen = work.seen
    matched = 0
    for e in timed:
        t0 = e.ts_ns
        iv = (t0, t0 + (e.dur_ns or 0))
        add_iv(iv)
        m = get_match(e.index)
        if m is None:
            continue
        matched += 1
        seen.add(m.node.key)
        if m.ambiguous:
            work.ambiguous.append(e)
        for iid in get_iids(m.node.key, ()):
            lst = get_acc(iid)
            if lst is None:
                acc[iid] = [iv]
            else:
                lst.append(iv)
    work.matched = matched
    return work


def _why_not_drawn(r: Replay, timed: Sequence[Any], work: _ReplayWork, info: _GraphInfo,
                   matches: Mapping[int, Match], several_graphs: bool) -> Optional[str]:
    """Phase 2: the reason a replay gets no range (cut, or its graph a guess), else None;
    sets ``work.uncertain``, the scope instances it draws without."""
    if len(timed) < len(r.events) or not info.gpu_nodes <= work.seen:
        return REASON_PARTIAL
    ambiguous = work.ambiguous
    uncertain = _uncertain(ambiguous, matches, info.per_node, info.groups) if ambiguous else ()
    if uncertain is None or (several_graphs and work.matched and len(ambiguous) == work.matched):
        return REASON_GRAPH_GUESS  # the graph itself may be a guess: no name, no ranges
    work.uncertain = uncertain
    return None


def _replay_range(r: Replay, g: Any, gid: int, idx: int, device: int, ivs: List[Tuple[int, int]]) -> Tuple:
    """Phase 3: the replay's own range (its args: see :func:`project`)."""
    start = ivs[0][0]
    end = max(map(_end, ivs))
    args: Dict[str, Any] = {"graph id": gid, "replay": idx, "kernel count": len(ivs)}
    busy = busy_ns(ivs)
    if busy != end - start:
        args["busy ns"] = busy
    launch = r.launch
    if launch is not None and launch.ts_ns is not None:
        args["launch latency ns"] = start - launch.ts_ns
    return (REPLAY, device, REPLAYS_TRACK, start, end - start, f"{g.display_name} #{idx}", args,
            launch.index if launch is not None else None, None)


def _scope_ranges(acc: Dict[int, List[Tuple[int, int]]], info: _GraphInfo, gid: int, idx: int, device: int,
                  uncertain: Any, out: List[Tuple], skipped_scopes: Dict[str, int]) -> None:
    """Phase 4: the replay's scope ranges (GpuRange fields; ``parent`` an index in ``out``),
    parents first, each nested in its innermost drawn ancestor; the scopes a guess may have
    mislabelled are left out (counted)."""
    labels = info.labels
    drawn: Dict[int, int] = {}  # instance id -> its index in out
    for iid in sorted(acc, key=labels.__getitem__):  # parents (lower depth) first
        if iid in uncertain:
            _count(skipped_scopes, REASON_SCOPE_GUESS)
            continue
        spans = acc[iid]
        depth, _, label, path, module_class = labels[iid]
        sargs: Dict[str, Any] = {"graph id": gid, "replay": idx}
        if depth:
            sargs["scope path"] = path
        if module_class is not None:
            sargs["module class"] = module_class
        sargs["kernel count"] = len(spans)
        if len(spans) == 1:
            s, t = spans[0]
        else:
            s = spans[0][0]
            t = max(map(_end, spans))
            busy = busy_ns(spans)
            if busy != t - s:
                sargs["busy ns"] = busy
        parent = None
        for a in info.ancestors.get(iid, ()):  # innermost first; an uncertain one is not drawn
            parent = drawn.get(a)
            if parent is not None:
                break
        drawn[iid] = len(out)
        out.append((SCOPE, device, SCOPES_TRACK, s, t - s, label, sargs, None, parent))


def _project_candidates(r: Replay, cands: Sequence[Any], cache: Dict[int, _GraphInfo], out: List[GpuRange],
                        skipped: Dict[str, int]) -> None:
    """The slice of a replay that may be any of ``cands``: drawn when every candidate has as
    many GPU-work nodes as the replay has events and all are timed (else it may be cut)."""
    timed = [e for e in r.events if e.ts_ns is not None]
    whole = len(timed) == len(r.events)
    for g in cands:
        info = cache.get(g.exec_id)
        if info is None:
            info = cache[g.exec_id] = g.derived(_graph_info)
        whole = whole and len(info.gpu_nodes) == len(r.events)
    if not whole or r.launch is None:
        why = REASON_PARTIAL if r.launch is not None else REASON_NO_LAUNCH
        skipped[why] = skipped.get(why, 0) + 1
        return
    ivs = sorted((e.ts_ns, e.ts_ns + (e.dur_ns or 0)) for e in timed)
    start, end = ivs[0][0], max(map(_end, ivs))
    names = " | ".join(g.display_name for g in cands)
    args: Dict[str, Any] = {"graph candidates": names, "kernel count": len(ivs)}
    busy = busy_ns(ivs)
    if busy != end - start:
        args["busy ns"] = busy
    if r.launch.ts_ns is not None:
        args["launch latency ns"] = start - r.launch.ts_ns
    out.append(GpuRange(REPLAY, r.device if r.device is not None else 0, REPLAYS_TRACK, start, end - start, names,
                        args, r.launch.index))


def _drop_implied_replay(ranges: List[GpuRange]) -> None:
    """Leave ``graph id`` and ``replay`` off the scope ranges whose replay is implied.

    A scope range's replay is implied when, of the replay ranges on its device, the one that
    starts last at or before the scope's start is its own and no other starts at that same
    time: the SQL module (``graph_ann.scopes``) takes the identity from that replay range.
    The args stay on every scope of a replay that overlaps another replay on its device, even
    where the rule would find it: in the UI such a scope has several replays above it. About a
    fifth of the projection's bytes on a trace of small scopes.
    """
    starts: Dict[int, List[Tuple[int, int]]] = {}
    for k, r in enumerate(ranges):
        if r.kind == REPLAY:
            starts.setdefault(r.device, []).append((r.ts, k))
    keys = {}
    concurrent = set()  # indices of replay ranges that overlap another on their device
    for device, lst in starts.items():
        lst.sort()
        keys[device] = [t for t, _ in lst]
        reach = None  # latest end of the earlier replays
        for j, (t, k) in enumerate(lst):
            end = t + ranges[k].dur
            if (reach is not None and t < reach) or (j + 1 < len(lst) and lst[j + 1][0] < end):
                concurrent.add(k)
            reach = end if reach is None else max(reach, end)
    owner = -1
    for k, r in enumerate(ranges):
        if r.kind == REPLAY:
            owner = k
            lst = starts[r.device]
            ts = keys[r.device]
            continue
        if owner in concurrent:
            continue
        at = bisect_right(ts, r.ts) - 1
        if at >= 0 and lst[at][1] == owner and not (at and ts[at - 1] == ts[at]):
            args = r.args  # built by project() for this range alone
            del args["graph id"], args["replay"]
