"""graph_ann_replay's launch timing on 5 back-to-back replays (the shipped seed block).

launch_to_gpu_dur grows replay after replay (each launch waits for the previous replay);
queued_dur is that wait and launch_overhead_dur what is left. Expected values are computed
here from the fixture JSON alone: launch call start, first / last kernel of each replay by
correlation, earlier work = earlier replays (whole) and kernels outside replays."""
from __future__ import annotations

from decimal import Decimal

from support.engine_support import requires_portable
from support.join_expect import fixture_trace, load_json
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.convert import convert

pytestmark = requires_portable
NAME = "seed_block_graph"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def _expected():
    events = load_json(NAME)["traceEvents"]
    launches = {e["args"]["correlation"]: _ns(e["ts"]) for e in events
                if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaGraphLaunch")}
    replays, loose = {}, []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATS:
            continue
        start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])
        corr = e["args"]["correlation"]
        if corr in launches:
            r = replays.setdefault(corr, [start, end])
            r[0], r[1] = min(r[0], start), max(r[1], end)
        else:
            loose.append((start, end))
    out = {}
    for corr, (ts, end) in replays.items():
        earlier = [e for s, e in replays.values() if s < ts] + [e for s, e in loose if s < ts]
        queued = max(0, min(max(earlier), ts) - launches[corr]) if earlier else 0
        out[corr] = (ts - launches[corr], queued, ts - launches[corr] - queued)
    return out


def test_launch_overhead_excludes_queueing_behind_earlier_replays(tmp_path):
    expect = _expected()
    assert len(expect) == 5
    out = tmp_path / "t.pftrace"
    convert(fixture_trace(NAME), out)
    with open_trace(out, engine="portable") as s:
        rows = s.query("INCLUDE PERFETTO MODULE graph_ann.replays; SELECT correlation, launch_to_gpu_dur, "
                       "queued_dur, launch_overhead_dur FROM graph_ann_replay ORDER BY ts").tuples()
    got = {r[0]: tuple(r[1:]) for r in rows}
    assert got == expect
    to_gpu = [got[c][0] for c in sorted(got, key=lambda c: got[c][0])]
    # back-to-back: the launch-to-GPU time grows, the launch overhead does not
    assert to_gpu[-1] > 10 * to_gpu[0]
    overhead = [v[2] for v in got.values()]
    assert max(overhead) < to_gpu[-1] / 5
    print({c: v for c, v in sorted(got.items())})
