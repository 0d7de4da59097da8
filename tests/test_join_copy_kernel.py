"""A graph's device copy replayed as the driver's copy kernel (``memcpy128``) is joined to its
memcpy node, by every strategy, and never to anything else.

On driver 13.0 a ``buf.copy_(y)`` captured by ``torch.cuda.graph`` replayed as the kernel
``memcpy128`` (category ``kernel``) in ``benchmarks/gpu/probe_memcpy_kinds.py``, where the same copy
after an eager copy replayed as ``Memcpy DtoD`` (``gpu_memcpy``). The recorded H100 traces of
tests/data/h100_windows (scopes scale, copy, fill, fill; the copy a ``gpu_memcpy`` event) are
rewritten here with the copy as that kernel. The expected labels are the capture's order.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from support.join_expect import fixture_capture, fixture_trace
from perfetto_graph_ann.annotations.capture_record import read_capture_record
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.annotations.model import GraphRecord, NodeRecord
from perfetto_graph_ann.errors import AnnotationMismatchError
from perfetto_graph_ann.join import join
from perfetto_graph_ann.join.match import GraphFit
from perfetto_graph_ann.pipeline.convert import convert_file
from perfetto_graph_ann.read.kineto import read_trace
from perfetto_graph_ann.read.model import TraceEvent

DATA = Path(__file__).parent / "data" / "h100_windows"
TRUTH = ["scale", "copy", "fill", "fill"]
SCALE_KERNEL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulF"


def _rewrite(name: str, dst: Path, copy_as: str = "memcpy128", scale_as: str = "") -> Path:
    """The recorded trace ``name`` with its copy written as the kernel ``copy_as`` (grid and block
    of a copy kernel) and, with ``scale_as``, its ``x * 2`` kernel renamed."""
    doc = json.loads(gzip.decompress((DATA / f"{name}.trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":
            e.update(cat="kernel", name=copy_as)
            e["args"].update(grid=[1024, 1, 1], block=[128, 1, 1])
        elif scale_as and e.get("cat") == "kernel" and "MulFunctor" in e.get("name", ""):
            e["name"] = scale_as
    dst.write_text(json.dumps(doc))
    return dst


def _replay_args(layout, trace):
    """Each replay's GPU events in start order: (name arg, join strategy, ambiguous)."""
    launches = {e.correlation for e in trace.events if e.name == "cudaGraphLaunch"}
    out = {}
    for e in sorted((e for e in trace.events if e.is_gpu_work and e.correlation in launches), key=lambda e: e.ts_ns):
        p = layout.placements.get(e.index)
        out.setdefault(e.correlation, []).append(
            (p.args.get("name"), p.args.get("join"), p.args.get("join_ambiguous", False)) if p else (None, None, False))
    return list(out.values())


def test_calibrated_graph_labels_the_copy_kernel_by_its_position(tmp_path):
    trace = read_trace(str(_rewrite("calibrated_copy", tmp_path / "t.json")))
    layout = join(trace, load_annotations(str(DATA / "calibrated_copy.annotations.json.gz")))
    got = _replay_args(layout, trace)
    assert got == [[(n, "calibrated", False) for n in TRUTH]] * 3
    assert layout.report.unmatched == 0


def test_uncalibrated_graph_labels_the_copy_kernel_structurally(tmp_path):
    """The graph the replay record names, no calibration: every event paired by signature, the
    copy kernel with the one memcpy node (once refused as a replay of no annotated graph)."""
    trace = read_trace(str(_rewrite("twelve_ms_apart", tmp_path / "t.json")))
    layout = join(trace, load_annotations(str(DATA / "twelve_ms_apart.annotations.json.gz")))
    assert _replay_args(layout, trace) == [[(n, "structural", False) for n in TRUTH]] * 3
    assert layout.report.unmatched == 0 and not layout.report.unidentified_replays


def test_without_a_replay_record_the_graph_is_known_from_its_kernels(tmp_path):
    """No replay record: the replay is given to the only graph its GPU work fits (the copy kernel
    counted as the memcpy node it may be), then paired as above."""
    trace = read_trace(str(_rewrite("twelve_ms_apart", tmp_path / "t.json")))
    ann = dataclasses.replace(load_annotations(str(DATA / "twelve_ms_apart.annotations.json.gz")), replays=None)
    layout = join(trace, ann)
    assert _replay_args(layout, trace) == [[(n, "structural", False) for n in TRUTH]] * 3


@pytest.mark.parametrize("kernel", ["memcpy", "memcpy128_kernel", "void at::native::elementwise_kernel<128, 4>()"])
def test_another_kernel_where_the_copy_was_is_no_copy(kernel, tmp_path):
    """A kernel not named as the driver's copy kernel is no replay of the memcpy node: the replay
    fits no annotated graph, and the join refuses as before (forced: nothing labelled)."""
    trace = read_trace(str(_rewrite("twelve_ms_apart", tmp_path / "t.json", copy_as=kernel)))
    ann = load_annotations(str(DATA / "twelve_ms_apart.annotations.json.gz"))
    with pytest.raises(AnnotationMismatchError):
        join(trace, ann)
    layout = join(trace, ann, force=True)
    assert all(name is None for replay in _replay_args(layout, trace) for name, _, _ in replay)


def test_a_graph_with_a_kernel_of_that_name_pairs_no_copy_kernel(tmp_path):
    """The graph's own ``x * 2`` kernel named ``memcpy128`` as well: an event of that name could be
    either node, so the copy kernel is paired with neither and the replay is not labelled."""
    trace = read_trace(str(_rewrite("twelve_ms_apart", tmp_path / "t.json", scale_as="memcpy128")))
    ann = load_annotations(str(DATA / "twelve_ms_apart.annotations.json.gz"))
    g = ann.graphs[0]
    nodes = tuple(dataclasses.replace(n, kernel="memcpy128") if (n.kernel or "").startswith(SCALE_KERNEL) else n
                  for n in g.nodes)
    assert sum(n.kernel == "memcpy128" for n in nodes) == 1
    ann = dataclasses.replace(ann, graphs=(dataclasses.replace(g, nodes=nodes),) + ann.graphs[1:])
    layout = join(trace, ann, force=True)
    assert all(name is None for replay in _replay_args(layout, trace) for name, _, _ in replay)


def test_two_copies_as_kernels_are_ambiguous():
    """Two memcpy nodes and two copy kernels in each replay of the H200 two-branch fixture (no
    calibration): both paired, in order, and marked ambiguous (their order on the GPU is not
    the capture's, as for any signature two nodes share)."""
    trace = read_trace(fixture_trace("two_branch"))
    ann = read_capture_record(fixture_capture("two_branch"))
    g = ann.graphs[0]
    base = max(n.key for n in g.nodes) + 1
    copies = tuple(NodeRecord(key=base + i, type="memcpy", annotation={"name": f"copy{i}"}) for i in range(2))
    plain = tuple(dataclasses.replace(n, stream=None, ordinal=None) for n in g.nodes)
    ann = dataclasses.replace(ann, graphs=(GraphRecord(g.exec_id, plain + copies),))
    events = list(trace.events)
    firsts = {}
    for e in trace.events:
        if e.is_gpu_work and e.correlation is not None:
            firsts.setdefault(e.correlation, e)
    added = []
    for corr, k in firsts.items():
        for i in range(2):
            idx = len(events)
            events.append(TraceEvent(idx, "X", "kernel", "memcpy128", k.pid, 7, k.ts_ns - 3000 + 1000 * i, 500,
                                     {"device": 0, "stream": 7, "correlation": corr, "grid": [64, 1, 1],
                                      "block": [128, 1, 1]}))
            added.append(idx)
    layout = join(dataclasses.replace(trace, events=events), ann)
    got = [(layout.placements[i].args["name"], layout.placements[i].args["join"],
            layout.placements[i].args.get("join_ambiguous")) for i in added]
    assert got == [("copy0", "structural", True), ("copy1", "structural", True)] * len(firsts)


def test_the_graph_fit_counts_a_copy_kernel_as_the_memcpy_node_it_may_be(tmp_path):
    """The fit that lists the graphs a replay may be (a superset is safe, a graph left out is
    not): a replay with the copy kernel fits the graph with the memcpy node; one with another
    kernel there does not."""
    ann = load_annotations(str(DATA / "twelve_ms_apart.annotations.json.gz"))
    for copy_as, fits in (("memcpy128", True), ("memcpy", False)):
        trace = read_trace(str(_rewrite("twelve_ms_apart", tmp_path / f"{copy_as}.json", copy_as=copy_as)))
        corr = next(e.correlation for e in trace.events if e.name == "cudaGraphLaunch")
        events = [e for e in trace.events if e.is_gpu_work and e.correlation == corr]
        assert len(events) == 4
        assert GraphFit().fits(events, ann.graphs[0]) is fits


def test_convert_in_two_passes_labels_the_copy_kernel(tmp_path):
    """``convert`` to ``.pftrace`` joins on the light events of its first pass: the copy kernel
    gets its node there too (the layout the writer draws)."""
    src = _rewrite("twelve_ms_apart", tmp_path / "t.json")
    done = convert_file(str(src), str(tmp_path / "t.pftrace"), [str(DATA / "twelve_ms_apart.annotations.json.gz")])
    assert done.layout.report.unmatched == 0
    trace = read_trace(str(src))
    copies = [e.index for e in trace.events if e.name == "memcpy128"]
    assert len(copies) == 3
    assert [done.layout.placements[i].args["name"] for i in copies] == ["copy"] * 3
