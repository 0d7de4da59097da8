"""The backend choice: a pure function of the machine's facts, and the probe that reads them."""
from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Dict, Optional, Tuple

from .. import fastpath
from .base import BACKENDS, CUDA_RUNTIME, CUPTI, TOOLS_ID_DRIVER, TORCH
from .cupti import find_libcupti

__all__ = ["BackendInfo", "choose_backend", "EnvFacts", "preload", "probe_facts"]


@dataclasses.dataclass(frozen=True)
class EnvFacts:
    """What the machine offers; everything the backend choice depends on."""

    torch_version: Optional[str] = None  #: None: torch not importable
    cuda_available: bool = False
    torch_native: Optional[bool] = None  #: torch.cuda.graph_annotations.is_available(); None: module absent
    #: torch's annotation entry points this torch lacks (:mod:`..torch_native`), e.g. ("mark_stream",)
    torch_missing: Tuple[str, ...] = ()
    driver_version: Optional[int] = None  #: cudaDriverGetVersion, e.g. 13000
    cuda_bindings: bool = False
    runtime_ids: bool = False  #: cuda-bindings has cudaGraphNodeGetLocalId and cudaGraphExecGetId
    libcupti: Optional[str] = None
    cupti_python: bool = False  #: calibration needs cupti-python's activity API


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    backend: Optional[str]
    reasons: Dict[str, str]  #: backend -> why it was not used (or "chosen")
    calibration: bool
    facts: EnvFacts

    def as_dict(self) -> Dict[str, Any]:
        """The report, plus ``capture_path``: whether scope edges run compiled (:mod:`..fastpath`)."""
        return {"backend": self.backend, "reasons": dict(self.reasons), "calibration": self.calibration,
                "capture_path": fastpath.describe(), "facts": dataclasses.asdict(self.facts)}


def _torch_at_least(version: Optional[str], major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def choose_backend(f: EnvFacts) -> BackendInfo:
    """Pick the first usable backend in order torch, cuda-runtime, cupti; say why not the others."""
    reasons: Dict[str, str] = {}
    chosen: Optional[str] = None
    if f.torch_version is None:
        for b in BACKENDS:
            reasons[b] = "torch is not installed"
        return BackendInfo(None, reasons, False, f)
    if not f.cuda_available:
        for b in BACKENDS:
            reasons[b] = "no CUDA device (torch.cuda.is_available() is False)"
        return BackendInfo(None, reasons, False, f)
    if not _torch_at_least(f.torch_version, 2, 15):
        reasons[TORCH] = f"torch {f.torch_version} < 2.15 has no torch.cuda.graph_annotations"
    elif f.torch_native is None:
        reasons[TORCH] = "torch.cuda.graph_annotations is missing"
    elif f.torch_missing:
        reasons[TORCH] = (f"torch {f.torch_version}'s graph annotations lack {', '.join(f.torch_missing)} "
                          "(looked in torch.cuda.graph_annotations and torch.cuda._graph_annotations, "
                          "where torch 2.15 has them)")
    elif not f.torch_native:
        reasons[TORCH] = "torch.cuda.graph_annotations.is_available() is False (needs driver >= 13.1 and cuda-bindings >= 13.1)"
    else:
        chosen = TORCH
    drv = f"driver {f.driver_version // 1000}.{f.driver_version % 1000 // 10}" if f.driver_version else "driver version unknown"
    if not f.cuda_bindings:
        reasons[CUDA_RUNTIME] = reasons[CUPTI] = "cuda-bindings is not installed"
    else:
        if f.driver_version is None or f.driver_version < TOOLS_ID_DRIVER:
            reasons[CUDA_RUNTIME] = f"{drv} < 13.1: cudaGraphNodeGetLocalId / cudaGraphExecGetId return cudaErrorCallRequiresNewerDriver"
        elif not f.runtime_ids:
            reasons[CUDA_RUNTIME] = "cuda-bindings lacks cudaGraphNodeGetLocalId / cudaGraphExecGetId (needs >= 13.1)"
        elif chosen is None:
            chosen = CUDA_RUNTIME
        if f.libcupti is None:
            reasons[CUPTI] = "libcupti not found (pip install nvidia-cuda-cupti)"
        elif chosen is None:
            chosen = CUPTI
    for b in BACKENDS:
        if b == chosen:
            reasons[b] = "chosen"
        else:
            reasons.setdefault(b, f"not needed: {chosen} is preferred")
    calibration = chosen in (CUDA_RUNTIME, CUPTI) and f.cupti_python
    return BackendInfo(chosen, reasons, calibration, f)


def preload() -> None:
    """Import what the probe and the backends import (cuda-bindings' driver and runtime modules),
    calling nothing: no CUDA call, no library initialised. ``instrument()`` does it once torch
    is imported, so that the process's first capture does not pay it: ~0.1 s on the H200
    (BENCHMARKS.md, "module scopes at capture, session 15")."""
    with contextlib.suppress(Exception):
        from cuda.bindings import driver, runtime  # noqa: F401


def probe_facts() -> EnvFacts:
    """Read :class:`EnvFacts` from this machine (imports torch and cuda-bindings if present)."""
    try:
        import torch
    except Exception:
        return EnvFacts()
    kw: Dict[str, Any] = {"torch_version": torch.__version__, "cuda_available": bool(torch.cuda.is_available())}
    if _torch_at_least(kw["torch_version"], 2, 15):
        from .. import torch_native

        kw["torch_native"], kw["torch_missing"] = torch_native.probe()
    try:
        from cuda.bindings import runtime as rt

        kw["cuda_bindings"] = True
        kw["runtime_ids"] = hasattr(rt, "cudaGraphNodeGetLocalId") and hasattr(rt, "cudaGraphExecGetId")
        if kw["cuda_available"]:
            err, v = rt.cudaDriverGetVersion()
            if int(err) == 0:
                kw["driver_version"] = int(v)
    except Exception:
        pass
    if kw["cuda_available"]:
        torch.cuda.init()
        kw["libcupti"] = find_libcupti()
    with contextlib.suppress(Exception):
        import importlib.util

        kw["cupti_python"] = importlib.util.find_spec("cupti") is not None
    return EnvFacts(**kw)
