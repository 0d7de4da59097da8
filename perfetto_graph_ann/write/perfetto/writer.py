"""Write a :class:`KinetoTrace` (optionally laid out by the join) as a Perfetto TrackEvent trace.

Steps: place every event on a home (GPU lane, thread, named track, counter track), give
each slice a nesting track (:mod:`.overlap`), bind flows (:mod:`.flows`), then stream
packets in timestamp order to the output in batches. Per event only a few small tuples are
kept; packets are encoded one at a time and written every ``batch`` packets, so the output
is never held in memory as one ``Trace`` message.
"""
from __future__ import annotations

import dataclasses
import sys
from functools import partial
from operator import itemgetter
from typing import IO, TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ...read.model import CATEGORY_ALIASES, GPU_WORK_CATEGORIES, KinetoTrace, TraceEvent
from . import overlap
from .flows import plan_flows
from .interning import Interner
from .wire import _ONE_BYTE, _TWO_BYTES, varint
from .packets import ENCODERS, SEQ_INCREMENTAL_STATE_CLEARED, SEQUENCE_ID, TYPE_INSTANT, frame
from .tracks import TrackTable

if TYPE_CHECKING:  # annotation only: importing the join package costs ~18 ms a conversion
    from ...join.model import LaneLayout

BUILTIN_CLOCK_REALTIME = 1
BUILTIN_CLOCK_BOOTTIME = 6
#: How list-valued args of Kineto's own are written (see WriterConfig.list_args).
LIST_ARGS_MODES = ("text", "typed")

#: Sequence-scoped clock (64..127) whose timestamps are deltas to the previous packet.
INCREMENTAL_CLOCK = 64

_BEGIN, _END, _INSTANT, _COUNTER = 1, 0, 3, 4
#: kinds[i] of a slice whose args the packet loop changes (placement, stream, phase kept as an arg)
_BEGIN_REWRITTEN = 2


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
    #: None: all. For a trace only the SQL package reads (see query.session.open_converted).
    keep_args: Optional[FrozenSet[str]] = None
    batch: int = 4096  #: packets per write() call
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
    projected: int = 0  #: replay and scope slices added from the join's GPU projection (not input events)
    sequences: int = 0  #: packet sequences (1 shared + the busiest tracks' own)
    tracks: int = 0
    packets: int = 0
    bytes: int = 0


class _Categories(dict):
    """Raw ``cat`` -> normalised category (``TraceEvent.category``), computed once per spelling."""

    def __missing__(self, cat: str) -> str:
        c = cat.lower()
        v = self[cat] = CATEGORY_ALIASES.get(c, c)
        return v


_GPU_TRACK_CATEGORIES = GPU_WORK_CATEGORIES | {"gpu_user_annotation"}


def write_perfetto(trace: KinetoTrace, out: IO[bytes], layout: Optional[LaneLayout] = None,
                   config: WriterConfig = WriterConfig()) -> WriteStats:
    """Write ``trace`` as framed TracePackets to the binary stream ``out``."""
    stats = WriteStats(events=len(trace.events))
    placements = layout.placements if layout is not None else {}
    tracks = TrackTable(trace, layout.lane_names if layout is not None else None)
    events = trace.events
    cats = _Categories()

    # 1. metadata first: names and sort indices must be known before tracks are created;
    #    in the same pass, the pids Kineto uses for GPUs (those holding GPU work or GPU user annotations).
    kinds: List[int] = [0] * len(events)  # 0 skip, 1 slice, 2 slice with changed args, 3 instant
    gpu_pids = set()
    for e in events:
        ph = e.ph
        if ph == "X":
            if type(e.pid) is int and cats[e.cat] in _GPU_TRACK_CATEGORIES:
                gpu_pids.add(e.pid)
        elif ph == "M" and tracks.consume_metadata(e):
            stats.metadata += 1
            kinds[e.index] = -1
    tracks.gpu_pids = gpu_pids

    # 2. homes and spans
    by_home: Dict[Tuple, List[Tuple[int, int, int]]] = {}  # home -> spans (ts, -dur, index)
    # the by_home list of each (pid, tid) / (device, lane) seen, so most events find theirs in one lookup
    cpu_spans: Dict[Tuple, List[Tuple[int, int, int]]] = {}
    gpu_spans: Dict[Tuple, List[Tuple[int, int, int]]] = {}
    # event index -> lane, for GPU work whose args change (placement args, stream arg rewrite)
    rewrite: Dict[int, int] = {}
    # event index -> device, for events on a GPU pid with no int device arg (placed by the pid):
    # GPU work gets it as its `device` arg, which the SQL package needs to count it
    device_of: Dict[int, int] = {}
    counter_records: List[Tuple[int, int, int, int]] = []
    # ts -> the slice starting there (a list when several do), for the flow binding
    starts: Dict[int, Any] = {}
    starts_get = starts.get
    flow_indices: List[int] = []
    n_slices = n_instants = 0
    for e in events:
        i = e.index
        if kinds[i] == -1:
            continue
        ph = e.ph
        if ph in ("s", "t", "f") and e.id is not None:
            flow_indices.append(i)
            continue
        ts = e.ts_ns
        if ts is None:
            stats.untimed += 1
            continue
        if ph == "C":
            _counters(e, tracks, gpu_pids, counter_records, stats)
            continue
        dur = e.dur_ns
        if dur is None or (ph != "X" and ph in ("i", "I", "M", "n", "R", "B", "E")):  # X first: the usual case
            kinds[i] = _INSTANT
            dur = 0
            n_instants += 1
        else:
            kinds[i] = _BEGIN if ph == "X" else _BEGIN_REWRITTEN  # another phase: kept as the "ph" arg
            n_slices += 1
            c = starts_get(ts)
            if c is None:
                starts[ts] = e
            elif type(c) is list:
                c.append(e)
            else:
                starts[ts] = [c, e]
        spans = None
        pid = e.pid
        if type(pid) is int and pid in gpu_pids:
            p = placements.get(i)
            a = e.args
            device = a.get("device")
            stream_arg = a.get("stream")
            if type(device) is not int:
                device = device_of[i] = e.device  # written as the device arg if the args are rewritten
                stream_arg = None  # forces that rewrite (GPU work); the lane is the same: e.stream
            if p is not None:
                lane = p.lane
            else:
                lane = stream_arg if type(stream_arg) is int else e.stream
            if device is not None and lane is not None:
                key = (device, lane)
                spans = gpu_spans.get(key)
                if spans is None:
                    spans = gpu_spans[key] = by_home.setdefault(("gpu", device, lane), [])
                if ph == "X" and cats[e.cat] in GPU_WORK_CATEGORIES:
                    # unchanged args are written as they are (no copy): no placement args
                    # and already the lane as an int stream arg (True == 1, so check the type)
                    if (p is not None and p.args) or type(stream_arg) is not int or stream_arg != lane:
                        rewrite[i] = lane
                        if kinds[i] == _BEGIN:
                            kinds[i] = _BEGIN_REWRITTEN
        if spans is None:
            key = (pid, e.tid)
            spans = cpu_spans.get(key)
            if spans is None:
                spans = cpu_spans[key] = by_home.setdefault(tracks.cpu_home(pid, e.tid), [])
        spans.append((ts, -dur, i))

    stats.slices += n_slices
    stats.instants += n_instants

    # 2b. the join's GPU projection: replay and scope ranges as slices after the input events
    ranges = layout.ranges if layout is not None else ()
    base = len(events)  # indices from here on are projected ranges
    if ranges:
        kinds.extend([_BEGIN] * len(ranges))
        for k, r in enumerate(ranges):
            by_home.setdefault(_range_home(r), []).append((r.ts, -r.dur, base + k))
        stats.projected = len(ranges)

    # 3. flows
    stats.flow_events = len(flow_indices)
    fp = plan_flows(events, flow_indices, starts)
    if ranges:
        _launch_flows(ranges, base, kinds, fp)
    stats.flows = fp.count
    stats.unbound_flow_events = fp.unbound
    stats.flow_ends_without_start = fp.without_start

    # 4. nesting tracks per home, then one timestamp-ordered record list
    records: List[Tuple[int, int, int, int]] = []
    packets_per_track: Dict[int, int] = {}
    range_parents: Optional[Dict[int, int]] = None  # slice key of a range -> that of its parent range
    for home in sorted(by_home, key=_home_order):
        spans = by_home[home]
        spans.sort()  # (ts, -dur, index): start, longest first, file order
        new_track = partial(tracks.track, home)
        if home[0] in _RANGE_HOMES:  # the projection: ranges nest by scope, not by time alone
            if range_parents is None:
                range_parents = {base + k: base + r.parent for k, r in enumerate(ranges) if r.parent is not None}
            assigned = overlap.assign_forest(spans, range_parents.get, new_track)
        else:
            assigned = overlap.assign(spans, new_track)
        for recs in assigned:
            packets_per_track[recs[0][3]] = len(recs)
            records.extend(recs)
    for rec in counter_records:
        packets_per_track[rec[3]] = packets_per_track.get(rec[3], 0) + 1
    records.extend(counter_records)
    records.sort(key=itemgetter(0))  # stable: per-track order kept for equal timestamps
    stats.spill_tracks = tracks.spill_tracks
    stats.tracks = len(tracks.descriptors)

    # 5. packets: the busiest tracks get a sequence of their own (see _own_sequences)
    own = _own_sequences(packets_per_track, config.own_sequence_min)
    stats.sequences = 1 + len(own)
    n_seq = stats.sequences
    seq_of = [0] * (tracks.max_uuid() + 1)  # track uuid -> sequence slot (0: the shared sequence)
    if config.list_args not in LIST_ARGS_MODES:
        raise ValueError(f"list_args must be one of {LIST_ARGS_MODES}, not {config.list_args!r}")
    as_text = config.list_args == "text"
    typed = _join_arg_keys(layout) if as_text else frozenset()
    keep = config.keep_args
    encoders = [ENCODERS[config.encoder](Interner(), SEQUENCE_ID, None, as_text, typed, keep)]
    for slot, uuid in enumerate(own, 1):
        seq_of[uuid] = slot
        encoders.append(ENCODERS[config.encoder](Interner(), SEQUENCE_ID + slot, uuid, as_text, typed, keep))
    batch: List[bytes] = []
    written = 0

    def flush() -> None:
        nonlocal written
        data = b"".join(batch)
        out.write(data)
        written += len(data)
        stats.packets += len(batch)
        batch.clear()

    t0 = records[0][0] if records else 0
    batch.extend(_sequence_start(trace, t0))
    prevs: List[Optional[int]] = [None] * n_seq  # per sequence: the previous packet's time (None: not started)
    prevs[0] = t0
    # Track descriptors go on a sequence with no events: a thread's descriptor gives its
    # sequence that pid/tid, and the trace processor would then tag every event the sequence
    # draws on a GPU lane or other non-thread track with a made-up `legacy_event.passthrough_utid`.
    descriptor_sequence = SEQUENCE_ID + n_seq
    for d in tracks.descriptors:
        batch.append(frame(pb.TracePacket(trusted_packet_sequence_id=descriptor_sequence, track_descriptor=d).SerializeToString()))

    bar = None
    if config.progress or (config.progress is None and len(events) >= config.progress_min and sys.stderr.isatty()):
        from tqdm import tqdm

        bar = tqdm(total=len(records), unit="ev", desc="convert", file=sys.stderr, mininterval=0.5)
    outgoing = fp.outgoing
    terminating = fp.terminating
    begins = [enc.event for enc in encoders]
    ends = [enc.slice_end for enc in encoders]
    # FastEncoder's END packets are built here (half of all packets; a call each cost ~15% of the loop)
    end_tails: Optional[List[Optional[bytes]]] = [None] * len(seq_of) if config.encoder == "fast" else None
    step = config.batch
    append = batch.append
    no_flows = ()
    for ts, kind, i, uuid in records:
        q = seq_of[uuid]
        prev = prevs[q]
        if prev is None:  # first packet of a track's own sequence: its defaults and clock first
            batch.extend(_sequence_start(trace, ts, SEQUENCE_ID + q, uuid))
            prev = prevs[q] = ts
        if kind == _END:
            if kinds[i] == _INSTANT:
                continue  # instants have no end packet
            if end_tails is None:
                append(ends[q](ts - prev, uuid))
            else:  # FastEncoder.slice_end inlined: the packet after its timestamp is fixed per track
                d = ts - prev
                tail = end_tails[uuid]
                if tail is None:
                    tail = end_tails[uuid] = encoders[q].end_tail(uuid)
                p = b"\x40" + (_ONE_BYTE[d] if d < 128 else _TWO_BYTES[d - 128] if d < 0x4000 else varint(d)) + tail
                append(b"\x0a" + _ONE_BYTE[len(p)] + p)
        elif kind == _COUNTER:
            append(encoders[q].counter(ts - prev, uuid, i))  # i holds the value for counter records
        elif kinds[i] == _BEGIN and i < base:  # the usual slice: its own args as they are
            e = events[i]
            append(begins[q](ts - prev, uuid, e.cat, e.name, e.args, outgoing.get(i, no_flows),
                             terminating.get(i, no_flows)))
        elif i >= base:  # a projected range: its own args, never worth the whole-args cache
            r = ranges[i - base]
            if r.kind == "replay":  # a name used once: written as it is, not interned
                append(encoders[q].event_named(ts - prev, uuid, r.category, r.name, r.args, outgoing.get(i, no_flows),
                                               terminating.get(i, no_flows)))
            else:
                append(begins[q](ts - prev, uuid, r.category, r.name, r.args, no_flows, no_flows, cacheable=False))
        else:
            e = events[i]
            args = e.args
            if i in rewrite:
                args = dict(args)
                p = placements.get(i)
                if p is not None:
                    args.update(p.args)
                args["stream"] = rewrite[i]
                if device_of:
                    d = device_of.get(i)
                    if d is not None:
                        args["device"] = d
            ph = e.ph
            if ph != "X" and ph != "i" and ph != "I" and "ph" not in args:
                args = dict(args)
                args["ph"] = ph
            if kinds[i] == _INSTANT:
                append(begins[q](ts - prev, uuid, e.cat, e.name, args, outgoing.get(i, no_flows),
                                 terminating.get(i, no_flows), TYPE_INSTANT))
            else:
                append(begins[q](ts - prev, uuid, e.cat, e.name, args, outgoing.get(i, no_flows),
                                 terminating.get(i, no_flows)))
        prevs[q] = ts  # incremental clock: each packet carries the delta to its sequence's previous one
        if len(batch) >= step:
            flush()
            if bar is not None:
                bar.update(step)
    flush()
    if bar is not None:
        bar.update(len(records) - bar.n)
        bar.close()
    stats.bytes = written
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


_RANGE_HOMES = ("replays", "scope")


def _range_home(r: Any) -> Tuple:
    return ("replays", r.device) if r.kind == "replay" else ("scope", r.device)


def _launch_flows(ranges: Any, base: int, kinds: List[int], fp: Any) -> None:
    """A flow from each replay's CPU launch slice to its replay slice (ids after Kineto's)."""
    next_id = fp.count + 1
    for k, r in enumerate(ranges):
        src = r.launch
        if src is None or kinds[src] not in (_BEGIN, _BEGIN_REWRITTEN):
            continue
        fp.outgoing[src] = list(fp.outgoing.get(src, ())) + [next_id]
        fp.terminating[base + k] = [next_id]
        next_id += 1
    fp.count = next_id - 1


def _home_order(home: Tuple) -> Tuple:
    kind = {"gpu": 0, "replays": 1, "scope": 2, "thread": 3, "wide_thread": 4, "named": 5}[home[0]]
    return (kind,) + tuple((0, x) if type(x) is int else (1, str(x)) for x in home[1:])


def _counters(e: TraceEvent, tracks: TrackTable, gpu_pids: set, out: List, stats: WriteStats) -> None:
    device = e.pid if type(e.pid) is int and e.pid in gpu_pids else None
    for key, value in e.args.items():
        if type(value) not in (int, float):
            continue
        name = e.name if len(e.args) == 1 else f"{e.name} {key}"
        uuid = tracks.counter_track(e.pid, e.tid, name, device)
        out.append((e.ts_ns, _COUNTER, value, uuid))
        stats.counter_values += 1


#: Own sequences get ids 2..127 (one-byte varints); tracks beyond stay on the shared sequence.
MAX_OWN_SEQUENCES = 126


def _own_sequences(packets_per_track: Dict[int, int], minimum: int) -> List[int]:
    """Track uuids that get their own sequence: at least ``minimum`` packets, busiest first.

    Why: on the shared sequence every BEGIN and END names its track (``track_uuid``, 2-3
    bytes) and its timestamp is a delta to whatever packet came before on any track. A
    sequence of its own costs a defaults packet, a clock snapshot and its own interning
    (names used on several tracks are defined once per sequence), so only busy tracks gain.
    """
    busy = [u for u, n in packets_per_track.items() if n >= minimum]
    busy.sort(key=lambda u: (-packets_per_track[u], u))
    return busy[:MAX_OWN_SEQUENCES]


def _sequence_start(trace: KinetoTrace, t0: int, sequence_id: int = SEQUENCE_ID, track: Optional[int] = None) -> List[bytes]:
    """Packets that open a packet sequence at time ``t0``: cleared incremental state, clocks.

    Event timestamps use a sequence-scoped incremental clock (id 64): each packet's
    ``timestamp`` is the ns delta to the previous packet's on its sequence (the events are
    written in time order), which keeps most timestamps to one or two bytes. The
    ClockSnapshot ties that clock to BOOTTIME (the trace clock: Kineto's ``ts``) at ``t0``
    and, when the trace has ``baseTimeNanoseconds``, BOOTTIME to REALTIME: Unix time =
    ``baseTimeNanoseconds + ts`` (on every sequence, so any snapshot gives the same offset).
    A busy track's own sequence also names the track in ``track_event_defaults``.
    """
    first = pb.TracePacket(trusted_packet_sequence_id=sequence_id, sequence_flags=SEQ_INCREMENTAL_STATE_CLEARED)
    first.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
    if track is not None:
        first.trace_packet_defaults.track_event_defaults.track_uuid = track
    snap = pb.ClockSnapshot(primary_trace_clock=BUILTIN_CLOCK_BOOTTIME)
    snap.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=t0, is_incremental=True)
    snap.clocks.add(clock_id=BUILTIN_CLOCK_BOOTTIME, timestamp=t0)
    base = trace.base_time_ns
    if base and 0 <= base + t0 < (1 << 64):
        snap.clocks.add(clock_id=BUILTIN_CLOCK_REALTIME, timestamp=base + t0)
    clock = pb.TracePacket(trusted_packet_sequence_id=sequence_id, clock_snapshot=snap)
    return [frame(first.SerializeToString()), frame(clock.SerializeToString())]
