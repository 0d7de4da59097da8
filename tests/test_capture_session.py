"""Capture logic on CPU with a fake CUDA backend: scopes, nesting, threads, rekeying, registry."""
from __future__ import annotations

import threading
import time

import pytest
from support.capture_fakes import FakeCuda, recorder_scope

from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.registry import KernelAnnotationsView, Registry
from perfetto_graph_ann.capture.scopes import LaneAllocator, normalize_annotation
from perfetto_graph_ann.errors import CaptureError

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM, SIDE = 0x70, 0x71


def new_session(cuda, registry=None):
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, registry or Registry(), device=0)
    sess.start()
    return sess


def finish(cuda, sess):
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    cuda.forget(g)  # torch destroys the template at instantiation (keep_graph=False)
    return sess.record


def by_kernel(rec):
    return {n.kernel: n for n in rec.nodes}


def test_scopes_tag_their_nodes_and_rekey_to_exec_graph():
    cuda = FakeCuda()
    sess = new_session(cuda)
    cuda.launch(STREAM, "before")
    with recorder_scope(sess, "qkv_proj"):
        cuda.launch(STREAM, "gemm1")
    with recorder_scope(sess, {"name": "attention", "stream": 62}):
        for i in range(3):
            cuda.launch(STREAM, f"att{i}")
    cuda.launch(STREAM, "after")
    rec = finish(cuda, sess)
    exec_id = rec.exec_id
    assert exec_id == 2 and rec.template_id == 1  # ids handed out by the fake driver
    k = by_kernel(rec)
    assert k["before"].annotation == {} and k["after"].annotation == {}
    assert k["gemm1"].annotation == {"name": "qkv_proj"}
    assert [k[f"att{i}"].annotation for i in range(3)] == [{"name": "attention", "stream": 62}] * 3
    assert k["att0"].lane == 62 and k["gemm1"].lane is None
    # key = (exec id << 32) | local id, local id = position in the template graph
    assert [n.key for n in rec.nodes] == [make_key(exec_id, i) for i in range(6)]


def test_nested_scopes_merge_inner_wins():
    cuda = FakeCuda()
    sess = new_session(cuda)
    with recorder_scope(sess, {"name": "outer", "stream": 61, "layer": 3}):
        cuda.launch(STREAM, "a")
        with recorder_scope(sess, {"name": "inner", "extra": True}):
            cuda.launch(STREAM, "b")
            with recorder_scope(sess, {"stream": 64}):
                cuda.launch(STREAM, "c")
        cuda.launch(STREAM, "d")
    k = by_kernel(finish(cuda, sess))
    assert k["a"].annotation == {"name": "outer", "stream": 61, "layer": 3}
    assert k["b"].annotation == {"name": "inner", "stream": 61, "layer": 3, "extra": True}
    assert k["c"].annotation == {"name": "inner", "stream": 64, "layer": 3, "extra": True}
    assert k["d"].annotation == k["a"].annotation


def test_side_stream_nodes_are_seen_once_it_joins():
    cuda = FakeCuda()
    sess = new_session(cuda)
    # the scope opens while the side stream has not joined the capture yet
    with recorder_scope(sess, "left"):
        cuda.join(SIDE, STREAM)
        cuda.launch(SIDE, "side_gemm")
    with recorder_scope(sess, "combine"):
        cuda.launch(STREAM, "add")
    k = by_kernel(finish(cuda, sess))
    assert k["side_gemm"].annotation == {"name": "left"} and k["add"].annotation == {"name": "combine"}


def test_non_work_nodes_and_empty_nodes():
    cuda = FakeCuda()
    sess = new_session(cuda)
    with recorder_scope(sess, "copy"):
        cuda.launch(STREAM, type="memcpy")
        cuda.launch(STREAM, type="memset")
        cuda.launch(STREAM, type="empty")
        cuda.launch(STREAM, type="event_record")
    rec = finish(cuda, sess)
    got = {n.type: n.annotation for n in rec.nodes}
    assert got == {"memcpy": {"name": "copy"}, "memset": {"name": "copy"}, "empty": {}, "event_record": {"name": "copy"}}


def test_threads_record_their_own_scopes():
    """Each thread has its own stack of open scopes: while all eight threads (and the
    capturing thread) hold scopes open at once, each one sees only its own fields, and
    closing them leaves nothing open anywhere."""
    cuda = FakeCuda()
    sess = new_session(cuda)
    streams = [0x100 + i for i in range(8)]
    for s in streams:
        cuda.join(s, STREAM)
    inside = threading.Barrier(len(streams) + 1)  # every thread's scopes open, and the main one's
    closed = threading.Barrier(len(streams) + 1)  # every thread's scopes closed again
    seen, errors = {}, []

    def work(i, s):
        try:
            with recorder_scope(sess, {"name": f"t{i}"}), recorder_scope(sess, {"layer": i}):
                cuda.launch(s, f"k{i}")
                inside.wait(timeout=30)
                seen[i] = sess.recorder.open_fields()
                inside.wait(timeout=30)  # nobody closes before every thread has looked
            closed.wait(timeout=30)
            seen[i, "after"] = sess.recorder.open_fields()
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(streams)]
    with recorder_scope(sess, {"name": "main"}):
        for t in ts:
            t.start()
        inside.wait(timeout=30)
        seen["main"] = sess.recorder.open_fields()
        inside.wait(timeout=30)
    closed.wait(timeout=30)
    for t in ts:
        t.join()
    assert not errors
    assert seen == {"main": {"name": "main"}, **{i: {"name": f"t{i}", "layer": i} for i in range(8)},
                    **{(i, "after"): {} for i in range(8)}}
    assert sess.recorder.open_fields() == {}
    rec = finish(cuda, sess)
    # concurrent scopes of several threads on one graph may also see each other's nodes (a
    # documented limit): no node is lost, each carries a name, and every scope was recorded
    names = {n.kernel: n.annotation.get("name") for n in rec.nodes}
    assert set(names) == {f"k{i}" for i in range(8)} and all(v is not None for v in names.values())
    fields = sorted((r[1] for r in sess.recorder.closed), key=lambda f: sorted(f.items(), key=str))
    assert fields == sorted([{"name": "main"}] + [{"name": f"t{i}"} for i in range(8)] +
                            [{"layer": i} for i in range(8)], key=lambda f: sorted(f.items(), key=str))


def test_nothing_recorded_outside_capture_and_errors():
    cuda = FakeCuda()
    with pytest.raises(CaptureError, match="not capturing"):
        S.CaptureSession(cuda, STREAM, Registry()).start()
    sess = new_session(cuda)
    with pytest.raises(CaptureError, match="finish_capture"):
        sess.bind_exec(1)
    with pytest.raises(CaptureError, match="instantiated"):
        sess.apply_calibration({})


def test_registry_reinstantiate_replaces_and_reset_drops():
    cuda, reg = FakeCuda(), Registry()
    sess = new_session(cuda, reg)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    r1 = sess.record
    view = KernelAnnotationsView(reg)
    assert dict(view) == {make_key(r1.exec_id, 0): [{"name": "a"}]}
    sess.bind_exec(cuda.instantiate(g))  # re-instantiation: new exec id, same local ids
    r2 = sess.record
    assert r2.exec_id != r1.exec_id
    assert dict(view) == {make_key(r2.exec_id, 0): [{"name": "a"}]}  # live view, rekeyed
    # a second graph in sequence keeps its own entries
    sess2 = new_session(cuda, reg)
    with recorder_scope(sess2, "b"):
        cuda.launch(STREAM, "k1")
    r3 = finish(cuda, sess2)
    assert set(view) == {make_key(r2.exec_id, 0), make_key(r3.exec_id, 0)}
    sess.drop()
    assert dict(view) == {make_key(r3.exec_id, 0): [{"name": "b"}]}
    snap = reg.snapshot()
    assert [g.exec_id for g in snap.graphs] == [r3.exec_id]
    with pytest.raises(TypeError):
        view[make_key(r3.exec_id, 0)] = []  # read-only


def test_calibration_applied_to_record():
    cuda = FakeCuda()
    sess = new_session(cuda)
    cuda.launch(STREAM, "a")
    cuda.launch(STREAM, "b")
    rec = finish(cuda, sess)
    keys = [n.key for n in rec.nodes]
    sess.apply_calibration({keys[0]: (7, 0), keys[1]: (145, 0)})
    rec = sess.record
    assert [(n.stream, n.ordinal) for n in rec.nodes] == [(7, 0), (145, 0)] and rec.calibrated


def test_lane_allocator_stable_from_60():
    lanes = LaneAllocator()
    assert lanes.lane("s1", "left") == 60
    assert lanes.lane("s2", "right") == 61
    assert lanes.lane("s1", "again") == 60
    assert lanes.snapshot() == {60: "left", 61: "right"}
    assert lanes.lane("s1", "renamed", relabel=True) == 60 and lanes.labels[60] == "renamed"
    got = []
    ts = [threading.Thread(target=lambda i=i: got.append(lanes.lane(("pg", i % 3)))) for i in range(30)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(set(got)) == [62, 63, 64]


def test_normalize_annotation():
    assert normalize_annotation("x") == {"name": "x"}
    assert normalize_annotation({"name": "y", "stream": 3, "k": [1]}) == {"name": "y", "stream": 3, "k": [1]}
    for bad in (3, None, {"stream": "lane"}, {"stream": True}, {1: "a"}):
        with pytest.raises(TypeError):
            normalize_annotation(bad)


def test_current_session_lookup_threads():
    cuda = FakeCuda()
    sess = new_session(cuda)
    S.push(sess)
    try:
        assert S.current() is sess
        seen = []
        t = threading.Thread(target=lambda: seen.append(S.current()))  # e.g. autograd's engine thread
        t.start()
        t.join()
        assert seen == [sess]
    finally:
        S.pop(sess)
    assert S.current() is None


def test_scope_edges_count_nodes_and_the_table_is_read_later_from_a_copy():
    cuda = FakeCuda()
    sess = new_session(cuda)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
        with recorder_scope(sess, "b"):
            cuda.launch(STREAM, "k1")
    cuda.launch(STREAM, "k2")
    assert (cuda.count_calls, cuda.list_calls) == (4, 0)  # one count per edge, no listing
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    assert len(cuda.graphs) == 2 and cuda.destroyed == []  # the template and its copy
    copy = next(h for h in cuda.graphs if h != g)
    sess.bind_exec(cuda.instantiate(g))
    cuda.forget(g)  # the template is gone: the table must come from the copy
    rec = sess.record
    assert cuda.destroyed == [copy]  # read once, then freed
    assert {n.kernel: dict(n.annotation) for n in rec.nodes} == {
        "k0": {"name": "a"}, "k1": {"name": "b"}, "k2": {}}
    assert [n.key for n in rec.nodes] == [make_key(rec.exec_id, i) for i in range(3)]
    assert {n.handle for n in sess.nodes} <= {n.handle for n in cuda.graphs[copy]}
    sess.bind_exec(cuda.instantiate(g))  # re-instantiation reuses the table read once
    assert cuda.destroyed == [copy] and by_kernel(sess.record)["k1"].annotation["name"] == "b"


def test_without_a_copy_the_table_is_read_at_finish():
    cuda = FakeCuda()
    cuda.can_clone = False  # e.g. a graph with memory-allocation nodes
    sess = new_session(cuda)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    rec = finish(cuda, sess)  # finish() forgets the template after instantiation
    assert by_kernel(rec)["k0"].annotation == {"name": "a"} and cuda.destroyed == []


def test_reset_before_the_table_was_read_frees_the_copy():
    cuda = FakeCuda()
    sess = new_session(cuda)
    cuda.launch(STREAM, "k0")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    sess.drop()
    assert len(cuda.destroyed) == 1
    sess.drop()  # twice: nothing left to free
    assert len(cuda.destroyed) == 1


def test_verify_mode_lists_every_edge_and_catches_a_reordering_driver(monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setenv(S.VERIFY_ENV, "1")
    sess = new_session(cuda)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    assert cuda.list_calls == 2
    rec = finish(cuda, sess)
    assert by_kernel(rec)["k0"].annotation == {"name": "a"}
    # a driver whose listing is not append-only: the scope's count range would be wrong
    sess = new_session(cuda)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    g = cuda.capturing[STREAM]
    tok = sess.recorder.open({"name": "b"})
    cuda.launch(STREAM, "k1")
    cuda.graphs[g].reverse()
    with pytest.raises(CaptureError, match="changed order"):
        sess.recorder.close(tok)


def test_verify_mode_catches_a_copy_that_lists_differently():
    cuda = FakeCuda()
    orig = cuda.clone_graph

    def reversed_clone(graph):
        c = orig(graph)
        cuda.graphs[c].reverse()
        return c

    cuda.clone_graph = reversed_clone
    sess = S.CaptureSession(cuda, STREAM, Registry(), verify=True)
    cuda.begin_capture(STREAM)
    sess.start()
    cuda.launch(STREAM, "k0")
    cuda.launch(STREAM, "k1")
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    with pytest.raises(CaptureError, match="copy of the captured graph"):
        sess.record


def test_concurrent_first_reads_read_the_copy_once():
    """Several threads asking for the record at once: one reads the copy, all see the same table."""
    cuda = FakeCuda()
    reads = []
    orig = cuda.node_infos

    def slow_infos(graph):
        reads.append(graph)
        time.sleep(0.01)  # widen the window in which a second reader could slip in
        return orig(graph)

    cuda.node_infos = slow_infos
    sess = new_session(cuda)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    cuda.forget(g)
    out, barrier = [], threading.Barrier(8)

    def read():
        barrier.wait()
        out.append(sess.record)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1 and len(cuda.destroyed) == 1
    assert len({id(r) for r in out}) == 1 and by_kernel(out[0])["k0"].annotation == {"name": "a"}


def test_exec_id_is_read_on_first_use_once_per_binding(monkeypatch):
    """bind_exec asks the backend nothing (it sits in the timed capture); the first reader
    does, once; a re-binding or a drop forgets the id, never keeping a stale one."""
    cuda, reg = FakeCuda(), Registry()
    calls = []
    real = cuda.exec_id
    monkeypatch.setattr(cuda, "exec_id", lambda h: calls.append(h) or real(h))
    sess = new_session(cuda, reg)
    with recorder_scope(sess, "a"):
        cuda.launch(STREAM, "k0")
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    h1 = cuda.instantiate(g)
    sess.bind_exec(h1)
    assert calls == []
    assert sess.exec_id == cuda.execs[h1] and sess.record.exec_id == cuda.execs[h1]
    assert calls == [h1]
    h2 = cuda.instantiate(g)
    sess.bind_exec(h2)
    assert sess.exec_id == cuda.execs[h2] != cuda.execs[h1]
    assert calls == [h1, h2]
    assert [gr.exec_id for gr in reg.snapshot().graphs] == [cuda.execs[h2]]
    sess.drop()
    assert sess.exec_id is None and calls == [h1, h2]
