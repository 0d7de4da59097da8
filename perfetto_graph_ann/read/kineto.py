"""Read a torch.profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, into :class:`KinetoTrace`.

Times are exact: JSON numbers are decoded straight to :class:`decimal.Decimal` (msgspec), and
``ts_ns = round(Decimal(ts) * 1000)``, the value Perfetto's JSON importer computes, without
the float rounding that a plain ``json.load`` would add (Kineto writes microseconds with
3 decimals on a ~1e12 us clock: 16 significant digits, more than a double keeps).

Two decoding paths produce the same events:

* a fast path decodes ``traceEvents`` straight into :class:`TraceEvent` objects (through
  ``_KinetoEvent``, a typed Struct that knows every key torch.profiler writes,
  ``forbid_unknown_fields``), with ``ts`` / ``dur`` kept as their JSON text (``msgspec.Raw``);
  when every time is written as Kineto writes it (digits, a point, 3 decimals) all of them
  are turned into integer ns in one bulk pass (a format check of the joined text, drop the
  points, one JSON int array): exact, and what makes convert faster than a plain
  ``json.load``. Any other time (an int, more decimals, an exponent, a sign, null) sends the
  file to the exact path: a Struct with the same keys and ``Decimal`` times, per event;
* when the typed decode refuses the file (an unknown key, a wrong type), a generic path decodes
  plain dicts, keeps unknown keys in ``TraceEvent.extra`` and names the exact problem.

Every problem raises :class:`~perfetto_graph_ann.errors.TraceFormatError` whose message
starts with the path.
"""
from __future__ import annotations

import os
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Dict, List, Optional, Tuple, Union

import msgspec

from .. import formats
from ..errors import PathLike, TraceFormatError
from .model import KinetoTrace, TraceEvent

__all__ = ["read_trace", "parse_trace_bytes", "us_to_ns"]

#: Times and ts + dur must fit the trace processor's int64 nanoseconds.
_MAX_NS = 1 << 63


class _Event(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One Kineto event with exactly the keys torch.profiler writes."""

    ph: str
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = ""
    tid: Union[int, str] = ""
    ts: Optional[Decimal] = None
    dur: Optional[Decimal] = None
    args: Optional[Dict[str, Any]] = None
    id: Union[int, str, None] = None
    bp: Optional[str] = None
    s: Optional[str] = None


class _KinetoEvent(TraceEvent, kw_only=True, forbid_unknown_fields=True, gc=False,
                   rename={"index": "s", "ts_ns": "ts", "dur_ns": "dur", "extra": "bp"}):
    """The fast path's decode target: a :class:`TraceEvent` whose fields hold the JSON as read.

    It accepts exactly :class:`_Event`'s keys: the five fields that are not JSON keys carry the
    ones that are not fields: ``index`` holds ``s``, ``extra`` holds ``bp``, ``ts_ns`` / ``dur_ns``
    the times' JSON text (``msgspec.Raw``). :func:`_from_bulk` puts the final values in place and
    turns each object into a plain :class:`TraceEvent` (same fields, same layout), so the file's
    events are decoded straight into their final objects.
    """

    index: Optional[str] = None  # type: ignore[assignment]
    ph: str
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = ""
    tid: Union[int, str] = ""
    ts_ns: msgspec.Raw = None  # type: ignore[assignment]  # None: key absent
    dur_ns: msgspec.Raw = None  # type: ignore[assignment]
    args: Dict[str, Any] = msgspec.field(default_factory=dict)  # null args: the exact path
    id: Union[int, str, None] = None
    extra: Optional[str] = None  # type: ignore[assignment]


# The class switch in _from_bulk needs the very same fields in the same slots.
assert _KinetoEvent.__struct_fields__ == TraceEvent.__struct_fields__
assert _KinetoEvent.__basicsize__ == TraceEvent.__basicsize__


_FAST_EXTRA = ("bp", "s")
_fast_decoder = msgspec.json.Decoder(List[_Event])
_raw_decoder = msgspec.json.Decoder(List[_KinetoEvent])
#: Kineto's time format, comma-joined: at most 15 integer digits (so ns, and ts + dur, stay
#: below 2^63 without a range check), a point and exactly 3 decimals (so the digits without
#: the point are the exact ns). JSON has no leading zeros but in ``0.ddd``.
_KINETO_TIMES = re.compile(rb"(?:[0-9]{1,15}\.[0-9]{3},)*[0-9]{1,15}\.[0-9]{3}")
_DIGITS = b"0123456789"
_DIGITS_AS_D = bytes.maketrans(_DIGITS, b"d" * 10)
_SIXTEEN_DIGITS = b"d" * 16
_int_list_decoder = msgspec.json.Decoder(List[int])


def _kineto_times(text: bytes, n: int) -> bool:
    """Whether ``text``, ``n`` JSON values joined by single commas, is all Kineto times.

    The language of :data:`_KINETO_TIMES` (a test compares both), checked with a few C-level
    bytes passes instead of the regex: only digits, points and the ``n - 1`` separators; then,
    with digits shown as ``d`` and a comma appended, either every value is shaped like the
    first, a valid ``<1-15 d>.ddd,`` (one comparison: a trace's timestamps all have the same
    number of digits), or ``n`` disjoint ``.ddd,`` hold all ``n`` points and all ``n`` commas,
    so each value is ``<digits>.<3 digits>``, none with an empty (``.`` first or after a comma)
    or a 16-digit integer part.
    """
    if text.translate(None, _DIGITS + b".") != b"," * (n - 1):
        return False
    marks = text.translate(_DIGITS_AS_D) + b","
    width = marks.find(b",") + 1
    if 6 <= width <= 20 and marks[:width] == _SIXTEEN_DIGITS[: width - 5] + b".ddd," and marks == marks[:width] * n:
        return True
    return (marks.count(b".ddd,") == n and marks.count(b".") == n and marks[:1] != b"."
            and b",." not in marks and _SIXTEEN_DIGITS not in marks)


_top_decoder = msgspec.json.Decoder(Dict[str, msgspec.Raw])
_generic_decoder = msgspec.json.Decoder(float_hook=Decimal)
_KNOWN_KEYS = frozenset({"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"})


def us_to_ns(value: Decimal) -> int:
    """Exact microseconds (Decimal) to integer ns; a half ns rounds away from zero.

    Kineto writes 3 decimals, so this is exact. For finer inputs, half-up is what Perfetto's
    JSON importer gives in the cases a double can tell (``1.0005`` us -> 1001 ns).
    """
    ns = value.scaleb(3)
    if ns == ns.to_integral_value():
        return int(ns)
    return int(ns.to_integral_value(rounding=ROUND_HALF_UP))


def read_trace(path: PathLike) -> KinetoTrace:
    """Read a torch.profiler Chrome trace (``.json`` or ``.json.gz``, detected by content)."""
    spath = os.fspath(path)
    data = formats.read_bytes(spath, TraceFormatError, "trace file")
    return parse_trace_bytes(data, spath)


def parse_trace_bytes(data: bytes, path: Optional[str] = None) -> KinetoTrace:
    """Decode the JSON text of a trace; ``path`` only names the file in errors."""
    if not data or data.isspace():  # not data.strip(): that copies the whole text
        raise TraceFormatError(path, "file is empty")
    split = _split_top(data)
    events: Optional[List[TraceEvent]] = None
    if split is not None:
        top, raw_events = split
        metadata = _metadata(top, path)
        try:
            events = _from_bulk(raw_events, path)
        except TraceFormatError:  # not JSON, or the array ends before the last "]": see _split_top
            split = None
    if split is None:
        try:
            top = _top_decoder.decode(data)
        except msgspec.ValidationError:
            raise TraceFormatError(path, "not a Chrome trace: the top level is not a JSON object") from None
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _binary_hint(data) or f"not valid JSON ({_msg(e)})") from None
        except RecursionError:
            raise TraceFormatError(path, "JSON nested too deeply") from None
        raw_events = top.pop("traceEvents", None)
        if raw_events is None:
            raise TraceFormatError(path, "no traceEvents array: not a torch.profiler Chrome trace")
        metadata = _metadata(top, path)
        events = _from_bulk(raw_events, path)
    if events is None:
        try:
            fast = _fast_decoder.decode(raw_events)
        except (msgspec.ValidationError, RecursionError):
            fast = None
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, f"not valid JSON in traceEvents ({_msg(e)})") from None
        if fast is not None:
            events = _from_fast(fast, path)
        else:
            events = _from_generic(raw_events, path)
    return KinetoTrace(path=path, events=events, metadata=metadata)


def _metadata(top: Dict[str, msgspec.Raw], path: Optional[str]) -> Dict[str, Any]:
    metadata: Dict[str, Any] = {}
    for key, raw in top.items():
        try:
            metadata[key] = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError) as e:
            raise TraceFormatError(path, f"top-level key {key!r} is not valid JSON ({_msg(e)})") from None
    return metadata


_EVENTS_KEY = b'"traceEvents"'
_EVENTS_ARRAY = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*\[")
_JSON_SPACE = b" \t\n\r"


def _split_top(data: bytes) -> Optional[Tuple[Dict[str, msgspec.Raw], memoryview]]:
    """``traceEvents``' array text and the other top-level keys, without scanning the array.

    Decoding the top level as ``{key: Raw}`` scans the whole array once more just to find its
    end (~30 ms on 78 MB). Kineto writes the array as the last value but for a short
    ``traceName``, so this takes the first ``"traceEvents": [`` and the last ``]`` of the text
    as the array and decodes the text around it with ``null`` in its place: the other keys, in
    order. That is the document's own top level exactly when that decode is an object whose
    ``traceEvents`` is our ``null`` and the array text decodes alone (checked by the caller,
    which then sees a ``TraceFormatError`` for anything else), given no backslash around the
    array (so no escaped quote or key spelling can fake or hide the key) and no other
    ``"traceEvents"`` after it. None (scan the whole document as before) when unsure.
    """
    at = data.find(_EVENTS_KEY)
    if at < 0:
        return None
    m = _EVENTS_ARRAY.match(data, at + len(_EVENTS_KEY))
    end = data.rfind(b"]") + 1
    if m is None or end <= m.end():
        return None
    start = m.end() - 1
    last = end - 2  # the array's last element must be an event object (or the array empty)
    while data[last] in _JSON_SPACE:
        last -= 1
    if data[last] not in b"}[":
        return None
    head, tail = data[:start], data[end:]
    if b"\\" in head or b"\\" in tail or _EVENTS_KEY in tail:
        return None
    try:
        top = _top_decoder.decode(head + b"null" + tail)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included
        return None
    placeholder = top.pop("traceEvents", None)
    if placeholder is None or bytes(placeholder) != b"null":
        return None
    return top, memoryview(data)[start:end]


def _from_bulk(raw_events: bytes, path: Optional[str]) -> Optional[List[TraceEvent]]:
    """The fast path: events of a file whose times are all in Kineto's format, else None.

    None (the caller then takes the exact per-event path, which also words every error) when
    the typed decode refuses the events, a time is not ``<digits>.<3 digits>`` or a complete
    event lacks ts or dur. Gives the same events as :func:`_from_fast` (tests compare them).
    """
    try:
        events = _raw_decoder.decode(raw_events)
    except (msgspec.ValidationError, RecursionError):
        return None
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON in traceEvents ({_msg(e)})") from None
    ts_all = _bulk_ns([e.ts_ns for e in events])
    dur_all = _bulk_ns([e.dur_ns for e in events]) if ts_all is not None else None
    if dur_all is None:
        return None
    cls = TraceEvent
    for i, e, ts_ns, dur_ns in zip(range(len(events)), events, ts_all, dur_all):
        if ts_ns is None or dur_ns is None:
            if e.ph == "X":
                return None
        sv = e.index  # the JSON's "s", "bp": see _KinetoEvent
        e.index = i
        e.ts_ns = ts_ns
        e.dur_ns = dur_ns
        if sv is None:  # the usual cases spelled out: every ac2g flow end has bp
            bp = e.extra
            if bp is not None:
                e.extra = {"bp": bp}
        else:
            bp = e.extra
            e.extra = {"bp": bp, "s": sv} if bp is not None else {"s": sv}
        e.__class__ = cls
    return events


def _bulk_ns(raws: List[Optional[msgspec.Raw]]) -> Optional[List[Optional[int]]]:
    """Integer ns of Kineto-format times (None where absent); None if any is in another form."""
    present = [r for r in raws if r is not None]
    if not present:
        return [None] * len(raws)
    text = b",".join(present)
    if not _kineto_times(text, len(present)):
        return None
    # The digits without the point are the ns; msgspec reads them as one JSON array of ints
    # (5x faster than int() per value) once the leading zeros of values below 1 us are gone:
    # 0.000 -> 0, 0.005 -> 5, 0.050 -> 50, 0.500 -> 500 (JSON numbers have no other leading 0).
    digits = (b"," + text).replace(b",0.00", b",").replace(b",0.0", b",").replace(b",0.", b",")
    values = _int_list_decoder.decode(b"[" + digits[1:].translate(None, b".") + b"]")
    if len(present) == len(raws):
        return values
    it = iter(values)
    return [None if r is None else next(it) for r in raws]


def _binary_hint(data: bytes) -> Optional[str]:
    """What a file that is not JSON is, when it is one of the binary files this package uses."""
    if formats.is_sidecar_bytes(data):
        return "this is an annotation sidecar, not a torch.profiler JSON trace (give it with --annotations)"
    if formats.is_pftrace_bytes(data):
        return "this is a Perfetto protobuf trace, not a torch.profiler JSON trace (report, sql and open read it as it is)"
    return None


def _msg(e: BaseException) -> str:
    return str(e) or type(e).__name__


def _ns(value: Any, index: int, key: str, path: Optional[str]) -> int:
    try:
        ns = us_to_ns(value)
    except (InvalidOperation, ValueError, OverflowError, AttributeError, TypeError):
        raise TraceFormatError(path, f"event {index}: {key} is not a finite number ({value!r})") from None
    if ns >= _MAX_NS or ns < -_MAX_NS:
        raise TraceFormatError(path, f"event {index}: {key} {value} us is out of range")
    if ns < 0 and key == "ts":
        # Perfetto's clocks are unsigned: a trace cannot start before time 0.
        raise TraceFormatError(path, f"event {index}: negative timestamp {value} us")
    return ns


def _from_fast(fast: List[_Event], path: Optional[str]) -> List[TraceEvent]:
    events: List[TraceEvent] = []
    append = events.append
    max_ns = _MAX_NS
    for i, e in enumerate(fast):
        # Inline fast path of _ns(): 3-decimal microseconds scale to an integral Decimal in range;
        # anything else (sub-ns digits, NaN, out of range, negative) takes the checked path.
        ts = e.ts
        if ts is None:
            ts_ns = None
        else:
            x = ts.scaleb(3)
            ts_ns = int(x) if x.is_finite() else -1
            if ts_ns != x or not 0 <= ts_ns < max_ns:
                ts_ns = _ns(ts, i, "ts", path)
        dur = e.dur
        if dur is not None:
            x = dur.scaleb(3)
            dur_ns = int(x) if x.is_finite() else -1
            if dur_ns != x or not 0 <= dur_ns < max_ns:
                dur_ns = _ns(dur, i, "dur", path)
                if dur_ns < 0:
                    raise TraceFormatError(path, f"event {i} ({e.name!r}): negative duration {dur} us")
            if ts_ns is not None and ts_ns + dur_ns >= max_ns:
                raise TraceFormatError(path, f"event {i} ({e.name!r}): ts + dur is out of range")
        else:
            dur_ns = None
            if e.ph == "X":
                raise TraceFormatError(path, f"event {i} ({e.name!r}): complete event (ph X) without dur")
        if ts_ns is None and e.ph == "X":
            raise TraceFormatError(path, f"event {i} ({e.name!r}): complete event (ph X) without ts")
        bp = e.bp
        sv = e.s
        if sv is None:  # the usual cases spelled out: every ac2g flow end has bp
            extra = None if bp is None else {"bp": bp}
        else:
            extra = {k: getattr(e, k) for k in _FAST_EXTRA if getattr(e, k) is not None}
        append(TraceEvent(i, e.ph, e.cat, e.name, e.pid, e.tid, ts_ns, dur_ns, e.args or {}, e.id, extra))
    return events


def _plain(value: Any) -> Any:
    """Generic-path values: Decimal -> float (args carry floats, only times stay exact)."""
    t = type(value)
    if t is Decimal:
        return float(value)
    if t is list:
        return [_plain(v) for v in value]
    if t is dict:
        return {k: _plain(v) for k, v in value.items()}
    return value


def _from_generic(raw: bytes, path: Optional[str]) -> List[TraceEvent]:
    try:
        items = _generic_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON in traceEvents ({_msg(e)})") from None
    except RecursionError:
        raise TraceFormatError(path, "traceEvents nested too deeply") from None
    if not isinstance(items, list):
        raise TraceFormatError(path, f"traceEvents is a {_jtype(items)}, not an array")
    events: List[TraceEvent] = []
    for i, d in enumerate(items):
        if not isinstance(d, dict):
            raise TraceFormatError(path, f"event {i} is a {_jtype(d)}, not an object")
        ph = d.get("ph")
        if not isinstance(ph, str):
            raise TraceFormatError(path, f"event {i}: ph is {'missing' if ph is None else 'a ' + _jtype(ph)}, expected a string")
        name = d.get("name", "")
        cat = d.get("cat", "")
        for key, val in (("name", name), ("cat", cat)):
            if not isinstance(val, str):
                raise TraceFormatError(path, f"event {i}: {key} is a {_jtype(val)}, expected a string")
        pid = d.get("pid", "")
        tid = d.get("tid", "")
        for key, val in (("pid", pid), ("tid", tid)):
            if isinstance(val, bool) or not isinstance(val, (int, str)):
                raise TraceFormatError(path, f"event {i} ({name!r}): {key} is a {_jtype(val)}, expected an integer or string")
        ts_ns = dur_ns = None
        ts = d.get("ts")
        if ts is not None:
            ts_ns = _ns(_number(ts, i, "ts", name, path), i, "ts", path)
        dur = d.get("dur")
        if dur is not None:
            dur_ns = _ns(_number(dur, i, "dur", name, path), i, "dur", path)
            if dur_ns < 0:
                raise TraceFormatError(path, f"event {i} ({name!r}): negative duration {dur} us")
        if ph == "X" and (ts_ns is None or dur_ns is None):
            raise TraceFormatError(path, f"event {i} ({name!r}): complete event (ph X) without {'ts' if ts_ns is None else 'dur'}")
        if dur_ns is not None and ts_ns is not None and ts_ns + dur_ns >= _MAX_NS:
            raise TraceFormatError(path, f"event {i} ({name!r}): ts + dur is out of range")
        args = d.get("args")
        if args is None:
            args = {}
        elif not isinstance(args, dict):
            raise TraceFormatError(path, f"event {i} ({name!r}): args is a {_jtype(args)}, expected an object")
        else:
            args = _plain(args)
        eid = d.get("id")
        if eid is not None and (isinstance(eid, bool) or not isinstance(eid, (int, str))):
            raise TraceFormatError(path, f"event {i} ({name!r}): id is a {_jtype(eid)}, expected an integer or string")
        extra = {k: _plain(v) for k, v in d.items() if k not in _KNOWN_KEYS} or None
        events.append(TraceEvent(i, ph, cat, name, pid, tid, ts_ns, dur_ns, args, eid, extra))
    return events


def _number(value: Any, index: int, key: str, name: str, path: Optional[str]) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise TraceFormatError(path, f"event {index} ({name!r}): {key} is a {_jtype(value)}, expected a number")
    return Decimal(value) if isinstance(value, int) else value


def _jtype(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, Decimal)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
