"""``export(prof, out)``: a profiler-like object + annotations -> annotated trace in one call."""
from __future__ import annotations

import gzip
import os
import json
import shutil
from collections import Counter

import pytest

from support.join_expect import as_fixture_process, calibrated_expectation, fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.errors import GraphAnnError, OutputError
from perfetto_graph_ann.capture.export import chrome_trace_bytes, export


class FakeProfiler:
    """What export uses of torch.profiler.profile: export_chrome_trace(path) only, which,
    like torch's, works once ("Trace is already saved" afterwards)."""

    def __init__(self, name):
        self.name = name
        self.calls = []

    def export_chrome_trace(self, path):
        self.calls.append(path)
        if len(self.calls) > 1:
            raise RuntimeError("Trace is already saved.")
        with gzip.open(fixture_trace(self.name), "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _lanes(path):
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
        doc = json.load(f)
    return Counter(e["tid"] for e in doc["traceEvents"] if e.get("cat") == "kernel"), doc


@pytest.mark.parametrize("as_path", [False, True])
def test_export_chrome_json_with_given_annotations(tmp_path, as_path):
    cap = fixture_capture("seed_block_annotated")
    ann = str(cap) if as_path else read_capture_record(cap)
    prof = FakeProfiler("seed_block_annotated")
    layout = export(prof, tmp_path / "run.json.gz", annotations=ann, graph_lanes="all")
    assert len(prof.calls) == 1
    counts, _ = _lanes(tmp_path / "run.json.gz")
    assert counts == {7: 10, 61: 20, 62: 40}
    assert layout.report.matched["calibrated"] == 70


def test_export_uses_live_registry_by_default(tmp_path, monkeypatch):
    as_fixture_process(monkeypatch, "two_branch")
    ann = read_capture_record(fixture_capture("two_branch"))
    owner = object()
    REGISTRY.put(owner, ann.graphs[0])
    labels = dict(REGISTRY.lanes.snapshot())
    try:
        layout = export(FakeProfiler("two_branch"), tmp_path / "run.json", graph_lanes="all")
    finally:
        REGISTRY.drop(owner)
    expect = calibrated_expectation("two_branch")
    counts, doc = _lanes(tmp_path / "run.json")
    assert counts == Counter(x["lane"] for x in expect.values())
    assert layout.report.unmatched == 0
    for idx, x in expect.items():
        assert doc["traceEvents"][idx]["args"]["name"] == x["scope"]
    assert labels == dict(REGISTRY.lanes.snapshot())


def test_export_missing_folder(tmp_path):
    with pytest.raises(OutputError):
        export(FakeProfiler("two_branch"), tmp_path / "no" / "x.json", annotations=read_capture_record(fixture_capture("two_branch")))


def test_export_import_is_torch_free():
    from support.torch_guard import assert_torch_free

    assert_torch_free("import perfetto_graph_ann.capture.export, perfetto_graph_ann.capture.handler, "
                      "perfetto_graph_ann.join; import perfetto_graph_ann as p; p.export; p.trace_handler")


def test_export_pftrace(tmp_path):
    from support.pftrace_decode import decode

    name = "seed_block_annotated"
    out = tmp_path / "run.pftrace"
    layout = export(FakeProfiler(name), out, annotations=read_capture_record(fixture_capture(name)), graph_lanes="all")
    assert layout.report.matched["calibrated"] == 70
    d = decode(out)
    kernels = [s for s in d.slices if s.cat == "kernel"]
    assert Counter(s.args["stream"] for s in kernels) == Counter(x["lane"] for x in calibrated_expectation(name).values())
    assert Counter(d.tracks[s.track].name for s in kernels) == {"stream 7": 10, "61 mlp": 20, "62 attention": 40}


def test_export_twice_from_one_profile(tmp_path):
    """torch saves a profile once: a second export (other format) reuses the first copy."""
    name = "two_branch"
    prof = FakeProfiler(name)
    ann = read_capture_record(fixture_capture(name))
    export(prof, tmp_path / "a.json", annotations=ann, graph_lanes="all")
    export(prof, tmp_path / "b.pftrace", annotations=ann, graph_lanes="all")
    assert len(prof.calls) == 1
    with gzip.open(fixture_trace(name), "rb") as f:
        assert chrome_trace_bytes(prof) == f.read()
    assert _lanes(tmp_path / "a.json")[0] == Counter(x["lane"] for x in calibrated_expectation(name).values())


def test_export_after_user_saved_the_profile(tmp_path):
    prof = FakeProfiler("two_branch")
    prof.export_chrome_trace(str(tmp_path / "mine.json"))  # the user saved it first
    with pytest.raises(GraphAnnError, match="already saved"):
        export(prof, tmp_path / "x.pftrace", annotations=read_capture_record(fixture_capture("two_branch")))
    assert not (tmp_path / "x.pftrace").exists()


def test_export_keeps_the_raw_chrome_json_too(tmp_path):
    """keep_json: torch's own JSON, byte for byte (gzipped for a .gz name), beside the
    .pftrace, from the one export torch allows; the .pftrace is what export writes without it."""
    ann = read_capture_record(fixture_capture("seed_block_annotated"))
    with gzip.open(fixture_trace("seed_block_annotated"), "rb") as f:
        raw = f.read()
    export(FakeProfiler("seed_block_annotated"), tmp_path / "plain.pftrace", annotations=ann)
    for kept in ("raw.json", "raw.json.gz"):
        prof = FakeProfiler("seed_block_annotated")
        export(prof, tmp_path / f"{kept}.pftrace", annotations=ann, keep_json=tmp_path / kept)
        assert len(prof.calls) == 1
        data = (tmp_path / kept).read_bytes()
        assert (gzip.decompress(data) if kept.endswith(".gz") else data) == raw
        assert (tmp_path / f"{kept}.pftrace").read_bytes() == (tmp_path / "plain.pftrace").read_bytes()
    with pytest.raises(OutputError, match="its own name"):
        export(FakeProfiler("two_branch"), tmp_path / "x.json", annotations=ann, keep_json=tmp_path / "x.json")
    with pytest.raises(OutputError, match=r"\.json or \.json\.gz"):
        export(FakeProfiler("two_branch"), tmp_path / "y.pftrace", annotations=ann, keep_json=tmp_path / "y.txt")
    assert not (tmp_path / "y.pftrace").exists() and not (tmp_path / "y.txt").exists()
    with pytest.raises(ValueError, match="already saved"):
        export(str(fixture_trace("two_branch")), tmp_path / "z.pftrace", annotations=ann, keep_json=tmp_path / "z.json")


@pytest.mark.parametrize("was_enabled", [True, False])
@pytest.mark.parametrize("fails", [False, True])
def test_export_pauses_the_collector_and_restores_it(tmp_path, monkeypatch, was_enabled, fails):
    """The read, the join and the writer run with the cyclic collector paused (it would walk the
    caller's heap for their allocations), and the caller's setting is back afterwards, after an
    error too."""
    import gc

    from perfetto_graph_ann.pipeline import convert as convert_mod

    seen = []
    real = convert_mod.write_joined  # what export's write_joined_file calls once the trace is read

    def spy(*a, **k):
        seen.append(gc.isenabled())
        if fails:
            raise OutputError(str(tmp_path / "x.pftrace"), "refused (test)")
        return real(*a, **k)

    monkeypatch.setattr(convert_mod, "write_joined", spy)
    name = "seed_block_annotated"
    ann = read_capture_record(fixture_capture(name))
    (gc.enable if was_enabled else gc.disable)()
    try:
        if fails:
            with pytest.raises(OutputError, match="refused"):
                export(FakeProfiler(name), tmp_path / "x.pftrace", annotations=ann)
        else:
            export(FakeProfiler(name), tmp_path / "x.pftrace", annotations=ann)
        assert gc.isenabled() is was_enabled
    finally:
        gc.enable()
    assert seen == [False]


def test_a_profiles_trace_is_kept_as_a_file_while_the_profiler_lives(tmp_path, sys_tmp):
    """torch's export runs once per profile; its JSON stays in a private temporary folder (not
    as bytes in the caller's memory) for later exports, and is removed with the profiler
    object. A background export reads its own link or copy, so it outlives the profiler."""
    import gc

    from perfetto_graph_ann.capture import export as export_mod

    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    prof = FakeProfiler(name)
    export(prof, tmp_path / "a.pftrace", annotations=ann)
    kept = getattr(prof, export_mod._CACHE_ATTR)
    assert type(kept) is export_mod._Kept and os.path.isfile(kept.path)
    folder = os.path.dirname(kept.path)
    handle = export(prof, tmp_path / "b.pftrace", annotations=ann, background=True)
    export(prof, tmp_path / "c.pftrace", annotations=ann, keep_json=tmp_path / "raw.json")
    assert len(prof.calls) == 1 and os.path.isfile(kept.path)  # kept_json copied, not moved
    with gzip.open(fixture_trace(name), "rb") as f:
        assert (tmp_path / "raw.json").read_bytes() == f.read()
    del prof, kept
    gc.collect()
    assert not os.path.exists(folder)  # removed with the profiler object
    handle.result()
    assert (tmp_path / "a.pftrace").read_bytes() == (tmp_path / "b.pftrace").read_bytes() \
        == (tmp_path / "c.pftrace").read_bytes()
    assert os.listdir(sys_tmp) == []


class _NoAttributes:
    """A profiler object that takes neither weak references nor new attributes."""

    __slots__ = ("inner",)

    def __init__(self, name):
        self.inner = FakeProfiler(name)

    def export_chrome_trace(self, path):
        self.inner.export_chrome_trace(path)


class _NoWeakref(_NoAttributes):
    """One that takes the cache's attribute but no weak reference."""

    __slots__ = ("_pga_chrome_trace",)


@pytest.mark.parametrize("cls", [_NoWeakref, _NoAttributes])
def test_profiler_objects_without_weak_references_or_attributes(cls, tmp_path, sys_tmp):
    """Without weak references the bytes are kept on the object as before; without new
    attributes nothing is kept, the file is removed after the call, and a second export says
    torch saves a trace only once."""
    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    prof = cls(name)
    export(prof, tmp_path / "a.pftrace", annotations=ann)
    assert os.listdir(sys_tmp) == []  # nothing left in the temporary folder
    if cls is _NoWeakref:
        export(prof, tmp_path / "b.pftrace", annotations=ann)
        assert (tmp_path / "a.pftrace").read_bytes() == (tmp_path / "b.pftrace").read_bytes()
        assert type(prof._pga_chrome_trace) is bytes
    else:
        with pytest.raises(GraphAnnError, match="already saved"):
            export(prof, tmp_path / "b.pftrace", annotations=ann)


def test_a_kept_trace_removed_by_something_else_is_said(tmp_path, monkeypatch):
    import shutil as sh

    from perfetto_graph_ann.capture import export as export_mod

    name = "two_branch"
    ann = read_capture_record(fixture_capture(name))
    prof = FakeProfiler(name)
    export(prof, tmp_path / "a.pftrace", annotations=ann)
    sh.rmtree(os.path.dirname(getattr(prof, export_mod._CACHE_ATTR).path))
    with pytest.raises(GraphAnnError, match="is gone"):
        export(prof, tmp_path / "b.pftrace", annotations=ann)
    assert not (tmp_path / "b.pftrace").exists()


@pytest.mark.parametrize("name", ["two_branch", "seed_block_annotated"])
def test_export_reads_a_large_profile_in_two_passes_with_the_same_bytes(name, tmp_path, monkeypatch):
    """``write_joined_file`` (export, trace_handler, the background worker) reads a profile in
    memory below ``TWO_PASS_MIN_BYTES`` and in two passes from it on (a gzip file: 8x its size),
    the same bytes either way."""
    from perfetto_graph_ann.pipeline import convert

    plain = tmp_path / "p.json"
    plain.write_bytes(gzip.decompress(fixture_trace(name).read_bytes()))
    ann = read_capture_record(fixture_capture(name))
    assert convert._json_bytes(str(fixture_trace(name))) == 8 * os.path.getsize(fixture_trace(name))
    assert convert._json_bytes(str(plain)) == os.path.getsize(plain)
    assert convert._json_bytes(str(tmp_path / "missing.json")) == 0
    seen = []
    real = convert.read_for_writing
    monkeypatch.setattr(convert, "read_for_writing",
                        lambda src, two_pass, join=False, follow=None: seen.append(two_pass) or
                        real(src, two_pass, join=join, follow=follow))
    out = {}
    for limit in (convert.TWO_PASS_MIN_BYTES, 0):
        monkeypatch.setattr(convert, "TWO_PASS_MIN_BYTES", limit)
        dst = tmp_path / f"{limit}.pftrace"
        convert.write_joined_file(str(plain), str(dst), ann, "all", label="torch.profiler trace")
        out[limit] = dst.read_bytes()
    assert seen == [False, True] and len(set(out.values())) == 1
