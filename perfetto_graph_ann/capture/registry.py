"""The process-global registry of resolved graphs, and ``get_kernel_annotations()``.

One entry per captured ``CUDAGraph`` object (its *owner* token): re-instantiating a graph
replaces its entry (new executable id, new keys), ``reset()`` drops it. Lane labels come
from the shared :class:`~.scopes.LaneAllocator`. Torch-free.
"""
from __future__ import annotations

import threading
import types
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

from ..annotations.model import AnnotationSet, GraphRecord
from .scopes import LaneAllocator

__all__ = ["get_kernel_annotations", "KernelAnnotationsView", "REGISTRY", "Registry"]


class Registry:
    """Thread-safe store of :class:`GraphRecord` per owner.

    An entry may be put as a zero-argument callable; it is built on first read, so the
    node records of a capture are not built inside the capture's critical path.
    """

    def __init__(self, lanes: Optional[LaneAllocator] = None):
        self._lock = threading.RLock()
        self._graphs: Dict[Any, Union[GraphRecord, Callable[[], GraphRecord]]] = {}
        self.lanes = lanes or LaneAllocator()
        self.backend: Optional[str] = None

    def put(self, owner: Any, record: Union[GraphRecord, Callable[[], GraphRecord]]) -> None:
        with self._lock:
            self._graphs[owner] = record

    def _built(self, owner: Any) -> Optional[GraphRecord]:
        r = self._graphs.get(owner)
        if r is not None and not isinstance(r, GraphRecord):
            r = self._graphs[owner] = r()
        return r

    def get(self, owner: Any) -> Optional[GraphRecord]:
        with self._lock:
            return self._built(owner)

    def drop(self, owner: Any) -> None:
        with self._lock:
            self._graphs.pop(owner, None)

    def clear(self) -> None:
        with self._lock:
            self._graphs.clear()

    def records(self) -> List[GraphRecord]:
        with self._lock:
            return [self._built(o) for o in list(self._graphs)]

    def snapshot(self) -> AnnotationSet:
        """Everything recorded so far, as the join and the sidecar take it, with this
        process's :class:`~.annotations.CaptureIdentity` (sidecar version 2) and the graph
        replays of its profiler windows (version 3)."""
        from .identity import capture_identity
        from .replay_log import REPLAY_LOG

        return AnnotationSet(tuple(self.records()), types.MappingProxyType(self.lanes.snapshot()), self.backend,
                             capture=capture_identity(), replays=REPLAY_LOG.snapshot())

    def kernel_annotations(self) -> Dict[int, List[Dict[str, Any]]]:
        out: Dict[int, List[Dict[str, Any]]] = {}
        for g in self.records():
            for n in g.nodes:
                if n.annotation:
                    out[n.key] = [dict(n.annotation)]
        return out


class KernelAnnotationsView(Mapping):
    """Live read-only view ``key -> [annotation]`` (torch 2.15's shape: a one-element list)."""

    def __init__(self, registry: Registry):
        self._registry = registry

    def _now(self) -> Dict[int, List[Dict[str, Any]]]:
        return self._registry.kernel_annotations()

    def __getitem__(self, key: int) -> List[Dict[str, Any]]:
        return self._now()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return f"KernelAnnotationsView({self._now()!r})"


#: The process-global registry every capture writes to.
REGISTRY = Registry()


def get_kernel_annotations() -> Mapping[int, List[Dict[str, Any]]]:
    """Live read-only mapping ``(exec graph id << 32) | node local id -> [annotation dict]``.

    Like torch 2.15's: keys are the ids a replayed kernel reports; a graph's entries are
    rekeyed when it is re-instantiated and dropped when it is reset. With the torch-native
    backend this returns torch's own registry.
    """
    from . import backends

    if backends.selected_name() == backends.TORCH:
        from . import torch_native

        return torch_native.call("get_kernel_annotations")
    return KernelAnnotationsView(REGISTRY)
