"""Merge several ranks' converted traces into one ``.pftrace``: every rank's GPUs and CPU threads side by side.

Each rank is converted on its own (:func:`perfetto_graph_ann.pipeline.merge.merge` reads,
joins and writes it), then its packets are rewritten here so the ranks can share one trace:

- **Group per rank**: a global root track ``Rank <r>`` (ordered by rank) becomes the
  parent of that rank's root tracks (``GPU <n>`` and any other global track). Process
  and thread tracks cannot be nested under a global track in Perfetto, so each rank's
  processes are renamed ``<name> [rank <r>]`` and labelled ``rank <r>``; pids / tids that
  collide with an earlier rank's get fresh ids (the original stays in the name).
- **One clock**: times are aligned on each trace's absolute time
  (``baseTimeNanoseconds + ts``): rank r's times move by ``base_r - min(base)``: absolute
  packet timestamps and every clock snapshot value except REALTIME (which re-anchors
  incremental clocks, whose packets carry deltas and are left alone), so REALTIME still
  maps to the absolute time.
- **No clashes**: packet sequence ids, track uuids and flow ids are remapped per rank.
- Every slice gets a ``debug.rank`` arg, so SQL can tell ranks apart (device ids repeat).
- **Groups in SQL**: the group track's sibling merge key is
  ``graph_ann.group:<position>:<rank>[:<label>]`` and each lane track's key gains the
  position, ``graph_ann.lane:<position>:<device>:<lane>``, so the UI never merges two ranks'
  lanes and ``sql/graph_ann`` keys every table by the group (``graph_ann_group``).
- **Completeness**: each rank's own start mark and end record are left out; the merged trace
  gets its own (``formats``, "completeness marks": the slices of every rank).
- **Labels**: a trace may carry a label (``merge(..., labels=[...])``, CLI ``--label``): its
  group is then ``<label> (rank <r>)``, its processes say ``[<label>, rank <r>]``, its
  slices get a ``debug.label`` arg, and two traces of the same rank (an eager and a graphed
  rank 0) can sit side by side as long as their labels differ.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import IO, Callable, Dict, Iterator, List, Optional, Sequence, Set

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..errors import InputError
from ..join.model import LaneLayout
from ..formats import START, Completeness, end_record, strip_marks
from .perfetto.tracks import LANE_MERGE_KEY_PREFIX, group_merge_key, lane_merge_key
from .perfetto.wire import field_bytes

__all__ = ["merge_converted", "MergedInput", "MergeReport", "rank_group_uuid", "RankTrace"]

#: Fresh pids / tids for ones that collide across ranks start here (positive int32).
_FRESH_ID_BASE = 0x40000000
#: Perfetto's builtin clocks that are *not* the trace's own time base (left alone).
_REALTIME_CLOCKS = {pb.BuiltinClock.BUILTIN_CLOCK_REALTIME, pb.BuiltinClock.BUILTIN_CLOCK_REALTIME_COARSE}
_SLICE_TYPES = {pb.TrackEvent.Type.TYPE_SLICE_BEGIN, pb.TrackEvent.Type.TYPE_INSTANT}
_MERGE_BY_KEY = pb.TrackDescriptor.SiblingMergeBehavior.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY


@dataclasses.dataclass
class RankTrace:
    """One rank's converted trace, ready to merge."""

    rank: int
    base_time_ns: int  #: baseTimeNanoseconds (Unix ns of ts == 0)
    pftrace: bytes
    source: Optional[str] = None
    layout: Optional[LaneLayout] = None
    label: Optional[str] = None  #: names the group instead of ``Rank <r>``; lets a rank repeat

    @property
    def key(self) -> str:
        """What must be unique across the merged traces (and seeds its id remapping)."""
        return str(self.rank) if self.label is None else f"{self.rank}/label={self.label}"

    @property
    def title(self) -> str:
        """The group track's name."""
        return f"Rank {self.rank}" if self.label is None else f"{self.label} (rank {self.rank})"


@dataclasses.dataclass
class MergedInput:
    """One input of a merge, in the order given."""

    source: str
    rank: int
    label: Optional[str]
    shift_ns: int  #: ns added to its timestamps
    layout: Optional[LaneLayout]


@dataclasses.dataclass
class MergeReport:
    ranks: List[int]
    shifts_ns: Dict[int, int]  #: rank -> ns added to its timestamps (see ``inputs`` when a rank repeats)
    layouts: Dict[int, Optional[LaneLayout]]
    inputs: List[MergedInput] = dataclasses.field(default_factory=list)


def _remap64(rank: "int | str", kind: str, value: int) -> int:
    h = hashlib.blake2b(f"{kind}:{rank}:{value}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFFFFFFFFFF or 1


def _printable(path: str) -> str:
    """``path`` as text a protobuf string can hold: a file name that is not UTF-8 (Linux names
    are bytes; Python decodes the odd bytes to lone surrogates) shows them as ``\\xff`` escapes."""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeError:  # a lone surrogate no file system name decodes to
        return path.encode("utf-8", "backslashreplace").decode("ascii")


def rank_group_uuid(rank: "int | str") -> int:
    """uuid of the ``Rank <r>`` group track (``rank``: the rank, or a labelled trace's ``key``)."""
    return _remap64(rank, "rank-group", 0)


class _Ids:
    """pid / tid allocation shared by all ranks: keep ids unless an earlier rank used them."""

    def __init__(self) -> None:
        self.used: Set[int] = set()
        self.next = _FRESH_ID_BASE

    def map(self, table: Dict[int, int], value: int) -> int:
        if value in table:
            return table[value]
        new = value
        if value in self.used:
            while self.next in self.used:
                self.next += 1
            new = self.next
        self.used.add(new)
        table[value] = new
        return new


def _packet_payloads(data: bytes) -> Optional[List[memoryview]]:
    """The payloads of ``data``'s top-level ``packet`` fields (field 1, length-delimited), each
    a view into ``data``; None when it holds anything else or its framing is off (the caller
    then parses the whole ``Trace``, which also words the error)."""
    out: List[memoryview] = []
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if data[pos] != 0x0A:
            return None
        pos += 1
        length = shift = 0
        while True:
            if pos >= end or shift > 63:
                return None
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if pos + length > end:
            return None
        out.append(view[pos:pos + length])
        pos += length
    return out


def _parsed_packets(rt: RankTrace) -> Iterator["pb.TracePacket"]:
    """Rank ``rt``'s packets, parsed one at a time (the whole ``Trace`` is never held as
    protobuf objects); its own completeness marks left out."""
    data = strip_marks(rt.pftrace)[0]
    payloads = _packet_payloads(data)
    try:
        if payloads is None:
            trace = pb.Trace()
            trace.ParseFromString(data)
            yield from trace.packet
            return
        parse = pb.TracePacket.FromString
        for payload in payloads:
            yield parse(payload)
    except Exception as e:  # protobuf's DecodeError and friends
        if isinstance(e, (InputError, GeneratorExit)):
            raise
        raise InputError(rt.source, f"converted trace of rank {rt.rank} does not parse: {e}") from e


def _rewrite(rt: RankTrace, order: int, shift: int, ids: _Ids, counts: List[int]) -> Iterator[bytes]:
    """Rank ``rt``'s packets, rewritten for the merged trace (serialized TracePackets), one at a
    time; ``counts[0]`` is increased by the number of slices among them (slice begins and
    instants). The rank's own completeness marks are left out: the merged trace gets its own."""
    r = rt.rank
    key = r if rt.label is None else rt.key
    tag = f"rank {r}" if rt.label is None else f"{rt.label}, rank {r}"
    uuid = lambda u: _remap64(key, "track", u)  # noqa: E731
    flow = lambda f: _remap64(key, "flow", f)  # noqa: E731
    pids: Dict[int, int] = {}
    tids: Dict[int, int] = {}
    yield _group_packet(rt, order, key, tag)
    seq_clock: Dict[int, int] = {}  # sequence -> default timestamp clock
    incremental: Set[tuple] = set()  # (sequence, clock id) of clocks whose packets carry deltas
    for p in _parsed_packets(rt):
        seq = p.trusted_packet_sequence_id
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("timestamp_clock_id"):
            seq_clock[seq] = p.trace_packet_defaults.timestamp_clock_id
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                if c.is_incremental:
                    incremental.add((seq, c.clock_id))
                if shift and c.clock_id not in _REALTIME_CLOCKS:
                    c.timestamp += shift  # also re-anchors incremental clocks' running value
        if p.HasField("timestamp") and shift:
            clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq_clock.get(seq)
            if (seq, clock) not in incremental and clock not in _REALTIME_CLOCKS:
                p.timestamp += shift
        if p.HasField("trusted_packet_sequence_id"):
            p.trusted_packet_sequence_id = ((order + 1) << 16) | (seq & 0xFFFF)
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults.track_event_defaults
            if d.HasField("track_uuid"):
                d.track_uuid = uuid(d.track_uuid)
            d.extra_counter_track_uuids[:] = [uuid(u) for u in d.extra_counter_track_uuids]
            d.extra_double_counter_track_uuids[:] = [uuid(u) for u in d.extra_double_counter_track_uuids]
        if p.HasField("track_descriptor"):
            _rewrite_descriptor(p.track_descriptor, key, tag, uuid, lambda pid: ids.map(pids, pid),
                                lambda tid: ids.map(tids, tid), order)
        if p.HasField("track_event"):
            te = p.track_event
            if te.HasField("track_uuid"):
                te.track_uuid = uuid(te.track_uuid)
            te.extra_counter_track_uuids[:] = [uuid(u) for u in te.extra_counter_track_uuids]
            te.extra_double_counter_track_uuids[:] = [uuid(u) for u in te.extra_double_counter_track_uuids]
            te.flow_ids[:] = [flow(f) for f in te.flow_ids]
            te.terminating_flow_ids[:] = [flow(f) for f in te.terminating_flow_ids]
            if te.type in _SLICE_TYPES:
                counts[0] += 1
                a = te.debug_annotations.add()
                a.name = "rank"
                a.int_value = r
                if rt.label is not None:
                    a = te.debug_annotations.add()
                    a.name = "label"
                    a.string_value = rt.label
        yield p.SerializeToString()


def _group_packet(rt: RankTrace, order: int, key: "int | str", tag: str) -> bytes:
    """The descriptor of the rank's group track (``Rank <r>``), parent of its root tracks."""
    group = pb.TracePacket()
    group.trusted_packet_sequence_id = (order + 1) << 16
    gd = group.track_descriptor
    gd.uuid = rank_group_uuid(key)
    gd.name = rt.title
    gd.description = tag + (f" from {_printable(rt.source)}" if rt.source else "")
    gd.child_ordering = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
    gd.sibling_order_rank = rt.rank if rt.label is None else order
    gd.sibling_merge_behavior = _MERGE_BY_KEY
    gd.sibling_merge_key = group_merge_key(order, rt.rank, rt.label)
    return group.SerializeToString()


def _rewrite_descriptor(td: "pb.TrackDescriptor", key: "int | str", tag: str, uuid: Callable[[int], int],
                        pid: Callable[[int], int], tid: Callable[[int], int], order: int) -> None:
    """A rank's track descriptor in the merged trace: uuids remapped, global roots under the
    rank's group, pids / tids mapped (``pid``, ``tid``), processes named with the rank and
    lane merge keys given the group's position ``order``."""
    td.uuid = uuid(td.uuid)
    if td.sibling_merge_key.startswith(LANE_MERGE_KEY_PREFIX):
        device, _, lane = td.sibling_merge_key[len(LANE_MERGE_KEY_PREFIX):].partition(":")
        td.sibling_merge_key = lane_merge_key(device, lane, order)
    if td.HasField("parent_uuid"):
        td.parent_uuid = uuid(td.parent_uuid)
    elif not td.HasField("process") and not td.HasField("thread"):
        td.parent_uuid = rank_group_uuid(key)  # a global root (GPU n): into the rank's group
    if td.HasField("process"):
        pd = td.process
        original = pd.pid
        pd.pid = pid(pd.pid)
        base = pd.process_name or (td.name if td.HasField("name") else "") or f"pid {original}"
        pd.process_name = f"{base} [{tag}]" + (f" (pid {original})" if pd.pid != original else "")
        pd.process_labels.append(tag)
        if td.HasField("name"):
            td.name = pd.process_name
    if td.HasField("thread"):
        th = td.thread
        th.pid = pid(th.pid)
        th.tid = tid(th.tid)


def merge_converted(ranks: Sequence[RankTrace]) -> bytes:
    """Merge already converted rank traces into the bytes of one trace (see module doc)."""
    return b"".join(iter_merged(ranks))


def write_merged(ranks: Sequence[RankTrace], f: IO[bytes], release: bool = False) -> int:
    """:func:`merge_converted`'s bytes written to ``f`` as each rank is rewritten, so the merged
    trace is never held whole; ``release``: each rank's converted bytes are dropped
    (``pftrace = b""``) once rewritten. Returns the bytes written."""
    n = 0
    for chunk in iter_merged(ranks, release):
        f.write(chunk)
        n += len(chunk)
    return n


def iter_merged(ranks: Sequence[RankTrace], release: bool = False) -> Iterator[bytes]:
    """The merged trace's bytes in order: the start mark, each rank's rewritten packets (one
    rank rewritten at a time), the completeness record. Every check on the ranks together (a
    key twice, base times missing on some) is made before the first byte."""
    seen: Dict[str, Optional[str]] = {}
    for rt in ranks:
        if rt.key in seen:
            what = f"rank {rt.rank}" if rt.label is None else f"rank {rt.rank} with label {rt.label!r}"
            hint = "" if rt.label is not None else " (give each trace a --label to compare them side by side)"
            raise InputError(rt.source, f"{what} appears twice (also in {seen[rt.key]}){hint}")
        seen[rt.key] = rt.source
    with_base = [rt for rt in ranks if rt.base_time_ns]
    if with_base and len(with_base) != len(ranks):
        missing = next(rt for rt in ranks if not rt.base_time_ns)
        raise InputError(missing.source, "has no baseTimeNanoseconds, so it cannot be aligned with the other ranks")
    ref = min((rt.base_time_ns for rt in ranks), default=0)
    ids = _Ids()
    yield START  # the merged trace's own completeness marks (formats)
    length, count, slices = len(START), 1, 0
    for order, rt in enumerate(sorted(ranks, key=lambda x: x.rank) if all(rt.label is None for rt in ranks) else ranks):
        counts = [0]
        packets = _rewrite(rt, order, rt.base_time_ns - ref, ids, counts)
        while True:
            try:
                payload = next(packets)
            except StopIteration:
                break
            except ValueError as e:  # a field out of protobuf's range after the shift
                raise InputError(rt.source, f"cannot be aligned with the other ranks: {e} "
                                            f"(baseTimeNanoseconds {rt.base_time_ns} vs {ref})") from e
            chunk = field_bytes(1, payload)
            length += len(chunk)
            count += 1
            yield chunk
        if release:
            rt.pftrace = b""
        slices += counts[0]
    yield end_record(Completeness(length, count, slices))
