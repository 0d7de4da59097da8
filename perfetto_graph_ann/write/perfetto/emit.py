"""The last phase of the writer: a plan's ordered records streamed out as framed packets.

The busiest tracks get a packet sequence of their own (:func:`own_sequences`), each sequence
its own encoder (:data:`ENCODERS`: the bytes are the encoder's business, this module only
decides which packet comes next and on which sequence). Packets are encoded one at a time
and written every ``batch`` packets, so the output is never held in memory as one ``Trace``
message.
"""
from __future__ import annotations

import sys
from array import array
from typing import IO, TYPE_CHECKING, AbstractSet, Any, Dict, List, Optional, Sequence, Tuple, Type

from ...formats import START, Completeness, end_record
from . import fast_encoder
from .fast_encoder import FastEncoder
from .flows import FlowEnds, FlowPlan
from .interning import Interner
from .packets import SEQUENCE_ID, TYPE_INSTANT, TYPE_SLICE_BEGIN, VARYING_KEYS, EncoderBase
from .plan import BEGIN, COUNTER, END, INSTANT, SLICE, SLICE_REWRITTEN, Plan, Records, _Lanes
from .tracks import TrackTable

if TYPE_CHECKING:
    from .config import WriterConfig, WriteStats

__all__ = ["encoder_class", "ENCODERS", "MAX_OWN_SEQUENCES", "own_sequences", "SORT_WINDOW_MARK_PACKETS", "TEXT_EVENTS",
           "write_packets"]

#: The values of ``WriterConfig.encoder`` (see :func:`encoder_class`).
ENCODERS = ("fast", "protos")


def encoder_class(name: str) -> Type[EncoderBase]:
    """The encoder class ``WriterConfig.encoder`` names (one instance per packet sequence). The
    reference's module is imported only when asked for: it loads the ``perfetto.protos``
    classes, which the fast encoder never needs (:mod:`.descriptors` says what that costs)."""
    if name == "protos":
        from .protos_encoder import ProtosEncoder

        return ProtosEncoder
    if name != "fast":
        raise ValueError(f"encoder must be one of {ENCODERS}, not {name!r}")
    return FastEncoder
#: Own sequences get ids 2..127 (one-byte varints); tracks beyond stay on the shared sequence.
MAX_OWN_SEQUENCES = 126
#: Packets in one :func:`.packets.sort_window_mark`.
SORT_WINDOW_MARK_PACKETS = 3
#: A two-pass read's rewritten slices (a graph replay's kernels) framed from their JSON text in
#: the second pass, the ones whose blanked text and rewrite were met before (``_encode.c``'s
#: ``tx_record``), or None: each decoded, then encoded (the same bytes). None where the packet
#: loop is not compiled; tests turn it off to compare.
TEXT_EVENTS: Optional[bool] = True if fast_encoder.stream_records is not None else None
#: The keys whose values a text's cache key leaves out (``tx_record``: read from the text).
_TEXT_IDS = tuple(sorted(VARYING_KEYS))


def own_sequences(packets_per_track: Dict[int, int], minimum: int) -> List[int]:
    """Track uuids that get their own sequence: at least ``minimum`` packets, busiest first.

    Why: on the shared sequence every BEGIN and END names its track (``track_uuid``, 2-3
    bytes) and its timestamp is a delta to whatever packet came before on any track. A
    sequence of its own costs a defaults packet, a clock snapshot and its own interning
    (names used on several tracks are defined once per sequence), so only busy tracks gain.
    """
    busy = [u for u, n in packets_per_track.items() if n >= minimum]
    busy.sort(key=lambda u: (-packets_per_track[u], u))
    return busy[:MAX_OWN_SEQUENCES]


class _Sink:
    """Packets gathered in ``batch`` and written to ``out`` together; counts and progress.

    ``window_bytes``: after every batch that brings the bytes since the last sorting-window
    mark to at least this many, a mark (``mark``: the encoder's
    :meth:`~.packets.EncoderBase.sort_window_mark`; in ``bytes`` written, not in
    ``packets``); None: no marks.
    """

    def __init__(self, out: IO[bytes], stats: WriteStats, step: int, bar: Any,
                 window_bytes: Optional[int] = None, mark: bytes = b"") -> None:
        self.out, self.stats, self.step, self.bar = out, stats, step, bar
        self.batch: List[bytes] = []
        self.written = 0
        self.window_bytes = window_bytes
        self._mark = mark if window_bytes else b""
        self._marked_at = 0

    def flush(self) -> None:
        data = b"".join(self.batch)
        self.out.write(data)
        self.written += len(data)
        self.stats.packets += len(self.batch)
        self.batch.clear()  # the same list: the packet loop holds its append
        if self.window_bytes and self.written - self._marked_at >= self.window_bytes:
            self.out.write(self._mark)
            self.written += len(self._mark)
            self.stats.packets += SORT_WINDOW_MARK_PACKETS
            self._marked_at = self.written

    def step_done(self) -> None:
        """A full batch (the packet loop's ``step`` records) written."""
        self.flush()
        if self.bar is not None:
            self.bar.update(self.step)

    def close(self, total: int) -> None:
        """Write what is left, then the end record (:mod:`perfetto_graph_ann.formats`): what came before it."""
        self.flush()
        if self.bar is not None:
            self.bar.update(total - self.bar.n)
            self.bar.close()
        s = self.stats
        end = end_record(Completeness(self.written, s.packets, s.slices + s.instants + s.projected))
        self.out.write(end)
        self.written += len(end)
        s.packets += 1
        s.bytes = self.written


def write_packets(out: IO[bytes], plan: Plan, flows: FlowPlan, records: Records, packets_per_track: Dict[int, int],
                  tracks: TrackTable, base_time_ns: int, typed_keys: AbstractSet[str], config: WriterConfig,
                  stats: WriteStats) -> None:
    """The whole output: the shared sequence's start, the track descriptors, then every
    record's packet (each track's own sequence started before its first)."""
    own = own_sequences(packets_per_track, config.own_sequence_min)
    stats.sequences = 1 + len(own)
    seq_of = [0] * (tracks.max_uuid() + 1)  # track uuid -> sequence slot (0: the shared sequence)
    cls = encoder_class(config.encoder)
    as_text = config.list_args == "text"
    encoders = [cls(Interner(), SEQUENCE_ID, None, as_text, typed_keys, config.keep_args)]
    for slot, uuid in enumerate(own, 1):
        seq_of[uuid] = slot
        encoders.append(cls(Interner(), SEQUENCE_ID + slot, uuid, as_text, typed_keys, config.keep_args))
    bar = None
    if config.progress or (config.progress is None and plan.base >= config.progress_min and sys.stderr.isatty()):
        from tqdm import tqdm

        bar = tqdm(total=len(records), unit="ev", desc="convert", file=sys.stderr, mininterval=0.5)
    sink = _Sink(out, stats, config.batch, bar, config.sort_window_bytes,
                 cls.sort_window_mark() if config.sort_window_bytes else b"")
    t0 = int(records.ts[0]) if len(records) else 0
    sink.batch.append(START)  # the start mark: this trace ends with an end record (formats)
    sink.batch.extend(encoders[0].sequence_start(t0, base_time_ns))
    # Track descriptors go on a sequence with no events: a thread's descriptor gives its
    # sequence that pid/tid, and the trace processor would then tag every event the sequence
    # draws on a GPU lane or other non-thread track with a made-up `legacy_event.passthrough_utid`.
    descriptor_sequence = SEQUENCE_ID + len(encoders)
    sink.batch.extend([cls.descriptor_packet(d, descriptor_sequence) for d in tracks.descriptors])
    prevs: List[Optional[int]] = [None] * len(encoders)  # per sequence: the previous packet's time (None: not started)
    prevs[0] = t0
    if plan.source is None:
        for chunk in records.chunks(sink.step):
            _stream(chunk, records.values, plan, flows, encoders, seq_of, base_time_ns, sink, prevs)
    else:
        _stream_read_again(records, plan, flows, encoders, seq_of, base_time_ns, sink, prevs)
    sink.close(len(records))


def _stream_read_again(records: Records, plan: Plan, flows: FlowPlan, encoders: Sequence[Any],
                       seq_of: List[int], base_time_ns: int, sink: _Sink, prevs: List[Optional[int]]) -> None:
    """The packet loop of a two-pass read: each batch's events decoded again from the file
    (:meth:`...read.scan.EventSource.fetch`, one call per batch) just before they are encoded."""
    source, base = plan.source, plan.base
    texts = _text_state(plan, source)
    try:
        for chunk, wanted in zip(records.chunks(sink.step), records.begun(sink.step, base)):
            got = None
            if texts is not None:  # the rewritten slices' texts, the others decoded
                plan_kinds = plan.kinds
                got = source.fetch_texts(wanted, [i for i in wanted if plan_kinds[i] == SLICE])
            if got is None:
                plan.events = source.fetch(wanted)
                text = None
            else:
                plan.events, block, lo = got
                text = (block, lo, *texts)
            _stream(chunk, records.values, plan, flows, encoders, seq_of, base_time_ns, sink, prevs, text)
    except BaseException:
        source.close(check=False)
        raise
    finally:
        plan.events = []
    source.close()  # raises if the file changed meanwhile: the output is then discarded


def _text_state(plan: Plan, source: Any) -> Optional[Tuple[Any, ...]]:
    """What ``_encode.stream_records`` needs besides a batch's block to frame rewritten slices
    from their texts: (the first pass's offsets, the cache, decode one event by index, the
    keys read from the text), or None where it does not apply (:data:`TEXT_EVENTS` off, a
    gzip file, placements not in columns)."""
    if not TEXT_EVENTS or fast_encoder.stream_records is None or getattr(source, "fetch_texts", None) is None:
        return None
    if type(plan.kinds) is not array or len(_rewrite_columns(plan) or ()) != 13:
        return None
    return source.offsets, {}, source.decode_one, _TEXT_IDS


def _stream(chunk: Tuple[List[int], List[int], List[int], List[int]], values: Sequence[Any], plan: Plan,
            flows: FlowPlan, encoders: Sequence[Any], seq_of: List[int], base_time_ns: int, sink: _Sink,
            prevs: List[Optional[int]], text: Optional[Tuple[Any, ...]] = None) -> None:
    """The packet loop over a chunk of records (:meth:`.plan.Records.chunks`): one packet per
    record, timestamps as deltas on each sequence (``prevs``: each sequence's previous packet
    time, carried from chunk to chunk); ``values``: the counter records' values. With the
    compiled hot path, its usual records (slice ends, input events' begins) go through
    ``_encode.stream_records`` (the same packets: it calls the encoders as this loop does), the
    others through this loop. ``text``: where a two-pass batch left its rewritten slices
    undecoded (:func:`_text_state`; the compiled loop frames them from their texts, this loop
    decodes each one it meets)."""
    kinds, events, ranges, base, args_of = plan.kinds, plan.events, plan.ranges, plan.base, plan.args_of
    outgoing, terminating = flows.outgoing, flows.terminating
    begins = [enc.event for enc in encoders]
    ends = [enc.slice_end for enc in encoders]
    # a FastEncoder's ends from the compiled hot path once its track's tail is cached (the
    # first end of each track, and any the C side leaves to Python, through slice_end)
    end_packet = fast_encoder.end_packet if type(encoders[0]) is FastEncoder else None
    tails = [enc.end_tails for enc in encoders] if end_packet is not None else []
    batch, step = sink.batch, sink.step
    append = batch.append
    no_flows: Tuple[int, ...] = ()
    fast = _compiled_loop(plan, flows, encoders, end_packet)
    if fast is not None:
        fast_args = [*chunk, 0, kinds, base, seq_of, prevs, tails, list(encoders), events, outgoing,
                     *_flow_ends(terminating), args_of, begins, batch, step, _rewrite_columns(plan),
                     ranges if type(ranges) is list else None, text]  # stream_records' arguments, in its order
    ts_l, kind_l, key_l, uuid_l = chunk
    k, n = 0, len(ts_l)
    while k < n:
        if fast is not None:
            fast_args[4] = k  # the record to start from
            j = fast(*fast_args)
            if j > k:  # records k..j-1 written; it stops right after one that fills the batch
                k = j
                if len(batch) >= step:
                    sink.step_done()
                    continue
                if k >= n:
                    break
        ts, kind, i, uuid = ts_l[k], kind_l[k], key_l[k], uuid_l[k]
        k += 1
        if text is not None and kind == BEGIN and i < base and i not in events:
            events[i] = text[4](i)  # left undecoded for the compiled loop
        q = seq_of[uuid]
        prev = prevs[q]
        if prev is None:  # first packet of a track's own sequence: its defaults and clock first
            batch.extend(encoders[q].sequence_start(ts, base_time_ns))
            prev = prevs[q] = ts
        if kind == END:
            if kinds[i] == INSTANT:
                continue  # instants have no end packet
            if end_packet is not None and (tail := tails[q].get(uuid)) is not None \
                    and (packet := end_packet(ts - prev, tail)) is not None:
                append(packet)
            else:
                append(ends[q](ts - prev, uuid))
        elif kind == COUNTER:
            append(encoders[q].counter(ts - prev, uuid, values[i]))  # i: the value's position
        elif kinds[i] == SLICE and i < base:  # the usual slice: its own args as they are
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
            append(begins[q](ts - prev, uuid, e.cat, e.name, args_of(i), outgoing.get(i, no_flows),
                             terminating.get(i, no_flows), TYPE_INSTANT if kinds[i] == INSTANT else TYPE_SLICE_BEGIN))
        prevs[q] = ts  # incremental clock: each packet carries the delta to its sequence's previous one
        if len(batch) >= step:
            sink.step_done()


def _rewrite_columns(plan: Plan) -> Optional[Tuple[Any, ...]]:
    """What ``_encode.stream_records`` reads to make a rewritten slice's args as
    :meth:`.plan.Plan.args_of` does: (lanes, lanes beyond int32, device_of, placements) with
    the placements a dict, or their columns (a :class:`~...join.model.CompactPlacements`:
    ``columns()``); None (it calls ``args_of``) for anything else."""
    rewrite, placements, device_of = plan.rewrite, plan.placements, plan.device_of
    if type(rewrite) is not _Lanes or type(device_of) is not dict or rewrite._NONE != _NO_VALUE:
        return None
    lanes, other = rewrite.columns()
    if lanes.itemsize != 4 or type(other) is not dict:
        return None
    if type(placements) is dict:
        return lanes, other, device_of, placements
    columns = getattr(placements, "columns", None)
    if columns is None or getattr(placements, "_NONE", None) != _NO_VALUE:
        return None
    row, node, replay, hw, how, nodes, kept, every, strategies, path = columns()
    if (any(type(c) is not array or c.itemsize != 4 for c in (row, node, replay, hw)) or type(how) is not bytearray
            or type(nodes) is not list or type(kept) is not dict or type(strategies) is not tuple
            or (path is not None and (type(path) is not array or path.itemsize != 8))):
        return None
    return lanes, other, device_of, row, node, replay, hw, how, nodes, kept, bool(every), strategies, path


#: "no value" in the int32 columns ``_encode.stream_records`` reads
_NO_VALUE = -(1 << 31)
#: The numbers ``_encode.stream_records`` has built in (plan.py's kinds, packets.py's types).
_C_CONSTANTS = (END, BEGIN, SLICE, SLICE_REWRITTEN, INSTANT, TYPE_SLICE_BEGIN, TYPE_INSTANT) == (0, 1, 1, 2, 3, 1, 3)


def _compiled_loop(plan: Plan, flows: FlowPlan, encoders: Sequence[Any], end_packet: Any) -> Any:
    """``_encode.stream_records``, or None where the loop stays in Python: not built or turned
    off (the encoder's compiled cases too), another encoder, or containers other than the ones
    it reads (a byte array of kinds, the events a list or a two-pass batch's dict, dicts of
    outgoing flows and flow ends or a :class:`.flows.FlowEnds`)."""
    fast = fast_encoder.stream_records
    if fast is None or end_packet is None or fast_encoder.event_packet is None or not _C_CONSTANTS:
        return None
    kinds, terminating = plan.kinds, flows.terminating
    if not (type(kinds) is array and kinds.typecode == "b" and type(plan.events) in (list, dict)
            and type(flows.outgoing) is dict and all(type(enc) is FastEncoder for enc in encoders)):
        return None
    if not ((type(terminating) is FlowEnds and terminating.one.itemsize == 4 and type(terminating.more) is dict)
            or type(terminating) is dict):
        return None
    return fast


def _flow_ends(terminating: Any) -> Tuple[Any, Dict[int, Any]]:
    """(the int32 column of a :class:`.flows.FlowEnds`, or None; the dict of the other ends)."""
    return (terminating.one, terminating.more) if type(terminating) is FlowEnds else (None, terminating)
