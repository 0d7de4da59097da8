"""What a file is: every decision this package makes from a file's name or its first bytes.

Names decide what is *written* (``.json`` / ``.json.gz`` in any case is Chrome JSON, a
``.gz`` name is gzipped) and, where a name is explicit, how an input is opened. Content
decides the rest: gzip is recognised by its magic bytes whatever the name says, an
annotation sidecar by the magic string its binary form starts with, a capture record by
its keys. Ground floor of the package: it imports nothing of it but :mod:`.errors`.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import struct
import zlib
from typing import Any, Optional, Tuple, Type

from .errors import EMPTY_FILE, InputError, PathError, PathLike

#: The first two bytes of every gzip stream (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"
#: The byte order mark some Windows editors put before UTF-8 text.
UTF8_BOM = b"\xef\xbb\xbf"
#: Field 1 (``magic``) of a binary annotation sidecar (``Sidecar`` in ``sidecar.proto``).
SIDECAR_MAGIC = "perfetto_graph_ann.sidecar"
_SIDECAR_HEAD = b"\x0a" + bytes([len(SIDECAR_MAGIC)]) + SIDECAR_MAGIC.encode()

#: Names that mean (annotated) Chrome JSON rather than a Perfetto protobuf trace.
JSON_SUFFIXES = (".json", ".json.gz")
#: Names that mean a Perfetto protobuf trace.
PROTO_TRACE_SUFFIXES = (".pftrace", ".pftrace.gz", ".perfetto-trace", ".perfetto-trace.gz", ".pb", ".pb.gz")
#: Trace files a folder of per-rank traces is searched for (``fleet``).
TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace")
#: What a trace's name ends with after its stem, longest first (``run.trace.json.gz`` -> ``run``).
_STEM_SUFFIXES = (".trace.json.gz", ".trace.json", ".json.gz", ".json", ".pftrace.gz", ".pftrace", ".perfetto-trace")
#: Names of annotation files saved beside ``<stem>.json.gz``, in the order they are looked for.
SIDECAR_SUFFIXES = (".annotations.json", ".annotations.pga", ".pga", ".capture.json")


#: Suffix of the sidecar ``perfetto-graph-ann run`` saves per process (``<host>_<pid>.pga``).
RUN_SIDECAR_SUFFIX = ".pga"


# ---- by name -----------------------------------------------------------------------------

def _lower_name(path: PathLike) -> str:
    return os.fspath(path).lower()


def is_json_name(path: PathLike) -> bool:
    """Whether ``path`` names a Chrome JSON file (``.json`` / ``.json.gz``, any case)."""
    return _lower_name(path).endswith(JSON_SUFFIXES)


def is_gzip_name(path: PathLike) -> bool:
    """Whether ``path``'s name asks for gzip (``.gz``, any case): outputs are compressed by name."""
    return _lower_name(path).endswith(".gz")


def is_proto_trace_name(path: PathLike) -> bool:
    """Whether ``path`` names a Perfetto protobuf trace (``.pftrace``, ``.perfetto-trace``, ``.pb``,
    each optionally ``.gz``; any case)."""
    return _lower_name(path).endswith(PROTO_TRACE_SUFFIXES)


def is_trace_name(path: PathLike) -> bool:
    """Whether a folder entry named ``path`` is a trace (JSON or protobuf) and not a sidecar."""
    return _lower_name(path).endswith(TRACE_SUFFIXES) and not is_sidecar_name(path)


def is_sidecar_name(path: PathLike) -> bool:
    """Whether ``path`` is named like an annotation file saved beside a trace (any case)."""
    return _lower_name(path).endswith(SIDECAR_SUFFIXES)


def trace_stem(name: str) -> str:
    """``name`` without its trace suffix (``rank0.trace.json.gz`` -> ``rank0``); the name itself
    when it has none. The sidecar of a trace is ``<stem>`` + one of :data:`SIDECAR_SUFFIXES`."""
    lower = name.lower()
    for suffix in _STEM_SUFFIXES:
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


# ---- by content --------------------------------------------------------------------------

def is_gzip(data: bytes) -> bool:
    """Whether ``data`` starts a gzip stream (its magic bytes; the name is not consulted)."""
    return data[:2] == GZIP_MAGIC


def is_gzip_file(path: PathLike) -> bool:
    """Whether the regular file at ``path`` is gzip (its first bytes); False for anything that
    cannot be read so (a pipe cannot be read twice, a missing file: its reader says why)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return is_gzip(f.read(2))
    except OSError:
        return False


def gunzip(data: bytes, path: Optional[PathLike], error: Type[PathError] = InputError) -> bytes:
    """``data`` decompressed when it is gzip, else ``data`` itself; a truncated or corrupt
    stream raises ``error(path, ...)``."""
    if not is_gzip(data):
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, OSError, zlib.error) as e:
        raise error(path, f"gzip data is truncated or corrupt ({e})") from None


def read_bytes(path: PathLike, error: Type[PathError] = InputError, what: str = "file") -> bytes:
    """The content of ``path``, gunzipped when it is gzip (by content, whatever the name).

    Every failure is ``error(path, ...)``: no such file, a directory (``what`` says what was
    expected instead), unreadable, corrupt gzip.
    """
    spath = os.fspath(path)
    try:
        with open(spath, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise error(spath, "no such file") from None
    except IsADirectoryError:
        raise error(spath, f"is a directory, not a {what}") from None
    except OSError as e:
        raise error(spath, f"cannot read: {e.strerror or e}") from None
    return gunzip(data, spath, error)


def is_sidecar_bytes(data: bytes) -> bool:
    """Whether ``data`` (already gunzipped) is a binary annotation sidecar: a ``Sidecar``
    message starts with its ``magic`` field."""
    return data.startswith(_SIDECAR_HEAD)


def strip_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark (as Windows editors save JSON)."""
    return data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data


def annotation_form(data: bytes) -> Optional[str]:
    """The form of an annotation file's bytes (gunzipped, :func:`strip_bom`-ed): ``"json"``
    (a JSON sidecar or a capture record), ``"binary"`` (a binary sidecar), or None."""
    if data.lstrip()[:1] in (b"{", b"["):
        return "json"
    if is_sidecar_bytes(data):
        return "binary"
    return None


def is_capture_record(doc: Any) -> bool:
    """Whether a parsed JSON document is a probe capture record (``*.capture.json``) rather
    than a JSON sidecar: it names the executable graph's CUPTI id and carries no sidecar
    ``format`` key."""
    return isinstance(doc, dict) and "exec_cupti_graph_id" in doc and "format" not in doc


def looks_like_json(head: bytes) -> bool:
    """Whether the first bytes of a (gunzipped) file are JSON text rather than a protobuf trace.

    A protobuf trace starts with 0x0A (a TracePacket) and a length byte, which can be ``{``
    or ``[``: so besides the opening bracket the next byte must be one JSON allows there.
    """
    text = head.lstrip(b" \t\r\n")
    if text[:1] == b"{":
        return len(text) == 1 or text[1:2] in b' \t\r\n"}'
    if text[:1] == b"[":
        return len(text) == 1 or text[1:2] in b" \t\r\n{]"
    return False


def _read_head(path: str, n: int) -> bytes:
    """The first ``n`` bytes of ``path``'s content, through gzip when it is gzip."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if is_gzip(head):
                with gzip.GzipFile(fileobj=f) as g:
                    return g.read(n)
            return f.read(n)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(path, f"cannot read: {e}") from e


def is_json_trace(path: PathLike) -> bool:
    """Whether the trace at ``path`` is JSON (plain or gzipped) rather than a protobuf trace:
    a JSON or protobuf name decides; any other name is decided by content
    (:func:`looks_like_json`). Raises :class:`InputError` for a missing file or a folder."""
    spath = os.fspath(path)
    if not os.path.exists(spath):
        raise InputError(spath, "no such file")
    if os.path.isdir(spath):
        raise InputError(spath, "is a directory, not a trace file")
    if is_json_name(spath):
        return True
    if is_proto_trace_name(spath):
        return False
    return looks_like_json(_read_head(spath, 64))


#: How much of a JSON file :func:`is_other_json` reads to decide.
_SNIFF_BYTES = 1 << 20


def is_other_json(path: PathLike) -> bool:
    """Whether the file at ``path`` is a JSON document that is certainly not a trace: a JSON
    object (plain or gzipped) that parses completely within the first MiB and has no
    ``traceEvents`` (e.g. the demo's ``summary.json``). Anything else, a broken file
    included, is False: loading it is what says what is wrong with it."""
    try:
        head = _read_head(os.fspath(path), _SNIFF_BYTES + 1)
    except InputError:
        return False
    text = strip_bom(head).lstrip(b" \t\r\n")
    if not text.startswith(b"{") or b'"traceEvents"' in text or len(head) > _SNIFF_BYTES:
        return False
    import json

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and "traceEvents" not in doc


def sniff_trace(path: PathLike) -> str:
    """``"json"`` or ``"protobuf"``: what the trace at ``path`` holds by its first bytes
    (through gzip), for a command that hands the file on without reading it (``open``).
    :class:`InputError` naming the file when it is missing, a folder, empty, or neither."""
    spath = os.fspath(path)
    if os.path.isdir(spath):
        raise InputError(spath, "is a directory, not a trace file")
    head = _read_head(spath, 4096)
    if not head:
        raise InputError(spath, EMPTY_FILE)
    if looks_like_json(strip_bom(head)):
        return "json"
    if head.startswith(START) or (head[:1] == b"\x0a" and _first_frame_fits(head)):  # ours open with START
        return "protobuf"
    raise InputError(spath, "not a trace: neither JSON (torch.profiler, Chrome) nor a Perfetto protobuf trace "
                            f"(it starts with {head[:8]!r})")


def _first_frame_fits(head: bytes) -> bool:
    """Whether ``head`` starts with a Perfetto ``packet`` field whose varint length is sane
    (the packet itself may go on past ``head``)."""
    if not any(b < 0x20 and b not in b"\t\n\r" for b in head[:64]):  # JSON / text has none
        return False
    at = _skip_frame(head, 1)
    return at is not None and at < 1 << 30


def is_pftrace_bytes(data: bytes) -> bool:
    """Whether ``data`` (gunzipped) reads as a Perfetto ``Trace``: a run of ``packet`` fields
    (tag 0x0A, a varint length, the packet).

    JSON text can start with 0x0A (a newline) too, so the first frames must fit the data
    exactly and the head must hold a byte JSON text cannot (a control character other than
    tab, CR, LF). A trace of ours opens with its start mark (printable text after its
    framing, not UTF-8 JSON can start with): recognised by that.
    """
    if data.startswith(START):
        return True
    if data[:1] != b"\x0a" or not any(b < 0x20 and b not in b"\t\n\r" for b in data[:64]):
        return False
    at, n = 0, len(data)
    for _ in range(4):  # a few frames: tag, length, payload
        if at == n:
            break
        if data[at] != 0x0A:
            return False
        at = _skip_frame(data, at + 1)
        if at is None or at > n:
            return False
    return True


def _skip_frame(data: bytes, at: int) -> Optional[int]:
    """The offset after a length-delimited field whose varint length starts at ``at``, or None
    when the varint runs off the data."""
    n = len(data)
    length, shift = 0, 0
    while at < n and data[at] & 0x80 and shift < 63:
        length |= (data[at] & 0x7F) << shift
        shift += 7
        at += 1
    if at >= n:
        return None
    length |= data[at] << shift
    return at + 1 + length


# ---- our .pftrace's completeness marks ---------------------------------------------------
# A trace cut short (an interrupted copy or write, a disk filled) still loads: the trace
# processor reads the packets it finds and says nothing (v52: the demo's
# seed_block.annotated.pftrace cut to 5,000 of its 19,207 bytes loads with 4 of its 70
# kernels, no import stat). So every trace this package writes opens with a start mark and
# ends with an end record (issue 32, item 2): two packets of fixed size whose only field is in
# TracePacket's extension range (1000-1999, left to extensions by Perfetto), which the trace
# processor and the UI skip (v52: the same tables, no import stat). The start mark (field
# 1900) says the file is ours and must end with an end record; the end record (field 1901)
# holds three fixed64 numbers: the bytes before it (the start mark included), the packets
# before it, and the slices written (slice and instant events: the rows of the trace
# processor's ``slice`` table). Fixed sizes make the check O(1): the first START_SIZE and the
# last END_SIZE bytes of the (decompressed) content and its length
# (``query.engine.complete`` checks them when a trace is loaded).

#: TracePacket fields of the start mark and the end record (in the extension range 1000-1999).
START_FIELD = 1900
END_FIELD = 1901
#: The start mark's payload.
START_TEXT = b"perfetto_graph_ann trace: ends with a completeness record (TracePacket field 1901)"


def varint(value: int) -> bytes:
    """A protobuf base-128 varint of a non-negative int (the encoders' plain path)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: tag, length, payload."""
    return varint((field << 3) | 2) + varint(len(payload)) + payload


#: The start mark, framed as the first packet of a trace (``Trace.packet`` is field 1).
START = _field(1, _field(START_FIELD, START_TEXT))
START_SIZE = len(START)
#: The end record's payload: fields 1, 2, 3 as fixed64 (wire type 1), in that order.
_END_LAYOUT = struct.Struct("<BQBQBQ")
_END_TAGS = ((1 << 3) | 1, (2 << 3) | 1, (3 << 3) | 1)


@dataclasses.dataclass(frozen=True)
class Completeness:
    """What a writer wrote before its end record."""

    bytes: int  #: bytes before the end record (start mark included)
    packets: int  #: packets before the end record (start mark included)
    slices: int  #: slice and instant events written (the trace processor's ``slice`` rows)


def end_record(c: Completeness) -> bytes:
    """The end record packet for ``c``, framed (always :data:`END_SIZE` bytes)."""
    payload = _END_LAYOUT.pack(_END_TAGS[0], c.bytes, _END_TAGS[1], c.packets, _END_TAGS[2], c.slices)
    return _field(1, _field(END_FIELD, payload))


END_SIZE = len(end_record(Completeness(0, 0, 0)))
#: The bytes every end record starts with (framing, tag and length).
_END_PREFIX = end_record(Completeness(0, 0, 0))[: END_SIZE - _END_LAYOUT.size]


def parse_end_record(tail: bytes) -> Optional[Completeness]:
    """The record in ``tail`` (a file's last :data:`END_SIZE` bytes), or None if it is not one."""
    if len(tail) != END_SIZE or not tail.startswith(_END_PREFIX):
        return None
    t1, b, t2, p, t3, n = _END_LAYOUT.unpack(tail[len(_END_PREFIX):])
    if (t1, t2, t3) != _END_TAGS:
        return None
    return Completeness(b, p, n)


def strip_marks(data: bytes) -> Tuple[bytes, Optional[Completeness]]:
    """``data`` without its start mark and end record, and the record (None, and ``data`` as
    it is, for a trace that does not start with our mark and end with its record)."""
    if not data.startswith(START):
        return data, None
    record = parse_end_record(data[-END_SIZE:]) if len(data) >= START_SIZE + END_SIZE else None
    if record is None or record.bytes != len(data) - END_SIZE:
        return data, None
    return data[START_SIZE:-END_SIZE], record


__all__: Tuple[str, ...] = (
    "GZIP_MAGIC", "UTF8_BOM", "SIDECAR_MAGIC", "JSON_SUFFIXES", "PROTO_TRACE_SUFFIXES", "TRACE_SUFFIXES",
    "SIDECAR_SUFFIXES", "is_json_name", "is_gzip_name", "is_proto_trace_name", "is_trace_name",
    "is_sidecar_name", "trace_stem", "is_gzip", "is_gzip_file", "gunzip", "read_bytes", "is_sidecar_bytes",
    "strip_bom", "annotation_form", "is_capture_record", "looks_like_json", "is_json_trace", "is_pftrace_bytes",
    "START", "START_SIZE", "END_SIZE", "Completeness", "end_record", "parse_end_record", "strip_marks",
    "is_other_json", "sniff_trace", "run_sidecar", "RUN_SIDECAR_SUFFIX",
)


def run_sidecar(trace: PathLike) -> Optional[str]:
    """The sidecar ``perfetto-graph-ann run`` saved beside a torch.profiler JSON trace, if any:
    ``<worker>.pga`` in the trace's folder, ``<worker>`` being the trace name up to its first
    dot (torch's trace handler names traces ``<host>_<pid>.<time>.pt.trace.json``; ``run``
    saves ``<host>_<pid>.pga``)."""
    path = os.fspath(trace)
    name = os.path.basename(path)
    if not is_json_name(name) or "." not in name:
        return None
    cand = os.path.join(os.path.dirname(path), name.split(".", 1)[0] + RUN_SIDECAR_SUFFIX)
    return cand if os.path.isfile(cand) and os.path.abspath(cand) != os.path.abspath(path) else None
