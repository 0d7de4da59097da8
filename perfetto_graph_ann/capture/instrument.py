"""Instrument the whole process: every CUDA graph captured from now on is annotated, whoever
captures it (``torch.cuda.graph`` under any name, ``CUDAGraph.capture_begin`` / ``capture_end``
called directly, inductor's cudagraph trees, ``make_graphed_callables``, SGLang / vLLM runners).

    import perfetto_graph_ann as pga
    pga.instrument(modules=True, out="pga_out")   # or: with pga.instrument(): ...

The capture hooks (:func:`..api.install_capture_hooks`) give such a capture what
:class:`..api.graph` gives its own: keys, calibration on the graph's first eligible replay,
collectives, the replay record, and (``modules``) a scope per ``nn.Module`` call. Errors of the
annotation never reach the program: the capture goes on unannotated, with a warning. ``out``
saves this process's annotations as ``<out>/<host>_<pid>.pga`` after every profiler stop and
at exit (what ``perfetto-graph-ann run --out`` sets), the name ``convert``, ``merge`` and
``fleet`` look for beside a trace (:func:`sidecar_name`).

Before torch is imported (a launcher's ``sitecustomize``), :func:`instrument` waits for it:
the hooks are installed when ``torch`` finishes importing.
"""
from __future__ import annotations

import atexit
import dataclasses
import importlib.abc
import importlib.machinery
import os
import socket
import sys
import threading
import warnings
from typing import Any, Optional, Union

from .. import settings
from ..errors import OutputError
from ..formats import RUN_SIDECAR_SUFFIX
from . import api
from .modules import ModuleScopes

__all__ = ["check_out_dir", "check_settings", "current", "instrument", "Instrumentation", "InstrumentConfig", "save_now", "sidecar_name",
           "uninstrument"]


def sidecar_name(host: str, pid: int) -> str:
    """``<host>_<pid>.pga``: torch's trace handler names traces ``<host>_<pid>.<time>.pt.trace.json``
    by default, so a trace's sidecar is found by its worker name, or by the trace's pid."""
    return f"{host}_{pid}{RUN_SIDECAR_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class InstrumentConfig:
    """What :func:`instrument` does (``perfetto-graph-ann run`` builds one from its options)."""

    modules: Optional[ModuleScopes] = None  #: a scope per module call (None: only ``mark_modules`` models)
    calibrate: bool = True
    annotate_collectives: bool = True
    out: Optional[str] = None  #: folder for this process's sidecar (None: not saved)


_lock = threading.Lock()
_config: Optional[InstrumentConfig] = None
_cuda_hooked = False  #: _cuda_ready handed to torch.cuda._lazy_call (once a process)
_saver_registered = False


class Instrumentation:
    """What :func:`instrument` returns: also a context manager that restores the previous state."""

    def __init__(self, previous: Optional[InstrumentConfig], config: InstrumentConfig):
        self.previous, self.config = previous, config

    def __enter__(self) -> "Instrumentation":
        return self

    def __exit__(self, *exc: Any) -> None:
        _apply(self.previous)


def instrument(modules: Union[bool, ModuleScopes, None] = False, calibrate: bool = True,
               annotate_collectives: bool = True, out: Optional[str] = None) -> Instrumentation:
    """Annotate every CUDA graph the process captures from now on, as :class:`..api.graph` would.

    Args:
        modules: ``True`` (or a :class:`ModuleScopes`): every ``nn.Module`` call during a
            capture is a scope named by its module path; ``False``: only the models given to
            ``mark_modules``.
        calibrate, annotate_collectives: as :class:`..api.graph`'s.
        out: a folder for this process's sidecar, saved after every profiler stop and at exit.

    Returns:
        An :class:`Instrumentation`; ``with instrument(...):`` undoes it at the end. Calling it
        again replaces the settings (idempotent); a ``pga.graph`` inside keeps its own.

    Raises:
        OutputError: ``out`` cannot be created or written.
    """
    if modules is True:
        modules = ModuleScopes()
    elif modules is False or modules is None:
        modules = None
    elif not isinstance(modules, ModuleScopes):
        raise TypeError(f"instrument(modules=) takes a bool or a ModuleScopes, got {type(modules).__name__}")
    check_settings(modules=modules is not None)
    if out is not None:
        out = check_out_dir(out)
    cfg = InstrumentConfig(modules, calibrate, annotate_collectives, out)
    with _lock:
        previous = _config
    _apply(cfg)
    return Instrumentation(previous, cfg)


def uninstrument() -> None:
    """Stop annotating captures no ``pga.graph`` asked for (the hooks stay, passing through)."""
    _apply(None)


def current() -> Optional[InstrumentConfig]:
    return _config


def check_settings(env: "Optional[settings.Getenv]" = None, modules: bool = False) -> None:
    """Read the capture's settings from ``env`` (default: the process environment) once, so
    that a bad value is a :class:`~..errors.SettingError` before the program runs, not in its
    first capture or at its CUDA initialisation. With ``modules``, a compile records folder
    given (``PERFETTO_GRAPH_ANN_COMPILE_RECORDS``) must be one that can be written
    (:class:`~..errors.OutputError` otherwise; it is made if missing)."""
    from . import fastpath

    read = env or fastpath.getenv
    for s in (settings.NODE_WATCH, settings.WARM_CUPTI, settings.VERIFY_SCOPES):
        settings.switch(s, read)
    for s in (settings.MARKERS_FROM, settings.DETACH_CUPTI_MS):
        settings.count_or_off(s, read)
    off, records = settings.path_or_off(settings.COMPILE_RECORDS, read)
    if modules and records and not off:
        try:
            check_out_dir(records)
        except OutputError as e:
            raise OutputError(e.path, f"{settings.COMPILE_RECORDS.name}: {e.problem}") from None


def check_out_dir(out: str) -> str:
    """``out`` created if needed and writable, as an absolute path; else :class:`OutputError`."""
    out = os.path.abspath(os.fspath(out))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise OutputError(out, f"cannot create the output folder: {e.strerror or e}") from e
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(out, "the output folder is not writable")
    return out


def _apply(cfg: Optional[InstrumentConfig]) -> None:
    global _config
    with _lock:
        _config = cfg
        api.INSTRUMENTED = None if cfg is None else api.CaptureOptions(
            None, cfg.calibrate, cfg.annotate_collectives, strict=False, modules=cfg.modules)
    if cfg is None:
        return
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "cuda"):
        _torch_ready()
    else:
        _AfterImport.watch("torch", _torch_ready)
    if cfg.out is not None:
        _register_saver()


def _torch_ready() -> None:
    """torch is imported: hook its captures and watch its profiler (the replay record); import
    now what the first capture would import (no CUDA call), so that it does not pay for it."""
    global _cuda_hooked
    from . import backends
    from .calibration import KINETO

    try:
        api.install_capture_hooks()
        KINETO.install()
    except Exception as e:  # never break the program: it runs unannotated
        warnings.warn(f"perfetto_graph_ann: instrumentation not installed: {e}", RuntimeWarning, stacklevel=2)
        return
    backends.preload()
    lazy_call = getattr(getattr(sys.modules.get("torch"), "cuda", None), "_lazy_call", None)
    if lazy_call is not None and not _cuda_hooked:  # now if CUDA is initialised, else when torch does it
        _cuda_hooked = True
        lazy_call(_cuda_ready)
    cfg = _config
    if cfg is not None and cfg.modules is not None:
        for name, ready in (("torch._dynamo.eval_frame", _dynamo_ready), ("torch._inductor.compile_fx", _inductor_ready)):
            if name in sys.modules:
                ready()
            else:
                _AfterImport.watch(name, ready)


def _cuda_ready() -> Optional[threading.Thread]:
    """The process initialised CUDA: initialise CUPTI now, in a background thread (its first
    subscription, ~20 ms on the H200, would otherwise fall in the first capture; a process
    initialising CUDA under ``instrument()`` is about to capture; with the cupti backend even a
    capture without scopes initialises it, by asking CUPTI its graph's ids). What the captures
    are done with is detached later (:meth:`.nodewatch.NodeWatch.idle`). The thread, or None
    where it is not wanted (``PERFETTO_GRAPH_ANN_WARM_CUPTI=0`` or ``..._NODE_WATCH=0``,
    uninstrumented)."""
    from . import fastpath, nodewatch

    try:  # inside torch's CUDA initialisation: never raise there
        if _config is None or not nodewatch.enabled_from_env() or \
                not settings.switch(settings.WARM_CUPTI, fastpath.getenv):
            return None
        t = threading.Thread(target=_warm_cupti, name="perfetto-graph-ann-warm-cupti", daemon=True)
        t.start()
        return t
    except Exception:
        return None


def _warm_cupti() -> None:
    from . import backends, nodewatch

    try:
        backend = backends.active()  # probed and built here, not in the first capture
        fns = backend.node_watch_functions() if backend is not None else None
        if fns is not None:
            nodewatch.WATCH.warm_up(fns)
    except Exception:  # the first capture initialises it instead
        pass


def _dynamo_ready() -> None:
    """torch.compile's classes are imported: models given to it become module roots (their
    compiled kernels' paths are named from them)."""
    from . import compiled

    if _config is not None and _config.modules is not None and not compiled.install_roots():
        warnings.warn(f"perfetto_graph_ann: {compiled.CODEGEN.failed}", RuntimeWarning, stacklevel=2)


def _inductor_ready() -> None:
    """inductor is imported: record what its code generation launches (module paths in compiled code)."""
    from . import compiled

    if _config is not None and _config.modules is not None and not compiled.install():
        warnings.warn(f"perfetto_graph_ann: {compiled.CODEGEN.failed}", RuntimeWarning, stacklevel=2)


def save_now() -> Optional[str]:
    """Save this process's annotations to ``<out>/<host>_<pid>.pga`` (atomically); None without ``out``.

    Called after every profiler stop and at exit: a process with no graph captured saves
    nothing (no file is better than an empty one that matches no trace)."""
    cfg = _config
    if cfg is None or cfg.out is None:
        return None
    from .recorded import recorded_annotations, save_annotations

    ann = recorded_annotations()
    if not ann.graphs:
        return None
    path = os.path.join(cfg.out, sidecar_name(socket.gethostname(), os.getpid()))
    try:
        return save_annotations(path, ann)
    except Exception as e:  # the program goes on
        warnings.warn(f"perfetto_graph_ann: annotations not saved to {path}: {e}", RuntimeWarning, stacklevel=2)
        return None


def _register_saver() -> None:
    global _saver_registered
    if _saver_registered:
        return
    _saver_registered = True
    atexit.register(save_now)
    from . import replay_log

    replay_log.REPLAY_LOG.on_stop.append(save_now)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback once a top-level module has finished importing (a post-import hook)."""

    _callbacks: dict = {}
    _installed = False

    @classmethod
    def watch(cls, name: str, callback: Any) -> None:
        cls._callbacks.setdefault(name, []).append(callback)
        if not cls._installed:
            cls._installed = True
            sys.meta_path.insert(0, cls())

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in self._callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        callbacks = self._callbacks.pop(fullname)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def run(module: Any) -> None:
            exec_module(module)
            for cb in callbacks:
                cb()

        loader.exec_module = run  # type: ignore[method-assign]
        return spec
