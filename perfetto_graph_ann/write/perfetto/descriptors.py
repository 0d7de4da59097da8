"""The track descriptors a written trace declares, and their bytes.

:class:`TrackDescriptor` holds the fields of Perfetto's ``TrackDescriptor`` message that the
writer sets (:mod:`.tracks`), each None until set, as a protobuf message tracks presence.
:func:`track_descriptor_bytes` serializes one by hand, the bytes the ``perfetto.protos``
classes give (ascending field numbers, a field set to its default still written); the
reference encoder builds the message with those classes instead (``ProtosEncoder.descriptor``)
and tests compare the two. Why by hand: importing ``perfetto_trace_pb2`` costs ~80 ms on the
development machine (~0.2 s on the GPU host), more than the whole write of a small profile,
on every process's first ``pga.export``, ``trace_handler`` cycle and ``convert``
(``benchmarks/first_export_imports.py``).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from .wire import field_bytes, utf8, varint_field

__all__ = ["CHILD_ORDERING_EXPLICIT", "ProcessDescriptor", "SIBLING_MERGE_BY_KEY", "ThreadDescriptor",
           "track_descriptor_bytes", "TrackDescriptor"]

#: ``TrackDescriptor.ChildTracksOrdering.EXPLICIT``: children ordered by ``sibling_order_rank``
CHILD_ORDERING_EXPLICIT = 3
#: ``TrackDescriptor.SiblingMergeBehavior.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY``
SIBLING_MERGE_BY_KEY = 3


@dataclasses.dataclass
class ProcessDescriptor:
    """``ProcessDescriptor``: the fields a process track sets."""

    pid: int
    process_name: Optional[str] = None
    legacy_sort_index: Optional[int] = None
    process_labels: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ThreadDescriptor:
    """``ThreadDescriptor``: the fields a thread track sets."""

    pid: int
    tid: int
    thread_name: Optional[str] = None
    legacy_sort_index: Optional[int] = None


@dataclasses.dataclass
class TrackDescriptor:
    """``TrackDescriptor``: the fields the writer's tracks set (None: not set, not written)."""

    uuid: int
    parent_uuid: Optional[int] = None
    name: Optional[str] = None
    description: Optional[str] = None
    process: Optional[ProcessDescriptor] = None
    thread: Optional[ThreadDescriptor] = None
    #: a counter track (an empty ``CounterDescriptor``)
    counter: bool = False
    child_ordering: Optional[int] = None
    sibling_order_rank: Optional[int] = None
    sibling_merge_behavior: Optional[int] = None
    sibling_merge_key: Optional[str] = None


def _text(field: int, text: str) -> bytes:
    return field_bytes(field, utf8(text))


def _process_bytes(p: ProcessDescriptor) -> bytes:
    out = varint_field(1, p.pid)
    if p.legacy_sort_index is not None:
        out += varint_field(3, p.legacy_sort_index)
    if p.process_name is not None:
        out += _text(6, p.process_name)
    for label in p.process_labels:
        out += _text(8, label)  # repeated
    return out


def _thread_bytes(t: ThreadDescriptor) -> bytes:
    out = varint_field(1, t.pid) + varint_field(2, t.tid)
    if t.legacy_sort_index is not None:
        out += varint_field(3, t.legacy_sort_index)
    if t.thread_name is not None:
        out += _text(5, t.thread_name)
    return out


def track_descriptor_bytes(d: TrackDescriptor) -> bytes:
    """The serialized ``TrackDescriptor`` message (fields in ascending number)."""
    out = [varint_field(1, d.uuid)]
    if d.name is not None:
        out.append(_text(2, d.name))
    if d.process is not None:
        out.append(field_bytes(3, _process_bytes(d.process)))
    if d.thread is not None:
        out.append(field_bytes(4, _thread_bytes(d.thread)))
    if d.parent_uuid is not None:
        out.append(varint_field(5, d.parent_uuid))
    if d.counter:
        out.append(field_bytes(8, b""))  # an empty CounterDescriptor
    if d.child_ordering is not None:
        out.append(varint_field(11, d.child_ordering))
    if d.sibling_order_rank is not None:
        out.append(varint_field(12, d.sibling_order_rank))  # int32: a negative one takes 10 bytes
    if d.description is not None:
        out.append(_text(14, d.description))
    if d.sibling_merge_behavior is not None:
        out.append(varint_field(15, d.sibling_merge_behavior))
    if d.sibling_merge_key is not None:
        out.append(_text(16, d.sibling_merge_key))
    return b"".join(out)
