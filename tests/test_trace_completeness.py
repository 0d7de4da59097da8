"""A trace that did not load whole is refused, with the numbers (issue 32, item 2).

The demo's ``seed_block.annotated.pftrace`` cut to its first 5,000 bytes used to load with 4 of
its 70 kernels, and ``report`` / ``sql`` exited 0. Every ``.pftrace`` we write now opens with
a start mark and ends with a completeness record (bytes, packets, slices before it); a file
of ours whose record is missing or disagrees, a gzip stream that ends early, or import stats
of severity data_loss / error are refused: one line naming the file and the numbers, exit 2,
no output. Expected numbers are read from the files themselves (sizes, packet framing) and
from the trace processor, not from the writer's own counters.
"""
from __future__ import annotations

import gzip
import json
import struct

import pytest

from support.engine_support import requires_portable
from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann import errors
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

CUT = 5_000


def _packets(data: bytes):
    """(start, end) of each framed packet (``Trace.packet``, field 1: tag, length, payload),
    read by hand."""
    out, i = [], 0
    while i < len(data):
        assert data[i] == 0x0A, i
        start = i
        i += 1
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        i += n
        out.append((start, i))
    assert i == len(data)
    return out


@pytest.fixture(scope="module")
def seed_block(tmp_path_factory):
    """The demo's seed_block.annotated.pftrace (the recording, joined to its capture record)."""
    out = tmp_path_factory.mktemp("complete") / "seed_block.annotated.pftrace"
    assert main(["convert", str(fixture_trace("seed_block_annotated")), "-a",
                 str(fixture_capture("seed_block_annotated")), "-o", str(out), "-q"]) == 0
    return out


def test_our_trace_records_what_was_written(seed_block, tmp_path):
    from perfetto_graph_ann.formats import END_SIZE, START, parse_end_record

    data = seed_block.read_bytes()
    assert data.startswith(START)
    record = parse_end_record(data[-END_SIZE:])
    framed = _packets(data)
    assert record is not None and record.bytes == len(data) - END_SIZE
    assert record.packets == len(framed) - 1  # every packet before the record
    assert framed[-1] == (len(data) - END_SIZE, len(data))
    with open_trace(seed_block, engine="portable") as s:
        assert s.query("SELECT COUNT(*) AS n FROM slice").tuples() == [(record.slices,)]
        # 70 kernels, as in the JSON: the marks change nothing the trace processor reads
        assert s.query("SELECT COUNT(*) FROM slice WHERE category = 'kernel'").tuples() == [(70,)]
        assert s.query("SELECT COUNT(*) FROM stats WHERE severity IN ('data_loss', 'error') AND value > 0"
                       ).tuples() == [(0,)]


def _refused(capsys, argv, path, *needles):
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 2, (rc, cap.err)
    assert cap.out == ""
    line = cap.err.strip()
    assert len(line.splitlines()) == 1 and f": {path}: incomplete trace" in line, line
    for n in needles:
        assert n in line, (n, line)
    return line


def test_a_cut_trace_is_refused_by_report_and_sql(seed_block, tmp_path, capsys):
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(seed_block.read_bytes()[:CUT])
    out = tmp_path / "report.txt"
    _refused(capsys, ["report", str(cut), "--engine", "portable", "-q", "-o", str(out)], cut, "5,000 bytes")
    assert not out.exists()
    _refused(capsys, ["sql", str(cut), "SELECT COUNT(*) FROM slice", "--engine", "portable", "-q"], cut, "5,000 bytes")
    with pytest.raises(errors.IncompleteTraceError, match="5,000 bytes"):
        open_trace(cut, engine="portable")
    # the opt-out loads whatever is there (what every command did before)
    with open_trace(cut, engine="portable", config=EngineConfig(check_complete=False)) as s:  # type: ignore[call-arg]
        assert s.query("SELECT COUNT(*) FROM slice WHERE category = 'kernel'").tuples()[0][0] < 70


def test_a_trace_cut_between_two_packets_is_refused(seed_block, tmp_path, capsys):
    data = seed_block.read_bytes()
    _, end = _packets(data)[-3]  # a cut that leaves whole packets only
    cut = tmp_path / "boundary.pftrace"
    cut.write_bytes(data[:end])
    _refused(capsys, ["sql", str(cut), "SELECT 1", "--engine", "portable", "-q"], cut, f"{end:,} bytes")


def test_a_gzip_trace_cut_inside_is_refused(seed_block, tmp_path, capsys):
    data = seed_block.read_bytes()
    whole = tmp_path / "whole.pftrace.gz"
    whole.write_bytes(gzip.compress(data))
    assert main(["sql", str(whole), "SELECT 1", "--engine", "portable", "-q"]) == 0
    capsys.readouterr()
    cut = tmp_path / "cut.pftrace.gz"  # the content cut, the gzip stream itself whole
    cut.write_bytes(gzip.compress(data[:CUT]))
    _refused(capsys, ["sql", str(cut), "SELECT 1", "--engine", "portable", "-q"], cut, "5,000 bytes")


def test_a_record_that_disagrees_is_refused(seed_block, tmp_path, capsys):
    from perfetto_graph_ann.formats import END_SIZE, parse_end_record

    data = bytearray(seed_block.read_bytes())
    record = parse_end_record(bytes(data[-END_SIZE:]))
    # bytes: the file lost a packet in the middle but kept its record
    start, end = _packets(bytes(data))[5]
    shorter = tmp_path / "shorter.pftrace"
    shorter.write_bytes(bytes(data[:start]) + bytes(data[end:]))
    _refused(capsys, ["sql", str(shorter), "SELECT 1", "--engine", "portable", "-q"], shorter,
             f"{record.bytes + END_SIZE:,} bytes were written", f"{len(data) - (end - start):,} bytes")
    # slices: the record promises one slice more than the trace processor finds
    fields = data[-24:]
    assert struct.unpack("<BQ", fields[-9:])[1] == record.slices
    data[-8:] = struct.pack("<Q", record.slices + 1)
    more = tmp_path / "more.pftrace"
    more.write_bytes(bytes(data))
    _refused(capsys, ["sql", str(more), "SELECT 1", "--engine", "portable", "-q"], more,
             f"read {record.slices:,} of the {record.slices + 1:,} slices")


def test_a_trace_without_our_marks_is_read_as_foreign(seed_block, tmp_path, capsys):
    """Another writer's trace (here: ours with the marks taken off) has no record to check:
    only the import stats are."""
    from perfetto_graph_ann.formats import END_SIZE, START_SIZE

    data = seed_block.read_bytes()
    plain = tmp_path / "plain.pftrace"
    plain.write_bytes(data[START_SIZE:-END_SIZE])
    assert main(["sql", str(plain), "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'", "--engine",
                 "portable", "--format", "csv", "-q"]) == 0
    assert capsys.readouterr().out == "n\n70\n"


def test_import_stats_with_data_loss_are_refused(tmp_path, capsys):
    """Perfetto's JSON importer drops a complete event overlapping another on its thread
    (stat slice_drop_overlapping_complete_event, severity error)."""
    src = tmp_path / "overlap.json"
    src.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10}]}))
    line = _refused(capsys, ["sql", str(src), "SELECT COUNT(*) FROM slice", "--engine", "portable", "-q"], src,
                    "slice_drop_overlapping_complete_event = 1 (error)")
    assert "convert" in line


def test_merged_trace_records_every_rank(tmp_path):
    from perfetto_graph_ann.formats import END_SIZE, START, parse_end_record

    out = tmp_path / "eg.pftrace"
    assert main(["merge", str(fixture_trace("allreduce_eager_rank0")), str(fixture_trace("allreduce_graph_rank0")),
                 "--label", "eager", "--label", "graphed", "-o", str(out), "-q"]) == 0
    data = out.read_bytes()
    record = parse_end_record(data[-END_SIZE:])
    assert data.startswith(START) and data.count(START) == 1  # the ranks' own marks are left out
    assert record is not None and record.bytes == len(data) - END_SIZE
    assert record.packets == len(_packets(data)) - 1
    with open_trace(out, engine="portable") as s:
        assert s.query("SELECT COUNT(*) FROM slice").tuples() == [(record.slices,)]


def test_our_pftrace_is_recognised_as_a_trace_by_its_start_mark(tmp_path, capsys):
    """``open`` (which hands the file to the UI unread) and every sniffer take a .pftrace of ours,
    whose first packet is the start mark (printable text: no control byte in its first 64)."""
    from perfetto_graph_ann.formats import START, is_pftrace_bytes, sniff_trace

    out = tmp_path / "seed.pftrace"
    assert main(["convert", str(fixture_trace("seed_block_annotated")), "-a",
                 str(fixture_capture("seed_block_annotated")), "-o", str(out), "-q"]) == 0
    data = out.read_bytes()
    assert data.startswith(START) and is_pftrace_bytes(data)
    assert sniff_trace(out) == "protobuf"
    gz = tmp_path / "seed.pftrace.gz"
    gz.write_bytes(gzip.compress(data))
    assert sniff_trace(gz) == "protobuf"
