"""Kineto's list args as compact JSON text (the default, ``ConvertConfig(list_args="text")``)
and the full-fidelity typed form (``list_args="typed"``, CLI ``--typed-args``).

Expectations come straight from the fixture JSON: every list-valued arg of an X event
(``grid``, ``block``, ``Input Dims``, ``Input Strides``, ``Input type``, ``Concrete Inputs``,
...) becomes the compact JSON text of that list (``json.dumps(v, separators=(",", ":"))``);
every other arg, time and flow is exactly what the typed mode writes.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from conftest import fixture_trace
from support.engine_support import requires_portable
from support.pftrace_decode import decode
from test_convert_fixtures import ns, source
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert

SHAPE_KEYS = ("Input Dims", "Input Strides", "Input type", "Concrete Inputs")
NAME = "seed_block_eager"  # recorded with record_shapes=True


def _text(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _expected_list_args(doc):
    """(name, ts ns) -> [{key: JSON text}] for every X event with a list arg."""
    out = {}
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        lists = {k: _text(v) for k, v in args.items() if isinstance(v, list)}
        if e.get("ph") == "X" and lists:
            out.setdefault((e["name"], ns(e["ts"])), []).append(lists)
    return out


def test_list_args_become_json_text_and_nothing_else_changes(tmp_path):
    doc = source(NAME)
    typed, compact = tmp_path / "typed.pftrace", tmp_path / "compact.pftrace"
    convert(fixture_trace(NAME), typed, ConvertConfig(list_args="typed"))
    convert(fixture_trace(NAME), compact)
    t, c = decode(typed), decode(compact)
    expected = _expected_list_args(doc)
    assert sum(len(v) for v in expected.values()) > 100
    assert {k for v in expected.values() for d in v for k in d} >= set(SHAPE_KEYS) | {"grid", "block"}

    got = collections.defaultdict(list)
    for s in c.slices:
        assert not any(type(v) is list for v in s.args.values())
        lists = {k: v for k, v in s.args.items() if k in {"grid", "block", *SHAPE_KEYS}}
        if lists:
            assert all(type(v) is str for v in lists.values())
            got[(s.name, s.ts)].append(lists)
    def norm(d):
        return {k: sorted(sorted(x.items()) for x in v) for k, v in d.items()}

    assert norm(got) == norm(expected)

    # Same slices, times, tracks, flows and non-list args as the typed output.
    assert [(s.track, s.name, s.cat, s.ts, s.dur) for s in c.slices] == [(s.track, s.name, s.cat, s.ts, s.dur) for s in t.slices]
    assert [(s.name, s.ts, s.args) for s in c.instants] == [(s.name, s.ts, s.args) for s in t.instants]
    assert len(c.flows()) == len(t.flows()) > 0
    for a, b in zip(c.slices, t.slices):
        assert {k: v for k, v in a.args.items() if type(b.args[k]) is not list} == \
            {k: v for k, v in b.args.items() if type(v) is not list}
        for k, v in b.args.items():
            if type(v) is list:
                assert type(a.args[k]) is str
    assert compact.stat().st_size < 0.8 * typed.stat().st_size


def test_deprecated_shape_args_spelling(tmp_path):
    new, old_text, old_typed, typed = (tmp_path / f"{n}.pftrace" for n in ("new", "old_text", "old_typed", "typed"))
    convert(fixture_trace(NAME), new)
    convert(fixture_trace(NAME), old_text, ConvertConfig(shape_args="string"))
    convert(fixture_trace(NAME), old_typed, ConvertConfig(shape_args="typed"))
    convert(fixture_trace(NAME), typed, ConvertConfig(list_args="typed"))
    assert new.read_bytes() == old_text.read_bytes()
    assert typed.read_bytes() == old_typed.read_bytes() != new.read_bytes()


@pytest.mark.parametrize("mode", ["text", "typed"])
def test_both_modes_are_byte_identical_across_encoders(tmp_path, mode):
    fast, ref = tmp_path / "fast.pftrace", tmp_path / "protos.pftrace"
    convert(fixture_trace(NAME), fast, ConvertConfig(list_args=mode))
    convert(fixture_trace(NAME), ref, ConvertConfig(list_args=mode, encoder="protos"))
    assert fast.read_bytes() == ref.read_bytes()


def test_compact_mode_does_not_touch_the_read_trace(tmp_path):
    from perfetto_graph_ann.read.kineto import read_trace

    trace = read_trace(fixture_trace(NAME))
    before = [dict(e.args) for e in trace.events]
    convert(trace, tmp_path / "a.pftrace")
    assert [dict(e.args) for e in trace.events] == before
    convert(trace, tmp_path / "b.pftrace", ConvertConfig(list_args="typed"))  # same trace object: typed lists again
    assert any(type(v) is list for s in decode(tmp_path / "b.pftrace").slices for k, v in s.args.items() if k in SHAPE_KEYS)


def test_unknown_mode_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "x.pftrace"
    with pytest.raises(ValueError, match="list_args"):
        convert(fixture_trace(NAME), out, ConvertConfig(list_args="bogus"))
    with pytest.raises(ValueError, match="shape_args"):
        convert(fixture_trace(NAME), out, ConvertConfig(shape_args="bogus"))
    assert not out.exists()


@pytest.mark.parametrize("flag, mode", [("--typed-args", "typed"), ("--compact-args", "text"), (None, "text")])
def test_cli_list_args(tmp_path, flag, mode):
    out = tmp_path / "cli.pftrace"
    ref = tmp_path / "api.pftrace"
    r = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(fixture_trace(NAME)), "-o", str(out),
                        "-q"] + ([flag] if flag else []), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    convert(fixture_trace(NAME), ref, ConvertConfig(list_args=mode))
    assert out.read_bytes() == ref.read_bytes()


@requires_portable
def test_compact_args_in_trace_processor(tmp_path):
    doc = source(NAME)
    out = tmp_path / "compact.pftrace"
    convert(fixture_trace(NAME), out)
    with open_trace(out, engine="portable") as s:
        rows = s.query(
            "SELECT s.name AS n, s.ts AS t, a.key AS k, a.value_type AS vt, a.string_value AS v FROM slice s "
            "JOIN args a USING (arg_set_id) WHERE a.flat_key IN ('debug.Input Dims', 'debug.Input Strides', "
            "'debug.Input type', 'debug.Concrete Inputs')").tuples()
        n_slices = s.query("SELECT COUNT(*) FROM slice WHERE dur >= 0").tuples()[0][0]
    got = collections.Counter((n, t, k[len("debug."):], vt, v) for n, t, k, vt, v in rows)
    exp = collections.Counter()
    for (name, ts), per_event in _expected_list_args(doc).items():
        for lists in per_event:
            exp.update((name, ts, k, "string", v) for k, v in lists.items() if k in SHAPE_KEYS)
    assert got == exp  # one string row per shape arg, no per-item rows
    assert n_slices == sum(1 for e in doc["traceEvents"] if e.get("ph") in ("X", "i"))


@pytest.mark.parametrize("recorded", [False, True])
def test_join_args_stay_typed(tmp_path, recorded):
    """Annotation fields holding lists stay typed lists, also under a key Kineto uses (``grid``);
    the layout's own list of arg keys (as the join records it) or, without it, the placements'."""
    from perfetto_graph_ann.join.model import LaneLayout, Placement
    from perfetto_graph_ann.read.kineto import read_trace

    trace = read_trace(fixture_trace("seed_block_graph"))
    kernels = [e for e in trace.events if e.cat == "kernel"]
    marked = kernels[0]
    placements = {marked.index: Placement(marked.stream, {"tags": [1, [2, 3]], "grid": [9], "graph id": 4})}
    layout = LaneLayout(placements=placements, arg_keys=frozenset({"tags", "grid", "graph id"}) if recorded else None)
    out = tmp_path / "a.pftrace"
    convert(trace, out, layout=layout)
    slices = {(s.name, s.ts): s for s in decode(out).slices}
    got = slices[(marked.name, marked.ts_ns)].args
    assert got["tags"] == [1, [2, 3]] and got["grid"] == [9] and got["graph id"] == 4
    other = slices[(kernels[1].name, kernels[1].ts_ns)].args
    # a join key stays typed on every event of the trace; Kineto's other lists are text
    assert other["grid"] == [int(x) for x in kernels[1].args["grid"]]
    assert other["block"] == _text(kernels[1].args["block"])


def test_join_records_its_arg_keys():
    from perfetto_graph_ann.join.join import join
    from perfetto_graph_ann.join.lanes import PLACEMENT_KEYS
    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.cli._common import load_annotation_files

    trace = read_trace(fixture_trace("seed_block_annotated"))
    layout = join(trace, load_annotation_files([str(fixture_trace("seed_block_annotated")).replace(".trace.json.gz", ".capture.json")]))
    used = {k for p in layout.placements.values() for k in p.args}
    assert used and used <= layout.arg_keys and layout.arg_keys - used <= PLACEMENT_KEYS
