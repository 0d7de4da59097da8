"""``capture.owners.outermost`` on real ``torch.nn`` modules: the model that holds a module, and
its path there, as ``named_modules()`` of that model gives it; on both capture paths (the one
pass in C, ``_owners.c``, and Python's scans per question)."""
from __future__ import annotations

import collections
import gc
import sys

import pytest

from perfetto_graph_ann.capture import fastpath, owners
from perfetto_graph_ann.capture.modules import _Names, model_of
from perfetto_graph_ann.capture.owners import on_stack, outermost, shared

torch = pytest.importorskip("torch")
nn = torch.nn

#: a naming's tests run on both capture paths (conftest's ``capture_path``)
both_paths = pytest.mark.usefixtures("capture_path")


@pytest.fixture
def compiled(monkeypatch):
    """The compiled capture module, enabled (skipped where it was not built here)."""
    if not fastpath.module_built():
        pytest.skip(f"compiled capture path not built: {fastpath.describe()}")
    monkeypatch.setattr(fastpath, "ENABLED", True)
    return fastpath.module()


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(2, 2) for _ in range(2))


class CausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model, self.lm_head = Inner(), nn.Linear(2, 2)


def path_in(model, module) -> str:
    return next(n for n, m in model.named_modules() if m is module)


@both_paths
def test_a_module_is_found_in_the_outermost_model_that_holds_it_at_its_named_modules_path():
    lm = CausalLM()
    holder = type("Runner", (), {})()
    holder.model = lm  # a plain object holding the model: not an owner
    for module in (lm.model, lm.model.layers[1], lm.lm_head):
        top, path = outermost(module, nn.Module)
        assert top is lm and path == path_in(lm, module)
    assert outermost(lm, nn.Module) is None


@both_paths
def test_a_model_nothing_holds_costs_one_scan_of_its_referrers(monkeypatch, capture_path):
    lm = CausalLM()
    holder = type("Runner", (), {})()
    holder.model = lm  # a dict of modules only: it could be a _modules, so the pass runs and finds no owner
    assert outermost(lm, nn.Module) is None
    del holder

    def no_pass(module_type):
        raise AssertionError("the pass over the objects ran")
    monkeypatch.setattr(owners, "_holders", no_pass)
    if capture_path == "compiled":  # one pass answers both questions: made once a naming
        passes = []
        fast = fastpath.module()
        monkeypatch.setattr(owners.fastpath, "module", lambda: _Counted(fast, passes))
        found = owners.holders(nn.Module)
        assert outermost(lm, nn.Module, found) is None and not shared(lm.model, lm, nn.Module, found)
        assert passes == [nn.Module]
    else:
        assert outermost(lm, nn.Module) is None  # no dict of modules refers to lm: the first scan decides


class _Counted:
    """The compiled module with its ``module_index`` calls noted."""

    def __init__(self, fast, calls: list) -> None:
        self._fast, self._calls = fast, calls

    def module_index(self, module_type):
        self._calls.append(module_type)
        return self._fast.module_index(module_type)


def _by_id(found: dict) -> dict:
    return {k: sorted((id(o), name) for o, name in v) for k, v in found.items()}


def test_the_pass_in_c_answers_as_python_asks_the_collector(compiled):
    """``module_index`` against Python's scans, computed independently, on the shapes that decide
    a naming: two owners, a module under two keys of one dict, an OrderedDict ``_modules``
    (torch < 2.0), a dict of modules and None that is no ``_modules``, a non-str key."""
    lm, twice = CausalLM(), nn.Module()
    other = nn.Sequential(lm.model)  # lm.model: two owners
    twice.a = twice.b = lm.lm_head  # one dict, two keys: one dict refers to it
    legacy = nn.Module()
    object.__setattr__(legacy, "_modules", collections.OrderedDict(x=lm.model.layers[0]))
    plain = {"m": lm.model.layers[1], "none": None}  # could be a _modules: counted, owns nothing
    odd = nn.Module()
    odd._modules[3] = lm.model.layers[1]  # not a str key: no owner by it
    mixed = {"m": lm.model, "n": 1}  # a value that is no module: not counted
    owned, dicts = compiled.module_index(nn.Module)
    assert _by_id(owned) == _by_id(owners._holders(nn.Module))
    for m in [o for o in gc.get_objects() if issubclass(type(o), nn.Module)]:  # type(): a dead weak proxy raises
        assert dicts.get(id(m), 0) == owners._holder_dicts(m, nn.Module), type(m).__name__
    assert dicts[id(lm.model)] == 2 and dicts[id(lm.lm_head)] == 2 and dicts[id(lm.model.layers[1])] == 3
    assert len(owned[id(lm.model.layers[1])]) == 1  # lm.model.layers only: not `plain`, not the int key
    assert len(owned[id(lm.model.layers[0])]) == 2  # lm.model.layers and legacy's OrderedDict
    del other, twice, legacy, plain, odd, mixed


def test_the_pass_keeps_no_reference_and_leaves_the_collector_as_it_was(compiled):
    lm = CausalLM()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            before = sys.getrefcount(lm), sys.getrefcount(lm.model)
            result = compiled.module_index(nn.Module)
            del result
            assert (sys.getrefcount(lm), sys.getrefcount(lm.model)) == before
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    with pytest.raises(TypeError, match="must be a type"):
        compiled.module_index(lm)


@both_paths
def test_two_owners_stop_the_walk_below_them_and_nothing_is_kept():
    lm = CausalLM()
    other = nn.Sequential(lm.model)  # lm.model is held by lm and by other
    assert outermost(lm.model, nn.Module) is None
    assert outermost(lm.model.layers[0], nn.Module) == (lm.model, "layers.0")
    del other
    gc.collect()
    assert outermost(lm.model, nn.Module) == (lm, "model")
    before = len(gc.get_referrers(lm))
    outermost(lm.model.layers[0], nn.Module)
    assert len(gc.get_referrers(lm)) == before  # no reference left behind


@both_paths
def test_a_compiled_wrapper_is_an_owner_like_any_other():
    lm = CausalLM()
    wrapper = torch.compile(lm)  # an OptimizedModule registers lm as _orig_mod; nothing compiles unless called
    assert outermost(lm.model, nn.Module) == (wrapper, "_orig_mod.model")
    names = _Names()  # what module scopes name from it: the model's own paths, no _orig_mod step
    names.add_root(model_of(lm.model))
    assert names.path(lm.model)[:2] == ("model", 1) and names.path(lm.model.layers[1])[:2] == ("model.layers.1", 3)


@both_paths
def test_a_module_held_by_two_models_is_shared_on_the_way_down_from_either():
    lm = CausalLM()
    assert not shared(lm.model.layers[0], lm, nn.Module)
    other = nn.Sequential(lm.model)  # lm.model is held by lm and by other
    assert shared(lm.model.layers[0], lm, nn.Module) and shared(lm.model, lm, nn.Module)
    assert not shared(lm.lm_head, lm, nn.Module)
    del other


class _Caller(nn.Module):
    """A model whose method calls a submodule's lookup, as its forward would call the submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Inner()

    def look(self, module):
        return on_stack(module, nn.Module)


@both_paths
def test_the_model_whose_method_is_running_is_found_on_the_stack():
    caller = _Caller()
    found = caller.look(caller.model.layers[1])
    if sys.version_info >= (3, 12):  # its frame's self, read with PyFrame_GetVar
        assert found is caller
    else:
        assert found is caller.model.layers[1]
    stranger = _Caller()
    assert stranger.look(caller.model) is caller.model  # a model on the stack that does not hold it
