"""What every strategy returns: the node an event was matched to, and how."""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from .. import settings
from ..annotations.model import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..read.model import TraceEvent
from .names import base_name, full_name
from .replays import EVENT_NODE_TYPE, Replay, dim3_arg, node_type_of

__all__ = ["best_graph", "compatible_signatures", "COPY_KERNEL", "device_ok", "GraphFit", "is_copy_kernel", "LOOSE",
           "Match", "replay_signatures", "signature", "T"]

T = TypeVar("T")

try:  # replay_signatures' loop in C (join/_rows.c, built by hatch_build.py): the same signatures
    from ._rows import loose_signatures as _compiled_loose
except ImportError:
    _compiled_loose = None
#: :func:`replay_signatures`' per-event loop in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loop then)
LOOSE = None if settings.switch(settings.PURE_PYTHON) else _compiled_loose


@dataclasses.dataclass(frozen=True)
class Match:
    node: NodeRecord
    strategy: str  #: exact | calibrated | structural
    ambiguous: bool = False  #: more than one node (or graph) fitted equally well
    #: Exec ids of the graphs the replay may be, when the join could not tell which and
    #: they all give this event the same annotation (empty: the graph is ``node``'s). The
    #: event then carries the annotation but no graph id, node id or replay number.
    shared_by: Tuple[int, ...] = ()


#: The kernel the driver may run a graph's memcpy node as instead of a copy: a device-to-device
#: ``buf.copy_(y)`` captured by ``torch.cuda.graph`` replayed as the kernel ``memcpy128`` on driver
#: 13.0 (H100; CUPTI and torch.profiler both record it as a kernel), where the same copy after an
#: eager copy replayed as ``Memcpy DtoD`` (benchmarks/gpu/probe_memcpy_kinds.py, tests/gpu/RESULTS.md).
COPY_KERNEL = re.compile(r"memcpy[0-9]+")


def is_copy_kernel(ev: Tuple) -> bool:
    """Whether a loose event signature is the driver's copy kernel (:data:`COPY_KERNEL`)."""
    return ev[0] == "kernel" and ev[1] is not None and COPY_KERNEL.fullmatch(ev[1]) is not None


def compatible_signatures(ev: Tuple, node: Tuple) -> bool:
    """Could an event be a replay of a node, given their loose signatures? Type must agree, or
    the event be the driver's copy kernel and the node a memcpy (:data:`COPY_KERNEL`); name,
    grid and block wherever both sides know them (None on either side matches)."""
    if ev[0] != node[0]:
        return node[0] == "memcpy" and is_copy_kernel(ev)
    for a, b in zip(ev[1:], node[1:]):
        if a is not None and b is not None and a != b:
            return False
    return True


def signature(event_or_node, strict: bool) -> Tuple:
    """Structural signature: (type, name, grid, block). ``strict`` compares full demangled
    names, otherwise base names (robust to demangler differences)."""
    name_fn = full_name if strict else base_name
    if isinstance(event_or_node, NodeRecord):
        n = event_or_node
        name = name_fn(n.kernel) if n.type == "kernel" and n.kernel else None
        return (n.type, name, tuple(n.grid) if n.grid else None, tuple(n.block) if n.block else None)
    e: TraceEvent = event_or_node
    t = node_type_of(e)
    name = name_fn(e.name) if t == "kernel" else None
    return (t, name, dim3_arg(e, "grid"), dim3_arg(e, "block"))


def replay_signatures(replay: Replay) -> Dict[int, Tuple]:
    """event index -> loose signature (``signature(e, strict=False)``) of every event of
    ``replay``, computed once and kept on it (the graph fit and the calibration both ask)."""
    sigs = replay.signatures
    if sigs is None:
        sigs = replay.signatures = {}
        types: Dict[str, str] = {}  # cat as written -> node type
        events = replay.events
        if LOOSE is not None and type(events) is list:  # the same loop in C, _memo_signatures' memo in it
            LOOSE(events, (sigs, types, _SHARED, _type_of, base_name, dim3_arg))
        elif len(head := events[:_SAMPLE]) == _SAMPLE and len({id(e.args) for e in head}) <= _SAMPLE // 2:
            # the two-pass read gives a replay's events with the same join args one dict
            # (read.scan): there an event's signature is known from its cat, name and args object
            _memo_signatures(events, sigs, types)
            return sigs
        else:
            for e in events:
                sig = _loose(e, types)
                sigs[e.index] = _shared(sig, sig)  # a replay's signatures are its graph's: one tuple each
        if len(_SHARED) > _SHARED_MAX:
            _SHARED.clear()
    return sigs


def _type_of(e: TraceEvent) -> str:
    """The node type of an event's category (``_loose``'s rule, for the compiled loop)."""
    return EVENT_NODE_TYPE.get(e.category, "other")


def _loose(e: TraceEvent, types: Dict[str, str]) -> Tuple:
    """``signature(e, strict=False)``, with ``dim3_arg``'s rule inline for what Kineto writes
    (three ints) and the node type of each cat kept in ``types``."""
    t = types.get(e.cat)
    if t is None:
        t = types[e.cat] = EVENT_NODE_TYPE.get(e.category, "other")
    a = e.args
    g, b = a.get("grid"), a.get("block")
    if type(g) is list and len(g) == 3 and type(g[0]) is int and type(g[1]) is int and type(g[2]) is int:
        g = (g[0], g[1], g[2])
    else:
        g = dim3_arg(e, "grid")
    if type(b) is list and len(b) == 3 and type(b[0]) is int and type(b[1]) is int and type(b[2]) is int:
        b = (b[0], b[1], b[2])
    else:
        b = dim3_arg(e, "block")
    return (t, base_name(e.name) if t == "kernel" else None, g, b)


def _memo_signatures(events: Sequence[TraceEvent], sigs: Dict[int, Tuple], types: Dict[str, str]) -> None:
    """:func:`replay_signatures`' loop where events share args dicts: each (cat, name, args
    object) computed once (the args outlive the loop, so their ids stay theirs)."""
    memo: Dict[Tuple, Tuple] = {}
    for e in events:
        key = (e.cat, e.name, id(e.args))
        sig = memo.get(key)
        if sig is None:
            sig = _loose(e, types)
            sig = memo[key] = _shared(sig, sig)
        sigs[e.index] = sig
    if len(_SHARED) > _SHARED_MAX:
        _SHARED.clear()


#: Events of a replay looked at to tell whether they share args dicts (:func:`replay_signatures`).
_SAMPLE = 32
#: Signatures met (each its one tuple), at most ``_SHARED_MAX`` kept between replays.
_SHARED: Dict[Tuple, Tuple] = {}
_shared = _SHARED.setdefault
_SHARED_MAX = 1 << 16


def device_ok(graph_device: Optional[int], replay_device: Optional[int]) -> bool:
    return graph_device is None or replay_device is None or graph_device == replay_device


def best_graph(replay: Replay, graphs: Iterable[GraphRecord], only_graph: Optional[int],
               match_graph: Callable[[GraphRecord], Dict[int, T]]) -> Tuple[Dict[int, T], Optional[int], bool]:
    """Give ``replay`` to the graph whose matches cover most of its events.

    ``match_graph`` is run on every graph the replay may belong to (only ``only_graph`` once
    an earlier strategy chose one; same device). Returns that graph's matches, its exec id
    (None when no graph matched) and whether another graph matched as many events (a tie: the
    first in ``graphs`` order wins, and the caller marks its matches ambiguous).
    """
    scored: List[Tuple[int, int, Dict[int, T]]] = []  # (score, exec id, matches)
    for g in graphs:
        if only_graph is not None and g.exec_id != only_graph:
            continue
        if not device_ok(g.device, replay.device):
            continue
        found = match_graph(g)
        if found:
            scored.append((len(found), g.exec_id, found))
    if not scored:
        return {}, None, False
    best = max(s[0] for s in scored)
    winners = [s for s in scored if s[0] == best]
    _, exec_id, found = winners[0]
    return found, exec_id, len(winners) > 1


def _loose_node_counts(g: GraphRecord) -> Counter:
    return Counter(signature(n, strict=False) for n in g.nodes if n.type in GPU_WORK_NODE_TYPES)


class GraphFit:
    """Could a replay's GPU work be a graph's? A necessary condition, cached per graph and per
    replay shape: at most as many events as the graph has GPU-work nodes, and for every
    loose signature as many compatible nodes as events (names, grids and blocks agree
    wherever both sides know them). Used to list the graphs a replay may belong to, so a
    superset is safe: more candidates only ever means fewer labels."""

    def __init__(self) -> None:
        self._memo: Dict[Tuple[int, frozenset], bool] = {}

    @staticmethod
    def _node_counts(g: GraphRecord) -> Counter:
        """Each loose signature of the graph's GPU-work nodes with its count (once a graph)."""
        return g.derived(_loose_node_counts)

    @staticmethod
    def shape(events: Sequence[TraceEvent], signatures: Optional[Mapping[int, Tuple]] = None) -> frozenset:
        """The replay shape :meth:`fits` compares: each loose signature with its count. For
        one replay tried against many graphs (a serving engine's graph per batch size), take
        it once and ask :meth:`fits_shape`. ``signatures``: the events' loose signatures by
        index where already known (:func:`replay_signatures`)."""
        if signatures is not None:
            return frozenset(Counter([signatures[e.index] for e in events]).items())
        return frozenset(Counter(signature(e, strict=False) for e in events).items())

    def fits(self, events: Sequence[TraceEvent], g: GraphRecord) -> bool:
        return self.fits_shape(self.shape(events), g)

    def fits_shape(self, ev: frozenset, g: GraphRecord) -> bool:
        """:meth:`fits` for a replay's :meth:`shape`."""
        key = (g.exec_id, ev)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._fits(dict(ev), self._node_counts(g))
        return hit

    @staticmethod
    def _fits(ev: Dict[Tuple, int], nodes: Counter) -> bool:
        if sum(ev.values()) > sum(nodes.values()):
            return False
        for sig, n in ev.items():
            have = nodes.get(sig, 0)
            if have < n:
                have = sum(c for s, c in nodes.items() if compatible_signatures(sig, s))
            if have < n:
                return False
        return True
