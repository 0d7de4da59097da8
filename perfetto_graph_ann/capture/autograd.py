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
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Mapping, Optional

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


class BackwardTagger:
    """Brackets the backward of the nodes it hooks with a scope of its fields."""

    def __init__(self, fields: Mapping[str, Any],
                 current: Callable[[], Optional[_session.CaptureSession]] = _session.current,
                 lane_label: Optional[str] = None):
        self.fields = {**dict(fields), PHASE_KEY: BACKWARD}
        #: the forward capture's label of ``fields["stream"]`` (mark_stream): lane labels are
        #: per graph, so a backward captured in another graph records it there too
        self.lane_label = lane_label
        self._current = current
        self._open: Dict[Any, List[Any]] = {}
        self._lock = threading.Lock()

    def hook(self, node: Any) -> None:
        """Register the scope-opening pre-hook and the scope-closing post-hook on ``node``."""
        slot = object()  # pairs this node's pre- and post-hook
        node.register_prehook(self._make_pre(slot))
        node.register_hook(self._make_post(slot))

    def _make_pre(self, nid: Any):
        def pre(grad_outputs):
            sess = self._current()
            if sess is not None and sess.recorder.active:
                if self.lane_label is not None and isinstance(self.fields.get("stream"), int):
                    sess.label_lane(self.fields["stream"], self.lane_label)
                tok = sess.recorder.open(self.fields)
                with self._lock:
                    self._open.setdefault(nid, []).append((sess, tok))
            return None

        return pre

    def _make_post(self, nid: Any):
        def post(grad_inputs, grad_outputs):
            with self._lock:
                stack = self._open.get(nid)
                item = stack.pop() if stack else None
                if stack is not None and not stack:
                    del self._open[nid]
            if item is not None:
                sess, tok = item
                sess.recorder.close(tok)
            return None

        return post


class NodeWalk:
    """Claims for ``tagger`` the nodes created on this thread since the counter read ``start``."""

    __slots__ = ("start", "tagger", "claimed")

    def __init__(self, start: int, tagger: BackwardTagger):
        self.start = start
        self.tagger = tagger
        self.claimed = 0

    def on_outputs(self, outputs: Any) -> None:
        """Walk back from the ``grad_fn`` of every tensor in ``outputs``."""
        gf = getattr(outputs, "grad_fn", None)
        if gf is not None:
            self.walk(gf)
        elif isinstance(outputs, (list, tuple, dict)):
            for t in _flatten(outputs, []):
                gf = getattr(t, "grad_fn", None)
                if gf is not None:
                    self.walk(gf)

    def walk(self, root: Any) -> None:
        """Claim ``root`` and the nodes behind it that are new and unclaimed."""
        start, tagger = self.start, self.tagger
        todo = [root]
        while todo:
            node = todo.pop()
            seq = node._sequence_nr()
            if seq < start or seq == _UNNUMBERED:
                continue  # existed before the region (or AccumulateGrad): nothing behind it is new
            meta = node.metadata
            if CLAIM_KEY in meta:
                continue  # this region's walk, or an inner region's, was here and went behind it
            meta[CLAIM_KEY] = tagger.fields
            tagger.hook(node)
            self.claimed += 1
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)


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


_peek: Optional[Callable[[], int]] = None


def sequence_number() -> int:
    """The number autograd gives the next node this thread creates."""
    global _peek
    if _peek is None:
        import torch

        _peek = getattr(torch._C._autograd, "_get_sequence_nr", None)
        if _peek is None:  # older torch: make a node and read its number (one number used up)
            def _peek() -> int:
                with torch.enable_grad():
                    return torch.empty(0, requires_grad=True).view(0).grad_fn._sequence_nr() + 1
    return _peek()


_current_node: Optional[Callable[[], Any]] = None


def in_backward() -> bool:
    """True while this thread runs an autograd node (e.g. a checkpoint's recomputed forward)."""
    global _current_node
    if _current_node is None:
        try:
            import torch

            _current_node = torch._C._current_autograd_node
        except (ImportError, AttributeError):
            _current_node = lambda: None  # noqa: E731  (no torch: never in backward)
    return _current_node() is not None


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

    class RegionMode(TorchFunctionMode):
        def __init__(self, region: "BackwardRegion"):
            super().__init__()
            self.region = region

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            # Dynamo traces through modes: is_compiling() keeps the walk out of its graphs; a
            # compiled graph's single autograd node is claimed when it runs (Function.apply).
            if is_compiling():
                return out
            # Only the innermost region of this thread walks: an inner region's handler calls
            # func through the enclosing regions' handlers, and an autograd engine thread that
            # inherits the mode numbers its nodes with its own counter.
            st = getattr(_tls, "regions", None)
            if st and st[-1] is self.region:
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
            st = _regions()
            if st and st[-1] is self:
                st.pop()
            elif self in st:
                st.remove(self)
