"""Structural join, when the trace has no node ids and there is no calibration.

Events of one replay are paired with the nodes of one graph by signature: node type,
kernel name, grid and block, first by the full demangled name, then by the base name
(robust to demangler differences), then the driver's copy kernel with a memcpy node (the
driver may run a graph's copy as a kernel: :data:`~.match.COPY_KERNEL`). Within a signature
the k-th event (by start time) takes the k-th node (capture order). Whenever more than one
node shares the signature, start order across concurrent branches is not guaranteed, so
every such match is marked ambiguous rather than trusted (e.g. the two identical GEMMs of
the two-branch block).

Only whole replays are labelled: the replay's events left by the better strategies must
pair one to one with the graph's GPU-work nodes they left (same count, names, grids and
blocks; the same stream wherever the graph recorded one). A replay that matches no graph
that completely (cut by the profiling window, another graph, annotations of another run)
keeps no structural label, and :func:`match_structural` says why.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..annotations.model import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..join.model import STRUCTURAL
from ..read.model import TraceEvent
from .match import Match, best_graph, device_ok, is_copy_kernel, signature
from .replays import Replay

__all__ = ["match_structural", "REASON_COUNT", "REASON_NO_GRAPHS", "REASON_SIGNATURES", "REASON_STREAMS"]

#: Why a replay kept no structural label (JoinReport.unmatched_replays keys).
REASON_NO_GRAPHS = "no annotated graph"
REASON_COUNT = "its GPU work count matches no annotated graph (cut by the profiling window, or another graph)"
REASON_SIGNATURES = "kernel names, grids or blocks differ from every annotated graph of that size"
REASON_STREAMS = "its streams differ from the graph's calibration"


def _pair(events: Sequence[TraceEvent], nodes: Sequence[NodeRecord], strict: bool) -> List[Tuple[TraceEvent, NodeRecord, bool]]:
    ev_groups: Dict[Tuple, List[TraceEvent]] = defaultdict(list)
    node_groups: Dict[Tuple, List[NodeRecord]] = defaultdict(list)
    for e in events:
        ev_groups[signature(e, strict)].append(e)
    for n in nodes:
        node_groups[signature(n, strict)].append(n)
    out = []
    for sig, evs in ev_groups.items():
        cands = node_groups.get(sig)
        if not cands:
            continue
        ambiguous = len(cands) > 1
        for e, n in zip(evs, cands):
            out.append((e, n, ambiguous))
    return out


def _gpu_nodes(graph: GraphRecord, used: Set[int]) -> List[NodeRecord]:
    return [n for n in graph.nodes if n.type in GPU_WORK_NODE_TYPES and n.key not in used]


def _match_graph(events: Sequence[TraceEvent], nodes: Sequence[NodeRecord]) -> Dict[int, Tuple[NodeRecord, bool]]:
    found: Dict[int, Tuple[NodeRecord, bool]] = {}
    for strict in (True, False):
        rest_e = [e for e in events if e.index not in found]
        taken = {n.key for n, _ in found.values()}
        rest_n = [n for n in nodes if n.key not in taken]
        if not rest_e or not rest_n:
            break
        for e, n, amb in _pair(rest_e, rest_n, strict):
            found[e.index] = (n, amb)
    _pair_copy_kernels(events, nodes, found)
    return found


def _pair_copy_kernels(events: Sequence[TraceEvent], nodes: Sequence[NodeRecord],
                       found: Dict[int, Tuple[NodeRecord, bool]]) -> None:
    """The memcpy nodes left unpaired, paired with the events left that are the driver's copy
    kernel (:data:`~.match.COPY_KERNEL`), as a signature's: k-th by start time to k-th in capture
    order, ambiguous where more than one is left. Not where a kernel node of the graph has such a
    name: an event of that name could then be either."""
    if len(found) == len(events):  # every event paired by signature: the usual replay, nothing to look at
        return
    kernels = [e for e in events if e.index not in found and is_copy_kernel(signature(e, strict=False))]
    if not kernels:
        return
    taken = {n.key for n, _ in found.values()}
    copies = [n for n in nodes if n.type == "memcpy" and n.key not in taken]
    if not copies or any(n.type == "kernel" and is_copy_kernel(signature(n, strict=False)) for n in nodes):
        return
    for e, n in zip(kernels, copies):
        found[e.index] = (n, len(copies) > 1)


def _streams_agree(events: Sequence[TraceEvent], found: Dict[int, Tuple[NodeRecord, bool]]) -> bool:
    """Every event runs on the stream its node was calibrated on, where the node has one."""
    return all(found[e.index][0].stream is None or e.stream is None or found[e.index][0].stream == e.stream
               for e in events)


def _complete(events: Sequence[TraceEvent], graph: GraphRecord, used: Set[int]) -> Tuple[Dict[int, Tuple[NodeRecord, bool]], str]:
    """The graph's pairing of ``events`` when it covers them and its remaining nodes one to one
    (else {}), and, when it does not, the reason."""
    nodes = _gpu_nodes(graph, used)
    if len(nodes) != len(events):
        return {}, REASON_COUNT
    found = _match_graph(events, nodes)
    if len(found) != len(events):
        return {}, REASON_SIGNATURES
    if not _streams_agree(events, found):
        return {}, REASON_STREAMS
    return found, ""


def match_structural(replay: Replay, graphs: Iterable[GraphRecord], pending: Sequence[int],
                     only_graph: Optional[int] = None,
                     used_keys: Iterable[int] = ()) -> Tuple[Dict[int, Match], Optional[int], Optional[str]]:
    """Match the ``pending`` event indices of ``replay`` to a graph that they complete.

    ``used_keys``: nodes already taken in this replay by a better strategy. Returns the
    matches, the chosen graph id and, when no graph was complete, the reason (the closest
    failure over the graphs tried: a signature or stream disagreement of a graph of the right
    size before a count mismatch).
    """
    graphs = [g for g in graphs if (only_graph is None or g.exec_id == only_graph)
              and device_ok(g.device, replay.device)]
    if not graphs:
        return {}, None, REASON_NO_GRAPHS
    pending_set = set(pending)
    events = [e for e in replay.events if e.index in pending_set]
    used = set(used_keys)
    reasons: List[str] = []

    def complete(g: GraphRecord) -> Dict[int, Tuple[NodeRecord, bool]]:
        found, why = _complete(events, g, used)
        if why:
            reasons.append(why)
        return found

    found, exec_id, graph_tie = best_graph(replay, graphs, None, complete)
    if not found:
        order = (REASON_STREAMS, REASON_SIGNATURES, REASON_COUNT)
        return {}, None, min(reasons, key=order.index) if reasons else REASON_NO_GRAPHS
    return {i: Match(n, STRUCTURAL, amb or graph_tie) for i, (n, amb) in found.items()}, exec_id, None
