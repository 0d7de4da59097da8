"""Decode a .pftrace (optionally gzipped) with ``perfetto.protos`` classes, without SQL.

A small, independent reader for tests: it rebuilds slices from SLICE_BEGIN/END pairs per
track, resolves interned names, and collects tracks, instants, counters, flows and clock
snapshots. Other helpers' tests may reuse it.
"""
from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


@dataclasses.dataclass
class Slice:
    track: int
    name: str
    cat: str
    ts: int
    dur: Optional[int]  #: None for instants
    args: Dict[str, Any]
    flow_ids: List[int]
    terminating_flow_ids: List[int]


@dataclasses.dataclass
class Decoded:
    tracks: Dict[int, "pb.TrackDescriptor"]
    slices: List[Slice]
    instants: List[Slice]
    counters: List[Tuple[int, int, float]]  #: (track, ts, value)
    clock_snapshots: List["pb.ClockSnapshot"]
    packets: List["pb.TracePacket"]

    def track_name(self, uuid: int) -> str:
        d = self.tracks[uuid]
        if d.HasField("thread"):
            return d.thread.thread_name
        if d.HasField("process"):
            return d.process.process_name
        return d.name

    def flows(self) -> List[Tuple[Slice, Slice]]:
        """(source, target) slice pairs, one per flow id."""
        src = {f: s for s in self.slices + self.instants for f in s.flow_ids}
        out = []
        for s in self.slices + self.instants:
            for f in s.terminating_flow_ids:
                out.append((src.get(f), s))
        return out


_STRINGS: Dict[int, str] = {}  # interned string values of the sequence whose packet is being decoded


def annotation_value(a: "pb.DebugAnnotation") -> Any:
    """Python value of one DebugAnnotation (dicts and lists nested)."""
    which = [f.name for f, _ in a.ListFields()]
    if "string_value_iid" in which:
        return _STRINGS[a.string_value_iid]
    if a.dict_entries:
        return {e.name: annotation_value(e) for e in a.dict_entries}
    if a.array_values:
        return [annotation_value(v) for v in a.array_values]
    for field in ("bool_value", "int_value", "uint_value", "double_value", "string_value", "legacy_json_value"):
        if field in which:
            return getattr(a, field)
    return None


def decode(path: Path) -> Decoded:
    global _STRINGS
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    seq_names: Dict[int, Dict[Tuple[str, int], str]] = {}  # interning is per packet sequence
    seq_strings: Dict[int, Dict[int, str]] = {}
    default_track: Dict[int, int] = {}  # sequence -> track_event_defaults.track_uuid
    tracks: Dict[int, pb.TrackDescriptor] = {}
    open_: Dict[int, List[Slice]] = {}
    slices: List[Slice] = []
    instants: List[Slice] = []
    counters: List[Tuple[int, int, float]] = []
    snaps = []
    default_clock: Dict[int, int] = {}  # sequence -> trace_packet_defaults.timestamp_clock_id
    incremental: Dict[Tuple[int, int], int] = {}  # (sequence, clock) -> last value
    to_boot: Dict[int, int] = {}  # clock id -> offset to BOOTTIME (6)
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            seq_names[seq], seq_strings[seq] = {}, {}
            default_track.pop(seq, None)
        names = seq_names.setdefault(seq, {})
        _STRINGS = seq_strings.setdefault(seq, {})
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("timestamp_clock_id"):
            default_clock[seq] = p.trace_packet_defaults.timestamp_clock_id
        if p.trace_packet_defaults.track_event_defaults.HasField("track_uuid"):
            default_track[seq] = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("clock_snapshot"):
            boot = {c.clock_id: c.timestamp for c in p.clock_snapshot.clocks}.get(6)
            for c in p.clock_snapshot.clocks:
                if c.is_incremental:
                    incremental[(seq, c.clock_id)] = c.timestamp
                if boot is not None:
                    to_boot[c.clock_id] = boot - c.timestamp
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else default_clock.get(seq, 6)
        ts = p.timestamp
        if p.HasField("timestamp") and (seq, clock) in incremental:
            ts = incremental[(seq, clock)] = incremental[(seq, clock)] + p.timestamp
        if clock != 6 and p.HasField("timestamp"):
            ts += to_boot[clock]
        if p.HasField("interned_data"):
            idata = p.interned_data
            for e in idata.event_names:
                names[("name", e.iid)] = e.name
            for e in idata.event_categories:
                names[("cat", e.iid)] = e.name
            for e in idata.debug_annotation_names:
                names[("ann", e.iid)] = e.name
            for e in idata.debug_annotation_string_values:
                _STRINGS[e.iid] = e.str.decode("utf-8")
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("clock_snapshot"):
            snaps.append(p.clock_snapshot)
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        track = te.track_uuid if te.HasField("track_uuid") else default_track[seq]
        if te.type == pb.TrackEvent.TYPE_SLICE_END:
            s = open_[track].pop()
            s.dur = ts - s.ts
            continue
        if te.type == pb.TrackEvent.TYPE_COUNTER:
            v = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            counters.append((track, ts, v))
            continue
        args = {names[("ann", a.name_iid)] if a.name_iid else a.name: annotation_value(a) for a in te.debug_annotations}
        s = Slice(track, names[("name", te.name_iid)] if te.name_iid else te.name,
                  names[("cat", te.category_iids[0])] if te.category_iids else "", ts, None, args,
                  list(te.flow_ids), list(te.terminating_flow_ids))
        if te.type == pb.TrackEvent.TYPE_INSTANT:
            instants.append(s)
        else:
            open_.setdefault(track, []).append(s)
            slices.append(s)
    assert not any(open_.values()), "unterminated slices"
    return Decoded(tracks, slices, instants, counters, snaps, list(trace.packet))


def projected_slices(d, cat):
    """The projected slices of one category, with the args the writer leaves implied filled
    in as the SQL module reads them: ``busy ns`` = the span where absent; a scope slice
    without ``graph id`` / ``replay`` takes them from the replay slice under the same GPU
    that starts last at or before it (which must be the only one starting at that time)."""
    out = []
    replays = None
    for s in d.slices:
        if s.cat != cat:
            continue
        args = dict(s.args)
        if "busy ns" in args:
            assert args["busy ns"] != s.dur, s  # written only where it differs from the span
        else:
            args["busy ns"] = s.dur
        if cat == "gpu_scope" and "graph id" not in args:
            assert "replay" not in args, s
            if replays is None:
                replays = [r for r in d.slices if r.cat == "graph_replay"]
            gpu = d.tracks[s.track].parent_uuid
            before = [r for r in replays if d.tracks[r.track].parent_uuid == gpu and r.ts <= s.ts]
            last = max(r.ts for r in before)
            (own,) = [r for r in before if r.ts == last]
            args["graph id"], args["replay"] = own.args["graph id"], own.args["replay"]
        out.append(dataclasses.replace(s, args=args))
    return out
