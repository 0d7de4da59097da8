"""``perfetto-graph-ann report``: output formats, JSON input (converted and joined), errors."""
from __future__ import annotations

import json
import math

import pandas as pd

from support import sql_expect as X
from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.cli.report import format_report
from perfetto_graph_ann.formats import is_json_trace
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert


def _human_us(ns: int) -> str:
    """How the table prints a duration: 3 significant digits in s / ms / µs (written out here)."""
    value, unit = ns, "ns"
    for name, scale in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= scale:
            value, unit = ns / scale, name
            break
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f} {unit}"


def _four_digits(x: float) -> str:
    return f"{x:.{max(0, 3 - math.floor(math.log10(abs(x))))}f}"


def test_format_report_table_without_engine():
    tables = {
        "lane_summary": pd.DataFrame([dict(device=0, lane_id=61, lane_name="61 mlp", work_count=3, busy_dur=2500,
                                           utilization=0.25, replay_utilization=None, mean_dur=1000.0, p50_dur=900,
                                           p90_dur=1500, p99_dur=1500, max_dur=1500)]),
        "collectives": pd.DataFrame(columns=["device"]),
    }
    text = format_report(tables, width=200)
    assert "61 mlp" in text and "2.50 µs" in text and "25.0%" in text and "busy_dur" in text
    assert "1.00 µs" in text and "900 ns" in text  # mean_dur, p50_dur
    assert "Collectives (graph_ann_collective)\n  (none)" in text


def test_is_json_trace(tmp_path):
    assert is_json_trace(str(fixture_trace("two_branch")))
    p = tmp_path / "x.pftrace"
    p.write_bytes(b"\x0a\x02\x08\x01")
    assert not is_json_trace(str(p))


def test_missing_trace_exits_2(capsys, tmp_path):
    missing = tmp_path / "nope.pftrace"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file" in err


@requires_portable
def test_report_of_joined_json_trace(capsys):
    """JSON + capture record in, converted and joined on the fly; lane numbers as computed from the JSON."""
    src = fixture_trace("seed_block_annotated")
    cap = fixture_capture("seed_block_annotated")
    assert main(["report", str(src), "-a", str(cap), "--engine", "portable", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["lane_summary", "lane_top_kernels", "replays", "collectives", "overlap", "lane_idle", "scopes"]
    layout = join(read_trace(src), read_capture_record(cap), graph_lanes="all")
    exp = X.lane_table(X.load_events(src), layout)
    got = {(r["device"], r["lane_id"]): r for r in out["lane_summary"]}
    assert set(got) == set(exp)
    for key, e in exp.items():
        assert got[key]["busy_dur"] == e["busy_dur"] and got[key]["work_count"] == e["work_count"]
        assert got[key]["lane_name"] == e["lane_name"]
    assert len(out["replays"]) == 5
    assert all(r["rank"] <= 5 for r in out["lane_top_kernels"])


@requires_portable
def test_report_table_of_pftrace(tmp_path, capsys):
    src = fixture_trace("allreduce_eager_rank0")
    pf = tmp_path / "eager.pftrace"
    convert(src, pf)
    out_file = tmp_path / "report.txt"
    assert main(["report", str(pf), "--engine", "portable", "--top-kernels", "1", "--all", "-o",
                 str(out_file)]) == 0
    assert capsys.readouterr().out == f"wrote {out_file}\n"  # as every command that writes a file
    text = out_file.read_text()
    for title in ("Lanes (graph_ann_lane)", "Top kernels per lane", "Graph replays (graph_ann_replay)\n  (none)",
                  "Collectives (graph_ann_collective)", "Compute / communication overlap", "Idle gaps per lane"):
        assert title in text
    coll = X.collective_table(X.load_events(src))
    assert len(coll) == 3
    for c in coll.values():  # each NCCL kernel's duration (µs) and algbw (GB/s) as printed
        assert _human_us(c["dur"]) in text and _four_digits(c["algbw_gbps"]) in text


@requires_portable
def test_trace_without_gpu_work(tmp_path, capsys):
    """Every module runs on a trace with no GPU work at all and every table is empty."""
    src = tmp_path / "cpu_only.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 2.0, "dur": 1.0,
         "args": {"correlation": 3}}]}))
    assert main(["report", str(src), "--engine", "portable", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out and all(rows == [] for rows in out.values())


def test_protobuf_trace_whose_first_packet_is_123_bytes_is_not_json(tmp_path):
    """0x0A + length 0x7B reads as "\\n{": a .pftrace must never be sniffed as JSON."""
    import gzip as _gzip

    from perfetto_graph_ann.formats import is_json_trace

    packet = b"\x0a\x7b" + b"P\x80\x80\x04" + bytes(119)
    for name, data in [("a.pftrace", packet), ("noext", packet), ("noext2", b"\x0a[\x08\x01"),
                       ("b.pftrace.gz", _gzip.compress(packet))]:
        (tmp_path / name).write_bytes(data)
        assert not is_json_trace(str(tmp_path / name)), name
    for name, data in [("t.json", b"{}"), ("t2", b'\n{\n "traceEvents": []}'), ("t3", b"[{}]"),
                       ("t4.gz", _gzip.compress(b'  {"a": 1}'))]:
        (tmp_path / name).write_bytes(data)
        assert is_json_trace(str(tmp_path / name)), name
