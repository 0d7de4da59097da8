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

from .wire import utf8, varint

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


def _text(tag: bytes, text: str) -> bytes:
    b = utf8(text)
    return tag + varint(len(b)) + b


def _message(tag: bytes, body: bytes) -> bytes:
    return tag + varint(len(body)) + body


def _process_bytes(p: ProcessDescriptor) -> bytes:
    out = b"\x08" + varint(p.pid)  # 1: pid
    if p.legacy_sort_index is not None:
        out += b"\x18" + varint(p.legacy_sort_index)  # 3
    if p.process_name is not None:
        out += _text(b"\x32", p.process_name)  # 6
    for label in p.process_labels:
        out += _text(b"\x42", label)  # 8, repeated
    return out


def _thread_bytes(t: ThreadDescriptor) -> bytes:
    out = b"\x08" + varint(t.pid) + b"\x10" + varint(t.tid)  # 1: pid, 2: tid
    if t.legacy_sort_index is not None:
        out += b"\x18" + varint(t.legacy_sort_index)  # 3
    if t.thread_name is not None:
        out += _text(b"\x2a", t.thread_name)  # 5
    return out


def track_descriptor_bytes(d: TrackDescriptor) -> bytes:
    """The serialized ``TrackDescriptor`` message (fields in ascending number)."""
    out = [b"\x08" + varint(d.uuid)]  # 1: uuid
    if d.name is not None:
        out.append(_text(b"\x12", d.name))  # 2
    if d.process is not None:
        out.append(_message(b"\x1a", _process_bytes(d.process)))  # 3
    if d.thread is not None:
        out.append(_message(b"\x22", _thread_bytes(d.thread)))  # 4
    if d.parent_uuid is not None:
        out.append(b"\x28" + varint(d.parent_uuid))  # 5
    if d.counter:
        out.append(b"\x42\x00")  # 8: an empty CounterDescriptor
    if d.child_ordering is not None:
        out.append(b"\x58" + varint(d.child_ordering))  # 11
    if d.sibling_order_rank is not None:
        out.append(b"\x60" + varint(d.sibling_order_rank))  # 12 (int32: a negative one takes 10 bytes)
    if d.description is not None:
        out.append(_text(b"\x72", d.description))  # 14
    if d.sibling_merge_behavior is not None:
        out.append(b"\x78" + varint(d.sibling_merge_behavior))  # 15
    if d.sibling_merge_key is not None:
        out.append(_text(b"\x82\x01", d.sibling_merge_key))  # 16
    return b"".join(out)
