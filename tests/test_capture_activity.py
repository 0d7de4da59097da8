"""CUPTI activity buffers read without cupti-python's per-record objects (capture/activity.py).

A fake libcupti writes records into the buffers our callbacks hand it, at the offsets of
fake record dtypes, and walks them with a ``cuptiActivityGetNextRecord`` stand-in (a ctypes
callback, so the compiled reader calls it through a function pointer as on a GPU). The
expected rows are the records the test wrote, not what the reader computes.
"""
from __future__ import annotations

import ctypes
import struct
import types

import numpy as np
import pytest

from perfetto_graph_ann.capture import activity
from perfetto_graph_ann.capture.activity import NEXT_RECORD, ActivityApi, Layout, LayoutError, layouts_from_cupti
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.calibration import calibrate_replay
from perfetto_graph_ann.capture.resolve import ActivityRecord

pytestmark = pytest.mark.usefixtures("capture_path")

KERNEL, MEMCPY, MEMSET, OTHER = 10, 1, 2, 99


def dtype(fields, size):
    names, formats, offsets = zip(*fields)
    return np.dtype({"names": list(names), "formats": list(formats), "offsets": list(offsets), "itemsize": size})


def fake_cupti():
    """cupti-python as far as layouts go: record dtypes (an older kernel one too) and kinds."""
    k9 = dtype([("kind", "<u4", 0), ("graph_node_id", "<u8", 40), ("stream_id", "<u4", 48), ("start", "<u8", 8),
                ("end", "<u8", 16)], 64)
    k10 = dtype([("kind", "<u4", 0), ("start", "<u8", 8), ("end", "<u8", 16), ("graph_node_id", "<u8", 56),
                 ("stream_id", "<u4", 72)], 96)
    m6 = dtype([("kind", "<u4", 0), ("start", "<u8", 16), ("end", "<u8", 24), ("stream_id", "<u4", 40),
                ("graph_node_id", "<u8", 48)], 64)
    s4 = dtype([("kind", "<u4", 0), ("start", "<u8", 8), ("end", "<u8", 16), ("stream_id", "<u4", 28),
                ("graph_node_id", "<u8", 32)], 48)
    kinds = types.SimpleNamespace(CONCURRENT_KERNEL=KERNEL, MEMCPY=MEMCPY, MEMSET=MEMSET)
    return types.SimpleNamespace(activity_kernel9_dtype=k9, activity_kernel10_dtype=k10, activity_memcpy6_dtype=m6,
                                 activity_memset4_dtype=s4, ActivityKind=kinds)


def test_layouts_come_from_the_newest_record_dtypes():
    got = {lay.name: lay for lay in layouts_from_cupti(fake_cupti())}
    assert got["kernel"] == Layout(KERNEL, "kernel", node=56, stream=72, start=8, end=16)  # kernel10, not 9
    assert got["memcpy"] == Layout(MEMCPY, "memcpy", node=48, stream=40, start=16, end=24)
    assert got["memset"] == Layout(MEMSET, "memset", node=32, stream=28, start=8, end=16)


def test_a_missing_field_or_dtype_is_a_layout_error():
    c = fake_cupti()
    c.activity_memset4_dtype = dtype([("kind", "<u4", 0), ("start", "<u8", 8)], 16)
    with pytest.raises(LayoutError, match="graph_node_id"):
        layouts_from_cupti(c)
    del c.activity_memset4_dtype
    with pytest.raises(LayoutError, match="activity_memsetN_dtype"):
        layouts_from_cupti(c)


class Buffer:
    """Records written at the fake layouts' offsets, walked by a NEXT_RECORD callback."""

    SIZES = {KERNEL: 96, MEMCPY: 64, MEMSET: 48, OTHER: 24}

    def __init__(self, layouts, rows, size=1 << 14, into=None):
        self.lay = {lay.kind: lay for lay in layouts}
        self.buf = into if into is not None else ctypes.create_string_buffer(size)
        self.addr = ctypes.addressof(self.buf)
        self.offsets, off = [], 0
        for kind, node, stream, start, end in rows:
            struct.pack_into("<I", self.buf, off, kind)
            lay = self.lay.get(kind)
            if lay is not None:
                struct.pack_into("<Q", self.buf, off + lay.node, node)
                struct.pack_into("<I", self.buf, off + lay.stream, stream)
                struct.pack_into("<Q", self.buf, off + lay.start, start)
                struct.pack_into("<Q", self.buf, off + lay.end, end)
            self.offsets.append(off)
            off += self.SIZES[kind]
        self.valid = off
        self.calls = 0
        self.next = NEXT_RECORD(self._next)
        self.next_addr = ctypes.cast(self.next, ctypes.c_void_p).value

    def _next(self, buffer, valid, record):
        self.calls += 1
        assert buffer == self.addr and valid == self.valid
        cur = record[0]
        i = 0 if not cur else self.offsets.index(cur - self.addr) + 1
        if i >= len(self.offsets):
            return 3  # CUPTI_ERROR_MAX_LIMIT_REACHED
        record[0] = self.addr + self.offsets[i]
        return 0


ROWS = [
    (KERNEL, make_key(5, 0), 7, 100, 110),
    (OTHER, 0, 0, 0, 0),  # a kind not read
    (MEMSET, make_key(5, 1), 7, 120, 121),
    (KERNEL, make_key(6, 0), 7, 130, 140),  # another executable graph
    (KERNEL, 0, 7, 150, 160),  # not a graph kernel
    (MEMCPY, make_key(5, 2), 145, 170, 190),
]


@pytest.mark.parametrize("exec_id", [5, None])
def test_buffer_rows_on_both_paths(exec_id):
    lays = layouts_from_cupti(fake_cupti())
    b = Buffer(lays, ROWS)
    names = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}
    want = [(node, stream, start, end, names[kind]) for kind, node, stream, start, end in ROWS
            if kind in names and node and (exec_id is None or node >> 32 == exec_id)]
    assert activity.parse_buffer_py(b.next, b.addr, b.valid, lays, exec_id) == want
    assert activity.parse_buffer(b.next, b.next_addr, b.addr, b.valid, lays, exec_id) == want
    assert len(want) == (3 if exec_id == 5 else 4)


class FakeLib:
    """libcupti's activity API: flushing writes ``pending`` rows into a requested buffer."""

    def __init__(self, layouts, error=0):
        self.layouts, self.error = layouts, error
        self.enabled, self.log, self.pending = set(), [], []
        self.cb = None
        self.walker = Buffer(layouts, [])
        self.cuptiActivityGetNextRecord = NEXT_RECORD(self._next)

    def _next(self, buffer, valid, record):
        return self.walker._next(buffer, valid, record)

    def cuptiActivityRegisterCallbacks(self, requested, completed):
        self.cb = (requested, completed)
        return 0

    def cuptiActivityEnable(self, kind):
        if self.error and kind == KERNEL:
            return self.error
        self.enabled.add(kind)
        self.log.append(("enable", kind))
        return 0

    def cuptiActivityDisable(self, kind):
        self.enabled.discard(kind)
        self.log.append(("disable", kind))
        return 0

    def cuptiActivityFlushAll(self, flag):
        self.log.append(("flush", flag))
        if not self.pending:
            return 0
        requested, completed = self.cb
        buf, size, most = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        requested(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(most))
        assert size.value == activity.BUFFER_BYTES and buf.value % 8 == 0
        raw = (ctypes.c_char * size.value).from_address(buf.value)
        self.walker = Buffer(self.layouts, self.pending, into=raw)
        self.pending = []
        completed(None, 0, buf.value, size.value, self.walker.valid)
        return 0


def fake_api(error=0):
    lays = layouts_from_cupti(fake_cupti())
    lib = FakeLib(lays, error)
    return ActivityApi(lib, fake_cupti()), lib


def test_a_session_records_one_graphs_work_and_leaves_tracing_off():
    api, lib = fake_api()
    got = []
    with api.session(got, 5):
        assert lib.enabled == {KERNEL, MEMCPY, MEMSET}
        lib.pending = ROWS  # what the replay makes CUPTI record
    assert got == [ActivityRecord(make_key(5, 0), 7, 100, 110, "kernel"),
                   ActivityRecord(make_key(5, 1), 7, 120, 121, "memset"),
                   ActivityRecord(make_key(5, 2), 145, 170, 190, "memcpy")]
    assert lib.enabled == set() and lib.log[3] == ("flush", 1)  # forced flush before disabling
    assert api._buffers == {}  # the buffer went back
    # a buffer completed after the session (CUPTI still holds our callbacks) is dropped
    lib.pending = ROWS
    lib.cuptiActivityFlushAll(1)
    assert len(got) == 3 and api._buffers == {}


def test_a_session_that_cannot_enable_kernels_defers_calibration_without_replaying():
    api, lib = fake_api(error=17)
    replays = []
    with pytest.raises(activity.CaptureError, match="could not start.*CUPTI error 17"):
        calibrate_replay(lambda: replays.append(1), lambda: None, 5, session=api.session, is_profiling=lambda: False)
    assert replays == [] and lib.enabled == set()


def test_calibrate_replay_through_a_session():
    api, lib = fake_api()
    table = calibrate_replay(lambda: setattr(lib, "pending", ROWS), lambda: None, 5, session=api.session,
                             is_profiling=lambda: False)
    assert table == {make_key(5, 0): (7, 0), make_key(5, 1): (7, 1), make_key(5, 2): (145, 0)}
