"""The model a module belongs to: the modules that registered it, up to the outermost; the
modules on the call stack that hold it.

Module scopes name a capture's modules from the outermost one *called*. A runner that calls
``model.forward(...)`` itself (SGLang's graph runner does) never calls the model: the first
module called is its inner model (``LlamaModel``), then ``lm_head`` or a logits processor, each
of which would be a root of its own, and a model whose ``forward`` loops over its layers would
give every layer the same paths. :func:`outermost` finds the model such a module belongs to,
so paths are those of ``named_modules()`` on the model the program holds
(``model.layers.17.self_attn``) however the runner reaches it.

:func:`on_stack` looks at the calling thread's frames first (Python >= 3.12): a runner calling
``model.forward`` has the model's ``forward`` on the stack. :func:`outermost` then looks for
owners off the stack (``make_graphed_callables`` of one layer has none on it).

A module's owner is the module whose ``_modules`` holds it (``Module.__setattr__`` and
``register_module`` put it there). The modules of the process are found among the garbage
collector's objects, in one pass. The walk goes up while each module has exactly one owner and
stops below an ambiguity (a module registered in two models keeps the paths below it). It reads
only types, identities and ``str`` keys, so no code of the program runs, and keeps no reference
once it returns. It runs once per root, when a capture first meets an unnamed module.

Where the capture's compiled path is built, one pass in C (``_owners.c``) answers every question
of a naming: who holds each module, and how many dicts that could be a ``_modules`` refer to it.
Otherwise Python asks the collector per question: a scan of the module's referrers first (a
model nothing holds costs that scan only, ~25 ns an object of the process on the CPU machine),
for a held one a pass over the objects too (~70 ns an object more: ~0.3 s in all in a process of
3 million objects). BENCHMARKS.md, "naming a root in one pass", compares the two.
"""
from __future__ import annotations

import gc
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import fastpath

__all__ = ["Holders", "holders", "on_stack", "outermost", "shared"]

#: the most levels walked up (a model nested deeper than this is named from that level)
MAX_LEVELS = 64
#: the most frames :func:`on_stack` looks at
MAX_FRAMES = 512


def on_stack(module: Any, module_type: Any) -> Any:
    """The outermost module on the calling thread's stack (a frame's ``self``) that holds
    ``module`` among its submodules, else ``module``.

    What a runner calling ``model.forward(...)`` leaves on the stack: the model's ``forward``,
    whose ``self`` is the model. This finds it where the garbage collector cannot:
    SGLang freezes its heap while it captures (``gc.freeze``), and frozen objects are in no
    list of the collector. One local is read, ``self``, through ``PyFrame_GetVar`` (Python >=
    3.12), which makes no dict of the frame's locals: ``f_locals`` would (before 3.13), and
    keep every local of the program's frame alive until the frame ends, moving where its
    tensors are freed during the capture. On Python < 3.12, ``module``."""
    get = _frame_var()
    if get is None:
        return module
    top, seen = module, {id(module)}
    f: Any = sys._getframe(1)
    for _ in range(MAX_FRAMES):
        if f is None:
            break
        code = f.f_code
        if "self" in code.co_varnames or "self" in code.co_cellvars:
            try:
                s = get(f, "self")
            except Exception:  # unbound at this point of the frame
                s = None
            if s is not None and id(s) not in seen and issubclass(type(s), module_type):
                seen.add(id(s))
                if _contains(s, top):
                    top = s
        f = f.f_back
    return top


_GETVAR: List[Any] = []


def _frame_var() -> Optional[Callable[[Any, str], Any]]:
    """``PyFrame_GetVar`` (a function object of our own: the program's ``ctypes.pythonapi`` is
    left as it is), or None before Python 3.12."""
    if not _GETVAR:
        fn = None
        if sys.version_info >= (3, 12):
            try:
                import ctypes

                fn = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object)(
                    ("PyFrame_GetVar", ctypes.pythonapi))
            except Exception:
                fn = None
        _GETVAR.append(fn)
    return _GETVAR[0]


def _contains(model: Any, module: Any) -> bool:
    """Whether ``module`` is among ``model``'s submodules (through the ``_modules`` dicts)."""
    return _chain(model, module)[-1] is module


class Holders:
    """Who holds which module, as the collector's objects say now: the answers of one naming
    (the objects may change once the program runs again, so a naming asks for new ones). Per
    question in Python; :class:`_OnePass` answers all from one pass in C."""

    def __init__(self, module_type: Any) -> None:
        self.module_type = module_type

    def dicts(self, module: Any, first: bool = False) -> int:
        """How many dicts that could be a module's ``_modules`` refer to ``module`` (with
        ``first``: 1 at the first one)."""
        return _holder_dicts(module, self.module_type, first)

    def owners(self) -> Dict[int, List[Tuple[Any, str]]]:
        """``id(module) -> [(a module whose _modules holds it, the name), ...]``."""
        return _holders(self.module_type)


class _OnePass(Holders):
    """:class:`Holders` from one pass in C over the collector's objects (``_owners.c``), made
    at the first question that needs it. Before Python 3.12 the pass walks the list
    ``gc.get_objects()`` makes, which costs twice a scan of referrers: there, whether anything
    may hold a module at all is asked with that scan first, as :class:`Holders` does (a model
    nothing holds costs no more than before)."""

    #: the first question by a scan of referrers (the pass has no walk of its own before 3.12)
    SCAN_FIRST = sys.version_info < (3, 12)

    def __init__(self, module_type: Any, fast: Any) -> None:
        super().__init__(module_type)
        self._fast = fast
        self._index: Optional[Tuple[Dict[int, List[Tuple[Any, str]]], Dict[int, int]]] = None

    def _read(self) -> Tuple[Dict[int, List[Tuple[Any, str]]], Dict[int, int]]:
        if self._index is None:
            self._index = self._fast.module_index(self.module_type)
        return self._index

    def dicts(self, module: Any, first: bool = False) -> int:
        if first and self._index is None and self.SCAN_FIRST:
            return super().dicts(module, first)
        n = self._read()[1].get(id(module), 0)
        return min(n, 1) if first else n

    def owners(self) -> Dict[int, List[Tuple[Any, str]]]:
        return self._read()[0]


def holders(module_type: Any) -> Holders:
    """The :class:`Holders` of a naming: one pass in C where the compiled path is on."""
    fast = fastpath.module()
    if fast is not None and hasattr(fast, "module_index"):
        return _OnePass(module_type, fast)
    return Holders(module_type)


def outermost(module: Any, module_type: Any, found: Optional[Holders] = None) -> Optional[Tuple[Any, str]]:
    """``(the outermost model holding module, module's path in it)``, or None where no module
    holds ``module`` (or more than one does). ``module_type``: ``torch.nn.Module``; ``found``:
    the naming's :class:`Holders` (new ones by default)."""
    found = holders(module_type) if found is None else found
    if found.dicts(module, first=True) == 0:  # no dict that could be a _modules refers to it
        return None
    owned = found.owners()
    top, path = module, ""
    for _ in range(MAX_LEVELS):
        by = owned.get(id(top))
        if not by or len({id(o) for o, _ in by}) != 1:
            break
        top, name = by[0]
        path = f"{name}.{path}" if path else name
    return (top, path) if top is not module else None


def shared(module: Any, model: Any, module_type: Any, found: Optional[Holders] = None) -> bool:
    """Whether a module on the way from ``model`` (which holds ``module``) down to ``module`` may
    be held by another model too (two dicts that could be ``_modules`` refer to it): its path
    then depends on which model called it. Objects the collector does not list (a frozen heap)
    are not seen. ``found``: as :func:`outermost`'s."""
    found = holders(module_type) if found is None else found
    return any(found.dicts(m) > 1 for m in _chain(model, module)[1:])


def _chain(model: Any, module: Any) -> List[Any]:
    """The modules from ``model`` down to ``module`` (through the ``_modules`` dicts); ``[model]``
    where ``module`` is not among them."""
    parent: Dict[int, Any] = {id(model): None}
    todo = [model]
    while todo:
        m = todo.pop()
        for _, v in _submodules(m) or ():
            if v is None or id(v) in parent:
                continue
            parent[id(v)] = m
            if v is module:
                out = [v]
                while parent[id(out[-1])] is not None:
                    out.append(parent[id(out[-1])])
                return out[::-1]
            todo.append(v)
    return [model]


def _holder_dicts(module: Any, module_type: Any, first: bool = False) -> int:
    """How many dicts that refer to ``module`` could be a module's ``_modules`` (every value a
    module or None); with ``first``, 1 at the first one."""
    n = 0
    for ref in gc.get_referrers(module):
        if issubclass(type(ref), dict):
            try:
                values = list(dict.values(ref))
            except RuntimeError:
                values = [module]
            if any(v is module for v in values) and all(v is None or issubclass(type(v), module_type)
                                                        for v in values):
                n += 1
                if first:
                    break
    return n


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
