"""Which graph replayed: structurally identical graphs never get each other's labels (issue 36).

Synthetic traces of *twin* graphs (the same kernels, names, grids and blocks; different
annotations), replayed in a known order from one or two threads. The order we launched is
the truth every test compares with. Without a replay record the join cannot tell twins
apart and must leave them unlabelled (or share a label they all give); with one it must
label every replay with its own graph's annotation, in process and through a saved sidecar.
"""
from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.engine_support import requires_portable

from perfetto_graph_ann.annotations.files import load_annotations, save_annotations
from perfetto_graph_ann.annotations.model import (UNANNOTATED_GRAPH, AnnotationSet, GraphRecord, NodeRecord,
                                                  ReplayThread, ReplayWindow)
from perfetto_graph_ann.capture.replay_log import EDGE_GUARD_NS, ReplayLog, original_replay
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.launches import _fit_window
from perfetto_graph_ann.join.model import KERNELS, RECORDED, UNANNOTATED
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.read.model import TraceEvent

PID = 4321
BASE_NS = 1_790_000_000_000_000_000
KERNELS_OF = [("gemm_kernel", (16, 4, 1)), ("softmax_kernel", (8, 1, 1)), ("gemm_kernel", (16, 4, 1))]
#: exec id -> (graph name, scope names of its three kernels)
TWINS = {5: ("twin_A", ("A_a", "A_b", "A_b")), 6: ("twin_B", ("B_a", "B_b", "B_b"))}


def twin_graph(exec_id: int, names: Sequence[str], name: Optional[str] = None, calibrated: bool = False) -> GraphRecord:
    nodes = tuple(NodeRecord(key=(exec_id << 32) | i, kernel=k, grid=grid, block=(128, 1, 1),
                             annotation={"name": names[i]}, stream=7 if calibrated else None,
                             ordinal=i if calibrated else None)
                  for i, (k, grid) in enumerate(KERNELS_OF))
    return GraphRecord(exec_id, nodes, name=name)


def twins(calibrated: Sequence[int] = (), same_names: bool = False, replays=None) -> AnnotationSet:
    graphs = tuple(twin_graph(g, TWINS[5][1] if same_names else names, name, g in calibrated)
                   for g, (name, names) in TWINS.items())
    return AnnotationSet(graphs=graphs, replays=replays)


@dataclasses.dataclass
class Launch:
    graph: int  #: exec id (the truth)
    tid: int
    ts_us: float


def write_trace(path: Path, launches: Sequence[Launch], cut_first: int = 0) -> Dict[int, int]:
    """A Kineto-like JSON: per launch a ``cudaGraphLaunch`` on its thread and three kernels on
    stream 7. Returns launch correlation -> the graph it replayed."""
    events = []
    truth = {}
    for i, x in enumerate(launches):
        corr = 100 + i
        truth[corr] = x.graph
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": PID, "tid": x.tid,
                       "ts": x.ts_us, "dur": 5, "args": {"cbid": 311, "correlation": corr}})
        for j, (k, grid) in enumerate(KERNELS_OF):
            if i == 0 and j < cut_first:
                continue
            events.append({"ph": "X", "cat": "kernel", "name": k, "pid": 0, "tid": 7, "ts": x.ts_us + 10 + 3 * j,
                           "dur": 2, "args": {"device": 0, "stream": 7, "correlation": corr,
                                              "grid": list(grid), "block": [128, 1, 1]}})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
           "baseTimeNanoseconds": BASE_NS, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return truth


def launch_wall(x: Launch) -> int:
    return BASE_NS + int(x.ts_us * 1000)


def window(threads: Sequence[ReplayThread], launches: Sequence[Launch] = ()) -> ReplayWindow:
    times = [launch_wall(x) for x in launches] or [BASE_NS]
    return ReplayWindow(PID, min(times) - 1_000_000, max(times) + 1_000_000, tuple(threads))


def recorded(launches: Sequence[Launch], tid: int, head: Sequence[int] = (), tail: Sequence[int] = (),
             native: bool = True, times: bool = True) -> ReplayThread:
    """The record of one thread that replayed ``launches`` (those of ``tid``), with extra
    uncertain calls ``head`` / ``tail`` (exec ids) around them."""
    mine = [x for x in launches if x.tid == tid]
    graphs = tuple(head) + tuple(x.graph for x in mine) + tuple(tail)
    starts = ()
    if times:
        first, last = launch_wall(mine[0]), launch_wall(mine[-1])
        gap = 100_000_000  # the uncertain calls ran a profiler step (100 ms) before / after
        starts = (tuple(first - gap * (len(head) - i) for i in range(len(head)))
                  + tuple(launch_wall(x) - 2_000 for x in mine)
                  + tuple(last + gap * (i + 1) for i in range(len(tail))))
    return ReplayThread(ident=0x7F00_0000_0000 | tid if not native else 0x7F00_DEAD_0000, native_id=tid if native else None,
                        graphs=graphs, head_uncertain=len(head), tail_uncertain=len(tail), starts_ns=starts)


def labels(layout, trace) -> Dict[int, List[Optional[str]]]:
    """launch correlation -> the ``name`` arg of each of its kernels (None: unlabelled)."""
    out: Dict[int, List[Optional[str]]] = {}
    for e in trace.events:
        if e.is_gpu_work:
            p = layout.placements.get(e.index)
            out.setdefault(e.correlation, []).append(p.args.get("name") if p is not None else None)
    return out


def truth_labels(truth: Dict[int, int]) -> Dict[int, List[str]]:
    return {c: list(TWINS[g][1]) for c, g in truth.items()}


SEQ = [Launch(6, 1, 1000), Launch(5, 1, 2000), Launch(6, 1, 3000)]  # B, A, B from one thread


# ---- without a record: never a twin's label -----------------------------------------------

def test_calibrated_twin_does_not_label_the_other_twins_replays(tmp_path):
    """The issue's first case: A calibrated (replayed before the profile), a profile of B only.
    Without a record nothing can tell A from B: no label, the replay slice names both."""
    launches = [Launch(6, 1, 1000 * (i + 1)) for i in range(3)]
    write_trace(tmp_path / "t.json", launches)
    trace = read_trace(tmp_path / "t.json")
    layout = join(trace, twins(calibrated=[5]))
    assert all(v == [None, None, None] for v in labels(layout, trace).values())
    r = layout.report
    assert r.unidentified_replays == {"twin_A | twin_B": 3} and r.unidentified_replay_events == {"twin_A | twin_B": 9}
    assert sum(r.matched.values()) == 0 and r.unmatched == 9
    assert [(g.name, g.args["graph candidates"]) for g in layout.ranges] == [("twin_A | twin_B", "twin_A | twin_B")] * 3
    assert not any("graph id" in g.args or "replay" in g.args for g in layout.ranges)


def test_uncalibrated_twins_with_different_annotations_stay_unlabelled(tmp_path):
    """The issue's second case without a record (B, A, B after both calibrated): unlabelled."""
    write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    for cal in ((), (5, 6)):
        layout = join(trace, twins(calibrated=cal))
        assert all(v == [None, None, None] for v in labels(layout, trace).values())
        assert layout.report.unidentified_replays == {"twin_A | twin_B": 3}


def test_twins_with_equal_annotations_share_the_label_without_a_graph_id(tmp_path):
    write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    layout = join(trace, twins(same_names=True))
    assert all(v == list(TWINS[5][1]) for v in labels(layout, trace).values())
    assert layout.report.shared_label_replays == {"twin_A | twin_B": 3}
    for p in layout.placements.values():
        assert "graph id" not in p.args and "replay" not in p.args and p.args["graph candidates"] == "twin_A | twin_B"


def test_a_single_fitting_graph_is_still_labelled(tmp_path):
    """One annotated graph that the kernels fit: labelled as before (no twin to confuse)."""
    write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    only_a = AnnotationSet(graphs=(twin_graph(5, TWINS[5][1], "twin_A"),))
    layout = join(trace, only_a)
    assert all(v == list(TWINS[5][1]) for v in labels(layout, trace).values())
    assert layout.report.replay_graphs == {KERNELS: 3}


# ---- with a record: every replay its own graph's labels ----------------------------------

@pytest.mark.parametrize("ident", [None, (0x7F12 << 32) | 1, (0x7F12 << 32) | (0xFFFFFFFF - 1 + 1)],
                         ids=["tid=native id", "tid=pthread low bits", "tid=pthread int32 made positive"])
def test_record_labels_each_replay_with_its_own_graph(tmp_path, ident):
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    th = recorded(SEQ, 1, native=ident is None)
    if ident is not None:  # Kineto's tid without CPU ops: pthread_self as an int32, made positive
        th = dataclasses.replace(th, ident=ident)
    layout = join(trace, twins(calibrated=[5], replays=(window([th], SEQ),)))
    assert labels(layout, trace) == truth_labels(truth)
    assert layout.report.replay_graphs == {RECORDED: 3} and not layout.report.unidentified_replays
    names = [g.name for g in layout.ranges if g.kind == "replay"]
    assert names == ["twin_B #0", "twin_A #0", "twin_B #1"]
    # calibration applied only to A's own replay
    joins = {e.correlation: layout.placements[e.index].args["join"] for e in trace.events if e.is_gpu_work}
    assert joins == {100: "structural", 101: "calibrated", 102: "structural"}


def test_two_threads_interleaved_in_time(tmp_path):
    launches = [Launch(5, 1, 1000), Launch(6, 2, 1500), Launch(6, 1, 2000), Launch(5, 2, 2500),
                Launch(5, 2, 3000), Launch(6, 1, 3500)]
    truth = write_trace(tmp_path / "t.json", launches)
    trace = read_trace(tmp_path / "t.json")
    rec = window([recorded(launches, 1), recorded(launches, 2)], launches)
    layout = join(trace, twins(replays=(rec,)))
    assert labels(layout, trace) == truth_labels(truth)
    # one thread's record missing: its launches are left to the kernels (unlabelled twins)
    layout = join(trace, twins(replays=(window([recorded(launches, 1)], launches),)))
    got = labels(layout, trace)
    assert {c: got[c] for c in truth if launches[c - 100].tid == 1} == \
        {c: truth_labels(truth)[c] for c in truth if launches[c - 100].tid == 1}
    assert all(got[c] == [None] * 3 for c in truth if launches[c - 100].tid == 2)
    assert any("thread 2: no replay recorded" in p for p in layout.report.replay_record_problems)


def test_uncertain_calls_at_the_edges(tmp_path):
    """Calls overlapping the profiler's start / stop may or may not be in the trace: the count
    of launches decides where it can, the launch times where they differ, else unlabelled."""
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    # an uncertain call before: the trace has 3 launches, the record 4 with 1 uncertain -> offset 1
    th = recorded(SEQ, 1, head=[5])
    assert labels(join(trace, twins(replays=(window([th], SEQ),))), trace) == truth_labels(truth)
    # uncertain at both ends, more calls than launches: the certain ones must be covered
    th = recorded(SEQ, 1, head=[5], tail=[5])
    assert (th.graphs, th.head_uncertain, th.tail_uncertain) == ((5, 6, 5, 6, 5), 1, 1)
    assert labels(join(trace, twins(replays=(window([th], SEQ),))), trace) == truth_labels(truth)
    # B, A, B then an uncertain A: the trace's 3 launches are calls 0-2 or 1-3. The first call
    # was uncertain too (it ran while the profiler started). Times recorded: the uncertain last
    # call ran 100 ms after the last launch, so only calls 0-2 fit.
    th = dataclasses.replace(recorded(SEQ, 1, tail=[5]), head_uncertain=1)
    assert labels(join(trace, twins(replays=(window([th], SEQ),))), trace) == truth_labels(truth)
    # ... without times both offsets fit and give different graphs: nothing is labelled
    th = dataclasses.replace(th, starts_ns=())
    layout = join(trace, twins(replays=(window([th], SEQ),)))
    assert all(v == [None] * 3 for v in labels(layout, trace).values())
    assert layout.report.unidentified_replays == {"twin_A | twin_B": 3}


def test_a_record_that_fits_no_order_is_not_used(tmp_path):
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    th = dataclasses.replace(recorded(SEQ, 1, times=False), graphs=(6, 5))  # 2 certain calls, 3 launches
    layout = join(trace, twins(replays=(window([th], SEQ),)))
    assert all(v == [None] * 3 for v in labels(layout, trace).values())
    assert any("no order fits" in p for p in layout.report.replay_record_problems)
    assert truth


def test_a_replay_of_a_graph_without_annotations_is_left_alone(tmp_path):
    """A graph captured without this package (logged as exec id 0), structurally A's twin."""
    launches = [Launch(5, 1, 1000), Launch(UNANNOTATED_GRAPH, 1, 2000)]
    write_trace(tmp_path / "t.json", launches)
    trace = read_trace(tmp_path / "t.json")
    only_a = AnnotationSet(graphs=(twin_graph(5, TWINS[5][1], "twin_A"),),
                           replays=(window([recorded(launches, 1)], launches),))
    layout = join(trace, only_a)
    assert labels(layout, trace) == {100: list(TWINS[5][1]), 101: [None] * 3}
    assert layout.report.unannotated_replays == 1 and layout.report.replay_graphs == {RECORDED: 1, UNANNOTATED: 1}
    from perfetto_graph_ann.join.summary import summary_lines

    note = [line for line in summary_lines(layout.report) if "of graphs without annotations" in line]
    assert len(note) == 1 and "garbage collected before the export" in note[0], note


def test_all_lanes_refused_for_graphs_the_registry_no_longer_holds(tmp_path):
    """``graph_lanes="all"`` with the replay record naming graphs that have no annotations (the
    live registry after the graph objects were collected) says so, and why, in its refusal."""
    from perfetto_graph_ann.errors import LaneOptionError
    from perfetto_graph_ann.join.lanes import unrecorded_graphs

    launches = [Launch(5, 1, 1000), Launch(6, 1, 2000), Launch(5, 1, 3000)]
    write_trace(tmp_path / "t.json", launches)
    trace = read_trace(tmp_path / "t.json")
    gone = AnnotationSet(replays=(window([recorded(launches, 1)], launches),))
    assert unrecorded_graphs(gone) == [5, 6]
    assert unrecorded_graphs(AnnotationSet(graphs=(twin_graph(5, TWINS[5][1]),), replays=gone.replays)) == [6]
    with pytest.raises(LaneOptionError, match=r"names replayed graphs with no annotations here \(graph ids 5, 6\)"
                                              r".*keep it alive until its profile is exported"):
        join(trace, gone, "all")
    plain_graph = [Launch(5, 1, 1000), Launch(UNANNOTATED_GRAPH, 1, 2000)]  # the record's 0 is no graph id
    write_trace(tmp_path / "u.json", plain_graph)
    with pytest.raises(LaneOptionError, match=r"\(graph id 5; graphs captured without this package\)"):
        join(read_trace(tmp_path / "u.json"), AnnotationSet(replays=(window([recorded(plain_graph, 1)], plain_graph),)),
             "all")
    with pytest.raises(LaneOptionError) as plain:  # no replay record: nothing to say about it
        join(trace, dataclasses.replace(gone, replays=None), "all")
    assert "replay record" not in str(plain.value)


def test_windows_of_other_processes_and_times_are_ignored(tmp_path):
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    wrong = dataclasses.replace(recorded(SEQ, 1), graphs=(5, 6, 5))
    other_pid = dataclasses.replace(window([wrong], SEQ), pid=PID + 1)
    earlier = dataclasses.replace(window([wrong], SEQ), start_ns=BASE_NS - 10**11, stop_ns=BASE_NS - 10**11 + 5)
    right = window([recorded(SEQ, 1)], SEQ)
    layout = join(trace, twins(replays=(other_pid, earlier, right)))
    assert labels(layout, trace) == truth_labels(truth)


def test_the_record_travels_in_both_sidecar_forms(tmp_path):
    """Offline: the saved JSON and sidecar give the same labels as the join in process."""
    truth = write_trace(tmp_path / "t.json", SEQ)
    ann = twins(calibrated=[5], replays=(window([recorded(SEQ, 1)], SEQ),))
    for name in ("s.pb", "s.json"):
        path = save_annotations(tmp_path / name, ann)
        back = load_annotations(path)
        assert back.replays == ann.replays
        trace = read_trace(tmp_path / "t.json")
        layout = join(trace, back)
        assert labels(layout, trace) == truth_labels(truth)


def test_convert_cli_labels_twins_from_the_saved_sidecar(tmp_path):
    import subprocess
    import sys

    truth = write_trace(tmp_path / "t.json", SEQ)
    save_annotations(tmp_path / "s.pb", twins(calibrated=[5], replays=(window([recorded(SEQ, 1)], SEQ),)))
    out = tmp_path / "t.out.json"
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(tmp_path / "t.json"),
                         "-a", str(tmp_path / "s.pb"), "-o", str(out)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(out.read_text())
    got: Dict[int, List[str]] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            got.setdefault(e["args"]["correlation"], []).append(e["args"].get("name"))
    assert got == truth_labels(truth)
    # the same without the record (an older sidecar): no wrong label, the ambiguity counted
    save_annotations(tmp_path / "old.pb", twins(calibrated=[5]))
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(tmp_path / "t.json"),
                         "-a", str(tmp_path / "old.pb"), "-o", str(tmp_path / "old.json")],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert "could not tell which of several graphs replayed" in cp.stderr or "twin_A | twin_B" in cp.stderr
    doc = json.loads((tmp_path / "old.json").read_text())
    assert not any("name" in e["args"] for e in doc["traceEvents"] if e.get("cat") == "kernel")


# ---- the log in the process ------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += 1_000
        return self.t


class Sess:
    def __init__(self, exec_id: int) -> None:
        self._exec_id = exec_id

    @property
    def exec_id(self) -> int:
        return self._exec_id


def fake_graph_class(calls: List):
    class CUDAGraph:
        def __init__(self, exec_id: Optional[int]):
            if exec_id is not None:
                self._pga_session = Sess(exec_id)

        def replay(self):
            calls.append(self)

    return CUDAGraph


def test_log_is_only_in_place_while_a_profiler_records():
    calls: List = []
    cls = fake_graph_class(calls)
    torch_replay = cls.replay
    log = ReplayLog(clock=Clock(), wall=lambda: 10**18)
    a, b, other = cls(5), cls(6), cls(None)
    a.replay()  # before: nothing logged, torch's own method
    assert cls.replay is torch_replay and not log.entries
    log.prepared(cls)
    assert cls.replay is not torch_replay and original_replay(cls) is torch_replay
    a.replay()  # warm-up: logged, then cut (ended before the start)
    t0 = log.clock()
    log.started(t0, log.clock())
    for g in (b, a, other, b):
        g.replay()
    t0 = log.clock()
    log.stopped(t0, log.clock())
    assert cls.replay is torch_replay  # back: replays cost nothing outside a profiler
    b.replay()
    (w,) = log.snapshot()
    (th,) = w.threads
    assert th.graphs == (6, 5, UNANNOTATED_GRAPH, 6) and (th.head_uncertain, th.tail_uncertain) == (0, 0)
    assert th.ident == threading.get_ident() and th.native_id == threading.get_native_id()
    assert len(calls) == 7 and w.pid is not None


def test_log_marks_other_threads_calls_at_the_edges_uncertain():
    log = ReplayLog(clock=Clock(), wall=lambda: 0)
    log.prepared(fake_graph_class([]))
    me = threading.get_ident()
    s0, s1, d0, d1 = 10_000_000, 10_001_000, 50_000_000, 50_001_000
    g = EDGE_GUARD_NS
    log.entries.extend([
        (99, 9, 5, s0 - g - 5_000, s0 - g - 2_000),  # other thread, ended well before the start: out
        (99, 9, 6, s0 - 3_000, s0 + 500),  # overlaps the start: uncertain
        (99, 9, 5, s1 + g + 1, s1 + g + 5_000),  # certain
        (99, 9, 6, d0 - 1_000, d0 + 1_000),  # overlaps the stop: uncertain
        (99, 9, 5, d1 + g + 10, d1 + g + 20),  # after: out
        (me, 1, 5, s0 - 3_000, s0 - 1_000),  # the starting thread itself: before its own start, out
        (me, 1, 6, s1 + 10, s1 + 20),  # right after its start: certain
    ])
    log._start = (s0, s1, me)
    log.stopped(d0, d1)
    (w,) = log.snapshot()
    by = {t.ident: t for t in w.threads}
    assert by[99].graphs == (6, 5, 6) and (by[99].head_uncertain, by[99].tail_uncertain) == (1, 1)
    assert by[me].graphs == (6,) and (by[me].head_uncertain, by[me].tail_uncertain) == (0, 0)


@pytest.mark.usefixtures("capture_path")
def test_a_replay_that_raises_drops_its_thread_from_the_window():
    calls: List = []

    class Boom:
        def replay(self):
            raise RuntimeError("launch failed")

    log = ReplayLog()
    log.prepared(Boom)
    log.started(log.clock(), log.clock())
    with pytest.raises(RuntimeError, match="launch failed"):
        Boom().replay()
    log.stopped(log.clock(), log.clock())
    assert log.snapshot()[0].threads == ()
    assert not calls


def test_log_threads_record_their_own_calls():
    calls: List = []
    cls = fake_graph_class(calls)
    log = ReplayLog()
    log.prepared(cls)
    log.started(log.clock(), log.clock())
    graphs = {i: cls(10 + i) for i in range(4)}
    done = threading.Barrier(4)

    def work(i):
        done.wait()
        for _ in range(50):
            graphs[i].replay()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    log.stopped(log.clock(), log.clock())
    (w,) = log.snapshot()
    got = sorted(t.graphs for t in w.threads)
    assert got == [(10 + i,) * 50 for i in range(4)]
    assert len({t.native_id for t in w.threads}) == 4


@pytest.mark.usefixtures("capture_path")
def test_both_wrappers_log_the_same_calls(capture_path):
    """The compiled wrapper (``_fastpath.ReplayLogger``) and the Python one record the same
    calls, threads and graphs; exec ids come from the graph's session (0 without one)."""
    from perfetto_graph_ann.capture import fastpath

    calls: List = []
    cls = fake_graph_class(calls)
    torch_replay = cls.replay
    log = ReplayLog()
    log.prepared(cls)
    compiled = type(cls.__dict__["replay"]).__name__ == "ReplayLogger"
    assert compiled == (capture_path == "compiled" and fastpath.module() is not None)
    assert original_replay(cls) is torch_replay
    log.started(log.clock(), log.clock())
    a, b, none = cls(5), cls(6), cls(None)
    lazy = cls(None)
    lazy._pga_session = Sess(9)
    lazy._pga_session._exec_id = None  # read through the session's exec_id property
    lazy._pga_session.__class__ = type("Lazy", (), {"_exec_id": None, "exec_id": property(lambda s: 9)})
    for g in (a, b, none, lazy, a):
        assert g.replay() is None
    worker = threading.Thread(target=lambda: b.replay())
    worker.start()
    worker.join()
    log.stopped(log.clock(), log.clock())
    assert cls.replay is torch_replay
    (w,) = log.snapshot()
    by = {t.ident: t for t in w.threads}
    assert by[threading.get_ident()].graphs == (5, 6, UNANNOTATED_GRAPH, 9, 5)
    assert by[threading.get_ident()].native_id == threading.get_native_id()
    assert by[worker.ident].graphs == (6,) and by[worker.ident].native_id == worker.native_id
    assert len(calls) == 6


# ---- SQL: graph_ann_graph_replay says which graph, or which candidates ---------------------

@requires_portable
def test_sql_graph_replay_names_the_graph_or_its_candidates(tmp_path):
    from perfetto_graph_ann.pipeline.convert import convert
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.session import open_trace

    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    cases = {"record": twins(replays=(window([recorded(SEQ, 1)], SEQ),)), "none": twins()}
    for name, ann in cases.items():
        out = tmp_path / f"{name}.pftrace"
        convert(trace, out, layout=join(trace, ann))
        with open_trace(out, engine="portable") as s:
            rows = metrics.graph_replays(s).sort_values("ts")
        if name == "record":
            assert list(rows.graph_name) == [TWINS[truth[c]][0] for c in sorted(truth)]
            assert list(rows.replay) == [0, 0, 1] and rows.graph_candidates.isna().all()
        else:
            assert list(rows.graph_candidates) == ["twin_A | twin_B"] * 3
            assert rows.graph_id.isna().all() and rows.replay.isna().all() and rows.graph_name.isna().all()
        assert list(rows.kernel_count) == [3, 3, 3]


def test_a_window_without_the_traces_threads_is_not_its_window(tmp_path):
    """Profiler windows of the same process with no replay of the trace's threads (an eager
    profile just before) must not hide the window that has them."""
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    eager = dataclasses.replace(window([], SEQ), start_ns=BASE_NS - 10_000, stop_ns=BASE_NS + 500)
    layout = join(trace, twins(replays=(eager, window([recorded(SEQ, 1)], SEQ))))
    assert labels(layout, trace) == truth_labels(truth)
    assert layout.report.replay_graphs == {RECORDED: 3}


def test_the_traces_pids_are_found_once_per_join(tmp_path, monkeypatch):
    """The identity check and the launch identities both need the pids that launched graphs (a
    pass over every event): the join finds them once, and the labels are those of a join that
    finds them for each."""
    from perfetto_graph_ann.annotations.model import CaptureIdentity
    from perfetto_graph_ann.join import identity, launches

    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    ann = dataclasses.replace(twins(calibrated=[5], replays=(window([recorded(SEQ, 1)], SEQ),)),
                              capture=CaptureIdentity(pid=PID, device_names={0: "NVIDIA H200"}))
    calls = []
    real = identity.trace_pids

    def counted(t, *rest):
        calls.append(t)
        return real(t, *rest)

    monkeypatch.setattr(identity, "trace_pids", counted)
    monkeypatch.setattr(launches, "trace_pids", counted)
    layout = join(trace, ann)
    assert len(calls) == 1
    assert labels(layout, trace) == truth_labels(truth)
    assert layout.report.replay_graphs == {RECORDED: 3}
    assert list(layout.report.identity_checked.values()) == [["pid", "device names"]]


def _previous_profile(gap_ns: int, graph: int = 9) -> ReplayWindow:
    """The window of a profile taken just before SEQ's (a quick export between the two, short
    profiler cycles): the same thread replayed ``graph`` three times, its calls ``gap_ns``
    before SEQ's launches, the window ending ~``gap_ns`` before the first of them."""
    th = recorded(SEQ, 1)
    th = dataclasses.replace(th, graphs=(graph,) * 3, starts_ns=tuple(s - gap_ns for s in th.starts_ns))
    first = launch_wall(SEQ[0])
    return ReplayWindow(PID, first - gap_ns - 1_000_000, first - gap_ns + 3_000_000, (th,))


@pytest.mark.parametrize("graph", [9, 5], ids=["a graph no longer annotated", "an annotated graph"])
def test_the_window_of_a_profile_just_before_is_not_this_traces(tmp_path, graph):
    """Seen on the H200 (session 26): two profiles 20 ms apart, the first one's graph freed since
    (no longer annotated). Its window fits the second trace's launches within the time slack, and
    its unknown graph made every replay of the second trace unidentified. The window that holds
    the launches is the trace's; the one whose span ends 20 ms before them is left out."""
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    right = window([recorded(SEQ, 1)], SEQ)
    for order in ((_previous_profile(20_000_000, graph), right), (right, _previous_profile(20_000_000, graph))):
        layout = join(trace, twins(replays=order))
        assert labels(layout, trace) == truth_labels(truth)
        assert layout.report.replay_graphs == {RECORDED: 3} and not layout.report.unidentified_replays


@pytest.mark.parametrize("gap_ns", [4_000_000, 9_900_000], ids=["4 ms", "9.9 ms"])
@pytest.mark.parametrize("graph", [9, 5], ids=["a graph no longer annotated", "an annotated graph"])
def test_a_window_whose_calls_cannot_be_the_launches_is_not_this_traces(tmp_path, graph, gap_ns):
    """Seen on the H100 (session 42): profiles ~12 ms apart (tests in one process), the previous
    window's span 9.9 ms before this trace's launches, inside the 10 ms its span is given. Its
    calls ran 10 ms before the launches, so they cannot be them: a thread's launch lies between
    its call's start and the next call's. Such a window is left out, whether its graph is still
    annotated (a twin: the replays would stay unknown) or freed (every replay left to the
    kernels)."""
    truth = write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    right = window([recorded(SEQ, 1)], SEQ)
    shifted = dataclasses.replace(right, start_ns=right.start_ns + 5_000_000, stop_ns=right.stop_ns + 5_000_000)
    for windows in ((_previous_profile(gap_ns, graph), right), (right, _previous_profile(gap_ns, graph)),
                    (_previous_profile(20_000_000, graph), shifted)):
        layout = join(trace, twins(replays=windows))
        assert labels(layout, trace) == truth_labels(truth)
        assert layout.report.replay_graphs == {RECORDED: 3} and not layout.report.unidentified_replays


def test_a_launch_outside_its_calls_bracket_leaves_the_window_out(tmp_path):
    """The one window there is, its second call recorded 2 ms before the first launch (the order
    of calls and launches disagrees beyond the clocks' slack): not used, the twins stay unknown."""
    write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    th = recorded(SEQ, 1)
    starts = list(th.starts_ns)
    starts[1] = launch_wall(SEQ[0]) - 2_000_000
    bad = window([dataclasses.replace(th, starts_ns=tuple(starts))], SEQ)
    layout = join(trace, twins(replays=(bad,)))
    assert not any(name for names in labels(layout, trace).values() for name in names)
    assert sum(layout.report.unidentified_replays.values()) == 3
    assert any("no profiler window" in p for p in layout.report.replay_record_problems)


def test_windows_the_clocks_cannot_tell_apart_leave_the_replays_unknown(tmp_path):
    """Where two windows' calls both bracket the launches within the clocks' slack (a previous
    window's calls 0.5 ms before this one's), neither is chosen: a launch they disagree on stays
    unidentified."""
    write_trace(tmp_path / "t.json", SEQ)
    trace = read_trace(tmp_path / "t.json")
    right = window([recorded(SEQ, 1)], SEQ)
    for windows in ((_previous_profile(500_000), right), (right, _previous_profile(500_000))):
        layout = join(trace, twins(replays=windows))
        assert not any(name for names in labels(layout, trace).values() for name in names)
        assert sum(layout.report.unidentified_replays.values()) == 3


H100_WINDOWS = Path(__file__).parent / "data" / "h100_windows"


def test_profiles_12_ms_apart_on_the_h100_label_every_replay():
    """The recorded case (tests/data/h100_windows/README.md): every GPU event of the three replays
    gets its node's scope, the graph known from the record; the truth is the capture's order."""
    trace = read_trace(str(H100_WINDOWS / "twelve_ms_apart.trace.json.gz"))
    ann = load_annotations(str(H100_WINDOWS / "twelve_ms_apart.annotations.json.gz"))
    assert len(ann.replays) == 4
    layout = join(trace, ann)
    got = {c: names for c, names in labels(layout, trace).items() if c in {e.correlation for e in trace.events
                                                                         if e.name == "cudaGraphLaunch"}}
    assert list(got.values()) == [["scale", "copy", "fill", "fill"]] * 3
    assert layout.report.replay_graphs == {RECORDED: 3} and not layout.report.unidentified_replays


@st.composite
def _two_windows(draw):
    """One thread's calls in two profiler windows, the first ending ``sep`` before the second
    begins, and the second window's launches as a trace shows them: each after its call's start
    and before the next call's, on a clock ``skew`` apart."""
    n = draw(st.integers(2, 6))
    gaps = draw(st.lists(st.integers(20_000, 30_000_000), min_size=n, max_size=n))
    sep = draw(st.integers(2_500_000, 50_000_000))
    skew = draw(st.integers(-200_000, 200_000))
    starts2 = [BASE_NS + 10_000_000_000]
    for g in gaps[:-1]:
        starts2.append(starts2[-1] + g)
    delays = [draw(st.integers(0, min(3_000_000, g - 1_000))) for g in gaps]
    launches = [s + d + skew for s, d in zip(starts2, delays)]
    starts1 = [starts2[0] - sep]
    for g in reversed(draw(st.lists(st.integers(20_000, 30_000_000), min_size=n - 1, max_size=n - 1))):
        starts1.insert(0, starts1[0] - g)
    return starts1, starts2, launches


@settings(max_examples=200, deadline=None)
@given(_two_windows())
def test_only_the_window_whose_calls_hold_the_launches_fits(case):
    """For any such pair (as many calls each, so counts cannot tell them apart): the window whose
    calls made the launches fits them by time, the earlier one never does (2.5 ms or more apart:
    the order slack and its drift allowance below that)."""
    starts1, starts2, launches = case
    evs = [TraceEvent(index=i, ph="X", cat="cuda_runtime", name="cudaGraphLaunch", pid=PID, tid=1,
                      ts_ns=t - BASE_NS, dur_ns=5_000, args={"correlation": 100 + i}) for i, t in enumerate(launches)]

    def win(starts, graph):
        th = ReplayThread(ident=0x7F00_DEAD_0000, native_id=1, graphs=(graph,) * len(starts), head_uncertain=0,
                          tail_uncertain=0, starts_ns=tuple(starts))
        return ReplayWindow(PID, starts[0] - 1_000, starts[-1] + 5_000_000, (th,))

    got, _ = _fit_window(win(starts2, 5), {1: evs}, BASE_NS, lambda corr, graph: True)
    assert got == {100 + i: frozenset({5}) for i in range(len(evs))}
    assert _fit_window(win(starts1, 6), {1: evs}, BASE_NS, lambda corr, graph: True) == (None, [])

