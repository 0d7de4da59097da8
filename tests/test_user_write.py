"""The reader and writer as a daily user drives them: round trips through our own Chrome JSON,
odd file names, output names, GPU events with missing args, protobuf traces given as JSON.

Expectations are computed straight from the JSON files (json / gzip), never from the writer.
"""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import fixture_capture, fixture_trace
from support.pftrace_decode import decode
from perfetto_graph_ann.annotations.files import load_annotation_files
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.write.chrome_json import write_chrome_json
from perfetto_graph_ann.pipeline.convert import convert

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _load(path) -> dict:
    raw = open(path, "rb").read()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _expected_lane_name(doc: dict, pid: int, tid: int) -> str:
    """The JSON's own thread name for a GPU lane, unless it is Kineto's default ``stream N``."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    name = names.get((pid, tid))
    if name is None or not name.strip() or name.split()[0] == "stream":
        return f"stream {tid}"
    return name


@pytest.fixture(scope="module")
def annotated_json(tmp_path_factory):
    """Our annotated Chrome JSON of the annotated seed block, its new lanes given descriptive
    names (61 mlp, 62 attention) as a process group description or a hand edit names them:
    torch 2.15's format names them ``stream N `` otherwise."""
    out = tmp_path_factory.mktemp("ann") / "ann.json"
    trace = read_trace(fixture_trace("seed_block_annotated"))
    layout = join(trace, load_annotation_files([str(fixture_capture("seed_block_annotated"))]), "all")
    write_chrome_json(trace, out, layout)
    doc = _load(out)
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["tid"] in (61, 62):
            e["args"]["name"] = {61: "61 mlp", 62: "62 attention"}[e["tid"]]
    out.write_text(json.dumps(doc))
    return out


# -- 1. lane names survive a round trip through our Chrome JSON ------------------------------
def test_annotated_json_back_to_pftrace_keeps_lane_names(annotated_json, tmp_path):
    doc = _load(annotated_json)
    back = tmp_path / "back.pftrace"
    convert(annotated_json, back)
    got = decode(back)
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_WORK]
    expected = {(e["pid"], e["tid"]): _expected_lane_name(doc, e["pid"], e["tid"]) for e in kernels}
    assert {"61 mlp", "62 attention", "stream 7"} <= set(expected.values())  # the case this test is about
    seen = {}
    for s in got.slices:
        if s.cat in GPU_WORK:
            seen[(s.args["device"], s.args["stream"])] = got.track_name(s.track)
    assert seen == expected


def test_plain_torch_trace_keeps_stream_names(tmp_path):
    """Kineto's own GPU thread names (``stream 7 ``) still give ``stream <id>``."""
    doc = _load(fixture_trace("two_branch"))
    out = tmp_path / "plain.pftrace"
    convert(fixture_trace("two_branch"), out)
    got = decode(out)
    names = {got.track_name(s.track) for s in got.slices if s.cat in GPU_WORK}
    streams = {e["args"]["stream"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_WORK}
    assert names == {f"stream {s}" for s in streams}


def test_join_lane_names_win_over_the_json_thread_names(annotated_json, tmp_path):
    from perfetto_graph_ann.join.model import LaneLayout

    trace = read_trace(annotated_json)
    layout = LaneLayout(placements={}, lane_names={(0, 61): "61 renamed"})
    out = tmp_path / "renamed.pftrace"
    convert(trace, out, layout=layout)
    got = decode(out)
    by_stream = {s.args["stream"]: got.track_name(s.track) for s in got.slices if s.cat == "kernel"}
    assert by_stream[61] == "61 renamed" and by_stream[62] == "62 attention" and by_stream[7] == "stream 7"


# -- 2. merge of a trace whose path is not valid UTF-8 ----------------------------------------
def test_merge_accepts_a_path_that_is_not_utf8(tmp_path, capsys):
    import os
    import shutil

    from perfetto_graph_ann.cli.main import main

    src = os.path.join(os.fsdecode(tmp_path), os.fsdecode(b"b\xff.json.gz"))  # a byte file name, as Linux allows
    shutil.copyfile(fixture_trace("two_branch"), src)
    out = tmp_path / "m.pftrace"
    assert main(["merge", src, "-o", str(out)]) == 0, capsys.readouterr().err
    doc = _load(src)
    got = decode(out)
    kernels = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_WORK)
    assert sum(1 for s in got.slices if s.cat in GPU_WORK) == kernels
    group = next(d for d in got.tracks.values() if d.name == "Rank 0")
    # the undecodable byte is shown as an escape, like the CLI prints such names
    assert group.description == "rank 0 from " + os.path.join(str(tmp_path), "b\\xff.json.gz")


# -- 3. merge gzips by name (and on --gzip), as convert does -----------------------------------
def _kernel_count(path) -> int:
    return sum(1 for e in _load(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_WORK)


@pytest.mark.parametrize("name, flag", [("m.pftrace.gz", []), ("m.pftrace", ["--gzip"])])
def test_merge_gzips_like_convert(tmp_path, capsys, name, flag):
    from perfetto_graph_ann.cli.main import main

    out = tmp_path / name
    assert main(["merge", str(fixture_trace("two_branch")), "-o", str(out), *flag]) == 0, capsys.readouterr().err
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # gzip magic
    got = decode(out)  # decodes the gunzipped bytes
    assert sum(1 for s in got.slices if s.cat in GPU_WORK) == _kernel_count(fixture_trace("two_branch"))


def test_merge_python_api_gzips_by_name(tmp_path):
    from perfetto_graph_ann.pipeline.merge import merge

    plain, packed = tmp_path / "m.pftrace", tmp_path / "m.pftrace.gz"
    merge([fixture_trace("two_branch")], plain)
    merge([fixture_trace("two_branch")], packed)
    assert plain.read_bytes()[:2] != b"\x1f\x8b"
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    merge([fixture_trace("two_branch")], plain, gzip=True)
    assert gzip.decompress(plain.read_bytes()) == gzip.decompress(packed.read_bytes())


# -- 4. the Python convert() refuses what the CLI refuses ---------------------------------------
@pytest.fixture
def copied(tmp_path):
    import shutil

    src = tmp_path / "run.json.gz"
    shutil.copyfile(fixture_trace("two_branch"), src)
    return src


def _sha(path) -> str:
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("name", ["x.json", "x.json.gz", "X.JSON"])
def test_convert_refuses_a_json_output_name(copied, tmp_path, name):
    from perfetto_graph_ann.errors import GraphAnnError, OutputError

    out = tmp_path / name
    with pytest.raises(OutputError) as err:
        convert(copied, out)
    assert isinstance(err.value, GraphAnnError) and str(err.value).startswith(f"{out}: ")
    assert "JSON" in str(err.value)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run.json.gz"]


@pytest.mark.parametrize("how", ["path", "read trace", "link"])
def test_convert_refuses_to_overwrite_its_input(copied, tmp_path, how):
    import os

    from perfetto_graph_ann.errors import OutputError

    before = _sha(copied)
    src = read_trace(copied) if how == "read trace" else copied
    out = copied
    if how == "link":
        out = tmp_path / "link.pftrace"
        os.link(copied, out)
    with pytest.raises(OutputError) as err:
        convert(src, out)
    assert str(err.value).startswith(f"{out}: ") and "input" in str(err.value)
    assert _sha(copied) == before
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".pga-tmp-")]


def test_merge_refuses_json_names_and_its_inputs(copied, tmp_path):
    from perfetto_graph_ann.errors import OutputError
    from perfetto_graph_ann.pipeline.merge import merge

    before = _sha(copied)
    for out in (copied, tmp_path / "m.json"):
        with pytest.raises(OutputError) as err:
            merge([copied], out)
        assert str(err.value).startswith(f"{out}: ")
    assert _sha(copied) == before and not (tmp_path / "m.json").exists()


def test_export_writes_json_for_an_upper_case_json_name(tmp_path):
    """export() picks the format by name; the check and the choice agree on ``.JSON``."""
    from perfetto_graph_ann.annotations.model import AnnotationSet
    from perfetto_graph_ann.capture.export import export

    class Prof:  # what export() uses of a torch.profiler profile
        def export_chrome_trace(self, path):
            open(path, "wb").write(gzip.decompress(fixture_trace("two_branch").read_bytes()))

    out = tmp_path / "run.JSON"
    export(Prof(), out, annotations=AnnotationSet())
    assert _load(out)["traceEvents"]


def test_cli_convert_writes_json_for_an_upper_case_json_name(copied, tmp_path, capsys):
    from perfetto_graph_ann.cli.main import main

    out = tmp_path / "out.JSON"
    assert main(["convert", str(copied), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert len(_load(out)["traceEvents"]) == len(_load(copied)["traceEvents"])


# -- 5. GPU work without a device arg is written with the device it was placed under -----------
def _without_device(tmp_path):
    """two_branch with ``args.device`` removed from its first kernel and first memcpy/memset."""
    doc = _load(fixture_trace("two_branch"))
    dropped = set()
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in GPU_WORK and e["cat"] not in dropped:
            del e["args"]["device"]
            dropped.add(e["cat"])
    assert "kernel" in dropped
    src = tmp_path / "nodevice.json"
    src.write_text(json.dumps(doc))
    return src, doc


def test_gpu_work_without_device_arg_gets_its_device(tmp_path):
    src, doc = _without_device(tmp_path)
    out = tmp_path / "nodevice.pftrace"
    convert(src, out)
    got = decode(out)
    expected = sorted((e["name"], e["pid"], e["args"]["stream"]) for e in doc["traceEvents"]
                      if e.get("ph") == "X" and e.get("cat") in GPU_WORK)  # Kineto's GPU pid is the device
    assert sorted((s.name, s.args.get("device"), s.args.get("stream")) for s in got.slices
                  if s.cat in GPU_WORK) == expected


def test_sql_counts_gpu_work_without_device_arg(tmp_path):
    from collections import Counter

    from support.engine_support import portable_reason
    from perfetto_graph_ann.query import metrics

    if portable_reason():
        pytest.skip(f"{portable_reason()} (test_gpu_work_without_device_arg_gets_its_device checks the args on CPU)")
    src, doc = _without_device(tmp_path)
    out = tmp_path / "nodevice.pftrace"
    convert(src, out)
    kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    expected = Counter(kinds[e["cat"]] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_WORK)
    got = Counter(metrics.gpu_work(out, engine="portable")["kind"])
    assert got == expected
    lanes = metrics.lane_summary(out, engine="portable")
    assert int(lanes["work_count"].sum()) == sum(expected.values())


# -- 6. a .pftrace (or a binary sidecar) given where a JSON trace is needed ----------------------
@pytest.fixture
def pftrace(tmp_path):
    out = tmp_path / "run.pftrace"
    convert(fixture_trace("two_branch"), out)
    return out


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("command", ["lanes", "convert", "merge"])
def test_commands_needing_json_say_a_pftrace_is_protobuf(pftrace, tmp_path, capsys, command, packed):
    from perfetto_graph_ann.cli.main import main

    src = pftrace
    if packed:
        src = tmp_path / "run.pftrace.gz"
        src.write_bytes(gzip.compress(pftrace.read_bytes()))
    argv = [command, str(src)] + ([] if command == "lanes" else ["-o", str(tmp_path / "out.pftrace")])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"perfetto-graph-ann {command}: error: {src}: this is a Perfetto protobuf trace, not a "
                   "torch.profiler JSON trace (report, sql and open read it as it is)"]
    assert not (tmp_path / "out.pftrace").exists()


def test_binary_sidecar_given_as_a_trace_says_so(tmp_path):
    from perfetto_graph_ann.annotations.files import save_annotations
    from perfetto_graph_ann.errors import TraceFormatError

    side = tmp_path / "run.pga"
    save_annotations(side, load_annotation_files([str(fixture_capture("two_branch"))]))
    assert side.read_bytes()[:1] == b"\x0a"  # starts like a protobuf trace
    with pytest.raises(TraceFormatError) as err:
        read_trace(side)
    assert str(err.value) == f"{side}: this is an annotation sidecar, not a torch.profiler JSON trace " \
                             "(give it with --annotations)"


@pytest.mark.parametrize("text", [b"\n{broken", b"\n\n{\"a\": [1, 2", b"\x0a\x05abc", b"\x0a\x05abcde\x0a"])
def test_broken_json_starting_with_a_newline_is_still_just_broken_json(tmp_path, text):
    from perfetto_graph_ann.errors import TraceFormatError

    p = tmp_path / "bad.json"
    p.write_bytes(text)
    with pytest.raises(TraceFormatError) as err:
        read_trace(p)
    assert str(err.value).startswith(f"{p}: not valid JSON (")
