"""The first pass's runs read straight from their text (issue 33): ``_scan.fast_run`` against the
decode and keep it stands for (``scan._Scan.decode`` + ``keep``, whose compiled loop
``test_convert_two_pass_join.py`` checks against Python's).

``fast_run`` may answer None for any run (the run is then decoded as before); where it answers, its
events must be the decoded run's field for field, type for type, sharing the same args objects,
with the same offsets, and it must never answer for a text the decoder refuses."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fixture_trace
from perfetto_graph_ann.errors import TraceFormatError
from perfetto_graph_ann.read import kineto, scan
from perfetto_graph_ann.read.model import TraceEvent
from test_convert_two_pass_join import _kept, _odd_joined_events, _odd_trace
from test_read_stream import _kineto_multiline

pytestmark = pytest.mark.skipif(scan.FAST_RUN is None, reason="the reader's compiled loop (_scan) is not built or "
                                                              "turned off")


def _scanned(src, join, fast, monkeypatch):
    """The first pass over ``src`` with fast_run on or off: (kept events, offsets, runs it answered,
    the memo's keys: what it interned)."""
    answered = []
    real = scan.FAST_RUN
    made = []
    real_scan = scan._Scan
    monkeypatch.setattr(scan, "_Scan", lambda join=False: made.append(real_scan(join)) or made[-1])

    def counted(*a):
        got = real(*a)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(scan, "FAST_RUN", counted if fast else None)
    scanned = scan.scan_trace(str(src), join=join)
    assert scanned is not None
    scanned.source.close()
    monkeypatch.setattr(scan, "_Scan", real_scan)
    return _kept(scanned.events), scanned.source.offsets.tolist(), answered, set(made[0].memo)


def _fixture_json(tmp_path, name):
    src = tmp_path / f"{name}.json"
    src.write_bytes(gzip.decompress(fixture_trace(name).read_bytes()))
    return src


def _kineto_lines(tmp_path, name, copies):
    """The fixture's events as Kineto writes a long profile (one per line, times with 3 decimals),
    its events but the metadata repeated ``copies`` times: many runs of usual events."""
    doc = json.loads(gzip.decompress(fixture_trace(name).read_bytes()))
    events = doc.pop("traceEvents")

    def text(e):
        times = {k: "%.3f" % e[k] for k in ("ts", "dur") if isinstance(e.get(k), (int, float))}
        s = json.dumps({k: (f"@{k}@" if k in times else v) for k, v in e.items()})
        for k, v in times.items():
            s = s.replace(f'"@{k}@"', v)
        return s

    meta = [text(e) for e in events if e.get("ph") == "M"]
    rest = [text(e) for e in events if e.get("ph") != "M"]
    src = tmp_path / f"{name}_long.json"
    src.write_text(json.dumps(doc)[:-1] + ', "traceEvents": [\n' + ",\n".join(meta + rest * copies) + "\n]}")
    return src


@pytest.mark.parametrize("join", [True, False], ids=["join", "plain"])
@pytest.mark.parametrize("trace", ["two_branch", "seed_block_eager", "allreduce_graph_rank0", "seed_block_annotated",
                                   "two_branch multiline", "odd", "odd light args"])
def test_fast_run_keeps_the_decoded_runs_events(join, trace, tmp_path, monkeypatch):
    """Whole traces in many runs (the memos carried between them): kernels, launches, CPU ops with
    nested args, NCCL kernels, memsets, flows, instants; the odd traces' events (the generic decode's
    args, unhashable and non-int values, graph ids, old category spellings, other phases) in runs
    that fast_run leaves to the decoder and runs it reads, side by side."""
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 4096)
    if trace == "odd":
        src, _ = _odd_trace(tmp_path)
    elif trace == "odd light args":
        doc, evs = _odd_joined_events()
        runtime = next(e for e in evs if e.get("cat") == "cuda_runtime")
        evs.extend([dict(runtime, args={"device": [0], "stream": 7}), dict(runtime, args={"device": 0.0, "stream": 7}),
                    dict(runtime, args={"stream": 7}), dict(runtime, args={"device": 0, "other": [1, {"y": 2}]})])
        src = tmp_path / "light.json"
        src.write_bytes(_kineto_multiline(evs, head={k: v for k, v in doc.items() if k != "traceEvents"}))
    elif trace == "two_branch multiline":
        src = _fixture_json(tmp_path, "two_branch")
    else:
        src = _kineto_lines(tmp_path, trace, 6)
    fast, fast_offsets, answered, fast_memo = _scanned(src, join, True, monkeypatch)
    slow, slow_offsets, none, slow_memo = _scanned(src, join, False, monkeypatch)
    assert not none and answered
    if not trace.startswith("odd"):  # the usual events' runs read from their text (the metadata's not)
        assert sum(answered) >= (len(answered) // 2 if trace.endswith("multiline") else len(answered) - 2)
    assert fast == slow
    assert [type(v) for t, _ in fast for v in t] == [type(v) for t, _ in slow for v in t]
    assert fast_offsets == slow_offsets
    assert fast_memo == slow_memo  # the same tokens interned: no name of an event the first pass drops


def test_runs_it_leaves_in_a_row_are_decoded_without_asking_it(tmp_path, monkeypatch):
    """A stretch of runs each holding an event fast_run does not read (an escaped name) is decoded
    without asking it each time (it is asked again after 0, 1, 3, 7 ... runs); once its runs read
    again it reads them; the events are the decoded ones either way."""
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 2048)
    odd = _CPU.replace('"aten::mm"', '"aten::\\u006dm"')
    events = [odd if k % 8 == 0 else _FLOW for k in range(800)] + [_KERNEL, _FLOW] * 300
    src = tmp_path / "t.json"
    src.write_text('{"traceEvents": [\n' + ",\n".join(events) + "\n]}")
    runs = []
    real_read = scan._Scan.read_run

    def read_run(self, buf, end, *a):
        runs.append(b"u006dm" in bytes(buf[:end]))  # an escaped name in this run
        return real_read(self, buf, end, *a)

    monkeypatch.setattr(scan._Scan, "read_run", read_run)
    fast, fast_offsets, answered, _ = _scanned(src, True, True, monkeypatch)
    odd_runs, asked_in_odd = runs.count(True), answered.index(True)
    runs.clear()
    slow, slow_offsets, _, _ = _scanned(src, True, False, monkeypatch)
    assert fast == slow and fast_offsets == slow_offsets
    assert odd_runs > 40 and 4 <= asked_in_odd <= 8  # asked after 0, 1, 3, 7, 15 ... runs, not each time
    assert not any(runs[odd_runs + 1:])  # the usual runs after the stretch
    assert answered[asked_in_odd:] == [True] * (len(answered) - asked_in_odd)  # all read once asked again
    assert len(answered) < len(runs) - 30


def _body(events, sep):
    return sep.join(events).encode()


def _read(body, join, fast, start=3, at=100):
    """read_run of one run with fast_run on or off: ("ok", kept, offsets, end) or ("error", message)."""
    sc = scan._Scan(join)
    if not fast:
        sc.fast_run = None
    try:
        run = sc.read_run(body, len(body), "t.json", start, at)
    except TraceFormatError as e:
        return ("error", str(e))
    return ("ok", _kept(run), sc.offsets.tolist(), sc.end)


_KERNEL = ('{"ph": "X", "cat": "kernel", "name": "k<1>", "pid": 0, "tid": 7, "ts": 1000.500, "dur": 2.250, '
           '"args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 8, '
           '"registers per thread": 22, '
           '"blocks per SM": 15.515152, "grid": [2048, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 25}}')
_FLOW = '{"ph": "f", "id": 8, "pid": 0, "tid": 7, "ts": 1000.500, "cat": "ac2g", "name": "ac2g", "bp": "e"}'
_LAUNCH = ('{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 839, "tid": 1897135808, '
           '"ts": 999.000, "dur": 45.377, "args": {"cbid": 311, "correlation": 8}}')
_CPU = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 839, "tid": 839, "ts": 998.000, "dur": 3.000, '
        '"args": {"External id": 4, "Input Dims": [[4, 8], [8, 2], []], "Input type": ["float", ""], '
        '"Concrete Inputs": ["", "1"], "flag": true, "none": null}}')
_MEMSET = ('{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1003.000, '
           '"dur": 1.000, "args": {"device": 0, "context": 1, "stream": 7, "correlation": 9, "bytes": 4096, '
           '"memory bandwidth (GB/s)": 0.25}}')
_NODE = ('{"ph": "X", "cat": "kernel", "name": "k<2>", "pid": 0, "tid": 7, "ts": 1004.000, "dur": 1.000, '
         '"args": {"device": 0, "stream": 7, "correlation": 8, "graph id": 3, "graph node id": 12884901889, '
         '"grid": [1, 1, 1], "block": [32, 1, 1]}}')
_INSTANT = ('{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "PyTorch", '
            '"ts": 5.000}')


@pytest.mark.parametrize("join", [True, False], ids=["join", "plain"])
def test_fast_run_reads_the_usual_events(join):
    """Each usual event kind, a run of them all, read by fast_run (not left to the decoder) as the
    decoder reads them: shared args, ints shared by equal times, interned tokens."""
    events = [_KERNEL, _FLOW, _LAUNCH, _CPU, _MEMSET, _NODE, _INSTANT, _KERNEL.replace("2048", "1024"), _FLOW, _KERNEL]
    for body in [_body([e], "") for e in events] + [_body(events, ",\n"), b"  \n" + _body(events, " , ") + b"\n "]:
        got = scan.FAST_RUN(body, len(body), 3, 100, scan._Scan(join)._context(), TraceEvent, 1 << 16, scan._tokens())
        assert got is not None, body
        assert _read(body, join, True) == _read(body, join, False)
    run = _read(_body(events, ","), join, True)[1]
    assert run[1][0][6] is run[0][0][6]  # the flow's time: its kernel's int
    if join:
        assert run[7][1] == 7 and run[9][1] == 0  # another grid: its own args; the kernel's twin shares its
        assert run[0][0][8] == {"device": 0, "stream": 7, "correlation": 8, "grid": [2048, 1, 1],
                                "block": [128, 1, 1]}


@pytest.mark.parametrize("body", [
    b'{"ph": "X", "ts": 1.000}',  # X without dur: the decoder's error
    b'{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}',  # metadata: read whole
    b'{"ph": "f", "ts": 1.000}, ',  # a comma with nothing after it
    b'{"ph": "f", "ts": 1.000} {"ph": "f"}',  # no comma
    b'{"ph": "f", "ph": "s", "ts": 1.000}',  # a key twice
    b'{"ph" "f", "ts": 1.000}',  # no colon
    b'{"ph": "f", "ts"; 1.000}',
    b'{"ph": "f", "args": {"device" 0}}',
    b'{"ph": "f", "args": {"x": {"y" 1}}}',
    b'{"ph": "f", "ts": 1.0}',  # not Kineto's time
    b'{"ph": "f", "ts": 01.000}',  # not JSON
    b'{"ph": "f", "ts": 1.000e3}',
    b'{"ph": "f", "ts": -1.000}',
    b'{"ph": "f", "ts": 1234567890123456.000}',  # beyond 15 digits
    b'{"ph": "f", "tss": 1.000}',  # an unknown key
    b'{"p\\u0068": "f"}',  # an escaped key
    b'{"ph": "f", "name": "a\\"b"}',  # an escaped token
    b'{"ph": "f", "name": "caf\xc3\xa9"}',  # UTF-8 left to the decoder
    b'{"ph": "f", "pid": 1.5}',
    b'{"ph": "f", "pid": true}',
    b'{"ph": "f", "pid": 12345678901234567890}',
    b'{"ph": "f", "id": 1.5}',
    b'{"ph": "f", "bp": 1}',
    b'{"ph": "f", "args": null}',
    b'{"ph": "X", "ts": 1.000, "dur": 1.000, "cat": "kernel", "args": {"grid": [1, 2]}}',
    b'{"ph": "X", "ts": 1.000, "dur": 1.000, "cat": "kernel", "args": {"device": 0.0}}',
    b'{"ph": "X", "ts": 1.000, "dur": 1.000, "cat": "kernel", "args": {"device": 0, "device": 1}}',
    b'{"ph": "f", "args": {"x": 1e}}',  # not JSON
    b'{"ph": "f", "args": {"x": 1.e5}}',
    b'{"ph": "f", "args": {"x": -}}',
    b'{"ph": "f", "args": {"x": 01}}',
    b'{"ph": "f", "args": {"x": "\\u00e9"}}',  # a \\u escape
    b'{"ph": "f", "args": {"x": [1, 2,]}}',  # not JSON
    b'{"ph": "f", "args": {"x": tru}}',
    b'{"ph": "f", "args": {"x": "a\tb"}}',  # a control character in a string
    b'{"ph": "f", "args": {"x": ' + b"[" * 20 + b"]" * 20 + b"}}",  # deeper than fast_run reads
    b'',
    b'[{"ph": "f"}]',  # brackets: not the items of an array
])
@pytest.mark.parametrize("join", [True, False], ids=["join", "plain"])
def test_fast_run_leaves_other_runs_to_the_decoder(body, join):
    """Text the decoder refuses, or reads otherwise (another type, the generic path, Python's
    times), or that fast_run does not read: no answer, and read_run's outcome the decoder's."""
    got = scan.FAST_RUN(body, len(body), 0, 0, scan._Scan(join)._context(), TraceEvent, 1 << 16, scan._tokens())
    assert got is None or (not join and b'"kernel"' in body)  # without the join, grid and device are not read
    assert _read(body, join, True) == _read(body, join, False)


_STRINGS = ['"X"', '"f"', '"s"', '"i"', '"M"', '"kernel"', '"cuda_runtime"', '"gpu_memset"', '"Kernel"', '""',
            '"cudaGraphLaunch"', '"a\\nb"', '"\\u00e9"', '"caf\u00e9"', '"Traces"', '"7"']
_INTS = ["0", "7", "-1", "-0", str(2 ** 40), str(2 ** 62), str(2 ** 70), "00"]
_TIMES = ["1.000", "0.500", "123456789012345.123", "1234567890123456.123", "1.5", "1", "-1.000", "1.0001",
          "01.000", "1e3", '"1.000"', "null", "0.000"]
_NUMBERS = _INTS + ["15.515152", "1e-05", "1.5E+3", "-0.5", "0.", ".5", "1.0" + "0" * 30, "1e999", "1e", "2E-", "-",
                    "0.0035714285714285713", "3.5714285714285713e-05"]
_LEAVES = _STRINGS + _NUMBERS + ["true", "false", "null", "tru"]
_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s", "zz", "p\\u0068"]
_ARG_KEYS = ["device", "stream", "correlation", "grid", "block", "graph id", "graph node id", "queued",
             "blocks per SM", "Input Dims", "x", "dev\\u0069ce"]


def _value(key):
    three = st.lists(st.sampled_from(_INTS + ["1.5"]), min_size=2, max_size=4).map(lambda v: "[" + ", ".join(v) + "]")
    nested = st.recursive(st.sampled_from(_LEAVES), lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda v: "[" + ",".join(v) + "]"),
        st.lists(st.tuples(st.sampled_from(_STRINGS), inner), max_size=3).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")), max_leaves=6)
    if key in ("ts", "dur"):
        return st.sampled_from(_TIMES)
    if key in ("pid", "tid", "id"):
        return st.sampled_from(_INTS + _STRINGS[:3] + ["1.5", "null", "true"])
    if key == "args":
        pair = st.tuples(st.sampled_from(_ARG_KEYS), st.one_of(st.sampled_from(_INTS), three, nested))
        return st.one_of(st.lists(pair, max_size=6).map(lambda kv: "{" + ", ".join(f'"{k}": {v}' for k, v in kv) + "}"),
                         st.sampled_from(["null", "[]", "{}"]))
    return st.one_of(st.sampled_from(_STRINGS), st.sampled_from(["1", "null"]))


_USUAL_ARGS = {"device": ["0", "1"], "stream": ["7", "0"], "correlation": ["8", "9", "123456"],
               "grid": ["[2048, 1, 1]", "[1, 1, 1]"], "block": ["[128, 1, 1]"], "graph id": ["3"],
               "graph node id": ["12884901889"], "queued": ["0"], "blocks per SM": ["15.515152", "0.5", "3.5714285714285713e-05", "1e999"],
               "Input Dims": ["[[4, 8], []]"], "x": ['"a b"', "true", "null", '{"y": [1, "z"]}']}


@st.composite
def _usual(draw):
    """An event as Kineto writes one: a known phase, Kineto's times, known keys once, args of their
    usual types (what fast_run reads)."""
    ph = draw(st.sampled_from(["X", "f", "s", "i", "b"]))
    pairs = [("ph", f'"{ph}"'), ("ts", draw(st.sampled_from(_TIMES[:3] + ["0.000"])))]
    if ph == "X":
        pairs.append(("dur", draw(st.sampled_from(["1.000", "0.250"]))))
    for k in draw(st.lists(st.sampled_from(["cat", "name", "pid", "tid", "args", "id", "bp", "s"]), unique=True)):
        if k == "args":
            keys = draw(st.lists(st.sampled_from(sorted(_USUAL_ARGS)), unique=True, max_size=6))
            v = "{" + ", ".join(f'"{a}": {draw(st.sampled_from(_USUAL_ARGS[a]))}' for a in keys) + "}"
        elif k in ("pid", "tid", "id"):
            v = draw(st.sampled_from(["0", "7", "839", "-1", '"Traces"']))
        else:
            v = draw(st.sampled_from(['"kernel"', '"cuda_runtime"', '"gpu_memset"', '"ac2g"', '"cudaGraphLaunch"',
                                      '"k<1>"', '""', '"e"']))
        pairs.append((k, v))
    pairs = draw(st.permutations(pairs))
    return "{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}"


@st.composite
def _hostile(draw):
    """Keys in any order, missing, twice or unknown; values of every JSON type, escapes, UTF-8,
    Kineto's times and others, nested args."""
    keys = draw(st.lists(st.sampled_from(_KEYS), max_size=9))
    if draw(st.booleans()):  # mostly the usual: a phase first, times
        keys = ["ph", "ts"] + (["dur"] if draw(st.booleans()) else []) + keys
    pairs = [(k, draw(_value(k))) for k in keys]
    colon = draw(st.sampled_from([": ", ":", " :\n "]))
    return "{" + draw(st.sampled_from([", ", ",", ",\n  "])).join(f'"{k}"{colon}{v}' for k, v in pairs) + "}"


_event = st.one_of(_usual(), _usual(), _hostile())


@settings(max_examples=400, deadline=None, database=None)
@given(events=st.lists(_event, min_size=1, max_size=4), sep=st.sampled_from([",", ", ", ",\n", " ,"]),
       join=st.booleans(), as_bytearray=st.booleans())
def test_fast_run_answers_only_as_the_decoder_reads(events, sep, join, as_bytearray):
    """Random runs of usual events (:func:`_usual`) and hostile ones (:func:`_hostile`): where
    fast_run answers, the decoder accepts the run and keeps the same events; read_run's outcome is
    the decoder's."""
    body = _body(events, sep)
    buf = bytearray(body) if as_bytearray else body
    got = scan.FAST_RUN(buf, len(buf), 3, 100, scan._Scan(join)._context(), TraceEvent, 1 << 16, scan._tokens())
    slow = _read(body, join, False)
    if got is not None:
        assert slow[0] == "ok"
    assert _read(buf, join, True) == slow


@settings(max_examples=200, deadline=None, database=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=40), picks=st.data(), gap=st.integers(0, 60))
def test_runs_of_reads_what_the_python_pieces_read(sizes, picks, gap):
    """``_scan.runs_of`` (the file's pieces a batch of far-apart events is read in: the text path's
    reads) against the grouping ``EventSource._pieces`` makes in Python: events sorted by offset,
    nearby ones (at most ``gap`` bytes apart) read together, each event whole in its piece."""
    from array import array

    offsets = array("q", [0])
    for n in sizes:
        offsets.append(offsets[-1] + n)
    indices = picks.draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1))
    order = sorted(indices, key=offsets.__getitem__)
    want = []
    for i in order:
        if want and offsets[i] - want[-1][1] <= gap:
            want[-1] = (want[-1][0], max(want[-1][1], offsets[i + 1]))
        else:
            want.append((offsets[i], offsets[i + 1]))
    assert scan.GATHER[2](offsets, indices, gap) == want
    with pytest.raises(IndexError):
        scan.GATHER[2](offsets, indices + [len(sizes)], gap)


@pytest.mark.parametrize("event", [_MEMSET, _LAUNCH, _KERNEL, _FLOW, _CPU], ids=["memset", "launch", "kernel", "flow",
                                                                                "cpu op"])
def test_a_run_it_reads_shares_the_args_a_decoded_run_made(event):
    """One first pass, a run decoded then a run read by fast_run, with the same event: the second
    event's args are the first's object (the memos' keys are the decoded path's, for the join's
    general key, its usual one and the light args alike)."""
    body = _body([event], "")
    sc = scan._Scan(True)
    sc.fast_run = None
    first = sc.read_run(body, len(body), "t.json", 0, 0)
    sc.fast_run = scan.FAST_RUN
    second = sc.read_run(body, len(body), "t.json", 1, len(body))
    assert second[0].index == 1 and second[0].args == first[0].args
    assert second[0].args is first[0].args
