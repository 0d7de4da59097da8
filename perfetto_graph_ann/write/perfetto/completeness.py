"""The completeness record of every ``.pftrace`` this package writes (issue 32, item 2).

A trace cut short (a copy interrupted, a disk filled, a download stopped) still loads: the
trace processor reads the packets it finds and says nothing (checked on v52: the demo's
``seed_block.annotated.pftrace`` cut to 5,000 of its 19,207 bytes loads with 4 of its 70
kernels and no import error). So every trace we write opens with a **start mark** and ends
with an **end record**, two packets of fixed size whose only field is in TracePacket's
extension range (1000-1999, which Perfetto leaves to extensions), so the trace processor
and the UI skip them (checked on v52: same tables, no import stat):

- start mark: the first packet, field 1900, the text :data:`START_TEXT`: the file is ours and
  must end with an end record;
- end record: the last packet, field 1901, three fixed64 numbers: the bytes before it (the
  start mark included), the packets before it, and the slices written (slice and instant
  events: the rows the trace processor's ``slice`` table gets).

Fixed sizes make the check O(1): the first :data:`START_SIZE` bytes and the last
:data:`END_SIZE` bytes of the (decompressed) file, and the file's length.
:mod:`perfetto_graph_ann.query.engine.complete` does it when a trace is loaded.
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Optional

from .wire import field_bytes

#: TracePacket fields of the start mark and the end record (in the extension range 1000-1999).
START_FIELD = 1900
END_FIELD = 1901
#: The start mark's payload.
START_TEXT = b"perfetto_graph_ann trace: ends with a completeness record (TracePacket field 1901)"
#: The start mark, framed as the first packet of a trace.
START = field_bytes(1, field_bytes(START_FIELD, START_TEXT))
START_SIZE = len(START)

_FIXED64 = struct.Struct("<Q")
#: The end record's payload: fields 1, 2, 3 as fixed64 (wire type 1), in that order.
_END_LAYOUT = struct.Struct("<BQBQBQ")
_END_TAGS = ((1 << 3) | 1, (2 << 3) | 1, (3 << 3) | 1)


@dataclasses.dataclass(frozen=True)
class Completeness:
    """What a writer wrote before its end record."""

    bytes: int  #: bytes before the end record (start mark included)
    packets: int  #: packets before the end record (start mark included)
    slices: int  #: slice and instant events written (the trace processor's ``slice`` rows)


def end_record(c: Completeness) -> bytes:
    """The end record packet for ``c``, framed (always :data:`END_SIZE` bytes)."""
    payload = _END_LAYOUT.pack(_END_TAGS[0], c.bytes, _END_TAGS[1], c.packets, _END_TAGS[2], c.slices)
    return field_bytes(1, field_bytes(END_FIELD, payload))


END_SIZE = len(end_record(Completeness(0, 0, 0)))
#: The bytes an end record starts with (framing, tag and length: the same for every record).
_END_PREFIX = end_record(Completeness(0, 0, 0))[: END_SIZE - _END_LAYOUT.size]


def parse_end_record(tail: bytes) -> Optional[Completeness]:
    """The record in ``tail`` (a file's last :data:`END_SIZE` bytes), or None if it is not one."""
    if len(tail) != END_SIZE or not tail.startswith(_END_PREFIX):
        return None
    t1, b, t2, p, t3, s = _END_LAYOUT.unpack(tail[len(_END_PREFIX):])
    if (t1, t2, t3) != _END_TAGS:
        return None
    return Completeness(b, p, s)


def strip_marks(data: bytes) -> "tuple[bytes, Optional[Completeness]]":
    """``data`` without its start mark and end record, and the record (None, and ``data`` as
    it is, for a trace that does not start with our mark)."""
    if not data.startswith(START):
        return data, None
    record = parse_end_record(data[-END_SIZE:]) if len(data) >= START_SIZE + END_SIZE else None
    if record is None or record.bytes != len(data) - END_SIZE:
        return data, None
    return data[START_SIZE:-END_SIZE], record
