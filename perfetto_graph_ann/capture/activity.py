"""CUPTI activity buffers read directly: the calibration replay's records without per-record objects.

cupti-python's buffer callback turns every record into a Python object with all its fields
(a kernel's name included) before handing the list over: that was most of a calibration's
time on large graphs (BENCHMARKS.md, "capture"). Here libcupti's activity API is called through
ctypes with our own buffer callbacks, and each completed buffer is walked with
``cuptiActivityGetNextRecord``, reading only (graph node id, stream, start, end) of the
kernel, memcpy and memset records of one executable graph: in C where the compiled module
is built (:mod:`.fastpath`), else in Python (same result, slower).

Field offsets come from cupti-python's record dtypes (``activity_kernel10_dtype``, ...), the
layouts it decodes the same library's records with; cupti-python stays the calibration's
requirement, but none of its code runs per record. Signatures assumed (cupti_activity.h):
``cuptiActivityRegisterCallbacks(requested, completed)``, ``cuptiActivityEnable(kind)``,
``cuptiActivityDisable(kind)``, ``cuptiActivityFlushAll(flag)``,
``cuptiActivityGetNextRecord(buffer, validSize, CUpti_Activity **record)``.
"""
from __future__ import annotations

import contextlib
import ctypes
import re
import struct
import threading
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import CaptureError
from . import fastpath
from .resolve import ActivityRecord

__all__ = ["ActivityApi", "api", "BUFFER_BYTES", "COMPLETED", "Layout", "LayoutError", "layouts_from_cupti",
           "NEXT_RECORD", "parse_buffer", "parse_buffer_py", "REQUESTED", "typed_lib"]

#: bytes per buffer handed to CUPTI (a kernel record is ~200 bytes; more are requested as needed)
BUFFER_BYTES = 2 << 20

#: void (*)(uint8_t **buffer, size_t *size, size_t *maxNumRecords)
REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                             ctypes.POINTER(ctypes.c_size_t))
#: void (*)(CUcontext, uint32_t streamId, uint8_t *buffer, size_t size, size_t validSize)
COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
#: CUptiResult (*)(uint8_t *buffer, size_t validSize, CUpti_Activity **record)
NEXT_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))


class LayoutError(CaptureError):
    """cupti-python does not describe the record layouts read here (another version)."""


class Layout(NamedTuple):
    """Where one activity kind's record keeps what calibration reads (byte offsets)."""

    kind: int  #: CUpti_ActivityKind value
    name: str  #: kernel / memcpy / memset
    node: int  #: graphNodeId (uint64)
    stream: int  #: streamId (uint32)
    start: int  #: start (uint64, ns)
    end: int  #: end (uint64, ns)


def layouts_from_cupti(cupti: Any) -> Tuple[Layout, ...]:
    """The kernel / memcpy / memset layouts from cupti-python's newest record dtypes.

    Raises :class:`LayoutError` when a dtype or a field is missing or sized otherwise.
    """
    kinds = {"kernel": "CONCURRENT_KERNEL", "memcpy": "MEMCPY", "memset": "MEMSET"}
    out = []
    for name, kind in kinds.items():
        versions = [(int(m.group(1)), a) for a in dir(cupti) if (m := re.fullmatch(rf"activity_{name}(\d+)_dtype", a))]
        if not versions or not hasattr(cupti.ActivityKind, kind):
            raise LayoutError(f"cupti-python has no activity_{name}N_dtype / ActivityKind.{kind}")
        dt = getattr(cupti, max(versions)[1])
        offs = []
        for field, size in (("graph_node_id", 8), ("stream_id", 4), ("start", 8), ("end", 8)):
            f = dt.fields.get(field) if dt.fields else None
            if f is None or f[0].itemsize != size:
                raise LayoutError(f"cupti-python's {max(versions)[1]} lacks a {size}-byte {field}")
            offs.append(int(f[1]))
        out.append(Layout(int(getattr(cupti.ActivityKind, kind)), name, *offs))
    return tuple(out)


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


def parse_buffer_py(next_record: Any, buffer: int, valid: int, layouts: Sequence[Layout],
                    exec_id: Optional[int]) -> List[Tuple[int, int, int, int, str]]:
    """(node, stream, start, end, kind name) of the records of ``exec_id`` (None: every graph)."""
    data = ctypes.string_at(buffer, valid)
    by_kind = {lay.kind: lay for lay in layouts}
    rec = ctypes.c_void_p(None)
    out = []
    while next_record(buffer, valid, ctypes.byref(rec)) == 0 and rec.value:
        off = rec.value - buffer
        lay = by_kind.get(_U32.unpack_from(data, off)[0])
        if lay is None:
            continue
        node = _U64.unpack_from(data, off + lay.node)[0]
        if not node or (exec_id is not None and node >> 32 != exec_id):
            continue
        out.append((node, _U32.unpack_from(data, off + lay.stream)[0], _U64.unpack_from(data, off + lay.start)[0],
                    _U64.unpack_from(data, off + lay.end)[0], lay.name))
    return out


def parse_buffer(next_record: Any, next_addr: int, buffer: int, valid: int, layouts: Sequence[Layout],
                 exec_id: Optional[int]) -> List[Tuple[int, int, int, int, str]]:
    """:func:`parse_buffer_py` in C where the compiled module is built (``next_addr``: the function's address)."""
    fast = fastpath.module()
    if fast is not None and hasattr(fast, "activity_records"):
        return fast.activity_records(next_addr, buffer, valid, -1 if exec_id is None else exec_id, tuple(layouts))
    return parse_buffer_py(next_record, buffer, valid, layouts, exec_id)


class ActivityApi:
    """libcupti's activity API through ctypes, with one pair of buffer callbacks per process.

    The callbacks stay registered in CUPTI after a session (until Kineto registers its own),
    so they are kept alive for the process and hand buffers to whichever session is open; a
    buffer completed outside a session is dropped.
    """

    def __init__(self, lib: Any, cupti: Any):
        self.lib = lib  # libcupti, its functions typed by typed_lib (a fake in tests)
        self.layouts = layouts_from_cupti(cupti)
        self._next = ctypes.cast(lib.cuptiActivityGetNextRecord, NEXT_RECORD)
        self._next_addr = ctypes.cast(lib.cuptiActivityGetNextRecord, ctypes.c_void_p).value
        self._buffers: Dict[int, Any] = {}  # address -> the ctypes buffer, alive until completed
        self._sink: Optional[Tuple[List[ActivityRecord], Optional[int]]] = None
        self._lock = threading.Lock()
        self._requested, self._completed = REQUESTED(self._on_requested), COMPLETED(self._on_completed)

    def _on_requested(self, buffer, size, max_records) -> None:
        buf = ctypes.create_string_buffer(BUFFER_BYTES)  # malloc'd: 16-byte aligned (CUPTI asks 8)
        addr = ctypes.addressof(buf)
        with self._lock:
            self._buffers[addr] = buf
        buffer[0], size[0], max_records[0] = addr, BUFFER_BYTES, 0

    def _on_completed(self, ctx, stream_id, buffer, size, valid) -> None:
        try:
            sink = self._sink
            if sink is not None and buffer and valid:
                rows = parse_buffer(self._next, self._next_addr, buffer, valid, self.layouts, sink[1])
                sink[0].extend(map(ActivityRecord._make, rows))
        finally:
            with self._lock:
                self._buffers.pop(buffer, None)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CaptureError(f"{what} failed with CUPTI error {rc}")

    @contextlib.contextmanager
    def session(self, collected: List[ActivityRecord], exec_id: Optional[int]) -> Iterator[None]:
        """Record the kernel, memcpy and memset activity of ``exec_id`` into ``collected``."""
        self._check(self.lib.cuptiActivityRegisterCallbacks(self._requested, self._completed),
                    "cuptiActivityRegisterCallbacks")
        enabled = []
        try:
            for lay in self.layouts:
                rc = self.lib.cuptiActivityEnable(lay.kind)
                if rc == 0:
                    enabled.append(lay.kind)
                elif lay.name == "kernel":
                    self._check(rc, "cuptiActivityEnable(CONCURRENT_KERNEL)")
            self._sink = (collected, exec_id)
            yield
        finally:
            try:
                self.lib.cuptiActivityFlushAll(1)  # forced: every record of the replay, now
            finally:
                self._sink = None
                for kind in enabled:
                    self.lib.cuptiActivityDisable(kind)


def typed_lib(path: str) -> Any:
    """libcupti at ``path`` with the activity functions' argument types set."""
    lib = ctypes.CDLL(path)
    lib.cuptiActivityRegisterCallbacks.argtypes = [REQUESTED, COMPLETED]
    lib.cuptiActivityEnable.argtypes = [ctypes.c_int]
    lib.cuptiActivityDisable.argtypes = [ctypes.c_int]
    lib.cuptiActivityFlushAll.argtypes = [ctypes.c_uint32]
    return lib


_API: Optional[ActivityApi] = None
_api_lock = threading.Lock()


def api(libcupti: Optional[str] = None) -> ActivityApi:
    """The process's :class:`ActivityApi` (needs libcupti and cupti-python's dtypes)."""
    global _API
    with _api_lock:
        if _API is None:
            try:
                from cupti import cupti
            except Exception as e:
                raise CaptureError(f"calibration needs cupti-python (pip install cupti-python): {e}") from e
            from .libcupti import find_libcupti

            path = libcupti or find_libcupti()
            if path is None:
                raise CaptureError("libcupti not found (install nvidia-cuda-cupti or cupti-python)")
            _API = ActivityApi(typed_lib(path), cupti)
        return _API
