"""The graph_ann.scopes SQL module, pga.scope_summary and report's scopes section (issue 21).

The synthetic decoder (tests/support/scope_synth.py) is converted with its annotations and loaded in
the portable trace processor (v52); every number is compared with the generator's ground
truth: spans and busy time (union of intervals) per instance, nearest-rank percentiles
per scope across replays.
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from support import scope_synth
from support.engine_support import requires_portable
from support.sql_expect import length, nearest_rank
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.join import join
from perfetto_graph_ann.query import metrics
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.pipeline.convert import convert

LAYERS = 3
ORDER = (0, 1, 0, 1, 0, 0, 1)  # 4 replays of bs=1, 3 of bs=4, interleaved


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scopes_sql")
    src = tmp / "synth.json"
    truth = scope_synth.write_trace(src, layers=LAYERS, order=ORDER)
    trace = read_trace(src)
    out = tmp / "synth.pftrace"
    convert(trace, out, layout=join(trace, scope_synth.annotations(LAYERS, "exact")))
    inst = defaultdict(list)  # (graph, replay, path) -> intervals
    for k in truth:
        for path in (f"layer {k.layer}", f"layer {k.layer} / {k.part}"):
            inst[(k.graph, k.replay, path)].append((k.ts, k.end))
    return out, truth, inst


@requires_portable
def test_scope_instances_and_stats(synth):
    out, truth, inst = synth
    names = {g: n for g, n, _ in scope_synth.GRAPHS}
    with open_trace(out, engine="portable") as s:
        rows = metrics.scope_instances(s)
        stats = metrics.scope_summary(s)
        slowest = metrics.scope_slowest(s, top=5)
        reps = metrics.graph_replays(s)
    assert len(rows) == len(inst) == 3 * LAYERS * len(ORDER)
    got = {(r.graph_id, r.replay, r.scope_path): r for r in rows.itertuples()}
    assert set(got) == set(inst)
    for key, ivs in inst.items():
        r = got[key]
        assert (r.ts, r.dur) == (min(a for a, _ in ivs), max(b for _, b in ivs) - min(a for a, _ in ivs))
        assert r.kernel_count == len(ivs) and r.busy_dur == length(ivs)
        assert r.graph_name == names[key[0]] and r.depth == key[2].count(" / ") and r.device == 0
    per_scope = defaultdict(list)
    for (g, _r, path), ivs in inst.items():
        per_scope[(g, path)].append(max(b for _, b in ivs) - min(a for a, _ in ivs))
    assert len(stats) == len(per_scope) == 2 * 3 * LAYERS
    for r in stats.itertuples():
        spans = per_scope[(r.graph_id, r.scope_path)]
        assert r.instance_count == len(spans) == ORDER.count(0 if r.graph_id == 11 else 1)
        assert r.mean_dur == pytest.approx(sum(spans) / len(spans))
        assert (r.p50_dur, r.p90_dur, r.max_dur) == (nearest_rank(spans, 50), nearest_rank(spans, 90), max(spans))
        assert r.scope == r.scope_path.split(" / ")[-1]
    # stats in run order: graph 11's scopes first, layer 0 before its children
    assert list(stats.scope_path[:3]) == ["layer 0", "layer 0 / attn", "layer 0 / mlp"]
    all_spans = sorted(((max(b for _, b in v) - min(a for a, _ in v)), k) for k, v in inst.items())
    assert list(slowest.dur) == [d for d, _ in all_spans[::-1][:5]]
    assert len(reps) == len(ORDER)
    assert list(reps.graph_name) == [names[scope_synth.GRAPHS[g][0]] for g in ORDER]


@requires_portable
def test_report_has_a_scopes_section(synth, capsys):
    out, _truth, inst = synth
    assert main(["report", str(out), "--engine", "portable", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["scopes"]) == 2 * 3 * LAYERS
    assert main(["report", str(out), "--engine", "portable", "--all"]) == 0
    text = capsys.readouterr().out
    assert "Scopes on the GPU" in text and "layer 2 / mlp" in text and "decode bs=4" in text
    assert main(["report", str(out), "--engine", "portable"]) == 0  # the summary: the slowest scopes first
    text = capsys.readouterr().out
    slowest = sorted(doc["scopes"], key=lambda r: -r["mean_dur"])[0]
    assert f"Scopes on the GPU, per scope across replays (graph_ann_scope_stats): {len(doc['scopes'])} rows" in text
    assert slowest["scope_path"] in text.split("Scopes on the GPU", 1)[1].splitlines()[3]


@requires_portable
def test_scope_tables_empty_without_projection(tmp_path):
    src = tmp_path / "synth.json"
    scope_synth.write_trace(src, layers=1)
    out = tmp_path / "plain.pftrace"
    convert(src, out)
    assert metrics.scope_summary(out, engine="portable").empty
    assert metrics.graph_replays(out, engine="portable").empty



@requires_portable
def test_scope_replays_the_same_with_every_identity_written(synth, tmp_path, monkeypatch):
    """The converter leaves `graph id` / `replay` off scope slices whose replay is implied
    (here: all of them); written on every slice instead, the SQL reads the same instances."""
    from perfetto_graph_ann.join import projection

    out, _truth, inst = synth
    monkeypatch.setattr(projection, "_drop_implied_replay", lambda ranges: None)
    src = tmp_path / "synth.json"
    scope_synth.write_trace(src, layers=LAYERS, order=ORDER)
    trace = read_trace(src)
    full = tmp_path / "full.pftrace"
    convert(trace, full, layout=join(trace, scope_synth.annotations(LAYERS, "exact")))
    q = ("SELECT COUNT(*) FROM slice WHERE category = 'gpu_scope' "
         "AND EXTRACT_ARG(arg_set_id, 'debug.graph id') IS NOT NULL")
    cols = ["graph_id", "replay", "scope_path", "ts", "dur", "kernel_count", "busy_dur"]
    with open_trace(out, engine="portable") as a, open_trace(full, engine="portable") as b:
        assert a.query(q).tuples()[0][0] == 0 and b.query(q).tuples()[0][0] == len(inst)
        implied = metrics.scope_instances(a)[cols].sort_values(cols[:3]).reset_index(drop=True)
        written = metrics.scope_instances(b)[cols].sort_values(cols[:3]).reset_index(drop=True)
    assert implied.equals(written)
