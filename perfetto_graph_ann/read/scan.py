"""Two-pass reading (issue 33): the events of a trace file kept light, read again by offset.

:func:`scan_trace` is the first pass: the streaming read of :mod:`.kineto` (the same runs,
the same decoder, the same refusals), keeping of each event only what the Perfetto writer's
plan needs (:func:`_lighten`: its times, phase, names and ids, and of its args ``device`` and
``stream``; metadata and counter events whole) and where its JSON text is in the file. The
second pass, :meth:`EventSource.fetch`, decodes the events the writer is about to encode again
from their bytes, many in one call, so the encoders see the very events a whole read gives and
write the same bytes.

A regular file is scanned, plain or gzip: the second pass reads a plain file at offsets, a
gzip file's text from the nearest of the places the first pass kept where decompression can
start again (:class:`_Gunzip`: a copy of the decompressor's state every few MiB of text; no
copy on disk). Every problem the streaming read is unsure of returns None (the caller reads
the whole file, which words every error), so errors are found, as before, before anything is
written.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from array import array
from bisect import bisect_right
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import msgspec

from .. import formats, settings
from ..errors import TraceFormatError
from .events import _from_generic, _KinetoEvent, decode_events
from .kineto import _stream_trace, read_trace
from .model import CATEGORY_ALIASES, GPU_WORK_CATEGORIES, GRAPH_LAUNCH_NAMES, KinetoTrace, TraceEvent

if TYPE_CHECKING:
    from .follow import Followed

__all__ = ["EventSource", "EVENT_SPANS", "GATHER", "GzipEventSource", "KEEP_LOOP", "ScannedTrace", "scan_trace",
           "WHOLE_EVENTS"]

_raw_list = msgspec.json.Decoder(List[msgspec.Raw])

try:  # the first pass's loop in C (_scan.c, built by hatch_build.py): the same events kept
    from ._scan import event_spans as _event_spans, gather as _gather, keep_loop as _compiled_keep_loop
    from ._scan import fast_run as _fast_run, runs_of as _runs_of, span_of as _span_of, tokens as _tokens
    from ._scan import whole_events as _whole_events
except ImportError:
    _compiled_keep_loop = _event_spans = _whole_events = _gather = _span_of = _fast_run = _tokens = _runs_of = None
#: :meth:`_Scan.keep`'s loop in C, or None where it is not built or ``PERFETTO_GRAPH_ANN_PURE_PYTHON``
#: was set at import (the Python loop then keeps the same events)
KEEP_LOOP = None if settings.switch(settings.PURE_PYTHON) else _compiled_keep_loop
#: the events' offsets in a run's text found in C (with :data:`KEEP_LOOP`), or None
EVENT_SPANS = None if KEEP_LOOP is None else _event_spans
#: the positions of a run's events decoded again whole, found in C (with :data:`KEEP_LOOP`), or None
WHOLE_EVENTS = None if KEEP_LOOP is None else _whole_events
#: a run's usual events kept straight from their text in C, or None (with :data:`KEEP_LOOP`): what
#: :meth:`_Scan.decode` and :meth:`_Scan.keep` make of a run whose every event it reads (``_scan.c``,
#: ``fast_run``), the run left to them otherwise
FAST_RUN = None if KEEP_LOOP is None else _fast_run
#: the second pass's batch text, its span and its events' texts joined, made in C (with
#: :data:`KEEP_LOOP`; ``(span_of, gather, runs_of)``), or None: made in Python
GATHER = None if KEEP_LOOP is None else (_span_of, _gather, _runs_of)


class _DevStream(msgspec.Struct, gc=False):
    """Of an event's args, what the writer's plan reads; the other keys are skipped, not built."""

    device: Any = msgspec.UNSET
    stream: Any = msgspec.UNSET


class _LightEvent(_KinetoEvent, kw_only=True, forbid_unknown_fields=True, gc=False):
    """The first pass's decode target: :class:`.events._KinetoEvent` (the same keys, types and
    refusals) but for ``args``, of which only ``device`` and ``stream`` are decoded."""

    args: _DevStream = msgspec.field(default_factory=_DevStream)  # type: ignore[assignment]


class _JoinArgs(_DevStream, gc=False, rename={"graph_id": "graph id", "graph_node_id": "graph node id"}):
    """Of an event's args, what the writer's plan and the join read (``join/replays.py``,
    ``exact.py``, ``match.py``: correlation, grid, block and the graph ids); the rest skipped."""

    correlation: Any = msgspec.UNSET
    grid: Any = msgspec.UNSET
    block: Any = msgspec.UNSET
    graph_id: Any = msgspec.UNSET
    graph_node_id: Any = msgspec.UNSET


class _LightJoinEvent(_KinetoEvent, kw_only=True, forbid_unknown_fields=True, gc=False):
    """The first pass's decode target for a convert with a join: :class:`_LightEvent` with the
    join's args (:class:`_JoinArgs`) decoded too."""

    args: _JoinArgs = msgspec.field(default_factory=_JoinArgs)  # type: ignore[assignment]


class _PacketEvent(msgspec.Struct, gc=False):
    """The second pass's decode target: what the packet loop reads of an event (the first pass
    judged the rest; other keys skipped). Where it refuses (null args, a number beyond a
    double), the generic path decodes the batch, as the first pass did."""

    ph: str
    cat: str = ""
    name: str = ""
    args: Dict[str, Any] = msgspec.field(default_factory=dict)


_packet_decoder = msgspec.json.Decoder(List[_PacketEvent])
assert _LightEvent.__struct_fields__ == TraceEvent.__struct_fields__
assert _LightEvent.__struct_encode_fields__ == _KinetoEvent.__struct_encode_fields__
assert _LightEvent.__basicsize__ == TraceEvent.__basicsize__
assert _LightJoinEvent.__struct_fields__ == TraceEvent.__struct_fields__
assert _LightJoinEvent.__struct_encode_fields__ == _KinetoEvent.__struct_encode_fields__
assert _LightJoinEvent.__basicsize__ == TraceEvent.__basicsize__
# _scan.fast_run makes the events with their fields in this order
assert TraceEvent.__struct_fields__ == ("index", "ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "args", "id",
                                        "extra")
_light_decoder = msgspec.json.Decoder(List[_LightEvent])
_light_join_decoder = msgspec.json.Decoder(List[_LightJoinEvent])
#: The join's args as kept (key as written, attribute of :class:`_JoinArgs`), in this order.
_JOIN_KEYS = (("device", "device"), ("stream", "stream"), ("correlation", "correlation"), ("grid", "grid"),
              ("block", "block"), ("graph id", "graph_id"), ("graph node id", "graph_node_id"))
#: Shared join args kept at most (cleared beyond: a replay's kernels share them, not the file's).
_JOIN_MEMO = 1 << 16
#: After ``fast_run`` leaves k runs in a row to the decoder, the next 2^(k-1) - 1 (at most this
#: many) are decoded without asking it: a trace whose every run holds an event it does not read
#: (a name with a ``\u`` escape in each MB) costs ~1/64 of its parse, not 1.10x the first pass.
_FAST_SKIP_MAX = 63
#: Bytes between two events' texts that one read spans rather than two (the second pass).
_GAP = 1 << 16
#: The most bytes one batch's events may span to be read in one piece, unsorted. A batch of a
#: real profile lies in two places some MB apart (8 MiB here read that 75 MB file 3.6x over).
_SPAN = 1 << 20
_NO_ARG = msgspec.UNSET  # an arg absent
_SEPARATOR = b" \t\n\r,"  # what lies between two events' texts
#: gzip input: text between two places where decompression can start again (the first pass
#: keeps a copy of the decompressor's state, ~40 kB, at each), compressed bytes fed at a time,
#: and texts between two such places the second pass keeps decompressed (least recently used
#: dropped first).
_GZ_CHUNK = 4 << 20
_GZ_PIECE = 1 << 16
_GZ_CACHE = 8
_ARGS = object()  # light args' keys in the memo start with this
_NO_TYPE = type(_NO_ARG)


class EventSource:
    """The events of a scanned file by index: each decoded again from its bytes."""

    def __init__(self, path: str, offsets: "array[int]", size: int, mtime_ns: int) -> None:
        self.path = path
        self.offsets = offsets
        self._stat = (size, mtime_ns)
        self._file: Any = None
        self._fd: Any = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> TraceEvent:
        return self.fetch([i])[i]  # type: ignore[return-value]

    def open(self) -> None:
        """Open the file for the second pass; the file must be the one scanned (size, mtime)."""
        if self._file is None:
            f = open(self.path, "rb", buffering=0)
            st = os.fstat(f.fileno())
            if (st.st_size, st.st_mtime_ns) != self._stat:
                f.close()
                raise TraceFormatError(self.path, "the file changed while it was being converted")
            self._file = f
            self._fd = f.fileno()

    def close(self, check: bool = True) -> None:
        """Close the file; with ``check``, raises if it changed while the second pass read it
        (size, mtime)."""
        if self._file is not None:
            st = os.fstat(self._file.fileno())
            self._file.close()
            self._file = self._fd = None
            if check and (st.st_size, st.st_mtime_ns) != self._stat:
                raise TraceFormatError(self.path, "the file changed while it was being converted")

    def fetch(self, indices: Sequence[int]) -> Dict[int, Any]:
        """The events ``indices`` decoded in one call: index -> event, whose ``ph``, ``cat``,
        ``name`` and ``args`` are what a whole read gives (:class:`_PacketEvent`, or a whole
        :class:`TraceEvent` where the generic path decoded them: the packets take their
        times from the plan)."""
        if not indices:
            return {}
        self.open()
        # an event's text runs to the next one's start, less the separator (spaces and a comma)
        offsets = self.offsets
        compiled = GATHER if type(indices) is list else None
        if compiled is not None:
            lo, hi = compiled[0](offsets, indices)
        else:
            offs = list(map(offsets.__getitem__, indices))
            ends = [offsets[i + 1] for i in indices]
            lo = min(offs)
            hi = max(ends)
        if hi - lo <= _SPAN:  # the usual batch: its events near each other, one read
            block = self._read(lo, hi)
            if compiled is not None:
                return self._decode_text(compiled[1](block, lo, offsets, indices), indices)
            return self._decode([block[o - lo:e - lo].rstrip(_SEPARATOR) for o, e in zip(offs, ends)], indices)
        order = sorted(indices, key=offsets.__getitem__)
        return self._decode(self._pieces(order), order)

    def _read(self, lo: int, hi: int) -> bytes:
        """The file's bytes from ``lo`` to ``hi``."""
        block = os.pread(self._fd, hi - lo, lo)
        if len(block) != hi - lo:
            raise TraceFormatError(self.path, "the file changed while it was being converted (shorter)")
        return block

    def _pieces(self, order: List[int]) -> List[bytes]:
        """The texts of the events ``order`` (sorted by offset), runs of nearby ones read together."""
        offsets = self.offsets
        pieces: List[bytes] = []
        k = 0
        n = len(order)
        while k < n:
            start = offsets[order[k]]
            end = offsets[order[k] + 1]
            j = k + 1
            while j < n:
                o = offsets[order[j]]
                if o - end > _GAP:
                    break
                end = max(end, offsets[order[j] + 1])
                j += 1
            block = self._read(start, end)
            for i in order[k:j]:
                pieces.append(block[offsets[i] - start:offsets[i + 1] - start].rstrip(_SEPARATOR))
            k = j
        return pieces

    def fetch_texts(self, indices: List[int], decode: List[int]) -> Optional[Tuple[Dict[int, Any], Any, Any]]:
        """The texts of the events ``indices`` (a list), those of ``decode`` (some of them)
        decoded as :meth:`fetch` decodes them: (index -> event, texts, offset). Where the events
        lie within one block: the block and the file offset of its first byte (an event's text
        runs from its offset to the next one's, less the separator); else the pieces of the
        file that hold them (nearby events read together, as :meth:`fetch` reads them), in file
        order, and the list of their offsets. None where the compiled gather is not built."""
        if not indices or GATHER is None:
            return None
        self.open()
        offsets = self.offsets
        lo, hi = GATHER[0](offsets, indices)
        if hi - lo > _SPAN:  # several places of the file (the CPU's events and the GPU's)
            los, pieces = [], []
            for start, end in GATHER[2](offsets, indices, _GAP):
                los.append(start)
                pieces.append(self._read(start, end))
            if not decode:
                return {}, pieces, los
            texts = []
            for i in decode:
                k = bisect_right(los, offsets[i]) - 1
                texts.append(pieces[k][offsets[i] - los[k]:offsets[i + 1] - los[k]].rstrip(_SEPARATOR))
            return self._decode(texts, decode), pieces, los
        block = self._read(lo, hi)
        return (self._decode_text(GATHER[1](block, lo, offsets, decode), decode) if decode else {}), block, lo

    def decode_one(self, i: int, text: Optional[bytes] = None) -> Any:
        """Event ``i`` decoded as :meth:`fetch` decodes it, from its ``text`` where given."""
        return self.fetch([i])[i] if text is None else self._decode([text], [i])[i]

    def _whole_read_error(self) -> None:
        """An event the first pass took does not decode whole: the whole-file read's error
        (the first pass skips the args it does not keep, so a fault inside them shows here),
        else the file changed meanwhile."""
        self.close(check=False)
        read_trace(self.path)  # raises the in-memory read's TraceFormatError
        raise TraceFormatError(self.path, "the file changed while it was being converted "
                                          "(an event's text no longer decodes)")

    def _decode(self, pieces: List[bytes], order: Sequence[int]) -> Dict[int, Any]:
        """The events whose texts are ``pieces`` by index (``order``: their indices)."""
        return self._decode_text(b"[" + b",".join(pieces) + b"]", order)

    def _decode_text(self, text: bytes, order: Sequence[int]) -> Dict[int, Any]:
        """The events of the JSON array ``text`` by index (``order``: their indices)."""
        try:  # what the packets read (ph, cat, name, args) as decode_events gives it
            events = _packet_decoder.decode(text)
        except (msgspec.ValidationError, RecursionError):
            events = None
        except msgspec.DecodeError:
            events = None
        try:
            if events is None:
                events = _from_generic(text, self.path)
        except TraceFormatError:
            self._whole_read_error()
        if events is None:
            self._whole_read_error()
        if len(events) != len(order):
            raise TraceFormatError(self.path, "the file changed while it was being converted")
        return dict(zip(order, events))


def _inflate(state: List[Any], data: bytes) -> bytes:
    """The text of the next compressed bytes ``data`` of a gzip file, read as
    ``gzip.decompress`` reads one: members one after another, zero bytes between and after
    them skipped. ``state``: [the member's decompressor (None between members), bytes held
    back (the start of what may be a member)]; updated. Raises ``OSError`` on what is not a
    member, ``zlib.error`` on corrupt data."""
    d, pending = state
    out = []
    while data:
        if d is None:
            data = (pending + data).lstrip(b"\0")
            pending = b""
            if len(data) < 2:
                pending = data
                break
            if not formats.is_gzip(data):
                raise OSError("not a gzip member")
            d = zlib.decompressobj(31)
        out.append(d.decompress(data))
        if d.eof:
            data = d.unused_data
            d = None
        else:
            data = b""
    state[0], state[1] = d, pending
    return b"".join(out)


class _Gunzip:
    """A gzip file's text read forward (the first pass's file object), keeping every
    :data:`_GZ_CHUNK` bytes of text or so where decompression can start again: (compressed
    offset, text offset, a copy of the decompressor)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.state: List[Any] = [None, b""]
        self.cin = 0  # compressed bytes fed
        self.out = 0  # text made
        self.buf = bytearray()
        self.points: List[Tuple[int, int, Any]] = []
        self.done = False

    def read(self, n: int) -> bytes:
        state, points = self.state, self.points
        while len(self.buf) < n and not self.done:
            data = self.raw.read(_GZ_PIECE)
            if not data:
                self.done = True
                if state[0] is not None or state[1]:
                    raise EOFError("the gzip data ends early")
                break
            if not points or (state[0] is not None and not state[1]
                              and self.out - points[-1][1] >= _GZ_CHUNK):
                points.append((self.cin, self.out, None if state[0] is None else state[0].copy()))
            self.cin += len(data)
            text = _inflate(state, data)
            self.out += len(text)
            self.buf += text
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


class GzipEventSource(EventSource):
    """The events of a scanned gzip file by index: each one's text decompressed again from the
    nearest place the first pass kept (:class:`_Gunzip`), a few texts between two such places
    kept decompressed while the second pass reads them."""

    def __init__(self, path: str, offsets: "array[int]", size: int, mtime_ns: int,
                 points: List[Tuple[int, int, Any]], total: int) -> None:
        super().__init__(path, offsets, size, mtime_ns)
        self.points = points
        self.starts = [p[1] for p in points]
        self.total = total
        self.cache: "OrderedDict[int, bytes]" = OrderedDict()
        self.inflated = 0  #: texts between two kept places decompressed by the second pass

    def close(self, check: bool = True) -> None:
        self.cache.clear()
        super().close(check)

    def _chunk(self, k: int) -> bytes:
        """The text from the ``k``-th kept place to the next (to the end for the last)."""
        cache = self.cache
        text = cache.get(k)
        if text is not None:
            cache.move_to_end(k)
            return text
        cin, start, d = self.points[k]
        last = k + 1 == len(self.points)
        end_cin = self._stat[0] if last else self.points[k + 1][0]
        end = self.total if last else self.points[k + 1][1]
        state: List[Any] = [None if d is None else d.copy(), b""]
        parts = []
        try:
            at = cin
            while at < end_cin:
                data = os.pread(self._fd, min(1 << 20, end_cin - at), at)
                if not data:
                    break
                at += len(data)
                parts.append(_inflate(state, data))
        except (OSError, zlib.error):
            raise TraceFormatError(self.path, "the file changed while it was being converted "
                                              "(its gzip data no longer decompresses)") from None
        text = b"".join(parts)
        if len(text) != end - start:
            raise TraceFormatError(self.path, "the file changed while it was being converted (shorter)")
        self.inflated += 1
        cache[k] = text
        if len(cache) > _GZ_CACHE:
            cache.popitem(last=False)
        return text

    def _text(self, lo: int, hi: int) -> bytes:
        """The text from ``lo`` to ``hi``."""
        k = bisect_right(self.starts, lo) - 1
        parts = []
        while lo < hi:
            start = self.starts[k]
            text = self._chunk(k)
            parts.append(text[lo - start:hi - start])
            lo = start + len(text)
            k += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def fetch_texts(self, indices: List[int], decode: List[int]) -> None:
        """None: a gzip file's events are :meth:`fetch` ed (their texts are not blocks of the file)."""
        return None

    def fetch(self, indices: Sequence[int]) -> Dict[int, Any]:
        """As :meth:`EventSource.fetch`: each event's text taken from the decompressed texts,
        in file order (one decompression of each text between two kept places a batch at most)."""
        if not indices:
            return {}
        self.open()
        offsets = self.offsets
        order = sorted(indices, key=offsets.__getitem__)
        text = self._text
        return self._decode([text(offsets[i], offsets[i + 1]).rstrip(_SEPARATOR) for i in order], order)


@dataclasses.dataclass
class ScannedTrace(KinetoTrace):
    """A trace whose ``events`` are light (:func:`scan_trace`); ``source`` reads them whole."""

    source: Optional[EventSource] = None
    released: bool = False  #: the light events dropped: written once, never again
    #: the join's per-replay results made while the file was written (a followed file's
    #: ``ahead.made``, :class:`~..join.ahead.Made`; the join takes what still holds)
    made: Any = None

    def release(self) -> None:
        """Drop the light events (the writer's plan is made; the second pass reads ``source``)."""
        self.events = []
        self.released = True


class _Unsure(Exception):
    """The first pass took a run that the whole read would not: read the whole file instead."""


class _Scan:
    """The first pass's sink: every event's offset (and after the last, where it ends), the
    events made light. With ``join``, the events the join reads (GPU work, graph launches)
    keep their name and the join's args (:class:`_JoinArgs`) too."""

    def __init__(self, join: bool = False) -> None:
        self.offsets = array("q")
        self.end = 0  # where the last event kept ends
        self.memo: Dict[Any, Any] = {}  # names, categories, pids, tids and light args: one object each
        self.join = join
        self.decoder = _light_join_decoder if join else _light_decoder
        self.args_type = _JoinArgs if join else _DevStream
        self.joined: Dict[str, bool] = {}  # cat as written -> GPU work
        self.join_memo: Dict[Any, Any] = {}
        self.gunzipped: Optional[_Gunzip] = None
        self.keep_loop = KEEP_LOOP  #: the compiled loop, or None: the Python loop
        self.event_spans = EVENT_SPANS  #: the compiled offsets, or None: from the run decoded as Raw
        self.whole_events = WHOLE_EVENTS  #: the compiled search for M / C events, or None: Python's
        self.fast_run = FAST_RUN  #: the compiled reading of a run of usual events, or None: decode and keep
        self.tokens = _tokens() if FAST_RUN is not None else None  # fast_run's table of the memo's tokens
        self._left = 0  # runs fast_run left to the decoder in a row
        self._skip = 0  # runs to decode before asking fast_run again

    def gunzip(self, raw: Any) -> "_Gunzip":
        """The file object a gzip file's text is read from (keeping where to start again)."""
        self.gunzipped = _Gunzip(raw)
        return self.gunzipped

    def read_run(self, buf: Any, end: int, path: str, start: int, at: int) -> List[TraceEvent]:
        """The events kept of a run: ``buf[:end]`` holds its events (the items of a JSON array,
        without its brackets), ``buf`` starts at ``at`` in the file's text and the run's first
        event is the trace's ``start``. :meth:`keep` of :meth:`decode`, or the same events made
        straight from the text (:data:`FAST_RUN`) where every event of the run is one it reads
        (after runs it left in a row, a few are decoded without asking: :data:`_FAST_SKIP_MAX`).
        Refuses what :meth:`decode` refuses."""
        if self.fast_run is not None and self._skip:
            self._skip -= 1
        elif self.fast_run is not None:
            got = self.fast_run(buf, end, start, at, self._context(), TraceEvent, _JOIN_MEMO, self.tokens)
            if got is not None:
                self._left = 0
                run, starts, self.end = got
                self.offsets.frombytes(starts)
                return run
            self._left = min(self._left + 1, 7)
            self._skip = min((1 << (self._left - 1)) - 1, _FAST_SKIP_MAX)
        text = b"[" + buf[:end] + b"]"
        return self.keep(self.decode(text, path, start), text, at - 1)

    def decode(self, text: bytes, path: str, start: int) -> List[TraceEvent]:
        """The run ``text`` decoded as :func:`.events.decode_events` decodes it, refusing what it
        refuses, but for the args (:class:`_LightEvent`; where the typed decode refuses, the
        generic path's whole events)."""
        if not text.isascii():  # the args skipped unread: their strings' UTF-8 checked as decoding checks it
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                raise TraceFormatError(path, "not valid JSON in traceEvents (invalid UTF-8)") from None
        # no extra dicts (bp, s): keep drops them (M / C events are decoded again whole)
        return decode_events(text, path, start, self.decoder, extras=False)

    def keep(self, run: List[TraceEvent], text: bytes, at: int) -> List[TraceEvent]:
        spans = self.event_spans(text, len(run), at) if self.event_spans is not None and run else None
        if spans is None:
            spans = _raw_spans(text, at)
        first = len(self.offsets)
        if spans is not None:
            self.offsets.frombytes(spans[0])
            self.end = spans[1]
        light_type = self.args_type
        if self.whole_events is not None:
            whole = self.whole_events(run, light_type)
        else:
            whole = [k for k, e in enumerate(run) if (e.ph == "M" or e.ph == "C") and type(e.args) is light_type]
        if whole:  # the tracks and counters read these events' names and args: decoded whole
            # an event's text runs to the next one's start, less the separator (spaces and a comma)
            offsets, n = self.offsets, len(run)
            pieces = [text[offsets[first + k] - at:(offsets[first + k + 1] if k + 1 < n else self.end) - at]
                      .rstrip(_SEPARATOR) for k in whole]
            try:
                again = decode_events(b"[" + b",".join(pieces) + b"]", None)
            except TraceFormatError:
                raise _Unsure from None
            for k, e in zip(whole, again):
                e.index = run[k].index
                run[k] = e
        if self.keep_loop is not None:
            self.keep_loop(run, self._context())
            return run
        memo = self.memo
        none = self._none()
        intern = memo.setdefault  # one dict: str and int keys never compare equal (pid / tid are never bool)
        join = self.join
        joined = self.joined
        join_args = self._join_args
        light_of = self._light
        last = None  # the previous event's time: a flow event's is its slice's, one int object for both
        for e in run:
            ts = e.ts_ns
            if ts == last:
                e.ts_ns = last
            else:
                last = ts
            cat = e.cat
            e.cat = intern(cat, cat)
            pid = e.pid
            e.pid = intern(pid, pid)
            tid = e.tid
            e.tid = intern(tid, tid)
            ph = e.ph = intern(e.ph, e.ph)  # a str object per event as decoded
            if ph == "M" or ph == "C":  # the tracks and counters read their names and args
                continue
            e.extra = None
            if join and ph == "X":
                gpu = joined.get(cat)
                if gpu is None:
                    gpu = self._gpu_category(cat)
                name = e.name
                if gpu or name in GRAPH_LAUNCH_NAMES:  # what the join reads: name and its args
                    e.name = intern(name, name)
                    e.args = join_args(e.args)
                    continue
            e.name = ""
            a = e.args
            if type(a) is light_type and a.device is _NO_ARG and a.stream is _NO_ARG:  # the usual flow event
                e.args = none
            else:
                e.args = light_of(a)
        return run

    def _none(self) -> Dict[str, Any]:
        """The light args of the events with neither device nor stream (a flow event's), shared."""
        none_key = (_ARGS, _NO_TYPE, _NO_ARG, _NO_TYPE, _NO_ARG)
        none = self.memo.get(none_key)
        return none if none is not None else _light_args(_NO_ARG, _NO_ARG, self.memo, none_key)

    def _context(self) -> Tuple[Any, ...]:
        """What the compiled loops (``keep_loop``, ``fast_run``) read and update, in their order."""
        return (self.memo, self._none(), self.args_type, _ARGS, _NO_ARG, self.join, self.joined, self.join_memo,
                GRAPH_LAUNCH_NAMES, self._gpu_category, self._join_args, self._light)

    def _gpu_category(self, cat: str) -> bool:
        """Whether events of the category ``cat`` (as written) are GPU work; remembered."""
        c = cat.lower()
        gpu = self.joined[cat] = CATEGORY_ALIASES.get(c, c) in GPU_WORK_CATEGORIES
        return gpu

    def _light(self, a: Any) -> Dict[str, Any]:
        """The light args of an event's decoded args ``a``: shared by the events that have the
        same device and stream (an empty dict per event without args, too, as decoded)."""
        if type(a) is self.args_type:
            d = a.device
            s = a.stream
        else:  # the generic path's
            d = a.get("device", _NO_ARG)
            s = a.get("stream", _NO_ARG)
        key = (_ARGS, type(d), d, type(s), s)  # the type too: 1, 1.0 and True are equal keys
        memo = self.memo
        try:
            light = memo.get(key)
        except TypeError:  # a list or dict value: not shared
            light = key = None
        return light if light is not None else _light_args(d, s, memo, key)

    def _join_args(self, a: Any) -> Dict[str, Any]:
        """The args the join reads of a GPU work event or graph launch (the keys present, as
        decoded), one dict for the events of a replay that have the same."""
        if type(a) is dict:  # the generic path's
            return {k: a[k] for k, _ in _JOIN_KEYS if k in a}
        d, s, c, g, b = a.device, a.stream, a.correlation, a.grid, a.block
        gid, gnid = a.graph_id, a.graph_node_id
        memo = self.join_memo
        key: Any = None
        if gid is _NO_ARG and gnid is _NO_ARG:  # graph ids: one node each, nothing to share
            # the types too (1, 1.0 and True are equal keys); a list or dict value: not shared.
            # Kineto's usual args (int device, stream and correlation, grid and block of three
            # ints) in a key of their own shape (12 items: never equal to the general one's 10)
            if (type(g) is list and type(b) is list and len(g) == 3 and len(b) == 3 and type(d) is int
                    and type(s) is int and type(c) is int):
                g0, g1, g2 = g
                b0, b1, b2 = b
                if (type(g0) is int and type(g1) is int and type(g2) is int and type(b0) is int and type(b1) is int
                        and type(b2) is int):
                    key = (d, s, c, g0, g1, g2, b0, b1, b2, None, None, None)
            if key is None:
                key = (type(d), d, type(s), s, type(c), c,
                       tuple(g) if type(g) is list else g, tuple(map(type, g)) if type(g) is list else type(g),
                       tuple(b) if type(b) is list else b, tuple(map(type, b)) if type(b) is list else type(b))
            try:
                hit = memo.get(key)
            except TypeError:
                hit = key = None
            if hit is not None:
                return hit
        out = {}
        if d is not _NO_ARG:
            out["device"] = d
        if s is not _NO_ARG:
            out["stream"] = s
        if c is not _NO_ARG:
            out["correlation"] = c
        if g is not _NO_ARG:
            out["grid"] = g
        if b is not _NO_ARG:
            out["block"] = b
        if gid is not _NO_ARG:
            out["graph id"] = gid
        if gnid is not _NO_ARG:
            out["graph node id"] = gnid
        if key is not None:
            if len(memo) >= _JOIN_MEMO:
                memo.clear()
            memo[key] = out
        return out


def _raw_spans(text: bytes, at: int) -> Optional[Tuple[bytes, int]]:
    """Where each event of the run ``text`` (a JSON array, decoded already) starts and where the
    last one ends, both plus ``at``, found from the run decoded as ``List[msgspec.Raw]``: what
    ``_scan.event_spans`` answers (the starts as native int64 bytes); None for an empty run."""
    raws = _raw_list.decode(text)
    if not raws:
        return None
    find = text.find
    pos = 0
    starts = array("q")
    for r in raws:  # between two events only spaces and a comma: the next "{" starts the next
        pos = find(b"{", pos)
        starts.append(at + pos)
        pos += len(r)
    return starts.tobytes(), at + pos


def _light_args(d: Any, s: Any, memo: Dict[Any, Any], key: Any) -> Dict[str, Any]:
    """The light args of an event whose ``device`` / ``stream`` are ``d`` / ``s`` (``_NO_ARG``:
    absent), kept in ``memo`` under ``key`` (None: a value that cannot be a key)."""
    light = {}
    if d is not _NO_ARG:
        light["device"] = d
    if s is not _NO_ARG:
        light["stream"] = s
    if key is not None:
        memo[key] = light
    return light


def scan_trace(path: str, join: bool = False, follow: "Optional[Followed]" = None) -> Optional[ScannedTrace]:
    """The first pass over the trace at ``path``: light events and where each one's text is
    (in the decompressed text of a gzip file); None where the two-pass read does not apply
    (not a regular file) or the streaming read is unsure (the caller then reads the whole
    file, which also words every error).
    ``join``: the events the join reads keep its args and their names (:class:`_JoinArgs`).
    ``follow``: the file read as its writer writes it (:mod:`.follow`); ``path`` is then only
    what errors call it, and the events' source is the finished file. None also where the
    finished file is not the one read (:class:`~.follow.Moved`: the caller reads it whole)."""
    import stat

    from .follow import Moved

    scan = _Scan(join)
    if follow is None:
        try:  # not opened first: opening a pipe waits for its writer, and a read would take its bytes
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            trace = _stream_trace(path, scan=scan)
        except _Unsure:
            return None
    else:
        read = follow.events
        try:
            trace = _stream_trace(path, scan=scan, raw=follow, events=read)
        except (_Unsure, Moved):
            return None
        finally:  # the events are the trace's now (or nobody's): the writer drops them before its packets
            follow.hand_over()
        if follow.final is None:  # the reader gave up before the end (unsure of a run)
            return None
        path, st = follow.final, follow.final_stat
    if trace is None:
        return None
    try:
        now = os.stat(path)
    except OSError:
        return None
    if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns) or len(scan.offsets) != len(trace.events):
        return None
    scan.offsets.append(scan.end)
    gz = scan.gunzipped
    source = (EventSource(path, scan.offsets, st.st_size, st.st_mtime_ns) if gz is None else
              GzipEventSource(path, scan.offsets, st.st_size, st.st_mtime_ns, gz.points, gz.out))
    made = None
    if follow is not None and follow.ahead is not None and trace.events is read:
        made = follow.ahead.made
    return ScannedTrace(path=trace.path, events=trace.events, metadata=trace.metadata, source=source, made=made)
