"""Collective annotations on CPU: eager field names and types, lanes per group, auto-wrapping."""
from __future__ import annotations

import gzip
import json
import types

import pytest
from support.capture_fakes import FakeCuda
from support.join_expect import fixture_trace

from perfetto_graph_ann.capture import collectives as C
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import Registry

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = 0x70
DEFAULT_PG = C.GroupInfo("0", "default_pg", (0, 1))


class FakeTensor:
    def __init__(self, n, dtype="torch.float32"):
        self.n, self.dtype = n, dtype

    def numel(self):
        return self.n


def eager_nccl_args():
    with gzip.open(fixture_trace("allreduce_eager_rank0"), "rt") as f:
        evs = json.load(f)["traceEvents"]
    return next(e["args"] for e in evs if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}))


def test_fields_equal_the_eager_trace_with_the_same_types():
    eager = eager_nccl_args()
    t = FakeTensor(eager["In msg nelems"])
    got = C.collective_fields("all_reduce", t, t, DEFAULT_PG)
    expected = {k: eager[k] for k in got}
    assert got == expected
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}
    assert set(got) == {"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size",
                        "Out split size", "Process Group Name", "Process Group Description", "Process Group Ranks"}


@pytest.mark.parametrize("dtype,name", [("torch.float32", "Float"), ("torch.bfloat16", "BFloat16"),
                                        ("torch.float16", "Half"), ("torch.int64", "Long"), ("torch.uint8", "Byte"),
                                        ("torch.float8_e4m3fn", "Float8_e4m3fn"), ("torch.newtype", "newtype")])
def test_scalar_type_names(dtype, name):
    assert C.scalar_type_name(dtype) == name


def test_fields_per_collective():
    g4 = C.GroupInfo("3", "tp", (0, 2, 4, 6))
    x, out = FakeTensor(100, "torch.bfloat16"), FakeTensor(400, "torch.bfloat16")
    f = C.collective_fields("all_gather_into_tensor", x, out, g4)
    assert (f["Collective name"], f["In msg nelems"], f["Out msg nelems"], f["Group size"], f["dtype"]) == \
        ("_allgather_base", 100, 400, 4, "BFloat16")
    assert f["Process Group Ranks"] == "[0, 2, 4, 6]" and f["Process Group Description"] == "tp"
    f = C.collective_fields("all_gather", x, [FakeTensor(100, "torch.bfloat16")] * 4, g4)
    assert (f["Collective name"], f["Out msg nelems"]) == ("all_gather", 400)
    f = C.collective_fields("all_to_all_single", x, x, g4, [10, 20, 30, 40], [25, 25, 25, 25])
    assert (f["Collective name"], f["In split size"], f["Out split size"]) == ("all_to_allv", "[10, 20, 30, 40]",
                                                                                "[25, 25, 25, 25]")
    # without splits too: torch 2.11's eager trace on 2 H200s said "all_to_allv" (tests/gpu/RESULTS.md)
    f = C.collective_fields("all_to_all_single", x, x, g4)
    assert (f["Collective name"], f["In split size"], f["Out split size"]) == ("all_to_allv", "[]", "[]")
    f = C.collective_fields("barrier", None, None, g4)  # eager: 0 elements of Byte
    assert (f["Collective name"], f["In msg nelems"], f["Out msg nelems"], f["dtype"]) == ("barrier", 0, 0, "Byte")


class FakeDist(types.SimpleNamespace):
    """A torch.distributed-like module whose collectives 'launch' one kernel on the capture."""


def make_dist(cuda, calls):
    def all_reduce(tensor, op=None, group=None, async_op=False):
        calls.append("all_reduce")
        cuda.launch(STREAM, "ncclDevKernel_AllReduce_Sum_f32")

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                          async_op=False):
        calls.append("all_to_all_single")
        cuda.launch(STREAM, "ncclDevKernel_SendRecv")

    def broadcast(tensor, src, group=None, async_op=False):
        calls.append("broadcast")
        cuda.launch(STREAM, "ncclDevKernel_Broadcast")

    return FakeDist(all_reduce=all_reduce, all_to_all_single=all_to_all_single, broadcast=broadcast)


@pytest.fixture
def capture_env(monkeypatch):
    cuda, reg = FakeCuda(), Registry()
    monkeypatch.setattr(C, "REGISTRY", reg)
    groups = {None: DEFAULT_PG, "tp": C.GroupInfo("5", "tp_group", (0, 1, 2, 3))}
    with C.group_resolver(lambda g: groups[g]):
        cuda.begin_capture(STREAM)
        sess = S.CaptureSession(cuda, STREAM, reg)
        sess.start()
        S.push(sess)
        try:
            yield cuda, sess, reg
        finally:
            S.pop(sess)


def test_auto_wrapping_annotates_collectives_only_during_capture(capture_env):
    cuda, sess, reg = capture_env
    calls = []
    dist = make_dist(cuda, calls)
    originals = dict(vars(dist))
    C.install([dist])
    try:
        assert dist.all_reduce is not originals["all_reduce"] and dist.all_reduce.__wrapped__ is originals["all_reduce"]
        cuda.launch(STREAM, "gemm")
        dist.all_reduce(FakeTensor(1048576))
        dist.all_to_all_single(FakeTensor(40), FakeTensor(40), [5, 35], [20, 20], group="tp")
        dist.broadcast(FakeTensor(8, "torch.int64"), 0, group="tp")
    finally:
        C.uninstall()
    assert dict(vars(dist)) == originals  # restored
    assert calls == ["all_reduce", "all_to_all_single", "broadcast"]
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    rec = sess.record
    k = {n.kernel: n.annotation for n in rec.nodes}
    assert k["gemm"] == {}
    ar = k["ncclDevKernel_AllReduce_Sum_f32"]
    assert ar["Collective name"] == "allreduce" and ar["In msg nelems"] == 1048576 and ar["Group size"] == 2
    a2a = k["ncclDevKernel_SendRecv"]
    assert (a2a["Collective name"], a2a["In split size"], a2a["Out split size"], a2a["Process Group Name"]) == \
        ("all_to_allv", "[20, 20]", "[5, 35]", "5")
    bc = k["ncclDevKernel_Broadcast"]
    assert bc["dtype"] == "Long" and bc["Process Group Description"] == "tp_group"
    # one lane per process group, labelled by description and the first collective seen on it
    assert ar["stream"] == 60 and a2a["stream"] == bc["stream"] == 61
    assert reg.lanes.snapshot() == {60: "default_pg (all_reduce)", 61: "tp_group (all_to_all_single)"}
    assert C.get_stream_for_pg(DEFAULT_PG) == 60 and C.get_stream_for_pg("5") == 61 and C.get_stream_for_pg("new") == 62


def test_wrappers_are_inert_outside_capture():
    calls = []
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)  # the fake driver accepts launches; no session is active
    dist = make_dist(cuda, calls)
    C.install([dist])
    try:
        with C.group_resolver(lambda g: pytest.fail("no group lookup outside capture")):
            dist.all_reduce(FakeTensor(4))
    finally:
        C.uninstall()
    assert calls == ["all_reduce"]


def test_install_is_reference_counted_and_switchable(capture_env):
    cuda, sess, reg = capture_env
    dist = make_dist(cuda, [])
    orig = dist.all_reduce
    C.install([dist])
    C.install([dist])  # nested capture
    assert dist.all_reduce is not orig
    C.uninstall()
    assert dist.all_reduce is not orig  # the outer capture is still running
    C.uninstall()
    assert dist.all_reduce is orig
    C.install([dist])
    wrapper = dist.all_reduce
    C.uninstall()
    C.install([dist])
    assert dist.all_reduce is wrapper  # wrappers are reused (install stays cheap)
    C.uninstall()


def test_annotate_collective_context_manager(capture_env):
    cuda, sess, reg = capture_env
    with C.annotate_collective("allreduce", FakeTensor(6), FakeTensor(6)):
        cuda.launch(STREAM, "nccl")
    sess.finish_capture()
    sess.bind_exec(cuda.instantiate(cuda.end_capture(STREAM)))
    rec = sess.record
    ann = rec.nodes[0].annotation
    assert ann["Collective name"] == "allreduce" and ann["In msg nelems"] == 6
    assert reg.lanes.snapshot()[ann["stream"]] == "default_pg (all_reduce)"
