"""Structural join, when the trace has no node ids and there is no calibration.

Events of one replay are paired with the nodes of one graph by signature: node type,
kernel name, grid and block, first by the full demangled name, then by the base name
(robust to demangler differences). Within a signature the k-th event (by start time)
takes the k-th node (capture order). Whenever more than one node shares the signature,
start order across concurrent branches is not guaranteed, so every such match is marked
ambiguous rather than trusted (e.g. the two identical GEMMs of the two-branch block).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..capture.annotations import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..join.model import STRUCTURAL
from ..read.model import TraceEvent
from .match import Match, best_graph, signature
from .replays import Replay


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


def _match_graph(events: Sequence[TraceEvent], graph: GraphRecord, used: Set[int]) -> Dict[int, Tuple[NodeRecord, bool]]:
    nodes = [n for n in graph.nodes if n.type in GPU_WORK_NODE_TYPES and n.key not in used]
    found: Dict[int, Tuple[NodeRecord, bool]] = {}
    for strict in (True, False):
        rest_e = [e for e in events if e.index not in found]
        taken = {n.key for n, _ in found.values()}
        rest_n = [n for n in nodes if n.key not in taken]
        if not rest_e or not rest_n:
            break
        for e, n, amb in _pair(rest_e, rest_n, strict):
            found[e.index] = (n, amb)
    return found


def match_structural(replay: Replay, graphs: Iterable[GraphRecord], pending: Sequence[int],
                     only_graph: Optional[int] = None, used_keys: Iterable[int] = ()) -> Tuple[Dict[int, Match], Optional[int]]:
    """Match the ``pending`` event indices of ``replay``; returns matches and the chosen graph id.

    ``used_keys``: nodes already taken in this replay by a better strategy.
    """
    pending_set = set(pending)
    events = [e for e in replay.events if e.index in pending_set]
    used = set(used_keys)
    found, exec_id, graph_tie = best_graph(replay, graphs, only_graph, lambda g: _match_graph(events, g, used))
    return {i: Match(n, STRUCTURAL, amb or graph_tie) for i, (n, amb) in found.items()}, exec_id
