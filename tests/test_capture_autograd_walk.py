"""Backward tagging with real autograd on CPU: which nodes a region claims, and which scope is
open while each node's backward runs.

Ground truth comes from torch.profiler, independent of the tagger: a backward node's
``evaluate_function`` event carries the sequence number of the node, which is the sequence
number of the forward op that created it; that op's innermost ``record_function`` scope is
the node's scope. "Ours" is what the fake capture records: a probe pre-hook, registered on
every node of the graph after the tagger's, launches one fake kernel per node execution,
and the capture's resolved annotation of that kernel is the scope the tagger had open.
"""
from __future__ import annotations

import collections
import contextlib

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from support.capture_fakes import pushed_capture, resolve_capture  # noqa: E402
from gpu.blocks import PreNormBlock  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from perfetto_graph_ann import mark_kernels  # noqa: E402
from perfetto_graph_ann.capture.autograd import CLAIM_KEY, claim_backward  # noqa: E402

pytestmark = pytest.mark.usefixtures("capture_path")

STREAM = 0x70
D, HEADS = 16, 2
BACKWARD = "backward"
EVAL = "autograd::engine::evaluate_function: "


@pytest.fixture
def sess():
    with pushed_capture(STREAM) as s:
        yield s


def resolve(s):
    return resolve_capture(s, STREAM)


@contextlib.contextmanager
def scope(name, backward=True):
    """What a user writes, plus the profiler scope the ground truth reads."""
    with record_function(name), mark_kernels(name, backward=backward):
        yield


class Block(PreNormBlock):
    """The pre-norm transformer block with its ``attn`` and ``mlp`` scopes around the residual
    branches (each scope holds the branch and its residual add)."""

    def __init__(self):
        super().__init__(D, HEADS)

    def forward(self, x):
        with scope("attn"):
            x = x + self.attn(x)
        with scope("mlp"):
            x = x + self.mlp(x)
        return x


def graph_nodes(*roots):
    """Every node reachable from ``roots`` (grad_fn objects), wrappers kept alive."""
    seen, out, todo = set(), [], [r for r in roots if r is not None]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        todo += [f for f, _ in n.next_functions if f is not None]
    return out


def seq_of(node):
    s = node._sequence_nr()
    return -1 if s >= (1 << 63) else s


def probe(sess, *roots):
    """Launch a fake kernel ``name#seq`` from a post-hook on every node. Registered before the
    backward starts, so before the tagger's hooks (added when the backward starts): the
    probe's post-hook runs while the tagger's scope is still open."""
    for n in graph_nodes(*roots):
        if "probe" in n.metadata:
            continue  # AccumulateGrad nodes live as long as their parameter: probed once
        n.metadata["probe"] = True
        key = f"{n.name()}#{seq_of(n)}"
        n.register_hook(lambda gi, go, key=key: sess.cuda.launch(STREAM, key) and None)


def ours(sess):
    """kernel name -> list of annotations, one per execution."""
    out = collections.defaultdict(list)
    for n in resolve(sess).nodes:
        if "#" in (n.kernel or ""):
            out[n.kernel].append(dict(n.annotation))
    return out


def truth(prof, scopes):
    """``name#seq`` -> expected annotation of each backward node execution, from the profile.

    A forward op's sequence number is the one the next node gets; the op that created node
    ``s`` is the last one started among the forward ops numbered ``s`` (ops numbered ``s``
    start between nodes ``s - 1`` and ``s`` being created). Its scope is the innermost
    enclosing ``record_function`` of ``scopes``.
    """
    events = prof.events()

    def ancestors(e):
        p = e.cpu_parent
        while p is not None:
            yield p
            p = p.cpu_parent

    def in_backward(e):
        return e.name.startswith(EVAL) or any(a.name.startswith(EVAL) for a in ancestors(e))

    def enclosing_scope(e):
        return next((a.name for a in ancestors(e) if a.name in scopes), None)

    def is_apply(e):  # a node's own record inside its evaluate_function: numbered like the node
        return e.cpu_parent is not None and e.cpu_parent.name.startswith(EVAL)

    # (thread, number) -> creating op; ops run inside backward count too (a checkpoint's
    # recomputation creates nodes there)
    creator = {}
    for e in events:
        if e.sequence_nr >= 0 and e.name not in scopes and not e.name.startswith(EVAL) and not is_apply(e):
            key = (e.thread, e.sequence_nr)
            if key not in creator or e.time_range.start >= creator[key].time_range.start:
                creator[key] = e
    main = next(e.thread for e in events if e.name in scopes and not in_backward(e))
    def node_seq(e):
        s = e.sequence_nr
        return -1 if s < 0 or s >= (1 << 63) or e.name.endswith("AccumulateGrad") else s

    def creating_op(e):
        # a node run by a nested backward (reentrant checkpoint) was created by the thread
        # running the enclosing node; the others by the forward's thread
        nested = any(a.name.startswith(EVAL) for a in ancestors(e))
        return creator.get((e.thread if nested else main, node_seq(e)))

    out = collections.defaultdict(list)
    for e in events:
        if e.name.startswith(EVAL):
            # the innermost evaluate_function whose node has a forward op: a node no forward op
            # created (AccumulateGrad) inside a nested backward is part of the enclosing node's work
            c = next((c for c in map(creating_op, [e, *(a for a in ancestors(e) if a.name.startswith(EVAL))])
                      if c is not None), None)
            name = enclosing_scope(c) if c is not None else None
            out[f"{_short(e.name[len(EVAL):])}#{node_seq(e)}"].append(
                {"name": name, "autograd_phase": BACKWARD} if name else {})
    return out


def _short(name):
    return name.rsplit("::", 1)[-1] if "AccumulateGrad" in name else name


def normalise(d):
    return {k.replace("torch::autograd::", ""): sorted(v, key=repr) for k, v in d.items()}


def compare(sess, prof, scopes):
    got, want = normalise(ours(sess)), normalise(truth(prof, scopes))
    assert got == want
    return want


def run_step(sess, model, x, loss_fn, target, scopes=("attn", "mlp")):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = model(x)
        loss = loss_fn(out, target)
        probe(sess, loss.grad_fn)
        loss.backward()
    return compare(sess, prof, scopes)


def by_scope(table):
    c = collections.Counter()
    for k, anns in table.items():
        for a in anns:
            c[(a.get("name"), k.split("#")[0])] += 1
    return c


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_transformer_step_every_backward_node_gets_its_forward_scope(sess, loss):
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    x = torch.randn(2, 5, D)
    if loss == "mse":
        target, fn = torch.randn(2, 5, D), F.mse_loss
    else:
        target = torch.randint(0, D, (2 * 5,))
        fn = lambda out, t: F.cross_entropy(out.reshape(-1, D), t)  # noqa: E731
    with sdpa_kernel(SDPBackend.MATH):
        want = run_step(sess, model, x, fn, target)
    c = by_scope(want)
    # the nodes the old output-only hooks missed: GEMM backward inside linear, the SDPA math path
    assert c[("attn", "AddmmBackward0")] == 4 and c[("mlp", "AddmmBackward0")] == 4
    assert c[("attn", "SafeSoftmaxBackward0")] == 2 and c[("attn", "BmmBackward0")] == 4
    assert c[("mlp", "GeluBackward0")] == 2 and c[("attn", "SplitBackward0")] == 2
    loss_node = "MseLossBackward0" if loss == "mse" else "NllLossBackward0"
    assert c[(None, loss_node)] == 1  # created after the regions: not tagged
    assert c[(None, "AccumulateGrad")] == len(list(model.parameters()))


def test_every_node_created_in_the_region_is_claimed_once_and_no_other(sess):
    torch.manual_seed(0)
    pre, block = nn.Linear(D, D), Block()
    x = torch.randn(2, 5, D, requires_grad=True)
    h = pre(x)  # created before the regions: feeds them, must not be claimed
    before = {id(n): n for n in graph_nodes(h.grad_fn)}
    y = block(h)
    loss = y.square().mean()
    assert all(CLAIM_KEY not in n.metadata for n in graph_nodes(loss.grad_fn))  # nothing until a backward
    claim_backward(loss)  # what a backward started in the capture does first
    nodes = graph_nodes(loss.grad_fn)
    claimed = collections.Counter(n.metadata.get(CLAIM_KEY, {}).get("name") for n in nodes)
    assert all(CLAIM_KEY not in n.metadata for n in nodes if id(n) in before)
    assert CLAIM_KEY not in loss.grad_fn.metadata and CLAIM_KEY not in loss.grad_fn.next_functions[0][0].metadata
    # counted independently: every node numbered inside each region's range, by sequence number
    seqs = sorted(seq_of(n) for n in nodes if seq_of(n) >= 0)
    first_attn = min(seq_of(n) for n in nodes if n.name() == "NativeLayerNormBackward0")
    last = max(seq_of(n) for n in nodes if n.name() == "AddBackward0")
    assert claimed["attn"] + claimed["mlp"] == len([s for s in seqs if first_attn <= s <= last])
    assert claimed[None] == len(nodes) - claimed["attn"] - claimed["mlp"]


def test_nested_regions_innermost_wins(sess):
    torch.manual_seed(0)
    lin1, lin2 = nn.Linear(D, D), nn.Linear(D, D)
    x = torch.randn(2, 5, D)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with scope("block"):
            h = F.gelu(lin1(x))
            with scope("inner"):
                h = lin2(h).softmax(-1)
            h = h * 2
        loss = h.sum()
        probe(sess, loss.grad_fn)
        loss.backward()
    want = compare(sess, prof, ("block", "inner"))
    c = by_scope(want)
    assert c[("inner", "SoftmaxBackward0")] == c[("inner", "AddmmBackward0")] == 1
    assert c[("block", "GeluBackward0")] == c[("block", "MulBackward0")] == c[("block", "AddmmBackward0")] == 1


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_custom_function_inside_and_at_the_end_of_a_region(sess):
    """A custom autograd.Function's node is numbered like any other: claimed, also when its
    output leaves the region without another op in the region consuming it."""
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    x = torch.randn(2, 5, D)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with scope("a"):
            h = lin(Scale.apply(x.requires_grad_()))
        with scope("b"):
            h = Scale.apply(h)  # the region's only op
        loss = h.sum()
        probe(sess, loss.grad_fn)
        loss.backward()
    want = compare(sess, prof, ("a", "b"))
    c = by_scope(want)
    assert c[("b", "ScaleBackward")] == 1 and c[("a", "ScaleBackward")] == 1 and c[("a", "AddmmBackward0")] == 1


def test_grad_accumulation_and_retain_graph(sess):
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):  # two micro-batches, one optimizer step
            with scope("mlp"):
                h = F.gelu(lin(torch.randn(3, D)))
            loss = h.sum()
            probe(sess, loss.grad_fn)
            loss.backward(retain_graph=True)
            loss.backward()  # the same graph again: the hooks run again
    want = compare(sess, prof, ("mlp",))
    c = by_scope(want)
    assert c[("mlp", "GeluBackward0")] == 4 and c[("mlp", "AddmmBackward0")] == 4
    assert c[(None, "AccumulateGrad")] == 8


def tagged_recompute(sess, name, lin):
    def fn(h):
        with mark_kernels(name, backward=True), record_function(name):
            sess.cuda.launch(STREAM, f"{name}_fwd_kernel")  # stands for the block's forward kernels
            out = F.gelu(lin(h))
        if torch._C._current_autograd_node() is not None:
            probe(sess, out.grad_fn)  # the recomputed graph (a reentrant checkpoint runs it)
        return out
    return fn


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_block(sess, reentrant):
    """The recomputed forward runs inside backward: its kernels are backward work of the block
    (``autograd_phase: "backward"``), and its nodes' backward keeps the block's scope."""
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    x = torch.randn(3, D, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with scope("outer"):
            h = checkpoint(tagged_recompute(sess, "blk", lin), x * 2, use_reentrant=reentrant)
        loss = h.sum()
        probe(sess, loss.grad_fn)
        loss.backward()
    want = compare(sess, prof, ("outer", "blk"))
    c = by_scope(want)
    fwd = [dict(n.annotation) for n in sess.record.nodes if n.kernel == "blk_fwd_kernel"]
    assert fwd[0] == {"name": "blk"}  # the forward
    assert fwd[1] == {"name": "blk", "autograd_phase": BACKWARD}  # the recomputation
    assert len(fwd) == 2
    if reentrant:
        # one opaque node in the forward; the recomputed graph runs in a nested backward
        assert c[("outer", "CheckpointFunctionBackward")] == 1
        assert c[("blk", "GeluBackward0")] == c[("blk", "AddmmBackward0")] == 1
    else:
        assert c[("blk", "GeluBackward0")] == c[("blk", "AddmmBackward0")] == 1
    assert c[("outer", "MulBackward0")] == 1


def test_no_mode_and_no_claims_when_backward_is_false(sess):
    lin = nn.Linear(D, D)
    from torch.overrides import _get_current_function_mode_stack
    with mark_kernels("mlp", backward=False):
        assert _get_current_function_mode_stack() == []
        h = F.gelu(lin(torch.randn(3, D)))
    assert claim_backward(h) == 0
    assert all(CLAIM_KEY not in n.metadata for n in graph_nodes(h.grad_fn))


def test_compiled_module_in_a_region_is_one_claimed_node_and_stays_one_graph(sess):
    """AOTAutograd runs a compiled module's backward as one node, created in the region: all of
    it gets the region's scope. Nothing of the region enters Dynamo's trace (no graph breaks)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    compiled = torch.compile(mlp, backend="aot_eager")
    x = torch.randn(3, D)
    # warm-up as before a capture
    with mark_kernels("mlp", backward=True):
        h = compiled(x)
    h.sum().backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with scope("mlp"):
            h = compiled(x)
        loss = h.sum()
        probe(sess, loss.grad_fn)
        loss.backward()
    want = compare(sess, prof, ("mlp",))
    assert by_scope(want)[("mlp", "CompiledFunctionBackward")] == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert not torch._dynamo.utils.counters["graph_break"]


@pytest.mark.parametrize("node", ["UndefinedGrad", "a view's grad_fn"])
def test_entry_number_without_get_sequence_nr(sess, monkeypatch, node):
    """A torch without ``_get_sequence_nr``: the entry number comes from a throwaway node (also
    under no_grad), and the region claims exactly its own nodes."""
    from perfetto_graph_ann.capture import autograd

    monkeypatch.delattr(torch._C._autograd, "_get_sequence_nr")
    if node != "UndefinedGrad":
        monkeypatch.delattr(torch._C._functions, "UndefinedGrad")
    monkeypatch.setattr(autograd, "_peek", None)
    lin = nn.Linear(D, D)
    before = lin(torch.randn(3, D))
    with torch.no_grad():
        start = autograd.sequence_number()
    assert start > seq_of(before.grad_fn)
    with mark_kernels("mlp", backward=True):
        h = F.gelu(before)
    claim_backward(h)
    assert h.grad_fn.metadata[CLAIM_KEY]["name"] == "mlp"
    assert all(CLAIM_KEY not in n.metadata for n in graph_nodes(before.grad_fn))


@pytest.mark.parametrize("off", ["no_grad", "inference_mode"])
def test_no_mode_when_grad_is_off_at_entry(sess, off):
    """A serving capture: grad off at entry, so no node can be made; no mode, nothing claimed."""
    from torch.overrides import _get_current_function_mode_stack

    lin = nn.Linear(D, D)
    ctx = torch.no_grad() if off == "no_grad" else torch.inference_mode()
    with ctx, mark_kernels("serve", backward=True):
        assert _get_current_function_mode_stack() == []
        h = F.gelu(lin(torch.randn(3, D)))
    assert h.grad_fn is None


def test_grad_turned_back_on_inside_a_grad_off_region(sess):
    """Nodes made after ``enable_grad()`` inside a block entered with grad off: not tagged by it
    (a warning counts them), not claimed by the enclosing region either; a region opened inside
    with grad on claims its own; the enclosing region's nodes before and after are its own."""
    torch.manual_seed(0)
    lin1, lin2, lin3 = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
    x = torch.randn(3, D)
    with mark_kernels("outer", backward=True):
        a = lin1(x)  # outer's nodes
        with torch.no_grad(), pytest.warns(UserWarning, match=r"entered with grad mode off, and \d+ autograd node"):
            with mark_kernels("serve", backward=True):
                with torch.enable_grad():
                    b = F.gelu(a) * 2  # 2 nodes, made in "serve" with grad re-enabled
                    with mark_kernels("inner", backward=True):
                        c = lin2(b)
        d = lin3(c) + b  # outer's again
    claim_backward(d)
    nodes = {n.name(): n for n in graph_nodes(d.grad_fn)}
    name = lambda n: n.metadata.get(CLAIM_KEY, {}).get("name")  # noqa: E731
    assert name(nodes["GeluBackward0"]) is None and name(nodes["MulBackward0"]) is None
    # the two Linear's on 2-D input are one AddmmBackward0 each: tell them apart by their edges
    addmm = [n for n in graph_nodes(d.grad_fn) if n.name() == "AddmmBackward0"]
    by_input = {n.next_functions[1][0].name() if n.next_functions[1][0] is not None else None: n for n in addmm}
    assert name(by_input["MulBackward0"]) == "inner"
    assert name(d.grad_fn) == "outer" and name(a.grad_fn) == "outer"
    assert sum(name(n) == "outer" for n in graph_nodes(d.grad_fn)) == sum(
        1 for n in graph_nodes(d.grad_fn) if n.name() in ("AddmmBackward0", "TBackward0", "AddBackward0")
        and n is not by_input["MulBackward0"] and n not in [t for t, _ in by_input["MulBackward0"].next_functions])


def test_grad_off_region_without_new_nodes_warns_nothing(sess, recwarn):
    lin = nn.Linear(D, D)
    with torch.no_grad(), mark_kernels("serve", backward=True):
        lin(torch.randn(3, D))
    assert not [w for w in recwarn if "grad mode off" in str(w.message)]


def test_grad_on_region_observes_no_op_and_claims_only_when_a_backward_starts_in_a_capture(sess):
    """No torch-function mode (no per-op cost); a backward outside any capture walks nothing;
    the same graph backwarded inside one is claimed."""
    from torch.overrides import _get_current_function_mode_stack

    from perfetto_graph_ann.capture import session as S

    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    with mark_kernels("mlp", backward=True):
        assert _get_current_function_mode_stack() == []
        h = F.gelu(lin(torch.randn(3, D)))
    S.pop(sess)  # no capture in flight now
    try:
        h.sum().backward(retain_graph=True)
        assert all(CLAIM_KEY not in n.metadata for n in graph_nodes(h.grad_fn))
    finally:
        S.push(sess)
    h.sum().backward()
    assert h.grad_fn.metadata[CLAIM_KEY]["name"] == "mlp"


def test_regions_cost_nothing_in_the_table_unless_they_made_nodes(sess):
    """A forward-only block (no node made) leaves nothing behind; a block that made nodes is
    one closed range, with its inner block nested in it; no region stays open."""
    from perfetto_graph_ann.capture import autograd

    table = autograd._table()
    n0 = len(table.ranges)
    lin = nn.Linear(D, D)
    with torch.no_grad(), mark_kernels("off"):
        lin(torch.randn(3, D))
    with mark_kernels("fwd"), mark_kernels("inner"):
        torch.randn(3, D) * 2  # grad on, but nothing requires grad: no node
    assert len(table.ranges) == n0 and table.open == []
    with mark_kernels("outer"):
        with mark_kernels("mid"):
            h = lin(torch.randn(3, D))
        h = F.gelu(h)
    assert len(table.ranges) == n0 + 2 and table.open == []
    claim_backward(h)
    assert h.grad_fn.metadata[CLAIM_KEY]["name"] == "outer"
    assert h.grad_fn.next_functions[0][0].metadata[CLAIM_KEY]["name"] == "mid"


def test_backward_inside_an_open_region_takes_its_fields_not_those_of_scopes_open_inside_it(sess):
    """``with mark_kernels("step"): ...; loss.backward()`` with another scope still open around
    the backward: the nodes get the step's merged fields, as the step's block saw them."""
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    with mark_kernels({"name": "model", "k": 1}, backward=False):
        with mark_kernels({"name": "step", "layer": 3}):
            h = F.gelu(lin(torch.randn(3, D)))
            with mark_kernels({"name": "loss", "extra": 2}, backward=False):
                loss = h.sum()
                claim_backward(loss)
    want = {"name": "step", "k": 1, "layer": 3, "autograd_phase": BACKWARD}
    assert h.grad_fn.metadata[CLAIM_KEY] == want and loss.grad_fn.metadata[CLAIM_KEY] == want


def test_forward_in_one_capture_backward_in_another_through_autograd_grad(capture_path):
    """make_graphed_callables' shape: the forward captured in one graph, ``torch.autograd.grad``
    captured in another; the backward's kernels carry the forward's scope."""
    from support.capture_fakes import pushed_capture as pc

    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    x = torch.randn(3, D, requires_grad=True)
    with pc(STREAM) as fwd:
        with mark_kernels("mlp", backward=True):
            h = F.gelu(lin(x))
        resolve_capture(fwd, STREAM)
    with pc(STREAM) as bwd:
        probe(bwd, h.grad_fn)
        torch.autograd.grad((h,), (x,) + tuple(lin.parameters()), (torch.ones_like(h),))
        rec = resolve_capture(bwd, STREAM)
    got = {n.kernel.split("#")[0]: dict(n.annotation) for n in rec.nodes}
    tagged = {"name": "mlp", "autograd_phase": BACKWARD}
    assert got["GeluBackward0"] == tagged and got["AddmmBackward0"] == tagged


def test_range_table_owner_nested_siblings_grad_off_and_equal_starts():
    """Independent of torch: the innermost range holding a number, as nesting defines it."""
    from perfetto_graph_ann.capture.autograd import BackwardTagger, RangeTable

    t = RangeTable()
    tag = {n: BackwardTagger({"name": n}) for n in ("outer", "a", "b", "a2")}
    outer = t.enter(10, lambda: tag["outer"])
    a = t.enter(12, lambda: tag["a"])
    a2 = t.enter(12, lambda: tag["a2"])  # entered with no node in between: same start, innermost
    t.exit(a2, 14, 2)
    t.exit(a, 15, 3)
    off = t.enter(16, None)  # grad off at entry
    b = t.enter(18, lambda: tag["b"])
    t.exit(b, 19, 1)
    t.exit(off, 20, 4)
    empty = t.enter(21, lambda: tag["a"])
    t.exit(empty, 21, 0)  # no node: dropped
    t.exit(outer, 25, 15)

    def name(seq):
        r = t.owner(seq)
        return None if r is None else (r.tagger.fields["name"] if r.tagger else "off")

    want = {9: None, 10: "outer", 11: "outer", 12: "a2", 13: "a2", 14: "a", 15: "outer", 16: "off",
            17: "off", 18: "b", 19: "off", 20: "outer", 21: "outer", 24: "outer", 25: None, 99: None}
    assert {s: name(s) for s in want} == want
    assert len(t.ranges) == 5 and t.open == []  # the empty one dropped
