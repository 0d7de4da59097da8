"""A merged trace keeps its groups apart in every graph_ann table and CLI table (issue 32, item 1).

``merge A B --label eager --label graphed`` used to report one lane summing both inputs (the
README's own example: ``stream 7  16 kernels``, 6 eager + 10 graphed), and two copies of one
trace merged as A and B landed in one lane. Every table now has a ``group_id`` (the input's
position in the merged trace, named by ``graph_ann_group``) and no number mixes two groups.

Expectations: per group, ``sql_expect`` computes every table from that input's own JSON (its
times shifted by ``baseTimeNanoseconds - min(baseTimeNanoseconds)``, as merge aligns them)
and, for joined inputs, the join's layout; the projected scopes come from the join's ranges.
Nothing here is computed by the SQL or the writer.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
from collections import Counter
from decimal import Decimal
from typing import Any, Dict, List

import pytest
from support.sql_expect import check_row, isnull

from support import sql_expect as X
from support.engine_support import requires_portable
from support.join_expect import allreduce_annotations, fixture_capture, fixture_trace
from test_merge_tp import SHIFT_NS, _rank1_copy  # rank 1: allreduce_graph_rank0 shifted 1.5 s

from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.pipeline.merge import merge
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

REL = 1e-9


@dataclasses.dataclass
class Group:
    name: str  #: the group's track name
    rank: int
    label: Any
    events: List[Dict[str, Any]]  #: the input's events, times shifted as merge aligns them
    layout: Any
    shift: int  #: ns merge adds to the input's times


def _doc(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _shifted(path, shift_ns: int) -> List[Dict[str, Any]]:
    events = X.load_events(path)
    if shift_ns:
        d = Decimal(shift_ns) / 1000
        for e in events:
            if "ts" in e:
                e["ts"] = Decimal(str(e["ts"])) + d
    return events


def _case(tmp_path, name: str):
    """(merged trace, groups in group_id order)."""
    out = tmp_path / f"{name}.pftrace"
    if name == "eager_graphed":  # the README's example: one rank, eager and graphed, labelled
        srcs, labels, anns = [fixture_trace("allreduce_eager_rank0"), fixture_trace("allreduce_graph_rank0")], \
            ["eager", "graphed"], None
    elif name == "same_twice":  # two copies of one joined trace: every id repeats
        srcs, labels = [fixture_trace("seed_block_annotated")] * 2, ["A", "B"]
        anns = [read_capture_record(fixture_capture("seed_block_annotated"))] * 2
    else:  # two ranks on GPU 0 (two hosts), unlabelled, rank 1 1.5 s later
        srcs, labels = [fixture_trace("allreduce_graph_rank0"), _rank1_copy(tmp_path)], None
        anns = [allreduce_annotations()] * 2
    report = merge(srcs, out, anns, labels=labels)
    bases = [_doc(s).get("baseTimeNanoseconds", 0) for s in srcs]
    groups = []
    for i, (src, item) in enumerate(zip(srcs, report.inputs)):
        shift = bases[i] - min(bases)
        rank = item.rank
        label = labels[i] if labels else None
        title = f"Rank {rank}" if label is None else f"{label} (rank {rank})"
        groups.append(Group(title, rank, label, _shifted(src, shift), item.layout, shift))
    if labels is None:
        groups.sort(key=lambda g: g.rank)
    return out, groups


CASES = ["eager_graphed", "same_twice", "two_ranks_one_gpu"]


@pytest.fixture(scope="module", params=CASES)
def merged(request, tmp_path_factory):
    out, groups = _case(tmp_path_factory.mktemp(request.param), request.param)
    with open_trace(out, engine="portable") as s:
        yield request.param, out, groups, s


_isnull, _check = isnull, check_row  # shared with the other SQL tests (sql_expect)


def _by_group(df, *key):
    out: Dict[int, Dict] = {}
    for r in df.to_dict("records"):
        k = tuple(int(r[c]) if not isinstance(r[c], str) else r[c] for c in key)
        rows = out.setdefault(int(r["group_id"]), {})
        assert k not in rows, f"duplicate key {k} in group {r['group_id']}"
        rows[k if len(k) > 1 else k[0]] = r
    return out


def test_groups_are_named(merged):
    _, _, groups, s = merged
    df = metrics.groups(s)
    assert [(int(r["group_id"]), r["name"], int(r["rank"]), None if _isnull(r["label"]) else r["label"])
            for r in df.to_dict("records")] == [(i, g.name, g.rank, g.label) for i, g in enumerate(groups)]


def test_gpu_work_and_launches_per_group(merged):
    _, _, groups, s = merged
    df = metrics.gpu_work(s)
    got = Counter(int(g) for g in df["group_id"])
    assert got == {i: len(X.works(g.events, g.layout)) for i, g in enumerate(groups)}
    for i, g in enumerate(groups):
        lc = X.launches(g.events)
        mine = df[df["group_id"] == i]
        # each kernel's launch is its own group's call with its correlation (ids repeat across groups)
        for r in mine.to_dict("records"):
            la = lc.get(int(r["correlation"])) if not _isnull(r["correlation"]) else None
            if la is None:
                assert _isnull(r["launch_id"])
                continue
            row = s.query(f"SELECT ts, EXTRACT_ARG(arg_set_id, 'debug.rank'), EXTRACT_ARG(arg_set_id, 'debug.label') "
                          f"FROM slice WHERE id = {int(r['launch_id'])}").tuples()
            assert row == [(la.ts, g.rank, g.label)]
            assert bool(r["is_graphed"]) == (la.name in X.GRAPH_LAUNCHES)


def test_lanes_per_group(merged):
    _, _, groups, s = merged
    got = _by_group(metrics.lane_summary(s), "device", "lane_id")
    assert set(got) == set(range(len(groups)))
    for i, g in enumerate(groups):
        exp = X.lane_table(g.events, g.layout)
        assert set(got[i]) == set(exp)
        for key, e in exp.items():
            _check(got[i][key], e, f"group {i} lane {key}")


def test_top_kernels_per_group(merged):
    _, _, groups, s = merged
    got = _by_group(metrics.lane_top_kernels(s), "device", "lane_id", "name")
    for i, g in enumerate(groups):
        exp = X.top_kernels(g.events, g.layout)
        assert set(got.get(i, {})) == set(exp)
        for key, e in exp.items():
            _check(got[i][key], e, f"group {i} kernel {key}")


def test_replays_per_group(merged):
    _, _, groups, s = merged
    got = _by_group(metrics.replays(s), "correlation")
    lanes = _by_group(metrics.replay_lanes(s), "correlation", "lane_id")
    for i, g in enumerate(groups):
        exp = X.replay_table(g.events, g.layout)
        assert set(got.get(i, {})) == set(exp)
        for corr, e in exp.items():
            _check(got[i][corr], {k: v for k, v in e.items() if k != "lanes"}, f"group {i} replay {corr}")
            for lane, le in e["lanes"].items():
                _check(lanes[i][(corr, lane)], le, f"group {i} replay {corr} lane {lane}")


def test_collectives_per_group(merged):
    _, _, groups, s = merged
    df = metrics.collectives(s)
    got = _by_group(df, "ts", "lane_id")
    for i, g in enumerate(groups):
        exp = X.collective_table(g.events, g.layout)
        assert len(got.get(i, {})) == len(exp)
        for e in exp.values():
            _check(got[i][(e["ts"], e["lane_id"])], e, f"group {i} collective at {e['ts']}")


def test_overlap_per_group(merged):
    _, _, groups, s = merged
    got = _by_group(metrics.overlap(s), "device")
    for i, g in enumerate(groups):
        exp = X.overlap_table(g.events, g.layout)
        assert set(got[i]) == set(exp)
        for d, e in exp.items():
            _check(got[i][d], e, f"group {i} device {d}")


def test_lane_gaps_and_idle_per_group(merged):
    _, _, groups, s = merged
    gaps_df = metrics.lane_gaps(s)
    idle = _by_group(metrics.lane_idle(s), "device", "lane_id")
    for i, g in enumerate(groups):
        gaps = X.lane_gaps(g.events, g.layout)
        mine = gaps_df[gaps_df["group_id"] == i]
        got = sorted((int(r["device"]), int(r["lane_id"]), int(r["ts"]), int(r["ts"]) + int(r["dur"]))
                     for r in mine.to_dict("records"))
        assert got == sorted((d, lane, a, b) for (d, lane), gs in gaps.items() for a, b in gs)
        lanes = X.lane_table(g.events, g.layout)
        assert set(idle[i]) == set(lanes)
        for key, gs in gaps.items():
            span = lanes[key]["end_ts"] - lanes[key]["first_ts"]
            _check(idle[i][key], dict(span_dur=span, busy_dur=lanes[key]["busy_dur"], gap_count=len(gs)),
                   f"group {i} lane {key}")


def test_scopes_per_group(merged):
    """The projected replays and scopes (joined inputs): per group, the join's ranges."""
    case, _, groups, s = merged
    replays, instances = metrics.graph_replays(s), metrics.scope_instances(s)
    stats = metrics.scope_summary(s)
    for i, g in enumerate(groups):
        ranges = list(g.layout.ranges) if g.layout is not None and g.layout.ranges else []
        want_r = sorted((r.ts + g.shift, r.dur, r.name) for r in ranges if r.kind == "replay")
        want_s = sorted((r.ts + g.shift, r.dur, r.name) for r in ranges if r.kind != "replay")
        mine_r = replays[replays["group_id"] == i]
        mine_s = instances[instances["group_id"] == i]
        assert sorted(zip(mine_r["ts"].astype(int), mine_r["dur"].astype(int),
                          [f"{n} #{int(k)}" for n, k in zip(mine_r["graph_name"], mine_r["replay"])])) == want_r
        assert sorted(zip(mine_s["ts"].astype(int), mine_s["dur"].astype(int), mine_s["scope"])) == want_s
        # per scope: one instance per replay of the group (5), not 10 from two groups
        for r in stats[stats["group_id"] == i].to_dict("records"):
            assert int(r["instance_count"]) == len(want_r)
    if case == "same_twice":
        assert len(want_r) == 5 and len(stats) == 2 * 4


def test_merged_lanes_never_share_a_merge_key(merged):
    """The UI merges sibling tracks by their key: a lane's key names its group."""
    _, _, groups, s = merged
    rows = s.query("""
        SELECT t.id, EXTRACT_ARG(t.dimension_arg_set_id, 'merge_key_value') AS k,
               MIN(EXTRACT_ARG(sl.arg_set_id, 'debug.rank')) AS rank,
               MIN(EXTRACT_ARG(sl.arg_set_id, 'debug.label')) AS label
        FROM track AS t JOIN slice AS sl ON sl.track_id = t.id
        WHERE k GLOB 'graph_ann.lane:*' GROUP BY t.id""").tuples()
    assert rows
    index = {(g.rank, g.label): i for i, g in enumerate(groups)}
    for _, key, rank, label in rows:
        group, device, lane = key[len("graph_ann.lane:"):].split(":")
        assert int(group) == index[(rank, label)]
    by_key = Counter(k for _, k, _, _ in rows)
    groups_of_tracks = s.query("""
        SELECT COUNT(DISTINCT track_group_id) FROM track
        WHERE EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') GLOB 'graph_ann.lane:*'""").tuples()[0][0]
    assert groups_of_tracks == len(by_key)


def _run(argv, capsys):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_report_and_sql_tables_name_the_groups(tmp_path, capsys, monkeypatch):
    """The README's example through the CLI: the table shows a row per group, named."""
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "eg.pftrace"
    assert main(["merge", str(fixture_trace("allreduce_eager_rank0")), str(fixture_trace("allreduce_graph_rank0")),
                 "--label", "eager", "--label", "graphed", "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    eager = X.lane_table(X.load_events(fixture_trace("allreduce_eager_rank0")))
    graphed = X.lane_table(X.load_events(fixture_trace("allreduce_graph_rank0")))
    text = _run(["report", str(out), "--engine", "portable", "-q", "--all"], capsys)
    lanes = text.split("Lanes (graph_ann_lane)\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(lanes) == 2
    for line, name, exp in zip(lanes, ("eager (rank 0)", "graphed (rank 0)"), (eager, graphed)):
        assert re.split(r"\s{2,}", line)[:5] == [name, "0", "7", "stream 7", str(exp[(0, 7)]["work_count"])]
    assert "Groups of the merged trace" in text
    # csv: every table keeps group_id and the group's name, the groups table first
    csv = _run(["report", str(out), "--engine", "portable", "--format", "csv", "-q"], capsys)
    head = csv.split("# lane_summary\n", 1)[0].strip("\n").splitlines()
    assert head[0] == "# groups" and [ln.split(",")[:4] for ln in head[1:]] == [
        ["group_id", "name", "rank", "label"], ["0", "eager (rank 0)", "0", "eager"], ["1", "graphed (rank 0)", "0", "graphed"]]
    lane_csv = csv.split("# lane_summary\n", 1)[1].split("\n#", 1)[0].splitlines()
    assert lane_csv[0].startswith("group_id,group,device,lane_id,")
    assert [ln.split(",")[:2] + [ln.split(",")[6]] for ln in lane_csv[1:3]] == \
        [["0", "eager (rank 0)", str(eager[(0, 7)]["work_count"])], ["1", "graphed (rank 0)",
                                                                    str(graphed[(0, 7)]["work_count"])]]
    doc = json.loads(_run(["report", str(out), "--engine", "portable", "--format", "json", "-q"], capsys))
    assert [(r["group"], r["work_count"]) for r in doc["lane_summary"]] == \
        [("eager (rank 0)", eager[(0, 7)]["work_count"]), ("graphed (rank 0)", graphed[(0, 7)]["work_count"])]
    # sql: the tables are the SQL's own, with the group a column of every row
    csv = _run(["sql", str(out), "INCLUDE PERFETTO MODULE graph_ann.lanes; SELECT group_id, device, lane_id, "
                "work_count FROM graph_ann_lane ORDER BY group_id", "--engine", "portable", "--format", "csv",
                "-q"], capsys)
    assert csv == f"group_id,device,lane_id,work_count\n0,0,7,{eager[(0, 7)]['work_count']}\n" \
                  f"1,0,7,{graphed[(0, 7)]['work_count']}\n"


def test_a_single_trace_reads_as_before(tmp_path, capsys):
    """Not a merge: one group, 0, and the report shows no group column or table."""
    out = tmp_path / "one.pftrace"
    assert main(["convert", str(fixture_trace("allreduce_eager_rank0")), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    df = metrics.groups(out, engine="portable")
    assert [tuple(r) for r in df.itertuples(index=False)][0][:1] == (0,) and len(df) == 1
    text = _run(["report", str(out), "--engine", "portable", "-q"], capsys)
    assert not re.search(r"\bgroup\b|\bgroup_id\b|Groups of", text)
    csv = _run(["report", str(out), "--engine", "portable", "--format", "csv", "-q"], capsys)
    assert "group_id" not in csv and "# groups" not in csv


def test_fleet_refuses_a_merged_trace(tmp_path, capsys):
    out, _ = _case(tmp_path, "two_ranks_one_gpu")
    folder = tmp_path / "fleet"
    folder.mkdir()
    (folder / out.name).write_bytes(out.read_bytes())
    assert main(["fleet", str(folder), "--engine", "portable", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "merged trace of 2 groups (Rank 0, Rank 1)" in err and str(folder / out.name) in err
