"""``mark_kernels(..., backward=True)``: carry a forward scope over to its backward kernels.

While the scope is open, every tensor an op returns has its ``grad_fn`` hooked: a
pre-hook opens a scope (the forward scope's fields plus ``autograd_phase: "backward"``)
in whatever capture is running when the backward executes, the post-hook closes it.
Outside a capture the hooks do nothing. The hook logic is torch-free
(:class:`BackwardTagger`); only :func:`torch_mode` touches torch.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import session as _session

PHASE_KEY = "autograd_phase"
BACKWARD = "backward"


def _flatten(obj: Any, out: List[Any], depth: int = 0) -> List[Any]:
    if depth > 4:
        return out
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _flatten(o, out, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flatten(o, out, depth + 1)
    else:
        out.append(obj)
    return out


class BackwardTagger:
    """Hooks autograd nodes created in a scope so their backward work is annotated."""

    def __init__(self, fields: Mapping[str, Any],
                 current: Callable[[], Optional[_session.CaptureSession]] = _session.current,
                 lane_label: Optional[str] = None):
        self.fields = {**dict(fields), PHASE_KEY: BACKWARD}
        #: the forward capture's label of ``fields["stream"]`` (mark_stream): lane labels are
        #: per graph, so a backward captured in another graph records it there too
        self.lane_label = lane_label
        self._current = current
        self._token = object()  # marks nodes this tagger hooked (in the node's own metadata)
        self._seen: Dict[int, Any] = {}  # fallback for nodes without metadata: id -> node (kept alive)
        self._open: Dict[Any, List[Any]] = {}
        self._lock = threading.Lock()

    def _first_time(self, node: Any) -> bool:
        """True the first time this tagger sees ``node``.

        Not by ``id(node)``: torch hands out a fresh Python wrapper for a C++ autograd node
        whenever the previous one was freed, and a new node's wrapper can reuse a freed one's
        address (likely the cause of H200 run 10 tagging 3 of >= 6 backward kernels). The
        mark lives in the C++ node's ``metadata`` dict, which every wrapper shares.
        """
        meta = getattr(node, "metadata", None)
        with self._lock:
            if isinstance(meta, dict):
                mine = meta.setdefault("_perfetto_graph_ann_taggers", [])
                if any(t is self._token for t in mine):
                    return False
                mine.append(self._token)
                return True
            if id(node) in self._seen:
                return False
            self._seen[id(node)] = node
            return True

    def on_outputs(self, outputs: Any) -> None:
        """Hook the ``grad_fn`` of every tensor in ``outputs`` (once per node)."""
        for t in _flatten(outputs, []):
            node = getattr(t, "grad_fn", None)
            if node is None or type(node).__name__ == "AccumulateGrad" or not self._first_time(node):
                continue
            slot = object()  # pairs this node's pre- and post-hook
            node.register_prehook(self._make_pre(slot))
            node.register_hook(self._make_post(slot))

    def _make_pre(self, nid: Any):
        def pre(grad_outputs):
            sess = self._current()
            if sess is not None and sess.recorder.active:
                if self.lane_label is not None and isinstance(self.fields.get("stream"), int):
                    sess.label_lane(self.fields["stream"], self.lane_label)
                tok = sess.recorder.open(self.fields)
                with self._lock:
                    self._open.setdefault(nid, []).append((sess, tok))
            return None

        return pre

    def _make_post(self, nid: Any):
        def post(grad_inputs, grad_outputs):
            with self._lock:
                stack = self._open.get(nid)
                item = stack.pop() if stack else None
            if item is not None:
                sess, tok = item
                sess.recorder.close(tok)
            return None

        return post


def torch_mode(tagger: BackwardTagger):
    """A ``TorchFunctionMode`` that passes every op's outputs to ``tagger``."""
    from torch.overrides import TorchFunctionMode

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tagger.on_outputs(out)
            return out

    return _Mode()
