"""Debug annotations (an event's args) encoded by hand, with the caches that make it fast.

The base of :class:`~.fast_encoder.FastEncoder`: the same bytes as
:class:`~.protos_encoder.ProtosEncoder`'s ``debug_annotations``, from two caches. Per arg
key, the encoded annotation of each (key, value) pair while the key's values repeat
(device, stream, grid, ...); per args dict, a whole-args template (:meth:`_annotations`)
for the events of one kind (a kernel of a graph replay, a runtime call) that repeat every
arg but a few per-event ids (:data:`~.packets.VARYING_KEYS`).
"""
from __future__ import annotations

from decimal import Decimal
from typing import AbstractSet, Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import msgspec

from ... import settings
from .interning import ANNOTATION_NAMES, STRING_VALUES, Interner
from .packets import (INT64_MIN, MAX_ARG_DEPTH, MAX_INTERNED_STRING, MIN_INTERNED_STRING, UINT64_END, VARYING_KEYS,
                      json_args, json_text, kept, list_text, placeholder)
from .wire import _ONE_BYTE, _pack_double, small_varint, utf8, varint

__all__ = ["args_key", "BUILT", "compiled", "FastArgs", "whole_args_key"]

_json_key = msgspec.json.encode

try:  # the writer's compiled hot path (_encode.c, built with the capture's by hatch_build.py)
    from ._encode import args_key as _args_key, event_packet as _event_packet, slice_end as _slice_end
    from ._encode import stream_records as _stream_records, template_packet as _template_packet
    from ._encode import template_runs as _template_runs
except ImportError:
    _COMPILED: Dict[str, Callable[..., Any]] = {}
else:
    _COMPILED = {"args_key": _args_key, "event_packet": _event_packet, "slice_end": _slice_end,
                 "stream_records": _stream_records, "template_packet": _template_packet,
                 "template_runs": _template_runs}
#: whether the compiled hot path was built (and imports here)
BUILT = bool(_COMPILED)
_ON = BUILT and not settings.switch(settings.PURE_PYTHON)


def compiled(name: str) -> Optional[Callable[..., Any]]:
    """The compiled hot path's function ``name`` (``_encode.c``), or None where it is not built
    or ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import: the callers then build the same
    bytes in Python. Each is an accelerator answering None where it leaves a case to Python."""
    return _COMPILED[name] if _ON else None


#: ``args_key(args, blank)``: the compiled whole-args key (see :func:`whole_args_key`), or None
args_key = compiled("args_key")
#: ``template_runs(keys, args, varying, one, limit)``: :meth:`FastArgs._template` compiled, each
#: arg from its key's cache (a new int encoded and cached there, up to ``limit`` values), else
#: from ``one``; None where args is not a dict
template_runs = compiled("template_runs")


def whole_args_key(args: Mapping[str, Any], blank: Iterable[str]) -> Optional[bytes]:
    """The whole-args template cache's key of ``args`` with the ids in ``blank`` set to 0
    (see :meth:`FastArgs._annotations`): the compiled key where it takes the args (bytes
    starting with a zero byte), else their JSON text; None where neither can (no template)."""
    if args_key is not None:
        ck = args_key(args, blank)
        if ck is not None:
            return ck
    d = dict(args)
    for k in blank:
        if k in d:
            d[k] = 0
    try:
        return json_args(d)
    except (RecursionError, TypeError, ValueError, OverflowError):
        return None


class FastArgs:
    """Hand-written ``DebugAnnotation`` bytes for the args of one packet sequence."""

    #: Distinct values cached per arg key; past it the key is encoded without a cache.
    KEY_CACHE_LIMIT = 2048
    #: Distinct whole-args templates kept (see :meth:`_annotations`).
    WHOLE_CACHE_LIMIT = 4096
    #: ... and of a graph node's kernel (args with a ``graph node id``): one a node (two where a
    #: replay's critical-path flag differs), hit again at each later replay of its graph, so
    #: they are kept past ``WHOLE_CACHE_LIMIT`` for graphs of many nodes, and several such graphs.
    GRAPH_CACHE_LIMIT = 1 << 16

    def __init__(self, interner: Interner, list_text: bool = False, typed_keys: AbstractSet[str] = frozenset(),
                 keep: Optional[AbstractSet[str]] = None) -> None:
        self.interner = interner
        self.list_text = list_text
        self.typed_keys = typed_keys
        self.keep = keep
        # arg key -> [name iid prefix (None: the key is not written), value cache or None,
        # whether its lists are written as text]
        self._keys: Dict[str, list] = {}
        self._whole: Optional[Dict[bytes, Any]] = {}  # blanked args JSON -> template; None: off
        self._whole_hits = self._whole_misses = 0
        self._graph_misses = 0  # misses of graph nodes' kernels (see :meth:`_miss`)

    def _value(self, value: Any, depth: int) -> Tuple[bytes, bytes]:
        """(bytes of value fields numbered below 10, bytes of fields above 10) for one value.

        Field order as protobuf serializes: scalars (2-6), then ``name`` (10) for dict entries
        (added by the caller), ``dict_entries`` (11), ``array_values`` (12), ``string_value_iid`` (17).
        """
        t = type(value)
        if t is int:
            if INT64_MIN <= value < (1 << 63):
                return b"\x20" + varint(value), b""
            if 0 <= value < UINT64_END:
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
            return self._str_fields(json_text(value))
        if t is list or t is tuple:
            parts = []
            for v in value:
                hole = placeholder(v)
                if hole is None:
                    lo, hi = self._value(v, depth + 1)
                else:
                    lo, hi = self._str_fields(hole)
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
        constant runs with a slot per varying key (:func:`whole_args_key`: the compiled key
        where built, telling apart all the JSON does). Args with NaN / inf (JSON null) or
        values JSON cannot encode skip it. When it hits less than half the time (eager ops
        with per-call shapes), it turns itself off and only the per-key cache is used; a graph
        node's first miss does not count (:meth:`_miss`).
        """
        whole = self._whole
        if whole is not None:
            ck = whole_args_key(args, VARYING_KEYS)
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
        """A whole-args key (without null) seen for the first time: encode, store the template.

        A graph node's kernel (its args carry a ``graph node id``) misses once per node at its
        graph's first replay, then hits at every later one: its misses do not count towards
        turning the cache off (a graph of over 1,024 nodes would otherwise turn it off during
        its first replay), and its templates are kept up to ``GRAPH_CACHE_LIMIT``.
        """
        whole = self._whole
        self._whole_misses += 1
        tpl, encoded = self._template(args)
        if "graph node id" in args:
            self._graph_misses += 1
            if len(whole) < self.GRAPH_CACHE_LIMIT:
                whole[ck] = tpl
            return encoded
        if len(whole) < self.WHOLE_CACHE_LIMIT:
            whole[ck] = tpl
        misses = self._whole_misses - self._graph_misses
        if misses >= 1024 and misses > self._whole_hits:
            self._whole = None
        return encoded

    def _template(self, args: Mapping[str, Any]) -> Tuple[Any, bytes]:
        """(template, encoded ``args``): the constant runs as bytes, a varying key as a slot.

        A slot is (key, the annotation's bytes up to an int value: name iid and int tag).

        The template is a single bytes object when no key varies. Every key is encoded in
        order here, so names and strings are interned in arg order (as the reference does).
        Compiled where built (:data:`template_runs`): a graph's first replay misses once per
        node, so this runs once per node of every graph in the profile.
        """
        if template_runs is not None:
            got = template_runs(self._keys, args, VARYING_KEYS, self._one, self.KEY_CACHE_LIMIT)
            if got is not None:
                return got
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

