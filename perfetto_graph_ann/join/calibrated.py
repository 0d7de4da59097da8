"""Calibrated join: (replay, stream, ordinal on that stream) -> node, from one calibration replay.

Capture replays each graph once under a CUPTI activity session and records, per node,
the stream it ran on and its position on that stream within the replay. Which stream a
node runs on is fixed for one executable graph, so the same (stream, ordinal) names the
same node in every profiled replay. When several calibrated graphs exist, each replay is
given to the graph whose table fits most of its events (type, name, grid and block must
agree); a tie between graphs marks the matches ambiguous. A stream whose event count in
the replay differs from the calibration's (a replay cut by the profiling window, a
dropped record) is not trusted: its events are left to the structural join.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..capture.annotations import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..join.model import CALIBRATED
from .match import Match, compatible_signatures, device_ok, signature
from .replays import Replay


_SIG_CACHE: Dict[Tuple[int, Optional[str], Optional[tuple], Optional[tuple]], Tuple] = {}


def _node_signature(node: NodeRecord) -> Tuple:
    k = (node.key, node.kernel, node.grid, node.block)
    sig = _SIG_CACHE.get(k)
    if sig is None:
        if len(_SIG_CACHE) > 100_000:
            _SIG_CACHE.clear()
        sig = _SIG_CACHE[k] = signature(node, strict=False)
    return sig


def _table(graph: GraphRecord) -> Tuple[Dict[Tuple[int, int], NodeRecord], bool]:
    """(stream, ordinal) -> node, and whether ordinals count kernels only."""
    table = {(n.stream, n.ordinal): n for n in graph.nodes if n.stream is not None and n.ordinal is not None}
    kernels_only = not any(n.type != "kernel" and n.type in GPU_WORK_NODE_TYPES for n in table.values())
    return table, kernels_only


def match_calibrated(replay: Replay, graphs: Iterable[GraphRecord], pending: Sequence[int],
                     only_graph: Optional[int] = None) -> Tuple[Dict[int, Match], Optional[int]]:
    """Match the ``pending`` event indices of ``replay``; returns matches and the chosen graph id."""
    pending_set = set(pending)
    ev_sig = {e.index: signature(e, strict=False) for e in replay.events if e.index in pending_set}
    scored: List[Tuple[int, int, Dict[int, NodeRecord]]] = []  # (score, exec id, matches)
    for g in graphs:
        if only_graph is not None and g.exec_id != only_graph:
            continue
        if not g.calibrated or not device_ok(g.device, replay.device):
            continue
        table, kernels_only = _table(g)
        expected_per_stream = Counter(stream for stream, _ in table)
        ordinals = replay.ordinals(kernels_only)
        seen_per_stream = Counter(stream for stream, _ in ordinals.values())
        found: Dict[int, NodeRecord] = {}
        for idx, pos in ordinals.items():
            if idx not in pending_set or seen_per_stream[pos[0]] != expected_per_stream[pos[0]]:
                continue
            node = table.get(pos)
            if node is not None and compatible_signatures(ev_sig[idx], _node_signature(node)):
                found[idx] = node
        if found:
            scored.append((len(found), g.exec_id, found))
    if not scored:
        return {}, None
    best = max(s[0] for s in scored)
    winners = [s for s in scored if s[0] == best]
    ambiguous = len(winners) > 1
    _, exec_id, found = winners[0]
    return {i: Match(n, CALIBRATED, ambiguous) for i, n in found.items()}, exec_id
