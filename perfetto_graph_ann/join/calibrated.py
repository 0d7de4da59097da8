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

import weakref
from collections import Counter
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from ..annotations.model import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..join.model import CALIBRATED
from .match import Match, best_graph, compatible_signatures, replay_signatures, signature
from .replays import Replay

__all__ = ["match_calibrated"]

_SIG_CACHE: Dict[Tuple[int, Optional[str], Optional[tuple], Optional[tuple]], Tuple] = {}


def _node_signature(node: NodeRecord) -> Tuple:
    k = (node.key, node.kernel, node.grid, node.block)
    sig = _SIG_CACHE.get(k)
    if sig is None:
        if len(_SIG_CACHE) > 100_000:
            _SIG_CACHE.clear()
        sig = _SIG_CACHE[k] = signature(node, strict=False)
    return sig


#: id(graph) -> (graph, its table, kernels only, nodes per stream): built once per graph, not
#: per replay; an entry goes when its graph does
_TABLES: Dict[int, Tuple[Any, Dict[Tuple[int, int], NodeRecord], bool, Counter]] = {}


def _table(graph: GraphRecord) -> Tuple[Dict[Tuple[int, int], NodeRecord], bool, Counter]:
    """(stream, ordinal) -> node, whether ordinals count kernels only, and the nodes per stream."""
    hit = _TABLES.get(id(graph))
    if hit is not None and hit[0]() is graph:
        return hit[1], hit[2], hit[3]
    table = {(n.stream, n.ordinal): n for n in graph.nodes if n.stream is not None and n.ordinal is not None}
    kernels_only = not any(n.type != "kernel" and n.type in GPU_WORK_NODE_TYPES for n in table.values())
    per_stream = Counter(stream for stream, _ in table)
    _TABLES[id(graph)] = (weakref.ref(graph), table, kernels_only, per_stream)
    weakref.finalize(graph, _TABLES.pop, id(graph), None)
    return table, kernels_only, per_stream


def match_calibrated(replay: Replay, graphs: Iterable[GraphRecord], pending: Sequence[int],
                     only_graph: Optional[int] = None) -> Tuple[Dict[int, Match], Optional[int]]:
    """Match the ``pending`` event indices of ``replay``; returns matches and the chosen graph id."""
    pending_set = set(pending)
    ev_sig: Dict[int, Tuple] = {}  # filled by the first calibrated graph: none, no signatures

    def match_graph(g: GraphRecord) -> Dict[int, NodeRecord]:
        found: Dict[int, NodeRecord] = {}
        if not g.calibrated:
            return found
        if not ev_sig:
            ev_sig.update(replay_signatures(replay))
        table, kernels_only, expected_per_stream = _table(g)
        ordinals = replay.ordinals(kernels_only)
        seen_per_stream = Counter(stream for stream, _ in ordinals.values())
        for idx, pos in ordinals.items():
            if idx not in pending_set or seen_per_stream[pos[0]] != expected_per_stream[pos[0]]:
                continue
            node = table.get(pos)
            if node is not None and compatible_signatures(ev_sig[idx], _node_signature(node)):
                found[idx] = node
        return found

    found, exec_id, graph_tie = best_graph(replay, graphs, only_graph, match_graph)
    return {i: Match(n, CALIBRATED, graph_tie) for i, n in found.items()}, exec_id
