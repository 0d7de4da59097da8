"""The join's per-replay work made while torch still writes the trace (``join.ahead.JoinAhead``,
``Made``), as a conversion worker following torch's JSON does it.

Expectations: whatever the events read so far when the reader waits (any cut of the file, any
file order), the join given what was made writes exactly what the join without it writes
(placements and their args, ranges, critical paths, flows, lanes, report); it takes what was
made for a replay only where that replay's events, launch and graph are the ones it was made
from (a replay that grew after it was made is made again); it takes nothing made from another
annotation set; and through a followed file the trace read carries what was made.
"""
from __future__ import annotations

import dataclasses
import random
import sys
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.join import critical_path, join
from perfetto_graph_ann.join.ahead import JoinAhead, Made
from perfetto_graph_ann.pipeline.joined import read_and_join, read_for_writing
from perfetto_graph_ann.read.follow import Followed
from perfetto_graph_ann.read.kineto import parse_trace_bytes, read_trace
from perfetto_graph_ann.read.model import TraceEvent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.decoder_synth import decoder_annotations, decoder_trace, with_batch_sizes  # noqa: E402

H100 = Path(__file__).parent / "data" / "h100_windows"


def _decoder(replays: int = 8, layers: int = 4, graphs: int = 1):
    launches: list = []
    raw = decoder_trace(replays, layers, launches=launches)
    ann = decoder_annotations(layers, record=launches)
    return parse_trace_bytes(raw, "decoder.json"), with_batch_sizes(ann, graphs) if graphs > 1 else ann


def _cases():
    yield "decoder", _decoder()
    yield "decoder, three batch sizes", _decoder(graphs=3)
    yield "h100 calibrated", (read_trace(str(H100 / "calibrated_copy.trace.json.gz")),
                              load_annotations(str(H100 / "calibrated_copy.annotations.json.gz")))
    yield "h100 structural, edges", (read_trace(str(H100 / "twelve_ms_apart.trace.json.gz")),
                                     load_annotations(str(H100 / "twelve_ms_apart.annotations.json.gz")))
    for name in ("two_branch", "seed_block_annotated"):
        yield f"h200 {name}", (read_trace(str(fixture_trace(name))), read_capture_record(str(fixture_capture(name))))


def _made(events, ann, cuts) -> JoinAhead:
    """A JoinAhead fed as a follow feeds it: at each cut, every step it has (the reader waiting)."""
    ahead = JoinAhead(ann)
    for n in list(cuts) + [len(events)]:
        while ahead.idle(events[:n]):
            pass
    return ahead


def _snapshot(layout, trace):
    pl = layout.placements
    placed = []
    for e in trace.events:
        p = pl.get(e.index)
        placed.append(None if p is None else (p.lane, dict(p.args)))
    return placed, [tuple(r) for r in layout.ranges], layout.report.as_dict(), layout.edge_flows, layout.lane_names


def _same(trace, ann, ahead, **kw):
    plain = join(trace, ann, **kw)
    made = join(trace, ann, made=ahead.made, **kw)
    assert _snapshot(made, trace) == _snapshot(plain, trace)
    return ahead.made.taken


def test_every_case_joins_the_same_with_what_was_made():
    for name, (trace, ann) in _cases():
        every = list(range(0, len(trace.events), max(1, len(trace.events) // 17)))
        for kw in (dict(graph_lanes="all", edge_flows=True), dict(graph_lanes="none", compact=True)):
            ahead = _made(trace.events, ann, every)
            taken = _same(trace, ann, ahead, **kw)
            assert taken["matches"] >= 1, (name, taken)


def test_the_join_takes_every_replay_made_but_the_one_still_growing():
    trace, ann = _decoder(replays=8)
    ahead = _made(trace.events, ann, range(0, len(trace.events), 50))
    taken = _same(trace, ann, ahead, graph_lanes="all")
    # the last replay is the newest until the end; the decoder has no edges (no path)
    assert taken == {"shapes": 7, "matches": 7, "ranges": 7, "paths": 0}


def test_what_was_made_for_the_h100_graph_with_edges_is_its_critical_path_too():
    trace = read_trace(str(H100 / "twelve_ms_apart.trace.json.gz"))
    ann = load_annotations(str(H100 / "twelve_ms_apart.annotations.json.gz"))
    ahead = _made(trace.events, ann, range(0, len(trace.events), 5))
    taken = _same(trace, ann, ahead, graph_lanes="all", edge_flows=True)
    assert taken["ranges"] == taken["matches"] >= 2
    # the path is made ahead by the compiled loop only (PERFETTO_GRAPH_ANN_PURE_PYTHON: by the join)
    assert taken["paths"] == (taken["matches"] if critical_path.REPLAY_PATH is not None else 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 4000), max_size=12), rotate=st.integers(0, 4000))
def test_any_cuts_and_a_rotated_file_join_the_same(seed, cuts, rotate):
    """Kineto's file may start mid-profile (the H100's 104-replay profile began with its 73rd
    replay and ended with one kernel of it): the events rotated, then shuffled within a window."""
    trace, ann = _decoder(replays=6, graphs=2)
    events = list(trace.events)
    k = rotate % len(events)
    events = events[k:] + events[:k]
    rng = random.Random(seed)
    for _ in range(20):  # local swaps: a few events written out of order
        i = rng.randrange(len(events) - 1)
        events[i], events[i + 1] = events[i + 1], events[i]
    trace = dataclasses.replace(trace, events=events)
    _same(trace, ann, _made(events, ann, sorted(c % len(events) for c in cuts)), graph_lanes="all")


def test_a_replay_that_grew_after_it_was_made_is_made_again():
    """One kernel of the first replay moved to the end of the file: that replay was made without
    it, so the join makes it again (and takes the others)."""
    trace, ann = _decoder(replays=5)
    events = list(trace.events)
    first = next(e for e in events if e.is_gpu_work)
    events.remove(first)
    events.append(first)
    trace = dataclasses.replace(trace, events=events)
    ahead = _made(events, ann, range(0, len(events), 25))
    taken = _same(trace, ann, ahead, graph_lanes="all")
    # five replays; the grown one, newest at the end, made by the join: the four others taken
    assert taken["matches"] == 4


def test_nothing_made_from_another_annotation_set_is_taken():
    trace, ann = _decoder(replays=5)
    other = dataclasses.replace(ann)  # equal, not the same object
    ahead = _made(trace.events, other, range(0, len(trace.events), 25))
    taken = _same(trace, ann, ahead, graph_lanes="all")
    assert taken == {"shapes": 0, "matches": 0, "ranges": 0, "paths": 0}
    assert isinstance(ahead.made, Made)


def test_a_followed_file_carries_what_was_made_to_the_join(tmp_path):
    """Written by a thread in pieces while the reader follows it: the trace read carries the
    follow's made results, and the join takes them."""
    launches: list = []
    raw = decoder_trace(8, 4, launches=launches)
    ann = decoder_annotations(4, record=launches)
    path = str(tmp_path / "p.json")
    word = threading.Event()

    def write():
        with open(path + ".tmp", "wb") as f:
            for at in range(0, len(raw), 4096):
                f.write(raw[at:at + 4096])
                f.flush()
                time.sleep(0.001)
        Path(path + ".tmp").rename(path)
        word.set()

    writer = threading.Thread(target=write)
    writer.start()
    follow = Followed([path + ".tmp", path], lambda timeout: path if word.wait(timeout) else None,
                      ahead=JoinAhead(ann))
    ahead = follow.ahead
    events_read = follow.events
    trace = read_for_writing(path, True, join=True, follow=follow)
    writer.join()
    assert trace.made is ahead.made and trace.events is events_read and trace.events
    # handed over: the follow keeps none of the events (the writer drops them before its packets)
    assert follow.events == [] and not ahead._work and not ahead._launches and not ahead.idle(trace.events)
    layout = read_and_join(trace, ann, graph_lanes="all", compact=True).layout
    assert ahead.made.taken["matches"] >= 1
    plain = read_and_join(read_for_writing(path, True, join=True), ann, graph_lanes="all", compact=True).layout
    assert _snapshot(layout, trace) == _snapshot(plain, trace)
    trace.release()  # what the writer does before its packets: then nothing holds the events read
    assert sys.getrefcount(events_read) == 2  # this test's name and the call's argument


def test_eager_work_is_never_made_and_never_waits(monkeypatch):
    """GPU work launched eagerly (a correlation with no graph launch) is not a replay: nothing is
    made of it, and it is not looked at again at every step (each step stays small)."""
    trace, ann = _decoder(replays=4)
    gpu = [e for e in trace.events if e.is_gpu_work]
    eager = [TraceEvent(len(trace.events) + i, "X", e.cat, e.name, e.pid, e.tid, e.ts_ns, e.dur_ns,
                        {**e.args, "correlation": 10_000_000 + i}) for i, e in enumerate(gpu[:300])]
    events = list(trace.events) + eager
    trace = dataclasses.replace(trace, events=events)
    made = []
    monkeypatch.setattr(Made, "make", lambda self, r, *a: made.append(r.correlation))
    ahead = JoinAhead(ann)
    steps = 0
    for n in list(range(0, len(events), 40)) + [len(events)]:
        while ahead.idle(events[:n]):
            steps += 1
    launched = {e.correlation for e in events if e.name == "cudaGraphLaunch"}
    assert made and set(made) <= launched and len(made) == len(set(made))
    assert steps <= len(range(0, len(events), 40)) + 1 + len(made)  # a grouping per cut, a step per replay made
    assert set(ahead._waiting) <= launched  # what each step looks through: replays only


def test_a_failure_made_ahead_stops_the_work_and_not_the_conversion(monkeypatch):
    """Whatever the work made ahead raises, the follow goes on, nothing more is made, and the
    join makes every replay itself: the same layout."""
    trace, ann = _decoder(replays=5)
    calls = []

    def fail(self, r, *a):
        calls.append(r.correlation)
        raise RuntimeError("made ahead")

    monkeypatch.setattr(Made, "make", fail)
    ahead = _made(trace.events, ann, range(0, len(trace.events), 25))
    assert len(calls) == 1 and not ahead.idle(trace.events)
    taken = _same(trace, ann, ahead, graph_lanes="all")
    assert taken["shapes"] <= 1 and taken["matches"] == taken["ranges"] == taken["paths"] == 0  # a shape kept first
