"""The smaller defects a newcomer hit (issue 17, point 6), one test each.

Expectations come from the files themselves (sizes on disk, gzip's own decompression, the
fixture JSON), never from the code under test."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from support.engine_support import requires_portable
from support.join_expect import fixture_capture, fixture_trace, kernels, load_json
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.query.engine.sql_errors import sql_error_line


def test_convert_to_gz_reports_the_compressed_size(tmp_path, capsys):
    out = tmp_path / "x.pftrace.gz"
    assert main(["convert", str(fixture_trace("two_branch")), "-o", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    on_disk = out.stat().st_size
    raw = len(gzip.decompress(out.read_bytes()))
    assert on_disk < raw
    assert f", {on_disk} bytes (gzip; {raw} uncompressed)" in printed, printed


def test_convert_plain_reports_the_file_size(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    assert main(["convert", str(fixture_trace("two_branch")), "-o", str(out), "--no-progress"]) == 0
    assert printed_size(capsys.readouterr().out) == out.stat().st_size


def printed_size(text: str) -> int:
    return int(re.search(r", (\d+) bytes$", text.strip().splitlines()[0]).group(1))


# The engine's text for `SELECT nope FROM slice` (trace processor v52), verbatim.
ENGINE_TRACEBACK = ('Traceback (most recent call last):\n  File "stdin" line 1 col 8\n'
                    '    SELECT nope FROM slice\n           ^\nno such column: nope\n')
MODULE_TRACEBACK = ('Traceback (most recent call last):\n  File "stdin" line 1 col 1\n'
                    '    INCLUDE PERFETTO MODULE p.broken\n    ^\n  File "p.broken" line 2 col 15\n'
                    '    SELECT * FROM missing_table\n                  ^\nno such table: missing_table\n')


def test_sql_error_text_becomes_one_line():
    line = sql_error_line(ENGINE_TRACEBACK, "SELECT nope FROM slice")
    assert line == "no such column: nope (line 1, column 8 of the query: SELECT nope FROM slice)"
    line = sql_error_line(MODULE_TRACEBACK, "INCLUDE PERFETTO MODULE p.broken;")
    assert line.startswith("no such table: missing_table (line 2, column 15 of module p.broken: ")
    assert sql_error_line("INCLUDE: unknown module 'x'", "INCLUDE PERFETTO MODULE x") == \
        "INCLUDE: unknown module 'x' (query: INCLUDE PERFETTO MODULE x)"


@requires_portable
def test_sql_cli_error_is_one_line_not_a_traceback(capsys):
    src = str(fixture_trace("two_branch"))
    assert main(["sql", src, "SELECT nope FROM slice", "--engine", "portable"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"perfetto-graph-ann sql: error: {src}: SQL error: no such column: nope")


@pytest.mark.parametrize("argv", [
    ["convert", "{missing}", "-o", "{tmp}/o.pftrace", "--no-progress"],
    ["lanes", "{missing}", "--no-sql"],
    ["report", "{missing}"],
    ["sql", "{missing}", "SELECT 1"],
    ["merge", "{missing}", "-o", "{tmp}/o.pftrace"],
    ["open", "{missing}", "--no-browser", "--timeout", "1"],
    ["convert", str(fixture_trace("two_branch")), "-a", "{missing}", "-o", "{tmp}/o.pftrace", "--no-progress"],
    ["lanes", str(fixture_trace("two_branch")), "-a", "{missing}", "--no-sql"],
])
def test_a_missing_file_reads_the_same_in_every_command(argv, tmp_path, capsys):
    missing = str(tmp_path / "nowhere.json")
    args = [a.format(missing=missing, tmp=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"error: {missing}: no such file" in err, err


def test_save_annotations_with_an_upper_case_json_name_writes_json(tmp_path):
    from perfetto_graph_ann.annotations.capture_record import read_capture_record
    from perfetto_graph_ann.annotations.files import load_annotations, save_annotations

    record = json.loads(fixture_capture("two_branch").read_text())
    annotations = read_capture_record(fixture_capture("two_branch"))
    for name in ("x.JSON", "y.Json.GZ"):
        out = tmp_path / name
        save_annotations(out, annotations)
        data = out.read_bytes()
        text = gzip.decompress(data) if name.lower().endswith(".gz") else data
        doc = json.loads(text)  # JSON, not the binary sidecar
        assert isinstance(doc, dict)
        back = load_annotations(out)
        assert sum(len(g.nodes) for g in back.graphs) == len(record["nodes"])


def test_lanes_without_annotations_hints_to_pass_them(capsys):
    src = fixture_trace("seed_block_graph")
    doc = load_json("seed_block_graph")
    launches = {e["args"]["correlation"] for e in doc["traceEvents"]
                if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaGraphLaunch")}
    graphed = sum(1 for _, e in kernels(doc) if e["args"]["correlation"] in launches)
    assert graphed > 0
    assert main(["lanes", str(src), "--no-sql"]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"hint: {graphed} graph-launched GPU events have no annotations to join; .*--annotations", err), err
    assert main(["lanes", str(src), "--no-sql", "-a", str(fixture_capture("seed_block_annotated"))]) == 0
    assert "hint:" not in capsys.readouterr().err


@requires_portable
def test_a_normal_run_leaves_nothing_in_the_temporary_folder(tmp_path):
    """convert, lanes, report (JSON in: converted to a temporary .pftrace) and sql, each in a
    process whose temporary folder is private: afterwards that folder is empty."""
    import os
    import subprocess
    import sys

    private = tmp_path / "tmp"
    private.mkdir()
    env = dict(os.environ, TMPDIR=str(private))
    src, cap = str(fixture_trace("seed_block_annotated")), str(fixture_capture("seed_block_annotated"))
    runs = [
        ["convert", src, "-a", cap, "-o", str(tmp_path / "o.pftrace")],
        ["lanes", src, "-a", cap, "--engine", "portable"],
        ["report", src, "-a", cap, "--engine", "portable"],
        ["sql", str(tmp_path / "o.pftrace"), "INCLUDE PERFETTO MODULE graph_ann.replays; SELECT * FROM graph_ann_replay",
         "--engine", "portable"],
    ]
    for argv in runs:
        r = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", *argv], env=env, capture_output=True,
                           text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, (argv, r.stderr)
        assert os.listdir(private) == [], (argv[0], os.listdir(private))


def test_export_of_a_saved_trace(tmp_path):
    """pga.export with a path (a trace saved by torch.profiler) instead of a live profiler:
    kernels per lane as the capture record's calibration says (computed from the JSON)."""
    from collections import Counter

    import perfetto_graph_ann as pga
    from support.join_expect import calibrated_expectation
    from support.pftrace_decode import decode

    name = "seed_block_annotated"
    out = tmp_path / "run.pftrace"
    layout = pga.export(str(fixture_trace(name)), out, annotations=fixture_capture(name), graph_lanes="all")
    assert layout.report.unmatched == 0
    got = Counter(s.args["stream"] for s in decode(out).slices if s.cat == "kernel")
    assert got == Counter(x["lane"] for x in calibrated_expectation(name).values())
    copy = tmp_path / "in.json.gz"
    copy.write_bytes(fixture_trace(name).read_bytes())
    from perfetto_graph_ann.errors import OutputError

    with pytest.raises(OutputError):
        pga.export(copy, copy, annotations=fixture_capture(name))
    assert copy.read_bytes() == fixture_trace(name).read_bytes()
