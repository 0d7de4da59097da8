"""Concurrency (issue 8, item 6): capture while other threads launch work, conversions in
parallel threads and processes, two conversions racing for one output, engine sessions in
parallel processes. Expectations are the same work done sequentially."""
from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.capture_fakes import FakeCuda

from support import hostile_inputs as H
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.registry import Registry
from perfetto_graph_ann.capture.scopes import normalize_annotation

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

REPO = Path(__file__).resolve().parents[1]
STREAM_A, STREAM_B = 0x70, 0x90


# ---- capture -----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _fast_thread_switches():
    """Switch threads every microsecond so the interleavings actually happen."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


class _Scope:
    def __init__(self, sess, fields):
        self.sess, self.fields = sess, fields

    def __enter__(self):
        self.tok = self.sess.recorder.open(normalize_annotation(self.fields))

    def __exit__(self, *a):
        self.sess.recorder.close(self.tok)


@pytest.mark.parametrize("round_", range(5))
def test_capture_scopes_while_another_thread_captures_and_launches(round_):
    """Thread A annotates its graph scope by scope while thread B captures another graph on
    another stream, launching as fast as it can, with its own scopes. Each graph's nodes get
    exactly their own thread's annotations; nothing is lost or duplicated."""
    cuda = FakeCuda()
    registry = Registry()
    sessions = {}
    for stream in (STREAM_A, STREAM_B):
        cuda.begin_capture(stream)
        sessions[stream] = S.CaptureSession(cuda, stream, registry, device=0)
        sessions[stream].start()
    n_scopes, per_scope = 40, 7
    start = threading.Barrier(2)
    errors = []
    order = []
    launch = cuda.launch

    def logged_launch(stream, *a, **k):
        order.append(stream)
        return launch(stream, *a, **k)

    cuda.launch = logged_launch

    def annotate(stream, prefix, lane):
        try:
            sess = sessions[stream]
            start.wait()
            for i in range(n_scopes):
                cuda.launch(stream, f"{prefix}_free{i}")  # outside any scope
                with _Scope(sess, {"name": f"{prefix}{i}", "stream": lane}):
                    for j in range(per_scope):
                        cuda.launch(stream, f"{prefix}{i}_{j}")
                        time.sleep(0)  # a real launch releases the GIL; let the other thread in
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=annotate, args=(STREAM_A, "a", 61)),
               threading.Thread(target=annotate, args=(STREAM_B, "b", 62))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    switches = sum(1 for x, y in zip(order, order[1:]) if x != y)
    assert switches >= 2, "the two threads never interleaved: the test proves nothing"
    records = {}
    for stream, sess in sessions.items():
        sess.finish_capture()
        g = cuda.end_capture(stream)
        sess.bind_exec(cuda.instantiate(g))
        records[stream] = sess.record
    for stream, prefix, lane in ((STREAM_A, "a", 61), (STREAM_B, "b", 62)):
        rec = records[stream]
        assert len(rec.nodes) == n_scopes * (per_scope + 1)
        assert [n.key for n in rec.nodes] == [make_key(rec.exec_id, i) for i in range(len(rec.nodes))]
        for n in rec.nodes:
            if "_free" in n.kernel:
                assert n.annotation == {}, n
            else:
                i = int(n.kernel[1:].split("_")[0])
                assert n.annotation == {"name": f"{prefix}{i}", "stream": lane}, n
    snap = registry.snapshot()
    assert sorted(g.exec_id for g in snap.graphs) == sorted(r.exec_id for r in records.values())


def test_helper_thread_launching_into_the_capture_is_attributed():
    """A helper thread launching into the graph under capture (autograd's engine does this)
    while the owner thread holds a scope open: the helper's nodes get the open scope."""
    cuda = FakeCuda()
    cuda.begin_capture(STREAM_A)
    sess = S.CaptureSession(cuda, STREAM_A, Registry(), device=0)
    sess.start()
    side = STREAM_A + 1
    cuda.join(side, STREAM_A)
    with _Scope(sess, {"name": "backward", "stream": 63}):
        t = threading.Thread(target=lambda: [cuda.launch(side, f"bw{i}") for i in range(50)])
        t.start()
        t.join(30)
    cuda.launch(STREAM_A, "after")
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM_A)))
    got = {n.kernel: dict(n.annotation) for n in sess.record.nodes}
    assert got.pop("after") == {}
    assert got == {f"bw{i}": {"name": "backward", "stream": 63} for i in range(50)}


# ---- conversions -------------------------------------------------------------------------

def _convert_one(args):
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.join.join import join
    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.write.chrome_json import write_chrome_json
    from perfetto_graph_ann.pipeline.convert import convert

    name, out = args
    trace = read_trace(H.FIXTURES / f"{name}.trace.json.gz")
    cap = H.FIXTURES / f"{name}.capture.json"
    layout = join(trace, load_annotations(cap), "all") if cap.exists() else None  # the CLI's .pftrace default
    if out.endswith(".json"):
        write_chrome_json(trace, out, layout)
    else:
        convert(trace, out, layout=layout)
    return out


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """Every fixture converted alone, one after the other: the expected bytes."""
    d = tmp_path_factory.mktemp("seq")
    out = {}
    for name in H.TRACE_NAMES:
        for ext in (".pftrace", ".json"):
            p = str(d / f"{name}{ext}")
            _convert_one((name, p))
            out[(name, ext)] = Path(p).read_bytes()
    return out


def _jobs(folder: Path, copies: int):
    return [(name, str(folder / f"{name}.{k}{ext}")) for k in range(copies) for name in H.TRACE_NAMES
            for ext in (".pftrace", ".json")]


def test_parallel_conversions_in_threads_match_sequential(tmp_path, sequential):
    jobs = _jobs(tmp_path, 3)
    with cf.ThreadPoolExecutor(max_workers=6) as pool:
        done = list(pool.map(_convert_one, jobs))
    assert len(done) == len(jobs)
    for name, out in jobs:
        ext = ".json" if out.endswith(".json") else ".pftrace"
        assert Path(out).read_bytes() == sequential[(name, ext)], out
    assert H.leftovers(tmp_path) == []


def test_parallel_conversions_in_processes_match_sequential(tmp_path, sequential):
    import multiprocessing as mp

    jobs = _jobs(tmp_path, 1)
    with cf.ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_convert_one, jobs))
    for name, out in jobs:
        ext = ".json" if out.endswith(".json") else ".pftrace"
        assert Path(out).read_bytes() == sequential[(name, ext)], out
    assert H.leftovers(tmp_path) == []


def test_two_conversions_racing_for_one_output(tmp_path, sequential):
    """Two different traces written to the same OUT at once, many times: OUT is always one
    complete conversion, never a mix, and no temporary file is left."""
    out = str(tmp_path / "same.pftrace")
    names = ["seed_block_eager", "two_branch"]
    valid = {sequential[(n, ".pftrace")] for n in names}
    for _ in range(10):
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(_convert_one, [(n, out) for n in names]))
        assert Path(out).read_bytes() in valid
    assert H.leftovers(tmp_path) == []


def test_two_cli_conversions_at_once_in_processes(tmp_path, sequential):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    procs, outs = [], []
    for name in ("seed_block_annotated", "two_branch"):
        out = tmp_path / f"{name}.pftrace"
        outs.append((name, out))
        procs.append(subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", "convert",
                                       str(H.FIXTURES / f"{name}.trace.json.gz"), "-o", str(out), "-q",
                                       "--annotations", str(H.FIXTURES / f"{name}.capture.json")], env=env,
                                      stderr=subprocess.PIPE))
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    for name, out in outs:
        assert out.read_bytes() == sequential[(name, ".pftrace")]


# ---- engine sessions ---------------------------------------------------------------------

def test_two_engine_sessions_in_two_processes_at_once(tmp_path):
    """Two ``sql`` commands on two traces at once (threads are covered in test_engine_robustness)."""
    from support.engine_support import portable_reason, x_counts_by_cat

    if portable_reason():
        pytest.skip(portable_reason())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    names = ["seed_block_graph", "two_branch", "seed_block_graph"]
    procs = [subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", "sql", str(H.FIXTURES / f"{n}.trace.json.gz"),
                               "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'", "--engine", "portable",
                               "--format", "csv"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in names]
    for n, p in zip(names, procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.split() == ["n", str(x_counts_by_cat(n)["kernel"])]


@pytest.mark.parametrize("was_on", [True, False])
def test_paused_gc_in_many_threads_puts_the_collector_back(was_on):
    """Conversions in threads pause the collector together: whatever the interleaving (nested
    pauses too), it is back to the caller's setting once the last one ends. Each thread taking
    its own snapshot could read the others' pause and leave it off."""
    import gc
    import threading

    from perfetto_graph_ann.write.pftrace import paused_gc

    start = threading.Barrier(8)
    seen_on = []

    def work():
        start.wait()
        for k in range(3000):
            with paused_gc():
                seen_on.append(gc.isenabled())
                if k % 7 == 0:
                    with paused_gc():
                        pass

    (gc.enable if was_on else gc.disable)()
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert gc.isenabled() is was_on
        assert not any(seen_on)  # paused inside every one
    finally:
        gc.enable()
