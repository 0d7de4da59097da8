"""pga.trace_handler with CUDA graphs on a real GPU: a schedule of 2 cycles gives 2 joined traces.

Expected lanes come from the capture registry's calibration record (one kernel per
calibrated node and replay), not from the join: each cycle profiles 2 active steps of one
replay each, so each trace holds twice the per-replay count of every lane."""
from __future__ import annotations

import collections
import os
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture.registry import REGISTRY

from blocks import capture, seed_block

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.pftrace_decode import decode  # noqa: E402  (tests/support/pftrace_decode.py)

pytestmark = pytest.mark.gpu


def test_trace_handler_two_cycles_of_graph_replays(tmp_path, results):
    g, _ = capture(seed_block())
    written = []
    handler = pga.trace_handler(str(tmp_path / "traces"), worker_name="gpu")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=lambda p: written.append(handler(p))) as prof:
        for _ in range(8):
            g.replay()
            torch.cuda.synchronize()
            prof.step()
    # the first replay (the schedule's wait step, no profiler yet) recorded the calibration
    rec = REGISTRY.get(g._pga_owner)
    per_replay = collections.Counter()
    for n in rec.nodes:
        if n.stream is not None:
            lane = n.annotation.get("stream")
            per_replay[lane if isinstance(lane, int) else 7] += 1
    assert per_replay, f"not calibrated: {rec.calibration_note if hasattr(rec, 'calibration_note') else rec}"
    assert handler.wait() == written  # converted in the background (the default)
    files = sorted(os.listdir(tmp_path / "traces"))
    assert len(written) == 2 and files == sorted(os.path.basename(p) for p in written)
    got = []
    for path in written:
        d = decode(path)
        lanes = collections.Counter(s.args["stream"] for s in d.slices if s.cat == "kernel")
        joins = collections.Counter(s.args.get("join") for s in d.slices if s.cat == "kernel")
        got.append({"lanes": dict(lanes), "join": dict(joins)})
    results["trace_handler"] = {"per_replay": dict(per_replay), "traces": got, "files": files}
    print("trace_handler", results["trace_handler"])
    for one in got:
        assert one["lanes"] == {lane: 2 * n for lane, n in per_replay.items()}
        assert set(one["join"]) <= {"calibrated", "exact"}
