"""Opt-in compact shape args (``ConvertConfig(shape_args="string")``, CLI ``--compact-args``).

Expectations come straight from the fixture JSON: each record_shapes list under ``Input
Dims``, ``Input Strides``, ``Input type``, ``Concrete Inputs`` becomes the compact JSON text
of that list (``json.dumps(v, separators=(",", ":"))``); every other arg, time and flow is
exactly what the default (typed) mode writes.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from conftest import fixture_trace
from engine_support import requires_portable
from pftrace_decode import decode
from test_convert_fixtures import ns, source
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.write.convert import ConvertConfig, convert

SHAPE_KEYS = ("Input Dims", "Input Strides", "Input type", "Concrete Inputs")
NAME = "seed_block_eager"  # recorded with record_shapes=True


def _text(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _expected_shape_args(doc):
    """(name, ts ns) -> {key: JSON text} for every X event with a shape list."""
    out = {}
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        shapes = {k: _text(args[k]) for k in SHAPE_KEYS if isinstance(args.get(k), list)}
        if e.get("ph") == "X" and shapes:
            out.setdefault((e["name"], ns(e["ts"])), []).append(shapes)
    return out


def _by_event(decoded):
    d = collections.defaultdict(list)
    for s in decoded.slices:
        d[(s.name, s.ts)].append(s)
    return d


def test_shape_lists_become_json_text_and_nothing_else_changes(tmp_path):
    doc = source(NAME)
    typed, compact = tmp_path / "typed.pftrace", tmp_path / "compact.pftrace"
    convert(fixture_trace(NAME), typed)
    convert(fixture_trace(NAME), compact, ConvertConfig(shape_args="string"))
    t, c = decode(typed), decode(compact)
    expected = _expected_shape_args(doc)
    assert sum(len(v) for v in expected.values()) > 100

    got = collections.defaultdict(list)
    for s in c.slices:
        shapes = {k: v for k, v in s.args.items() if k in SHAPE_KEYS}
        if shapes:
            assert all(type(v) is str for v in shapes.values())
            got[(s.name, s.ts)].append(shapes)
    def norm(d):
        return {k: sorted(sorted(x.items()) for x in v) for k, v in d.items()}

    assert norm(got) == norm(expected)

    # Same slices, times, tracks, flows and non-shape args as the typed output.
    assert [(s.track, s.name, s.cat, s.ts, s.dur) for s in c.slices] == [(s.track, s.name, s.cat, s.ts, s.dur) for s in t.slices]
    assert [(s.name, s.ts, s.args) for s in c.instants] == [(s.name, s.ts, s.args) for s in t.instants]
    assert len(c.flows()) == len(t.flows()) > 0
    for a, b in zip(c.slices, t.slices):
        assert {k: v for k, v in a.args.items() if k not in SHAPE_KEYS} == {k: v for k, v in b.args.items() if k not in SHAPE_KEYS}
        for k in SHAPE_KEYS:
            if k in b.args and type(b.args[k]) is list:
                assert k in a.args
    assert compact.stat().st_size < 0.8 * typed.stat().st_size


def test_compact_mode_is_byte_identical_across_encoders(tmp_path):
    fast, ref = tmp_path / "fast.pftrace", tmp_path / "protos.pftrace"
    convert(fixture_trace(NAME), fast, ConvertConfig(shape_args="string"))
    convert(fixture_trace(NAME), ref, ConvertConfig(shape_args="string", encoder="protos"))
    assert fast.read_bytes() == ref.read_bytes()


def test_compact_mode_does_not_touch_the_read_trace(tmp_path):
    from perfetto_graph_ann.read.kineto import read_trace

    trace = read_trace(fixture_trace(NAME))
    before = [dict(e.args) for e in trace.events]
    convert(trace, tmp_path / "a.pftrace", ConvertConfig(shape_args="string"))
    assert [dict(e.args) for e in trace.events] == before
    convert(trace, tmp_path / "b.pftrace")  # same trace object, default mode: typed lists again
    assert any(type(v) is list for s in decode(tmp_path / "b.pftrace").slices for k, v in s.args.items() if k in SHAPE_KEYS)


def test_unknown_mode_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "x.pftrace"
    with pytest.raises(ValueError, match="shape_args"):
        convert(fixture_trace(NAME), out, ConvertConfig(shape_args="bogus"))
    assert not out.exists()


def test_cli_compact_args(tmp_path):
    out = tmp_path / "cli.pftrace"
    ref = tmp_path / "api.pftrace"
    r = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(fixture_trace(NAME)), "-o", str(out),
                        "--compact-args", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    convert(fixture_trace(NAME), ref, ConvertConfig(shape_args="string"))
    assert out.read_bytes() == ref.read_bytes()


@requires_portable
def test_compact_args_in_trace_processor(tmp_path):
    doc = source(NAME)
    out = tmp_path / "compact.pftrace"
    convert(fixture_trace(NAME), out, ConvertConfig(shape_args="string"))
    with open_trace(out, engine="portable") as s:
        rows = s.query(
            "SELECT s.name AS n, s.ts AS t, a.key AS k, a.value_type AS vt, a.string_value AS v FROM slice s "
            "JOIN args a USING (arg_set_id) WHERE a.flat_key IN ('debug.Input Dims', 'debug.Input Strides', "
            "'debug.Input type', 'debug.Concrete Inputs')").tuples()
        n_slices = s.query("SELECT COUNT(*) FROM slice WHERE dur >= 0").tuples()[0][0]
    got = collections.Counter((n, t, k[len("debug."):], vt, v) for n, t, k, vt, v in rows)
    exp = collections.Counter()
    for (name, ts), per_event in _expected_shape_args(doc).items():
        for shapes in per_event:
            exp.update((name, ts, k, "string", v) for k, v in shapes.items())
    assert got == exp  # one string row per shape arg, no per-item rows
    assert n_slices == sum(1 for e in doc["traceEvents"] if e.get("ph") in ("X", "i"))
