"""``export(..., background=True)`` and ``trace_handler``'s background conversions (issue 33).

The expectation is the blocking call on the same recorded trace: the same bytes, the same
report, the same error (type and message); besides, nothing partial and no temporary file is
ever left, and interpreter exit waits for conversions still running."""
from __future__ import annotations

import gzip
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.capture import background
from perfetto_graph_ann.capture.export import export
from perfetto_graph_ann.capture.handler import trace_handler
from perfetto_graph_ann.errors import AnnotationMismatchError, LaneOptionError, OutputError, TraceFormatError

ROOT = Path(__file__).resolve().parent.parent


class RecordedProfiler:
    """A stand-in for torch.profiler.profile: export_chrome_trace writes a recorded trace, once."""

    def __init__(self, data: bytes, step_num: int = 3):
        self.data, self.step_num, self.calls = data, step_num, 0

    def export_chrome_trace(self, path):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("Trace is already saved.")
        with open(path, "wb") as f:
            f.write(self.data)


def _raw(name: str) -> bytes:
    with gzip.open(fixture_trace(name), "rb") as f:
        return f.read()


def _only(folder: Path, *names: str) -> None:
    assert sorted(os.listdir(folder)) == sorted(names)  # no temporary folder or file left


@pytest.mark.parametrize("out_name", ["run.pftrace", "run.json.gz", "run.pftrace.gz"])
def test_background_export_is_the_blocking_export(tmp_path, out_name):
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    layout = export(RecordedProfiler(_raw(name)), a / out_name, ann, graph_lanes="all")
    prof = RecordedProfiler(_raw(name))
    h = export(prof, b / out_name, ann, graph_lanes="all", background=True)
    report = h.result(timeout=120)
    assert h.done() and prof.calls == 1
    assert (b / out_name).read_bytes() == (a / out_name).read_bytes()
    assert report == layout.report and report.matched["calibrated"] == 70
    _only(b, out_name)
    assert background.pending() == []


def test_background_export_of_a_saved_trace_and_keep_json(tmp_path):
    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    export(RecordedProfiler(_raw(name)), tmp_path / "a.pftrace", ann)
    saved = tmp_path / "saved.json"
    saved.write_bytes(_raw(name))
    export(str(saved), tmp_path / "from_file.pftrace", ann, background=True).result(timeout=120)
    h = export(RecordedProfiler(_raw(name)), tmp_path / "kept.pftrace", ann, keep_json=tmp_path / "kept.json",
               background=True)
    assert (tmp_path / "kept.json").read_bytes() == _raw(name)  # kept before the caller returns
    h.result(timeout=120)
    for p in ("from_file.pftrace", "kept.pftrace"):
        assert (tmp_path / p).read_bytes() == (tmp_path / "a.pftrace").read_bytes()
    _only(tmp_path, "a.pftrace", "saved.json", "from_file.pftrace", "kept.json", "kept.pftrace")


def test_background_errors_are_the_blocking_errors(tmp_path):
    """Annotations of another run, and a trace that is not JSON: result() raises what the
    blocking export raises, word for word; no output, no temporary file."""
    seed = _raw("seed_block_annotated")
    other = read_capture_record(fixture_capture("two_branch"))
    with pytest.raises(AnnotationMismatchError) as blocking:
        export(RecordedProfiler(seed), tmp_path / "x.pftrace", other)
    h = export(RecordedProfiler(seed), tmp_path / "x.pftrace", other, background=True)
    with pytest.raises(AnnotationMismatchError) as bg:
        h.result(timeout=120)
    assert str(bg.value) == str(blocking.value) and bg.value.differences == blocking.value.differences
    with pytest.raises(AnnotationMismatchError):  # asked again: the same outcome
        h.result()
    cut = seed[:len(seed) // 2]
    with pytest.raises(TraceFormatError) as blocking:
        export(RecordedProfiler(cut), tmp_path / "y.pftrace", other)
    with pytest.raises(TraceFormatError) as bg:
        export(RecordedProfiler(cut), tmp_path / "y.pftrace", other, background=True).result(timeout=120)
    assert str(bg.value) == str(blocking.value)
    assert str(bg.value).startswith("torch.profiler trace: ")
    _only(tmp_path)


def test_lane_options_refused_at_once(tmp_path):
    """An option the join would refuse raises in the caller, before torch's export."""
    from perfetto_graph_ann.annotations.model import AnnotationSet

    prof = RecordedProfiler(_raw("seed_block_annotated"))
    with pytest.raises(LaneOptionError):
        export(prof, tmp_path / "x.pftrace", AnnotationSet(), graph_lanes="all", background=True)
    assert prof.calls == 0
    _only(tmp_path)


def test_a_killed_worker_is_an_error_and_leaves_nothing(tmp_path):
    h = export(RecordedProfiler(_raw("seed_block_annotated")), tmp_path / "x.pftrace",
               read_capture_record(fixture_capture("seed_block_annotated")), background=True)
    h._proc.kill()
    with pytest.raises(OutputError, match="ended without a result"):
        h.result(timeout=60)
    for _ in range(50):  # the killed worker may have been inside atomic_write: its temp file goes with it
        if not os.listdir(tmp_path):
            break
        time.sleep(0.1)
    assert not (tmp_path / "x.pftrace").exists()
    assert [n for n in os.listdir(tmp_path) if not n.startswith(".pga-tmp-")] == []


def test_errors_pickle_as_themselves():
    for e in (TraceFormatError("t.json", "not valid JSON"), AnnotationMismatchError("a", "t", "why", ("pid",)),
              LaneOptionError("a", "no lane")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and vars(back) == vars(e)


def test_handler_background_same_bytes_and_errors_printed(tmp_path, capsys):
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    blocking = trace_handler(str(tmp_path / "blocking"), worker_name="w", annotations=ann, background=False)
    first = blocking(RecordedProfiler(_raw(name)))
    handler = trace_handler(str(tmp_path / "bg"), worker_name="w", annotations=ann)  # background by default
    paths = [handler(RecordedProfiler(_raw(name), step_num=s)) for s in (3, 7, 11)]
    assert handler.wait() == paths
    for p in paths:
        assert Path(p).read_bytes() == Path(first).read_bytes()
    _only(tmp_path / "bg", *(os.path.basename(p) for p in paths))

    bad = trace_handler(str(tmp_path / "bad"), worker_name="w", annotations=ann)
    out = bad(RecordedProfiler(b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1.0, "dur": ', step_num=7))
    assert bad.wait() == []  # printed, not raised
    err = capsys.readouterr().err
    assert f"torch.profiler trace (step 7) to {out} failed: torch.profiler trace (step 7): not valid JSON" in err
    _only(tmp_path / "bad")


def test_handler_keep_json_background(tmp_path):
    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    h = trace_handler(str(tmp_path), worker_name="w", annotations=ann, keep_json=True)
    out = h(RecordedProfiler(_raw(name)))
    kept = out[:-len(".pftrace")] + ".json"
    assert Path(kept).read_bytes() == _raw(name)
    assert h.wait() == [out]
    _only(tmp_path, os.path.basename(out), os.path.basename(kept))


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}, {str(ROOT / 'benchmarks')!r}]
        from decoder_synth import decoder_annotations, decoder_trace
        import perfetto_graph_ann as pga
        from perfetto_graph_ann.capture import background
        class Prof:
            def export_chrome_trace(self, path):
                open(path, "wb").write(decoder_trace(40))
        """) + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def test_exit_waits_for_pending_conversions(tmp_path):
    """A script that starts a conversion and ends: the interpreter's exit waits for it (and
    says so); the output is whole when the script has returned."""
    r = _script(tmp_path, f"""
        h = pga.export(Prof(), {str(tmp_path / 'out.pftrace')!r}, decoder_annotations(), graph_lanes="all",
                       background=True)
        print("returned", h.done())
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "returned False"
    assert "waiting for 1 background trace conversion" in r.stderr
    from support.pftrace_decode import decode

    assert sum(1 for s in decode(tmp_path / "out.pftrace").slices if s.cat == "kernel") == 40 * 828
    assert sorted(os.listdir(tmp_path)) == ["out.pftrace", "train.py"]


def test_exit_wait_is_bounded(tmp_path):
    """Past the bound the script ends with a message naming the file; the worker finishes on
    its own, writes the whole file and removes its temporary folder."""
    out = tmp_path / "out.pftrace"
    r = _script(tmp_path, f"""
        background.EXIT_WAIT_S = 0.0
        pga.export(Prof(), {str(out)!r}, decoder_annotations(), graph_lanes="all", background=True)
        """)
    assert r.returncode == 0, r.stderr
    assert f"{out} is still being written by process" in r.stderr
    for _ in range(600):
        if sorted(os.listdir(tmp_path)) == ["out.pftrace", "train.py"]:
            break
        time.sleep(0.1)
    assert sorted(os.listdir(tmp_path)) == ["out.pftrace", "train.py"]


def test_handler_waits_for_the_oldest_beyond_its_limit(tmp_path, monkeypatch):
    """Cycles faster than their conversions do not pile up processes: beyond MAX_IN_FLIGHT
    running, a cycle first waits for the oldest (whose file is then whole)."""
    from perfetto_graph_ann.capture import handler as handler_mod

    monkeypatch.setattr(handler_mod, "MAX_IN_FLIGHT", 1)
    name = "seed_block_annotated"
    h = trace_handler(str(tmp_path), worker_name="w", annotations=read_capture_record(fixture_capture(name)))
    first = h(RecordedProfiler(_raw(name)))
    second = h(RecordedProfiler(_raw(name)))
    assert os.path.exists(first) and first in h.wait() and h.wait() == [first, second]
    _only(tmp_path, os.path.basename(first), os.path.basename(second))


def test_an_unwritable_folder_is_an_output_error_at_once(tmp_path, monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    prof = RecordedProfiler(_raw("two_branch"))
    with pytest.raises(OutputError, match="cannot write beside the output: Permission denied"):
        export(prof, tmp_path / "x.pftrace", read_capture_record(fixture_capture("two_branch")), background=True)
    assert prof.calls == 0
    _only(tmp_path)
