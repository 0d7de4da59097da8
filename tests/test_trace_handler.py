"""pga.trace_handler as torch.profiler's on_trace_ready with a schedule (CPU profile).

The expectation comes from the schedule itself: wait=1, warmup=1, active=2, repeat=2 over
8 steps profiles steps 2-3 and 6-7, so two traces, each holding the record_function
labels of exactly its own active steps."""
from __future__ import annotations

import os
import socket

import pytest

from support.pftrace_decode import decode

torch = pytest.importorskip("torch", reason="trace_handler is driven by torch.profiler (pip install torch)")

import perfetto_graph_ann as pga  # noqa: E402

# torch says each cycle's events are cleared at its end: exactly the per-cycle traces wanted here
pytestmark = pytest.mark.filterwarnings("ignore:.*Profiler clears events at the end of each cycle")


@pytest.fixture(autouse=True)
def _inductor_cache_in_tmp_path(tmp_path, monkeypatch):
    """torch.profiler creates torch's inductor cache folder (in /tmp by default): keep it here."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torchinductor"))


def _profile(handler, steps: int = 8) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    x = torch.ones(64, 64)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=handler) as prof:
        for i in range(steps):
            with record_function(f"work_step_{i}"):
                x = (x @ x).relu_() / 64
            prof.step()


def _labels(path) -> set:
    return {s.name for s in decode(path).slices if s.name.startswith("work_step_")}


def test_one_annotated_pftrace_per_cycle(tmp_path):
    out = tmp_path / "traces"
    written = []
    handler = pga.trace_handler(str(out), worker_name="w")

    def record(prof):
        written.append(handler(prof))

    _profile(record)
    assert handler.wait() == written  # converted in the background (the default): wait for the files
    files = sorted(os.listdir(out))
    assert len(files) == 2 and sorted(os.path.basename(p) for p in written) == files  # no temporary files left
    for name in files:
        assert name.startswith("w.") and name.endswith(".pftrace")
        assert ".rank" not in name  # torch.distributed is not initialised
    first, second = (out / os.path.basename(p) for p in written)
    assert _labels(first) == {"work_step_2", "work_step_3"}
    assert _labels(second) == {"work_step_6", "work_step_7"}


def test_default_worker_name_gzip_and_rank_when_distributed(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        handler = pga.trace_handler(str(tmp_path / "t"), use_gzip=True)
        _profile(handler, steps=4)
        handler.wait()
    finally:
        dist.destroy_process_group()
    files = os.listdir(tmp_path / "t")
    assert len(files) == 1
    assert files[0].startswith(f"{socket.gethostname()}_{os.getpid()}.rank0.") and files[0].endswith(".pftrace.gz")
    assert _labels(tmp_path / "t" / files[0]) == {"work_step_2", "work_step_3"}


def test_keep_json_keeps_each_cycles_chrome_trace(tmp_path):
    """keep_json: each cycle's torch JSON beside its .pftrace (same name, .json), holding that
    cycle's steps only; nothing else left in the folder."""
    import json

    out = tmp_path / "traces"
    written = []
    handler = pga.trace_handler(str(out), worker_name="w", keep_json=True)
    _profile(lambda prof: written.append(handler(prof)))
    handler.wait()
    assert sorted(os.listdir(out)) == sorted([os.path.basename(p) for p in written] +
                                             [os.path.basename(p)[:-len(".pftrace")] + ".json" for p in written])
    for path, steps in zip(written, ({"work_step_2", "work_step_3"}, {"work_step_6", "work_step_7"})):
        with open(path[:-len(".pftrace")] + ".json") as f:
            doc = json.load(f)
        assert {e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("work_step_")} == steps
        assert _labels(path) == steps


def test_keep_json_gzip_and_a_broken_cycle_named_by_its_step(tmp_path):
    """use_gzip keeps the cycle's JSON gzipped beside the .pftrace.gz; a cycle whose trace is
    not valid JSON is refused naming the step (not the temporary file), no .pftrace is left,
    and the kept JSON, the profile's only copy, is."""
    import gzip
    import json

    from perfetto_graph_ann.errors import TraceFormatError

    out = tmp_path / "traces"
    written = []
    handler = pga.trace_handler(str(out), worker_name="w", keep_json=True, use_gzip=True)
    _profile(lambda prof: written.append(handler(prof)))
    handler.wait()
    assert all(p.endswith(".pftrace.gz") for p in written)
    for path in written:
        doc = json.loads(gzip.decompress(open(path[:-len(".pftrace.gz")] + ".json.gz", "rb").read()))
        assert any(e.get("name", "").startswith("work_step_") for e in doc["traceEvents"])

    class Broken:
        step_num = 7

        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                f.write('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1.0, "dur": ')

    bad = tmp_path / "bad"
    with pytest.raises(TraceFormatError) as err:
        pga.trace_handler(str(bad), worker_name="w", keep_json=True, background=False)(Broken())
    assert str(err.value).startswith("torch.profiler trace (step 7): not valid JSON (cut off: the text ends at byte ")
    left = os.listdir(bad)
    assert len(left) == 1 and left[0].startswith("w.") and left[0].endswith(".json")
    assert (bad / left[0]).read_text().startswith('{"traceEvents": [{"ph": "X"')


def test_blocking_handler_pauses_the_collector_and_restores_it(tmp_path, monkeypatch):
    """Without ``background`` the handler reads, joins and writes in the caller's process with
    the cyclic collector paused (as ``pga.export``), and the caller's setting is back after."""
    import gc

    from perfetto_graph_ann.pipeline import convert as convert_mod

    seen = []
    real = convert_mod.write_joined  # what the handler's write_joined_file calls once the trace is read

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(convert_mod, "write_joined", spy)
    handler = pga.trace_handler(str(tmp_path / "traces"), worker_name="w", background=False)
    assert gc.isenabled()
    _profile(handler)
    assert seen == [False, False] and gc.isenabled()
    assert len(os.listdir(tmp_path / "traces")) == 2
