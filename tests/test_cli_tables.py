"""Human tables (cli/tables.py) and the raw formats of `sql` / `report` (issue 17, point 5).

Unit checks use hand-written expectations; the CLI checks compare the table against
sql_expect's lane numbers computed from the fixture JSON, and the csv / json formats
against the exact integers."""
from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest

from support import sql_expect as X
from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.cli.tables import format_duration, render, shorten_middle
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

LONG_NAME = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_"
             "256x128_8x4_nn_align1::Params, std::array<char*, 2ul>, at::native::detail::Offset<17>)")


@pytest.mark.parametrize("ns,text", [(0, "0 ns"), (850, "850 ns"), (1_000, "1.00 µs"), (12_345, "12.3 µs"),
                                     (999_499, "999 µs"), (4_560_000, "4.56 ms"), (1_234_567_890, "1.23 s"),
                                     (-2_500, "-2.50 µs")])
def test_durations_read_in_their_unit(ns, text):
    assert format_duration(ns) == text


def test_long_names_keep_their_start_and_end():
    short = shorten_middle(LONG_NAME, 40)
    assert len(short) == 40 and short.startswith(LONG_NAME[:20]) and short.endswith(LONG_NAME[-19:])
    assert "…" in short
    assert shorten_middle("abc", 40) == "abc"


def test_table_fits_the_width_and_loses_no_column():
    df = pd.DataFrame([dict(device=0, lane_id=7, name=LONG_NAME, busy_dur=1_234_000, utilization=0.5,
                            first_ts=1_000_500_000, extra_a=1, extra_b=2.123456789, extra_c="x" * 30)] * 3)
    for width in (60, 80, 120):
        text = render(df, trace_start=1_000_000_000, width=width)
        assert max(len(line) for line in text.splitlines()) <= width, width
        for col in df.columns:
            title = "first_ts (from start)" if col == "first_ts" else col
            assert title in text, (width, col)
        assert "1.23 ms" in text and "50.0%" in text and "+500 µs" in text and "2.123" in text
        assert "5141861792739817" not in text


def test_nulls_and_booleans():
    df = pd.DataFrame({"a": [1, None], "flag": [True, False], "b": ["x", None]})
    text = render(df, width=80, null="NULL")
    assert "NULL" in text and "yes" in text and "no" in text


@requires_portable
def test_sql_table_is_readable_and_csv_json_are_exact(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    name = "seed_block_annotated"
    layout = join(read_trace(fixture_trace(name)), read_capture_record(fixture_capture(name)), graph_lanes="all")
    pf = tmp_path / "t.pftrace"
    convert(fixture_trace(name), pf, layout=layout)
    exp = X.lane_table(X.load_events(fixture_trace(name)), layout)
    sql = "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT * FROM graph_ann_lane ORDER BY lane_id"
    assert main(["sql", str(pf), sql, "--engine", "portable"]) == 0
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 100
    assert "(from start)" in table and not re.search(r"\d{12,}", table)  # no raw absolute ns
    for key, e in exp.items():
        assert e["lane_name"] in table
        assert _three_digits(e["busy_dur"]) in table
    assert main(["sql", str(pf), sql, "--engine", "portable", "--format", "csv"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert main(["sql", str(pf), sql, "--engine", "portable", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for frame in (csv, pd.DataFrame(rows)):
        got = {(r["device"], r["lane_id"]): r for r in frame.to_dict("records")}
        for key, e in exp.items():
            assert int(got[key]["busy_dur"]) == e["busy_dur"] and int(got[key]["first_ts"]) > 10**12


def _three_digits(ns: int) -> str:
    """ns written the way the table should show it (independent of cli/tables.py)."""
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= scale:
            v = ns / scale
            return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f} {unit}"
    return f"{ns} ns"


@requires_portable
def test_report_and_lanes_tables_fit_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    name = "seed_block_annotated"
    src, cap = str(fixture_trace(name)), str(fixture_capture(name))
    assert main(["report", src, "-a", cap, "--engine", "portable"]) == 0
    report = capsys.readouterr().out
    assert main(["lanes", src, "-a", cap, "--engine", "portable"]) == 0
    lanes = capsys.readouterr().out
    # report's first line names the trace: a path is shown whole (to be copied), however long
    # the checkout's path is; it is a title, not a table row, so it may wrap. Every table fits.
    title, report_tables = report.split("\n", 1)
    assert title == src
    for text in (report_tables, lanes.split("SQL lane summary", 1)[1]):
        assert max(len(line) for line in text.splitlines()) <= 90
        assert not re.search(r"\d{12,}", text)
        assert src not in text
    assert "…" in report  # kernel names shortened in the middle
