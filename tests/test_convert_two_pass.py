"""The two-pass read (issue 33, ``read.scan``): ``convert`` of a plain JSON file keeps light
events and decodes each event again from its byte offset just before encoding it. Its output
must be the in-memory read's byte for byte (``ConvertConfig(two_pass=False)``, the path every
conversion took before), for every encoder and arg mode, any layout of the file and any block
size, plain or gzip; where it cannot apply (a pipe, a trace already read) the in-memory read
runs, and errors stay that read's, with no output left. Joins: ``test_convert_two_pass_join``."""
from __future__ import annotations

import gzip
import json
import os

import pytest

from conftest import TRACES, fixture_trace
from perfetto_graph_ann.errors import TraceFormatError
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert, convert_file
from perfetto_graph_ann.read import kineto, scan
from perfetto_graph_ann.read.scan import scan_trace
from perfetto_graph_ann.write.pftrace import write_pftrace
from test_read_stream import _events, _kineto_multiline

_CONFIGS = [dict(), dict(list_args="typed"), dict(encoder="protos"), dict(sort_window_bytes=4096)]


def _both(src, tmp_path, **kw):
    """(in-memory bytes and stats, two-pass bytes and stats) of converting ``src``."""
    a, b = tmp_path / "in_memory.pftrace", tmp_path / "two_pass.pftrace"
    sa = convert(src, a, ConvertConfig(two_pass=False, **kw))
    sb = convert(src, b, ConvertConfig(**kw))
    return (a.read_bytes(), sa), (b.read_bytes(), sb)


def _same(src, tmp_path, **kw):
    (a, sa), (b, sb) = _both(src, tmp_path, **kw)
    assert sa.reading == "in memory" and sb.reading == "two-pass"
    sb.reading = sa.reading
    assert sa == sb
    assert a == b


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("kw", _CONFIGS, ids=lambda kw: ",".join(kw) or "default")
def test_fixtures_give_the_in_memory_bytes(name, kw, tmp_path):
    src = tmp_path / "t.json"
    src.write_bytes(gzip.decompress(fixture_trace(name).read_bytes()))
    _same(src, tmp_path, **kw)


def _odd_events(n: int):
    """Events that take every path of the plan: slices, instants, counters, metadata, flows
    bound to one of several slices at one ts (by correlation), GPU work with and without a
    device / stream arg, unknown keys (the generic decode), times that are not Kineto's."""
    evs = [{"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "GPU 0"}},
           {"ph": "M", "name": "thread_name", "pid": 9, "tid": 7, "args": {"name": "stream 7"}},
           {"ph": "M", "name": "process_sort_index", "pid": 1, "tid": 0, "args": {"sort_index": 3}}]
    evs += _events(n)
    for k in range(n // 3):
        ts = 5000.125 + 3 * k
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": ts,
                    "dur": 2.5, "args": {"correlation": 100 + k, "External id": k}})
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "inner", "pid": 1, "tid": 2, "ts": ts, "dur": 1.0,
                    "args": {"correlation": 900 + k}})
        evs.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 100 + k, "pid": 1, "tid": 2, "ts": ts})
        kernel = {"ph": "X", "cat": "kernel", "name": f"k{k % 4}", "pid": 9, "tid": 7, "ts": ts + 10, "dur": 1.5,
                  "args": {"correlation": 100 + k, "device": 0, "stream": 7, "grid": [1, 2, 3]}}
        if k % 4 == 1:
            del kernel["args"]["device"]  # the pid's device, written when the args are rewritten
        if k % 4 == 2:
            kernel["args"]["stream"] = True  # not an int stream: rewritten
        evs.append(kernel)
        evs.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": 100 + k, "pid": 9, "tid": 7,
                    "ts": ts + 10})
        if k % 5 == 0:
            evs.append({"ph": "C", "name": "mem", "pid": 1, "tid": 2, "ts": ts, "args": {"a": k, "b": 1.5}})
            evs.append({"ph": "i", "s": "t", "name": "mark é", "pid": 1, "tid": 2, "ts": ts + 0.5, "args": {"x": k}})
            evs.append({"ph": "X", "cat": "cpu_op", "name": "odd", "pid": "host", "tid": "main", "ts": ts,
                        "dur": 1, "args": {"device": 1.0, "stream": [1]}, "extra_key": {"z": [k]}})
            evs.append({"ph": "b", "cat": "async", "name": "async", "id": k, "pid": 1, "tid": 2, "ts": ts + 1e-4})
            evs.append({"ph": "X", "cat": "cpu_op", "name": "null args", "pid": 1, "tid": 3, "ts": ts, "dur": 0.5,
                        "args": None})  # refused by the typed decodes: the generic path's {}
    return evs


@pytest.mark.parametrize("layout", ["kineto", "one line", "tabs"])
@pytest.mark.parametrize("block", [97, 4096, 1 << 20])
@pytest.mark.parametrize("reads", ["one per batch", "sorted, by neighbours"])
def test_many_runs_and_layouts_give_the_in_memory_bytes(layout, block, reads, tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "STREAM_BLOCK", block)
    if reads == "sorted, by neighbours":  # the second pass's other way of reading a batch: nearby events together
        monkeypatch.setattr(scan, "_SPAN", 0)
        monkeypatch.setattr(scan, "_GAP", 300)
    evs = _odd_events(120)
    if layout == "kineto":
        data = _kineto_multiline(evs, tail={"traceName": "t.json"})
    else:
        sep = ", " if layout == "one line" else ",\t\n\t"
        data = (b'{"schemaVersion": 1, "traceEvents": [ ' + sep.encode().join(json.dumps(e).encode() for e in evs)
                + b' ], "traceName": "x"}')
    src = tmp_path / "t.json"
    src.write_bytes(data)
    scanned = scan_trace(str(src))
    assert scanned is not None  # the two-pass read applies to every layout here
    for kw in _CONFIGS:
        _same(src, tmp_path, **kw)


def test_the_light_events_keep_only_what_the_plan_reads(tmp_path):
    src = tmp_path / "t.json"
    src.write_bytes(_kineto_multiline(_odd_events(60)))
    scanned = scan_trace(str(src))
    whole = kineto.parse_trace_bytes(src.read_bytes(), str(src)).events
    assert len(scanned.events) == len(whole)
    for light, e in zip(scanned.events, whole):
        assert (light.index, light.ph, light.cat, light.pid, light.tid, light.ts_ns, light.dur_ns,
                light.id) == (e.index, e.ph, e.cat, e.pid, e.tid, e.ts_ns, e.dur_ns, e.id)
        if e.ph in ("M", "C"):
            assert light.args == e.args and light.extra == e.extra and light.name == e.name
        else:
            assert light.name == "" and light.extra is None  # the plan reads neither: read again for the packet
            assert light.args == {k: v for k, v in e.args.items() if k in ("device", "stream")}
            assert all(type(light.args[k]) is type(e.args[k]) for k in light.args)
    # and the second pass gives back what the packets read, by index, on both decode paths
    assert any(e.extra and "extra_key" in e.extra for e in whole)  # an event the typed decode refuses
    for some in ([0, 5, len(whole) - 1, 17, 3], list(range(len(whole)))):
        got = scanned.source.fetch(some)
        assert sorted(got) == sorted(some)
        for i in some:
            g, e = got[i], whole[i]
            assert (g.ph, g.cat, g.name, g.args) == (e.ph, e.cat, e.name, e.args)
            assert all(type(g.args[k]) is type(e.args[k]) for k in e.args)
    scanned.source.close()


def test_a_pipe_and_a_missing_file_read_in_memory(tmp_path):
    name = TRACES[0]
    src = tmp_path / "t.json"
    src.write_bytes(gzip.decompress(fixture_trace(name).read_bytes()))
    assert scan_trace(str(src.with_suffix(".missing"))) is None
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert scan_trace(str(fifo)) is None
    os.unlink(fifo)
    done = convert_file(str(src), str(tmp_path / "cli.pftrace"))
    assert done.stats.reading == "two-pass"


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("kw", _CONFIGS, ids=lambda kw: ",".join(kw) or "default")
def test_gzip_fixtures_give_the_in_memory_bytes(name, kw, tmp_path):
    _same(fixture_trace(name), tmp_path, **kw)


def _gzip_members(data: bytes, cuts, pad: bytes = b"") -> bytes:
    """``data`` gzip-compressed as several members (split at ``cuts``), ``pad`` after each."""
    bounds = [0, *cuts, len(data)]
    return b"".join(gzip.compress(data[a:b], compresslevel=1 + k % 9) + pad
                    for k, (a, b) in enumerate(zip(bounds, bounds[1:])))


@pytest.mark.parametrize("members", ["one", "several, zero padded"])
@pytest.mark.parametrize("chunk,cache", [(1 << 22, 8), (2000, 2), (300, 1)])
def test_gzip_read_again_from_kept_places_gives_the_in_memory_bytes(members, chunk, cache, tmp_path, monkeypatch):
    """The second pass of a gzip file decompresses again from the places the first kept (every
    ``_GZ_CHUNK`` bytes of text), few or many, with a cache of one text or more, whatever the
    members: the in-memory read's bytes."""
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 4096)
    monkeypatch.setattr(scan, "_GZ_CHUNK", chunk)
    monkeypatch.setattr(scan, "_GZ_PIECE", 512)
    monkeypatch.setattr(scan, "_GZ_CACHE", cache)
    data = _kineto_multiline(_odd_events(150), tail={"traceName": "t.json"})
    src = tmp_path / "t.json.gz"
    src.write_bytes(gzip.compress(data) if members == "one" else
                    _gzip_members(data, [len(data) // 3, len(data) // 3 + 7, len(data) - 5], b"\0" * 3))
    scanned = scan_trace(str(src))
    assert isinstance(scanned.source, scan.GzipEventSource)
    assert len(scanned.source.points) >= (2 if chunk < 10000 else 1)
    for kw in _CONFIGS[:2]:
        _same(src, tmp_path, **kw)
    whole = kineto.parse_trace_bytes(data, str(src)).events
    got = scanned.source.fetch(list(range(len(whole)))[::-1])
    assert [(got[i].ph, got[i].name, got[i].args) for i in range(len(whole))] == [
        (e.ph, e.name, e.args) for e in whole]
    scanned.source.close()


def test_errors_stay_the_in_memory_reads_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 256)
    data = _kineto_multiline(_odd_events(60))
    cases = {"cut.json": data[: len(data) // 2], "broken.json": data.replace(b'"dur"', b'"dur', 1),
             "negative.json": data.replace(b'"dur": 2.5', b'"dur": -2.5', 1)}
    whole = gzip.compress(data)
    cases.update({name + ".gz": gzip.compress(text) for name, text in list(cases.items())})
    cases.update({"truncated.json.gz": whole[:len(whole) // 2], "garbage after.json.gz": whole + b"garbage",
                  "bad crc.json.gz": whole[:-8] + bytes([whole[-8] ^ 1]) + whole[-7:]})
    for name, text in cases.items():
        src = tmp_path / name
        src.write_bytes(text)
        messages = []
        for two_pass in (False, True):
            out = tmp_path / f"{name}.{two_pass}.pftrace"
            with pytest.raises(TraceFormatError) as e:
                convert(src, out, ConvertConfig(two_pass=two_pass))
            messages.append(str(e.value))
            assert not out.exists()
        assert messages[0] == messages[1], name
        assert str(src) in messages[0]
    assert sorted(os.listdir(tmp_path)) == sorted(cases)


def change_between_passes(src, data: bytes, change: str) -> None:
    """Change a trace after its first pass: ``rewritten`` (same size, other bytes, a later
    mtime) or ``shortened`` (cut in half)."""
    if change == "rewritten":
        src.write_bytes(data.replace(b'"cat"', b'"CAT"'))
        st = src.stat()
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    else:
        src.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("change", ["rewritten", "shortened"])
def test_a_file_changed_between_the_passes_is_refused_with_no_output(change, tmp_path):
    src = tmp_path / "t.json"
    data = _kineto_multiline(_odd_events(60))
    src.write_bytes(data)
    scanned = scan_trace(str(src))
    change_between_passes(src, data, change)
    out = tmp_path / "out.pftrace"
    with pytest.raises(TraceFormatError, match="changed while it was being converted"):
        write_pftrace(scanned, out)
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["t.json"]


def _with_bad_arg(tmp_path, value: bytes, name: str = "t.json"):
    data = _kineto_multiline(_odd_events(60)).replace(b'"grid": [1, 2, 3]', b'"grid": ' + value, 1)
    assert value in data
    src = tmp_path / name
    src.write_bytes(data)
    return src


def test_args_the_first_pass_skips_are_judged_as_the_whole_read_judges_them(tmp_path, monkeypatch):
    """The first pass decodes only ``device`` / ``stream`` of the args: a fault in another arg is
    still refused as the in-memory read refuses it (invalid UTF-8: before anything is written;
    anything it might miss: by the second pass, with the whole read's error and no output), and
    what that read accepts (a number beyond a double: the generic path) converts the same."""
    monkeypatch.setattr(kineto, "STREAM_BLOCK", 512)
    ok = tmp_path / "ok"
    ok.mkdir()
    _same(_with_bad_arg(ok, b'1e999', "huge.json"), ok)
    tmp_path = tmp_path / "bad"
    tmp_path.mkdir()
    for skip_check in (False, True):
        if skip_check:  # as if the first pass missed it: the second pass's safety net
            monkeypatch.setattr(scan._Scan, "decode", staticmethod(
                lambda text, path, start: kineto.decode_events(text, path, start, scan._light_decoder)))
        src = _with_bad_arg(tmp_path, b'"\xff\xfe"', "utf8.json")
        messages = []
        for two_pass in (False, True):
            out = tmp_path / f"out.{two_pass}.pftrace"
            with pytest.raises(TraceFormatError) as e:
                convert(src, out, ConvertConfig(two_pass=two_pass))
            messages.append(str(e.value))
            assert not out.exists()
        assert messages[0] == messages[1] and str(src) in messages[0]
        assert sorted(os.listdir(tmp_path)) == ["utf8.json"]


@pytest.mark.parametrize("change", ["rewritten", "shortened", "same size and time"])
def test_a_gzip_file_changed_between_the_passes_is_refused_with_no_output(change, tmp_path, monkeypatch):
    """gzip input: a file changed after the first pass is refused by its size and time, or, kept
    the same size and time, by its gzip data (no longer decompressing, or to other events)."""
    monkeypatch.setattr(scan, "_GZ_CHUNK", 2000)
    monkeypatch.setattr(scan, "_GZ_PIECE", 256)
    src = tmp_path / "t.json.gz"
    data = gzip.compress(_kineto_multiline(_odd_events(60)))
    src.write_bytes(data)
    st = src.stat()
    scanned = scan_trace(str(src))
    assert isinstance(scanned.source, scan.GzipEventSource) and len(scanned.source.points) > 2
    if change == "rewritten":
        src.write_bytes(gzip.compress(_kineto_multiline(_odd_events(60)).replace(b'"cat"', b'"CAT"')))
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    elif change == "shortened":
        src.write_bytes(data[: len(data) // 2])
    else:  # bytes in the middle changed, size and mtime put back
        mid = len(data) // 2
        src.write_bytes(data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 64]) + data[mid + 64:])
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    out = tmp_path / "out.pftrace"
    with pytest.raises(TraceFormatError) as e:
        write_pftrace(scanned, out)
    assert str(src) in str(e.value)
    if change != "same size and time":
        assert "changed while it was being converted" in str(e.value)
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["t.json.gz"]
