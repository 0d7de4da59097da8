"""The hand-written TrackEvent encoder: :class:`~.protos_encoder.ProtosEncoder`'s bytes, faster.

Packets are assembled from cached constant parts (per category, name, track and kind) and
the args' bytes from :class:`~.fast_args.FastArgs`; the writer calls :meth:`FastEncoder.event`
once per slice or instant and :meth:`FastEncoder.slice_end` once per slice end (half of all
packets), so both keep the common case (one- or two-byte deltas and lengths, a kernel's one
flow) free of general-purpose calls.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, Mapping, Optional, Sequence, Tuple

from .fast_args import FastArgs, compiled, whole_args_key
from .interning import CATEGORIES, NAMES, Interner
from .packets import INT64_MIN, SEQUENCE_ID, TYPE_SLICE_BEGIN, VARYING_KEYS, EncoderBase
from .wire import _ONE_BYTE, _TWO_BYTES, _pack_double, fixed64_fields, small_varint, utf8, varint

__all__ = ["end_packet", "event_packet", "FastEncoder", "stream_records", "template_packet"]

_VARYING_ORDER = tuple(sorted(VARYING_KEYS))

#: The compiled usual case of :meth:`FastEncoder.event` (a cached head, no args or a whole-args
#: template hit), or None: the same bytes built in Python.
event_packet = compiled("event_packet")
#: The compiled template packet (see :meth:`FastEncoder.event`), or None: the same bytes built
#: in Python (:func:`~.fast_args.compiled`; tests set it to None).
template_packet = compiled("template_packet")
#: ``end_packet(ts, tail)``: a slice end from its track's :attr:`FastEncoder.end_tails` bytes
#: (the writer's loop calls it directly), or None
end_packet = compiled("slice_end")
#: the packet loop's usual records in one call (``emit._stream``; see ``_encode.c``), or None:
#: the loop runs in Python. Used only where :data:`event_packet` and :data:`end_packet` are.
stream_records = compiled("stream_records")


class FastEncoder(FastArgs, EncoderBase):
    """The packets of one sequence, byte for byte :class:`~.protos_encoder.ProtosEncoder`'s (same interface)."""

    def __init__(self, interner: Interner, sequence_id: int = SEQUENCE_ID, default_track: Optional[int] = None,
                 list_text: bool = False, typed_keys: AbstractSet[str] = frozenset(),
                 keep: Optional[AbstractSet[str]] = None) -> None:
        super().__init__(interner, list_text, typed_keys, keep)
        self.sequence_id = sequence_id
        self.default_track = default_track
        #: track -> a slice end packet's bytes after its timestamp (see :meth:`slice_end`)
        self.end_tails: Dict[int, bytes] = {}
        self._begin_parts: Dict[Tuple[int, int, int, int], Tuple[bytes, bytes]] = {}
        self._heads: Dict[Tuple[str, str, int, int], list] = {}  # see event()
        self._seq = b"\x50" + varint(sequence_id)
        # The last one-slot annotation filled by event(): (key, value) and its bytes. The
        # kernels of one graph replay all carry their launch's correlation, so consecutive
        # kernels reuse it (the bytes depend only on the key's name iid and the value).
        self._slot_key: Optional[str] = None
        self._slot_value = -1
        self._slot_bytes = b""

    def _interned(self) -> bytes:
        pending = self.interner.take_pending()
        if not pending:
            return b""
        parts = []
        for kind, iid, text in pending:
            s = utf8(text)
            entry = b"\x08" + varint(iid) + b"\x12" + varint(len(s)) + s
            parts.append(varint((kind << 3) | 2) + varint(len(entry)) + entry)
        body = b"".join(parts)
        return b"\x62" + varint(len(body)) + body

    def slice_begin(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                    flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = (), kind: int = TYPE_SLICE_BEGIN) -> bytes:
        key = (cat_iid, kind, name_iid, track)
        head_tail = self._begin_parts.get(key)
        if head_tail is None:
            head = (b"\x18" + small_varint(cat_iid)) if cat_iid else b""
            tail = b"\x48" + bytes((kind,)) + b"\x50" + small_varint(name_iid) + self._track(track)
            if len(self._begin_parts) >= self.KEY_CACHE_LIMIT * 32:
                self._begin_parts.clear()
            head_tail = self._begin_parts[key] = (head, tail)
        te = head_tail[0] + self._annotations(args) + head_tail[1] if args else head_tail[0] + head_tail[1]
        if flow_ids:
            te += fixed64_fields(b"\xf9\x02", flow_ids)
        if terminating_flow_ids:
            te += fixed64_fields(b"\x81\x03", terminating_flow_ids)
        n = len(te)
        p = b"".join((b"\x40", _ONE_BYTE[ts] if 0 <= ts < 128 else varint(ts), self._seq, b"\x5a",
                      _ONE_BYTE[n] if n < 128 else varint(n), te,
                      self._interned() if self.interner.pending else b"", b"\x68\x02"))
        n = len(p)
        return (b"\x0a" + _ONE_BYTE[n] if n < 128 else b"\x0a" + varint(n)) + p

    def event(self, ts: int, track: int, cat: str, name: str, args: Optional[Mapping[str, Any]],
              flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = (), kind: int = TYPE_SLICE_BEGIN,
              cacheable: bool = True) -> bytes:
        """:meth:`slice_begin` (or an instant) named by strings; the writer's hot path.

        The same bytes as interning the category and name and calling :meth:`slice_begin`,
        with the packet's constant parts cached per (category, name, track, kind) and a
        whole-args template hit with one id slot (a replayed kernel, a runtime call)
        assembled inline: one call per event instead of three. ``cacheable=False``: args
        whose values differ every time (the projection's per-range numbers) skip the
        whole-args cache, which they would only fill with templates never hit again.
        """
        if event_packet is not None and cacheable and not self.interner.pending:
            packet = event_packet(self._heads, self._whole, self._seq, ts, track, cat, name, args, flow_ids,
                                  terminating_flow_ids, kind)
            if packet is not None:
                if args:
                    self._whole_hits += 1
                return packet
        key = (cat, name, track, kind)
        parts = self._heads.get(key)
        if parts is None:
            interner = self.interner
            cat_iid = interner.iid(CATEGORIES, cat) if cat else 0
            parts = self._heads[key] = self._head_tail(cat_iid, kind, interner.iid(NAMES, name), track)
        fb = fixed64_fields(b"\xf9\x02", flow_ids) if flow_ids else b""
        if terminating_flow_ids:
            fb += fixed64_fields(b"\x81\x03", terminating_flow_ids)
        if not args:
            te = parts[0] + parts[1] + fb
        elif not cacheable:
            one = self._one
            te = parts[0] + b"".join([one(k, v) for k, v in args.items()]) + parts[1] + fb
        else:
            whole = self._whole
            tpl = None
            if whole is not None:
                # Blank only the ids this name / track had last time (parts[2]). Exact either
                # way: a key that blanks too little can only miss (or hit a template whose
                # slots hold every id key anyway); a miss takes the full path below.
                ck = whole_args_key(args, parts[2])
                if ck is not None:
                    tpl = whole.get(ck)
            if tpl is None:  # no template hit: the general path (it repeats the lookup: a miss is rare)
                te = parts[0] + self._annotations(args) + parts[1] + fb
                if whole is not None:
                    parts[2] = tuple([k for k in args if k in VARYING_KEYS])
            else:
                self._whole_hits += 1
                if template_packet is not None and not self.interner.pending:
                    packet = template_packet(ts, self._seq, parts[0], tpl, args, parts[1], fb)
                    if packet is not None:
                        return packet
                t = type(tpl)
                if t is tuple:  # one id slot
                    k = tpl[1]
                    v = args[k]
                    if type(v) is int and v == self._slot_value and k == self._slot_key:
                        te = b"".join((parts[0], tpl[0], self._slot_bytes, tpl[3], parts[1], fb))
                    elif type(v) is int and -1 < v < (1 << 63):
                        body = tpl[2] + (_ONE_BYTE[v] if v < 128 else varint(v))
                        ann = b"\x22" + _ONE_BYTE[len(body)] + body
                        self._slot_key = k
                        self._slot_value = v
                        self._slot_bytes = ann
                        te = b"".join((parts[0], tpl[0], ann, tpl[3], parts[1], fb))
                    else:
                        te = parts[0] + self._fill(tpl, args) + parts[1] + fb
                elif t is bytes:
                    te = parts[0] + tpl + parts[1] + fb
                else:
                    te = parts[0] + self._fill(tpl, args) + parts[1] + fb
        n = len(te)
        p = b"".join((b"\x40", _ONE_BYTE[ts] if 0 <= ts < 128 else _TWO_BYTES[ts - 128] if 128 <= ts < 0x4000 else varint(ts), self._seq, b"\x5a",
                      _ONE_BYTE[n] if n < 128 else _TWO_BYTES[n - 128] if n < 0x4000 else varint(n), te,
                      self._interned() if self.interner.pending else b"", b"\x68\x02"))
        n = len(p)
        return (b"\x0a" + _ONE_BYTE[n] if n < 128 else b"\x0a" + _TWO_BYTES[n - 128] if n < 0x4000 else b"\x0a" + varint(n)) + p

    def event_named(self, ts: int, track: int, cat: str, name: str, args: Optional[Mapping[str, Any]],
                    flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = ()) -> bytes:
        """:meth:`ProtosEncoder.event_named`, the same bytes: category, annotations, type,
        track, then the name as a string (field 23) and the flows (47, 48)."""
        te = (b"\x18" + small_varint(self.interner.iid(CATEGORIES, cat))) if cat else b""
        if args:
            one = self._one
            te += b"".join([one(k, v) for k, v in args.items()])
        n = utf8(name)
        te += b"\x48\x01" + self._track(track) + b"\xba\x01" + varint(len(n)) + n
        if flow_ids:
            te += fixed64_fields(b"\xf9\x02", flow_ids)
        if terminating_flow_ids:
            te += fixed64_fields(b"\x81\x03", terminating_flow_ids)
        p = b"".join((b"\x40", varint(ts), self._seq, b"\x5a", varint(len(te)), te,
                      self._interned() if self.interner.pending else b"", b"\x68\x02"))
        return b"\x0a" + varint(len(p)) + p

    def _head_tail(self, cat_iid: int, kind: int, name_iid: int, track: int) -> list:
        """[TrackEvent fields before the annotations: category iid (3); after: type (9), name
        iid (10), track (11); the id keys to blank in the whole-args key (see :meth:`event`)]."""
        if len(self._heads) >= self.KEY_CACHE_LIMIT * 32:
            self._heads.clear()
        head = (b"\x18" + small_varint(cat_iid)) if cat_iid else b""
        return [head, b"\x48" + bytes((kind,)) + b"\x50" + small_varint(name_iid) + self._track(track), _VARYING_ORDER]

    def _track(self, track: int) -> bytes:
        """The ``track_uuid`` field (11), or nothing on the sequence's default track."""
        return b"" if track == self.default_track else b"\x58" + small_varint(track)

    def slice_end(self, ts: int, track: int) -> bytes:
        """A slice end: the timestamp, then bytes fixed per track (:meth:`_end_tail`). Always
        below 128 bytes, so its length is one byte."""
        tail = self.end_tails.get(track)
        if tail is None:
            tail = self.end_tails[track] = self._end_tail(track)
        p = b"\x40" + (_ONE_BYTE[ts] if 0 <= ts < 128 else _TWO_BYTES[ts - 128] if 128 <= ts < 0x4000 else varint(ts)) + tail
        return b"\x0a" + _ONE_BYTE[len(p)] + p

    def _end_tail(self, track: int) -> bytes:
        """A slice end packet's bytes after its timestamp: sequence id, TrackEvent (type, track)."""
        te = b"\x48\x02" + self._track(track)
        return self._seq + b"\x5a" + bytes((len(te),)) + te

    def counter(self, ts: int, track: int, value: Any) -> bytes:
        te = b"\x48\x04" + self._track(track)
        if type(value) is int and INT64_MIN <= value < (1 << 63):
            te += b"\xf0\x01" + varint(value)
        else:
            te += b"\xe1\x02" + _pack_double(float(value))
        p = b"\x40" + varint(ts) + self._seq + b"\x5a" + varint(len(te)) + te
        return b"\x0a" + varint(len(p)) + p
