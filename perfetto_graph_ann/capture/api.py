"""The public capture API: ``graph`` and ``calibrate`` (the scopes, ``mark_kernels`` and
``mark_stream``, are in :mod:`.marks` and re-exported here).

Thin torch layer over :mod:`.session` (torch-free). ``graph`` is a drop-in for
``torch.cuda.graph``: it records scopes during capture and, on exit, reads the node
table and rekeys it to the executable graph. It issues no GPU work of its own: the
calibration table is recorded during the user's own first eligible replay of the graph
(the graph object's ``replay`` is wrapped until then, and unwrapped after), or by
:func:`calibrate`, which replays the graph once now when asked to.

With torch's own graph annotations available (torch >= 2.15 on a driver >= 13.1)
everything is deferred to torch (:mod:`.torch_native`); ``mark_kernels`` and
``mark_stream`` take torch 2.15's arguments and record what torch's record on every backend.
"""
from __future__ import annotations

import atexit
import dataclasses
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional

from ..errors import CaptureError
from . import backends, collectives, replay_log, torch_native
from . import compiled as _compiled
from . import modules as _modules
from .modules import ModuleScopes
from . import nodewatch as _nodewatch
from . import session as _session
from .calibration import KINETO, CalibrationDeferred, calibrate_replay
from .registry import REGISTRY
from .marks import mark_kernels, mark_stream

__all__ = ["graph", "calibrate", "mark_kernels", "mark_stream"]

_warned = False


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

    Runs nothing on the GPU beyond torch's capture. ``calibrate=True``: the graph's first
    replay outside a profiler (and outside a capture) is recorded by a CUPTI activity
    session, which gives the calibration table; until then the record's
    ``calibration_note`` says why there is none. ``calibrate=False``: never, unless
    :func:`calibrate` is called. Works with ``CUDAGraph(keep_graph=True)`` (keys are bound at
    ``instantiate()`` or the first ``replay()``), re-instantiation (entries are rekeyed and
    calibrated again at the next replay) and ``reset()`` (entries dropped).
    ``annotate_collectives=False`` leaves ``torch.distributed`` unwrapped.
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
        self._installed = False
        self._native = False  # torch's own annotations record this capture

    def __enter__(self) -> Any:
        import torch

        name = backends.selected_name()  # probe before capture starts: probing is not capture-safe
        if name == backends.TORCH:
            torch_native.entry_points()  # a torch that moved them fails here, before capturing
            self._inner = torch.cuda.graph(self.cuda_graph, pool=self.pool, stream=self.stream,
                                           capture_error_mode=self.capture_error_mode, enable_annotations=True)
            ret = self._inner.__enter__()
            torch_native.capture_started()
            self._native = True
            self._install_native_collectives()
            return ret
        # torch's capture_begin / capture_end do the annotation (install_capture_hooks): this
        # capture asks for it with this graph()'s options, whether or not the process is instrumented
        install_capture_hooks()
        self.cuda_graph._pga_graph_opts = CaptureOptions(self.name, self.calibrate, self.annotate_collectives)
        self._inner = torch_graph_class()(self.cuda_graph, pool=self.pool, stream=self.stream,
                                          capture_error_mode=self.capture_error_mode)
        try:
            return self._inner.__enter__()
        finally:
            self.cuda_graph.__dict__.pop("_pga_graph_opts", None)  # the hook took it, or the capture failed

    def _install_native_collectives(self) -> None:
        """torch's backend: wrap torch.distributed so collectives reach torch's mark_kernels."""
        if self.annotate_collectives and collectives.AUTO_ANNOTATE:
            try:
                self._installed = collectives.install()
            except Exception as e:  # torch.distributed unusable: keep capturing
                warnings.warn(f"perfetto_graph_ann: collectives not wrapped: {e}", RuntimeWarning, stacklevel=3)

    def __exit__(self, exc_type, exc, tb) -> Any:
        if self._native:
            try:
                return self._inner.__exit__(exc_type, exc, tb)
            finally:
                self._native = False
                torch_native.capture_ended()
                if self._installed:
                    collectives.uninstall()
                    self._installed = False
        if exc_type is not None:
            self.cuda_graph._pga_capture_failed = True  # the capture_end hook drops the session
        return self._inner.__exit__(exc_type, exc, tb)


@dataclasses.dataclass(frozen=True)
class CaptureOptions:
    """How a capture is annotated: :class:`graph`'s arguments, or :func:`.instrument.instrument`'s."""

    name: Optional[str] = None
    calibrate: bool = True
    annotate_collectives: bool = True
    #: True: errors of the annotation itself are raised (an explicit ``graph``); False: they
    #: become a warning and the capture goes on unannotated (a capture the program made itself
    #: in an instrumented process, which must behave as without this package)
    strict: bool = True
    #: Module scopes for every module call during the capture (None: only the models given to
    #: ``mark_modules``)
    modules: Optional[ModuleScopes] = None


#: The options every capture gets that no :class:`graph` asked for: set by ``instrument()``
#: (None: such captures are left alone).
INSTRUMENTED: Optional[CaptureOptions] = None


class _Capture:
    """The annotation of one capture, in the four steps around torch's capture_begin / capture_end."""

    def __init__(self, cuda_graph: Any, options: CaptureOptions):
        self.cuda_graph, self.options = cuda_graph, options
        self.session: Optional[_session.CaptureSession] = None
        self._installed = False
        self._modules = False
        self._compiled = False
        self._failed: Optional[BaseException] = None
        self._held = False  # holds off the CUPTI detach (nodewatch.WATCH.hold) while capturing

    def prepare(self) -> bool:
        """Before capture_begin: everything that does not need the capture. False: not annotated."""
        import torch

        backend = backends.active()
        KINETO.install()  # before any profiler prepares: its warm-up must defer calibration
        if backend is None:
            _warn_unavailable()
            return False
        self.session = _session.CaptureSession(backend, 0, REGISTRY, owner=_owner(self.cuda_graph),
                                               device=torch.cuda.current_device(), name=self.options.name)
        return True

    def started(self, stream: int) -> None:
        """Right after capture_begin, on the capturing stream."""
        sess = self.session
        REGISTRY.backend = sess.backend.name
        _nodewatch.WATCH.hold()  # released in ending(), whatever happens
        self._held = True
        sess.start(stream)
        _session.push(sess)
        if self.options.modules is not None or _modules.NAMES.marked:
            self._modules = _modules.HOOKS.capture_started(self.options.modules)
        if self.options.modules is not None and _compiled.CODEGEN.installed:
            sess.module_filter = self.options.modules.wants
            _compiled.RUNTIME.capture_started(sess)
            self._compiled = True
        if self.options.annotate_collectives and collectives.AUTO_ANNOTATE:
            try:
                self._installed = collectives.install()
            except Exception as e:  # torch.distributed unusable: keep capturing
                warnings.warn(f"perfetto_graph_ann: collectives not wrapped: {e}", RuntimeWarning, stacklevel=4)

    def ending(self, body_failed: bool) -> None:
        """Right before capture_end: freeze the scopes and keep the node table."""
        sess = self.session
        if self._modules:
            _modules.HOOKS.close_open()  # module calls the capture's end cut short
        try:
            if not body_failed:
                sess.finish_capture()
        except Exception as e:  # end the capture first: a stream left capturing breaks the process
            self._failed = e
        finally:
            sess.stop_watch()
            _session.pop(sess)
            self.unhold()
            if self._modules:
                _modules.HOOKS.capture_ended()
                self._modules = False
            if self._compiled:
                _compiled.RUNTIME.capture_ended(sess)
                self._compiled = False
            if self._installed:
                collectives.uninstall()
                self._installed = False

    def unhold(self) -> None:
        """Let the CUPTI detach run again (once; :meth:`started` held it off)."""
        if self._held:
            self._held = False
            _nodewatch.WATCH.unhold()

    def ended(self, body_failed: bool) -> None:
        """After capture_end: rekey to the executable graph (or say why not)."""
        if self._failed is not None:
            if self.options.strict:
                raise self._failed
            warnings.warn(f"perfetto_graph_ann: a CUDA graph capture was left unannotated: {self._failed}",
                          RuntimeWarning, stacklevel=4)
            return
        if body_failed:
            return
        _attach(self.cuda_graph, self.session, self.options.calibrate)
        _bind(self.cuda_graph)  # nothing to bind yet with keep_graph=True: instantiate() does


def _capture_for(cuda_graph: Any) -> Optional[_Capture]:
    """The annotation a starting capture of ``cuda_graph`` gets: the options of the :class:`graph`
    around it, else the process's (``instrument()``), else none."""
    opts = cuda_graph.__dict__.pop("_pga_graph_opts", None)
    if opts is None:
        opts = INSTRUMENTED
        if opts is None or backends.selected_name() == backends.TORCH:
            return None
    return _Capture(cuda_graph, opts)


def _hooked_capture_begin(orig_begin: Callable, orig_end: Callable) -> Callable:
    def capture_begin(self, *args, **kwargs):
        cap = _capture_for(self)
        if cap is None:
            return orig_begin(self, *args, **kwargs)
        try:
            annotate = cap.prepare()
        except Exception as e:
            if cap.options.strict:
                raise
            warnings.warn(f"perfetto_graph_ann: a CUDA graph capture was left unannotated: {e}", RuntimeWarning,
                          stacklevel=2)
            annotate = False
        out = orig_begin(self, *args, **kwargs)
        if not annotate:
            return out
        import torch

        try:
            cap.started(int(torch.cuda.current_stream().cuda_stream))
        except Exception as e:
            cap.unhold()
            if cap.session is not None:
                cap.session.stop_watch()
                if _session.current() is cap.session:
                    _session.pop(cap.session)
            if cap.options.strict:
                orig_end(self)  # end the capture: a stream left capturing breaks the process
                raise
            warnings.warn(f"perfetto_graph_ann: a CUDA graph capture was left unannotated: {e}", RuntimeWarning,
                          stacklevel=2)
            return out
        self._pga_capture = cap
        return out

    capture_begin._pga_original = orig_begin  # type: ignore[attr-defined]
    return capture_begin


def _hooked_capture_end(orig_end: Callable) -> Callable:
    def capture_end(self, *args, **kwargs):
        d = self.__dict__
        cap = d.pop("_pga_capture", None)
        body_failed = bool(d.pop("_pga_capture_failed", False))
        if cap is None:
            return orig_end(self, *args, **kwargs)
        cap.ending(body_failed)
        out = orig_end(self, *args, **kwargs)
        cap.ended(body_failed)
        return out

    capture_end._pga_original = orig_end  # type: ignore[attr-defined]
    return capture_end


def install_capture_hooks(graph_class: Any = None) -> bool:
    """Route every capture of ``torch.cuda.CUDAGraph`` (however it is started: ``torch.cuda.graph``
    under any name, ``capture_begin`` / ``capture_end`` called directly, inductor's cudagraph
    trees, ``make_graphed_callables``) through :class:`_Capture`. Idempotent; the hooks cost a
    few dict lookups per capture and nothing per replay. Returns whether they are in place."""
    if graph_class is None:
        import torch

        graph_class = torch.cuda.CUDAGraph
    begin, end = graph_class.__dict__.get("capture_begin"), graph_class.__dict__.get("capture_end")
    if begin is None or end is None:
        return False
    if getattr(begin, "_pga_original", None) is not None:
        return True
    graph_class.capture_begin = _hooked_capture_begin(begin, end)
    graph_class.capture_end = _hooked_capture_end(end)
    return True


def torch_graph_class() -> Any:
    """torch's own ``torch.cuda.graph`` context manager, even where a program replaced
    ``torch.cuda.graph`` with :class:`graph` (which would otherwise call itself)."""
    import torch

    # torch.cuda.graphs.graph through the torch module in use (not sys.modules' entry, which a
    # stand-in torch module does not replace)
    for cand in (getattr(getattr(torch.cuda, "graphs", None), "graph", None), torch.cuda.graph, _TORCH_GRAPH[0]):
        if cand is not None and cand is not graph:
            _TORCH_GRAPH[0] = cand
            return cand
    raise CaptureError("torch.cuda.graph and torch.cuda.graphs.graph are both perfetto_graph_ann.graph: "
                       "torch's own capture context manager cannot be found")


_TORCH_GRAPH: List[Any] = [None]


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
    """Wrap this graph object's instantiate / reset (and replay, while needed) so keys follow it.

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
    if not getattr(cuda_graph, "_pga_wrapped", False):
        _wrap(cuda_graph, owner)
    _arm(cuda_graph)  # not instantiated yet (keep_graph=True): the first replay instantiates


def _wrap(cuda_graph: Any, owner: int) -> None:
    # a weak reference whose callback drops the entry (cheaper on the capture's path than
    # weakref.finalize); held in _REFS so that it outlives the graph
    ref = _REFS[owner] = weakref.ref(cuda_graph, lambda _r: _collected(owner))
    cls = type(cuda_graph)
    orig_inst, orig_reset = cls.instantiate, cls.reset
    # torch's own replay, for calibration (never under a profiler); a replay the user makes goes
    # through the class's replay as it is at the call, which logs it while a profiler records
    orig_replay = replay_log.original_replay(cls)

    def instantiate(*a, **k):
        g = ref()
        r = orig_inst(g, *a, **k)
        _bind(g, force=True)  # a new executable graph even if its handle value was reused
        return r

    def replay(*a, **k):
        g = ref()
        sess = g._pga_session
        if sess is not None and _exec_handle(g) is None:  # keep_graph=True: bind what torch instantiates
            instantiate()
        if sess is not None and sess.calibration_pending:
            return _calibrating_replay(g, sess, lambda: orig_replay(g, *a, **k), lambda: cls.replay(g, *a, **k))
        _disarm(g)
        return cls.replay(g, *a, **k)

    def reset(*a, **k):
        g = ref()
        s = g._pga_session
        if s is not None:
            s.drop()
            _LIVE.pop(s.owner, None)
        g._pga_session = None
        g._pga_bound_exec = None
        _disarm(g)
        return orig_reset(g, *a, **k)

    cuda_graph.instantiate, cuda_graph.reset = instantiate, reset
    cuda_graph._pga_replay = replay
    cuda_graph._pga_orig_replay = lambda: orig_replay(ref())
    cuda_graph._pga_wrapped = True


def _arm(cuda_graph: Any) -> None:
    """Route the graph's ``replay`` through the wrapper (binding or a calibration is due)."""
    cuda_graph.replay = cuda_graph._pga_replay


def _disarm(cuda_graph: Any) -> None:
    """Back to torch's own ``replay``: nothing is left to do at a replay, so it costs nothing."""
    cuda_graph.__dict__.pop("replay", None)


def _bind(cuda_graph: Any, force: bool = False) -> None:
    sess = getattr(cuda_graph, "_pga_session", None)
    h = _exec_handle(cuda_graph)
    if sess is None or h is None or (h == cuda_graph._pga_bound_exec and not force):
        return
    sess.bind_exec(h)
    cuda_graph._pga_bound_exec = h
    if not cuda_graph._pga_calibrate:
        sess.set_calibration_note("calibration off (graph(calibrate=False)) and calibrate() not called", False)
    elif sess.backend.calibration_unavailable() is not None:
        sess.set_calibration_note(f"no calibration here: {sess.backend.calibration_unavailable()}", False)
    else:
        sess.set_calibration_note(NOT_REPLAYED, True)
        _arm(cuda_graph)


#: the note of a graph whose first eligible replay has not come yet
NOT_REPLAYED = ("not calibrated: the graph was not replayed outside a profiler session since it was "
                "instantiated (call perfetto_graph_ann.calibrate(g) before profiling)")


def _calibrating_replay(cuda_graph: Any, sess: _session.CaptureSession, replay: Callable[[], Any],
                        plain: Callable[[], Any]) -> Any:
    """The user's replay, recorded by a CUPTI activity session when it can be; run once either way.

    ``replay`` is torch's own (run under the activity session); ``plain`` the replay as the
    class has it now, run when no calibration takes place (under a profiler it is logged)."""
    import torch

    ran: List[Any] = []

    def run() -> None:
        ran.append(replay())

    reason = None
    if torch.cuda.is_current_stream_capturing():
        reason = "a stream capture was in progress at every replay"
    else:
        try:
            table = calibrate_replay(run, torch.cuda.synchronize, sess.exec_id, session=sess.backend.activity_session,
                                     blocking=False)
        except CalibrationDeferred as e:
            reason = f"every replay was refused calibration ({e})"
        except CaptureError as e:  # the replay ran: do not try again at every replay
            sess.set_calibration_note(f"calibration failed: {e}", False)
            warnings.warn(f"perfetto_graph_ann: graph annotated but not calibrated: {e}", RuntimeWarning, stacklevel=3)
        else:
            sess.apply_calibration(table)
        if ran:
            _disarm(cuda_graph)
            return ran[0]
    sess.set_calibration_note(f"not calibrated: {reason}; call perfetto_graph_ann.calibrate(g) before profiling")
    return plain()


def calibrate(cuda_graph: Any) -> None:
    """Replay ``cuda_graph`` once, now, under a CUPTI activity session and store (stream, ordinal).

    The explicit way to calibrate (``graph`` otherwise records the graph's own first
    eligible replay): use it when the graph's first replays will all run inside a
    profiler, or after ``graph(calibrate=False)``. The replay runs the graph's work like
    any ``replay()``. Raises :class:`CaptureError` inside a torch.profiler session (nothing
    is replayed then), for a graph not captured with :class:`graph`, or when CUPTI
    recorded nothing for it.
    """
    import torch

    sess = getattr(cuda_graph, "_pga_session", None)
    if sess is None or sess.exec_id is None:
        raise CaptureError("calibrate(): graph was not captured with perfetto_graph_ann.graph or not instantiated")
    try:
        table = calibrate_replay(cuda_graph._pga_orig_replay, torch.cuda.synchronize, sess.exec_id,
                                 session=sess.backend.activity_session)
    except CalibrationDeferred as e:
        raise CaptureError(f"calibration refused: {e}; calibrate before starting the profiler") from e
    sess.apply_calibration(table)
    _disarm(cuda_graph)
