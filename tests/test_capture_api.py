"""mark_kernels and backward tagging on CPU (fake backend, fake autograd nodes)."""
from __future__ import annotations

import pytest
from capture_fakes import FakeCuda

from perfetto_graph_ann import mark_kernels
from perfetto_graph_ann.capture import backends
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.autograd import BackwardTagger
from perfetto_graph_ann.capture.registry import Registry

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = 0x70


@pytest.fixture
def sess():
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    s = S.CaptureSession(cuda, STREAM, Registry())
    s.start()
    s.cuda = cuda
    S.push(s)
    with backends.use(cuda):
        yield s
    S.pop(s)


def resolve(s):
    s.finish_capture()
    s.bind_exec(s.cuda.instantiate(s.cuda.end_capture(STREAM)))
    return s.record


def test_mark_kernels_tags_nodes_and_nests(sess):
    with mark_kernels("block"):
        sess.cuda.launch(STREAM, "a")
        with mark_kernels({"name": "attention", "stream": 62}):
            sess.cuda.launch(STREAM, "b")
    sess.cuda.launch(STREAM, "c")
    k = {n.kernel: n.annotation for n in resolve(sess).nodes}
    assert k == {"a": {"name": "block"}, "b": {"name": "attention", "stream": 62}, "c": {}}


def test_mark_kernels_is_a_noop_outside_capture():
    assert S.current() is None
    with mark_kernels("x"):
        pass
    with pytest.raises(TypeError):
        with mark_kernels(42):
            pass


class FakeNode:
    """An autograd node: hooks registered by the tagger, run() plays the backward engine."""

    def __init__(self, name, cuda, stream):
        self.name, self.cuda, self.stream = name, cuda, stream
        self.pre, self.post = [], []

    def register_prehook(self, fn):
        self.pre.append(fn)

    def register_hook(self, fn):
        self.post.append(fn)

    def run(self):
        for f in self.pre:
            f(("grad",))
        self.cuda.launch(self.stream, f"{self.name}_backward")
        for f in self.post:
            f(("gin",), ("gout",))


class FakeTensor:
    def __init__(self, grad_fn):
        self.grad_fn = grad_fn


def test_backward_tagger_brackets_backward_of_hooked_nodes(sess):
    mm, gelu, leaf = (FakeNode(n, sess.cuda, STREAM) for n in ("mm", "gelu", "other"))
    tagger = BackwardTagger({"name": "mlp", "stream": 61})
    tagger.on_outputs((FakeTensor(mm), [FakeTensor(gelu), FakeTensor(gelu)], {"x": FakeTensor(None)}))
    assert len(gelu.pre) == 1  # hooked once although seen twice
    sess.cuda.launch(STREAM, "forward_kernel")
    gelu.run()
    leaf.run()  # not created in the scope: not tagged
    mm.run()
    k = {n.kernel: n.annotation for n in resolve(sess).nodes}
    assert k["gelu_backward"] == k["mm_backward"] == {"name": "mlp", "stream": 61, "autograd_phase": "backward"}
    assert k["other_backward"] == {} and k["forward_kernel"] == {}


def test_backward_hooks_are_inert_without_a_capture():
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    node = FakeNode("mm", cuda, STREAM)
    tagger = BackwardTagger({"name": "mlp"}, current=lambda: None)
    tagger.on_outputs(FakeTensor(node))
    assert len(node.pre) == len(node.post) == 1  # the hooks are in place, so run() exercises them
    node.run()  # eager backward: hooks run, nothing recorded, nothing raised
    assert tagger._open == {}  # the pre-hook opened no scope for the post-hook to close


class CppNode(FakeNode):
    """A C++ autograd node: its metadata dict is shared by every Python wrapper of it."""

    def __init__(self, *a):
        super().__init__(*a)
        self.metadata = {}


class Wrapper:
    """A fresh Python wrapper per grad_fn access, like torch's for C++ nodes."""

    def __init__(self, node):
        self._node = node
        self.metadata = node.metadata

    def register_prehook(self, fn):
        self._node.register_prehook(fn)

    def register_hook(self, fn):
        self._node.register_hook(fn)


class WrappingTensor:
    def __init__(self, node):
        self._node = node

    @property
    def grad_fn(self):
        return Wrapper(self._node)


def test_backward_tagger_dedupes_by_node_not_by_wrapper(sess):
    a, b = CppNode("a", sess.cuda, STREAM), CppNode("b", sess.cuda, STREAM)
    tagger = BackwardTagger({"name": "mlp"})
    # the same node reached through several short-lived wrappers (whose ids may repeat)
    for _ in range(3):
        tagger.on_outputs([WrappingTensor(a), WrappingTensor(b)])
    assert len(a.pre) == len(b.pre) == 1 and len(a.post) == len(b.post) == 1
    other = BackwardTagger({"name": "outer"})  # another scope hooks the same node too
    other.on_outputs(WrappingTensor(a))
    assert len(a.pre) == 2
    b.run()
    a.run()
    k = {n.kernel: n.annotation for n in resolve(sess).nodes}
    assert k["b_backward"] == {"name": "mlp", "autograd_phase": "backward"}
    assert k["a_backward"] == {"name": "outer", "autograd_phase": "backward"}  # opened last: wins


def test_mark_stream_records_what_torchs_records(sess, monkeypatch):
    """Our backend: ``{"name", "stream"}`` for a side stream, no lane for the current one."""
    from torch215_fake import FakeTorch215, Stream

    from perfetto_graph_ann.capture import api

    fake = FakeTorch215().install(monkeypatch)
    fake.streams[:] = [Stream(STREAM)]
    side = Stream(STREAM + 1)
    sess.cuda.join(side.cuda_stream, STREAM)
    with api.mark_stream(side, "left_projection") as s:
        assert s is side and fake.torch.cuda.current_stream() is side
        lane = sess.recorder.open_fields()["stream"]
        sess.cuda.launch(side.cuda_stream, "gemm")
    with api.mark_stream(Stream(STREAM), {"name": "combine", "layer": 3}):
        assert "stream" not in sess.recorder.open_fields()
        sess.cuda.launch(STREAM, "add")
    rec = resolve(sess)
    assert lane >= 60
    assert {n.kernel: n.annotation for n in rec.nodes} == {
        "gemm": {"name": "left_projection", "stream": lane}, "add": {"name": "combine", "layer": 3}}
    assert dict(rec.lanes) == {lane: "left_projection"}  # the name labels the lane in the .pftrace
