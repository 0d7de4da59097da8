"""mark_kernels and backward tagging on CPU (fake backend, fake autograd nodes; real autograd:
test_capture_autograd_walk.py)."""
from __future__ import annotations

import pytest
from support.capture_fakes import FakeCuda, pushed_capture, resolve_capture

from perfetto_graph_ann import mark_kernels
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.autograd import CLAIM_KEY, BackwardTagger, RangeTable, claim

# every test here runs on the compiled capture path and on the pure-Python one (conftest.py)
pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = 0x70


@pytest.fixture
def sess():
    with pushed_capture(STREAM) as s:
        yield s


def resolve(s):
    return resolve_capture(s, STREAM)


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

    def __init__(self, name, cuda, stream, seq=0, nexts=()):
        self.name, self.cuda, self.stream, self.seq = name, cuda, stream, seq
        self.next_functions = tuple((n, 0) for n in nexts)
        self.metadata = {}
        self.pre, self.post = [], []

    def _sequence_nr(self):
        return self.seq

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


def test_walk_claims_new_nodes_behind_the_roots_and_brackets_their_backward(sess):
    old = FakeNode("old", sess.cuda, STREAM, seq=3)  # created before the region (numbered below 5)
    acc = FakeNode("acc", sess.cuda, STREAM, seq=(1 << 64) - 1)  # AccumulateGrad: unnumbered
    mm = FakeNode("mm", sess.cuda, STREAM, seq=5, nexts=(old, acc, None))  # inside a composite op
    gelu = FakeNode("gelu", sess.cuda, STREAM, seq=6, nexts=(mm, mm))
    after = FakeNode("loss", sess.cuda, STREAM, seq=7, nexts=(gelu, mm))  # made after the region
    table = RangeTable()
    made = []
    r = table.enter(5, lambda: made.append(1) or BackwardTagger({"name": "mlp", "stream": 61}))
    table.exit(r, 7, 2)
    assert made == []  # no tagger until a node of the range is claimed
    assert claim([after, gelu, None], table) == 2
    assert made == [1]  # one tagger for the range
    assert len(gelu.pre) == len(mm.pre) == 1  # once although reached four times
    assert old.pre == acc.pre == after.pre == [] and CLAIM_KEY not in old.metadata
    assert mm.metadata[CLAIM_KEY]["name"] == "mlp"
    assert claim([after], table) == 0  # a second backward of the same graph (retain_graph)
    sess.cuda.launch(STREAM, "forward_kernel")
    gelu.run()
    old.run()  # not created in the region: not tagged
    mm.run()
    k = {n.kernel: n.annotation for n in resolve(sess).nodes}
    assert k["gelu_backward"] == k["mm_backward"] == {"name": "mlp", "stream": 61, "autograd_phase": "backward"}
    assert k["old_backward"] == {} and k["forward_kernel"] == {}
    assert all(getattr(h, "__self__", h).open == [] for n in (gelu, mm) for h in n.pre)  # every scope closed


def test_backward_hooks_are_inert_without_a_capture():
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    node = FakeNode("mm", cuda, STREAM)
    tagger = BackwardTagger({"name": "mlp"}, current=lambda: None)
    tagger.hook(node)
    assert len(node.pre) == len(node.post) == 1  # the hooks are in place, so run() exercises them
    node.run()  # eager backward: hooks run, nothing recorded, nothing raised
    assert node.pre[0].__self__.open == []  # the pre-hook opened no scope for the post-hook to close


class Wrapper:
    """A fresh Python wrapper per grad_fn access, like torch's for C++ nodes."""

    def __init__(self, node):
        self._node = node
        self.metadata = node.metadata
        self.next_functions = tuple((Wrapper(n), i) for n, i in node.next_functions)

    def _sequence_nr(self):
        return self._node.seq

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


def test_claims_are_per_node_not_per_wrapper_and_the_inner_region_wins(sess):
    a = FakeNode("a", sess.cuda, STREAM, seq=1)
    b = FakeNode("b", sess.cuda, STREAM, seq=2, nexts=(a,))
    c = FakeNode("c", sess.cuda, STREAM, seq=3, nexts=(b, a))
    table = RangeTable()
    outer = table.enter(0, lambda: BackwardTagger({"name": "outer"}))
    inner = table.enter(2, lambda: BackwardTagger({"name": "mlp"}))  # opened after a was created
    table.exit(inner, 3, 1)
    table.exit(outer, 4, 4)
    # the same node reached through several short-lived wrappers (whose ids may repeat)
    for _ in range(3):
        claim([WrappingTensor(c).grad_fn], table)
    assert len(b.pre) == len(b.post) == 1 and len(a.pre) == 1 and len(c.pre) == 1
    b.run()
    a.run()
    k = {n.kernel: n.annotation for n in resolve(sess).nodes}
    assert k["b_backward"] == {"name": "mlp", "autograd_phase": "backward"}
    assert k["a_backward"] == {"name": "outer", "autograd_phase": "backward"}


def test_node_hooks_label_the_lane_nest_and_find_the_capture_from_another_thread(sess, capture_path):
    """One claimed node's hooks, as registered on each capture path (one C object called with
    one or two arguments on the compiled path, two bound methods on the Python one): the
    forward's lane label is recorded, a node re-run before its post-hook closes its own
    scopes in order, and autograd's device thread (no session stack of its own) finds the
    capture in flight."""
    import threading

    node = FakeNode("mm", sess.cuda, STREAM)
    BackwardTagger({"name": "enc", "stream": 61}, lane_label="encoder").hook(node)
    (pre,), (post,) = node.pre, node.post
    assert (pre is post) == (capture_path == "compiled")
    pre(("g",))
    sess.cuda.launch(STREAM, "outer_part")
    pre(("g",))  # a nested backward runs the node again before its post-hook
    sess.cuda.launch(STREAM, "inner_part")
    post(("gin",), ("gout",))
    sess.cuda.launch(STREAM, "after_inner")
    post(("gin",), ("gout",))
    post(("gin",), ("gout",))  # nothing open: no scope, no error
    t = threading.Thread(target=node.run)  # the device thread: session found without its own stack
    t.start()
    t.join()
    sess.cuda.launch(STREAM, "outside")
    rec = resolve(sess)
    k = {n.kernel: dict(n.annotation) for n in rec.nodes}
    tagged = {"name": "enc", "stream": 61, "autograd_phase": "backward"}
    assert k == {"outer_part": tagged, "inner_part": tagged, "after_inner": tagged, "mm_backward": tagged,
                 "outside": {}}
    assert dict(rec.lanes) == {61: "encoder"}
    # the scopes: two from the nested runs (inner closed first), one from the thread
    spans = sorted((r.start, r.end) for r in sess.recorder.records())
    assert spans == [(0, 3), (1, 2), (3, 4)]


def test_mark_stream_records_what_torchs_records(sess, monkeypatch):
    """Our backend: ``{"name", "stream"}`` for a side stream, no lane for the current one."""
    from support.torch215_fake import FakeTorch215, Stream

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
