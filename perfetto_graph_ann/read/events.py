"""Decode a Chrome trace's ``traceEvents`` array into :class:`TraceEvent` objects, times exact.

Two paths give the same events (tests compare them):

* the **typed path** decodes the array straight into the final objects through
  :class:`_KinetoEvent`, a Struct that knows exactly the keys torch.profiler writes
  (``forbid_unknown_fields``), with ``ts`` / ``dur`` kept as their JSON text. When every time
  is written as Kineto writes it (digits, a point, 3 decimals), all of them become integer ns
  in one bulk pass (:func:`_bulk_ns`): exact, and what makes convert faster than a plain
  ``json.load``. Any other time (an int, more decimals, an exponent, a sign, a numeric
  string) is read as a ``Decimal`` and converted per event (:func:`_exact_times`);
* the **generic path** takes over when the typed decode refuses the array (an unknown key, a
  wrong type, null args, a time that is not a number): plain dicts, unknown keys kept in
  ``TraceEvent.extra``, every problem named exactly.

Both check times with one function, :func:`_event_times`. Every problem raises
:class:`~perfetto_graph_ann.errors.TraceFormatError` naming the file.
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import msgspec

from .. import settings
from ..errors import TraceFormatError
from .model import TraceEvent

try:  # a run's times, indices, extras and class in C (_scan.c, built by hatch_build.py): the same events
    from ._scan import finish_run as _compiled_finish_run
except ImportError:
    _compiled_finish_run = None
#: :func:`_bulk_ns` and :func:`_finish` (:func:`_finish_light`) of a run in one C call (None where it
#: leaves the run to them), or None where it is not built or ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` was set at import
FINISH_RUN = None if settings.switch(settings.PURE_PYTHON) else _compiled_finish_run

__all__ = ["decode_events", "FINISH_RUN", "us_to_ns"]

#: Times and ts + dur must fit the trace processor's int64 nanoseconds.
_MAX_NS = 1 << 63


class _KinetoEvent(TraceEvent, kw_only=True, forbid_unknown_fields=True, gc=False,
                   rename={"index": "s", "ts_ns": "ts", "dur_ns": "dur", "extra": "bp"}):
    """The typed path's decode target: a :class:`TraceEvent` whose fields hold the JSON as read.

    It accepts exactly the keys torch.profiler writes (``ph``, ``cat``, ``name``, ``pid``,
    ``tid``, ``ts``, ``dur``, ``args``, ``id``, ``bp``, ``s``): the five fields that are not
    JSON keys carry the ones that are not fields: ``index`` holds ``s``,
    ``extra`` holds ``bp``, ``ts_ns`` / ``dur_ns`` the times' JSON text (``msgspec.Raw``).
    :func:`_finish` puts the final values in place and turns each object into a plain
    :class:`TraceEvent` by assigning ``__class__`` (same fields, same layout), so the file's
    events are decoded straight into their final objects. Building a new ``TraceEvent`` per
    event instead is slower (``benchmarks/read_swap.py``; numbers in BENCHMARKS.md).
    """

    index: Optional[str] = None  # type: ignore[assignment]
    ph: str
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = ""
    tid: Union[int, str] = ""
    ts_ns: msgspec.Raw = None  # type: ignore[assignment]  # None: key absent
    dur_ns: msgspec.Raw = None  # type: ignore[assignment]
    args: Dict[str, Any] = msgspec.field(default_factory=dict)  # null args: the generic path
    id: Union[int, str, None] = None
    extra: Optional[str] = None  # type: ignore[assignment]


# The class switch in _finish needs the very same fields in the same slots.
assert _KinetoEvent.__struct_fields__ == TraceEvent.__struct_fields__
assert _KinetoEvent.__basicsize__ == TraceEvent.__basicsize__

_typed_decoder = msgspec.json.Decoder(List[_KinetoEvent])
_generic_decoder = msgspec.json.Decoder(float_hook=Decimal)
_decimal_decoder = msgspec.json.Decoder(Optional[Decimal])
_decimals_decoder = msgspec.json.Decoder(List[Optional[Decimal]])
_int_list_decoder = msgspec.json.Decoder(List[int])
_KNOWN_KEYS = frozenset({"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"})

#: Kineto's time format, comma-joined: at most 15 integer digits (so ns, and ts + dur, stay
#: below 2^63 without a range check), a point and exactly 3 decimals (so the digits without
#: the point are the exact ns). JSON has no leading zeros but in ``0.ddd``.
_KINETO_TIMES = re.compile(rb"(?:[0-9]{1,15}\.[0-9]{3},)*[0-9]{1,15}\.[0-9]{3}")
_DIGITS = b"0123456789"
_DIGITS_AS_D = bytes.maketrans(_DIGITS, b"d" * 10)
_SIXTEEN_DIGITS = b"d" * 16


def decode_events(raw: bytes, path: Optional[str], start: int = 0, decoder: Any = None,
                  extras: bool = True) -> List[TraceEvent]:
    """The events of the ``traceEvents`` array text ``raw``; ``path`` only names the file in
    errors. ``start``: the index of the first (``raw`` holds a run of the array's events).
    ``decoder``: the typed path's (default: :class:`_KinetoEvent`'s; ``read.scan`` gives one
    whose args keep only what the writer's plan reads). ``extras=False``: the typed path
    leaves ``extra`` None (``read.scan``'s light events, which drop it)."""
    events = _from_typed(raw, path, start=start, decoder=decoder or _typed_decoder, extras=extras)
    return events if events is not None else _from_generic(raw, path, start)


def us_to_ns(value: Decimal) -> int:
    """Exact microseconds (Decimal) to integer ns; a half ns rounds away from zero.

    Kineto writes 3 decimals, so this is exact. For finer inputs, half-up is what Perfetto's
    JSON importer gives in the cases a double can tell (``1.0005`` us -> 1001 ns).
    """
    ns = value.scaleb(3)
    if ns == ns.to_integral_value():
        return int(ns)
    return int(ns.to_integral_value(rounding=ROUND_HALF_UP))


def _event_times(i: int, ph: str, name: str, ts: Any, dur: Any, path: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """Event ``i``'s ``ts`` and ``dur`` (JSON numbers: ``Decimal`` or int microseconds, None
    when absent) as integer ns, checked: the one place that says which times an event may have.

    Each is a finite number within int64 ns, ``ts`` not negative (Perfetto's clocks are
    unsigned: a trace cannot start before time 0), ``dur`` not negative, ``ts + dur`` within
    int64, and a complete event (``ph`` X) has both.
    """
    ts_ns = None if ts is None else _ns(_number(ts, i, "ts", name, path), i, "ts", path)
    dur_ns = None
    if dur is not None:
        dur_ns = _ns(_number(dur, i, "dur", name, path), i, "dur", path)
        if dur_ns < 0:
            raise TraceFormatError(path, f"event {i} ({name!r}): negative duration {dur} us")
    if ph == "X" and (ts_ns is None or dur_ns is None):
        raise TraceFormatError(path, f"event {i} ({name!r}): complete event (ph X) without {'ts' if ts_ns is None else 'dur'}")
    if dur_ns is not None and ts_ns is not None and ts_ns + dur_ns >= _MAX_NS:
        raise TraceFormatError(path, f"event {i} ({name!r}): ts + dur is out of range")
    return ts_ns, dur_ns


def _ns(value: Decimal, index: int, key: str, path: Optional[str]) -> int:
    try:
        ns = us_to_ns(value)
    except (InvalidOperation, ValueError, OverflowError, AttributeError, TypeError):
        raise TraceFormatError(path, f"event {index}: {key} is not a finite number ({value!r})") from None
    if ns >= _MAX_NS or ns < -_MAX_NS:
        raise TraceFormatError(path, f"event {index}: {key} {value} us is out of range")
    if ns < 0 and key == "ts":
        raise TraceFormatError(path, f"event {index}: negative timestamp {value} us")
    return ns


def _number(value: Any, index: int, key: str, name: str, path: Optional[str]) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise TraceFormatError(path, f"event {index} ({name!r}): {key} is a {_jtype(value)}, expected a number")
    return Decimal(value) if isinstance(value, int) else value


def _from_typed(raw: bytes, path: Optional[str], bulk: bool = True, start: int = 0,
                decoder: Any = _typed_decoder, extras: bool = True) -> Optional[List[TraceEvent]]:
    """The typed path; None when the typed decode refuses the array or a time is not a number.

    ``bulk=False`` converts every time per event (:func:`_exact_times`): the reference the
    bulk pass is tested against.
    """
    try:
        events = decoder.decode(raw)
    except (msgspec.ValidationError, RecursionError):
        return None
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON in traceEvents ({_msg(e)})") from None
    if bulk and FINISH_RUN is not None and FINISH_RUN(events, start, TraceEvent, extras):
        return events  # every time Kineto's: _bulk_ns and _finish's (_finish_light's) work done in C
    # No list of the times outlives this: each Raw is then freed while _finish replaces it,
    # which is faster than freeing them all at the end.
    ts_all = _bulk_ns([e.ts_ns for e in events]) if bulk else None
    dur_all = _bulk_ns([e.dur_ns for e in events]) if ts_all is not None else None
    if ts_all is None or dur_all is None:
        times = _exact_times(events, path)
        if times is None:
            return None
        ts_all, dur_all = times
    return _finish(events, ts_all, dur_all, path, start) if extras else _finish_light(events, ts_all, dur_all, path,
                                                                                       start)


def _finish_light(events: List[Any], ts_all: Sequence[Optional[int]], dur_all: Sequence[Optional[int]],
                  path: Optional[str], start: int = 0) -> List[TraceEvent]:
    """:func:`_finish` with ``extra`` None (no dict of ``bp`` / ``s`` made)."""
    cls = TraceEvent
    for i, e, ts_ns, dur_ns in zip(range(start, start + len(events)), events, ts_all, dur_all):
        if (ts_ns is None or dur_ns is None) and e.ph == "X":  # raises: a complete event needs both
            _event_times(i, e.ph, e.name, _decimal(e.ts_ns), _decimal(e.dur_ns), path)
        e.index = i
        e.ts_ns = ts_ns
        e.dur_ns = dur_ns
        e.extra = None
        e.__class__ = cls
    return events


def _finish(events: List[Any], ts_all: Sequence[Optional[int]], dur_all: Sequence[Optional[int]],
            path: Optional[str], start: int = 0) -> List[TraceEvent]:
    """Index (from ``start``), times and ``extra`` in place on the decoded objects, each made a
    plain TraceEvent."""
    cls = TraceEvent
    for i, e, ts_ns, dur_ns in zip(range(start, start + len(events)), events, ts_all, dur_all):
        if (ts_ns is None or dur_ns is None) and e.ph == "X":  # raises: a complete event needs both
            _event_times(i, e.ph, e.name, _decimal(e.ts_ns), _decimal(e.dur_ns), path)
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


def _exact_times(events: Sequence[Any], path: Optional[str]) -> Optional[Tuple[List[Optional[int]], List[Optional[int]]]]:
    """Times in any JSON number form (or a numeric string), per event through :func:`_event_times`.

    All times are read as ``Decimal`` first: None (the generic path, which names the problem)
    when one is not a number, before any event's time is judged.
    """
    try:
        ts_dec = _decimals([e.ts_ns for e in events])
        dur_dec = _decimals([e.dur_ns for e in events])
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    ts_all: List[Optional[int]] = []
    dur_all: List[Optional[int]] = []
    for i, e, ts, dur in zip(range(len(events)), events, ts_dec, dur_dec):
        ts_ns, dur_ns = _event_times(i, e.ph, e.name, ts, dur, path)
        ts_all.append(ts_ns)
        dur_all.append(dur_ns)
    return ts_all, dur_all


def _decimal(raw: Any) -> Optional[Decimal]:
    return None if raw is None else _decimal_decoder.decode(raw)


def _decimals(raws: List[Any]) -> List[Optional[Decimal]]:
    """JSON texts (None: absent) read as Decimals in one decode; null reads as absent."""
    present = [r for r in raws if r is not None]
    values = _decimals_decoder.decode(b"[" + b",".join(present) + b"]")
    it = iter(values)
    return [None if r is None else next(it) for r in raws]


def _bulk_ns(raws: List[Optional[msgspec.Raw]]) -> Optional[List[Optional[int]]]:
    """Integer ns of Kineto-format times (None where absent); None if any is in another form."""
    present = [r for r in raws if r is not None]
    if not present:
        return [None] * len(raws)
    text = b",".join(present)
    if not _kineto_times(text, len(present)):
        return None
    # The digits without the point are the ns; msgspec reads them as one JSON array of ints
    # (much faster than int() per value) once the leading zeros of values below 1 us are gone:
    # 0.000 -> 0, 0.005 -> 5, 0.050 -> 50, 0.500 -> 500 (JSON numbers have no other leading 0).
    digits = (b"," + text).replace(b",0.00", b",").replace(b",0.0", b",").replace(b",0.", b",")
    values = _int_list_decoder.decode(b"[" + digits[1:].translate(None, b".") + b"]")
    if len(present) == len(raws):
        return values
    it = iter(values)
    return [None if r is None else next(it) for r in raws]


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


def _from_generic(raw: bytes, path: Optional[str], start: int = 0) -> List[TraceEvent]:
    """Any JSON array: plain dicts checked key by key, unknown keys kept in ``extra``."""
    try:
        items = _generic_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, f"not valid JSON in traceEvents ({_msg(e)})") from None
    except RecursionError:
        raise TraceFormatError(path, "traceEvents nested too deeply") from None
    if not isinstance(items, list):
        raise TraceFormatError(path, f"traceEvents is a {_jtype(items)}, not an array")
    events: List[TraceEvent] = []
    for i, d in enumerate(items, start):
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
        ts_ns, dur_ns = _event_times(i, ph, name, d.get("ts"), d.get("dur"), path)
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


def _msg(e: BaseException) -> str:
    return str(e) or type(e).__name__


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
