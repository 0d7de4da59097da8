"""What the join derives from each graph alone, built before the trace is there.

The join keeps, per graph record (:meth:`~..annotations.model.GraphRecord.derived`), values that
depend on the graph only: the loose node counts of the structural fit, the calibration table,
the scope info of the projection, and the predecessors on its edges for the critical path. A
process exporting each cycle builds them once; a conversion worker loads its records afresh and
would build them after torch's JSON, on the caller's wait. :func:`prepare_graphs` builds them
ahead: the worker calls it while torch is still writing the profile it follows.

The join's work on each replay alone is made then too, whenever the worker's reader waits for
torch (:class:`JoinAhead`), and kept with what it was made from (:class:`Made`): the join takes
a replay's results only where that replay is exactly what they were made from, and makes the
rest itself, so what it writes does not change.
"""
from __future__ import annotations

from itertools import islice
from operator import attrgetter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..annotations.model import AnnotationSet, GraphRecord
from . import calibrated, critical_path, projection
from .calibrated import match_calibrated
from .match import GraphFit, Match, device_ok, replay_signatures
from .replays import Replay, by_start, group_work
from .structural import match_structural

__all__ = ["JoinAhead", "Made", "match_alone", "prepare_graphs"]

#: The per-graph values the join asks for, each built as the join builds it.
_BUILDS: List[Callable[[GraphRecord], object]] = [
    GraphFit._node_counts, calibrated._table, lambda g: g.derived(projection._graph_info)]


def prepare_graphs(annotations: AnnotationSet) -> int:
    """Build the join's per-graph values for the graphs the latest profiler window replayed (by
    the replay record; every graph where there is none); returns how many graphs. A value whose
    build fails is left unbuilt: the join builds it again and meets the failure where it always
    does (a graph with a cycle in its edges, for one)."""
    graphs = annotations.graphs
    window = annotations.latest_window()
    if window is not None:
        replayed = {e for t in window.threads for e in t.graphs}
        graphs = tuple(g for g in graphs if g.exec_id in replayed)
    for g in graphs:
        for build in _BUILDS:
            try:
                build(g)
            except Exception:  # noqa: BLE001: built again, and raised or counted, by the join itself
                pass
        if g.edges is not None:
            try:
                g.derived(critical_path.work_predecessors)
            except Exception:  # noqa: BLE001: as above (critical_path.CycleError)
                pass
    return len(graphs)


def match_alone(r: Replay, graphs: Sequence[GraphRecord], chosen: int) -> Tuple[Dict[int, Match], Optional[Tuple]]:
    """The join's matching of a replay known to be graph ``chosen`` whose events carry no graph
    node ids: calibrated first, then :func:`~.structural.match_structural` of the rest (its
    ``(matches, graph, why)``; None when calibration matched every event)."""
    every = [e.index for e in r.events]
    cal, _ = match_calibrated(r, graphs, every, only_graph=chosen)
    rest = [i for i in every if i not in cal]
    if not rest:
        return cal, None
    return cal, match_structural(r, graphs, rest, only_graph=chosen, used_keys={m.node.key for m in cal.values()})


_INDEX = attrgetter("index")


class Made:
    """Per-replay results of the join made while torch still wrote the trace (:class:`JoinAhead`),
    each kept with the events it was made from (their indices in order) and taken by the join
    only for a replay of exactly those events, the same launch and the same graph: the shape
    of its GPU work (``GraphFit.shape``), the matches of a replay known to be one graph
    (:func:`match_alone`), then, only where the join took those, its projection
    (``projection.replay_ranges``; its number among its graph's replays given when taken) and
    critical path (``critical_path.REPLAY_PATH``). Made from the same annotation set the join
    is given (else never taken). ``taken``: how many of each the join took."""

    def __init__(self, annotations: AnnotationSet) -> None:
        self.annotations = annotations
        self._matches: Dict[Tuple[int, int], Tuple[Tuple[int, ...], Any]] = {}
        self._ranges: Dict[Tuple[int, int, bool], Tuple[Tuple[int, ...], Any]] = {}
        self._names: Dict[int, str] = {}  # graph -> its display name (the replay range's name)
        self._paths: Dict[Tuple[int, int], Tuple[Tuple[int, ...], Any]] = {}
        #: correlation -> (the graph whose matches the join took, what they were made from)
        self._taken: Dict[int, Tuple[int, Tuple[int, ...]]] = {}
        self._shapes: Dict[int, Tuple[Tuple[int, ...], frozenset]] = {}
        self._keys: Dict[int, Tuple[Replay, Tuple[int, ...]]] = {}  # the join's replays' keys
        self.taken: Dict[str, int] = {"shapes": 0, "matches": 0, "ranges": 0, "paths": 0}

    @staticmethod
    def key(r: Replay) -> Tuple[int, ...]:
        """What a replay's results were made from: its launch's index, then its events' in order."""
        return (-1 if r.launch is None else r.launch.index,) + tuple(map(_INDEX, r.events))

    def _key_of(self, r: Replay) -> Tuple[int, ...]:
        """:meth:`key` of the join's replay ``r``, once per replay."""
        got = self._keys.get(r.correlation)
        if got is None or got[0] is not r:
            got = self._keys[r.correlation] = (r, self.key(r))
        return got[1]

    def keep_shape(self, r: Replay, key: Tuple[int, ...], shape: frozenset) -> None:
        """The shape of all of ``r``'s GPU work (``GraphFit.shape``), made from ``key``."""
        self._shapes[r.correlation] = (key, shape)

    def shape_of(self, r: Replay) -> Optional[frozenset]:
        """The shape of the join's replay ``r`` as made, where it still holds; else None."""
        got = self._shapes.pop(r.correlation, None)
        if got is None or got[0] != self._key_of(r):
            return None
        self.taken["shapes"] += 1
        return got[1]

    def matches_of(self, r: Replay, chosen: int) -> Optional[Tuple[Dict[int, Match], Optional[Tuple]]]:
        """:func:`match_alone` of the join's replay ``r`` against ``chosen`` as made, where it
        still holds; else None."""
        got = self._matches.pop((r.correlation, chosen), None)  # taken once: the join holds it from here
        if got is None or got[0] != self._key_of(r):
            return None
        self._taken[r.correlation] = (chosen, got[0])  # the replay's ranges and path: made with this very key
        self.taken["matches"] += 1
        return got[1]

    def ranges_of(self, r: Replay, gid: int, idx: int, several: bool) -> Any:
        """The replay's projection pieces, numbered ``idx`` among its graph's replays (made before
        that number was known: the number is in the replay range's name and every range's args)."""
        got = self._ranges.pop((r.correlation, gid, several), None)
        if got is None or not self._same(r, gid, got[0]):
            return None
        self.taken["ranges"] += 1
        why, pieces, skips = got[1]
        if why is None:
            for piece in pieces:
                args = piece[6]
                if "replay" in args:
                    args["replay"] = idx
            first = pieces[0]
            pieces[0] = first[:5] + (f"{self._names[gid]} #{idx}",) + first[6:]
        return why, pieces, skips

    def path_of(self, r: Replay, gid: int) -> Any:
        """``critical_path.REPLAY_PATH``'s result for ``r`` as made, where its matches were taken."""
        got = self._paths.pop((r.correlation, gid), None)
        if got is None or not self._same(r, gid, got[0]):
            return None
        self.taken["paths"] += 1
        return got[1]

    def _same(self, r: Replay, gid: int, key: Tuple[int, ...]) -> bool:
        """Whether the join took ``r``'s matches as made for ``gid``, from what ``key`` was made
        of (made together: the same key object)."""
        taken = self._taken.get(r.correlation)
        return taken is not None and taken[0] == gid and taken[1] is key

    def clear(self) -> None:
        """Drop what was not taken (the join is done)."""
        self._matches.clear()
        self._ranges.clear()
        self._paths.clear()
        self._shapes.clear()
        self._keys.clear()
        self._taken.clear()

    def make(self, r: Replay, g: GraphRecord, several: bool, key: Optional[Tuple[int, ...]] = None) -> None:
        """Everything the join would make of ``r`` as a replay of ``g`` (its projection numbered
        0, renumbered when taken); ``key``: :meth:`key` of ``r`` where known."""
        key, gid = key or self.key(r), g.exec_id
        cal, st = match_alone(r, self.annotations.graphs, gid)
        self._matches[(r.correlation, gid)] = (key, (cal, st))
        self._names[gid] = g.display_name
        matched = cal if st is None else {**cal, **st[0]}
        pieces = projection.replay_ranges(r, g, 0, g.derived(projection._graph_info), matched, several)
        self._ranges[(r.correlation, gid, several)] = (key, pieces)
        if pieces[0] is not None or g.edges is None or critical_path.REPLAY_PATH is None or r.launch is None:
            return
        try:
            wp = g.derived(critical_path.work_predecessors)
        except critical_path.CycleError:
            return
        got = critical_path.REPLAY_PATH(r.events, matched, wp[0], wp[1], r.launch.ts_ns)
        if got is not None:
            self._paths[(r.correlation, gid)] = (key, got)


class JoinAhead:
    """The join's per-replay work done while torch still writes the trace a worker follows.

    :meth:`idle` is called by the follow's reader whenever it has read all that is written
    (:class:`~..read.follow.Followed`'s ``idle``) with the events read so far. Each call does
    one small step and says whether it did one: group the new events' GPU work by correlation
    (:func:`~.replays.group_work`), or make the results of one replay whose launch is read and
    whose correlation is not the newest met (its work may still grow) against each graph its
    kernels fit (:class:`Made`). The join takes what still holds once the trace is whole
    (``join(..., made=...)``); anything else it makes as always, so what it writes is the same.
    """

    def __init__(self, annotations: AnnotationSet) -> None:
        self.made = Made(annotations)
        self._graphs = tuple(annotations.graphs)
        self._several = len({g.exec_id for g in self._graphs}) > 1
        self._seen = 0
        self._launches: Dict[int, Any] = {}
        self._work: Dict[int, List[Any]] = {}
        self._graph_ids: set = set()
        #: replays (correlations with a launch read) whose work grew since they were last made, in
        #: the order they last grew
        self._waiting: Dict[int, None] = {}
        self._newest: Optional[int] = None  # the correlation of the last GPU work read: may still grow
        self._fit = GraphFit()
        self._stopped = False

    def idle(self, events: List[Any]) -> bool:
        """One step on ``events`` (the events read so far); whether it did one. Anything it
        raises stops the work made ahead for good (the join makes it all, and meets any error
        of the trace where it always does): the conversion never fails here."""
        if self._stopped:
            return False
        try:
            return self._step(events)
        except Exception:  # noqa: BLE001: see the docstring
            self._stopped = True
            return False

    def release(self) -> None:
        """The trace is read: nothing more to make, and nothing of its events kept here (the
        writer drops the events before its packets); what was made stays in :attr:`made`."""
        self._stopped = True
        self._launches, self._work, self._waiting, self._graph_ids = {}, {}, {}, set()

    def _step(self, events: List[Any]) -> bool:
        if len(events) > self._seen:
            part, self._seen = events[self._seen:], len(events)
            work: Dict[int, List[Any]] = {}
            launched = len(self._launches)
            group_work(part, self._launches, work, self._graph_ids)
            waiting = self._waiting
            for c in islice(reversed(self._launches), len(self._launches) - launched):
                if c in self._work:  # its work came before its launch
                    waiting[c] = None
            newest, last = None, -1
            for c, evs in work.items():
                self._work.setdefault(c, []).extend(evs)
                if c in self._launches:  # a replay's work: (again) to make, after the others
                    waiting.pop(c, None)
                    waiting[c] = None
                if evs[-1].index > last:
                    newest, last = c, evs[-1].index
            if newest is not None:
                self._newest = newest
            return True
        for c in self._waiting:
            if c != self._newest:
                del self._waiting[c]
                self._make(c)
                return True
        return False

    def _make(self, c: int) -> None:
        if c in self._graph_ids:  # the exact join's: nothing to make ahead
            return
        r = Replay(c, self._launches[c], by_start(list(self._work[c])))
        if not r.events:
            return
        shape = self._fit.shape(r.events, replay_signatures(r))
        key = self.made.key(r)
        self.made.keep_shape(r, key, shape)
        for g in self._graphs:
            if device_ok(g.device, r.device) and self._fit.fits_shape(shape, g):
                self.made.make(r, g, self._several, key)
