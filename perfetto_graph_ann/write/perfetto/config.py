"""What the writer is told (:class:`WriterConfig`) and what it reports (:class:`WriteStats`):
a leaf module, so the writer's phases (:mod:`.plan`, :mod:`.emit`) and :mod:`.writer` share
them without importing each other."""
from __future__ import annotations

import dataclasses
from typing import FrozenSet, Optional

__all__ = ["LIST_ARGS_MODES", "WriteStats", "WriterConfig"]

#: How list-valued args of Kineto's own are written (see WriterConfig.list_args).
LIST_ARGS_MODES = ("text", "typed")


@dataclasses.dataclass
class WriterConfig:
    """How packets are produced."""

    encoder: str = "fast"  #: "fast" (hand-written) or "protos" (perfetto.protos classes)
    #: "text" (default): every list-valued arg of Kineto's own (``grid``, ``block``, the
    #: record_shapes arrays) as one string, its compact JSON text; the join's args (annotation
    #: fields, graph ids) stay typed. "typed": those lists as typed nested debug annotations,
    #: one arg row per item (full fidelity, slower to load; see docs/design.md).
    list_args: str = "text"
    #: Only args with these names are written (a name also matches with '.' read as '_');
    #: None: all. For a trace only the SQL package reads (see pipeline.query.open_converted).
    keep_args: Optional[FrozenSet[str]] = None
    batch: int = 4096  #: packets per write() call
    #: Every this many bytes, a sorting-window mark (:func:`.packets.sort_window_mark`): a
    #: trace processor fed the stream then parses it as it comes instead of all at the end.
    #: Same tables; adds ``metadata`` rows, so only for a trace no one else reads (the
    #: SQL-only session of ``pipeline.query.open_converted``). None: no marks.
    sort_window_bytes: Optional[int] = None
    progress: Optional[bool] = None  #: tqdm bar; None = on a TTY for >= progress_min events
    progress_min: int = 200_000
    #: A track with at least this many packets gets a packet sequence of its own (at most
    #: ``MAX_OWN_SEQUENCES``, busiest first) whose ``track_event_defaults`` name it, so its
    #: BEGIN/END packets carry no ``track_uuid`` and their time deltas stay on the track.
    own_sequence_min: int = 128


@dataclasses.dataclass
class WriteStats:
    """What was written; every input event is accounted for."""

    events: int = 0  #: input events
    slices: int = 0  #: slices written (complete events and unknown phases with a duration)
    instants: int = 0
    counter_values: int = 0
    metadata: int = 0  #: process/thread name, label and sort-index events used for tracks
    flow_events: int = 0  #: Kineto s/t/f events turned into flows
    flows: int = 0
    unbound_flow_events: int = 0  #: flow events with no slice starting at their ts on their thread
    flow_ends_without_start: int = 0
    untimed: int = 0  #: non-metadata events without ts (cannot be placed on a timeline)
    spill_tracks: int = 0
    #: how the input was read: "in memory" (every event decoded and held) or "two-pass" (light
    #: events, each read again from its offset when its packet is written: ``read.scan``)
    reading: str = "in memory"
    projected: int = 0  #: replay and scope slices added from the join's GPU projection (not input events)
    #: gpu_user_annotation events not written: left on a lane without GPU work by the join's
    #: moves (torch 2.15's exporter drops them likewise)
    dropped_user_annotations: int = 0
    sequences: int = 0  #: packet sequences (1 shared + the busiest tracks' own)
    tracks: int = 0
    packets: int = 0
    bytes: int = 0
