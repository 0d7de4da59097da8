"""Lane options that cannot mean anything are refused (issue 32, item 4), by one rule.

``--default-stream`` must be a lane id no annotation uses (62 would put the unannotated
kernels into the ``attention`` lane), ``--graph-lanes all`` needs annotated nodes (as torch
2.15 says), and both are refused with exit 2, one line naming the file, and no output.
The rule lives in ``join/lanes.py`` (``decide_graph_lanes``, ``check_default_stream``);
every entry point (the join itself, the CLI's commands, ``merge``, ``trace_handler``, the
fleet's workers) goes through it.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from conftest import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.errors import InputError, LaneOptionError
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace

PKG = Path(__file__).resolve().parents[1] / "perfetto_graph_ann"
SEED, CAP = str(fixture_trace("seed_block_annotated")), str(fixture_capture("seed_block_annotated"))


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def test_default_stream_of_an_annotated_lane_is_refused(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    assert main(["convert", SEED, "-a", CAP, "--default-stream", "62", "-o", str(out)]) == 2
    line = _error_line(capsys)
    assert f"error: {CAP}: " in line and "62" in line and "attention" in line and "pick a lane" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["-5", "4294967296", "seven"])
def test_default_stream_that_is_no_lane_id_is_refused(value, tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    with pytest.raises(SystemExit) as ei:
        main(["convert", SEED, "-a", CAP, "--default-stream", value, "-o", str(out)])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "argument --default-stream" in err and "is not a lane id" in err, err
    assert not out.exists()


def test_default_stream_without_annotations_is_refused(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    assert main(["convert", SEED, "--default-stream", "3", "-o", str(out)]) == 2
    assert f"error: {SEED}: --default-stream 3 applies only to a join" in _error_line(capsys)
    assert not out.exists()


def test_a_free_default_stream_still_works(tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    assert main(["convert", SEED, "-a", CAP, "--default-stream", "5", "-o", str(out)]) == 0
    assert out.stat().st_size > 0


@pytest.mark.parametrize("command", ["convert", "lanes", "report", "sql", "merge"])
def test_graph_lanes_all_without_annotations_is_refused(command, tmp_path, capsys):
    out = tmp_path / "x.pftrace"
    argv = {
        "convert": ["convert", SEED, "--graph-lanes", "all", "-o", str(out)],
        "lanes": ["lanes", SEED, "--graph-lanes", "all", "--no-sql"],
        "report": ["report", SEED, "--graph-lanes", "all", "-o", str(out)],
        "sql": ["sql", SEED, "SELECT 1", "--graph-lanes", "all", "-o", str(out)],
        "merge": ["merge", SEED, "--graph-lanes", "all", "-o", str(out)],
    }[command]
    assert main(argv) == 2
    line = _error_line(capsys)
    assert f"error: {SEED}: --graph-lanes all (graph_lanes='all') needs annotations" in line, line
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []


def _without_fields(path):
    ann = read_capture_record(path)
    return dataclasses.replace(ann, graphs=tuple(dataclasses.replace(g, nodes=tuple(
        dataclasses.replace(n, annotation={}) for n in g.nodes), lanes={}) for g in ann.graphs), lanes={})


def test_the_join_refuses_the_same_in_python():
    trace = read_trace(SEED)
    ann = read_capture_record(CAP)
    with pytest.raises(LaneOptionError, match="is the lane '62 attention'") as ei:
        join(trace, ann, "all", default_stream=62)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, InputError)  # as before, and exit 2 in the CLI
    with pytest.raises(ValueError, match="not a lane id"):
        join(trace, ann, "none", default_stream=-5)
    with pytest.raises(ValueError, match="graph_lanes='all' needs annotations"):
        join(trace, _without_fields(CAP), "all")
    assert join(trace, _without_fields(CAP), None).graph_lanes == "none"  # None: the lanes where there are any
    assert join(trace, ann, None).graph_lanes == "all"
    assert join(trace, ann, "all", default_stream=7).graph_lanes == "all"  # torch's 7 is always fine


def test_merge_and_the_handler_follow_the_same_rule(tmp_path):
    from perfetto_graph_ann.pipeline.merge import merge

    bare = _without_fields(CAP)
    out = tmp_path / "m.pftrace"
    # default: the rank whose annotations name nothing keeps its streams (as before)
    report = merge([SEED], out, [bare])
    assert report.inputs[0].layout.graph_lanes == "none"
    # asked for explicitly, "all" is refused for that rank, as by every other entry point
    with pytest.raises(LaneOptionError, match="graph_lanes='all' needs annotations"):
        merge([SEED], tmp_path / "n.pftrace", [bare], graph_lanes="all")
    assert not (tmp_path / "n.pftrace").exists()


def test_one_definition_of_the_rule():
    """No module but join/lanes.py decides graph_lanes from whether nodes are annotated:
    ``has_annotated_nodes`` is called nowhere else (it was in pipeline/convert.py,
    pipeline/merge.py and capture/handler.py, each with its own fallback)."""
    callers = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "has_annotated_nodes":
                callers.append(str(path.relative_to(PKG)))
    assert sorted(set(callers)) == ["join/lanes.py"], callers


def test_trace_handler_defaults_to_the_rule_and_keeps_its_old_all():
    """trace_handler's default is the rule's None (the lanes where a node is annotated, the
    streams of a cycle whose annotations name nothing); its old default "all", which meant
    exactly that there, still does, with a DeprecationWarning (a training loop must not start
    raising), where every other entry point refuses "all" without annotated nodes."""
    import inspect

    from perfetto_graph_ann.capture.handler import trace_handler

    assert inspect.signature(trace_handler).parameters["graph_lanes"].default is None
    with pytest.warns(DeprecationWarning, match="graph_lanes=None"):
        trace_handler(str(Path("unused")), graph_lanes="all")
