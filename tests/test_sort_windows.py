"""Sorting-window marks (``WriterConfig.sort_window_bytes``, what the SQL-only sessions of
``report`` and ``lanes`` get): the trace processor parses the stream as it comes instead of
all at the end, and every table is the same as without marks."""
from __future__ import annotations

import io

import pytest

from conftest import TRACES, fixture_capture, fixture_trace
from support.engine_support import requires_portable
from support.pftrace_decode import decode
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.join import join
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto
from perfetto_graph_ann.write.pftrace import ConvertConfig

#: Every table the converter fills, in a fixed order, with every column that could differ.
TABLES = {
    "slice": "SELECT id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id FROM slice ORDER BY id",
    "args": "SELECT arg_set_id, flat_key, key, int_value, string_value, real_value, value_type FROM args "
            "ORDER BY arg_set_id, key",
    "flow": "SELECT id, slice_out, slice_in FROM flow ORDER BY id",
    "track": "SELECT id, name, type FROM track ORDER BY id",
    "thread": "SELECT utid, tid, name, upid FROM thread ORDER BY utid",
    "process": "SELECT upid, pid, name FROM process ORDER BY upid",
    "counter": "SELECT id, ts, track_id, value FROM counter ORDER BY id",
    "bounds": "SELECT start_ts, end_ts FROM trace_bounds",
    "stats": "SELECT name, idx, value FROM stats WHERE value != 0 AND name NOT GLOB '*_duration_ns' ORDER BY name, idx",
    # the marks' own rows, the size, and the uuid the engine hashes from the first bytes
    "metadata": "SELECT name, int_value, str_value FROM metadata "
                "WHERE name NOT IN ('all_data_source_flushed_ns', 'trace_size_bytes', 'trace_uuid') ORDER BY name",
}


def _write(trace, layout, path, window):
    with open(path, "wb") as f:
        write_perfetto(trace, f, layout, WriterConfig(sort_window_bytes=window, progress=False, batch=16))


def _tables(path):
    with open_trace(path, engine="portable") as s:
        out = {k: s.query(q).tuples() for k, q in TABLES.items()}
        out["marks"] = s.query("SELECT COUNT(*) FROM metadata WHERE name = 'all_data_source_flushed_ns'").tuples()[0][0]
    return out


@requires_portable
@pytest.mark.parametrize("name", TRACES)
def test_every_table_is_the_same_with_marks(tmp_path, name):
    trace = read_trace(fixture_trace(name))
    layout = join(trace, read_capture_record(fixture_capture(name))) if name in ("seed_block_annotated", "two_branch") else None
    plain, marked = tmp_path / "plain.pftrace", tmp_path / "marked.pftrace"
    _write(trace, layout, plain, None)
    _write(trace, layout, marked, 512)  # small windows: many marks even in a small fixture
    a, b = _tables(plain), _tables(marked)
    assert a.pop("marks") == 0 and b.pop("marks") >= 6  # the marks were read: two rows each
    assert len(a["slice"]) > 20
    for k in TABLES:
        assert a[k] == b[k], k
    assert not [r for r in b["stats"] if "out_of_order" in r[0] or "sorter" in r[0]]


def test_a_mark_after_every_window_of_bytes(tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = read_trace(fixture_trace("two_branch"))
    plain, marked = io.BytesIO(), io.BytesIO()
    write_perfetto(trace, plain, None, WriterConfig(progress=False, batch=16))
    write_perfetto(trace, marked, None, WriterConfig(progress=False, batch=16, sort_window_bytes=1024))
    packets = pb.Trace.FromString(marked.getvalue()).packet
    events = [p for p in packets if not p.HasField("service_event")]
    # the same packets but the last, the completeness record, which counts the marks' bytes too
    assert [p.SerializeToString() for p in events][:-1] == \
        [p.SerializeToString() for p in pb.Trace.FromString(plain.getvalue()).packet][:-1]
    from perfetto_graph_ann.formats import END_SIZE, parse_end_record

    for data in (plain.getvalue(), marked.getvalue()):
        assert parse_end_record(data[-END_SIZE:]).bytes == len(data) - END_SIZE
    marks = [i for i, p in enumerate(packets) if p.HasField("service_event")]
    assert len(marks) % 3 == 0 and len(marks) >= 6
    for i in marks[::3]:  # flushed, flushed, buffers read: the order that ends a window
        se = [packets[i + k].service_event for k in range(3)]
        assert se[0].all_data_sources_flushed and se[1].all_data_sources_flushed and se[2].read_tracing_buffers_completed
    # the event bytes between two marks: at least the window, at most a batch (16 packets) more
    windows, size = [], 0
    for p in packets:
        if p.HasField("service_event"):
            if size:
                windows.append(size)
            size = 0
        else:
            size += len(pb.Trace(packet=[p]).SerializeToString())
    assert all(1024 <= w < 1024 + 16 * 512 for w in windows), windows
    # the file form has none
    path = tmp_path / "t.pftrace"
    from perfetto_graph_ann.write.pftrace import write_pftrace

    write_pftrace(trace, path)
    assert not [p for p in decode(path).packets if p.HasField("service_event")]
    assert ConvertConfig().writer_config().sort_window_bytes is None
