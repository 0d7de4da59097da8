"""Write a :class:`KinetoTrace` (optionally laid out by the join) as a Perfetto TrackEvent trace.

:func:`write_perfetto` runs the phases in order: plan where every event goes
(:func:`.plan.plan_events`: track metadata, homes, spans, the join's projected ranges), bind
the flows (:func:`.plan.bind_flows`), order the records on nesting tracks
(:func:`.plan.order_records`), then stream the packets (:func:`.emit.write_packets`), whose
bytes the encoders own (:mod:`.packets`).
"""
from __future__ import annotations

from typing import IO, TYPE_CHECKING, FrozenSet, Optional

from ...read.model import KinetoTrace
from .config import LIST_ARGS_MODES, WriterConfig, WriteStats
from .emit import encoder_class, write_packets
from .flows import SliceStarts
from .plan import bind_flows, order_records, plan_events
from .tracks import TrackTable

if TYPE_CHECKING:  # annotation only: importing the join package costs time on every conversion
    from ...join.model import LaneLayout

__all__ = ["write_perfetto"]


def write_perfetto(trace: KinetoTrace, out: IO[bytes], layout: Optional[LaneLayout] = None,
                   config: WriterConfig = WriterConfig()) -> WriteStats:
    """Write ``trace`` as framed TracePackets to the binary stream ``out``."""
    if config.list_args not in LIST_ARGS_MODES:
        raise ValueError(f"list_args must be one of {LIST_ARGS_MODES}, not {config.list_args!r}")
    encoder_class(config.encoder)  # an unknown encoder is refused before any work
    if getattr(trace, "released", False):
        raise ValueError("a scanned trace (read.scan) is written once: its light events are dropped while it is written")
    stats = WriteStats(events=len(trace.events))
    tracks = TrackTable(trace, layout.lane_names if layout is not None else None)
    plan = plan_events(trace, layout, tracks, stats)
    plan.source = getattr(trace, "source", None)
    try:
        if plan.source is not None:  # two-pass read: of the light events the flow binding needs the
            stats.reading = "two-pass"  # flow events and the slices in plan.starts; the packets read them again
            plan.events = [plan.events[i] for i in plan.flow_indices]  # the flow events alone, in order
            plan.flow_indices = range(len(plan.events))  # type: ignore[assignment]  # (their positions there)
            trace.release()  # type: ignore[attr-defined]
        flows = bind_flows(plan, stats)
        if plan.source is not None:
            plan.starts = SliceStarts()
            plan.events = []
        records, packets_per_track = order_records(plan, tracks, stats)
        typed = _join_arg_keys(layout) if config.list_args == "text" else frozenset()
        write_packets(out, plan, flows, records, packets_per_track, tracks, trace.base_time_ns, typed, config, stats)
    finally:
        if plan.source is not None:
            plan.source.close(check=False)  # closed already unless something failed on the way
    return stats


def _join_arg_keys(layout: Optional[LaneLayout]) -> FrozenSet[str]:
    """Arg keys the join adds (annotation fields, graph ids): never written as list text.

    A user's annotation field holding a list stays typed even where its key is also one of
    Kineto's (the join's value replaces Kineto's on that event). Taken from the layout when
    the join recorded them, else collected from every placement.
    """
    if layout is None:
        return frozenset()
    keys = getattr(layout, "arg_keys", None)
    if keys is not None:
        return frozenset(keys)
    seen: set = set()
    for p in layout.placements.values():
        seen.update(p.args)
    return frozenset(seen)
