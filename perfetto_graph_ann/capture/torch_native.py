"""torch's own CUDA graph annotations (torch >= 2.15, driver >= 13.1): where to find them.

torch 2.15 exposes ``mark_kernels``, ``get_kernel_annotations`` and ``is_available`` in the
public ``torch.cuda.graph_annotations``, but keeps ``mark_stream`` and ``get_stream_for_pg``
(the lane ids, from 60 upward, shared by both) in the private
``torch.cuda._graph_annotations``. Each entry point is looked up in the public module first,
then in the private one, so a later torch that makes them public keeps working; one that
moves or drops them makes :func:`entry_points` raise a :class:`CaptureError` naming what
is missing, and :func:`missing` lets the backend choice fall back instead (``backends``).

The calls torch needs:

- ``mark_kernels(annotation, *, backward=True)``: tags the nodes captured in the block;
- ``mark_stream(stream, annotation)``: switches to ``stream`` and tags with
  ``{**annotation, "stream": lane}``, or, for the current stream, only ``annotation``;
- ``get_stream_for_pg(pg_key)``: a process group's lane id from the same allocator;
- ``get_kernel_annotations()``: ``(exec graph id << 32) | node id -> [annotation]``;
- ``torch.cuda.graph(..., enable_annotations=True)``: turns recording on for a capture.

Importing this module does not import torch.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Dict, List, Optional, Tuple

from ..errors import CaptureError

__all__ = ["call", "capture_ended", "capture_started", "capturing", "ENTRY_POINTS", "entry_points", "forget", "missing",
           "PRIVATE", "probe", "PUBLIC"]

PUBLIC = "torch.cuda.graph_annotations"
PRIVATE = "torch.cuda._graph_annotations"
#: entry point -> the modules to look in, in order
ENTRY_POINTS: Dict[str, Tuple[str, ...]] = {
    "mark_kernels": (PUBLIC, PRIVATE),
    "mark_stream": (PUBLIC, PRIVATE),
    "get_stream_for_pg": (PUBLIC, PRIVATE),
    "get_kernel_annotations": (PUBLIC, PRIVATE),
    "is_available": (PUBLIC, PRIVATE),
}

_lock = threading.Lock()
_found: Optional[Dict[str, Any]] = None
#: pga.graph captures in flight on torch's backend (collective wrappers annotate only then)
_captures = 0


def _import(name: str) -> Optional[Any]:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _lookup() -> Tuple[Dict[str, Any], List[str]]:
    modules = {name: _import(name) for name in (PUBLIC, PRIVATE)}
    found: Dict[str, Any] = {}
    missing: List[str] = []
    for entry, where in ENTRY_POINTS.items():
        fn = next((getattr(modules[m], entry) for m in where
                   if modules[m] is not None and callable(getattr(modules[m], entry, None))), None)
        if fn is None:
            missing.append(entry)
        else:
            found[entry] = fn
    return found, missing


def missing() -> List[str]:
    """The entry points this torch lacks (empty when all are there); not cached."""
    return _lookup()[1]


def probe() -> Tuple[Optional[bool], Tuple[str, ...]]:
    """(torch's ``is_available()``, or None when none of it exists; the missing entry points)."""
    found, lost = _lookup()
    if not found:
        return None, tuple(lost)
    try:
        available = bool(found["is_available"]()) if "is_available" in found else False
    except Exception:
        available = False
    return available, tuple(lost)


def _torch_version() -> str:
    import torch

    return str(getattr(torch, "__version__", "?"))


def entry_points() -> Dict[str, Any]:
    """Name -> torch's function, found once; :class:`CaptureError` naming what is missing."""
    global _found
    if _found is not None:
        return _found
    with _lock:
        if _found is None:
            found, lost = _lookup()
            if lost:
                raise CaptureError(
                    f"torch {_torch_version()}: torch's graph annotations lack {', '.join(lost)} "
                    f"(looked in {PUBLIC} and {PRIVATE}); perfetto_graph_ann knows torch 2.15's layout, "
                    "and its backend choice falls back to its own capture when they are missing "
                    "(pga.backend_info() says why)")
            _found = found
        return _found


def forget() -> None:
    """Look the entry points up again on next use (tests that swap the torch module)."""
    global _found
    with _lock:
        _found = None


def call(entry: str, *args: Any, **kwargs: Any) -> Any:
    """``entry(*args, **kwargs)`` on torch's function of that name."""
    return entry_points()[entry](*args, **kwargs)


def capture_started() -> None:
    global _captures
    with _lock:
        _captures += 1


def capture_ended() -> None:
    global _captures
    with _lock:
        _captures = max(0, _captures - 1)


def capturing() -> bool:
    """Whether a ``pga.graph`` capture on torch's backend is in flight."""
    return _captures > 0
