"""Lane tracks carry their device and lane (Contract 4): the writer merges a lane's tracks by the
key ``graph_ann.lane:<device>:<lane>`` and writes those values as the ``device`` / ``stream``
args of every GPU work slice it puts there; the SQL package reads them from the key
(``_graph_ann_lane_track``) instead of from each slice's args. Checked in the trace processor
against every slice's own args, keys parsed here in Python."""
from __future__ import annotations

import json
import re

import pytest

from conftest import TRACES, fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto_graph_ann.join.model import LaneLayout, Placement
from perfetto_graph_ann.pipeline.convert import convert, convert_file
from perfetto_graph_ann.query.session import open_trace
from perfetto_graph_ann.read.kineto import parse_trace_bytes, read_trace
from perfetto_graph_ann.write.perfetto.tracks import LANE_MERGE_KEY_PREFIX, lane_merge_key

pytestmark = requires_portable

WORK = "('kernel', 'gpu_memcpy', 'gpu_memset')"

#: GPU work the fixtures lack: other phases, a device or stream arg that is not an int, a
#: stream arg other than the tid, a negative stream id
ODD_EVENTS = [
    {"ph": "X", "cat": "kernel", "name": "plain", "pid": 0, "tid": 7, "ts": 10.0, "dur": 1.0,
     "args": {"device": 0, "stream": 7, "correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "no_device", "pid": 1, "tid": 7, "ts": 12.0, "dur": 1.0,
     "args": {"stream": 7, "correlation": 2}},
    {"ph": "X", "cat": "kernel", "name": "text_device", "pid": 1, "tid": 8, "ts": 14.0, "dur": 1.0,
     "args": {"device": "1", "stream": 8}},
    {"ph": "X", "cat": "kernel", "name": "stream_arg_wins", "pid": 0, "tid": 7, "ts": 16.0, "dur": 1.0,
     "args": {"device": 0, "stream": 9}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "text_stream", "pid": 0, "tid": 7, "ts": 18.0, "dur": 1.0,
     "args": {"device": 0, "stream": "7"}},
    {"ph": "X", "cat": "gpu_memset", "name": "bool_stream", "pid": 0, "tid": 7, "ts": 20.0, "dur": 1.0,
     "args": {"device": 0, "stream": True}},
    {"ph": "i", "cat": "kernel", "name": "instant_elsewhere", "pid": 0, "tid": 7, "ts": 22.0, "s": "t",
     "args": {"device": 0, "stream": 11}},
    {"ph": "i", "cat": "kernel", "name": "instant_text_stream", "pid": 0, "tid": 7, "ts": 23.0, "s": "t",
     "args": {"stream": "x"}},
    {"ph": "B", "cat": "kernel", "name": "begin_phase", "pid": 0, "tid": 7, "ts": 24.0,
     "args": {"device": 0, "stream": "7"}},
    {"ph": "X", "cat": "kernel", "name": "negative_stream", "pid": 0, "tid": -3, "ts": 26.0, "dur": 1.0,
     "args": {"device": 0, "stream": -3}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "region", "pid": 0, "tid": 7, "ts": 10.0, "dur": 20.0,
     "args": {"stream": 7}},
]


def _keyed_tracks(s) -> dict:
    """track id -> (group, device, lane) of every track whose merge key is a lane key, parsed
    here: ``<device>:<lane>`` (group 0) or, in a merged trace, ``<group>:<device>:<lane>``."""
    out = {}
    rows = s.query("SELECT id, EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') AS k FROM track").tuples()
    num = r"(-?[1-9][0-9]*|0)"
    for track_id, key in rows:
        if key is None or not key.startswith(LANE_MERGE_KEY_PREFIX):
            continue
        m = re.fullmatch(f"(?:{num}:)?{num}:{num}", key[len(LANE_MERGE_KEY_PREFIX):])
        if m:
            out[track_id] = (int(m.group(1) or 0), int(m.group(2)), int(m.group(3)))
    return out


def check_lane_keys(path) -> int:
    """Every GPU work slice on a keyed track carries the key's device and lane as its args, every
    GPU work slice under a ``GPU <n>`` root is on a keyed track, and the SQL package's table of
    keyed tracks and its GPU work table agree with the slices' own args. Returns the number of
    GPU work slices on keyed tracks."""
    with open_trace(path, engine="portable") as s:
        keyed = _keyed_tracks(s)
        work = s.query(
            "SELECT sl.track_id, EXTRACT_ARG(sl.arg_set_id, 'debug.device') AS d, "
            "EXTRACT_ARG(sl.arg_set_id, 'debug.stream') AS l, p.name AS root FROM slice sl "
            "JOIN track t ON t.id = sl.track_id LEFT JOIN track p ON p.id = t.parent_id "
            f"WHERE sl.category IN {WORK}").tuples()
        s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work")
        table = {r[0]: (r[1], r[2], r[3]) for r in
                 s.query("SELECT track_id, group_id, device, lane_id FROM _graph_ann_lane_track").tuples()}
        disagree = s.query(
            "SELECT COUNT(*) FROM _graph_ann_work WHERE device IS NOT _graph_ann_device!(arg_set_id) "
            "OR lane_id IS NOT _graph_ann_lane!(arg_set_id)").tuples()[0][0]
    assert table == keyed
    on_keyed = 0
    for track_id, d, l, root in work:
        if track_id in keyed:
            assert (d, l) == keyed[track_id][1:]
            on_keyed += 1
        else:
            assert not (root or "").startswith("GPU "), (track_id, d, l, root)
    assert disagree == 0
    return on_keyed


@pytest.mark.parametrize("name", TRACES)
def test_fixtures(name, tmp_path):
    out = tmp_path / f"{name}.pftrace"
    convert(fixture_trace(name), out)
    assert check_lane_keys(out) > 0


def test_annotated_fixture_with_moved_lanes(tmp_path):
    out = tmp_path / "two_branch.pftrace"
    convert_file(str(fixture_trace("two_branch")), str(out), [str(fixture_capture("two_branch"))], graph_lanes="all")
    assert check_lane_keys(out) > 0


def test_hand_made_layout(tmp_path):
    trace = read_trace(fixture_trace("two_branch"))
    work = [e for e in trace.events if e.is_gpu_work]
    placements = {e.index: Placement(60 if e.stream == 7 else 7, {"name": "moved", "original_stream": e.stream})
                  for e in work[::2]}
    out = tmp_path / "layout.pftrace"
    convert(trace, out, layout=LaneLayout(placements=placements, lane_names={(0, 60): "60 moved"}))
    assert check_lane_keys(out) == len(work)


def test_odd_gpu_work(tmp_path):
    out = tmp_path / "odd.pftrace"
    convert(parse_trace_bytes(json.dumps({"traceEvents": ODD_EVENTS}).encode()), out)
    with open_trace(out, engine="portable") as s:
        got = dict(s.query(
            "SELECT name, EXTRACT_ARG(arg_set_id, 'debug.device') || '/' || EXTRACT_ARG(arg_set_id, 'debug.stream') "
            f"FROM slice WHERE category IN {WORK}").tuples())
    assert got == {"plain": "0/7", "no_device": "1/7", "text_device": "1/8", "stream_arg_wins": "0/9",
                   "text_stream": "0/7", "bool_stream": "0/7", "instant_elsewhere": "0/11",
                   "instant_text_stream": "0/7", "begin_phase": "0/7", "negative_stream": "0/-3"}
    assert check_lane_keys(out) == len(got)


def _descriptor_trace(path, keys) -> None:
    """A TrackEvent trace: one GPU root and a child track per merge key, each holding one kernel
    whose args say device 5, stream 5 (so a key that were trusted would show up)."""
    trace = pb.Trace()
    root = trace.packet.add()
    root.track_descriptor.uuid = 1
    root.track_descriptor.name = "GPU 5"
    for i, key in enumerate(keys):
        p = trace.packet.add()
        d = p.track_descriptor
        d.uuid = 10 + i
        d.parent_uuid = 1
        d.name = f"lane {i}"
        d.sibling_merge_behavior = pb.TrackDescriptor.SiblingMergeBehavior.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
        d.sibling_merge_key = key
    for i in range(len(keys)):
        for ts, kind in ((100 + 10 * i, pb.TrackEvent.Type.TYPE_SLICE_BEGIN), (105 + 10 * i, pb.TrackEvent.Type.TYPE_SLICE_END)):
            p = trace.packet.add()
            p.timestamp = ts
            p.trusted_packet_sequence_id = 1
            p.track_event.type = kind
            p.track_event.track_uuid = 10 + i
            if kind == pb.TrackEvent.Type.TYPE_SLICE_BEGIN:
                p.track_event.name = f"k{i}"
                p.track_event.categories.append("kernel")
                for k in ("device", "stream"):
                    a = p.track_event.debug_annotations.add()
                    a.name = k
                    a.int_value = 5
    path.write_bytes(trace.SerializeToString())


def test_only_canonical_keys_are_read(tmp_path):
    good = [lane_merge_key(0, 7), lane_merge_key(3, -2), lane_merge_key(0, 1 << 40), lane_merge_key(2, 7, group=1)]
    bad = ["graph_ann.lane:0:07", "graph_ann.lane:a:1", "graph_ann.lane:0", "graph_ann.lane:1:2:3:4",
           "graph_ann.lane:01:2:3", "graph_ann.lane:+1:2", "graph_ann.lane:0:99999999999999999999",
           "graph_ann.lanes:0:1", "stream 7"]
    path = tmp_path / "keys.pftrace"
    _descriptor_trace(path, good + bad)
    with open_trace(path, engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work")
        table = s.query("SELECT t.name, k.group_id, k.device, k.lane_id FROM _graph_ann_lane_track k "
                        "JOIN track t ON t.id = k.track_id").tuples()
        work = dict(s.query("SELECT name, group_id || '/' || device || '/' || lane_id FROM graph_ann_gpu_work").tuples())
    assert sorted(table) == [("lane 0", 0, 0, 7), ("lane 1", 0, 3, -2), ("lane 2", 0, 0, 1 << 40), ("lane 3", 1, 2, 7)]
    # keyed tracks take the key (here on purpose not the args), the others their args (group 0)
    assert work == {"k0": "0/0/7", "k1": "0/3/-2", "k2": f"0/0/{1 << 40}", "k3": "1/2/7",
                    **{f"k{i}": "0/5/5" for i in range(4, 4 + len(bad))}}


def test_json_traces_have_no_keyed_tracks():
    with open_trace(fixture_trace("two_branch"), engine="portable") as s:
        s.query("INCLUDE PERFETTO MODULE graph_ann.gpu_work")
        assert s.query("SELECT COUNT(*) FROM _graph_ann_lane_track").tuples()[0][0] == 0
        assert s.query("SELECT COUNT(*) FROM graph_ann_gpu_work WHERE device IS NULL OR lane_id IS NULL").tuples()[0][0] == 0


def test_merged_ranks(tmp_path):
    """Two ranks merged: each rank's lanes are keyed with their group under their own ``GPU 0``
    (device ids repeat across ranks; the keys do not: ``graph_ann.lane:<group>:<device>:<lane>``)."""
    from support.join_expect import allreduce_annotations
    from perfetto_graph_ann.pipeline.merge import merge
    from test_merge_tp import _rank1_copy

    out = tmp_path / "all.pftrace"
    ann = allreduce_annotations()
    merge([fixture_trace("allreduce_graph_rank0"), _rank1_copy(tmp_path)], out, [ann, ann])
    on_keyed = check_lane_keys(out)
    with open_trace(out, engine="portable") as s:
        ranks = s.query(f"SELECT COUNT(DISTINCT EXTRACT_ARG(arg_set_id, 'debug.rank')) FROM slice WHERE category IN {WORK}").tuples()[0][0]
        roots = s.query("SELECT COUNT(DISTINCT p.id) FROM track t JOIN track p ON p.id = t.parent_id "
                        "WHERE EXTRACT_ARG(t.dimension_arg_set_id, 'merge_key_value') GLOB 'graph_ann.lane:*'").tuples()[0][0]
        keys = {k for (k,) in s.query("SELECT DISTINCT EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') FROM track "
                                      "WHERE EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') GLOB 'graph_ann.lane:*'"
                                      ).tuples()}
    assert ranks == 2 and roots == 2 and on_keyed > 0
    assert {k.split(":")[1] for k in keys} == {"0", "1"} and all(k.count(":") == 3 for k in keys)
