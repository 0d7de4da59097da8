"""GPU projection when replays overlap on one GPU, mix with eager work, or are cut by the window.

Synthetic traces from ``scope_synth.write_schedule``: (a) two graphs replayed concurrently on
their own streams, one replay inside another's span and one overlapping it partly; (b) one
graph replayed on two stream pairs so that its replays overlap; (c) eager kernels, named and
sized like graph kernels, between and under the replays; (d) a profiling window that cuts
replays (launch outside, first kernels outside, last kernels outside).

Every expectation comes from the generator's ground truth: which replay each kernel belongs
to, its times, whether it and its launch were written. Written traces are read back with the
independent decoder (tests/support/pftrace_decode) and, for two schedules, with the trace processor
(slice nesting, graph_ann.scopes, graph_ann.replays).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from support import scope_synth
from support.engine_support import requires_portable
from support.pftrace_decode import decode, projected_slices
from support.scope_synth import Launch
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.projection import REASON_NO_LAUNCH, REASON_PARTIAL
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

LAYERS = 2
ALT = (9, 10)  # graph 0's streams in the concurrent schedules (graph 1 keeps 7 and 8)

#: name -> (launches, write_schedule kwargs, calibrated streams per graph index)
SCENARIOS = {
    "two_graphs_concurrent": (
        [Launch(1, 0), Launch(0, 20_000, ALT), Launch(0, 200_000, ALT), Launch(1, 225_000)], {}, {0: ALT}),
    "same_graph_two_streams": (
        [Launch(0, 0), Launch(0, 15_000, (11, 12)), Launch(0, 45_000), Launch(0, 65_000, (11, 12))], {}, {}),
    "eager_between": (
        [Launch(1, 0), Launch(0, 20_000, ALT), Launch(0, 200_000, ALT), Launch(1, 225_000)], {"eager": 14},
        {0: ALT}),
    "window_cuts": (  # bs=4 #0 cut at start; its next replay's launch is written before its first kernel
        [Launch(1, 0), Launch(0, 80_000), Launch(1, 120_000), Launch(0, 300_000), Launch(1, 600_000)],
        {"window": (60_000, 640_000), "eager": 6}, {}),
}

Key = Tuple[int, int]  # (graph exec id, replay in launch order)


def _replays(truth) -> Dict[Key, List]:
    out: Dict[Key, List] = defaultdict(list)
    for k in truth:
        out[(k.graph, k.replay)].append(k)
    return out


def _span(ks) -> Tuple[int, int, int]:
    return min(k.ts for k in ks), max(k.end for k in ks), len(ks)


def _streams_of(launches) -> Dict[Key, Tuple[int, int]]:
    """(graph, replay) -> the streams that replay ran on, in launch order."""
    count: Dict[int, int] = defaultdict(int)
    out = {}
    for x in launches:
        g = scope_synth.GRAPHS[x.graph][0]
        out[(g, count[g])] = x.streams
        count[g] += 1
    return out


def expectation(launches, truth, strategy: str, calibration):
    """What the projection must draw: replay key -> (index, span); (key, path) -> span;
    and which replays get a number (their kernels' ``replay`` arg).

    A replay is numbered when its launch is in the trace and the join can tell its graph
    (calibrated: only on the streams its graph was calibrated on); numbers count those
    replays of the graph in launch order. It is drawn when numbered and all its kernels were
    written."""
    streams = _streams_of(launches)
    cal = {scope_synth.GRAPHS[g][0]: s for g, s in calibration.items()}
    numbered: Dict[Key, int] = {}
    count: Dict[int, int] = defaultdict(int)
    reps = _replays(truth)
    for key in streams:  # launch order
        ks = reps[key]
        if not ks[0].launched or not any(k.visible for k in ks):
            continue
        if strategy == "calibrated" and streams[key] != cal.get(key[0], (7, 8)):
            continue
        numbered[key] = count[key[0]]
        count[key[0]] += 1
    replays, scopes = {}, {}
    for key, idx in numbered.items():
        ks = reps[key]
        if not all(k.visible for k in ks):
            continue
        replays[key] = (idx, _span(ks))
        by_path = defaultdict(list)
        for k in ks:
            by_path[f"layer {k.layer}"].append(k)
            by_path[f"layer {k.layer} / {k.part}"].append(k)
        for path, group in by_path.items():
            scopes[(key, path)] = _span(group)
    return replays, scopes, numbered


def _parents(d, cat_filter=("graph_replay", "gpu_scope")):
    """slice id (position in d.slices) -> the slice it is drawn inside on its track (None: depth 0),
    rebuilt the way the trace processor nests slices of one track."""
    stacks: Dict[int, List[int]] = defaultdict(list)
    out: Dict[int, Optional[int]] = {}
    for i, s in enumerate(d.slices):
        if s.cat not in cat_filter:
            continue
        stack = stacks[s.track]
        while stack and d.slices[stack[-1]].ts + d.slices[stack[-1]].dur <= s.ts:
            stack.pop()
        out[i] = stack[-1] if stack else None
        stack.append(i)
    return out


def _convert(tmp_path: Path, scenario: str, strategy: str, graph_lanes: str = "none"):
    launches, kwargs, calibration = SCENARIOS[scenario]
    src = tmp_path / "sched.json"
    truth = scope_synth.write_schedule(src, launches, layers=LAYERS, strategy=strategy, **kwargs)
    trace = read_trace(src)
    ann = scope_synth.annotations(LAYERS, strategy, streams=calibration)
    layout = join(trace, ann, graph_lanes)
    out = tmp_path / "sched.pftrace"
    convert(trace, out, layout=layout)
    return launches, truth, layout, out, calibration


def _truth(tmp_path: Path, scenario: str):
    launches, kwargs, _ = SCENARIOS[scenario]
    return scope_synth.write_schedule(tmp_path / f"{scenario}.json", launches, layers=LAYERS, **kwargs)


def test_the_scenarios_are_what_they_say(tmp_path):
    """Guard the generator: the concurrent schedules really overlap (a replay inside another's
    span, replays overlapping partly), eager kernels run under replays, the window cuts
    replays three ways."""
    for name, nested in (("two_graphs_concurrent", True), ("same_graph_two_streams", False)):
        sp = sorted(_span(ks)[:2] for ks in _replays(_truth(tmp_path, name)).values())
        pairs = [(a, b) for i, a in enumerate(sp) for b in sp[i + 1:] if b[0] < a[1]]
        assert any(b[1] > a[1] for a, b in pairs)  # partly
        assert any(b[1] <= a[1] for a, b in pairs) == nested
    truth = _truth(tmp_path, "eager_between")
    sp = [_span(ks)[:2] for ks in _replays(truth).values()]
    eager = [e for e in json.loads((tmp_path / "eager_between.json").read_text())["traceEvents"]
             if e.get("tid") == scope_synth.EAGER_STREAM]
    under = [e for e in eager if any(a < e["ts"] * 1000 < b for a, b in sp)]
    assert len(eager) == 14 and len(under) >= 8
    reps = _replays(_truth(tmp_path, "window_cuts"))
    cut = sorted((ks[0].launched, sum(k.visible for k in ks), len(ks)) for ks in reps.values())
    assert cut[0][0] is False and 0 < cut[0][1] < cut[0][2]  # launch and first kernels cut
    assert any(not a and b == n for a, b, n in cut)  # launch cut, every kernel written
    assert any(a and 0 < b < n for a, b, n in cut)  # last kernels cut
    assert sum(a and b == n for a, b, n in cut) == 2  # whole
    # the replay cut at start runs on the GPU after the next launch of its graph (the CPU runs
    # ahead): ordered by time it would take that replay's number
    launch_ts = [e["ts"] * 1000 for e in json.loads((tmp_path / "window_cuts.json").read_text())["traceEvents"]
                 if e.get("name") == "cudaGraphLaunch"]
    first_cut = min(k.ts for k in reps[(12, 0)] if k.visible)
    assert not reps[(12, 0)][0].launched and reps[(12, 1)][0].launched
    assert any(t < first_cut and abs(t + 50_000 - reps[(12, 1)][0].ts) <= 10_000 for t in launch_ts)


@pytest.mark.parametrize("strategy", ["exact", "calibrated", "structural"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_overlapping_replays_project_their_own_kernels(tmp_path, scenario, strategy):
    launches, truth, layout, out, calibration = _convert(tmp_path, scenario, strategy)
    replays, scopes, numbered = expectation(launches, truth, strategy, calibration)
    names = {g: n for g, n, _ in scope_synth.GRAPHS}
    d = decode(out)

    # every written kernel: labelled only with its own node and replay, eager ones not at all
    kernels = [s for s in d.slices if s.cat == "kernel"]
    at = defaultdict(list)
    for s in kernels:
        at[(s.ts, s.dur)].append(s)
    labelled = 0
    for k in truth:
        if not k.visible:
            continue
        (s,) = at[(k.ts, k.end - k.ts)]
        if "graph id" not in s.args or "join" not in s.args:
            assert (k.graph, k.replay) not in replays  # a drawn replay has every kernel labelled
            continue
        labelled += 1
        assert (s.args["graph id"], s.args["name"], s.args["layer"]) == (k.graph, k.part, k.layer)
        assert s.args.get("replay") == numbered.get((k.graph, k.replay))
    eager = [s for s in kernels if s.args["stream"] == scope_synth.EAGER_STREAM]
    assert len(eager) == len(kernels) - sum(k.visible for k in truth)
    assert not any("graph id" in s.args or "replay" in s.args or "join" in s.args for s in eager)
    assert labelled == layout.report.matched[strategy]

    got_r = {(s.args["graph id"], s.args["replay"]): s for s in projected_slices(d, "graph_replay")}
    assert {k: (s.ts, s.ts + s.dur, s.args["kernel count"]) for k, s in got_r.items()} == {
        (g, idx): span for (g, _r), (idx, span) in replays.items()}
    for (g, idx), s in got_r.items():
        assert s.name == f"{names[g]} #{idx}"
    index_of = {key: idx for key, (idx, _) in replays.items()}
    got_s = {}
    for s in projected_slices(d, "gpu_scope"):
        key = (s.args["graph id"], s.args["replay"], s.args.get("scope path", s.name))
        assert key not in got_s
        got_s[key] = (s.ts, s.ts + s.dur, s.args["kernel count"])
    assert got_s == {(key[0], index_of[key], path): span for (key, path), span in scopes.items()}

    # nesting: a replay inside no slice; a scope inside its own enclosing scope, never another's
    parents = _parents(d)
    by_id = dict(enumerate(d.slices))
    full = {i: s for i, s in enumerate(d.slices) if s.cat in ("graph_replay", "gpu_scope")}
    scope_slices = [s for s in d.slices if s.cat == "gpu_scope"]
    filled = {id(s): f for s, f in zip(scope_slices, projected_slices(d, "gpu_scope"))}  # implied ids filled
    for i, s in full.items():
        p = parents[i]
        if s.cat == "graph_replay":
            assert p is None, (s, by_id[p])
            continue
        a = filled[id(s)].args
        path = a.get("scope path", s.name)
        if " / " in path:  # within one replay, attn / mlp never overlap a sibling: always nested
            assert p is not None
            pa = filled[id(by_id[p])].args
            assert (pa["graph id"], pa["replay"], pa.get("scope path", by_id[p].name)) == (
                a["graph id"], a["replay"], path.rsplit(" / ", 1)[0])
        else:
            assert p is None

    # scopes of replays that overlap another replay carry their replay explicitly
    sp = {key: span for key, (_idx, span) in replays.items()}
    concurrent = {key for key in sp for other in sp if other != key
                  and sp[other][0] < sp[key][1] and sp[key][0] < sp[other][1]}
    for s in d.slices:
        if s.cat == "gpu_scope" and "graph id" not in s.args:
            f = filled[id(s)].args
            key = next(k for k, i in index_of.items() if (k[0], i) == (f["graph id"], f["replay"]))
            assert key not in concurrent


def test_window_cut_replays_are_reported_not_drawn(tmp_path):
    launches, truth, layout, out, calibration = _convert(tmp_path, "window_cuts", "exact")
    reps = _replays(truth)
    no_launch = sum(1 for ks in reps.values() if not ks[0].launched and any(k.visible for k in ks))
    partial = sum(1 for ks in reps.values() if ks[0].launched and not all(k.visible for k in ks))
    assert (no_launch, partial) == (2, 1)
    assert layout.report.unprojected_replays == {REASON_NO_LAUNCH: no_launch, REASON_PARTIAL: partial}
    from perfetto_graph_ann.join.summary import warning_lines

    lines = warning_lines(layout.report)
    assert f"note: 2 graph replays not drawn on the GPU timeline: {REASON_NO_LAUNCH}" in lines
    assert f"note: 1 graph replay not drawn on the GPU timeline: {REASON_PARTIAL}" in lines


def test_graph_lanes_do_not_change_the_projection(tmp_path):
    (tmp_path / "all").mkdir()
    (tmp_path / "none").mkdir()
    *_, out_all, _ = _convert(tmp_path / "all", "eager_between", "exact", "all")
    *_, out_none, _ = _convert(tmp_path / "none", "eager_between", "exact", "none")

    def ranges(p):
        d = decode(p)
        return sorted((s.cat, s.name, s.ts, s.dur, tuple(sorted(s.args.items())))
                      for s in d.slices if s.cat in ("graph_replay", "gpu_scope"))

    assert ranges(out_all) == ranges(out_none) != []


@requires_portable
@pytest.mark.parametrize("scenario", ["two_graphs_concurrent", "window_cuts"])
def test_concurrent_replays_in_the_trace_processor(tmp_path, scenario):
    """The SQL tables (graph_ann.scopes, graph_ann.replays) and the UI's nesting
    (slice.parent_id) on concurrent replays, eager work and a cut window."""
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.session import open_trace

    launches, truth, _layout, out, calibration = _convert(tmp_path, scenario, "exact")
    replays, scopes, numbered = expectation(launches, truth, "exact", calibration)
    with open_trace(out, engine="portable") as s:
        rows = s.query(
            "SELECT s.id, s.category, s.name, p.id AS parent, p.category AS parent_category "
            "FROM slice s LEFT JOIN slice p ON s.parent_id = p.id "
            "WHERE s.category IN ('graph_replay', 'gpu_scope')").tuples()
        inst = metrics.scope_instances(s)
        reps = metrics.graph_replays(s)
        work = metrics.replays(s)
    # graph_ann.replays, from the kernels alone: every replay with its launch in the trace,
    # cut or not, with only its own work
    launched = {key: [k for k in ks if k.visible] for key, ks in _replays(truth).items() if ks[0].launched}
    assert {(r.graph_id, r.replay): (r.ts, r.end_ts, r.work_count) for r in work.itertuples()} == {
        (key[0], numbered[key]): _span(ks) for key, ks in launched.items()}
    got_r = {(r.graph_id, r.replay): (r.ts, r.ts + r.dur, r.kernel_count) for r in reps.itertuples()}
    assert got_r == {(g, idx): span for (g, _r), (idx, span) in replays.items()}
    index_of = {key: idx for key, (idx, _) in replays.items()}
    got = {(r.graph_id, r.replay, r.scope_path): (r.ts, r.ts + r.dur, r.kernel_count) for r in inst.itertuples()}
    assert got == {(key[0], index_of[key], path): span for (key, path), span in scopes.items()}
    ident = {r.id: (r.graph_id, r.replay, r.scope_path) for r in inst.itertuples()}
    for sid, cat, name, parent, parent_cat in rows:
        if cat == "graph_replay" or " / " not in ident[sid][2]:
            assert parent is None, (sid, name)
        else:
            g, r, path = ident[sid]
            assert parent_cat == "gpu_scope" and ident[parent] == (g, r, path.rsplit(" / ", 1)[0])
