"""Scopes while capturing: ``mark_kernels`` and ``mark_stream`` (torch 2.15's signatures).

A scope annotates the graph nodes created while it is open (:mod:`.scopes` records them);
with ``backward=True`` it also carries its fields over to the backward kernels of the
autograd nodes made in it (:mod:`.autograd`). On torch's own backend both calls go to torch.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
from functools import partial
from typing import Any, Dict, Iterator, Optional, Tuple

from . import autograd as _autograd
from . import backends, torch_native
from . import fastpath as _fastpath
from . import session as _session
from .autograd import PHASE_KEY, BACKWARD, BackwardTagger, Range, enter_region, exit_region, in_backward
from .registry import REGISTRY
from .scopes import normalize_annotation

__all__ = ["mark_stream"]


def _backward_tagger(sess: Any, fields: Dict[str, Any]) -> BackwardTagger:
    """The backward scope of a ``mark_kernels`` block whose merged fields are ``fields``."""
    return BackwardTagger(fields, lane_label=sess.lane_label(fields.get("stream")))


class _MarkMethods:
    """``mark_kernels``' behaviour in Python: the whole of it on the pure-Python path, and what
    the compiled one (``_fastpath.Mark``) hands over: anything but a scope inside our capture
    (torch's backend, no capture), a forward re-run inside backward, a region that made nodes,
    and what the backward walk asks of a block still open (``range``)."""

    __slots__ = ()

    def _enter_py(self) -> "mark_kernels":
        if _c is not None and sys.modules.get("torch") is not _torch_seen:
            _setup_fast()
        self._sess = self._tok = self._native = None
        self._region = False
        st = getattr(_session._local, "stack", None)  # _session.current() inlined: the thread's own first
        sess = st[-1] if st else _session.current()
        if sess is not None:  # our capture in flight (never pushed when torch's backend is used)
            rec = sess.recorder
            if not rec.active:
                return self
            # a forward run inside backward (a checkpoint's recomputation): its kernels are backward work
            fields = self.fields if not in_backward() else {**self.fields, PHASE_KEY: BACKWARD}
            self._sess, self._tok = sess, rec.open(fields)
        elif torch_native.capturing() or backends.selected_name() == backends.TORCH:
            self._native = torch_native.call("mark_kernels", self.annotation, backward=self.backward)
            self._native.__enter__()
            return self
        else:
            return self  # as torch's: outside a capture nothing is recorded, nothing hooked
        if self.backward:
            # a range of node numbers; nothing is built unless a node made in it is claimed
            self._range, self._region = None, True
            enter_region(self)
        return self

    def _exit_py(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._native is not None:
            self._native.__exit__(exc_type, exc, tb)
            return
        if self._region:
            self._exit_region()
        if self._tok is not None:
            self._sess.recorder.close(self._tok)

    def _exit_region(self, end: Optional[int] = None) -> None:
        """Close the region (``end``: the counter, when already read); one that made nodes gets
        its fields fixed now, as the scopes open around it are about to close."""
        self._region = False
        rng = exit_region(self, end)
        if rng is not None and rng.make is not None and rng._tagger is None:
            rng.make = partial(_backward_tagger, self._sess, self._sess.recorder.open_fields(self._tok))

    def range(self) -> Range:
        """This open block's range of node numbers (a backward claims while it is open)."""
        r = self._range
        if r is None:
            r = self._range = Range(self.start, self._open_tagger if self.grad else None, None)
        return r

    def _open_tagger(self) -> BackwardTagger:
        return _backward_tagger(self._sess, self._sess.recorder.open_fields(self._tok))


_MARK_DOC = """Annotate every node captured inside the block (any stream that joined the capture).

    torch 2.15's ``mark_kernels(annotation, *, backward=True)``: ``annotation`` is a str
    (``{"name": s}``) or a dict; ``stream`` (an int) is its display lane. Nested scopes
    merge, inner wins per key. A no-op outside ``graph(...)``. ``backward=True`` (the
    default, as in torch): the backward kernels of every autograd node created in the block on
    this thread (composite ops' inner nodes included), when captured, get the same fields plus
    ``autograd_phase: "backward"`` (the innermost block wins; see capture/autograd.py). A block
    re-run inside backward (a checkpoint's recomputation) tags its kernels ``backward`` too. On
    torch's backend the call goes to torch's ``mark_kernels`` with the same arguments.
    Thread-safe. It sits on the capture's critical path: on the compiled path the common case
    (a scope inside our capture) runs in C (``capture/_marks.c``).
    """

def _signature(annotation: Any, *, backward: bool = True):  # noqa: ANN202 (a signature, not a function)
    """torch 2.15's signature, which the compiled ``__init__`` takes too."""


_c = _fastpath._c
if _c is not None:
    class mark_kernels(_c.Mark, _MarkMethods):
        __slots__ = ()
        __doc__ = _MARK_DOC
        __signature__ = inspect.signature(_signature)
else:
    class mark_kernels(_MarkMethods):  # type: ignore[no-redef]
        __slots__ = ("fields", "annotation", "backward", "_sess", "_tok", "_native", "_region", "_range",
                     "start", "grad")
        __doc__ = _MARK_DOC

        def __init__(self, annotation: Any, *, backward: bool = True):
            # on the capture's critical path: the common str case without a call
            self.fields = {"name": annotation} if type(annotation) is str else normalize_annotation(annotation)
            self.annotation, self.backward = annotation, backward
            self._sess = self._tok = self._native = self._range = self.start = None
            self._region = self.grad = False

        __enter__ = _MarkMethods._enter_py
        __exit__ = _MarkMethods._exit_py

_torch_seen: Any = None


def _setup_fast() -> None:
    """Point the compiled ``Mark`` at the torch now in ``sys.modules`` (tests swap in fakes)."""
    global _torch_seen
    torch = sys.modules.get("torch")
    if _c is None or torch is None:
        return
    _torch_seen = torch
    node = getattr(getattr(torch, "_C", None), "_current_autograd_node", None) or (lambda: None)
    grad = getattr(torch, "is_grad_enabled", None) or (lambda: False)
    _c.mark_torch(torch, node, grad, *_native_functions(torch, grad))


#: (library, mangled name): the C++ functions behind autograd's counter reader
#: (``torch._C._autograd._get_sequence_nr``, a pybind11 binding) and ``torch.is_grad_enabled``
_NATIVE = (("libtorch_cpu.so", "_ZN2at15sequence_number4peekEv"),  # uint64_t at::sequence_number::peek()
           ("libc10.so", "_ZN3c108GradMode10is_enabledEv"))  # bool c10::GradMode::is_enabled()


def _native_functions(torch: Any, grad: Any) -> Tuple[int, int]:
    """Addresses of the C++ functions behind autograd's counter reader and grad mode in the
    torch already loaded, for ``_fastpath.mark_torch`` (0 for one not found or not agreeing
    here).

    Each is checked against the Python function it replaces before it is used: the counter
    must read what ``torch._C._autograd._get_sequence_nr`` reads, twice (a torch without that
    function gets neither: its counter reader uses a number up), and grad mode must read
    what ``torch.is_grad_enabled`` reads inside ``torch.no_grad`` and ``torch.enable_grad``.
    """
    seq = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_get_sequence_nr", None)
    if seq is None or not hasattr(torch, "no_grad") or not hasattr(torch, "enable_grad"):
        return 0, 0
    import ctypes

    found = []
    for lib, symbol in _NATIVE:
        try:
            found.append(getattr(ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LAZY), symbol))
        except (OSError, AttributeError):  # not loaded under that name, or not exported
            found.append(None)
    peek, is_enabled = found
    try:
        if peek is not None:
            peek.restype = ctypes.c_uint64
            if not (peek() == seq() and peek() == seq()):
                peek = None
        if is_enabled is not None:
            is_enabled.restype = ctypes.c_bool
            with torch.no_grad():
                off = is_enabled() is False and grad() is False
            with torch.enable_grad():
                on = is_enabled() is True and grad() is True
            if not (off and on):
                is_enabled = None
    except Exception:  # a fake torch (tests) or a binding that changed: keep the Python calls
        return 0, 0
    return (ctypes.cast(peek, ctypes.c_void_p).value or 0 if peek is not None else 0,
            ctypes.cast(is_enabled, ctypes.c_void_p).value or 0 if is_enabled is not None else 0)


if _c is not None:
    _c.mark_setup(_session._local, _autograd, _fastpath, normalize_annotation)


@contextlib.contextmanager
def mark_stream(stream: Any, annotation: Any) -> Iterator[Any]:
    """torch 2.15's ``mark_stream(stream, annotation)``: switch to ``stream`` and annotate
    the kernels captured in the block with ``{"name": annotation, "stream": lane}`` (a dict
    ``annotation`` gets its ``stream`` set the same way).

    Lane ids are handed out from 60 upward, one per stream, stable for the process. For the
    stream that is already current nothing switches and no lane is assigned: the block is a
    ``mark_kernels(annotation)`` (as in torch, the kernels stay where they run). The name
    labels the lane in our ``.pftrace`` (``60 left_projection``); the label is recorded with
    the graph being captured (a later graph that puts kernels on the same lane id does not
    inherit it). Outside a capture it only switches streams. Like ``torch.cuda.stream`` this
    inserts no dependencies: make ``stream`` wait for the work it consumes
    (``stream.wait_stream(...)``) and join it back before the capture ends.
    """
    import torch

    sess = _session.current()
    if sess is None and (torch_native.capturing() or backends.selected_name() == backends.TORCH):
        with torch_native.call("mark_stream", stream, annotation):
            yield stream
        return
    fields = {"name": annotation} if isinstance(annotation, str) else normalize_annotation(annotation)
    if sess is None or not sess.recorder.active:
        with torch.cuda.stream(stream):
            yield stream
        return
    if torch.cuda.current_stream().cuda_stream == stream.cuda_stream:
        with mark_kernels(fields):
            yield stream
        return
    fields.pop("stream", None)  # the stream's own lane, as torch's sets it
    name = fields.get("name")
    label = name if isinstance(name, str) and name else None
    # the lane scope lists the graph before the switch; the inner scope adds the fields
    with _session.lane_scope(("stream", int(stream.cuda_stream)), label, REGISTRY):
        with mark_kernels(fields):
            with torch.cuda.stream(stream):
                yield stream
