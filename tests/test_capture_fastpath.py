"""The compiled capture path (``capture/_fastpath.c``) against the pure-Python one.

The C recorder must behave exactly like ``scopes.ScopeRecorder``: the same tokens, closed
records, per-thread open fields and snapshots for any sequence of operations, whether it
counts through a Python callable or through a C function pointer (here a ctypes callback
playing ``cuGraphGetNodes``). The driver helpers are driven by callbacks with the driver's
signatures. Skipped where the extension is not built (no C compiler at install time).
"""
from __future__ import annotations

import collections
import ctypes
import gc
import os
import subprocess
import sys
import threading

import pytest
from support.capture_fakes import GET_NODES, FakeCuda
from hypothesis import given
from hypothesis import strategies as st

from perfetto_graph_ann.capture import fastpath
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.scopes import ScopeRecorder
from perfetto_graph_ann.errors import CaptureError

pytestmark = pytest.mark.skipif(fastpath._c is None, reason=f"compiled capture path not built: {fastpath.describe()}")

C = fastpath._c
CAPTURE_INFO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p)
OUT_PTR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
OUT_U32 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32))


def addr(cb) -> int:
    return ctypes.cast(cb, ctypes.c_void_p).value


class Graph:
    """A node counter both recorders can read: a Python callable and a C function pointer."""

    def __init__(self):
        self.n = 0
        self.c_fn = GET_NODES(self._c)

    def __call__(self):
        return self.n

    def _c(self, graph, nodes, num):
        num[0] = self.n
        return 0


OPS = st.lists(st.one_of(
    st.tuples(st.just("open"), st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=2)),
    st.tuples(st.just("open_before"), st.integers(0, 50)),
    st.tuples(st.just("close"), st.integers(0, 5)),  # the i-th most recent open token, in or out of order
    st.tuples(st.just("launch"), st.integers(1, 4)),
    st.tuples(st.just("snapshot"), st.none()),
    st.tuples(st.just("fields"), st.none()),
    st.tuples(st.just("finish"), st.none()),
), max_size=40)


def run(rec, graph: Graph, ops):
    """Apply ``ops`` and return everything observable (tokens as plain lists)."""
    seen, open_toks = [], []
    for op, arg in ops:
        if op == "open":
            tok = rec.open(arg)
            open_toks.append(tok)
            seen.append(("tok", list(tok)))
        elif op == "open_before":
            tok = rec.open({"stream": 60}, before=arg)
            open_toks.append(tok)
            seen.append(("tok", list(tok)))
        elif op == "close" and open_toks:
            rec.close(open_toks.pop(-1 - arg % len(open_toks)))
        elif op == "launch":
            graph.n += arg
        elif op == "snapshot":
            seen.append(("snap", rec.snapshot()))
        elif op == "fields":
            seen.append(("fields", rec.open_fields()))
        elif op == "finish":
            rec.active = False
    seen.append(("records", rec.records(), rec.active))
    return seen


@given(OPS)
def test_c_recorder_matches_python_recorder_with_a_python_counter(ops):
    g1, g2 = Graph(), Graph()
    assert run(ScopeRecorder(g1), g1, ops) == run(fastpath.FastScopeRecorder(g2), g2, ops)


@given(OPS)
def test_c_recorder_matches_python_recorder_counting_through_a_function_pointer(ops):
    g1, g2 = Graph(), Graph()
    fast = fastpath.FastScopeRecorder(None)
    fast.set_fast(addr(g2.c_fn), 0x1234, -1, None)
    assert fast.fast
    assert run(ScopeRecorder(g1), g1, ops) == run(fast, g2, ops)


def test_fast_count_switches_to_the_python_edge_once_the_count_reaches_switch_at():
    g, calls = Graph(), []

    def slow():
        calls.append(g.n)
        return g.n

    rec = fastpath.FastScopeRecorder(None)
    rec.set_fast(addr(g.c_fn), 0x10, 5, slow)
    g.n = 3
    assert rec.snapshot() == 3 and rec.fast and calls == []
    g.n = 5
    assert rec.snapshot() == 5 and not rec.fast  # this count reached 5: the next edge is Python's
    g.n = 9
    assert rec.snapshot() == 9 and calls == [9]


def test_a_failing_count_raises_capture_error_naming_the_call_and_code():
    fail = GET_NODES(lambda graph, nodes, num: 201)
    rec = fastpath.FastScopeRecorder(None)
    rec.set_fast(addr(fail), 0x10, -1, None)
    with pytest.raises(CaptureError, match=r"cuGraphGetNodes failed with CUresult 201"):
        rec.open({"name": "x"})
    assert rec.records() == []


def test_python_counter_errors_propagate():
    def boom():
        raise CaptureError("counter broke")

    rec = fastpath.FastScopeRecorder(boom)
    with pytest.raises(CaptureError, match="counter broke"):
        rec.open({"name": "x"})


def test_bad_tokens_and_arguments_are_type_errors():
    rec = fastpath.FastScopeRecorder(lambda: 0)
    with pytest.raises(TypeError):
        rec.close([1, 2])
    with pytest.raises(TypeError):
        rec.open()
    with pytest.raises(TypeError):
        rec.open({}, nope=1)
    with pytest.raises(ValueError):
        rec.set_fast(0, 1, -1, None)


def test_each_thread_has_its_own_stack_of_open_scopes():
    g = Graph()
    rec = fastpath.FastScopeRecorder(g)
    outer = rec.open({"name": "main"})
    seen = {}

    def other():
        tok = rec.open({"name": "worker", "w": 1})
        seen["inside"] = rec.open_fields()
        rec.close(tok)
        seen["after"] = rec.open_fields()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"inside": {"name": "worker", "w": 1}, "after": {}}
    assert rec.open_fields() == {"name": "main"}
    rec.close(outer)
    assert [r.fields["name"] for r in rec.records()] == ["worker", "main"]


def test_no_references_leak():
    fields = {"name": "leak-check"}
    g = Graph()
    rec = fastpath.FastScopeRecorder(None)
    rec.set_fast(addr(g.c_fn), 0x10, -1, None)
    base = sys.getrefcount(fields)
    for _ in range(1000):
        rec.close(rec.open(fields))
    assert sys.getrefcount(fields) == base + 1000  # one per closed record, none for the tokens
    del rec
    gc.collect()
    assert sys.getrefcount(fields) == base


def test_a_recorder_in_a_reference_cycle_is_collected():
    import weakref

    class Holder:
        def count(self):
            return 0

    h = Holder()
    h.rec = fastpath.FastScopeRecorder(h.count)  # holder -> recorder -> bound method -> holder
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None


def test_capture_graph_reads_an_active_capture_only():
    state = {"status": 1, "graph": 0xABC0, "rc": 0, "stream": None}

    def info(stream, status, ident, graph, deps, ndeps):
        state["stream"] = stream
        status[0] = state["status"]
        graph[0] = state["graph"]
        return state["rc"]

    fn = CAPTURE_INFO(info)
    assert C.capture_graph(addr(fn), 0x70) == 0xABC0 and state["stream"] == 0x70
    state["status"] = 0  # CU_STREAM_CAPTURE_STATUS_NONE
    assert C.capture_graph(addr(fn), 0x70) is None
    state.update(status=1, rc=400)
    assert C.capture_graph(addr(fn), 0x70) is None
    state.update(rc=0, graph=0)
    assert C.capture_graph(addr(fn), 0x70) is None


def test_out_ptr_and_out_u32_return_the_value_or_none_on_failure():
    rc = {"v": 0}

    def clone(out, graph):
        out[0] = graph + 8
        return rc["v"]

    def graph_id(graph, out):
        out[0] = 0xFFFFFFFF
        return rc["v"]

    c, i = OUT_PTR(clone), OUT_U32(graph_id)
    assert C.out_ptr(addr(c), 0x100) == 0x108
    assert C.out_u32(addr(i), 0x100) == 0xFFFFFFFF
    rc["v"] = 1
    assert C.out_ptr(addr(c), 0x100) is None and C.out_u32(addr(i), 0x100) is None


def test_sessions_count_in_c_and_attribute_nodes_as_the_python_path(monkeypatch):
    def capture(enabled):
        monkeypatch.setattr(fastpath, "ENABLED", enabled)
        cuda = FakeCuda()
        cuda.begin_capture(0x70)
        sess = S.CaptureSession(cuda, 0x70, markers_from=None)
        sess.start()
        rec = sess.recorder
        cuda.launch(0x70, "pre")
        tok = rec.open({"name": "attention"})
        cuda.launch(0x70, "qk")
        inner = rec.open({"name": "softmax", "stream": 61})
        cuda.launch(0x70, "softmax")
        rec.close(inner)
        cuda.launch(0x70, "pv")
        rec.close(tok)
        sess.finish_capture()
        return type(rec).__name__, getattr(rec, "fast", False), \
            {n.kernel: sess.annotations.get(n.handle) for n in sess.nodes}

    name_c, fast_c, ann_c = capture(True)
    name_py, fast_py, ann_py = capture(False)
    assert (name_c, fast_c) == ("FastScopeRecorder", True) and name_py == "ScopeRecorder"
    assert ann_c == ann_py == {"pre": None, "qk": {"name": "attention"},
                               "softmax": {"name": "softmax", "stream": 61}, "pv": {"name": "attention"}}


def test_verify_mode_keeps_the_python_recorder(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    sess = S.CaptureSession(FakeCuda(), 0x70, verify=True)
    assert type(sess.recorder).__name__ == "ScopeRecorder"


def test_environment_switch_selects_the_python_path_and_says_so():
    code = ("from perfetto_graph_ann.capture import fastpath, session; from support.capture_fakes import FakeCuda; "
            "print(fastpath.describe()); print(type(session.CaptureSession(FakeCuda(), 1).recorder).__name__)")
    env = dict(os.environ, PERFETTO_GRAPH_ANN_PURE_PYTHON="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["python (PERFETTO_GRAPH_ANN_PURE_PYTHON is set)", "ScopeRecorder"]


@pytest.mark.parametrize("make", [ScopeRecorder, fastpath.FastScopeRecorder], ids=["python", "compiled"])
def test_a_thread_that_ended_with_a_scope_open_leaves_nothing_to_later_threads(make):
    """Thread idents are reused: a later thread must not inherit a dead thread's open scopes."""
    rec = make(lambda: 0)
    seen = []

    def leaves_open():
        rec.open({"name": "abandoned"})

    def looks():
        seen.append(rec.open_fields())

    for _ in range(20):  # the ident of an ended thread is usually handed to the next one
        for fn in (leaves_open, looks):
            t = threading.Thread(target=fn)
            t.start()
            t.join()
    assert seen == [{}] * 20


def test_driver_helpers_refuse_a_null_function_and_wrong_arguments():
    for fn in (C.capture_graph, C.out_ptr, C.out_u32):
        with pytest.raises(ValueError, match="fn is NULL"):
            fn(0, 0x10)
        with pytest.raises(ValueError, match="fn is NULL"):
            fn(None, 0x10)
        with pytest.raises(TypeError):
            fn(1)


SESSION_OPS = st.lists(st.one_of(st.tuples(st.just("launch"), st.integers(1, 3)),
                                 st.tuples(st.just("open"), st.sampled_from(["a", "b", "c"])),
                                 st.tuples(st.just("close"), st.none())), max_size=30)


def run_session(monkeypatch, compiled: bool, markers_from, ops, can_mark=True, c_table=False):
    """A capture driven by ``ops``; what it attributed and where its marker nodes went."""
    monkeypatch.setattr(fastpath, "ENABLED", compiled)
    cuda = FakeCuda()
    cuda.can_mark = can_mark
    cuda.c_table = c_table
    cuda.begin_capture(0x70)
    sess = S.CaptureSession(cuda, 0x70, markers_from=markers_from)
    sess.start()
    toks, k = [], 0
    for op, arg in ops:
        if op == "launch":
            for _ in range(arg):
                k += 1
                cuda.launch(0x70, f"k{k}")
        elif op == "open":
            toks.append(sess.recorder.open({"name": arg, "depth": len(toks)}))
        elif toks:
            sess.recorder.close(toks.pop())
    while toks:
        sess.recorder.close(toks.pop())
    sess.finish_capture()
    ann = {n.kernel: sess.annotations.get(n.handle) for n in sess.nodes}
    return ann, list(sess._markers), cuda.marker_calls


@pytest.mark.parametrize("markers_from", [None, 0, 3])
@given(ops=SESSION_OPS)
def test_compiled_markers_and_counts_attribute_exactly_as_the_python_path(monkeypatch, markers_from, ops):
    want = run_session(monkeypatch, False, markers_from, ops)
    assert run_session(monkeypatch, True, markers_from, ops) == want
    assert run_session(monkeypatch, True, markers_from, ops, c_table=True) == want  # the table read in C


def _mixed_graph(cuda):
    g = cuda.begin_capture(0x70)
    cuda.launch(0x70, "gemm", grid=(4, 2, 1), block=(256, 1, 1))
    cuda.launch(0x70, "memset", type="memset")
    cuda.add_marker(g)
    cuda.launch(0x70, "softmax", grid=(9, 1, 1), block=(32, 4, 2))
    return g


def test_read_nodes_gives_every_node_in_creation_order_with_its_kernel_fields():
    cuda = FakeCuda()
    cuda.c_table = True
    g = _mixed_graph(cuda)
    raw = cuda.raw_table(g)
    assert len(raw) == 4 * fastpath.NODE_ROW.size
    rows = list(fastpath.NODE_ROW.iter_unpack(raw))
    want = cuda.node_infos(g)
    assert [r[0] for r in rows] == [n.handle for n in want]  # creation order
    assert [r[1] for r in rows] == [(0xAB << 32) | i for i in range(4)]  # the whole node id
    assert [r[2] for r in rows] == [0, 2, 5, 0] and [r[3] for r in rows] == [1, 0, 0, 1]
    assert rows[0][6:] == (4, 2, 1, 256, 1, 1) and rows[3][6:] == (9, 1, 1, 32, 4, 2)
    assert rows[1][4:] == (0,) * 8  # no kernel parameters read for a memset
    assert cuda.decode_table(raw) == want
    assert C.read_nodes(*(ctypes.cast(f, ctypes.c_void_p).value for f in
                          (cuda._c_get_nodes, cuda._c_type, cuda._c_params, cuda._c_any_id)),
                        cuda.begin_capture(0x71)) == b""  # an empty graph


def _long_graph(cuda, n):
    g = cuda.begin_capture(0x72)
    for i in range(n):
        cuda.launch(0x72, f"k{i % 7}", grid=(i + 1, 1, 1))
    return g


def _ids(raw):
    return [r[1] for r in fastpath.NODE_ROW.iter_unpack(raw)]


@pytest.mark.parametrize("n", [1, 2, 64, 65, 200, 1000])
def test_read_nodes_samples_the_ids_of_a_consecutive_listing(n):
    """Consecutive ids (what a driver's listing gives, measured on the H200): the ends and every
    64th node are read, and every row still has its node's own id."""
    cuda = FakeCuda()
    cuda.c_table = True
    g = _long_graph(cuda, n)
    raw = cuda.raw_table(g)
    assert _ids(raw) == [(0xAB << 32) | i for i in range(n)]
    assert cuda.decode_table(raw) == cuda.node_infos(g)
    sampled = {0, n - 1} | set(range(64, n, 64))
    assert cuda.table_id_reads == len(sampled)


@pytest.mark.parametrize("where", ["gap at a sample", "gap between samples", "reversed", "last off"])
def test_read_nodes_reads_every_id_when_a_sample_is_off(where):
    """Ids that do not run on from the first (a graph whose nodes were not all made in listing
    order, or numbered with gaps): every node's id is read, none inferred."""
    cuda = FakeCuda()
    cuda.c_table = True
    g = _long_graph(cuda, 300)
    nodes = cuda.graphs[g]
    ids = list(range(300))
    if where == "gap at a sample":
        ids = ids[:64] + [i + 5 for i in ids[64:]]
    elif where == "gap between samples":
        ids = ids[:100] + [i + 1 for i in ids[100:]]
    elif where == "reversed":
        ids = ids[::-1]
    else:
        ids[-1] += 3
    nodes[:] = [n._replace(local_id=i) for n, i in zip(nodes, ids)]
    raw = cuda.raw_table(g)
    assert _ids(raw) == [(0xAB << 32) | i for i in ids]
    assert cuda.decode_table(raw) == cuda.node_infos(g)
    assert cuda.table_id_reads > 300  # the samples, then every node


@pytest.mark.parametrize("short", [1, 5])
def test_read_nodes_takes_a_listing_shorter_than_the_count(short):
    """The listing holds fewer nodes than the count read just before it (all of them: an empty
    listing): the rows are those of the listing, ids sampled on it."""
    cuda = FakeCuda()
    cuda.c_table = True
    g = _long_graph(cuda, 5)
    cuda.listing_short = short
    raw = cuda.raw_table(g)
    assert _ids(raw) == [(0xAB << 32) | i for i in range(5 - short)]
    assert cuda.table_id_reads == (2 if short < 5 else 0)  # the two ends; none of an empty listing


@pytest.mark.parametrize("call", ["cuGraphGetNodes", "cuGraphNodeGetType", "cuptiGetGraphNodeId"])
def test_read_nodes_names_the_failing_call(call):
    cuda = FakeCuda()
    cuda.c_table = True
    g = _mixed_graph(cuda)
    cuda.table_rc[call] = 700
    with pytest.raises(CaptureError, match=f"{call} failed with .* 700"):
        cuda.raw_table(g)


def test_read_nodes_refuses_null_functions_and_wrong_arguments():
    with pytest.raises(ValueError, match="NULL function"):
        C.read_nodes(0, 0, 0, 0, 0x10)
    with pytest.raises(TypeError):
        C.read_nodes(1, 2)


def test_session_keeps_the_rows_read_in_c_instead_of_a_copy_and_decodes_them_on_first_use(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    cuda = FakeCuda()
    cuda.c_table = True
    g = cuda.begin_capture(0x70)
    sess = S.CaptureSession(cuda, 0x70, markers_from=None)
    sess.start()
    tok = sess.recorder.open({"name": "attention"})
    cuda.launch(0x70, "qk")
    sess.recorder.close(tok)
    cuda.launch(0x70, "out")
    clones = len(cuda.graphs)
    sess.finish_capture()
    assert len(cuda.graphs) == clones and cuda.destroyed == []  # no copy made
    cuda.forget(g)  # torch destroys the template at instantiation: the rows are all that is needed
    assert {n.kernel: sess.annotations.get(n.handle) for n in sess.nodes} == {"qk": {"name": "attention"},
                                                                              "out": None}


def test_a_failing_c_table_read_falls_back_to_the_copy_and_verify_mode_compares_both(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    for verify in (False, True):
        cuda = FakeCuda()
        cuda.c_table = True
        cuda.begin_capture(0x70)
        sess = S.CaptureSession(cuda, 0x70, markers_from=None, verify=verify)
        sess.start()
        cuda.launch(0x70, "k")
        cuda.table_rc["cuGraphNodeGetType"] = 999
        if verify:  # verify mode reads both ways and never hides a failure
            with pytest.raises(CaptureError, match="cuGraphNodeGetType"):
                sess.finish_capture()
            continue
        sess.finish_capture()
        assert [n.kernel for n in sess.nodes] == ["k"] and len(cuda.destroyed) == 1  # the copy, read and freed


def test_verify_mode_refuses_a_c_table_that_differs_from_the_driver_listing(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    cuda = FakeCuda()
    cuda.c_table = True
    cuda.begin_capture(0x70)
    sess = S.CaptureSession(cuda, 0x70, markers_from=None, verify=True)
    sess.start()
    cuda.launch(0x70, "k", grid=(2, 1, 1))
    monkeypatch.setattr(cuda, "decode_table", lambda raw: [n._replace(grid=(3, 1, 1)) for n in cuda.node_infos(
        next(iter(cuda.capturing.values())))])
    with pytest.raises(CaptureError, match="read in C differs"):
        sess.finish_capture()


def test_markers_are_added_from_c_once_the_graph_is_large(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    cuda = FakeCuda()
    cuda.begin_capture(0x70)
    sess = S.CaptureSession(cuda, 0x70, markers_from=2)
    sess.start()
    rec = sess.recorder
    tok = rec.open({"name": "x"})  # 0 nodes: a count
    assert not rec.marking and cuda.marker_calls == 0
    cuda.launch(0x70)
    cuda.launch(0x70)
    rec.close(tok)  # 2 nodes: a count that reaches markers_from
    assert rec.marking and cuda.count_calls == 2
    tok = rec.open({"name": "y"})  # a marker at position 2
    cuda.launch(0x70)
    rec.close(tok)  # a marker at position 4
    assert cuda.count_calls == 2 and cuda.marker_calls == 2 and sess._markers == [2, 4]
    sess.finish_capture()
    assert [sess.annotations.get(n.handle) for n in sess.nodes] == [{"name": "x"}, {"name": "x"}, {"name": "y"}]


def test_a_failing_marker_id_raises_capture_error(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", True)
    cuda = FakeCuda()
    cuda.node_id_rc = 999
    cuda.begin_capture(0x70)
    sess = S.CaptureSession(cuda, 0x70, markers_from=0)
    sess.start()
    with pytest.raises(CaptureError, match="cuptiGetGraphNodeId failed with CUPTI error 999"):
        sess.recorder.open({"name": "x"})


def test_getenv_sees_what_os_environ_sets_and_unsets(monkeypatch):
    name = "PERFETTO_GRAPH_ANN_TEST_GETENV"
    monkeypatch.delenv(name, raising=False)
    assert C.getenv(name) is None and fastpath.getenv(name) is None
    for value in ("1", "", "off", "caf\u00e9", "bad\udcffbyte"):  # the last: a non-UTF-8 byte, as os.environ shows it
        monkeypatch.setenv(name, value)
        assert C.getenv(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert C.getenv(name) is None


@pytest.mark.parametrize("backward", [True, False])
def test_mark_kernels_runs_in_c_inside_a_capture_and_leaks_nothing(monkeypatch, backward):
    """The compiled ``Mark``: after the first scope (which points it at this torch), scopes of a
    capture in flight never enter the Python half; regions that made no node leave nothing in
    the thread's table, and nothing is left referenced, an exception in the block included."""
    torch = pytest.importorskip("torch")
    from support.capture_fakes import pushed_capture

    from perfetto_graph_ann.capture import autograd
    from perfetto_graph_ann.capture import marks as M

    monkeypatch.setattr(fastpath, "ENABLED", True)
    calls = []
    real = M._MarkMethods._enter_py
    monkeypatch.setattr(M._MarkMethods, "_enter_py", lambda self: calls.append(1) or real(self))
    with pushed_capture(0x70) as sess:
        name = "leak-check-" + str(backward)
        with M.mark_kernels(name, backward=backward):  # configures the fast path
            pass
        table = autograd._table()
        n_ranges = len(table.ranges)
        calls.clear()
        del sess.recorder.closed[:]
        gc.collect()
        base_sess, base_name = sys.getrefcount(sess), sys.getrefcount(name)
        x = torch.ones(3)
        for i in range(500):
            with M.mark_kernels(name, backward=backward):
                with M.mark_kernels({"name": "inner", "i": i}, backward=backward):
                    sess.cuda.launch(0x70, "k")
                    x * 2  # grad on, nothing requires grad: no node
        with pytest.raises(ValueError):
            with M.mark_kernels(name, backward=backward):
                raise ValueError("in the block")
        assert calls == []  # every enter ran in C
        assert table.open == [] and len(table.ranges) == n_ranges
        assert sess.recorder.open_fields() == {}  # every token closed
        assert len(sess.recorder.closed) == 2 * 500 + 1
        del sess.recorder.closed[:]
        gc.collect()
        assert sys.getrefcount(sess) == base_sess and sys.getrefcount(name) == base_name


def test_mark_kernels_copies_a_plain_dict_in_c_and_hands_anything_else_to_normalize(monkeypatch):
    """A dict of str keys (``stream`` an int or absent) is copied in C without the Python
    normalizer; any other annotation goes to it, and its errors are raised as before."""
    from perfetto_graph_ann.capture import autograd
    from perfetto_graph_ann.capture import marks as M
    from perfetto_graph_ann.capture.scopes import normalize_annotation

    seen = []

    def spy(annotation):
        seen.append(annotation)
        return normalize_annotation(annotation)

    C.mark_setup(S._local, autograd, fastpath, spy)
    try:
        ann = {"name": "layer", "layer": 3, "stream": 61, "k": [1]}
        m = M.mark_kernels(ann)
        assert m.fields == ann and m.fields is not ann and seen == []
        ann["layer"] = 4  # the caller's dict changed afterwards: the scope keeps what it was given
        assert m.fields["layer"] == 3
        assert M.mark_kernels({"name": "x", "stream": None}).fields == {"name": "x", "stream": None}
        assert seen == []
        od = collections.OrderedDict(name="o")
        assert M.mark_kernels(od).fields == {"name": "o"} and seen == [od]
        for bad in ({1: "a"}, {"stream": True}, {"stream": "lane"}, {"stream": 1.0}, 3, None):
            with pytest.raises(TypeError):
                M.mark_kernels(bad)
        assert len(seen) == 7  # each bad one reached the normalizer, which raised
    finally:
        C.mark_setup(S._local, autograd, fastpath, normalize_annotation)


def test_scope_edges_read_autograd_counter_and_grad_mode_in_cpp_where_torch_exports_them(monkeypatch):
    """With torch's ``at::sequence_number::peek`` and ``c10::GradMode::is_enabled`` found and
    agreeing, a scope's region reads them directly: neither Python binding is called by the
    scopes of a capture in flight, and the regions' numbers are those torch's binding reads."""
    torch = pytest.importorskip("torch")
    from support.capture_fakes import pushed_capture

    from perfetto_graph_ann.capture import autograd
    from perfetto_graph_ann.capture import marks as M

    monkeypatch.setattr(fastpath, "ENABLED", True)
    real_seq, real_grad = torch._C._autograd._get_sequence_nr, torch.is_grad_enabled
    assert all(M._native_functions(torch, real_grad))  # both exported by this torch
    calls = collections.Counter()

    def seq():
        calls["seq"] += 1
        return real_seq()

    def grad():
        calls["grad"] += 1
        return real_grad()

    monkeypatch.setattr(torch._C._autograd, "_get_sequence_nr", seq)
    monkeypatch.setattr(torch, "is_grad_enabled", grad)
    monkeypatch.setattr(autograd, "_peek", None)  # remade from the spy
    try:
        with pushed_capture(0x70) as sess:
            with M.mark_kernels("setup"):  # first region: Python's enter_region, configures C
                pass
            M._setup_fast()
            calls.clear()
            w = torch.ones(3, requires_grad=True)
            starts = []
            for _ in range(5):
                with M.mark_kernels("s") as m:
                    starts.append((m.start, real_seq()))
                    w * 2  # one node made: the region goes to Python's exit with the C end
            assert calls["seq"] == 0 and calls["grad"] == 0
            assert all(s == r for s, r in starts) and len({s for s, _ in starts}) == 5
            # a disagreeing counter is refused: the Python bindings again
            monkeypatch.setattr(torch._C._autograd, "_get_sequence_nr", lambda: real_seq() + 1)
            assert M._native_functions(torch, real_grad)[0] == 0
            monkeypatch.setattr(torch, "is_grad_enabled", lambda: True)
            assert M._native_functions(torch, torch.is_grad_enabled)[1] == 0
            with torch.no_grad():  # set up with grad off: still checked in both modes
                assert M._native_functions(torch, real_grad)[1] != 0
                assert M._native_functions(torch, lambda: False)[1] == 0
    finally:
        monkeypatch.undo()
        autograd._peek = None
        M._setup_fast()


def test_mark_kernels_arguments_parse_as_torch_215s_signature():
    """``mark_kernels(annotation, *, backward=True)``: the common forms parsed in C, every
    other form (and its error) as the general parser gives it."""
    from perfetto_graph_ann.capture import marks as M

    assert M.mark_kernels("a").backward is True
    assert M.mark_kernels("a", backward=False).backward is False
    assert M.mark_kernels("a", backward=0).backward is False and M.mark_kernels("a", backward=[1]).backward is True
    assert M.mark_kernels(annotation="a").fields == {"name": "a"}
    assert M.mark_kernels(annotation="a", backward=False).backward is False
    for args, kw, msg in ((("a", False), {}, "positional"), (("a",), {"bw": 1}, "bw"), ((), {}, "annotation"),
                          (("a",), {"backward": False, "x": 1}, "at most 2")):
        with pytest.raises(TypeError, match=msg):
            M.mark_kernels(*args, **kw)

    class Bad:
        def __bool__(self):
            raise ValueError("no truth")

    with pytest.raises(ValueError, match="no truth"):
        M.mark_kernels("a", backward=Bad())
