"""Every bundled H200 recording: source JSON (read independently) vs our .pftrace.

Expectations come straight from the JSON (json + Decimal, not our reader). The output is
checked twice: decoded with perfetto.protos classes (tests/support/pftrace_decode.py) and loaded
in the trace processor (portable engine).
"""
from __future__ import annotations

import collections
import gzip
import json
from decimal import Decimal

import pytest

from conftest import TRACES, fixture_trace
from support.join_expect import COLLECTIVE_FIELDS
from support.pftrace_decode import decode
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert


def source(name):
    with gzip.open(fixture_trace(name), "rb") as f:
        return json.loads(f.read(), parse_float=Decimal)


def expected_arg(v):
    """The documented arg mapping: Decimal -> float; empty list/dict and null -> "[]", "{}", "null"."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, list):
        return [expected_arg(x) for x in v] if v else "[]"
    if isinstance(v, dict):
        return {k: expected_arg(x) for k, x in v.items()} if v else "{}"
    return "null" if v is None else v


def list_text(v) -> str:
    """The default encoding of a list arg: its compact JSON text (Decimal numbers as written)."""
    if isinstance(v, list):
        return "[" + ",".join(list_text(x) for x in v) + "]"
    if isinstance(v, Decimal):
        return str(v)
    return json.dumps(v, ensure_ascii=False)


def expected_default_arg(v):
    """:func:`expected_arg` of the default writer: a top-level list arg is its JSON text."""
    return list_text(v) if isinstance(v, list) else expected_arg(v)


def same_typed(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_typed(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_typed(a[k], b[k]) for k in a)
    return a == b


def ns(us) -> int:
    return int(round(Decimal(us) * 1000))


def expected_slices(doc):
    return collections.Counter(
        (e.get("cat", ""), e["name"], ns(e["ts"]), ns(e["dur"])) for e in doc["traceEvents"] if e.get("ph") == "X")


def expected_flows(doc):
    """Flow pairs as Kineto writes them: an s and each f with its (cat, id), both at a slice start."""
    starts = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            starts[(e["pid"], e["tid"], ns(e["ts"]))].append(e)
    src, dst = {}, collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f") and "id" in e and starts.get((e["pid"], e["tid"], ns(e["ts"]))):
            key = (e.get("cat"), e["id"])
            if e["ph"] == "s":
                src[key] = e
            else:
                dst[key].append(e)
    return sum(len(v) for k, v in dst.items() if k in src)


@pytest.fixture(scope="module", params=TRACES)
def converted(request, tmp_path_factory):
    name = request.param
    out = tmp_path_factory.mktemp("conv") / f"{name}.pftrace"
    stats = convert(fixture_trace(name), out)
    return name, out, stats


def test_slices_names_times_exact(converted):
    name, out, _ = converted
    doc = source(name)
    got = decode(out)
    assert collections.Counter((s.cat, s.name, s.ts, s.dur) for s in got.slices) == expected_slices(doc)


def test_counts_per_category(converted):
    name, out, _ = converted
    doc = source(name)
    exp = collections.Counter(e.get("cat", "") for e in doc["traceEvents"] if e.get("ph") == "X")
    assert collections.Counter(s.cat for s in decode(out).slices) == exp


def test_instants_kept(converted):
    name, out, _ = converted
    doc = source(name)
    exp = sorted((e["name"], ns(e["ts"])) for e in doc["traceEvents"] if e.get("ph") == "i")
    assert sorted((s.name, s.ts) for s in decode(out).instants) == exp


def test_flows(converted):
    name, out, stats = converted
    doc = source(name)
    got = decode(out)
    pairs = got.flows()
    assert len(pairs) == expected_flows(doc) == stats.flows
    assert all(src is not None for src, _ in pairs)
    gpu = {"kernel", "gpu_memcpy", "gpu_memset"}
    for src, dst in pairs:
        if dst.cat in gpu:  # a launch links to work with its correlation, launched before it started
            assert src.args["correlation"] == dst.args["correlation"]
            assert src.ts <= dst.ts


def test_graph_launch_fans_out_to_all_its_kernels(tmp_path):
    doc = source("seed_block_graph")
    out = tmp_path / "g.pftrace"
    convert(fixture_trace("seed_block_graph"), out)
    got = decode(out)
    launches = [s for s in got.slices if s.name == "cudaGraphLaunch"]
    kernels_by_corr = collections.Counter(
        e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert len(launches) == 5
    for s in launches:
        assert len(s.flow_ids) == kernels_by_corr[s.args["correlation"]] == 14


def _check_args(doc, got, expect) -> int:
    by_key = {(s.cat, s.name, s.ts): s for s in got.slices}
    checked = 0
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or not e.get("args"):
            continue
        s = by_key[(e.get("cat", ""), e["name"], ns(e["ts"]))]
        for k, v in e["args"].items():
            assert same_typed(s.args[k], expect(v)), (k, v, s.args[k])
            checked += 1
    return checked


def test_args_default_encoding(converted):
    """Scalars typed as in the JSON; Kineto's list args (grid, block, shapes) as their JSON text."""
    name, out, _ = converted
    assert _check_args(source(name), decode(out), expected_default_arg) > 0


@pytest.mark.parametrize("name", TRACES)
def test_args_typed(name, tmp_path):
    """``list_args="typed"``: every list item a typed arg of its own (full fidelity)."""
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out, ConvertConfig(list_args="typed"))
    assert _check_args(source(name), decode(out), expected_arg) > 0


def test_nccl_collective_args(tmp_path):
    """Each eager NCCL kernel keeps its collective metadata with the JSON's values and types."""
    doc = source("allreduce_eager_rank0")
    expect = {(e["name"], ns(e["ts"])): {k: e["args"][k] for k in COLLECTIVE_FIELDS}
              for e in doc["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")}
    assert len(expect) == 3
    # the recording's values (rank 0 of a 2-rank all_reduce of 2**20 floats), as a reader sees them
    assert {(v["Collective name"], v["In msg nelems"], v["Group size"], v["Process Group Ranks"])
            for v in expect.values()} == {("allreduce", 1048576, 2, "[0, 1]")}
    out = tmp_path / "a.pftrace"
    convert(fixture_trace("allreduce_eager_rank0"), out)
    nccl = {(s.name, s.ts): s for s in decode(out).slices if s.cat == "kernel" and "nccl" in s.name.lower()}
    assert nccl.keys() == expect.keys()
    for key, fields in expect.items():
        got = {k: nccl[key].args[k] for k in COLLECTIVE_FIELDS}
        assert same_typed(got, fields), (key, got, fields)


def test_gpu_tracks_layout(converted):
    name, out, _ = converted
    doc = source(name)
    got = decode(out)
    devices = {d["id"]: d["name"] for d in doc["deviceProperties"]}
    gpu_slices = [s for s in got.slices if s.cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    assert gpu_slices
    for s in gpu_slices:
        lane = got.tracks[s.track]
        root = got.tracks[lane.parent_uuid]
        assert not root.HasField("process") and not root.HasField("parent_uuid")
        dev = s.args.get("device", 0)
        assert root.name == f"GPU {dev}" and root.description == devices[dev]
        assert root.child_ordering == root.ChildTracksOrdering.EXPLICIT
        if s.cat != "gpu_user_annotation":
            assert lane.name == f"stream {s.args['stream']}" and lane.sibling_order_rank == s.args["stream"]


def test_cpu_threads_named_and_sorted(converted):
    name, out, _ = converted
    doc = source(name)
    got = decode(out)
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    psort = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_sort_index"}
    pnames = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
              if e.get("ph") == "M" and e["name"] == "process_name"}
    cpu_pids = {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")}
    procs = {d.process.pid: d.process for d in got.tracks.values() if d.HasField("process")}
    threads = {(d.thread.pid, d.thread.tid): d.thread for d in got.tracks.values() if d.HasField("thread")}
    for pid in cpu_pids:
        assert procs[pid].process_name == pnames[pid]
        assert procs[pid].legacy_sort_index == psort[pid]
    for (pid, tid), t in threads.items():
        if (pid, tid) in tnames:
            assert t.thread_name == tnames[(pid, tid)]


def test_clock_snapshot_recovers_absolute_time(converted):
    name, out, _ = converted
    doc = source(name)
    snaps = [{c.clock_id: c.timestamp for c in snap.clocks} for snap in decode(out).clock_snapshots]
    for c in snaps:  # one per sequence: its incremental clock anchored at BOOTTIME, and REALTIME
        assert set(c) == {1, 6, 64} and c[64] == c[6]
        assert c[1] - c[6] == doc["baseTimeNanoseconds"]  # REALTIME - BOOTTIME
    assert len(snaps) == len({p.trusted_packet_sequence_id for p in decode(out).packets if p.HasField("track_event")})


def test_sequence_flags_and_interning(converted):
    _, out, _ = converted
    packets = decode(out).packets
    # our completeness marks first and last (formats.py), on no sequence
    assert not packets[0].ListFields() and not packets[-1].ListFields()
    packets = packets[1:-1]
    assert packets[0].sequence_flags & 1  # SEQ_INCREMENTAL_STATE_CLEARED first
    assert packets[0].trusted_packet_sequence_id == 1
    started = set()
    descriptor_seqs = {p.trusted_packet_sequence_id for p in packets if p.HasField("track_descriptor")}
    assert len(descriptor_seqs) == 1
    for p in packets:
        seq = p.trusted_packet_sequence_id
        assert 1 <= seq <= 128  # the shared sequence 1, busy tracks' own 2..127, then the descriptors'
        if p.sequence_flags & 1:
            assert seq not in started  # each sequence is cleared once, at its first packet
            started.add(seq)
        if p.HasField("track_event"):
            assert seq in started and seq not in descriptor_seqs
            if p.track_event.name_iid:
                assert p.sequence_flags & 2
            if not p.track_event.HasField("track_uuid"):
                assert seq != 1  # only an own sequence has a default track
    for seq in started:  # each name defined once per sequence (interning is per sequence)
        defined = [e.iid for p in packets if p.trusted_packet_sequence_id == seq for e in p.interned_data.event_names]
        assert len(defined) == len(set(defined))


def test_fast_encoder_matches_protos_byte_for_byte(tmp_path):
    for name in TRACES:
        a, b = tmp_path / f"{name}.fast", tmp_path / f"{name}.protos"
        convert(fixture_trace(name), a, ConvertConfig(encoder="fast"))
        convert(fixture_trace(name), b, ConvertConfig(encoder="protos"))
        assert a.read_bytes() == b.read_bytes(), name


def test_gzip_output(tmp_path):
    out = tmp_path / "x.pftrace.gz"
    convert(fixture_trace("two_branch"), out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    plain = tmp_path / "x.pftrace"
    convert(fixture_trace("two_branch"), plain)
    assert gzip.decompress(out.read_bytes()) == plain.read_bytes()
