"""``mark_kernels(..., backward=True)``: carry a forward scope over to its backward kernels.

Which nodes: every autograd node created on the region's thread while the region is open.
Autograd numbers the nodes a thread creates (``Node._sequence_nr()``, a per-thread counter
that only grows), so a region is a range of numbers: the counter's value at entry and at
exit, read with ``torch._C._autograd._get_sequence_nr`` (no node is made, no op observed).
Regions on one thread nest, so their ranges do too; a node belongs to the innermost range
holding its number. AccumulateGrad nodes carry no number and are never a region's.

When: nothing is done per forward op. When a backward starts inside a capture
(``torch.autograd.backward`` / ``grad``, both through ``torch.autograd._engine_run_backward``,
which this module wraps from the first region on, as ``torch.compiler`` does), the graph
behind its roots is walked once: down to nodes numbered below the thread's first recorded
range, skipping nodes already claimed. Each node whose number lies in a range gets that
range's hooks: a pre-hook that opens a scope (the region's fields plus
``autograd_phase: "backward"``) in the capture running the backward, and a post-hook that
closes it. Outside a capture nothing is walked and the hooks do nothing. Not bracketed:
what the engine does for a node outside its hooks (summing gradients into the next nodes'
input buffers) and hooks registered before ours (docs/design.md, "Backward tagging").

A region entered with grad mode off (no_grad, inference_mode) is a range that claims
nothing: nodes made in it after grad is turned back on belong to no region (not to an
enclosing one either), and a warning counts them. Ranges are kept per thread for the
process's life (a few dozen bytes each; a range in which no node was made is dropped at
exit), since a forward captured in one graph may be backwarded in another.

The tables and the walk are torch-free (:class:`RangeTable`, :func:`claim`); the torch side
is :func:`enter_region` / :func:`exit_region` and the wrapper of the engine's entry point.
"""
from __future__ import annotations

import bisect
import sys
import threading
import warnings
from typing import Any, Callable, Iterable, List, Mapping, Optional

from . import fastpath as _fastpath
from . import session as _session

__all__ = ["BACKWARD", "BackwardTagger", "claim", "claim_backward", "CLAIM_KEY", "enter_region", "exit_region",
           "in_backward", "PHASE_KEY", "Range", "RangeTable", "sequence_number"]

PHASE_KEY = "autograd_phase"
BACKWARD = "backward"
#: key in a claimed node's ``metadata`` (the dict every Python wrapper of the node shares):
#: the fields of the region that claimed it
CLAIM_KEY = "perfetto_graph_ann.backward"
#: AccumulateGrad (and other nodes made outside the numbering) carry UINT64_MAX
_UNNUMBERED = (1 << 64) - 1
_OPEN = float("inf")


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


class Range:
    """The node numbers ``[start, end)`` of one region on one thread (``end`` is infinite while
    the region is open). ``make`` builds the region's tagger the first time a node of the range
    is claimed (most ranges of a forward-only capture hold no node: no tagger is ever built);
    None claims nothing (a grad-off region)."""

    __slots__ = ("start", "end", "make", "parent", "_tagger")

    def __init__(self, start: int, make: Optional[Callable[[], BackwardTagger]], parent: Optional["Range"]):
        self.start, self.end, self.make, self.parent = start, _OPEN, make, parent
        self._tagger: Optional[BackwardTagger] = None

    @property
    def tagger(self) -> Optional[BackwardTagger]:
        if self._tagger is None and self.make is not None:
            self._tagger = self.make()
        return self._tagger


class RangeTable:
    """One thread's region ranges: the closed ones in which nodes were made (``ranges``, by
    ``start``, an outer range before the inner ones that start with it) and the open regions
    (``open``, innermost last).

    A region costs nothing here until it closes with nodes made in it: most regions of a
    forward-only capture make none. An open region is a :class:`Range` (``enter``) or any
    object with a ``start`` and a ``range()`` that returns its Range (``mark_kernels``, which
    builds one only when a backward claims while it is open or when it closes with nodes)."""

    __slots__ = ("ranges", "starts", "open")

    def __init__(self) -> None:
        self.ranges: List[Range] = []
        self.starts: List[int] = []
        self.open: List[Any] = []

    def enter(self, start: int, make: Optional[Callable[[], BackwardTagger]]) -> Range:
        """Open a range at counter value ``start``; ``make`` builds its tagger (see :class:`Range`)."""
        r = Range(start, make, None)
        self.open.append(r)
        return r

    def exit(self, r: Any, end: int, created: int) -> Optional[Range]:
        """Close ``r`` (an open range or region) at counter value ``end``; ``created`` nodes were
        made in it (its inner regions' included). Only a range with nodes is kept; returns it."""
        op = self.open
        if op and op[-1] is r:
            op.pop()
        elif r in op:
            op.remove(r)
        if created <= 0:
            return None
        rng = r if type(r) is Range else r.range()
        rng.end = end
        ranges, starts = self.ranges, self.starts
        i = bisect.bisect_left(starts, rng.start)
        # the ranges closed inside it so far are its descendants: the top ones get it as parent
        j = i
        while j < len(ranges) and starts[j] < end:
            if ranges[j].parent is None:
                ranges[j].parent = rng
            j += 1
        ranges.insert(i, rng)
        starts.insert(i, rng.start)
        return rng

    def owner(self, seq: int) -> Optional[Range]:
        """The innermost range holding node number ``seq``, or None.

        Among the closed ranges, the last one entered at or before ``seq`` holds it, or else
        one of that range's enclosing ranges does (ranges of nested regions are nested or
        disjoint); a closed range lies inside every open region it overlaps, so the open
        regions come next, innermost first."""
        i = bisect.bisect_right(self.starts, seq) - 1
        r = self.ranges[i] if i >= 0 else None
        while r is not None and not seq < r.end:
            r = r.parent
        if r is not None:
            return r
        for o in reversed(self.open):
            if o.start <= seq:
                return o if type(o) is Range else o.range()
        return None

    def first(self) -> Optional[int]:
        """The lowest number any range holds (None: no range)."""
        lows = [self.starts[0]] if self.starts else []
        if self.open:
            lows.append(self.open[0].start)
        return min(lows) if lows else None


def claim(roots: Iterable[Any], table: RangeTable) -> int:
    """Hook every node behind ``roots`` (autograd nodes) whose number lies in a range of
    ``table`` with a tagger, with the innermost such range's hooks; returns how many.

    Stops at nodes numbered below the table's first range (nothing behind them is newer), at
    unnumbered nodes, and at nodes already claimed (a previous backward of the same graph,
    ``retain_graph``, walked behind them)."""
    first = table.first()
    if first is None:
        return 0
    todo = [r for r in roots if r is not None]
    seen = set()
    keep = []  # the wrappers whose ids are in ``seen`` stay alive for the walk
    claimed = 0
    while todo:
        node = todo.pop()
        seq = node._sequence_nr()
        if seq < first or seq == _UNNUMBERED:
            continue
        if id(node) in seen:
            continue
        meta = node.metadata
        if CLAIM_KEY in meta:
            continue
        seen.add(id(node))
        keep.append(node)
        todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
        r = table.owner(seq)
        tagger = r.tagger if r is not None else None
        if tagger is None:
            continue
        meta[CLAIM_KEY] = tagger.fields
        tagger.hook(node)
        claimed += 1
    return claimed


# This thread's region ranges.
_tls = threading.local()
_install_lock = threading.Lock()
_orig_run_backward: Any = None


def _table() -> RangeTable:
    t = getattr(_tls, "table", None)
    if t is None:
        t = _tls.table = RangeTable()
    return t


def _roots(outputs: Any) -> List[Any]:
    """The autograd nodes of what a backward starts from (tensors or ``GradientEdge``s)."""
    if not isinstance(outputs, (list, tuple)) or hasattr(outputs, "node"):
        outputs = (outputs,)
    out = []
    for t in outputs:
        gf = getattr(t, "grad_fn", None)
        if gf is None:
            gf = getattr(t, "node", None)  # a GradientEdge
        if gf is not None:
            out.append(gf)
    return out


def claim_backward(outputs: Any) -> int:
    """Claim the nodes behind ``outputs`` for this thread's regions (what a backward started
    inside a capture does first); returns how many nodes were hooked."""
    t = getattr(_tls, "table", None)
    if t is None or not (t.starts or t.open):
        return 0
    return claim(_roots(outputs), t)


def _capturing() -> bool:
    sess = _current_session()
    return sess is not None and sess.recorder.active


def _wrapped_run_backward(t_outputs, *args, **kwargs):
    t = getattr(_tls, "table", None)
    if t is not None and (t.starts or t.open) and _capturing():
        claim(_roots(t_outputs), t)
    return _orig_run_backward(t_outputs, *args, **kwargs)


def _wrap_run_backward(torch: Any) -> None:
    """Wrap torch's backward entry point (``torch.autograd.backward`` and ``grad`` call
    ``torch.autograd._engine_run_backward``), once per process; the wrapper passes straight
    through outside a capture or on threads that never opened a region."""
    global _orig_run_backward
    if _orig_run_backward is not None:
        return
    ag = getattr(torch, "autograd", None)
    orig = getattr(ag, "_engine_run_backward", None)
    if orig is None:
        return  # a torch (or a test's fake) without the entry point: nothing to claim with
    with _install_lock:
        if _orig_run_backward is None:
            _orig_run_backward = orig
            ag._engine_run_backward = _wrapped_run_backward
            graph = getattr(ag, "graph", None)
            if getattr(graph, "_engine_run_backward", None) is orig:
                graph._engine_run_backward = _wrapped_run_backward


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
    # older torch: make a node and read its number (one number used up). A bare C++ node
    # (UndefinedGrad takes no inputs) is numbered like any other and costs no op dispatch.
    undefined = getattr(getattr(getattr(torch, "_C", None), "_functions", None), "UndefinedGrad", None)
    if undefined is not None:
        return lambda: undefined()._sequence_nr() + 1

    def peek() -> int:
        with torch.enable_grad():
            return torch.empty(0, requires_grad=True).view(0).grad_fn._sequence_nr() + 1
    return peek


def _peek_now() -> Callable[[], int]:
    """The counter reader for the ``torch`` in use (made again when tests swap torch)."""
    global _peek, _peek_owner
    torch = _torch_module()
    if _peek is None or _peek_owner is not torch:
        _peek, _peek_owner = _make_peek(torch), torch
    return _peek


def sequence_number() -> int:
    """The number autograd gives the next node this thread creates."""
    return _peek_now()()


def in_backward() -> bool:
    """True while this thread runs an autograd node (e.g. a checkpoint's recomputed forward)."""
    current = getattr(getattr(_torch_module(), "_C", None), "_current_autograd_node", None)
    return current is not None and current() is not None


def enter_region(region: Any) -> None:
    """Open ``region`` on this thread: sets its ``start`` (the next node's number) and ``grad``
    (grad mode at entry; off: the region claims nothing) and pushes it on the thread's open
    regions. ``region.range()`` must give its :class:`Range` when asked (see
    :class:`RangeTable`). On the capture's critical path: one counter read, no object made."""
    torch = sys.modules.get("torch") or _torch_module()
    if _orig_run_backward is None and torch is not None:
        _wrap_run_backward(torch)
    peek = _peek if _peek is not None and _peek_owner is torch else _peek_now()
    region.grad = torch is not None and torch.is_grad_enabled()
    region.start = peek()
    t = getattr(_tls, "table", None)
    if t is None:
        t = _table()
    t.open.append(region)


def exit_region(region: Any, end: Optional[int] = None) -> Optional[Range]:
    """Close ``region`` (entered with :func:`enter_region` on this thread); returns its Range,
    now in the thread's table, when nodes were made in it, else None. ``end``: the counter's
    value at exit when the caller read it already.

    A region entered with grad mode off whose block made nodes after turning grad back on
    claims them for no region (its Range has no tagger) and warns."""
    if end is None:
        torch = sys.modules.get("torch")
        end = (_peek if _peek is not None and _peek_owner is torch else _peek_now())()
    created = end - region.start - (1 if _peek_uses_a_number else 0)
    rng = _table().exit(region, end, created)
    if rng is not None and not region.grad:
        warnings.warn(f"mark_kernels(..., backward=True) was entered with grad mode off, and "
                      f"{created} autograd node(s) were created in it after grad was turned back "
                      "on: those not claimed by a block opened inside it with grad on are not "
                      "tagged backward (enter the block with grad on to tag them)", stacklevel=3)
    return rng
