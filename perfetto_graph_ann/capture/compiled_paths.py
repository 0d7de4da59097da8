"""Module paths for the kernels of ``torch.compile``d code: what inductor's code generation
recorded, aligned with the nodes a capture of that code made. Torch-free.

Inside compiled code no module hook runs, so module scopes (:mod:`.modules`) cannot see which
module a kernel belongs to. Inductor can: every kernel it generates computes FX nodes (its
*origins*), and each FX node carries the ``nn_module_stack`` of the module calls it was traced
in (``fwd_nn_module_stack`` in a backward graph). :mod:`.compiled` records, while inductor
writes a graph's wrapper code, the launches that code makes in order as :class:`Item` s:

- ``kernel``: a kernel inductor generated, with its function name (the name the CUDA graph's
  kernel node reports) and the deepest module common to its origins;
- ``extern``: an extern kernel call (``mm`` through cuBLAS, a fallback op): it launches kernels
  whose names inductor does not know, zero or more;
- ``other``: a wrapper line of a node's code that might launch work (a ``zero_()``, a copy),
  with that node's module.

:func:`align` pairs a capture's nodes with a recorded sequence: named kernels are anchors and
must match one to one, in order; the other GPU nodes between two anchors came from the extern
and other items between them, so they get those items' deepest common module (and nothing if
there are none). A sequence that does not fit is not used, and where several fit and disagree
a node gets no path: never a wrong one. :func:`derive_scopes` turns the labels into nested
scope records (one per module level and run of consecutive nodes), as module hooks would have
opened them, each node tagged with how its path is known (:data:`ORIGINS`).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..annotations.model import MODULE_ORIGIN

__all__ = ["COMMON", "EXACT", "Item", "ORIGINS", "Recorded", "UNKNOWN", "WATCHED_CALLS", "agree", "align",
           "common_stack", "derive_scopes", "frame_relative", "module_key_id", "module_stack", "region_fields"]

#: One module call level: (qualified path, class name).
Frame = Tuple[str, str]
Stack = Tuple[Frame, ...]

#: How a kernel's module path is known (the ``module origin`` field):
#: ``exact``: every FX node it computes lies in that module (for an extern call: one call);
#: ``common ancestor``: it computes nodes of several modules, the path is their deepest common one;
#: ``unknown``: no module can be named; the kernel has the compiled region's name only.
EXACT, COMMON, UNKNOWN = "exact", "common ancestor", "unknown"
ORIGINS = (EXACT, COMMON, UNKNOWN)

#: Node types that are GPU work (labelled); the others (empty, event nodes) are passed over.
_WORK = frozenset({"kernel", "memcpy", "memset"})

#: A module as this package names it, from dynamo's key for the module (:func:`module_stack`):
#: (path, class name, depth below its root); None where the module is not one it has named.
Resolve = Callable[[str], Optional[Tuple[str, str, int]]]

_LOCAL = re.compile(r"""^(?:[LG]\[(?:'[^']*'|"[^"]*")\]|self)(?:\[(?:\d+|'[^']*'|"[^"]*")\])*""")
#: Steps of a source text from a bound method or a closure cell to the object it holds.
_BOUND_STEPS = frozenset({"__self__", "cell_contents"})
_REACH_STEPS = _BOUND_STEPS | {"__closure__", "__wrapped__", "__func__", "func"}  # func: functools.partial
_PART = re.compile(r"""\.(\w+)|\[(?:'([^']*)'|"([^"]*)"|(\d+))\]""")


def module_key_id(key: Any) -> Optional[int]:
    """The ``id()`` of the module dynamo keys an ``nn_module_stack`` entry by (``"<id>"``, or
    ``"<id>@<n>"`` for its n-th later call in one graph); None for a key of another form (a
    specialized module's attribute name)."""
    if not isinstance(key, str):
        return None
    head = key.split("@", 1)[0]
    return int(head) if head.isdigit() else None


def frame_relative(raw: str) -> Optional[Tuple[str, ...]]:
    """Dynamo's source text for a module (``L['self'].layers[0].mlp``, ``L['args'][0].model``,
    ``L['self']._modules['layers']``) -> the attribute path from the compiled frame's local
    (``("layers", "0", "mlp")``; ``()`` for the local itself); None where it cannot be read.

    A compiled bound method reached through a decorator's closure
    (``L['fn'].__closure__[1].cell_contents.__self__.model``: ``torch.no_grad()(model.forward)``)
    is read from the object it is bound to, and a closure cell from its contents: the path
    starts after the last ``__self__`` or ``cell_contents`` step of the text's leading run of
    such steps (a step of that kind further on is read as an attribute, so the depth check
    refuses it)."""
    m = _LOCAL.match(raw)
    if m is None:
        return None
    rest = re.sub(r"""\._(?:modules|parameters|buffers)\[(['"])([^'"\]]+)\1\]""", r".\2", raw[m.end():])
    parts = []
    while rest:
        p = _PART.match(rest)
        if p is None:
            return None
        parts.append(next(g for g in p.groups() if g is not None))
        rest = rest[p.end():]
    cut = 0
    for i, part in enumerate(parts):  # only a leading run of closure / bound-method steps
        if part not in _REACH_STEPS and not part.isdigit():
            break
        if part in _BOUND_STEPS:
            cut = i + 1
    return tuple(parts[cut:])


def module_stack(meta_stack: Optional[Mapping[str, Any]], resolve: Resolve) -> Optional[Stack]:
    """An FX node's ``nn_module_stack`` (key -> (source, class) outermost first) as a
    :data:`Stack`, each module named by ``resolve(key)``; None where one is not known (the node
    is then of unknown module).

    Dynamo keys each entry by the module itself; the recorded class must be the named module's.
    Its source text is relative to the compiled frame's local, which is the model's root only
    if the module lies exactly that deep below the root: after a graph break inside a
    submodule, the frame is that submodule's (``L['self'].a``), and dynamo runs the code it
    compiled for one instance for its siblings too (every layer), so a path from the module
    it saw would name the wrong layer. Such a stack is unknown. A decorated forward
    (``wrapper(*args)``: ``L['args'][0].model``) is the root's frame, and is read."""
    if not meta_stack:
        return ()
    out: List[Frame] = []
    for key, value in meta_stack.items():
        try:
            raw, cls = value[0], value[1]
        except (TypeError, IndexError, KeyError):
            return None
        name = cls if isinstance(cls, str) else getattr(cls, "__name__", None)
        named = resolve(key)
        rel = frame_relative(raw) if isinstance(raw, str) else None
        if named is None or rel is None or not isinstance(name, str) or name.rsplit(".", 1)[-1] != named[1]:
            return None
        path, cls_name, depth = named
        if len(rel) != depth or (depth and tuple(path.split(".")[-depth:]) != rel):
            return None
        out.append((path, cls_name))
    return tuple(out)


def common_stack(stacks: Iterable[Optional[Stack]]) -> Tuple[Stack, bool]:
    """The deepest module common to ``stacks`` and whether they were all the same. A None
    (unknown) in ``stacks`` makes the result the root ``()``."""
    out: Optional[Stack] = None
    same = True
    for s in stacks:
        if s is None:
            return (), False
        if out is None:
            out = s
            continue
        if s != out:
            same = False
        n = 0
        while n < len(out) and n < len(s) and out[n] == s[n]:
            n += 1
        out = out[:n]
    return (out or ()), same and out is not None


@dataclasses.dataclass(frozen=True)
class Item:
    """One launch of recorded wrapper code (see the module's docstring)."""

    kind: str  #: "kernel", "extern" or "other"
    name: Optional[str]  #: the kernel's function name ("kernel" only)
    stack: Stack  #: the deepest module common to its origins (() = none known)
    exact: bool  #: every origin had that very stack
    #: an extern call's Python callable (``extern_kernels.mm``), seen at capture when watched
    call: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Recorded:
    """The launches of one wrapper function (a graph's ``call`` or one of its partitions)."""

    items: Tuple[Item, ...]
    backward: bool = False  #: an autograd backward graph


#: A node's label: (module stack, origin kind); ((), UNKNOWN) = region only.
Label = Tuple[Stack, str]
_NONE: Label = ((), UNKNOWN)


def _item_label(items: Sequence[Item]) -> Label:
    if not items:
        return _NONE
    stack, same = common_stack(i.stack for i in items)
    if not stack:
        return _NONE
    exact = same and len(items) == 1 and items[0].exact
    return stack, EXACT if exact else COMMON


#: The extern calls a capture watches (their callables' prefix in inductor's wrapper code).
WATCHED_CALLS = "extern_kernels."


def align(nodes: Sequence[Tuple[str, Optional[str]]], recorded: Recorded,
          calls: Sequence[Tuple[int, int, str]] = ()) -> Optional[List[Optional[Label]]]:
    """Labels for ``nodes`` ((type, kernel name) in creation order) from ``recorded``, or None
    where the sequence does not fit. Nodes that are not GPU work get None.

    ``calls``: the watched extern calls seen during the capture, ``(start, end, callable)``
    node positions in ``nodes``, in call order. Where they are exactly the recorded sequence's
    watched calls, each one's nodes get its module, and the other extern items between two
    anchors are left to explain the rest."""
    names = {i.name for i in recorded.items if i.kind == "kernel"}
    watched = [i for i in recorded.items if i.kind == "extern" and (i.call or "").startswith(WATCHED_CALLS)]
    owner: dict = {}  # node position -> the watched item whose call launched it
    used: set = set()
    if calls and len(calls) == len(watched) and all(c[2] == i.call for c, i in zip(calls, watched)):
        for (a, b, _), item in zip(calls, watched):
            used.add(id(item))
            for k in range(a, b):
                owner[k] = item
    segments: List[Tuple[List[Item], Optional[Item]]] = []  # (extern/other items, then the anchor)
    pending: List[Item] = []
    seg_of: dict = {}
    for it in recorded.items:
        if it.kind == "kernel":
            segments.append((pending, it))
            pending = []
        else:
            seg_of[id(it)] = len(segments)
            pending.append(it)
    segments.append((pending, None))
    out: List[Optional[Label]] = [None] * len(nodes)
    seg = 0
    loose: List[int] = []  # GPU nodes since the last anchor

    def settle(items: List[Item]) -> None:
        label = _item_label([i for i in items if id(i) not in used])
        for k in loose:
            out[k] = label
        loose.clear()

    for k, (ntype, name) in enumerate(nodes):
        if ntype not in _WORK:
            continue
        if ntype == "kernel" and name in names:
            items, anchor = segments[seg] if seg < len(segments) else ([], None)
            if anchor is None or anchor.name != name:
                return None
            settle(items)
            out[k] = _item_label([anchor])
            seg += 1
        elif k in owner:
            if seg_of[id(owner[k])] != seg:
                return None  # the call ran between other kernels than inductor wrote it
            out[k] = _item_label([owner[k]])
        else:
            loose.append(k)
    if seg != len(segments) - 1:
        return None  # recorded kernels that the capture did not launch
    settle(segments[-1][0])
    return out


def agree(fits: Sequence[List[Optional[Label]]]) -> List[Optional[Label]]:
    """Per node, the label every fitting sequence gives it; where they differ, unknown."""
    first = fits[0]
    return [lab if all(f[k] == lab for f in fits[1:]) else (_NONE if lab is not None else None)
            for k, lab in enumerate(first)]


def derive_scopes(kinds: Sequence[str], labels: Sequence[Optional[Label]], start: int, backward: bool,
                  wants: Any = None) -> List[Tuple[int, int, Mapping[str, Any]]]:
    """Scope ranges ``(start, end, fields)`` over listing positions ``start + k``, outer first.

    One scope per module level and run of consecutive GPU nodes whose paths share that level
    (nodes that are not GPU work neither break nor end a run), named as module hooks name
    theirs; then unnamed ranges giving each labelled node its ``module origin``. ``wants(path, cls, depth)``
    (a :class:`.modules.ModuleScopes`' test) drops levels; a dropped level's nodes keep their
    outer levels' scopes. ``backward`` adds ``autograd_phase: backward``."""
    stacks: List[Optional[Stack]] = []
    for lab in labels:
        if lab is None:
            stacks.append(None)
            continue
        stack = lab[0]
        if wants is not None:
            stack = tuple(f for f in stack if wants(f[0], f[1], f[0].count(".") + 1))
        stacks.append(stack)
    depth = max((len(s) for s in stacks if s), default=0)
    out: List[Tuple[int, int, Mapping[str, Any]]] = []
    for level in range(1, depth + 1):
        for key, a, b in _runs(stacks, lambda k, s: s[:level] if len(s) >= level else None):
            path, cls = key[-1]
            fields = {"name": path, "module": path, "module_class": cls}
            if backward:
                fields["autograd_phase"] = "backward"
            out.append((start + a, start + b + 1, fields))
    # unnamed scopes (fields only, no scope instance), opened last so they win: a node's origin
    for origin, a, b in _runs(stacks, lambda k, s: labels[k][1] if s else None):
        out.append((start + a, start + b + 1, {MODULE_ORIGIN: origin}))
    return out


def _runs(stacks: Sequence[Optional[Stack]], key_of: Any) -> List[Tuple[Any, int, int]]:
    """(key, first, last) of each run of GPU nodes (``stacks`` not None) with one non-None
    ``key_of(position, stack)``; nodes that are not GPU work neither break nor end a run."""
    found: List[Tuple[Any, int, int]] = []
    prev = -1  # the previous GPU node
    for k, s in enumerate(stacks):
        if s is None:
            continue
        key = key_of(k, s)
        if key is not None and found and found[-1][0] == key and found[-1][2] == prev:
            found[-1] = (key, found[-1][1], k)
        elif key is not None:
            found.append((key, k, k))
        prev = k
    return found


def region_fields(region: str) -> dict:
    """The fields of a compiled region's scope: its name, and ``unknown`` as the origin of the
    module path of every node no deeper scope names."""
    return {"name": region, "compiled_region": region, MODULE_ORIGIN: UNKNOWN}
