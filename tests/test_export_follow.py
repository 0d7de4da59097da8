"""Reading torch's JSON while torch writes it (``read.follow``; ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW``).

The expectation is the conversion once torch is done, in this process (the follow off): the
same bytes, report and placements; the same error, and no output, for a profile cut short or
annotations of another run; nothing left behind when torch's export fails half way. The
stand-in profilers write as Kineto does (``<path>.tmp`` a piece at a time, renamed when
whole), so the worker really reads a growing file."""
from __future__ import annotations

import gzip
import os
import threading
import time
from pathlib import Path

import pytest

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, ReplayThread, ReplayWindow
from perfetto_graph_ann.capture import background
from perfetto_graph_ann.capture import export as export_mod
from perfetto_graph_ann.capture.export import expected_kernels, export, follows
from perfetto_graph_ann.capture.handler import trace_handler
from perfetto_graph_ann.errors import AnnotationMismatchError, OutputError, SettingError, TraceFormatError
from perfetto_graph_ann.pipeline.joined import read_for_writing
from perfetto_graph_ann.read.events import decode_events
from perfetto_graph_ann.read.follow import SOON, Abandoned, Followed, Moved
from perfetto_graph_ann.read.kineto import _stream_trace
from perfetto_graph_ann.read.scan import scan_trace


def _raw(name: str) -> bytes:
    with gzip.open(fixture_trace(name), "rb") as f:
        return f.read()


class KinetoLike:
    """torch.profiler's ``export_chrome_trace`` as Kineto writes: ``<path>.tmp`` a piece at a
    time, then renamed; once. ``stop_at``: bytes written before it stops (``fail``: then raises,
    as an export that failed; else renames what it wrote: a trace cut short)."""

    def __init__(self, data: bytes, piece: int = 4096, stop_at: "int | None" = None, fail: bool = False,
                 rewrite: bool = False):
        self.data, self.piece, self.stop_at, self.fail, self.calls = data, piece, stop_at, fail, 0
        self.rewrite = rewrite  # the whole file written anew at the end (another inode than the one read)

    def export_chrome_trace(self, path: str) -> None:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("Trace is already saved.")
        end = len(self.data) if self.stop_at is None else self.stop_at
        with open(path + ".tmp", "wb") as f:
            for at in range(0, end, self.piece):
                f.write(self.data[at:min(at + self.piece, end)])
                f.flush()
                time.sleep(0.0005)
        if self.fail:
            raise RuntimeError("the export failed (test)")
        if self.rewrite:
            with open(path, "wb") as f:
                f.write(self.data[:end])
            os.remove(path + ".tmp")
            return
        os.rename(path + ".tmp", path)


def _follow(monkeypatch, on: bool) -> None:
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "0" if on else "off")


def _placements(layout) -> dict:
    return {i: (p.lane, dict(p.args)) for i, p in layout.placements.items()}


def _gone(folder: Path, *keep: str) -> None:
    assert sorted(os.listdir(folder)) == sorted(keep)  # no temporary folder or file left
    assert background.pending() == []


# -- the reader ---------------------------------------------------------------------------------

class _Writer:
    """Writes ``data`` to ``<path>.tmp`` in a thread, renames it, then gives the word."""

    def __init__(self, path: str, data: bytes, copy: bool = False):
        self.path, self.data, self.copy = path, data, copy
        self.word = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        with open(self.path + ".tmp", "wb") as f:
            for at in range(0, len(self.data), 1000):
                f.write(self.data[at:at + 1000])
                f.flush()
                time.sleep(0.0002)
        if self.copy:  # the finished file written anew: another inode than the one read
            with open(self.path, "wb") as f:
                f.write(self.data)
            os.remove(self.path + ".tmp")
        else:
            os.rename(self.path + ".tmp", self.path)
        self.word.set()

    def finished(self, timeout: float):
        """The word, given once (as the worker's pipe: after it, only the end of the pipe)."""
        if self.word.wait(timeout):
            assert not getattr(self, "told", False), "the word was asked for again"
            self.told = True
            return self.path
        return None


def test_a_followed_file_reads_every_byte_in_order_and_ends_only_at_the_writers_word(tmp_path):
    data = bytes(range(256)) * 400
    path = str(tmp_path / "t.json")
    w = _Writer(path, data)
    f = Followed([path + ".tmp", path], w.finished)
    got = []
    while True:
        piece = f.read(7777)
        if not piece:
            break
        assert len(piece) == 7777 or not f.read(1)  # short only at the end
        got.append(piece)
    f.close()
    w.thread.join()
    assert b"".join(got) == data
    assert f.final == path and f.final_stat.st_size == len(data)


def test_a_large_read_returns_what_is_written_without_waiting_for_the_whole_block(tmp_path):
    path = str(tmp_path / "t.json")
    with open(path + ".tmp", "wb") as f:
        f.write(b"x" * (SOON + 1000))
    waits = []

    def finished(timeout):  # the writer never finishes here: a read that waits for more loops on
        waits.append(timeout)
        if len(waits) > 50:
            raise AssertionError("the read waited for a whole block")
        return None

    f = Followed([path + ".tmp", path], finished)
    assert f.read(1 << 20) == b"x" * (SOON + 1000)  # all written so far, at once
    assert waits == []
    with open(path + ".tmp", "ab") as w:
        w.write(b"y" * 10)
    assert f.read(5) == b"yyyyy"  # a small read: what it asked for
    f.close()
    w = _Writer(str(tmp_path / "u.json"), b"z" * (3 * SOON))
    f = Followed([w.path + ".tmp", w.path], w.finished)
    assert f.read() == b"z" * (3 * SOON)  # no size: the whole file, up to the writer's word
    f.close()
    w.thread.join()


def test_the_streaming_read_decodes_what_it_has_before_waiting_for_more():
    events = b",".join(b'{"ph": "X", "name": "k%d", "ts": %d, "dur": 1, "pid": 1, "tid": 1}' % (i, i)
                       for i in range(40))
    text = b'{"traceEvents": [' + events + b'], "traceName": "t"}'
    log = []

    class Raw:  # the file as a follow hands it out: a piece, then the writer's next piece
        def __init__(self):
            self.at = 0

        def read(self, n):
            log.append(("read", self.at))
            piece = text[self.at:self.at + min(n, 700)]
            self.at += len(piece)
            return piece

        def seek(self, pos, whence=0):
            self.at = pos

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    class Scan:
        def read_run(self, buf, end, path, start, at):
            log.append(("run", start))
            return decode_events(b"[" + bytes(buf[:end]) + b"]", path, start)

    trace = _stream_trace("t.json", block=700, scan=Scan(), raw=Raw())
    assert [e.name for e in trace.events] == [f"k{i}" for i in range(40)]
    runs = [i for i, (what, _) in enumerate(log) if what == "run"]
    reads = [i for i, (what, _) in enumerate(log) if what == "read"]
    assert len(runs) > 3
    # every piece's whole events are decoded before the next piece is asked for
    for r in runs[:-1]:
        assert r + 1 in reads
    assert log[runs[0] - 1][0] == "read" and sum(1 for i in reads if i < runs[0]) == 2  # the head, one piece


def test_a_file_finished_elsewhere_is_moved_and_read_whole(tmp_path):
    data = _raw("two_branch")
    path = str(tmp_path / "t.json")
    w = _Writer(path, data, copy=True)
    f = Followed([path + ".tmp", path], w.finished)
    with pytest.raises(Moved):
        while f.read(1 << 16):
            pass
    w.thread.join()
    w2 = _Writer(str(tmp_path / "u.json"), data, copy=True)
    f2 = Followed([w2.path + ".tmp", w2.path], w2.finished)
    assert scan_trace(w2.path, True, f2) is None  # the scan gives up
    assert f2.wait() == w2.path  # the word already came: not asked for again
    w3 = _Writer(str(tmp_path / "v.json"), data, copy=True)
    trace = read_for_writing(w3.path, True, join=True, follow=Followed([w3.path + ".tmp", w3.path], w3.finished))
    w2.thread.join()
    w3.thread.join()
    whole = read_for_writing(w3.path, False).events
    assert [(e.name, e.ts_ns) for e in trace.events] == [(e.name, e.ts_ns) for e in whole]
    assert len(trace.events) > 0


def test_an_abandoned_file_raises_through_the_reader(tmp_path):
    path = str(tmp_path / "t.json")
    with open(path + ".tmp", "wb") as f:
        f.write(_raw("two_branch")[:5000])

    def finished(timeout):
        raise Abandoned("gone")

    with pytest.raises(Abandoned):
        scan_trace(path, True, Followed([path + ".tmp", path], finished))


# -- when to follow ------------------------------------------------------------------------------

def _recorded(replays: int, nodes: int, other: int = 0) -> AnnotationSet:
    graph = GraphRecord(5, tuple(NodeRecord(key=(5 << 32) | i, kernel="k") for i in range(nodes)))
    old = ReplayWindow(1, 0, 10, (ReplayThread(1, 1, (5,) * 999),))  # an earlier window: not this profile's
    last = ReplayWindow(1, 20, 30, (ReplayThread(1, 1, (5,) * replays), ReplayThread(2, 2, (7,) * other)))
    return AnnotationSet(graphs=(graph,), replays=(old, last))


def test_follows_by_the_replay_records_kernels_the_output_and_the_setting(tmp_path, monkeypatch):
    ann = _recorded(replays=50, nodes=800, other=3)  # graph 7 is not annotated: its replays count nothing
    assert expected_kernels(ann) == 40000
    assert expected_kernels(AnnotationSet()) == 0
    prof = KinetoLike(b"")
    out = str(tmp_path / "o.pftrace")
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", raising=False)
    assert follows(prof, out, ann)  # 40,000: the default's least
    assert not follows(prof, out, _recorded(replays=49, nodes=800))
    assert not follows(prof, str(tmp_path / "o.json.gz"), ann)  # annotated Chrome JSON: read whole
    assert not follows(str(tmp_path / "saved.json"), out, ann)  # a saved trace: nothing is being written
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "off")
    assert not follows(prof, out, ann)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "0")
    assert follows(prof, out, AnnotationSet())
    setattr(prof, export_mod._CACHE_ATTR, b"{}")  # exported before: the kept copy is converted
    assert not follows(prof, out, ann)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "many")
    with pytest.raises(SettingError, match="PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"):
        follows(KinetoLike(b""), out, ann)


# -- export ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
def test_a_followed_export_is_the_export_in_process(tmp_path, sys_tmp, monkeypatch, name):
    ann = read_capture_record(fixture_capture(name))
    data = _raw(name)
    _follow(monkeypatch, False)
    a = export(KinetoLike(data), tmp_path / "a.pftrace", ann, graph_lanes="all")
    _follow(monkeypatch, True)
    prof = KinetoLike(data)
    b = export(prof, tmp_path / "b.pftrace", ann, graph_lanes="all", keep_json=tmp_path / "kept.json")
    assert (tmp_path / "b.pftrace").read_bytes() == (tmp_path / "a.pftrace").read_bytes()
    assert (tmp_path / "kept.json").read_bytes() == data
    assert b.report == a.report and b.lane_names == a.lane_names and _placements(b) == _placements(a)
    assert len(b.ranges) == len(a.ranges) > 0
    h = export(KinetoLike(data), tmp_path / "c.pftrace", ann, graph_lanes="all", background=True)
    assert h.result(timeout=120) == a.report
    assert (tmp_path / "c.pftrace").read_bytes() == (tmp_path / "a.pftrace").read_bytes()
    again = export(prof, tmp_path / "d.pftrace", ann, graph_lanes="all")  # the kept JSON, read in this process
    assert (tmp_path / "d.pftrace").read_bytes() == (tmp_path / "a.pftrace").read_bytes() and again.report == a.report
    _gone(tmp_path, "a.pftrace", "b.pftrace", "c.pftrace", "d.pftrace", "kept.json", "sys_tmp")
    del prof
    import gc

    gc.collect()
    assert os.listdir(sys_tmp) == []


@pytest.mark.parametrize("bg", [False, True])
def test_a_trace_finished_in_another_file_is_read_again_whole(tmp_path, sys_tmp, monkeypatch, bg):
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    data = _raw(name)
    _follow(monkeypatch, False)
    a = export(KinetoLike(data), tmp_path / "a.pftrace", ann, graph_lanes="all")
    _follow(monkeypatch, True)
    b = export(KinetoLike(data, rewrite=True), tmp_path / "b.pftrace", ann, graph_lanes="all", background=bg)
    report = b.result(timeout=120) if bg else b.report
    assert report == a.report
    assert (tmp_path / "b.pftrace").read_bytes() == (tmp_path / "a.pftrace").read_bytes()
    _gone(tmp_path, "a.pftrace", "b.pftrace", "sys_tmp")


def _error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def test_a_profile_cut_short_is_refused_as_in_process_and_nothing_is_written(tmp_path, sys_tmp, monkeypatch):
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    data = _raw(name)
    cut = data.rfind(b"},", 0, len(data) // 2) + 40  # inside an event
    errors = []
    for on in (False, True):
        _follow(monkeypatch, on)
        errors.append(_error(lambda: export(KinetoLike(data, stop_at=cut), tmp_path / "x.pftrace", ann)))
    assert errors[0] == errors[1] and errors[0][0] is TraceFormatError
    assert "torch.profiler trace" in errors[1][1]
    _gone(tmp_path, "sys_tmp")


def test_annotations_of_another_run_are_refused_as_in_process(tmp_path, sys_tmp, monkeypatch):
    other = read_capture_record(fixture_capture("two_branch"))
    data = _raw("seed_block_annotated")
    errors = []
    for on in (False, True):
        _follow(monkeypatch, on)
        errors.append(_error(lambda: export(KinetoLike(data), tmp_path / "x.pftrace", other, graph_lanes="all")))
    assert errors[0] == errors[1] and errors[0][0] is AnnotationMismatchError
    _gone(tmp_path, "sys_tmp")


@pytest.mark.parametrize("bg", [False, True])
def test_an_export_that_fails_half_way_leaves_nothing_and_stops_the_worker(tmp_path, sys_tmp, monkeypatch, bg):
    _follow(monkeypatch, True)
    ann = read_capture_record(fixture_capture("two_branch"))
    data = _raw("two_branch")
    started = []
    real = background.start
    monkeypatch.setattr(background, "start", lambda *a, **k: started.append(real(*a, **k)) or started[-1])
    with pytest.raises(RuntimeError, match="failed"):
        export(KinetoLike(data, stop_at=len(data) // 2, fail=True), tmp_path / "x.pftrace", ann, background=bg)
    assert len(started) == 1 and started[0]._proc.poll() is not None  # the worker was started, and has ended
    assert started[0]._proc.returncode == 3  # told torch failed: it wrote nothing, not even its outcome
    _gone(tmp_path, "sys_tmp")
    assert os.listdir(sys_tmp) == []


def test_reports_that_disagree_keep_nothing(tmp_path, sys_tmp, monkeypatch):
    """The layout export returns is this process's join; should it ever disagree with the
    worker's (which wrote the file), neither is shown."""
    import dataclasses

    from perfetto_graph_ann.pipeline import convert

    _follow(monkeypatch, True)
    real = convert.join_for_output

    def skewed(*a, **k):
        layout = real(*a, **k)
        layout.report = dataclasses.replace(layout.report, total=layout.report.total + 1)
        return layout

    monkeypatch.setattr(convert, "join_for_output", skewed)
    ann = read_capture_record(fixture_capture("two_branch"))
    with pytest.raises(OutputError, match="disagree"):
        export(KinetoLike(_raw("two_branch")), tmp_path / "x.pftrace", ann)
    _gone(tmp_path, "sys_tmp")


@pytest.mark.parametrize("where", ["join", "wait"])
def test_an_interrupted_export_stops_its_worker(tmp_path, sys_tmp, monkeypatch, where):
    """Ctrl-C in this process's join, or while it waits for the worker: the worker is stopped
    at once (not waited for), and no folder or temporary file is left (a file the worker had
    finished may stay: it is whole)."""
    from perfetto_graph_ann.pipeline import convert

    _follow(monkeypatch, True)
    started = []
    real_start = background.start
    monkeypatch.setattr(background, "start", lambda *a, **k: started.append(real_start(*a, **k)) or started[-1])
    if where == "join":
        def interrupted(*a, **k):
            raise KeyboardInterrupt
        monkeypatch.setattr(convert, "join_for_output", interrupted)
    else:
        monkeypatch.setattr(background.ExportHandle, "result", lambda self, timeout=None: (_ for _ in ()).throw(
            KeyboardInterrupt()))
    ann = read_capture_record(fixture_capture("two_branch"))
    with pytest.raises(KeyboardInterrupt):
        export(KinetoLike(_raw("two_branch")), tmp_path / "x.pftrace", ann)
    assert len(started) == 1 and started[0]._proc.poll() is not None
    left = sorted(os.listdir(tmp_path))
    assert left in (["sys_tmp"], ["sys_tmp", "x.pftrace"]), left
    assert background.pending() == []


@pytest.mark.parametrize("bg", [False, True])
def test_the_trace_handler_follows_with_the_same_bytes(tmp_path, monkeypatch, bg):
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    data = _raw(name)
    out = {}
    for on in (False, True):
        _follow(monkeypatch, on)
        folder = tmp_path / str(on)
        handler = trace_handler(str(folder), worker_name="w", annotations=ann, keep_json=True, background=bg)
        path = handler(KinetoLike(data))
        assert handler.wait() == [path]
        out[on] = Path(path).read_bytes()
        assert Path(path[:-len(".pftrace")] + ".json").read_bytes() == data
        assert sorted(os.listdir(folder)) == sorted([os.path.basename(path), os.path.basename(path)[:-8] + ".json"])
    assert out[True] == out[False]
    assert background.pending() == []


def test_torchs_own_exporter_is_followed_with_the_same_bytes(tmp_path, sys_tmp, monkeypatch):
    """torch's ``export_chrome_trace`` (Kineto: ``<path>.tmp`` written while the interpreter
    lock is held, then renamed) read by the worker as it writes: the same file as converting
    torch's JSON afterwards (kept with ``keep_json``: a profile is exported once)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from perfetto_graph_ann.capture import background as bg

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3000):
            x = torch.relu(x + 1)
    seen = []
    real = bg.start
    monkeypatch.setattr(bg, "start", lambda src, *a, **k: seen.append(k.get("follow")) or real(src, *a, **k))
    _follow(monkeypatch, True)
    layout = export(prof, tmp_path / "followed.pftrace", AnnotationSet(), keep_json=tmp_path / "raw.json")
    assert seen == [True]  # one following worker converted it
    _follow(monkeypatch, False)
    again = export(str(tmp_path / "raw.json"), tmp_path / "after.pftrace", AnnotationSet())
    followed = (tmp_path / "followed.pftrace").read_bytes()
    assert followed == (tmp_path / "after.pftrace").read_bytes() and len(followed) > 100_000
    assert layout.report == again.report
    _gone(tmp_path, "followed.pftrace", "after.pftrace", "raw.json", "sys_tmp")
