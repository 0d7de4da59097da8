"""The public capture API: ``graph``, ``mark_kernels``, ``mark_stream``, ``calibrate``.

Thin torch layer over :mod:`.session` (torch-free). ``graph`` is a drop-in for
``torch.cuda.graph``: it records scopes during capture and, on exit, reads the node
table, rekeys it to the executable graph and calibrates (one extra replay; pass
``calibrate=False`` when replaying the graph has effects you do not want, e.g. an
optimizer step, and call :func:`calibrate` later).

With torch's own ``torch.cuda.graph_annotations`` available (torch >= 2.15 on a driver
>= 13.1) everything is deferred to torch.
"""
from __future__ import annotations

import atexit
import contextlib
import warnings
import weakref
from typing import Any, Dict, Iterator, Optional

from ..errors import CaptureError
from . import backends, collectives
from . import session as _session
from .autograd import BackwardTagger, torch_mode
from .calibration import calibrate_replay
from .registry import REGISTRY
from .scopes import normalize_annotation

_warned = False


def _native():
    import torch

    return torch.cuda.graph_annotations


def _warn_unavailable() -> None:
    global _warned
    if not _warned:
        _warned = True
        info = backends.backend_info()
        warnings.warn(f"perfetto_graph_ann: no capture backend here, annotations are off: {info['reasons']}",
                      RuntimeWarning, stacklevel=3)


def _exec_handle(cuda_graph: Any) -> Optional[int]:
    try:
        h = cuda_graph.raw_cuda_graph_exec()
    except Exception:
        return None
    h = int(h)
    return h or None


class graph:
    """Drop-in for ``torch.cuda.graph`` that annotates the captured kernels.

    Works with ``CUDAGraph(keep_graph=True)`` (keys are bound at ``instantiate()`` or the
    first ``replay()``), re-instantiation (entries are rekeyed) and ``reset()`` (entries
    dropped). ``annotate_collectives=False`` leaves ``torch.distributed`` unwrapped.
    ``name`` names the graph in the trace (its replays: ``<name> #<replay>``; default
    ``graph <exec id>``); kept in the sidecar.
    """

    def __init__(self, cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global",
                 calibrate: bool = True, annotate_collectives: bool = True, name: Optional[str] = None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"graph name must be a str, got {type(name).__name__}")
        self.name = name
        self.cuda_graph = cuda_graph
        self.pool, self.stream, self.capture_error_mode = pool, stream, capture_error_mode
        self.calibrate = calibrate
        self.annotate_collectives = annotate_collectives
        self._inner: Any = None
        self._session: Optional[_session.CaptureSession] = None
        self._installed = False

    def __enter__(self) -> Any:
        import torch

        name = backends.selected_name()  # probe before capture starts: probing is not capture-safe
        if name == backends.TORCH:
            self._inner = torch.cuda.graph(self.cuda_graph, pool=self.pool, stream=self.stream,
                                           capture_error_mode=self.capture_error_mode, enable_annotations=True)
            return self._inner.__enter__()
        backend = backends.active()
        self._inner = torch.cuda.graph(self.cuda_graph, pool=self.pool, stream=self.stream,
                                       capture_error_mode=self.capture_error_mode)
        if backend is None:
            ret = self._inner.__enter__()
            _warn_unavailable()
            return ret
        # everything that does not need the capture is built before it begins
        sess = _session.CaptureSession(backend, 0, REGISTRY, owner=_owner(self.cuda_graph),
                                       device=torch.cuda.current_device(), name=self.name)
        ret = self._inner.__enter__()
        REGISTRY.backend = backend.name
        stream = getattr(self._inner, "capture_stream", None)
        if stream is None:
            stream = torch.cuda.current_stream()
        try:
            sess.start(int(stream.cuda_stream))
        except Exception:
            self._inner.__exit__(None, None, None)
            raise
        self._session = sess
        _session.push(sess)
        if self.annotate_collectives and collectives.AUTO_ANNOTATE:
            try:
                self._installed = collectives.install()
            except Exception as e:  # torch.distributed unusable: keep capturing
                warnings.warn(f"perfetto_graph_ann: collectives not wrapped: {e}", RuntimeWarning, stacklevel=2)
        return ret

    def __exit__(self, exc_type, exc, tb) -> Any:
        sess = self._session
        failed: Optional[BaseException] = None
        try:
            if sess is not None and exc_type is None:
                sess.finish_capture()
        except Exception as e:  # end the capture first: a stream left capturing breaks the process
            failed = e
        finally:
            if sess is not None:
                _session.pop(sess)
            if self._installed:
                collectives.uninstall()
                self._installed = False
        result = self._inner.__exit__(exc_type, exc, tb)
        if failed is not None:
            raise failed
        if sess is None or exc_type is not None:
            return result
        _attach(self.cuda_graph, sess, self.calibrate)
        _bind(self.cuda_graph)  # nothing to bind yet with keep_graph=True: instantiate() does
        return result


def _owner(cuda_graph: Any) -> int:
    owner = getattr(cuda_graph, "_pga_owner", None)
    if owner is None:
        owner = next(_session._owner_ids)
        cuda_graph._pga_owner = owner
    return owner


#: owner token -> the session of that graph object's latest capture (dropped with the graph)
_LIVE: Dict[int, _session.CaptureSession] = {}


#: owner token -> weak reference to that graph object, whose callback calls _collected
_REFS: Dict[int, "weakref.ref[Any]"] = {}
_exiting = False


@atexit.register
def _at_exit() -> None:
    global _exiting
    _exiting = True  # graphs collected at interpreter exit: the driver may already be gone


def _forget(owner: int) -> None:
    """The graph object is gone: drop its entry (as torch's reset on destruction does)."""
    sess = _LIVE.pop(owner, None)
    if sess is not None:
        sess.drop()


def _collected(owner: int) -> None:
    _REFS.pop(owner, None)
    if not _exiting:
        _forget(owner)


def _attach(cuda_graph: Any, sess: _session.CaptureSession, calibrate: bool) -> None:
    """Wrap this graph object's instantiate / replay / reset so keys follow it.

    The wrappers hold the graph weakly: a reference cycle would leave the graph to the
    cyclic GC, which may then destroy it in the middle of a later capture. When the graph
    object is garbage collected its entry leaves the registry (torch's destructor resets
    the graph, and ``reset()`` drops the entry): a stale copy of a re-captured graph would
    otherwise tie with the live one in the join.
    """
    cuda_graph._pga_session = sess
    cuda_graph._pga_calibrate = calibrate
    cuda_graph._pga_bound_exec = None
    owner = sess.owner
    _LIVE[owner] = sess
    if getattr(cuda_graph, "_pga_wrapped", False):
        return
    # a weak reference whose callback drops the entry (weakref.finalize did the same at ~3x
    # the cost on the capture's path); held in _REFS so that it outlives the graph
    ref = _REFS[owner] = weakref.ref(cuda_graph, lambda _r: _collected(owner))
    cls = type(cuda_graph)
    orig_inst, orig_replay, orig_reset = cls.instantiate, cls.replay, cls.reset

    def instantiate(*a, **k):
        g = ref()
        r = orig_inst(g, *a, **k)
        _bind(g, force=True)  # a new executable graph even if its handle value was reused
        return r

    def replay(*a, **k):
        g = ref()
        if g._pga_session is not None and _exec_handle(g) is None:
            instantiate()
        return orig_replay(g, *a, **k)

    def reset(*a, **k):
        g = ref()
        s = g._pga_session
        if s is not None:
            s.drop()
            _LIVE.pop(s.owner, None)
        g._pga_session = None
        g._pga_bound_exec = None
        return orig_reset(g, *a, **k)

    cuda_graph.instantiate, cuda_graph.replay, cuda_graph.reset = instantiate, replay, reset
    cuda_graph._pga_orig_replay = lambda: orig_replay(ref())
    cuda_graph._pga_wrapped = True


def _bind(cuda_graph: Any, force: bool = False) -> None:
    sess = getattr(cuda_graph, "_pga_session", None)
    h = _exec_handle(cuda_graph)
    if sess is None or h is None or (h == cuda_graph._pga_bound_exec and not force):
        return
    sess.bind_exec(h)
    cuda_graph._pga_bound_exec = h
    if cuda_graph._pga_calibrate:
        try:
            calibrate(cuda_graph)
        except CaptureError as e:
            warnings.warn(f"perfetto_graph_ann: graph annotated but not calibrated: {e}", RuntimeWarning, stacklevel=3)


def calibrate(cuda_graph: Any) -> None:
    """Replay ``cuda_graph`` once under a CUPTI activity session and store (stream, ordinal).

    Raises :class:`CaptureError` inside a torch.profiler session, for a graph not captured
    with :class:`graph`, or when CUPTI recorded nothing for it.
    """
    import torch

    sess = getattr(cuda_graph, "_pga_session", None)
    if sess is None or sess.exec_id is None:
        raise CaptureError("calibrate(): graph was not captured with perfetto_graph_ann.graph or not instantiated")
    table = calibrate_replay(cuda_graph._pga_orig_replay, torch.cuda.synchronize, sess.exec_id)
    sess.apply_calibration(table)


class mark_kernels:
    """Annotate every node captured inside the block (any stream that joined the capture).

    ``annotation``: a str (``{"name": s}``) or a dict; ``stream`` (an int) is its display
    lane. Nested scopes merge, inner wins per key. A no-op outside ``graph(...)``.
    ``backward=True``: backward kernels of ops run in the block, when captured, get the
    same fields plus ``autograd_phase: "backward"``. Thread-safe; a class rather than a
    generator context manager because it sits on the capture's critical path.
    """

    __slots__ = ("fields", "annotation", "backward", "_sess", "_tok", "_mode", "_native")

    def __init__(self, annotation: Any, backward: bool = False):
        # on the capture's critical path: the common str case without a call
        self.fields = {"name": annotation} if type(annotation) is str else normalize_annotation(annotation)
        self.annotation, self.backward = annotation, backward
        self._sess = self._tok = self._mode = self._native = None

    def __enter__(self) -> "mark_kernels":
        st = getattr(_session._local, "stack", None)  # _session.current() inlined: the thread's own first
        sess = st[-1] if st else _session.current()
        if sess is not None:  # our capture in flight (never pushed when torch's backend is used)
            rec = sess.recorder
            if rec.active:
                self._sess, self._tok = sess, rec.open(self.fields)
        elif backends.selected_name() == backends.TORCH:
            self._native = _native().mark_kernels(self.annotation, backward=self.backward)
            self._native.__enter__()
            return self
        if self.backward:
            merged = {**(sess.recorder.open_fields() if sess is not None else {}), **self.fields}
            label = sess.lane_label(merged.get("stream")) if sess is not None else None
            self._mode = torch_mode(BackwardTagger(merged, lane_label=label))
            self._mode.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._native is not None:
            self._native.__exit__(exc_type, exc, tb)
            return
        if self._mode is not None:
            self._mode.__exit__(exc_type, exc, tb)
        if self._tok is not None:
            self._sess.recorder.close(self._tok)


@contextlib.contextmanager
def mark_stream(stream: Any, label: str) -> Iterator[Any]:
    """Switch to ``stream`` and put the kernels captured in the block on a labelled lane.

    Lane ids are handed out from 60 upward, one per stream, stable for the process; the
    label is recorded with the graph being captured (a later graph that puts kernels on
    the same lane id does not inherit it). Passing the current stream only adds the label. Like ``torch.cuda.stream`` this
    inserts no dependencies: make ``stream`` wait for the work it consumes
    (``stream.wait_stream(...)``) and join it back before the capture ends.
    """
    import torch

    if backends.selected_name() == backends.TORCH:
        with _native().mark_stream(stream, label) as s:
            yield s
        return
    with _session.lane_scope(("stream", int(stream.cuda_stream)), label, REGISTRY):
        switch = torch.cuda.current_stream() != stream
        ctx = torch.cuda.stream(stream) if switch else contextlib.nullcontext()
        with ctx:
            yield stream
