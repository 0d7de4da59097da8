"""``perfetto-graph-ann report``'s table view summarises (issue 33): per section a title line with
the row count and totals, the first rows in the section's order, a line saying how many were
left out; ``--all`` and ``--format csv / json`` give every row. Expected rows and totals are
computed in Python from the JSON (``sql_expect``) or from the full tables."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from support import sql_expect as X
from support import sql_synth
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.cli.report import (LINE_BUDGET, SECTIONS, SUMMARIES, default_rows, format_report,
                                           format_summary, with_groups)
from perfetto_graph_ann.cli.tables import format_duration
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.convert import convert


def _section(text: str, title: str) -> list:
    """The lines of the section whose title line starts with ``title``, title included."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    end = next((i for i in range(start, len(lines)) if lines[i] == ""), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A .pftrace of a 60,000-event synthetic trace (``benchmarks/synth.py``: eager and graphed
    work, NCCL collectives) and the merge of two copies of its JSON (two groups), with the
    number of rows of each full table."""
    from benchmarks.synth import write_trace

    tmp = tmp_path_factory.mktemp("big")
    src = write_trace(tmp / "big.json", 60_000)
    pf = tmp / "big.pftrace"
    convert(src, pf)
    merged = tmp / "merged.pftrace"
    assert main(["merge", str(src), str(src), "--label", "a", "--label", "b", "-o", str(merged), "-q"]) == 0
    counts = {}
    for t in (pf, merged):
        with open_trace(t, engine="portable") as s:
            counts[t] = {k: len(v) for k, v in with_groups(metrics.report(s), metrics.groups(s)).items()}
    return pf, merged, counts


@requires_portable
@pytest.mark.parametrize("columns", ["80", "100", "200"])
def test_default_report_of_a_big_trace_fits_the_line_budget(big, columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", columns)
    pf, merged, counts = big
    for t in (pf, merged):
        n = counts[t]
        assert n["replays"] > 100 and n["collectives"] > 100 and n["lane_top_kernels"] > 3
        assert main(["report", str(t), "--engine", "portable", "-q"]) == 0
        text = capsys.readouterr().out
        lines = text.splitlines()
        assert len(lines) <= LINE_BUDGET, text
        rows = default_rows(len(n))
        assert rows == (2 if t == merged else 3)
        for key, title in (("replays", "Graph replays (graph_ann_replay)"),
                           ("collectives", "Collectives (graph_ann_collective)"),
                           ("lane_top_kernels", "Top kernels per lane (graph_ann_lane_top_kernels)")):
            sec = _section(text, title)
            assert sec[0].startswith(f"{title}: {n[key]:,} rows"), sec[0]
            assert re.fullmatch(rf"  \({n[key] - rows:,} more; shown: [\w ]+; everything: --all or "
                                r"--format csv/json\)", sec[-1]), sec[-1]
            assert len(sec) == 1 + 2 + rows + 1
            assert all(len(ln) <= int(columns) for ln in sec[1:])  # the table fits the terminal
        if t == merged:  # the rows name their group
            assert f"Groups of the merged trace (graph_ann_group): 2 rows" in text
            assert all(ln.startswith(("a (rank", "b (rank")) for ln in _section(text, "Graph replays")[3:-1])


@requires_portable
def test_all_is_the_full_report_and_csv_json_have_every_row(big, capsys, monkeypatch):
    """--all prints what the report printed before it summarised (every row of every table);
    csv / json keep every row whatever --rows says."""
    monkeypatch.setenv("COLUMNS", "100")
    pf = big[0]
    with open_trace(pf, engine="portable") as s:
        full = with_groups(metrics.report(s, top=5), metrics.groups(s))
        start = s.query("SELECT start_ts FROM trace_bounds").tuples()[0][0]
    assert main(["report", str(pf), "--engine", "portable", "-q", "--all"]) == 0
    assert capsys.readouterr().out == f"{pf}\n\n" + format_report(full, "table", start, width=100)
    assert len(full["replays"]) > 100 and len(full["collectives"]) > 100
    assert main(["report", str(pf), "--engine", "portable", "-q", "--rows", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: len(v) for k, v in doc.items()} == {k: len(v) for k, v in full.items()}
    assert main(["report", str(pf), "--engine", "portable", "-q", "--rows", "2", "--format", "csv"]) == 0
    csv = capsys.readouterr().out
    for key, df in full.items():
        body = csv.split(f"# {key}\n", 1)[1].split("\n# ", 1)[0].strip("\n").splitlines()
        assert len(body) == 1 + len(df), key


@requires_portable
def test_summary_rows_and_totals_as_computed_from_the_json(tmp_path, capsys, monkeypatch):
    """The shown rows are the table's first in the section's order, the totals its sums, the
    left-out line the rest: all computed here from the JSON and the layout."""
    monkeypatch.setenv("COLUMNS", "200")
    src = tmp_path / "overlap.json"
    events, layout = sql_synth.overlap_trace(src)
    pf = tmp_path / "overlap.pftrace"
    convert(src, pf, layout=layout)
    assert main(["report", str(pf), "--engine", "portable", "-q", "--rows", "2"]) == 0
    text = capsys.readouterr().out
    replays = X.replay_table(events, layout)
    longest = sorted(replays.values(), key=lambda r: (-r["wall_dur"], r["ts"]))
    sec = _section(text, "Graph replays (graph_ann_replay)")
    assert sec[0] == f"Graph replays (graph_ann_replay): {len(replays)} rows, wall_dur " \
                     f"{format_duration(sum(r['wall_dur'] for r in replays.values()))} in all"
    shown = [re.split(r"\s{2,}", ln.strip()) for ln in sec[3:-1]]
    assert [int(r[1]) for r in shown] == [r["replay_index"] for r in longest[:2]]
    assert [r[3] for r in shown] == [format_duration(r["wall_dur"]) for r in longest[:2]]
    assert sec[-1] == f"  ({len(replays) - 2} more; shown: longest wall_dur; everything: --all or --format csv/json)"
    lanes = X.lane_table(events, layout)
    sec = _section(text, "Lanes (graph_ann_lane)")
    assert sec[0] == f"Lanes (graph_ann_lane): {len(lanes)} rows, work_count " \
                     f"{sum(r['work_count'] for r in lanes.values()):,}, busy_dur " \
                     f"{format_duration(sum(r['busy_dur'] for r in lanes.values()))} in all"
    busiest = sorted(lanes.items(), key=lambda kv: (-kv[1]["busy_dur"], kv[0]))[:2]
    assert [tuple(int(x) for x in re.split(r"\s{2,}", ln.strip())[:2]) for ln in sec[3:5]] == [k for k, _ in busiest]
    coll = X.collective_table(events, layout)
    sec = _section(text, "Collectives (graph_ann_collective)")
    assert sec[0] == f"Collectives (graph_ann_collective): {len(coll)} rows, dur " \
                     f"{format_duration(sum(c['dur'] for c in coll.values()))} in all"
    assert [re.split(r"\s{2,}", ln.strip())[5] for ln in sec[3:5]] == \
        [format_duration(d) for d in sorted((c["dur"] for c in coll.values()), reverse=True)[:2]]


def test_every_section_full_fits_the_budget_at_80_columns():
    """Whatever the trace holds, the default view of a merged trace with module scopes (nine
    sections, every one with more rows than shown) stays within the budget at 80 columns."""
    from perfetto_graph_ann.query.metrics import TopRows

    parts = {}

    rows = default_rows(len(SECTIONS))
    for key in SECTIONS:
        cols = SUMMARIES[key].columns
        df = pd.DataFrame([{c: (f"text {c} {i}" if c.endswith(("name", "path", "type", "label", "class"))
                                else 10_000 * (i + 1)) for c in cols} for i in range(rows)])
        parts[key] = TopRows(df, 1_000_000, {c: 123_456_789 for c in SUMMARIES[key].sums})
    text = "trace.pftrace\n\n" + format_summary(parts, None, width=80)
    lines = text.splitlines()
    assert len(lines) <= LINE_BUDGET, text
    assert sum(ln.startswith("  (999,99") for ln in lines) == len(SECTIONS)
    assert default_rows(7) == 3 and default_rows(8) == 2
