"""The native engine's code path (perfetto.TraceProcessor start-up, --add-sql-package, HTTP
loading and queries, timeouts, death) against tests/support/fake_tp_shell.py: a stand-in shell that
serves the shell's HTTP API from the real WebAssembly trace processor. Runs everywhere the
portable engine does; test_engine_native.py covers a real shell when one is present."""
from __future__ import annotations

import os
import shlex
import stat
import sys

import pytest

from support.engine_support import SLOW_SQL, fixture_trace, requires_portable, sigkill_after, wait_gone, x_counts_by_cat
from perfetto_graph_ann.errors import EngineError, InputError, QueryError, QueryTimeoutError
from perfetto_graph_ann.query.engine import EngineConfig
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

GRAPH = fixture_trace("seed_block_graph")


@pytest.fixture(scope="module")
def fake_shell(tmp_path_factory):
    """An executable named trace_processor_shell that runs fake_tp_shell.py with this Python.

    Its temporary files go to a folder of the test's own: the engine stops a shell with
    SIGKILL, so whatever it had in the system's temporary folder would stay there."""
    here = os.path.dirname(os.path.abspath(__file__))
    folder = tmp_path_factory.mktemp("fakeshell")
    (folder / "tmp").mkdir()
    path = folder / "trace_processor_shell"
    path.write_text(f"#!/bin/sh\nTMPDIR={shlex.quote(str(folder / 'tmp'))} exec {sys.executable} "
                    f"{os.path.join(here, 'support', 'fake_tp_shell.py')} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_native_path_runs_real_sql_with_our_package(fake_shell):
    with open_trace(GRAPH, engine="native", config=EngineConfig(shell_path=fake_shell)) as s:
        assert s.engine_kind == "native" and "v52" in s.version
        n = s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT COUNT(*) AS n FROM graph_ann_gpu_work").rows[0].n
        assert n == x_counts_by_cat("seed_block_graph")["kernel"]
        with pytest.raises(QueryError, match="no such table: nope"):
            s.query("SELECT * FROM nope")
        assert s.query("SELECT COUNT(*) AS n FROM slice WHERE category = 'cuda_runtime'").rows[0].n == x_counts_by_cat("seed_block_graph")["cuda_runtime"]
        pid = s.engine.pid
    assert wait_gone(pid, 10.0)


def test_native_timeout_and_death(fake_shell):
    cfg = EngineConfig(shell_path=fake_shell)
    with open_trace(GRAPH, engine="native", config=cfg) as s:
        pid = s.engine.pid
        with pytest.raises(QueryTimeoutError, match="0.5 s timeout"):
            s.query(SLOW_SQL, timeout_s=0.5)
        assert wait_gone(pid, 10.0)
    s = open_trace(GRAPH, engine="native", config=cfg)
    pid = s.engine.pid
    try:
        with sigkill_after(pid), pytest.raises(EngineError, match="native trace processor died during the query"):
            s.query(SLOW_SQL)
    finally:
        s.close()
    assert wait_gone(pid, 10.0)


def test_native_bad_trace(fake_shell, tmp_path):
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"not a trace at all\n" * 20)
    with pytest.raises(InputError, match="cannot read this trace"):
        open_trace(bad, engine="native", config=EngineConfig(shell_path=fake_shell))


def test_native_batch_goes_through_batch_trace_processor(fake_shell):
    from perfetto_graph_ann.query.batch import query_many

    names = ["seed_block_graph", "two_branch"]
    df = query_many(
        [fixture_trace(n) for n in names],
        "INCLUDE PERFETTO MODULE graph_ann.gpu_work; SELECT COUNT(*) AS n FROM graph_ann_gpu_work",
        engine="native",
        config=EngineConfig(shell_path=fake_shell),
    )
    assert list(df["trace"]) == [str(fixture_trace(n)) for n in names]
    assert list(df["n"]) == [x_counts_by_cat(n)["kernel"] for n in names]


def test_native_paths_refuse_a_cut_trace(fake_shell, tmp_path):
    """Issue 32, item 2, on the native engine: a load and the batch processor (which reads the
    files itself) both refuse one of our traces cut short; the whole one still loads."""
    from perfetto_graph_ann.errors import IncompleteTraceError
    from perfetto_graph_ann.pipeline.convert import convert
    from perfetto_graph_ann.query.batch import query_many

    whole, cut = tmp_path / "whole.pftrace", tmp_path / "cut.pftrace"
    convert(fixture_trace("two_branch"), whole)
    cut.write_bytes(whole.read_bytes()[:3000])
    config = EngineConfig(shell_path=fake_shell)
    with pytest.raises(IncompleteTraceError, match="3,000 bytes"):
        open_trace(cut, engine="native", config=config)
    sql = "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'"
    with pytest.raises(IncompleteTraceError, match=str(cut)):
        query_many([whole, cut], sql, engine="native", config=config)
    df = query_many([whole], sql, engine="native", config=config)
    assert list(df["n"]) == [x_counts_by_cat("two_branch")["kernel"]]
    # import stats with data loss, read by the batch processor's own queries
    import json

    overlap = tmp_path / "overlap.json"
    overlap.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
                                                   {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10}]}))
    with pytest.raises(IncompleteTraceError, match="slice_drop_overlapping_complete_event = 1"):
        query_many([whole, overlap], sql, engine="native", config=config)
