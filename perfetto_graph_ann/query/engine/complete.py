"""Refuse a trace that did not load whole (issue 32, item 2).

A trace processor reads whatever packets a file holds and reports nothing when the file was
cut short (v52: a ``.pftrace`` cut to a quarter loads a quarter of its kernels, no import
stat), so every number computed from it would be silently wrong. When a trace file is loaded
(:meth:`~.base.Engine.load`), :class:`TraceScan` watches the bytes on their way to the engine
(gzip decompressed as they go: the first and last bytes of the content and its length, O(1)
memory), and :func:`check_loaded` then raises
:class:`~perfetto_graph_ann.errors.IncompleteTraceError` (exit 2, no output), naming the
file and the numbers, when:

- the file starts with our start mark (:mod:`perfetto_graph_ann.formats`, "completeness marks")
  but does not end with our end record, or the record's byte count is not the file's;
- the record's slice count is not the number of rows the engine's ``slice`` table got;
- a gzip stream ends early or fails its check (any trace);
- the engine's import stats (``stats``, severity ``data_loss`` or ``error``, value > 0)
  report data loss (any trace, ours or not).

A trace without our start mark (another writer's, or ours from before the record existed)
is checked by the last two rules only. ``EngineConfig(check_complete=False)`` skips all of it.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Protocol, Tuple

from ...errors import IncompleteTraceError
from ...formats import END_SIZE, START, START_SIZE, parse_end_record

__all__ = ["check_counts", "check_loaded", "check_scan", "LOSS_STATS_SQL", "scan_file", "TraceScan"]


class _Loaded(Protocol):
    """What :func:`check_loaded` needs of :class:`.base.Engine` (named here, not imported:
    ``base`` imports this module)."""

    trace_path: Path

    def query(self, sql: str) -> Iterable[Any]: ...


_GZIP_MAGIC = b"\x1f\x8b"
#: Most bytes one inflate call may produce (bounds memory for highly compressed input).
_INFLATE_STEP = 32 << 20

#: The import stats that mean the trace processor lost or could not read part of the trace.
LOSS_STATS_SQL = ("SELECT name, idx, severity, value FROM stats "
                  "WHERE severity IN ('data_loss', 'error') AND value > 0 ORDER BY name, idx")


class TraceScan:
    """The first :data:`START_SIZE` and last :data:`END_SIZE` bytes and the length of a
    trace's content (decompressed when the file is gzip), fed the file's chunks in order."""

    def __init__(self) -> None:
        self.head = b""
        self.tail = b""
        self.size = 0  #: bytes of content (decompressed)
        self.file_bytes = 0  #: bytes of the file
        self.gzip: Optional[bool] = None
        self.gzip_error: Optional[str] = None  #: why the gzip stream is not whole (None: it is, or no gzip)
        self._z = None
        self._pending = b""  # the first byte when the first chunk had only one

    def watch(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` passed through unchanged, each scanned on its way."""
        for chunk in chunks:
            self.feed(chunk)
            yield chunk
        self.finish()

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.file_bytes += len(chunk)
        if self.gzip is None:
            chunk = self._pending + chunk
            if len(chunk) < 2:
                self._pending = chunk
                return
            self._pending = b""
            self.gzip = chunk[:2] == _GZIP_MAGIC
            if self.gzip:
                self._z = zlib.decompressobj(31)
        if not self.gzip:
            self._take(chunk)
            return
        self._inflate(chunk)

    def _inflate(self, data: bytes) -> None:
        while data and self.gzip_error is None:
            z = self._z
            if z.eof:  # a further gzip member (concatenated files read as one)
                if not data.startswith(_GZIP_MAGIC):
                    self.gzip_error = "has bytes after its gzip stream that are not another gzip member"
                    return
                z = self._z = zlib.decompressobj(31)
            try:
                self._take(z.decompress(data, _INFLATE_STEP))
                while z.unconsumed_tail:
                    self._take(z.decompress(z.unconsumed_tail, _INFLATE_STEP))
            except zlib.error as e:
                self.gzip_error = f"its gzip stream is corrupt ({e})"
                return
            data = z.unused_data

    def finish(self) -> None:
        if self._pending:
            self.gzip = False
            self._take(self._pending)
            self._pending = b""
        if self.gzip and self.gzip_error is None and self._z is not None:
            try:
                self._take(self._z.flush())
            except zlib.error as e:
                self.gzip_error = f"its gzip stream is corrupt ({e})"
            else:
                if not self._z.eof:
                    self.gzip_error = "its gzip stream ends early"

    def _take(self, data: bytes) -> None:
        if not data:
            return
        if len(self.head) < START_SIZE:
            self.head += data[: START_SIZE - len(self.head)]
        self.size += len(data)
        self.tail = (self.tail + data)[-END_SIZE:] if len(data) < END_SIZE else data[-END_SIZE:]

    @property
    def ours(self) -> bool:
        """Whether the content starts with our start mark (so it must end with our record)."""
        return self.head == START


def _n(x: int) -> str:
    return f"{x:,}"


def check_scan(path, scan: TraceScan) -> Optional[int]:
    """Raise :class:`IncompleteTraceError` for what the bytes alone show; returns the slice
    count our end record promises (None for a trace without our start mark)."""
    size = f"{_n(scan.size)} bytes" + (f" ({_n(scan.file_bytes)} gzip-compressed)" if scan.gzip else "")
    if scan.gzip_error is not None:
        raise IncompleteTraceError(path, f"incomplete trace: {scan.gzip_error} after {size} of trace "
                                         "(a file cut short or damaged); refusing to compute anything from part of it")
    if not scan.ours:
        return None
    record = parse_end_record(scan.tail) if scan.size >= START_SIZE + END_SIZE else None
    if record is None:
        raise IncompleteTraceError(path, f"incomplete trace: written by perfetto_graph_ann, but its {size} do not end "
                                         "with the completeness record the writer puts last: the file was cut short "
                                         "(interrupted copy or write); refusing to compute anything from part of it")
    if record.bytes + END_SIZE != scan.size:
        raise IncompleteTraceError(path, f"incomplete trace: its completeness record says {_n(record.bytes + END_SIZE)} "
                                         f"bytes were written, the file holds {size}: it was cut or altered")
    return record.slices


def scan_file(path) -> TraceScan:
    """:class:`TraceScan` of a whole file, for a loader that reads it itself (the ``perfetto``
    package's batch processor): only its first and last bytes when it is not gzip."""
    scan = TraceScan()
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            if head != _GZIP_MAGIC:
                size = f.seek(0, 2)
                f.seek(0)
                first = f.read(START_SIZE)
                f.seek(max(0, size - END_SIZE))
                scan.head, scan.tail, scan.size, scan.file_bytes, scan.gzip = first, f.read(END_SIZE), size, size, False
                return scan
            f.seek(0)
            for chunk in iter(lambda: f.read(16 << 20), b""):
                scan.feed(chunk)
    except OSError as e:
        from ...errors import InputError

        raise InputError(path, f"cannot read: {e.strerror or e}") from e
    scan.finish()
    return scan


def check_loaded(engine: _Loaded, slices: Optional[int]) -> None:
    """Raise :class:`IncompleteTraceError` when the loaded trace lost data: fewer (or more)
    slices than our record promises, or import stats of severity data_loss / error."""
    n = next(iter(engine.query("SELECT COUNT(*) AS n FROM slice"))).n if slices is not None else None
    rows: List[Tuple] = [(r.name, r.idx, r.severity, r.value) for r in engine.query(LOSS_STATS_SQL)]
    check_counts(engine.trace_path, slices, n, rows)


def check_counts(path, slices: Optional[int], n: Optional[int], rows: List[Tuple]) -> None:
    """:func:`check_loaded` on numbers already read: the slices our record promises (None: not
    ours), the rows of the ``slice`` table, and the rows of :data:`LOSS_STATS_SQL`."""
    if slices is not None and n != slices:
        raise IncompleteTraceError(path, f"incomplete trace: the trace processor read {_n(n)} of the {_n(slices)} "
                                         "slices its writer recorded; refusing to compute anything from part of it")
    if rows:
        listed = ", ".join(f"{name}{'' if idx is None else f'[{idx}]'} = {_n(value)} ({severity})"
                           for name, idx, severity, value in rows[:8])
        more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
        hint = ""
        if any(name == "slice_drop_overlapping_complete_event" for name, *_ in rows):
            hint = (" (Perfetto's JSON importer drops complete events that overlap on a thread: "
                    "`perfetto-graph-ann convert` it to a .pftrace, which keeps them)")
        raise IncompleteTraceError(path, f"incomplete trace: the trace processor reports data loss while importing it "
                                         f"({listed}{more}, from its stats table); refusing to compute anything from "
                                         f"part of it{hint}")
