"""The spare conversion worker (``capture.background.prepare_spare``; ``PERFETTO_GRAPH_ANN_EXPORT_SPARE``).

A worker is started ahead, does its imports while nothing waits, and takes the next conversion
from its standard input. The expectations: the next conversion runs in that very process (its
pid) and writes what a conversion in this process writes; it is never handed a job it may not
read (dead, another process's, near the end of its wait); it leaves when its wait is over, when
its parent ends normally or is killed, and when told to; a job and the parent's word arriving in
one read are both read; the follow's least drops to any size only while a spare is ready and the
setting is unset."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, ReplayThread, ReplayWindow
from perfetto_graph_ann.capture import background
from perfetto_graph_ann.capture.export import export, follows
from perfetto_graph_ann.errors import SettingError
from perfetto_graph_ann.pipeline.convert import write_joined_file
from test_export_background import RecordedProfiler

ROOT = Path(__file__).resolve().parent.parent
NAME = "seed_block_annotated"


def _raw() -> bytes:
    with gzip.open(fixture_trace(NAME), "rb") as f:
        return f.read()


@pytest.fixture
def spare_on(monkeypatch):
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "60")


def _ready(timeout: float = 60.0) -> subprocess.Popen:
    """The spare once it has done its imports."""
    assert background.prepare_spare()
    deadline = time.monotonic() + timeout
    while not background.has_spare(ready=True):
        assert time.monotonic() < deadline, "the spare never said it was ready"
        time.sleep(0.02)
    return background._spare


def _gone(pid: int, timeout: float = 20.0) -> bool:
    """Whether process ``pid`` ended within ``timeout`` s (a zombie nobody reaps counts as ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _expected(tmp_path: Path, ann) -> bytes:
    src = tmp_path / "expected.json"
    src.write_bytes(_raw())
    write_joined_file(str(src), str(tmp_path / "expected.pftrace"), ann, "all")
    data = (tmp_path / "expected.pftrace").read_bytes()
    for name in ("expected.json", "expected.pftrace"):
        (tmp_path / name).unlink()
    return data


pytestmark = pytest.mark.skipif(os.name != "posix" or not sys.executable, reason="the spare waits on a pipe (POSIX)")


def test_the_next_conversion_runs_in_the_spare_and_a_new_one_is_started(tmp_path, spare_on):
    ann = read_capture_record(fixture_capture(NAME))
    want = _expected(tmp_path, ann)
    spare = _ready()
    h = export(RecordedProfiler(_raw()), tmp_path / "a.pftrace", ann, graph_lanes="all", background=True)
    assert h._proc is spare  # the very process started ahead
    report = h.result(timeout=120)
    assert report.matched["calibrated"] == 70
    assert (tmp_path / "a.pftrace").read_bytes() == want
    nxt = background._spare  # a background conversion starts the next one's worker at once
    assert nxt is not None and nxt is not spare and nxt.poll() is None
    # a blocking export of a live profile leaves one ready for the export after it
    background._drop_spare()
    export(RecordedProfiler(_raw()), tmp_path / "b.pftrace", ann, graph_lanes="all")
    assert background.has_spare() and (tmp_path / "b.pftrace").read_bytes() == want
    assert sorted(os.listdir(tmp_path)) == ["a.pftrace", "b.pftrace"]


def test_a_blocking_export_starts_the_next_spare_while_its_worker_still_writes(tmp_path, spare_on, monkeypatch):
    ann = read_capture_record(fixture_capture(NAME))
    spare = _ready()
    seen = []
    collect = background.ExportHandle.result

    def result(handle, timeout=None):
        seen.append((handle._proc.pid, background._spare))  # the spare as the caller starts its wait
        return collect(handle, timeout)

    monkeypatch.setattr(background.ExportHandle, "result", result)
    export(RecordedProfiler(_raw()), tmp_path / "a.pftrace", ann, graph_lanes="all")
    (pid, nxt), = seen
    assert pid == spare.pid  # followed, in the spare
    assert nxt is not None and nxt.pid != spare.pid and nxt.poll() is None  # the next one already started
    assert background._spare is nxt  # and kept: the export's end starts no other
    assert (tmp_path / "a.pftrace").read_bytes() == _expected(tmp_path, ann)


def test_the_outcome_is_collected_at_the_workers_word_not_at_its_exit(tmp_path):
    from perfetto_graph_ann.errors import OutputError
    from perfetto_graph_ann.util.atomic import atomic_write_bytes

    out = str(tmp_path / "a.pftrace")
    folder = tmp_path / "job"
    folder.mkdir()
    atomic_write_bytes(folder / background._RESULT,
                       background._encode_outcome((False, OutputError(out, "what the worker found")), out))
    # a worker whose exit is slow: its word that the outcome is written, then 30 s before it ends
    proc = subprocess.Popen([sys.executable, "-c", "import os, time; os.write(1, b'r'); time.sleep(0.2); "
                             "os.write(1, b'd'); time.sleep(30)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        h = background.ExportHandle(out, "the profile", str(folder), proc)
        t = time.monotonic()
        with pytest.raises(OutputError, match="what the worker found"):
            h.result(timeout=20)
        assert time.monotonic() - t < 10 and h.done()
        assert proc.poll() is None and proc in background._leaving  # still leaving: reaped later
        assert not folder.exists()
    finally:
        proc.kill()
        proc.wait()
    with background._lock:
        background._reap()
    assert proc not in background._leaving


def test_a_wait_with_a_timeout_waits_that_long_once(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import os, time; os.write(1, b'r'); time.sleep(30)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # a worker still converting
    try:
        h = background.ExportHandle(str(tmp_path / "a.pftrace"), "the profile", str(folder), proc)
        t = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            h.result(timeout=2.0)
        assert 2.0 <= time.monotonic() - t < 3.5  # the word waited for, not the exit after it too
        assert not h.done() and folder.exists()  # still running: nothing collected
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stdin.close()


_GC_WATCH = textwrap.dedent("""
    import gc, json, os, sys
    from perfetto_graph_ann.capture import background
    seen = []
    run = background._run
    def _run(job, follow):  # from the job on, every collection's start is noted
        gc.callbacks.append(lambda phase, info: phase == "start" and seen.append(info["generation"]))
        return run(job, follow)
    background._run = _run
    code = background._main(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(seen, f)
    os._exit(code)
""")


def test_the_worker_never_collects_from_its_job_to_its_exit(tmp_path, monkeypatch):
    # the conversion pauses the collector; a worker that let it run again would walk the whole
    # conversion's heap before writing its outcome (2.5-3.7 ms on the GPU host), for memory it never reuses
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "off")
    ann = read_capture_record(fixture_capture(NAME))
    record = tmp_path / "collections.json"
    spawned = []

    def spawn(idle_s, stderr=subprocess.DEVNULL):
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        spawned.append(subprocess.Popen([sys.executable, "-c", _GC_WATCH, str(record), "--worker", str(os.getpid()),
                                         repr(float(idle_s))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=stderr, env=env, start_new_session=True, close_fds=True))
        return spawned[-1]

    monkeypatch.setattr(background, "_spawn", spawn)
    h = export(RecordedProfiler(_raw()), tmp_path / "a.pftrace", ann, graph_lanes="all", background=True)
    assert h.result(timeout=120).matched["calibrated"] == 70
    assert spawned and spawned[0].wait(30) == 0
    assert json.loads(record.read_text()) == []  # not one collection, not even after the conversion's pause
    record.unlink()
    assert (tmp_path / "a.pftrace").read_bytes() == _expected(tmp_path, ann)


def test_a_spare_that_died_is_replaced_and_the_conversion_still_runs(tmp_path, spare_on):
    ann = read_capture_record(fixture_capture(NAME))
    spare = _ready()
    spare.send_signal(signal.SIGKILL)
    spare.wait(10)
    assert not background.has_spare()
    h = export(RecordedProfiler(_raw()), tmp_path / "a.pftrace", ann, graph_lanes="all", background=True)
    assert h._proc is not spare
    assert h.result(timeout=120).matched["calibrated"] == 70
    assert (tmp_path / "a.pftrace").read_bytes() == _expected(tmp_path, ann)


def test_a_spare_near_the_end_of_its_wait_is_not_handed_a_job_and_is_told_to_leave(spare_on):
    spare = _ready()
    background._spare_since -= 60 - background._SPARE_MARGIN_S + 0.5  # as if it had waited 58.5 of its 60 s
    assert not background.has_spare()
    assert background._take_spare() is None
    assert spare.wait(20) == 0  # its standard input closed: it leaves, having run nothing
    assert background.prepare_spare() and background._spare is not spare


def test_a_spare_leaves_when_its_wait_is_over(monkeypatch):
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "3")
    assert background.prepare_spare()
    spare = background._spare
    t = time.monotonic()
    assert spare.wait(30) == 0
    assert time.monotonic() - t >= 2.5  # its 3 s from the end of its imports, not at once
    assert not background.has_spare()


def test_no_spare_when_off_or_too_short_and_a_clear_error_for_nonsense(monkeypatch):
    for value in ("off", "0", "2"):  # 2 s: no longer than the margin it is never handed a job in
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", value)
        assert not background.prepare_spare() and background._spare is None and not background.has_spare()
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "soon")
    with pytest.raises(SettingError, match=r"PERFETTO_GRAPH_ANN_EXPORT_SPARE='soon': expected a number of seconds"):
        background.prepare_spare()


def test_a_forked_child_never_hands_a_job_to_its_parents_spare(spare_on, monkeypatch):
    spare = _ready()
    real = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real + 1)  # as in a child forked after the spare started
    assert not background.has_spare()
    assert background._take_spare() is None
    time.sleep(0.3)
    assert spare.poll() is None  # the parent's spare is not told to leave by the child
    monkeypatch.setattr(os, "getpid", lambda: real)
    background._release(spare)
    assert spare.wait(20) == 0


_PARENT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from perfetto_graph_ann.capture import background
    assert background.prepare_spare()
    print(background._spare.pid, flush=True)
    if sys.argv[1] == "killed":
        os.kill(os.getpid(), 9)
""")


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_a_spare_leaves_with_its_parent(tmp_path, how):
    env = dict(os.environ, PERFETTO_GRAPH_ANN_EXPORT_SPARE="600")
    p = subprocess.run([sys.executable, "-c", _PARENT.format(root=str(ROOT)), how], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == (0 if how == "exits" else -9), p.stderr
    assert _gone(int(p.stdout.split()[0])), "the spare outlived its parent"


def test_a_job_and_the_word_in_one_read_are_both_read():
    r, w = os.pipe()
    try:
        lines = background._Lines(r)
        assert lines.line(0.05) is None  # nothing yet
        os.write(w, b'{"job": 1}\n{"ok": true, "path": "/x"}\n{"par')
        assert lines.line(1.0) == b'{"job": 1}\n'
        assert background._writer_word(lines)(1.0) == "/x"  # already read with the job: not missed by select
        assert lines.line(0.05) is None  # an unfinished line waits
        os.write(w, b'tial": 1}\n')
        assert lines.line(1.0) == b'{"partial": 1}\n'
        os.close(w)
        w = -1
        assert lines.line(1.0) == b""  # the end of the pipe
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_the_worker_started_by_hand_says_how_it_is_used():
    p = subprocess.run([sys.executable, "-m", "perfetto_graph_ann.capture.background"], capture_output=True, text=True,
                       timeout=60, cwd=str(ROOT))
    assert p.returncode == 2 and "--worker PARENT_PID IDLE_S" in p.stderr


def _recorded(replays: int) -> AnnotationSet:
    graph = GraphRecord(5, tuple(NodeRecord(key=(5 << 32) | i, kernel="k") for i in range(10)))
    return AnnotationSet(graphs=(graph,), replays=(ReplayWindow(1, 20, 30, (ReplayThread(1, 1, (5,) * replays),)),))


def test_a_ready_spare_makes_a_small_profile_follow_only_while_the_setting_is_unset(tmp_path, spare_on, monkeypatch):
    out = str(tmp_path / "o.pftrace")
    ann = _recorded(replays=3)  # 30 kernels: far below the 40,000 a new worker needs
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", raising=False)
    assert not follows(RecordedProfiler(b""), out, ann)
    _ready()
    assert follows(RecordedProfiler(b""), out, ann)
    assert not follows(RecordedProfiler(b""), str(tmp_path / "o.json"), ann)  # Chrome JSON: never followed
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "40000")  # set: what it says, spare or not
    assert not follows(RecordedProfiler(b""), out, ann)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "off")
    assert not follows(RecordedProfiler(b""), out, ann)


def test_a_trace_handler_has_a_worker_ready_for_its_first_cycle(tmp_path, spare_on):
    from perfetto_graph_ann.capture.handler import trace_handler

    assert not background.has_spare()
    trace_handler(str(tmp_path / "traces"))
    assert background.has_spare()


def test_a_spare_started_before_a_conversions_setting_changed_is_not_handed_a_job(spare_on, monkeypatch):
    spare = _ready()
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_PURE_PYTHON", "1")  # read by the worker at import
    assert not background.has_spare()
    assert background._take_spare() is None
    assert spare.wait(20) == 0  # told to leave
    assert background.prepare_spare() and background._spare is not spare and background.has_spare()
