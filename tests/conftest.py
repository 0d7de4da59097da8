"""Shared test fixtures: the real H200 recordings (packaged copy, identical to shared/)."""
from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.capture import fastpath

# Hypothesis profiles for the whole suite: "ci" (default) is derandomized so CI failures
# reproduce; "fuzz_long" (PGA_HYPOTHESIS_PROFILE=fuzz_long) explores with fresh randomness.
# Neither has a deadline: 2-core machines stall.
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True, suppress_health_check=_SUPPRESS)
settings.register_profile("fuzz_long", deadline=None, derandomize=False, print_blob=True,
                          suppress_health_check=_SUPPRESS)
settings.load_profile(os.environ.get("PGA_HYPOTHESIS_PROFILE", "ci"))

FIXTURES = demo_data_dir()
TRACES = sorted(p.name[: -len(".trace.json.gz")] for p in FIXTURES.glob("*.trace.json.gz"))


@pytest.fixture(autouse=True)
def _collector_left_on():
    """Every test leaves the garbage collector as it found it: the library pauses it while
    reading and converting (``paused_gc``) and must restore it; a test (or a thread it
    leaves running) that does not would make later tests measure the wrong thing."""
    was = gc.isenabled()
    yield
    if was and not gc.isenabled():
        gc.enable()
        pytest.fail("the garbage collector was left disabled")


@pytest.fixture(scope="session", autouse=True)
def _torch_caches_in_pytest_tmp(tmp_path_factory):
    """torch writes its compile caches to ``/tmp/torchinductor_<user>`` (importing
    ``torch._dynamo`` already creates it): the tests' torch caches go to pytest's own
    temporary folder instead, so a test run leaves nothing in /tmp."""
    with pytest.MonkeyPatch.context() as mp:
        if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
            mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("torchinductor")))
        yield


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def fixture_trace(name: str) -> Path:
    return FIXTURES / f"{name}.trace.json.gz"


def fixture_capture(name: str) -> Path:
    return FIXTURES / f"{name}.capture.json"


@pytest.fixture(params=["compiled", "python"])
def capture_path(request, monkeypatch):
    """Runs a test on both capture paths: the compiled one (skipped where it is not built) and
    the pure-Python one. Capture test modules use it with ``pytest.mark.usefixtures``."""
    if request.param == "compiled" and not fastpath.module_built():
        pytest.skip(f"compiled capture path not built: {fastpath.describe()}")
    monkeypatch.setattr(fastpath, "ENABLED", request.param == "compiled")
    return request.param


@pytest.fixture(params=["compiled", "python"])
def writer_path(request, monkeypatch):
    """Runs a test on both FastEncoder paths: the compiled packet hot path (``_encode.c``,
    skipped where it is not built) and the pure-Python one (the same bytes)."""
    from perfetto_graph_ann.write.perfetto import fast_args, fast_encoder

    if request.param == "compiled" and not fast_args.BUILT:
        pytest.skip("the writer's compiled hot path (_encode) is not built")
    if request.param == "python":
        monkeypatch.setattr(fast_encoder, "template_packet", None)
        monkeypatch.setattr(fast_encoder, "end_packet", None)
        monkeypatch.setattr(fast_encoder, "event_packet", None)
        monkeypatch.setattr(fast_encoder, "stream_records", None)
        monkeypatch.setattr(fast_args, "args_key", None)
        monkeypatch.setattr(fast_args, "template_runs", None)
    return request.param


@pytest.fixture(autouse=True)
def node_watch_not_yielded(monkeypatch):
    """Every test starts with the node watch free to subscribe: a test whose fake profiler
    started (``calibration.KINETO``'s hook) made the process's ``WATCH`` yield for good."""
    from perfetto_graph_ann.capture import nodewatch

    monkeypatch.setattr(nodewatch.WATCH, "yielded", False)
    monkeypatch.setattr(nodewatch.WATCH, "warmed", False)
    monkeypatch.setattr(nodewatch.WATCH, "attached", False)
    monkeypatch.setattr(nodewatch.WATCH, "_detach_fns", None)
    # no detach timer outlives a test (its fake CUPTI's callbacks are gone after it): tests of
    # the detach turn it on themselves
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "off")
    yield
    nodewatch.WATCH._cancel_timer()


@pytest.fixture(autouse=True)
def no_spare_worker(monkeypatch):
    """No conversion worker started ahead (``PERFETTO_GRAPH_ANN_EXPORT_SPARE``): a spare ready
    would make a test's export follow torch's writing whatever its size, and start a process
    after every export. Its tests (test_export_spare.py) turn it on; none outlives a test."""
    from perfetto_graph_ann.capture import background

    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "off")
    yield
    background._drop_spare()


@pytest.fixture
def sys_tmp(tmp_path, monkeypatch):
    """The system's temporary folder for the test (where a live profile's JSON is kept): an
    empty folder under tmp_path."""
    import tempfile

    folder = tmp_path / "sys_tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def fake_torch_cuda(monkeypatch):
    """A ``FakeCuda`` in use as the capture backend, under a fake ``torch`` module
    (``capture_fakes.fake_torch``, capturing on ``FAKE_TORCH_STREAM``) in ``sys.modules``;
    the capture registry is cleared afterwards."""
    import sys

    from support.capture_fakes import FakeCuda, fake_torch

    from perfetto_graph_ann.capture import backends
    from perfetto_graph_ann.capture.registry import REGISTRY

    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda))
    with backends.use(cuda):
        yield cuda
    REGISTRY.clear()


@pytest.fixture
def started_engines(monkeypatch):
    """Every engine a session starts from now on, in order (to check that an error stopped it:
    its ``pid`` is None once closed)."""
    import perfetto_graph_ann.query.session as session_mod

    started = []
    real_create = session_mod.create_engine

    def create(*a, **k):
        eng = real_create(*a, **k)
        started.append(eng)
        return eng

    monkeypatch.setattr(session_mod, "create_engine", create)
    return started



@pytest.hookimpl(trylast=True)  # after `-m` deselected what was not asked for
def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` / ``multigpu`` that are selected (``-m gpu``) skip, with the reason,
    on a machine without (enough) CUDA devices, instead of failing: ``python3 -m pytest -m gpu``
    on a CPU machine reports skips. torch is imported only when such a test is selected."""
    wanted = [(item, 2 if item.get_closest_marker("multigpu") else 1) for item in items
              if item.get_closest_marker("gpu") or item.get_closest_marker("multigpu")]
    if not wanted:
        return
    from perfetto_graph_ann.demo.scenarios import cuda_device_count

    devices = cuda_device_count()
    for item, need in wanted:
        if devices < need:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {need} CUDA device(s), this machine has {devices} (run -m gpu on a CUDA machine)"))
