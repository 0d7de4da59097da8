"""The compiled capture path, when it was built; the pure-Python one otherwise.

``_fastpath`` (``_fastpath.c``, compiled by the wheel's build hook where a C compiler is
found, see ``hatch_build.py``) does a scope edge and the per-capture driver calls in C: the
capture's critical path runs between torch's kernel launches, where Python runs with cold
caches (costs: BENCHMARKS.md, "capture"). It is an accelerator only: the same logic stays
in :mod:`.scopes` and :mod:`.backends`, and the CPU tests run both paths.

``PERFETTO_GRAPH_ANN_PURE_PYTHON=1`` (read at import) or ``ENABLED = False`` turns it off;
:func:`describe` says which path captures (``backend_info()["capture_path"]``).
"""
from __future__ import annotations

import importlib.machinery
import os
import struct
from typing import Any, List, Optional

from .. import settings
from ..errors import CaptureError
from .scopes import ScopeRecord

__all__ = ["describe", "ENABLED", "getenv", "module", "module_built", "NODE_ROW", "PURE_ENV"]

#: environment switch: capture with the pure-Python path even where the compiled one exists
PURE_ENV = settings.PURE_PYTHON.name

try:
    from . import _fastpath as _c
except ImportError as e:  # not built (no compiler at install time) or built for another Python
    _c = None
    _built = [f for f in os.listdir(os.path.dirname(__file__))
              if f.startswith("_fastpath.") and f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))]
    _IMPORT_ERROR: Optional[str] = (
        f"built but not importable here ({', '.join(sorted(_built))}: {e})" if _built else
        "not built at install time (no C compiler or Python headers then, or "
        "PERFETTO_GRAPH_ANN_NO_EXTENSION was set: reinstall with them)")
else:
    _c.set_error(CaptureError)
    _IMPORT_ERROR = None

#: ``PERFETTO_GRAPH_ANN_PURE_PYTHON`` as it was at import
_PURE: bool = settings.switch(settings.PURE_PYTHON)
#: False: sessions use the pure-Python recorder and ctypes calls (set by tests and the A/B benchmark)
ENABLED: bool = _c is not None and not _PURE


#: The environment reader for the capture's per-session settings: the compiled one where built
#: (C ``getenv``; ``os.environ`` changes reach it through ``putenv``), else :data:`settings.getenv`
getenv: settings.Getenv = _c.getenv if _c is not None else settings.getenv


#: One node of ``_fastpath.read_nodes``' table (native byte order, no padding): handle, node id,
#: node type, 1 when the kernel parameters were read, CUfunction, CUkernel, grid, block.
NODE_ROW = struct.Struct("=QQiIQQ3I3I")


def module_built() -> bool:
    """True when the compiled module imported (whether or not it is enabled)."""
    return _c is not None


def module() -> Any:
    """The compiled module while enabled, else None (callers keep their Python path)."""
    return _c if ENABLED else None


def describe() -> str:
    """Which capture path runs here and, for the Python one, why."""
    if _c is None:
        return f"python (the compiled path: {_IMPORT_ERROR})"
    if not ENABLED:
        return f"python ({PURE_ENV} is set)" if _PURE else "python (disabled)"
    return "compiled"


if _c is not None:
    class FastScopeRecorder(_c.Recorder):
        """:class:`.scopes.ScopeRecorder` with open / close / snapshot in C.

        Tokens and closed records have the same form; ``set_fast`` positions edges without
        entering Python: a ``cuGraphGetNodes`` count, or on large graphs a marker node
        (``CaptureSession.start`` wires it).
        """

        __slots__ = ()

        def records(self) -> List[ScopeRecord]:
            """The closed scopes so far."""
            return [ScopeRecord(*r) for r in list(self.closed)]
else:
    FastScopeRecorder = None  # type: ignore[assignment,misc]
