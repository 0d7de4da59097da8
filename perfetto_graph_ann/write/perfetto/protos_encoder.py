"""The reference encoder: TrackEvent packets built as ``perfetto.protos`` messages.

Simple and obviously right; :class:`~.fast_encoder.FastEncoder` must give its bytes exactly
(tests compare the two). The shared rules (list args as text, the ``keep`` filter, interned
strings, placeholders in arrays) are in :mod:`.packets`.
"""
from __future__ import annotations

from decimal import Decimal
from typing import AbstractSet, Any, List, Mapping, Optional, Sequence

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .interning import ANNOTATION_NAMES, CATEGORIES, NAMES, STRING_VALUES, Interner
from .descriptors import TrackDescriptor
from .packets import (BUILTIN_CLOCK_BOOTTIME, BUILTIN_CLOCK_REALTIME, INCREMENTAL_CLOCK, INT64_MIN, MAX_ARG_DEPTH,
                      MAX_INTERNED_STRING, MIN_INTERNED_STRING, SEQ_INCREMENTAL_STATE_CLEARED,
                      SEQ_NEEDS_INCREMENTAL_STATE, SEQUENCE_ID, TYPE_COUNTER, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
                      UINT64_END, frame, EncoderBase, json_text, kept, list_text, placeholder)
from .wire import utf8

__all__ = ["ProtosEncoder"]

#: InternedData kind -> its field for names (string values have their own: see ``_packet``).
_INTERNED_FIELDS = {1: "event_categories", 2: "event_names", 3: "debug_annotation_names"}


class ProtosEncoder(EncoderBase):
    """Reference encoder built on ``perfetto.protos`` message classes.

    One encoder per packet sequence: ``sequence_id`` is written on every packet, and
    ``track_uuid`` is left out for ``default_track`` (the sequence's
    ``track_event_defaults.track_uuid``, see :func:`.packets.sequence_start`).
    """

    def __init__(self, interner: Interner, sequence_id: int = SEQUENCE_ID, default_track: Optional[int] = None,
                 list_text: bool = False, typed_keys: AbstractSet[str] = frozenset(),
                 keep: Optional[AbstractSet[str]] = None) -> None:
        self.interner = interner
        self.sequence_id = sequence_id
        self.default_track = default_track
        self.list_text = list_text
        self.typed_keys = typed_keys
        self.keep = keep

    def _track(self, te: "pb.TrackEvent", track: int) -> None:
        if track != self.default_track:
            te.track_uuid = track

    def _annotation(self, msg: "pb.DebugAnnotation", value: Any, depth: int) -> None:
        t = type(value)
        if t is bool:
            msg.bool_value = value
        elif t is int:
            if INT64_MIN <= value < (1 << 63):
                msg.int_value = value
            elif 0 <= value < UINT64_END:
                msg.uint_value = value
            else:
                self._string(msg, str(value))
        elif t is float or t is Decimal:
            msg.double_value = float(value)
        elif t is str:
            self._string(msg, value)
        elif value is None:
            pass  # no value: no arg row, as Perfetto's JSON importer does for null
        elif depth >= MAX_ARG_DEPTH:
            self._string(msg, json_text(value))
        elif t is list or t is tuple:
            for v in value:
                item = msg.array_values.add()
                hole = placeholder(v)
                if hole is None:
                    self._annotation(item, v, depth + 1)
                else:
                    self._string(item, hole)
        elif t is dict:
            for k, v in value.items():
                entry = msg.dict_entries.add()
                entry.name = utf8(str(k)).decode("utf-8")
                self._annotation(entry, v, depth + 1)
        else:
            self._string(msg, str(value))

    def _string(self, msg: "pb.DebugAnnotation", text: str) -> None:
        if MIN_INTERNED_STRING <= len(text) <= MAX_INTERNED_STRING:
            msg.string_value_iid = self.interner.iid(STRING_VALUES, text)
        else:
            msg.string_value = utf8(text).decode("utf-8")

    def _event(self, te: "pb.TrackEvent", args: Optional[Mapping[str, Any]]) -> None:
        if args:
            for k, v in args.items():
                if not kept(self.keep, k):
                    continue
                a = te.debug_annotations.add()
                a.name_iid = self.interner.iid(ANNOTATION_NAMES, k)
                text = list_text(v) if self.list_text and type(v) is list and k not in self.typed_keys else None
                if text is None:
                    self._annotation(a, v, 0)
                else:
                    self._string(a, text)

    def _packet(self, ts: int, te: "pb.TrackEvent", flags: int) -> bytes:
        p = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=self.sequence_id)
        p.track_event.CopyFrom(te)
        pending = self.interner.take_pending()
        for kind, iid, text in pending:
            if kind == STRING_VALUES:
                p.interned_data.debug_annotation_string_values.add(iid=iid, str=utf8(text))
            else:
                getattr(p.interned_data, _INTERNED_FIELDS[kind]).add(iid=iid, name=utf8(text).decode("utf-8"))
        if flags:
            p.sequence_flags = flags
        return frame(p.SerializeToString())

    def slice_begin(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                    flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = (), kind: int = TYPE_SLICE_BEGIN) -> bytes:
        te = pb.TrackEvent(type=kind, name_iid=name_iid)
        self._track(te, track)
        if cat_iid:
            te.category_iids.append(cat_iid)
        self._event(te, args)
        te.flow_ids.extend(flow_ids)
        te.terminating_flow_ids.extend(terminating_flow_ids)
        return self._packet(ts, te, SEQ_NEEDS_INCREMENTAL_STATE)

    def event(self, ts: int, track: int, cat: str, name: str, args: Optional[Mapping[str, Any]],
              flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = (), kind: int = TYPE_SLICE_BEGIN,
              cacheable: bool = True) -> bytes:
        """A slice begin (or ``kind`` TYPE_INSTANT) named by strings: category ("" for none) and name
        are interned here, category first, then the args' names and values. ``cacheable`` is
        :class:`FastEncoder`'s hint (no effect here: the bytes are the same)."""
        cat_iid = self.interner.iid(CATEGORIES, cat) if cat else 0
        return self.slice_begin(ts, track, cat_iid, self.interner.iid(NAMES, name), args, flow_ids, terminating_flow_ids, kind)

    def event_named(self, ts: int, track: int, cat: str, name: str, args: Optional[Mapping[str, Any]],
                    flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = ()) -> bytes:
        """A slice begin whose name is written as a string (``TrackEvent.name``), not
        interned: for names used once (a replay slice's ``<graph name> #<replay>``), where
        interning only adds a definition to the packet and an entry to the interner."""
        te = pb.TrackEvent(type=TYPE_SLICE_BEGIN, name=name)
        self._track(te, track)
        if cat:
            te.category_iids.append(self.interner.iid(CATEGORIES, cat))
        self._event(te, args)
        te.flow_ids.extend(flow_ids)
        te.terminating_flow_ids.extend(terminating_flow_ids)
        return self._packet(ts, te, SEQ_NEEDS_INCREMENTAL_STATE)

    def slice_end(self, ts: int, track: int) -> bytes:
        te = pb.TrackEvent(type=TYPE_SLICE_END)
        self._track(te, track)
        p = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=self.sequence_id, track_event=te)
        return frame(p.SerializeToString())

    def counter(self, ts: int, track: int, value: Any) -> bytes:
        te = pb.TrackEvent(type=TYPE_COUNTER)
        self._track(te, track)
        if type(value) is int and INT64_MIN <= value < (1 << 63):
            te.counter_value = value
        else:
            te.double_counter_value = float(value)
        p = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=self.sequence_id, track_event=te)
        return frame(p.SerializeToString())

    # -- the packets around the events, as ``perfetto.protos`` messages ------------------------
    def sequence_start(self, t0: int, base_time_ns: int = 0) -> List[bytes]:
        """This sequence's opening packets (see :func:`.packets.sequence_start`)."""
        first = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id,
                               sequence_flags=SEQ_INCREMENTAL_STATE_CLEARED)
        first.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
        if self.default_track is not None:
            first.trace_packet_defaults.track_event_defaults.track_uuid = self.default_track
        snap = pb.ClockSnapshot(primary_trace_clock=BUILTIN_CLOCK_BOOTTIME)
        snap.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=t0, is_incremental=True)
        snap.clocks.add(clock_id=BUILTIN_CLOCK_BOOTTIME, timestamp=t0)
        if base_time_ns and 0 <= base_time_ns + t0 < (1 << 64):
            snap.clocks.add(clock_id=BUILTIN_CLOCK_REALTIME, timestamp=base_time_ns + t0)
        clock = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id, clock_snapshot=snap)
        return [frame(first.SerializeToString()), frame(clock.SerializeToString())]

    @staticmethod
    def descriptor(d: TrackDescriptor) -> "pb.TrackDescriptor":
        """``d`` as a ``perfetto.protos`` message (strings as :func:`.wire.utf8` writes them)."""
        def text(s: str) -> str:
            return utf8(s).decode("utf-8")

        m = pb.TrackDescriptor(uuid=d.uuid)
        for f in ("parent_uuid", "child_ordering", "sibling_order_rank", "sibling_merge_behavior"):
            if getattr(d, f) is not None:
                setattr(m, f, getattr(d, f))
        for f in ("name", "description", "sibling_merge_key"):
            if getattr(d, f) is not None:
                setattr(m, f, text(getattr(d, f)))
        if d.process is not None:
            m.process.pid = d.process.pid
            if d.process.process_name is not None:
                m.process.process_name = text(d.process.process_name)
            if d.process.legacy_sort_index is not None:
                m.process.legacy_sort_index = d.process.legacy_sort_index
            m.process.process_labels.extend(text(s) for s in d.process.process_labels)
        if d.thread is not None:
            m.thread.pid = d.thread.pid
            m.thread.tid = d.thread.tid
            if d.thread.thread_name is not None:
                m.thread.thread_name = text(d.thread.thread_name)
            if d.thread.legacy_sort_index is not None:
                m.thread.legacy_sort_index = d.thread.legacy_sort_index
        if d.counter:
            m.counter.SetInParent()
        return m

    @staticmethod
    def descriptor_packet(descriptor: TrackDescriptor, sequence_id: int) -> bytes:
        """One framed track descriptor packet (see :func:`.packets.descriptor_packet`)."""
        packet = pb.TracePacket(trusted_packet_sequence_id=sequence_id,
                                track_descriptor=ProtosEncoder.descriptor(descriptor))
        return frame(packet.SerializeToString())

    @staticmethod
    def sort_window_mark() -> bytes:
        """A sorting-window mark (see :func:`.packets.sort_window_mark`)."""
        flushed = pb.TracePacket(service_event=pb.TracingServiceEvent(all_data_sources_flushed=True))
        read = pb.TracePacket(service_event=pb.TracingServiceEvent(read_tracing_buffers_completed=True))
        return b"".join([frame(flushed.SerializeToString())] * 2 + [frame(read.SerializeToString())])
