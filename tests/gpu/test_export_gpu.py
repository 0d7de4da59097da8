"""export() with a live torch.profiler.profile and the live registry, on a real GPU.

The CPU tests drive the same code with a fake profiler (tests/test_join_export.py). Here
the expected lane of every kernel is computed independently of the join: from the same
profile's own Chrome trace and the registry's calibration, by (replay correlation,
stream, ordinal) as in test_capture_gpu.calibrated_match.
"""
from __future__ import annotations

import collections
import gzip
import json
import os
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export

from blocks import capture, seed_block, two_branch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.pftrace_decode import decode  # noqa: E402  (tests/support/pftrace_decode.py)

pytestmark = pytest.mark.gpu


def _expected_lanes(g, prof):
    """Counter of expected lanes, from the profile's raw JSON and the registry record."""
    rec = REGISTRY.get(g._pga_owner)
    by_so = {(n.stream, n.ordinal): n for n in rec.nodes if n.stream is not None}
    # torch saves a profile once; export() keeps that one copy on the profiler
    kernels = [e for e in json.loads(chrome_trace_bytes(prof))["traceEvents"] if e.get("cat") == "kernel"]
    per = collections.defaultdict(list)
    for e in kernels:
        per[(e["args"]["correlation"], e["args"]["stream"])].append(e)
    lanes = collections.Counter()
    for evs in per.values():
        for k, e in enumerate(sorted(evs, key=lambda e: e["ts"])):
            node = by_so[(e["args"]["stream"], k)]
            assert list(node.grid) == e["args"]["grid"]
            lane = node.annotation.get("stream")
            lanes[lane if isinstance(lane, int) else 7] += 1
    return lanes, REGISTRY.snapshot().lanes


def _calibrated_then_profiled(g, replays: int):
    """One replay outside the profiler (it records the calibration table), then ``replays``
    under it; the profiler."""
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    return prof


@pytest.mark.parametrize("block", ["seed_block", "two_branch"])
def test_export_live(tmp_path, results, block):
    fn = seed_block() if block == "seed_block" else two_branch()
    g, _ = capture(fn)
    prof = _calibrated_then_profiled(g, 5)
    expected, labels = _expected_lanes(g, prof)
    layout = export(prof, tmp_path / "run.pftrace", graph_lanes="all")  # torch's default is "none"
    export(prof, tmp_path / "run.json.gz", graph_lanes="all")
    d = decode(tmp_path / "run.pftrace")
    got = collections.Counter(s.args["stream"] for s in d.slices if s.cat == "kernel")
    with gzip.open(tmp_path / "run.json.gz", "rt") as f:
        got_json = collections.Counter(e["tid"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel")
    names = sorted({d.tracks[s.track].name for s in d.slices if s.cat == "kernel"})
    results[f"export_{block}"] = {"expected": dict(expected), "pftrace": dict(got), "json": dict(got_json),
                                  "report": layout.report.as_dict(), "track_names": names, "labels": dict(labels)}
    print(block, results[f"export_{block}"])
    assert got == got_json == expected
    assert layout.report.unmatched == 0 and layout.report.ambiguous == 0
    assert layout.report.matched["calibrated"] == sum(expected.values())
    if block == "seed_block":
        assert {"61 mlp", "62 attention"} <= set(names)
    else:
        # lanes of this graph's kernels only: the process-wide allocator also holds the
        # streams of graphs captured earlier in the process (same labels, other lane ids)
        want = {f"{lane} {labels[lane]}" for lane in expected
                if labels.get(lane) in ("left_projection", "right_projection")}
        assert len(want) == 2 and want <= set(names)


def test_export_follows_torchs_writing(tmp_path, results, monkeypatch):
    """torch 2.11's own exporter read while it writes (``read.follow``, issue 33): the 36-layer
    decoder, 60 replays (49,680 graphed kernels by the replay record: the default follows), the
    same file and report as converting torch's JSON afterwards (kept with ``keep_json``)."""
    from blocks import decoder, decoder_weights

    from perfetto_graph_ann.capture import background
    from perfetto_graph_ann.capture.export import expected_kernels
    from perfetto_graph_ann.capture.recorded import recorded_annotations

    g, _ = capture(decoder(decoder_weights(36)))  # held: a graph collected leaves the registry
    prof = _calibrated_then_profiled(g, 60)
    ann = recorded_annotations()
    seen = []
    real = background.start
    monkeypatch.setattr(background, "start", lambda src, *a, **k: seen.append(k.get("follow")) or real(src, *a, **k))
    layout = export(prof, tmp_path / "followed.pftrace", graph_lanes="all", keep_json=tmp_path / "raw.json")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", "off")
    again = export(str(tmp_path / "raw.json"), tmp_path / "after.pftrace", annotations=ann, graph_lanes="all")
    same = (tmp_path / "followed.pftrace").read_bytes() == (tmp_path / "after.pftrace").read_bytes()
    results["export_follow"] = {"expected_kernels": expected_kernels(ann), "followed": seen, "same_bytes": same,
                                "report": layout.report.as_dict()}
    print(results["export_follow"])
    assert expected_kernels(ann) >= 40000 and seen == [True]
    assert same and layout.report == again.report and layout.report.unmatched == 0
