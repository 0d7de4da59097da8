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
from typing import Dict, Iterable, Optional, Sequence, Tuple

from .. import settings
from ..annotations.model import GPU_WORK_NODE_TYPES, GraphRecord, NodeRecord
from ..join.model import CALIBRATED
from .match import Match, best_graph, compatible_signatures, replay_signatures, signature
from .replays import Replay

__all__ = ["CALIBRATED_ROWS", "match_calibrated"]

try:  # a replay's calibrated matching in C (join/_rows.c, built by hatch_build.py): the same matches
    from ._rows import calibrated_rows as _compiled_rows
except ImportError:
    _compiled_rows = None
#: :func:`match_calibrated`'s loop over a replay in C, or None where it is not built or
#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import (the Python loop then)
CALIBRATED_ROWS = None if settings.switch(settings.PURE_PYTHON) else _compiled_rows

_SIG_CACHE: Dict[Tuple[int, Optional[str], Optional[tuple], Optional[tuple]], Tuple] = {}


def _node_signature(node: NodeRecord) -> Tuple:
    k = (node.key, node.kernel, node.grid, node.block)
    sig = _SIG_CACHE.get(k)
    if sig is None:
        if len(_SIG_CACHE) > 100_000:
            _SIG_CACHE.clear()
        sig = _SIG_CACHE[k] = signature(node, strict=False)
    return sig


def _table(graph: GraphRecord) -> Tuple[Dict[Tuple[int, int], Tuple[NodeRecord, Tuple, Match]], bool, Counter]:
    """(stream, ordinal) -> (node, its loose signature, its unambiguous calibrated match),
    whether ordinals count kernels only, and the nodes per stream: built once per graph
    (:meth:`GraphRecord.derived`), not per replay."""
    return graph.derived(_build_table)


def _build_table(graph: GraphRecord) -> Tuple[Dict[Tuple[int, int], Tuple[NodeRecord, Tuple, Match]], bool, Counter]:
    nodes = {(n.stream, n.ordinal): n for n in graph.nodes if n.stream is not None and n.ordinal is not None}
    kernels_only = not any(n.type != "kernel" and n.type in GPU_WORK_NODE_TYPES for n in nodes.values())
    per_stream = Counter(stream for stream, _ in nodes)
    table = {pos: (n, _node_signature(n), Match(n, CALIBRATED, False)) for pos, n in nodes.items()}
    return table, kernels_only, per_stream


def match_calibrated(replay: Replay, graphs: Iterable[GraphRecord], pending: Sequence[int],
                     only_graph: Optional[int] = None) -> Tuple[Dict[int, Match], Optional[int]]:
    """Match the ``pending`` event indices of ``replay``; returns matches and the chosen graph id."""
    pending_set = set(pending)

    def match_graph(g: GraphRecord) -> Dict[int, Match]:
        found: Dict[int, Match] = {}
        if not g.calibrated:
            return found
        ev_sig = replay_signatures(replay)
        table, kernels_only, expected_per_stream = _table(g)
        if CALIBRATED_ROWS is not None:
            got = CALIBRATED_ROWS(replay.events, kernels_only, table, expected_per_stream, pending_set, ev_sig,
                                  compatible_signatures)
            if got is not None:  # else: inputs it does not take, the loop below
                return got
        ordinals = replay.ordinals(kernels_only)
        seen_per_stream = Counter(stream for stream, _ in ordinals.values())
        trusted = {st for st, n in seen_per_stream.items() if n == expected_per_stream[st]}
        get = table.get
        for idx, pos in ordinals.items():
            if pos[0] not in trusted or idx not in pending_set:
                continue
            hit = get(pos)
            if hit is not None:
                sig = ev_sig[idx]
                if sig == hit[1] or compatible_signatures(sig, hit[1]):  # equal: compatible, without the loop
                    found[idx] = hit[2]
        return found

    found, exec_id, graph_tie = best_graph(replay, graphs, only_graph, match_graph)
    if graph_tie:
        return {i: Match(m.node, CALIBRATED, True) for i, m in found.items()}, exec_id
    return found, exec_id
