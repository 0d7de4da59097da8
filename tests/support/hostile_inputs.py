"""Hostile inputs for the fuzz tests: mutated copies of the real H200 traces and sidecars.

Every case starts from a real recording (``perfetto_graph_ann/demo/data/h200``) and applies a
few mutations at the JSON level (missing fields, wrong types, huge strings, NaN/Inf, negative or
overflowing timestamps, unknown phases, deep nesting, duplicates, reordering) and then at the
byte level (truncation, non-UTF-8 bytes, gzip, truncated gzip). ``check_*`` run one stage on a
case and enforce the only outcomes allowed: a valid result, or a ``GraphAnnError`` whose message
starts with the file path and names a problem, with no output file and no temporary file left.
"""
from __future__ import annotations

import contextlib
import copy
import gzip
import json
import math
import os
import signal
import tempfile
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from hypothesis import strategies as st

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.errors import AnnotationMismatchError, GraphAnnError

FIXTURES = demo_data_dir()
TRACE_NAMES = sorted(p.name[: -len(".trace.json.gz")] for p in FIXTURES.glob("*.trace.json.gz"))
CAPTURE_NAMES = sorted(p.name[: -len(".capture.json")] for p in FIXTURES.glob("*.capture.json"))

# Hypothesis profiles ("ci", "fuzz_long") are registered and loaded in conftest.py for every test.

#: cases per test in the default run and in the long run (``-m fuzz_long``)
FAST_CASES = int(os.environ.get("PGA_FUZZ_FAST", "60"))
LONG_CASES = int(os.environ.get("PGA_FUZZ_LONG", "2500"))


def _load_json(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    # Decimal keeps Kineto's microsecond decimals exact, as the reader does.
    return json.loads(data, parse_float=Decimal)


_TRACES: Dict[str, Dict[str, Any]] = {}
_CAPTURES: Dict[str, Dict[str, Any]] = {}


def base_trace(name: str) -> Dict[str, Any]:
    if name not in _TRACES:
        _TRACES[name] = _load_json(FIXTURES / f"{name}.trace.json.gz")
    return copy.deepcopy(_TRACES[name])


def base_capture(name: str) -> Dict[str, Any]:
    if name not in _CAPTURES:
        _CAPTURES[name] = _load_json(FIXTURES / f"{name}.capture.json")
    return copy.deepcopy(_CAPTURES[name])


# ---- JSON text with hostile literals ----------------------------------------------------

class Raw:
    """A value written verbatim into the JSON text (bad bytes, bare NaN, cut-off tokens)."""

    def __init__(self, data: bytes, label: Optional[str] = None):
        self.data = data
        self.label = label

    def __repr__(self) -> str:  # failing examples stay readable
        return self.label or f"Raw({self.data[:40]!r}{'...' if len(self.data) > 40 else ''})"


def encode(o: Any) -> bytes:
    """JSON bytes; Decimals exact, floats NaN/Infinity as JS literals, :class:`Raw` verbatim."""
    parts: List[bytes] = []
    _enc(o, parts.append)
    return b"".join(parts)


def _enc(o: Any, put) -> None:
    if isinstance(o, Raw):
        put(o.data)
    elif isinstance(o, dict):
        put(b"{")
        for i, (k, v) in enumerate(o.items()):
            if i:
                put(b", ")
            put(json.dumps(str(k)).encode())
            put(b": ")
            _enc(v, put)
        put(b"}")
    elif isinstance(o, (list, tuple)):
        put(b"[")
        for i, v in enumerate(o):
            if i:
                put(b", ")
            _enc(v, put)
        put(b"]")
    elif isinstance(o, Decimal):
        put(format(o, "f").encode() if o.is_finite() else str(o).encode())
    elif isinstance(o, float) and not math.isfinite(o):
        put(b"NaN" if math.isnan(o) else (b"Infinity" if o > 0 else b"-Infinity"))
    else:
        put(json.dumps(o).encode())


def deep(depth: int, kind: str = "list") -> Raw:
    """``depth`` nested arrays / objects, as text (no Python recursion to build or copy)."""
    if kind == "list":
        return Raw(b"[" * depth + b"1" + b"]" * depth, f"deep({depth}, list)")
    return Raw(b'{"a": ' * depth + b"1" + b"}" * depth, f"deep({depth}, dict)")


def huge_string(n: int) -> Raw:
    return Raw(b'"' + b"x" * n + b'"', f"huge_string({n})")


# ---- hostile values and mutations -------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1, 2**31, 2**32 + 7, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1,
                     2**64, 10**30, -(10**30), 1e308, -1e-320, float("nan"), float("inf"), float("-inf"),
                     Decimal("9223372036854775.808"), Decimal("-9223372036854775.809"), Decimal("1e400"),
                     Decimal("123.4567891234"), "", "0", "12.5", "NaN", "\u0000", "\ud800", "💥" * 3,
                     [], {}, [1, "a", None], {"nested": {"x": [1, 2]}}]),
    st.builds(huge_string, st.sampled_from([1000, 100_000, 2_000_000])),
    st.builds(lambda n, k: deep(n, kind=k), st.sampled_from([5, 200, 3000, 50_000]), st.sampled_from(["list", "dict"])),
    st.builds(lambda b: Raw(b'"' + b + b'"'), st.binary(min_size=1, max_size=8).map(lambda b: b"\xff" + b.replace(b'"', b"").replace(b"\\", b""))),
    st.builds(Raw, st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e99999", b"-0", b"00012", b"1.", b".5", b"0x10", b"tru", b"nul"])),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
).map(copy.deepcopy)  # sampled lists/dicts are shared objects: never let a case mutate them

EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s", "id2", "tts", "unknown_key"]
ARG_KEYS = ["correlation", "stream", "device", "grid", "block", "graph id", "graph node id", "External id",
            "Collective name", "In msg nelems", "name", "labels", "sort_index", "Ev Idx"]
TOP_KEYS = ["baseTimeNanoseconds", "deviceProperties", "distributedInfo", "schemaVersion", "traceName", "displayTimeUnit"]
PHASES = ["X", "B", "E", "i", "I", "n", "s", "t", "f", "b", "e", "C", "M", "P", "O", "N", "D", "R", "?", "", "XX", "é"]


@st.composite
def mutation(draw, n_events: int) -> Tuple:
    kind = draw(st.sampled_from(["drop_key", "set_key", "set_arg", "drop_arg", "phase", "shuffle", "reverse",
                                 "duplicate", "flow_dup", "big_ts", "top", "events_type", "deep_args", "clear",
                                 "plausible", "plausible", "plausible", "steal"]))
    i = draw(st.integers(0, max(n_events - 1, 0)))
    if kind == "drop_key":
        return (kind, i, draw(st.sampled_from(EVENT_KEYS)))
    if kind == "set_key":
        return (kind, i, draw(st.sampled_from(EVENT_KEYS)), draw(HOSTILE_VALUES))
    if kind == "set_arg":
        return (kind, i, draw(st.sampled_from(ARG_KEYS)), draw(HOSTILE_VALUES))
    if kind == "drop_arg":
        return (kind, i, draw(st.sampled_from(ARG_KEYS)))
    if kind == "phase":
        return (kind, i, draw(st.sampled_from(PHASES)))
    if kind in ("shuffle", "flow_dup", "duplicate"):
        return (kind, i, draw(st.integers(0, 2**32)))
    if kind == "big_ts":
        us = draw(st.sampled_from([Decimal(2**63) / 1000, Decimal(2**63 - 1) / 1000, Decimal(2**64) / 1000,
                                   Decimal(-(2**63)) / 1000, Decimal("-1.000"), Decimal("1e15"), Decimal("0.0005"),
                                   Decimal("0.0015"), Decimal("9223372036854775.807")]))
        return (kind, i, draw(st.sampled_from(["ts", "dur"])), us)
    if kind == "top":
        return (kind, draw(st.sampled_from(TOP_KEYS)), draw(HOSTILE_VALUES))
    if kind == "events_type":
        return (kind, draw(st.sampled_from([None, {}, "events", 3, [[]], [None], [1, 2]])))
    if kind == "deep_args":
        return (kind, i, draw(st.sampled_from([50, 500, 5000, 100_000])))
    if kind == "plausible":  # well-typed but wrong: what gets past the reader into join and writer
        key = draw(st.sampled_from(["pid", "tid", "ts", "dur", "args.stream", "args.correlation", "args.device",
                                    "args.graph id", "args.graph node id", "args.External id", "name", "cat"]))
        if key in ("name", "cat"):
            return (kind, i, key, draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "ac2g",
                                                        "cudaGraphLaunch", "Memcpy", "", "cpu_op", "gpu_user_annotation"])))
        value = draw(st.one_of(st.integers(0, 10), st.integers(0, 2**40), st.sampled_from([2**32 - 1, 2**32, 2**63 - 1])))
        if key in ("ts", "dur"):
            value = Decimal(value) / 1000
        return (kind, i, key, value)
    if kind == "steal":  # copy a field from another event: equal times, shared ids, crossed streams
        return (kind, i, draw(st.integers(0, max(n_events - 1, 0))),
                draw(st.sampled_from(["ts", "dur", "pid", "tid", "id", "args"])))
    return (kind, i)


def apply_mutation(doc: Dict[str, Any], m: Tuple) -> None:
    events = doc.get("traceEvents")
    kind = m[0]
    if kind == "top":
        doc[m[1]] = copy.deepcopy(m[2])
        return
    if kind == "events_type":
        doc["traceEvents"] = m[1]
        return
    if not isinstance(events, list) or not events:
        return
    i = m[1] % len(events)
    e = events[i]
    if kind == "shuffle":
        import random

        random.Random(m[2]).shuffle(events)
        return
    if kind == "reverse":
        events.reverse()
        return
    if kind == "clear":
        del events[i:]
        return
    if kind == "duplicate":
        events.insert(m[2] % (len(events) + 1), copy.deepcopy(e))
        return
    if not isinstance(e, dict):
        return
    if kind == "drop_key":
        e.pop(m[2], None)
    elif kind == "set_key":
        e[m[2]] = copy.deepcopy(m[3])
    elif kind == "phase":
        e["ph"] = m[2]
    elif kind == "big_ts":
        e[m[2]] = m[3]
    elif kind in ("set_arg", "drop_arg", "deep_args"):
        args = e.get("args")
        if not isinstance(args, dict):
            args = e["args"] = {}
        if kind == "set_arg":
            args[m[2]] = copy.deepcopy(m[3])
        elif kind == "drop_arg":
            args.pop(m[2], None)
        else:
            args["deep"] = deep(m[2], kind="dict" if m[2] % 2 else "list")
    elif kind == "plausible":
        if m[2].startswith("args."):
            args = e.get("args")
            if not isinstance(args, dict):
                args = e["args"] = {}
            args[m[2][5:]] = m[3]
        else:
            e[m[2]] = m[3]
    elif kind == "steal":
        other = events[m[2] % len(events)]
        if isinstance(other, dict) and m[3] in other:
            e[m[3]] = copy.deepcopy(other[m[3]])
    elif kind == "flow_dup":
        # every flow / async event gets the same id: duplicate ids and flows
        for x in events:
            if isinstance(x, dict) and x.get("ph") in ("s", "t", "f", "b", "e") and "id" in x:
                x["id"] = m[2]


@st.composite
def byte_mutation(draw) -> Tuple:
    kind = draw(st.sampled_from(["none", "none", "none", "truncate", "insert", "flip", "gzip", "gzip_truncate", "bom"]))
    return (kind, draw(st.floats(0, 1)), draw(st.binary(min_size=1, max_size=6)))


def apply_bytes(data: bytes, m: Tuple) -> bytes:
    kind, frac, junk = m
    at = int(len(data) * frac)
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + junk + data[at:]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ 0x80]) + data[at + 1:] if at < len(data) else data
    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "gzip_truncate":
        z = gzip.compress(data, mtime=0)
        return z[: max(2, int(len(z) * frac))]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    return data


class TraceCase:
    """A fixture name plus mutations; the bytes are built on demand (short repr in failures)."""

    def __init__(self, name: str, muts: list, bm: Tuple):
        self.name, self.muts, self.bm = name, muts, bm

    @property
    def mutated(self) -> bool:
        return bool(self.muts) or self.bm[0] != "none"

    def data(self) -> bytes:
        doc = base_trace(self.name)
        for m in self.muts:
            apply_mutation(doc, m)
        return apply_bytes(encode(doc), self.bm)

    def __repr__(self) -> str:
        return f"TraceCase({self.name!r}, {self.muts!r}, {self.bm!r})"


@st.composite
def hostile_trace(draw) -> TraceCase:
    """A real trace with 0..6 JSON mutations and one byte mutation."""
    name = draw(st.sampled_from(TRACE_NAMES))
    n = len(base_trace(name)["traceEvents"])
    muts = draw(st.lists(mutation(n), min_size=0, max_size=6))
    return TraceCase(name, muts, draw(byte_mutation()))


# ---- sidecars ----------------------------------------------------------------------------

CAPTURE_KEYS = ["exec_cupti_graph_id", "nodes", "scopes", "calibration", "handle", "type", "cupti_node_id",
                "kernel", "grid", "block", "scope", "lane", "name", "stream", "ordinal"]
SIDECAR_KEYS = ["format", "version", "backend", "lanes", "graphs", "exec_id", "template_id", "device", "nodes",
                "key", "type", "kernel", "grid", "block", "annotation", "calibration", "stream", "ordinal"]


def _containers(o: Any, out: List) -> List:
    if isinstance(o, dict):
        out.append(o)
        for v in o.values():
            _containers(v, out)
    elif isinstance(o, list):
        out.append(o)
        for v in o:
            _containers(v, out)
    return out


@st.composite
def mutated_json_doc(draw, doc: Any, keys: List[str]) -> Any:
    """Set / drop keys or replace list items anywhere in ``doc`` with hostile values."""
    for _ in range(draw(st.integers(0, 5))):
        conts = _containers(doc, [])
        c = conts[draw(st.integers(0, len(conts) - 1))]
        if isinstance(c, dict):
            key = draw(st.sampled_from(sorted(set(keys) | {str(k) for k in c})))
            if draw(st.booleans()) and key in c:
                del c[key]
            else:
                c[key] = draw(HOSTILE_VALUES)
        elif c:
            c[draw(st.integers(0, len(c) - 1))] = draw(HOSTILE_VALUES)
        else:
            c.append(draw(HOSTILE_VALUES))
    return doc


# ---- checks ------------------------------------------------------------------------------

#: seconds one case may take before it counts as a hang
CASE_TIMEOUT_S = float(os.environ.get("PGA_FUZZ_CASE_TIMEOUT", "60"))


class Hang(AssertionError):
    pass


@contextlib.contextmanager
def no_hang(seconds: float = CASE_TIMEOUT_S):
    """Fail the case (instead of stalling the run) when it takes longer than ``seconds``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):  # noqa: ARG001
        raise Hang(f"case still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def assert_typed_error(e: BaseException, path: Path) -> None:
    """Our typed error, naming the file first and then a non-empty problem."""
    assert isinstance(e, GraphAnnError), f"{type(e).__name__} escaped: {e!r}"
    msg = str(e)
    assert msg.startswith(os.fspath(path)), f"message does not start with the path: {msg!r}"
    assert len(msg) > len(os.fspath(path)) + 3, f"message names no problem: {msg!r}"


@contextlib.contextmanager
def scratch(prefix: str = "pga-test-"):
    """A temporary folder, removed afterwards: hypothesis examples cannot use pytest's
    function-scoped ``tmp_path`` per example, and the suite must leave nothing in /tmp."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        yield Path(d)


def leftovers(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".pga-tmp-"))


def decode_pftrace(data: bytes):
    """Parse with perfetto.protos; every packet must carry something."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    t = pb.Trace.FromString(data)
    assert len(t.packet) > 0
    return t


PREVIOUS = b"previous output: must survive a failed run\n"
_ANNOTATIONS: Dict[str, Any] = {}


def fixture_annotations(name: str):
    """The fixture's capture record as an AnnotationSet (None when it has none)."""
    if name not in CAPTURE_NAMES:
        return None
    if name not in _ANNOTATIONS:
        from perfetto_graph_ann.annotations.files import load_annotations

        _ANNOTATIONS[name] = load_annotations(FIXTURES / f"{name}.capture.json")
    return _ANNOTATIONS[name]


def check_trace_case(folder: Path, name: str, data: bytes) -> Tuple[str, Optional[Path], Any]:
    """Read, join (when the fixture has a capture record), convert and write Chrome JSON.

    Returns ``(outcome, pftrace or None, WriteStats or None)``; outcome is ``"ok"`` or
    ``"error:<stage>"``. Raises AssertionError for anything not allowed (a hang included).
    """
    with no_hang():
        return _check_trace_case(folder, name, data)


def _check_trace_case(folder: Path, name: str, data: bytes) -> Tuple[str, Optional[Path], Any]:
    from perfetto_graph_ann.join.join import join
    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.write.chrome_json import write_chrome_json
    from perfetto_graph_ann.pipeline.convert import convert

    src = folder / "in.trace.json"
    src.write_bytes(data)
    out = folder / "out.pftrace"
    out_json = folder / "out.trace.json"
    for p in (out, out_json):
        p.write_bytes(PREVIOUS)
    stage = "read"
    stats = None
    try:
        trace = read_trace(src)
        stage = "join"
        ann = fixture_annotations(name)
        layout = join(trace, ann) if ann is not None else None
        stage = "convert"
        stats = convert(trace, out, layout=layout)
        stage = "chrome_json"
        write_chrome_json(trace, out_json, layout)
    except Hang:
        raise
    except Exception as e:  # noqa: BLE001 - the point is to see what escapes
        named = src
        if stage == "join" and isinstance(e, AnnotationMismatchError):
            # the annotations match none of the mutated trace's replays: the join cannot know
            # which file is wrong, so it names the annotation file first (docs/design.md,
            # "Refusals") and the trace after it
            named = Path(e.path)
            assert e.trace == os.fspath(src) and os.fspath(src) in str(e), str(e)
        elif stage != "read" and isinstance(e, GraphAnnError) and not str(e).startswith(os.fspath(src)):
            named = out if stage == "convert" else out_json  # an output error names the output
        assert_typed_error(e, named)
        # a failed write leaves the previous file and no temporary file
        if stage in ("read", "join", "convert"):
            assert out.read_bytes() == PREVIOUS
        assert out_json.read_bytes() == PREVIOUS
        assert leftovers(folder) == []
        return f"error:{stage}", None, None
    assert leftovers(folder) == []
    decode_pftrace(out.read_bytes())
    # the Chrome JSON we wrote is strict JSON and reads back with every non-metadata event
    # (the join may add thread_name / thread_sort_index metadata for new lanes)
    back = read_trace(out_json)
    assert [e.name for e in back.events if e.ph != "M"] == [e.name for e in trace.events if e.ph != "M"]
    return "ok", out, stats
