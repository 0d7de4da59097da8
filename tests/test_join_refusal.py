"""Annotations that do not belong to the trace are refused (issue 15): another process's
capture identity, or annotations that match none of the trace's graph replays. Every
joining command exits 2 and writes nothing; --force-annotations / force=True joins anyway
and the summary says what was overridden. Structural labels cover whole replays only.

Expectations come from the fixture JSON (pids, device names, driver version, kernels per
replay) read with the json module, not from the code under test.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import types
from collections import Counter
from pathlib import Path

import pytest

from support.engine_support import requires_portable
from support.join_expect import (calibrated_expectation, fixture_capture, fixture_trace, kernels, launch_pids, load_json,
                         strip_calibration)
from perfetto_graph_ann.annotations.model import AnnotationSet, CaptureIdentity
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.files import save_annotations
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import AnnotationMismatchError
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.structural import REASON_COUNT, REASON_SIGNATURES, REASON_STREAMS
from perfetto_graph_ann.join.summary import summary_lines
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.read.model import TraceEvent

SEED, TWO = "seed_block_annotated", "two_branch"


def graphed(name: str) -> int:
    doc = load_json(name)
    launches = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("name") == "cudaGraphLaunch"}
    return sum(1 for _, e in kernels(doc) if e["args"]["correlation"] in launches)


def trace_facts(name: str):
    doc = load_json(name)
    (pid,) = launch_pids(name)
    names = {d["id"]: d["name"] for d in doc["deviceProperties"]}
    return pid, names, doc["cuda_driver_version"]


def sidecar(tmp_path: Path, name: str, file: str = "ann.pga", **identity) -> str:
    """The fixture's capture record as a version-2 sidecar with the given capture identity."""
    ann = read_capture_record(fixture_capture(name))
    if identity:
        ident = CaptureIdentity(**{k: types.MappingProxyType(v) if isinstance(v, dict) else v
                                   for k, v in identity.items()})
        ann = dataclasses.replace(ann, capture=ident)
    return save_annotations(tmp_path / file, ann)


def own_identity(name: str, **changes):
    pid, names, drv = trace_facts(name)
    fields = dict(host="h200-box", pid=pid, process_start_ns=1, device_names=names,
                  devices={i: f"GPU-{i:08d}" for i in names}, torch_version="2.11.0", cuda_driver_version=drv)
    fields.update(changes)
    return fields


def commands(trace: str, ann: str, out_dir: Path, extra=()):
    """Every CLI command that joins, with the file each would write."""
    out = out_dir / "out"
    return {
        "convert": (["convert", trace, "-a", ann, "-o", str(out) + ".pftrace", *extra], Path(str(out) + ".pftrace")),
        "convert-json": (["convert", trace, "-a", ann, "-o", str(out) + ".json", *extra], Path(str(out) + ".json")),
        "lanes": (["lanes", trace, "-a", ann, "--no-sql", *extra], None),
        "report": (["report", trace, "-a", ann, "-o", str(out) + ".txt", *extra], Path(str(out) + ".txt")),
        "merge": (["merge", trace, "-a", ann, "-o", str(out) + ".merged.pftrace", *extra],
                  Path(str(out) + ".merged.pftrace")),
        "sql": (["sql", trace, "SELECT 1 AS x", "-a", ann, "-o", str(out) + ".csv", "--format", "csv", *extra],
                Path(str(out) + ".csv")),
    }


@pytest.mark.parametrize("command", ["convert", "convert-json", "lanes", "report", "merge", "sql"])
def test_wrong_sidecar_exits_2_without_output(tmp_path, capsys, command):
    """The issue's case: the seed block's trace with the two-branch capture record (no identity)."""
    trace, ann = str(fixture_trace(SEED)), str(fixture_capture(TWO))
    argv, out = commands(trace, ann, tmp_path)[command]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert f"error: {ann}: " in cap.err and trace in cap.err and "--force-annotations" in cap.err
    assert f"({graphed(SEED)} GPU events)" in cap.err
    assert cap.out == ""
    assert list(tmp_path.iterdir()) == []
    assert out is None or not out.exists()


@pytest.mark.parametrize("command", ["convert", "lanes", "merge"])
def test_identity_mismatch_exits_2_naming_both_files_and_field(tmp_path, capsys, command):
    trace = str(fixture_trace(SEED))
    pid, _, _ = trace_facts(SEED)
    (tmp_path / "in").mkdir()
    (tmp_path / "o").mkdir()
    ann = sidecar(tmp_path / "in", SEED, **own_identity(SEED, pid=pid + 1))
    argv, out = commands(trace, ann, tmp_path / "o")[command]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert f"error: {ann}: " in cap.err and trace in cap.err
    assert f"pid: annotations {pid + 1}, trace {pid}" in cap.err
    assert cap.out == "" and list((tmp_path / "o").iterdir()) == []


@pytest.mark.parametrize("change,expect", [
    (lambda pid, names, drv: {"device_names": {0: "NVIDIA H100 80GB HBM3"}},
     lambda pid, names, drv: f"device 0: annotations 'NVIDIA H100 80GB HBM3', trace {names[0]!r}"),
    (lambda pid, names, drv: {"cuda_driver_version": drv - 10},
     lambda pid, names, drv: f"CUDA driver version: annotations {drv - 10}, trace {drv}"),
])
def test_identity_mismatch_per_field(tmp_path, change, expect):
    facts = trace_facts(SEED)
    ann = read_capture_record(fixture_capture(SEED))
    ident = own_identity(SEED, **change(*facts))
    ann = dataclasses.replace(ann, capture=CaptureIdentity(**{k: types.MappingProxyType(v) if isinstance(v, dict) else v
                                                               for k, v in ident.items()}))
    with pytest.raises(AnnotationMismatchError) as e:
        join(read_trace(fixture_trace(SEED)), ann)
    assert e.value.differences == (expect(*facts),)
    assert e.value.trace == str(fixture_trace(SEED))


def test_pid_of_a_process_that_launched_no_graph_is_refused(tmp_path):
    """The trace's pids are the processes that launched graphs; only a trace without any
    launch falls back to processes with CUDA runtime calls. Another process's runtime call in
    the trace (a data-loader worker, a second rank profiled into one file) does not make its
    pid the capturing one."""
    doc = load_json(SEED)
    (pid,) = launch_pids(SEED)
    other = pid + 1000
    runtime = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and e.get("name") != "cudaGraphLaunch")
    doc["traceEvents"].append(dict(runtime, pid=other, tid=other, args={"correlation": 10**9}))
    path = tmp_path / "two_processes.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    trace = read_trace(path)
    ann = read_capture_record(fixture_capture(SEED))

    def with_pid(p):
        ident = own_identity(SEED, pid=p)
        return dataclasses.replace(ann, capture=CaptureIdentity(**{
            k: types.MappingProxyType(v) if isinstance(v, dict) else v for k, v in ident.items()}))

    with pytest.raises(AnnotationMismatchError) as e:
        join(trace, with_pid(other))
    assert e.value.differences == (f"pid: annotations {other}, trace {pid}",)
    assert join(trace, with_pid(pid), "all").report.matched["calibrated"] == graphed(SEED)


@pytest.mark.parametrize("name", [SEED, TWO])
def test_right_sidecar_with_identity_joins_everything(tmp_path, capsys, name):
    ann = sidecar(tmp_path, name, "ann.json", **own_identity(name))
    out = tmp_path / "o.pftrace"
    assert main(["convert", str(fixture_trace(name)), "-a", ann, "-o", str(out)]) == 0
    n = graphed(name)
    assert n == {SEED: 70, TWO: 15}[name]
    assert capsys.readouterr().err.splitlines() == [
        f"join: {n}/{n} GPU events of graph replays matched ({n} calibrated) · 0 unmatched · annotations: ann.json"]
    layout = join(read_trace(fixture_trace(name)), read_capture_record(fixture_capture(name)))
    assert layout.report.matched["calibrated"] == n and layout.report.identity_missing == [str(fixture_capture(name))]


def test_right_capture_records_still_join_everything(capsys):
    for name, n in ((SEED, 70), (TWO, 15)):
        assert main(["lanes", str(fixture_trace(name)), "-a", str(fixture_capture(name)), "--no-sql"]) == 0
        err = capsys.readouterr().err.splitlines()
        assert err[0] == (f"join: {n}/{n} GPU events of graph replays matched ({n} calibrated) · 0 unmatched · "
                          f"annotations: {name}.capture.json")
        assert err[1].startswith(f"note: {name}.capture.json: no capture identity recorded") and len(err) == 2


def test_force_annotations_joins_and_reports_the_override(tmp_path, capsys):
    trace = str(fixture_trace(SEED))
    pid, _, _ = trace_facts(SEED)
    ann = sidecar(tmp_path, SEED, **own_identity(SEED, pid=pid + 7))
    out = tmp_path / "o.json"
    assert main(["convert", trace, "-a", ann, "-o", str(out), "--force-annotations", "--graph-lanes", "all"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("join: 70/70 GPU events of graph replays matched (70 calibrated)")
    assert err[1] == (f"warning: ann.pga was captured by another process than the trace's "
                      f"(pid: annotations {pid + 7}, trace {pid}); joined anyway (identity check overridden)")
    doc = json.loads(out.read_text())
    expect = calibrated_expectation(SEED)
    assert Counter(doc["traceEvents"][i]["args"]["stream"] for i in expect) == Counter(x["lane"] for x in expect.values())
    for command in ("lanes", "merge"):  # every joining command takes the option
        argv, _ = commands(trace, ann, tmp_path, ["--force-annotations"])[command]
        assert main(argv) == 0
        assert "identity check overridden" in capsys.readouterr().err


def test_force_in_python(tmp_path):
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.capture.export import export

    pid, _, _ = trace_facts(TWO)
    path = sidecar(tmp_path, TWO, **own_identity(TWO, pid=pid + 1))
    ann = load_annotations(path)
    trace = read_trace(fixture_trace(TWO))
    with pytest.raises(AnnotationMismatchError):
        join(trace, ann)
    layout = join(trace, ann, force=True)
    assert layout.report.identity_overridden == {path: [f"pid: annotations {pid + 1}, trace {pid}"]}
    assert layout.report.matched["calibrated"] == 15

    class Prof:
        def export_chrome_trace(self, p):
            Path(p).write_bytes(gzip.decompress(fixture_trace(TWO).read_bytes()))

    out = tmp_path / "x.json"
    with pytest.raises(AnnotationMismatchError):
        export(Prof(), out, annotations=path)
    assert not out.exists()
    assert export(Prof(), out, annotations=path, force=True).report.identity_overridden
    assert out.exists()


def test_no_match_force_in_python():
    trace = read_trace(fixture_trace(SEED))
    other = read_capture_record(fixture_capture(TWO))
    with pytest.raises(AnnotationMismatchError) as e:
        join(trace, other)
    assert e.value.path == str(fixture_capture(TWO)) and e.value.trace == str(fixture_trace(SEED))
    layout = join(trace, other, force=True)
    assert layout.report.no_match_overridden and sum(layout.report.matched.values()) == 0
    assert layout.report.unmatched == 70 and all("join" not in p.args for p in layout.placements.values())
    assert join(trace, AnnotationSet()).report.unmatched == 70  # nothing given in memory: no error


def test_merge_of_files_checks_each_identity(tmp_path, capsys):
    pid, _, _ = trace_facts(SEED)
    good = sidecar(tmp_path, SEED, "good.pga", **own_identity(SEED))
    bad = sidecar(tmp_path, TWO, "bad.pga", **own_identity(SEED, pid=pid + 3))
    out = tmp_path / "o.pftrace"
    assert main(["convert", str(fixture_trace(SEED)), "-a", good, "-a", bad, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}: " in err and f"pid: annotations {pid + 3}, trace {pid}" in err and not out.exists()


# ---- structural: whole replays only ----------------------------------------------------

TWO_DOC = load_json(TWO)


def replay_events():
    """correlation -> GPU event indices of each replay (from the JSON, by launch correlation)."""
    launches = {e["args"]["correlation"] for e in TWO_DOC["traceEvents"] if e.get("name") == "cudaGraphLaunch"}
    out = {}
    for i, e in kernels(TWO_DOC):
        if e["args"]["correlation"] in launches:
            out.setdefault(e["args"]["correlation"], []).append(i)
    return dict(sorted(out.items()))


def _structural_join(trace, ann=None):
    return join(trace, ann if ann is not None else strip_calibration(read_capture_record(fixture_capture(TWO))))


def _check_one_replay_unlabelled(layout, bad_corr, reason, bad_events):
    groups = replay_events()
    for corr, idx in groups.items():
        for i in idx:
            p = layout.placements.get(i)
            if corr == bad_corr:
                assert p is None or "join" not in p.args  # no label, default lane
            else:
                assert p.args["join"] == "structural"
    assert layout.report.unmatched_replays == {reason: 1}
    assert layout.report.unmatched_replay_events == {reason: bad_events}
    good = sum(len(v) for c, v in groups.items() if c != bad_corr)
    assert layout.report.matched == {"exact": 0, "calibrated": 0, "structural": good}


def test_replay_with_an_extra_kernel_stays_unlabelled():
    trace = read_trace(fixture_trace(TWO))
    corr, idx = next(iter(replay_events().items()))
    k = trace.events[idx[-1]]
    extra = TraceEvent(len(trace.events), "X", k.cat, k.name, k.pid, k.tid, k.end_ns + 1000, 1000, dict(k.args))
    layout = _structural_join(dataclasses.replace(trace, events=trace.events + [extra]))
    _check_one_replay_unlabelled(layout, corr, REASON_COUNT, len(idx) + 1)
    assert "join" not in layout.placements[extra.index].args


def test_replay_missing_a_kernel_stays_unlabelled():
    trace = read_trace(fixture_trace(TWO))
    corr, idx = list(replay_events().items())[2]
    cut = dataclasses.replace(trace, events=[e for e in trace.events if e.index != idx[0]])
    layout = _structural_join(cut)
    _check_one_replay_unlabelled(layout, corr, REASON_COUNT, len(idx) - 1)
    summary = "\n".join(summary_lines(layout.report))
    assert f"warning: 1 graph replay ({len(idx) - 1} GPU events) left unlabelled: {REASON_COUNT}" in summary


def test_replay_with_another_grid_stays_unlabelled():
    trace = read_trace(fixture_trace(TWO))
    corr, idx = list(replay_events().items())[1]
    changed = trace.events[idx[0]]
    args = dict(changed.args, grid=[g + 1 for g in changed.args["grid"]])
    events = list(trace.events)
    events[changed.index] = changed.replace(args=args)
    layout = _structural_join(dataclasses.replace(trace, events=events))
    _check_one_replay_unlabelled(layout, corr, REASON_SIGNATURES, len(idx))


def test_replay_on_other_streams_than_calibrated_stays_unlabelled():
    """A calibrated graph whose replay ran on streams the calibration never saw: no calibrated
    match (the stream is unknown) and no structural one (the streams disagree)."""
    trace = read_trace(fixture_trace(TWO))
    corr, idx = list(replay_events().items())[3]
    events = list(trace.events)
    for i in idx:
        events[i] = events[i].replace(args=dict(events[i].args, stream=events[i].args["stream"] + 1000))
    layout = join(dataclasses.replace(trace, events=events), read_capture_record(fixture_capture(TWO)))
    for i in idx:
        assert "join" not in layout.placements[i].args
    assert layout.report.unmatched_replays == {REASON_STREAMS: 1}
    assert layout.report.matched["calibrated"] == 15 - len(idx)


def test_calibration_note_is_reported_for_structural_graphs(capsys):
    ann = strip_calibration(read_capture_record(fixture_capture(TWO)))
    note = "every replay before export ran under torch.profiler (CUPTI busy)"
    ann = dataclasses.replace(ann, graphs=tuple(dataclasses.replace(g, calibration_note=note, name="two branch")
                                                for g in ann.graphs))
    layout = join(read_trace(fixture_trace(TWO)), ann)
    assert layout.report.calibration_notes == {"two branch": note}
    lines = summary_lines(layout.report)
    assert f"warning: two branch was matched structurally, without calibration: {note}" in lines
    # calibrated graphs carry no note into the report
    assert join(read_trace(fixture_trace(TWO)), read_capture_record(fixture_capture(TWO))).report.calibration_notes == {}


def test_quiet_convert_prints_nothing(tmp_path, capsys):
    assert main(["convert", str(fixture_trace(TWO)), "-a", str(fixture_capture(TWO)), "-o",
                 str(tmp_path / "q.pftrace"), "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == "" and (tmp_path / "q.pftrace").exists()


def test_summary_line_lists_strategies_and_ambiguity():
    from perfetto_graph_ann.join.model import JoinReport
    from perfetto_graph_ann.join.summary import summary_line

    r = JoinReport(total=30, graphed=20, matched={"exact": 2, "calibrated": 0, "structural": 15}, ambiguous=4,
                   unmatched=3, annotation_files=["/x/a.pga", "b.capture.json"])
    assert summary_line(r) == ("join: 17/20 GPU events of graph replays matched (2 exact, 15 structural) · "
                               "4 ambiguous · 3 unmatched · annotations: a.pga, b.capture.json")
    assert summary_line(JoinReport(total=9)) == "join: no GPU events launched by a graph in this trace (9 GPU events)"


@requires_portable
def test_sql_joins_a_json_trace_with_annotations(tmp_path, capsys):
    """``sql TRACE.json -a FILE`` queries the joined trace (as ``report`` does) and prints the
    same join summary; lanes come from the fixture's expectation."""
    expect = calibrated_expectation(TWO)
    query = ("SELECT EXTRACT_ARG(arg_set_id, 'debug.stream') AS lane, EXTRACT_ARG(arg_set_id, 'debug.join') AS j, "
             "count(*) AS n FROM slice WHERE EXTRACT_ARG(arg_set_id, 'debug.join') IS NOT NULL GROUP BY 1, 2 ORDER BY 1")
    out = tmp_path / "q.csv"
    assert main(["sql", str(fixture_trace(TWO)), query, "-a", str(fixture_capture(TWO)), "--format", "csv",
                 "-o", str(out), "--engine", "portable"]) == 0
    rows = [line.split(",") for line in out.read_text().splitlines()[1:]]
    assert {int(lane): int(n) for lane, j, n in rows} == dict(Counter(x["lane"] for x in expect.values()))
    assert {j for _, j, _ in rows} == {"calibrated"}
    assert capsys.readouterr().err.splitlines()[0] == (
        "join: 15/15 GPU events of graph replays matched (15 calibrated) · 0 unmatched · "
        "annotations: two_branch.capture.json")
