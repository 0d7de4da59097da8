"""Module paths inside ``torch.compile``d code: inductor's launches recorded while it writes a
graph's code, and the captures of that code aligned with them (:mod:`.compiled_paths`).

Three parts, all installed by ``instrument(modules=...)``:

- **Which model was compiled** (``install_roots()``, once torch.compile's classes are imported):
  a model given to ``torch.compile`` (or compiled in place, or whose bound method is compiled,
  as SGLang's and vLLM's runners do) becomes a root of
  :data:`.modules.COMPILED_ROOTS` (names for compiled code only; :data:`.modules.NAMES` wins).
  Dynamo keys each FX node's module stack by the module's ``id``; a kernel's path is the name
  of that very module, never read from dynamo's source text (which is relative to whatever
  frame was compiled: :func:`.compiled_paths.module_stack`).

- **While inductor generates code** (``install()``, once, class-level wraps of inductor's
  ``PythonWrapperCodegen.generate_kernel_call`` / ``writeline``, ``Scheduler.codegen_extern_call``,
  ``GraphLowering.compile_to_module`` and ``CompiledFxGraph.__init__``): every kernel launch,
  extern call and possibly-launching wrapper line is recorded with the module of the FX nodes it
  computes, per wrapper function (the graph's ``call`` and each partition). Nothing is changed in
  what inductor writes; the wraps only read their arguments. Each graph's launches are also
  kept on disk as a compile record (:mod:`.compile_records`), portable between processes.
- **When inductor loads a graph from its cache** (``CompiledFxGraph.after_deserialization``):
  the graph was never generated here; its compile record, where one was kept, gives its
  launches, their origins named in this process. Without one its kernels get the compiled
  region's name only (and the process is warned once).
- **While a graph is captured** (``capture_started`` / ``capture_ended``): a capture that
  began inside a compiled graph's call (``mode="reduce-overhead"``: cudagraph trees capture
  one wrapper function each) is that graph's region as a whole; a compiled graph called inside
  a capture (a framework capturing compiled pieces itself) is a region scope around the call.
  When the node table is read, :meth:`Regions.scopes` aligns each region's nodes with the
  recorded launches and adds the module scopes.

Inductor's internals change between torch releases: every wrap checks what it finds and
stands back (the kernels keep the region's name) rather than guess; no error reaches the program.
"""
from __future__ import annotations

import atexit
import functools
import inspect
import os
import re
import sys
import threading
import types
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import compile_records as records
from . import compiled_paths as paths
from .compiled_paths import Item, Recorded
from .marks import mark_kernels
from .modules import COMPILED_ROOTS, NAMES

__all__ = ["CODEGEN", "EXTERN", "OUTPUTS", "RUNTIME", "Regions", "UNRECORDED_WARNING", "bound_module", "install",
           "install_roots", "uninstall", "uninstall_roots"]

#: The field of the scopes around watched extern calls (dropped once the table is read).
EXTERN = "compiled extern call"

#: Wrapper line classes that never launch GPU work (memory planning, comments, contexts).
_QUIET_LINES = frozenset({
    "AllocateLine", "FreeIfNotReusedLine", "ReinterpretLine", "ReuseLine", "NullLine", "FreeLine",
    "CommentLine", "EnterDeviceContextManagerLine", "ExitDeviceContextManagerLine",
    "EnterDeviceContextManagerWithStreamInfoLine", "ExitDeviceContextManagerWithStreamInfoLine",
    "EnterSubgraphLine", "ExitSubgraphLine", "MultiOutputLine", "AssertSizeStrideLine",
    "AssertDivByZeroLine", "SymbolicCallArgLine", "UnbackedSymbolDefsLine", "KernelDefinitionLine",
    "LineContext", "DeferredLine", "MemoryPlanningLine", "EnterCudaStreamContextLine",
    "ExitCudaStreamContextLine",
})
_QUIET_TEXT = re.compile(
    r"^\s*(?:$|#|del |pass$|return\b|(?:\w+(?:, *\w+)*,?) = (?:empty_strided\w*|reinterpret_tensor|"
    r"get_raw_stream|torch\._ops\.\w+\.\w+\.\w+\(\) *$|args$|\w+$|\w+\[\d+\]$)|assert_size_stride|"
    r"assert_alignment|with torch\.\w+\._DeviceGuard|torch\.\w+\.set_device|stream\d* = get_raw_stream|"
    r"\w+ = \w+; del \w+ +# reuse)")


class _Codegen:
    """What inductor's code generation launched, per graph being lowered (thread-local: compiles
    of different threads do not mix)."""

    def __init__(self) -> None:
        self._local = threading.local()
        #: graph (GraphLowering) -> {"order": [wrapper ids], wrapper id -> [Item]}
        self.graphs: "weakref.WeakKeyDictionary[Any, Dict[Any, Any]]" = weakref.WeakKeyDictionary()
        #: wrapper function code object -> Recorded (exact identification of a captured partition)
        self.by_code: "weakref.WeakKeyDictionary[Any, Recorded]" = weakref.WeakKeyDictionary()
        self.installed = False
        self.failed: Optional[str] = None
        #: compiled graphs run in a capture that were not generated while watched (cache hits)
        self.unrecorded = 0
        self.warned = False
        self.pending = False  #: the warning deferred (a capture that records warnings)
        #: compiled graphs loaded from inductor's cache whose launches a compile record gave
        self.recovered = 0
        #: where compile records go (None: off), fixed at install: inductor points
        #: TORCHINDUCTOR_CACHE_DIR at a temporary folder while its caches are off, and frameworks
        #: (vLLM) at their own; a record is found by its content, wherever the cache is
        self.records_dir: Optional[str] = None

    def _inside(self) -> int:
        return getattr(self._local, "inside", 0)

    def _add(self, kind: str, name: Optional[str], node: Any) -> None:
        try:
            from torch._inductor.virtualized import V

            graph, wrapper = V.graph, V.graph.wrapper_code
        except Exception:
            return
        rec = self.graphs.get(graph)
        if rec is None:
            try:
                rec = self.graphs[graph] = {"order": [], "items": [], "names": {}, "launches": []}
            except TypeError:
                return
        wid = id(wrapper)
        if wid not in rec:
            rec[wid] = []
            rec["order"].append(wid)
            rec["names"][wid] = getattr(wrapper, "subgraph_name", None) or "call"
        resolve = rec.get("resolve")
        if resolve is None:
            resolve = rec["resolve"] = _resolver()
        last = getattr(self._local, "stack_of", None)  # a node's "other" lines: its stack once
        if last is not None and last[0] is node and node is not None:
            origins, named = last[1]
        else:
            origins, keys = _origins(node)
            named = records.stack_of(records.Launch(kind, None, None, origins), keys, resolve)
            self._local.stack_of = (node, (origins, named))
        call = None
        if kind == "extern" and node:
            call = getattr(getattr(node[0], "node", None), "python_kernel_name", None)
            call = call if isinstance(call, str) else None
        item = Item(kind, name, named.stack, named.exact, call)
        rec[wid].append(item)
        rec["items"].append(item)
        rec["launches"].append((rec["order"].index(wid), records.Launch(kind, name, call, origins)))

    def _node(self) -> Any:
        """The scheduler nodes whose code is being generated now (None: not known)."""
        return getattr(self._local, "node", None)

    def scheduling(self, orig: Callable) -> Callable:
        """A GPU scheduling's ``codegen_node`` / ``codegen_template`` / ...: its node arguments are
        what the kernel calls made inside it compute (a call made elsewhere, as the CPU backend
        flushes its kernels later, has no known origin)."""
        def codegen(scheduling, *args, **kwargs):
            nodes = [a for a in list(args) + list(kwargs.values())
                     for a in (a if isinstance(a, (list, tuple)) else (a,)) if hasattr(a, "get_nodes")]
            prev = self._node()
            self._local.node = nodes
            try:
                return orig(scheduling, *args, **kwargs)
            finally:
                self._local.node = prev
        return codegen

    def _recording(self, orig: Callable, record: Callable[[Any], None]) -> Callable:
        """``orig`` (whose first argument after ``self`` names the launch) recording the launch
        once: what it generates inside (an extern call's lines, a kernel call's) is not recorded again."""
        def wrapped(obj, first, *args, **kwargs):
            if self._inside() == 0:
                record(first)
            self._local.inside = self._inside() + 1
            try:
                return orig(obj, first, *args, **kwargs)
            finally:
                self._local.inside -= 1
        return wrapped

    def kernel_call(self, orig: Callable) -> Callable:
        """``PythonWrapperCodegen.generate_kernel_call``: a named kernel launch."""
        return self._recording(orig, lambda kernel_name: self._add("kernel", kernel_name, self._node()))

    def extern_call(self, orig: Callable) -> Callable:
        """``Scheduler.codegen_extern_call``: an extern call (its kernels' names are not known)."""
        return self._recording(orig, lambda scheduler_node: self._add("extern", None, [scheduler_node]))

    def writeline(self, orig: Callable) -> Callable:
        def writeline(wrapper, line, *args, **kwargs):
            if self._inside() == 0 and not _quiet(line):
                self._add("other", None, self._node())
            return orig(wrapper, line, *args, **kwargs)
        return writeline

    def compiled(self, orig: Callable) -> Callable:
        def compile_to_module(graph, *args, **kwargs):
            mod = orig(graph, *args, **kwargs)
            try:
                rec = self.graphs.get(graph)
                if rec is not None:
                    backward = bool(getattr(graph, "is_backward", False))
                    for wid in rec["order"]:
                        fn = getattr(mod, rec["names"][wid], None)
                        code = getattr(fn, "__code__", None)
                        if code is not None:
                            self.by_code[code] = Recorded(tuple(rec[wid]), backward)
            except Exception:
                pass
            return mod
        return compile_to_module

    def output(self, orig: Callable) -> Callable:
        def __init__(out, *args, **kwargs):
            orig(out, *args, **kwargs)
            try:
                graph = kwargs.get("graph", args[1] if len(args) > 1 else None)
                rec = self.graphs.get(graph) if graph is not None else None
                region = _region_name(kwargs.get("compile_region_name"), graph)
                backward = bool(getattr(graph, "is_backward", False))
                cands = ()
                if rec is not None:
                    cands = tuple(Recorded(tuple(rec[w]), backward) for w in rec["order"])
                    if len(cands) > 1:
                        cands = (Recorded(tuple(rec["items"]), backward),) + cands
                OUTPUTS.set(out, region, cands)
                if rec is not None:
                    _keep_record(out, rec, backward)
            except Exception:
                pass
        return __init__

    def loaded(self, orig: Callable) -> Callable:
        """``CompiledFxGraph.after_deserialization``: a graph loaded from inductor's cache gets
        the launches its compile record kept (:func:`_recover`)."""
        def after_deserialization(out, *args, **kwargs):
            result = orig(out, *args, **kwargs)
            try:
                if OUTPUTS.get(out) is None and _recover(out):
                    self.recovered += 1
            except Exception:
                pass
            return result
        return after_deserialization


def _resolver() -> paths.Resolve:
    """Dynamo's module keys -> the modules' paths as this package names them (:data:`.modules.NAMES`:
    models given to ``mark_modules``, roots of earlier captures; else :data:`.modules.COMPILED_ROOTS`:
    models given to ``torch.compile``, and the module whose frame is being compiled), read once
    per graph lowered; a module it has not named is unknown."""
    _name_frame_module()
    named = COMPILED_ROOTS.by_id()
    named.update(NAMES.by_id())

    def resolve(key: str) -> Optional[Tuple[str, str, int]]:
        i = paths.module_key_id(key)
        return None if i is None else named.get(i)
    return resolve


def _name_frame_module() -> None:
    """Name the module whose frame dynamo is compiling (the frame's first argument, a method's
    ``self``) as a root of :data:`.modules.COMPILED_ROOTS` where nothing named it yet: a
    ``forward`` decorated with ``@torch.compile``, or a model's method compiled any way not
    seen at ``torch.compile``. Read from dynamo's own record of the frame's locals while it
    compiles (a frame's ``f_locals`` is never read), ``args[0]`` for a ``wrapper(*args)``
    decorator's frame; nothing where that is not available (a backward graph compiled later)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        from torch.nn import Module

        tx = InstructionTranslator.current_tx()
        code = tx.f_code
        if code.co_argcount:
            first = tx.f_locals.get(code.co_varnames[0])
        elif code.co_flags & inspect.CO_VARARGS:  # wrapper(*args): a decorated forward's self is args[0]
            first = (tx.f_locals.get(code.co_varnames[code.co_kwonlyargcount]) or (None,))[0]
        else:
            return
    except Exception:
        return
    if isinstance(first, Module) and COMPILED_ROOTS.path(first) is None and NAMES.path(first) is None:
        _add_root(first)


def _origins(nodes: Optional[Sequence[Any]]) -> Tuple[Optional[Tuple[records.Origin, ...]], Dict[str, str]]:
    """The module stacks of scheduler nodes' FX origins, as dynamo wrote them (views left out
    where anything else is there), and dynamo's key for each source text in them; ``(None,
    {})`` where none is known."""
    if not nodes:
        return None, {}
    origins: List[Any] = []
    try:
        for node in nodes:
            for sn in node.get_nodes():
                ir = getattr(sn, "node", None)
                origins.extend(getattr(ir, "origins", ()) or ())
    except Exception:
        return None, {}
    computing = [o for o in origins if not _is_view(o)]
    metas = []
    for o in computing or origins:
        meta = getattr(o, "meta", {}) or {}
        raw = meta.get("nn_module_stack")
        metas.append(meta.get("fwd_nn_module_stack") if raw is None else raw)
    if not metas:
        return None, {}
    return tuple(records.origin_of(m) for m in metas), records.keys_of(metas)


def _compile_id() -> Any:
    try:
        import torch._guards as guards

        return guards.CompileContext.current_compile_id()
    except Exception:
        return None


#: A traced graph as a compile record needs it: (fingerprint, source text -> dynamo's key).
Traced = Tuple[str, Dict[str, str]]
#: compile id -> the graph dynamo traced for it: a backward graph that AOT autograd compiles or
#: loads at its first run (outside dynamo's compile, in the forward's compile id) goes with
#: its forward's traced graph, as both are found when they load from a cache together.
_TRACED: "OrderedDict[str, Traced]" = OrderedDict()
_TRACED_KEPT = 1024
#: the last traced graph read: (compile id, weak reference to the FX graph, node count, Traced);
#: the pieces of one graph (vLLM's piecewise split), a forward and its backward read it once
_LAST_TRACED: List[Any] = [None, None, -1, None]


def _traced_graph() -> Optional[Traced]:
    """The graph dynamo traced and is compiling now (``InstructionTranslator.current_tx()``),
    else the one traced under the same compile id; None where neither is known."""
    cid = _compile_id()
    cid = None if cid is None else str(cid)
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        graph = InstructionTranslator.current_tx().output.graph
        nodes = list(graph.nodes)
    except Exception:
        return _TRACED.get(cid) if cid is not None else None
    last_cid, last_ref, last_len, last = _LAST_TRACED
    if last is not None and last_cid == cid and last_len == len(nodes) and last_ref is not None and last_ref() is graph:
        return last
    fingerprint = records.graph_fingerprint(nodes)
    if fingerprint is None:
        return None
    traced = (fingerprint, records.keys_of(getattr(n, "meta", {}).get("nn_module_stack") for n in nodes))
    if cid is not None:
        _TRACED[cid] = traced
        _TRACED.move_to_end(cid)
        while len(_TRACED) > _TRACED_KEPT:
            _TRACED.popitem(last=False)
    try:
        _LAST_TRACED[:] = [cid, weakref.ref(graph), len(nodes), traced]
    except TypeError:  # an FX graph without weak references: read each time
        pass
    return traced


def _record_path(out: Any, traced: Optional[Traced]) -> Optional[str]:
    """Where the compile record of the compiled graph ``out`` lowered from ``traced`` is; None
    where records are off or it has no such place."""
    source = getattr(out, "source_code", None)
    folder = CODEGEN.records_dir
    if traced is None or folder is None or not isinstance(source, str):
        return None
    return records.record_path(folder, source, traced[0])


def _inductor_cache() -> str:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return default_cache_dir()


def _keep_record(out: Any, rec: Dict[Any, Any], backward: bool) -> None:
    """Write the compile record of a graph inductor has just generated (once per code and
    traced graph); nothing where it cannot be placed or written."""
    path = _record_path(out, _traced_graph())
    if path is None or os.path.exists(path):
        return
    try:
        records.save(path, backward, [rec["names"][w] for w in rec["order"]], rec["launches"])
    except Exception:
        pass


def _recover(out: Any) -> bool:
    """Give a compiled graph loaded from inductor's cache the launches of its compile record,
    its origins named in this process (the modules of the graph dynamo has just traced);
    False where there is no usable record."""
    traced = _traced_graph()
    path = _record_path(out, traced)
    found = records.load(path) if path is not None else None
    if found is None or traced is None:
        return False
    backward, names, launches = found
    keys = traced[1]
    resolve = _resolver()
    items = [(fi, records.stack_of(ln, keys, resolve)) for fi, ln in launches]
    per = [Recorded(tuple(it for fi, it in items if fi == k), backward) for k in range(len(names))]
    for name, recorded in zip(names, per):
        code = getattr(_wrapper_function(out, name), "__code__", None)
        if code is not None:
            CODEGEN.by_code[code] = recorded
    cands = tuple(per)
    if len(cands) > 1:
        cands = (Recorded(tuple(it for _, it in items), backward),) + cands
    OUTPUTS.set(out, _region_name(None, None) + (" backward" if backward else ""), cands)
    return True


def _wrapper_function(out: Any, name: str) -> Any:
    """The loaded code's wrapper function ``name`` (``call``, a partition): an attribute of
    the object whose method ``call`` is, else a global of ``call``'s module."""
    call = getattr(out, "current_callable", None)
    owner = getattr(call, "__self__", None)
    fn = getattr(owner, name, None) if owner is not None else None
    if fn is None:
        fn = (getattr(call, "__globals__", None) or {}).get(name)
    return fn


#: aten ops that compute nothing (a view, a reshape of one): an FX node of one is in a kernel's
#: origins when the kernel writes a buffer the view reads, and says nothing of whose work it is.
_VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze", "slice",
    "select", "as_strided", "alias", "unfold", "split", "split_with_sizes", "chunk", "narrow", "view_as",
    "detach", "_reshape_alias", "unbind", "movedim", "expand_as", "flatten", "unflatten",
})


def _is_view(fx_node: Any) -> bool:
    target = getattr(fx_node, "target", None)
    if getattr(fx_node, "op", None) != "call_function" or target is None:
        return False
    if getattr(target, "is_view", False):
        return True
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", "")
    return name.split(".")[0] in _VIEW_OPS


def _quiet(line: Any) -> bool:
    if isinstance(line, str):
        return bool(_QUIET_TEXT.match(line))
    return any(c.__name__ in _QUIET_LINES for c in type(line).__mro__)


def _region_name(given: Optional[str], graph: Any) -> str:
    name = given
    if not name:
        cid = _compile_id()
        name = f"torch.compile [{cid}]" if cid is not None else None
    name = name or "torch.compile"
    return name + (" backward" if getattr(graph, "is_backward", False) else "")


class _Outputs:
    """Compiled graph object -> (region name, candidate launch sequences), held weakly."""

    def __init__(self) -> None:
        self._by_id: Dict[int, Tuple[str, Tuple[Recorded, ...]]] = {}

    def set(self, out: Any, region: str, cands: Tuple[Recorded, ...]) -> None:
        key = id(out)
        self._by_id[key] = (region, cands)
        try:
            weakref.finalize(out, self._by_id.pop, key, None)
        except TypeError:
            pass

    def get(self, out: Any) -> Optional[Tuple[str, Tuple[Recorded, ...]]]:
        return self._by_id.get(id(out))


CODEGEN = _Codegen()
OUTPUTS = _Outputs()
_lock = threading.Lock()
#: the GPU scheduling's entry points whose node arguments a kernel call computes
_GPU_CODEGEN = ("codegen_node", "codegen_template", "codegen_mix_order_reduction", "codegen_combo_kernel")
_INSTALLED: List[Tuple[Any, str]] = []


def install() -> bool:
    """Wrap inductor's code generation (once). False where inductor's classes are not as expected."""
    with _lock:
        if CODEGEN.installed:
            return True
        try:
            from torch._inductor import graph as g, output_code as oc, scheduler as s
            from torch._inductor.codegen import cuda_combined_scheduling as cs, wrapper as w

            gpu = cs.CUDACombinedScheduling
            targets = [(gpu, n, CODEGEN.scheduling) for n in _GPU_CODEGEN if n in gpu.__dict__]
            if "codegen_node" not in gpu.__dict__:
                raise AttributeError("CUDACombinedScheduling.codegen_node")
            targets += [(w.PythonWrapperCodegen, "generate_kernel_call", CODEGEN.kernel_call),
                       (w.PythonWrapperCodegen, "writeline", CODEGEN.writeline),
                       (s.Scheduler, "codegen_extern_call", CODEGEN.extern_call),
                       (g.GraphLowering, "compile_to_module", CODEGEN.compiled),
                       (oc.CompiledFxGraph, "__init__", CODEGEN.output)]
            for cls, name, _ in targets:
                if not callable(cls.__dict__.get(name)):
                    raise AttributeError(f"{cls.__name__}.{name}")
            if callable(oc.CompiledFxGraph.__dict__.get("after_deserialization")):  # cache hits: optional
                targets.append((oc.CompiledFxGraph, "after_deserialization", CODEGEN.loaded))
        except Exception as e:
            CODEGEN.failed = f"inductor's code generation is not as expected ({e}): compiled code gets no module paths"
            return False
        _INSTALLED[:] = [(cls, name) for cls, name, _ in targets]
        CODEGEN.records_dir = records.directory(_inductor_cache)
        for cls, name, wrap in targets:
            orig = cls.__dict__[name]
            new = wrap(orig)
            new.__wrapped__ = orig
            new.__name__ = name
            setattr(cls, name, new)
        CODEGEN.installed = True
        return True


_ROOT_WRAPS: List[Tuple[Any, str]] = []


def install_roots() -> bool:
    """Name every model given to ``torch.compile`` as a root of :data:`.modules.COMPILED_ROOTS`,
    so that its compiled code's kernels can be given paths from it: a model itself (an
    ``OptimizedModule``'s ``_orig_mod``), a model compiled in place (``nn.Module.compile``), and
    the model whose bound method is compiled (``torch.compile(model.forward)``, also through
    decorators that keep ``__wrapped__``, as ``torch.no_grad()(model.forward)``: what SGLang's
    and vLLM's runners compile). Class-level wraps that only read; once. False where torch's
    classes are not as expected (no compiled paths then)."""
    with _lock:
        if _ROOT_WRAPS:
            return True
        try:
            from torch import nn
            from torch._dynamo import eval_frame

            init = eval_frame.OptimizedModule.__dict__["__init__"]
            compile_ = nn.Module.__dict__["compile"]
            if not (callable(init) and callable(compile_)):
                raise AttributeError("OptimizedModule.__init__ / nn.Module.compile")
        except Exception as e:
            CODEGEN.failed = f"torch.compile's module classes are not as expected ({e}): compiled code gets no module paths"
            return False
        # compiled bound methods (SGLang's and vLLM's calls): where this entry is not as expected,
        # the other roots still are
        context = getattr(eval_frame, "_TorchDynamoContext", None)
        wrap_fn = getattr(context, "__dict__", {}).get("__call__")

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            _add_root(getattr(self, "_orig_mod", None))

        def compile(self, *args, **kwargs):
            _add_root(self)
            return compile_(self, *args, **kwargs)

        def __call__(self, fn, *args, **kwargs):
            _add_root(bound_module(fn, nn.Module))
            return wrap_fn(self, fn, *args, **kwargs)

        wraps = [(eval_frame.OptimizedModule, "__init__", init, __init__), (nn.Module, "compile", compile_, compile)]
        if callable(wrap_fn):
            wraps.append((context, "__call__", wrap_fn, __call__))
        for cls, name, orig, new in wraps:
            new.__wrapped__, new.__name__, new.__qualname__ = orig, name, getattr(orig, "__qualname__", name)
            new.__doc__ = orig.__doc__
            setattr(cls, name, new)
            _ROOT_WRAPS.append((cls, name))
        return True


def bound_module(fn: Any, module_type: type) -> Any:
    """The ``module_type`` instance whose bound method ``fn`` is, looked for through the
    ``__wrapped__`` chain decorators keep (``functools.wraps``) and ``functools.partial``;
    None for anything else (a module itself, a plain function)."""
    for _ in range(16):
        try:
            owner = getattr(fn, "__self__", None)
            if isinstance(fn, types.MethodType) and isinstance(owner, module_type):
                return owner
            nxt = fn.func if isinstance(fn, functools.partial) else getattr(fn, "__wrapped__", None)
        except Exception:
            return None
        if nxt is None or nxt is fn:
            return None
        fn = nxt
    return None


def _add_root(module: Any) -> None:
    try:
        if module is not None and hasattr(module, "named_modules"):
            COMPILED_ROOTS.add_root(module)
    except Exception:  # never break the program's compile
        pass


def _unwrap(wrapped: Sequence[Tuple[Any, str]]) -> None:
    """Put back what each (class, attribute) wrapped (its ``__wrapped__``); the caller holds ``_lock``."""
    for cls, name in wrapped:
        fn = cls.__dict__.get(name)
        if getattr(fn, "__wrapped__", None) is not None:
            setattr(cls, name, fn.__wrapped__)


def uninstall() -> None:
    """Put inductor's functions back (tests)."""
    with _lock:
        if not CODEGEN.installed:
            return
        _unwrap(_INSTALLED)
        CODEGEN.installed = False


def uninstall_roots() -> None:
    """Put ``torch.compile``'s module classes back (tests)."""
    with _lock:
        _unwrap(_ROOT_WRAPS)
        _ROOT_WRAPS.clear()


class Regions:
    """The compiled regions of one capture, and the module scopes they add."""

    def __init__(self) -> None:
        #: (fields of the region's scope or None for the whole capture, region, candidates)
        self.regions: List[Tuple[Optional[dict], str, Tuple[Recorded, ...]]] = []

    @staticmethod
    def internal(fields: Any) -> bool:
        """Scope fields of this module's own bookkeeping, not an annotation."""
        return EXTERN in fields

    def scopes(self, nodes: Sequence[Any], records: Sequence[Any], next_seq: int,
               wants: Any = None) -> List[Tuple[int, Any, int, int]]:
        """Scope records ``(seq, fields, start, end)`` for the regions, given the capture's node
        table (NodeInfo in creation order) and its closed scopes."""
        out: List[Tuple[int, Any, int, int]] = []
        # the region scopes opened around compiled calls, in opening order (as self.regions)
        opened = iter(sorted((r for r in records if "compiled_region" in r.fields), key=lambda r: r.seq))
        watched = sorted((r for r in records if EXTERN in r.fields), key=lambda r: r.seq)
        for fields, region, cands in self.regions:
            if fields is None:
                a, b = 0, len(nodes)
                out.append((next_seq, paths.region_fields(region), a, b))
                next_seq += 1
            else:
                r = next(opened, None)
                if r is None or r.fields.get("compiled_region") != region:
                    break  # a scope cut short (the capture failed inside): no module paths
                a, b = r.start, r.end
            part = [(n.type, n.kernel) for n in nodes[a:b]]
            calls = [(r.start - a, r.end - a, r.fields[EXTERN]) for r in watched if a <= r.start and r.end <= b]
            fits = [f for f in (paths.align(part, c, calls) for c in cands) if f is not None]
            if not fits:
                continue
            backward = all(c.backward for c in cands)
            for start, end, f in paths.derive_scopes([t for t, _ in part], paths.agree(fits), a, backward, wants):
                out.append((next_seq, f, start, end))
                next_seq += 1
        return out


class _Runtime:
    """The class-level wrap of ``CompiledFxGraph.__call__`` while captures run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._orig: Any = None
        self._externs: List[Tuple[Any, str, Any]] = []

    def capture_started(self, session: Any) -> None:
        """Find the compiled call this capture runs in, and watch compiled calls inside it."""
        if not CODEGEN.installed:
            return
        try:
            from torch._inductor import output_code as oc
        except Exception:
            return
        regions = Regions()
        session.compiled = regions
        with self._lock:
            orig = self._orig or oc.CompiledFxGraph.__dict__.get("__call__")
            code = getattr(getattr(orig, "__wrapped__", orig), "__code__", None)
            whole = _enclosing(code)
            if whole is not None:
                regions.regions.append((None,) + whole)
            if self._users == 0 and orig is not None:
                self._orig = orig
                oc.CompiledFxGraph.__call__ = _inside_capture(orig)
                self._externs = _watch_externs()
            self._users += 1

    def capture_ended(self, session: Any = None) -> None:
        regions = getattr(session, "compiled", None)
        # a capture begun inside a compiled call is cudagraph trees', which records (swallows)
        # the warnings raised meanwhile: said later
        _warn_unrecorded(later=any(fields is None for fields, _, _ in getattr(regions, "regions", ())))
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0 and self._orig is not None:
                from torch._inductor import output_code as oc

                oc.CompiledFxGraph.__call__ = self._orig
                self._orig = None
                for ns, name, fn in self._externs:
                    setattr(ns, name, fn)
                self._externs = []


#: What a capture of compiled code whose generation was not seen is told, once a process.
UNRECORDED_WARNING = (
    "perfetto_graph_ann: a torch.compile graph ran inside a CUDA graph capture, but its code was not generated "
    "while instrumented and no compile record of it was found (inductor loaded it from a cache filled without "
    "module scopes, or it was compiled before instrument()): its kernels keep the compiled region's name and get "
    "no module path. For module paths compile afresh once: `perfetto-graph-ann run --modules --fresh-compile` "
    "(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1); its records then serve later runs that load from the cache.")


def _warn_unrecorded(later: bool = False) -> None:
    """Say once why compiled kernels got the region's name only; never raises (``-W error``
    must not turn it into the program's exception). ``later``: inside a capture whose warnings
    are recorded, not shown (cudagraph trees'): said when a profiler is prepared, or at exit."""
    if not CODEGEN.unrecorded or CODEGEN.warned:
        return
    if later:
        if not CODEGEN.pending:
            CODEGEN.pending = True
            try:
                from .calibration import KINETO

                KINETO.on_prepare.append(_warn_pending)
                atexit.register(_warn_pending)
            except Exception:
                pass
        return
    CODEGEN.warned = True
    try:
        warnings.warn(UNRECORDED_WARNING, RuntimeWarning, stacklevel=2)
    except Exception:
        pass


def _warn_pending() -> None:
    if CODEGEN.pending:
        CODEGEN.pending = False
        _warn_unrecorded()


def _watch_externs() -> List[Tuple[Any, str, Any]]:
    """Wrap inductor's extern kernels (``extern_kernels.mm``, ...: the generated code looks them
    up at each call) so that a capture sees which nodes each call added. Returns what to restore."""
    try:
        from torch._inductor.select_algorithm import extern_kernels as ns
    except Exception:
        return []
    from . import session as _session

    def watch(fn: Callable, call: str) -> Callable:
        def extern(*args, **kwargs):
            sess = _session.current()
            if getattr(sess, "compiled", None) is None:
                return fn(*args, **kwargs)
            tok = sess.recorder.open({EXTERN: call})
            try:
                return fn(*args, **kwargs)
            finally:
                sess.recorder.close(tok)
        return extern

    saved = []
    for name, fn in list(vars(ns).items()):
        if callable(fn) and not name.startswith("_"):
            saved.append((ns, name, fn))
            setattr(ns, name, watch(fn, paths.WATCHED_CALLS + name))
    return saved


#: what a frame of inductor's own code has in its file name
_INDUCTOR_DIR = os.sep + "_inductor" + os.sep


def _enclosing(call_code: Any) -> Optional[Tuple[str, Tuple[Recorded, ...]]]:
    """The compiled call this thread is inside of (cudagraph trees capture from within it): a
    wrapper function held by a frame identifies the partition exactly; else every wrapper
    function of the graph is a candidate.

    Only inductor's own frames are read: before Python 3.13 reading a frame's ``f_locals``
    leaves a snapshot of its locals on the frame, which would keep objects the program deletes
    afterwards alive until that frame returns."""
    exact: Optional[Recorded] = None
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code is call_code or (exact is None and _INDUCTOR_DIR in code.co_filename):
            local = f.f_locals
            if exact is None:
                for v in list(local.values()):
                    rec = CODEGEN.by_code.get(v.__code__) if type(v) is types.FunctionType else None
                    if rec is not None:
                        exact = rec
                        break
            if code is call_code:
                found = OUTPUTS.get(local.get("self"))
                if found is None:  # not generated while watched (loaded from a cache)
                    CODEGEN.unrecorded += 1
                    return "torch.compile", ()
                region, cands = found
                if exact is not None and exact in cands:
                    cands = (exact,)
                return region, cands
        f = f.f_back
    return None


def _inside_capture(orig: Callable) -> Callable:
    from . import session as _session

    def __call__(self, *args, **kwargs):
        sess = _session.current()
        regions = getattr(sess, "compiled", None) if sess is not None else None
        found = OUTPUTS.get(self) if regions is not None else None
        if regions is None:
            return orig(self, *args, **kwargs)
        region, cands = found if found is not None else ("torch.compile", ())
        CODEGEN.unrecorded += found is None  # not generated while watched (loaded from a cache)
        if len(cands) > 1:
            cands = cands[:1]  # the whole call: every partition in order
        fields = paths.region_fields(region)
        regions.regions.append((fields, region, cands))
        with mark_kernels(fields):
            return orig(self, *args, **kwargs)
    __call__.__wrapped__ = orig
    return __call__


RUNTIME = _Runtime()
