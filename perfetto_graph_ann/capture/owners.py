"""The model a module belongs to: the modules that registered it, up to the outermost.

Module scopes name a capture's modules from the outermost one *called*. A runner that calls
``model.forward(...)`` itself (SGLang's graph runner does) never calls the model: the first
module called is its inner model (``LlamaModel``), then ``lm_head`` or a logits processor, each
of which would be a root of its own, and a model whose ``forward`` loops over its layers would
give every layer the same paths. :func:`outermost` finds the model such a module belongs to,
so paths are those of ``named_modules()`` on the model the program holds
(``model.layers.17.self_attn``) however the runner reaches it.

A module's owner is the module whose ``_modules`` holds it (``Module.__setattr__`` and
``register_module`` put it there). The modules of the process are found among the garbage
collector's objects, in one pass. The walk goes up while each module has exactly one owner and
stops below an ambiguity (a module registered in two models keeps the paths below it). It reads
only types, identities and ``str`` keys, so no code of the program runs, and keeps no reference
once it returns. A scan of the module's referrers comes first: a model nothing holds costs that
scan only (~25 ns an object of the process on the CPU machine), a held one the pass too (~70 ns
an object more: ~0.3 s in all in a process of 3 million objects; BENCHMARKS.md). Either runs
once per root, when a capture first meets an unnamed module.
"""
from __future__ import annotations

import gc
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["outermost"]

#: the most levels walked up (a model nested deeper than this is named from that level)
MAX_LEVELS = 64


def outermost(module: Any, module_type: Any) -> Optional[Tuple[Any, str]]:
    """``(the outermost model holding module, module's path in it)``, or None where no module
    holds ``module`` (or more than one does). ``module_type``: ``torch.nn.Module``."""
    if not _may_be_held(module, module_type):
        return None
    holders = _holders(module_type)
    top, path = module, ""
    for _ in range(MAX_LEVELS):
        found = holders.get(id(top))
        if not found or len({id(o) for o, _ in found}) != 1:
            break
        top, name = found[0]
        path = f"{name}.{path}" if path else name
    return (top, path) if top is not module else None


def _may_be_held(module: Any, module_type: Any) -> bool:
    """Whether some dict that refers to ``module`` could be a module's ``_modules`` (every value
    a module or None): never False for a held module. One scan of the collector's objects, a
    third of :func:`_holders`' pass, so a model that nothing holds (a runner's ``model(x)``)
    costs that much only."""
    for ref in gc.get_referrers(module):
        if issubclass(type(ref), dict):
            try:
                values = list(dict.values(ref))
            except RuntimeError:
                return True
            if any(v is module for v in values) and all(v is None or issubclass(type(v), module_type)
                                                        for v in values):
                return True
    return False


def _holders(module_type: Any) -> Dict[int, List[Tuple[Any, str]]]:
    """``id(module) -> [(a module whose _modules holds it, the name), ...]`` over the modules
    the garbage collector tracks now (the lists hold the owners, so the ids stay theirs while
    the map lives)."""
    out: Dict[int, List[Tuple[Any, str]]] = {}
    for o in [o for o in gc.get_objects() if issubclass(type(o), module_type)]:
        mods = _submodules(o)
        if mods is None:
            continue
        for k, v in mods:
            if type(k) is str and v is not None:
                out.setdefault(id(v), []).append((o, k))
    return out


def _submodules(module: Any) -> Optional[List[Tuple[Any, Any]]]:
    """The items of ``module._modules``, read from the instance's own dict (no ``__getattr__``
    of the program's runs)."""
    try:
        d = object.__getattribute__(module, "__dict__")
    except Exception:
        return None
    mods = d.get("_modules") if type(d) is dict else None
    if not issubclass(type(mods), dict):  # a dict (an OrderedDict in torch < 2.0)
        return None
    try:
        return list(dict.items(mods))
    except RuntimeError:  # changed by another thread meanwhile: not used
        return None
