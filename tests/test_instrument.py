"""Zero-code capture (issue 31): ``pga.instrument()``, module scopes and ``perfetto-graph-ann run``.

CPU tests on the fake CUDA backend (``capture_fakes``): captures started every way torch
starts them are annotated once; module calls during capture become nested scopes named by
their paths; the launcher instruments the program and its spawned children, saves one
sidecar per process, and refuses bad settings before the program runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import pytest
from support.capture_fakes import FAKE_TORCH_STREAM
from support.engine_support import requires_portable as requires_portable_engine

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import api, instrument as inst, modules as mods
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.errors import OutputError

pytestmark = pytest.mark.usefixtures("capture_path")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(fake_torch_cuda, monkeypatch):
    """The fake backend with no instrumentation before or after."""
    monkeypatch.setattr(api, "INSTRUMENTED", None)
    monkeypatch.setattr(inst, "_config", None)
    yield fake_torch_cuda
    inst.uninstrument()


def kernels(cuda, names: List[str]) -> None:
    for k in names:
        cuda.launch(FAKE_TORCH_STREAM, k)


def annotations_by_kernel() -> Dict[str, Dict[str, Any]]:
    return {n.kernel: dict(n.annotation) for g in REGISTRY.records() for n in g.nodes}


def test_plain_torch_captures_are_left_alone_until_instrumented(fresh):
    torch = sys.modules["torch"]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kernels(fresh, ["a"])
    assert REGISTRY.records() == []  # no pga.graph, no instrument(): nothing recorded


def test_every_way_of_capturing_is_annotated_once(fresh):
    torch = sys.modules["torch"]
    pga.instrument()
    pga.instrument()  # idempotent
    begin = torch.cuda.CUDAGraph.capture_begin
    assert getattr(begin, "_pga_original", None) is not None
    assert getattr(begin._pga_original, "_pga_original", None) is None  # not wrapped twice
    g1 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):  # as a framework runner / inductor does
        with pga.mark_kernels("attention"):
            kernels(fresh, ["k_attn"])
    g2 = torch.cuda.CUDAGraph()
    g2.capture_begin()  # called directly
    with pga.mark_kernels("mlp"):
        kernels(fresh, ["k_mlp"])
    g2.capture_end()
    g3 = torch.cuda.CUDAGraph()
    with pga.graph(g3, name="explicit"):  # pga.graph inside an instrumented process: one record
        with pga.mark_kernels("own"):
            kernels(fresh, ["k_own"])
    recs = REGISTRY.records()
    assert len(recs) == 3
    assert annotations_by_kernel() == {"k_attn": {"name": "attention"}, "k_mlp": {"name": "mlp"},
                                       "k_own": {"name": "own"}}
    assert sorted(r.name or "" for r in recs) == ["", "", "explicit"]


def test_torch_cuda_graph_replaced_by_pga_graph_does_not_recurse(fresh, monkeypatch):
    torch = sys.modules["torch"]
    original = torch.cuda.graph
    monkeypatch.setattr(torch.cuda, "graph", pga.graph)
    api._TORCH_GRAPH[0] = original  # what a real torch keeps in torch.cuda.graphs.graph
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, name="patched"):
        kernels(fresh, ["k"])
    assert [r.name for r in REGISTRY.records()] == ["patched"]


def test_uninstrument_and_the_context_manager(fresh):
    torch = sys.modules["torch"]
    with pga.instrument():
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            kernels(fresh, ["in"])
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        kernels(fresh, ["out"])
    assert set(annotations_by_kernel()) == {"in"}
    pga.instrument()
    pga.uninstrument()
    g3 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g3):
        kernels(fresh, ["after"])
    assert set(annotations_by_kernel()) == {"in"}


def test_a_failing_annotation_never_breaks_the_programs_capture(fresh, monkeypatch):
    """In an instrumented process our errors become a warning; the capture and replay go on."""
    torch = sys.modules["torch"]
    pga.instrument()

    def boom(self):
        raise RuntimeError("node table unreadable")

    monkeypatch.setattr(api._session.CaptureSession, "finish_capture", boom)
    g = torch.cuda.CUDAGraph()
    with pytest.warns(RuntimeWarning, match="left unannotated: node table unreadable"):
        with torch.cuda.graph(g):
            kernels(fresh, ["k"])
    g.replay()  # the graph works
    # an explicit pga.graph still raises (it asked for annotations)
    g2 = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="node table unreadable"):
        with pga.graph(g2):
            kernels(fresh, ["k2"])


def test_bad_settings_fail_at_once(tmp_path):
    with pytest.raises(pga.ModuleScopes.__init__.__globals__["InputError"]):
        pga.ModuleScopes(max_depth=-1)
    with pytest.raises(Exception, match="include"):
        pga.ModuleScopes(include=("",))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception, match="cannot create the output folder"):
        pga.instrument(out=str(blocker / "sub"))
    assert inst.current() is None


# ---- module scopes ---------------------------------------------------------------------------

class _Module:
    """The fake ``torch.nn.Module``, laid out as torch's (>= 2.0): ``__call__`` is
    ``_wrapped_call_impl``, which calls ``_call_impl`` (what the module scopes wrap), which runs
    ``forward``."""

    _compiled_call_impl = None

    def _call_impl(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _wrapped_call_impl(self, *args, **kwargs):
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    __call__ = _wrapped_call_impl


class FakeModule(_Module):
    """Just what module scopes use: named_modules, and a call launching its kernel then its children's."""

    def __init__(self, hooks, kernel=None, **children):
        self._hooks, self._kernel, self._children = hooks, kernel, children
        self._modules = children  # where torch keeps submodules: the owner lookup reads it
        self.cuda = None

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def forward(self):
        cuda = self._hooks["cuda"]
        if self._kernel and FAKE_TORCH_STREAM in cuda.capturing:  # eager kernels are not recorded
            cuda.launch(FAKE_TORCH_STREAM, self._kernel)
        for child in self._children.values():
            child()


class Attention(FakeModule):
    pass


class Linear(FakeModule):
    pass


@pytest.fixture
def nn(fresh, monkeypatch):
    """``torch.nn.Module`` on top of the fake torch; ``hooks["wrapped"]()``: is any of its call
    attributes wrapped now."""
    hooks = {"cuda": fresh, "wrapped": lambda: any(_Module.__dict__[k] is not v for k, v in ORIGINAL_CALLS.items())}
    module = types.ModuleType("torch.nn")
    module.Module = _Module
    monkeypatch.setitem(sys.modules, "torch.nn", module)
    monkeypatch.setattr(sys.modules["torch"], "nn", module, raising=False)
    monkeypatch.setattr(mods, "NAMES", mods._Names())
    return hooks


ORIGINAL_CALLS = {k: _Module.__dict__[k] for k in ("__call__", "_call_impl")}


def layer(hooks):
    return FakeModule(hooks, None, self_attn=Attention(hooks, "k_attn", o_proj=Linear(hooks, "k_o")),
                      mlp=Linear(hooks, "k_mlp"))


def decoder(hooks):
    return FakeModule(hooks, "k_embed", layers=FakeModule(hooks, None, **{"0": layer(hooks), "1": layer(hooks)}))


def scopes_of(kind_kernel: str) -> List[str]:
    """The module paths around each node of that kernel, outermost first, per node."""
    out = []
    for g in REGISTRY.records():
        inst_by_id = {s.id: s for s in g.scopes or ()}
        for n in g.nodes:
            if n.kernel == kind_kernel:
                out.append([inst_by_id[i].fields.get("module") for i in n.scopes])
    return out


def test_module_calls_become_nested_scopes_named_by_path(nn, fresh):
    torch = sys.modules["torch"]
    model = decoder(nn)
    pga.instrument(modules=True)
    model()  # eager: nn.Module.__call__ is not even wrapped outside a capture
    assert not nn["wrapped"]()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model()
        with pga.mark_kernels("tail"):  # hand-written scopes still work beside module scopes
            kernels(fresh, ["k_tail"])
    assert not nn["wrapped"]()  # put back at the capture's end
    ann = {n.kernel: dict(n.annotation) for r in REGISTRY.records() for n in r.nodes}
    assert ann["k_embed"] == {"name": "FakeModule", "module": "FakeModule", "module_class": "FakeModule"}
    o_projs = [dict(n.annotation) for r in REGISTRY.records() for n in r.nodes if n.kernel == "k_o"]
    assert [a["module"] for a in o_projs] == ["layers.0.self_attn.o_proj", "layers.1.self_attn.o_proj"]
    assert o_projs[0]["module_class"] == "Linear" and o_projs[0]["name"] == "layers.0.self_attn.o_proj"
    assert scopes_of("k_o")[1] == ["FakeModule", "layers", "layers.1", "layers.1.self_attn",
                                   "layers.1.self_attn.o_proj"]
    assert ann["k_tail"] == {"name": "tail"}


def test_a_runner_calling_forward_itself_gets_the_models_own_paths(nn, fresh):
    """SGLang's runner calls ``model.forward(...)``: no call of the model itself, so the first
    module called is a submodule. Its paths are still those of the model that holds it (found
    through its owners), so two layers called one after the other never share a path, nor do
    layers captured one by one (``make_graphed_callables`` of each); a module held by two
    models stays a root of its own (which of them it belongs to is unknown)."""
    torch = sys.modules["torch"]
    model = decoder(nn)
    pga.instrument(modules=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model.forward()  # k_embed in no module; layers called first, its owner the model
    assert scopes_of("k_o")[1] == ["layers", "layers.1", "layers.1.self_attn", "layers.1.self_attn.o_proj"]
    assert scopes_of("k_embed") == [[]]

    flat = FakeModule(nn, None, **{"0": layer(nn), "1": layer(nn)})
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        flat.forward()  # a model whose forward loops over its layers, called by the runner
    assert [s for s in scopes_of("k_o") if s[0] != "layers"] == [
        ["0", "0.self_attn", "0.self_attn.o_proj"], ["1", "1.self_attn", "1.self_attn.o_proj"]]

    shared = layer(nn)
    held = [FakeModule(nn, None, a=shared), FakeModule(nn, None, b=shared)]  # two owners: which one is unknown
    g3 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g3):
        held[0].forward()
    assert ["FakeModule", "self_attn", "self_attn.o_proj"] in scopes_of("k_o")

    class Broken(FakeModule):  # an owner whose named_modules raises: the module is its own root
        def named_modules(self, prefix=""):
            raise RuntimeError("broken")
    lone = layer(nn)
    broken = Broken(nn, None, y=lone)
    REGISTRY.clear()
    g4 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g4):
        _Runner(lone).capture()
    assert scopes_of("k_o") == [["FakeModule", "self_attn", "self_attn.o_proj"]] and broken is not None

    graphed = FakeModule(nn, None, **{"0": layer(nn), "1": layer(nn)})
    REGISTRY.clear()
    kept = []  # a graph's record lives as long as the graph
    for name in ("0", "1"):  # make_graphed_callables of each layer: a graph per layer, called by torch's code
        kept.append(torch.cuda.CUDAGraph())
        with torch.cuda.graph(kept[-1]):
            _Runner(graphed._children[name]).capture()
    assert scopes_of("k_o") == [["0", "0.self_attn", "0.self_attn.o_proj"], ["1", "1.self_attn", "1.self_attn.o_proj"]]


def test_with_the_heap_frozen_as_sglang_captures_the_model_is_found_on_the_stack(nn, fresh):
    """SGLang freezes the garbage collector's heap while it captures (``gc.freeze``): its model
    is then in no list of the collector. The model whose ``forward`` the runner called is found
    on the stack (its frame's ``self``, Python >= 3.12); before 3.12 the first module called is
    the root, as it was before owners were looked up (a path below the model, never a wrong one)."""
    import gc

    torch = sys.modules["torch"]
    model = decoder(nn)
    pga.instrument(modules=True)
    g = torch.cuda.CUDAGraph()
    gc.collect()
    gc.freeze()
    try:
        with torch.cuda.graph(g):
            model.forward()
    finally:
        gc.unfreeze()
    if sys.version_info >= (3, 12):
        assert scopes_of("k_o")[1] == ["layers", "layers.1", "layers.1.self_attn", "layers.1.self_attn.o_proj"]
    else:
        assert scopes_of("k_o")[1] == ["FakeModule", "1", "1.self_attn", "1.self_attn.o_proj"]


class _Runner:
    """A graph runner (no module) calling a module that a model holds."""

    def __init__(self, module):
        self.module = module

    def capture(self):
        self.module()


@pytest.mark.parametrize("cfg,want", [
    (dict(max_depth=2), ["FakeModule", "layers", "layers.1"]),
    (dict(include=("*.self_attn*",)), ["layers.1.self_attn", "layers.1.self_attn.o_proj"]),
    (dict(exclude=("Linear",)), ["FakeModule", "layers", "layers.1", "layers.1.self_attn"]),
    (dict(include=("Attention",)), ["layers.1.self_attn"]),
])
def test_module_filters(nn, fresh, cfg, want):
    torch = sys.modules["torch"]
    pga.instrument(modules=pga.ModuleScopes(**cfg))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        decoder(nn)()
    assert scopes_of("k_o")[1] == want


def test_mark_modules_names_by_its_own_prefix_without_instrument(nn, fresh):
    torch = sys.modules["torch"]
    model = decoder(nn)
    pga.mark_modules(model, prefix="model", max_depth=3)
    other = Linear(nn, "k_other")
    g = torch.cuda.CUDAGraph()
    with pga.graph(g):
        model()
        other()  # not given to mark_modules and no instrument(modules=...): no scope
    assert scopes_of("k_o")[0] == ["model", "model.layers", "model.layers.0", "model.layers.0.self_attn"]  # depth <= 3
    assert scopes_of("k_other") == [[]]


# ---- the launcher ----------------------------------------------------------------------------

def _run(args, tmp_path, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "run", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120, **kw)


CHILD = r'''
import json, multiprocessing as mp, os, sys
def probe(q):
    from perfetto_graph_ann.capture import instrument as i
    q.put((os.getpid(), i.current() is not None, i.current().out if i.current() else None))
if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    q = ctx.Queue()
    p = ctx.Process(target=probe, args=(q,))
    p.start(); got = q.get(timeout=60); p.join()
    probe_q = [] ; from perfetto_graph_ann.capture import instrument as i
    print(json.dumps({"parent": [os.getpid(), i.current() is not None], "child": got}))
'''


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_run_instruments_the_program_and_its_spawned_children(tmp_path, method):
    (tmp_path / "prog.py").write_text(CHILD)
    cp = _run(["--modules", "--out", "o", "--", sys.executable, "prog.py", method], tmp_path)
    assert cp.returncode == 0, cp.stderr
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    assert res["parent"][1] is True and res["child"][1] is True
    assert res["child"][0] != res["parent"][0] and res["child"][2] == str(tmp_path / "o")


def test_run_keeps_the_programs_exit_code_and_own_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    env_pp = f"{own}"
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "run", "--out", "o", "--", sys.executable, "-c",
                         "import os, sys; print(os.environ.get('OWN_SITE')); sys.exit(7)"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=120,
                        env=dict(os.environ, PYTHONPATH=os.pathsep.join([env_pp, str(REPO)])))
    assert cp.returncode == 7 and cp.stdout.strip() == "ran", cp.stderr


@pytest.mark.parametrize("args,msg", [
    (["--include", "x", "--"], "need --modules"),
    (["--fresh-compile", "--"], "need --modules"),
    (["--modules", "--max-depth", "-1", "--"], "max_depth"),
    (["--out", "blocker/sub", "--"], "cannot create the output folder"),
    (["--"], "no command to run"),
])
def test_run_refuses_bad_settings_before_the_program_starts(tmp_path, args, msg):
    (tmp_path / "blocker").write_text("a file")
    marker = tmp_path / "ran"
    prog = [] if args == ["--"] else [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    cp = _run(args + prog, tmp_path)
    assert cp.returncode == 2 and msg in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
    assert not marker.exists()


@pytest.mark.parametrize("var,value", [("PERFETTO_GRAPH_ANN_WARM_CUPTI", "sometimes"),
                                       ("PERFETTO_GRAPH_ANN_NODE_WATCH", "maybe"),
                                       ("PERFETTO_GRAPH_ANN_MARKERS_FROM", "-3"),
                                       ("PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS", "soon")])
def test_run_refuses_a_bad_capture_setting_before_the_program_starts(tmp_path, var, value):
    marker = tmp_path / "ran"
    env = dict(os.environ, PYTHONPATH=str(REPO), **{var: value})
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "run", "--out", str(tmp_path / "o"), "--",
                         sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"],
                        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert cp.returncode == 2 and var in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
    assert not marker.exists()


def test_a_compile_records_folder_that_cannot_be_written_is_refused_at_start(tmp_path, monkeypatch):
    """Under module scopes (``run --modules``, ``instrument(modules=True)``) a compile records
    folder given that cannot be made is refused before the program runs, naming the variable;
    without module scopes no record is kept, so it is not looked at."""
    (tmp_path / "blocker").write_text("a file")
    bad = str(tmp_path / "blocker" / "records")
    marker = tmp_path / "ran"
    env = dict(os.environ, PYTHONPATH=str(REPO), PERFETTO_GRAPH_ANN_COMPILE_RECORDS=bad)
    prog = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    for extra, code in ((["--modules"], 2), ([], 0)):
        cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "run", *extra, "--out", str(tmp_path / "o"),
                             "--", *prog], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert cp.returncode == code and marker.exists() == (code == 0), cp.stderr
        if code:
            assert "PERFETTO_GRAPH_ANN_COMPILE_RECORDS" in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", bad)
    with pytest.raises(OutputError, match="PERFETTO_GRAPH_ANN_COMPILE_RECORDS: cannot create"):
        pga.instrument(modules=True)
    assert inst.current() is None
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", str(tmp_path / "records"))
    inst.check_settings(modules=True)  # made, writable
    assert (tmp_path / "records").is_dir()


def test_sidecar_saved_beside_traces_is_found_by_convert(tmp_path):
    """``run --out DIR``'s ``<host>_<pid>.pga`` beside torch's ``<host>_<pid>.<time>.pt.trace.json``."""
    from test_replay_record import SEQ, recorded, truth_labels, twins, window, write_trace

    from perfetto_graph_ann.annotations.files import save_annotations

    assert inst.sidecar_name("node7", 4321) == "node7_4321.pga"
    trace = tmp_path / "node7_4321.1790000000000.pt.trace.json"
    truth = write_trace(trace, SEQ)
    save_annotations(tmp_path / inst.sidecar_name("node7", 4321), twins(replays=(window([recorded(SEQ, 1)], SEQ),)))
    out = tmp_path / "out.json"
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "convert", str(trace), "-o", str(out)],
                        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert "node7_4321.pga (saved by perfetto-graph-ann run" in cp.stderr
    got: Dict[int, List[str]] = {}
    for e in json.loads(out.read_text())["traceEvents"]:
        if e.get("cat") == "kernel":
            got.setdefault(e["args"]["correlation"], []).append(e["args"].get("name"))
    assert got == truth_labels(truth)
    from perfetto_graph_ann.query.fleet import find_sidecar

    assert find_sidecar(trace) == tmp_path / "node7_4321.pga"


# ---- SQL: graph_ann.modules, computed independently from the events -------------------------

def module_graph():
    """One graph: Decoder > layers.0 > layers.0.attn, as module scopes record them."""
    from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, ScopeInstance
    from test_replay_record import KERNELS_OF

    def f(path, cls):
        return {"name": path, "module": path, "module_class": cls}

    scopes = (ScopeInstance(0, f("Decoder", "Decoder")), ScopeInstance(1, f("layers.0", "Layer"), 0),
              ScopeInstance(2, f("layers.0.attn", "Attention"), 1))
    inner = [(f("layers.0", "Layer"), (0, 1)), (f("layers.0.attn", "Attention"), (0, 1, 2)),
             (f("Decoder", "Decoder"), (0,))]
    nodes = tuple(NodeRecord(key=(5 << 32) | i, kernel=k, grid=grid, block=(128, 1, 1), annotation=inner[i][0],
                             scopes=inner[i][1], stream=7, ordinal=i)  # calibrated: the two GEMMs told apart
                  for i, (k, grid) in enumerate(KERNELS_OF))
    return AnnotationSet(graphs=(GraphRecord(5, nodes, name="decode", scopes=scopes),))


@requires_portable_engine
def test_sql_modules_total_self_and_share(tmp_path):
    from test_replay_record import Launch, write_trace

    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.pipeline.convert import convert
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.session import open_trace
    from perfetto_graph_ann.read.kineto import read_trace

    launches = [Launch(5, 1, 1000 * (i + 1)) for i in range(3)]
    write_trace(tmp_path / "t.json", launches)
    trace = read_trace(tmp_path / "t.json")
    out = tmp_path / "t.pftrace"
    convert(trace, out, layout=join(trace, module_graph()))
    doc = json.loads((tmp_path / "t.json").read_text())
    # expected, from the events: kernel j of each launch is node j
    per = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            per.setdefault(e["args"]["correlation"], []).append((round(e["ts"] * 1000), round(e["dur"] * 1000)))
    expect = {}
    for replay, corr in enumerate(sorted(per)):
        ks = sorted(per[corr])
        union = lambda ivs: sum(d for _, d in ivs)  # noqa: E731 (the synthetic kernels never overlap)
        total_all = union(ks)
        for path, members, own in (("Decoder", [0, 1, 2], [2]), ("layers.0", [0, 1], [0]),
                                   ("layers.0.attn", [1], [1])):
            total = union([ks[i] for i in members])
            expect[(replay, path)] = (len(members), total, sum(ks[i][1] for i in own), total / total_all)
    with open_trace(out, engine="portable") as s:
        inst = metrics.module_instances(s)
        summ = metrics.module_summary(s)
    got = {(r.replay, r.module_path): (r.kernel_count, r.total_dur, r.self_dur, r.replay_share)
           for r in inst.itertuples()}
    assert got.keys() == expect.keys()
    for k, (n, total, self_, share) in expect.items():
        g = got[k]
        assert (g[0], g[1], g[2]) == (n, total, self_) and abs(g[3] - share) < 1e-12, (k, g)
    assert dict(zip(inst.module_path, inst.module_class)) == {"Decoder": "Decoder", "layers.0": "Layer",
                                                             "layers.0.attn": "Attention"}
    assert dict(zip(summ.module_path, summ.depth)) == {"Decoder": 0, "layers.0": 1, "layers.0.attn": 2}
    assert set(summ.replays) == {3} and list(summ.module_path)[0] == "Decoder"  # largest total first
    # the CLI: report --by module adds the table; without it the report is as before
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "report", str(out), "--engine", "portable",
                         "--by", "module", "-q", "--all"], capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr
    section = cp.stdout.split("Modules, per module path across replays (graph_ann_module_summary)\n", 1)[1]
    assert [ln.split()[1] for ln in section.strip().splitlines()[2:5]] == ["Decoder", "layers.0", "layers.0.attn"]
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "report", str(out), "--engine", "portable",
                         "--by", "module", "-q", "--rows", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr
    # the summary shows the module kinds (test_sql_module_kinds_take_every_layers_module_together), --all both
    assert "graph_ann_module_summary" not in cp.stdout and "(graph_ann_module_kind): 3 rows" in cp.stdout
    cp = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "report", str(out), "--engine", "portable", "-q"],
                        capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0 and "graph_ann_module_summary" not in cp.stdout


def two_layer_graph():
    """One graph: Net > blocks.10 > blocks.10.attn and Net > blocks.2 > blocks.2.attn; kernel 0
    in blocks.10.attn, kernel 1 in blocks.2.attn, kernel 2 in Net itself."""
    from perfetto_graph_ann.annotations.model import AnnotationSet, GraphRecord, NodeRecord, ScopeInstance
    from test_replay_record import KERNELS_OF

    def f(path, cls):
        return {"name": path, "module": path, "module_class": cls}

    scopes = (ScopeInstance(0, f("Net", "Net")), ScopeInstance(1, f("blocks.10", "Block"), 0),
              ScopeInstance(2, f("blocks.10.attn", "Attention"), 1), ScopeInstance(3, f("blocks.2", "Block"), 0),
              ScopeInstance(4, f("blocks.2.attn", "Attention"), 3))
    inner = [(f("blocks.10.attn", "Attention"), (0, 1, 2)), (f("blocks.2.attn", "Attention"), (0, 3, 4)),
             (f("Net", "Net"), (0,))]
    nodes = tuple(NodeRecord(key=(5 << 32) | i, kernel=k, grid=grid, block=(128, 1, 1), annotation=inner[i][0],
                             scopes=inner[i][1], stream=7, ordinal=i) for i, (k, grid) in enumerate(KERNELS_OF))
    return AnnotationSet(graphs=(GraphRecord(5, nodes, name="decode", scopes=scopes),))


@requires_portable_engine
def test_sql_module_kinds_take_every_layers_module_together(tmp_path):
    """graph_ann_module_kind: the paths with their layer indices as ``*``, per replay the kind's
    modules summed, then averaged over replays; computed here from the trace's events."""
    from test_replay_record import Launch, write_trace

    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.pipeline.convert import convert
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.session import open_trace
    from perfetto_graph_ann.read.kineto import read_trace

    write_trace(tmp_path / "t.json", [Launch(5, 1, 1000 * (i + 1)) for i in range(3)])
    trace = read_trace(tmp_path / "t.json")
    out = tmp_path / "t.pftrace"
    convert(trace, out, layout=join(trace, two_layer_graph()))
    per = {}
    for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]:
        if e.get("cat") == "kernel":
            per.setdefault(e["args"]["correlation"], []).append((round(e["ts"] * 1000), round(e["dur"] * 1000)))
    # kind -> (modules, members (kernel indices, summed over the modules), own kernels)
    kinds = {"Net": (1, [0, 1, 2], [2]), "blocks.*": (2, [0, 1], []), "blocks.*.attn": (2, [0, 1], [0, 1])}
    acc = {k: [] for k in kinds}
    for corr in sorted(per):
        ks = sorted(per[corr])
        busy = sum(d for _, d in ks)  # the kernels never overlap
        for k, (_, members, own) in kinds.items():
            total, self_ = sum(ks[i][1] for i in members), sum(ks[i][1] for i in own)
            acc[k].append((len(members), total, self_, total / busy, self_ / busy))
    with open_trace(out, engine="portable") as s:
        df = metrics.module_kinds(s)
        paths = s.query("INCLUDE PERFETTO MODULE graph_ann.modules; SELECT graph_ann_module_kind_path('a.10.b.3x.4') "
                        "AS a, graph_ann_module_kind_path('7') AS b, graph_ann_module_kind_path('x..0') AS c, "
                        "graph_ann_module_kind_path('') AS d").rows[0]
    assert (paths.a, paths.b, paths.c, paths.d) == ("a.*.b.3x.*", "*", "x..*", "")
    assert list(df.kind_path) == ["blocks.*.attn", "Net", "blocks.*"]  # most self time first
    for r in df.itertuples():
        n = len(acc[r.kind_path])
        mean = [sum(v[i] for v in acc[r.kind_path]) / n for i in range(5)]
        assert (r.module_count, r.replays) == (kinds[r.kind_path][0], 3)
        assert (r.kernel_count, r.mean_total_dur, r.mean_self_dur) == tuple(mean[:3]), r
        assert abs(r.mean_replay_share - mean[3]) < 1e-12 and abs(r.mean_self_share - mean[4]) < 1e-12, r
    assert dict(zip(df.kind_path, df.module_class)) == {"Net": "Net", "blocks.*": "Block", "blocks.*.attn": "Attention"}
    assert dict(zip(df.kind_path, df.depth)) == {"Net": 0, "blocks.*": 1, "blocks.*.attn": 2}
    # the CLI: --by module summarises the kinds (most self time first); --all and json have both tables
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    base = [sys.executable, "-m", "perfetto_graph_ann", "report", str(out), "--engine", "portable", "--by", "module", "-q"]
    cp = subprocess.run(base + ["--rows", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert "graph_ann_module_summary" not in cp.stdout
    section = cp.stdout.split("Module kinds, each module of every layer together (graph_ann_module_kind): ", 1)[1]
    head, *rows = section.strip().splitlines()
    assert head == "3 rows" and rows[2].split()[1] == "blocks.*.attn"
    assert rows[3] == "  (2 more; shown: most mean_self_dur; everything: --all or --format csv/json)"
    cp = subprocess.run(base + ["--format", "json"], capture_output=True, text=True, env=env, timeout=300)
    tables = json.loads(cp.stdout)
    assert [r["kind_path"] for r in tables["module_kinds"]] == list(df.kind_path) and len(tables["modules"]) == 5


def test_run_never_puts_a_site_packages_on_the_programs_path(tmp_path):
    """From a checkout the package's root joins PYTHONPATH; from an install it never does (a
    program started with another Python must not import this one's packages)."""
    import argparse
    import site

    from perfetto_graph_ann.cli import run as run_cmd

    site_dir = site.getsitepackages()[0]
    assert run_cmd.is_site_dir(site_dir) and not run_cmd.is_site_dir(str(REPO))
    args = argparse.Namespace(out=str(tmp_path / "o"), modules=False, max_depth=None, include=[], exclude=[],
                              no_calibrate=False, no_collectives=False)
    env = run_cmd.build_env(args, environ={"PYTHONPATH": "/x"})
    parts = env["PYTHONPATH"].split(os.pathsep)
    from perfetto_graph_ann.capture.bootstrap import SITE_DIR

    assert parts[:2] == [SITE_DIR, "/x"]
    assert all(not run_cmd.is_site_dir(p) for p in parts)


def test_run_fresh_compile_turns_compile_caches_off_in_the_program_only(tmp_path):
    """``--fresh-compile``: inductor's and vLLM's caches of compiled code off in the program's
    environment (a value the user set wins); without it neither is set."""
    import argparse

    from perfetto_graph_ann.cli import run as run_cmd

    def env_of(fresh, environ):
        args = argparse.Namespace(out=str(tmp_path / "o"), modules=True, max_depth=None, include=[], exclude=[],
                                  no_calibrate=False, no_collectives=False, fresh_compile=fresh)
        return run_cmd.build_env(args, environ=environ)

    assert run_cmd.FRESH_COMPILE == ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "VLLM_DISABLE_COMPILE_CACHE")
    env = env_of(True, {})
    assert env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] == "1" and env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert env_of(True, {"VLLM_DISABLE_COMPILE_CACHE": "0"})["VLLM_DISABLE_COMPILE_CACHE"] == "0"
    assert not set(run_cmd.FRESH_COMPILE) & set(env_of(False, {}))


class Raising(FakeModule):
    def forward(self):
        super().forward()
        raise KeyError("from forward")


def test_module_scopes_close_when_forward_raises(nn, fresh):
    """The wrapper closes the scope on the way out and the program sees its own exception."""
    torch = sys.modules["torch"]
    pga.instrument(modules=True)
    model = FakeModule(nn, None, bad=Raising(nn, "k_bad"), after=Linear(nn, "k_after"))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        assert nn["wrapped"]()
        with pytest.raises(KeyError, match="from forward"):
            model()
        kernels(fresh, ["k_outside"])
    ann = {n.kernel: dict(n.annotation) for r in REGISTRY.records() for n in r.nodes}
    assert ann["k_bad"]["module"] == "bad" and ann["k_outside"] == {}  # no scope left open
    assert not nn["wrapped"]()


@pytest.mark.parametrize("grad", [True, False])
def test_module_scopes_keep_no_backward_range_with_grad_off(nn, fresh, monkeypatch, grad):
    """Under no_grad / inference_mode (serving) a module's block can claim no backward node, so
    its scope goes straight onto the capture's scope recorder, not through ``mark_kernels`` and
    its backward bookkeeping (~11 us a scope on the H200); the nodes' annotations are the same."""
    torch = sys.modules["torch"]
    monkeypatch.setattr(torch, "is_grad_enabled", lambda: grad, raising=False)
    seen = []
    real = mods.mark_kernels

    def spy(fields, backward=True):
        seen.append(backward)
        return real(fields, backward=backward)
    monkeypatch.setattr(mods, "mark_kernels", spy)
    pga.instrument(modules=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        decoder(nn)()
    assert seen == [] if not grad else (seen and set(seen) == {True})
    g.replay()
    assert scopes_of("k_o")[1] == ["FakeModule", "layers", "layers.1", "layers.1.self_attn",
                                   "layers.1.self_attn.o_proj"]
    assert annotations_by_kernel()["k_o"] == {"name": "layers.1.self_attn.o_proj", "module": "layers.1.self_attn.o_proj",
                                              "module_class": "Linear"}


def test_module_scopes_follow_new_settings_and_names_between_captures(nn, fresh):
    """What a module's scope is gets remembered across captures (the per-call cost), but never
    past a change of settings or of names."""
    torch = sys.modules["torch"]
    model = decoder(nn)

    def capture_o_proj_scopes():
        REGISTRY.clear()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model()
        g.replay()
        return scopes_of("k_o")[1]

    pga.instrument(modules=pga.ModuleScopes(max_depth=2))
    assert capture_o_proj_scopes() == ["FakeModule", "layers", "layers.1"]
    assert capture_o_proj_scopes() == ["FakeModule", "layers", "layers.1"]
    pga.uninstrument()
    pga.instrument(modules=pga.ModuleScopes(max_depth=4))
    assert capture_o_proj_scopes() == ["FakeModule", "layers", "layers.1", "layers.1.self_attn",
                                       "layers.1.self_attn.o_proj"]
    pga.mark_modules(model, prefix="model", max_depth=1)
    assert capture_o_proj_scopes() == ["model", "model.layers"]


def test_a_dropped_module_leaves_the_module_scope_cache(nn, fresh):
    import gc
    import weakref

    torch = sys.modules["torch"]
    pga.instrument(modules=True)
    extra = Linear(nn, "k_extra")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        decoder(nn)()
        extra()
    key, ref = id(extra), weakref.ref(extra)
    assert key in mods.HOOKS._prepared
    del extra
    gc.collect()
    assert ref() is None and key not in mods.HOOKS._prepared


def test_a_capture_ending_inside_a_module_call_closes_its_scopes(nn, fresh, capture_path):
    """A module whose forward ends the capture (a runner module capturing inside its own call):
    the scopes still open are closed at the end, and the module call's own exit closes nothing twice."""
    torch = sys.modules["torch"]

    class Runner(FakeModule):
        def forward(self):
            self._hooks["cuda"].launch(FAKE_TORCH_STREAM, "k_before_end")
            self.graph.capture_end()  # the capture ends inside this call
            return "done"

    pga.instrument(modules=True)
    runner = Runner(nn, None)
    g = torch.cuda.CUDAGraph()
    runner.graph = g
    model = FakeModule(nn, "k_root", runner=runner)
    g.capture_begin()
    model()
    assert not nn["wrapped"]()
    g.replay()
    ann = annotations_by_kernel()
    assert ann["k_root"]["module"] == "FakeModule"
    assert ann["k_before_end"]["module"] == "runner"


def test_the_compiled_path_wraps_module_calls_in_c(nn, fresh, capture_path):
    torch = sys.modules["torch"]
    pga.instrument(modules=True)
    seen = []

    class Probe(FakeModule):
        def forward(self):
            seen.append(type(type(self).__mro__[-2].__dict__["_call_impl"]).__name__)
            super().forward()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        Probe(nn, "k_probe")()
    assert seen == (["ModuleCall"] if capture_path == "compiled" else ["function"])


def test_module_scopes_wrap_call_impl_and_never_the_call_slot(nn, fresh, capture_path):
    """torch's layout: ``_call_impl`` is wrapped during capture, ``__call__`` (a slot: setting it
    updates every subclass) never is; a layout without ``_call_impl`` gets ``__call__`` wrapped."""
    torch = sys.modules["torch"]
    assert mods.wrapped_attribute(_Module) == "_call_impl"
    pga.instrument(modules=True)
    seen = []

    class Probe(FakeModule):
        def forward(self):
            seen.append((_Module.__dict__["__call__"] is ORIGINAL_CALLS["__call__"],
                         _Module.__dict__["_call_impl"] is not ORIGINAL_CALLS["_call_impl"]))
            super().forward()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        FakeModule(nn, "k_root", probe=Probe(nn, "k_probe"))()
    assert seen == [(True, True)] and not nn["wrapped"]()
    g.replay()
    assert annotations_by_kernel()["k_probe"]["module"] == "probe"


def test_module_scopes_on_a_module_class_without_call_impl(fresh, monkeypatch, capture_path):
    """An ``nn.Module`` whose ``__call__`` runs ``forward`` itself (torch before 2.0): ``__call__``
    is wrapped during capture and put back after."""
    torch = sys.modules["torch"]

    class OldModule:
        def __call__(self, *args, **kwargs):
            return self.forward(*args, **kwargs)

    original = OldModule.__dict__["__call__"]
    assert mods.wrapped_attribute(OldModule) == "__call__"
    module = types.ModuleType("torch.nn")
    module.Module = OldModule
    monkeypatch.setitem(sys.modules, "torch.nn", module)
    monkeypatch.setattr(torch, "nn", module, raising=False)
    monkeypatch.setattr(mods, "NAMES", mods._Names())

    class Leaf(OldModule):
        def forward(self):
            assert OldModule.__dict__["__call__"] is not original
            fresh.launch(FAKE_TORCH_STREAM, "k_leaf")

    class Root(OldModule):
        def __init__(self):
            self.leaf = Leaf()

        def named_modules(self, prefix=""):
            yield prefix, self
            yield (f"{prefix}.leaf" if prefix else "leaf"), self.leaf

        def forward(self):
            self.leaf()

    pga.instrument(modules=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        Root()()
    assert OldModule.__dict__["__call__"] is original
    g.replay()
    assert annotations_by_kernel()["k_leaf"]["module"] == "leaf"


@pytest.fixture
def real_torch(monkeypatch):
    """torch's own ``nn.Module`` (CPU build) with ``torch.cuda`` on the fake CUDA backend:
    ``(torch, fake cuda)``; module names start afresh."""
    torch = pytest.importorskip("torch")
    from support.capture_fakes import FakeCuda, fake_torch

    cuda = FakeCuda()
    fakes = fake_torch(cuda).cuda
    for name in ("graph", "CUDAGraph", "current_device", "current_stream", "synchronize",
                 "is_current_stream_capturing"):
        monkeypatch.setattr(torch.cuda, name, getattr(fakes, name))
    monkeypatch.setattr(api, "INSTRUMENTED", None)
    monkeypatch.setattr(inst, "_config", None)
    monkeypatch.setattr(mods, "NAMES", mods._Names())
    return torch, cuda


def two_blocks(torch, cuda, seen: List[bool]):
    """``Sequential(Block(), Block())``, each block calling its ``proj`` (one kernel, ``k_proj``)
    with a keyword argument; ``seen`` gets, per ``proj`` call, whether ``nn.Module.__call__``
    is torch's own then."""
    call = torch.nn.Module.__dict__["__call__"]

    class Proj(torch.nn.Module):
        def forward(self, h, *, scale=1):
            seen.append(torch.nn.Module.__dict__["__call__"] is call)
            cuda.launch(FAKE_TORCH_STREAM, "k_proj")
            return h * scale

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = Proj()

        def forward(self, h):
            return self.proj(h, scale=2)

    return torch.nn.Sequential(Block(), Block())


def captured_with_module_scopes(torch, cuda, fn):
    """``fn(torch.ones(2))`` captured and replayed under ``instrument(modules=True)``: (its
    output, the graph: the registry keeps a graph's record while the graph lives)."""
    from perfetto_graph_ann.capture import backends

    try:
        with backends.use(cuda), torch.no_grad():
            pga.instrument(modules=True)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn(torch.ones(2))
            g.replay()
    finally:
        inst.uninstrument()
    return out, g


def test_module_scopes_on_real_torch_modules(capture_path, real_torch):
    """torch's own ``nn.Module`` (CPU build) under the fake CUDA backend: ``_call_impl`` is the
    attribute wrapped, ``__call__`` stays torch's during the capture, and nested module calls
    with keyword arguments become scopes named by path."""
    torch, cuda = real_torch
    assert mods.wrapped_attribute(torch.nn.Module) == "_call_impl"
    seen: List[bool] = []
    out, _graph = captured_with_module_scopes(torch, cuda, two_blocks(torch, cuda, seen))
    try:
        assert torch.equal(out, torch.full((2,), 4.0)) and seen == [True, True]
        assert torch.nn.Module.__dict__["_call_impl"] is mods.HOOKS._orig or mods.HOOKS._orig is None
        assert "ModuleCall" not in type(torch.nn.Module.__dict__["_call_impl"]).__name__
        paths = [n.annotation.get("module") for r in REGISTRY.records() for n in r.nodes]
        assert paths == ["0.proj", "1.proj"]
    finally:
        REGISTRY.clear()


def test_real_torch_modules_called_by_their_models_forward_get_the_models_paths(capture_path, real_torch):
    """torch's own ``Sequential.forward`` called by the runner (``model.forward(x)``, SGLang's
    way): each block is the outermost module called, and its paths are the model's, on both
    capture paths (the C module call and the Python one)."""
    torch, cuda = real_torch
    model = two_blocks(torch, cuda, [])
    out, _graph = captured_with_module_scopes(torch, cuda, model.forward)
    try:
        assert torch.equal(out, torch.full((2,), 4.0))
        assert scopes_of("k_proj") == [["0", "0.proj"], ["1", "1.proj"]]
    finally:
        REGISTRY.clear()


def test_instrument_imports_what_the_first_capture_would_and_calls_nothing(fresh, monkeypatch):
    """Once torch is imported, ``instrument()`` imports cuda-bindings' driver and runtime modules
    (the first capture paid ~0.1 s for them on the H200) and calls nothing in them."""
    from perfetto_graph_ann.capture import backends

    calls: List[str] = []
    bindings = types.ModuleType("cuda.bindings")
    for name in ("driver", "runtime"):
        mod = types.ModuleType(f"cuda.bindings.{name}")
        mod.__getattr__ = lambda attr, _n=name: calls.append(f"{_n}.{attr}")  # any use is recorded
        setattr(bindings, name, mod)
        monkeypatch.setitem(sys.modules, f"cuda.bindings.{name}", mod)
    cuda_pkg = types.ModuleType("cuda")
    cuda_pkg.bindings = bindings
    monkeypatch.setitem(sys.modules, "cuda", cuda_pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    preloaded: List[bool] = []
    real = backends.preload
    monkeypatch.setattr(backends, "preload", lambda: preloaded.append(True) or real())
    pga.instrument()
    assert preloaded == [True] and calls == []
    for name in ("driver", "runtime"):  # no cuda-bindings: nothing raised
        monkeypatch.setitem(sys.modules, f"cuda.bindings.{name}", None)
    real()


_COMPILE_ROOTS = """
import json, sys
import perfetto_graph_ann as pga
if sys.argv[1] == "modules":
    pga.instrument(modules=True)
import torch
from perfetto_graph_ann.capture.modules import COMPILED_ROOTS, NAMES
m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
before = COMPILED_ROOTS.path(m[1][0])
torch.compile(m, backend="eager")
m2 = torch.nn.Linear(2, 2)
m2.compile(backend="eager")
print(json.dumps([before, COMPILED_ROOTS.path(m[1][0]), COMPILED_ROOTS.path(m), COMPILED_ROOTS.path(m2),
                  NAMES.path(m[1][0]), NAMES.path(m2)]))
"""


@pytest.mark.parametrize("how", ["modules", "plain"])
def test_models_given_to_torch_compile_name_their_modules(tmp_path, how):
    """With module scopes, a model given to ``torch.compile`` (or compiled in place) becomes a
    root its compiled kernels' paths are named from (capture/compiled.py): wired by the import
    of torch.compile's classes, after ``instrument()``; the names module hooks use stay
    untouched (compiling one layer must not rename what a capture of the model calls); without
    module scopes nothing is named."""
    pytest.importorskip("torch")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    cp = subprocess.run([sys.executable, "-c", _COMPILE_ROOTS, how], capture_output=True, text=True, cwd=tmp_path,
                        env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    got = json.loads(cp.stdout.strip().splitlines()[-1])
    if how == "modules":
        assert got == [None, ["1.0", 2, None], ["Sequential", 0, None], ["Linear", 0, None], None, None]
    else:
        assert got == [None] * 6


def test_a_model_wrapped_by_torch_compile_keeps_its_own_paths():
    """``torch.compile(model)`` wraps it in an ``OptimizedModule`` whose ``named_modules`` add an
    ``_orig_mod`` step: paths are the model's own, the wrapper and its model share one name
    (and depth), whether the wrapper is the root or a submodule."""
    torch = pytest.importorskip("torch")
    inner = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    wrapped = torch.compile(inner, backend="eager")  # nothing compiles before a call
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), wrapped)
    names = mods._Names()
    names.add_root(model)
    assert names.path(wrapped) == names.path(inner) == ("1", 1, None)
    assert names.path(inner[1]) == ("1.1", 2, None)
    as_root = mods._Names()
    as_root.add_root(wrapped, prefix="model")
    assert as_root.path(wrapped) == as_root.path(inner) == ("model", 0, None)
    assert as_root.path(inner[0]) == ("model.0", 1, None)
    bare = mods._Names()
    bare.add_root(wrapped)
    assert bare.path(wrapped) == bare.path(inner) == ("Sequential", 0, None)
    assert mods.compiled_model(wrapped) is inner and mods.compiled_model(inner) is inner
    plain, unwrapped = mods._Names(), torch.nn.Sequential(torch.nn.Sequential(torch.nn.ReLU()))
    plain.add_root(unwrapped)  # no wrapper: paths unchanged
    assert sorted(e[0] for e in plain.by_id().values()) == ["0", "0.0", "Sequential"]


def test_a_runner_capturing_a_compiled_model_gets_the_models_own_scopes(capture_path, real_torch):
    """SGLang's and vLLM's way: the runner captures ``torch.compile(model)`` itself. The
    outermost module called is the ``OptimizedModule`` (the real class; dynamo disabled, so
    nothing compiles under the fake CUDA): it opens no scope of its own, and the model's modules
    get the model's paths, never an ``_orig_mod`` step."""
    torch, cuda = real_torch
    from torch._dynamo.eval_frame import DisableContext, OptimizedModule

    compiled = OptimizedModule(two_blocks(torch, cuda, []), DisableContext())
    out, _graph = captured_with_module_scopes(torch, cuda, compiled)
    try:
        assert torch.equal(out, torch.full((2,), 4.0))
        assert [n.annotation.get("module") for r in REGISTRY.records() for n in r.nodes] == ["0.proj", "1.proj"]
        assert scopes_of("k_proj") == [["Sequential", "0", "0.proj"], ["Sequential", "1", "1.proj"]]
        classes = {s.fields.get("module_class") for r in REGISTRY.records() for s in r.scopes or ()}
        assert classes == {"Sequential", "Block", "Proj"}
    finally:
        REGISTRY.clear()


def test_module_calls_inside_compiled_code_never_make_dynamo_compile_at_capture(capture_path, real_torch):
    """A compiled model (``torch.compile``, eager backend on the CPU) whose submodule call runs
    outside its graph (a graph break: the runner's capture calls the submodule from dynamo's
    resumed code) is captured after its warm-up: dynamo compiles nothing during the capture
    (it would otherwise compile the module wrapper's frame as a new graph, the program's
    capture then running code it never ran), and the scopes carry the model's paths."""
    torch, cuda = real_torch
    from torch._dynamo.utils import counters

    @torch._dynamo.disable
    def launch(name):  # the fake driver launches only into a capture
        if torch.cuda.is_current_stream_capturing():
            cuda.launch(FAKE_TORCH_STREAM, name)

    class Proj(torch.nn.Module):
        def forward(self, h):
            launch("k_proj")
            return h * 2

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = Proj()

        def forward(self, h):
            return self.proj(h + 1)

    torch._dynamo.reset()
    compiled = torch.compile(torch.nn.Sequential(Block(), Block()), backend="eager", dynamic=False)
    try:
        with torch.no_grad():
            for _ in range(2):  # warm-up: every frame compiled now, as a runner does before capturing
                compiled(torch.ones(2))
        before = dict(counters["stats"])
        out, _graph = captured_with_module_scopes(torch, cuda, compiled)
        assert dict(counters["stats"]) == before  # nothing compiled during the capture
        assert torch.equal(out, torch.full((2,), 10.0))
        assert [n.annotation.get("module") for r in REGISTRY.records() for n in r.nodes] == ["0.proj", "1.proj"]
    finally:
        REGISTRY.clear()
        torch._dynamo.reset()
