"""Scope bookkeeping during capture: which graph nodes each ``mark_kernels`` scope added.

Pure Python; the only contact with CUDA is a *node counter*, a callable returning how many
nodes the graph under capture has now (``None`` when nothing is being captured). During
stream capture the driver only appends nodes, and lists them in creation order: every
listing taken at a scope edge is a prefix of the next one (verify mode, below, checks it;
the GPU tests run so). So a scope records the node count at
entry and at exit, and its nodes are ``listing[count at entry:count at exit]`` of the one
listing read when the capture finishes. An edge costs one driver call instead of a listing
of the whole graph (the session picks it: a count on small graphs, a marker node's id on
large ones, where the count's walk of the graph costs more: docs/design.md, "Capture").

With ``lister`` given (``PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1``, the GPU tests) every edge
also lists the graph and checks the prefix property, raising :class:`CaptureError` if the
driver ever breaks it.

Nested scopes merge at resolve time: every scope that contains a node contributes its
fields, applied in the order the scopes were opened, so the innermost (opened last)
wins per key.

Thread safety: every scope's state lives in its own object, each thread keeps its own
stack of open scopes, and closed scopes are appended to one list (an atomic append; the
verify mode's listings are serialised by a lock). A scope open in one
thread while another thread adds nodes to the same graph contains those nodes too (the
graph, not the thread, is what is counted).
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence

from ..errors import CaptureError

__all__ = ["LaneAllocator", "merge_scopes", "NodeCounter", "NodeLister", "normalize_annotation", "ScopeRecord",
           "ScopeRecorder"]

#: Returns how many nodes the graph under capture has now, or None outside capture.
NodeCounter = Callable[[], Optional[int]]
#: Returns the handles of the nodes now in the graph under capture, in creation order.
NodeLister = Callable[[], Optional[Sequence[int]]]


def normalize_annotation(annotation: Any) -> Dict[str, Any]:
    """``"x"`` -> ``{"name": "x"}``; a mapping is copied. Anything else is a TypeError."""
    if isinstance(annotation, str):
        return {"name": annotation}
    if isinstance(annotation, Mapping):
        out = dict(annotation)
        for k in out:
            if not isinstance(k, str):
                raise TypeError(f"annotation keys must be str, got {k!r}")
        lane = out.get("stream")
        if lane is not None and (not isinstance(lane, int) or isinstance(lane, bool)):
            raise TypeError(f"annotation field 'stream' is a display lane and must be an int, got {lane!r}")
        return out
    raise TypeError(f"annotation must be a str or a dict, got {type(annotation).__name__}")


class ScopeRecord(NamedTuple):
    """One closed scope: its fields, when it opened (``seq``) and the nodes it added.

    The nodes are positions in the graph's node listing: ``[start, end)``. A tuple: one
    is built at every scope exit, on the capture's critical path.
    """

    seq: int
    fields: Mapping[str, Any]
    start: int
    end: int

    def nodes(self, listing: Sequence[int]) -> Sequence[int]:
        """The handles this scope added, given the finished graph's listing."""
        return listing[self.start:self.end]


class LaneAllocator:
    """Logical lane ids from 60 upward, one per key (a stream, a process group), stable.

    ``labels`` maps lane id -> label; the first label given for a lane is kept unless
    ``relabel=True``.
    """

    def __init__(self, first: int = 60):
        self._first = first
        self._by_key: Dict[Any, int] = {}
        self.labels: Dict[int, str] = {}
        self._lock = threading.Lock()

    def lane(self, key: Any, label: Optional[str] = None, relabel: bool = False) -> int:
        with self._lock:
            lane = self._by_key.get(key)
            if lane is None:
                lane = self._first + len(self._by_key)
                self._by_key[key] = lane
            if label is not None and (relabel or lane not in self.labels):
                self.labels[lane] = label
            return lane

    def snapshot(self) -> Dict[int, str]:
        with self._lock:
            return dict(self.labels)

    def reset(self) -> None:
        with self._lock:
            self._by_key.clear()
            self.labels.clear()


class ScopeRecorder:
    """Records scopes of one capture (one ``graph(...)`` block) as node-count ranges."""

    def __init__(self, counter: NodeCounter, lister: Optional[NodeLister] = None):
        self._counter = counter
        self._lister = lister
        # the per-edge call: the counter itself unless every edge is verified
        self._count: NodeCounter = counter if lister is None else self._verified_count
        self._last: Sequence[int] = ()
        self._lock = threading.Lock()  # verify mode only: one listing check at a time
        self._seq = itertools.count()
        self._local = threading.local()
        self.closed: List[tuple] = []
        self.active = True

    def set_counter(self, counter: NodeCounter) -> None:
        """Replace the counter (the session binds it to its graph once capture started)."""
        self._counter = counter
        if self._lister is None:
            self._count = counter

    def _verified_count(self) -> Optional[int]:
        with self._lock:
            nodes = self._lister()
            if nodes is None:
                return None
            nodes = list(nodes)
            if nodes[:len(self._last)] != list(self._last):
                raise CaptureError("the graph's node listing changed order during capture: scope ranges "
                                   "would attribute the wrong nodes (please report this driver)")
            n = self._counter()
            if n != len(nodes):
                raise CaptureError(f"a scope edge was positioned at node {n} but the graph lists {len(nodes)}: "
                                   "scope ranges would attribute the wrong nodes (please report this driver)")
            self._last = nodes
            return len(nodes)

    # open and close sit on the capture's critical path between torch's launches, where every
    # Python call runs with cold caches: hence the inlined per-thread stack and a list as the
    # token (BENCHMARKS.md, "capture").

    def open(self, fields: Mapping[str, Any], before: Optional[int] = None) -> list:
        """Open a scope; returns its token ``[seq, fields, count at entry]``.

        ``fields`` is kept, not copied: it must not change afterwards. ``before`` lets a caller
        take the count earlier (mark_stream).
        """
        if before is None and self.active:
            before = self._count()
        tok = [next(self._seq), fields, before]
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        st.append(tok)
        return tok

    def snapshot(self) -> Optional[int]:
        """The current node count (None outside capture)."""
        return self._count() if self.active else None

    def close(self, tok: list) -> None:
        """Close ``tok`` (the innermost open scope of this thread) and record the nodes it added."""
        st = getattr(self._local, "stack", None)
        if st:
            if st[-1] is tok:
                st.pop()
            else:
                for i, t in enumerate(st):
                    if t is tok:
                        del st[i]
                        break
        if tok[2] is None or not self.active:
            return
        after = self._count()
        if after is not None:  # list.append is atomic; a plain tuple: records() builds ScopeRecords
            self.closed.append((tok[0], tok[1], tok[2], after))

    def open_fields(self, upto: Optional[list] = None) -> Dict[str, Any]:
        """Merged fields of this thread's open scopes (outer first, inner wins); with ``upto``
        (an open token) those of the scopes up to and including it."""
        out: Dict[str, Any] = {}
        for tok in getattr(self._local, "stack", None) or ():
            out.update(tok[1])
            if tok is upto:
                break
        return out

    def records(self) -> List[ScopeRecord]:
        """The closed scopes so far."""
        return [ScopeRecord(*r) for r in list(self.closed)]


def merge_scopes(records: Iterable[ScopeRecord], listing: Sequence[int]) -> Dict[int, Dict[str, Any]]:
    """node handle -> merged fields; scopes applied in opening order so the inner one wins.

    ``listing`` is the finished graph's node handles in creation order.
    """
    out: Dict[int, Dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r.seq):
        for n in r.nodes(listing):
            out.setdefault(n, {}).update(r.fields)
    return out
