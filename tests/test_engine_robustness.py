"""Failures become clear exceptions and leave nothing running: engine killed mid-query,
timeouts, SQL errors, bad traces, Ctrl-C, parent killed, two sessions at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from support.engine_support import SLOW_SQL, fixture_trace, pid_alive, requires_portable, sigkill_after, wait_gone, x_counts_by_cat
from support.interrupt import sigint_as_in_a_shell
from perfetto_graph_ann.errors import EngineError, GraphAnnError, InputError, QueryError, QueryTimeoutError
from perfetto_graph_ann.query.engine import process
from perfetto_graph_ann.query.session import open_trace

pytestmark = requires_portable

GRAPH = fixture_trace("seed_block_graph")


def test_engine_killed_mid_query_raises_and_leaves_nothing():
    s = open_trace(GRAPH, engine="portable")
    pid = s.engine.pid
    sock_dir = s.engine._tmpdir
    with sigkill_after(pid), pytest.raises(EngineError) as info:
        s.query(SLOW_SQL)
    msg = str(info.value)
    assert type(info.value) is EngineError
    assert msg.startswith(str(GRAPH)) and "died during the query" in msg and "SIGKILL" in msg
    assert not pid_alive(pid)
    assert pid not in process.live_pids()
    assert not os.path.exists(sock_dir)
    with pytest.raises(EngineError, match="stopped"):
        s.query("SELECT 1")
    s.close()  # still fine


def test_timeout_stops_the_engine():
    with open_trace(GRAPH, engine="portable") as s:
        pid = s.engine.pid
        t0 = time.monotonic()
        with pytest.raises(QueryTimeoutError, match=r"ran past its 0.5 s timeout"):
            s.query(SLOW_SQL, timeout_s=0.5)
        assert time.monotonic() - t0 < 5
        assert wait_gone(pid)
        assert not s.engine.alive


def test_query_error_keeps_the_engine_usable():
    with open_trace(GRAPH, engine="portable") as s:
        with pytest.raises(QueryError) as info:
            s.query("SELECT no_such_column FROM slice")
        assert str(info.value).startswith(str(GRAPH))
        assert "no such column: no_such_column" in str(info.value)
        assert s.query("SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'").rows[0].n == x_counts_by_cat("seed_block_graph")["kernel"]


@pytest.mark.parametrize(
    "content, problem",
    [(b"this is not a trace\n" * 10, "cannot read this trace"), (b"", "the file is empty (0 bytes)"), (None, "no such file")],
)
def test_bad_trace_is_an_input_error(tmp_path, content, problem, private_tmp):
    path = tmp_path / "bad.trace"
    if content is not None:
        path.write_bytes(content)
    before = set(process.live_pids())
    with pytest.raises(InputError) as info:
        open_trace(path, engine="portable")
    assert str(info.value).startswith(str(path)) and problem in str(info.value)
    assert set(process.live_pids()) <= before
    assert os.listdir(private_tmp) == []  # the socket folder is gone too


@pytest.fixture
def private_tmp(monkeypatch):
    """A short private temp dir, so socket folders made by this test alone land there."""
    d = tempfile.mkdtemp(prefix="pga-t-", dir="/tmp" if os.path.isdir("/tmp") else None)
    monkeypatch.setattr(tempfile, "tempdir", d)
    yield d
    os.rmdir(d)


def test_two_sessions_at_once_from_two_threads():
    names = ["seed_block_graph", "two_branch"]
    sessions = [open_trace(fixture_trace(n), engine="portable") for n in names]
    try:
        assert len({s.engine.pid for s in sessions}) == 2
        results = {}

        def run(i):
            for _ in range(3):
                results[i] = sessions[i].query("SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'").rows[0].n

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {i: x_counts_by_cat(n)["kernel"] for i, n in enumerate(names)}
    finally:
        pids = [s.engine.pid for s in sessions]
        for s in sessions:
            s.close()
    assert all(wait_gone(p) for p in pids)


_CHILD = textwrap.dedent(
    """
    import sys
    from perfetto_graph_ann.query.session import open_trace
    s = open_trace(sys.argv[1], engine="portable")
    print(s.engine.pid, flush=True)
    if sys.argv[2] == "query":
        s.query(sys.argv[3])
    else:
        import time
        time.sleep(600)
    """
)


def _child(mode: str, env=None):
    with sigint_as_in_a_shell():  # the test sends it SIGINT, as Ctrl-C would
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(GRAPH), mode, SLOW_SQL],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    line = proc.stdout.readline()
    assert line.strip().isdigit(), proc.stderr.read()
    return proc, int(line)


def test_ctrl_c_mid_query_leaves_no_engine():
    proc, pid = _child("query")
    try:
        time.sleep(0.5)
        assert pid_alive(pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err
        assert wait_gone(pid)
    finally:  # a child the signal did not stop would run its endless query for ever
        if proc.poll() is None:
            proc.kill()  # its engine exits when its stdin closes
            proc.communicate()


@pytest.mark.parametrize("mode", ["sleep", "query"])
def test_parent_killed_engine_exits_on_its_own(private_tmp, mode):
    """Python SIGKILLed while idle, or in the middle of a long query (the engine's event loop
    is blocked then; the host's stdin watchdog thread still sees the pipe close)."""
    proc, pid = _child(mode, env={**os.environ, "TMPDIR": private_tmp})
    assert len(os.listdir(private_tmp)) == 1
    time.sleep(0.5)
    proc.kill()  # SIGKILL: no atexit, no finalizers; the host sees its stdin close
    proc.wait(timeout=10)
    assert wait_gone(pid, 10)
    assert os.listdir(private_tmp) == []  # the host removed its socket folder


def test_errors_are_graph_ann_errors():
    for cls in (EngineError, QueryError, QueryTimeoutError, InputError):
        assert issubclass(cls, GraphAnnError)
