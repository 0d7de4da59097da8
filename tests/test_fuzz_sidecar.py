"""Fuzzing the sidecar loader (binary, JSON, capture record) and proving files never run code.

Allowed outcomes of ``load_annotations`` on a mutated file: an AnnotationSet that the join
accepts and that saves and reloads unchanged in both forms, or a SidecarError whose message
starts with the path. Valid AnnotationSets drawn at random round-trip exactly.
"""
from __future__ import annotations

import ast
import collections
import copy
import gzip
import json
import os
import pickle
import time
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import hostile_inputs as H
from test_fuzz_convert import _report
from perfetto_graph_ann.annotations.model import NODE_TYPES, AnnotationSet, GraphEdge, GraphRecord, NodeRecord
from perfetto_graph_ann.annotations.files import load_annotations, save_annotations
from perfetto_graph_ann.annotations import sidecar_json
from perfetto_graph_ann.annotations.sidecar_json import to_json
from perfetto_graph_ann.annotations.sidecar_proto import to_bytes
from perfetto_graph_ann.errors import AnnotationMismatchError, SidecarError

PACKAGE = Path(__file__).resolve().parents[1] / "perfetto_graph_ann"


class SidecarCase:
    """A fixture's annotations in one of three forms, mutated; bytes built on demand."""

    def __init__(self, name, form, json_muts, byte_muts, bm):
        self.name, self.form, self.json_muts, self.byte_muts, self.bm = name, form, json_muts, byte_muts, bm

    def __repr__(self):
        return f"SidecarCase({self.name!r}, {self.form!r}, {self.json_muts!r}, {self.byte_muts!r}, {self.bm!r})"

    def data(self) -> bytes:
        if self.form == "binary":
            data = to_bytes(H.fixture_annotations(self.name))
            for kind, at, junk in self.byte_muts:
                at = at % (len(data) + 1)
                if kind == "truncate":
                    data = data[:at]
                elif kind == "flip" and at < len(data):
                    data = data[:at] + bytes([data[at] ^ (junk[0] or 1)]) + data[at + 1:]
                elif kind == "insert":
                    data = data[:at] + junk + data[at:]
        else:
            doc = H.base_capture(self.name) if self.form == "capture" else to_json(H.fixture_annotations(self.name))
            for path, op, value in self.json_muts:
                _apply_json_mut(doc, path, op, value)
            data = H.encode(doc)
        return H.apply_bytes(data, self.bm)


def _apply_json_mut(doc, path, op, value):
    """Walk ``path`` (indices into sorted keys / list positions, modulo sizes) and mutate there."""
    value = copy.deepcopy(value)  # the case keeps its own copy: data() is repeatable
    cur = doc
    for step in path:
        if isinstance(cur, dict) and cur:
            keys = sorted(cur)
            nxt = cur[keys[step % len(keys)]]
        elif isinstance(cur, list) and cur:
            nxt = cur[step % len(cur)]
        else:
            break
        if not isinstance(nxt, (dict, list)):
            break
        cur = nxt
    if isinstance(cur, dict):
        keys = sorted(set(cur) | set(H.CAPTURE_KEYS) | set(H.SIDECAR_KEYS))
        key = keys[hash(str(value)) % len(keys)] if op == "any" else op
        if op == "drop" and cur:
            cur.pop(sorted(cur)[len(path) % len(cur)])
        else:
            cur[key] = value
    elif isinstance(cur, list):
        if op == "drop" and cur:
            cur.pop(len(path) % len(cur))
        elif cur:
            cur[len(path) % len(cur)] = value
        else:
            cur.append(value)


@st.composite
def hostile_sidecar(draw) -> SidecarCase:
    name = draw(st.sampled_from(H.CAPTURE_NAMES))
    form = draw(st.sampled_from(["capture", "json", "binary"]))
    json_muts = draw(st.lists(st.tuples(st.lists(st.integers(0, 50), max_size=5),
                                        st.sampled_from(["any", "drop"] + H.CAPTURE_KEYS + H.SIDECAR_KEYS),
                                        H.HOSTILE_VALUES), max_size=5))
    byte_muts = draw(st.lists(st.tuples(st.sampled_from(["truncate", "flip", "insert"]), st.integers(0, 1 << 16),
                                        st.binary(min_size=1, max_size=5)), max_size=2))
    return SidecarCase(name, form, json_muts, byte_muts, draw(H.byte_mutation()))


def check_sidecar_case(folder: Path, case: SidecarCase) -> str:
    with H.no_hang():
        return _check_sidecar_case(folder, case)


def _check_sidecar_case(folder: Path, case: SidecarCase) -> str:
    from perfetto_graph_ann.join.join import join

    src = folder / ("in.pga" if case.form == "binary" else "in.capture.json")
    src.write_bytes(case.data())
    try:
        ann = load_annotations(src)
    except H.Hang:
        raise
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, SidecarError), f"{type(e).__name__} escaped: {e!r}"
        H.assert_typed_error(e, src)
        return f"error:{case.form}"
    trace = _trace(case.name)
    outcome = "ok"
    try:
        join(trace, ann)
    except AnnotationMismatchError as e:
        # a mutation that leaves valid annotations matching none of the trace's replays (e.g.
        # a graph without nodes): refused, naming the annotation file first, then the trace
        H.assert_typed_error(e, src)
        assert e.trace == trace.path and trace.path in str(e), str(e)
        outcome = "refused"
    for suffix in (".pga", ".json", ".json.gz"):
        out = folder / f"out{suffix}"
        save_annotations(out, ann)
        back = load_annotations(out)
        assert _plain(back) == _plain(ann)
    assert H.leftovers(folder) == []
    return f"{outcome}:{case.form}"


_TRACE_CACHE: dict = {}


def _trace(name):
    if name not in _TRACE_CACHE:
        from perfetto_graph_ann.read.kineto import read_trace

        _TRACE_CACHE[name] = read_trace(H.FIXTURES / f"{name}.trace.json.gz")
    return _TRACE_CACHE[name]


def _plain(s: AnnotationSet):
    """Comparable content (source path and mapping proxies aside)."""
    def val(v):
        if isinstance(v, (dict, types.MappingProxyType)):
            return {k: val(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [val(x) for x in v]
        return v
    return (val(dict(s.lanes)), s.backend,
            [(g.exec_id, g.template_id, g.device, None if g.lanes is None else dict(g.lanes),
              [(n.key, n.type, n.kernel, n.grid, n.block, val(n.annotation), n.stream, n.ordinal) for n in g.nodes])
             for g in s.graphs])


def _run(n: int, label: str) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    @settings(max_examples=n, database=None)
    @given(hostile_sidecar())
    def case(c):
        counts[check_sidecar_case(folder, c)] += 1

    t0 = time.monotonic()
    with H.scratch() as folder:
        case()
    _report(label, counts, time.monotonic() - t0)
    return counts


def test_a_sidecar_that_matches_nothing_is_refused_not_escaped():
    """Found by the long run (issue 32, item 5): a JSON sidecar whose graph lost its nodes
    loads fine and matches none of the trace's replays; the join refuses it with
    AnnotationMismatchError, an allowed outcome (typed, naming the file), not an escape."""
    case = SidecarCase("seed_block_annotated", "json", [([2, 0], "nodes", [])], [], ("none", 0.0, b"x"))
    with H.scratch() as folder:
        assert check_sidecar_case(folder, case) == "refused:json"


def test_fuzz_sidecar_fast():
    counts = _run(H.FAST_CASES * 5, "sidecar_fast")
    assert any(k.startswith("ok") for k in counts) and any(k.startswith("error") for k in counts)


@pytest.mark.fuzz_long
@pytest.mark.timeout(3000)
def test_fuzz_sidecar_long():
    counts = _run(int(os.environ.get("PGA_FUZZ_LONG_SIDECAR", "10000")), "sidecar_long")
    assert any(k.startswith("ok") for k in counts)


# ---- valid annotation sets round-trip exactly ------------------------------------------

u32 = st.integers(0, (1 << 32) - 1)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10)


@st.composite
def annotation_sets(draw) -> AnnotationSet:
    graphs = []
    for exec_id in draw(st.lists(u32, unique=True, max_size=3)):
        nodes = []
        for local in draw(st.lists(u32, unique=True, max_size=4)):
            cal = draw(st.none() | st.tuples(st.integers(0, (1 << 64) - 1), u32))
            nodes.append(NodeRecord(
                key=(exec_id << 32) | local, type=draw(st.sampled_from(NODE_TYPES)),
                kernel=draw(st.none() | st.text(max_size=30)), grid=draw(st.none() | st.tuples(u32, u32, u32)),
                block=draw(st.none() | st.tuples(u32, u32, u32)),
                annotation=draw(st.dictionaries(st.text(max_size=10), values, max_size=4)),
                stream=cal[0] if cal else None, ordinal=cal[1] if cal else None))
        locals_ = [n.local_id for n in nodes]
        edges = None
        if len(locals_) > 1 and draw(st.booleans()):  # sidecar version 4: edges between listed nodes
            pair = st.tuples(st.sampled_from(locals_), st.sampled_from(locals_)).filter(lambda p: p[0] != p[1])
            edges = tuple(GraphEdge(a, b, t, f) for (a, b), t, f in draw(st.lists(
                st.tuples(pair, st.sampled_from([0, 0, 1]), st.sampled_from([0, 0, 1, 2])), max_size=5)))
        graphs.append(GraphRecord(exec_id, tuple(nodes), draw(st.none() | u32),
                                  draw(st.none() | st.integers(-(1 << 31), (1 << 31) - 1)),
                                  draw(st.none() | st.dictionaries(u32, st.text(max_size=20), max_size=2)),
                                  edges=edges))
    lanes = draw(st.dictionaries(u32, st.text(max_size=20), max_size=3))
    return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), draw(st.none() | st.sampled_from(["cupti", "torch"])))


@given(annotation_sets(), st.sampled_from([".pga", ".pga.gz", ".json", ".json.gz"]))
@settings(max_examples=60, database=None)
def test_valid_sets_round_trip(s, suffix):
    with H.scratch("pga-rt-") as folder:
        out = folder / f"a{suffix}"
        save_annotations(out, s)
        back = load_annotations(out)
        assert back.source == os.fspath(out)
        # JSON turns -0.0 into 0 and 1.0 into 1.0; compare through the JSON form
        assert json.dumps(to_json(back), sort_keys=True) == json.dumps(to_json(s), sort_keys=True)
        assert H.leftovers(folder) == []


# ---- nothing in a file ever runs --------------------------------------------------------

class _Payload:
    """Unpickling this touches the marker file: proof that a loader unpickled."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _code_strings(marker: Path):
    return [f"__import__('os').system('touch {marker}')",
            f"eval(compile(\"open('{marker}', 'w')\", 'x', 'exec'))",
            f"!!python/object/apply:os.system ['touch {marker}']",
            "{{ self.__init__.__globals__ }}"]


@pytest.mark.parametrize("wrap", ["raw", "gzip", "json_string", "after_magic"])
def test_pickle_payload_is_rejected_and_never_runs(tmp_path, wrap):
    marker = tmp_path / "PWNED"
    blob = pickle.dumps(_Payload(os.fspath(marker)), protocol=pickle.HIGHEST_PROTOCOL)
    if wrap == "gzip":
        blob = gzip.compress(blob)
    elif wrap == "json_string":
        blob = json.dumps({"format": "perfetto_graph_ann.sidecar", "version": 1, "graphs": blob.hex()}).encode()
    elif wrap == "after_magic":  # the binary form's header followed by a pickle
        blob = b"\x0a\x1aperfetto_graph_ann.sidecar" + blob
    for name in ("evil.pga", "evil.pkl", "evil.json", "evil.capture.json"):
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(SidecarError) as ei:
            load_annotations(p)
        H.assert_typed_error(ei.value, p)
    assert not marker.exists()


def test_code_strings_stay_data_end_to_end(tmp_path):
    """Code-looking strings in a sidecar, a capture record and a trace are carried as text."""
    from perfetto_graph_ann.cli.main import main

    marker = tmp_path / "PWNED"
    codes = _code_strings(marker)
    cap = H.base_capture("two_branch")
    rename = {}
    for i, s in enumerate(cap["scopes"]):
        rename[s["name"]] = s["name"] = codes[i % len(codes)]
    for n in cap["nodes"]:
        if n.get("scope") in rename:
            n["scope"] = rename[n["scope"]]
    cap_path = tmp_path / "evil.capture.json"
    cap_path.write_bytes(H.encode(cap))
    ann = load_annotations(cap_path)
    names = {n.annotation.get("name") for g in ann.graphs for n in g.nodes} - {None}
    assert names and names <= set(codes)
    # JSON sidecar with code in annotation values, lane labels and kernel names
    doc = to_json(ann)
    doc["lanes"] = {"60": codes[0], "61": codes[1]}
    doc["graphs"][0]["nodes"][0]["annotation"]["x"] = {"__reduce__": codes[2], "__class__": codes[0]}
    sc = tmp_path / "evil.json"
    sc.write_text(json.dumps(doc))
    back = load_annotations(sc)
    assert back.lanes[60] == codes[0]
    assert back.graphs[0].nodes[0].annotation["x"] == {"__reduce__": codes[2], "__class__": codes[0]}
    # a trace whose names and args are code, converted with those annotations
    tr = H.base_trace("two_branch")
    for e in tr["traceEvents"][:20]:
        e["name"] = codes[0]
        e.setdefault("args", {})["eval"] = codes[1]
    tp = tmp_path / "evil.trace.json"
    tp.write_bytes(H.encode(tr))
    out = tmp_path / "out.pftrace"
    assert main(["convert", os.fspath(tp), "-o", os.fspath(out), "--annotations", os.fspath(sc), "-q"]) == 0
    data = out.read_bytes()
    assert codes[0].encode() in data and codes[1].encode() in data
    out_json = tmp_path / "out.json"
    assert main(["convert", os.fspath(tp), "-o", os.fspath(out_json), "--annotations", os.fspath(cap_path), "-q"]) == 0
    assert codes[0] in out_json.read_text()
    assert not marker.exists()


_FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "yaml", "jsonpickle", "joblib"}
_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile"}


def test_package_source_has_no_code_loading():
    """No module of the package imports a deserializer that can run code or calls eval/exec."""
    found = []
    for py in sorted(PACKAGE.rglob("*.py")):
        if py.name.endswith("_pb2.py"):  # generated by protoc: descriptor bytes only
            continue
        tree = ast.parse(py.read_text(), filename=str(py))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [(node.module or "").split(".")[0]]
            else:
                mods = []
            for m in mods:
                if m in _FORBIDDEN_MODULES:
                    found.append(f"{py.relative_to(PACKAGE)}:{node.lineno} imports {m}")
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else (fn.attr if isinstance(fn, ast.Attribute) else None)
                if name in _FORBIDDEN_CALLS and not (isinstance(fn, ast.Attribute) and name == "compile"):
                    found.append(f"{py.relative_to(PACKAGE)}:{node.lineno} calls {name}()")
                if name in ("load", "loads", "unsafe_load", "full_load") and isinstance(fn, ast.Attribute) \
                        and isinstance(fn.value, ast.Name) and fn.value.id in _FORBIDDEN_MODULES:
                    found.append(f"{py.relative_to(PACKAGE)}:{node.lineno} calls {fn.value.id}.{name}()")
    assert found == []


@pytest.mark.parametrize("form,version", [("json", v) for v in (0, 5, 99, "1", None, 1.0)]
                         + [("binary", v) for v in (0, 5, 99)])  # binary: a uint32 field
def test_unknown_or_mistyped_version_names_file(tmp_path, form, version):
    from perfetto_graph_ann.annotations import sidecar_proto as sidecar

    ann = H.fixture_annotations("two_branch")
    if form == "json":
        doc = to_json(ann)
        doc["version"] = version
        p = tmp_path / "v.json"
        p.write_bytes(H.encode(doc))
    else:
        msg = sidecar.to_proto(ann)
        msg.version = version
        payload = msg.SerializeToString(deterministic=True)
        import struct
        import zlib

        p = tmp_path / "v.pga"
        p.write_bytes(payload + sidecar._CRC_TAG + struct.pack("<I", zlib.crc32(payload)))
    with pytest.raises(SidecarError) as ei:
        load_annotations(p)
    H.assert_typed_error(ei.value, p)
    assert "version" in str(ei.value)


# ---- a JSON sidecar's usual node, checked without error texts ---------------------------

_EX = 5
_ints = st.one_of(st.integers(-3, 3), st.integers(0, 1 << 33), st.just(True), st.just(1 << 64), st.just(-(1 << 63) - 1))
_scalars = st.one_of(st.none(), st.booleans(), st.text(max_size=3), _ints, st.floats(allow_nan=True),
                     st.just(float("inf")))
_dim = st.one_of(st.none(), st.lists(_ints, min_size=2, max_size=4), st.just([1, 2.0, 3]), st.just("1,1,1"))
_FIELDS = {
    "key": st.one_of(st.integers(0, 3).map(lambda k: (_EX << 32) | k), st.just((6 << 32) | 1), _ints, st.just("1")),
    "type": st.one_of(st.sampled_from(["kernel", "memset", "host", "warp"]), st.just(["kernel"])),
    "kernel": st.one_of(st.none(), st.text(max_size=3), st.just(7)),
    "grid": _dim, "block": _dim,
    "annotation": st.one_of(
        st.dictionaries(st.text(max_size=2), st.one_of(_scalars, st.lists(_scalars, max_size=2),
                                                      st.dictionaries(st.text(max_size=1), _scalars, max_size=1)),
                        max_size=3),
        st.just([1]), st.none(), st.just({1: "a key not a str"})),
    "calibration": st.one_of(st.none(), st.fixed_dictionaries({"stream": _ints, "ordinal": _ints}), st.just({}),
                             st.just(3)),
    "scopes": st.one_of(st.lists(_ints, max_size=3), st.just("0"), st.just([0.5])),
    "other": st.just(1),
}
_VALID = {"key": (_EX << 32) | 1, "type": "kernel", "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
          "annotation": {"name": "a"}, "calibration": {"stream": 7, "ordinal": 0}, "scopes": [0]}
# a valid node with one field drawn from its variants or left out, or every field drawn
_node = st.one_of(
    st.sampled_from(sorted(_FIELDS)).flatmap(lambda k: _FIELDS[k].map(lambda v, k=k: {**_VALID, k: v})),
    st.sampled_from(sorted(_VALID)).map(lambda k: {f: v for f, v in _VALID.items() if f != k}),
    st.fixed_dictionaries({}, optional=_FIELDS))


def _reference_node(n, ex: int, path: str, where: str) -> NodeRecord:
    """The node reader as it was before its fast path (session 34): every check made with
    ``want`` and its text, in order. The oracle for :func:`sidecar_json._json_node`."""
    from perfetto_graph_ann.annotations.schema import check_annotation_value, dim3, is_int, want

    want(isinstance(n, dict), path, f"{where}: must be an object")
    key = n.get("key")
    want(is_int(key) and key >> 32 == ex and key >= 0, path,
         f"{where}: 'key' must be an int of graph {ex}, got {key!r}")
    t = n.get("type", "kernel")
    want(t in NODE_TYPES, path, f"{where}: unknown node type {t!r}")
    kernel = n.get("kernel")
    want(kernel is None or isinstance(kernel, str), path, f"{where}: 'kernel' must be a string")
    ann = n.get("annotation", {})
    want(isinstance(ann, dict), path, f"{where}: 'annotation' must be an object")
    check_annotation_value(ann, path, f"{where} annotation")
    cal = n.get("calibration")
    stream = ordinal = None
    if cal is not None:
        want(isinstance(cal, dict) and is_int(cal.get("stream")) and is_int(cal.get("ordinal"))
             and 0 <= cal["stream"] < 1 << 64 and 0 <= cal["ordinal"] < 1 << 32, path,
             f"{where}: 'calibration' must be {{stream: uint64, ordinal: uint32}}")
        stream, ordinal = cal["stream"], cal["ordinal"]
    nscopes = n.get("scopes", [])
    want(isinstance(nscopes, list) and all(is_int(x) and 0 <= x < 1 << 32 for x in nscopes), path,
         f"{where}: 'scopes' must be a list of scope ids")
    return NodeRecord(key=key, type=t, kernel=kernel, grid=dim3(n.get("grid"), path, f"{where} grid"),
                      block=dim3(n.get("block"), path, f"{where} block"), annotation=ann,
                      stream=stream, ordinal=ordinal, scopes=tuple(nscopes))


def _outcome(read, *args):
    try:
        return read(*args)
    except SidecarError as e:
        return str(e)


@settings(max_examples=600, deadline=None)
@given(_node)
def test_a_json_node_reads_as_the_field_by_field_checks_did(n):
    """``sidecar_json._json_node`` (error texts made only when raised, scalar annotations
    checked inline) gives the record the reference gives, or refuses with its very message."""
    got = _outcome(sidecar_json._json_node, n, _EX, "s.json", 2, 9)
    assert got == _outcome(_reference_node, n, _EX, "s.json", "graph 2 node 9")


def test_a_usual_json_node_is_read():
    n = {"key": (_EX << 32) | 3, "type": "kernel", "kernel": "k", "grid": [1, 2, 3], "block": [128, 1, 1],
         "annotation": {"name": "attn", "layer": 3, "w": 0.5, "on": True, "x": None},
         "calibration": {"stream": 7, "ordinal": 2}, "scopes": [0, 1]}
    got = sidecar_json._json_node(n, _EX, "s.json", 0, 0)
    assert got == NodeRecord(key=(_EX << 32) | 3, type="kernel", kernel="k", grid=(1, 2, 3), block=(128, 1, 1),
                             annotation=n["annotation"], stream=7, ordinal=2, scopes=(0, 1))
    nested = dict(n, annotation={"l": [1, {"m": 2}]})  # through the full value check
    assert sidecar_json._json_node(nested, _EX, "s.json", 0, 0).annotation == {"l": [1, {"m": 2}]}
