"""``capture.owners.outermost`` on real ``torch.nn`` modules: the model that holds a module, and
its path there, as ``named_modules()`` of that model gives it."""
from __future__ import annotations

import gc
import sys

import pytest

from perfetto_graph_ann.capture.modules import _Names, model_of
from perfetto_graph_ann.capture.owners import on_stack, outermost, shared

torch = pytest.importorskip("torch")
nn = torch.nn


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


def test_a_module_is_found_in_the_outermost_model_that_holds_it_at_its_named_modules_path():
    lm = CausalLM()
    holder = type("Runner", (), {})()
    holder.model = lm  # a plain object holding the model: not an owner
    for module in (lm.model, lm.model.layers[1], lm.lm_head):
        top, path = outermost(module, nn.Module)
        assert top is lm and path == path_in(lm, module)
    assert outermost(lm, nn.Module) is None


def test_a_model_nothing_holds_costs_one_scan_of_its_referrers(monkeypatch):
    from perfetto_graph_ann.capture import owners

    lm = CausalLM()
    holder = type("Runner", (), {})()
    holder.model = lm  # a dict of modules only: it could be a _modules, so the pass runs and finds no owner
    assert outermost(lm, nn.Module) is None
    del holder

    def no_pass(module_type):
        raise AssertionError("the pass over the objects ran")
    monkeypatch.setattr(owners, "_holders", no_pass)
    assert outermost(lm, nn.Module) is None  # no dict of modules refers to lm: the first scan decides


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


def test_a_compiled_wrapper_is_an_owner_like_any_other():
    lm = CausalLM()
    wrapper = torch.compile(lm)  # an OptimizedModule registers lm as _orig_mod; nothing compiles unless called
    assert outermost(lm.model, nn.Module) == (wrapper, "_orig_mod.model")
    names = _Names()  # what module scopes name from it: the model's own paths, no _orig_mod step
    names.add_root(model_of(lm.model))
    assert names.path(lm.model)[:2] == ("model", 1) and names.path(lm.model.layers[1])[:2] == ("model.layers.1", 3)


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


def test_the_model_whose_method_is_running_is_found_on_the_stack():
    caller = _Caller()
    found = caller.look(caller.model.layers[1])
    if sys.version_info >= (3, 12):  # its frame's self, read with PyFrame_GetVar
        assert found is caller
    else:
        assert found is caller.model.layers[1]
    stranger = _Caller()
    assert stranger.look(caller.model) is caller.model  # a model on the stack that does not hold it
