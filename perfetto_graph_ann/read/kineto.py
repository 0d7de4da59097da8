"""Read a torch.profiler (Kineto) Chrome trace, ``.json`` or ``.json.gz``, into :class:`KinetoTrace`.

Times are exact: JSON numbers are decoded straight to :class:`decimal.Decimal` (msgspec), and
``ts_ns = round(Decimal(ts) * 1000)``, the value Perfetto's JSON importer computes, without
the float rounding that a plain ``json.load`` would add (Kineto writes microseconds with
3 decimals on a ~1e12 us clock: 16 significant digits, more than a double keeps).

This module handles the document: the file (gzip detected by content), the top-level keys
(kept as ``KinetoTrace.metadata``) and finding the ``traceEvents`` array without scanning it
twice (:func:`_split_top`); :mod:`.events` decodes the array itself. Every problem raises
:class:`~perfetto_graph_ann.errors.TraceFormatError` whose message starts with the path.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

import msgspec

from .. import formats
from ..errors import EMPTY_FILE, PathLike, TraceFormatError
from .events import _msg, decode_events, us_to_ns
from .model import KinetoTrace, TraceEvent

__all__ = ["read_trace", "parse_trace_bytes", "us_to_ns"]

_top_decoder = msgspec.json.Decoder(Dict[str, msgspec.Raw])


def read_trace(path: PathLike) -> KinetoTrace:
    """Read a torch.profiler Chrome trace (``.json`` or ``.json.gz``, detected by content).

    The file is read a block at a time and its events decoded as they arrive
    (:func:`_stream_trace`), so the whole text is never held next to the events; any
    irregularity (and every error) reads the whole file as :func:`parse_trace_bytes` does."""
    spath = os.fspath(path)
    trace = _stream_trace(spath)
    if trace is not None:
        return trace
    data = formats.read_bytes(spath, TraceFormatError, "trace file")
    return parse_trace_bytes(data, spath, gzipped=formats.is_gzip_file(spath))


#: Bytes read (after gunzip) per block of the streaming read: the text held besides the
#: events is about twice this (BENCHMARKS.md, "converter at scale").
STREAM_BLOCK = 1 << 20
#: How far into the text the streaming read looks for ``"traceEvents"`` before reading the
#: whole file instead.
_HEAD_LIMIT = 1 << 26


def _run(buf: Any, end: int, path: str, start: int, scan: Any, at: int) -> List[TraceEvent]:
    """The events of the run ``buf[:end]`` (a JSON array's items; the trace's ``start``-th
    first, ``buf`` at ``at`` in the file's text): decoded, or read by ``scan.read_run``."""
    if scan is None:
        return decode_events(b"[" + buf[:end] + b"]", path, start)
    return scan.read_run(buf, end, path, start, at)


def _decode_run(buf: bytearray, path: str, events: List[TraceEvent], tries: int = 3, scan: Any = None,
                at: int = 0) -> int:
    """Decode the whole events at the start of ``buf`` onto ``events``; returns how many bytes
    they and their separator take (0: no end found yet, -1: the decoder refused every end
    tried). Runs end at a ``},`` followed by ``{``; where the decoder refuses a run (a nested
    object's ``},``), an earlier end is tried; ``tries`` refusals (a bad event, which the
    whole-file read will name) end the streaming read rather than decode the text again."""
    end = len(buf)
    for _ in range(tries):
        cut = buf.rfind(b"},", 0, end)
        while cut >= 0:
            nxt = cut + 2
            while nxt < len(buf) and buf[nxt] in _JSON_SPACE:
                nxt += 1
            if nxt < len(buf) and buf[nxt] == 0x7B:  # "{"
                break
            cut = buf.rfind(b"},", 0, cut)
        if cut < 0:
            return 0
        try:
            events += _run(buf, cut + 1, path, len(events), scan, at)
        except TraceFormatError:
            end = cut
            continue
        return cut + 2
    return -1


def _stream_trace(path: str, block: int = 0, scan: Any = None, raw: Any = None,
                  events: Optional[List[TraceEvent]] = None) -> Optional[KinetoTrace]:
    """The trace at ``path`` read a block at a time, or None (the caller reads the whole file,
    which also words every error) when the file is not plainly a trace this reads.

    The ``traceEvents`` array is found in the first block as :func:`_split_top` finds it;
    then each run of whole events is decoded as soon as it is read: a run ends at the last
    ``},`` of what has been read, taken only when the decoder accepts the run (JSON parses
    the same from a known array position, so an accepted run ends between two events, never
    inside a string). The text after the array (Kineto's short ``traceName``) is checked and
    decoded with the text before it as :func:`_split_top` does; anything else returns None.

    ``scan`` (:mod:`.scan`'s first pass): each run is read by ``scan.read_run(buf, end, path,
    start, offset)`` (refusing what :func:`.events.decode_events` refuses; ``buf[:end]``: the
    run's events, ``buf`` starting at ``offset`` in the file's text), which returns what is
    kept of them; ``scan.gunzip(raw)`` gives the file object a gzip file's text is read from.
    ``raw``: the file object to read (a :class:`.follow.Followed`: the file as it is written),
    else ``path`` opened here. ``events``: the list the events are appended to as they are
    decoded (a followed file's, which its idle work reads), else a new one.
    """
    import gzip
    import zlib

    block = block or STREAM_BLOCK
    if raw is None:
        if not os.path.isfile(path):  # a pipe read here could not be read again by the whole-file read
            return None
        try:
            raw = open(path, "rb")
        except OSError:
            return None
    with raw:
        try:
            gunzip = getattr(scan, "gunzip", None) or (lambda fileobj: gzip.GzipFile(fileobj=fileobj, mode="rb"))
            f = gunzip(raw) if formats.is_gzip(raw.read(2)) else raw
            raw.seek(0)
            if events is None:
                events = []
            buf = f.read(block)
            at = buf.find(_EVENTS_KEY)
            # the envelope comes first (a few kB): read on to the key and past its "[" (spaces may follow)
            while (at < 0 or len(buf) < at + len(_EVENTS_KEY) + 64) and len(buf) < _HEAD_LIMIT:
                more = f.read(block)
                if not more:
                    break
                buf += more
                at = buf.find(_EVENTS_KEY)
            m = _EVENTS_ARRAY.match(buf, at + len(_EVENTS_KEY)) if at >= 0 else None
            if m is None or b"\\" in buf[:m.end()]:
                return None
            head, buf = buf[:m.end() - 1], bytearray(buf[m.end():])
            at = m.end()  # where buf starts in the (decompressed) text
            while True:  # what is read is decoded before more is waited for (a file still being written)
                cut = _decode_run(buf, path, events, scan=scan, at=at)
                if cut < 0:
                    return None
                if cut:
                    del buf[:cut]
                    at += cut
                more = f.read(block)
                if not more:
                    break
                buf += more
        except (OSError, EOFError, zlib.error):
            return None
    buf = bytes(buf)
    end = buf.rfind(b"]")
    if end < 0:
        return None
    last = end - 1
    while last >= 0 and buf[last] in _JSON_SPACE:
        last -= 1
    tail = buf[end + 1:]
    # the array's last element an object (an empty array, or a "," before "]", read whole)
    if last < 0 or buf[last] not in b"}" or b"\\" in tail or _EVENTS_KEY in tail:
        return None
    try:
        events += _run(buf, end, path, len(events), scan, at)
        top = _top_decoder.decode(head + b"null" + tail)
    except (msgspec.DecodeError, RecursionError, TraceFormatError):
        return None
    placeholder = top.pop("traceEvents", None)
    if placeholder is None or bytes(placeholder) != b"null":
        return None
    try:
        metadata = _metadata(top, path)
    except TraceFormatError:
        return None
    return KinetoTrace(path=path, events=events, metadata=metadata)


def parse_trace_bytes(data: bytes, path: Optional[str] = None, gzipped: bool = False) -> KinetoTrace:
    """Decode the JSON text of a trace; ``path`` only names the file in errors (``gzipped``:
    the text was decompressed from it, which an error's byte offset says)."""
    if not data or data.isspace():  # not data.strip(): that copies the whole text
        raise TraceFormatError(path, EMPTY_FILE)
    split = _split_top(data)
    events: Optional[List[TraceEvent]] = None
    if split is not None:
        top, raw_events = split
        metadata = _metadata(top, path)
        try:
            events = decode_events(raw_events, path)
        except TraceFormatError:  # not JSON, or the array ends before the last "]": see _split_top
            events = None  # the whole document is scanned, which also words every error
    if events is None:
        try:
            top = _top_decoder.decode(data)
        except msgspec.ValidationError:
            raise TraceFormatError(path, "not a Chrome trace: the top level is not a JSON object") from None
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _binary_hint(data) or json_error(data, e, gzipped)) from None
        except RecursionError:
            raise TraceFormatError(path, "JSON nested too deeply") from None
        raw_events = top.pop("traceEvents", None)
        if raw_events is None:
            raise TraceFormatError(path, "no traceEvents array: not a torch.profiler Chrome trace")
        metadata = _metadata(top, path)
        events = decode_events(raw_events, path)
    return KinetoTrace(path=path, events=events, metadata=metadata)


_AT_BYTE = re.compile(r"^(?:JSON is malformed: )?(.*?) \(byte (\d+)\)$")


def json_error(data: bytes, e: BaseException, gzipped: bool = False) -> str:
    """msgspec's decode error ``e`` on ``data`` as a message that says where and what: the byte
    offset, line and column, what the decoder expected and the text found there; for a text
    that ends early, that it was cut off at its last byte and what is missing."""
    msg = _msg(e)
    of = " of the decompressed JSON" if gzipped else ""
    nl = b"\n"
    if "truncated" in msg:
        n = len(data)
        return (f"not valid JSON (cut off: the text ends at byte {n:,}{of}, line {data.count(nl) + 1:,}, "
                "before the JSON document is complete; expected the rest of it (a trace cut short: the remaining "
                "events, the traceEvents array's ']', the object's '}')")
    m = _AT_BYTE.match(msg)
    if m is None or int(m.group(2)) > len(data):
        return f"not valid JSON ({msg})"
    reason, at = m.group(1), int(m.group(2))
    start = data.rfind(nl, 0, at) + 1
    end = data.find(nl, at)
    end = len(data) if end < 0 else end
    line = data[max(start, at - 40):min(end, at + 40)].decode("utf-8", "replace")
    found = data[at:at + 1].decode("utf-8", "replace") or "the end"
    return (f"not valid JSON (byte {at:,}{of}, line {data.count(nl, 0, at) + 1:,}, column {at - start + 1:,}: "
            f"{reason}, found {found!r}; there the text reads {line!r})")


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
    end. Kineto writes the array as the last value but for a short
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


def _binary_hint(data: bytes) -> Optional[str]:
    """What a file that is not JSON is, when it is one of the binary files this package uses."""
    if formats.is_sidecar_bytes(data):
        return "this is an annotation sidecar, not a torch.profiler JSON trace (give it with --annotations)"
    if formats.is_pftrace_bytes(data):
        return "this is a Perfetto protobuf trace, not a torch.profiler JSON trace (report, sql and open read it as it is)"
    return None
