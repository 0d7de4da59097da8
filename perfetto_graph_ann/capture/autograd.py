"""``mark_kernels(..., backward=True)``: carry a forward scope over to its backward kernels.

Which nodes: every autograd node created on the region's thread while the region is open.
Autograd numbers the nodes a thread creates (``Node._sequence_nr()``, a per-thread counter
that only grows), so the nodes created since the region opened are exactly those of this
thread numbered at least the counter's value at entry (AccumulateGrad nodes carry the
largest number and are never ours). They are found by walking back from the ``grad_fn`` of
every tensor an op returns (a ``TorchFunctionMode``; ``autograd.Function.apply``, which
bypasses torch-function modes, is wrapped from the first region on): a composite op's
internal nodes (``linear`` on a 3-D input: view, addmm, t; SDPA's math path: a dozen and more)
all lie behind its outputs. The walk stops at nodes numbered below the entry value (they existed before the
region) and at nodes already claimed, so each node is claimed once, by the innermost region
that created it (an inner region claims its nodes before the enclosing one sees them).

How: a claimed node gets a pre-hook that opens a scope (the region's fields plus
``autograd_phase: "backward"``) in whatever capture runs its backward, and a post-hook that
closes it. Outside a capture the hooks do nothing. Not bracketed: what the engine does for a
node outside its hooks (summing gradients into the next nodes' input buffers) and hooks that
run before ours (docs/design.md, "Backward tagging"). The walk and the hooks are torch-free
(:class:`NodeWalk`, :class:`BackwardTagger`); :class:`BackwardRegion` ties them to torch.
A region entered with grad mode off (no_grad, inference_mode) is a :class:`GradOffRegion`:
no mode, no walk (no node can be created; the exact rule for grad turned back on inside it
is in its docstring).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, List, Mapping, Optional

from . import fastpath as _fastpath
from . import session as _session

PHASE_KEY = "autograd_phase"
BACKWARD = "backward"
#: key in a claimed node's ``metadata`` (the dict every Python wrapper of the node shares):
#: the fields of the region that claimed it
CLAIM_KEY = "perfetto_graph_ann.backward"
#: AccumulateGrad (and other nodes made outside the numbering) carry UINT64_MAX
_UNNUMBERED = (1 << 64) - 1


def _flatten(obj: Any, out: List[Any], depth: int = 0) -> List[Any]:
    if depth > 4:
        return out
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _flatten(o, out, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flatten(o, out, depth + 1)
    else:
        out.append(obj)
    return out


def _current_session() -> Optional[_session.CaptureSession]:
    """:func:`.session.current` without its lock: a captured backward runs on autograd's device
    thread, which has no session stack of its own (reading a list's last item is atomic)."""
    st = getattr(_session._local, "stack", None)
    if st:
        return st[-1]
    try:
        return _session._global[-1]
    except IndexError:
        return None


class _NodeHooks:
    """The pre- and post-hook of one claimed node (bound methods: no closures, no lock).

    ``open`` pairs them: a stack of the scopes the pre-hook opened (a node re-run by a nested
    backward before its post-hook, or by two threads, pops its own scope; list append/pop
    are atomic).
    """

    __slots__ = ("tagger", "open")

    def __init__(self, tagger: "BackwardTagger"):
        self.tagger = tagger
        self.open: List[Any] = []

    def pre(self, grad_outputs: Any) -> None:
        t = self.tagger
        sess = t._current()
        if sess is not None:
            rec = sess.recorder
            if rec.active:
                if t._lane is not None:
                    sess.label_lane(t._lane, t.lane_label)
                self.open.append((rec, rec.open(t.fields)))

    def post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self.open:
            try:
                rec, tok = self.open.pop()
            except IndexError:  # another thread's post-hook took it
                return
            rec.close(tok)


class BackwardTagger:
    """Brackets the backward of the nodes it hooks with a scope of its fields."""

    __slots__ = ("fields", "lane_label", "_lane", "_current")

    def __init__(self, fields: Mapping[str, Any],
                 current: Callable[[], Optional[_session.CaptureSession]] = _current_session,
                 lane_label: Optional[str] = None):
        self.fields = {**dict(fields), PHASE_KEY: BACKWARD}
        #: the forward capture's label of ``fields["stream"]`` (mark_stream): lane labels are
        #: per graph, so a backward captured in another graph records it there too
        self.lane_label = lane_label
        lane = self.fields.get("stream")
        self._lane = lane if lane_label is not None and isinstance(lane, int) else None
        self._current = current

    def hooks(self) -> _NodeHooks:
        """A fresh pair of hooks (``.pre``, ``.post``) for one node, in Python."""
        return _NodeHooks(self)

    def hook(self, node: Any) -> None:
        """Register the scope-opening pre-hook and the scope-closing post-hook on ``node``.

        On the compiled capture path both are one C object (``_fastpath.NodeHooks``, the pre-hook
        when called with one argument, the post-hook with two): no Python frame per hook."""
        c = _fastpath.module()
        if c is not None and self._current is _current_session:
            h = c.NodeHooks(self.fields, _session._local, _session._global, self._lane, self.lane_label)
            node.register_prehook(h)
            node.register_hook(h)
            return
        h = _NodeHooks(self)
        node.register_prehook(h.pre)
        node.register_hook(h.post)


class NodeWalk:
    """Claims for ``tagger`` the nodes created on this thread since the counter read ``start``."""

    __slots__ = ("start", "tagger", "claimed")

    def __init__(self, start: int, tagger: BackwardTagger):
        self.start = start
        self.tagger = tagger
        self.claimed = 0

    def on_outputs(self, outputs: Any) -> None:
        """Walk back from the ``grad_fn`` of every tensor in ``outputs``."""
        if isinstance(outputs, (list, tuple)):
            for t in outputs:
                if isinstance(t, (list, tuple, dict)):
                    for u in _flatten(t, []):
                        gf = getattr(u, "grad_fn", None)
                        if gf is not None:
                            self.walk(gf)
                else:
                    gf = getattr(t, "grad_fn", None)
                    if gf is not None:
                        self.walk(gf)
        elif isinstance(outputs, dict):
            for t in _flatten(outputs, []):
                gf = getattr(t, "grad_fn", None)
                if gf is not None:
                    self.walk(gf)
        else:
            gf = getattr(outputs, "grad_fn", None)
            if gf is not None:
                self.walk(gf)

    def walk(self, root: Any) -> None:
        """Claim ``root`` and the nodes behind it that are new and unclaimed."""
        start = self.start
        if root._sequence_nr() < start:
            return  # the usual non-creating op (a view of an input): nothing new behind it
        tagger, excluded = self.tagger, getattr(_tls, "excluded", None)
        todo = [root]
        while todo:
            node = todo.pop()
            seq = node._sequence_nr()
            if seq < start or seq == _UNNUMBERED:
                continue  # existed before the region (or AccumulateGrad): nothing behind it is new
            meta = node.metadata
            if CLAIM_KEY in meta:
                continue  # this region's walk, or an inner region's, was here and went behind it
            todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
            if excluded and any(lo <= seq < hi for lo, hi in excluded):
                continue  # created in a grad-off region after grad was re-enabled: not ours
            meta[CLAIM_KEY] = tagger.fields
            tagger.hook(node)
            self.claimed += 1


class _NoWalk:
    """The walk of a region that claims nothing (see :class:`GradOffRegion`)."""

    __slots__ = ()

    def on_outputs(self, outputs: Any) -> None:
        return None


_NO_WALK = _NoWalk()


# Regions open on this thread (innermost last): autograd.Function.apply's wrapper hands its
# outputs to the innermost one.
_tls = threading.local()
_install_lock = threading.Lock()
_orig_apply: Any = None


def _regions() -> List["BackwardRegion"]:
    st = getattr(_tls, "regions", None)
    if st is None:
        st = _tls.regions = []
    return st


def _wrapped_apply(cls, *args, **kwargs):
    out = _orig_apply.__func__(cls, *args, **kwargs)
    st = getattr(_tls, "regions", None)
    if st and not _is_compiling():
        st[-1].walk.on_outputs(out)
    return out


def _is_compiling() -> bool:
    """True while Dynamo traces: the walk must stay out of its graphs (it would break them)."""
    import torch

    return torch.compiler.is_compiling()


def _wrap_function_apply() -> None:
    """Wrap ``torch.autograd.Function.apply`` (it bypasses torch-function modes), once, at the
    process's first backward region; the wrapper passes straight through on threads without
    an open region. Kept afterwards: patching a class per region would churn the type caches
    of every Function subclass."""
    global _orig_apply
    if _orig_apply is not None:
        return
    from torch.autograd.function import Function

    with _install_lock:
        if _orig_apply is None:
            _orig_apply = Function.__dict__["apply"]
            Function.apply = classmethod(_wrapped_apply)


_no_torch = False


def _torch_module() -> Any:
    """The ``torch`` in use, looked up at each call (tests swap in fakes, so nothing taken from
    one module may outlive it), or None where torch cannot be imported."""
    global _no_torch
    mod = sys.modules.get("torch")
    if mod is not None or _no_torch:
        return mod
    try:
        import torch as mod
    except ImportError:
        _no_torch = True
        return None
    return mod


_peek: Optional[Callable[[], int]] = None
_peek_owner: Any = None
#: True when :func:`sequence_number` makes a throwaway node (a torch without ``_get_sequence_nr``)
_peek_uses_a_number = False


def _make_peek(torch: Any) -> Callable[[], int]:
    global _peek_uses_a_number
    _peek_uses_a_number = False
    if torch is None:  # no torch: no autograd node is ever created here
        return lambda: 0
    peek = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_get_sequence_nr", None)
    if peek is not None:
        return peek
    _peek_uses_a_number = True

    def peek() -> int:  # older torch: make a node and read its number (one number used up)
        with torch.enable_grad():
            return torch.empty(0, requires_grad=True).view(0).grad_fn._sequence_nr() + 1
    return peek


def sequence_number() -> int:
    """The number autograd gives the next node this thread creates."""
    global _peek, _peek_owner
    torch = _torch_module()
    if _peek is None or _peek_owner is not torch:
        _peek, _peek_owner = _make_peek(torch), torch
    return _peek()


def in_backward() -> bool:
    """True while this thread runs an autograd node (e.g. a checkpoint's recomputed forward)."""
    current = getattr(getattr(_torch_module(), "_C", None), "_current_autograd_node", None)
    return current is not None and current() is not None


_mode_class: Any = None


def _region_mode_class() -> Any:
    """One ``TorchFunctionMode`` class for all regions (Dynamo guards on the modes' types: a
    class per region would recompile a compiled module at every region)."""
    global _mode_class
    if _mode_class is not None:
        return _mode_class
    import torch
    from torch.overrides import TorchFunctionMode

    is_compiling = torch.compiler.is_compiling
    Tensor = torch.Tensor
    # results that never carry a grad_fn (sizes, dtypes, scalars): returned without a look
    _NO_NODES = frozenset((bool, int, float, str, torch.Size, torch.dtype, torch.device))

    class RegionMode(TorchFunctionMode):
        def __init__(self, region: "BackwardRegion"):
            super().__init__()
            self.region = region

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **kwargs) if kwargs else func(*args)
            # Dynamo traces through modes: is_compiling() keeps the walk out of its graphs; a
            # compiled graph's single autograd node is claimed when it runs (Function.apply).
            if is_compiling():
                return out
            if type(out) is Tensor:  # the common case first: one plain tensor
                gf = out.grad_fn
                if gf is None:
                    return out
            elif out is None or type(out) in _NO_NODES:
                return out
            else:
                gf = None
            # Only the innermost region of this thread walks: an inner region's handler calls
            # func through the enclosing regions' handlers, and an autograd engine thread that
            # inherits the mode numbers its nodes with its own counter.
            st = getattr(_tls, "regions", None)
            if st and st[-1] is self.region:
                if gf is not None:
                    self.region.walk.walk(gf)
                else:
                    self.region.walk.on_outputs(out)
            return out

    _mode_class = RegionMode
    return RegionMode


class BackwardRegion:
    """The torch side of one ``mark_kernels(..., backward=True)`` block (enter/exit pair)."""

    __slots__ = ("walk", "_mode")

    def __init__(self, tagger: BackwardTagger):
        self.walk = NodeWalk(sequence_number(), tagger)
        self._mode = _region_mode_class()(self)

    def __enter__(self) -> "BackwardRegion":
        _wrap_function_apply()
        _regions().append(self)
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._mode.__exit__(exc_type, exc, tb)
        finally:
            _leave(self)


class GradOffRegion:
    """A backward region entered with grad mode off (``torch.no_grad``, ``inference_mode``: a
    serving capture): no torch-function mode, no walk, no cost per op.

    Ops create no autograd nodes while grad is off. Nodes created after the block turns grad
    back on (``torch.enable_grad()`` inside it) are not tagged by it, and no enclosing region
    claims them either (they were created in this block, not in the enclosing one: the
    numbers they got are excluded from every walk of the thread's open regions); a warning
    says how many there were. Regions opened inside the block with grad on work as usual.
    """

    __slots__ = ("start",)

    #: a region on the thread's stack that claims nothing (an enclosing region's mode sees it
    #: on top and does not walk; Function.apply's wrapper hands its outputs to it)
    walk = _NO_WALK

    def __init__(self) -> None:
        self.start = sequence_number()

    def __enter__(self) -> "GradOffRegion":
        _regions().append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        st = _leave(self)
        end = sequence_number()
        created = end - self.start - (1 if _peek_uses_a_number else 0)
        if created > 0:
            if st:  # enclosing regions are open: keep their walks off these numbers
                ex = getattr(_tls, "excluded", None)
                if ex is None:
                    ex = _tls.excluded = []
                ex.append((self.start, end))
            import warnings

            warnings.warn(f"mark_kernels(..., backward=True) was entered with grad mode off, and "
                          f"{created} autograd node(s) were created in it after grad was turned back "
                          "on: those not claimed by a block opened inside it with grad on are not "
                          "tagged backward (enter the block with grad on to tag them)", stacklevel=3)


def _leave(region: Any) -> List[Any]:
    """Take ``region`` off this thread's stack; returns the stack (forgets exclusions once empty)."""
    st = _regions()
    if st and st[-1] is region:
        st.pop()
    elif region in st:
        st.remove(region)
    if not st and getattr(_tls, "excluded", None):
        _tls.excluded = []
    return st


def grad_enabled() -> bool:
    """torch's grad mode on this thread (False under ``no_grad`` and ``inference_mode``, and
    where there is no torch)."""
    torch = _torch_module()
    return torch is not None and torch.is_grad_enabled()
