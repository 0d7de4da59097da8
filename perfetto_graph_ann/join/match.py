"""What every strategy returns: the node an event was matched to, and how."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from ..capture.annotations import NodeRecord
from ..read.model import TraceEvent
from .names import base_name, full_name
from .replays import dim3_arg, node_type_of


@dataclasses.dataclass(frozen=True)
class Match:
    node: NodeRecord
    strategy: str  #: exact | calibrated | structural
    ambiguous: bool = False  #: more than one node (or graph) fitted equally well


def compatible(event: TraceEvent, node: NodeRecord) -> bool:
    """Could this event be a replay of this node? Type, base name, grid and block must agree
    wherever both sides know them."""
    return compatible_signatures(signature(event, strict=False), signature(node, strict=False))


def compatible_signatures(ev: Tuple, node: Tuple) -> bool:
    """:func:`compatible` on precomputed loose signatures (None on either side matches)."""
    if ev[0] != node[0]:
        return False
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


def device_ok(graph_device: Optional[int], replay_device: Optional[int]) -> bool:
    return graph_device is None or replay_device is None or graph_device == replay_device
