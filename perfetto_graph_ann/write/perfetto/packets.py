"""Encoders for the TrackEvent packets of one sequence: slice begin/end, instant, counter.

Two implementations with one interface:

* :class:`ProtosEncoder` builds ``perfetto.protos`` messages and serializes them (the
  reference; simple and obviously right);
* :class:`FastEncoder` writes the same bytes by hand, with a cache of encoded debug
  annotations for (key, value) pairs that repeat (device, stream, grid, ...). It exists
  because the converter must be no slower than ``json.load`` of the input
  (``benchmarks/convert.py`` measures both); tests check both give identical bytes.

Both take ``list_text``: when true, a list-valued arg (top level) whose key is not in
``typed_keys`` is written as one string, its compact JSON text (:func:`list_text`), instead
of one typed debug annotation per item. That is the writer's default for Kineto's own
fields (``grid``, ``block``, the ``record_shapes`` arrays): one arg row instead of one per
item, which the trace processor parses much faster; see docs/design.md.

``keep`` (None: every arg) limits the args written to those named in it (a name also
matches with '.' read as '_', as the trace processor stores it): for a trace that only the
SQL package will read (``report``), args no module reads are left out.

Each method returns one framed packet: ``Trace.packet`` (field 1) tag, length, payload, so
the output file is simply the concatenation.
"""
from __future__ import annotations

from decimal import Decimal
from typing import AbstractSet, Any, Dict, Mapping, Optional, Sequence, Tuple

import msgspec
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .interning import ANNOTATION_NAMES, CATEGORIES, NAMES, STRING_VALUES, Interner
from .wire import _ONE_BYTE, _TWO_BYTES, _pack_double, _pack_fixed64, small_varint, utf8, varint

SEQUENCE_ID = 1
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4

#: Nesting deeper than this in an arg value is written as its JSON text (string).
MAX_ARG_DEPTH = 32
#: String values of 2 to 64 characters are interned (``string_value_iid``, 3 bytes a use);
#: shorter ones are as cheap inline, longer ones are rarely repeated.
MIN_INTERNED_STRING = 2
MAX_INTERNED_STRING = 64
_INT64_MIN = -(1 << 63)
_json_key = msgspec.json.encode
_json_args = msgspec.json.Encoder(decimal_format="number").encode
#: Per-event ids (CUPTI / profiler counters) that make otherwise identical args differ.
VARYING_KEYS = frozenset({"correlation", "External id", "Ev Idx", "Record function id", "Python id", "Python parent id"})
_VARYING_ORDER = tuple(sorted(VARYING_KEYS))
_UINT64_END = 1 << 64


def frame(payload: bytes) -> bytes:
    """``Trace.packet`` framing: tag 0x0A, varint length, packet bytes."""
    return b"\x0a" + varint(len(payload)) + payload


def _placeholder(item: Any) -> Optional[str]:
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
        b = _json_args(value)
    except (RecursionError, TypeError, ValueError, OverflowError):
        return None
    if b"null" in b:
        return None
    return b.decode("utf-8", "replace")


def _json_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, default=str, allow_nan=True)
    except (ValueError, RecursionError):
        return repr(value)


class ProtosEncoder:
    """Reference encoder built on ``perfetto.protos`` message classes.

    One encoder per packet sequence: ``sequence_id`` is written on every packet, and
    ``track_uuid`` is left out for ``default_track`` (the sequence's
    ``track_event_defaults.track_uuid``, see ``writer.py``).
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
            if _INT64_MIN <= value < (1 << 63):
                msg.int_value = value
            elif 0 <= value < _UINT64_END:
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
            self._string(msg, _json_text(value))
        elif t is list or t is tuple:
            for v in value:
                item = msg.array_values.add()
                placeholder = _placeholder(v)
                if placeholder is None:
                    self._annotation(item, v, depth + 1)
                else:
                    self._string(item, placeholder)
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

    def instant(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = ()) -> bytes:
        return self.slice_begin(ts, track, cat_iid, name_iid, args, flow_ids, terminating_flow_ids, TYPE_INSTANT)

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
        if type(value) is int and _INT64_MIN <= value < (1 << 63):
            te.counter_value = value
        else:
            te.double_counter_value = float(value)
        p = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=self.sequence_id, track_event=te)
        return frame(p.SerializeToString())


_INTERNED_FIELDS = {1: "event_categories", 2: "event_names", 3: "debug_annotation_names"}


class FastEncoder:
    """Hand-written encoder producing exactly :class:`ProtosEncoder`'s bytes, faster."""

    #: Distinct values cached per arg key; past it the key is encoded without a cache.
    KEY_CACHE_LIMIT = 2048
    #: Distinct whole-args templates kept (see :meth:`_annotations`).
    WHOLE_CACHE_LIMIT = 4096

    def __init__(self, interner: Interner, sequence_id: int = SEQUENCE_ID, default_track: Optional[int] = None,
                 list_text: bool = False, typed_keys: AbstractSet[str] = frozenset(),
                 keep: Optional[AbstractSet[str]] = None) -> None:
        self.interner = interner
        self.default_track = default_track
        self.list_text = list_text
        self.typed_keys = typed_keys
        self.keep = keep
        # arg key -> [name iid prefix (None: the key is not written), value cache or None,
        # whether its lists are written as text]
        self._keys: Dict[str, list] = {}
        self._whole: Optional[Dict[bytes, Any]] = {}  # blanked args JSON -> template; None: off
        self._whole_hits = self._whole_misses = 0
        self._end_tails: Dict[int, bytes] = {}
        self._begin_parts: Dict[Tuple[int, int, int, int], Tuple[bytes, bytes]] = {}
        self._heads: Dict[Tuple[str, str, int, int], list] = {}  # see event()
        self._ts_prefix = b"\x40"
        self._seq = b"\x50" + varint(sequence_id)
        # The last one-slot annotation filled by event(): (key, value) and its bytes. The
        # kernels of one graph replay all carry their launch's correlation, so consecutive
        # kernels reuse it (the bytes depend only on the key's name iid and the value).
        self._slot_key: Optional[str] = None
        self._slot_value = -1
        self._slot_bytes = b""

    # -- debug annotations -------------------------------------------------------------
    def _value(self, value: Any, depth: int) -> Tuple[bytes, bytes]:
        """(bytes of value fields numbered below 10, bytes of fields above 10) for one value.

        Field order as protobuf serializes: scalars (2-6), then ``name`` (10) for dict entries
        (added by the caller), ``dict_entries`` (11), ``array_values`` (12), ``string_value_iid`` (17).
        """
        t = type(value)
        if t is int:
            if _INT64_MIN <= value < (1 << 63):
                return b"\x20" + varint(value), b""
            if 0 <= value < _UINT64_END:
                return b"\x18" + varint(value), b""
            return self._str_fields(str(value))
        if t is str:
            return self._str_fields(value)
        if t is float or t is Decimal:
            return b"\x29" + _pack_double(float(value)), b""
        if t is bool:
            return (b"\x10\x01" if value else b"\x10\x00"), b""
        if value is None:
            return b"", b""
        if depth >= MAX_ARG_DEPTH:
            return self._str_fields(_json_text(value))
        if t is list or t is tuple:
            parts = []
            for v in value:
                placeholder = _placeholder(v)
                if placeholder is None:
                    lo, hi = self._value(v, depth + 1)
                else:
                    lo, hi = self._str_fields(placeholder)
                item = lo + hi
                parts.append(b"\x62" + varint(len(item)) + item)
            return b"", b"".join(parts)
        if t is dict:
            parts = []
            for k, v in value.items():
                lo, hi = self._value(v, depth + 1)
                name = utf8(str(k))
                item = lo + b"\x52" + varint(len(name)) + name + hi
                parts.append(b"\x5a" + varint(len(item)) + item)
            return b"", b"".join(parts)
        return self._str_fields(str(value))

    def _str_fields(self, text: str) -> Tuple[bytes, bytes]:
        if MIN_INTERNED_STRING <= len(text) <= MAX_INTERNED_STRING:
            return b"", b"\x88\x01" + small_varint(self.interner.iid(STRING_VALUES, text))
        b = utf8(text)
        return b"\x32" + varint(len(b)) + b, b""

    def _annotations(self, args: Mapping[str, Any]) -> bytes:
        """Encoded ``debug_annotations`` of one event.

        First a whole-args template cache: events of one kind (a kernel of a graph replay,
        a runtime call) repeat every arg but a few per-event ids (:data:`VARYING_KEYS`).
        The key is the JSON text of the args with those ids blanked, so it keeps the key
        order and tells 1, 1.0 and true apart (decimal_format="number": a Decimal and a
        float of one value encode to the same bytes anyway); the template is the encoded
        constant runs with a slot per varying key. Args with NaN / inf (JSON null) or
        values JSON cannot encode skip it. When it hits less than half the time (eager ops
        with per-call shapes), it turns itself off and only the per-key cache is used.
        """
        whole = self._whole
        if whole is not None:
            d = dict(args)
            for k in VARYING_KEYS:
                if k in d:
                    d[k] = 0
            try:
                ck = _json_args(d)
            except (RecursionError, TypeError, ValueError, OverflowError):
                ck = None
            if ck is not None:
                # a key with null (NaN / inf / None) is never stored, so it can only miss:
                # the null check is needed on a miss alone
                tpl = whole.get(ck)
                if tpl is not None:
                    self._whole_hits += 1
                    if type(tpl) is bytes:
                        return tpl
                    return self._fill(tpl, args)
                if b"null" not in ck:
                    return self._miss(args, ck)
        one = self._one
        return b"".join([one(k, v) for k, v in args.items()])

    def _fill(self, tpl: Any, args: Mapping[str, Any]) -> bytes:
        """The encoded args from a template hit: its constant runs and each slot's value."""
        if type(tpl) is tuple:  # one slot: (run before, key, head, run after)
            tpl = [tpl[0], (tpl[1], tpl[2]), tpl[3]]
        parts = []
        for p in tpl:
            if type(p) is bytes:
                parts.append(p)
                continue
            k, head = p
            v = args[k]
            if type(v) is int and -1 < v < (1 << 63):  # the usual id: inline
                body = head + (_ONE_BYTE[v] if v < 128 else varint(v))
                parts.append(b"\x22" + _ONE_BYTE[len(body)] + body)
            else:
                parts.append(self._one(k, v))
        return b"".join(parts)

    def _miss(self, args: Mapping[str, Any], ck: bytes) -> bytes:
        """A whole-args key (without null) seen for the first time: encode, store the template."""
        whole = self._whole
        self._whole_misses += 1
        tpl, encoded = self._template(args)
        if len(whole) < self.WHOLE_CACHE_LIMIT:
            whole[ck] = tpl
        if self._whole_misses >= 1024 and self._whole_misses > self._whole_hits:
            self._whole = None
        return encoded

    def _template(self, args: Mapping[str, Any]) -> Tuple[Any, bytes]:
        """(template, encoded ``args``): the constant runs as bytes, a varying key as a slot.

        A slot is (key, the annotation's bytes up to an int value: name iid and int tag).

        The template is a single bytes object when no key varies. Every key is encoded in
        order here, so names and strings are interned in arg order (as the reference does).
        """
        parts: list = []
        run: list = []
        encoded: list = []
        one = self._one
        for k, v in args.items():
            b = one(k, v)
            encoded.append(b)
            if k in VARYING_KEYS and b:  # a key left out (b"") needs no slot
                if run:
                    parts.append(b"".join(run))
                    run = []
                parts.append((k, self._keys[k][0] + b"\x20"))
            else:
                run.append(b)
        if run:
            parts.append(b"".join(run))
        if len(parts) == 1 and type(parts[0]) is bytes:
            return parts[0], parts[0]
        if not parts:
            return b"", b""
        slots = [p for p in parts if type(p) is tuple]
        if len(slots) == 1:  # the common case (a kernel's correlation): (run before, key, head, run after)
            at = parts.index(slots[0])
            pre = parts[0] if at == 1 else b""
            post = parts[at + 1] if at + 1 < len(parts) else b""
            return (pre, slots[0][0], slots[0][1], post), b"".join(encoded)
        return parts, b"".join(encoded)

    def _one(self, k: str, v: Any) -> bytes:
        """One encoded debug annotation, with the per-key cache.

        Per arg key: the name's iid prefix, and a cache of encoded (key, value) annotations
        while the key's values repeat (device, stream, grid, ...). A key whose values keep
        changing (correlation, External id) loses its cache after ``KEY_CACHE_LIMIT``
        distinct values; its ints are then encoded directly.
        """
        ks = self._keys.get(k)
        if ks is None:
            if not kept(self.keep, k):
                ks = self._keys[k] = [None, None, False]
            else:
                ks = self._keys[k] = [b"\x08" + small_varint(self.interner.iid(ANNOTATION_NAMES, k)), {},
                                      self.list_text and k not in self.typed_keys]
        prefix, cache, as_text = ks
        if prefix is None:
            return b""
        t = type(v)
        if t is list and as_text:
            text = list_text(v)
            if text is not None:
                v = text  # encoded (and cached) as that string: the same bytes
                t = str
        if cache is None:
            if t is int and -1 < v < (1 << 63):
                body = prefix + b"\x20" + (_ONE_BYTE[v] if v < 128 else varint(v))
                return b"\x22" + _ONE_BYTE[len(body)] + body
            lo, hi = self._value(v, 0)
            body = prefix + lo + hi
            return b"\x22" + varint(len(body)) + body
        if t is int or t is str:
            ck = v
        elif t is list:
            try:
                ck = _json_key(v)  # JSON text keeps 1, true and 1.0 apart
                if b"null" in ck:  # NaN / inf also encode as null: use the exact repr
                    ck = ("L", repr(v))
            except (RecursionError, TypeError, ValueError, OverflowError):
                ck = None
        elif t is bool or (t is float and v == v):
            ck = (t, v)
        else:
            ck = None
        if ck is not None:
            b = cache.get(ck)
            if b is not None:
                return b
        lo, hi = self._value(v, 0)
        body = prefix + lo + hi
        b = b"\x22" + varint(len(body)) + body
        if ck is not None:
            if len(cache) >= self.KEY_CACHE_LIMIT:
                ks[1] = None
            else:
                cache[ck] = b
        return b

    # -- packets -----------------------------------------------------------------------
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
            te += (b"\xf9\x02" + _pack_fixed64(flow_ids[0]) if len(flow_ids) == 1
                   else b"".join([b"\xf9\x02" + _pack_fixed64(f) for f in flow_ids]))
        if terminating_flow_ids:  # a kernel's one launch: no list to build
            te += (b"\x81\x03" + _pack_fixed64(terminating_flow_ids[0]) if len(terminating_flow_ids) == 1
                   else b"".join([b"\x81\x03" + _pack_fixed64(f) for f in terminating_flow_ids]))
        n = len(te)
        p = b"".join((b"\x40", _ONE_BYTE[ts] if 0 <= ts < 128 else varint(ts), self._seq, b"\x5a",
                      _ONE_BYTE[n] if n < 128 else varint(n), te,
                      self._interned() if self.interner.pending else b"", b"\x68\x02"))
        n = len(p)
        return (b"\x0a" + _ONE_BYTE[n] if n < 128 else b"\x0a" + varint(n)) + p

    def instant(self, ts: int, track: int, cat_iid: int, name_iid: int, args: Optional[Mapping[str, Any]],
                flow_ids: Sequence[int] = (), terminating_flow_ids: Sequence[int] = ()) -> bytes:
        return self.slice_begin(ts, track, cat_iid, name_iid, args, flow_ids, terminating_flow_ids, TYPE_INSTANT)

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
        key = (cat, name, track, kind)
        parts = self._heads.get(key)
        if parts is None:
            interner = self.interner
            cat_iid = interner.iid(CATEGORIES, cat) if cat else 0
            parts = self._heads[key] = self._head_tail(cat_iid, kind, interner.iid(NAMES, name), track)
        if flow_ids:
            fb = (b"\xf9\x02" + _pack_fixed64(flow_ids[0]) if len(flow_ids) == 1
                  else b"".join([b"\xf9\x02" + _pack_fixed64(f) for f in flow_ids]))
        else:
            fb = b""
        if terminating_flow_ids:  # a kernel's one launch: no list to build
            fb += (b"\x81\x03" + _pack_fixed64(terminating_flow_ids[0]) if len(terminating_flow_ids) == 1
                   else b"".join([b"\x81\x03" + _pack_fixed64(f) for f in terminating_flow_ids]))
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
                d = dict(args)
                for k in parts[2]:
                    if k in d:
                        d[k] = 0
                try:
                    tpl = whole.get(_json_args(d))
                except (RecursionError, TypeError, ValueError, OverflowError):
                    pass
            if tpl is None:  # no template hit: the general path (it repeats the lookup: a miss is rare)
                te = parts[0] + self._annotations(args) + parts[1] + fb
                if whole is not None:
                    parts[2] = tuple([k for k in args if k in VARYING_KEYS])
            else:
                self._whole_hits += 1
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
        for f in flow_ids:
            te += b"\xf9\x02" + _pack_fixed64(f)
        for f in terminating_flow_ids:
            te += b"\x81\x03" + _pack_fixed64(f)
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
        tail = self._end_tails.get(track)
        if tail is None:
            tail = self._end_tails[track] = self.end_tail(track)
        p = b"\x40" + varint(ts) + tail
        return b"\x0a" + varint(len(p)) + p

    def end_tail(self, track: int) -> bytes:
        """A slice end packet's bytes after its timestamp (sequence id, TrackEvent): fixed per
        track, short (an END packet is below 128 bytes, so its length is one byte)."""
        te = b"\x48\x02" + self._track(track)
        return self._seq + b"\x5a" + bytes((len(te),)) + te

    def counter(self, ts: int, track: int, value: Any) -> bytes:
        te = b"\x48\x04" + self._track(track)
        if type(value) is int and _INT64_MIN <= value < (1 << 63):
            te += b"\xf0\x01" + varint(value)
        else:
            te += b"\xe1\x02" + _pack_double(float(value))
        p = b"\x40" + varint(ts) + self._seq + b"\x5a" + varint(len(te)) + te
        return b"\x0a" + varint(len(p)) + p


ENCODERS = {"fast": FastEncoder, "protos": ProtosEncoder}
