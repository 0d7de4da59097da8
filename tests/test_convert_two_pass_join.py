"""The two-pass read with a join (issue 33): ``convert IN OUT.pftrace --annotations SIDECAR`` of a
plain JSON file keeps light events that hold, for GPU work and graph launches, their names and
the args the join reads; the join runs on those and the writer reads each event again for its
packet. Output bytes must be the in-memory read's (``ConvertConfig(two_pass=False)``) for
every fixture with annotations, every lane option, encoder and arg mode, and synthetic traces
that take every strategy of the join; errors stay that read's, with no output left."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.files import save_annotations
from perfetto_graph_ann.errors import AnnotationMismatchError, LaneOptionError, TraceFormatError
from perfetto_graph_ann.join import join
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert_file
from perfetto_graph_ann.read import events as events_mod
from perfetto_graph_ann.read import kineto, scan
from perfetto_graph_ann.read.scan import scan_trace
from perfetto_graph_ann.write.pftrace import write_pftrace
from support import scope_synth
from test_convert_two_pass import change_between_passes
from test_read_stream import _kineto_multiline

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.decoder_synth import decoder_annotations, decoder_trace  # noqa: E402

_CONFIGS = [dict(), dict(list_args="typed"), dict(encoder="protos"), dict(sort_window_bytes=4096)]
_JOIN_ARGS = ("device", "stream", "correlation", "grid", "block", "graph id", "graph node id")


def _convert(src, out, annotations, two_pass, **kw):
    lanes = {k: kw.pop(k) for k in ("graph_lanes", "default_stream", "force", "edge_flows") if k in kw}
    return convert_file(str(src), str(out), [str(a) for a in annotations], config=ConvertConfig(two_pass=two_pass, **kw),
                        **lanes)


def _same(src, annotations, tmp_path, **kw):
    """Both reads convert ``src`` joined with ``annotations`` to the same bytes and counts."""
    a, b = tmp_path / "in_memory.pftrace", tmp_path / "two_pass.pftrace"
    da = _convert(src, a, annotations, False, **dict(kw))
    db = _convert(src, b, annotations, True, **dict(kw))
    assert da.stats.reading == "in memory" and db.stats.reading == "two-pass"
    db.stats.reading = da.stats.reading
    assert da.stats == db.stats and da.events == db.events
    assert da.layout.report == db.layout.report
    assert a.read_bytes() == b.read_bytes()
    return da


def _plain(tmp_path, name):
    src = tmp_path / f"{name}.json"
    src.write_bytes(gzip.decompress(fixture_trace(name).read_bytes()))
    return src


@pytest.mark.parametrize("name", ["seed_block_annotated", "two_branch"])
@pytest.mark.parametrize("lanes", [None, "none", "all"])
@pytest.mark.parametrize("kw", _CONFIGS, ids=lambda kw: ",".join(kw) or "default")
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_fixtures_with_annotations_give_the_in_memory_bytes(name, lanes, kw, gz, tmp_path):
    src = fixture_trace(name) if gz else _plain(tmp_path, name)
    done = _same(src, [fixture_capture(name)], tmp_path, graph_lanes=lanes, **kw)
    assert sum(done.layout.report.matched.values()) > 0  # the join placed events: a join to compare


@pytest.mark.parametrize("strategy", ["exact", "calibrated", "structural"])
@pytest.mark.parametrize("lanes", ["none", "all"])
def test_synthetic_decoder_every_strategy(strategy, lanes, tmp_path):
    src = tmp_path / "t.json"
    scope_synth.write_trace(src, layers=3, strategy=strategy)
    ann = save_annotations(tmp_path / "t.annotations.json", scope_synth.annotations(3, strategy))
    done = _same(src, [ann], tmp_path, graph_lanes=lanes)
    assert done.layout.report.matched[strategy] > 0 and done.layout.ranges


def test_overlapping_cut_replays_and_eager_kernels(tmp_path):
    launches = [scope_synth.Launch(g, start) for g, start in ((0, 0), (1, 30_000), (0, 90_000), (1, 95_000),
                                                               (0, 400_000))]
    src = tmp_path / "t.json"
    scope_synth.write_schedule(src, launches, layers=2, strategy="calibrated", eager=9, window=(-45_000, 420_000))
    ann = save_annotations(tmp_path / "t.annotations.json", scope_synth.annotations(2, "calibrated"))
    for lanes in ("none", "all"):
        _same(src, [ann], tmp_path, graph_lanes=lanes)


def _decoder(tmp_path, replays=4, layers=2, record=True):
    launches = []
    src = tmp_path / "decoder.json"
    src.write_bytes(decoder_trace(replays, layers, launches=launches))
    ann = save_annotations(tmp_path / "decoder.annotations.json",
                           decoder_annotations(layers, record=launches if record else None))
    return src, ann


@pytest.mark.parametrize("record", [False, True], ids=["calibrated", "replay record"])
def test_decoder_benchmark_trace(record, tmp_path):
    src, ann = _decoder(tmp_path, record=record)
    for kw in _CONFIGS:
        done = _same(src, [ann], tmp_path, **kw)
        assert done.layout.report.matched["calibrated"] == 4 * 2 * 23


def _odd_joined_events():
    """A decoder trace's events made odd where the join looks: old category spellings, driver
    launches, a launch name on another category, graph ids (ints, strings, local ids), replays
    without their launch, memcpy / memset nodes, args the typed decode refuses (null args, an
    unknown key: the generic path), non-int grids and streams."""
    doc = json.loads(decoder_trace(3, 1))
    evs = doc["traceEvents"]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    launches = [e for e in evs if e.get("name") == "cudaGraphLaunch"]
    launches[1]["cat"], launches[1]["name"] = "cuda_driver", "cuGraphLaunch"
    k0 = kernels[0]
    extra = [
        dict(k0, cat="Memset", name="Memset (Device)", args=dict(k0["args"], correlation=launches[0]["args"]["correlation"])),
        dict(k0, cat="gpu_memcpy", name="Memcpy DtoD", args={"device": 0, "stream": 7, "correlation": 99999,
                                                               "graph id": 2, "graph node id": 5}),
        dict(k0, cat="kernel", name="k_exact", args={"device": 0, "stream": 7, "correlation": 99998,
                                                     "graph id": "2", "graph node id": str((2 << 32) | 6)}),
        dict(k0, cat="cpu_op", name="cudaGraphLaunch", args={"correlation": 123456, "External id": 1}),
        dict(k0, cat="KERNEL", name=kernels[3]["name"], args=None),
        dict(k0, cat="kernel", name=kernels[4]["name"], args=dict(k0["args"], grid=[1.0, 2, 3], stream=True),
             unknown_key={"x": [1]}),
    ]
    kernels[2]["args"]["grid"] = [16, 1]
    kernels[5]["args"]["block"] = "128"
    kernels[6]["args"]["stream"] = 7.0
    del kernels[7]["args"]["device"]
    evs.extend(extra)
    return doc, evs


@pytest.mark.parametrize("block", [97, 4096, 1 << 20])
def test_odd_events_where_the_join_looks(block, tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "STREAM_BLOCK", block)
    doc, evs = _odd_joined_events()
    src = tmp_path / "t.json"
    src.write_bytes(_kineto_multiline(evs, head={k: v for k, v in doc.items() if k != "traceEvents"}))
    _, ann = _decoder(tmp_path, 3, 1, record=False)
    for lanes in ("none", "all"):
        for kw in _CONFIGS[:2]:
            _same(src, [ann], tmp_path, graph_lanes=lanes, **kw)


def test_the_light_events_hold_what_the_join_reads(tmp_path):
    """Light events of GPU work and graph launches keep their name and the join's args (same
    values, same types); the join on them gives the whole read's layout."""
    doc, evs = _odd_joined_events()
    src = tmp_path / "t.json"
    src.write_bytes(_kineto_multiline(evs, head={k: v for k, v in doc.items() if k != "traceEvents"}))
    scanned = scan_trace(str(src), join=True)
    whole = kineto.parse_trace_bytes(src.read_bytes(), str(src))
    assert scanned is not None and len(scanned.events) == len(whole.events)
    kept = 0
    for light, e in zip(scanned.events, whole.events):
        assert (light.index, light.ph, light.cat, light.pid, light.tid, light.ts_ns, light.dur_ns, light.id) == (
            e.index, e.ph, e.cat, e.pid, e.tid, e.ts_ns, e.dur_ns, e.id)
        if e.ph in ("M", "C"):
            assert light.args == e.args and light.name == e.name
        elif e.ph == "X" and (e.is_gpu_work or e.name in ("cudaGraphLaunch", "cuGraphLaunch")):
            kept += 1
            assert light.name == e.name
            want = {k: e.args[k] for k in _JOIN_ARGS if k in e.args}
            assert light.args == want and list(light.args) == list(want)
            assert all(type(light.args[k]) is type(want[k]) for k in want)
        else:
            assert light.name == "" and light.args == {k: e.args[k] for k in ("device", "stream") if k in e.args}
    assert kept > 10
    scanned.source.close()
    ann = decoder_annotations(1)
    for lanes in ("none", "all"):
        a, b = join(whole, ann, lanes), join(scanned, ann, lanes)
        assert a.placements == b.placements and a.lane_names == b.lane_names and a.report == b.report
        assert a.ranges == b.ranges and a.ranges


def test_chrome_json_output_reads_in_memory(tmp_path):
    src, ann = _decoder(tmp_path, 2, 1)
    out = tmp_path / "out.json"
    done = _convert(src, out, [ann], True)
    assert done.stats is None and out.exists()


def test_errors_stay_the_in_memory_reads_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 256)
    src, ann = _decoder(tmp_path, 2, 1)
    data = src.read_bytes()
    os.unlink(src)
    cases = {"cut.json": data[: len(data) // 2], "broken.json": data.replace(b'"dur"', b'"dur', 1),
             "negative.json": data.replace(b'"dur": ', b'"dur": -', 5),
             "bad utf8.json": data.replace(b'"queued": 0', b'"queued": "\xff\xfe"', 1)}
    cases.update({name + ".gz": gzip.compress(text) for name, text in list(cases.items())})
    cases["truncated.json.gz"] = gzip.compress(data)[:len(data) // 20]
    for name, text in cases.items():
        src = tmp_path / name
        src.write_bytes(text)
        messages = []
        for two_pass in (False, True):
            out = tmp_path / f"{name}.{two_pass}.pftrace"
            with pytest.raises(TraceFormatError) as e:
                _convert(src, out, [ann], two_pass)
            messages.append(str(e.value))
            assert not out.exists()
        assert messages[0] == messages[1], name
        assert str(src) in messages[0]
    # lane options are refused before the trace is read, as the in-memory path refuses them
    for two_pass in (False, True):
        with pytest.raises(LaneOptionError):
            _convert(tmp_path / "cut.json", tmp_path / "lanes.pftrace", [ann], two_pass, default_stream=-3)
    # annotations of another run: refused by the join, after the first pass, with no output
    other = save_annotations(tmp_path / "other.annotations.json",
                             dataclasses.replace(decoder_annotations(1), graphs=scope_synth.annotations(1, "calibrated").graphs))
    good = tmp_path / "good.json"
    good.write_bytes(data)
    for two_pass in (False, True):
        with pytest.raises(AnnotationMismatchError):
            _convert(good, tmp_path / "other.pftrace", [other], two_pass)
    assert sorted(os.listdir(tmp_path)) == sorted([*cases, "decoder.annotations.json", "other.annotations.json",
                                                   "good.json"])


@pytest.mark.parametrize("change", ["rewritten", "shortened"])
def test_a_file_changed_between_the_passes_is_refused_with_no_output(change, tmp_path):
    src, ann = _decoder(tmp_path, 2, 1)
    data = src.read_bytes()
    scanned = scan_trace(str(src), join=True)
    from perfetto_graph_ann.annotations.files import load_annotations

    layout = join(scanned, load_annotations(str(ann)), "all")
    change_between_passes(src, data, change)
    out = tmp_path / "out.pftrace"
    with pytest.raises(TraceFormatError, match="changed while it was being converted"):
        write_pftrace(scanned, out, layout)
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["decoder.annotations.json", "decoder.json"]


def test_shared_join_args_are_bounded(tmp_path, monkeypatch):
    """The join args one replay's kernels share are kept in a bounded memo: a trace with more
    distinct ones than it holds converts the same."""
    monkeypatch.setattr(scan, "_JOIN_MEMO", 3)
    src, ann = _decoder(tmp_path, 3, 1)
    _same(src, [ann], tmp_path)


def _edges_sidecar(tmp_path):
    """The two-branch capture with recorded edges (the critical path is computed from them)."""
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.annotations.model import GraphEdge

    ann = load_annotations(str(fixture_capture("two_branch")))
    g = dataclasses.replace(ann.graphs[0], edges=(GraphEdge(0, 2), GraphEdge(1, 2)))
    return save_annotations(tmp_path / "edges.annotations.json", dataclasses.replace(ann, graphs=(g,)))


@pytest.mark.parametrize("edge_flows", [False, True])
def test_recorded_edges_critical_path_args_and_flows(edge_flows, tmp_path):
    """The critical path adds placements' args after they are made (a compact placement's in its
    ``path`` column, no placement kept whole for it): the same bytes, with and without the
    dependency flows."""
    sidecar = _edges_sidecar(tmp_path)
    for lanes in ("none", "all"):
        done = _same(_plain(tmp_path, "two_branch"), [sidecar], tmp_path, graph_lanes=lanes, edge_flows=edge_flows)
        assert done.layout.report.critical_paths and (bool(done.layout.edge_flows) == edge_flows)


def test_compact_critical_path_column_is_the_dict_placements_args(tmp_path):
    """Recorded edges: the compact placements keep each row's critical path arg in their ``path``
    column (none kept whole for it), and give the same placements, args and writer lookups as
    the dict path, the arg last."""
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.join.model import PATH_ARG, SLACK_ARG, CompactPlacements

    trace = kineto.read_trace(fixture_trace("two_branch"))
    ann = load_annotations(str(_edges_sidecar(tmp_path)))
    for lanes in ("none", "all"):
        a, b = join(trace, ann, lanes), join(trace, ann, lanes, compact=True)
        assert isinstance(b.placements, CompactPlacements) and b.placements.path is not None
        assert not b.placements.kept and a.report == b.report
        assert list(a.placements.items()) == list(b.placements.items())
        marked = [i for i, p in a.placements.items() if PATH_ARG in p.args or SLACK_ARG in p.args]
        assert marked and all(list(a.placements[i].args)[-1] in (PATH_ARG, SLACK_ARG) for i in marked)
        assert any(PATH_ARG in a.placements[i].args for i in marked) and any(
            SLACK_ARG in a.placements[i].args for i in marked)
        for i, p in a.placements.items():
            into = {"stream": 1}
            b.placements.merge_args(i, into)
            assert list(into.items()) == list({"stream": 1, **p.args}.items())
        b.placements.pin(marked[0])  # kept whole from here: its arg goes with it
        assert b.placements[marked[0]] == a.placements[marked[0]] and marked[0] in b.placements.kept


def test_compact_placements_are_the_dict_placements():
    """``join(compact=True)``: the same placements by index, in the same order, as made by the
    dict path; ``pin`` keeps one whose args then change; absent indexes are absent."""
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.join.model import CompactPlacements, mutable_placement

    trace = kineto.read_trace(fixture_trace("seed_block_annotated"))
    ann = load_annotations(str(fixture_capture("seed_block_annotated")))
    for lanes in ("none", "all"):
        a, b = join(trace, ann, lanes), join(trace, ann, lanes, compact=True)
        assert isinstance(b.placements, CompactPlacements) and type(a.placements) is dict
        assert list(a.placements.items()) == list(b.placements.items()) and len(a.placements) == len(b.placements)
        assert a.report == b.report and a.lane_names == b.lane_names and a.ranges == b.ranges
        for i, p in a.placements.items():  # the writer's lookups without making the placement
            assert b.placements.lane_of(i) == (p.lane, bool(p.args))
            into = {"stream": 1, "join": "x", "z": 2}
            b.placements.merge_args(i, into)
            want = {"stream": 1, "join": "x", "z": 2}
            want.update(p.args)
            assert list(into.items()) == list(want.items())
        assert b.placements.lane_of(-1) is None and b.placements.lane_of(len(trace.events) + 5) is None
        first = next(iter(a.placements))
        assert first in b.placements and -1 not in b.placements and len(trace.events) + 5 not in b.placements
        assert b.placements.get(len(trace.events) + 5) is None and b.placements.get("x", 3) == 3
        with pytest.raises(KeyError):
            b.placements[-1]
        mutable_placement(b.placements, first).args["x"] = 1
        assert b.placements[first].args == {**a.placements[first].args, "x": 1}
        assert list(b.placements) == list(a.placements)


def test_flow_ends_in_an_array_are_the_dict_ones():
    """``plan_flows(size=...)`` (a flow to every kernel: the ends in :class:`FlowEnds`) binds
    the very flows the dict does; ``FlowEnds`` keeps one id in the array, others as given."""
    from perfetto_graph_ann.write.perfetto.flows import FlowEnds, plan_flows
    from perfetto_graph_ann.write.perfetto.plan import plan_events
    from perfetto_graph_ann.write.perfetto.tracks import TrackTable
    from perfetto_graph_ann.write.perfetto.config import WriteStats

    trace = kineto.read_trace(fixture_trace("seed_block_graph"))
    plan = plan_events(trace, None, TrackTable(trace), WriteStats())
    a = plan_flows(plan.events, plan.flow_indices, plan.starts)
    b = plan_flows(plan.events, plan.flow_indices, plan.starts, size=plan.base)
    assert isinstance(b.terminating, FlowEnds) and a.terminating and a.count == b.count
    assert len(a.terminating) == len(b.terminating) and a.outgoing == b.outgoing
    for i in range(plan.base + 3):
        assert (tuple(a.terminating[i]) if i in a.terminating else None) == (
            tuple(b.terminating[i]) if i in b.terminating else None)
    ends = FlowEnds(4)
    ends[1] = [7]
    ends[2] = (3, 4)
    ends[9] = [5]
    ends[3] = (1 << 63,)
    assert [ends.get(i) for i in range(5)] == [None, (7,), (3, 4), (1 << 63,), None] and ends[9] == [5]
    ends[2] = (8,)
    assert ends.get(2) == (8,) and len(ends) == 4 and 0 not in ends and -1 not in ends
    with pytest.raises(KeyError):
        ends[0]


def test_columns_beyond_int32_are_kept_whole():
    """The compact columns hold int32: a lane, stream, replay index or flow id beyond it is kept
    as it is, and given back the same."""
    from perfetto_graph_ann.join.model import CompactPlacements, matched_placement
    from perfetto_graph_ann.write.perfetto.flows import FlowEnds
    from perfetto_graph_ann.write.perfetto.plan import _Lanes

    lanes = _Lanes(4)
    for i, lane in enumerate([7, 1 << 40, -5, -(1 << 31)]):
        lanes[i] = lane
    lanes[9] = 3
    assert [lanes.get(i) for i in range(4)] == [7, 1 << 40, -5, -(1 << 31)] and lanes.get(9) == 3
    assert lanes.get(5) is None and len(lanes) == 5
    ends = FlowEnds(3)
    ends[0], ends[1] = (1 << 31,), ((1 << 31) - 1,)
    assert ends.get(0) == (1 << 31,) and ends.get(1) == ((1 << 31) - 1,) and ends.get(2) is None
    for every in (False, True):
        p = CompactPlacements(6, every)
        node = (7, {"name": "n", "graph id": 2}, {"name": "n"})
        cases = [(0, 1, 7), (1, 1 << 35, 7), (2, 3, 1 << 40), (3, None, None), (4, 2, -(1 << 31))]
        for i, replay, hw in cases:
            p.add(i, 99, node, replay, "calibrated", i == 3, hw)
        for i, replay, hw in cases:
            assert p[i] == matched_placement(every, *node, replay, "calibrated", i == 3, hw)
            assert p[i].lane == (7 if every or hw is None else hw)
            assert p.lane_of(i) == (p[i].lane, True)
            into: dict = {}
            p.merge_args(i, into)
            assert list(into.items()) == list(p[i].args.items())
        assert list(p) == [0, 1, 2, 3, 4] and 5 not in p and len(p) == 5


def test_pga_convert_with_annotations_is_the_cli_join(tmp_path):
    """``pga.convert(path, out, annotations=[...])`` joins as ``convert --annotations`` does
    (two passes); a trace already read joins in memory to the same bytes; with a layout too:
    refused."""
    import perfetto_graph_ann as pga

    src, ann = _decoder(tmp_path, 3, 2)
    a, b, c = tmp_path / "a.pftrace", tmp_path / "b.pftrace", tmp_path / "c.pftrace"
    sa = pga.convert(src, a, annotations=[ann])
    convert_file(str(src), str(b), [str(ann)])
    sc = pga.convert(kineto.read_trace(src), c, annotations=[ann])
    assert sa.reading == "two-pass" and sc.reading == "in memory"
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    with pytest.raises(ValueError):
        pga.convert(src, tmp_path / "d.pftrace", layout=_convert(src, tmp_path / "e.pftrace", [ann], True).layout,
                    annotations=[ann])
    assert not (tmp_path / "d.pftrace").exists()


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_merge_reads_each_rank_in_two_passes(gz, tmp_path, monkeypatch):
    """``merge`` (and ``diff``, through ``convert_rank``) reads each rank as ``convert`` does,
    joined or not: the bytes of the in-memory read (``two_pass=False``)."""
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.pipeline import merge as merge_mod

    names = ["seed_block_annotated", "two_branch", "allreduce_graph_rank0"]
    paths = [fixture_trace(n) if gz else _plain(tmp_path, n) for n in names]
    anns = [load_annotations(str(fixture_capture(n))) for n in names[:2]] + [None]
    scanned = []
    real = scan_trace
    monkeypatch.setattr(scan, "scan_trace",
                        lambda p, join=False, follow=None: scanned.append(join) or real(p, join, follow))
    outs = []
    for two_pass in (False, True):
        out = tmp_path / f"merged.{two_pass}.pftrace"
        merge_mod.merge([str(p) for p in paths], str(out), anns, labels=["a", "b", "c"], two_pass=two_pass)
        outs.append(out.read_bytes())
    assert scanned == [True, True, False]
    assert outs[0] == outs[1]


def _odd_trace(tmp_path):
    doc, evs = _odd_joined_events()
    evs.append(dict(evs[-1], ph="B", dur=None, name=evs[-2]["name"]))  # a slice of another phase: "ph" kept
    src = tmp_path / "odd.json"
    src.write_bytes(_kineto_multiline(evs, head={k: v for k, v in doc.items() if k != "traceEvents"}))
    return src, save_annotations(tmp_path / "odd.annotations.json", decoder_annotations(1))


@pytest.mark.parametrize("two_pass", [False, True], ids=["in memory", "two-pass"])
@pytest.mark.parametrize("kw", [dict(), dict(batch=7, sort_window_bytes=300), dict(batch=1, own_sequence_min=10**9),
                                dict(list_args="typed", keep_args=frozenset({"scope path", "correlation", "grid"})),
                                dict(cache_limit=4)],
                         ids=["default", "small batches", "one sequence", "typed, some args kept", "small caches"])
@pytest.mark.parametrize("trace", ["decoder", "odd", "two_branch", "seed_block_annotated", "edges"])
def test_the_compiled_packet_loop_writes_the_python_loops_bytes(two_pass, kw, trace, tmp_path, monkeypatch):
    """``_encode.stream_records`` (the packet loop's usual records in C, rewritten slices' args
    made there as ``Plan.args_of`` makes them, scope ranges whose args are cached) against the
    loop in Python, the rest of the
    compiled path on in both: the same bytes, batches (so the sorting-window marks) cut at the
    same packets, on joined traces with slice ends, rewritten kernels (compact and dict
    placements, placements kept whole, odd events), launches' flows and projected ranges."""
    from perfetto_graph_ann.write.perfetto import fast_args, fast_encoder
    from perfetto_graph_ann.write.pftrace import ConvertConfig as Config

    kw = dict(kw)
    if "cache_limit" in kw:  # per-key caches off after a few values: scope ranges' ints encoded in C
        monkeypatch.setattr(fast_args.FastArgs, "KEY_CACHE_LIMIT", kw.pop("cache_limit"))
    if fast_encoder.stream_records is None:
        pytest.skip("the writer's compiled hot path (_encode) is not built or turned off")
    if trace == "decoder":
        src, ann = _decoder(tmp_path, replays=3)
    elif trace == "odd":
        src, ann = _odd_trace(tmp_path)
    elif trace == "edges":  # recorded edges: every kernel gets its critical path arg (compact: the path column)
        src, ann = _plain(tmp_path, "two_branch"), _edges_sidecar(tmp_path)
    else:
        src, ann = _plain(tmp_path, trace), fixture_capture(trace)
    calls = []
    real = fast_encoder.stream_records

    def counted(*args):
        calls.append(args[19] is not None)  # rw: the rewrite columns
        return real(*args)

    writer_config = Config.writer_config
    monkeypatch.setattr(Config, "writer_config", lambda self: dataclasses.replace(writer_config(self), **kw))
    out = {}
    for name, fn in (("c", counted), ("python", None)):
        monkeypatch.setattr(fast_encoder, "stream_records", fn)
        for lanes in ("none", "all"):
            path = tmp_path / f"{name}_{lanes}.pftrace"
            _convert(src, path, [ann], two_pass, graph_lanes=lanes, force=True)
            out[name, lanes] = path.read_bytes()
    assert calls and all(calls)  # the rewritten args made in C
    assert out["c", "none"] == out["python", "none"] and out["c", "all"] == out["python", "all"]


def _kept(events):
    """Every field of each light event, and which earlier event's args object each one shares
    (the first pass shares one dict among events with the same light args)."""
    import msgspec

    first = {}
    return [(msgspec.structs.astuple(e), first.setdefault(id(e.args), k)) for k, e in enumerate(events)]


@pytest.mark.parametrize("join", [True, False], ids=["join", "plain"])
@pytest.mark.parametrize("trace", ["odd", "odd light args", "two_branch", "seed_block_annotated"])
def test_the_compiled_first_pass_loop_keeps_the_python_loops_events(join, trace, tmp_path, monkeypatch):
    """``_scan.keep_loop`` (the first pass's per-event loop in C) against the loop in Python: the
    same light events, field for field and type for type, sharing the same args objects, on
    traces whose events leave the C loop's usual path for Python's (the generic decode's dict
    args, unhashable and non-int values, graph ids, old category spellings, launches by
    another name, metadata and counters)."""
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 4096)  # many runs: the memos carried between them
    if scan.KEEP_LOOP is None:
        pytest.skip("the reader's compiled loop (_scan) is not built or turned off")
    monkeypatch.setattr(scan, "FAST_RUN", None)  # every run decoded: the loops compared (fast_run: below)
    if trace == "odd":
        src, _ = _odd_trace(tmp_path)
    elif trace == "odd light args":
        doc, evs = _odd_joined_events()
        runtime = next(e for e in evs if e.get("cat") == "cuda_runtime")
        evs.extend([dict(runtime, args={"device": [0], "stream": 7}), dict(runtime, args={"device": 0.0, "stream": True}),
                    dict(runtime, args={"device": {"x": 1}}), dict(runtime, args={"stream": 7}),
                    dict(runtime, args=None), dict(runtime, args={"device": 0, "stream": 7, "other": [1, {"y": 2}]})])
        evs.append({"ph": "C", "cat": "cuda_runtime", "name": "counter", "pid": 1, "tid": 1, "ts": 5.0,
                    "args": {"device": 1, "value": 2}})
        src = tmp_path / "light.json"
        src.write_bytes(_kineto_multiline(evs, head={k: v for k, v in doc.items() if k != "traceEvents"}))
    else:
        src = _plain(tmp_path, trace)
    calls = []
    real, spans, whole, finish = scan.KEEP_LOOP, scan.EVENT_SPANS, scan.WHOLE_EVENTS, events_mod.FINISH_RUN
    assert whole is not None and finish is not None
    kept = {}
    offsets = {}
    for name, loop, span in (("c", lambda run, ctx: calls.append(len(run)) or real(run, ctx),
                              lambda *a: calls.append(0) or spans(*a)), ("python", None, None)):
        monkeypatch.setattr(scan, "KEEP_LOOP", loop)
        monkeypatch.setattr(scan, "EVENT_SPANS", span)
        monkeypatch.setattr(scan, "WHOLE_EVENTS", whole if loop else None)
        monkeypatch.setattr(events_mod, "FINISH_RUN", finish if loop else None)
        scanned = scan_trace(str(src), join=join)
        assert scanned is not None
        scanned.source.close()
        kept[name] = _kept(scanned.events)
        offsets[name] = scanned.source.offsets.tolist()
    runs = [n for n in calls if n]
    assert len(runs) > 1 and sum(runs) == len(kept["c"]) and calls.count(0) == len(runs)
    assert kept["c"] == kept["python"]
    assert [type(v) for t, _ in kept["c"] for v in t] == [type(v) for t, _ in kept["python"] for v in t]
    assert offsets["c"] == offsets["python"] and len(offsets["c"]) == len(kept["c"]) + 1


@pytest.mark.skipif(scan.GATHER is None, reason="the reader's compiled loop (_scan) is not built or turned off")
@pytest.mark.parametrize("trace", ["odd", "seed_block_annotated"])
def test_the_second_pass_reads_the_same_events_with_the_compiled_gather(trace, tmp_path, monkeypatch):
    """``_scan.span_of`` / ``gather`` (a batch's span and its events' texts joined in C) against the
    Python slices: the same events for batches in file order, shuffled, repeated and far apart
    (the sorted runs' path, Python's in both), and the same IndexError beyond the offsets."""
    import random

    import msgspec

    src = _odd_trace(tmp_path)[0] if trace == "odd" else _plain(tmp_path, trace)
    scanned = scan_trace(str(src), join=True)
    source = scanned.source
    n = len(source)
    rng = random.Random(25)
    batches = [list(range(n)), rng.sample(range(n), n // 2), [3, 3, 1], [n - 1], [0, n - 1]]
    got = {}
    for name, gather in (("c", scan.GATHER), ("python", None)):
        monkeypatch.setattr(scan, "GATHER", gather)
        monkeypatch.setattr(scan, "_SPAN", 1 << 23)
        got[name] = [{i: msgspec.structs.astuple(e) for i, e in source.fetch(b).items()} for b in batches]
        monkeypatch.setattr(scan, "_SPAN", 64)  # every batch but one-event ones read in sorted runs
        got[name].append({i: msgspec.structs.astuple(e) for i, e in source.fetch(batches[1]).items()})
        for bad in ([n], [0, n + 5]):
            with pytest.raises(IndexError):
                source.fetch(bad)
    source.close()
    assert got["c"] == got["python"] and len(got["c"][0]) == n


@pytest.mark.skipif(events_mod.FINISH_RUN is None, reason="the reader's compiled loop (_scan) is not built or turned off")
@pytest.mark.parametrize("extras", [False, True], ids=["light", "whole"])
@pytest.mark.parametrize("times,done", [
    (['"ts": 0.000, "dur": 1.500', '"ts": 123456789012345.678, "dur": 0.001', '"ph": "i", "ts": 7.250'], True),
    (['"ts": 1.000, "dur": 2.000', '"ph": "f", "ts": 3.000, "bp": "e", "id": 4', '"ph": "t", "ts": 3.000, "s": "p"',
      '"ph": "i", "ts": 3.000, "s": "g", "bp": "x"'], True),
    (['"ts": 1.000, "dur": 2.000', '"ts": 3, "dur": 1.000'], False),  # an int time
    (['"ts": 1.0000, "dur": 2.000'], False), (['"ts": 1.00, "dur": 2.000'], False), (['"ts": 1e3, "dur": 2.000'], False),
    (['"ts": 1234567890123456.000, "dur": 1.000'], False),  # 16 integer digits
    (['"ts": -1.000, "dur": 1.000'], False), (['"ts": 1.000, "dur": 1.000', '"ph": "X", "ts": 2.000'], False),
    ([], True)])
def test_compiled_finish(times, done, extras):
    """``_scan.finish_run``: a run of Kineto-format times gets the Python path's indices, times,
    ``extra`` (None for a light run, else the dict of its ``bp`` and ``s``) and class, type for
    type; any other run is left untouched (None), and the Python path then reads it (or refuses
    it) as before."""
    import msgspec

    bodies = [t if '"ph"' in t else '"ph": "X", ' + t for t in times]
    text = ("[" + ",".join("{" + b + ', "name": "k", "args": {}}' for b in bodies) + "]").encode()
    decoder = events_mod._typed_decoder if extras else scan._light_decoder
    got = decoder.decode(text)
    before = [msgspec.structs.astuple(e) for e in got]
    answer = events_mod.FINISH_RUN(got, 40, events_mod.TraceEvent, extras)
    assert (answer is True) == done and (answer is None) != done
    if not done:
        assert [msgspec.structs.astuple(e) for e in got] == before and all(type(e) is not events_mod.TraceEvent
                                                                         for e in got)
        return
    raw = decoder.decode(text)
    finish = events_mod._finish if extras else events_mod._finish_light
    want = finish(raw, events_mod._bulk_ns([e.ts_ns for e in raw]), events_mod._bulk_ns([e.dur_ns for e in raw]), None,
                  40)
    assert [(type(e), msgspec.structs.astuple(e)) for e in got] == [(type(e), msgspec.structs.astuple(e)) for e in want]
    assert all(type(v) is int for e in got for v in (e.index, e.ts_ns))
    if got:  # a run of two types: left to Python
        assert events_mod.FINISH_RUN([*decoder.decode(text), got[0]], 0, events_mod.TraceEvent, extras) is None
    if extras and len(got) == 4:  # the run with "s" and "bp"
        assert [e.extra for e in got] == [None, {"bp": "e"}, {"s": "p"}, {"bp": "x", "s": "g"}]


@pytest.mark.skipif(scan.EVENT_SPANS is None, reason="the reader's compiled loop (_scan) is not built or turned off")
@pytest.mark.parametrize("text,n,want", [
    (b'[{"a": 1}, {"b": "}{\\"\\\\"}  ,\n {"c": [{"d": "]"}]}]', 3, ([1, 11, 31], 50)),
    (b' [\n{}\n]', 1, ([3], 5)),
    (b'[{"a": "\\\\\\"}"}, {"b": "\\\\"}]', 2, ([1, 17], 28)),  # three backslashes and a quote; two
    (b'[{"a": 1}]', 2, None), (b'[{"a": 1}, {"b": 2}]', 1, None), (b'[1, {"a": 1}]', 2, None),
    (b'{"a": 1}', 1, None), (b'[{"a": "}', 1, None), (b'[]', 0, None), (bytearray(b'[{}]'), 1, None)])
def test_compiled_event_spans(text, n, want):
    """``_scan.event_spans``: each object's start (strings, escapes and nesting skipped) and the
    last one's end, shifted by ``at``; None for anything but an array of exactly ``n`` objects."""
    from array import array

    got = scan.EVENT_SPANS(text, n, 100)
    if want is None:
        assert got is None
        return
    starts = array("q")
    starts.frombytes(got[0])
    assert (starts.tolist(), got[1]) == ([s + 100 for s in want[0]], want[1] + 100)
    raws = scan._raw_list.decode(text)
    assert [text[s:s + len(r)] for s, r in zip(want[0], raws)] == [bytes(r) for r in raws]


def test_replay_signatures_of_shared_args_are_the_per_event_ones(tmp_path, monkeypatch):
    """The scanned events of a replay share args dicts: ``replay_signatures`` then computes each
    (cat, name, args object) once; the same signatures as the per-event loop, and the same as
    the whole read's (whose args are one dict an event: the per-event loop)."""
    from perfetto_graph_ann.join import match
    from perfetto_graph_ann.join.replays import gpu_work_and_replays

    src, _ = _decoder(tmp_path, replays=3, layers=4)
    scanned = scan_trace(str(src), join=True)
    whole = kineto.read_trace(str(src))
    got = {}
    memo = []
    real, compiled, real_base = match._memo_signatures, match.LOOSE, match.base_name
    monkeypatch.setattr(match, "_memo_signatures", lambda *a: memo.append(1) or real(*a))
    named = []
    monkeypatch.setattr(match, "base_name", lambda name: named.append(name) or real_base(name))
    arms = [("memo", scanned, 32, None), ("loop", scanned, 1 << 30, None), ("whole", whole, 32, None)]
    if compiled is not None:  # its memo by the objects: each kernel's base name asked once a replay
        arms += [("c", scanned, 32, compiled), ("c whole", whole, 32, compiled)]
    for name, trace, sample, loose in arms:
        monkeypatch.setattr(match, "_SAMPLE", sample)
        monkeypatch.setattr(match, "LOOSE", loose)
        _, replays = gpu_work_and_replays(trace)
        assert replays
        del named[:]
        got[name] = [match.replay_signatures(r) for r in replays]
        if name in ("memo", "c"):  # one base name a replay's distinct kernel objects, not one a kernel
            kernels = [(k, e) for k, r in enumerate(replays) for e in r.events if got[name][k][e.index][0] == "kernel"]
            distinct = {(k, e.cat, e.name, id(e.args)) for k, e in kernels}
            assert len(named) == len(distinct) < len(kernels)
    assert len({repr(v) for v in got.values()}) == 1 and len(memo) == 3  # the Python memo on the scanned replays only
    if compiled is not None:
        assert all(got["c"][k][i] is got["memo"][k][i] for k in range(len(got["c"])) for i in got["c"][k])


def test_the_compiled_packet_loop_refuses_lists_of_other_lengths(tmp_path, monkeypatch):
    """``stream_records`` indexes ``prevs``, ``tails`` and ``begins`` by sequence: a list shorter
    than the encoders' is a ValueError, never a read past its end."""
    from perfetto_graph_ann.write.perfetto import fast_encoder

    if fast_encoder.stream_records is None:
        pytest.skip("the writer's compiled hot path (_encode) is not built or turned off")
    src, ann = _decoder(tmp_path, replays=1, layers=2)
    real, refused = fast_encoder.stream_records, []

    def short_lists(*args):
        for at in (8, 9, 16):  # prevs, tails, begins
            bad = list(args)
            bad[at] = bad[at][:0]
            with pytest.raises(ValueError, match="lists of different lengths"):
                real(*bad)
            refused.append(at)
        return real(*args)

    monkeypatch.setattr(fast_encoder, "stream_records", short_lists)
    _convert(src, tmp_path / "out.pftrace", [ann], True, graph_lanes="all", force=True)
    assert refused[:3] == [8, 9, 16]


def _text_variants(text: bytes) -> bytes:
    """The decoder trace with kernels after the first replay written otherwise, each a text the
    second pass's text path must not take as the same kernel's earlier text: keys escaped or
    twice, ids that are not plain integers below 2^63, names escaped, spacing, nested keys named
    like the event's own, more ids, ids that are doubles (a memset's bandwidth: each replay its
    own). The same events once decoded (the join is unchanged)."""
    import re

    lines = text.split(b"\n")
    first = last = None
    k = replay = 0
    for n, line in enumerate(lines):
        m = re.search(rb'"cat": "kernel".*"correlation": (\d+)', line)
        if m is None:
            continue
        first = first if first is not None else m.group(1)
        k = k + 1 if m.group(1) == last else 0  # the kernel's place in its replay: one variant per node
        replay += k == 0
        last = m.group(1)
        if m.group(1) == first:
            continue  # the first replay: the texts the others are met against
        head, sep, args = line.partition(b'"args": {')
        variant = k % 16
        corr = int(m.group(1))
        if variant == 0:
            args = args.replace(b'"correlation"', b'"correl\\u0061tion"')
        elif variant == 1:
            args = args.replace(b'"correlation"', b'"correlation": 0, "correlation"')
        elif variant == 2:
            args = b'"Ev Idx": 9223372036854775808, ' + args
        elif variant == 3:
            args = b'"Ev Idx": -3, ' + args
        elif variant == 4:
            args = b'"Ev Idx": 1e3, ' + args
        elif variant == 5:  # one more id read from the text, an int or a double of one value by turns
            args = (b'"Ev Idx": 17, ' if replay % 2 else b'"Ev Idx": 17.0, ') + args
        elif variant == 6:
            head = head.replace(b'"name": "void ', b'"name": "\\u0076oid ')
        elif variant == 7:
            args = args.replace(b'": ', b'":').replace(b', "', b',"')
        elif variant == 8:
            head = head.replace(b'{"ph": "X", ', b'{"ph": "X", "extra": {"args": {"correlation": 1}, "x": [1, {"y": "}"}]}, ')
        elif variant == 9:
            args = b'"Ev Idx": 012, ' + args if False else b'"Ev Idx": 0, ' + args
        elif variant == 10:
            args = args.replace(b'"grid": [', b'"grid":\t[ ')
        elif variant == 11:
            args = b'"note": "a \\"quoted\\" \\\\ text, \\"correlation\\": 1", ' + args
        elif variant == 12:
            args = b'"memory bandwidth (GB/s)": %d.25, ' % corr + args
        elif variant == 13:
            args = b'"Ev Idx": -0.0, ' + args
        elif variant == 14:
            args = b'"Ev Idx": %de-5, ' % corr + args
        else:
            args = b'"Ev Idx": 2.5E+%d, ' % (corr % 9) + args
        lines[n] = head + sep + args
    assert k > 24
    return b"\n".join(lines)


@pytest.mark.parametrize("span", [None, 2048], ids=["one block", "texts read apart"])
@pytest.mark.parametrize("trace,variants", [("decoder", False), ("decoder", True), ("odd", False),
                                            ("two_branch", False), ("seed_block_annotated", False),
                                            ("edges", False)],
                         ids=["decoder", "decoder text variants", "odd", "two_branch", "seed_block_annotated", "edges"])
def test_rewritten_slices_from_their_texts_are_the_decoded_bytes(trace, variants, span, tmp_path, monkeypatch):
    """The second pass frames a replayed kernel from its JSON text where its blanked text and
    rewrite were met before (``emit.TEXT_EVENTS``; ``_encode.c``'s ``tx_record``): the bytes of
    decoding every event (the text path off), on joined traces with replays, critical path
    slack, odd events, and texts written otherwise; batches in one block, and batches whose
    events lie apart in the file (each text read as ``fetch`` reads it); and the path is taken
    (the kernels after the first replay are not decoded again)."""
    from perfetto_graph_ann.write.perfetto import emit, fast_encoder

    if fast_encoder.stream_records is None or emit.TEXT_EVENTS is None:
        pytest.skip("the writer's compiled hot path (_encode) is not built or turned off")
    if trace == "decoder":
        src, ann = _decoder(tmp_path, replays=4)
    elif trace == "odd":
        src, ann = _odd_trace(tmp_path)
    elif trace == "edges":
        src, ann = _plain(tmp_path, "two_branch"), _edges_sidecar(tmp_path)
    else:
        src, ann = _plain(tmp_path, trace), fixture_capture(trace)
    if span is not None:  # the pieces as small as the file's layout allows: a kernel, its flow between it and the next
        monkeypatch.setattr(scan, "_SPAN", span)
        monkeypatch.setattr(scan, "_GAP", 16)
    if variants:  # written on the decoder's texts
        src.write_bytes(_text_variants(src.read_bytes()))
    decoded = []
    real_state = emit._text_state

    def counted_state(plan, source):
        state = real_state(plan, source)
        if state is None:
            return None
        offsets, cache, decode_one, ids = state
        return offsets, cache, lambda i, text=None: decoded.append(i) or decode_one(i, text), ids

    monkeypatch.setattr(emit, "_text_state", counted_state)
    out = {}
    for arm in ("text", "decoded"):
        monkeypatch.setattr(emit, "TEXT_EVENTS", True if arm == "text" else None)
        for lanes in ("none", "all"):
            path = tmp_path / f"{arm}_{lanes}.pftrace"
            done = _convert(src, path, [ann], True, graph_lanes=lanes, force=True)
            assert done.stats.reading == "two-pass"
            out[arm, lanes] = path.read_bytes()
    assert out["text", "none"] == out["decoded", "none"] and out["text", "all"] == out["decoded", "all"]
    if trace == "decoder":  # 4 replays of 46 kernels, twice: the first replay decoded, the others framed
        rewritten = 2 * 4 * 46  # decoded every one with the path off (a sequence's first packets: in Python)
        # with variants: the second replay's texts are new, and 15 of 46 each replay never framed
        # (variants 0-4: an escaped or repeated key, ids that are no int or double that decodes inline)
        assert len(decoded) <= (2 * (2 * 46 + 2 * 15) + 8 if variants else 2 * 46 + 8), len(decoded)


def test_a_json_doubles_text_decodes_as_float_of_it():
    """The text path reads an id that is a double (a memset's bandwidth) with CPython's
    ``float()`` parsing (``PyOS_string_to_double``) where the decoded path has msgspec's: both
    correctly rounded, so the same double for every number text, which this checks on literals
    of every shape (long mantissas, exponents near the limits, halfway cases)."""
    import math
    import struct

    import msgspec
    from hypothesis import given, settings
    from hypothesis import strategies as st

    number = st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)

    @settings(max_examples=800, deadline=None)
    @given(number)
    def check(text):
        want = float(text)
        if not math.isfinite(want) or ("." not in text and "e" not in text.lower()):
            return  # the text path reads only finite doubles (an int literal decodes to an int)
        got = msgspec.json.decode(text.encode())
        assert type(got) is float and struct.pack("<d", got) == struct.pack("<d", want), text

    check()
    for text in ("2.2250738585072011e-308", "4.9406564584124654e-324", "1.7976931348623157e308", "-0.0",
                 "9007199254740993.0", "0.1", "123456789012345678901234567890.5e-10"):
        check.hypothesis.inner_test(text)


def _rewritten_texts(text: bytes, seed: int) -> bytes:
    """The decoder trace with each kernel after the first replay written at random otherwise,
    the same event once decoded: its args reordered, its spacing changed, its doubles in
    another notation of the same value, a character of its name escaped."""
    import random
    import re

    rnd = random.Random(seed)
    lines = text.split(b"\n")
    first = None
    for n, line in enumerate(lines):
        m = re.search(rb'"cat": "kernel".*"correlation": (\d+)', line)
        if m is None:
            continue
        first = first if first is not None else m.group(1)
        if m.group(1) == first or rnd.random() < 0.3:
            continue
        head, sep, rest = line.partition(b'"args": ')
        end = rest.rindex(b"}")  # the event's own closing brace
        args = json.loads(rest[:end])
        items = list(args.items())
        if rnd.random() < 0.5:
            rnd.shuffle(items)
        parts = []
        for k, v in items:
            if type(v) is float and rnd.random() < 0.7:
                value = rnd.choice(["%r", "%.17g", "%.16e", "%.20E"]) % v
                if float(value) != v:
                    value = repr(v)
            else:
                value = json.dumps(v, separators=rnd.choice([(",", ":"), (", ", ": "), (" ,\t", " :  ")]))
            parts.append(json.dumps(k) + rnd.choice([":", ": ", " :\n "]) + value)
        new_args = "{" + rnd.choice([",", ", ", " ,\r\n"]).join(parts) + rnd.choice(["", " "]) + "}"
        if rnd.random() < 0.3:
            name_at = head.index(b'"name": "') + 9
            at = name_at + rnd.randrange(0, 20)
            head = head[:at] + b"\\u%04x" % head[at] + head[at + 1:]
        lines[n] = head + sep + new_args.encode() + rest[end:]
    return b"\n".join(lines)


def test_kernels_written_otherwise_at_random_give_the_decoded_bytes(tmp_path, monkeypatch):
    """Random rewritings of the kernels' texts (each the same event once decoded): the text path
    writes the decoded path's bytes, whatever mix of texts met before and new ones it sees."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfetto_graph_ann.write.perfetto import emit, fast_encoder

    if fast_encoder.stream_records is None or emit.TEXT_EVENTS is None:
        pytest.skip("the writer's compiled hot path (_encode) is not built or turned off")
    src, ann = _decoder(tmp_path, replays=5)
    base = src.read_bytes()

    @settings(max_examples=12, deadline=None)
    @given(st.integers(0, 2**32 - 1))
    def check(seed):
        src.write_bytes(_rewritten_texts(base, seed))
        out = {}
        for arm in ("text", "decoded"):
            monkeypatch.setattr(emit, "TEXT_EVENTS", True if arm == "text" else None)
            path = tmp_path / f"random_{arm}.pftrace"
            _convert(src, path, [ann], True, graph_lanes="all", force=True)
            out[arm] = path.read_bytes()
        assert out["text"] == out["decoded"]

    check()
