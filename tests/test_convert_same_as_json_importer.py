"""Nothing lost: every fixture's JSON and its default .pftrace, loaded in the trace processor,
hold the same slices with the same arg values.

Perfetto's own JSON importer is the reference: per slice, name, ts, dur and every arg row
(``args.X``) must equal ours (``debug.X``). Where the default encoding changed the type (a
Kineto list arg written as its JSON text), our text is parsed back and flattened the way
the importer stores a JSON array (``X[0]``, ``X[1][0]``, ...; an empty item or null makes no
row and takes no index), then compared value by value as text. Perfetto turns '.' in a
debug annotation name into '_', so keys are compared with '.' -> '_' on both sides.
"""
from __future__ import annotations

import collections
import json

import pytest

from conftest import TRACES, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.pipeline.convert import convert

pytestmark = requires_portable

SLICES = "SELECT id, name, ts, dur, arg_set_id FROM slice WHERE dur >= 0"
ARGS = ("SELECT s.id AS id, a.key AS k, a.value_type AS vt, a.display_value AS v FROM slice s "
        "JOIN args a USING (arg_set_id) WHERE s.dur >= 0 AND a.key GLOB '{}.*'")


def _value_text(value_type, display) -> str:
    """An arg's value as text; reals by their float value (one parse, two spellings)."""
    if value_type == "real":
        return repr(float(display))
    return str(display)


def _json_item_text(v) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _flatten(key: str, value, out: dict) -> None:
    """``value`` stored under ``key`` as the JSON importer stores a parsed JSON value."""
    if isinstance(value, list):
        n = 0
        for item in value:
            before = len(out)
            _flatten(f"{key}[{n}]", item, out)
            n += len(out) > before
    elif isinstance(value, dict):
        for k, item in value.items():
            _flatten(f"{key}.{k}", item, out)
    elif value is not None:
        out[key] = _json_item_text(value)


def _slices(path, prefix: str):
    """({slice id: (name, ts, dur)}, {slice id: {key: (value type, display value)}}) of every
    slice of ``path`` with a duration, keys without ``prefix.`` and with '.' read as '_'."""
    with open_trace(path, engine="portable") as s:
        rows = s.query(SLICES).tuples()
        args = s.query(ARGS.format(prefix)).tuples()
    per = collections.defaultdict(dict)
    for sid, key, vt, v in args:
        per[sid][key[len(prefix) + 1:].replace(".", "_")] = (vt, v)
    return {sid: (name, ts, dur) for sid, name, ts, dur, _ in rows}, per


@pytest.mark.parametrize("name", TRACES)
def test_json_and_pftrace_hold_the_same_slices_and_args(name, tmp_path):
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out)
    j_slices, j_args = _slices(fixture_trace(name), "args")
    o_slices, o_args = _slices(out, "debug")

    def expected(sid):
        return j_slices[sid] + (frozenset((k, _value_text(vt, v)) for k, (vt, v) in j_args[sid].items()),)

    def ours(sid):
        flat = {}
        for k, (vt, v) in o_args[sid].items():
            # list text: a string arg where the JSON importer has no string row of that key
            # (it has the list's items, or nothing for an empty list)
            if vt == "string" and v.startswith("[") and k not in j_keys[sid]:
                _flatten(k, json.loads(v), flat)
            else:
                flat[k] = _value_text(vt, v)
        return o_slices[sid] + (frozenset(flat.items()),)

    # the keys the JSON importer made per slice, to tell list text from a string that starts with '['
    j_by_slice = collections.defaultdict(list)
    for sid in j_slices:
        j_by_slice[j_slices[sid]].append(set(j_args[sid]))
    j_keys = {}
    for sid in o_slices:
        cands = j_by_slice.get(o_slices[sid], [set()])
        j_keys[sid] = set().union(*cands)

    got = collections.Counter(ours(sid) for sid in o_slices)
    want = collections.Counter(expected(sid) for sid in j_slices)
    assert sum(want.values()) == len(j_slices) > 0
    assert got == want
    # some list args really were written as text and checked item by item
    assert any(vt == "string" and v.startswith("[") for a in o_args.values() for vt, v in a.values())
