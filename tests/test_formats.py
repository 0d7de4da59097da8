"""formats: every "what is this file" decision, by name and by content, and the callers that
rely on it (save/load of annotations, reading traces) on mislabelled files."""
from __future__ import annotations

import gzip
import json

import pytest

from perfetto_graph_ann import formats
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.files import load_annotations, save_annotations
from perfetto_graph_ann.errors import InputError, SidecarError, TraceFormatError
from perfetto_graph_ann.read.kineto import read_trace

from conftest import fixture_capture, fixture_trace


@pytest.mark.parametrize("name,want", [
    ("run.json", True), ("RUN.JSON", True), ("a/b/run.Json.Gz", True), ("x.json.GZ", True),
    ("run.pftrace", False), ("run.jsonl", False), ("json", False), ("run.json.bak", False), ("run.gz", False),
])
def test_is_json_name_any_case(name, want):
    assert formats.is_json_name(name) is want


@pytest.mark.parametrize("name,want", [("a.gz", True), ("a.pftrace.GZ", True), ("a.JSON.Gz", True),
                                       ("a.pftrace", False), ("a.gzip", False), ("gz", False)])
def test_is_gzip_name_any_case(name, want):
    assert formats.is_gzip_name(name) is want


@pytest.mark.parametrize("name,want", [
    ("t.pftrace", True), ("T.PFTRACE.GZ", True), ("t.perfetto-trace", True), ("t.pb", True), ("t.PB.gz", True),
    ("t.json", False), ("t.json.gz", False), ("t", False), ("t.pftrace.bak", False),
])
def test_is_proto_trace_name_any_case(name, want):
    assert formats.is_proto_trace_name(name) is want


@pytest.mark.parametrize("name,stem", [
    ("rank0.trace.json.gz", "rank0"), ("Rank1.TRACE.JSON", "Rank1"), ("r.json.gz", "r"), ("r.json", "r"),
    ("r.pftrace.gz", "r"), ("r.PFTRACE", "r"), ("r.perfetto-trace", "r"), ("notes.txt", "notes.txt"),
])
def test_trace_stem(name, stem):
    assert formats.trace_stem(name) == stem


def test_trace_and_sidecar_names_in_a_folder():
    assert formats.is_trace_name("rank0.trace.json.gz") and formats.is_trace_name("R.PFTRACE")
    # sidecars end in .json too, but are not traces
    for name in ("rank0.annotations.json", "rank0.ANNOTATIONS.JSON", "rank0.capture.json", "rank0.pga"):
        assert formats.is_sidecar_name(name) and not formats.is_trace_name(name), name
    assert not formats.is_trace_name("notes.txt") and not formats.is_sidecar_name("rank0.json")


def test_gzip_is_decided_by_magic_bytes_not_by_name(tmp_path):
    text = b'{"traceEvents": []}'
    plain_named_gz = tmp_path / "plain.json.gz"
    plain_named_gz.write_bytes(text)
    gz_named_plain = tmp_path / "packed.json"
    gz_named_plain.write_bytes(gzip.compress(text))
    assert gz_named_plain.read_bytes()[:2] == b"\x1f\x8b"  # RFC 1952's magic
    assert formats.is_gzip(gz_named_plain.read_bytes()) and not formats.is_gzip(text)
    assert formats.read_bytes(plain_named_gz) == text
    assert formats.read_bytes(gz_named_plain) == text
    # and the trace reader, which goes through it
    assert read_trace(plain_named_gz).events == [] and read_trace(gz_named_plain).events == []


def test_read_bytes_errors_name_the_file_and_use_the_callers_error(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage")
    with pytest.raises(SidecarError, match=r"bad\.json\.gz: gzip data is truncated or corrupt"):
        formats.read_bytes(bad, SidecarError)
    with pytest.raises(TraceFormatError, match=r"missing\.json: no such file"):
        formats.read_bytes(tmp_path / "missing.json", TraceFormatError)
    with pytest.raises(InputError, match="is a directory, not a trace file"):
        formats.read_bytes(tmp_path, InputError, "trace file")


def test_save_annotations_picks_json_by_name_in_any_case(tmp_path):
    ann = read_capture_record(fixture_capture("two_branch"))
    for name in ("x.JSON", "y.Json", "z.json"):
        path = save_annotations(tmp_path / name, ann)
        doc = json.loads((tmp_path / name).read_bytes())  # text JSON, not the binary form
        assert doc["format"] == formats.SIDECAR_MAGIC
        assert load_annotations(path).graphs == ann.graphs
    gz = tmp_path / "w.JSON.GZ"
    save_annotations(gz, ann)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(gz.read_bytes()))["format"] == formats.SIDECAR_MAGIC
    binary = tmp_path / "b.pga"
    save_annotations(binary, ann)
    data = binary.read_bytes()
    # Sidecar field 1 (magic): tag 0x0a, the length, the string
    assert data.startswith(b"\x0a" + bytes([len("perfetto_graph_ann.sidecar")]) + b"perfetto_graph_ann.sidecar")
    assert formats.is_sidecar_bytes(data) and formats.annotation_form(data) == "binary"


def test_mislabelled_annotation_files_are_read_by_content(tmp_path):
    ann = read_capture_record(fixture_capture("two_branch"))
    binary_named_json = tmp_path / "binary.json"
    save_annotations(binary_named_json, ann, format="binary")
    json_named_pga = tmp_path / "text.pga"
    save_annotations(json_named_pga, ann, format="json")
    record_named_pga = tmp_path / "record.pga"
    record_named_pga.write_bytes(gzip.compress(fixture_capture("two_branch").read_bytes()))
    for p in (binary_named_json, json_named_pga, record_named_pga):
        assert load_annotations(p).graphs == ann.graphs, p.name


def test_capture_record_or_json_sidecar():
    record = json.loads(fixture_capture("two_branch").read_bytes())
    assert formats.is_capture_record(record)
    sidecar = {"format": formats.SIDECAR_MAGIC, "version": 2, "graphs": [], "exec_cupti_graph_id": 1}
    assert not formats.is_capture_record(sidecar)
    assert not formats.is_capture_record([record]) and not formats.is_capture_record({"nodes": []})


@pytest.mark.parametrize("data,form", [
    (b'{"format": 1}', "json"), (b"  \n[1]", "json"), (b"\x0a\x02ab", None), (b"PK\x03\x04", None),
])
def test_annotation_form(data, form):
    assert formats.annotation_form(data) == form


def test_utf8_bom_is_stripped_once():
    assert formats.strip_bom(b"\xef\xbb\xbf{}") == b"{}"
    assert formats.strip_bom(b"{}") == b"{}"


def test_a_pftrace_named_json_is_recognised_by_content(tmp_path):
    from perfetto_graph_ann.cli.main import main

    out = tmp_path / "real.pftrace"
    assert main(["convert", str(fixture_trace("two_branch")), "-o", str(out), "-q"]) == 0
    data = out.read_bytes()
    assert formats.is_pftrace_bytes(data)
    assert not formats.is_pftrace_bytes(b'\n{"traceEvents": []}')
    mislabelled = tmp_path / "trace.json"
    mislabelled.write_bytes(data)
    with pytest.raises(TraceFormatError, match=r"trace\.json: this is a Perfetto protobuf trace"):
        read_trace(mislabelled)
    # the name decides for JSON / protobuf names; content decides for any other name
    assert formats.is_json_trace(mislabelled)
    unnamed = tmp_path / "trace"
    unnamed.write_bytes(data)
    assert not formats.is_json_trace(unnamed)
    unnamed.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert formats.is_json_trace(unnamed)


def test_a_sidecar_given_as_a_trace_says_so(tmp_path):
    p = tmp_path / "run.json"
    save_annotations(p, read_capture_record(fixture_capture("two_branch")), format="binary")
    with pytest.raises(TraceFormatError, match="this is an annotation sidecar"):
        read_trace(p)


def test_is_json_trace_refuses_missing_files_and_folders(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        formats.is_json_trace(tmp_path / "nope")
    with pytest.raises(InputError, match="is a directory"):
        formats.is_json_trace(tmp_path)


def test_formats_is_ground_floor():
    """formats imports nothing of the package but errors (and util)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(formats.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert (node.module or "").split(".")[0] in ("errors", "util"), ast.dump(node)


def test_is_gzip_file_reads_a_regular_files_first_bytes(tmp_path):
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(b"{}"))
    (tmp_path / "b.json").write_bytes(b"{}")
    (tmp_path / "named.json").write_bytes(gzip.compress(b"{}"))  # content decides, not the name
    assert formats.is_gzip_file(tmp_path / "a.json.gz") and formats.is_gzip_file(str(tmp_path / "named.json"))
    assert not formats.is_gzip_file(tmp_path / "b.json")
    assert not formats.is_gzip_file(tmp_path / "missing.json") and not formats.is_gzip_file(tmp_path)
