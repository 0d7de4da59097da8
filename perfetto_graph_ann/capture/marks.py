"""Scopes while capturing: ``mark_kernels`` and ``mark_stream`` (torch 2.15's signatures).

A scope annotates the graph nodes created while it is open (:mod:`.scopes` records them);
with ``backward=True`` it also carries its fields over to the backward kernels of the
autograd nodes made in it (:mod:`.autograd`). On torch's own backend both calls go to torch.
"""
from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, Dict, Iterator

from . import backends, torch_native
from . import session as _session
from .autograd import PHASE_KEY, BACKWARD, BackwardRegion, BackwardTagger, grad_enabled, in_backward
from .registry import REGISTRY
from .scopes import normalize_annotation


def _backward_tagger(sess: Any, fields: Dict[str, Any]) -> BackwardTagger:
    """The backward scope of a ``mark_kernels`` block whose merged fields are ``fields``."""
    return BackwardTagger(fields, lane_label=sess.lane_label(fields.get("stream")))


class mark_kernels:
    """Annotate every node captured inside the block (any stream that joined the capture).

    torch 2.15's ``mark_kernels(annotation, *, backward=True)``: ``annotation`` is a str
    (``{"name": s}``) or a dict; ``stream`` (an int) is its display lane. Nested scopes
    merge, inner wins per key. A no-op outside ``graph(...)``. ``backward=True`` (the
    default, as in torch): the backward kernels of every autograd node created in the block on
    this thread (composite ops' inner nodes included), when captured, get the same fields plus
    ``autograd_phase: "backward"`` (the innermost block wins; see capture/autograd.py). A block
    re-run inside backward (a checkpoint's recomputation) tags its kernels ``backward`` too. On
    torch's backend the call goes to torch's ``mark_kernels`` with the same arguments.
    Thread-safe; a class rather than a
    generator context manager because it sits on the capture's critical path.
    """

    __slots__ = ("fields", "annotation", "backward", "_sess", "_tok", "_mode", "_native")

    def __init__(self, annotation: Any, *, backward: bool = True):
        # on the capture's critical path: the common str case without a call
        self.fields = {"name": annotation} if type(annotation) is str else normalize_annotation(annotation)
        self.annotation, self.backward = annotation, backward
        self._sess = self._tok = self._mode = self._native = None

    def __enter__(self) -> "mark_kernels":
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
            if not grad_enabled():  # no_grad / inference_mode: a range that claims nothing
                self._mode = BackwardRegion()
                self._mode.__enter__()
                return self
            # the fields are fixed at entry; the tagger is built only if a node of the block is claimed
            self._mode = BackwardRegion(partial(_backward_tagger, sess, {**sess.recorder.open_fields(), **self.fields}))
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
