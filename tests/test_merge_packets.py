"""merge_converted on small hand-built traces: groups, clocks, id remapping (decoded with perfetto's protos)."""
from __future__ import annotations

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from perfetto_graph_ann.errors import InputError
from perfetto_graph_ann.write.merge import RankTrace, merge_converted, rank_group_uuid

BOOT = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME
REAL = pb.BuiltinClock.BUILTIN_CLOCK_REALTIME


def _rank_trace(pid: int, slice_ts: int, base: int) -> bytes:
    t = pb.Trace()
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.clock_snapshot.clocks.add(clock_id=BOOT, timestamp=0)
    p.clock_snapshot.clocks.add(clock_id=REAL, timestamp=base)
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.track_descriptor.uuid = 10
    p.track_descriptor.name = "GPU 0"
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.track_descriptor.uuid = 11
    p.track_descriptor.parent_uuid = 10
    p.track_descriptor.name = "stream 7"
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.track_descriptor.uuid = 20
    p.track_descriptor.process.pid = pid
    p.track_descriptor.process.process_name = "python3"
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.track_descriptor.uuid = 21
    p.track_descriptor.parent_uuid = 20
    p.track_descriptor.thread.pid = pid
    p.track_descriptor.thread.tid = pid
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.timestamp = slice_ts - 100
    p.track_event.type = pb.TrackEvent.Type.TYPE_SLICE_BEGIN
    p.track_event.track_uuid = 21
    p.track_event.name = "cudaGraphLaunch"
    p.track_event.flow_ids.append(5)
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.timestamp = slice_ts
    p.track_event.type = pb.TrackEvent.Type.TYPE_SLICE_BEGIN
    p.track_event.track_uuid = 11
    p.track_event.name = "kernel"
    p.track_event.terminating_flow_ids.append(5)
    return t.SerializeToString()


def _decode(data: bytes) -> pb.Trace:
    t = pb.Trace()
    t.ParseFromString(data)
    return t


def test_groups_clocks_and_ids():
    base0, base1 = 1_000_000_000, 1_000_000_700
    merged = _decode(merge_converted([
        RankTrace(1, base1, _rank_trace(839, 5_000, base1), "r1.json"),
        RankTrace(0, base0, _rank_trace(839, 5_000, base0), "r0.json"),
    ]))
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in merged.packet if p.HasField("track_descriptor")}
    groups = {d.name: u for u, d in tracks.items() if d.name.startswith("Rank ")}
    assert groups == {"Rank 0": rank_group_uuid(0), "Rank 1": rank_group_uuid(1)}
    gpus = [d for d in tracks.values() if d.name == "GPU 0"]
    assert sorted(d.parent_uuid for d in gpus) == sorted(groups.values())
    streams = [d for d in tracks.values() if d.name == "stream 7"]
    assert {tracks[d.parent_uuid].name for d in streams} == {"GPU 0"} and len({d.parent_uuid for d in streams}) == 2
    procs = [d.process for d in tracks.values() if d.HasField("process")]
    assert len({p.pid for p in procs}) == 2  # the colliding pid got a fresh id in rank 1
    assert sorted(p.process_name for p in procs)[0] == "python3 [rank 0]"
    assert any("rank 1" in p.process_name and "(pid 839)" in p.process_name for p in procs)
    threads = [d.thread for d in tracks.values() if d.HasField("thread")]
    assert len({(t.pid, t.tid) for t in threads}) == 2
    assert {t.pid for t in threads} == {p.pid for p in procs}
    # absolute time: rank 1 moved by base1 - base0; REALTIME in every snapshot = base + trace time
    kernels = {}
    for p in merged.packet:
        if p.HasField("track_event") and p.track_event.name == "kernel":
            rank = next(a.int_value for a in p.track_event.debug_annotations if a.name == "rank")
            kernels[rank] = p.timestamp
    assert kernels == {0: 5_000, 1: 5_000 + 700}
    for p in merged.packet:
        if p.HasField("clock_snapshot"):
            c = {x.clock_id: x.timestamp for x in p.clock_snapshot.clocks}
            assert c[REAL] - c[BOOT] == base0
    # flows stay paired within a rank and differ across ranks
    outs = [p.track_event.flow_ids[0] for p in merged.packet if p.HasField("track_event") and p.track_event.flow_ids]
    ins = [p.track_event.terminating_flow_ids[0] for p in merged.packet
           if p.HasField("track_event") and p.track_event.terminating_flow_ids]
    assert sorted(outs) == sorted(ins) and len(set(outs)) == 2
    seqs = {p.trusted_packet_sequence_id for p in merged.packet if p.HasField("track_event")}
    assert len(seqs) == 2  # each rank's (interning) sequence stays its own


def test_duplicate_rank_and_missing_base():
    a = _rank_trace(1, 1000, 5)
    with pytest.raises(InputError, match="rank 0 appears twice"):
        merge_converted([RankTrace(0, 5, a, "a.json"), RankTrace(0, 5, a, "b.json")])
    with pytest.raises(InputError) as info:
        merge_converted([RankTrace(0, 5, a, "a.json"), RankTrace(1, 0, a, "b.json")])
    assert str(info.value).startswith("b.json: ") and "baseTimeNanoseconds" in str(info.value)


def _incremental_trace(t0: int, base: int, deltas) -> bytes:
    t = pb.Trace()
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.sequence_flags = 1
    p.trace_packet_defaults.timestamp_clock_id = 64
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.clock_snapshot.clocks.add(clock_id=64, timestamp=t0, is_incremental=True)
    p.clock_snapshot.clocks.add(clock_id=BOOT, timestamp=t0)
    p.clock_snapshot.clocks.add(clock_id=REAL, timestamp=base + t0)
    for d in deltas:
        p = t.packet.add()
        p.trusted_packet_sequence_id = 1
        p.timestamp = d
        p.track_event.type = pb.TrackEvent.Type.TYPE_INSTANT
        p.track_event.track_uuid = 1
        p.track_event.name = "x"
    return t.SerializeToString()


def test_incremental_clock_is_reanchored_not_shifted_per_packet():
    t0, deltas = 1_000, [0, 100, 50]
    merged = _decode(merge_converted([RankTrace(0, 10_000, _incremental_trace(t0, 10_000, deltas), "a"),
                                      RankTrace(1, 10_900, _incremental_trace(t0, 10_900, deltas), "b")]))
    by_rank = {0: [], 1: []}
    anchors = {}
    for p in merged.packet:
        if p.HasField("clock_snapshot"):
            c = {x.clock_id: x.timestamp for x in p.clock_snapshot.clocks}
            anchors[p.trusted_packet_sequence_id] = c
            assert c[64] == c[BOOT] and c[REAL] - c[BOOT] == 10_000  # one REALTIME mapping for all ranks
        elif p.HasField("track_event"):
            r = next(a.int_value for a in p.track_event.debug_annotations if a.name == "rank")
            by_rank[r].append((p.trusted_packet_sequence_id, p.timestamp))
    for r, shift in ((0, 0), (1, 900)):
        seq = by_rank[r][0][0]
        assert [ts for _, ts in by_rank[r]] == deltas  # deltas untouched
        assert anchors[seq][64] == t0 + shift  # the running value starts later instead


def test_shift_out_of_range_is_an_input_error():
    a = _rank_trace(1, 1000, 5)
    with pytest.raises(InputError) as info:
        merge_converted([RankTrace(0, 5, a, "a.json"), RankTrace(1, (1 << 64) - 1, a, "b.json")])
    assert str(info.value).startswith("b.json: ")


@pytest.mark.parametrize("rank", [-1, 1 << 40, "0", True, 1.5])
def test_bad_rank_is_an_input_error(tmp_path, rank):
    import gzip
    import json

    from support.join_expect import fixture_trace, load_json
    from perfetto_graph_ann.pipeline.merge import merge

    doc = load_json("allreduce_graph_rank0")
    doc["distributedInfo"]["rank"] = rank
    p = tmp_path / "bad.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "m.pftrace"
    with pytest.raises(InputError) as info:
        merge([fixture_trace("two_branch"), p], out)
    assert str(info.value).startswith(str(p)) and "distributedInfo.rank" in str(info.value)
    assert not out.exists()


def test_written_rank_by_rank_as_merge_converted_gives_them():
    """write_merged (what merge writes with) streams the very bytes merge_converted returns,
    parsing each rank's packets one at a time, and drops each rank's bytes once rewritten."""
    import io

    from perfetto_graph_ann.write.merge import _packet_payloads, write_merged

    traces = [_rank_trace(1, 1000, 1_000_000_000), _rank_trace(2, 1500, 1_000_000_700)]
    want = merge_converted([RankTrace(r, 1_000_000_000 + 700 * r, t, f"r{r}.json") for r, t in enumerate(traces)])
    ranks = [RankTrace(r, 1_000_000_000 + 700 * r, t, f"r{r}.json") for r, t in enumerate(traces)]
    buf = io.BytesIO()
    assert write_merged(ranks, buf, release=True) == len(want)
    assert buf.getvalue() == want and all(rt.pftrace == b"" for rt in ranks)
    # each packet found by its framing is the one protobuf parses
    assert [bytes(p) for p in _packet_payloads(traces[0])] == [p.SerializeToString() for p in _decode(traces[0]).packet]
    # bytes framed otherwise (another top-level field) go through the whole-Trace parse, same result
    odd = traces[0] + b"\x12\x00"  # field 2, empty: unknown to the packet framing
    assert _packet_payloads(odd) is None
    assert merge_converted([RankTrace(0, 5, odd, "a.json")]) == merge_converted([RankTrace(0, 5, traces[0], "a.json")])


@pytest.mark.parametrize("data", [b"\x0a\x05\xff\xff\xff\xff\xff", b"\x0a\x09abc", b"\x0a"])
def test_a_rank_that_does_not_parse_is_named(data):
    good = _rank_trace(1, 1000, 5)
    with pytest.raises(InputError, match=r"^b\.json: converted trace of rank 1 does not parse"):
        merge_converted([RankTrace(0, 5, good, "a.json"), RankTrace(1, 5, data, "b.json")])
