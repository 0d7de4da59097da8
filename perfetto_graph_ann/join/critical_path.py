"""The critical path of a graph replay: the chain of dependent GPU work that ends last.

Pure Python, on measured times. A replay's *items* are its GPU work events (kernels,
memcpys, memsets) with their measured start and end; its *dependencies* are the graph's
edges recorded at capture (:attr:`~..annotations.model.GraphRecord.edges`, contracted to
GPU-work nodes: an edge through an empty / event / host node links the work on either side),
or, where no edges were recorded (traces and sidecars of other tools, older sidecars), the
stream order: each item depends on the previous item on its stream (``SOURCE_STREAM``; said
so in every result, as ``edges_source`` in SQL).

The path is found backwards: start at the item that ends last (ties: the earlier start,
then the lowest trace index), step to the predecessor that ended last (the one that
released it; ties likewise), until an item without predecessors. A predecessor that ends
after its dependent (overlap through a programmatic edge, clock jitter) does not gate it
and is ignored, here and in the slack. Each path item's *share* is the part of the path it
covers, ``end - max(start, release)``, and its *wait* the gap before it, ``max(0, start -
release)``, where ``release`` is its predecessor's end, or for the first item the replay's
start as the caller gives it (the join: the graph launch's start, so the launch-to-first-
kernel gap is the first wait; ``graph_ann.critical_path`` in SQL: the launch's start or,
where the GPU was still busy with earlier work then, that work's end). Shares and waits
add up to ``end of the last item - start`` exactly.

*Slack* of an item: how much later it could end before the replay ends later, when every
item starts its measured lag after the last of its (gating) predecessors ends:
``slack(i) = min over successors s of (release(s) - end(i) + slack(s))``, and for an item
without successors ``replay end - end(i)``. Items on the path have slack 0.

Wait and host nodes leave no event in a profile: their time is in the waits.
"""
from __future__ import annotations

import heapq
from array import array
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .. import settings
from ..annotations.model import GPU_WORK_NODE_TYPES, GraphRecord
from .model import PATH_ARG, SLACK_ARG, set_path_arg, set_path_args

__all__ = ["CriticalPath", "CycleError", "EDGE_FLOWS_MAX", "Item", "PATH_AND_SLACK", "PATH_ARG", "PathItem",
           "REPLAY_PATH", "SLACK_ARG",
           "SOURCE_EDGES", "SOURCE_STREAM", "annotate_replays", "critical_path", "edges_path", "replay_edges",
           "stream_order_path", "work_predecessors"]

try:  # the path and slack of one replay in C (join/_rows.c, built by hatch_build.py): the same path
    from ._rows import path_and_slack as _compiled_path_and_slack
    from ._rows import replay_path as _compiled_replay_path
except ImportError:
    _compiled_path_and_slack = _compiled_replay_path = None
#: :func:`critical_path`'s computation in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loops then)
PATH_AND_SLACK = None if settings.switch(settings.PURE_PYTHON) else _compiled_path_and_slack
#: :func:`annotate_replays`' work on one replay in C (its items, :func:`edges_path` and the args'
#: values in columns), or None as :data:`PATH_AND_SLACK`
REPLAY_PATH = None if settings.switch(settings.PURE_PYTHON) else _compiled_replay_path

#: ``edges_source`` of a path computed on the graph's recorded dependency edges
SOURCE_EDGES = "edges"
#: ``edges_source`` of a path computed on stream order (no edges recorded)
SOURCE_STREAM = "stream order"


class Item(NamedTuple):
    """One GPU work event of a replay, as the path needs it."""

    index: int  #: trace event index
    start: int  #: ns
    end: int  #: ns
    stream: Optional[int] = None  #: the hardware stream it ran on (stream order)
    node: Optional[int] = None  #: its graph node's local id (edges)


class PathItem(NamedTuple):
    """One item of a critical path."""

    index: int  #: trace event index
    start: int
    end: int
    share_ns: int  #: the part of the path it covers: ``end - max(start, release)``
    wait_ns: int  #: the gap before it: ``max(0, start - release)``


class CriticalPath(NamedTuple):
    """The critical path of one replay."""

    source: str  #: :data:`SOURCE_EDGES` or :data:`SOURCE_STREAM`
    start_ns: int  #: the replay's start (its launch, else its first GPU start)
    end_ns: int  #: the end of the last item
    items: Tuple[PathItem, ...]  #: first to last
    slack: Dict[int, int]  #: trace event index -> slack ns, for every item of the replay

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class CycleError(ValueError):
    """The recorded edges of a graph form a cycle (a graph the driver would not run)."""


def work_predecessors(graph: GraphRecord) -> Tuple[Dict[int, Tuple[int, ...]], Dict[int, int]]:
    """Per GPU-work node (local id): its nearest GPU-work predecessors, through nodes that do no
    GPU work; and a topological rank per GPU-work node. Needs ``graph.edges``.

    Raises :class:`CycleError` when the edges are not a DAG.
    """
    assert graph.edges is not None
    types = {n.local_id: n.type for n in graph.nodes}
    preds: Dict[int, List[int]] = {k: [] for k in types}
    succs: Dict[int, List[int]] = {k: [] for k in types}
    for e in graph.edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    indeg = {k: len(v) for k, v in preds.items()}
    ready = [k for k, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:  # Kahn, lowest local id first among the ready (creation order where it is free)
        k = heapq.heappop(ready)
        order.append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    if len(order) != len(types):
        raise CycleError(f"the recorded edges of {graph.display_name} form a cycle")
    through: Dict[int, frozenset] = {}  # node -> the GPU-work nodes it stands for, seen from below
    out: Dict[int, Tuple[int, ...]] = {}
    rank: Dict[int, int] = {}
    for k in order:
        seen = frozenset().union(*(through[p] for p in preds[k])) if preds[k] else frozenset()
        if types[k] in GPU_WORK_NODE_TYPES:
            out[k] = tuple(sorted(seen))
            rank[k] = len(rank)
            through[k] = frozenset((k,))
        else:
            through[k] = seen
    return out, rank


def critical_path(items: Sequence[Item], preds: Sequence[Sequence[int]], rank: Sequence[int],
                  start_ns: Optional[int], source: str) -> Optional[CriticalPath]:
    """The path over ``items`` given each item's predecessors (positions in ``items``) and a
    rank per item that orders every predecessor before its dependents. ``start_ns``: the
    replay's start (its launch); None: the first item's start. None for no items."""
    n = len(items)
    if not n:
        return None
    ends = [it.end for it in items]
    first = min(it.start for it in items)
    start = first if start_ns is None else start_ns
    if PATH_AND_SLACK is not None:  # the same computation in C (None: inputs it does not take)
        got = PATH_AND_SLACK([it.start for it in items], ends, [it.index for it in items], preds, rank, start)
        if got is not None:
            positions, releases, slacks = got
            path = tuple(PathItem(items[i].index, items[i].start, ends[i], ends[i] - max(items[i].start, rel),
                                  max(0, items[i].start - rel)) for i, rel in zip(positions, releases))
            return CriticalPath(source, start, ends[positions[-1]], path,
                                {it.index: v for it, v in zip(items, slacks)})
    # gating predecessors: those that end no later than the item
    gating = [[p for p in preds[i] if ends[p] <= ends[i]] for i in range(n)]

    def later(a: int, b: int) -> int:  # the later-ending of two positions (ties: earlier start, lower index)
        ka, kb = ends[a], ends[b]
        if ka != kb:
            return a if ka > kb else b
        sa, sb = items[a].start, items[b].start
        if sa != sb:
            return a if sa < sb else b
        return a if items[a].index <= items[b].index else b

    sink = 0
    for i in range(1, n):
        sink = later(sink, i)
    chain: List[Tuple[int, int]] = []  # (position, release)
    cur = sink
    while True:
        g = gating[cur]
        if not g:
            chain.append((cur, start))
            break
        p = g[0]
        for q in g[1:]:
            p = later(p, q)
        chain.append((cur, ends[p]))
        cur = p
    chain.reverse()
    path = tuple(PathItem(items[i].index, items[i].start, ends[i], ends[i] - max(items[i].start, rel),
                          max(0, items[i].start - rel)) for i, rel in chain)

    end = ends[sink]
    release = [max((ends[p] for p in g), default=None) for g in gating]
    succs: List[List[int]] = [[] for _ in range(n)]
    for i, g in enumerate(gating):
        for p in g:
            succs[p].append(i)
    slack = [0] * n
    for i in sorted(range(n), key=lambda i: (ends[i], rank[i]), reverse=True):
        s = succs[i]
        if not s:
            slack[i] = end - ends[i]
        else:
            slack[i] = min(release[j] - ends[i] + slack[j] for j in s)
    return CriticalPath(source, start, end, path, {items[i].index: slack[i] for i in range(n)})


def stream_order_path(items: Iterable[Item], start_ns: Optional[int]) -> Optional[CriticalPath]:
    """The path when no edges are known: each item depends on the previous item (by start,
    then trace index) on its stream."""
    items = sorted(items, key=lambda it: (it.start, it.index))
    last: Dict[Optional[int], int] = {}
    preds: List[Tuple[int, ...]] = []
    for i, it in enumerate(items):
        p = last.get(it.stream)
        preds.append(() if p is None else (p,))
        last[it.stream] = i
    return critical_path(items, preds, range(len(items)), start_ns, SOURCE_STREAM)


def edges_path(items: Sequence[Item], work_preds: Mapping[int, Tuple[int, ...]], rank: Mapping[int, int],
               start_ns: Optional[int]) -> Optional[CriticalPath]:
    """The path on a graph's edges (:func:`work_predecessors`). Every item needs its ``node``,
    each node at most once: one replay's work. Raises ``ValueError`` otherwise."""
    pos: Dict[int, int] = {}
    for i, it in enumerate(items):
        if it.node is None or it.node in pos or it.node not in work_preds:
            raise ValueError(f"event {it.index}: no graph node, or one seen twice, or not GPU work of the graph")
        pos[it.node] = i
    preds = [tuple(pos[p] for p in work_preds[it.node] if p in pos) for it in items]
    return critical_path(items, preds, [rank[it.node] for it in items], start_ns, SOURCE_EDGES)


def replay_edges(items: Sequence[Item], work_preds: Mapping[int, Tuple[int, ...]]) -> List[Tuple[int, int]]:
    """The replay's dependencies as (trace index of the predecessor, trace index of the
    dependent), contracted to its GPU work: what the timeline draws as flows."""
    return _edges_of([it.index for it in items], [it.node for it in items], work_preds)


def _edges_of(indices: Sequence[int], nodes: Sequence[int],
              work_preds: Mapping[int, Tuple[int, ...]]) -> List[Tuple[int, int]]:
    """:func:`replay_edges` of a replay's events given as their trace indices and nodes, in order."""
    by_node = dict(zip(nodes, indices))
    return [(by_node[p], i) for i, n in zip(indices, nodes) for p in work_preds.get(n, ()) if p in by_node]


#: Most dependency flows one trace gets (``join(edge_flows=True)``); above it none are written
#: and the report says so. Measured (BENCHMARKS.md, "critical path"): 1.01M flows made the
#: .pftrace 20% larger and loaded as fast as without them; the cap is just above the largest
#: size measured, not a size that was seen to fail.
EDGE_FLOWS_MAX = 1_200_000
#: ``JoinReport.critical_paths`` keys besides the sources
REASON_NO_EDGES = "stream order: no edges recorded for the graph (computed by graph_ann.critical_path in SQL)"
REASON_AMBIGUOUS = "not computed: kernels of the replay could not be told apart (ambiguous match)"
REASON_CYCLE = "not computed: the graph's recorded edges form a cycle"


def annotate_replays(replays: Sequence[Any], matches: Mapping[int, Any], replay_graph: Mapping[int, Optional[int]],
                     ranges: Sequence[Any], graphs: Mapping[int, GraphRecord], placements: Mapping[int, Any],
                     counts: Dict[str, int], edge_flows: bool = False,
                     made: Optional[Callable[[Any, int], Any]] = None) -> List[Tuple[int, int]]:
    """The join's hook: on every drawn replay (one with a ``graph replays`` range) whose graph
    has recorded edges, mark the path's events (:data:`PATH_ARG`) and give the others their
    slack (:data:`SLACK_ARG`) in their placement args. ``counts``: replays by source or
    reason left out. Returns the dependency flows (trace index pairs) when ``edge_flows``.

    Replays whose graph has no recorded edges get no args: the SQL module computes their
    stream-order path from the trace alone, as it does for traces of other tools.
    ``made(replay, graph id)``: :data:`REPLAY_PATH`'s result for that replay made before the
    trace was whole (:mod:`.ahead`), or None.
    """
    drawn = {r.launch for r in ranges if r.kind == "replay" and r.launch is not None and "graph id" in r.args}
    cache: Dict[int, Any] = {}
    flows: List[Tuple[int, int]] = []
    for r in replays:
        gid = replay_graph.get(r.correlation)
        if gid is None or r.launch is None or r.launch.index not in drawn:
            continue
        g = graphs.get(gid)
        if g is None:
            continue
        if g.edges is None:
            counts[REASON_NO_EDGES] = counts.get(REASON_NO_EDGES, 0) + 1
            continue
        if gid not in cache:
            try:
                cache[gid] = g.derived(work_predecessors)
            except CycleError:
                cache[gid] = None
        wp = cache[gid]
        if wp is None:
            counts[REASON_CYCLE] = counts.get(REASON_CYCLE, 0) + 1
            continue
        if REPLAY_PATH is not None:
            got = made(r, gid) if made is not None else None
            if got is None:
                got = REPLAY_PATH(r.events, matches, wp[0], wp[1], r.launch.ts_ns)
            if got is not None:  # else: inputs it does not take, Python's loop below
                key = SOURCE_EDGES if got else REASON_AMBIGUOUS
                counts[key] = counts.get(key, 0) + 1
                if got:
                    indices = array("q", got[0])
                    set_path_args(placements, indices, array("q", got[1]))
                    if edge_flows:
                        flows.extend(_edges_of(indices, array("q", got[2]), wp[0]))
                continue
        items = []
        for e in r.events:
            m = matches.get(e.index)
            if m is None or m.ambiguous or e.ts_ns is None:
                items = None
                break
            items.append(Item(e.index, e.ts_ns, e.ts_ns + (e.dur_ns or 0), e.stream, m.node.local_id))
        if not items:
            counts[REASON_AMBIGUOUS] = counts.get(REASON_AMBIGUOUS, 0) + 1
            continue
        try:
            cp = edges_path(items, wp[0], wp[1], r.launch.ts_ns)
        except ValueError:
            counts[REASON_AMBIGUOUS] = counts.get(REASON_AMBIGUOUS, 0) + 1
            continue
        on_path = {it.index for it in cp.items}
        slack = cp.slack
        for it in items:
            i = it.index
            set_path_arg(placements, i, i in on_path, slack[i])
        counts[SOURCE_EDGES] = counts.get(SOURCE_EDGES, 0) + 1
        if edge_flows:
            flows.extend(replay_edges(items, wp[0]))
    return flows
