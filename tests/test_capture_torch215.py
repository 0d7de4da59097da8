"""The hand-off to torch 2.15's own graph annotations, on a fake of its module surface.

``torch215_fake`` reproduces torch 2.15.0's names, signatures and what each call records
(``mark_stream`` and ``get_stream_for_pg`` only in the private module). These tests check
that ``pga.graph``, ``mark_kernels``, ``mark_stream``, ``annotate_collective`` and the
automatic collective wrappers reach torch with the right arguments, that the annotations
torch records are what ours would be, and that a torch without the entry points is named.
"""
from __future__ import annotations

import inspect

import pytest
from support.torch215_fake import FakeTorch215, Stream, fake_distributed

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import backends, collectives, torch_native
from perfetto_graph_ann.capture.collectives import GroupInfo
from perfetto_graph_ann.errors import CaptureError

GROUP = GroupInfo("0", "default_pg", (0, 1))
EAGER_ALLREDUCE = {  # what an eager NCCL kernel carries for all_reduce of 1024 floats over 2 ranks
    "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
    "dtype": "Float", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
    "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]",
}


class _TorchBackend:
    """Stands in for the probed choice: torch's own backend."""

    name = backends.TORCH


class Tensor:
    dtype = "torch.float32"

    def numel(self):
        return 1024


@pytest.fixture
def fake(monkeypatch):
    f = FakeTorch215().install(monkeypatch)
    torch_native.forget()
    with backends.use(_TorchBackend()), collectives.group_resolver(lambda g: GROUP):
        yield f
    torch_native.forget()


def test_probe_finds_the_private_entry_points(fake):
    assert torch_native.probe() == (True, ())
    found = torch_native.entry_points()
    assert found["mark_stream"] is fake.private.mark_stream  # 2.15 has it only there
    assert found["get_stream_for_pg"] is fake.private.get_stream_for_pg
    assert found["mark_kernels"] is fake.public.mark_kernels
    assert not hasattr(fake.public, "mark_stream")  # the AttributeError the old hand-off hit


def test_signatures_are_torchs(fake):
    for ours, theirs in ((pga.mark_kernels, fake.private.mark_kernels), (pga.mark_stream, fake.private.mark_stream)):
        p_ours = [(p.name, p.kind, p.default) for p in inspect.signature(ours).parameters.values()]
        p_theirs = [(p.name, p.kind, p.default) for p in inspect.signature(theirs).parameters.values()]
        assert p_ours == p_theirs
    with pytest.raises(TypeError):
        pga.mark_kernels("x", False)  # backward is keyword-only, as in torch


def test_graph_enables_torchs_recording(fake):
    g = fake.torch.cuda.CUDAGraph()
    with pga.graph(g):
        assert fake.enabled and torch_native.capturing()
    assert not torch_native.capturing()
    assert fake.graph_kwargs == [{"pool": None, "stream": None, "capture_error_mode": "global",
                                  "enable_annotations": True, "annotation_config": None}]


@pytest.mark.parametrize("kwargs,backward", [({}, True), ({"backward": False}, False), ({"backward": True}, True)])
def test_mark_kernels_reaches_torch_with_backward(fake, kwargs, backward):
    with pga.graph(fake.torch.cuda.CUDAGraph()):
        with pga.mark_kernels("attention", **kwargs):
            key = fake.launch("softmax")
    assert fake.calls_to("mark_kernels") == [(("attention",), {"backward": backward})]
    assert dict(pga.get_kernel_annotations()) == {key: [{"name": "attention"}]}


def test_mark_stream_reaches_torch_and_records_name_and_stream(fake):
    side = Stream()
    with pga.graph(fake.torch.cuda.CUDAGraph()):
        with pga.mark_stream(side, "left_projection") as s:
            assert s is side and fake.torch.cuda.current_stream() is side
            left = fake.launch("gemm")
        current = fake.torch.cuda.current_stream()
        with pga.mark_stream(current, "combine"):  # the current stream: no lane, no switch
            assert fake.torch.cuda.current_stream() is current
            combine = fake.launch("add")
    assert fake.calls_to("mark_stream") == [((side, "left_projection"), {}), ((current, "combine"), {})]
    assert dict(pga.get_kernel_annotations()) == {left: [{"name": "left_projection", "stream": 60}],
                                                  combine: [{"name": "combine"}]}


def test_annotate_collective_goes_through_torchs_mark_kernels(fake):
    with pga.graph(fake.torch.cuda.CUDAGraph(), annotate_collectives=False):
        with pga.annotate_collective("all_reduce", Tensor(), Tensor(), group="pg"):
            key = fake.launch("ncclDevKernel_AllReduce")
    lane = 60
    assert fake.calls_to("get_stream_for_pg") == [(("0",), {})]
    assert fake.calls_to("mark_kernels") == [(({**EAGER_ALLREDUCE, "stream": lane},), {"backward": False})]
    assert dict(pga.get_kernel_annotations()) == {key: [{**EAGER_ALLREDUCE, "stream": lane}]}
    assert pga.get_stream_for_pg("0") == lane  # torch's allocator, shared with mark_stream


def test_collectives_are_annotated_automatically_on_torchs_backend(fake, monkeypatch):
    dist = fake_distributed(fake, monkeypatch)
    original = dist.all_reduce
    side = Stream()
    with pga.graph(fake.torch.cuda.CUDAGraph()):
        with pga.mark_stream(side, "compute"):  # takes lane 60 first: the group gets 61
            fake.launch("gemm")
        dist.all_reduce(Tensor())
    assert dist.all_reduce is original  # unwrapped after the capture
    nccl = [ann for kernel, _, ann in fake.launched if kernel.startswith("ncclDevKernel")]
    assert nccl == [{**EAGER_ALLREDUCE, "stream": 61}]
    dist.all_reduce(Tensor())  # outside a capture: nothing asked of torch
    assert len(fake.calls_to("get_stream_for_pg")) == 1


def test_a_torch_without_the_entry_points_is_named(monkeypatch):
    FakeTorch215(drop=("mark_stream", "get_stream_for_pg")).install(monkeypatch)
    torch_native.forget()
    try:
        available, lost = torch_native.probe()
        assert available is True and lost == ("mark_stream", "get_stream_for_pg")
        with pytest.raises(CaptureError) as info:
            torch_native.entry_points()
        msg = str(info.value)
        assert "torch 2.15.0" in msg and "mark_stream, get_stream_for_pg" in msg
        assert "torch.cuda._graph_annotations" in msg
        # the backend choice does not pick torch then, and says why
        facts = backends.EnvFacts(torch_version="2.15.0", cuda_available=True, torch_native=True,
                                  torch_missing=lost, driver_version=13020, cuda_bindings=True, runtime_ids=True)
        info = backends.choose_backend(facts)
        assert info.backend == backends.CUDA_RUNTIME
        assert "lack mark_stream, get_stream_for_pg" in info.reasons[backends.TORCH]
    finally:
        torch_native.forget()


def test_export_and_save_read_torchs_registry(fake, tmp_path):
    from perfetto_graph_ann.annotations.files import load_annotations
    from perfetto_graph_ann.capture.export import _annotations

    side = Stream()
    with pga.graph(fake.torch.cuda.CUDAGraph()):
        with pga.mark_kernels({"name": "attention", "layer": 3}):
            a = fake.launch("softmax")
        with pga.mark_stream(side, "left"):
            b = fake.launch("gemm")
    want = {a: {"name": "attention", "layer": 3}, b: {"name": "left", "stream": 60}}
    got = _annotations(None)  # what export(prof, out) joins with by default
    assert {n.key: dict(n.annotation) for g in got.graphs for n in g.nodes} == want
    saved = load_annotations(pga.save_annotations(tmp_path / "run.pga"))
    assert {n.key: dict(n.annotation) for g in saved.graphs for n in g.nodes} == want
