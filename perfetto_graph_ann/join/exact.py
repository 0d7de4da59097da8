"""Exact join: newer Kineto writes ``graph node id`` (and ``graph id``) on every replayed event.

The key is the same ``(exec graph id << 32) | local id`` that capture records, so the
match is a dictionary lookup. Events whose key is not in the annotations stay unmatched.
"""
from __future__ import annotations

from typing import Dict, Mapping, Sequence

from ..annotations.model import NodeRecord
from ..read.model import TraceEvent
from ..join.model import EXACT
from .match import Match
from .replays import int_arg

__all__ = ["match_exact"]


def match_exact(events: Sequence[TraceEvent], nodes_by_key: Mapping[int, NodeRecord]) -> Dict[int, Match]:
    """event index -> Match for every event whose ``graph node id`` names a known node."""
    out: Dict[int, Match] = {}
    for e in events:
        if "graph node id" not in e.args:  # torch 2.11's Kineto writes none: the usual case
            continue
        key = int_arg(e, "graph node id")
        if key is None:
            continue
        if key < 0:  # written as signed 64-bit
            key += 1 << 64
        gid = int_arg(e, "graph id")
        if key >> 32 == 0 and gid is not None:  # a bare local id next to its graph id
            key = (gid << 32) | key
        node = nodes_by_key.get(key)
        if node is not None:
            out[e.index] = Match(node, EXACT)
    return out
