"""Scope bookkeeping during capture: which graph nodes each ``mark_kernels`` scope added.

Pure Python; the only contact with CUDA is a *node lister*, a callable returning the
handles of the nodes now in the graph under capture (``None`` when nothing is being
captured). A scope lists the graph on entry and on exit; the nodes it added are the
difference. (Counting nodes and taking local ids ``[count on entry, count on exit)`` is
cheaper but wrong: on the H200 a captured backward pass gave CUPTI local ids that are not
in creation order, and 6 of 9 backward kernels lost their scope; see tests/gpu/RESULTS.md.)
Nested scopes merge at resolve time: every scope that contains a node contributes its
fields, applied in the order the scopes were opened, so the innermost (opened last)
wins per key.

Thread safety: every scope's state lives in its own object, each thread keeps its own
stack of open scopes, and the recorded list is guarded by a lock. Listings of one graph
by two threads at once are serialised by the same lock.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence

#: Returns the handles of the nodes now in the graph under capture, or None outside capture.
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


@dataclasses.dataclass(frozen=True)
class ScopeRecord:
    """One closed scope: its fields, when it opened (``seq``) and the node handles it added."""

    seq: int
    fields: Mapping[str, Any]
    nodes: FrozenSet[int]


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


class _Open:
    __slots__ = ("seq", "fields", "before")

    def __init__(self, seq: int, fields: Mapping[str, Any], before: Optional[FrozenSet[int]]):
        self.seq, self.fields, self.before = seq, fields, before


class ScopeRecorder:
    """Records scopes of one capture (one ``graph(...)`` block)."""

    def __init__(self, lister: NodeLister):
        self._lister = lister
        self._lock = threading.RLock()
        self._seq = itertools.count()
        self._local = threading.local()
        self.closed: List[ScopeRecord] = []
        self.active = True

    def _list(self) -> Optional[FrozenSet[int]]:
        with self._lock:
            nodes = self._lister()
        return None if nodes is None else frozenset(nodes)

    def _stack(self) -> List[_Open]:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def open(self, fields: Mapping[str, Any], before: Optional[FrozenSet[int]] = None) -> _Open:
        """Open a scope; ``before`` lets a caller take the listing earlier (mark_stream)."""
        if before is None and self.active:
            before = self._list()
        with self._lock:
            tok = _Open(next(self._seq), dict(fields), before)
        self._stack().append(tok)
        return tok

    def snapshot(self) -> Optional[FrozenSet[int]]:
        """The current node listing (None outside capture)."""
        return self._list() if self.active else None

    def close(self, tok: _Open) -> Optional[ScopeRecord]:
        """Close ``tok`` (the innermost open scope of this thread) and record the nodes it added."""
        st = self._stack()
        if tok in st:
            st.remove(tok)
        if tok.before is None or not self.active:
            return None
        after = self._list()
        if after is None:
            return None
        rec = ScopeRecord(tok.seq, tok.fields, after - tok.before)
        with self._lock:
            self.closed.append(rec)
        return rec

    def open_fields(self) -> Dict[str, Any]:
        """Merged fields of this thread's open scopes (outer first, inner wins)."""
        out: Dict[str, Any] = {}
        for tok in self._stack():
            out.update(tok.fields)
        return out

    def merged(self) -> Dict[int, Dict[str, Any]]:
        """node handle -> merged annotation over every closed scope containing it."""
        with self._lock:
            records = list(self.closed)
        return merge_scopes(records)

def merge_scopes(records: Iterable[ScopeRecord]) -> Dict[int, Dict[str, Any]]:
    """node handle -> merged fields; scopes applied in opening order so the inner one wins."""
    out: Dict[int, Dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r.seq):
        for n in r.nodes:
            out.setdefault(n, {}).update(r.fields)
    return out
