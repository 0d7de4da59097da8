"""Capture backends behind one interface, and the automatic choice between them.

Three ways to learn the key ``(exec graph id << 32) | node local id`` of a captured node:

- ``torch``: torch's own ``torch.cuda.graph_annotations`` (torch >= 2.15, driver >= 13.1):
  everything is deferred to torch.
- ``cuda-runtime``: the runtime's ``cudaGraphNodeGetLocalId`` / ``cudaGraphExecGetId``
  (driver >= 13.1), through cuda-bindings.
- ``cupti``: libcupti's ``cuptiGetGraphNodeId`` (template key) and ``cuptiGetGraphExecId``
  (older drivers, e.g. 580 / CUDA 13.0).

The last two share :class:`CudaGraphBackend` (capture info, node listing, kernel params
through cuda-bindings) and differ only in the two id functions. The choice is a pure
function of :class:`EnvFacts` so it is tested without a GPU; ``probe_facts()`` reads the
facts from the machine once.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, List, Optional

from .base import BACKENDS, CUDA_RUNTIME, CUPTI, TOOLS_ID_DRIVER, TORCH, CaptureBackend, node_type_name
from .choice import BackendInfo, EnvFacts, choose_backend, preload, probe_facts
from .cupti import CuptiBackend, find_libcupti
from .driver import CudaGraphBackend
from .runtime import RuntimeIdsBackend

__all__ = ["BACKENDS", "CUDA_RUNTIME", "CUPTI", "TOOLS_ID_DRIVER", "TORCH", "BackendInfo", "CaptureBackend",
           "CudaGraphBackend", "CuptiBackend", "EnvFacts", "RuntimeIdsBackend", "active", "backend_info",
           "choose_backend", "find_libcupti", "is_available", "node_type_name", "preload", "probe_facts",
           "selected_name", "use"]


_lock = threading.Lock()
_info: Optional[BackendInfo] = None
_instance: Optional[CaptureBackend] = None
_override: List[CaptureBackend] = []


def backend_info() -> Dict[str, Any]:
    """Which backend captures here and why the others were not used (probed once, cached)."""
    return _get_info().as_dict()


def _get_info() -> BackendInfo:
    global _info
    with _lock:
        if _info is None:
            _info = choose_backend(probe_facts())
        return _info


def is_available() -> bool:
    """True when some backend can annotate captures on this machine."""
    return bool(_override) or _get_info().backend is not None


def selected_name() -> Optional[str]:
    if _override:
        return _override[-1].name
    info = _info  # after the first probe no lock is needed: it never changes
    return (info or _get_info()).backend


def active() -> Optional[CaptureBackend]:
    """The backend instance capture uses (None: none usable, or torch's native one)."""
    global _instance
    if _override:
        return _override[-1]
    if _instance is not None:  # built once, never replaced: no lock needed to read it
        return _instance
    info = _get_info()
    if info.backend in (None, TORCH):
        return None
    with _lock:
        if _instance is None:
            _instance = RuntimeIdsBackend() if info.backend == CUDA_RUNTIME else CuptiBackend(info.facts.libcupti)
        return _instance


@contextlib.contextmanager
def use(backend: CaptureBackend) -> Iterator[CaptureBackend]:
    """Use ``backend`` instead of the probed one (tests, or forcing ``CuptiBackend``)."""
    _override.append(backend)
    try:
        yield backend
    finally:
        _override.remove(backend)
