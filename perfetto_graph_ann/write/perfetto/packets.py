"""The packet layout both TrackEvent encoders share, and the packets that are not events.

The writer streams one ``Trace`` as framed packets (``Trace.packet``, field 1: tag, length,
payload), so the output file is the concatenation of what this layer returns. Two encoders
with one interface produce the event packets of one sequence (slice begin / end, instant,
counter):

* :class:`~.protos_encoder.ProtosEncoder` builds ``perfetto.protos`` messages and serializes
  them (the reference; simple and obviously right);
* :class:`~.fast_encoder.FastEncoder` writes the same bytes by hand, with caches of encoded
  debug annotations (:mod:`.fast_args`). It exists because the converter must be no slower
  than ``json.load`` of the input (``benchmarks/convert.py`` measures both); tests check both
  give identical bytes.

Both take ``list_text``: when true, a list-valued arg (top level) whose key is not in
``typed_keys`` is written as one string, its compact JSON text (:func:`list_text`), instead
of one typed debug annotation per item. That is the writer's default for Kineto's own
fields (``grid``, ``block``, the ``record_shapes`` arrays): one arg row instead of one per
item, which the trace processor parses much faster; see docs/design.md.

``keep`` (None: every arg) limits the args written to those named in it (a name also
matches with '.' read as '_', as the trace processor stores it): for a trace that only the
SQL package will read (``report``), args no module reads are left out.

This module also builds the packets around the events: a sequence's opening packets
(:func:`sequence_start`), the track descriptors (:func:`descriptor_packet`) and the marks
that let a trace processor parse a stream as it comes (:func:`sort_window_mark`).
"""
from __future__ import annotations

from typing import AbstractSet, Any, List, Mapping, Optional, Sequence

import msgspec

from ...join.model import SLACK_ARG
from .descriptors import TrackDescriptor, track_descriptor_bytes
from .wire import field_bytes, varint, varint_field

__all__ = ["BUILTIN_CLOCK_BOOTTIME", "BUILTIN_CLOCK_REALTIME", "descriptor_packet", "EncoderBase", "frame",
           "INCREMENTAL_CLOCK", "INT64_MIN", "json_args", "json_text", "kept", "list_text", "MAX_ARG_DEPTH",
           "MAX_INTERNED_STRING", "MIN_INTERNED_STRING", "placeholder", "SEQ_INCREMENTAL_STATE_CLEARED",
           "SEQ_NEEDS_INCREMENTAL_STATE", "SEQUENCE_ID", "sequence_start", "sort_window_mark", "TYPE_COUNTER",
           "TYPE_INSTANT", "TYPE_SLICE_BEGIN", "TYPE_SLICE_END", "UINT64_END", "VARYING_KEYS"]

SEQUENCE_ID = 1
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4

BUILTIN_CLOCK_REALTIME = 1
BUILTIN_CLOCK_BOOTTIME = 6
#: Sequence-scoped clock (64..127) whose timestamps are deltas to the previous packet.
INCREMENTAL_CLOCK = 64

#: Nesting deeper than this in an arg value is written as its JSON text (string).
MAX_ARG_DEPTH = 32
#: String values of 2 to 64 characters are interned (``string_value_iid``, 3 bytes a use);
#: shorter ones are as cheap inline, longer ones are rarely repeated.
MIN_INTERNED_STRING = 2
MAX_INTERNED_STRING = 64
INT64_MIN = -(1 << 63)
UINT64_END = 1 << 64
json_args = msgspec.json.Encoder(decimal_format="number").encode
#: Per-event values that make otherwise identical args differ: CUPTI / profiler counters, the
#: join's per-node and per-replay numbers (a graphed kernel's args differ by those alone, and by
#: its critical path slack where the graph's edges are recorded: it differs every replay), and
#: Kineto's per-event measure of a memcpy / memset (its bandwidth, a float).
VARYING_KEYS = frozenset({"correlation", "External id", "Ev Idx", "Record function id", "Python id", "Python parent id",
                          "graph node id", "replay", SLACK_ARG, "memory bandwidth (GB/s)"})


def frame(payload: bytes) -> bytes:
    """``Trace.packet`` framing: tag 0x0A, varint length, packet bytes."""
    return b"\x0a" + varint(len(payload)) + payload


def placeholder(item: Any) -> Optional[str]:
    """Array items with no value of their own are written as text so positions survive.

    The trace processor numbers array items by the values it stores: an empty item would
    shift later ones (``[[1], [], [2]]`` read back as ``[[1], [2]]``). Kineto's ``Input Dims``
    are positional, so an empty list / dict / null inside an array becomes "[]" / "{}" / "null".
    """
    if item is None:
        return "null"
    t = type(item)
    if (t is list or t is tuple) and not item:
        return "[]"
    if t is dict and not item:
        return "{}"
    return None


def kept(keep: Optional[AbstractSet[str]], key: str) -> bool:
    """Whether arg ``key`` is written under the ``keep`` filter (None keeps everything)."""
    return keep is None or key in keep or key.replace(".", "_") in keep


def list_text(value: list) -> Optional[str]:
    """Compact JSON text of a list arg (``[[4,256],[],[256]]``), or None when it cannot be
    written exactly that way (a null, NaN or infinity inside, or a value JSON cannot hold):
    such a list stays typed."""
    try:
        b = json_args(value)
    except (RecursionError, TypeError, ValueError, OverflowError):
        return None
    if b"null" in b:
        return None
    return b.decode("utf-8", "replace")


def json_text(value: Any) -> str:
    """An arg value nested deeper than :data:`MAX_ARG_DEPTH`, written as one string."""
    import json

    try:
        return json.dumps(value, default=str, allow_nan=True)
    except (ValueError, RecursionError):
        return repr(value)


def sequence_start(t0: int, base_time_ns: int = 0, sequence_id: int = SEQUENCE_ID,
                   track: Optional[int] = None) -> List[bytes]:
    """Packets that open a packet sequence at time ``t0``: cleared incremental state, clocks.

    Event timestamps use a sequence-scoped incremental clock (id 64): each packet's
    ``timestamp`` is the ns delta to the previous packet's on its sequence (the events are
    written in time order), which keeps most timestamps to one or two bytes. The
    ClockSnapshot ties that clock to BOOTTIME (the trace clock: Kineto's ``ts``) at ``t0``
    and, when the trace has ``baseTimeNanoseconds`` (``base_time_ns``), BOOTTIME to REALTIME:
    Unix time = ``baseTimeNanoseconds + ts`` (on every sequence, so any snapshot gives the
    same offset). A busy track's own sequence also names the track in ``track_event_defaults``.

    Written by hand (see :mod:`.descriptors` for why), as the reference encoder's
    ``ProtosEncoder.sequence_start`` builds it from ``perfetto.protos`` classes.
    """
    seq = varint_field(10, sequence_id)  # TracePacket.trusted_packet_sequence_id
    defaults = b""  # TracePacketDefaults
    if track is not None:  # 11: track_event_defaults { 11: track_uuid }
        defaults = field_bytes(11, varint_field(11, track))
    defaults += varint_field(58, INCREMENTAL_CLOCK)  # timestamp_clock_id
    # TracePacket 13: sequence_flags, 59: trace_packet_defaults
    first = seq + varint_field(13, SEQ_INCREMENTAL_STATE_CLEARED) + field_bytes(59, defaults)
    # ClockSnapshot.Clock: 1 clock_id, 2 timestamp, 3 is_incremental
    clocks = [varint_field(1, INCREMENTAL_CLOCK) + varint_field(2, t0) + varint_field(3, 1),
              varint_field(1, BUILTIN_CLOCK_BOOTTIME) + varint_field(2, t0)]
    if base_time_ns and 0 <= base_time_ns + t0 < (1 << 64):
        clocks.append(varint_field(1, BUILTIN_CLOCK_REALTIME) + varint_field(2, base_time_ns + t0))
    # ClockSnapshot 1: clocks (repeated), 2: primary_trace_clock; TracePacket 6: clock_snapshot
    snap = b"".join([field_bytes(1, c) for c in clocks]) + varint_field(2, BUILTIN_CLOCK_BOOTTIME)
    return [frame(first), frame(field_bytes(6, snap) + seq)]


#: TracePacket 69: service_event { 3: all_data_sources_flushed } / { 4: read_tracing_buffers_completed }
_FLUSHED = frame(field_bytes(69, varint_field(3, 1)))
_READ_COMPLETED = frame(field_bytes(69, varint_field(4, 1)))


def sort_window_mark() -> bytes:
    """Packets that end a sorting window for a trace processor reading the stream (two
    ``TracingServiceEvent.all_data_sources_flushed``, then ``read_tracing_buffers_completed``,
    as the tracing service writes them into a long trace file).

    Without them the trace processor keeps every event until the end of the input, then sorts
    and parses them all; after such a mark it sorts and parses every event received before
    the previous mark. That is exact only for a stream whose packets come in time order
    (the writer's): nothing after a mark is earlier than what came before it, so the tables
    are the same as without marks (tests compare them), while the parsing runs as the rest
    streams in. Each mark adds two ``all_data_source_flushed_ns`` rows (value 0) to the
    ``metadata`` table, which is why only a trace no one else reads gets them
    (``WriterConfig.sort_window_bytes``).
    """
    return _FLUSHED * 2 + _READ_COMPLETED


def descriptor_packet(descriptor: TrackDescriptor, sequence_id: int) -> bytes:
    """One framed packet holding a track descriptor, on ``sequence_id`` (TracePacket 10:
    trusted_packet_sequence_id, 60: track_descriptor)."""
    return frame(varint_field(10, sequence_id) + field_bytes(60, track_descriptor_bytes(descriptor)))


class EncoderBase:
    """What both encoders share: an instant is a slice begin of type ``TYPE_INSTANT``, and the
    packets around the events (a sequence's start, a track descriptor, a sorting-window mark)
    are the hand-written ones of this module, which the reference encoder builds from
    ``perfetto.protos`` classes instead."""

    #: the packet sequence this encoder writes (``trusted_packet_sequence_id``)
    sequence_id: int = SEQUENCE_ID
    #: the track its events name by default (``track_event_defaults``), None on the shared sequence
    default_track: Optional[int] = None

    def sequence_start(self, t0: int, base_time_ns: int = 0) -> List[bytes]:
        """This encoder's sequence opened at ``t0`` (:func:`sequence_start`)."""
        return sequence_start(t0, base_time_ns, self.sequence_id, self.default_track)

    @staticmethod
    def descriptor_packet(descriptor: TrackDescriptor, sequence_id: int) -> bytes:
        """One framed track descriptor packet (:func:`descriptor_packet`)."""
        return descriptor_packet(descriptor, sequence_id)

    @staticmethod
    def sort_window_mark() -> bytes:
        """A sorting-window mark (:func:`sort_window_mark`)."""
        return sort_window_mark()

    def slice_begin(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                    flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = (),
                    kind: int = TYPE_SLICE_BEGIN) -> bytes:
        raise NotImplementedError

    def instant(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = ()) -> bytes:
        return self.slice_begin(ts, track, cat_iid, name_iid, args, flow_ids, terminating_flow_ids, TYPE_INSTANT)
