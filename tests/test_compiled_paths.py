"""Module paths for compiled code (capture/compiled_paths.py, capture/compiled.py) on CPU: the
alignment of a capture's nodes with inductor's recorded launches, the scopes it derives, and a
capture session that runs it; expectations written from the recorded sequences by hand."""
from __future__ import annotations

import pytest
from support.capture_fakes import FakeCuda, recorder_scope

from perfetto_graph_ann.capture import compiled as C
from perfetto_graph_ann.capture import compiled_paths as P
from perfetto_graph_ann.capture import session as S
from perfetto_graph_ann.capture.registry import Registry


STREAM = 0x70
ATTN = (("layers.0", "Block"), ("layers.0.attn", "Attention"))
MLP = (("layers.0", "Block"), ("layers.0.mlp", "MLP"))
O_PROJ = ATTN + (("layers.0.attn.o_proj", "Linear"),)


def K(name, stack, exact=True):
    return P.Item("kernel", name, stack, exact)


def E(stack, exact=True):
    return P.Item("extern", None, stack, exact)


@pytest.mark.parametrize("key, want", [("140392907244240", 140392907244240), ("77@2", 77), ("L__self___layers_0", None),
                                       ("@1", None), (3, None), ("", None)])
def test_dynamo_module_keys(key, want):
    assert P.module_key_id(key) == want


@pytest.mark.parametrize("raw, rel", [
    ("L['self'].layers[0].mlp", ("layers", "0", "mlp")),
    ("L['self'].layers.0.mlp", ("layers", "0", "mlp")),
    ("L['self']._modules['layers']._modules['0']", ("layers", "0")),
    ("L['args'][0].model.layers[0]", ("model", "layers", "0")),  # a decorated forward: wrapper(*args)
    ("L['model'].blocks[\"x\"]", ("blocks", "x")),
    ("G['net'].fc", ("fc",)),
    ("L['self']", ()),  # the frame's local itself
    # a compiled bound method behind a decorator's closure (torch.no_grad()(model.forward)): from its object
    ("L['fn'].__closure__[1].cell_contents.__self__.model.layers.0", ("model", "layers", "0")),
    ("L['func'].__self__", ()),
    ("L['fn'].__closure__[0].cell_contents.fc", ("fc",)),  # a closure cell: from its contents
    ("L['self'].run.__self__.fc", ("run", "__self__", "fc")),  # not leading: an attribute path (refused by depth)
    ("getattr(L['self'], 'x')", None),  # a form not read: unknown, never guessed
    ("layers.0", None),
])
def test_dynamo_source_text_relative_to_the_frame(raw, rel):
    assert P.frame_relative(raw) == rel


def test_module_stack_names_each_module_by_its_key_and_common_ancestor():
    named = {"1": ("layers.0", "Block", 2), "2": ("layers.0.attn", "Attention", 3), "3": ("Net", "Net", 0),
             "4": ("m.layers.0", "Block", 2)}
    meta = {"1": ("L['self'].layers[0]", type("Block", (), {})), "2@1": ("L['args'][0].layers[0].attn", "m.Attention")}
    resolve = lambda key: named.get(key.split("@")[0])  # noqa: E731
    assert P.module_stack(meta, resolve) == (("layers.0", "Block"), ("layers.0.attn", "Attention"))
    assert P.module_stack({}, resolve) == ()
    assert P.module_stack({"3": ("L['self']", "Net")}, resolve) == (("Net", "Net"),)  # the root's own call
    assert P.module_stack({"4": ("L['self'].layers[0]", "Block")}, resolve) == (("m.layers.0", "Block"),)  # a prefix
    # a module this package has not named, another class than the named module's, or a frame that is
    # not the root's (a submodule's, after a graph break: its code also runs for its siblings): unknown
    assert P.module_stack({"5": ("L['self'].layers[0]", "Block")}, resolve) is None
    assert P.module_stack({"1": ("L['self'].layers[0]", "Attention")}, resolve) is None
    assert P.module_stack({"2": ("L['self'].attn", "Attention")}, resolve) is None
    assert P.module_stack({"2": ("L['self'].layers[1].attn", "Attention")}, resolve) is None
    assert P.module_stack({"1": "nonsense"}, resolve) is None
    assert P.common_stack([ATTN, ATTN]) == (ATTN, True)
    assert P.common_stack([ATTN, MLP]) == ((("layers.0", "Block"),), False)
    assert P.common_stack([ATTN, None]) == ((), False)  # an origin of unknown module: the root


def _stack_reader(seen):
    """A dynamo backend that only reads: each FX node's (source texts, op, module stack as named now)."""
    def backend(gm, inputs):
        resolve = C._resolver()
        for node in gm.graph.nodes:
            raw = node.meta.get("nn_module_stack")
            if raw:
                seen.append((tuple(v[0] for v in raw.values()), node.op, P.module_stack(raw, resolve)))
        return gm.forward
    return backend


def _layered(torch, layer, forward_decorator=lambda fn: fn):
    """A model class: ``layers`` (a ModuleList of two ``layer()``) then ``head`` (Linear)."""
    class Outer(torch.nn.Module):
        def __init__(self, *args):
            super().__init__()
            self.layers = torch.nn.ModuleList([layer(*args), layer(*args)])
            self.head = torch.nn.Linear(4, 4)

        @forward_decorator
        def forward(self, x):
            for block in self.layers:
                x = block(x)
            return self.head(x)
    return Outer


def _linear_block(torch):
    """A module class: ``a`` (Linear 4 -> 4), then a ReLU."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.a(x))
    return Block


def test_compiled_module_paths_name_the_module_itself_never_dynamos_frame_text():
    """Real dynamo (CPU), backends that only read the FX graphs. In a forward decorated with
    ``wrapper(*args)`` dynamo's source text is relative to ``L['args'][0]``: the paths must be the
    model's own (``named_modules``). After a graph break inside a layer, the layer's frame is
    compiled once and run for every layer: its kernels get no path. A module under no compiled
    root gets none either."""
    torch = pytest.importorskip("torch")
    import functools

    from perfetto_graph_ann.capture.modules import COMPILED_ROOTS, NAMES

    class Inner(torch.nn.Module):
        def __init__(self, brk):
            super().__init__()
            self.brk, self.a, self.b = brk, torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            x = self.a(x)
            if self.brk:
                torch._dynamo.graph_break()
            return self.b(x)

    def decorated(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    Outer = _layered(torch, Inner, decorated)
    reader = _stack_reader

    whole, broken, strays = [], [], []
    assert C.install_roots()
    try:
        torch._dynamo.reset()
        model, model_gb, stray = Outer(False), Outer(True), torch.nn.Linear(4, 4)
        with torch.no_grad():
            torch.compile(model, backend=reader(whole))(torch.randn(2, 4))
            torch.compile(model_gb, backend=reader(broken))(torch.randn(2, 4))
            torch.compile(lambda x: stray(x), backend=reader(strays))(torch.randn(2, 4))
    finally:
        C.uninstall_roots()
        torch._dynamo.reset()
    whole, broken, strays = ([(srcs, stack) for srcs, _, stack in got] for got in (whole, broken, strays))
    assert whole and all(src.startswith("L['args'][0]") for srcs, _ in whole for src in srcs)
    want = {"head": (("head", "Linear"),)}
    want.update({f"layers.{i}.{n}": ((f"layers.{i}", "Inner"), (f"layers.{i}.{n}", "Linear")) for i in (0, 1) for n in "ab"})
    assert {stack[-1][0] for _, stack in whole} == set(want)
    assert all(stack == want[stack[-1][0]] for _, stack in whole)
    layer_frames = [stack for srcs, stack in broken if srcs[0] in ("L['self'].a", "L['self'].b")]
    assert layer_frames and all(stack is None for stack in layer_frames)
    assert all(stack is None or stack == (("head", "Linear"),) for _, stack in broken)
    assert strays and all(stack is None for _, stack in strays) and NAMES.path(stray) is None
    assert COMPILED_ROOTS.path(model.layers[1].b) == ("layers.1.b", 3, None) and NAMES.path(model) is None


def test_compiled_bound_methods_name_their_model_as_framework_runners_compile_it():
    """Real dynamo (CPU), backends that only read the FX graphs. SGLang compiles
    ``torch.no_grad()(model.forward)`` and vLLM ``self.forward``: the model whose method is
    compiled is the root its kernels' paths are named from, as for ``torch.compile(model)``.
    A method of a module named below a root (one layer of a named model) is a frame below
    the root: no path; a plain function's modules stay unnamed."""
    torch = pytest.importorskip("torch")
    import functools

    from perfetto_graph_ann.capture.modules import COMPILED_ROOTS

    Net = _layered(torch, _linear_block(torch))

    def stacks(entries):
        return [stack for _, op, stack in entries if op == "call_function"]

    want = [(("layers.0", "Block"), ("layers.0.a", "Linear")), (("layers.0", "Block"),),
            (("layers.1", "Block"), ("layers.1.a", "Linear")), (("layers.1", "Block"),), (("head", "Linear"),)]
    x = torch.randn(2, 4)
    runs = {}
    assert C.install_roots()
    try:
        for label, make in (("method", lambda m: m.forward), ("no_grad(method)", lambda m: torch.no_grad()(m.forward)),
                            ("partial", lambda m: functools.partial(m.forward)), ("function", lambda m: lambda x: m(x))):
            torch._dynamo.reset()
            model = Net()
            runs[label] = (model, [])
            torch.compile(make(model), backend=_stack_reader(runs[label][1]))(x)
        torch._dynamo.reset()
        layer_of_named = runs["method"][0].layers[1]
        below = []
        torch.compile(layer_of_named.forward, backend=_stack_reader(below))(x)
    finally:
        C.uninstall_roots()
        torch._dynamo.reset()
    for label in ("method", "no_grad(method)", "partial"):
        model, seen = runs[label]
        assert stacks(seen) == want, label
        assert COMPILED_ROOTS.path(model) == ("Outer", 0, None) and COMPILED_ROOTS.path(model.layers[1].a) == ("layers.1.a", 3, None)
    model, seen = runs["function"]
    assert stacks(seen) and all(stack is None for stack in stacks(seen)) and COMPILED_ROOTS.path(model) is None
    assert stacks(below) and all(stack is None for stack in stacks(below))
    assert C.bound_module(lambda: None, torch.nn.Module) is None and C.bound_module(model, torch.nn.Module) is None
    from torch._dynamo import eval_frame
    assert not hasattr(eval_frame._TorchDynamoContext.__dict__["__call__"], "__wrapped__")  # put back


def test_an_eager_capture_through_forward_names_the_model_a_compile_of_its_forward_reads(monkeypatch):
    """SGLang with torch.compile captures its largest batch sizes eagerly (the runner calling
    ``model.forward``, so the inner model is the first module called) and compiles
    ``no_grad(model.forward)`` for the others. The names the eager capture made are the ones the
    compile resolves (:data:`NAMES` wins): named from the whole model (the inner model's owner),
    they are the compiled frame's paths; named from the inner model, as before the owners were
    looked up, every stack is refused (its depth is not the frame's)."""
    torch = pytest.importorskip("torch")
    from perfetto_graph_ann.capture import modules as mods

    Net = _layered(torch, _linear_block(torch))

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Net()

        def forward(self, x):
            return self.model(x)

    x = torch.randn(2, 4)
    got = {}
    assert C.install_roots()
    try:
        for label, root in (("owner", mods.model_of), ("inner", lambda inner: inner)):
            names = mods._Names()
            monkeypatch.setattr(mods, "NAMES", names)
            monkeypatch.setattr(C, "NAMES", names)
            torch._dynamo.reset()
            lm = CausalLM()
            names.add_root(root(lm.model))  # what the eager capture's first module call named
            seen = []
            torch.compile(torch.no_grad()(lm.forward), backend=_stack_reader(seen))(x)
            got[label] = [stack for _, op, stack in seen if op == "call_function"]
    finally:
        C.uninstall_roots()
        torch._dynamo.reset()
    assert got["owner"] and got["owner"][0] == (("model", "Outer"), ("model.layers.0", "Block"),
                                                ("model.layers.0.a", "Linear"))
    assert got["owner"][-1] == (("model", "Outer"), ("model.head", "Linear"))
    assert got["inner"] and all(stack is None for stack in got["inner"])


def test_a_torch_without_the_compile_entry_still_names_compiled_models(monkeypatch):
    """Where ``_TorchDynamoContext.__call__`` is not as expected (a later torch), the bound
    method naming stands back and the other roots (``OptimizedModule``, ``nn.Module.compile``)
    are still installed."""
    pytest.importorskip("torch")
    from torch._dynamo import eval_frame

    monkeypatch.delattr(eval_frame, "_TorchDynamoContext")
    assert C.install_roots()
    try:
        assert [(cls.__name__, name) for cls, name in C._ROOT_WRAPS] == [("OptimizedModule", "__init__"),
                                                                      ("Module", "compile")]
    finally:
        C.uninstall_roots()


def test_a_forward_compiled_by_its_decorator_names_its_module_from_the_frame():
    """``@torch.compile`` on a module's ``forward`` compiles a plain function: the module whose
    frame dynamo compiles (its first argument, or ``args[0]`` of a ``wrapper(*args)``
    decorator, read from dynamo's record of the frame) is the root its kernels' paths are
    named from, unless something named it already; a frame whose first argument is no module
    names nothing."""
    torch = pytest.importorskip("torch")
    from perfetto_graph_ann.capture.modules import COMPILED_ROOTS

    seen = []

    def wrapped(fn):
        def wrapper(*args, **kwargs):  # transformers' decorators: self is args[0]
            return fn(*args, **kwargs)
        return wrapper

    def block(decorate=lambda fn: fn):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(4, 4)

            @torch.compile(backend=_stack_reader(seen))
            @decorate
            def forward(self, x):
                return torch.relu(self.a(x))
        return Block

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = block()()

        def forward(self, x):
            return self.b(x)

    def stacks_of(model):
        torch._dynamo.reset()
        model(torch.randn(2, 4))
        out = [stack for _, op, stack in seen if op == "call_function"]
        seen.clear()
        return out

    assert C.install_roots()
    try:
        alone, w, net = block()(), block(wrapped)(), Net()
        assert stacks_of(alone) == [(("a", "Linear"),)] and COMPILED_ROOTS.path(alone) == ("Block", 0, None)
        assert stacks_of(w) == [(("a", "Linear"),)] and COMPILED_ROOTS.path(w) == ("Block", 0, None)
        COMPILED_ROOTS.add_root(net)  # named first, as torch.compile(net) would: its block is below the root
        stacks = stacks_of(net)
        assert stacks and all(stack is None for stack in stacks) and COMPILED_ROOTS.path(net.b) == ("b", 1, None)
    finally:
        C.uninstall_roots()
        torch._dynamo.reset()


def test_alignment_labels_anchors_and_the_nodes_of_extern_calls():
    rec = P.Recorded((K("triton_norm_0", ATTN), E(O_PROJ), K("triton_add_1", MLP, exact=False),
                      E(MLP), E(ATTN)))
    nodes = [("kernel", "triton_norm_0"), ("memset", None), ("kernel", "sm90_gemm"), ("kernel", "splitk_reduce"),
             ("empty", None), ("kernel", "triton_add_1"), ("kernel", "gemm_a"), ("kernel", "gemm_b")]
    labels = P.align(nodes, rec)
    assert labels == [
        (ATTN, P.EXACT),
        (O_PROJ, P.EXACT), (O_PROJ, P.EXACT), (O_PROJ, P.EXACT),  # one extern call: its kernels and memset
        None,  # not GPU work
        (MLP, P.COMMON),  # a kernel whose origins span modules
        ((("layers.0", "Block"),), P.COMMON), ((("layers.0", "Block"),), P.COMMON),  # two extern calls
    ]


def test_alignment_refuses_what_it_cannot_explain():
    rec = P.Recorded((K("triton_a_0", ATTN), K("triton_b_1", MLP)))
    # a node between two anchors with no extern call between them: no module, never a neighbour's
    assert P.align([("kernel", "triton_a_0"), ("kernel", "fill"), ("kernel", "triton_b_1")], rec)[1] == ((), P.UNKNOWN)
    # anchors out of order, a recorded kernel never launched, a repeated anchor: the sequence does not fit
    assert P.align([("kernel", "triton_b_1"), ("kernel", "triton_a_0")], rec) is None
    assert P.align([("kernel", "triton_a_0")], rec) is None
    assert P.align([("kernel", "triton_a_0"), ("kernel", "triton_a_0"), ("kernel", "triton_b_1")], rec) is None


Q, KP, V = (ATTN + ((f"layers.0.attn.{n}", "Linear"),) for n in ("q_proj", "k_proj", "v_proj"))


def _xc(stack, call="extern_kernels.mm"):
    return P.Item("extern", None, stack, True, call)


def test_watched_extern_calls_give_each_call_its_own_nodes():
    rec = P.Recorded((K("triton_norm_0", ATTN), _xc(Q), _xc(KP), _xc(V), P.Item("extern", None, ATTN, True, "torch.ops.aten.sdpa"),
                      K("triton_add_1", MLP)))
    nodes = [("kernel", "triton_norm_0"), ("kernel", "gemm"), ("kernel", "gemm"), ("kernel", "splitk"),
             ("kernel", "gemm"), ("kernel", "flash_fwd"), ("kernel", "triton_add_1")]
    # without the capture's view of the calls: four extern items share their common module
    assert P.align(nodes, rec)[1:6] == [(ATTN, P.COMMON)] * 5
    calls = [(1, 2, "extern_kernels.mm"), (2, 4, "extern_kernels.mm"), (4, 5, "extern_kernels.mm")]
    assert P.align(nodes, rec, calls)[1:6] == [(Q, P.EXACT), (KP, P.EXACT), (KP, P.EXACT), (V, P.EXACT),
                                               (ATTN, P.EXACT)]  # the one extern left: sdpa's kernel
    # calls that are not the recorded ones (another count or callable) are not used
    assert P.align(nodes, rec, calls[:2])[1] == (ATTN, P.COMMON)
    assert P.align(nodes, rec, calls[:2] + [(4, 5, "extern_kernels.bmm")])[1] == (ATTN, P.COMMON)
    # a watched call between other kernels than recorded: the sequence does not fit
    nodes_late = nodes[:6] + [("kernel", "triton_add_1"), ("kernel", "gemm")]
    assert P.align(nodes_late, rec, [(1, 2, "extern_kernels.mm"), (2, 4, "extern_kernels.mm"),
                                     (7, 8, "extern_kernels.mm")]) is None


def test_sequences_that_disagree_leave_nodes_unknown():
    twin0 = P.Recorded((K("triton_a_0", ATTN), E(O_PROJ)))
    twin1 = P.Recorded((K("triton_a_0", (("layers.1", "Block"),)), E(O_PROJ)))
    nodes = [("kernel", "triton_a_0"), ("kernel", "gemm")]
    fits = [P.align(nodes, twin0), P.align(nodes, twin1)]
    assert P.agree(fits) == [((), P.UNKNOWN), (O_PROJ, P.EXACT)]


def test_derived_scopes_nest_by_level_and_run():
    kinds = ["kernel", "kernel", "empty", "kernel", "kernel"]
    labels = [(ATTN, P.EXACT), (O_PROJ, P.COMMON), None, (MLP, P.EXACT), ((), P.UNKNOWN)]
    got = P.derive_scopes(kinds, labels, 10, backward=False)
    assert [(a, b, f.get("module"), f.get("module origin")) for a, b, f in got] == [
        (10, 14, "layers.0", None),
        (10, 12, "layers.0.attn", None),
        (13, 14, "layers.0.mlp", None),
        (11, 12, "layers.0.attn.o_proj", None),
        (10, 11, None, P.EXACT), (11, 12, None, P.COMMON), (13, 14, None, P.EXACT),
    ]
    assert got[0][2] == {"name": "layers.0", "module": "layers.0", "module_class": "Block"}
    back = P.derive_scopes(kinds, labels, 0, backward=True, wants=lambda p, c, d: d <= 3)
    assert {f.get("module") for _, _, f in back} == {"layers.0", "layers.0.attn", "layers.0.mlp", None}
    assert all(f["autograd_phase"] == "backward" for _, _, f in back if "module" in f)


def _launch(cuda, sess, name, kind):
    if name.startswith("gemm"):  # an extern call the capture watches (compiled._watch_externs)
        with recorder_scope(sess, {C.EXTERN: "extern_kernels.mm"}):
            cuda.launch(STREAM, name, kind)
    else:
        cuda.launch(STREAM, name, kind)


def _capture(cuda, regions, launches, scoped=False):
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry(), device=0)
    sess.start()
    sess.compiled = regions
    if scoped:
        cuda.launch(STREAM, "eager_before")
        with recorder_scope(sess, P.region_fields("torch.compile [0/0]")):
            for name, kind in launches:
                _launch(cuda, sess, name, kind)
        cuda.launch(STREAM, "eager_after")
    else:
        for name, kind in launches:
            _launch(cuda, sess, name, kind)
    sess.finish_capture()
    g = cuda.end_capture(STREAM)
    sess.bind_exec(cuda.instantiate(g))
    cuda.forget(g)
    rec = sess.record
    assert not any(C.EXTERN in i.fields for i in rec.scopes or ())  # bookkeeping, not an annotation
    assert not any(C.EXTERN in n.annotation for n in rec.nodes)
    return {n.kernel or n.type: n for n in rec.nodes}


LAUNCHES = [("triton_norm_0", "kernel"), ("sm90_gemm", "kernel"), ("triton_add_1", "kernel")]
RECORDED = P.Recorded((K("triton_norm_0", ATTN), E(O_PROJ), K("triton_add_1", (), exact=False), _xc(MLP), _xc(Q)),
                      backward=True)


@pytest.mark.usefixtures("capture_path")
def test_a_capture_inside_a_compiled_call_gets_module_scopes():
    regions = C.Regions()
    regions.regions.append((None, "torch.compile [0/0]", (RECORDED,)))
    k = _capture(FakeCuda(), regions, LAUNCHES + [("gemm_b", "kernel"), ("gemm_c", "kernel")])
    assert k["triton_norm_0"].annotation == {"name": "layers.0.attn", "module": "layers.0.attn",
                                             "module_class": "Attention", "compiled_region": "torch.compile [0/0]",
                                             "module origin": P.EXACT, "autograd_phase": "backward"}
    assert k["sm90_gemm"].annotation["module"] == "layers.0.attn.o_proj"
    assert k["triton_add_1"].annotation == P.region_fields("torch.compile [0/0]")
    # two watched mm calls after the last kernel: each call's nodes get its own module
    assert (k["gemm_b"].annotation["module"], k["gemm_b"].annotation["module origin"]) == ("layers.0.mlp", P.EXACT)
    assert k["gemm_c"].annotation["module"] == "layers.0.attn.q_proj"


@pytest.mark.usefixtures("capture_path")
def test_a_compiled_call_inside_a_capture_is_aligned_within_its_scope():
    regions = C.Regions()
    regions.regions.append((P.region_fields("torch.compile [0/0]"), "torch.compile [0/0]", (RECORDED,)))
    k = _capture(FakeCuda(), regions, LAUNCHES, scoped=True)
    assert k["eager_before"].annotation == {} and k["eager_after"].annotation == {}
    assert k["sm90_gemm"].annotation["module"] == "layers.0.attn.o_proj"
    assert k["triton_add_1"].annotation["module origin"] == P.UNKNOWN


@pytest.mark.usefixtures("capture_path")
def test_a_capture_that_does_not_follow_the_recorded_code_keeps_the_region_name_only():
    regions = C.Regions()
    regions.regions.append((None, "torch.compile [0/0]", (RECORDED,)))
    k = _capture(FakeCuda(), regions, [("triton_norm_0", "kernel"), ("other_kernel", "kernel")])
    assert {n: a.annotation.get("module") for n, a in k.items()} == {"triton_norm_0": None, "other_kernel": None}
    assert k["triton_norm_0"].annotation == P.region_fields("torch.compile [0/0]")


def test_compiled_code_not_generated_while_watched_is_said_once_and_never_raises(monkeypatch):
    """A compiled graph that runs in a capture with nothing recorded of its code (inductor
    loaded it from its cache) keeps the region's name; the process is told why once, at the
    capture's end, and ``-W error`` never turns that into the program's exception."""
    import contextlib
    import types
    import warnings

    from perfetto_graph_ann.capture import session as _session

    sess = types.SimpleNamespace(compiled=C.Regions())
    monkeypatch.setattr(_session, "current", lambda: sess)
    monkeypatch.setattr(C, "mark_kernels", lambda fields: contextlib.nullcontext())
    monkeypatch.setattr(C.CODEGEN, "unrecorded", 0)
    monkeypatch.setattr(C.CODEGEN, "warned", False)
    call = C._inside_capture(lambda self, x: x + 1)
    graph = object()  # a CompiledFxGraph inductor never generated here: not in OUTPUTS
    assert call(graph, 1) == 2 and C.CODEGEN.unrecorded == 1
    assert sess.compiled.regions == [(P.region_fields("torch.compile"), "torch.compile", ())]
    generated = type("Out", (), {})()  # generated while watched, nothing recorded (no GPU launch): not counted
    C.OUTPUTS.set(generated, "torch.compile [0/0]", ())
    assert call(generated, 2) == 3 and C.CODEGEN.unrecorded == 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        C._warn_unrecorded()
        C._warn_unrecorded()
    assert [str(w.message) for w in seen] == [C.UNRECORDED_WARNING] and "--fresh-compile" in C.UNRECORDED_WARNING
    monkeypatch.setattr(C.CODEGEN, "warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C._warn_unrecorded()  # raises nothing
    assert C.CODEGEN.warned


def test_inside_cudagraph_trees_capture_the_warning_waits_for_the_profiler(monkeypatch):
    """cudagraph trees capture inside ``warnings.catch_warnings(record=True)``, which would
    swallow the warning: a capture begun inside a compiled call defers it to the next
    profiler's prepare (or the process's exit), said once."""
    import warnings

    from perfetto_graph_ann.capture.calibration import KINETO

    monkeypatch.setattr(C.CODEGEN, "unrecorded", 1)
    monkeypatch.setattr(C.CODEGEN, "warned", False)
    monkeypatch.setattr(C.CODEGEN, "pending", False)
    monkeypatch.setattr(KINETO, "on_prepare", [])
    exits = []
    monkeypatch.setattr(C.atexit, "register", exits.append)
    regions = C.Regions()
    regions.regions.append((None, "torch.compile", ()))  # the whole capture: cudagraph trees'
    with warnings.catch_warnings(record=True) as swallowed:  # as cudagraph trees' capture
        warnings.simplefilter("always")
        C.RUNTIME.capture_ended(type("S", (), {"compiled": regions})())
        C.RUNTIME.capture_ended(type("S", (), {"compiled": regions})())
    assert swallowed == [] and C.CODEGEN.pending and len(KINETO.on_prepare) == 1 and len(exits) == 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        KINETO._run_on_prepare()  # a profiler prepared
        exits[0]()  # the process's exit: already said
    assert [str(w.message) for w in seen] == [C.UNRECORDED_WARNING] and KINETO.on_prepare == []


def _inductor_in(tmp_path, monkeypatch, caches: bool = False):
    """torch with inductor's cache, precompiled headers and compile records under ``tmp_path``
    (caches off unless ``caches``)."""
    torch = pytest.importorskip("torch")
    import tempfile

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # inductor's precompiled headers: default dir
    if not caches:
        monkeypatch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", raising=False)
    import torch._inductor.compile_fx  # noqa: F401
    from torch._inductor import codecache

    for name, sub in (("_HEADER_DIR", "headers"), ("_HEADER_LOCK_DIR", "headers/locks")):
        if hasattr(codecache, name):  # set when codecache was first imported, maybe by another test
            monkeypatch.setattr(codecache, name, str(tmp_path / sub))
    return torch


def _two_block_net(torch):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc1(x)))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return Net


def _compiled_step(torch, model):
    """Compile ``model`` (dynamo reset first), run one forward and backward; the launch
    sequences recorded or recovered meanwhile, forward first (code loaded again from the same
    file compares equal to the first load's: the table is emptied first)."""
    C.CODEGEN.by_code.clear()
    torch._dynamo.reset()
    net = torch.compile(model)
    net(torch.randn(4, 16, requires_grad=True)).sum().backward()
    return sorted(C.CODEGEN.by_code.values(), key=lambda r: r.backward)


def test_inductor_codegen_is_recorded_with_each_extern_calls_module(tmp_path, monkeypatch):
    """A real inductor compile on CPU: each ``mm`` of the two-layer MLP is recorded with its
    Linear's path, forward and backward, in launch order; CPU kernels (generated outside the
    GPU scheduling) have no origin rather than a guessed one."""
    torch = _inductor_in(tmp_path, monkeypatch)
    assert C.install() and C.install_roots()
    try:
        fwd, bwd = _compiled_step(torch, _two_block_net(torch)())
    finally:
        C.uninstall()
        C.uninstall_roots()
        torch._dynamo.reset()
    assert not fwd.backward and bwd.backward
    externs = [i.stack[-1][0] for i in fwd.items if i.kind == "extern"]
    assert externs == ["layers.0.fc1", "layers.0.fc2", "layers.1.fc1", "layers.1.fc2"]
    assert all(i.exact for i in fwd.items if i.kind == "extern")
    # backward: every path named is one of the Linear layers or a module around one, never another's
    named = [i.stack[-1][0] for i in bwd.items if i.kind == "extern" and i.stack]
    assert len(named) >= 4 and set(named) <= set(externs) | {"layers.0", "layers.1"}
    assert {"layers.0.fc2", "layers.1.fc2"} <= set(named)
    assert all(i.stack == () and not i.exact for i in fwd.items + bwd.items if i.kind == "kernel")


def test_a_graph_loaded_from_inductors_cache_gets_the_launches_its_compile_record_kept(tmp_path, monkeypatch):
    """A warm start: a later compile of the same model (a new instance, dynamo reset) loads both
    graphs from inductor's caches, generating nothing; their compile records give each launch
    the very module its first compile recorded, named from the new instance. Without a record
    (a cache filled before) nothing is recovered; a compile with inductor's caches off (``run
    --fresh-compile``: inductor then points its cache folder at a temporary one) keeps its
    records where they are found later; records can be turned off."""
    torch = _inductor_in(tmp_path, monkeypatch, caches=True)
    from torch._dynamo.utils import counters

    folder = tmp_path / "inductor" / "perfetto_graph_ann"
    Net = _two_block_net(torch)
    hits = lambda: counters["aot_autograd"]["autograd_cache_hit"]  # noqa: E731
    assert C.install() and C.install_roots()
    try:
        first = _compiled_step(torch, Net())
        kept = sorted(p.name for p in folder.iterdir())
        for p in folder.iterdir():
            p.unlink()
        recovered, hit = C.CODEGEN.recovered, hits()
        unrecorded = _compiled_step(torch, Net())
        assert hits() == hit + 1 and C.CODEGEN.recovered == recovered  # loaded, nothing to recover
        # as inductor does with its caches off: a temporary cache folder (torch's config
        # modules are patched with their own patch(): monkeypatch's undo deletes the entry)
        with torch._inductor.config.patch(force_disable_caches=True), monkeypatch.context() as m:
            m.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))
            fresh = _compiled_step(torch, Net())
        assert sorted(p.name for p in folder.iterdir()) == kept  # the same records, in the same place
        again = _compiled_step(torch, Net())
        assert hits() == hit + 2 and C.CODEGEN.recovered == recovered + 2
        # inductor's cache alone (AOT autograd's off): the backward loads at its first run
        with torch._functorch.config.patch(enable_autograd_cache=False):
            fx_hits = counters["inductor"]["fxgraph_cache_hit"]
            lazy = _compiled_step(torch, Net())
        assert counters["inductor"]["fxgraph_cache_hit"] == fx_hits + 2 and C.CODEGEN.recovered == recovered + 4
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", "off")  # read when installed
        C.uninstall()
        assert C.install() and C.CODEGEN.records_dir is None
        off = _compiled_step(torch, Net())
    finally:
        C.uninstall()
        C.uninstall_roots()
        torch._dynamo.reset()
    assert len(kept) == 2 and [r.backward for r in first] == [False, True] and unrecorded == []
    assert fresh == first and again == first and lazy == first  # every launch, every field
    assert [i.stack[-1][0] for i in again[0].items if i.kind == "extern"] == [
        "layers.0.fc1", "layers.0.fc2", "layers.1.fc1", "layers.1.fc2"]
    assert off == [] and C.CODEGEN.recovered == recovered + 4  # off: the cache hit recovers nothing


_WARM_START = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from test_compiled_paths import _two_block_net
from perfetto_graph_ann.capture import compiled as C

assert C.install() and C.install_roots()
net = torch.compile(_two_block_net(torch)())
net(torch.randn(4, 16, requires_grad=True)).sum().backward()
recs = sorted(C.CODEGEN.by_code.values(), key=lambda r: r.backward)
print(json.dumps({"recovered": C.CODEGEN.recovered, "records": [repr(r) for r in recs]}))
"""


def test_a_warm_start_in_another_process_gets_the_cold_starts_launches(tmp_path):
    """Two processes with one inductor cache and different hash seeds: the second loads both
    graphs from the cache and gets, from the first's compile records, its very launches."""
    pytest.importorskip("torch")
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TMPDIR=str(tmp_path))
    env.pop("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", None)
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    runs = []
    for seed in ("1", "2"):
        cp = subprocess.run([sys.executable, "-c", _WARM_START, os.path.dirname(os.path.abspath(__file__))],
                            capture_output=True, text=True, cwd=tmp_path, env=dict(env, PYTHONHASHSEED=seed),
                            timeout=300)
        assert cp.returncode == 0, cp.stderr[-3000:]
        runs.append(json.loads(cp.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["recovered"] == 0 and warm["recovered"] == 2
    assert len(cold["records"]) == 2 and warm["records"] == cold["records"]
    assert "layers.1.fc2" in cold["records"][0]


def test_the_join_counts_compiled_kernels_by_how_their_module_is_known():
    import dataclasses

    from support.join_expect import fixture_capture, fixture_trace
    from perfetto_graph_ann.annotations.capture_record import read_capture_record
    from perfetto_graph_ann.annotations.model import GraphRecord
    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.join.summary import warning_lines
    from perfetto_graph_ann.read.kineto import read_trace

    trace = read_trace(fixture_trace("two_branch"))
    ann = read_capture_record(fixture_capture("two_branch"))
    g = ann.graphs[0]
    origins = [P.EXACT, P.COMMON, P.UNKNOWN]
    nodes = tuple(dataclasses.replace(n, annotation={**n.annotation, "module origin": origins[i % 3]})
                  for i, n in enumerate(g.nodes))
    ann = dataclasses.replace(ann, graphs=(dataclasses.replace(g, nodes=nodes),) + ann.graphs[1:])
    layout = join(trace, ann, "all")
    # expected from the record: each matched event counts once, by its node's origin
    node_origin = {n.key & 0xFFFFFFFF: n.annotation["module origin"] for n in nodes}
    want: dict = {}
    matched = sum(layout.report.matched.values())
    assert sum(layout.report.module_origins.values()) == matched > 0
    work = [n for n in nodes if n.type in ("kernel", "memcpy", "memset")]
    per_node = matched // len(work)  # every replay matched in full (the fixture's calibrated join)
    assert per_node * len(work) == matched
    for n in nodes:
        if n.type in ("kernel", "memcpy", "memset"):
            want[node_origin[n.key & 0xFFFFFFFF]] = want.get(node_origin[n.key & 0xFFFFFFFF], 0) + per_node
    assert layout.report.module_origins == want
    assert any(line.startswith("note: compiled code: ") and f"{want[P.EXACT]} GPU events with an exact module path"
               in line for line in warning_lines(layout.report))


@pytest.mark.usefixtures("capture_path")
def test_watched_extern_calls_outside_any_region_leave_no_field():
    """A watched extern call in a capture with no compiled region found (the generated code run
    without its compiled graph's call on the stack) is bookkeeping only: no annotation."""
    k = _capture(FakeCuda(), C.Regions(), [("triton_norm_0", "kernel"), ("gemm_x", "kernel")])
    assert k["gemm_x"].annotation == {} and k["triton_norm_0"].annotation == {}


def test_finding_the_compiled_call_keeps_no_local_of_the_program_alive():
    """The stack walk at a capture's start reads only inductor's frames: a snapshot of a user
    frame's locals (Python < 3.13) would keep what the program deletes alive."""
    import weakref

    class Big:
        pass

    big = Big()
    ref = weakref.ref(big)
    assert C._enclosing(None) is None
    del big
    assert ref() is None
