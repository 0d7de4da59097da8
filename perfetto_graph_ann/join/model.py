"""What the join hands the writers: where each GPU event goes and what it carries.

The writers (Perfetto and Chrome JSON) take a :class:`LaneLayout`; without one every
GPU event stays on its recorded stream. Placements are keyed by ``TraceEvent.index``.
"""
from __future__ import annotations

import dataclasses
from array import array
from typing import Any, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple

from .. import settings

__all__ = ["CALIBRATED", "CompactPlacements", "DEFAULT_GRAPH_LANE", "EXACT", "EXACT_IDS", "JoinReport", "KERNELS",
           "lane_key", "LaneLayout", "matched_placement", "mutable_placement", "PATH_ARG", "PATH_ROWS", "Placement",
           "RECORDED", "set_path_arg", "set_path_args", "SLACK_ARG", "STRATEGIES", "STRUCTURAL", "UNANNOTATED"]

try:  # CompactPlacements.set_paths' loop in C (join/_rows.c, built by hatch_build.py)
    from ._rows import set_path_rows as _compiled_set_path_rows
except ImportError:
    _compiled_set_path_rows = None
#: :meth:`CompactPlacements.set_paths`' loop over int64 arrays in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loop then)
PATH_ROWS = None if settings.switch(settings.PURE_PYTHON) else _compiled_set_path_rows

#: Join strategies, best first.
EXACT = "exact"
CALIBRATED = "calibrated"
STRUCTURAL = "structural"
STRATEGIES = (EXACT, CALIBRATED, STRUCTURAL)
_HOW = {s: i for i, s in enumerate(STRATEGIES)}  # strategy -> its index (CompactPlacements.how)

#: How a replay's graph was known (``JoinReport.replay_graphs`` keys).
EXACT_IDS = "graph ids in the trace"
RECORDED = "replay record"
KERNELS = "the only annotated graph its kernels fit"
UNANNOTATED = "a graph without annotations (replay record)"

#: torch 2.15's lane for graphed events without an annotated lane (graph_lanes="all").
DEFAULT_GRAPH_LANE = 7


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one GPU event is drawn and the debug args added to it.

    ``lane`` becomes the event's ``stream`` arg and track; ``args`` are merged over the
    event's own args (annotation fields, ``graph id``, ``graph node id``, ``replay``,
    ``join``, ``original_stream`` / ``annotated_stream``).
    """

    lane: int
    args: Mapping[str, Any]
    #: the matched node's annotation as recorded ({} = the node has none); None = unmatched.
    #: The Chrome JSON writer renders it torch 2.15's way (see ``write/chrome_json.py``).
    annotation: Optional[Mapping[str, Any]] = None


_new = object.__new__
_MISSING = object()  # CompactPlacements.get's default for __getitem__
#: arg on every GPU work slice on a replay's critical path (edges recorded; ``critical_path``)
PATH_ARG = "critical path"
#: arg on every other GPU work slice of such a replay: its slack in ns
SLACK_ARG = "critical path slack ns"


def _matched_args(into: Dict[str, Any], every: bool, lane: Any, base: Mapping[str, Any], replay: Optional[int],
                  strategy: str, ambiguous: bool, hw: Optional[int]) -> None:
    """A matched placement's args (:func:`matched_placement`'s), written into ``into``: the
    node's, then the replay, how it was matched and the other stream of the two."""
    into.update(base)
    if replay is not None:
        into["replay"] = replay
    into["join"] = strategy
    if ambiguous:
        into["join_ambiguous"] = True
    if every:
        if hw is not None:
            into["original_stream"] = hw
    else:
        into["annotated_stream"] = lane


def matched_placement(every: bool, lane: Any, base: Mapping[str, Any], annotation: Any, replay: Optional[int],
                      strategy: str, ambiguous: bool, hw: Optional[int]) -> Placement:
    """The placement of an event matched to a node of a known graph (the join's usual case):
    the node's annotated ``lane`` and args ``base``, the event's ``replay`` index, how it was
    matched, and the hardware stream ``hw`` it ran on. ``every`` (graph_lanes "all"): drawn on
    the annotated lane with ``original_stream``, else on ``hw`` with ``annotated_stream``."""
    args: Dict[str, Any] = {}
    _matched_args(args, every, lane, base, replay, strategy, ambiguous, hw)
    if not every and hw is not None:
        lane = hw
    # Placement(lane, args, annotation) without the frozen dataclass's __init__ (made once an
    # event by the join, and each time one is asked for from a CompactPlacements)
    p = _new(Placement)
    d = p.__dict__
    d["lane"] = lane
    d["args"] = args
    d["annotation"] = annotation
    return p


class CompactPlacements(Mapping[int, Placement]):
    """The join's placements by event index, the usual ones (an event matched to a node of a
    known graph) held as 13 bytes in columns and made into their :class:`Placement` when
    asked for: what the join's two-pass convert keeps of a trace's millions of graphed events
    (issue 33). The others are kept as made (:meth:`put`); :meth:`pin` makes one kept, to
    change its args. Iterates in the order the placements were added, as the dict does."""

    _NONE = -(1 << 31)  # no replay index / no hardware stream
    HOW = _HOW  #: strategy -> its code in ``how`` (+ 8: ambiguous)

    def __init__(self, events: int, every: bool) -> None:
        self.every = every  #: graph_lanes "all": the annotated lane, the stream kept as original_stream
        self.row = array("i", [-1]) * events  # event index -> row (-1: none, or kept whole)
        self.kept: Dict[int, Placement] = {}
        self.order = array("q")
        self.nodes: List[Tuple[Any, Mapping[str, Any], Any]] = []  # (lane, node args, annotation)
        self.node_ids: Dict[Any, int] = {}
        self.node = array("i")
        self.replay = array("i")
        self.hw = array("i")
        self.how = bytearray()  # strategy index, + 8: ambiguous
        #: per row, its critical path arg (:meth:`set_path`): -2 none, -1 on the path, else its
        #: slack in ns; None until a row gets one (a graph without recorded edges: never)
        self.path: Optional["array[int]"] = None

    def put(self, index: int, p: Placement) -> None:
        """Keep ``p`` as it is."""
        if index not in self:
            self.order.append(index)
        if 0 <= index < len(self.row):
            self.row[index] = -1
        self.kept[index] = p

    def add(self, index: int, key: Any, node: Tuple[Any, Mapping[str, Any], Any], replay: Optional[int],
            strategy: str, ambiguous: bool, hw: Optional[int]) -> None:
        """The placement of event ``index`` matched to node ``key`` (``node``: its lane, args and
        annotation) in the ``replay``-th replay, drawn from hardware stream ``hw``."""
        none = self._NONE
        row = self.row
        if (replay is not None and not none < replay < 1 << 31) or (hw is not None and not none < hw < 1 << 31) \
                or not 0 <= index < len(row):
            self.put(index, matched_placement(self.every, node[0], node[1], node[2], replay, strategy, ambiguous, hw))
            return
        n = self.node_ids.get(key)
        if n is None:
            n = self.node_ids[key] = len(self.nodes)
            self.nodes.append(node)
        if row[index] < 0 and index not in self.kept:  # not yet placed (``index not in self``)
            self.order.append(index)
        row[index] = len(self.node)
        self.node.append(n)
        self.replay.append(none if replay is None else replay)
        self.hw.append(none if hw is None else hw)
        self.how.append(_HOW[strategy] + (8 if ambiguous else 0))

    def __getitem__(self, index: int) -> Placement:
        p = self.get(index, _MISSING)
        if p is _MISSING:
            raise KeyError(index)
        return p

    def lane_and_args(self, index: int) -> Tuple[Any, Mapping[str, Any]]:
        """The lane of ``index``'s placement and args holding at least its node's (among them
        ``graph id``), without making the placement for a row: what the lane naming asks of
        every graphed event. A row's args are its node's alone (the join's keys left out)."""
        r = self.row[index] if 0 <= index < len(self.row) else -1
        if r < 0:
            p = self[index]
            return p.lane, p.args
        lane, base, _ = self.nodes[self.node[r]]
        if not self.every:
            hw = self.hw[r]
            if hw != self._NONE:
                lane = hw
        return lane, base

    _PATH_NONE, _ON_PATH = -2, -1

    def set_path(self, index: int, on_path: bool, slack: int) -> None:
        """The critical path arg of ``index``'s placement: :data:`PATH_ARG` True where
        ``on_path``, else :data:`SLACK_ARG` ``slack`` (ns, >= 0), added after its other args.
        A row keeps it in the ``path`` column (no placement made); a placement kept whole in
        its args."""
        r = self.row[index] if 0 <= index < len(self.row) else -1
        if r < 0 or (not on_path and not (type(slack) is int and 0 <= slack < 1 << 63)):
            args = self.pin(index).args  # type: ignore[attr-defined]
            if on_path:
                args[PATH_ARG] = True
            else:
                args[SLACK_ARG] = slack
            return
        self._path_column()[r] = self._ON_PATH if on_path else slack

    def _path_column(self) -> "array[int]":
        """The ``path`` column, made (every row none) or grown to the rows there are."""
        path = self.path
        if path is None or len(path) < len(self.node):
            grow = len(self.node) - (0 if path is None else len(path))
            if path is None:
                path = self.path = array("q")
            path.extend(array("q", [self._PATH_NONE]) * grow)
        return path

    def set_paths(self, indices: Sequence[int], values: Sequence[int]) -> None:
        """:meth:`set_path` for many: ``values[k]`` -1 where ``indices[k]`` is on the path,
        else its slack."""
        path = self._path_column()
        row = self.row
        if PATH_ROWS is not None and type(indices) is array and type(values) is array and \
                indices.typecode == values.typecode == "q":
            n, k = len(indices), 0
            while True:  # the rows in C; at each other one set_path, then on after it
                k = PATH_ROWS(path, row, indices, values, self._ON_PATH, k)
                if k >= n:
                    return
                v = values[k]
                self.set_path(indices[k], v == self._ON_PATH, v)
                path = self._path_column()
                k += 1
        rows = len(row)
        for i, v in zip(indices, values):
            r = row[i] if 0 <= i < rows else -1
            if r < 0 or v < self._ON_PATH:
                self.set_path(i, v == self._ON_PATH, v)
            else:
                path[r] = v

    def _path_arg(self, r: int, into: Dict[str, Any]) -> None:
        """Row ``r``'s critical path arg written into ``into`` (none where it has none)."""
        path = self.path
        if path is not None and r < len(path):
            v = path[r]
            if v == self._ON_PATH:
                into[PATH_ARG] = True
            elif v != self._PATH_NONE:
                into[SLACK_ARG] = v

    def columns(self) -> Tuple[Any, ...]:
        """What the writer's compiled loop reads to make a row's args as :meth:`merge_args`
        does (``write/perfetto/_encode.c``): the int32 columns row, node, replay and hw (-2^31:
        none), how, the nodes, the placements kept whole, ``every``, the strategies and the
        critical path column (``path``: None, or int64, -2 none, -1 on the path, else the slack)."""
        return (self.row, self.node, self.replay, self.hw, self.how, self.nodes, self.kept, self.every, STRATEGIES,
                self.path)

    def lane_of(self, index: int) -> Optional[Tuple[Any, bool]]:
        """(lane, whether its args are not empty) of ``index``'s placement, None where it has
        none: what the writer's plan asks of every GPU event, without making a row's
        :class:`Placement` (a row's args always hold ``join``)."""
        r = self.row[index] if 0 <= index < len(self.row) else -1
        if r < 0:
            p = self.get(index)
            return None if p is None else (p.lane, bool(p.args))
        if not self.every:
            hw = self.hw[r]
            if hw != self._NONE:
                return hw, True
        return self.nodes[self.node[r]][0], True

    def merge_args(self, index: int, into: Dict[str, Any]) -> None:
        """``into.update(self[index].args)`` (nothing where ``index`` has no placement), a row's
        args written straight into ``into`` without making its placement: the same keys in
        the same order with the same values (:func:`matched_placement`'s)."""
        r = self.row[index] if 0 <= index < len(self.row) else -1
        if r < 0:
            p = self.get(index)
            if p is not None:
                into.update(p.args)
            return
        none = self._NONE
        lane, base, _ = self.nodes[self.node[r]]
        replay, hw, how = self.replay[r], self.hw[r], self.how[r]
        _matched_args(into, self.every, lane, base, None if replay == none else replay, STRATEGIES[how & 7], how >= 8,
                      None if hw == none else hw)
        if self.path is not None:
            self._path_arg(r, into)

    def get(self, index: int, default: Any = None) -> Any:  # type: ignore[override]
        # __getitem__'s work in one frame
        try:
            r = self.row[index] if index >= 0 else -1
        except (IndexError, TypeError):
            r = -1
        if r < 0:
            try:
                return self.kept.get(index, default)
            except TypeError:  # unhashable
                return default
        none = self._NONE
        replay, hw, how = self.replay[r], self.hw[r], self.how[r]
        lane, base, annotation = self.nodes[self.node[r]]
        p = matched_placement(self.every, lane, base, annotation, None if replay == none else replay,
                              STRATEGIES[how & 7], how >= 8, None if hw == none else hw)
        if self.path is not None:
            self._path_arg(r, p.args)  # type: ignore[arg-type]
        return p

    def __contains__(self, index: object) -> bool:
        if index in self.kept:
            return True
        return type(index) is int and 0 <= index < len(self.row) and self.row[index] >= 0

    def pin(self, index: int) -> Placement:
        """The placement of ``index``, kept from now on (its args may then be changed)."""
        p = self[index]
        if index not in self.kept:
            self.kept[index] = p
            self.row[index] = -1
        return p

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def set_path_arg(placements: Mapping[int, Placement], index: int, on_path: bool, slack: int) -> None:
    """``index``'s placement gets :data:`PATH_ARG` True (``on_path``) or :data:`SLACK_ARG`
    ``slack``: a :class:`CompactPlacements` row in its ``path`` column, any other in its args."""
    if isinstance(placements, CompactPlacements):
        placements.set_path(index, on_path, slack)
    elif on_path:
        placements[index].args[PATH_ARG] = True  # type: ignore[index]
    else:
        placements[index].args[SLACK_ARG] = slack  # type: ignore[index]


def set_path_args(placements: Mapping[int, Placement], indices: Sequence[int], values: Sequence[int]) -> None:
    """:func:`set_path_arg` for many events: ``values[k]`` -1 where ``indices[k]`` is on the
    path, else its slack."""
    if isinstance(placements, CompactPlacements):
        placements.set_paths(indices, values)
        return
    for i, v in zip(indices, values):
        set_path_arg(placements, i, v == -1, v)


def mutable_placement(placements: Mapping[int, Placement], index: int) -> Placement:
    """The placement of ``index`` whose args may be changed: kept by a :class:`CompactPlacements`."""
    return placements.pin(index) if isinstance(placements, CompactPlacements) else placements[index]


@dataclasses.dataclass
class JoinReport:
    """Per trace: how many GPU work events each strategy matched, and what stayed unmatched."""

    total: int = 0  #: GPU work events in the trace
    graphed: int = 0  #: of those, launched by a graph launch
    matched: Dict[str, int] = dataclasses.field(default_factory=lambda: {s: 0 for s in STRATEGIES})
    ambiguous: int = 0  #: of the matched, those flagged ambiguous (several candidate nodes or graphs)
    unmatched: int = 0  #: graphed events no strategy could place
    #: The annotation files joined (``AnnotationSet.source`` of each; empty for in-memory sets).
    annotation_files: List[str] = dataclasses.field(default_factory=list)
    #: Files whose capture identity was compared with the trace and agreed -> fields compared.
    identity_checked: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    #: Files without a capture identity (version-1 sidecars, capture records): not checked.
    identity_missing: List[str] = dataclasses.field(default_factory=list)
    #: Files whose identity disagreed with the trace but were used anyway (``force``) -> what differed.
    identity_overridden: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    #: The annotations matched none of the trace's graph replays and were used anyway (``force``).
    no_match_overridden: bool = False
    #: Drawn replays by how their critical path was found (``edges``; stream order, left to
    #: the SQL module) or why it was not (``join.critical_path``'s reasons) -> replays.
    critical_paths: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Why the dependency flows asked for were not written (too many), else None.
    edge_flows_note: Optional[str] = None
    #: Replays whose leftover events no graph completed (left unlabelled): reason -> replays.
    unmatched_replays: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Events of those replays left unlabelled: reason -> events.
    unmatched_replay_events: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Replays the join labelled but the GPU projection does not draw (no replay or scope
    #: range), e.g. a replay cut by the profiling window: reason -> replays.
    unprojected_replays: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Scope instances left out of drawn replays: reason -> instances.
    unprojected_scopes: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Graphs matched structurally that carry a calibration note: display name -> note.
    calibration_notes: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: Replays whose graph the join knew, by how it knew (EXACT_IDS, RECORDED, KERNELS,
    #: UNANNOTATED) -> replays.
    replay_graphs: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Replays that may be several graphs whose annotations differ, left unlabelled:
    #: candidate graph names ("A | B") -> replays; and their events.
    unidentified_replays: Dict[str, int] = dataclasses.field(default_factory=dict)
    unidentified_replay_events: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Replays that may be several graphs, all giving every event the same annotation:
    #: labelled with it, without a graph id. Candidate names -> replays.
    shared_label_replays: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: Replays the replay record names as graphs without annotations (left unlabelled), and their events.
    unannotated_replays: int = 0
    #: Matched events of compiled code by how their module path is known (the ``module origin``
    #: field: exact, common ancestor, unknown) -> events.
    module_origins: Dict[str, int] = dataclasses.field(default_factory=dict)
    unannotated_replay_events: int = 0
    #: Whether the annotations carried a replay record (None: not recorded, e.g. an older sidecar).
    replay_record: Optional[bool] = None
    #: Why parts of the replay record could not be used, one line each.
    replay_record_problems: List[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def lane_key(device: Optional[int], lane: int) -> Tuple[int, int]:
    """The (device, lane) key of :attr:`LaneLayout.lane_names`; no device counts as device 0."""
    return (device if device is not None else 0, lane)


@dataclasses.dataclass
class LaneLayout:
    """The join's result as the writers consume it."""

    placements: Dict[int, Placement] = dataclasses.field(default_factory=dict)
    #: (device, lane id) -> display name, e.g. (0, 62) -> "62 attention"
    lane_names: Dict[Tuple[int, int], str] = dataclasses.field(default_factory=dict)
    report: JoinReport = dataclasses.field(default_factory=JoinReport)
    graph_lanes: str = "all"  #: "all" | "none"
    #: Every key the placements' args may hold (so writers keep those args typed); None: unknown
    arg_keys: Optional[FrozenSet[str]] = None
    #: graph replays and scope instances as GPU time ranges (``join.projection.GpuRange``),
    #: drawn on each GPU's ``graph replays`` track and ``scopes`` group
    ranges: List[Any] = dataclasses.field(default_factory=list)
    #: Dependency edges between GPU work to draw as flows: (trace index of the predecessor,
    #: trace index of the dependent); empty unless the join was asked for them (``edge_flows``)
    edge_flows: List[Tuple[int, int]] = dataclasses.field(default_factory=list)
