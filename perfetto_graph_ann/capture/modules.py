"""Module scopes: while a graph is captured, every ``nn.Module`` call is a ``mark_kernels`` scope
named by the module's qualified path (``model.layers.17.self_attn.o_proj``).

``nn.Module._call_impl`` (what torch's ``__call__`` calls; :func:`wrapped_attribute`) is wrapped
at class level when an annotated capture starts and put back when it ends, so eager module calls
never run the wrapper. It opens a scope with the fields
``{"name": <path>, "module": <path>, "module_class": <class name>}`` on the capturing thread
around the call and closes it on the way out; scopes nest as the calls nest, hand-written ``mark_kernels``
scopes nest inside or around them, and the backward kernels of a module's autograd nodes get
its path with ``autograd_phase: backward`` (``mark_kernels``' backward tagging).

Paths: a model given to :func:`mark_modules` names its modules as ``named_modules()`` does
(with an optional prefix); otherwise the model holding the outermost module called during a
capture (:func:`model_of`: a runner calling ``model.forward`` calls the inner model first) is
taken as the root and its submodules are named from it (the root itself by its class name, the
path people see in ``print(model)``). A module reached under no known root is named by its class.
Compiled code is named the same way, and from a model given to ``torch.compile`` where none of
these names it (:data:`COMPILED_ROOTS`). A model wrapped by ``torch.compile`` (an
``OptimizedModule``, as SGLang and vLLM runners capture it) keeps its own paths: the wrapper
shares its model's name and opens no scope of its own, and ``_orig_mod`` is in no path.
:class:`ModuleScopes` limits the depth and filters by path or class (``fnmatch`` patterns).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import sys
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import InputError
from . import fastpath, owners
from . import session as _session
from .marks import mark_kernels

__all__ = ["COMPILED_ROOTS", "compiled_model", "HOOKS", "is_compiled_wrapper", "mark_modules", "model_of",
           "ModuleHooks", "ModuleScopes", "NAMES", "wrapped_attribute"]


@dataclasses.dataclass(frozen=True)
class ModuleScopes:
    """Which module calls become scopes.

    ``max_depth``: deepest path level scoped (the root is 0; None: all). ``include`` /
    ``exclude``: ``fnmatch`` patterns matched against the path and the class name; a module
    is scoped when it matches an include pattern (or there are none) and no exclude pattern.
    ``backward``: also tag the modules' backward kernels (``mark_kernels(..., backward=)``).
    """

    max_depth: Optional[int] = None
    include: Tuple[str, ...] = ()
    exclude: Tuple[str, ...] = ()
    backward: bool = True

    def __post_init__(self) -> None:
        if self.max_depth is not None and (not isinstance(self.max_depth, int) or self.max_depth < 0):
            raise InputError(None, f"module scopes: max_depth must be a non-negative int, got {self.max_depth!r}")
        for name in ("include", "exclude"):
            pats = getattr(self, name)
            if isinstance(pats, str) or not all(isinstance(p, str) and p for p in pats):
                raise InputError(None, f"module scopes: {name} must be a list of non-empty patterns, got {pats!r}")
            object.__setattr__(self, name, tuple(pats))

    def wants(self, path: str, cls: str, depth: int) -> bool:
        if self.max_depth is not None and depth > self.max_depth:
            return False
        def hit(pats: Sequence[str]) -> bool:
            return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(cls, p) for p in pats)
        return (not self.include or hit(self.include)) and not hit(self.exclude)


class _Names:
    """Module -> (qualified path, depth, the :class:`ModuleScopes` of its :func:`mark_modules`
    call or None), held weakly (a model dropped is forgotten)."""

    def __init__(self) -> None:
        self._paths: "weakref.WeakKeyDictionary[Any, Tuple[str, int, Optional[ModuleScopes]]]" = \
            weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.marked = 0  #: models given to mark_modules (module scopes are on for every capture then)
        self.generation = 0  #: bumped whenever names change (a prepared scope from before is stale)

    def add_root(self, root: Any, prefix: str = "", config: Optional[ModuleScopes] = None) -> None:
        """Name ``root`` and its submodules by their paths (``named_modules(prefix=prefix)``),
        a model compiled with ``torch.compile`` by its own paths: an ``OptimizedModule`` and
        the model it wraps share one name, and ``_orig_mod`` never appears in a path."""
        with self._lock:
            self.generation += 1
            by_name: Dict[str, Any] = {}
            for raw, mod in root.named_modules(prefix=prefix):
                by_name[raw] = mod
                name = _model_path(raw, by_name)
                entry = (name or type(compiled_model(mod)).__name__, name.count(".") + (1 if name else 0)
                         - prefix.count(".") - (1 if prefix else 0), config)
                try:
                    if config is not None or mod not in self._paths:
                        self._paths[mod] = entry
                except TypeError:  # not weak-referenceable: left unnamed
                    pass
            if config is not None:
                self.marked += 1

    def path(self, module: Any) -> Optional[Tuple[str, int, Optional[ModuleScopes]]]:
        try:
            return self._paths.get(module)
        except TypeError:
            return None

    def by_id(self) -> Dict[int, Tuple[str, str, int]]:
        """``id(module) -> (path, class name, depth)`` of every module named now (dynamo keys the
        module stacks of compiled code by ``id``: :mod:`.compiled`). The modules are alive, so
        their ids are theirs alone while the module looked up is alive."""
        with self._lock:
            return {id(m): (e[0], type(m).__name__, e[1]) for m, e in list(self._paths.items())}


def compiled_model(module: Any) -> Any:
    """The model ``torch.compile`` wrapped in ``module`` (an ``OptimizedModule``), else ``module``."""
    while is_compiled_wrapper(module):
        module = module._orig_mod
    return module


def model_of(module: Any) -> Any:
    """The outermost model that holds ``module`` as a submodule (:func:`.owners.outermost`), else
    ``module``: a runner calling ``model.forward(...)`` calls the inner model first, and
    ``make_graphed_callables`` of one layer captures that layer; their paths are named from the
    model all the same."""
    cls = getattr(sys.modules.get("torch.nn"), "Module", None)
    if cls is None or not issubclass(type(module), cls):
        return module
    top = owners.on_stack(module, cls)
    held = owners.holders(cls)
    if top is not module and owners.shared(module, top, cls, held):  # which model holds it depends on the call
        top = module
    found = owners.outermost(top, cls, held)
    return top if found is None else found[0]


def is_compiled_wrapper(module: Any) -> bool:
    """Whether ``module`` is ``torch.compile``'s ``OptimizedModule`` (looked up only where
    dynamo was imported: no import here)."""
    cls = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    return cls is not None and isinstance(module, cls) and hasattr(module, "_orig_mod")


def _model_path(raw: str, by_name: Dict[str, Any]) -> str:
    """``raw`` (a ``named_modules`` path) without the ``_orig_mod`` step below each
    ``OptimizedModule``: the path in the model as its author wrote it."""
    if "_orig_mod" not in raw:
        return raw
    parts = raw.split(".")
    kept = [p for i, p in enumerate(parts)
            if not (p == "_orig_mod" and is_compiled_wrapper(by_name.get(".".join(parts[:i]), None)))]
    return ".".join(kept)


NAMES = _Names()
#: Models given to ``torch.compile`` (:func:`.compiled.install_roots`), named for the paths of
#: their compiled kernels only: module hooks never read it, so compiling one layer of a model
#: does not rename what a capture of the whole model calls.
COMPILED_ROOTS = _Names()


def mark_modules(model: Any, prefix: str = "", max_depth: Optional[int] = None, include: Sequence[str] = (),
                 exclude: Sequence[str] = (), backward: bool = True) -> Any:
    """Scope ``model``'s module calls in every annotated capture (:class:`..api.graph`, or any
    capture once ``instrument()`` ran), each named by its path in ``model``
    (``named_modules(prefix=prefix)``); ``max_depth`` / ``include`` / ``exclude`` /
    ``backward`` as :class:`ModuleScopes` (depth counted from ``model``). Returns ``model``.
    Nothing runs outside a capture."""
    if not hasattr(model, "named_modules"):
        raise TypeError(f"mark_modules() takes an nn.Module, got {type(model).__name__}")
    NAMES.add_root(model, prefix, ModuleScopes(max_depth, tuple(include), tuple(exclude), backward))
    return model


class ModuleHooks:
    """``nn.Module._call_impl`` (:func:`wrapped_attribute`) wrapped at class level while at least
    one capture runs.

    Not torch's global forward hooks: once any is registered, every module call in the process
    takes ``_call_impl``'s slow path, which cost more than the scopes themselves (on the H200,
    about 12 us a module call even with the hooks returning at once; BENCHMARKS.md, "module
    scopes"). The wrapper runs the module's own ``__call__`` inside its scope (closed on the way
    out, exceptions included) and is removed when the last capture ends, so eager calls never
    see it. Each module's fields are prepared once per capture set (paths and filters do not
    change while captures run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._cls: Any = None
        self._attr = "_call_impl"  #: the attribute wrapped (wrapped_attribute)
        self._orig: Any = None
        #: id(module) -> (weak reference to the module, its scope's (fields, backward) or None):
        #: what _prepare found, kept across captures while settings and names stay (``_caches``);
        #: an entry leaves with its module
        self._prepared: Dict[int, Tuple[Any, Any]] = {}
        #: (config, NAMES.generation) -> its ``_prepared``, the last few (settings alternating
        #: between captures keep theirs)
        self._caches: Dict[Any, Dict[int, Tuple[Any, Any]]] = {}
        #: thread ident -> that thread's open module scopes (closed by close_open at a capture's end)
        self._open: Dict[int, List[Any]] = {}
        self._grad: Any = lambda: True
        self._node: Any = None  # torch._C._current_autograd_node
        self.config: Optional[ModuleScopes] = None

    def capture_started(self, config: Optional[ModuleScopes]) -> bool:
        """Wrap ``nn.Module._call_impl`` (first capture in flight). ``config``: for every module
        (None: only the models given to :func:`mark_modules`). False where torch has no
        ``nn.Module`` call to wrap."""
        with self._lock:
            if self._users == 0:
                try:
                    from torch import nn
                    cls = nn.Module
                except Exception:
                    return False
                attr = wrapped_attribute(cls)
                orig = cls.__dict__.get(attr)
                if orig is None:
                    return False
                torch = sys.modules.get("torch")
                self.config = config
                self._grad = getattr(torch, "is_grad_enabled", None) or (lambda: True)
                self._node = getattr(getattr(torch, "_C", None), "_current_autograd_node", None)
                key = (config, NAMES.generation)
                if key not in self._caches and len(self._caches) >= 4:
                    del self._caches[next(iter(self._caches))]
                self._prepared = self._caches.setdefault(key, {})
                self._open.clear()
                self._cls, self._attr, self._orig = cls, attr, orig
                setattr(cls, attr, self._wrap(orig))
            self._users += 1
            return True

    def capture_ended(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0 and self._cls is not None:
                setattr(self._cls, self._attr, self._orig)
                self._cls = self._orig = None
                self._open.clear()

    def close_open(self) -> None:
        """Close the scopes this thread still has open (a capture ended inside a module call)."""
        st = self._open.get(threading.get_ident())
        while st:
            _close(st.pop())

    def _wrap(self, orig: Any) -> Any:
        # on the capture's critical path, once per module call: every lookup is bound here
        prepared, opened, prepare = self._prepared, self._open, self._prepare
        grad, node, current, ident, mark = self._grad, self._node, _session.current, threading.get_ident, mark_kernels
        slocal = _session._local
        dynamo = _Dynamo.loaded()
        if dynamo is not None:  # inside a compiled model's call our bookkeeping must stay ours
            prepare, current = dynamo.outside(prepare), dynamo.outside(current)

        def enter(module: Any) -> Any:
            """``(the thread's open list, the scope item)``, or None: no scope (call ``orig``)."""
            entry = prepared.get(id(module))
            if entry is None or entry[0]() is not module:
                entry = prepare(module)
            scope = entry[1]
            if scope is None:
                return None
            sst = getattr(slocal, "stack", None)  # _session.current(), the thread's own first
            sess = sst[-1] if sst else current()
            if sess is None:  # another thread's eager call while a capture runs elsewhere
                return None
            st = opened.get(ident())
            if st is None:
                st = opened.setdefault(ident(), [])
            if grad() or (node is not None and node() is not None):
                item: Any = mark(scope[0], backward=scope[1])  # backward tagging is mark_kernels'
                item.__enter__()
            else:  # grad off: no backward to tag, the scope straight on the recorder
                rec = sess.recorder
                item = (rec, rec.open(scope[0]))
            st.append(item)
            return st, item

        def leave(st: List[Any], item: Any) -> None:
            if st and st[-1] is item:
                st.pop()
                _close(item)
            elif item in st:  # closed out of order (a generator, a thread switch)
                st.remove(item)
                _close(item)

        if dynamo is not None:
            enter, leave = dynamo.outside(enter), dynamo.outside(leave)

        def __call__(module, *args, **kwargs):
            opened_item = enter(module)
            if opened_item is None:
                return orig(module, *args, **kwargs)
            try:
                return orig(module, *args, **kwargs)
            finally:
                leave(*opened_item)
        __call__.__wrapped__ = orig
        if dynamo is not None:
            dynamo.skip(__call__)
        fast = fastpath.module()
        if fast is not None and hasattr(fast, "ModuleCall"):  # the common case in C, the rest in __call__
            return fast.ModuleCall(orig, prepared, prepare, opened, slocal, current, grad, node, __call__)
        return __call__

    def _prepare(self, module: Any) -> Tuple[Any, Any]:
        """``(weak reference to module, (fields, backward) of its scope or None)``, kept while
        settings and names stay once the module has a known path."""
        config = self.config
        known = NAMES.path(module)
        if known is None and current_depth(self._open) == 0 and config is not None and \
                _session.current() is not None:  # the outermost module of this capture: a root
            try:  # an owner's named_modules is the program's code: a failure there names from the module
                NAMES.add_root(model_of(module))
            except Exception:
                pass
            known = NAMES.path(module)
            if known is None:
                NAMES.add_root(module)
                known = NAMES.path(module)
        cls = type(module).__name__
        path, depth, marked = known if known is not None else (cls, 0, None)
        wanted = marked or config  # mark_modules' own settings win for its model
        scope = None
        # torch.compile's wrapper calls its model, whose own call opens the scope of that name
        if wanted is not None and wanted.wants(path, cls, depth) and not is_compiled_wrapper(module):
            scope = ({"name": path, "module": path, "module_class": cls}, wanted.backward)
        key, prepared = id(module), self._prepared
        try:
            def forget(ref: Any, key: int = key) -> None:
                if prepared.get(key, (None,))[0] is ref:
                    del prepared[key]
            entry = (weakref.ref(module, forget), scope)
        except TypeError:  # not weak-referenceable: never kept
            return (lambda: module, scope)
        if known is not None:
            prepared[key] = entry
        return entry


def wrapped_attribute(cls: Any) -> str:
    """The ``nn.Module`` attribute the module scopes wrap: ``_call_impl`` where ``__call__`` is
    torch's ``_wrapped_call_impl`` calling it (torch >= 2.0), else ``__call__``.

    Setting a class's ``__call__`` updates the call slot of every subclass (~350 in torch: 0.3
    ms a capture on the CPU machine, set and put back; BENCHMARKS.md, "module scopes at capture");
    ``_call_impl`` is no slot, and every module call goes through it all the same."""
    call, impl = cls.__dict__.get("__call__"), cls.__dict__.get("_call_impl")
    code = getattr(call, "__code__", None)
    if impl is not None and code is not None and "_call_impl" in code.co_names:
        return "_call_impl"
    return "__call__"


class _Dynamo:
    """Keeping torch.compile's frame evaluation off our own code.

    A module call inside a compiled model's call (a runner capturing ``torch.compile(model)``;
    a graph break calling a submodule) runs the module wrapper while dynamo evaluates frames:
    dynamo would compile the wrapper's frame as a new graph (a compile in the middle of the
    program's capture, a graph the program never ran) and trace our bookkeeping. So the
    wrapper's own frame is skipped (``skip_code``: the model's frames it calls are compiled and
    cached as always) and the bookkeeping runs under ``torch._dynamo.disable``. Only where the
    program already imported dynamo: nothing is imported here."""

    def __init__(self, disable: Any, skip_code: Any) -> None:
        self._disable, self._skip_code = disable, skip_code

    @classmethod
    def loaded(cls) -> "Optional[_Dynamo]":
        dynamo, frames = sys.modules.get("torch._dynamo"), sys.modules.get("torch._dynamo.eval_frame")
        disable, skip_code = getattr(dynamo, "disable", None), getattr(frames, "skip_code", None)
        if disable is None or skip_code is None:
            return None
        return cls(disable, skip_code)

    def outside(self, fn: Any) -> Any:
        """``fn`` run with dynamo's frame evaluation off (``fn`` itself where dynamo refuses)."""
        try:
            return self._disable(fn, recursive=True)
        except Exception:
            return fn

    def skip(self, fn: Any) -> None:
        """Dynamo never compiles ``fn``'s own frame (the frames it calls are evaluated as ever)."""
        try:
            self._skip_code(fn.__code__)
        except Exception:
            pass


def _close(item: Any) -> None:
    """Close a module scope: a ``(recorder, token)`` or a ``mark_kernels`` block."""
    if type(item) is tuple:
        item[0].close(item[1])
    else:
        item.__exit__(None, None, None)


def current_depth(opened: Dict[int, List[Any]]) -> int:
    """How many module scopes the calling thread has open."""
    st = opened.get(threading.get_ident())
    return len(st) if st else 0


HOOKS = ModuleHooks()
