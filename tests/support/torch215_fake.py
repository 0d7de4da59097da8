"""A fake of torch 2.15.0's CUDA graph annotation surface, for the hand-off tests.

Built from the torch 2.15.0 release (git d0f2af8b): the names, signatures and what each
records, not its code. What 2.15 has:

- ``torch.cuda.graph_annotations`` (public): ``mark_kernels(annotation, *, backward=True)``,
  ``get_kernel_annotations()``, ``is_available()``, ``clear_kernel_annotations()``,
  ``get_kernel_py_stacks()``, ``dump_kernel_py_stacks(path)``; no ``mark_stream``, no
  ``get_stream_for_pg``, no ``annotate_collective``;
- ``torch.cuda._graph_annotations`` (private): all of those plus
  ``mark_stream(stream, annotation)`` and ``get_stream_for_pg(pg_key)``; lane ids come from
  one counter from 60 (``_get_stream_id`` per ``stream.cuda_stream``, ``get_stream_for_pg``
  per key);
- ``torch.cuda.graph(cuda_graph, pool=None, stream=None, capture_error_mode="global",
  enable_annotations=False, annotation_config=None, check_input_liveness=False)``, which
  turns recording on for its capture only.

Recording: ``mark_kernels`` is a no-op unless recording is on; a str becomes
``{"name": s}``; nested scopes merge, inner wins. ``mark_stream`` with recording off only
switches streams; for the current stream it is ``mark_kernels(annotation)`` (no lane, no
switch); otherwise ``mark_kernels({**annotation, "stream": lane})`` around the switch. The
registry maps ``(graph id << 32) | node id`` to ``[merged annotation]``. ``launch(name)``
plays a kernel captured on the current stream.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import types
from typing import Any, Dict, List, Optional, Tuple


class Stream:
    _handles = itertools.count(0x1000)

    def __init__(self, handle: Optional[int] = None):
        self.cuda_stream = next(self._handles) if handle is None else handle

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(self.cuda_stream)


class CUDAGraph:
    pass


class FakeTorch215:
    """One process's torch 2.15: its modules, its state and a log of the calls made to it."""

    def __init__(self, drop: Tuple[str, ...] = ()):
        self.calls: List[Tuple[str, tuple, dict]] = []
        self.enabled = False
        self.scopes: List[Dict[str, Any]] = []
        self.annotations: Dict[int, Dict[str, Any]] = {}
        self.launched: List[Tuple[str, int, Dict[str, Any]]] = []  # (kernel, stream, annotation)
        self.lane_ids: Dict[Any, int] = {}
        self.graph_id = 0
        self.node_id = 0
        self.streams = [Stream(7)]
        self.graph_kwargs: List[dict] = []
        self._build(drop)

    # -- the modules -------------------------------------------------------------------------
    def _build(self, drop: Tuple[str, ...]) -> None:
        fake = self
        torch = types.ModuleType("torch")
        torch.__version__ = "2.15.0"
        # grad mode, read by our own backend's backward tagging: off (no autograd here)
        torch.is_grad_enabled = lambda: False
        torch._C = types.SimpleNamespace(_autograd=types.SimpleNamespace(_get_sequence_nr=lambda: 0))
        cuda = types.ModuleType("torch.cuda")
        torch.cuda = cuda
        cuda.Stream = Stream
        cuda.CUDAGraph = CUDAGraph
        cuda.is_available = lambda: True
        cuda.current_stream = lambda: fake.streams[-1]
        cuda.current_device = lambda: 0
        cuda.synchronize = lambda: None

        @contextlib.contextmanager
        def stream(s):
            fake.streams.append(s)
            try:
                yield
            finally:
                fake.streams.pop()

        cuda.stream = stream

        class graph:
            def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global",
                         enable_annotations=False, annotation_config=None, check_input_liveness=False):
                fake.graph_kwargs.append({"pool": pool, "stream": stream, "capture_error_mode": capture_error_mode,
                                          "enable_annotations": enable_annotations,
                                          "annotation_config": annotation_config})
                self.enable = enable_annotations

            def __enter__(self):
                fake.graph_id += 1
                fake.node_id = 0
                fake.enabled = self.enable
                return None

            def __exit__(self, *exc):
                fake.enabled = False
                fake.scopes.clear()
                return False

        cuda.graph = graph

        def mark_kernels(annotation, *, backward=True):
            fake.calls.append(("mark_kernels", (annotation,), {"backward": backward}))
            return fake._mark_kernels(annotation)

        def mark_stream(stream, annotation):
            fake.calls.append(("mark_stream", (stream, annotation), {}))
            return fake._mark_stream(stream, annotation)

        def get_stream_for_pg(pg_key):
            fake.calls.append(("get_stream_for_pg", (pg_key,), {}))
            return fake._lane(pg_key)

        def get_kernel_annotations():
            return types.MappingProxyType({k: [v] for k, v in fake.annotations.items()})

        def is_available():
            return True

        def clear_kernel_annotations():
            fake.annotations.clear()

        def get_kernel_py_stacks():
            return {}

        def dump_kernel_py_stacks(path):
            pass

        public = types.ModuleType("torch.cuda.graph_annotations")
        private = types.ModuleType("torch.cuda._graph_annotations")
        shared = dict(mark_kernels=mark_kernels, get_kernel_annotations=get_kernel_annotations,
                      is_available=is_available, clear_kernel_annotations=clear_kernel_annotations,
                      get_kernel_py_stacks=get_kernel_py_stacks, dump_kernel_py_stacks=dump_kernel_py_stacks)
        for name, fn in shared.items():
            if name not in drop:
                setattr(public, name, fn)
                setattr(private, name, fn)
        for name, fn in (("mark_stream", mark_stream), ("get_stream_for_pg", get_stream_for_pg)):
            if name not in drop:
                setattr(private, name, fn)
        cuda.graph_annotations = public
        cuda._graph_annotations = private
        self.torch, self.public, self.private = torch, public, private
        self.modules = {"torch": torch, "torch.cuda": cuda, "torch.cuda.graph_annotations": public,
                        "torch.cuda._graph_annotations": private}

    def install(self, monkeypatch) -> "FakeTorch215":
        for name, mod in self.modules.items():
            monkeypatch.setitem(sys.modules, name, mod)
        return self

    # -- torch 2.15's recording --------------------------------------------------------------
    def _lane(self, key: Any) -> int:
        if key not in self.lane_ids:
            self.lane_ids[key] = 60 + len(self.lane_ids)
        return self.lane_ids[key]

    @contextlib.contextmanager
    def _mark_kernels(self, annotation):
        if not self.enabled:
            yield
            return
        if isinstance(annotation, str):
            annotation = {"name": annotation}
        enclosing = self.scopes[-1] if self.scopes else {}
        depth = len(self.scopes)
        self.scopes.append({**enclosing, **annotation})
        try:
            yield
        finally:
            del self.scopes[depth:]

    @contextlib.contextmanager
    def _mark_stream(self, stream, annotation):
        if not self.enabled:
            with self.torch.cuda.stream(stream):
                yield
            return
        if stream.cuda_stream == self.streams[-1].cuda_stream:
            with self.private.mark_kernels(annotation):
                yield
            return
        if isinstance(annotation, str):
            annotation = {"name": annotation}
        annotation = {**annotation, "stream": self._lane(stream.cuda_stream)}
        with self.private.mark_kernels(annotation):
            with self.torch.cuda.stream(stream):
                yield

    def launch(self, kernel: str) -> int:
        """A kernel captured on the current stream: its node key (annotated when in a scope)."""
        key = (self.graph_id << 32) | self.node_id
        self.node_id += 1
        ann = dict(self.scopes[-1]) if self.enabled and self.scopes else {}
        if ann:
            self.annotations[key] = ann
        self.launched.append((kernel, self.streams[-1].cuda_stream, ann))
        return key

    def calls_to(self, name: str) -> List[Tuple[tuple, dict]]:
        return [(a, k) for n, a, k in self.calls if n == name]


def fake_distributed(fake: FakeTorch215, monkeypatch) -> types.ModuleType:
    """``torch.distributed`` with a default group and an ``all_reduce`` that launches one kernel."""
    dist = types.ModuleType("torch.distributed")
    c10d = types.ModuleType("torch.distributed.distributed_c10d")

    def all_reduce(tensor, op=None, group=None, async_op=False):
        fake.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL")

    dist.all_reduce = c10d.all_reduce = all_reduce
    dist.is_available = lambda: True
    dist.is_initialized = lambda: True
    dist.distributed_c10d = c10d
    fake.torch.distributed = dist
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", c10d)
    return dist
