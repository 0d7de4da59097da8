"""The CLI as a daily user drives it: outputs that would replace an input, and argument values
that make no sense, are refused with exit 2 and one line naming the file or option; nothing
is written or overwritten."""
from __future__ import annotations

import hashlib
import os
import re
import shutil

import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _no_temp_files(folder) -> bool:
    return not [p for p in os.listdir(folder) if p.startswith(".pga-tmp-")]


@pytest.fixture
def trace(tmp_path):
    """A copy of a real H200 trace (annotated seed block) and its capture record."""
    src = tmp_path / "run.json.gz"
    shutil.copyfile(fixture_trace("seed_block_annotated"), src)
    ann = tmp_path / "run.capture.json"
    shutil.copyfile(fixture_capture("seed_block_annotated"), ann)
    return src, ann


@pytest.mark.parametrize("target", ["trace", "annotations", "link"])
def test_convert_refuses_to_overwrite_an_input(trace, tmp_path, capsys, target):
    src, ann = trace
    before = {p: _digest(p) for p in (src, ann)}
    if target == "link":  # another name for the same file is the same file
        out = tmp_path / "other_name.json.gz"
        os.link(src, out)
    else:
        out = src if target == "trace" else ann
    rc = main(["convert", str(src), "--annotations", str(ann), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"perfetto-graph-ann convert: error: {out}: ") and err.count("\n") == 1
    assert "input" in err
    assert {p: _digest(p) for p in (src, ann)} == before
    assert _no_temp_files(tmp_path)


def test_merge_refuses_to_overwrite_an_input(trace, tmp_path, capsys):
    src, ann = trace
    before = _digest(src)
    assert main(["merge", str(src), "-a", str(ann), "-o", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann merge: error: {src}: ") and "input" in err
    assert _digest(src) == before
    assert main(["merge", str(src), "-a", str(ann), "-o", str(ann)]) == 2
    assert _digest(ann) == _digest(fixture_capture("seed_block_annotated"))
    assert _no_temp_files(tmp_path)


@pytest.mark.parametrize("name", ["all.json", "all.json.gz", "ALL.JSON"])
def test_merge_refuses_a_json_output_name(trace, tmp_path, capsys, name):
    """merge writes a protobuf trace; under a .json name every tool (this one's `report`
    included) would take it for JSON and fail on it."""
    src, _ = trace
    out = tmp_path / name
    assert main(["merge", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann merge: error: {out}: ") and ".pftrace" in err
    assert not out.exists() and _no_temp_files(tmp_path)


@requires_portable
def test_report_and_sql_refuse_to_overwrite_the_trace(trace, tmp_path, capsys):
    src, ann = trace
    pftrace = tmp_path / "run.pftrace"
    assert main(["convert", str(src), "--annotations", str(ann), "-o", str(pftrace), "-q"]) == 0
    before = _digest(pftrace)
    assert main(["report", str(pftrace), "-o", str(pftrace)]) == 2
    assert capsys.readouterr().err.startswith(f"perfetto-graph-ann report: error: {pftrace}: ")
    assert main(["report", str(src), "-a", str(ann), "-o", str(ann)]) == 2
    assert capsys.readouterr().err.startswith(f"perfetto-graph-ann report: error: {ann}: ")
    assert main(["sql", str(pftrace), "SELECT 1 AS x", "-o", str(pftrace)]) == 2
    assert capsys.readouterr().err.startswith(f"perfetto-graph-ann sql: error: {pftrace}: ")
    assert _digest(pftrace) == before
    assert _digest(ann) == _digest(fixture_capture("seed_block_annotated"))
    assert _no_temp_files(tmp_path)


def test_demo_replays_below_one_exits_2(tmp_path, capsys):
    out = tmp_path / "d"
    assert _exit_code(["demo", "--out", str(out), "--shipped", "--no-sql", "--replays", "0"]) == 2
    assert "--replays" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_sql_and_open_timeouts_must_be_positive(trace, capsys, value):
    src, _ = trace
    assert _exit_code(["sql", str(src), "SELECT 1", f"--timeout={value}"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert _exit_code(["open", str(src), "--no-browser", f"--timeout={value}"]) == 2
    assert "--timeout" in capsys.readouterr().err


def _exit_code(argv) -> int:
    """main's return value, or the status argparse exits with for a bad option value."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


@pytest.mark.parametrize("sql", [False, pytest.param(True, marks=requires_portable)])
def test_lanes_of_a_trace_without_gpu_work_says_so(tmp_path, capsys, sql):
    """A CPU-only trace: no pandas 'Empty DataFrame / Columns: [...] / Index: []' dumps."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(fixture_trace("seed_block_eager").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    assert doc["traceEvents"]
    src = tmp_path / "cpu_only.json"
    src.write_text(json.dumps(doc))
    assert main(["lanes", str(src)] + ([] if sql else ["--no-sql"])) == 0
    out = capsys.readouterr().out
    assert "Empty DataFrame" not in out and "Index: []" not in out
    assert out.count("no GPU work") == (2 if sql else 1)


@pytest.mark.parametrize("command", ["report", "lanes", "convert", "merge", "sql", "open"])
def test_a_directory_as_trace_is_one_clear_line(tmp_path, capsys, command):
    folder = tmp_path / "traces"
    folder.mkdir()
    extra = {"convert": ["-o", str(tmp_path / "x.pftrace")], "merge": ["-o", str(tmp_path / "x.pftrace")],
             "sql": ["SELECT 1"], "open": ["--no-browser", "--timeout", "1"]}.get(command, [])
    assert main([command, str(folder)] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann {command}: error: {folder}: ") and err.count("\n") == 1
    assert err.count(str(folder)) == 1 and "Errno" not in err
    assert os.listdir(tmp_path) == ["traces"]


def test_errors_about_a_converted_json_trace_name_the_json_not_a_temp_file(trace, capsys, monkeypatch):
    """report / lanes convert a JSON trace to a temporary .pftrace first; an engine problem
    must still name the user's file (before: /tmp/pga-session-*/trace.pftrace)."""
    src, ann = trace
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "0")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_TP_SHELL", str(src.parent / "no_such_shell"))
    assert main(["report", str(src), "-a", str(ann), "--engine", "native"]) == 2
    err = capsys.readouterr().err
    # report starts the engine before it reads the JSON: the missing engine is said at once,
    # before any reading or joining, and names the user's file
    assert "join: " not in err
    assert err.startswith(f"perfetto-graph-ann report: error: {src}: ") and "pga-session-" not in err
    assert main(["lanes", str(src), "-a", str(ann), "--engine", "native"]) == 0
    out = capsys.readouterr().out
    assert f"(SQL lane summary skipped: {src}: " in out and "pga-session-" not in out


@requires_portable
def test_session_of_a_converted_trace_is_named_after_the_source(trace):
    from perfetto_graph_ann.errors import QueryError
    from perfetto_graph_ann.pipeline.query import open_converted
    from perfetto_graph_ann.read.kineto import read_trace

    src, _ = trace
    with pytest.raises(QueryError) as info:
        with open_converted(read_trace(src), engine="portable") as s:
            assert str(s.path) == str(src)
            s.query("SELECT no_such_column FROM slice")
    assert str(info.value).startswith(f"{src}: ") and "pga-session-" not in str(info.value)


def _run_cli(args, env_extra, cwd):
    import subprocess
    import sys

    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "perfetto_graph_ann", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_file_name_that_is_not_utf8_does_not_crash_a_strict_terminal(tmp_path):
    """Linux file names are bytes; with a UTF-8 locale Python's stdout is strict, so printing
    'wrote <name>' raised UnicodeEncodeError (a traceback, exit 1) after the file was written."""
    src = os.fsdecode(b"run\xff.json.gz")
    out = os.fsdecode(b"out\xff.pftrace")
    shutil.copyfile(fixture_trace("two_branch"), tmp_path / src)
    r = _run_cli(["convert", src, "-o", out], {"PYTHONIOENCODING": "utf-8"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert b"Traceback" not in r.stderr and r.stdout.startswith(b"wrote out")
    assert (tmp_path / out).read_bytes()[:1] == b"\x0a"
    r = _run_cli(["convert", src, "-o", "nodir/x.pftrace"], {"PYTHONIOENCODING": "utf-8"}, tmp_path)
    assert r.returncode == 2 and b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1


@requires_portable
def test_report_on_an_ascii_terminal_does_not_crash(trace, tmp_path):
    """The table's durations say µs: an ASCII stdout (LANG=C without UTF-8 coercion, or
    PYTHONIOENCODING=ascii) raised UnicodeEncodeError; the report file itself stays UTF-8."""
    src, ann = trace
    r = _run_cli(["report", str(src), "-a", str(ann)], {"PYTHONIOENCODING": "ascii"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert b"Lanes (graph_ann_lane)" in r.stdout and re.search(rb" \\xb5s\b", r.stdout)
    r = _run_cli(["report", str(src), "-a", str(ann), "-o", "r.txt"], {"PYTHONIOENCODING": "ascii"}, tmp_path)
    assert r.returncode == 0 and re.search(r"\d µs\b", (tmp_path / "r.txt").read_text(encoding="utf-8"))


def _graphed_kernels(name) -> int:
    """GPU work launched by a cudaGraphLaunch, counted straight from the fixture JSON."""
    import gzip
    import json

    events = json.loads(gzip.decompress(fixture_trace(name).read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    return sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and e["args"].get("correlation") in launches)


def test_annotations_that_match_nothing_are_refused(tmp_path, capsys):
    """A sidecar saved before the capture (no graphs), or one from another run: the join used
    to leave every graphed kernel unplaced (or label a few structurally) with exit 0; now it is
    an error naming both files, and nothing is written, unless --force-annotations."""
    from perfetto_graph_ann.annotations.model import AnnotationSet
    from perfetto_graph_ann.annotations.files import save_annotations

    empty = save_annotations(tmp_path / "empty.json", AnnotationSet())
    src = fixture_trace("two_branch")
    n = _graphed_kernels("two_branch")
    out = tmp_path / "a.pftrace"
    assert main(["convert", str(src), "--annotations", empty, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfetto-graph-ann convert: error: {empty}: ") and str(src) in err
    assert f"match none of the 5 graph replays ({n} GPU events)" in err and "--force-annotations" in err
    assert not out.exists()
    # a capture record of another graph
    seed = fixture_trace("seed_block_annotated")
    other = str(fixture_capture("two_branch"))
    assert main(["convert", str(seed), "--annotations", other, "-o", str(tmp_path / "b.pftrace")]) == 2
    err = capsys.readouterr().err
    assert f"error: {other}: " in err and str(seed) in err and not (tmp_path / "b.pftrace").exists()
    # forced: written, and the summary says what was overridden
    assert main(["convert", str(seed), "--annotations", other, "-o", str(tmp_path / "b.pftrace"),
                 "--force-annotations"]) == 0
    err = capsys.readouterr().err
    seed_n = _graphed_kernels("seed_block_annotated")
    assert f"join: 0/{seed_n} GPU events of graph replays matched · {seed_n} unmatched" in err
    assert "match none of the trace's graph replays; joined anyway" in err and (tmp_path / "b.pftrace").exists()
    # the right annotations: the summary line and the one note about the unchecked identity
    assert main(["convert", str(src), "--annotations", str(fixture_capture("two_branch")),
                 "-o", str(tmp_path / "c.pftrace")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"join: {n}/{n} GPU events of graph replays matched ({n} calibrated) · 0 unmatched · "
        "annotations: two_branch.capture.json",
        "note: two_branch.capture.json: no capture identity recorded (version-1 sidecar or capture record), "
        "not checked against the trace"]
    assert main(["merge", str(src), "-a", empty, "-o", str(tmp_path / "m.pftrace")]) == 2
    assert f"match none of the 5 graph replays ({n} GPU events)" in capsys.readouterr().err
    assert not (tmp_path / "m.pftrace").exists()


@requires_portable
def test_report_refuses_annotations_that_match_nothing(tmp_path, capsys):
    from perfetto_graph_ann.annotations.model import AnnotationSet
    from perfetto_graph_ann.annotations.files import save_annotations

    empty = save_annotations(tmp_path / "empty.json", AnnotationSet())
    assert main(["report", str(fixture_trace("two_branch")), "-a", empty, "-o", str(tmp_path / "r.txt")]) == 2
    assert f"({_graphed_kernels('two_branch')} GPU events)" in capsys.readouterr().err
    assert not (tmp_path / "r.txt").exists()


def test_convert_takes_a_like_lanes_report_and_merge(trace, tmp_path):
    """``-a`` is the short form of ``--annotations`` on every command that reads a sidecar."""
    src, ann = trace
    short, long = tmp_path / "short.pftrace", tmp_path / "long.pftrace"
    assert main(["convert", str(src), "-a", str(ann), "-o", str(short), "-q"]) == 0
    assert main(["convert", str(src), "--annotations", str(ann), "-o", str(long), "-q"]) == 0
    plain = tmp_path / "plain.pftrace"
    assert main(["convert", str(src), "-o", str(plain), "-q"]) == 0
    assert _digest(short) == _digest(long) != _digest(plain)
