"""Scope edges positioned by CUPTI's node-created callback (``capture/nodewatch.py``, ``_nodewatch.c``).

On the fake CUDA backend, whose driver issues CUPTI's ``GRAPHNODE_CREATED`` resource callback
to whoever subscribed (as the H200's does: tests/gpu/RESULTS.md): the same workload as the
marker tests gives the same annotations with no driver call at any edge; the subscription lasts
exactly while captures run; a refused subscription, the setting turned off, or the pure-Python
path fall back to the driver; a count that disagrees with the driver's at the end is refused.
"""
from __future__ import annotations

import contextlib
import sys

import pytest
from support.capture_fakes import FAKE_TORCH_STREAM, MULTIPLE_SUBSCRIBERS, SUBSCRIBE, FakeCuda, fake_profiler_module

from test_capture_markers import EXPECTED, STREAM, annotations, run

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import api, fastpath, instrument as inst, nodewatch
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import REGISTRY, Registry
from perfetto_graph_ann.errors import CaptureError

pytestmark = pytest.mark.usefixtures("capture_path")


def watchable(**kw) -> FakeCuda:
    cuda = FakeCuda()
    cuda.watchable = True
    for k, v in kw.items():
        setattr(cuda, k, v)
    return cuda


def started(cuda: FakeCuda) -> S.CaptureSession:
    """A capture begun on ``STREAM`` and its session started."""
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0)
    sess.start()
    return sess


def compiled(capture_path) -> bool:
    return capture_path == "compiled"


@pytest.mark.parametrize("markers_from", [None, 0])
def test_edges_read_the_callback_count_and_ask_the_driver_nothing(capture_path, markers_from):
    cuda, sess, template = run(markers_from, watchable())
    assert annotations(sess) == EXPECTED
    assert sess.record.nodes and all(n.type != "empty" for n in sess.record.nodes)
    if compiled(capture_path):
        # one count where the watch starts (its base) and one at the end (the check): no edge asked
        assert (cuda.count_calls, cuda.marker_calls) == (2, 0)
        assert len(template) == len(EXPECTED)  # no marker node was added
        assert cuda.subscriptions == 1 and cuda.unsubscriptions == 1
    else:  # no C callback to subscribe: the driver as before
        assert cuda.subscriptions == 0 and (cuda.count_calls or cuda.marker_calls)
    assert cuda.subscribed is None and nodewatch.WATCH.users == 0


def test_verify_mode_checks_every_callback_edge_against_a_listing(capture_path):
    cuda, sess, _ = run(None, watchable(), verify=True)
    assert annotations(sess) == EXPECTED
    assert cuda.list_calls >= 10  # a listing at every edge, each position checked against it
    assert cuda.subscriptions == (1 if fastpath.module() is not None else 0)
    if fastpath.module() is None:
        return
    cuda = watchable()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0, verify=True)
    sess.start()
    sess.recorder.open({"name": "outer"})  # the first edge starts the watch
    cuda.skip_callbacks = 1
    cuda.launch(STREAM, "a")
    with pytest.raises(CaptureError, match="positioned at node 0 but the graph lists 1"):
        sess.recorder.open({"name": "s"})
    sess.stop_watch()


def test_a_refused_subscription_falls_back_to_the_driver(capture_path):
    cuda, sess, _ = run(512, watchable(subscribe_rc=MULTIPLE_SUBSCRIBERS))
    assert annotations(sess) == EXPECTED
    assert cuda.subscriptions == 0 and cuda.count_calls > 2
    if compiled(capture_path):
        assert nodewatch.WATCH.refused == MULTIPLE_SUBSCRIBERS


def test_the_setting_turns_it_off(capture_path, monkeypatch):
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_NODE_WATCH", "0")
    cuda, sess, _ = run(None, watchable())
    assert annotations(sess) == EXPECTED
    assert cuda.subscriptions == 0 and cuda.count_calls == 10


def test_a_missed_callback_is_refused_at_the_end_and_the_subscription_ends(capture_path):
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    cuda = watchable()
    sess = started(cuda)
    assert sess.edge_source == "driver" and cuda.subscriptions == 0  # not before the first edge
    sess.recorder.open({"name": "outer"})
    assert sess.edge_source == "node callback"
    cuda.skip_callbacks = 1
    cuda.launch(STREAM, "a")
    with pytest.raises(CaptureError, match="counted 0 nodes but the graph has 1.*PERFETTO_GRAPH_ANN_NODE_WATCH=0"):
        sess.finish_capture()
    assert cuda.subscribed is None and nodewatch.WATCH.users == 0
    assert sess.edge_source == "driver"


def test_captures_in_flight_share_one_subscription(capture_path):
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    cuda = watchable()
    sessions = []
    for stream in (STREAM, STREAM + 1):
        cuda.begin_capture(stream)
        sess = S.CaptureSession(cuda, stream, Registry(), device=0)
        sess.start()
        sess.recorder.snapshot()  # the first edge starts the watch
        sessions.append(sess)
    assert cuda.subscriptions == 1 and nodewatch.WATCH.users == 2
    a = sessions[0].recorder.open({"name": "a"})
    cuda.launch(STREAM, "a0")
    cuda.launch(STREAM + 1, "b0")  # the other graph's node: not counted for the first
    cuda.launch(STREAM, "a1")
    sessions[0].recorder.close(a)
    sessions[0].finish_capture()
    assert cuda.subscribed is not None  # the second capture still runs
    sessions[1].finish_capture()
    assert cuda.subscribed is None and cuda.unsubscriptions == 1
    for stream, sess in zip((STREAM, STREAM + 1), sessions):
        sess.bind_exec(cuda.instantiate(cuda.end_capture(stream)))
    assert annotations(sessions[0]) == {"a0": {"name": "a"}, "a1": {"name": "a"}}
    assert annotations(sessions[1]) == {"b0": {}}


@pytest.fixture
def fresh(fake_torch_cuda, monkeypatch):
    monkeypatch.setattr(api, "INSTRUMENTED", None)
    monkeypatch.setattr(inst, "_config", None)
    fake_torch_cuda.watchable = True
    yield fake_torch_cuda
    inst.uninstrument()


def test_instrumented_captures_hold_the_subscription_only_while_they_run(capture_path, fresh):
    torch = sys.modules["torch"]
    pga.instrument()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        assert fresh.subscribed is None  # from the first scope edge on
        with pga.mark_kernels("s"):
            assert (fresh.subscribed is not None) == compiled(capture_path)
            fresh.launch(FAKE_TORCH_STREAM, "k")
    assert fresh.subscribed is None
    g.replay()
    assert {n.kernel: dict(n.annotation) for r in REGISTRY.records() for n in r.nodes} == {"k": {"name": "s"}}


def test_a_capture_without_scopes_never_subscribes(capture_path, fresh):
    """``instrument()`` without module scopes, in a capture that opens no scope: CUPTI is never
    asked (its first subscription in a process cost ~20 ms of the first capture on the H200)."""
    torch = sys.modules["torch"]
    pga.instrument()
    graphs = [torch.cuda.CUDAGraph() for _ in range(2)]
    for g in graphs:
        with torch.cuda.graph(g):
            fresh.launch(FAKE_TORCH_STREAM, "k")
        g.replay()
    assert fresh.subscriptions == 0 and nodewatch.WATCH.users == 0
    assert [n.kernel for r in REGISTRY.records() for n in r.nodes] == ["k", "k"]


@pytest.fixture
def cuda_start(fresh, monkeypatch):
    """``torch.cuda._lazy_call`` of the fake torch: what instrumentation hands torch to run when
    CUDA initialises, collected (the test then plays the initialisation)."""
    queued: list = []
    monkeypatch.setattr(sys.modules["torch"].cuda, "_lazy_call", queued.append, raising=False)
    monkeypatch.setattr(inst, "_cuda_hooked", False)
    return queued


def cuda_initialised(queued: list) -> None:
    """Run what torch would run at CUDA's initialisation, and wait for any thread it started."""
    for fn in queued:
        t = fn()
        if t is not None:
            t.join(10)
            assert not t.is_alive()


def test_cupti_is_initialised_when_cuda_starts_not_in_the_first_capture(capture_path, fresh, cuda_start):
    """Under ``instrument()``, CUDA's initialisation subscribes and unsubscribes once in a
    background thread (CUPTI's first subscription, ~20 ms on the H200, left the first capture);
    nothing stays subscribed, and captures subscribe as before."""
    torch = sys.modules["torch"]
    pga.instrument()
    pga.instrument()
    assert cuda_start == [inst._cuda_ready] and fresh.subscriptions == 0  # once; nothing before CUDA starts
    cuda_initialised(cuda_start)
    warmed = compiled(capture_path)  # the pure-Python path never subscribes
    assert (fresh.subscriptions, fresh.unsubscriptions) == ((1, 1) if warmed else (0, 0))
    assert fresh.subscribed is None and nodewatch.WATCH.warmed == warmed
    cuda_initialised(cuda_start)  # a second initialisation (or instrument() again): no second warm-up
    assert fresh.subscriptions == (1 if warmed else 0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pga.mark_kernels("s"):
            assert (fresh.subscribed is not None) == warmed
            fresh.launch(FAKE_TORCH_STREAM, "k")
    g.replay()
    assert fresh.subscribed is None and fresh.subscriptions == (2 if warmed else 0)
    assert {n.kernel: dict(n.annotation) for r in REGISTRY.records() for n in r.nodes} == {"k": {"name": "s"}}


@pytest.mark.parametrize("why", ["setting", "node watch off", "profiler", "refused", "uninstrumented"])
def test_no_warm_up_where_it_is_not_wanted_or_cupti_refuses(capture_path, fresh, cuda_start, monkeypatch, why):
    if why == "setting":
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_WARM_CUPTI", "0")
    elif why == "node watch off":
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_NODE_WATCH", "0")
    elif why == "profiler":
        nodewatch.WATCH.yield_to_profiler()
    elif why == "refused":
        fresh.subscribe_rc = MULTIPLE_SUBSCRIBERS
    pga.instrument()
    if why == "uninstrumented":
        pga.uninstrument()
    cuda_initialised(cuda_start)
    assert fresh.subscriptions == 0 and fresh.subscribed is None and not nodewatch.WATCH.warmed
    if why == "refused" and compiled(capture_path):
        assert nodewatch.WATCH.refused == MULTIPLE_SUBSCRIBERS


def test_a_profiler_starting_during_the_warm_up_waits_for_cupti_to_be_free(capture_path, fresh, cuda_start):
    """The warm-up holds the watch's lock from subscribing to unsubscribing: a profiler's
    prepare (``yield_to_profiler``) waits for it and then finds CUPTI free."""
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    import threading

    inside, go, seen = threading.Event(), threading.Event(), []
    real = fresh._cupti_subscribe

    def slow_subscribe(*a):  # CUPTI's first subscription, paused until the profiler is on its way
        rc = real(*a)
        inside.set()
        go.wait(10)
        return rc
    fresh._c_subscribe = SUBSCRIBE(slow_subscribe)
    pga.instrument()
    t = cuda_start[0]()
    assert inside.wait(10)
    profiler = threading.Thread(target=lambda: (nodewatch.WATCH.yield_to_profiler(), seen.append(fresh.subscribed)))
    profiler.start()
    profiler.join(0.2)
    assert profiler.is_alive()  # waiting for the warm-up
    go.set()
    t.join(10)
    profiler.join(10)
    assert seen == [None] and nodewatch.WATCH.warmed


def test_a_bad_capture_setting_is_refused_by_instrument(fresh, monkeypatch):
    from perfetto_graph_ann.errors import SettingError

    monkeypatch.setenv("PERFETTO_GRAPH_ANN_WARM_CUPTI", "sometimes")
    with pytest.raises(SettingError, match="PERFETTO_GRAPH_ANN_WARM_CUPTI"):
        pga.instrument()
    assert inst.current() is None


def test_a_failing_capture_body_ends_the_subscription(capture_path, fresh):
    torch = sys.modules["torch"]
    pga.instrument()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="boom"):
        with torch.cuda.graph(g):
            fresh.launch(FAKE_TORCH_STREAM, "k")
            raise RuntimeError("boom")
    assert fresh.subscribed is None and nodewatch.WATCH.users == 0


def test_a_miscount_leaves_an_instrumented_capture_unannotated_with_a_warning(capture_path, fresh):
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument()
    g = torch.cuda.CUDAGraph()
    with pytest.warns(RuntimeWarning, match="left unannotated.*node-created callback"):
        with torch.cuda.graph(g):
            fresh.skip_callbacks = 1
            with pga.mark_kernels("s"):
                fresh.launch(FAKE_TORCH_STREAM, "k")
    g.replay()
    assert REGISTRY.records() == [] and fresh.subscribed is None


def test_a_starting_profiler_takes_cupti_back_and_edges_go_on_from_the_driver(capture_path):
    """torch's profiler subscribes to CUPTI when it first starts and breaks for good if it finds
    ours (H200): the captures in flight give the count up, with the same positions after."""
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    cuda = watchable()
    sess = started(cuda)
    outer = sess.recorder.open({"name": "outer"})
    cuda.launch(STREAM, "a")
    nodewatch.WATCH.yield_to_profiler()
    assert cuda.subscribed is None and sess.edge_source == "driver" and nodewatch.WATCH.users == 0
    cuda.launch(STREAM, "b")  # no callback now: the driver counts it
    inner = sess.recorder.open({"name": "inner"})
    cuda.launch(STREAM, "c")
    sess.recorder.close(inner)
    sess.recorder.close(outer)
    cuda.launch(STREAM, "d")
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    assert annotations(sess) == {"a": {"name": "outer"}, "b": {"name": "outer"}, "c": {"name": "inner"}, "d": {}}


def test_after_a_profiler_took_cupti_no_capture_subscribes_again(capture_path):
    """Once torch's profiler subscribed, CUPTI refuses us anyway (H200: result 39): later
    captures do not even ask, so none can win a race against a profiler's start."""
    cuda = watchable()
    nodewatch.WATCH.yield_to_profiler()
    cuda, sess, _ = run(None, cuda)
    assert annotations(sess) == EXPECTED
    assert cuda.subscriptions == 0 and (cuda.count_calls or cuda.marker_calls)


def test_a_profiler_starting_while_a_capture_subscribes_takes_cupti_back(capture_path):
    """A profiler starting in another thread while a capture is between subscribing and using
    the count: it waits for the capture to be set up, then takes the subscription back at once
    (not when the capture ends: torch's profiler finding ours gets no GPU activity, ever)."""
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    import threading

    cuda = watchable()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0)
    profiler = threading.Thread(target=nodewatch.WATCH.yield_to_profiler)
    real_count = cuda.node_count

    def count_while_a_profiler_starts(graph):  # the base count, read between subscribe and use
        if not profiler.is_alive() and profiler.ident is None:
            profiler.start()
            profiler.join(0.2)  # it waits for the capture's setup (or, unfixed, yields at once)
        return real_count(graph)

    cuda.node_count = count_while_a_profiler_starts
    sess.start()
    outer = sess.recorder.open({"name": "outer"})  # the first edge starts the watch
    profiler.join(5)
    assert not profiler.is_alive()
    assert cuda.subscribed is None and nodewatch.WATCH.users == 0 and sess.edge_source == "driver"
    cuda.node_count = real_count
    cuda.launch(STREAM, "a")
    sess.recorder.close(outer)
    cuda.launch(STREAM, "b")
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    assert annotations(sess) == {"a": {"name": "outer"}, "b": {}}


def test_the_profiler_hook_yields_before_torch_prepares(monkeypatch):
    from perfetto_graph_ann.capture import calibration as C

    order = []
    tap = fake_profiler_module(monkeypatch, _prepare_profiler=lambda *a, **k: order.append("prepare"),
                               _enable_profiler=lambda *a, **k: order.append("enable"),
                               _disable_profiler=lambda: order.append("disable"))
    monkeypatch.setattr(nodewatch.WATCH, "yield_to_profiler", lambda: order.append("yield"))
    watch = C._KinetoWatch()
    monkeypatch.setattr(C, "KINETO", watch)
    watch.install()
    tap._prepare_profiler("config", {"CUDA"})
    tap._enable_profiler("config", {"CUDA"})
    assert order[:2] == ["yield", "prepare"] and order[2] == "yield" and "enable" in order[3:]


@pytest.fixture(autouse=True)
def no_subscription_left():
    yield
    assert nodewatch.WATCH.users == 0, "a test left the node watch subscribed"


# ---- detaching CUPTI once this package is done with it -------------------------------------

def _until(cond, timeout: float = 10.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def _scoped_capture(torch, cuda, name: str = "s"):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pga.mark_kernels(name):
            cuda.launch(FAKE_TORCH_STREAM, "k")
    g.replay()
    return g


def test_cupti_is_detached_at_an_api_exit_site_once_captures_go_idle(capture_path, fresh, monkeypatch):
    """An initialised CUPTI slows every graph launch of the process (probe_cupti_launch.py): what
    the node watch initialised is finalized from a driver API exit call site once no capture has
    used it for the delay; a later capture initialises it again and is annotated as before."""
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "30")
    torch = sys.modules["torch"]
    pga.instrument()
    graphs = [_scoped_capture(torch, fresh)]
    assert fresh.initialised and nodewatch.WATCH.attached and fresh.finalizes == 0  # not at once
    assert _until(lambda: fresh.finalizes == 1)
    assert not fresh.initialised and fresh.subscribed is None and fresh.enabled == set()
    assert fresh.api_calls == 1  # the call whose exit site finalized
    assert not nodewatch.WATCH.attached and nodewatch.WATCH.detaches >= 1
    graphs.append(_scoped_capture(torch, fresh, "again"))
    assert fresh.subscriptions == 3  # the watch, the detach's callback, the watch again
    assert [dict(n.annotation) for r in REGISTRY.records() for n in r.nodes] == [{"name": "s"}, {"name": "again"}]
    assert _until(lambda: fresh.finalizes == 2)


def test_captures_in_a_row_keep_one_detach_timer_and_the_delay_counts_from_the_last(capture_path, fresh,
                                                                                   monkeypatch):
    """Each capture's end asks for the detach twice (its table read, then its hold released), and
    serving frameworks capture dozens of graphs in a row: a timer already pending is kept, not
    replaced by a new thread each time, and the detach still waits for the delay after the last
    capture (the kept timer fires early, then waits out the rest)."""
    import time

    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "600")
    torch = sys.modules["torch"]
    pga.instrument()
    _scoped_capture(torch, fresh)
    first = nodewatch.WATCH._timer
    assert first is not None and fresh.finalizes == 0
    time.sleep(0.3)
    _scoped_capture(torch, fresh, "again")
    last = nodewatch.WATCH._last_use
    assert nodewatch.WATCH._timer is first  # kept: no new thread for the second capture
    # by then the first timer fired (~0.3 s after the first capture's end) and re-armed
    while time.monotonic() < last + 0.45:
        time.sleep(0.01)
    assert fresh.finalizes == 0 and nodewatch.WATCH.attached and nodewatch.WATCH._timer not in (None, first)
    assert _until(lambda: fresh.finalizes == 1)
    assert time.monotonic() >= last + 0.6 and not nodewatch.WATCH.attached


def _attached_by_a_capture(torch, cuda) -> None:
    """A scoped capture initialised CUPTI; the detach functions are known; nothing detached."""
    _scoped_capture(torch, cuda)
    assert cuda.initialised and nodewatch.WATCH.attached


@pytest.mark.parametrize("why", ["capture in flight", "scope-less capture in flight", "failed capture", "calibration", "profiler took it", "profiler active",
                                 "not ours", "no exit site", "someone subscribed"])
def test_no_detach_while_cupti_is_in_use_or_not_ours(capture_path, fresh, monkeypatch, why):
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument()
    watch = nodewatch.WATCH
    if why == "not ours":  # a backend whose ids do not come from CUPTI, and no scope: nothing to detach
        fresh.cupti_detach_functions = lambda: None
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fresh.launch(FAKE_TORCH_STREAM, "k")
        assert not watch.attached and not watch.detach() and fresh.subscriptions == 0 and fresh.api_calls == 0
        return
    _attached_by_a_capture(torch, fresh)
    if why == "capture in flight":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            with pga.mark_kernels("s"):
                fresh.launch(FAKE_TORCH_STREAM, "k")
                assert not watch.detach() and fresh.finalizes == 0
        assert watch.detach() and fresh.finalizes == 1  # once it ended
        return
    if why == "scope-less capture in flight":  # no subscription held, yet its ids ask CUPTI at its end
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fresh.launch(FAKE_TORCH_STREAM, "k")
            assert not watch.detach() and fresh.finalizes == 0
        assert watch.detach() and fresh.finalizes == 1
        return
    if why == "failed capture":  # a body that raised releases its hold too
        g = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="boom"):
            with torch.cuda.graph(g):
                assert not watch.detach()
                raise RuntimeError("boom")
        assert watch._busy == 0 and watch.detach() and fresh.finalizes == 1
        return
    if why == "calibration":
        with watch.using():
            assert not watch.detach()
        assert watch.detach() and fresh.finalizes == 1
        return
    if why == "profiler took it":
        watch.yield_to_profiler()
    elif why == "profiler active":
        monkeypatch.setattr(watch, "profiler_active", lambda: True)
    elif why == "no exit site":
        fresh.exit_sites = False
    elif why == "someone subscribed":
        fresh.subscribe_rc = MULTIPLE_SUBSCRIBERS
    assert not watch.detach()
    assert fresh.finalizes == 0 and fresh.initialised and fresh.subscribed is None and fresh.enabled == set()
    if why == "no exit site":
        assert watch.detach_refused == -2 and not watch.attached  # not retried
    if why == "someone subscribed":
        assert watch.detach_refused == MULTIPLE_SUBSCRIBERS


def test_the_detach_waits_for_the_delay_after_the_last_use_and_can_be_turned_off(capture_path, fresh, monkeypatch):
    if not compiled(capture_path):
        pytest.skip("no subscription on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument()
    _attached_by_a_capture(torch, fresh)  # the setting is off (conftest): no timer
    assert nodewatch.WATCH._timer is None
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "60000")
    _scoped_capture(torch, fresh)
    assert nodewatch.WATCH._timer is not None and fresh.finalizes == 0
    nodewatch.WATCH.yield_to_profiler()  # a profiler takes CUPTI: no detach, ever
    assert nodewatch.WATCH._timer is None


@pytest.mark.parametrize("value, driver, expected", [
    (None, 13000, nodewatch.DEFAULT_DETACH_S),  # unset: on from driver 13.0, where it was checked
    ("  ", 13020, nodewatch.DEFAULT_DETACH_S),  # blank is unset
    (None, 12080, None),  # CUDA 12 driver: off (re-initialisation crashes reported there)
    (None, None, None),  # no driver found: off
    ("off", 13000, None),
    ("250", 12080, 0.25),  # set: the value, whatever the driver
    ("0", 13000, 0.0),
])
def test_the_detach_delay_default_follows_the_driver(monkeypatch, value, driver, expected):
    if value is None:
        monkeypatch.delenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", raising=False)
    else:
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", value)
    assert nodewatch.detach_delay_from_env(lambda: driver) == expected


def test_the_detach_delay_default_asks_the_process_driver(monkeypatch):
    from perfetto_graph_ann.capture import identity

    monkeypatch.delenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", raising=False)
    monkeypatch.setattr(identity, "_driver", {"v": ("580.159.04", 13000)})
    assert nodewatch.detach_delay_from_env() == nodewatch.DEFAULT_DETACH_S
    monkeypatch.setattr(identity, "_driver", {"v": ("550.54.15", 12040)})
    assert nodewatch.detach_delay_from_env() is None


def test_the_detach_default_reads_the_driver_version_without_nvml(monkeypatch):
    """Asked at a capture's end: cuDriverGetVersion only, once; NVML's initialisation (slow) is
    left to the capture identity, which then reuses the version read."""
    from perfetto_graph_ann.capture import identity

    calls = []
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", raising=False)
    monkeypatch.setattr(identity, "_driver", {})
    monkeypatch.setattr(identity, "_api", {})
    monkeypatch.setattr(identity, "_cuda_driver_version", lambda: calls.append("api") or 13000)
    monkeypatch.setattr(identity, "_nvml_driver_version", lambda: pytest.fail("NVML asked at a capture's end"))
    assert nodewatch.detach_delay_from_env() == nodewatch.DEFAULT_DETACH_S
    assert nodewatch.detach_delay_from_env() == nodewatch.DEFAULT_DETACH_S
    assert calls == ["api"]
    monkeypatch.setattr(identity, "_nvml_driver_version", lambda: "580.159.04")
    assert identity._driver_versions() == ("580.159.04", 13000) and calls == ["api"]


def test_a_calibration_session_holds_off_the_detach(capture_path, fresh, monkeypatch):
    """Calibration's activity session initialises CUPTI too: marked ours, and no detach runs
    while it is open."""
    from perfetto_graph_ann.capture import calibration

    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    seen = []

    @contextlib.contextmanager
    def session(collected, exec_id):
        seen.append((nodewatch.WATCH.attached, nodewatch.WATCH.detach()))
        collected.append(calibration.ActivityRecord(5, 7, 100, 200, "kernel"))
        yield

    fresh.watchable = True
    nodewatch.WATCH._detach_fns = fresh.cupti_detach_functions()
    calibration.calibrate_replay(lambda: None, lambda: None, 0, session=session, is_profiling=lambda: False)
    assert seen == [(True, False)] and nodewatch.WATCH.attached


def test_a_capture_without_scopes_on_the_cupti_backend_is_detached_too(capture_path, fresh, monkeypatch):
    """The cupti backend reads the graph's ids from CUPTI at the capture's end, which initialises
    it even when no scope subscribed: that capture counts as ours to detach."""
    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "20")
    torch = sys.modules["torch"]
    pga.instrument()
    fresh.initialised = True  # as the id calls leave it
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fresh.launch(FAKE_TORCH_STREAM, "k")
    assert nodewatch.WATCH.attached and fresh.subscriptions == 0
    assert _until(lambda: fresh.finalizes == 1)
    assert not fresh.initialised and not nodewatch.WATCH.attached


def test_no_detach_starts_once_the_interpreter_exits(capture_path, fresh, monkeypatch):
    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument()
    _attached_by_a_capture(torch, fresh)
    monkeypatch.setattr(nodewatch.WATCH, "_closing", False)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "60000")
    nodewatch.WATCH.idle()
    assert nodewatch.WATCH._timer is not None
    nodewatch.WATCH.close()  # what atexit runs
    assert nodewatch.WATCH._timer is None and not nodewatch.WATCH.detach() and fresh.finalizes == 0


def test_watch_detach_refuses_bad_arguments():
    fast = fastpath.module()
    if fast is None:
        pytest.skip("the compiled path is not built")
    with pytest.raises(TypeError, match="watch_detach"):
        fast.watch_detach(1, 2, 3)
    with pytest.raises(ValueError, match=r"watch_detach\(\): a function address is NULL"):
        fast.watch_detach(1, 2, None, 4, 5, 1)


def test_the_detach_is_off_unless_asked_for(capture_path, fresh, monkeypatch):
    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS")
    torch = sys.modules["torch"]
    pga.instrument()
    _attached_by_a_capture(torch, fresh)
    assert nodewatch.detach_delay_from_env() is None and nodewatch.WATCH._timer is None


def test_a_timer_replaced_after_it_fired_does_nothing(capture_path, fresh, monkeypatch):
    """A timer that fired while another thread replaced it (a capture ended meanwhile) leaves the
    detach to its replacement."""
    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument()
    _attached_by_a_capture(torch, fresh)
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "60000")
    nodewatch.WATCH.idle()
    newer = nodewatch.WATCH._timer
    nodewatch.WATCH._on_timer()  # called from this thread: not the current timer
    assert nodewatch.WATCH._timer is newer and fresh.finalizes == 0


def test_an_id_read_after_a_detach_counts_as_a_use(capture_path, fresh, monkeypatch):
    """An executable graph's id read lazily (its first replay, or export) asks CUPTI again, which
    initialises it again after a detach: that use is ours, so a detach follows it too."""
    if not compiled(capture_path):
        pytest.skip("no detach on the pure-Python path")
    torch = sys.modules["torch"]
    pga.instrument(calibrate=False)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pga.mark_kernels("s"):
            fresh.launch(FAKE_TORCH_STREAM, "k")
    assert nodewatch.WATCH.detach() and not nodewatch.WATCH.attached
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "60000")
    g.replay()  # binds the executable graph; its id is read with the record
    assert [n.kernel for r in REGISTRY.records() for n in r.nodes] == ["k"]
    assert nodewatch.WATCH.attached and nodewatch.WATCH._timer is not None
