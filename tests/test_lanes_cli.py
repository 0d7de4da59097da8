"""``perfetto-graph-ann lanes``: the before/after table and the join report, from the fixtures."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from support.engine_support import requires_portable
from support.join_expect import calibrated_expectation, fixture_capture, fixture_trace, kernels, load_json
from perfetto_graph_ann.cli.main import main


def _rows(text):
    """lane -> (name, before, after) from the printed lane table."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(.+?)\s+(\d+)\s+(\d+)\s*$", line)
        if m:
            out[int(m.group(1))] = (m.group(2), int(m.group(3)), int(m.group(4)))
    return out


@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
def test_lanes_table_matches_expectation(capsys, name):
    rc = main(["lanes", str(fixture_trace(name)), "--annotations", str(fixture_capture(name)), "--no-sql"])
    assert rc == 0
    text = capsys.readouterr().out
    expect = calibrated_expectation(name)
    before = Counter(e["args"]["stream"] for _, e in kernels(load_json(name)))
    after = Counter(x["lane"] for x in expect.values())
    rows = _rows(text)
    assert set(rows) == set(before) | set(after)
    for lane, (_, b, a) in rows.items():
        assert (b, a) == (before.get(lane, 0), after.get(lane, 0))
    assert re.search(rf"matched calibrated\s+{len(expect)}\b", text)
    assert re.search(r"unmatched\s+0\b", text)


def test_lanes_without_annotations_all_unmatched(capsys):
    rc = main(["lanes", str(fixture_trace("two_branch")), "--no-sql"])
    assert rc == 0
    text = capsys.readouterr().out
    assert re.search(r"unmatched\s+15\b", text)
    assert _rows(text)[7][2] == 15  # everything graphed goes to the default lane


def test_lanes_bad_inputs_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["lanes", str(bad), "--no-sql"]) == 2
    assert str(bad) in capsys.readouterr().err
    assert main(["lanes", str(fixture_trace("two_branch")), "-a", str(tmp_path / "missing.json"), "--no-sql"]) == 2
    assert "missing.json" in capsys.readouterr().err


@requires_portable
def test_lanes_prints_sql_lane_summary(capsys):
    name = "seed_block_annotated"
    rc = main(["lanes", str(fixture_trace(name)), "-a", str(fixture_capture(name)), "--engine", "portable"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "SQL lane summary" in text
    sql_part = text.split("SQL lane summary", 1)[1]
    after = Counter(x["lane"] for x in calibrated_expectation(name).values())
    for lane, label in ((61, "61 mlp"), (62, "62 attention"), (7, "stream 7")):
        m = re.search(rf"^\s*0\s+{lane}\s+{label}\s+(\d+)\s", sql_part, re.M)
        assert m and int(m.group(1)) == after[lane]


def test_lanes_none_counts_annotated_lanes(capsys):
    name = "two_branch"
    assert main(["lanes", str(fixture_trace(name)), "-a", str(fixture_capture(name)), "--graph-lanes", "none", "--no-sql"]) == 0
    text = capsys.readouterr().out
    expect = calibrated_expectation(name)
    before = Counter(e["args"]["stream"] for _, e in kernels(load_json(name)))
    annotated = Counter(x["lane"] for x in expect.values())
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)))
    assert set(rows) == set(before) | set(annotated)
    for lane, (lname, b, a, ann) in rows.items():
        assert (b, a, ann) == (before.get(lane, 0), before.get(lane, 0), annotated.get(lane, 0))
    assert rows[60][0] == "60 left_projection" and rows[61][0] == "61 right_projection"


def test_lanes_runs_with_the_collector_paused_and_restores_it(capsys, monkeypatch):
    """The read trace lives for the whole command, so the collector is paused while it runs
    (it would walk the trace over and over) and on again afterwards, also after an error."""
    import gc

    import perfetto_graph_ann.read.kineto as kineto

    seen = []
    real = kineto.read_trace

    def spy(path):
        seen.append(gc.isenabled())
        return real(path)

    monkeypatch.setattr(kineto, "read_trace", spy)
    assert gc.isenabled()
    assert main(["lanes", str(fixture_trace("two_branch")), "--no-sql"]) == 0
    assert seen == [False] and gc.isenabled()
    assert main(["lanes", str(fixture_trace("two_branch")), "--annotations", "/nonexistent/a.capture.json",
                 "--no-sql"]) == 2
    assert gc.isenabled()
